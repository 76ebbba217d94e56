//! Pure: what of an object leaves the cluster. One allow-list projection per kind, built from the
//! object's JSON; anything not named here is never read into a payload (no Secret, no credential
//! field, no `data` map, no `managedFields`, no annotation).
//!
//! The `contentHash` is the SHA-256 of the canonical JSON of the projection with the volatile fields
//! (`reconciledAt`, every `lastTransitionTime`) removed, so an object whose only change is a
//! timestamp hashes the same and is not sent again.

use serde::Serialize;
use serde_json::{json, Map, Value};
use sha2::{Digest, Sha256};

use crate::source::url::strip_userinfo_and_query;

/// The group/version of every Capstan kind.
pub const CAPSTAN_API_VERSION: &str = "capstan.dev/v1alpha1";
/// Conditions kept per object.
pub const MAX_CONDITIONS: usize = 10;
/// Bytes kept of a condition message (cut by `text::truncate`, the marker inside).
pub const MAX_CONDITION_MESSAGE: usize = 512;
/// Bytes kept of any other free text (health and operation messages, URLs, paths), cut the same way.
pub const MAX_TEXT: usize = 2048;
/// History entries kept (the newest).
pub const MAX_HISTORY: usize = 5;
/// Largest projection of one item (serialized JSON); above it the item is cut down further.
pub const MAX_ITEM_BYTES: usize = 256 * 1024;
/// Entries kept of any other list (generators, namespaces, fetched revisions, targets).
pub const MAX_LIST: usize = 50;
/// Fields dropped before hashing.
const VOLATILE: [&str; 2] = ["reconciledAt", "lastTransitionTime"];

/// The kinds the reporter watches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Kind {
    /// `Application`.
    Application,
    /// `ApplicationSet`.
    ApplicationSet,
    /// `Repository`.
    Repository,
    /// `Cluster`.
    Cluster,
    /// `PolicySet`.
    PolicySet,
    /// A core/v1 `Event` about one of the kinds above.
    Event,
}

impl Kind {
    /// The five Capstan kinds (Events excluded), in heartbeat `counts` order.
    pub const CAPSTAN: [Kind; 5] = [
        Kind::Application,
        Kind::ApplicationSet,
        Kind::Repository,
        Kind::Cluster,
        Kind::PolicySet,
    ];

    /// The Kubernetes kind name (also the metrics label).
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Application => "Application",
            Kind::ApplicationSet => "ApplicationSet",
            Kind::Repository => "Repository",
            Kind::Cluster => "Cluster",
            Kind::PolicySet => "PolicySet",
            Kind::Event => "Event",
        }
    }

    /// The lowercase plural of the API path.
    pub fn plural(self) -> &'static str {
        match self {
            Kind::Application => "applications",
            Kind::ApplicationSet => "applicationsets",
            Kind::Repository => "repositories",
            Kind::Cluster => "clusters",
            Kind::PolicySet => "policysets",
            Kind::Event => "events",
        }
    }

    /// The kind named `s`, if the reporter watches it.
    pub fn parse(s: &str) -> Option<Kind> {
        Kind::CAPSTAN.into_iter().chain([Kind::Event]).find(|k| k.as_str() == s)
    }
}

/// `ref` of an item: which object.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjRef {
    /// `capstan.dev/v1alpha1`, or `v1` for an Event.
    pub api_version: String,
    /// The kind.
    pub kind: String,
    /// The namespace.
    pub namespace: String,
    /// The name.
    pub name: String,
    /// The uid (the key of everything the reporter keeps).
    pub uid: String,
}

/// The projection of one object, as kept in the reporter's cache and sent in an item.
#[derive(Clone, Debug, PartialEq)]
pub struct Projected {
    /// The kind.
    pub kind: Kind,
    /// The object.
    pub obj_ref: ObjRef,
    /// `metadata.resourceVersion` (opaque).
    pub resource_version: String,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// `sha256:<hex>` of the projection without volatile fields.
    pub content_hash: String,
    /// The short summary (`sync`, `health`, `revision`, `operationPhase` for an Application; `ready` otherwise).
    pub summary: Value,
    /// The allow-listed projection.
    pub status: Value,
    /// Whether something was cut to fit a budget.
    pub truncated: bool,
}

/// Why an object cannot be projected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProjectError {
    /// The object has no uid (never true of an object read from the API).
    #[error("object has no metadata.uid")]
    NoUid,
    /// An Event about something that is not a Capstan kind.
    #[error("event is not about a capstan.dev object")]
    NotCapstan,
}

/// Text budget: cuts strings and lists, remembering that it did.
#[derive(Default)]
struct Budget {
    truncated: bool,
}

impl Budget {
    fn text(&mut self, v: Option<&Value>, max: usize) -> Value {
        match v.and_then(Value::as_str) {
            Some(s) if s.len() > max => {
                self.truncated = true;
                Value::String(crate::text::truncate(s, max))
            }
            Some(s) => Value::String(s.to_string()),
            None => Value::Null,
        }
    }

    fn url(&mut self, v: Option<&Value>) -> Value {
        match self.text(v, MAX_TEXT) {
            Value::String(s) => Value::String(strip_userinfo_and_query(&s)),
            other => other,
        }
    }

    /// Strings of a list, at most [`MAX_LIST`].
    fn strings(&mut self, v: Option<&Value>) -> Value {
        let items = v.and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default();
        if items.len() > MAX_LIST {
            self.truncated = true;
        }
        Value::Array(items.iter().take(MAX_LIST).map(|s| self.text(Some(s), 253)).collect())
    }

    fn conditions(&mut self, status: &Value, message_max: usize, keep: usize) -> Value {
        let all = status["conditions"].as_array().map(Vec::as_slice).unwrap_or_default();
        if all.len() > keep {
            self.truncated = true;
        }
        let list = all
            .iter()
            .take(keep)
            .map(|c| {
                json!({
                    "type": self.text(c.get("type"), 253),
                    "status": self.text(c.get("status"), 16),
                    "reason": self.text(c.get("reason"), 253),
                    "message": self.text(c.get("message"), message_max),
                    "lastTransitionTime": self.text(c.get("lastTransitionTime"), 64),
                })
            })
            .collect();
        Value::Array(list)
    }
}

/// The `status` of a condition `type_`, or `Unknown`.
fn condition_status(status: &Value, type_: &str) -> String {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("Unknown")
        .chars()
        .take(16)
        .collect()
}

fn s(v: &Value) -> Value {
    match v {
        Value::String(_) | Value::Bool(_) | Value::Number(_) => v.clone(),
        _ => Value::Null,
    }
}

/// Projects `obj` (a Capstan object or an Event, as JSON) of `kind`.
pub fn project(kind: Kind, obj: &Value) -> Result<Projected, ProjectError> {
    project_with_budget(kind, obj, MAX_CONDITION_MESSAGE, MAX_CONDITIONS)
}

fn project_with_budget(
    kind: Kind,
    obj: &Value,
    message_max: usize,
    keep_conditions: usize,
) -> Result<Projected, ProjectError> {
    let meta = &obj["metadata"];
    let uid = meta["uid"]
        .as_str()
        .filter(|u| !u.is_empty())
        .ok_or(ProjectError::NoUid)?;
    if kind == Kind::Event && !is_capstan_event(obj) {
        return Err(ProjectError::NotCapstan);
    }
    let mut budget = Budget::default();
    let (summary, status) = match kind {
        Kind::Application => application(obj, &mut budget, message_max, keep_conditions),
        Kind::ApplicationSet => application_set(obj, &mut budget, message_max, keep_conditions),
        Kind::Repository => repository(obj, &mut budget, message_max, keep_conditions),
        Kind::Cluster => cluster(obj, &mut budget, message_max, keep_conditions),
        Kind::PolicySet => policy_set(obj, &mut budget, message_max, keep_conditions),
        Kind::Event => event(obj, &mut budget, message_max),
    };
    let obj_ref = ObjRef {
        api_version: if kind == Kind::Event { "v1" } else { CAPSTAN_API_VERSION }.to_string(),
        kind: kind.as_str().to_string(),
        namespace: meta["namespace"].as_str().unwrap_or_default().to_string(),
        name: meta["name"].as_str().unwrap_or_default().to_string(),
        uid: uid.to_string(),
    };
    let content_hash = content_hash(&status, &summary);
    Ok(Projected {
        kind,
        obj_ref,
        resource_version: meta["resourceVersion"].as_str().unwrap_or_default().to_string(),
        generation: meta["generation"].as_i64(),
        content_hash,
        summary,
        status,
        truncated: budget.truncated,
    })
    .map(|p| fit(kind, obj, p))
}

/// Cuts an item whose projection is over [`MAX_ITEM_BYTES`] down (shorter messages, fewer
/// conditions), marking it truncated; a poison item never blocks a batch.
fn fit(kind: Kind, obj: &Value, p: Projected) -> Projected {
    if json_len(&p.status) <= MAX_ITEM_BYTES {
        return p;
    }
    let mut smaller = project_with_budget(kind, obj, 64, 3).unwrap_or_else(|_| p.clone());
    if json_len(&smaller.status) > MAX_ITEM_BYTES {
        smaller.status = json!({"cut": true});
        smaller.content_hash = content_hash(&smaller.status, &smaller.summary);
    }
    smaller.truncated = true;
    smaller
}

/// Serialized length of `v` in bytes.
pub fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map(|b| b.len()).unwrap_or(usize::MAX)
}

/// Whether an Event's `involvedObject` is a Capstan kind.
pub fn is_capstan_event(obj: &Value) -> bool {
    let involved = &obj["involvedObject"];
    involved["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("capstan.dev/"))
        && involved["kind"]
            .as_str()
            .and_then(Kind::parse)
            .is_some_and(|k| k != Kind::Event)
}

/// `sha256:<hex>` of the canonical JSON (sorted keys: serde_json's map is ordered) of `status` and
/// `summary` without the volatile fields.
pub fn content_hash(status: &Value, summary: &Value) -> String {
    let mut stable = json!({"status": status, "summary": summary});
    strip_volatile(&mut stable);
    let bytes = serde_json::to_vec(&stable).unwrap_or_default();
    format!("sha256:{}", hex::encode(Sha256::digest(&bytes)))
}

fn strip_volatile(v: &mut Value) {
    match v {
        Value::Object(map) => {
            for key in VOLATILE {
                map.remove(key);
            }
            map.values_mut().for_each(strip_volatile);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

fn application(obj: &Value, b: &mut Budget, message_max: usize, keep: usize) -> (Value, Value) {
    let (spec, st) = (&obj["spec"], &obj["status"]);
    let src = &spec["source"];
    let dest = &spec["destination"];
    let automated = &spec["syncPolicy"]["automated"];
    let op = &st["operationState"];
    let mut by_sync = Map::new();
    let mut by_health = Map::new();
    for r in st["resources"].as_array().map(Vec::as_slice).unwrap_or_default() {
        let sync = r["status"].as_str().unwrap_or("Unknown");
        let health = r["health"]["status"].as_str().unwrap_or("None");
        count(&mut by_sync, sync);
        count(&mut by_health, health);
    }
    let history = st["history"].as_array().map(Vec::as_slice).unwrap_or_default();
    let recent: Vec<Value> = history
        .iter()
        .skip(history.len().saturating_sub(MAX_HISTORY))
        .map(|h| json!({"id": s(&h["id"]), "revision": b.text(h.get("revision"), 256)}))
        .collect();
    let sync = b.text(st["sync"].get("status"), 32);
    let health = b.text(st["health"].get("status"), 32);
    let revision = b.text(st["sync"].get("revision"), 256);
    let status = json!({
        "project": b.text(spec.get("project"), 253),
        "source": {
            "repoURL": b.url(src.get("repoURL")),
            "path": b.text(src.get("path"), MAX_TEXT),
            "targetRevision": b.text(src.get("targetRevision"), 256),
            "chart": b.text(src.get("chart"), 253),
        },
        "destination": {
            "server": b.url(dest.get("server")),
            "name": b.text(dest.get("name"), 253),
            "namespace": b.text(dest.get("namespace"), 253),
        },
        "automated": automated.is_object(),
        "prune": automated["prune"].as_bool().unwrap_or(false),
        "selfHeal": automated["selfHeal"].as_bool().unwrap_or(false),
        "sync": {"status": sync, "revision": revision},
        "health": {"status": health, "message": b.text(st["health"].get("message"), MAX_TEXT)},
        "operation": {
            "phase": b.text(op.get("phase"), 32),
            "message": b.text(op.get("message"), MAX_TEXT.min(message_max.max(64) * 4)),
            "startedAt": b.text(op.get("startedAt"), 64),
            "finishedAt": b.text(op.get("finishedAt"), 64),
        },
        "conditions": b.conditions(st, message_max, keep),
        "resources": {"bySync": by_sync, "byHealth": by_health},
        "history": recent,
        "reconciledAt": b.text(st.get("reconciledAt"), 64),
    });
    let summary =
        json!({"sync": sync, "health": health, "revision": revision, "operationPhase": b.text(op.get("phase"), 32)});
    (summary, status)
}

fn count(map: &mut Map<String, Value>, key: &str) {
    let key: String = key.chars().take(32).collect();
    let n = map.get(&key).and_then(Value::as_u64).unwrap_or(0) + 1;
    map.insert(key, json!(n));
}

fn ready_summary(st: &Value) -> Value {
    json!({"ready": condition_status(st, "Ready")})
}

fn application_set(obj: &Value, b: &mut Budget, message_max: usize, keep: usize) -> (Value, Value) {
    let st = &obj["status"];
    let generators = obj["spec"]["generators"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if generators.len() > MAX_LIST {
        b.truncated = true;
    }
    // Only the generator kinds (the keys): their contents may name repositories or clusters.
    let kinds: Vec<Value> = generators
        .iter()
        .take(MAX_LIST)
        .filter_map(|g| g.as_object())
        .flat_map(|g| g.keys().filter(|k| *k != "selector").take(1).cloned())
        .map(Value::String)
        .collect();
    let owned = st["resourcesCount"]
        .as_i64()
        .or_else(|| st["resources"].as_array().map(|r| r.len() as i64));
    let status = json!({
        "generators": kinds,
        "applications": owned,
        "conditions": b.conditions(st, message_max, keep),
    });
    (ready_summary(st), status)
}

fn repository(obj: &Value, b: &mut Budget, message_max: usize, keep: usize) -> (Value, Value) {
    let st = &obj["status"];
    let fetched = st["lastFetchedRevision"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if fetched.len() > MAX_LIST {
        b.truncated = true;
    }
    let revisions: Vec<Value> = fetched
        .iter()
        .take(MAX_LIST)
        .map(|r| json!({"ref": b.text(r.get("ref"), 256), "revision": b.text(r.get("revision"), 256)}))
        .collect();
    let status = json!({
        "url": b.url(obj["spec"].get("url")),
        "ready": condition_status(st, "Ready"),
        "lastFetchedRevisions": revisions,
        "conditions": b.conditions(st, message_max, keep),
    });
    (ready_summary(st), status)
}

fn cluster(obj: &Value, b: &mut Budget, message_max: usize, keep: usize) -> (Value, Value) {
    let st = &obj["status"];
    let status = json!({
        "server": b.url(obj["spec"].get("server")),
        "name": b.text(obj["metadata"].get("name"), 253),
        "namespaces": b.strings(obj["spec"].get("namespaces")),
        "ready": condition_status(st, "Ready"),
        "serverVersion": b.text(st.get("serverVersion"), 64),
        "conditions": b.conditions(st, message_max, keep),
    });
    (ready_summary(st), status)
}

fn policy_set(obj: &Value, b: &mut Budget, message_max: usize, keep: usize) -> (Value, Value) {
    let st = &obj["status"];
    let status = json!({
        "enforcement": b.text(obj["spec"].get("enforcement"), 16),
        "targets": b.strings(obj["spec"].get("targets")),
        "compiledPolicies": s(&st["compiledPolicies"]),
        "ready": condition_status(st, "Ready"),
        "conditions": b.conditions(st, message_max, keep),
    });
    (ready_summary(st), status)
}

fn event(obj: &Value, b: &mut Budget, message_max: usize) -> (Value, Value) {
    let involved = &obj["involvedObject"];
    let status = json!({
        "reason": b.text(obj.get("reason"), 128),
        "type": b.text(obj.get("type"), 16),
        "message": b.text(obj.get("message"), message_max.max(64) * 2),
        "count": s(&obj["count"]),
        "firstTimestamp": b.text(obj.get("firstTimestamp"), 64),
        "lastTimestamp": b.text(obj.get("lastTimestamp").or(obj.get("eventTime")), 64),
        "involvedObject": {
            "apiVersion": b.text(involved.get("apiVersion"), 64),
            "kind": b.text(involved.get("kind"), 64),
            "namespace": b.text(involved.get("namespace"), 253),
            "name": b.text(involved.get("name"), 253),
            "uid": b.text(involved.get("uid"), 64),
        },
    });
    (Value::Null, status)
}

#[cfg(test)]
#[path = "project_tests.rs"]
mod tests;
