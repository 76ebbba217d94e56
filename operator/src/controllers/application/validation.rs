//! The check before a sync's first write (`Step::Validate`), made on the client where it can be.
//!
//! Every object of the step is checked against the schema the destination cluster publishes for its kind
//! (`/openapi/v3`, cached per cluster by `cluster::openapi`, checked by `engine::schema`), with no API request
//! per object. An object goes to a server-side dry run instead, exactly as every object did before, when:
//! - it has `Validate=server` or `Validate=false` (the latter keeps its meaning: a dry run with
//!   `fieldValidation=Ignore`);
//! - its kind is not served yet (a CRD created by the same sync) or has no published schema;
//! - its schema has rules the client does not evaluate (CEL, patterns, ...);
//! - its namespace does not exist and is not created by this sync (the server's error says so).
//!
//! An object the client finds invalid fails the check with the field paths, as the server's dry run did;
//! before that, the schema is fetched again if the cluster publishes a newer one (rate limited), so a CRD
//! changed since it was cached does not refuse an object the server would take. So an invalid object still
//! stops the sync before anything is written, and a valid Application of known kinds costs one namespace
//! read instead of one dry-run request per object.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Namespace;
use kube::core::GroupVersionKind;
use kube::Api;

use crate::cluster::discovery::gvk_of;
use crate::cluster::ClusterHandle;
use crate::engine::object;
use crate::engine::plan::{Actions, ApplyAction, Outcome};
use crate::engine::schema::Verdict;

use super::executor::{self, display, Owner};

/// Validates the dry-run applies of a `Step::Validate`: on the client where it can, by server-side dry runs
/// for the rest (see the module doc).
pub async fn validate(cluster: &ClusterHandle, owner: Owner<'_>, actions: &Actions) -> Outcome {
    let mut outcome = Outcome::default();
    let mut namespaces = HashMap::new();
    let mut server = Vec::new();
    for a in &actions.apply {
        match client_side(cluster, a, &mut namespaces).await {
            Some(result) => {
                outcome.applied.insert(a.id.clone(), result);
            }
            None => server.push(a.clone()),
        }
    }
    if !server.is_empty() {
        tracing::debug!(count = server.len(), "objects validated by server-side dry run");
        let rest = Actions {
            apply: server,
            ..Actions::default()
        };
        outcome
            .applied
            .extend(executor::execute(cluster, owner, &rest).await.applied);
    }
    outcome
}

/// `Some(Ok(message))` when the object passed the client-side check, `Some(Err(message))` when it failed it
/// (`invalid: <object>: <path>: <what>; ...`); `None`: ask the server.
async fn client_side(
    cluster: &ClusterHandle,
    a: &ApplyAction,
    namespaces: &mut HashMap<String, bool>,
) -> Option<Result<String, String>> {
    if !a.validate || a.server_validation {
        return None;
    }
    let gvk = gvk_of(&a.object).ok()?;
    let kind = cluster.discovery().resolve(&gvk).await.ok()?;
    if kind.namespaced && !namespace_ready(cluster, a, namespaces).await {
        return None;
    }
    let doc = cluster.schemas().schema_for(&gvk).await?;
    let redact = is_secret(&gvk);
    let mut verdict = doc.validate(&a.object, redact);
    if matches!(verdict, Verdict::Invalid(_)) {
        if let Some(newer) = cluster.schemas().newer_than(&gvk, &doc).await {
            verdict = newer.validate(&a.object, redact);
        }
    }
    let what = display(&a.object);
    match verdict {
        Verdict::Valid => Some(Ok(format!("{what} valid (cluster schema)"))),
        Verdict::Invalid(errors) => {
            let list: Vec<String> = errors.iter().map(ToString::to_string).collect();
            Some(Err(format!("invalid: {what}: {}", list.join("; "))))
        }
        Verdict::Unchecked(why) => {
            tracing::debug!(object = %what, why = %why, "schema not fully checkable on the client; server dry run");
            None
        }
    }
}

/// Whether the object's namespace exists, or is created by this sync (`skip_dry_run_if_missing`); read once
/// per namespace and step, with the operator's identity (a tenant's deployer may not read Namespaces). A
/// failed read answers false: the server dry run decides.
async fn namespace_ready(cluster: &ClusterHandle, a: &ApplyAction, known: &mut HashMap<String, bool>) -> bool {
    let ns = object::namespace(&a.object);
    if ns.is_empty() {
        return false;
    }
    if !known.contains_key(ns) {
        let api: Api<Namespace> = Api::all(cluster.reader().clone());
        let exists = matches!(api.get_opt(ns).await, Ok(Some(_)));
        known.insert(ns.to_string(), exists);
    }
    known[ns] || a.skip_dry_run_if_missing
}

fn is_secret(gvk: &GroupVersionKind) -> bool {
    gvk.group.is_empty() && gvk.kind == "Secret"
}

#[cfg(test)]
mod tests;
