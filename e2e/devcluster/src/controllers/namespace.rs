//! Namespace lifecycle: a deleted namespace stays Terminating while everything in it is deleted
//! (honouring finalizers); once empty (and without metadata finalizers) it is removed. New namespaces get a
//! `default` ServiceAccount.

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::json;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::server::ops::{self, WriteOpts};
use crate::server::Shared;
use crate::store::{rv_of, CommitError, Event, EventType, ObjRef, Write, NAMESPACES};

use super::delete_background;

pub async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    let mut terminating: HashSet<String> = HashSet::new();
    while let Some(ev) = rx.recv().await {
        handle(&sh, &ev, &mut terminating);
    }
}

fn handle(sh: &Shared, ev: &Event, terminating: &mut HashSet<String>) {
    if ev.obj.res.as_ref() == NAMESPACES {
        let name = ev.obj.name.clone();
        match ev.kind {
            EventType::Deleted => {
                terminating.remove(&name);
            }
            _ if ops::is_deleting(&ev.object) => {
                let newly = terminating.insert(name.clone());
                let was_deleting = ev.prev.as_ref().is_some_and(|p| ops::is_deleting(p));
                if newly || !was_deleting {
                    cleanup(sh, &name);
                }
                try_finish(sh, &name);
            }
            EventType::Added => ensure_default_sa(sh, &name),
            EventType::Modified => {}
        }
        return;
    }
    if terminating.contains(&ev.obj.ns) {
        match ev.kind {
            EventType::Deleted => try_finish(sh, &ev.obj.ns),
            // Raced in before the namespace was marked: delete it too.
            EventType::Added if !ops::is_deleting(&ev.object) => delete_background(sh, &ev.obj),
            _ => {}
        }
    }
}

fn cleanup(sh: &Shared, ns: &str) {
    for (r, obj) in sh.store.in_namespace(ns) {
        if !ops::is_deleting(&obj) {
            delete_background(sh, &r);
        }
    }
}

/// Remove the namespace once nothing is left in it.
fn try_finish(sh: &Shared, ns: &str) {
    if sh.store.count_in_namespace(ns) > 0 {
        return;
    }
    let r = ObjRef {
        res: Arc::from(NAMESPACES),
        ns: String::new(),
        name: ns.to_string(),
    };
    for _ in 0..16 {
        let Some(obj) = sh.store.get(&r.res, "", ns) else {
            return;
        };
        if !ops::is_deleting(&obj) || !ops::finalizers(&obj).is_empty() {
            return;
        }
        let mut last = (*obj).clone();
        last["spec"] = json!({});
        match sh.store.commit(&r, Some(rv_of(&obj)), Write::Delete(Some(last)), None) {
            Err(CommitError::Stale) => continue,
            _ => return,
        }
    }
}

fn ensure_default_sa(sh: &Shared, ns: &str) {
    let Some(ri) = sh.registry.read().find("", "v1", "serviceaccounts") else {
        return;
    };
    if sh.store.get(&ri.key, ns, "default").is_some() {
        return;
    }
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": ns}});
    if let Err(e) = ops::create(
        sh,
        &ri,
        Some(ns),
        sa,
        &[],
        &WriteOpts::system("kube-controller-manager"),
    ) {
        tracing::debug!(namespace = ns, error = %e, "default service account");
    }
}
