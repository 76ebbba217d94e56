//! The shared context every controller receives: built once in `main`, never re-read per reconcile.
//!
//! It holds the Kubernetes client (wrapped in [`KubeRequestLayer`] so every API request is counted
//! in `capstan_kube_requests_total{verb,code}`), the operator namespace, the Git source, metrics,
//! the event recorder, the [`RevisionNotifier`] hand-off, readiness flags and per-object backoff.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::client::ClientBuilder;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::Client;

use super::error::{BackoffPolicy, Backoffs};
use super::notifier::RevisionNotifier;
use super::queue::QueueDepth;
use super::shard::Shards;
use crate::cluster::requests::{KubeRequestLayer, WriteFence};
use crate::cluster::scope::{self, WatchScope, WatchStream};
use crate::cluster::ClusterClients;
use crate::metrics::Metrics;
use crate::render::{Binaries, CachingRenderer};
use crate::source::GitSource;
use crate::text::truncate;

/// The `reportingController` of Capstan's events.
pub const REPORTER: &str = "capstan";
/// Byte budget of the rendered-manifest cache (memory only; docs/architecture.md, "Where state lives").
const RENDER_CACHE_BYTES: usize = 256 << 20;
/// Longest event note kept (the API limit is 1 KiB).
const MAX_EVENT_NOTE: usize = 1000;

/// Default of `--sync-timeout`: long enough for slow migrations, short enough that a hook that never
/// completes does not hold an Application forever (Argo CD has no default; argo-cd#4811).
pub const DEFAULT_SYNC_TIMEOUT: Duration = Duration::from_secs(3600);

/// Operator-wide settings from the command line.
#[derive(Clone, Debug)]
pub struct Settings {
    /// The operator namespace (shared Repositories and Clusters, settings, webhook Secret).
    pub namespace: String,
    /// Periodic reconcile interval of controllers that have no interval of their own.
    pub reconcile_interval: Duration,
    /// Bound on one git network operation (the Git source has its own, this one is the outer one).
    pub git_timeout: Duration,
    /// Backoff of transient reconcile errors.
    pub backoff: BackoffPolicy,
    /// Minimum spacing of refresh requests for one Repository (webhook bursts).
    pub refresh_coalesce: Duration,
    /// Delay between two sync waves (`--sync-wave-delay`, Argo CD's 2 s).
    pub wave_delay: Duration,
    /// Applications reconciled at once (`--app-concurrency`).
    pub app_concurrency: u16,
    /// A sync operation still running this long after its start is terminated (`--sync-timeout`;
    /// `None` = never).
    pub sync_timeout: Option<Duration>,
    /// ServiceAccount (in the Application's namespace) whose rights the writes of an Application outside
    /// the operator namespace use when it names none (`--default-service-account`).
    pub default_service_account: String,
    /// Where the controllers list and watch (`--watch-namespaces`; the whole cluster by default).
    pub watch: WatchScope,
    /// `file://` repository URLs for objects in the operator namespace (`--allow-local-repositories`;
    /// never for other namespaces, see [`crate::source::UrlPolicy`]).
    pub allow_local_repositories: bool,
}

/// Default of `--default-service-account`.
pub const DEFAULT_SERVICE_ACCOUNT: &str = "capstan-deployer";

impl Default for Settings {
    fn default() -> Self {
        Settings {
            namespace: "capstan-system".into(),
            reconcile_interval: Duration::from_secs(120),
            git_timeout: Duration::from_secs(90),
            backoff: BackoffPolicy::default(),
            refresh_coalesce: Duration::from_secs(1),
            wave_delay: crate::engine::plan::DEFAULT_WAVE_DELAY,
            app_concurrency: 32,
            sync_timeout: Some(DEFAULT_SYNC_TIMEOUT),
            default_service_account: DEFAULT_SERVICE_ACCOUNT.into(),
            watch: WatchScope::Cluster,
            allow_local_repositories: false,
        }
    }
}

/// Everything a controller needs; see the module documentation.
pub struct Context {
    /// Kubernetes client (requests counted).
    pub client: Client,
    /// Settings from the command line.
    pub settings: Settings,
    /// Git operations (shared cache).
    pub git: Arc<dyn GitSource>,
    /// Metrics.
    pub metrics: Metrics,
    /// Revision changes, tracked refs and refresh requests.
    pub notifier: Arc<RevisionNotifier>,
    /// Which controllers have synced their caches (shared with `/readyz`).
    pub readiness: Arc<Readiness>,
    /// Consecutive transient failures per object.
    pub backoffs: Backoffs,
    recorder: Recorder,
    /// Destination clusters (set with [`Context::with_clusters`]; the Application and Cluster
    /// controllers need it).
    clusters: Option<Arc<ClusterClients>>,
    /// Manifest rendering with its in-memory cache (bounded).
    renderer: Arc<CachingRenderer>,
    /// Helm and Kustomize binaries.
    binaries: Binaries,
    /// Compiled PolicySets, shared by the controllers that evaluate or report them.
    pub policies: crate::policy::Cache,
    /// Open while this replica may write (always, without leader election): closed, reconciles are
    /// skipped and the clients built with it refuse writes.
    pub fence: WriteFence,
    /// Each controller's queue depth (`capstan_reconcile_queue_depth`), made on first use.
    queues: Mutex<BTreeMap<&'static str, Arc<QueueDepth>>>,
    /// With `--shard-count`: this replica's shards, and the client (gated per Application) the
    /// Application controller writes with.
    sharding: Option<(Arc<Shards>, Client)>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// Builds the context. `client` should come from [`counting_client`].
    pub fn new(client: Client, settings: Settings, git: Arc<dyn GitSource>, metrics: Metrics) -> Self {
        let instance = std::env::var("POD_NAME").ok().or_else(hostname);
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: REPORTER.into(),
                instance,
            },
        );
        let notifier = Arc::new(RevisionNotifier::new(&settings.namespace, settings.refresh_coalesce));
        Context {
            client,
            settings,
            git,
            metrics,
            notifier,
            readiness: Arc::default(),
            backoffs: Backoffs::default(),
            recorder,
            clusters: None,
            renderer: Arc::new(CachingRenderer::new(RENDER_CACHE_BYTES)),
            binaries: Binaries::default(),
            policies: crate::policy::Cache::default(),
            fence: WriteFence::open(),
            queues: Mutex::default(),
            sharding: None,
        }
    }

    /// The context of a replica under leader election: `fence` is the one its clients were built
    /// with, opened and closed by `controllers::leader::run`.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// The context of a sharded replica: the Application controller reconciles only the
    /// Applications of `shards`' clusters and writes through `apps_client` (whose layer asks
    /// `shards` about every write).
    pub fn with_shards(mut self, shards: Arc<Shards>, apps_client: Client) -> Self {
        self.sharding = Some((shards, apps_client));
        self
    }

    /// This replica's shards, when sharded.
    pub fn shards(&self) -> Option<&Arc<Shards>> {
        self.sharding.as_ref().map(|(s, _)| s)
    }

    /// The Application controller's context: this one, or under sharding one that shares every
    /// cache and hand-off with it but writes (events included) through the sharded client and is
    /// not held by the leader fence (its writes are decided per Application).
    pub fn application_context(self: &Arc<Self>) -> Arc<Context> {
        let Some((shards, client)) = &self.sharding else {
            return Arc::clone(self);
        };
        let mut ctx = Context::new(
            client.clone(),
            self.settings.clone(),
            Arc::clone(&self.git),
            self.metrics.clone(),
        );
        ctx.notifier = Arc::clone(&self.notifier);
        ctx.readiness = Arc::clone(&self.readiness);
        ctx.clusters = self.clusters.clone();
        ctx.renderer = Arc::clone(&self.renderer);
        ctx.binaries = self.binaries.clone();
        ctx.sharding = Some((Arc::clone(shards), client.clone()));
        Arc::new(ctx)
    }

    /// The context with destination cluster clients (the operator's own cluster and Cluster objects).
    pub fn with_clusters(mut self, clusters: Arc<ClusterClients>) -> Self {
        self.clusters = Some(clusters);
        self
    }

    /// The context with other Helm/Kustomize binaries.
    pub fn with_binaries(mut self, binaries: Binaries) -> Self {
        self.binaries = binaries;
        self
    }

    /// Destination cluster clients, when configured.
    pub fn clusters(&self) -> Option<&Arc<ClusterClients>> {
        self.clusters.as_ref()
    }

    /// The shared renderer.
    pub fn renderer(&self) -> &CachingRenderer {
        &self.renderer
    }

    /// Helm and Kustomize binaries for renders.
    pub fn render_binaries(&self) -> Binaries {
        self.binaries.clone()
    }

    /// A watch of `K` where this installation watches (`--watch-namespaces`): every controller opens
    /// its watches here, so a namespaced install never makes a cluster-wide request.
    pub fn watch<K>(&self, config: kube::runtime::watcher::Config) -> WatchStream<K>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        scope::watch(&self.client, &self.settings.watch, config)
    }

    /// The queue depth of `controller`: its streams mark objects triggered, `run_controller` marks
    /// them started.
    pub fn queue(&self, controller: &'static str) -> Arc<QueueDepth> {
        let mut queues = super::lock(&self.queues);
        Arc::clone(
            queues.entry(controller).or_insert_with(|| {
                QueueDepth::new(self.metrics.reconcile_queue_depth.with_label_values(&[controller]))
            }),
        )
    }

    /// The operator namespace.
    pub fn namespace(&self) -> &str {
        &self.settings.namespace
    }

    /// Which transports repository URLs may use, per namespace.
    pub fn url_policy(&self) -> crate::source::UrlPolicy {
        crate::source::UrlPolicy {
            operator_namespace: self.settings.namespace.clone(),
            allow_local: self.settings.allow_local_repositories,
        }
    }

    /// The event recorder (reporter `capstan`); events go to the namespace of the object.
    pub fn recorder(&self) -> Recorder {
        self.recorder.clone()
    }

    /// Publishes an event about `regarding`. Never fails the reconcile: a rejected event is logged.
    /// `note` must already be sanitized; it is truncated to the API's limit.
    pub async fn publish_event(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) {
        if let Some(shards) = self.shards() {
            let (ns, name) = (regarding.namespace.as_deref(), regarding.name.as_deref());
            if regarding.kind.as_deref() == Some("Application")
                && !shards.owns_application(ns.unwrap_or_default(), name.unwrap_or_default())
            {
                // Another replica's Application now: its events are that replica's to publish.
                return;
            }
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            note: Some(truncate(note, MAX_EVENT_NOTE)),
            action: action.to_string(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, regarding).await {
            tracing::warn!(
                object = regarding.name.as_deref().unwrap_or_default(),
                namespace = regarding.namespace.as_deref().unwrap_or_default(),
                reason,
                "cannot publish event: {e}"
            );
        }
    }
}

fn hostname() -> Option<String> {
    std::fs::read_to_string("/etc/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
}

/// Readiness of the controllers: `/readyz` answers 200 once every registered controller has synced
/// its caches.
#[derive(Debug, Default)]
pub struct Readiness {
    controllers: Mutex<BTreeMap<String, bool>>,
}

impl Readiness {
    /// Registers a controller that is starting (not ready yet).
    pub fn register(&self, name: &str) {
        self.lock().entry(name.to_string()).or_insert(false);
    }

    /// Marks a controller's caches as synced.
    pub fn mark_ready(&self, name: &str) {
        self.lock().insert(name.to_string(), true);
    }

    /// Whether every registered controller is ready.
    pub fn is_ready(&self) -> bool {
        self.lock().values().all(|ready| *ready)
    }

    /// `Ok` when ready, else the controllers still syncing.
    pub fn check(&self) -> Result<(), Vec<String>> {
        let pending = self.pending();
        if pending.is_empty() {
            Ok(())
        } else {
            Err(pending)
        }
    }

    /// Controllers not ready yet.
    pub fn pending(&self) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|(_, ready)| !**ready)
            .map(|(name, _)| name.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, bool>> {
        self.controllers.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Builds a client from `config` whose every request is counted in
/// `capstan_kube_requests_total{verb,code}`.
pub fn counting_client(config: kube::Config, metrics: &Metrics) -> Result<Client, kube::Error> {
    fenced_client(config, KubeRequestLayer::new(metrics.kube_requests.clone()))
}

/// A client whose every request goes through `layer` (counted, and held back while its fence is
/// closed).
pub fn fenced_client(config: kube::Config, layer: KubeRequestLayer) -> Result<Client, kube::Error> {
    Ok(ClientBuilder::try_from(without_hidden_retries(config))?
        .with_layer(&layer)
        .build())
}

/// `config` without kube's built-in retry of 429/503/504. That retry sits below any layer a client adds, so
/// the failed attempts were never counted in `capstan_kube_requests_total`, and it waits up to 15 times as
/// long as the server's `Retry-After` asks (minutes), holding a reconcile worker and hiding the failure from
/// `capstan_reconcile_errors_total`. Every caller has its own bounded retry instead: a reconcile error
/// backs off per object (`error_policy`), watches back off, leader election retries every retry period.
pub fn without_hidden_retries(mut config: kube::Config) -> kube::Config {
    config.default_retry = false;
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_every_registered_controller() {
        let r = Readiness::default();
        assert!(r.is_ready());
        r.register("repository");
        r.register("application");
        assert!(!r.is_ready());
        r.mark_ready("repository");
        assert_eq!(r.pending(), vec!["application"]);
        r.mark_ready("application");
        assert!(r.is_ready());
    }
}
