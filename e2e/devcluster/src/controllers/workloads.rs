//! Workload simulation loop: for every object `sim::is_simulated` accepts, call `sim::simulate`
//! with its controlled children, write the returned status through the status path (no-op aware), create,
//! update or delete children so they match, and honour `requeue_after`.
//!
//! Hot-loop guard: an object's own status-only changes do not requeue it (our status writes would otherwise
//! feed back forever); changes to its children do requeue it, and so do spec/metadata changes.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::mpsc::{self, UnboundedReceiver, UnboundedSender};

use crate::server::ops::{self, Sub, WriteOpts};
use crate::server::Shared;
use crate::sim;
use crate::store::{Event, EventType, ObjRef};

use super::{delete_background, edit, owner_refs, resource_of, uid};

const MANAGER: &str = "kube-controller-manager";

/// When each object's pending timer is due.
type Timers = Arc<Mutex<HashMap<ObjRef, tokio::time::Instant>>>;

pub async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    let (qtx, mut qrx) = mpsc::unbounded_channel::<ObjRef>();
    let timers: Timers = Arc::default();
    let mut pending: HashSet<ObjRef> = HashSet::new();
    loop {
        tokio::select! {
            ev = rx.recv() => {
                let Some(ev) = ev else { break };
                for r in interesting(&sh, &ev) {
                    if pending.insert(r.clone()) {
                        let _ = qtx.send(r);
                    }
                }
            }
            r = qrx.recv() => {
                let Some(r) = r else { break };
                pending.remove(&r);
                if let Some(delay) = reconcile(&sh, &r) {
                    schedule(&timers, &qtx, r, delay);
                }
            }
        }
    }
}

/// Look at `r` again after `delay`. One timer per object, unless the new one is due earlier (a Pod's grace
/// period shortened by a second DELETE): an extra look is harmless, a late one is not.
fn schedule(timers: &Timers, qtx: &UnboundedSender<ObjRef>, r: ObjRef, delay: std::time::Duration) {
    let due = tokio::time::Instant::now() + delay;
    {
        let mut t = timers.lock();
        if t.get(&r).is_some_and(|existing| *existing <= due) {
            return;
        }
        t.insert(r.clone(), due);
    }
    let (timers, qtx) = (timers.clone(), qtx.clone());
    tokio::spawn(async move {
        tokio::time::sleep_until(due).await;
        {
            let mut t = timers.lock();
            if t.get(&r) == Some(&due) {
                t.remove(&r);
            }
        }
        let _ = qtx.send(r);
    });
}

fn simulated(obj: &Value) -> bool {
    sim::is_simulated(
        obj["apiVersion"].as_str().unwrap_or(""),
        obj["kind"].as_str().unwrap_or(""),
    )
}

/// Equal apart from status and server-maintained metadata.
pub fn only_status_changed(prev: &Value, cur: &Value) -> bool {
    let (Some(p), Some(c)) = (prev.as_object(), cur.as_object()) else {
        return false;
    };
    let keys: HashSet<&String> = p.keys().chain(c.keys()).collect();
    keys.into_iter().all(|k| match k.as_str() {
        "status" => true,
        "metadata" => {
            let strip = |m: &Value| {
                let mut m = m.clone();
                if let Some(o) = m.as_object_mut() {
                    o.remove("resourceVersion");
                    o.remove("managedFields");
                }
                m
            };
            strip(&p["metadata"]) == strip(&c["metadata"])
        }
        _ => p.get(k) == c.get(k),
    })
}

/// Objects to reconcile because of `ev`.
fn interesting(sh: &Shared, ev: &Event) -> Vec<ObjRef> {
    let mut out = Vec::new();
    let obj = &ev.object;
    if ev.kind != EventType::Deleted && simulated(obj) {
        let status_only = ev.prev.as_ref().is_some_and(|p| only_status_changed(p, obj));
        if !status_only {
            out.push(ev.obj.clone());
        }
    }
    for o in owner_refs(obj) {
        if o["controller"].as_bool() != Some(true) {
            continue;
        }
        if let Some((r, owner)) = o["uid"].as_str().and_then(|u| sh.store.by_uid(u)) {
            if simulated(&owner) {
                out.push(r);
            }
        }
    }
    out
}

fn controlled_by(child: &Value, owner_uid: &str) -> bool {
    owner_refs(child)
        .iter()
        .any(|o| o["uid"].as_str() == Some(owner_uid) && o["controller"].as_bool() == Some(true))
}

/// One simulation step; returns when to look again.
fn reconcile(sh: &Shared, r: &ObjRef) -> Option<std::time::Duration> {
    let obj = sh.store.get(&r.res, &r.ns, &r.name)?;
    if ops::is_deleting(&obj) {
        return kubelet_terminate(sh, r, &obj);
    }
    let owner_uid = uid(&obj).to_string();
    let children: Vec<(ObjRef, Arc<Value>)> = sh
        .store
        .dependents(&owner_uid)
        .into_iter()
        .filter(|(_, c)| controlled_by(c, &owner_uid))
        .collect();
    let child_values: Vec<Value> = children.iter().map(|(_, c)| (**c).clone()).collect();
    let outcome = sim::simulate(&obj, &child_values, chrono::Utc::now());
    if let Some(status) = outcome.status {
        write_status(sh, r, status);
    }
    let mut wanted: HashSet<ObjRef> = HashSet::new();
    for desired in &outcome.children {
        if let Some(cr) = sync_child(sh, r, desired) {
            wanted.insert(cr);
        }
    }
    for (cr, _) in children {
        if !wanted.contains(&cr) {
            delete_background(sh, &cr);
        }
    }
    outcome.requeue_after
}

/// The kubelet ending a graceful Pod deletion: once the containers have stopped it deletes the Pod with a zero
/// grace period, on the Pod's uid so that a new Pod of the same name is never hit. Returns when to look again.
fn kubelet_terminate(sh: &Shared, r: &ObjRef, pod: &Value) -> Option<std::time::Duration> {
    let remaining = sim::pod_shutdown_remaining(pod, chrono::Utc::now())?;
    if !remaining.is_zero() {
        return Some(remaining);
    }
    let ri = resource_of(sh, &r.res)?;
    let o = ops::DeleteOpts {
        grace_period_seconds: Some(0),
        uid: Some(uid(pod).to_string()),
        ..Default::default()
    };
    let ns = (!r.ns.is_empty()).then_some(r.ns.as_str());
    if let Err(e) = ops::delete(sh, &ri, ns, &r.name, &o) {
        if e.code != 404 && e.code != 409 {
            tracing::debug!(object = ?r, error = %e, "kubelet delete");
        }
    }
    None
}

fn write_status(sh: &Shared, r: &ObjRef, status: Value) {
    let sub = if resource_of(sh, &r.res).is_some_and(|ri| ri.status) {
        Sub::Status
    } else {
        Sub::Main
    };
    edit(sh, r, sub, MANAGER, |o| {
        if o.get("status") == Some(&status) {
            return false;
        }
        o["status"] = status.clone();
        true
    });
}

/// Create or update one desired child; returns its identity.
fn sync_child(sh: &Shared, owner: &ObjRef, desired: &Value) -> Option<ObjRef> {
    let ri = sh
        .registry
        .read()
        .by_gvk(desired["apiVersion"].as_str()?, desired["kind"].as_str()?)?;
    let name = ops::name_of(desired).to_string();
    if name.is_empty() {
        return None;
    }
    let ns = if ri.namespaced { owner.ns.clone() } else { String::new() };
    let cr = ObjRef {
        res: ri.key.clone(),
        ns: ns.clone(),
        name: name.clone(),
    };
    let ns_opt = if ns.is_empty() { None } else { Some(ns.as_str()) };
    if sh.store.get(&cr.res, &cr.ns, &cr.name).is_none() {
        let mut obj = desired.clone();
        if let Some(o) = obj.as_object_mut() {
            o.remove("status");
        }
        if let Err(e) = ops::create(sh, &ri, ns_opt, obj, &[], &WriteOpts::system(MANAGER)) {
            tracing::debug!(child = ?cr, error = %e, "create simulated child");
            return Some(cr);
        }
    } else {
        edit(sh, &cr, Sub::Main, MANAGER, |o| merge_desired(o, desired));
    }
    if let Some(status) = desired.get("status") {
        write_status(sh, &cr, status.clone());
    }
    Some(cr)
}

/// Copy the desired spec-like fields and labels/annotations/ownerReferences onto a live child.
fn merge_desired(live: &mut Value, desired: &Value) -> bool {
    let before = live.clone();
    if let (Some(l), Some(d)) = (live.as_object_mut(), desired.as_object()) {
        for (k, v) in d {
            if !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind") {
                l.insert(k.clone(), v.clone());
            }
        }
    }
    for k in ["labels", "annotations", "ownerReferences"] {
        if let Some(v) = desired.pointer(&format!("/metadata/{k}")) {
            ops::meta_mut(live).insert(k.into(), v.clone());
        }
    }
    *live != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_only_detection() {
        let a = json!({"metadata":{"resourceVersion":"1","generation":1},"spec":{"replicas":1},"status":{"x":1}});
        let b = json!({"metadata":{"resourceVersion":"2","generation":1},"spec":{"replicas":1},"status":{"x":2}});
        let c = json!({"metadata":{"resourceVersion":"3","generation":2},"spec":{"replicas":2},"status":{"x":2}});
        assert!(only_status_changed(&a, &b));
        assert!(!only_status_changed(&b, &c));
    }

    #[test]
    fn merge_desired_reports_changes() {
        let mut live = json!({"metadata":{"name":"x","labels":{"a":"1"}},"spec":{"replicas":1}});
        let desired = json!({"metadata":{"name":"x","labels":{"a":"1"}},"spec":{"replicas":1}});
        assert!(!merge_desired(&mut live, &desired));
        let desired = json!({"metadata":{"name":"x","labels":{"a":"2"}},"spec":{"replicas":3}});
        assert!(merge_desired(&mut live, &desired));
        assert_eq!(live["spec"]["replicas"], 3);
    }
}
