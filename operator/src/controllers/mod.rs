//! kube-runtime glue: one module per CRD, started by [`run`].
//!
//! # How a controller is built (follow this for Application, Cluster, ApplicationSet, PolicySet)
//! - `controllers/<kind>.rs` exposes `pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) ->
//!   anyhow::Result<()>`: it builds a `kube::runtime::Controller` (generation predicate on the main
//!   stream so its own status writes do not retrigger it; `watches_stream` for related objects),
//!   registers itself in [`Context::readiness`] and marks itself ready once its store is synced,
//!   and stops on `shutdown`.
//! - `reconcile(obj, ctx)` wraps the real pipeline in [`instrumented`] (metrics, logs, backoff
//!   reset) and returns `Result<Action, error::Error>`; [`error::error_policy`] is the only place
//!   where an error becomes a requeue.
//! - status is computed as a whole and written with [`status::write_status`]: ONE server-side
//!   apply per reconcile, none when only timestamps would change; conditions via
//!   [`status::set_condition`] so `lastTransitionTime` only moves on a status change.
//! - events via [`Context::publish_event`] on transitions only; messages are sanitized first.
//! - revisions flow through [`notifier::RevisionNotifier`]: subscribe to changes, `track` the refs
//!   each object uses, `request_refresh` to get a Repository re-listed now.

pub mod application;
pub mod application_set;
pub mod cluster;
pub mod context;
pub mod error;
pub mod git_access;
pub mod leader;
pub mod notifier;
pub mod policy_access;
pub mod policy_set;
pub mod queue;
pub mod repository;
pub mod shard;
pub mod status;
pub mod stores;
#[cfg(test)]
pub(crate) mod testsupport;

use std::collections::BTreeSet;
use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use tokio_util::sync::CancellationToken;

pub use context::{Context, Settings};
pub use error::{Error, ErrorKind, KubeStep};

/// The controllers Capstan knows, in start order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ControllerName {
    /// Repositories: `ls-remote` polling, credentials, verification, revision hand-off.
    Repository,
    /// Clusters: connectivity probes.
    Cluster,
    /// PolicySets: Rego compilation.
    PolicySet,
    /// Applications: render, diff, sync, health.
    Application,
    /// ApplicationSets: generators and templates.
    ApplicationSet,
    /// The SaaS reporter (opt-in; its own Deployment).
    Reporter,
}

impl ControllerName {
    /// Every known controller.
    pub const ALL: [ControllerName; 6] = [
        ControllerName::Repository,
        ControllerName::Cluster,
        ControllerName::PolicySet,
        ControllerName::Application,
        ControllerName::ApplicationSet,
        ControllerName::Reporter,
    ];

    /// The name used in `--controllers`, metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            ControllerName::Repository => "repository",
            ControllerName::Cluster => "cluster",
            ControllerName::PolicySet => "policyset",
            ControllerName::Application => "application",
            ControllerName::ApplicationSet => "applicationset",
            ControllerName::Reporter => "reporter",
        }
    }

    /// Whether this controller exists in this build (the others are accepted and skipped).
    pub fn is_built(self) -> bool {
        matches!(
            self,
            ControllerName::Repository
                | ControllerName::Application
                | ControllerName::Cluster
                | ControllerName::PolicySet
                | ControllerName::ApplicationSet
                | ControllerName::Reporter
        )
    }
}

impl fmt::Display for ControllerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ControllerName {
    type Err = UnknownController;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase();
        ControllerName::ALL
            .into_iter()
            .find(|c| c.as_str() == wanted)
            .ok_or_else(|| UnknownController(s.trim().to_string()))
    }
}

/// A `--controllers` entry that names no controller.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown controller {0:?}; known: repository, cluster, policyset, application, applicationset, reporter")]
pub struct UnknownController(pub String);

/// The controllers selected with `--controllers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerSet(BTreeSet<ControllerName>);

impl Default for ControllerSet {
    /// Every controller but the reporter.
    fn default() -> Self {
        ControllerSet(
            ControllerName::ALL
                .into_iter()
                .filter(|c| *c != ControllerName::Reporter)
                .collect(),
        )
    }
}

impl ControllerSet {
    /// Parses `--controllers` values (already split on commas). Empty means the default set;
    /// unknown names are refused.
    pub fn parse<S: AsRef<str>>(names: &[S]) -> Result<Self, UnknownController> {
        let names: Vec<&str> = names
            .iter()
            .map(|s| s.as_ref().trim())
            .filter(|s| !s.is_empty())
            .collect();
        if names.is_empty() {
            return Ok(ControllerSet::default());
        }
        names
            .into_iter()
            .map(ControllerName::from_str)
            .collect::<Result<BTreeSet<_>, _>>()
            .map(ControllerSet)
    }

    /// Whether `name` is selected.
    pub fn contains(&self, name: ControllerName) -> bool {
        self.0.contains(&name)
    }

    /// The selected controllers, in start order.
    pub fn iter(&self) -> impl Iterator<Item = ControllerName> + '_ {
        self.0.iter().copied()
    }
}

/// Cooperative shutdown: cancelled on SIGTERM/SIGINT (see [`Shutdown::on_signals`]) or by a caller.
#[derive(Clone, Debug, Default)]
pub struct Shutdown(CancellationToken);

impl Shutdown {
    /// A shutdown that only a call to [`trigger`](Self::trigger) fires.
    pub fn new() -> Self {
        Shutdown::default()
    }

    /// A shutdown fired by SIGTERM or SIGINT (must be called inside a Tokio runtime).
    pub fn on_signals() -> std::io::Result<Self> {
        use tokio::signal::unix::{signal, SignalKind};
        let shutdown = Shutdown::new();
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        let fire = shutdown.clone();
        tokio::spawn(async move {
            let which = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!("{which} received, shutting down");
            fire.trigger();
        });
        Ok(shutdown)
    }

    /// Fires the shutdown.
    pub fn trigger(&self) {
        self.0.cancel();
    }

    /// Whether the shutdown has fired.
    pub fn is_triggered(&self) -> bool {
        self.0.is_cancelled()
    }

    /// Resolves once the shutdown fires (`Send + Sync + 'static`, as kube-runtime wants).
    pub fn wait(&self) -> impl Future<Output = ()> + Send + Sync + 'static {
        self.0.clone().cancelled_owned()
    }
}

/// Starts the selected controllers that exist and runs them until `shutdown` fires. Known
/// controllers that are not built yet are logged and skipped. The reporter is not started here: it
/// needs its own metrics and is started by the binary (`crate::reporter::run`).
pub async fn run(ctx: Arc<Context>, controllers: &ControllerSet, shutdown: Shutdown) -> anyhow::Result<()> {
    let mut tasks = tokio::task::JoinSet::new();
    for name in controllers.iter().filter(|c| *c != ControllerName::Reporter) {
        if !name.is_built() {
            tracing::info!(controller = name.as_str(), "controller not built yet; skipped");
            continue;
        }
        ctx.readiness.register(name.as_str());
        let (ctx, shutdown) = (Arc::clone(&ctx), shutdown.clone());
        tracing::info!(controller = name.as_str(), "starting controller");
        match name {
            ControllerName::Repository => tasks.spawn(async move { (name, repository::run(ctx, shutdown).await) }),
            ControllerName::Application => {
                let ctx = ctx.application_context();
                tasks.spawn(async move { (name, application::run(ctx, shutdown).await) })
            }
            ControllerName::Cluster => tasks.spawn(async move { (name, cluster::run(ctx, shutdown).await) }),
            ControllerName::PolicySet => tasks.spawn(async move { (name, policy_set::run(ctx, shutdown).await) }),
            ControllerName::ApplicationSet => {
                tasks.spawn(async move { (name, application_set::run(ctx, shutdown).await) })
            }
            _ => continue,
        };
    }
    let mut failure = None;
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok((name, Ok(()))) => tracing::info!(controller = name.as_str(), "controller stopped"),
            Ok((name, Err(e))) => {
                tracing::error!(controller = name.as_str(), "controller failed: {e:#}");
                shutdown.trigger();
                failure.get_or_insert(e);
            }
            Err(e) => {
                shutdown.trigger();
                failure.get_or_insert(anyhow::anyhow!("controller task panicked: {e}"));
            }
        }
    }
    failure.map_or(Ok(()), Err)
}

/// Locks `m`, taking the data back from a poisoned lock: a panicked reconcile must not wedge the
/// controller's shared state.
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A random `u64` from the standard library's per-process random keys (no RNG crate for jitter and
/// instance suffixes).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.finish()
}

/// `namespace/name`: the key of an object in a controller's in-memory state.
pub(crate) fn ns_name<K: kube::ResourceExt>(obj: &K) -> String {
    format!("{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Trims an object on its way into a controller's cache: `managedFields` and kubectl's
/// `last-applied-configuration` annotation, which no controller reads from a cached copy. Every status
/// write adds field-ownership entries, so for Applications these were most of the cache (S3 heap
/// profile: ~26 KB per Application and store).
pub fn slim_cached<K: kube::Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    meta.managed_fields = None;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(crate::engine::diff::normalize::LAST_APPLIED);
    }
}

/// Marks controller `name` ready in [`Context::readiness`] once `store` has its initial list.
///
/// NB: kube-runtime's `Store::wait_until_ready` wakes only the most recent waiter (a oneshot
/// receiver shared by every clone), and the `Controller` itself waits on the same store; a second
/// long-lived waiter would never be woken. So this re-polls with a short timeout instead.
pub fn mark_ready_when_synced<K>(ctx: Arc<Context>, name: &'static str, store: kube::runtime::reflector::Store<K>)
where
    K: kube::runtime::reflector::Lookup + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Send + Sync,
{
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    ctx.readiness.mark_ready(name);
                    tracing::info!(controller = name, "caches synced");
                    return;
                }
                Ok(Err(_)) => return,
                Err(_) => continue,
            }
        }
    });
}

/// Runs `controller` until it stops (on shutdown): every reconcile goes through [`instrumented`]
/// (metrics, logs, backoff reset) and every error through [`error::error_policy`]; a reconcile
/// starting takes its object off the queue depth ([`queue`]).
pub(crate) async fn run_controller<K, F, Fut>(
    controller: kube::runtime::Controller<K>,
    name: &'static str,
    ctx: Arc<Context>,
    mut reconcile: F,
) where
    K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + fmt::Debug + Send + Sync + 'static,
    F: FnMut(Arc<K>, Arc<Context>) -> Fut,
    Fut: Future<Output = Result<Action, Error>> + Send + 'static,
{
    use futures::StreamExt;
    let queue = ctx.queue(name);
    let found_gone = Arc::clone(&queue);
    controller
        .run(
            move |obj, ctx| {
                queue.started(&ns_name(obj.as_ref()));
                let fut = reconcile(Arc::clone(&obj), Arc::clone(&ctx));
                async move { instrumented(name, obj.as_ref(), &ctx, fut).await }
            },
            error::error_policy::<K>,
            ctx,
        )
        .for_each(move |result| {
            controller_event(name, &found_gone, result);
            futures::future::ready(())
        })
        .await;
}

/// What `Controller::run` yields besides reconciles: a triggered object that is gone no longer waits;
/// queue and watch errors are logged at debug level (reconcile errors were logged by `instrumented`).
fn controller_event<T, E, Q>(
    name: &'static str,
    queue: &queue::QueueDepth,
    result: Result<T, kube::runtime::controller::Error<E, Q>>,
) where
    E: std::error::Error,
    Q: std::error::Error,
{
    if let Err(e) = result {
        match e {
            kube::runtime::controller::Error::ReconcilerFailed(..) => {}
            kube::runtime::controller::Error::ObjectNotFound(r) => queue.started(&queue::ref_key(r.as_ref())),
            other => tracing::debug!(controller = name, "controller event: {other}"),
        }
    }
}

/// How soon a standby replica looks at an object again.
const STANDBY_RECHECK: Duration = Duration::from_secs(2);

/// The outcome label of a reconcile in `capstan_reconcile_total{result}`.
fn result_label(result: &Result<Action, Error>) -> &'static str {
    match result {
        Ok(_) => "success",
        Err(e) => match e.kind() {
            ErrorKind::Waiting(_) => "waiting",
            ErrorKind::Stalled => "stalled",
            ErrorKind::Transient => "error",
        },
    }
}

/// Runs one reconcile of `obj` by `controller` (none in a standby replica, whose fence is closed): records `capstan_reconcile_total` and (for
/// stalled and transient errors) `capstan_reconcile_errors_total`, logs the outcome (error
/// messages are sanitized by construction), and resets the object's backoff on success.
pub async fn instrumented<K>(
    controller: &'static str,
    obj: &K,
    ctx: &Context,
    reconcile: impl Future<Output = Result<Action, Error>>,
) -> Result<Action, Error>
where
    K: Resource<DynamicType = ()>,
{
    if !ctx.fence.is_open() {
        // A standby: its watches keep the caches warm, and it looks again soon so that it takes
        // over every object within moments of winning the Lease.
        return Ok(Action::requeue(STANDBY_RECHECK));
    }
    let in_flight = ctx.metrics.reconciles_in_flight.with_label_values(&[controller]);
    in_flight.inc();
    let timer = ctx
        .metrics
        .reconcile_duration
        .with_label_values(&[controller])
        .start_timer();
    let result = reconcile.await;
    timer.observe_duration();
    in_flight.dec();
    let label = result_label(&result);
    let category = result
        .as_ref()
        .err()
        .filter(|e| !matches!(e.kind(), ErrorKind::Waiting(_)))
        .map(Error::category);
    ctx.metrics.observe_reconcile(controller, label, category);
    let (ns, name) = (obj.namespace().unwrap_or_default(), obj.name_any());
    match &result {
        Ok(_) => {
            ctx.backoffs.reset(&error::object_key(obj));
            tracing::debug!(controller, namespace = ns, name, "reconciled");
        }
        Err(e) => match e.kind() {
            ErrorKind::Transient => {
                tracing::warn!(
                    controller,
                    namespace = ns,
                    name,
                    category = e.category(),
                    "reconcile failed: {e}"
                )
            }
            _ => tracing::info!(controller, namespace = ns, name, category = e.category(), "{e}"),
        },
    }
    result
}

/// Parses a Go duration (`300ms`, `1.5h`, `2h45m`, `0s`): units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`,
/// no sign. `0` alone is accepted, as in Go.
pub fn parse_duration(input: &str) -> Result<Duration, String> {
    let s = input.trim();
    let invalid = || format!("invalid duration {input:?}: expected e.g. 30s, 5m, 1h30m");
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() || s.len() > 32 {
        return Err(invalid());
    }
    let mut total = 0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(invalid)?;
        if num_end == 0 {
            return Err(invalid());
        }
        let value: f64 = rest[..num_end].parse().map_err(|_| invalid())?;
        let after = &rest[num_end..];
        let unit_end = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let factor = match &after[..unit_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return Err(invalid()),
        };
        total += value * factor;
        rest = &after[unit_end..];
    }
    if !total.is_finite() || total > 1e9 {
        return Err(invalid());
    }
    Ok(Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_selection() {
        let default = ControllerSet::parse::<&str>(&[]).unwrap();
        assert!(default.contains(ControllerName::Repository));
        assert!(default.contains(ControllerName::Application));
        assert!(!default.contains(ControllerName::Reporter));
        assert_eq!(default, ControllerSet::default());
        let some = ControllerSet::parse(&["repository", " Reporter "]).unwrap();
        assert_eq!(
            some.iter().collect::<Vec<_>>(),
            vec![ControllerName::Repository, ControllerName::Reporter]
        );
        let err = ControllerSet::parse(&["repository", "nope"]).unwrap_err();
        assert_eq!(err, UnknownController("nope".into()));
        assert!(err.to_string().contains("known: repository"));
        assert!(ControllerName::Repository.is_built());
        assert!(ControllerName::Reporter.is_built());
    }

    #[test]
    fn go_durations() {
        let ok = |s: &str| parse_duration(s).unwrap();
        assert_eq!(ok("60s"), Duration::from_secs(60));
        assert_eq!(ok("1m30s"), Duration::from_secs(90));
        assert_eq!(ok("500ms"), Duration::from_millis(500));
        assert_eq!(ok("1.5h"), Duration::from_secs(5400));
        assert_eq!(ok("2h45m"), Duration::from_secs(9900));
        assert_eq!(ok("0"), Duration::ZERO);
        assert_eq!(ok("0s"), Duration::ZERO);
        for bad in [
            "",
            "60",
            "-1s",
            "1d",
            "s",
            "1 s",
            "1m-5s",
            "ten",
            "1..5s",
            "9999999999h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[tokio::test]
    async fn shutdown_fires_once_triggered() {
        let s = Shutdown::new();
        assert!(!s.is_triggered());
        let waiter = tokio::spawn(s.wait());
        s.trigger();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("wait resolves")
            .expect("task");
        assert!(s.is_triggered());
    }
}
