//! The check before a sync's first write (`Step::Validate`), made on the client where it can be.
//!
//! Every object of the step is checked against the schema the destination cluster publishes for its kind
//! (`/openapi/v3`, cached per cluster by `cluster::openapi`, checked by `engine::schema`), with no API request
//! per object. An object goes to a server-side dry run instead, exactly as every object did before, when:
//! - it has `Validate=server` or `Validate=false` (the latter keeps its meaning: a dry run with
//!   `fieldValidation=Ignore`);
//! - the sync runs as a ServiceAccount (an impersonating handle: a tenant's Application). Its dry runs are
//!   authorized as that ServiceAccount, so they also prove, before the first write, that it may write every
//!   object where it goes (a hook in a namespace it may not write fails the sync before anything is applied);
//!   a schema check on the client cannot;
//! - its kind is not served yet (a CRD created by the same sync) or has no published schema;
//! - its schema has rules the client does not evaluate (CEL, patterns, ...);
//! - it is the first object of its namespace in the step and the namespace is not known to exist: the
//!   server's dry run of that one object says whether it does, with a request inside the namespace. A
//!   namespace is known to exist when it is the Application's own, when an object of the step already lives
//!   there (live cache), when this sync creates it, or, for a cluster-wide installation, when a read of the
//!   Namespace finds it (one per namespace and step). A namespaced installation never reads Namespaces: it
//!   has no right to, and sends no request outside its namespaces.
//!
//! An object the client finds invalid fails the check with the field paths, as the server's dry run did;
//! before that, the schema is fetched again if the cluster publishes a newer one (rate limited), so a CRD
//! changed since it was cached does not refuse an object the server would take. So an invalid object still
//! stops the sync before anything is written, and a valid Application of known kinds costs at most one
//! request per namespace instead of one dry run per object.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::Namespace;
use kube::core::GroupVersionKind;
use kube::Api;

use crate::cluster::discovery::gvk_of;
use crate::cluster::scope::WatchScope;
use crate::cluster::ClusterHandle;
use crate::engine::object::{self, ObjectKey};
use crate::engine::plan::{Actions, ApplyAction, Outcome};
use crate::engine::schema::Verdict;

use super::executor::{self, display, Owner};

/// Validates the dry-run applies of a `Step::Validate`: on the client where it can, by server-side dry runs
/// for the rest (see the module doc).
pub async fn validate(cluster: &ClusterHandle, owner: Owner<'_>, actions: &Actions) -> Outcome {
    let mut outcome = Outcome::default();
    let mut namespaces = Namespaces::of(cluster, owner, actions);
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
    namespaces: &mut Namespaces,
) -> Option<Result<String, String>> {
    if !a.validate || a.server_validation || cluster.identity().is_some() {
        return None;
    }
    let gvk = gvk_of(&a.object).ok()?;
    let kind = cluster.discovery().resolve(&gvk).await.ok()?;
    if kind.namespaced && !namespaces.ready(cluster, a).await {
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

/// What the step knows of its objects' namespaces, to decide which object's dry run checks that its namespace
/// exists.
struct Namespaces {
    /// Namespace → whether it is known to exist: the Application's own, those where an object of the step
    /// already lives (live cache), and those read so far.
    known: HashMap<String, bool>,
    /// Namespaces whose first object of the step was sent to the server's dry run.
    probed: HashSet<String>,
    /// Whether Namespaces may be read (a cluster-wide installation).
    may_read: bool,
}

impl Namespaces {
    fn of(cluster: &ClusterHandle, owner: Owner<'_>, actions: &Actions) -> Self {
        let lives = |a: &&ApplyAction| {
            gvk_of(&a.object).is_ok_and(|gvk| cluster.live().get(&gvk, &ObjectKey::of(&a.object)).is_some())
        };
        let known = actions
            .apply
            .iter()
            .filter(lives)
            .map(|a| object::namespace(&a.object))
            .chain([owner.namespace])
            .filter(|ns| !ns.is_empty())
            .map(|ns| (ns.to_string(), true))
            .collect();
        Namespaces {
            known,
            probed: HashSet::new(),
            may_read: *cluster.live().scope() == WatchScope::Cluster,
        }
    }

    /// Whether the client may check `a` (namespaced): its namespace exists, is created by this sync
    /// (`skip_dry_run_if_missing`), or the step's first object in it went to the server. False (once per
    /// namespace not known to exist): ask the server, which refuses the object if the namespace is missing.
    async fn ready(&mut self, cluster: &ClusterHandle, a: &ApplyAction) -> bool {
        let ns = object::namespace(&a.object);
        if ns.is_empty() {
            return false;
        }
        if a.skip_dry_run_if_missing || self.exists(cluster, ns).await {
            return true;
        }
        !self.probed.insert(ns.to_string())
    }

    /// Whether `ns` is known to exist, read once per step with the operator's identity when the installation
    /// may read Namespaces. A failed read answers false.
    async fn exists(&mut self, cluster: &ClusterHandle, ns: &str) -> bool {
        if !self.may_read {
            return self.known.get(ns).copied().unwrap_or(false);
        }
        if !self.known.contains_key(ns) {
            let api: Api<Namespace> = Api::all(cluster.reader().clone());
            let exists = matches!(api.get_opt(ns).await, Ok(Some(_)));
            self.known.insert(ns.to_string(), exists);
        }
        self.known[ns]
    }
}

fn is_secret(gvk: &GroupVersionKind) -> bool {
    gvk.group.is_empty() && gvk.kind == "Secret"
}

#[cfg(test)]
mod tests;
