//! CRD establishment and cleanup. On create/update the CRD's served versions are added to
//! the registry (so discovery, OpenAPI and the REST paths exist) *before* the status reports
//! NamesAccepted/Established. A deleted CRD keeps the `customresourcecleanup` finalizer until all its custom
//! resources are gone; when the CRD object disappears its resources leave the registry and storage.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{json, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::registry::{infos_from_crd, res_key, ResKey};
use crate::server::ops::{self, Sub, FINALIZER_CRD_CLEANUP};
use crate::server::Shared;
use crate::store::{Event, EventType, ObjRef};

use super::{delete_background, edit, remove_finalizer};

const MANAGER: &str = "apiextensions-controller";
const CRD_KEY: &str = "apiextensions.k8s.io/customresourcedefinitions";

#[derive(Default)]
struct State {
    /// Last registered spec per CRD name.
    specs: HashMap<String, Value>,
    /// Storage key → CRD name, for CRDs being deleted.
    terminating: HashMap<ResKey, String>,
}

/// Subscribe, serve the CRDs that already exist (a restart on etcd) before the server takes its first
/// request, then follow changes on a task.
pub fn start(sh: &Arc<Shared>) {
    let mut rx = sh.store.subscribe_controller();
    let mut st = State::default();
    while let Ok(ev) = rx.try_recv() {
        handle(sh, &ev, &mut st);
    }
    tokio::spawn(run(sh.clone(), rx, st));
}

async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>, mut st: State) {
    while let Some(ev) = rx.recv().await {
        handle(&sh, &ev, &mut st);
    }
}

fn storage_key(crd: &Value) -> Option<ResKey> {
    Some(res_key(
        crd.pointer("/spec/group")?.as_str()?,
        crd.pointer("/spec/names/plural")?.as_str()?,
    ))
}

fn handle(sh: &Shared, ev: &Event, st: &mut State) {
    if ev.obj.res.as_ref() != CRD_KEY {
        if ev.kind == EventType::Deleted {
            if let Some(name) = st.terminating.get(&ev.obj.res).cloned() {
                try_finish(sh, &ev.obj.res, &name);
            }
        }
        return;
    }
    let crd = &ev.object;
    let name = ev.obj.name.clone();
    match ev.kind {
        EventType::Deleted => {
            if !st.specs.contains_key(&name) {
                // Never served (its names were refused): its storage key may belong to another resource.
                return;
            }
            st.specs.remove(&name);
            sh.registry.write().set_crd(&name, Vec::new());
            if let Some(key) = storage_key(crd) {
                st.terminating.remove(&key);
                sh.store.drop_resource(&key);
                // No receivers (no open watches) is not an error.
                let _ = sh.signals.resource_dropped.send(key);
            }
        }
        _ if ops::is_deleting(crd) && !st.specs.contains_key(&name) => {
            // Never served: it has no custom resources of its own (its storage key may be another CRD's).
            remove_finalizer(sh, &ev.obj, FINALIZER_CRD_CLEANUP, MANAGER);
        }
        _ if ops::is_deleting(crd) => {
            let Some(key) = storage_key(crd) else { return };
            st.terminating.insert(key.clone(), name.clone());
            set_status(sh, &ev.obj, terminating_status(crd));
            for (r, obj) in cr_objects(sh, &key) {
                if !ops::is_deleting(&obj) {
                    delete_background(sh, &r);
                }
            }
            try_finish(sh, &key, &name);
        }
        _ => reconcile(sh, &ev.obj, crd, st),
    }
    if ev.kind == EventType::Deleted {
        retry_unaccepted(sh, crd, st);
    }
}

/// Register a CRD's resources and report it established, unless its names clash with a resource already served
/// in its group; then NamesAccepted=False and nothing new is served (a CRD established earlier keeps serving
/// the names it had).
fn reconcile(sh: &Shared, r: &ObjRef, crd: &Value, st: &mut State) {
    let name = &r.name;
    if let Some((reason, message)) = names_conflict(sh, name, crd) {
        let established = st.specs.contains_key(name);
        set_status(sh, r, conflict_status(crd, reason, &message, established));
        return;
    }
    if st.specs.get(name) != Some(&crd["spec"]) {
        sh.registry.write().set_crd(name, infos_from_crd(crd));
        st.specs.insert(name.clone(), crd["spec"].clone());
    }
    set_status(sh, r, established_status(crd, &ops::now_secs()));
}

/// After a CRD is deleted, CRDs of its group whose names were refused may now be accepted.
fn retry_unaccepted(sh: &Shared, deleted: &Value, st: &mut State) {
    let group = deleted.pointer("/spec/group").and_then(Value::as_str).unwrap_or("");
    let key: ResKey = Arc::from(CRD_KEY);
    for (r, crd) in cr_objects(sh, &key) {
        let same_group = crd.pointer("/spec/group").and_then(Value::as_str) == Some(group);
        if same_group && !st.specs.contains_key(&r.name) && !ops::is_deleting(&crd) {
            reconcile(sh, &r, &crd, st);
        }
    }
}

/// The first name of a CRD that another served resource of the same group already uses, as the
/// NamingConditionController reports it: (reason, message).
fn names_conflict(sh: &Shared, crd_name: &str, crd: &Value) -> Option<(&'static str, String)> {
    let group = crd.pointer("/spec/group")?.as_str()?;
    let names = accepted_names(crd);
    let text = |k: &str| names[k].as_str().unwrap_or("").to_string();
    let (plural, singular, kind, list_kind) = (text("plural"), text("singular"), text("kind"), text("listKind"));
    let short: Vec<String> = names["shortNames"]
        .as_array()
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let others: Vec<_> = sh
        .registry
        .read()
        .group_resources(group)
        .into_iter()
        .filter(|ri| ri.custom.as_ref().is_none_or(|c| c.crd_name != crd_name))
        .collect();
    let in_use = |n: &str| format!("{n:?} is already in use");
    if others.iter().any(|ri| ri.plural == plural || ri.singular == plural) {
        return Some(("PluralConflict", in_use(&plural)));
    }
    if !singular.is_empty() && others.iter().any(|ri| ri.singular == singular || ri.plural == singular) {
        return Some(("SingularConflict", in_use(&singular)));
    }
    if let Some(s) = short
        .iter()
        .find(|s| others.iter().any(|ri| ri.short_names.contains(s)))
    {
        return Some(("ShortNamesConflict", in_use(s)));
    }
    if others.iter().any(|ri| ri.kind == kind) {
        return Some(("KindConflict", in_use(&kind)));
    }
    if others.iter().any(|ri| ri.list_kind() == list_kind) {
        return Some(("ListKindConflict", in_use(&list_kind)));
    }
    None
}

/// Status of a CRD whose names were refused: NamesAccepted=False, and Established=False unless it was
/// established before.
fn conflict_status(crd: &Value, reason: &str, message: &str, established: bool) -> Value {
    let now = ops::now_secs();
    let accepted = crd
        .pointer("/status/acceptedNames")
        .cloned()
        .unwrap_or_else(|| json!({"plural": "", "kind": ""}));
    let established = if established {
        condition(
            crd,
            "Established",
            "True",
            "InitialNamesAccepted",
            "the initial names have been accepted",
            &now,
        )
    } else {
        condition(
            crd,
            "Established",
            "False",
            "NotAccepted",
            "not all names are accepted",
            &now,
        )
    };
    json!({
        "acceptedNames": accepted,
        "conditions": [condition(crd, "NamesAccepted", "False", reason, message, &now), established],
        "storedVersions": stored_versions(crd),
    })
}

fn cr_objects(sh: &Shared, key: &ResKey) -> Vec<(ObjRef, Arc<Value>)> {
    let (_, items) = sh.store.list(key, None);
    items
        .into_iter()
        .map(|o| {
            let r = ObjRef {
                res: key.clone(),
                ns: o
                    .pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
                name: ops::name_of(&o).to_string(),
            };
            (r, o)
        })
        .collect()
}

fn try_finish(sh: &Shared, key: &ResKey, crd_name: &str) {
    if sh.store.count(key) == 0 {
        let r = ObjRef {
            res: Arc::from(CRD_KEY),
            ns: String::new(),
            name: crd_name.to_string(),
        };
        remove_finalizer(sh, &r, FINALIZER_CRD_CLEANUP, MANAGER);
    }
}

fn set_status(sh: &Shared, r: &ObjRef, status: Value) {
    edit(sh, r, Sub::Status, MANAGER, |o| {
        if o.get("status") == Some(&status) {
            return false;
        }
        o["status"] = status.clone();
        true
    });
}

fn condition(existing: &Value, type_: &str, status: &str, reason: &str, message: &str, now: &str) -> Value {
    let prev = existing
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_));
    let time = match prev {
        Some(c) if c["status"] == status => c["lastTransitionTime"].clone(),
        _ => json!(now),
    };
    json!({"type": type_, "status": status, "lastTransitionTime": time, "reason": reason, "message": message})
}

/// `status.acceptedNames` from `spec.names`, with the API server's defaults.
pub fn accepted_names(crd: &Value) -> Value {
    let mut names = crd.pointer("/spec/names").cloned().unwrap_or(json!({}));
    let kind = names["kind"].as_str().unwrap_or("").to_string();
    if names["singular"].as_str().unwrap_or("").is_empty() {
        names["singular"] = json!(kind.to_lowercase());
    }
    if names["listKind"].as_str().unwrap_or("").is_empty() {
        names["listKind"] = json!(format!("{kind}List"));
    }
    names
}

fn stored_versions(crd: &Value) -> Value {
    let mut stored: Vec<Value> = crd
        .pointer("/status/storedVersions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let storage = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .and_then(|vs| vs.iter().find(|v| v["storage"].as_bool() == Some(true)))
        .map(|v| v["name"].clone());
    if let Some(s) = storage {
        if !stored.contains(&s) {
            stored.push(s);
        }
    }
    Value::Array(stored)
}

/// The status of an established CRD.
pub fn established_status(crd: &Value, now: &str) -> Value {
    json!({
        "acceptedNames": accepted_names(crd),
        "conditions": [
            condition(crd, "NamesAccepted", "True", "NoConflicts", "no conflicts found", now),
            condition(crd, "Established", "True", "InitialNamesAccepted", "the initial names have been accepted", now),
        ],
        "storedVersions": stored_versions(crd),
    })
}

fn terminating_status(crd: &Value) -> Value {
    let now = ops::now_secs();
    let mut st = established_status(crd, &now);
    if let Some(cs) = st["conditions"].as_array_mut() {
        cs.push(condition(
            crd,
            "Terminating",
            "True",
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
            &now,
        ));
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_defaults_and_keeps_transition_times() {
        let crd = json!({"spec":{"names":{"plural":"apps","kind":"App"},"versions":[{"name":"v1","storage":true}]}});
        let st = established_status(&crd, "T1");
        assert_eq!(st["acceptedNames"]["singular"], "app");
        assert_eq!(st["acceptedNames"]["listKind"], "AppList");
        assert_eq!(st["storedVersions"], json!(["v1"]));
        assert_eq!(st["conditions"][1]["type"], "Established");
        let mut again = crd.clone();
        again["status"] = st;
        let st2 = established_status(&again, "T2");
        assert_eq!(st2["conditions"][1]["lastTransitionTime"], "T1");
    }
}
