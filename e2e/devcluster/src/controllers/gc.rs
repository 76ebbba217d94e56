//! Garbage collector (spec §12.4): background deletion of dependents whose owners are gone (including
//! dangling references), foreground deletion (delete dependents, wait for `blockOwnerDeletion` ones, then drop
//! the `foregroundDeletion` finalizer) and orphaning (strip the owner reference, then drop `orphan`).
//! Decisions are pure functions of the store state so they can be unit-tested.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::server::ops::{self, Sub};
use crate::server::Shared;
use crate::store::{Event, EventType, ObjRef};

use super::{delete_background, edit, owner_refs, remove_finalizer, uid};

const MANAGER: &str = "garbage-collector";
const FOREGROUND: &str = "foregroundDeletion";
const ORPHAN: &str = "orphan";

pub async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    while let Some(ev) = rx.recv().await {
        handle(&sh, &ev);
    }
}

/// Whether an owner reference may point at `owner` (same namespace or cluster-scoped owner).
pub fn valid_owner(dependent: &ObjRef, owner: &ObjRef) -> bool {
    owner.ns.is_empty() || owner.ns == dependent.ns
}

fn owner_alive(sh: &Shared, dependent: &ObjRef, owner_uid: &str) -> bool {
    sh.store
        .by_uid(owner_uid)
        .is_some_and(|(r, _)| valid_owner(dependent, &r))
}

/// Whether every owner of `obj` is gone (then the dependent is garbage).
fn all_owners_gone(sh: &Shared, r: &ObjRef, obj: &Value) -> bool {
    let refs = owner_refs(obj);
    !refs.is_empty()
        && refs
            .iter()
            .all(|o| !owner_alive(sh, r, o["uid"].as_str().unwrap_or("")))
}

/// Dependents that block foreground deletion of `owner_uid`.
pub fn blocking(dependents: &[(ObjRef, Arc<Value>)], owner_uid: &str) -> usize {
    dependents
        .iter()
        .filter(|(_, d)| {
            owner_refs(d)
                .iter()
                .any(|o| o["uid"].as_str() == Some(owner_uid) && o["blockOwnerDeletion"].as_bool() == Some(true))
        })
        .count()
}

fn handle(sh: &Shared, ev: &Event) {
    let obj = &ev.object;
    match ev.kind {
        EventType::Deleted => {
            for (r, dep) in sh.store.dependents(uid(obj)) {
                if all_owners_gone(sh, &r, &dep) {
                    delete_background(sh, &r);
                }
            }
            wake_foreground_owners(sh, obj);
        }
        EventType::Added | EventType::Modified => {
            if ops::is_deleting(obj) {
                let fins = ops::finalizers(obj);
                if fins.iter().any(|f| f == ORPHAN) {
                    orphan(sh, &ev.obj, obj);
                }
                if fins.iter().any(|f| f == FOREGROUND) {
                    foreground(sh, &ev.obj, obj);
                }
            }
            let refs_changed = ev.prev.as_ref().is_none_or(|p| owner_refs(p) != owner_refs(obj));
            if refs_changed && all_owners_gone(sh, &ev.obj, obj) && !ops::is_deleting(obj) {
                delete_background(sh, &ev.obj);
            }
            if let Some(p) = &ev.prev {
                if owner_refs(p) != owner_refs(obj) {
                    wake_foreground_owners(sh, p);
                }
            }
        }
    }
}

/// Re-check owners in foreground deletion after one of their dependents went away.
fn wake_foreground_owners(sh: &Shared, dependent: &Value) {
    for o in owner_refs(dependent) {
        let Some((r, owner)) = o["uid"].as_str().and_then(|u| sh.store.by_uid(u)) else {
            continue;
        };
        if ops::is_deleting(&owner) && ops::finalizers(&owner).iter().any(|f| f == FOREGROUND) {
            finish_foreground(sh, &r, &owner);
        }
    }
}

fn foreground(sh: &Shared, r: &ObjRef, owner: &Value) {
    for (dr, dep) in sh.store.dependents(uid(owner)) {
        if !ops::is_deleting(&dep) {
            delete_background(sh, &dr);
        }
    }
    finish_foreground(sh, r, owner);
}

fn finish_foreground(sh: &Shared, r: &ObjRef, owner: &Value) {
    let owner_uid = uid(owner);
    if blocking(&sh.store.dependents(owner_uid), owner_uid) == 0 {
        remove_finalizer(sh, r, FOREGROUND, MANAGER);
    }
}

fn orphan(sh: &Shared, r: &ObjRef, owner: &Value) {
    let owner_uid = uid(owner).to_string();
    for (dr, _) in sh.store.dependents(&owner_uid) {
        edit(sh, &dr, Sub::Main, MANAGER, |d| {
            let refs = owner_refs(d);
            let kept: Vec<Value> = refs
                .iter()
                .filter(|o| o["uid"].as_str() != Some(&owner_uid))
                .cloned()
                .collect();
            if kept.len() == refs.len() {
                return false;
            }
            let m = ops::meta_mut(d);
            if kept.is_empty() {
                m.remove("ownerReferences");
            } else {
                m.insert("ownerReferences".into(), Value::Array(kept));
            }
            true
        });
    }
    remove_finalizer(sh, r, ORPHAN, MANAGER);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(ns: &str) -> ObjRef {
        ObjRef {
            res: Arc::from("/configmaps"),
            ns: ns.into(),
            name: "x".into(),
        }
    }

    #[test]
    fn cross_namespace_owners_are_invalid() {
        assert!(valid_owner(&r("a"), &r("a")));
        assert!(valid_owner(&r("a"), &r("")));
        assert!(!valid_owner(&r("a"), &r("b")));
    }

    #[test]
    fn only_block_owner_deletion_blocks() {
        let deps = vec![
            (
                r("a"),
                Arc::new(json!({"metadata":{"ownerReferences":[{"uid":"o","blockOwnerDeletion":true}]}})),
            ),
            (r("a"), Arc::new(json!({"metadata":{"ownerReferences":[{"uid":"o"}]}}))),
            (
                r("a"),
                Arc::new(json!({"metadata":{"ownerReferences":[{"uid":"other","blockOwnerDeletion":true}]}})),
            ),
        ];
        assert_eq!(blocking(&deps, "o"), 1);
    }
}
