//! Garbage collector, following kube-controller-manager's `attemptToDeleteItem`:
//! - a dependent is deleted only when it has no *solid* owner left (an owner that exists and is not in
//!   foreground deletion); then it is deleted in the foreground if an owner waits for its dependents and it has
//!   dependents of its own, otherwise in the background;
//! - a dependent that still has a solid owner keeps living, but loses its dangling references (owners that are
//!   gone) and its references to owners in foreground deletion, exactly as the real GC patches them away;
//! - foreground deletion deletes (or detaches) the dependents, waits for the `blockOwnerDeletion` ones, then
//!   drops the `foregroundDeletion` finalizer; orphaning strips the owner reference, then drops `orphan`.
//!
//! Decisions are pure functions of the store state so they can be unit-tested.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::server::ops::{self, Sub};
use crate::server::Shared;
use crate::store::{Event, EventType, ObjRef};

use super::{delete_background, delete_with, edit, owner_refs, remove_finalizer, uid};

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

/// A dependent's owner references by state (the real GC's `classifyReferences`), as owner uids.
#[derive(Debug, Default, PartialEq)]
pub struct Classified {
    /// Owners that exist and are not in foreground deletion.
    pub solid: Vec<String>,
    /// Owners that no longer exist (or may not be referenced from this namespace).
    pub dangling: Vec<String>,
    /// Owners in foreground deletion, waiting for their dependents.
    pub waiting: Vec<String>,
}

/// What the collector does with a dependent.
#[derive(Debug, PartialEq)]
pub enum Decision {
    Keep,
    /// Remove these owner references (by uid); a solid owner remains.
    StripRefs(Vec<String>),
    /// Delete it; `foreground` when an owner waits for dependents and this one has dependents of its own.
    Delete {
        foreground: bool,
    },
}

fn classify(sh: &Shared, r: &ObjRef, obj: &Value) -> Classified {
    let mut c = Classified::default();
    for o in owner_refs(obj) {
        let owner_uid = o["uid"].as_str().unwrap_or("").to_string();
        match sh.store.by_uid(&owner_uid).filter(|(or, _)| valid_owner(r, or)) {
            None => c.dangling.push(owner_uid),
            Some((_, owner)) if ops::is_deleting(&owner) && has_finalizer(&owner, FOREGROUND) => {
                c.waiting.push(owner_uid)
            }
            Some(_) => c.solid.push(owner_uid),
        }
    }
    c
}

/// The real GC's decision for a dependent with owner references (pure, see the module doc).
pub fn decide(c: &Classified, has_dependents: bool) -> Decision {
    if c.solid.is_empty() && c.dangling.is_empty() && c.waiting.is_empty() {
        return Decision::Keep;
    }
    if !c.solid.is_empty() {
        if c.dangling.is_empty() && c.waiting.is_empty() {
            return Decision::Keep;
        }
        return Decision::StripRefs(c.dangling.iter().chain(&c.waiting).cloned().collect());
    }
    Decision::Delete {
        foreground: !c.waiting.is_empty() && has_dependents,
    }
}

fn has_finalizer(obj: &Value, f: &str) -> bool {
    ops::finalizers(obj).iter().any(|x| x == f)
}

/// Classify a dependent's references and act on them. Objects already being deleted are left alone, as the
/// real GC does (their own deletion is under way).
fn collect(sh: &Shared, r: &ObjRef, obj: &Value) {
    if ops::is_deleting(obj) || owner_refs(obj).is_empty() {
        return;
    }
    let c = classify(sh, r, obj);
    let has_dependents = || !sh.store.dependents(uid(obj)).is_empty();
    let decision = if c.solid.is_empty() && !c.waiting.is_empty() {
        decide(&c, has_dependents())
    } else {
        decide(&c, false)
    };
    match decision {
        Decision::Keep => {}
        Decision::StripRefs(uids) => strip_refs(sh, r, &uids),
        Decision::Delete { foreground: true } => delete_with(sh, r, "Foreground"),
        Decision::Delete { foreground: false } => delete_background(sh, r),
    }
}

/// Remove the owner references with these uids from a dependent.
fn strip_refs(sh: &Shared, r: &ObjRef, uids: &[String]) {
    edit(sh, r, Sub::Main, MANAGER, |d| {
        let refs = owner_refs(d);
        let kept: Vec<Value> = refs
            .iter()
            .filter(|o| !o["uid"].as_str().is_some_and(|u| uids.iter().any(|x| x == u)))
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
                collect(sh, &r, &dep);
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
            if refs_changed {
                collect(sh, &ev.obj, obj);
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

/// An owner entered foreground deletion: its dependents are deleted, or detached when another solid owner
/// keeps them alive.
fn foreground(sh: &Shared, r: &ObjRef, owner: &Value) {
    for (dr, dep) in sh.store.dependents(uid(owner)) {
        collect(sh, &dr, &dep);
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
        strip_refs(sh, &dr, std::slice::from_ref(&owner_uid));
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

    fn uids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn decisions_follow_the_real_collector() {
        let c = |solid: &[&str], dangling: &[&str], waiting: &[&str]| Classified {
            solid: uids(solid),
            dangling: uids(dangling),
            waiting: uids(waiting),
        };
        assert_eq!(decide(&c(&[], &[], &[]), false), Decision::Keep);
        assert_eq!(decide(&c(&["a"], &[], &[]), false), Decision::Keep);
        assert_eq!(
            decide(&c(&["a"], &["gone"], &[]), false),
            Decision::StripRefs(uids(&["gone"])),
            "a dependent with a living owner only loses its dangling reference"
        );
        assert_eq!(
            decide(&c(&["a"], &["gone"], &["fg"]), true),
            Decision::StripRefs(uids(&["gone", "fg"]))
        );
        assert_eq!(
            decide(&c(&[], &["gone", "gone2"], &[]), true),
            Decision::Delete { foreground: false },
            "deleted only when every owner is gone"
        );
        assert_eq!(
            decide(&c(&[], &[], &["fg"]), true),
            Decision::Delete { foreground: true }
        );
        assert_eq!(
            decide(&c(&[], &["x"], &["fg"]), false),
            Decision::Delete { foreground: false }
        );
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
