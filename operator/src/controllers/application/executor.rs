//! Performs a sync step's [`Actions`] against the destination through `cluster::ops`, in the order the
//! planner documents (finalizer removal, prunes, hook deletions, applies, deletions on success), and
//! reports what happened as an [`Outcome`] for `engine::plan::record_outcome`.
//!
//! Every applied object gets label `capstan.dev/app-instance` and annotation `capstan.dev/tracking-id`
//! (when the action asks for tracking). Prunes and deletions carry the live object's uid as a
//! precondition when known, and the planner only ever prunes objects whose tracking id names this
//! Application; the executor re-checks that on the live object before deleting (defence in depth).
//!
//! A CustomResourceDefinition applied in a step is waited for (bounded by [`ESTABLISH_WAIT`]) until
//! the API server reports it Established, before anything after it is applied: the custom resources
//! of a new CRD need their type served, and an upgrade by commit (a new CRD version or column with
//! the operator's new image in the same wave) must reach the cluster CRD first, then the workload.

use futures::StreamExt;
use kube::api::{DynamicObject, Patch};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::{json, Value};

use crate::cluster::ops::{self, ApplyOptions, DeleteOptions, DeleteOutcome};
use crate::cluster::{ClusterError, ClusterHandle};
use crate::controllers::status::patch_params;
use crate::engine::object;
use crate::engine::plan::{
    Actions, ApplyAction, ApplyMode, DeleteAction, ObjectRef, Outcome, Propagation, PruneAction, HOOK_FINALIZER,
};

use super::compare::with_tracking;

/// Who is syncing: the Application's namespace and name (for tracking metadata and the ownership check).
#[derive(Clone, Copy, Debug)]
pub struct Owner<'a> {
    /// Namespace of the Application.
    pub namespace: &'a str,
    /// Name of the Application.
    pub name: &'a str,
    /// The operator's namespace (self-protection).
    pub operator_namespace: &'a str,
}

/// Applies in flight at once within one kind (Argo CD runs a wave's tasks concurrently, at most
/// `--kubectl-parallelism-limit` = 20 kubectl processes).
const APPLY_CONCURRENCY: usize = 16;
/// Longest wait for the CRDs of one step to be Established (kube-apiserver takes milliseconds; a CRD
/// that never gets there, e.g. with clashing names, fails its custom resources' applies instead).
const ESTABLISH_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// Pause between two looks at a CRD that is not Established yet.
const ESTABLISH_POLL: std::time::Duration = std::time::Duration::from_millis(100);

/// `group/kind` of an object, the unit whose applies may run concurrently.
fn group_kind(obj: &Value) -> (String, String) {
    let (group, _) = object::group_version(obj);
    (group, object::kind(obj).to_string())
}

/// Executes `actions` in order; see the module doc.
pub async fn execute(cluster: &ClusterHandle, owner: Owner<'_>, actions: &Actions) -> Outcome {
    let mut outcome = Outcome::default();
    for target in &actions.remove_finalizers {
        if let Err(e) = remove_hook_finalizer(cluster, target).await {
            tracing::debug!(error = %e, "removing the hook finalizer failed; retried by a later step");
        }
    }
    for p in &actions.prune {
        let result = prune(cluster, owner, p).await;
        outcome.pruned.insert(p.id.clone(), result);
    }
    if outcome.pruned.values().any(Result::is_err) {
        return outcome;
    }
    for d in &actions.delete {
        outcome.deleted.insert(d.id.clone(), delete_hook(cluster, d).await);
    }
    if outcome.deleted.values().any(Result::is_err) {
        return outcome;
    }
    // Applies run concurrently within a run of consecutive objects of one kind: the planner's order
    // (kind order, Namespaces and CRDs bubbled in front of their first dependent) is kept between
    // kinds, and one round trip per object no longer adds up for large applications.
    let mut rest = actions.apply.as_slice();
    while let Some(first) = rest.first() {
        let kind = group_kind(&first.object);
        let n = rest.iter().take_while(|a| group_kind(&a.object) == kind).count();
        let (group, tail) = rest.split_at(n);
        // Futures made as the buffer takes them: each one holds a whole request's state, so making a
        // thousand up front (one large Application) held megabytes per sync (heap profile of S1).
        // (By index: a closure taking `&ApplyAction` trips the compiler's `Send` check of the reconcile.)
        let results: Vec<_> = futures::stream::iter(0..group.len())
            .map(|i| apply_tagged(cluster, owner, &group[i]))
            .buffer_unordered(APPLY_CONCURRENCY)
            .collect()
            .await;
        let mut stored = Vec::new();
        for (id, result, live) in results {
            outcome.applied.insert(id, result);
            stored.extend(live);
        }
        if kind == crd_kind() && !tail.is_empty() {
            wait_established(cluster, &stored).await;
        }
        outcome.live.extend(stored);
        rest = tail;
    }
    let all_ok = outcome.applied.values().all(Result::is_ok);
    if all_ok {
        for d in &actions.delete_on_success {
            outcome.deleted.insert(d.id.clone(), delete_hook(cluster, d).await);
        }
    }
    outcome
}

fn crd_kind() -> (String, String) {
    ("apiextensions.k8s.io".into(), "CustomResourceDefinition".into())
}

/// Waits until every CRD in `applied` (as the server stored them) is Established, re-reading those
/// that are not, for at most [`ESTABLISH_WAIT`]; what is still not Established then is logged and the
/// step goes on (its custom resources' applies will say why).
async fn wait_established(cluster: &ClusterHandle, applied: &[Value]) {
    let gvk = GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition");
    let mut pending: Vec<&str> = applied
        .iter()
        .filter(|crd| !is_established(crd))
        .map(object::name)
        .collect();
    let deadline = tokio::time::Instant::now() + ESTABLISH_WAIT;
    while !pending.is_empty() && tokio::time::Instant::now() < deadline {
        let mut still = Vec::new();
        for name in pending {
            match ops::get(cluster, &gvk, "", name).await {
                Ok(Some(crd)) if is_established(&crd) => {}
                Ok(None) => {}
                _ => still.push(name),
            }
        }
        pending = still;
        if !pending.is_empty() {
            tokio::time::sleep(ESTABLISH_POLL).await;
        }
    }
    if !pending.is_empty() {
        tracing::warn!(crds = ?pending, "CustomResourceDefinitions not Established in time; applying the rest of the step");
    }
}

/// Whether the API server serves the CRD (`Established=True`; the CRD health check's rule).
fn is_established(crd: &Value) -> bool {
    crate::engine::health::assess(crd).is_some_and(|h| h.status == crate::api::application::HealthStatusCode::Healthy)
}

/// [`apply`], with the action's id and, for a real apply, the object the server returned.
async fn apply_tagged(
    cluster: &ClusterHandle,
    owner: Owner<'_>,
    a: &ApplyAction,
) -> (String, Result<String, String>, Option<Value>) {
    let (result, live) = match apply(cluster, owner, a).await {
        Ok((message, live)) => (Ok(message), live),
        Err(e) => (Err(e), None),
    };
    (a.id.clone(), result, live)
}

/// Applies one object (tracking metadata added when asked): kubectl's message
/// (`deployment.apps/web serverside-applied`) and, unless it was a dry run, the object as stored.
pub async fn apply(
    cluster: &ClusterHandle,
    owner: Owner<'_>,
    a: &ApplyAction,
) -> Result<(String, Option<Value>), String> {
    let obj = if a.track {
        with_tracking(&a.object, owner.namespace, owner.name)
    } else {
        a.object.clone()
    };
    let what = display(&obj);
    let result = match a.mode {
        ApplyMode::ServerSideApply { force_conflicts, .. } => {
            let opts = ApplyOptions {
                dry_run: a.dry_run,
                force: force_conflicts,
                validate: Some(a.validate),
                ..ApplyOptions::default()
            };
            ops::apply(cluster, &obj, &opts)
                .await
                .map(|v| ("serverside-applied", Some(v)))
        }
        ApplyMode::Create => ops::create(cluster, &obj, a.dry_run)
            .await
            .map(|v| ("created", Some(v))),
        ApplyMode::Replace { force: true } if !a.dry_run => {
            recreate(cluster, &obj).await.map(|v| ("replaced", Some(v)))
        }
        ApplyMode::Replace { .. } => ops::replace(cluster, &obj, a.dry_run)
            .await
            .map(|(v, _)| ("replaced", Some(v))),
    };
    match result {
        Ok((verb, _)) if a.dry_run => Ok((format!("{what} {verb} (dry run)"), None)),
        Ok((verb, live)) => Ok((format!("{what} {verb}"), live)),
        // Created by someone else meanwhile: the stored object is not known here.
        Err(ClusterError::Conflict(_)) if matches!(a.mode, ApplyMode::Create) => Ok((format!("{what} created"), None)),
        Err(e @ (ClusterError::UnknownKind(_) | ClusterError::NotFound(_)))
            if a.dry_run && a.skip_dry_run_if_missing =>
        {
            tracing::debug!(error = %e, "dry run skipped for a kind or namespace created by this sync");
            Ok((format!("{what} dry run skipped"), None))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// `Replace=true,Force=true`: delete (background) and create again.
async fn recreate(cluster: &ClusterHandle, obj: &Value) -> Result<Value, ClusterError> {
    let gvk = gvk(&ObjectRef::of(obj))?;
    let opts = DeleteOptions {
        propagation: Propagation::Background,
        ..DeleteOptions::default()
    };
    ops::delete(cluster, &gvk, object::namespace(obj), object::name(obj), &opts).await?;
    ops::create(cluster, obj, false).await
}

/// Prunes one object, but only if the live object's tracking id still names this Application.
async fn prune(cluster: &ClusterHandle, owner: Owner<'_>, p: &PruneAction) -> Result<String, String> {
    let gvk = gvk(&p.target).map_err(|e| e.to_string())?;
    let live = ops::get(cluster, &gvk, &p.target.namespace, &p.target.name)
        .await
        .map_err(|e| e.to_string())?;
    let Some(live) = live else {
        return Ok("pruned".into());
    };
    if !object::is_tracked_by(&live, owner.namespace, owner.name) {
        return Err(format!(
            "{} is not tracked by this Application; not deleted",
            display(&live)
        ));
    }
    let opts = DeleteOptions {
        propagation: p.propagation,
        uid: uid(&live),
        dry_run: false,
    };
    match ops::delete(cluster, &gvk, &p.target.namespace, &p.target.name, &opts).await {
        Ok(_) => Ok("pruned".into()),
        Err(ClusterError::NotFound(_)) => Ok("pruned".into()),
        Err(e) => Err(e.to_string()),
    }
}

async fn delete_hook(cluster: &ClusterHandle, d: &DeleteAction) -> Result<String, String> {
    let gvk = gvk(&d.target).map_err(|e| e.to_string())?;
    let opts = DeleteOptions {
        propagation: d.propagation,
        ..DeleteOptions::default()
    };
    match ops::delete(cluster, &gvk, &d.target.namespace, &d.target.name, &opts).await {
        Ok(DeleteOutcome::Deleted | DeleteOutcome::NotFound | DeleteOutcome::Deleting(_)) => Ok("deleted".into()),
        Err(ClusterError::NotFound(_)) => Ok("deleted".into()),
        Err(e) => Err(e.to_string()),
    }
}

/// Removes [`HOOK_FINALIZER`] from a completed hook: a merge patch of `metadata.finalizers` guarded by
/// the live `resourceVersion` (a concurrent change makes it a `Conflict`, retried later).
async fn remove_hook_finalizer(cluster: &ClusterHandle, target: &ObjectRef) -> Result<(), ClusterError> {
    let gvk = gvk(target)?;
    let Some(live) = ops::get(cluster, &gvk, &target.namespace, &target.name).await? else {
        return Ok(());
    };
    let remaining: Vec<Value> = live
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|f| {
            f.iter()
                .filter(|v| v.as_str() != Some(HOOK_FINALIZER))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let rv = live
        .pointer("/metadata/resourceVersion")
        .cloned()
        .unwrap_or(Value::Null);
    let kind = cluster.discovery().resolve(&gvk).await?;
    let api: Api<DynamicObject> = if kind.namespaced {
        Api::namespaced_with(cluster.client().clone(), &target.namespace, &kind.resource)
    } else {
        Api::all_with(cluster.client().clone(), &kind.resource)
    };
    let patch = json!({"metadata": {"finalizers": remaining, "resourceVersion": rv}});
    api.patch(&target.name, &patch_params(), &Patch::Merge(&patch))
        .await
        .map(|_| ())
        .map_err(|e| ClusterError::from_kube(e, "remove hook finalizer", false))
}

fn gvk(target: &ObjectRef) -> Result<GroupVersionKind, ClusterError> {
    let (group, version) = match target.api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", target.api_version.as_str()),
    };
    if version.is_empty() || target.kind.is_empty() {
        return Err(ClusterError::Invalid(format!(
            "object {}/{} without apiVersion or kind",
            target.kind, target.name
        )));
    }
    Ok(GroupVersionKind::gvk(group, version, &target.kind))
}

fn uid(obj: &Value) -> Option<String> {
    obj.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string)
}

/// `deployment.apps/web`, `configmap/settings` (kubectl's resource/name form).
pub fn display(obj: &Value) -> String {
    let (group, _) = object::group_version(obj);
    let kind = object::kind(obj).to_ascii_lowercase();
    let name = if object::name(obj).is_empty() {
        object::generate_name(obj).unwrap_or_default()
    } else {
        object::name(obj)
    };
    if group.is_empty() {
        format!("{kind}/{name}")
    } else {
        format!("{kind}.{group}/{name}")
    }
}
