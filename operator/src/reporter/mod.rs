//! The reporter (`capstan run --controllers reporter`): keeps a SaaS informed of what Capstan manages
//! and carries out what it asks, over connections it opens itself. The protocol,
//! `capstan.reporter/v1`, is docs/reporter-protocol.md; this module follows it to the letter.
//!
//! It runs as its own Deployment; the operator does not know it exists, so a slow, down or hostile
//! SaaS never slows reconciliation.
//!
//! # Layout
//! Pure (no I/O, table-tested):
//! - [`project`]: the per-kind allow-list projection and `contentHash`;
//! - [`dirty`]: the dirty set keyed by uid, with tombstones and a cap;
//! - [`state`]: the watch cache of projections, and a term's plan (`(epoch, seq)`, snapshot, digest,
//!   delta batches of ≤ 200 items / 1 MiB, splitting and halving);
//! - [`policy`]: the status-code table, `Retry-After`, backoff;
//! - [`config`]: the settings ConfigMap, the credentials Secret, the checkpoint;
//! - [`wire`]: the JSON bodies.
//!
//! I/O around it:
//! - [`watch`]: watchers on the five kinds and on Events about them (never Secrets), feeding the cache;
//!   the watch on ConfigMap and Secret `capstan-reporter` (hot reload);
//! - leader election on Lease `capstan-reporter` through `controllers::leader` (one sender);
//! - [`sender`]: the leader's loops — batches (one in flight, flushed every second or at 200 items),
//!   digest and snapshot, heartbeats on their own lane, the checkpoint;
//! - [`tasks`]: the task long poll, carried out through the Kubernetes API as a user would;
//! - [`client`]: one HTTP request (gzip, HMAC, bounded answers, same-host redirects only).

pub mod client;
pub mod config;
pub mod dirty;
pub mod metrics;
pub mod policy;
pub mod project;
pub mod sender;
pub mod state;
pub mod tasks;
pub mod watch;
pub mod wire;

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{watch as channel, Notify};

use crate::controllers::leader::{self, LeaseSettings};
use crate::controllers::{lock, Context, Shutdown};
use config::LEASE_NAME;
pub use metrics::ReporterMetrics;
use state::{Cache, MAX_BATCH_ITEMS};

/// The controller name (readiness, logs).
pub const NAME: &str = "reporter";

/// The configuration in force: settings, the HTTP client built from them, and a counter that moves
/// whenever the credentials change (a new token lifts an auth stop).
#[derive(Debug)]
pub struct Endpoint {
    /// ConfigMap `capstan-reporter`.
    pub settings: config::Settings,
    /// The HTTP client.
    pub client: Arc<client::Client>,
    /// Bumped on every credentials change.
    pub credentials_generation: u64,
}

/// Why no request may be sent now.
#[derive(Debug, Default)]
pub struct Gate {
    /// 429/503: nothing before this instant.
    pub not_before: Option<Instant>,
    /// 401/403: when, and under which credentials.
    pub auth_failed: Option<(Instant, u64)>,
    /// The last failure, in one line (heartbeat `lastError`).
    pub last_error: Option<String>,
    /// Last acknowledgement (RFC 3339).
    pub last_ack_at: Option<String>,
}

impl Gate {
    /// `None` when a request may go now, else the instant to look again.
    pub fn closed_until(&mut self, now: Instant, credentials_generation: u64) -> Option<Instant> {
        if let Some((at, generation)) = self.auth_failed {
            if generation != credentials_generation {
                self.auth_failed = None;
            } else if now < at + policy::AUTH_RETRY {
                return Some(at + policy::AUTH_RETRY);
            }
        }
        self.not_before.filter(|t| *t > now)
    }
}

/// What every reporter task shares.
pub struct Shared {
    /// The watch cache and the dirty set.
    pub cache: Mutex<Cache>,
    /// Woken when the dirty set reaches a full batch.
    pub full_batch: Notify,
    /// Kinds whose initial list is in the cache.
    pub synced: Mutex<HashSet<project::Kind>>,
    /// Request gate.
    pub gate: Mutex<Gate>,
    /// The configuration (None until valid).
    pub endpoint: channel::Receiver<Option<Arc<Endpoint>>>,
    /// Metrics.
    pub metrics: ReporterMetrics,
    /// This process: pod name plus a random suffix.
    pub instance: String,
    /// Operator namespace.
    pub namespace: String,
    /// Kubernetes version (heartbeats).
    pub kubernetes_version: Mutex<String>,
    /// The operator's context (client, events).
    pub ctx: Arc<Context>,
    /// Set by any lane that met `409 stale_epoch`: the term ends.
    pub stale_epoch: Mutex<Option<u64>>,
    /// Set by a lane whose answer asked for a resync (`digest` or `full`).
    pub resync_request: Mutex<Option<String>>,
    /// Recent task ids (idempotency).
    pub recent_tasks: Mutex<tasks::RecentTasks>,
    /// Objects in batches not acknowledged yet (taken out of the dirty set, still backlog): per kind, and
    /// since when the oldest is waiting.
    pub unacked: Mutex<(std::collections::HashMap<project::Kind, usize>, Option<Instant>)>,
    /// Woken when a lane reaches the receiver after a failure: the other lanes end their backoff
    /// sleeps, so a receiver that comes back is noticed by the first lane to try, not by the slowest.
    pub reconnected: Notify,
}

impl Shared {
    /// Whether every watched kind has its initial list.
    pub fn all_synced(&self) -> bool {
        lock(&self.synced).len() == project::Kind::CAPSTAN.len() + 1
    }

    /// Records an object's state from a watch event.
    pub fn observe(&self, kind: project::Kind, obj: &serde_json::Value) {
        let Ok(p) = project::project(kind, obj) else { return };
        let full = {
            let mut cache = lock(&self.cache);
            cache.apply(p, Instant::now());
            cache.dirty.len() >= MAX_BATCH_ITEMS
        };
        if full {
            self.full_batch.notify_one();
        }
    }

    /// Records a deletion.
    pub fn forget(&self, uid: &str) {
        lock(&self.cache).remove(uid, Instant::now());
    }

    /// The backlog: pending objects per kind (dirty or in an unacknowledged batch), their number, and
    /// the age of the oldest change among them.
    pub fn backlog(&self) -> (std::collections::HashMap<project::Kind, usize>, usize, Option<Duration>) {
        let (mut per_kind, mut oldest) = {
            let cache = lock(&self.cache);
            (cache.dirty.per_kind(), cache.dirty.oldest_since())
        };
        let unacked = lock(&self.unacked);
        for (kind, n) in &unacked.0 {
            *per_kind.entry(*kind).or_insert(0) += n;
        }
        oldest = match (oldest, unacked.1) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let total = per_kind.values().sum();
        (per_kind, total, oldest.map(|t| t.elapsed()))
    }

    /// Records which batches are sent but not acknowledged (they are still backlog).
    pub fn note_unacked<'a>(&self, batches: impl Iterator<Item = &'a state::Batch>) {
        let mut per_kind = std::collections::HashMap::new();
        let mut oldest: Option<Instant> = None;
        for (_, entry) in batches.flat_map(|b| b.entries.iter()) {
            *per_kind.entry(entry.kind).or_insert(0) += 1;
            oldest = Some(oldest.map_or(entry.since, |o| o.min(entry.since)));
        }
        *lock(&self.unacked) = (per_kind, oldest);
    }

    /// The current endpoint.
    pub fn endpoint(&self) -> Option<Arc<Endpoint>> {
        self.endpoint.borrow().clone()
    }

    /// Waits until a request may be sent (gate open, endpoint configured) or `shutdown`; returns the
    /// endpoint, or `None` on shutdown.
    pub async fn wait_open(&self, shutdown: &Shutdown) -> Option<Arc<Endpoint>> {
        let mut endpoint_rx = self.endpoint.clone();
        loop {
            if shutdown.is_triggered() {
                return None;
            }
            let endpoint = self.endpoint();
            let wait = match &endpoint {
                None => Some(Instant::now() + Duration::from_secs(3600)),
                Some(e) => lock(&self.gate).closed_until(Instant::now(), e.credentials_generation),
            };
            match wait {
                None => return endpoint,
                Some(until) => {
                    tokio::select! {
                        _ = shutdown.wait() => return None,
                        _ = tokio::time::sleep_until(until.into()) => {}
                        _ = endpoint_rx.changed() => {}
                    }
                }
            }
        }
    }
}

/// This process's `instance`: the pod name (or host name) plus a random suffix, new at each start.
pub fn instance_name() -> String {
    crate::controllers::leader::identity("capstan-reporter")
}

/// The state the reporter's tasks share, empty: nothing cached, no endpoint until the settings watch
/// reads one from `endpoint`.
fn new_shared(
    ctx: &Arc<Context>,
    metrics: ReporterMetrics,
    endpoint: channel::Receiver<Option<Arc<Endpoint>>>,
) -> Arc<Shared> {
    Arc::new(Shared {
        cache: Mutex::new(Cache::new(dirty::DEFAULT_CAP)),
        full_batch: Notify::new(),
        synced: Mutex::new(HashSet::new()),
        gate: Mutex::new(Gate::default()),
        endpoint,
        metrics,
        instance: instance_name(),
        namespace: ctx.namespace().to_string(),
        kubernetes_version: Mutex::new(String::new()),
        ctx: Arc::clone(ctx),
        stale_epoch: Mutex::new(None),
        resync_request: Mutex::new(None),
        recent_tasks: Mutex::new(tasks::RecentTasks::default()),
        reconnected: Notify::new(),
        unacked: Mutex::new(Default::default()),
    })
}

/// Runs the reporter until `shutdown`: watchers, the settings watch, the Lease, and (while leading)
/// the sender, heartbeats and tasks.
pub async fn run(ctx: Arc<Context>, metrics: ReporterMetrics, shutdown: Shutdown) -> anyhow::Result<()> {
    ctx.readiness.register(NAME);
    let client = ctx.client.clone();
    let namespace = ctx.namespace().to_string();
    let (endpoint_tx, endpoint_rx) = channel::channel(None);
    let shared = new_shared(&ctx, metrics, endpoint_rx);
    tracing::info!(instance = shared.instance, "reporter starting");
    if let Ok(v) = client.apiserver_version().await {
        *lock(&shared.kubernetes_version) = v.git_version;
    }
    let mut tasks = tokio::task::JoinSet::new();
    for kind in project::Kind::CAPSTAN.into_iter().chain([project::Kind::Event]) {
        tasks.spawn(watch::objects(
            client.clone(),
            kind,
            Arc::clone(&shared),
            shutdown.clone(),
        ));
    }
    tasks.spawn(watch::settings(
        client.clone(),
        namespace.clone(),
        endpoint_tx,
        Arc::clone(&shared),
        shutdown.clone(),
    ));
    let (leading_tx, leading_rx) = channel::channel(false);
    let (step_down_tx, step_down_rx) = channel::channel(0u64);
    let lease = LeaseSettings::new(LEASE_NAME, &namespace, shared.instance.clone());
    tasks.spawn(leader::run(
        client.clone(),
        lease,
        leading_tx,
        None,
        Some(step_down_rx),
        shutdown.clone(),
    ));
    tasks.spawn(sender::run(
        Arc::clone(&shared),
        leading_rx,
        step_down_tx,
        shutdown.clone(),
    ));
    let ready = Arc::clone(&shared);
    tasks.spawn(async move {
        while !ready.all_synced() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        ready.ctx.readiness.mark_ready(NAME);
        tracing::info!(controller = NAME, "caches synced");
    });
    while tasks.join_next().await.is_some() {
        if shutdown.is_triggered() {
            break;
        }
    }
    shutdown.wait().await;
    let drained = tokio::time::timeout(Duration::from_secs(10), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tasks.abort_all();
    }
    Ok(())
}
