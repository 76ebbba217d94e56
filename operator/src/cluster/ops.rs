//! Writes and reads against one cluster: server-side apply (and its dry-run, for diff), replace, create
//! (hooks with `generateName`), delete with propagation and a uid precondition, get.
//!
//! Objects are `serde_json::Value`s of any kind; group/version/kind resolve through the cluster's discovery,
//! so the scope (namespaced or not) is the server's, never the manifest's: a namespace on a cluster-scoped
//! object is dropped, a namespaced object without one is refused (the engine fills in the destination
//! namespace before it gets here). Every call runs under the cluster's call deadline. Errors about Secrets
//! keep only the API's reason and code (its message can quote the offending value).

use std::sync::Arc;

use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy};
use kube::core::GroupVersionKind;
use kube::Api;
use serde_json::Value;

use super::clients::ClusterHandle;
use super::discovery::{display_gvk, gvk_of, ResolvedKind};
use super::{with_deadline, ClusterError, FIELD_MANAGER};
use crate::engine::object;

/// How to apply.
#[derive(Clone, Debug)]
pub struct ApplyOptions {
    /// Server-side dry run: validated and defaulted by the server, never persisted.
    pub dry_run: bool,
    /// Take ownership of fields other managers own (forced by default: Git is the source of truth).
    pub force: bool,
    /// `fieldValidation`: `Some(true)` is `Strict` (kubectl's default since 1.27, what Argo CD's
    /// `Validate=true` means: unknown or duplicate fields fail the write), `Some(false)` is `Ignore`
    /// (`Validate=false`), `None` leaves the server's default (`Warn`).
    pub validate: Option<bool>,
    /// The field manager (`capstan` for the operator, `capstan-bootstrap` for the CLI).
    pub field_manager: &'static str,
}

impl Default for ApplyOptions {
    fn default() -> Self {
        ApplyOptions {
            dry_run: false,
            force: true,
            validate: None,
            field_manager: FIELD_MANAGER,
        }
    }
}

/// Deletion propagation (Argo CD's `PrunePropagationPolicy`), as the planner decides it.
pub use crate::engine::plan::Propagation;

/// How to delete.
#[derive(Clone, Debug, Default)]
pub struct DeleteOptions {
    pub propagation: Propagation,
    /// Delete only if the live object still has this uid (a same-named replacement is left alone).
    pub uid: Option<String>,
    pub dry_run: bool,
}

/// What a delete did.
#[derive(Clone, Debug, PartialEq)]
pub enum DeleteOutcome {
    /// Gone at once.
    Deleted,
    /// Accepted; the object still exists (finalizers or foreground dependents) and is returned.
    Deleting(Value),
    /// There was nothing to delete.
    NotFound,
}

/// What a replace did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplaceOutcome {
    Created,
    Replaced,
}

/// Server-side apply with field manager `capstan`; returns the object as the server has (or, in a dry
/// run, would have) it.
pub async fn apply(cluster: &ClusterHandle, obj: &Value, opts: &ApplyOptions) -> Result<Value, ClusterError> {
    let target = Target::of(cluster, obj).await?;
    let name = target.require_name(obj)?;
    let mut params = PatchParams::apply(opts.field_manager);
    params.force = opts.force;
    params.dry_run = opts.dry_run;
    params = match opts.validate {
        Some(true) => params.validation_strict(),
        Some(false) => params.validation_ignore(),
        None => params,
    };
    let body = target.body(obj);
    let context = target.context("apply", name);
    let api = target.api(cluster);
    call(cluster, &context, target.redact, async {
        api.patch(name, &params, &Patch::Apply(&body)).await
    })
    .await
    .map(|o| target.to_value(o))
}

/// A dry-run server-side apply, for server-side diff: what the object would become.
pub async fn dry_run_apply(cluster: &ClusterHandle, obj: &Value) -> Result<Value, ClusterError> {
    apply(
        cluster,
        obj,
        &ApplyOptions {
            dry_run: true,
            ..ApplyOptions::default()
        },
    )
    .await
}

/// `Replace=true`: create the object, or replace the live one wholesale (with its resourceVersion, so a
/// concurrent change is a `Conflict`, not a lost update).
pub async fn replace(
    cluster: &ClusterHandle,
    obj: &Value,
    dry_run: bool,
) -> Result<(Value, ReplaceOutcome), ClusterError> {
    let target = Target::of(cluster, obj).await?;
    let name = target.require_name(obj)?;
    let api = target.api(cluster);
    let params = post_params(dry_run);
    let get_context = target.context("get", name);
    let live = call(cluster, &get_context, target.redact, async { api.get_opt(name).await }).await?;
    let mut body = target.body(obj);
    let Some(live) = live else {
        let context = target.context("create", name);
        let dynamic = to_dynamic(&body, &context)?;
        let created = call(cluster, &context, target.redact, async {
            api.create(&params, &dynamic).await
        })
        .await?;
        return Ok((target.to_value(created), ReplaceOutcome::Created));
    };
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        let rv = live.metadata.resource_version.clone().unwrap_or_default();
        meta.insert("resourceVersion".into(), Value::String(rv));
    }
    let context = target.context("replace", name);
    let dynamic = to_dynamic(&body, &context)?;
    let replaced = call(cluster, &context, target.redact, async {
        api.replace(name, &params, &dynamic).await
    })
    .await?;
    Ok((target.to_value(replaced), ReplaceOutcome::Replaced))
}

/// Create (hooks): `metadata.generateName` lets the server pick the name. `Conflict` if it exists.
pub async fn create(cluster: &ClusterHandle, obj: &Value, dry_run: bool) -> Result<Value, ClusterError> {
    let target = Target::of(cluster, obj).await?;
    let shown = object::generate_name(obj)
        .map(|g| format!("{g}*"))
        .unwrap_or_else(|| object::name(obj).into());
    if shown.is_empty() {
        return Err(ClusterError::Invalid(format!(
            "create {}: object without name or generateName",
            target.what
        )));
    }
    let context = target.context("create", &shown);
    let dynamic = to_dynamic(&target.body(obj), &context)?;
    let api = target.api(cluster);
    let params = post_params(dry_run);
    call(cluster, &context, target.redact, async {
        api.create(&params, &dynamic).await
    })
    .await
    .map(|o| target.to_value(o))
}

/// Delete `namespace/name` of `gvk` (`namespace` ignored for cluster-scoped kinds).
pub async fn delete(
    cluster: &ClusterHandle,
    gvk: &GroupVersionKind,
    namespace: &str,
    name: &str,
    opts: &DeleteOptions,
) -> Result<DeleteOutcome, ClusterError> {
    let target = Target::for_kind(cluster, gvk, namespace).await?;
    let params = DeleteParams {
        dry_run: opts.dry_run,
        propagation_policy: Some(match opts.propagation {
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: opts.uid.as_ref().map(|uid| Preconditions {
            uid: Some(uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let context = target.context("delete", name);
    let api = target.api(cluster);
    let result = call(cluster, &context, target.redact, async {
        api.delete(name, &params).await
    })
    .await;
    match result {
        // The server answers with the object when it lingers (finalizers, foreground dependents), and may
        // also return the final state of an object that is already gone: only a deletionTimestamp says
        // "still there".
        Ok(either) => Ok(match either.left() {
            Some(obj) if obj.metadata.deletion_timestamp.is_some() => DeleteOutcome::Deleting(target.to_value(obj)),
            _ => DeleteOutcome::Deleted,
        }),
        Err(ClusterError::NotFound(_)) => Ok(DeleteOutcome::NotFound),
        Err(e) => Err(e),
    }
}

/// The live object, or `None` when it does not exist.
pub async fn get(
    cluster: &ClusterHandle,
    gvk: &GroupVersionKind,
    namespace: &str,
    name: &str,
) -> Result<Option<Value>, ClusterError> {
    let target = Target::for_kind(cluster, gvk, namespace).await?;
    let context = target.context("get", name);
    let api = target.api(cluster);
    call(cluster, &context, target.redact, async { api.get_opt(name).await })
        .await
        .map(|o| o.map(|o| target.to_value(o)))
}

/// Where a request goes: the resolved kind and the namespace the server's scope calls for.
struct Target {
    kind: Arc<ResolvedKind>,
    namespace: Option<String>,
    redact: bool,
    what: String,
}

impl Target {
    async fn of(cluster: &ClusterHandle, obj: &Value) -> Result<Target, ClusterError> {
        let gvk = gvk_of(obj)?;
        Self::for_kind(cluster, &gvk, object::namespace(obj)).await
    }

    async fn for_kind(
        cluster: &ClusterHandle,
        gvk: &GroupVersionKind,
        namespace: &str,
    ) -> Result<Target, ClusterError> {
        let kind = cluster.discovery().resolve(gvk).await?;
        let what = display_gvk(gvk);
        let namespace = if kind.namespaced {
            if namespace.is_empty() {
                return Err(ClusterError::Invalid(format!(
                    "{what} is namespaced but the object has no namespace"
                )));
            }
            Some(namespace.to_string())
        } else {
            None
        };
        let redact = gvk.group.is_empty() && gvk.kind == "Secret";
        Ok(Target {
            kind,
            namespace,
            redact,
            what,
        })
    }

    fn api(&self, cluster: &ClusterHandle) -> Api<DynamicObject> {
        let client = cluster.client().clone();
        match &self.namespace {
            Some(ns) => Api::namespaced_with(client, ns, &self.kind.resource),
            None => Api::all_with(client, &self.kind.resource),
        }
    }

    /// `verb group/version/Kind namespace/name`, for messages.
    fn context(&self, verb: &str, name: &str) -> String {
        match &self.namespace {
            Some(ns) => format!("{verb} {} {ns}/{name}", self.what),
            None => format!("{verb} {} {name}", self.what),
        }
    }

    fn require_name<'a>(&self, obj: &'a Value) -> Result<&'a str, ClusterError> {
        let name = object::name(obj);
        if name.is_empty() {
            return Err(ClusterError::Invalid(format!(
                "{}: object without metadata.name",
                self.what
            )));
        }
        Ok(name)
    }

    /// The request body: the manifest with the scope's namespace (dropped for cluster-scoped kinds).
    fn body(&self, obj: &Value) -> Value {
        let mut body = obj.clone();
        if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
            match &self.namespace {
                Some(ns) => {
                    meta.insert("namespace".into(), Value::String(ns.clone()));
                }
                None => {
                    meta.remove("namespace");
                }
            }
        }
        body
    }

    /// A response object as a `Value`, with apiVersion/kind filled in (list items may lack them).
    fn to_value(&self, obj: DynamicObject) -> Value {
        dynamic_to_value(obj, &self.kind.resource)
    }
}

/// A `DynamicObject` as JSON with `apiVersion`/`kind` from the resource it was read through.
pub(crate) fn dynamic_to_value(obj: DynamicObject, resource: &kube::discovery::ApiResource) -> Value {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), Value::String(resource.api_version.clone()));
        map.insert("kind".into(), Value::String(resource.kind.clone()));
    }
    value
}

fn to_dynamic(body: &Value, context: &str) -> Result<DynamicObject, ClusterError> {
    serde_json::from_value(body.clone())
        .map_err(|_| ClusterError::Invalid(format!("{context}: object is not a valid Kubernetes object")))
}

fn post_params(dry_run: bool) -> PostParams {
    PostParams {
        dry_run,
        field_manager: Some(FIELD_MANAGER.to_string()),
    }
}

/// One API call under the cluster's call deadline, errors mapped (and redacted for Secrets).
async fn call<T>(
    cluster: &ClusterHandle,
    context: &str,
    redact: bool,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ClusterError> {
    with_deadline(cluster.timeouts().call, context, async {
        fut.await.map_err(|e| ClusterError::from_kube(e, context, redact))
    })
    .await
}
