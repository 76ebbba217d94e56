//! Built-in controllers that run inside devcluster: garbage collection, namespace lifecycle, CRD
//! establishment/cleanup, workload simulation, ClusterRole aggregation and the ServiceAccount token
//! controller. Each is a tokio task fed by its own lossless event
//! subscription from the store, and writes through the same verb functions clients use.

pub mod aggregation;
pub mod crd;
pub mod gc;
pub mod namespace;
pub mod tokens;
pub mod workloads;

use std::sync::Arc;

use serde_json::{json, Value};

use crate::error::ApiError;
use crate::registry::ResourceInfo;
use crate::server::ops::{self, DeleteOpts, WriteOpts};
use crate::server::Shared;
use crate::store::ObjRef;

/// Namespaces that exist from the start.
pub const BOOTSTRAP_NAMESPACES: &[&str] = &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Subscribe and spawn every controller, then create the bootstrap namespaces. Call inside a tokio runtime.
/// Each subscription starts with the objects already stored, so on persisted state (etcd) controllers pick up
/// where the last run stopped.
pub fn start(sh: &Arc<Shared>) {
    tokio::spawn(gc::run(sh.clone(), sh.store.subscribe_controller()));
    tokio::spawn(namespace::run(sh.clone(), sh.store.subscribe_controller()));
    crd::start(sh);
    tokio::spawn(workloads::run(sh.clone(), sh.store.subscribe_controller()));
    tokio::spawn(aggregation::run(sh.clone(), sh.store.subscribe_controller()));
    tokio::spawn(tokens::run(sh.clone(), sh.store.subscribe_controller()));
    tokio::spawn(crate::auth::rbac::watch_changes(
        sh.clone(),
        sh.store.subscribe_controller(),
    ));
    bootstrap(sh);
    crate::auth::bootstrap::create_defaults(sh);
}

fn bootstrap(sh: &Shared) {
    let Some(ri) = sh.registry.read().find("", "v1", "namespaces") else {
        return;
    };
    for ns in BOOTSTRAP_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match ops::create(sh, &ri, None, obj, &[], &WriteOpts::system("devcluster")) {
            // Restarted on etcd: it is still there.
            Ok(_) | Err(ApiError { code: 409, .. }) => {}
            Err(e) => tracing::warn!(namespace = ns, error = %e, "bootstrap namespace"),
        }
    }
}

/// The storage-version resource of a store key.
pub fn resource_of(sh: &Shared, res: &str) -> Option<Arc<ResourceInfo>> {
    sh.registry.read().by_key(res)
}

fn ns_of(r: &ObjRef) -> Option<&str> {
    if r.ns.is_empty() {
        None
    } else {
        Some(r.ns.as_str())
    }
}

/// Delete an object with background propagation; a missing object is fine.
pub fn delete_background(sh: &Shared, r: &ObjRef) {
    delete_with(sh, r, "Background");
}

/// Delete an object with a propagation policy; a missing object is fine.
pub fn delete_with(sh: &Shared, r: &ObjRef, policy: &str) {
    let Some(ri) = resource_of(sh, &r.res) else { return };
    let o = DeleteOpts {
        propagation: Some(policy.into()),
        ..Default::default()
    };
    if let Err(e) = ops::delete(sh, &ri, ns_of(r), &r.name, &o) {
        if e.code != 404 {
            tracing::debug!(object = ?r, error = %e, "controller delete");
        }
    }
}

/// Controller-side edit of an object (main resource or status); errors are logged.
pub fn edit(sh: &Shared, r: &ObjRef, sub: ops::Sub, manager: &str, f: impl FnMut(&mut Value) -> bool) {
    let Some(ri) = resource_of(sh, &r.res) else { return };
    if let Err(e) = ops::modify(sh, &ri, ns_of(r), &r.name, sub, manager, f) {
        tracing::debug!(object = ?r, error = %e, "controller write");
    }
}

/// Remove one finalizer from an object.
pub fn remove_finalizer(sh: &Shared, r: &ObjRef, finalizer: &str, manager: &str) {
    edit(sh, r, ops::Sub::Main, manager, |o| {
        let mut f = ops::finalizers(o);
        let before = f.len();
        f.retain(|x| x != finalizer);
        if f.len() == before {
            return false;
        }
        ops::set_finalizers(o, &f);
        true
    });
}

/// `metadata.uid`.
pub fn uid(obj: &Value) -> &str {
    obj.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

/// `metadata.ownerReferences`.
pub fn owner_refs(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}
