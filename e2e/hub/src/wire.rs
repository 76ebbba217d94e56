//! The request bodies of `capstan.reporter/v1` (docs/reporter-protocol.md) and their strict validation.
//!
//! Everything here is pure: bytes or JSON in, a typed value or a [`WireError`] out. Unknown fields are refused
//! (a misspelt field in a sender is a bug the hub must surface, not ignore). A whole-request problem is a
//! `400` (not JSON, wrong encoding or header) or a `422` (JSON that breaks the schema); an item-level problem
//! in a batch only marks that item (see [`parse_item`]), so one bad item never blocks the rest.

use serde::Deserialize;
use serde_json::{Map, Value};

/// `schemaVersion` of every batch.
pub const SCHEMA_VERSION: &str = "capstan.reporter/v1";
/// The kinds a batch may carry as objects (`upsert`/`delete`) and that an Event may be about.
pub const KINDS: [&str; 5] = ["Application", "ApplicationSet", "Repository", "Cluster", "PolicySet"];
/// The apiVersion of those kinds.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// At most this many items per batch (more is a `413`: the sender halves its batches).
pub const MAX_ITEMS: usize = 200;
/// At most this many bytes of uncompressed JSON per batch (more is a `413`).
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// At most this many bytes of compact JSON per item projection (`status`); more is a `too_large` item.
pub const MAX_PROJECTION_BYTES: usize = 256 * 1024;
/// At most this many entries per digest chunk.
pub const MAX_DIGEST_ENTRIES: usize = 1000;
/// Longest task result message kept (longer ones are cut).
pub const MAX_RESULT_MESSAGE: usize = 4096;

/// A request the hub refuses as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct WireError {
    /// 400, 413 or 422.
    pub status: u16,
    pub message: String,
}

impl WireError {
    pub fn bad_request(message: impl Into<String>) -> Self {
        Self {
            status: 400,
            message: message.into(),
        }
    }
    pub fn unprocessable(message: impl Into<String>) -> Self {
        Self {
            status: 422,
            message: message.into(),
        }
    }
    pub fn too_large(message: impl Into<String>) -> Self {
        Self {
            status: 413,
            message: message.into(),
        }
    }
}

/// Parses JSON into `T`: a syntax error is a `400`, a schema error a `422`, both with serde's message.
pub fn parse_json<T: serde::de::DeserializeOwned>(what: &str, body: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(body).map_err(|e| match e.classify() {
        serde_json::error::Category::Data => WireError::unprocessable(format!("{what}: {e}")),
        _ => WireError::bad_request(format!("{what} is not valid JSON: {e}")),
    })
}

// ------------------------------------------------------------------------------------------------------------
// POST /reports

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Delta,
    Snapshot,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct SnapshotInfo {
    pub id: String,
    pub part: u64,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub total_objects: Option<u64>,
    #[serde(default)]
    pub confirmed_empty: bool,
}

/// A batch envelope; its items stay raw JSON until [`parse_item`] so a bad item is only that item's problem.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Batch {
    pub schema_version: String,
    pub agent_id: String,
    pub cluster_name: String,
    pub reporter_version: String,
    pub instance: String,
    pub epoch: u64,
    pub batch_id: String,
    pub sent_at: String,
    pub mode: Mode,
    pub snapshot: Option<SnapshotInfo>,
    pub items: Vec<Value>,
}

/// Parses and checks a batch envelope for agent `agent` (from the URL).
pub fn parse_batch(agent: &str, body: &[u8]) -> Result<Batch, WireError> {
    if body.len() > MAX_BATCH_BYTES {
        return Err(WireError::too_large(format!(
            "the batch is {} bytes of JSON; at most {MAX_BATCH_BYTES} are allowed",
            body.len()
        )));
    }
    let batch: Batch = parse_json("the batch", body)?;
    let bad = |m: String| Err(WireError::unprocessable(m));
    if batch.schema_version != SCHEMA_VERSION {
        return bad(format!(
            "schemaVersion must be {SCHEMA_VERSION:?}, not {:?}",
            batch.schema_version
        ));
    }
    if batch.agent_id != agent {
        return bad(format!(
            "agentId {:?} does not match the URL's agent {agent:?}",
            batch.agent_id
        ));
    }
    non_empty("clusterName", &batch.cluster_name)?;
    non_empty("reporterVersion", &batch.reporter_version)?;
    non_empty("instance", &batch.instance)?;
    non_empty("batchId", &batch.batch_id)?;
    epoch_at_least_one(batch.epoch)?;
    rfc3339("sentAt", &batch.sent_at)?;
    check_snapshot(batch.mode, batch.snapshot.as_ref())?;
    if batch.items.len() > MAX_ITEMS {
        return Err(WireError::too_large(format!(
            "the batch has {} items; at most {MAX_ITEMS} are allowed",
            batch.items.len()
        )));
    }
    Ok(batch)
}

fn check_snapshot(mode: Mode, snapshot: Option<&SnapshotInfo>) -> Result<(), WireError> {
    match (mode, snapshot) {
        (Mode::Delta, None) => Ok(()),
        (Mode::Delta, Some(_)) => Err(WireError::unprocessable(
            "a delta batch must have snapshot null or absent",
        )),
        (Mode::Snapshot, None) => Err(WireError::unprocessable("a snapshot batch needs a snapshot object")),
        (Mode::Snapshot, Some(s)) => {
            non_empty("snapshot.id", &s.id)?;
            if s.part == 0 {
                return Err(WireError::unprocessable("snapshot.part counts from 1"));
            }
            if s.is_final && s.total_objects.is_none() {
                return Err(WireError::unprocessable("the final snapshot part needs totalObjects"));
            }
            Ok(())
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    Upsert,
    Delete,
    Event,
}

impl Op {
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Upsert => "upsert",
            Op::Delete => "delete",
            Op::Event => "event",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ObjectRef {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

/// One item of a batch.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Item {
    pub op: Op,
    pub seq: u64,
    #[serde(rename = "ref")]
    pub object: ObjectRef,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub content_hash: Option<String>,
    pub observed_at: String,
    pub summary: Option<Map<String, Value>>,
    pub status: Option<Value>,
    #[serde(default)]
    pub truncated: bool,
}

/// Why an item was not stored; `code` goes into the answer's `results`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemProblem {
    pub code: &'static str,
    pub retryable: bool,
    pub message: String,
}

impl ItemProblem {
    fn invalid(message: impl Into<String>) -> Self {
        Self {
            code: "invalid",
            retryable: false,
            message: message.into(),
        }
    }
}

/// Parses and checks one item.
pub fn parse_item(raw: &Value) -> Result<Item, ItemProblem> {
    let item: Item = Item::deserialize(raw).map_err(|e| ItemProblem::invalid(e.to_string()))?;
    let field = |r: Result<(), WireError>| r.map_err(|e| ItemProblem::invalid(e.message));
    if item.seq == 0 {
        return Err(ItemProblem::invalid("seq counts from 1"));
    }
    let r = &item.object;
    if !item.deletes_by_uid() {
        for (name, value) in [
            ("ref.apiVersion", &r.api_version),
            ("ref.kind", &r.kind),
            ("ref.name", &r.name),
        ] {
            field(non_empty(name, value))?;
        }
        field(non_empty("ref.namespace", &r.namespace))?;
    }
    field(non_empty("ref.uid", &r.uid))?;
    field(rfc3339("observedAt", &item.observed_at))?;
    match item.op {
        Op::Upsert => check_upsert(&item)?,
        Op::Delete if item.deletes_by_uid() => check_tombstone(&item)?,
        Op::Delete => check_delete(&item)?,
        Op::Event => check_event(&item)?,
    }
    let projection = item.status.as_ref().map(|s| s.to_string().len()).unwrap_or(0);
    if projection > MAX_PROJECTION_BYTES {
        return Err(ItemProblem {
            code: "too_large",
            retryable: false,
            message: format!(
                "the projection is {projection} bytes; at most {MAX_PROJECTION_BYTES} (cut it down and set truncated)"
            ),
        });
    }
    Ok(item)
}

fn check_object_kind(item: &Item) -> Result<(), ItemProblem> {
    if !KINDS.contains(&item.object.kind.as_str()) {
        return Err(ItemProblem::invalid(format!(
            "ref.kind {:?} is not one of {KINDS:?}",
            item.object.kind
        )));
    }
    if item.object.api_version != API_VERSION {
        return Err(ItemProblem::invalid(format!(
            "ref.apiVersion must be {API_VERSION:?}, not {:?}",
            item.object.api_version
        )));
    }
    Ok(())
}

fn check_upsert(item: &Item) -> Result<(), ItemProblem> {
    check_object_kind(item)?;
    content_hash(item.content_hash.as_deref())?;
    if !matches!(item.status, Some(Value::Object(_))) {
        return Err(ItemProblem::invalid("an upsert needs status: an object"));
    }
    if let Some(summary) = &item.summary {
        for key in ["sync", "health", "revision", "operationPhase"] {
            if !matches!(summary.get(key), None | Some(Value::Null) | Some(Value::String(_))) {
                return Err(ItemProblem::invalid(format!("summary.{key} must be a string or null")));
            }
        }
    }
    Ok(())
}

impl Item {
    /// A delete that answers a digest `need` for a uid the sender no longer knows: only `ref.uid` is set
    /// (docs/reporter-protocol.md); the receiver deletes by uid and keeps the identity it holds.
    pub fn deletes_by_uid(&self) -> bool {
        let r = &self.object;
        self.op == Op::Delete
            && r.api_version.is_empty()
            && r.kind.is_empty()
            && r.namespace.is_empty()
            && r.name.is_empty()
    }
}

fn check_delete(item: &Item) -> Result<(), ItemProblem> {
    check_object_kind(item)?;
    check_tombstone(item)
}

fn check_tombstone(item: &Item) -> Result<(), ItemProblem> {
    if item.content_hash.is_some() || item.summary.is_some() || !matches!(item.status, None | Some(Value::Null)) {
        return Err(ItemProblem::invalid(
            "a delete has contentHash, summary and status null",
        ));
    }
    Ok(())
}

fn check_event(item: &Item) -> Result<(), ItemProblem> {
    if item.object.kind != "Event" {
        return Err(ItemProblem::invalid(format!(
            "an event item's ref is the Event itself (kind \"Event\"), not {:?}",
            item.object.kind
        )));
    }
    // Events are never listed in a digest, so their hash is optional; a present one must be well-formed.
    if item.content_hash.is_some() {
        content_hash(item.content_hash.as_deref())?;
    }
    let about = item
        .status
        .as_ref()
        .and_then(|s| s.get("involvedObject"))
        .and_then(|o| o.get("kind"))
        .and_then(Value::as_str);
    match about {
        Some(kind) if KINDS.contains(&kind) => Ok(()),
        Some(kind) => Err(ItemProblem::invalid(format!(
            "an event about a {kind:?} is not reported"
        ))),
        None => Err(ItemProblem::invalid("an event needs status.involvedObject.kind")),
    }
}

fn content_hash(hash: Option<&str>) -> Result<(), ItemProblem> {
    let ok = hash
        .and_then(|h| h.strip_prefix("sha256:"))
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
    if ok {
        Ok(())
    } else {
        Err(ItemProblem::invalid(format!(
            "contentHash must be \"sha256:<64 lowercase hex>\", not {hash:?}"
        )))
    }
}

// ------------------------------------------------------------------------------------------------------------
// POST /digest, POST /heartbeat, POST /tasks/{id}/result

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DigestEntry {
    pub uid: String,
    pub kind: String,
    pub content_hash: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Digest {
    pub epoch: u64,
    pub digest_id: String,
    pub part: u64,
    #[serde(rename = "final")]
    pub is_final: bool,
    pub items: Vec<DigestEntry>,
}

pub fn parse_digest(body: &[u8]) -> Result<Digest, WireError> {
    let digest: Digest = parse_json("the digest chunk", body)?;
    epoch_at_least_one(digest.epoch)?;
    non_empty("digestId", &digest.digest_id)?;
    if digest.part == 0 {
        return Err(WireError::unprocessable("part counts from 1"));
    }
    if digest.items.len() > MAX_DIGEST_ENTRIES {
        return Err(WireError::unprocessable(format!(
            "a digest chunk has at most {MAX_DIGEST_ENTRIES} entries, not {}",
            digest.items.len()
        )));
    }
    for (i, entry) in digest.items.iter().enumerate() {
        non_empty(&format!("items[{i}].uid"), &entry.uid)?;
        non_empty(&format!("items[{i}].kind"), &entry.kind)?;
        content_hash(Some(&entry.content_hash))
            .map_err(|p| WireError::unprocessable(format!("items[{i}]: {}", p.message)))?;
    }
    Ok(digest)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AuthState {
    Ok,
    Failed,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Heartbeat {
    pub instance: String,
    pub leader: bool,
    pub epoch: u64,
    pub reporter_version: String,
    pub kubernetes_version: Option<String>,
    pub counts: std::collections::BTreeMap<String, u64>,
    pub dirty: u64,
    pub oldest_dirty_age_seconds: Option<f64>,
    pub last_ack_at: Option<String>,
    pub last_error: Option<String>,
    pub auth: AuthState,
}

pub fn parse_heartbeat(body: &[u8]) -> Result<Heartbeat, WireError> {
    let hb: Heartbeat = parse_json("the heartbeat", body)?;
    non_empty("instance", &hb.instance)?;
    non_empty("reporterVersion", &hb.reporter_version)?;
    epoch_at_least_one(hb.epoch)?;
    if hb.oldest_dirty_age_seconds.is_some_and(|a| !a.is_finite() || a < 0.0) {
        return Err(WireError::unprocessable("oldestDirtyAgeSeconds must be a number >= 0"));
    }
    if let Some(at) = &hb.last_ack_at {
        rfc3339("lastAckAt", at)?;
    }
    Ok(hb)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskState {
    Succeeded,
    Failed,
    Rejected,
}

impl TaskState {
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
            TaskState::Rejected => "rejected",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskResult {
    pub state: TaskState,
    #[serde(default)]
    pub message: String,
}

pub fn parse_task_result(body: &[u8]) -> Result<TaskResult, WireError> {
    let mut result: TaskResult = parse_json("the task result", body)?;
    if result.message.len() > MAX_RESULT_MESSAGE {
        let mut cut = MAX_RESULT_MESSAGE;
        while !result.message.is_char_boundary(cut) {
            cut -= 1;
        }
        result.message.truncate(cut);
    }
    Ok(result)
}

// ------------------------------------------------------------------------------------------------------------
// POST /api/tasks (the hub's own surface)

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TaskTarget {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NewTask {
    pub agent_id: String,
    #[serde(rename = "type")]
    pub kind: String,
    pub target: TaskTarget,
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// Checks the type of one task argument.
type ValueCheck = fn(&Value) -> bool;

/// Parses a task to enqueue; `args` are checked against its type (docs/reporter-protocol.md "Tasks").
pub fn parse_new_task(body: &[u8]) -> Result<NewTask, WireError> {
    let task: NewTask = parse_json("the task", body)?;
    non_empty("agentId", &task.agent_id)?;
    non_empty("target.namespace", &task.target.namespace)?;
    non_empty("target.name", &task.target.name)?;
    let allowed: &[(&str, ValueCheck)] = match task.kind.as_str() {
        "sync" => &[
            ("revision", Value::is_string),
            ("prune", Value::is_boolean),
            ("dryRun", Value::is_boolean),
        ],
        "refresh" => &[("hard", Value::is_boolean)],
        "rollback" => &[("id", Value::is_i64)],
        "terminate" => &[],
        other => {
            return Err(WireError::unprocessable(format!(
                "type must be sync, refresh, rollback or terminate, not {other:?}"
            )))
        }
    };
    for (key, value) in &task.args {
        match allowed.iter().find(|(k, _)| k == key) {
            Some((_, ok)) if ok(value) => {}
            Some(_) => {
                return Err(WireError::unprocessable(format!(
                    "args.{key} has the wrong type for {}",
                    task.kind
                )))
            }
            None => {
                return Err(WireError::unprocessable(format!(
                    "a {} task has no argument {key:?}",
                    task.kind
                )))
            }
        }
    }
    if task.kind == "rollback" && !task.args.contains_key("id") {
        return Err(WireError::unprocessable(
            "a rollback task needs args.id (a status.history[].id)",
        ));
    }
    Ok(task)
}

// ------------------------------------------------------------------------------------------------------------
// Field checks

fn non_empty(name: &str, value: &str) -> Result<(), WireError> {
    if value.is_empty() {
        Err(WireError::unprocessable(format!("{name} must not be empty")))
    } else if value.len() > 253 && !name.ends_with("uid") {
        Err(WireError::unprocessable(format!(
            "{name} is longer than 253 characters"
        )))
    } else {
        Ok(())
    }
}

fn epoch_at_least_one(epoch: u64) -> Result<(), WireError> {
    if epoch == 0 {
        Err(WireError::unprocessable("epoch counts from 1"))
    } else {
        Ok(())
    }
}

fn rfc3339(name: &str, value: &str) -> Result<(), WireError> {
    chrono::DateTime::parse_from_rfc3339(value)
        .map(|_| ())
        .map_err(|e| WireError::unprocessable(format!("{name} {value:?} is not an RFC 3339 time: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    pub(crate) fn hash() -> String {
        format!("sha256:{}", "ab".repeat(32))
    }

    fn upsert() -> Value {
        json!({"op": "upsert", "seq": 3,
               "ref": {"apiVersion": API_VERSION, "kind": "Application", "namespace": "a", "name": "web", "uid": "u1"},
               "resourceVersion": "7", "generation": 1, "contentHash": hash(),
               "observedAt": "2026-11-26T10:04:04.900Z",
               "summary": {"sync": "Synced", "health": "Healthy", "revision": "abc"},
               "status": {"x": 1}, "truncated": false})
    }

    fn batch(items: Vec<Value>) -> Value {
        json!({"schemaVersion": SCHEMA_VERSION, "agentId": "a1", "clusterName": "c", "reporterVersion": "0.1.0",
               "instance": "i", "epoch": 1, "batchId": "1-1", "sentAt": "2026-11-26T10:04:05.123Z",
               "mode": "delta", "snapshot": null, "items": items})
    }

    #[test]
    fn a_good_batch_and_item_parse() {
        let b = parse_batch("a1", batch(vec![upsert()]).to_string().as_bytes()).unwrap();
        assert_eq!(b.items.len(), 1);
        let item = parse_item(&b.items[0]).unwrap();
        assert_eq!((item.op, item.seq, item.object.uid.as_str()), (Op::Upsert, 3, "u1"));
    }

    #[test]
    fn a_delete_by_uid_alone_parses_and_only_as_a_delete() {
        let by_uid = json!({"op": "delete", "seq": 4,
            "ref": {"apiVersion": "", "kind": "", "namespace": "", "name": "", "uid": "gone"},
            "resourceVersion": null, "generation": null, "contentHash": null,
            "observedAt": "2026-11-26T10:04:04.900Z", "summary": null, "status": null, "truncated": false});
        let item = parse_item(&by_uid).unwrap();
        assert!(item.deletes_by_uid());
        let mut upsert_by_uid = upsert();
        upsert_by_uid["ref"] = by_uid["ref"].clone();
        assert!(parse_item(&upsert_by_uid).is_err(), "an upsert needs its whole ref");
        let mut half = by_uid.clone();
        half["ref"]["kind"] = json!("Application");
        assert!(parse_item(&half).is_err(), "a partial ref is not a delete by uid");
    }

    #[test]
    fn envelope_errors_are_400_or_422_or_413() {
        assert_eq!(parse_batch("a1", b"{not json").unwrap_err().status, 400);
        let mut wrong_agent = batch(vec![]);
        wrong_agent["agentId"] = json!("other");
        assert_eq!(
            parse_batch("a1", wrong_agent.to_string().as_bytes())
                .unwrap_err()
                .status,
            422
        );
        let mut unknown = batch(vec![]);
        unknown["leaderEpoch"] = json!(3);
        let err = parse_batch("a1", unknown.to_string().as_bytes()).unwrap_err();
        assert_eq!(err.status, 422);
        assert!(err.message.contains("leaderEpoch"), "{}", err.message);
        let mut snap = batch(vec![]);
        snap["mode"] = json!("snapshot");
        snap["snapshot"] = json!({"id": "s", "part": 1, "final": true, "totalObjects": null});
        assert!(parse_batch("a1", snap.to_string().as_bytes())
            .unwrap_err()
            .message
            .contains("totalObjects"));
        let many = batch((0..201).map(|_| upsert()).collect());
        assert_eq!(parse_batch("a1", many.to_string().as_bytes()).unwrap_err().status, 413);
    }

    #[test]
    fn item_problems_name_the_field() {
        let mut bad_hash = upsert();
        bad_hash["contentHash"] = json!("md5:1");
        assert!(parse_item(&bad_hash).unwrap_err().message.contains("contentHash"));
        let mut delete = upsert();
        delete["op"] = json!("delete");
        assert!(parse_item(&delete).is_err(), "a delete carrying a status is invalid");
        delete["contentHash"] = Value::Null;
        delete["summary"] = Value::Null;
        delete["status"] = Value::Null;
        assert!(parse_item(&delete).is_ok());
        let mut secret = upsert();
        secret["ref"]["kind"] = json!("Secret");
        assert!(parse_item(&secret).unwrap_err().message.contains("Secret"));
        let mut huge = upsert();
        huge["status"] = json!({"m": "x".repeat(MAX_PROJECTION_BYTES)});
        assert_eq!(parse_item(&huge).unwrap_err().code, "too_large");
        let mut event = upsert();
        event["op"] = json!("event");
        event["ref"]["kind"] = json!("Event");
        event["ref"]["apiVersion"] = json!("v1");
        event["status"] = json!({"involvedObject": {"kind": "Application", "name": "web"}, "reason": "Synced"});
        assert!(parse_item(&event).is_ok());
        event["contentHash"] = Value::Null;
        assert!(parse_item(&event).is_ok(), "an event's hash is optional");
        event["status"] = json!({"reason": "Synced"});
        assert!(parse_item(&event).unwrap_err().message.contains("involvedObject"));
    }

    #[test]
    fn digest_heartbeat_and_task_checks() {
        let d = json!({"epoch": 2, "digestId": "2-1", "part": 1, "final": true,
                       "items": [{"uid": "u", "kind": "Application", "contentHash": hash()}]});
        assert!(parse_digest(d.to_string().as_bytes()).unwrap().is_final);
        let hb = json!({"instance": "i", "leader": true, "epoch": 1, "reporterVersion": "0.1.0",
                        "kubernetesVersion": "v1.32.0", "counts": {"Application": 1}, "dirty": 0,
                        "oldestDirtyAgeSeconds": 0.0, "lastAckAt": null, "lastError": null, "auth": "ok"});
        assert!(parse_heartbeat(hb.to_string().as_bytes()).is_ok());
        let mut bad = hb.clone();
        bad["auth"] = json!("maybe");
        assert_eq!(parse_heartbeat(bad.to_string().as_bytes()).unwrap_err().status, 422);
        let task = json!({"agentId": "a", "type": "sync", "target": {"namespace": "n", "name": "w"},
                          "args": {"prune": "yes"}});
        assert!(parse_new_task(task.to_string().as_bytes())
            .unwrap_err()
            .message
            .contains("prune"));
        let rollback = json!({"agentId": "a", "type": "rollback", "target": {"namespace": "n", "name": "w"}});
        assert!(parse_new_task(rollback.to_string().as_bytes()).is_err());
        let long = json!({"state": "failed", "message": "é".repeat(MAX_RESULT_MESSAGE)});
        assert!(parse_task_result(long.to_string().as_bytes()).unwrap().message.len() <= MAX_RESULT_MESSAGE);
    }
}
