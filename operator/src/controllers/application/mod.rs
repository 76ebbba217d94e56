//! Application controller: renders what Git declares, compares it with the live state of the
//! destination, converges it in sync waves, and reports Argo CD-shaped status.
//!
//! # Reconcile
//! `reconcile` = finalizer dispatch: an Application being deleted goes to the cascade deletion, a
//! pipeline of its own ([`deletion`]); anything else runs the pipeline, as named steps:
//!
//! 1. **destination** (client): `spec.destination` → a cluster connection; `spec.namespaces` of the
//!    Cluster enforced (a namespace outside it refuses the sync with `InvalidSpecError`);
//! 2. **resolve source** (git): repository + credentials, revision → commit, checkout ([`source`]);
//! 3. **render** (no client): `CachingRenderer` (hard refresh bypasses its cache);
//! 4. **live** (live cache only, never a cluster-wide list): kinds watched, objects of this instance;
//! 5. **compare** (no client): diff + health per resource, aggregated sync and health ([`compare`]);
//!    PolicySets evaluated against the rendered objects ([`crate::controllers::policy_access`]);
//! 6. **choose** (pure, [`choice::choose`]): running operation, PolicySet gate, requested `operation`
//!    (sync/rollback), retries, automated sync and selfHeal ([`auto_sync`]), dependsOn
//!    ([`dependencies`]);
//! 7. **sync step** (client): one (phase, wave) via `engine::plan` with write-ahead persistence
//!    ([`sync`], [`executor`]);
//! 8. **status** (client): [`status::compute`] → ONE status patch (none when unchanged), plus the
//!    write-ahead patch of a step that changes the cluster; events on transitions; metrics.
//!
//! Every step records what it learns in the [`findings::Findings`]; requeues go through
//! [`findings::Findings::requeue_within`] (the earliest wins).
//!
//! # Errors
//! Failures of steps 1–3 never prune: they become `ComparisonError` (sync status `Unknown`) or
//! `InvalidSpecError`, and a running operation errors without applying or pruning anything. Each
//! carries a [`status::ProblemKind`] (transient, invalid spec, permanent) that decides `Stalled`. Once
//! the status is written, the failure is returned as the reconcile's error
//! ([`findings::Findings::failure`]): transient trouble backs off per object and counts in
//! `capstan_reconcile_errors_total`; anything else is looked at again after
//! [`findings::ERROR_REQUEUE`]. A Kubernetes request that fails names its step
//! ([`crate::controllers::KubeStep`]). An incomplete live cache makes the planner wait.
//!
//! # Triggers
//! Spec, operation, refresh annotation, finalizer and deletion changes of the Application (a
//! predicate filters out its own status writes); changes of its managed objects (the live cache's
//! notifications, within a second); new commits on the ref it tracks (the [`RevisionNotifier`]);
//! status changes of Applications it depends on; and a periodic requeue (`--reconcile-interval`
//! plus up to 60 s jitter).
//!
//! # Choices
//! - `spec.suspend: true` freezes the Application: no comparison, no sync, status left as it was
//!   (deletion still works).
//! - Automated syncs do not write `operation`; they start an `operationState` directly. A manual
//!   `operation` is removed once its operation completed; `status.operationState` stays.
//!
//! [`RevisionNotifier`]: crate::controllers::notifier::RevisionNotifier

pub mod auto_sync;
pub mod choice;
pub mod compare;
pub mod deletion;
pub mod dependencies;
pub mod executor;
pub mod findings;
pub mod identity;
pub mod source;
pub mod status;
pub mod sync;
pub mod validation;

mod pipeline;
mod wake;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::notifier::{on_new_commits, owner_key, url_key, RevisionNotifier};
use super::repository::revision_changes;
use super::stores::Stores;
use super::{lock, ns_name, run_controller, Context, Shutdown};
use crate::api::application::{HealthStatusCode, OperationPhase, SyncStatusCode};
use crate::api::repository::FetchedRevision;
use crate::api::{Application, PolicySet, Repository};
use crate::cluster::ClusterHandle;
use crate::metrics::InfoSeries;
use crate::render::reads::ReadSet;

pub use pipeline::reconcile;
use source::Resolution;

/// The controller's name in `--controllers`, metrics and logs.
pub const CONTROLLER: &str = "application";
/// Most jitter added to the periodic requeue.
pub const MAX_JITTER: Duration = Duration::from_secs(60);

/// Controller-local state shared by reconciles (memory only; a restart rebuilds it from the cluster).
pub struct State {
    stores: Stores,
    /// The PolicySet watch has listed once: until then no sync may start (fail closed).
    policies_listed: AtomicBool,
    resolutions: Mutex<HashMap<String, Resolution>>,
    forced: Mutex<HashSet<String>>,
    /// Applications whose last network resolution of their revision failed: until one succeeds, cached
    /// knowledge (the Repository's listing, a remembered resolution) must not hide the failure.
    unresolved: Mutex<HashSet<String>>,
    self_heal: Mutex<HashMap<String, (String, u32)>>,
    instances: Mutex<HashMap<String, ObjectRef<Application>>>,
    subscribed: Mutex<HashSet<usize>>,
    info: InfoSeries,
    deletion_attempts: Mutex<HashMap<String, u32>>,
    /// Per Application, a hash of the PolicySet dry-run findings last reported (reported on change).
    dry_run_reported: Mutex<HashMap<String, u64>>,
    /// Per Application, what its last render read from the repository: orders the Applications a new
    /// commit wakes (see `wake`).
    reads: Mutex<HashMap<String, ReadSet>>,
    trigger: mpsc::UnboundedSender<ObjectRef<Application>>,
}

impl State {
    /// A fresh state and the stream of Applications to reconcile now (live changes, new commits).
    pub fn new() -> (Arc<State>, mpsc::UnboundedReceiver<ObjectRef<Application>>) {
        let (trigger, rx) = mpsc::unbounded_channel();
        let state = State {
            stores: Stores::default(),
            policies_listed: AtomicBool::new(false),
            resolutions: Mutex::default(),
            forced: Mutex::default(),
            unresolved: Mutex::default(),
            self_heal: Mutex::default(),
            instances: Mutex::default(),
            subscribed: Mutex::default(),
            info: InfoSeries::default(),
            deletion_attempts: Mutex::default(),
            dry_run_reported: Mutex::default(),
            reads: Mutex::default(),
            trigger,
        };
        (Arc::new(state), rx)
    }

    /// Repositories (empty before the watch started, or in tests).
    pub fn repositories(&self) -> Vec<Arc<Repository>> {
        self.stores.repositories()
    }

    /// PolicySets (empty before the watch started, or in tests).
    pub fn policy_sets(&self) -> Vec<Arc<PolicySet>> {
        self.stores.policy_sets()
    }

    /// Whether PolicySets are known: listed by the watch, or no watch at all (tests that build the
    /// state by hand have none).
    pub fn policies_synced(&self) -> bool {
        self.stores.policy_sets.get().is_none() || self.policies_listed.load(Ordering::Acquire)
    }

    /// Whether `findings` (PolicySet dry-run messages) differ from what was last reported for `app`;
    /// remembers them.
    fn dry_run_changed(&self, app: &Application, findings: &[(String, Vec<String>)]) -> bool {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        findings.hash(&mut hasher);
        let hash = hasher.finish();
        lock(&self.dry_run_reported).insert(ns_name(app), hash) != Some(hash)
    }

    /// Applications (empty before the watch started, or in tests).
    pub fn applications(&self) -> Vec<Arc<Application>> {
        self.stores.applications()
    }

    fn remember(&self, app: &Application, r: Resolution) {
        lock(&self.resolutions).insert(ns_name(app), r);
    }

    fn remembered(&self, app: &Application) -> Option<Resolution> {
        lock(&self.resolutions).get(&ns_name(app)).cloned()
    }

    /// The cached Application `r` (none before the watch started, or when it is gone).
    fn application(&self, r: &ObjectRef<Application>) -> Option<Arc<Application>> {
        self.stores.applications.get().and_then(|s| s.get(r))
    }

    /// Remembers what `app`'s last render read.
    fn record_reads(&self, app: &Application, reads: &ReadSet) {
        let key = ns_name(app);
        let mut all = lock(&self.reads);
        if all.get(&key) != Some(reads) {
            all.insert(key, reads.clone());
        }
    }

    /// What `app`'s last render read, if it rendered since this process started.
    fn last_reads(&self, app: &Application) -> Option<ReadSet> {
        lock(&self.reads).get(&ns_name(app)).cloned()
    }

    /// Reconciles `app` now, resolving its revision afresh (a new commit was announced).
    fn wake(&self, app: ObjectRef<Application>) {
        self.force(format!("{}/{}", app.namespace.as_deref().unwrap_or_default(), app.name));
        let _ = self.trigger.send(app);
    }

    /// Marks `key` (`ns/name`) for a forced revision resolution on its next reconcile.
    fn force(&self, key: String) {
        lock(&self.forced).insert(key);
    }

    fn take_forced(&self, app: &Application) -> bool {
        lock(&self.forced).remove(&ns_name(app))
    }

    /// Records whether the last network resolution for `app` failed.
    fn set_unresolved(&self, app: &Application, failed: bool) {
        let mut unresolved = lock(&self.unresolved);
        if failed {
            unresolved.insert(ns_name(app));
        } else {
            unresolved.remove(&ns_name(app));
        }
    }

    fn is_unresolved(&self, app: &Application) -> bool {
        lock(&self.unresolved).contains(&ns_name(app))
    }

    /// SelfHeal attempts at `revision` so far.
    fn self_heal_attempts(&self, app: &Application, revision: &str) -> u32 {
        lock(&self.self_heal)
            .get(&ns_name(app))
            .filter(|(r, _)| r == revision)
            .map_or(0, |(_, n)| *n)
    }

    fn count_self_heal(&self, app: &Application, revision: &str, self_heal: bool) {
        let mut map = lock(&self.self_heal);
        let entry = map.entry(ns_name(app)).or_insert_with(|| (revision.to_string(), 0));
        if entry.0 != revision || !self_heal {
            *entry = (revision.to_string(), 0);
        }
        if self_heal {
            entry.1 = entry.1.saturating_add(1);
        }
    }

    fn register_instance(&self, instance: &str, app: &Application) {
        lock(&self.instances).insert(instance.to_string(), ObjectRef::from_obj(app));
    }

    /// Forwards live-object changes of `cluster` to the Applications owning them (once per cache).
    fn subscribe_live(self: &Arc<Self>, cluster: &Arc<ClusterHandle>) {
        let id = Arc::as_ptr(cluster) as usize;
        if !lock(&self.subscribed).insert(id) {
            return;
        }
        let mut changes = cluster.live().subscribe();
        let state = Arc::downgrade(self);
        tokio::spawn(async move {
            loop {
                let received = changes.recv().await;
                let Some(state) = state.upgrade() else { return };
                match received {
                    Ok(instance) => {
                        let target = lock(&state.instances).get(&instance).cloned();
                        if let Some(obj) = target {
                            let _ = state.trigger.send(obj);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {
                        let all: Vec<ObjectRef<Application>> = lock(&state.instances).values().cloned().collect();
                        for obj in all {
                            let _ = state.trigger.send(obj);
                        }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => {
                        lock(&state.subscribed).remove(&id);
                        return;
                    }
                }
            }
        });
    }

    /// Forgets a deleted Application: metrics series, tracked refs, caches.
    fn forget(&self, ctx: &Context, app: &Application) {
        self.let_go(ctx, app);
        ctx.notifier.untrack(&owner_key(app));
        if let Some(shards) = ctx.shards() {
            shards.forget(&app.namespace().unwrap_or_default(), &app.name_any());
        }
    }

    /// Drops what this replica remembers of `app`'s reconciles (resolutions, self-heal and deletion
    /// counts, reported findings, its `capstan_app_info` series, live-change routing): on deletion,
    /// and under sharding when another replica reconciles it (which may change all of it meanwhile).
    /// The refs it tracks stay: the Repository controller polls for every replica's Applications.
    fn let_go(&self, ctx: &Context, app: &Application) {
        let key = ns_name(app);
        self.info.forget(&ctx.metrics.app_info, &key);
        lock(&self.resolutions).remove(&key);
        lock(&self.self_heal).remove(&key);
        lock(&self.deletion_attempts).remove(&key);
        lock(&self.dry_run_reported).remove(&key);
        lock(&self.forced).remove(&key);
        lock(&self.unresolved).remove(&key);
        lock(&self.reads).remove(&key);
        lock(&self.instances).retain(|_, r| !(r.name == app.name_any() && r.namespace == app.namespace()));
    }

    /// Sets `capstan_app_info` for `app`, removing its previous label set when it changed.
    fn record_info(&self, ctx: &Context, app: &Application, labels: Vec<String>) {
        self.info.record(&ctx.metrics.app_info, ns_name(app), labels);
    }

    fn deletion_failed(&self, app: &Application) -> u32 {
        let mut map = lock(&self.deletion_attempts);
        let n = map.entry(ns_name(app)).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }
}

/// What the main watch reacts to: spec (generation), the requested operation, refresh annotations,
/// finalizers and deletion — never the controller's own status writes.
fn trigger_hash(app: &Application) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    app.metadata.generation.hash(&mut h);
    serde_json::to_string(&app.operation).unwrap_or_default().hash(&mut h);
    let annotations = app.metadata.annotations.clone().unwrap_or_default();
    for key in crate::api::labels::REFRESH_ANNOTATIONS
        .iter()
        .chain([deletion::DELETION_POLICY_ANNOTATION].iter())
    {
        annotations.get(*key).hash(&mut h);
    }
    app.metadata.finalizers.hash(&mut h);
    app.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// The Applications in the same namespace that depend on `app` (to trigger when it changes).
fn dependents_of(all: &[Arc<Application>], app: &Application) -> Vec<ObjectRef<Application>> {
    let (ns, name) = (app.namespace(), app.name_any());
    all.iter()
        .filter(|a| a.namespace() == ns && a.spec.depends_on.contains(&name))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// The namespace's dependency graph as [`dependencies::Peer`]s.
pub fn peers(all: &[Arc<Application>], namespace: &str) -> BTreeMap<String, dependencies::Peer> {
    all.iter()
        .filter(|a| a.namespace().as_deref() == Some(namespace))
        .map(|a| {
            let status = a.status.as_ref();
            let peer = dependencies::Peer {
                depends_on: a.spec.depends_on.clone(),
                synced: status
                    .and_then(|s| s.sync.as_ref())
                    .is_some_and(|s| s.status == SyncStatusCode::Synced),
                healthy: status
                    .and_then(|s| s.health.as_ref())
                    .is_some_and(|h| h.status == HealthStatusCode::Healthy),
                idle: status
                    .and_then(|s| s.operation_state.as_ref())
                    .is_none_or(|o| !matches!(o.phase, OperationPhase::Running | OperationPhase::Terminating)),
            };
            (a.name_any(), peer)
        })
        .collect()
}

/// Periodic requeue: the reconcile interval plus up to [`MAX_JITTER`] (0 disables it).
pub fn periodic(interval: Duration, app: &Application) -> Option<Duration> {
    if interval.is_zero() {
        return None;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    ns_name(app).hash(&mut h);
    Instant::now().hash(&mut h);
    let jitter_ms = h.finish() % (MAX_JITTER.as_millis() as u64 + 1);
    Some(interval + Duration::from_millis(jitter_ms))
}

/// Runs the Application controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) -> anyhow::Result<()> {
    let (state, triggers) = State::new();
    let (reader, writer) = reflector::store();
    let apps = ctx
        .watch::<Application>(watcher::Config::default())
        .default_backoff()
        .modify(crate::controllers::slim_cached)
        .reflect(writer)
        .applied_objects()
        .predicate_filter(trigger_hash, Default::default());
    let (repo_reader, repo_writer) = reflector::store();
    let repos = ctx
        .watch::<Repository>(watcher::Config::default())
        .default_backoff()
        .reflect(repo_writer)
        .touched_objects();
    let _ = state.stores.repositories.set(repo_reader);
    let policy_sets = policy_set_stream(&ctx, &state);
    let _ = state.stores.applications.set(reader.clone());
    let peers_stream = peers_stream(&ctx, &state);
    if let Some(shards) = ctx.shards() {
        shards.wake_into(state.trigger.clone());
        shards.follow_applications(reader.clone());
    }
    let (listener, listener_ctx, queue) = (Arc::clone(&state), Arc::clone(&ctx), ctx.queue(CONTROLLER));
    on_new_commits(Arc::clone(&ctx.notifier), reader.clone(), move |change, apps| {
        wake::wake(&listener_ctx, &listener, &queue, change, apps);
    });
    follow_repository_listings(Arc::clone(&ctx.notifier), repos);
    let mapper_store = reader.clone();
    let (policy_store, operator_ns) = (reader.clone(), ctx.namespace().to_string());
    // NB: not a plain `wait_until_ready` in a task: kube-runtime wakes only one waiter.
    crate::controllers::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());
    let queue = ctx.queue(CONTROLLER);
    let controller = Controller::for_stream(queue.count(apps), reader)
        .watches_stream(
            peers_stream,
            queue.mapper(move |app: Application| dependents_of(&mapper_store.state(), &app)),
        )
        .watches_stream(
            policy_sets,
            queue.mapper(move |set: PolicySet| governed_by(&policy_store.state(), &set, &operator_ns)),
        )
        .reconcile_on(queue.refs(UnboundedReceiverStream::new(triggers)))
        .with_config(kube::runtime::controller::Config::default().concurrency(ctx.settings.app_concurrency))
        .graceful_shutdown_on(shutdown.wait());
    run_controller(controller, CONTROLLER, ctx, move |app, ctx| {
        reconcile(app, ctx, Arc::clone(&state))
    })
    .await;
    Ok(())
}

/// The PolicySets, kept in the state's store; marks them listed once the first list is in (until then
/// no sync starts: fail closed).
fn policy_set_stream(
    ctx: &Context,
    state: &Arc<State>,
) -> impl futures::Stream<Item = Result<PolicySet, watcher::Error>> + Send + 'static {
    let (policy_reader, policy_writer) = reflector::store();
    let _ = state.stores.policy_sets.set(policy_reader);
    let listed_state = Arc::clone(state);
    ctx.watch::<PolicySet>(watcher::Config::default())
        .default_backoff()
        .reflect(policy_writer)
        .inspect(move |event| match event {
            Ok(watcher::Event::InitDone) => listed_state.policies_listed.store(true, Ordering::Release),
            // Fail closed, but say why: without a listing (CRD missing, RBAC) no sync starts.
            Err(e) if !listed_state.policies_listed.load(Ordering::Acquire) => tracing::warn!(
                controller = CONTROLLER,
                "PolicySets cannot be listed ({e}); no sync starts until they can"
            ),
            _ => {}
        })
        .touched_objects()
}

/// Every Application event (status included): dependents react to their dependencies, and deleted
/// Applications are forgotten (metrics series, tracked refs).
fn peers_stream(
    ctx: &Arc<Context>,
    state: &Arc<State>,
) -> impl futures::Stream<Item = Result<Application, watcher::Error>> + Send + 'static {
    let (dep_ctx, dep_state) = (Arc::clone(ctx), Arc::clone(state));
    ctx.watch::<Application>(watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            let (ctx, state) = (Arc::clone(&dep_ctx), Arc::clone(&dep_state));
            async move {
                match event {
                    Ok(watcher::Event::Delete(app)) => {
                        state.forget(&ctx, &app);
                        None
                    }
                    Ok(watcher::Event::Apply(app) | watcher::Event::InitApply(app)) => Some(Ok(app)),
                    Ok(_) => None,
                    Err(e) => Some(Err(e)),
                }
            }
        })
}

/// The Applications a PolicySet applies to (re-evaluated when it changes).
fn governed_by(apps: &[Arc<Application>], set: &PolicySet, operator_ns: &str) -> Vec<ObjectRef<Application>> {
    apps.iter()
        .filter(|a| super::policy_access::applies_to(set, a, operator_ns))
        .map(|a| ObjectRef::from_obj(a.as_ref()))
        .collect()
}

/// Keeps the Repository store fed (credentials and last listed revisions are read from it).
/// Drains the Repository watch (it feeds the store) and announces the tracked refs whose listing in
/// `status.lastFetchedRevision` moved. The Repository controller announces its own listings as it writes
/// them; this is how a replica that does not run it learns of new commits (a standby, and under sharding
/// every replica but the leader, whose Applications would otherwise wait for their periodic reconcile).
/// The notifier drops the second announcement of a change. The first sight of a Repository is no change.
fn follow_repository_listings(
    notifier: Arc<RevisionNotifier>,
    repos: impl futures::Stream<Item = Result<Repository, watcher::Error>> + Send + 'static,
) {
    tokio::spawn(async move {
        let mut repos = std::pin::pin!(repos);
        let mut listed: HashMap<String, Vec<FetchedRevision>> = HashMap::new();
        while let Some(event) = repos.next().await {
            let Ok(repo) = event else { continue };
            let now = repo
                .status
                .as_ref()
                .map(|s| s.last_fetched_revision.clone())
                .unwrap_or_default();
            let Some(before) = listed.insert(ns_name(&repo), now.clone()) else {
                continue;
            };
            let Some(url) = url_key(&repo.spec.url) else { continue };
            let ns = repo.namespace().unwrap_or_default();
            for change in revision_changes(&ns, &url, &before, &now) {
                notifier.publish(change);
            }
        }
    });
}

/// `Action` for a requeue after `after` (at most the periodic interval).
fn requeue(after: Option<Duration>, periodic: Option<Duration>) -> Action {
    match (after, periodic) {
        (Some(a), Some(p)) => Action::requeue(a.min(p)),
        (Some(a), None) | (None, Some(a)) => Action::requeue(a),
        (None, None) => Action::await_change(),
    }
}

/// The object reference events are published about.
fn event_ref(app: &Application) -> k8s_openapi::api::core::v1::ObjectReference {
    app.object_ref(&())
}
