//! I/O: the leader's loops. A term starts when the Lease is won and every cache is synced: the epoch
//! is taken from the checkpoint (read, incremented, written back with the read `resourceVersion`),
//! then the term snapshots (first registration) or digests, and sends deltas — one batch in flight,
//! flushed every second or as soon as 200 objects are dirty. Heartbeats and the task long poll run
//! on lanes of their own; every lane honours the same gate (`Retry-After`, auth stop).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{ConfigMap, ObjectReference};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::events::EventType;
use tokio::sync::watch;

use super::client::{Answer, TransportError};
use super::config::{Checkpoint, CHECKPOINT_NAME, SETTINGS_NAME};
use super::policy::{backoff, classify, random_unit, Verdict};
use super::project::Kind;
use super::state::{Batch, DigestChunk, Phase, Term, MAX_BATCH_ITEMS};
use super::tasks::FIELD_MANAGER;
use super::wire::{self, DigestAnswer, DigestBody, HeartbeatBody, PlainAnswer, ReportAnswer, ReportBody};
use super::{Endpoint, Shared};
use crate::controllers::{lock, Shutdown};

/// Heartbeat period.
pub const HEARTBEAT: Duration = Duration::from_secs(30);
/// Flush period of the dirty set.
pub const FLUSH: Duration = Duration::from_secs(1);
/// Least time between two periodic checkpoint writes.
pub const CHECKPOINT_EVERY: Duration = Duration::from_secs(30);

/// Why a term ended.
#[derive(Debug, PartialEq, Eq)]
enum TermEnd {
    Shutdown,
    LostLease,
    StepDown(u64),
}

/// What one request came to, for the lane that sent it.
#[derive(Debug)]
pub enum Outcome<T> {
    /// A 2xx with a well-formed body.
    Ok(T),
    /// 400/422.
    Split,
    /// 413.
    Halve,
    /// Try the same request again (after a backoff or when the gate opens).
    Again,
    /// A newer term exists.
    StepDown(u64),
    /// The receiver asks for a digest round (a 409 that is not `stale_epoch`).
    Resync,
}

/// Runs terms while this replica leads, until `shutdown`.
pub async fn run(
    shared: Arc<Shared>,
    mut leading: watch::Receiver<bool>,
    step_down: watch::Sender<u64>,
    shutdown: Shutdown,
) {
    let mut highest_epoch = 0u64;
    loop {
        shared.metrics.leader.set(0);
        while !(*leading.borrow() && shared.all_synced() && shared.endpoint().is_some()) {
            publish_gauges(&shared);
            tokio::select! {
                _ = shutdown.wait() => return,
                _ = leading.changed() => {}
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
        }
        shared.metrics.leader.set(1);
        let end = match start_term(&shared, highest_epoch, &shutdown).await {
            Some(term) => {
                highest_epoch = highest_epoch.max(term.term.epoch);
                run_term(&shared, term, &mut leading, &shutdown).await
            }
            None => TermEnd::LostLease,
        };
        shared.metrics.leader.set(0);
        match end {
            TermEnd::Shutdown => return,
            TermEnd::LostLease => tracing::info!("reporter lost the lease; standing by"),
            TermEnd::StepDown(epoch) => {
                highest_epoch = highest_epoch.max(epoch);
                step_down.send_modify(|n| *n += 1);
                // Wait for the Lease loop to let go before looking again.
                let _ = tokio::time::timeout(Duration::from_secs(5), leading.wait_for(|l| !*l)).await;
            }
        }
    }
}

/// One term's state.
struct Running {
    term: Term,
    checkpoint: Checkpoint,
    checkpoint_rv: Option<String>,
    last_checkpoint: Instant,
    checkpoint_stale: bool,
    attempt: u32,
}

/// Reads the checkpoint, takes the next epoch, writes it back (optimistically) and plans the term.
async fn start_term(shared: &Shared, highest_epoch: u64, shutdown: &Shutdown) -> Option<Running> {
    let api: Api<ConfigMap> = Api::namespaced(shared.ctx.client.clone(), &shared.namespace);
    for attempt in 0..10u32 {
        if shutdown.is_triggered() {
            return None;
        }
        let current = match api.get_opt(CHECKPOINT_NAME).await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("reading ConfigMap {CHECKPOINT_NAME} failed: {e}");
                tokio::time::sleep(backoff(attempt, random_unit())).await;
                continue;
            }
        };
        let rv = current.as_ref().and_then(|c| c.metadata.resource_version.clone());
        let mut checkpoint = Checkpoint::parse(&current.and_then(|c| c.data).unwrap_or_default());
        checkpoint.epoch = checkpoint.epoch.max(highest_epoch) + 1;
        checkpoint.next_seq = 1;
        match write_checkpoint(&api, &checkpoint, rv.as_deref()).await {
            Ok(rv) => {
                let mut term = Term::new(checkpoint.epoch, Phase::Delta);
                let (phase, trigger) = {
                    let mut cache = lock(&shared.cache);
                    cache.dirty.clear();
                    if checkpoint.last_snapshot_complete_at.is_some() {
                        (term.digest(&cache), "start")
                    } else {
                        (term.snapshot(&mut cache), "registration")
                    }
                };
                term.phase = phase;
                shared.metrics.resyncs.with_label_values(&[trigger]).inc();
                tracing::info!(epoch = checkpoint.epoch, trigger, "reporter term started");
                return Some(Running {
                    term,
                    checkpoint,
                    checkpoint_rv: Some(rv),
                    last_checkpoint: Instant::now(),
                    checkpoint_stale: false,
                    attempt: 0,
                });
            }
            Err(e) => {
                tracing::info!("checkpoint write raced ({e}); reading it again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    None
}

/// Creates or replaces the checkpoint ConfigMap; returns its new resourceVersion.
async fn write_checkpoint(api: &Api<ConfigMap>, cp: &Checkpoint, rv: Option<&str>) -> Result<String, kube::Error> {
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(CHECKPOINT_NAME.into()),
            resource_version: rv.map(str::to_string),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/component".to_string(),
                "reporter".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(cp.render()),
        ..Default::default()
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let written = match rv {
        Some(_) => api.replace(CHECKPOINT_NAME, &params, &cm).await?,
        None => api.create(&params, &cm).await?,
    };
    Ok(written.metadata.resource_version.unwrap_or_default())
}

impl Running {
    /// Writes the checkpoint if it changed and 30 s passed (or `now_anyway`). A conflict means another
    /// replica wrote a newer term: step down.
    async fn save(&mut self, shared: &Shared, now_anyway: bool) -> Result<(), TermEnd> {
        if !(now_anyway || (self.checkpoint_stale && self.last_checkpoint.elapsed() >= CHECKPOINT_EVERY)) {
            return Ok(());
        }
        self.checkpoint.next_seq = self.term.next_seq();
        let api: Api<ConfigMap> = Api::namespaced(shared.ctx.client.clone(), &shared.namespace);
        match write_checkpoint(&api, &self.checkpoint, self.checkpoint_rv.as_deref()).await {
            Ok(rv) => {
                self.checkpoint_rv = Some(rv);
                self.checkpoint_stale = false;
                self.last_checkpoint = Instant::now();
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let newer = api
                    .get_opt(CHECKPOINT_NAME)
                    .await
                    .ok()
                    .flatten()
                    .map(|c| Checkpoint::parse(&c.data.unwrap_or_default()).epoch)
                    .unwrap_or(0);
                if newer > self.term.epoch {
                    return Err(TermEnd::StepDown(newer));
                }
                self.checkpoint_rv = api
                    .get_opt(CHECKPOINT_NAME)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|c| c.metadata.resource_version);
                Ok(())
            }
            Err(e) => {
                tracing::warn!("writing ConfigMap {CHECKPOINT_NAME} failed: {e}");
                self.last_checkpoint = Instant::now();
                Ok(())
            }
        }
    }
}

async fn run_term(
    shared: &Arc<Shared>,
    mut run: Running,
    leading: &mut watch::Receiver<bool>,
    shutdown: &Shutdown,
) -> TermEnd {
    let term_stop = Shutdown::new();
    let epoch = run.term.epoch;
    *lock(&shared.stale_epoch) = None;
    let lanes = [
        tokio::spawn(heartbeats(Arc::clone(shared), epoch, term_stop.clone())),
        tokio::spawn(super::tasks::run(Arc::clone(shared), term_stop.clone())),
    ];
    let end = term_loop(shared, &mut run, leading, shutdown, &term_stop).await;
    term_stop.trigger();
    for lane in lanes {
        lane.abort();
    }
    if end == TermEnd::Shutdown {
        if let Err(e) = run.save(shared, true).await {
            tracing::info!("checkpoint not written at shutdown: {e:?}");
        }
    }
    end
}

async fn term_loop(
    shared: &Arc<Shared>,
    run: &mut Running,
    leading: &mut watch::Receiver<bool>,
    shutdown: &Shutdown,
    term_stop: &Shutdown,
) -> TermEnd {
    let mut in_flight: Option<Batch> = None;
    let mut digest_in_flight: Option<DigestChunk> = None;
    let mut last_flush = Instant::now() - FLUSH;
    loop {
        publish_gauges(shared);
        if shutdown.is_triggered() {
            return TermEnd::Shutdown;
        }
        if !*leading.borrow() {
            return TermEnd::LostLease;
        }
        if let Some(n) = lock(&shared.stale_epoch).take() {
            return TermEnd::StepDown(n);
        }
        if let Err(end) = run.save(shared, false).await {
            return end;
        }
        let asked = lock(&shared.resync_request).take();
        if let Some(what) = asked {
            resync(shared, run, &what, "receiver");
        }
        if matches!(run.term.phase, Phase::Delta) && lock(&shared.cache).dirty.overflowed() {
            tracing::warn!("the dirty set reached its cap: sending a full snapshot");
            shared.metrics.resyncs.with_label_values(&["overflow"]).inc();
            let phase = run.term.snapshot(&mut lock(&shared.cache));
            run.term.phase = phase;
        }
        if matches!(run.term.phase, Phase::Digest { .. }) && in_flight.is_none() && run.term.pending.is_empty() {
            if let Err(end) = digest_step(shared, run, &mut digest_in_flight, shutdown).await {
                return end;
            }
            continue;
        }
        if in_flight.is_none() {
            let due = last_flush + FLUSH;
            let full = lock(&shared.cache).dirty.len() >= run.term.max_items.min(MAX_BATCH_ITEMS);
            let has_work = !run.term.pending.is_empty() || matches!(run.term.phase, Phase::Snapshot { .. });
            if !full && !has_work && Instant::now() < due {
                tokio::select! {
                    _ = shutdown.wait() => return TermEnd::Shutdown,
                    _ = term_stop.wait() => {}
                    _ = leading.changed() => {}
                    _ = shared.full_batch.notified() => {}
                    _ = tokio::time::sleep_until(due.into()) => {}
                }
                continue;
            }
            last_flush = Instant::now();
            in_flight = run
                .term
                .next_batch(&mut lock(&shared.cache), Instant::now(), &wire::now_rfc3339());
            if in_flight.is_none() {
                continue;
            }
        }
        let batch = in_flight.take().expect("a batch is in flight here");
        shared.note_unacked(std::iter::once(&batch).chain(run.term.pending.iter()));
        let outcome = send_batch(shared, run, &batch, shutdown).await;
        // What stays unacknowledged is noted again at the next send; a batch that goes again stays counted.
        if !matches!(outcome, Some(Outcome::Again | Outcome::Resync)) {
            shared.note_unacked(run.term.pending.iter());
        }
        let Some(outcome) = outcome else {
            return TermEnd::Shutdown;
        };
        if let Err(end) = batch_answered(shared, run, batch, outcome, &mut in_flight) {
            return end;
        }
    }
}

/// One step of the digest phase: sends the next chunk of the digest (or again the one in flight) and
/// records which objects the receiver needs. `Err` ends the term.
async fn digest_step(
    shared: &Arc<Shared>,
    run: &mut Running,
    digest_in_flight: &mut Option<DigestChunk>,
    shutdown: &Shutdown,
) -> Result<(), TermEnd> {
    if digest_in_flight.is_none() {
        *digest_in_flight = run.term.next_digest_chunk(&lock(&shared.cache));
    }
    let Some(chunk) = digest_in_flight.take() else {
        return Ok(());
    };
    match send_digest(shared, run, &chunk, shutdown).await {
        Some(Outcome::Ok(need)) => {
            tracing::info!(
                part = chunk.part,
                listed = chunk.items.len(),
                needed = need.len(),
                "digest chunk answered"
            );
            run.term
                .digest_answered(&mut lock(&shared.cache), &chunk, &need, Instant::now());
        }
        Some(Outcome::StepDown(n)) => return Err(TermEnd::StepDown(n)),
        Some(_) => *digest_in_flight = Some(chunk),
        None => return Err(TermEnd::Shutdown),
    }
    Ok(())
}

/// What the answer to `batch` means for the term: acknowledged, split or halved, sent again (back in
/// `in_flight`), a resync, or (`Err`) the end of the term.
fn batch_answered(
    shared: &Shared,
    run: &mut Running,
    batch: Batch,
    outcome: Outcome<ReportAnswer>,
    in_flight: &mut Option<Batch>,
) -> Result<(), TermEnd> {
    match outcome {
        Outcome::Ok(answer) => acked(shared, run, batch, answer),
        Outcome::Split => {
            if let Some((kind, op)) = run.term.split(batch) {
                tracing::warn!(kind, op, "the receiver refused one item as invalid; dropped");
                shared.metrics.items_dropped.with_label_values(&["invalid"]).inc();
                shared.metrics.items.with_label_values(&[&kind, op, "dropped"]).inc();
            }
        }
        Outcome::Halve => run.term.halve(batch),
        Outcome::Again => *in_flight = Some(batch),
        Outcome::StepDown(n) => return Err(TermEnd::StepDown(n)),
        Outcome::Resync => {
            *in_flight = Some(batch);
            resync(shared, run, "digest", "conflict");
        }
    }
    Ok(())
}

/// Starts a digest round or a full snapshot the receiver asked for.
fn resync(shared: &Shared, run: &mut Running, what: &str, trigger: &str) {
    let phase = {
        let mut cache = lock(&shared.cache);
        if what == "full" {
            run.term.snapshot(&mut cache)
        } else {
            run.term.digest(&cache)
        }
    };
    run.term.phase = phase;
    shared.metrics.resyncs.with_label_values(&[trigger]).inc();
    tracing::info!(resync = what, trigger, "the receiver asked for a resync");
    publish(
        shared,
        EventType::Normal,
        "ReporterResync",
        format!("the receiver asked for a {what} resync ({trigger})"),
    );
}

fn acked(shared: &Shared, run: &mut Running, batch: Batch, answer: ReportAnswer) {
    let max_seq = batch.items.iter().map(|i| i.seq).max().unwrap_or(0);
    let now = Instant::now();
    let outcome = run.term.acked(&mut lock(&shared.cache), batch, &answer.results);
    let m = &shared.metrics;
    m.batches.with_label_values(&["acked"]).inc();
    for (kind, op, changed) in &outcome.stored {
        m.items.with_label_values(&[kind.as_str(), op, "stored"]).inc();
        m.end_to_end_latency
            .observe(now.saturating_duration_since(*changed).as_secs_f64());
    }
    for (kind, op, code) in &outcome.dropped {
        tracing::warn!(kind, op, code, "the receiver refused an item for good; dropped");
        m.items.with_label_values(&[kind.as_str(), op, "dropped"]).inc();
        m.items_dropped
            .with_label_values(&[&code.chars().take(32).collect::<String>()])
            .inc();
    }
    if outcome.retried > 0 {
        m.retries.with_label_values(&["item"]).inc_by(outcome.retried as u64);
    }
    let at = wire::now_rfc3339();
    m.last_ack_timestamp.set(
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default(),
    );
    lock(&shared.gate).last_ack_at = Some(at.clone());
    run.checkpoint.last_ack_seq = run.checkpoint.last_ack_seq.max(max_seq);
    run.checkpoint.last_ack_at = Some(at.clone());
    run.checkpoint_stale = true;
    if let Some(id) = outcome.snapshot_completed {
        tracing::info!(snapshot = id, "snapshot complete");
        run.checkpoint.last_snapshot_id = Some(id);
        run.checkpoint.last_snapshot_complete_at = Some(at);
        // Written now rather than within 30 s: a restart must not send the whole snapshot again.
        run.last_checkpoint = Instant::now() - CHECKPOINT_EVERY;
    }
    if let Some(what) = answer.resync.as_deref().filter(|w| matches!(*w, "digest" | "full")) {
        resync(shared, run, what, "receiver");
    }
}

async fn send_batch(
    shared: &Shared,
    run: &mut Running,
    batch: &Batch,
    shutdown: &Shutdown,
) -> Option<Outcome<ReportAnswer>> {
    let endpoint = shared.wait_open(shutdown).await?;
    let s = &endpoint.settings;
    let body = ReportBody {
        schema_version: wire::SCHEMA_VERSION,
        agent_id: &s.agent_id,
        cluster_name: &s.cluster_name,
        reporter_version: wire::REPORTER_VERSION,
        instance: &shared.instance,
        epoch: run.term.epoch,
        batch_id: &batch.id,
        sent_at: wire::now_rfc3339(),
        mode: if batch.snapshot.is_some() { "snapshot" } else { "delta" },
        snapshot: batch.snapshot.as_ref(),
        items: &batch.items,
    };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    let id = batch.id.clone();
    let result = post(&endpoint, "/reports", json, Some(id)).await;
    let outcome = shared
        .interpret(&endpoint, "reports", result, &mut run.attempt, shutdown)
        .await;
    if !matches!(outcome, Some(Outcome::Ok(_))) {
        shared.metrics.batches.with_label_values(&["failed"]).inc();
    }
    outcome
}

async fn send_digest(
    shared: &Shared,
    run: &mut Running,
    chunk: &DigestChunk,
    shutdown: &Shutdown,
) -> Option<Outcome<Vec<String>>> {
    let endpoint = shared.wait_open(shutdown).await?;
    let body = DigestBody {
        epoch: run.term.epoch,
        digest_id: &chunk.id,
        part: chunk.part,
        final_: chunk.final_,
        items: &chunk.items,
    };
    let json = serde_json::to_vec(&body).unwrap_or_default();
    let result = post(&endpoint, "/digest", json, None).await;
    let outcome: Option<Outcome<DigestAnswer>> = shared
        .interpret(&endpoint, "digest", result, &mut run.attempt, shutdown)
        .await;
    Some(match outcome? {
        Outcome::Ok(answer) => {
            if let Some(what) = answer.resync.as_deref().filter(|w| *w == "full") {
                resync(shared, run, what, "receiver");
                return Some(Outcome::Again);
            }
            Outcome::Ok(answer.need.into_iter().take(1_000_000).collect())
        }
        Outcome::Split | Outcome::Halve => {
            tracing::warn!("the receiver refused a digest chunk; sending deltas without it");
            Outcome::Ok(Vec::new())
        }
        Outcome::Resync => Outcome::Again,
        Outcome::Again => Outcome::Again,
        Outcome::StepDown(n) => Outcome::StepDown(n),
    })
}

/// Runs a blocking POST on the blocking pool.
pub async fn post(
    endpoint: &Endpoint,
    path: &str,
    json: Vec<u8>,
    idempotency_key: Option<String>,
) -> Result<Answer, TransportError> {
    let client = Arc::clone(&endpoint.client);
    let path = path.to_string();
    tokio::task::spawn_blocking(move || client.post(&path, &json, idempotency_key.as_deref()))
        .await
        .unwrap_or_else(|e| Err(TransportError::Other(format!("request task failed: {e}"))))
}

impl Shared {
    /// Turns an answer into an [`Outcome`] for the lane, applying what concerns every lane: the
    /// `Retry-After` gate, the auth stop (Event, metric), backoff sleeps, `connected`, metrics, logs.
    /// `None` on shutdown.
    pub async fn interpret<T: serde::de::DeserializeOwned>(
        &self,
        endpoint: &Endpoint,
        name: &'static str,
        result: Result<Answer, TransportError>,
        attempt: &mut u32,
        shutdown: &Shutdown,
    ) -> Option<Outcome<T>> {
        let m = &self.metrics;
        let answer = match result {
            Ok(a) => a,
            Err(e) => {
                m.request_duration.with_label_values(&[name, "error"]).observe(0.0);
                return self
                    .back_off(e.reason(), format!("{name}: {e}"), attempt, shutdown)
                    .await;
            }
        };
        let code = answer.status.to_string();
        m.request_duration
            .with_label_values(&[name, &code])
            .observe(answer.elapsed.as_secs_f64());
        let verdict = classify(
            answer.status,
            &answer.body,
            answer.retry_after.as_deref(),
            SystemTime::now(),
        );
        match verdict {
            Verdict::Ack => match serde_json::from_slice::<T>(&answer.body) {
                Ok(parsed) => {
                    *attempt = 0;
                    self.mark_connected();
                    Some(Outcome::Ok(parsed))
                }
                Err(_) => {
                    let why = format!("{name}: HTTP {code} with a malformed answer (not the expected JSON)");
                    self.back_off("malformed", why, attempt, shutdown).await
                }
            },
            Verdict::Split => {
                self.note_error(format!(
                    "{name}: HTTP {code}: the receiver refused the request as invalid"
                ));
                Some(Outcome::Split)
            }
            Verdict::Halve => {
                self.note_error(format!("{name}: HTTP 413: the request is too large for the receiver"));
                Some(Outcome::Halve)
            }
            Verdict::AuthFailed => {
                self.auth_failed(endpoint, &code);
                Some(Outcome::Again)
            }
            Verdict::StepDown { current_epoch } => {
                self.note_error(format!("{name}: the receiver holds a newer epoch {current_epoch}"));
                *lock(&self.stale_epoch) = Some(current_epoch);
                Some(Outcome::StepDown(current_epoch))
            }
            Verdict::Resync => Some(Outcome::Resync),
            Verdict::Wait(d) => {
                self.wait_as_asked(name, &code, d);
                Some(Outcome::Again)
            }
            Verdict::Backoff => {
                self.back_off(
                    &format!("http_{code}"),
                    format!("{name}: HTTP {code}"),
                    attempt,
                    shutdown,
                )
                .await
            }
        }
    }

    /// An acknowledged answer: the receiver is reachable (again).
    fn mark_connected(&self) {
        if self.metrics.connected.get() == 0 {
            self.metrics.connected.set(1);
            self.reconnected.notify_waiters();
        }
    }

    /// `Retry-After`: no lane sends before `d` has passed (the later of two gates wins).
    fn wait_as_asked(&self, name: &str, code: &str, d: Duration) {
        self.metrics.retries.with_label_values(&["retry_after"]).inc();
        self.metrics.connected.set(1);
        self.note_error(format!(
            "{name}: HTTP {code}: the receiver asks to wait {}s",
            d.as_secs()
        ));
        let mut gate = lock(&self.gate);
        let until = Instant::now() + d;
        gate.not_before = Some(gate.not_before.map_or(until, |t| t.max(until)));
    }

    fn note_error(&self, message: String) {
        tracing::warn!("reporter: {message}");
        lock(&self.gate).last_error = Some(message.chars().take(512).collect());
    }

    async fn back_off<T>(
        &self,
        reason: &str,
        message: String,
        attempt: &mut u32,
        shutdown: &Shutdown,
    ) -> Option<Outcome<T>> {
        self.metrics.retries.with_label_values(&[reason]).inc();
        self.metrics.connected.set(0);
        let wait = backoff(*attempt, random_unit());
        *attempt = attempt.saturating_add(1);
        self.note_error(format!("{message}; retrying in {:.1}s", wait.as_secs_f64()));
        tokio::select! {
            _ = shutdown.wait() => None,
            _ = tokio::time::sleep(wait) => Some(Outcome::Again),
            _ = self.reconnected.notified() => Some(Outcome::Again),
        }
    }

    fn auth_failed(&self, endpoint: &Endpoint, code: &str) {
        self.metrics.auth_failures.inc();
        let first = {
            let mut gate = lock(&self.gate);
            let first = gate.auth_failed.is_none();
            gate.auth_failed = Some((Instant::now(), endpoint.credentials_generation));
            first
        };
        let message = format!(
            "the receiver answered HTTP {code}: the token in Secret {SETTINGS_NAME} was refused; sending stops \
             until the Secret changes (or 5 minutes pass)"
        );
        self.note_error(message.clone());
        if first {
            publish(self, EventType::Warning, "ReporterAuthFailed", message);
        }
    }
}

/// Publishes an Event on ConfigMap `capstan-reporter`.
fn publish(shared: &Shared, type_: EventType, reason: &'static str, note: String) {
    let ctx = Arc::clone(&shared.ctx);
    let regarding = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: Some(SETTINGS_NAME.into()),
        namespace: Some(shared.namespace.clone()),
        ..Default::default()
    };
    tokio::spawn(async move { ctx.publish_event(&regarding, type_, reason, "Report", &note).await });
}

/// Heartbeats every 30 s while the term lasts.
async fn heartbeats(shared: Arc<Shared>, epoch: u64, stop: Shutdown) {
    let mut attempt = 0;
    loop {
        let Some(endpoint) = shared.wait_open(&stop).await else {
            return;
        };
        let body = heartbeat_body(&shared, epoch);
        let json = serde_json::to_vec(&body).unwrap_or_default();
        let result = post(&endpoint, "/heartbeat", json, None).await;
        let outcome: Option<Outcome<PlainAnswer>> = shared
            .interpret(&endpoint, "heartbeat", result, &mut attempt, &stop)
            .await;
        let label = match &outcome {
            Some(Outcome::Ok(_)) => "ok",
            _ => "failed",
        };
        shared.metrics.heartbeats.with_label_values(&[label]).inc();
        if let Some(Outcome::Ok(PlainAnswer { resync: Some(what) })) = &outcome {
            if matches!(what.as_str(), "digest" | "full") {
                *lock(&shared.resync_request) = Some(what.clone());
                shared.full_batch.notify_one();
            }
        }
        if matches!(outcome, Some(Outcome::StepDown(_))) {
            shared.full_batch.notify_one();
        }
        tokio::select! {
            _ = stop.wait() => return,
            _ = tokio::time::sleep(HEARTBEAT) => {}
        }
    }
}

fn heartbeat_body(shared: &Shared, epoch: u64) -> HeartbeatBody {
    let counts = lock(&shared.cache).counts();
    let (_, dirty, oldest) = shared.backlog();
    let oldest = oldest.map_or(0.0, |d| d.as_secs_f64());
    let gate = lock(&shared.gate);
    HeartbeatBody {
        instance: shared.instance.clone(),
        leader: true,
        epoch,
        reporter_version: wire::REPORTER_VERSION,
        kubernetes_version: lock(&shared.kubernetes_version).clone(),
        counts: Kind::CAPSTAN
            .iter()
            .map(|k| (k.as_str().to_string(), counts.get(k).copied().unwrap_or(0).into()))
            .collect(),
        dirty,
        oldest_dirty_age_seconds: (oldest * 1000.0).round() / 1000.0,
        last_ack_at: gate.last_ack_at.clone(),
        last_error: gate.last_error.clone(),
        auth: if gate.auth_failed.is_some() { "failed" } else { "ok" },
    }
}

fn publish_gauges(shared: &Shared) {
    let (per_kind, _, oldest) = shared.backlog();
    for kind in Kind::CAPSTAN.into_iter().chain([Kind::Event]) {
        let n = per_kind.get(&kind).copied().unwrap_or(0);
        shared
            .metrics
            .dirty_objects
            .with_label_values(&[kind.as_str()])
            .set(n as i64);
    }
    shared
        .metrics
        .oldest_dirty_age
        .set(oldest.map_or(0.0, |d| d.as_secs_f64()));
    let coalesced = lock(&shared.cache).dirty.take_coalesced();
    shared.metrics.items_coalesced.inc_by(coalesced);
}
