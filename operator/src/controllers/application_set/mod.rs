//! ApplicationSet controller: generators × template → Applications, kept in step with Git and the
//! Cluster objects, with Argo CD's policies and progressive rollout.
//!
//! # Reconcile
//! `reconcile` runs named steps, each a function with a typed outcome:
//! 1. **inputs** (`inputs`, [`inputs`]): the Cluster objects the set may use (its namespace and the
//!    operator namespace) and the Repositories; for every `(repoURL, revision)` its Git generators
//!    name, a checkout scanned with the render layer's confinement rules. Refs are registered with
//!    the notifier.
//! 2. **generate** (`generate_all`; pure `crate::appset::generate`, off the async runtime): all or
//!    nothing. Templated repoURLs (matrix) that were not loaded are loaded and generation runs again
//!    (bounded rounds). A failure ends here (`generation_failed`).
//! 3. **validate** (`validate`, pure: [`apply::prepare`], [`apply::plan`]): namespace, ownership,
//!    `applicationsSync`, `ignoreApplicationDifferences` → a `Validated` plan. Any error: a
//!    condition, and nothing is written.
//! 4. **write** (`write`, [`apply::execute`]): server-side apply as `capstan-applicationset`;
//!    deletes only of Applications this set controls, only when `applicationsSync` allows and
//!    generation succeeded → `Written` (the set's Applications afterwards).
//! 5. **rollout** ([`rollout::advance`], RollingSync only): decide per step, set `operation.sync`.
//! 6. **status** (`finish`, [`status::compute`]): ONE status patch, none when unchanged; events on
//!    creates/updates/deletes and generation failures; metrics. A failure of steps 2–4 is returned
//!    as the reconcile's error after this write, so the backoff and the metrics see it.
//!
//! **A generator that fails is never "zero Applications"**: any `Err` (unreachable repository, git
//! error, API error, template error) returns before step 4 and every existing Application stays.
//!
//! # Triggers
//! Spec changes, refresh annotations (`capstan.dev/application-set-refresh` /
//! `argocd.argoproj.io/application-set-refresh: "true"`, removed once handled) and deletion of
//! the set; changes of the Applications it owns; Cluster changes in namespaces it may use; new
//! commits on the refs its Git generators read (the [`RevisionNotifier`]); and a periodic requeue
//! (`requeueAfterSeconds` of its Git generators, default 3 min; the reconcile interval otherwise).
//!
//! [`RevisionNotifier`]: crate::controllers::notifier::RevisionNotifier

pub mod apply;
pub mod inputs;
pub mod rollout;
pub mod status;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ListParams, Patch};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::error::{Error, KubeStep};
use super::notifier::{on_new_commits, owner_key};
use super::status::{find_condition, now, patch_params, write_status, MAX_MESSAGE_LEN};
use super::{lock, ns_name, run_controller, Context, Shutdown};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::stores::Stores;
use crate::api::application_set::{
    ApplicationSet, ApplicationSetApplicationStatus, ApplicationSetResource, ApplicationSetStatus, StrategyType,
};
use crate::api::conditions::{CONDITION_ERROR_OCCURRED, STATUS_TRUE};
use crate::api::labels::{APPLICATION_SET_REFRESH_ANNOTATION, ARGOCD_APPLICATION_SET_REFRESH_ANNOTATION};
use crate::api::{Application, Cluster, Repository};
use crate::appset::{generate, referenced_repositories, AppSetError, GeneratedApp, Inputs, Limits};
use crate::metrics::InfoSeries;
use crate::text::truncate;
use inputs::{CheckoutTrees, TreeCache};
use status::{Observed, Outcome};

/// The controller's name in `--controllers`, metrics and logs.
pub const CONTROLLER: &str = "applicationset";
/// Argo CD's default `requeueAfterSeconds` of Git generators.
pub const GIT_REQUEUE: Duration = Duration::from_secs(180);
/// Requeue while a RollingSync is progressing (owned Application changes usually come first).
pub const ROLLOUT_REQUEUE: Duration = Duration::from_secs(10);
/// Most generation rounds (templated repoURLs discovered per round).
const MAX_GIT_ROUNDS: usize = 4;
/// Names listed in one event note.
const MAX_NAMES_IN_EVENT: usize = 20;

/// Controller-local state shared by reconciles (memory only).
pub struct State {
    stores: Stores,
    trees: TreeCache,
    forced: Mutex<HashSet<String>>,
    info: InfoSeries,
    trigger: mpsc::UnboundedSender<ObjectRef<ApplicationSet>>,
    /// Generation limits (tests and benchmarks lower or raise them).
    pub limits: Limits,
}

impl State {
    /// A fresh state and the stream of sets to reconcile now (new commits).
    pub fn new() -> (Arc<State>, mpsc::UnboundedReceiver<ObjectRef<ApplicationSet>>) {
        let (trigger, rx) = mpsc::unbounded_channel();
        let state = State {
            stores: Stores::default(),
            trees: TreeCache::default(),
            forced: Mutex::default(),
            info: InfoSeries::default(),
            trigger,
            limits: Limits::default(),
        };
        (Arc::new(state), rx)
    }

    fn take_forced(&self, set: &ApplicationSet) -> bool {
        lock(&self.forced).remove(&ns_name(set))
    }

    /// Forgets a deleted set: metrics series and tracked refs.
    fn forget(&self, ctx: &Context, set: &ApplicationSet) {
        let (ns, name) = (set.namespace().unwrap_or_default(), set.name_any());
        self.info.forget(&ctx.metrics.appset_info, &ns_name(set));
        let _ = ctx.metrics.appset_owned_applications.remove_label_values(&[&ns, &name]);
        let _ = ctx.metrics.appset_reconcile_duration.remove_label_values(&[&ns, &name]);
        ctx.notifier.untrack(&owner_key(set));
    }

    fn record_info(&self, ctx: &Context, set: &ApplicationSet, update_status: &str) {
        let labels = vec![
            set.namespace().unwrap_or_default(),
            set.name_any(),
            update_status.to_owned(),
        ];
        self.info.record(&ctx.metrics.appset_info, ns_name(set), labels);
    }
}

/// The objects of a kind: from the controller's store when running, else listed (tests).
async fn snapshot<K>(store: &OnceLock<Store<K>>, api: Api<K>) -> Result<Vec<Arc<K>>, kube::Error>
where
    K: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match store.get() {
        Some(s) => Ok(s.state()),
        None => Ok(api
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(Arc::new)
            .collect()),
    }
}

/// What the main watch reacts to: spec (generation), refresh annotations, deletion.
fn trigger_hash(set: &ApplicationSet) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    set.metadata.generation.hash(&mut h);
    let annotations = set.metadata.annotations.clone().unwrap_or_default();
    for key in [
        APPLICATION_SET_REFRESH_ANNOTATION,
        ARGOCD_APPLICATION_SET_REFRESH_ANNOTATION,
    ] {
        annotations.get(key).hash(&mut h);
    }
    set.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The refresh annotations present with value `"true"`.
fn refresh_requested(set: &ApplicationSet) -> Vec<&'static str> {
    let annotations = set.metadata.annotations.as_ref();
    [
        APPLICATION_SET_REFRESH_ANNOTATION,
        ARGOCD_APPLICATION_SET_REFRESH_ANNOTATION,
    ]
    .into_iter()
    .filter(|k| annotations.and_then(|a| a.get(*k)).is_some_and(|v| v == "true"))
    .collect()
}

/// Whether the set has a Git generator anywhere, and the smallest `requeueAfterSeconds`.
fn git_requeue(set: &ApplicationSet) -> Option<Duration> {
    let value = serde_json::to_value(&set.spec.generators).unwrap_or_default();
    let mut stack = vec![&value];
    let mut found: Option<Duration> = None;
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(map) => {
                if let Some(git) = map.get("git").and_then(|g| g.as_object()) {
                    let secs = git
                        .get("requeueAfterSeconds")
                        .and_then(serde_json::Value::as_u64)
                        .filter(|s| *s > 0)
                        .map_or(GIT_REQUEUE, Duration::from_secs);
                    found = Some(found.map_or(secs, |f| f.min(secs)));
                }
                stack.extend(map.values());
            }
            serde_json::Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    found
}

fn uses_clusters(set: &ApplicationSet) -> bool {
    serde_json::to_string(&set.spec.generators).is_ok_and(|s| s.contains("\"clusters\""))
}

fn is_rolling(set: &ApplicationSet) -> bool {
    set.spec
        .strategy
        .as_ref()
        .is_some_and(|s| s.type_ == StrategyType::RollingSync)
}

/// Registers the refs the set's Git generators read, per repository URL.
fn track(ctx: &Context, set: &ApplicationSet) {
    let mut by_url: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (url, rev) in referenced_repositories(&set.spec) {
        let is_sha = rev.len() == 40 && rev.bytes().all(|b| b.is_ascii_hexdigit());
        let refs = by_url.entry(url).or_default();
        if !is_sha {
            refs.push(rev);
        }
    }
    let owner = owner_key(set);
    for (url, refs) in by_url {
        ctx.notifier
            .track(&owner, &set.namespace().unwrap_or_default(), &url, refs);
    }
}

/// Runs generation with every tree it needs: loads the literal repositories first, then those
/// templated repoURLs asked for, at most [`MAX_GIT_ROUNDS`] times. Blocking work runs off the runtime.
async fn generate_all(
    ctx: &Context,
    state: &State,
    set: &ApplicationSet,
    clusters: Vec<Cluster>,
    repos: &[Arc<Repository>],
    force: bool,
) -> Result<Vec<GeneratedApp>, AppSetError> {
    let ns = set.namespace().unwrap_or_default();
    let fresh_for = git_requeue(set).unwrap_or(GIT_REQUEUE);
    let mut trees = CheckoutTrees::default();
    let mut wanted: Vec<(String, String)> = referenced_repositories(&set.spec);
    let mut spec = set.spec.clone();
    let mut clusters = clusters;
    let limits = state.limits;
    let mut round = 0;
    loop {
        for (url, rev) in wanted.drain(..) {
            if trees.contains(&url, &rev) {
                continue;
            }
            let how = inputs::Freshness { force, fresh_for };
            let tree = inputs::load_tree(ctx, &state.trees, repos, &ns, &url, &rev, how).await;
            trees.insert(&url, &rev, tree);
        }
        let (result, back_spec, back_clusters, back_trees) = tokio::task::spawn_blocking(move || {
            let inputs = Inputs {
                clusters: &clusters,
                git: &trees,
                limits,
            };
            let result = generate(&spec, &inputs);
            (result, spec, clusters, trees)
        })
        .await
        .map_err(|e| AppSetError::InvalidSpec(format!("generation panicked: {e}")))?;
        (spec, clusters, trees) = (back_spec, back_clusters, back_trees);
        round += 1;
        let misses = trees.take_misses();
        match result {
            Err(AppSetError::Git(_)) if !misses.is_empty() && round < MAX_GIT_ROUNDS => {
                wanted.extend(misses);
            }
            other => return other,
        }
    }
}

/// What steps 2–5 of a reconcile came to: the status step's input, and the failure returned after it.
struct Reconciled {
    /// How it ended, for the conditions.
    outcome: Outcome,
    /// The set's Applications after the writes (`None`: nothing was written, keep the last list).
    resources: Option<Vec<ApplicationSetResource>>,
    /// RollingSync: the per-Application rollout status and whether the rollout is progressing.
    rollout: Option<(Vec<ApplicationSetApplicationStatus>, bool)>,
    /// Warnings for the `ResourcesUpToDate` message.
    warnings: Vec<String>,
    /// Returned once the status is written, so the backoff and the metrics see it.
    error: Option<Error>,
}

impl Reconciled {
    /// Nothing was written because of `error`.
    fn failed(outcome: Outcome, error: Error) -> Self {
        Reconciled {
            outcome,
            resources: None,
            rollout: None,
            warnings: Vec::new(),
            error: Some(error),
        }
    }
}

/// Reconciles one ApplicationSet; see the module documentation.
pub async fn reconcile(set: Arc<ApplicationSet>, ctx: Arc<Context>, state: Arc<State>) -> Result<Action, Error> {
    let started = Instant::now();
    if set.metadata.deletion_timestamp.is_some() {
        // Generated Applications go with the set (ownerReferences); those generated with
        // `preserveResourcesOnDeletion` carry no resources finalizer, so their resources stay.
        state.forget(&ctx, &set);
        return Ok(Action::await_change());
    }
    let refresh = refresh_requested(&set);
    let force = state.take_forced(&set) || !refresh.is_empty();
    track(&ctx, &set);
    let time = now();
    // 1. inputs; 2. generate
    let (clusters, repos) = inputs(&ctx, &state, &set).await?;
    let reconciled = match generate_all(&ctx, &state, &set, clusters, &repos, force).await {
        // 3. validate, 4. write, 5. rollout
        Ok(generated) => apply_generated(&ctx, &state, &set, generated, &time).await?,
        Err(e) => generation_failed(&ctx, &set, &e).await,
    };
    // 6. status
    finish(&ctx, &state, &set, &reconciled, &refresh, &time).await?;
    ctx.metrics
        .appset_reconcile_duration
        .with_label_values(&[&set.namespace().unwrap_or_default(), &set.name_any()])
        .observe(started.elapsed().as_secs_f64());
    if let Some(e) = reconciled.error {
        return Err(e);
    }
    let periodic = git_requeue(&set).unwrap_or(ctx.settings.reconcile_interval);
    let after = match reconciled.rollout {
        Some((_, true)) => periodic.min(ROLLOUT_REQUEUE),
        _ => periodic,
    };
    if after.is_zero() {
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(after))
}

/// Step 1: the Cluster objects the set may use (its namespace and the operator namespace) and the
/// Repositories (credentials for its Git generators).
async fn inputs(
    ctx: &Context,
    state: &State,
    set: &ApplicationSet,
) -> Result<(Vec<Cluster>, Vec<Arc<Repository>>), Error> {
    let ns = set.namespace().unwrap_or_default();
    let all_clusters = snapshot(&state.stores.clusters, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?;
    let clusters = inputs::clusters_for(&all_clusters, &ns, ctx.namespace());
    let repos = snapshot(&state.stores.repositories, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?;
    Ok((clusters, repos))
}

/// Step 2 failed: nothing is written (a generator that fails is never "zero Applications"); an Event
/// when the failure is new.
async fn generation_failed(ctx: &Context, set: &ApplicationSet, e: &AppSetError) -> Reconciled {
    let message = e.to_string();
    let was = set
        .status
        .as_ref()
        .and_then(|s| find_condition(&s.conditions, CONDITION_ERROR_OCCURRED));
    if was.is_none_or(|c| c.status != STATUS_TRUE || c.message != truncate(&message, MAX_MESSAGE_LEN)) {
        ctx.publish_event(
            &set.object_ref(&()),
            EventType::Warning,
            "GenerationFailed",
            "Generate",
            &message,
        )
        .await;
    }
    let outcome = Outcome::GenerationFailed {
        reason: e.category().to_owned(),
        message,
    };
    Reconciled::failed(outcome, generation_error(e, git_requeue(set)))
}

/// Trims an Application on its way into this controller's cache to what the set reads of it: spec and
/// metadata (planning compares them), and of the status only sync, health and the operation's phase and
/// start (the rollout's view, [`rollout::RolloutApp::of`]). The resource list, the sync result and the
/// history grow with the Application's size and were a copy of every managed object's entry next to the
/// Application controller's own (S1 heap profile: 50 Applications of 1,000 objects).
pub fn slim_generated(app: &mut Application) {
    crate::controllers::slim_cached(app);
    if let Some(status) = app.status.as_mut() {
        status.resources = Vec::new();
        status.history = Vec::new();
        if let Some(op) = status.operation_state.as_mut() {
            op.sync_result = None;
            op.message = None;
        }
    }
}

/// Steps 3–5 for the generated Applications.
async fn apply_generated(
    ctx: &Context,
    state: &State,
    set: &ApplicationSet,
    generated: Vec<GeneratedApp>,
    now: &Time,
) -> Result<Reconciled, Error> {
    let ns = set.namespace().unwrap_or_default();
    let existing: Vec<Arc<Application>> = snapshot(&state.stores.applications, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?
        .into_iter()
        .filter(|a| a.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let valid = match validate(set, generated, &existing) {
        Ok(valid) => valid,
        Err(message) => {
            let outcome = Outcome::Invalid {
                reason: "ApplicationValidationError".to_owned(),
                message: message.clone(),
            };
            return Ok(Reconciled::failed(outcome, Error::InvalidSpec(message)));
        }
    };
    let apps_api: Api<Application> = Api::namespaced(ctx.client.clone(), &ns);
    let written = write(ctx, &apps_api, set, &valid.plan, &existing).await;
    let rollout = if is_rolling(set) {
        let wanted = (&valid.labels, &valid.prunes);
        let advanced = rollout::advance(&apps_api, set, &written.owned, wanted, now).await;
        Some((advanced.statuses, advanced.progressing))
    } else {
        None
    };
    let (outcome, error) = written.outcome(&valid.plan);
    Ok(Reconciled {
        outcome,
        resources: Some(resource_entries(&written.owned, &ns)),
        rollout,
        warnings: valid.plan.warnings,
        error,
    })
}

/// The generated Applications, validated and planned against the existing ones.
struct Validated {
    /// What to create, update and delete.
    plan: apply::Plan,
    /// Labels of each desired Application (the rollout's steps match them).
    labels: HashMap<String, BTreeMap<String, String>>,
    /// Whether each desired Application's automated policy prunes (rollout syncs do the same).
    prunes: HashMap<String, bool>,
}

/// Step 3 (pure): namespace, ownership, `applicationsSync`, `ignoreApplicationDifferences`; any
/// problem refuses the whole set and nothing is written.
fn validate(
    set: &ApplicationSet,
    generated: Vec<GeneratedApp>,
    existing: &[Arc<Application>],
) -> Result<Validated, String> {
    let desired = apply::prepare(set, generated, is_rolling(set))?;
    let prunes = desired.iter().map(|d| (d.name.clone(), d.prune)).collect();
    let labels = desired
        .iter()
        .map(|d| (d.name.clone(), d.app.metadata.labels.clone().unwrap_or_default()))
        .collect();
    let plan = apply::plan(
        apply::applications_sync(set),
        &set.uid().unwrap_or_default(),
        desired,
        existing,
        &set.spec.ignore_application_differences,
    );
    if !plan.problems.is_empty() {
        return Err(plan.problems.join("; "));
    }
    Ok(Validated { plan, labels, prunes })
}

/// What step 4 wrote, and the set's Applications afterwards.
struct Written {
    applied: apply::Applied,
    /// The set's Applications now: the existing ones it controls (minus deleted) plus the ones
    /// created or updated in this reconcile (`None`: not in the cache yet).
    owned: BTreeMap<String, Option<Arc<Application>>>,
}

impl Written {
    /// Up to date, or the failed writes (as the condition and as the reconcile's error).
    fn outcome(&self, plan: &apply::Plan) -> (Outcome, Option<Error>) {
        let failures = &self.applied.failures;
        if failures.is_empty() {
            return (Outcome::UpToDate, None);
        }
        let message = format!(
            "{} of {} writes failed: {}",
            failures.len(),
            plan.create.len() + plan.update.len() + plan.delete.len(),
            failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
        );
        (
            Outcome::ApplyFailed {
                message: message.clone(),
            },
            Some(Error::Internal(message)),
        )
    }
}

/// Step 4: server-side apply as `capstan-applicationset`, deletes only of Applications this set
/// controls and only when `applicationsSync` allows; an Event per kind of write.
async fn write(
    ctx: &Context,
    apps_api: &Api<Application>,
    set: &ApplicationSet,
    plan: &apply::Plan,
    existing: &[Arc<Application>],
) -> Written {
    let applied = apply::execute(apps_api, plan, apply::applications_sync(set)).await;
    publish_writes(ctx, &set.object_ref(&()), &applied).await;
    let set_uid = set.uid().unwrap_or_default();
    let mut owned: BTreeMap<String, Option<Arc<Application>>> = existing
        .iter()
        .filter(|a| apply::ownership(a, &set_uid) == apply::Ownership::Ours)
        .map(|a| (a.name_any(), Some(Arc::clone(a))))
        .collect();
    for name in plan.update.iter().map(|d| &d.name).chain(&applied.created) {
        owned.entry(name.clone()).or_insert(None);
    }
    for name in &applied.deleted {
        owned.remove(name);
    }
    Written { applied, owned }
}

/// Step 6: ONE status write (none when unchanged), the handled refresh annotations removed, metrics.
async fn finish(
    ctx: &Context,
    state: &State,
    set: &ApplicationSet,
    reconciled: &Reconciled,
    refresh: &[&str],
    now: &Time,
) -> Result<(), Error> {
    let (ns, name) = (set.namespace().unwrap_or_default(), set.name_any());
    let sets: Api<ApplicationSet> = Api::namespaced(ctx.client.clone(), &ns);
    let observed = Observed {
        generation: set.metadata.generation,
        outcome: reconciled.outcome.clone(),
        resources: reconciled.resources.clone(),
        rollout: reconciled.rollout.clone(),
        warnings: &reconciled.warnings,
        now,
    };
    let old = set.status.as_ref();
    let new_status = status::compute(old, &observed);
    write_status::<ApplicationSet, ApplicationSetStatus>(&sets, set, old, &new_status)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    if !refresh.is_empty() {
        let annotations: serde_json::Map<_, _> = refresh
            .iter()
            .map(|k| (k.to_string(), serde_json::Value::Null))
            .collect();
        let patch = serde_json::json!({ "metadata": { "annotations": annotations } });
        sets.patch(&name, &patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(KubeStep::MetadataPatch.err())?;
    }
    let up_to_date =
        find_condition(&new_status.conditions, "ResourcesUpToDate").map_or("Unknown", |c| c.status.as_str());
    state.record_info(ctx, set, up_to_date);
    if let Some(count) = new_status.resources_count {
        ctx.metrics
            .appset_owned_applications
            .with_label_values(&[&ns, &name])
            .set(count);
    }
    Ok(())
}

/// The controller error for a failed generation: transient Git trouble backs off; other errors
/// wait for the next Git poll (a fix may come from Git) or for a spec change.
fn generation_error(e: &AppSetError, git: Option<Duration>) -> Error {
    let message = e.to_string();
    if e.is_transient() {
        return Error::Git {
            category: e.category(),
            message,
            transient: true,
            retry_after: git.unwrap_or(GIT_REQUEUE),
        };
    }
    match git {
        Some(after) => Error::Dependency {
            category: e.category(),
            message,
            retry_after: after,
        },
        None => Error::InvalidSpec(message),
    }
}

fn resource_entries(owned: &BTreeMap<String, Option<Arc<Application>>>, ns: &str) -> Vec<ApplicationSetResource> {
    owned
        .iter()
        .map(|(name, app)| {
            let status = app.as_ref().and_then(|a| a.status.as_ref());
            ApplicationSetResource {
                name: name.clone(),
                namespace: Some(ns.to_owned()),
                status: status.and_then(|s| s.sync.as_ref()).map(|s| s.status),
                health: status
                    .and_then(|s| s.health.as_ref())
                    .map(|h| crate::api::application::ResourceHealth {
                        status: h.status,
                        message: None,
                    }),
            }
        })
        .collect()
}

fn names_note(verb: &str, names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(MAX_NAMES_IN_EVENT).map(String::as_str).collect();
    let more = names.len().saturating_sub(MAX_NAMES_IN_EVENT);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!("{verb} {} Application(s): {}{tail}", names.len(), shown.join(", "))
}

async fn publish_writes(ctx: &Context, ref_: &k8s_openapi::api::core::v1::ObjectReference, applied: &apply::Applied) {
    for (reason, verb, names) in [
        ("ApplicationCreated", "created", &applied.created),
        ("ApplicationUpdated", "updated", &applied.updated),
        ("ApplicationDeleted", "deleted", &applied.deleted),
    ] {
        if !names.is_empty() {
            ctx.publish_event(ref_, EventType::Normal, reason, "Apply", &names_note(verb, names))
                .await;
        }
    }
    if !applied.failures.is_empty() {
        let note = format!("writing Applications failed: {}", applied.failures.join("; "));
        ctx.publish_event(ref_, EventType::Warning, "CreateApplicationError", "Apply", &note)
            .await;
    }
}

/// Runs the ApplicationSet controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) -> anyhow::Result<()> {
    let (state, triggers) = State::new();
    let (reader, writer) = reflector::store();
    let (forget_ctx, forget_state) = (Arc::clone(&ctx), Arc::clone(&state));
    let sets = ctx
        .watch::<ApplicationSet>(watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .inspect(move |event| {
            if let Ok(watcher::Event::Delete(set)) = event {
                forget_state.forget(&forget_ctx, set);
            }
        })
        .applied_objects()
        .predicate_filter(trigger_hash, Default::default());
    let (app_reader, app_writer) = reflector::store();
    let apps = ctx
        .watch::<Application>(watcher::Config::default())
        .default_backoff()
        .modify(slim_generated)
        .reflect(app_writer)
        .touched_objects();
    let (cluster_reader, cluster_writer) = reflector::store();
    let clusters = ctx
        .watch::<Cluster>(watcher::Config::default())
        .default_backoff()
        .reflect(cluster_writer)
        .touched_objects();
    let (repo_reader, repo_writer) = reflector::store();
    let repos = ctx
        .watch::<Repository>(watcher::Config::default())
        .default_backoff()
        .reflect(repo_writer)
        .touched_objects();
    let _ = state.stores.applications.set(app_reader);
    let _ = state.stores.clusters.set(cluster_reader);
    let _ = state.stores.repositories.set(repo_reader);
    tokio::spawn(async move {
        let mut repos = std::pin::pin!(repos);
        while repos.next().await.is_some() {}
    });
    let listener = Arc::clone(&state);
    on_new_commits(Arc::clone(&ctx.notifier), reader.clone(), move |_, sets| {
        for set in sets {
            let key = format!("{}/{}", set.namespace.as_deref().unwrap_or_default(), set.name);
            lock(&listener.forced).insert(key);
            let _ = listener.trigger.send(set);
        }
    });
    crate::controllers::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());
    let (mapper_store, operator_ns) = (reader.clone(), ctx.namespace().to_string());
    let queue = ctx.queue(CONTROLLER);
    let controller = Controller::for_stream(queue.count(sets), reader)
        // `owns_stream`, spelled out so that the owners it triggers are counted in the queue depth.
        .watches_stream(apps, queue.mapper(owning_sets))
        .watches_stream(
            clusters,
            queue.mapper(move |cluster: Cluster| {
                let cns = cluster.namespace().unwrap_or_default();
                mapper_store
                    .state()
                    .iter()
                    .filter(|s| {
                        let sns = s.namespace().unwrap_or_default();
                        (cns == sns || cns == operator_ns) && uses_clusters(s)
                    })
                    .map(|s| ObjectRef::from_obj(s.as_ref()))
                    .collect::<Vec<_>>()
            }),
        )
        .reconcile_on(queue.refs(UnboundedReceiverStream::new(triggers)))
        .graceful_shutdown_on(shutdown.wait());
    run_controller(controller, CONTROLLER, ctx, move |set, ctx| {
        reconcile(set, ctx, Arc::clone(&state))
    })
    .await;
    Ok(())
}

/// The ApplicationSets an Application's owner references name (what `owns_stream` triggers).
fn owning_sets(app: Application) -> Vec<ObjectRef<ApplicationSet>> {
    let ns = app.namespace();
    app.owner_references()
        .iter()
        .filter_map(|owner| ObjectRef::from_owner_ref(ns.as_deref(), owner, ()))
        .collect()
}
