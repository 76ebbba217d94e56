//! Cascade deletion: what happens when an Application with a resources finalizer is deleted.
//!
//! Finalizers (any one turns cascade deletion on; without one the resources are orphaned):
//! - `capstan.dev/resources` and Argo CD's `resources-finalizer.argocd.argoproj.io` (also with the
//!   `/foreground` suffix): foreground propagation (dependents first);
//! - `capstan.dev/resources-background` and `resources-finalizer.argocd.argoproj.io/background`:
//!   background propagation.
//!
//! Only objects whose tracking annotation names this Application are deleted (a copied label or a
//! shared object of another Application is left alone). The finalizer is removed once none is left in
//! the live cache, and only once the cache is complete (a not-yet-listed object is not "gone").
//!
//! Never wedged forever:
//! - the destination's Cluster object is gone → nothing can be deleted; the finalizer is removed with
//!   a Warning event (Argo CD #5817);
//! - annotation `capstan.dev/deletion-policy: orphan` → the finalizer is removed without deleting;
//! - after [`MAX_ATTEMPTS`] failed attempts (an unreachable cluster, a rejected delete) the condition
//!   `DeletionError` says so and how to get out: fix the cause, annotate `capstan.dev/deletion-policy:
//!   orphan`, or remove the finalizer: `kubectl patch capp NAME --type=json
//!   -p='[{"op":"remove","path":"/metadata/finalizers"}]'`. Attempts go on with backoff meanwhile.

use std::sync::Arc;
use std::time::Duration;

use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::api::labels::RESOURCES_FINALIZER;
use crate::api::Application;
use crate::cluster::ops::{self, DeleteOptions, DeleteOutcome, Propagation};
use crate::cluster::{ClusterError, ClusterHandle};
use crate::engine::object;
use crate::engine::protect::{self, Protection, Removal};

use super::compare::gvk_of;

/// Capstan's background-propagation variant of [`RESOURCES_FINALIZER`].
pub const RESOURCES_FINALIZER_BACKGROUND: &str = "capstan.dev/resources-background";
/// Argo CD's resources finalizer (foreground).
pub const ARGO_FINALIZER: &str = "resources-finalizer.argocd.argoproj.io";
/// Argo CD's explicit foreground variant.
pub const ARGO_FINALIZER_FOREGROUND: &str = "resources-finalizer.argocd.argoproj.io/foreground";
/// Argo CD's background variant.
pub const ARGO_FINALIZER_BACKGROUND: &str = "resources-finalizer.argocd.argoproj.io/background";
/// Every finalizer that asks for cascade deletion.
pub const CASCADE_FINALIZERS: [&str; 5] = [
    RESOURCES_FINALIZER,
    RESOURCES_FINALIZER_BACKGROUND,
    ARGO_FINALIZER,
    ARGO_FINALIZER_FOREGROUND,
    ARGO_FINALIZER_BACKGROUND,
];
/// Annotation: `orphan` removes the finalizer without deleting anything (the way out of a wedged
/// deletion).
pub const DELETION_POLICY_ANNOTATION: &str = "capstan.dev/deletion-policy";
/// Failed attempts before `DeletionError` is reported.
pub const MAX_ATTEMPTS: u32 = 5;
/// Requeue while objects are terminating.
pub const DELETE_POLL: Duration = Duration::from_secs(2);

/// The cascade finalizers `app` carries.
pub fn cascade_finalizers(app: &Application) -> Vec<String> {
    app.finalizers()
        .iter()
        .filter(|f| CASCADE_FINALIZERS.contains(&f.as_str()))
        .cloned()
        .collect()
}

/// Propagation asked for by the finalizers (background only if every cascade finalizer says so).
pub fn propagation(finalizers: &[String]) -> Propagation {
    let background = !finalizers.is_empty()
        && finalizers
            .iter()
            .all(|f| f == RESOURCES_FINALIZER_BACKGROUND || f == ARGO_FINALIZER_BACKGROUND);
    if background {
        Propagation::Background
    } else {
        Propagation::Foreground
    }
}

/// Whether `capstan.dev/deletion-policy: orphan` is set.
pub fn orphan_requested(app: &Application) -> bool {
    app.annotations()
        .get(DELETION_POLICY_ANNOTATION)
        .is_some_and(|v| v.eq_ignore_ascii_case("orphan"))
}

/// Where a cascade deletion stands.
#[derive(Debug, PartialEq)]
pub enum Progress {
    /// Nothing tracked by the Application is left: remove the finalizer.
    Done,
    /// Deletes were issued or objects are terminating: look again soon.
    Deleting(usize),
    /// The live cache is not complete yet: look again soon, remove nothing.
    Waiting,
}

/// Deletes the live object `obj` (guarded by its uid, so a re-created object of the same name is
/// spared); already gone or replaced counts as done.
pub async fn delete_live(cluster: &ClusterHandle, obj: &Value, propagation: Propagation) -> Result<(), ClusterError> {
    let Some(gvk) = gvk_of(obj) else { return Ok(()) };
    let opts = DeleteOptions {
        propagation,
        uid: obj.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string),
        dry_run: false,
    };
    match ops::delete(cluster, &gvk, object::namespace(obj), object::name(obj), &opts).await {
        Ok(DeleteOutcome::Deleted | DeleteOutcome::Deleting(_) | DeleteOutcome::NotFound) => Ok(()),
        Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// The live objects tracked by `who`'s Application that a cascade deletion may delete, and the
/// messages of the guards that hold the others back (see `engine::protect`).
pub fn deletable<'v>(who: &Protection<'_>, live: &'v [Arc<Value>]) -> (Vec<&'v Value>, Vec<String>) {
    let mut held = Vec::new();
    let owned = live
        .iter()
        .map(|o| o.as_ref())
        .filter(|o| object::is_tracked_by(o, who.app_namespace, who.app_name))
        .filter(|o| match protect::guard(who, o, Removal::Cascade) {
            Some(g) => {
                held.push(g.message(o));
                false
            }
            None => true,
        })
        .collect();
    (owned, held)
}

/// Deletes every live object tracked by `who`'s Application that no guard holds (objects already
/// terminating are waited for). `live` must be the Application's instance objects from a complete
/// cache. This is the cascade's single I/O step: every delete goes through `cluster`.
pub async fn delete_tracked(
    cluster: &ClusterHandle,
    who: &Protection<'_>,
    live: &[Arc<Value>],
    propagation: Propagation,
) -> Result<Progress, ClusterError> {
    let (owned, _) = deletable(who, live);
    if owned.is_empty() {
        return Ok(Progress::Done);
    }
    let mut first_error = None;
    for obj in &owned {
        if obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null()) {
            continue;
        }
        if let Err(e) = delete_live(cluster, obj, propagation).await {
            first_error.get_or_insert(e);
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(Progress::Deleting(owned.len())),
    }
}

/// Removes `names` from `app`'s finalizers (a JSON patch guarded by the finalizers it read).
pub async fn remove_finalizers(api: &Api<Application>, app: &Application, names: &[&str]) -> Result<(), kube::Error> {
    let remaining: Vec<String> = app
        .finalizers()
        .iter()
        .filter(|f| !names.contains(&f.as_str()))
        .cloned()
        .collect();
    if remaining.len() == app.finalizers().len() {
        return Ok(());
    }
    super::delete_hooks::patch_finalizers(api, app, &remaining).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_objects_are_left_and_reported() {
        use serde_json::json;
        let tracked = |api: &str, kind: &str, ns: &str, name: &str, extra: Value| {
            let key = object::ObjectKey::of(&json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": name, "namespace": ns}}));
            let mut annotations = json!({"capstan.dev/tracking-id": format!("capstan-system/capstan-system:{key}")});
            if let (Some(a), Some(e)) = (annotations.as_object_mut(), extra.as_object()) {
                a.extend(e.clone());
            }
            Arc::new(json!({"apiVersion": api, "kind": kind,
                "metadata": {"name": name, "namespace": ns, "annotations": annotations}}))
        };
        let live = vec![
            tracked(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "applications.capstan.dev",
                json!({}),
            ),
            tracked(
                "apiextensions.k8s.io/v1",
                "CustomResourceDefinition",
                "",
                "widgets.example.com",
                json!({}),
            ),
            tracked("v1", "Namespace", "", "capstan-system", json!({})),
            tracked(
                "capstan.dev/v1alpha1",
                "Application",
                "capstan-system",
                "capstan-system",
                json!({}),
            ),
            tracked(
                "v1",
                "ConfigMap",
                "shop",
                "kept",
                json!({"helm.sh/resource-policy": "keep"}),
            ),
            tracked(
                "v1",
                "ConfigMap",
                "shop",
                "stays",
                json!({"capstan.dev/sync-options": "Delete=false"}),
            ),
            tracked("v1", "ConfigMap", "shop", "goes", json!({})),
            tracked(
                "capstan.dev/v1alpha1",
                "Application",
                "capstan-system",
                "user-app",
                json!({}),
            ),
        ];
        let who = Protection {
            operator_namespace: "capstan-system",
            app_namespace: "capstan-system",
            app_name: "capstan-system",
        };
        let (delete, held) = deletable(&who, &live);
        let names: Vec<&str> = delete.iter().map(|o| object::name(o)).collect();
        assert_eq!(names, ["goes", "user-app"]);
        let guards: Vec<&str> = held.iter().map(|m| m.split(' ').nth(1).unwrap_or_default()).collect();
        assert_eq!(
            guards,
            [
                "CapstanCRD",
                "CustomResourceDefinition",
                "OperatorNamespace",
                "SelfApplication",
                "HelmResourcePolicyKeep",
                "DeleteFalse"
            ]
        );
    }

    #[test]
    fn propagation_follows_the_finalizers() {
        let f = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(propagation(&f(&[RESOURCES_FINALIZER])), Propagation::Foreground);
        assert_eq!(propagation(&f(&[ARGO_FINALIZER_BACKGROUND])), Propagation::Background);
        assert_eq!(
            propagation(&f(&[RESOURCES_FINALIZER_BACKGROUND])),
            Propagation::Background
        );
        assert_eq!(
            propagation(&f(&[RESOURCES_FINALIZER_BACKGROUND, ARGO_FINALIZER])),
            Propagation::Foreground
        );
    }
}
