//! ApplicationSet controller: generators × template → Applications, kept in step with Git and the
//! Cluster objects, with Argo CD's policies and progressive rollout.
//!
//! # Reconcile
//! 1. **inputs** ([`inputs`]): the Cluster objects the set may use (its namespace and the operator
//!    namespace), and for every `(repoURL, revision)` its Git generators name, a checkout scanned
//!    with the render layer's confinement rules. Refs are registered with the notifier.
//! 2. **generate** (pure, `crate::appset::generate`, off the async runtime): all or nothing.
//!    Templated repoURLs (matrix) that were not loaded are loaded and generation runs again
//!    (bounded rounds).
//! 3. **validate** (pure, [`apply::prepare`], [`apply::plan`]): namespace, ownership, policy,
//!    `ignoreApplicationDifferences`. Any error: a condition, and nothing is written.
//! 4. **write** ([`apply::execute`]): server-side apply as `capstan-applicationset`; deletes only
//!    of Applications this set controls, only when the policy allows and generation succeeded.
//! 5. **rollout** ([`rollout`], RollingSync only): decide per step, set `operation.sync`.
//! 6. **status** ([`status::compute`]): ONE status patch, none when unchanged; events on
//!    creates/updates/deletes and generation failures; metrics.
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

use super::error::{error_policy, Error, KubeStep};
use super::notifier::owner_key;
use super::status::{find_condition, now, write_status};
use super::{instrumented, lock, ns_name, Context, Shutdown};
use crate::api::application_set::{ApplicationSet, ApplicationSetResource, ApplicationSetStatus, StrategyType};
use crate::api::labels::{APPLICATION_SET_REFRESH_ANNOTATION, ARGOCD_APPLICATION_SET_REFRESH_ANNOTATION};
use crate::api::{Application, Cluster, Repository};
use crate::appset::{generate, referenced_repositories, AppSetError, GeneratedApp, Inputs, Limits};
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
    applications: OnceLock<Store<Application>>,
    clusters: OnceLock<Store<Cluster>>,
    repositories: OnceLock<Store<Repository>>,
    trees: TreeCache,
    forced: Mutex<HashSet<String>>,
    info_labels: Mutex<HashMap<String, Vec<String>>>,
    trigger: mpsc::UnboundedSender<ObjectRef<ApplicationSet>>,
    /// Generation limits (tests and benchmarks lower or raise them).
    pub limits: Limits,
}

impl State {
    /// A fresh state and the stream of sets to reconcile now (new commits).
    pub fn new() -> (Arc<State>, mpsc::UnboundedReceiver<ObjectRef<ApplicationSet>>) {
        let (trigger, rx) = mpsc::unbounded_channel();
        let state = State {
            applications: OnceLock::new(),
            clusters: OnceLock::new(),
            repositories: OnceLock::new(),
            trees: TreeCache::default(),
            forced: Mutex::default(),
            info_labels: Mutex::default(),
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
        if let Some(labels) = lock(&self.info_labels).remove(&ns_name(set)) {
            let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
            let _ = ctx.metrics.appset_info.remove_label_values(&refs);
        }
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
        let mut map = lock(&self.info_labels);
        if let Some(old) = map.get(&ns_name(set)) {
            if *old == labels {
                return;
            }
            let refs: Vec<&str> = old.iter().map(String::as_str).collect();
            let _ = ctx.metrics.appset_info.remove_label_values(&refs);
        }
        let refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        ctx.metrics.appset_info.with_label_values(&refs).set(1);
        map.insert(ns_name(set), labels);
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

/// Reconciles one ApplicationSet; see the module documentation.
pub async fn reconcile(set: Arc<ApplicationSet>, ctx: Arc<Context>, state: Arc<State>) -> Result<Action, Error> {
    let started = Instant::now();
    let (ns, name) = (set.namespace().unwrap_or_default(), set.name_any());
    if set.metadata.deletion_timestamp.is_some() {
        // Generated Applications go with the set (ownerReferences); those generated with
        // `preserveResourcesOnDeletion` carry no resources finalizer, so their resources stay.
        state.forget(&ctx, &set);
        return Ok(Action::await_change());
    }
    let sets: Api<ApplicationSet> = Api::namespaced(ctx.client.clone(), &ns);
    let apps_api: Api<Application> = Api::namespaced(ctx.client.clone(), &ns);
    let refresh = refresh_requested(&set);
    let force = state.take_forced(&set) || !refresh.is_empty();
    track(&ctx, &set);

    let all_clusters = snapshot(&state.clusters, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?;
    let clusters = inputs::clusters_for(&all_clusters, &ns, ctx.namespace());
    let repos = snapshot(&state.repositories, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?;
    let generated = generate_all(&ctx, &state, &set, clusters, &repos, force).await;
    let existing: Vec<Arc<Application>> = snapshot(&state.applications, Api::all(ctx.client.clone()))
        .await
        .map_err(KubeStep::Read.err())?
        .into_iter()
        .filter(|a| a.namespace().as_deref() == Some(ns.as_str()))
        .collect();
    let set_uid = set.uid().unwrap_or_default();
    let policy = apply::policy(&set);
    let rolling = is_rolling(&set);
    let time = now();
    let old_status = set.status.as_ref();
    let ref_ = set.object_ref(&());

    let mut warnings = Vec::new();
    let mut result: Result<(), Error> = Ok(());
    let mut resources: Option<Vec<ApplicationSetResource>> = None;
    let mut rollout_result = None;
    let outcome = match generated {
        Err(e) => {
            let message = e.to_string();
            let was = old_status.and_then(|s| find_condition(&s.conditions, "ErrorOccurred"));
            if was.is_none_or(|c| c.status != "True" || c.message != crate::text::truncate(&message, 1024)) {
                ctx.publish_event(&ref_, EventType::Warning, "GenerationFailed", "Generate", &message)
                    .await;
            }
            result = Err(generation_error(&e, git_requeue(&set)));
            Outcome::GenerationFailed {
                reason: e.category().to_owned(),
                message,
            }
        }
        Ok(generated) => match apply::prepare(&set, generated, rolling) {
            Err(message) => {
                result = Err(Error::InvalidSpec(message.clone()));
                Outcome::Invalid {
                    reason: "ApplicationValidationError".to_owned(),
                    message,
                }
            }
            Ok(desired) => {
                let prunes: HashMap<String, bool> = desired.iter().map(|d| (d.name.clone(), d.prune)).collect();
                let labels: HashMap<String, BTreeMap<String, String>> = desired
                    .iter()
                    .map(|d| (d.name.clone(), d.app.metadata.labels.clone().unwrap_or_default()))
                    .collect();
                let plan = apply::plan(
                    policy,
                    &set_uid,
                    desired,
                    &existing,
                    &set.spec.ignore_application_differences,
                );
                if !plan.problems.is_empty() {
                    let message = plan.problems.join("; ");
                    result = Err(Error::InvalidSpec(message.clone()));
                    Outcome::Invalid {
                        reason: "ApplicationValidationError".to_owned(),
                        message,
                    }
                } else {
                    warnings = plan.warnings.clone();
                    let applied = apply::execute(&apps_api, &plan, policy).await;
                    publish_writes(&ctx, &ref_, &applied).await;
                    // The set's Applications now: existing ones it controls (minus deleted) plus created.
                    let mut owned: BTreeMap<String, Option<Arc<Application>>> = existing
                        .iter()
                        .filter(|a| apply::ownership(a, &set_uid) == apply::Ownership::Ours)
                        .map(|a| (a.name_any(), Some(Arc::clone(a))))
                        .collect();
                    for d in plan.update.iter().map(|d| &d.name) {
                        owned.entry(d.clone()).or_insert(None);
                    }
                    for n in &applied.created {
                        owned.entry(n.clone()).or_insert(None);
                    }
                    for n in &applied.deleted {
                        owned.remove(n);
                    }
                    resources = Some(resource_entries(&owned, &ns));
                    if rolling {
                        let steps = set
                            .spec
                            .strategy
                            .as_ref()
                            .and_then(|s| s.rolling_sync.as_ref())
                            .map(|r| r.steps.clone())
                            .unwrap_or_default();
                        let views: Vec<rollout::RolloutApp> = owned
                            .iter()
                            .map(|(n, a)| match a {
                                Some(a) => rollout::RolloutApp::of(a),
                                None => rollout::RolloutApp {
                                    name: n.clone(),
                                    labels: labels.get(n).cloned().unwrap_or_default(),
                                    ..Default::default()
                                },
                            })
                            .collect();
                        let previous = old_status.map(|s| s.application_status.as_slice()).unwrap_or_default();
                        let mut decision = rollout::decide(&steps, &views, previous, &time);
                        // Applications created just now are not in the cache yet: their turn comes
                        // on the next reconcile (their creation triggers it).
                        for entry in decision.statuses.iter_mut() {
                            let unseen = owned.get(&entry.application).is_some_and(Option::is_none);
                            if unseen && decision.to_sync.contains(&entry.application) {
                                entry.status = crate::api::application_set::RolloutStatus::Waiting;
                                entry.message = Some("Application was just created".to_owned());
                            }
                        }
                        decision.to_sync.retain(|n| owned.get(n).is_some_and(Option::is_some));
                        for n in &decision.to_sync {
                            if let Some(Some(app)) = owned.get(n) {
                                let prune = prunes.get(n).copied().unwrap_or(false);
                                if let Err(e) = rollout::request_sync(&apps_api, app, prune).await {
                                    tracing::warn!(
                                        namespace = ns,
                                        name,
                                        application = n,
                                        "rollout sync request failed: {e}"
                                    );
                                }
                            }
                        }
                        rollout_result = Some((decision.statuses, decision.progressing));
                    }
                    if applied.failures.is_empty() {
                        Outcome::UpToDate
                    } else {
                        let message = format!(
                            "{} of {} writes failed: {}",
                            applied.failures.len(),
                            plan.create.len() + plan.update.len() + plan.delete.len(),
                            applied.failures.iter().take(5).cloned().collect::<Vec<_>>().join("; ")
                        );
                        result = Err(Error::Internal(message.clone()));
                        Outcome::ApplyFailed { message }
                    }
                }
            }
        },
    };
    let rollout_progressing = rollout_result.as_ref().is_some_and(|(_, p)| *p);
    let observed = Observed {
        generation: set.metadata.generation,
        outcome,
        resources,
        rollout: rollout_result,
        warnings: &warnings,
        now: &time,
    };
    let new_status = status::compute(old_status, &observed);
    write_status::<ApplicationSet, ApplicationSetStatus>(&sets, &set, old_status, &new_status)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    if !refresh.is_empty() {
        let patch = serde_json::json!({
            "metadata": {"annotations": refresh.iter().map(|k| (k.to_string(), serde_json::Value::Null)).collect::<serde_json::Map<_, _>>()}
        });
        sets.patch(&name, &super::status::patch_params(), &Patch::Merge(&patch))
            .await
            .map_err(KubeStep::MetadataPatch.err())?;
    }
    // Metrics.
    let up_to_date =
        find_condition(&new_status.conditions, "ResourcesUpToDate").map_or("Unknown", |c| c.status.as_str());
    state.record_info(&ctx, &set, up_to_date);
    if let Some(count) = new_status.resources_count {
        ctx.metrics
            .appset_owned_applications
            .with_label_values(&[&ns, &name])
            .set(count);
    }
    ctx.metrics
        .appset_reconcile_duration
        .with_label_values(&[&ns, &name])
        .observe(started.elapsed().as_secs_f64());
    result?;
    let periodic = git_requeue(&set).unwrap_or(ctx.settings.reconcile_interval);
    let after = if rollout_progressing {
        periodic.min(ROLLOUT_REQUEUE)
    } else {
        periodic
    };
    if after.is_zero() {
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(after))
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
    let client = ctx.client.clone();
    let (state, triggers) = State::new();
    let (reader, writer) = reflector::store();
    let (forget_ctx, forget_state) = (Arc::clone(&ctx), Arc::clone(&state));
    let sets = watcher(Api::<ApplicationSet>::all(client.clone()), watcher::Config::default())
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
    let apps = watcher(Api::<Application>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .modify(crate::controllers::slim_cached)
        .reflect(app_writer)
        .touched_objects();
    let (cluster_reader, cluster_writer) = reflector::store();
    let clusters = watcher(Api::<Cluster>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .reflect(cluster_writer)
        .touched_objects();
    let (repo_reader, repo_writer) = reflector::store();
    let repos = watcher(Api::<Repository>::all(client), watcher::Config::default())
        .default_backoff()
        .reflect(repo_writer)
        .touched_objects();
    let _ = state.applications.set(app_reader);
    let _ = state.clusters.set(cluster_reader);
    let _ = state.repositories.set(repo_reader);
    tokio::spawn(async move {
        let mut repos = std::pin::pin!(repos);
        while repos.next().await.is_some() {}
    });
    spawn_revision_listener(&ctx, &state, reader.clone());
    crate::controllers::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());
    let (mapper_store, operator_ns) = (reader.clone(), ctx.namespace().to_string());
    Controller::for_stream(sets, reader)
        .owns_stream(apps)
        .watches_stream(clusters, move |cluster: Cluster| {
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
        })
        .reconcile_on(UnboundedReceiverStream::new(triggers))
        .graceful_shutdown_on(shutdown.wait())
        .run(
            move |set, ctx| {
                let state = Arc::clone(&state);
                async move {
                    let fut = reconcile(Arc::clone(&set), Arc::clone(&ctx), state);
                    instrumented(CONTROLLER, set.as_ref(), &ctx, fut).await
                }
            },
            error_policy::<ApplicationSet>,
            ctx,
        )
        .for_each(|_| async {})
        .await;
    Ok(())
}

/// New commits on tracked refs → force a fresh resolution and reconcile exactly the sets tracking
/// them. A lagging receiver reconciles everything.
fn spawn_revision_listener(ctx: &Arc<Context>, state: &Arc<State>, store: Store<ApplicationSet>) {
    let mut changes = ctx.notifier.subscribe();
    let (ctx, state) = (Arc::clone(ctx), Arc::clone(state));
    tokio::spawn(async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    for owner in ctx.notifier.owners_tracking(&change) {
                        let Some((ns, name)) = owner.strip_prefix("ApplicationSet/").and_then(|r| r.split_once('/'))
                        else {
                            continue;
                        };
                        lock(&state.forced).insert(format!("{ns}/{name}"));
                        let _ = state.trigger.send(ObjectRef::new(name).within(ns));
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                    for set in store.state() {
                        lock(&state.forced).insert(ns_name(set.as_ref()));
                        let _ = state.trigger.send(ObjectRef::from_obj(set.as_ref()));
                    }
                }
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    });
}
