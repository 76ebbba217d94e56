//! Watch streams: headers go out at once, then one compact JSON event per line, flushed per event.
//! Each watch is a task that replays from its start point (snapshot or history), then forwards live events
//! from the store's broadcast channel in RV order, turning selector transitions into ADDED/DELETED.
//! Errors after the start (too-old RV, compaction, a lagging consumer) are in-stream ERROR events, never an
//! HTTP 410. Bookmarks carry the RV up to which every event has been seen.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{header, HeaderValue, Response};
use bytes::Bytes;
use serde_json::{json, Value};
use tokio::sync::{broadcast, mpsc};
use tokio_stream::wrappers::ReceiverStream;

use crate::error::{ApiError, ApiResult};
use crate::registry::ResourceInfo;
use crate::store::{Event, EventType, Replay, TooOld, WatchStart};
use crate::table::IncludeObject;

use super::list::ListParams;
use super::negotiate::{negotiate, Output, Supports};
use super::{include_object, ops, render_object, Ctx, Shared};

/// Default watch lifetime when the client gives no timeoutSeconds.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Parsed watch parameters.
struct WatchParams {
    list: ListParams,
    start: WatchStart,
    initial_events: bool,
    bookmarks: bool,
    timeout: Duration,
}

fn params(sh: &Shared, ctx: &Ctx, ri: &ResourceInfo) -> ApiResult<WatchParams> {
    let list = ListParams::from_query(&ctx.query, ri)?;
    let send_initial_events = match ctx.query.get("sendInitialEvents") {
        None => None,
        Some(_) => Some(ctx.query.flag("sendInitialEvents")?),
    };
    validate_watch_list(&list, send_initial_events)?;
    let after = |n: &str| {
        n.parse()
            .map(WatchStart::After)
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion: {n:?}")))
    };
    let start = match (send_initial_events, list.rv.as_deref()) {
        (Some(true), _) | (None, None | Some("0")) => WatchStart::Snapshot,
        // A streaming watch without initial events starts from the newest state (or the given RV).
        (Some(false), None | Some("0")) => WatchStart::After(sh.store.current_rv()),
        (_, Some(n)) => after(n)?,
    };
    let initial_events = send_initial_events == Some(true);
    let timeout = ctx
        .query
        .uint("timeoutSeconds")?
        .map(Duration::from_secs)
        .unwrap_or(DEFAULT_TIMEOUT);
    Ok(WatchParams {
        list,
        start,
        initial_events,
        bookmarks: ctx.query.flag("allowWatchBookmarks")?,
        timeout,
    })
}

/// kube-apiserver's `validateWatchOptions`: `sendInitialEvents` needs `resourceVersionMatch=NotOlderThan`
/// and vice versa; a watch needs no `resourceVersion` for either (client-go's streaming list sends none and
/// gets the initial events of the newest state).
fn validate_watch_list(list: &ListParams, send_initial_events: Option<bool>) -> ApiResult<()> {
    let rv_match = list.rv_match.as_deref();
    let mut causes = Vec::new();
    if send_initial_events.is_some() && rv_match != Some("NotOlderThan") {
        causes.push(
            "resourceVersionMatch: Forbidden: sendInitialEvents requires setting resourceVersionMatch to NotOlderThan"
                .to_string(),
        );
    }
    if let Some(m) = rv_match {
        if send_initial_events.is_none() {
            causes.push("resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided".to_string());
        }
        if m != "NotOlderThan" {
            causes.push(format!(
                "resourceVersionMatch: Unsupported value: \"{m}\": supported values: \"NotOlderThan\""
            ));
        }
        if list.cont.is_some() {
            causes.push(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
                    .to_string(),
            );
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(ApiError::invalid_msg(causes.join(", ")))
}

/// Start a watch: validate, then return the streaming response immediately.
pub fn serve(sh: Arc<Shared>, ri: Arc<ResourceInfo>, ns: Option<String>, ctx: &Ctx) -> ApiResult<Response<Body>> {
    let out = negotiate(
        &ctx.accept,
        Supports {
            table: true,
            metadata: true,
            discovery: false,
        },
    )?;
    let include = include_object(&ctx.query)?;
    let p = params(&sh, ctx, &ri)?;
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(256);
    let ns = if ri.namespaced { ns } else { None };
    let w = Watcher {
        sh,
        ri,
        ns,
        out,
        include,
        p,
        tx,
        last_rv: 0,
    };
    tokio::spawn(w.run());
    let mut resp = Response::new(Body::from_stream(ReceiverStream::new(rx)));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache, private"));
    Ok(resp)
}

/// Serialize one event line.
pub fn event_line(kind: &str, object: &Value) -> Bytes {
    let mut buf = Vec::with_capacity(512);
    buf.extend_from_slice(b"{\"type\":\"");
    buf.extend_from_slice(kind.as_bytes());
    buf.extend_from_slice(b"\",\"object\":");
    let _ = serde_json::to_writer(&mut buf, object);
    buf.extend_from_slice(b"}\n");
    Bytes::from(buf)
}

fn expired_status(message: String) -> Value {
    ApiError::expired(message).to_status()
}

struct Watcher {
    sh: Arc<Shared>,
    ri: Arc<ResourceInfo>,
    ns: Option<String>,
    out: Output,
    include: IncludeObject,
    p: WatchParams,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    /// Every event up to this RV has been considered.
    last_rv: u64,
}

/// Why the stream ends.
enum End {
    Clean,
    Abort,
}

impl Watcher {
    fn matches(&self, obj: &Value) -> bool {
        ops::matches(obj, &self.p.list.labels, &self.p.list.fields)
    }

    /// The event type a client should see for `ev`, honouring selector transitions.
    fn classify(&self, ev: &Event) -> Option<&'static str> {
        if ev.obj.res != self.ri.key || self.ns.as_ref().is_some_and(|n| *n != ev.obj.ns) {
            return None;
        }
        let now = self.matches(&ev.object);
        match ev.kind {
            EventType::Added => now.then_some("ADDED"),
            EventType::Deleted => (now || ev.prev.as_ref().is_some_and(|p| self.matches(p))).then_some("DELETED"),
            EventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some("MODIFIED"),
                    (false, true) => Some("ADDED"),
                    (true, false) => Some("DELETED"),
                    (false, false) => None,
                }
            }
        }
    }

    async fn send(&self, line: Bytes) -> bool {
        self.tx.send(Ok(line)).await.is_ok()
    }

    async fn send_object(&self, kind: &str, obj: &Value) -> bool {
        let rendered = render_object(&self.ri, self.out, self.include, obj);
        self.send(event_line(kind, &rendered)).await
    }

    async fn send_error(&self, message: String) {
        let _ = self.send(event_line("ERROR", &expired_status(message))).await;
    }

    async fn bookmark(&self, initial_end: bool) -> bool {
        let mut md = json!({"resourceVersion": self.last_rv.to_string()});
        if initial_end {
            md["annotations"] = json!({"k8s.io/initial-events-end": "true"});
        }
        let obj = json!({"kind": self.ri.kind, "apiVersion": self.ri.api_version(), "metadata": md});
        self.send(event_line("BOOKMARK", &obj)).await
    }

    async fn replay(&mut self, replay: Replay) -> bool {
        match replay {
            Replay::Snapshot(rv, items) => {
                for obj in items.iter().filter(|o| self.matches(o)) {
                    if !self.send_object("ADDED", obj).await {
                        return false;
                    }
                }
                self.last_rv = rv;
                if self.p.initial_events && !self.bookmark(true).await {
                    return false;
                }
            }
            Replay::Events(events) => {
                for ev in events {
                    if let Some(t) = self.classify(&ev) {
                        if !self.send_object(t, &ev.object).await {
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    async fn run(mut self) {
        let mut compact = self.sh.signals.compact.subscribe();
        let mut dropped = self.sh.signals.drop_watches.subscribe();
        let mut paused = self.sh.signals.paused.subscribe();
        let mut shutdown = self.sh.signals.shutdown.subscribe();
        let mut dropped_res = self.sh.signals.resource_dropped.subscribe();
        if !self.still_served() {
            return;
        }
        let start = std::mem::replace(&mut self.p.start, WatchStart::Snapshot);
        let (replay, start_rv, mut rx) = match self.sh.store.watch(&self.ri.key, self.ns.as_deref(), start) {
            Ok(x) => x,
            Err(TooOld(n, oldest)) => {
                self.send_error(format!("too old resource version: {n} ({oldest})"))
                    .await;
                return;
            }
        };
        self.last_rv = start_rv;
        if !self.replay(replay).await {
            return;
        }
        self.last_rv = self.last_rv.max(start_rv);
        let deadline = tokio::time::Instant::now() + self.p.timeout;
        let interval = self.sh.bookmark_interval.max(Duration::from_millis(10));
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        let end = loop {
            let is_paused = *paused.borrow_and_update();
            tokio::select! {
                _ = self.tx.closed() => break End::Clean,
                _ = shutdown.changed() => break End::Clean,
                _ = dropped.changed() => break End::Abort,
                r = dropped_res.recv() => match r {
                    Ok(key) if key == self.ri.key => {
                        self.drain(&mut rx).await;
                        break End::Clean;
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) if !self.still_served() => break End::Clean,
                    Err(broadcast::error::RecvError::Closed) => break End::Clean,
                    _ => {}
                },
                _ = compact.changed() => {
                    let cur = self.sh.store.current_rv();
                    self.send_error(format!("too old resource version: {} ({cur})", self.last_rv)).await;
                    break End::Clean;
                }
                _ = tokio::time::sleep_until(deadline) => {
                    if self.p.bookmarks {
                        self.bookmark(false).await;
                    }
                    break End::Clean;
                }
                _ = tick.tick(), if self.p.bookmarks && !is_paused => {
                    if !self.bookmark(false).await { break End::Clean; }
                }
                _ = paused.changed() => {}
                ev = rx.recv(), if !is_paused => match ev {
                    Ok(ev) => {
                        if !self.forward(&ev).await { break End::Clean; }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let cur = self.sh.store.current_rv();
                        self.send_error(format!("too old resource version: {} ({cur})", self.last_rv)).await;
                        break End::Clean;
                    }
                    Err(broadcast::error::RecvError::Closed) => break End::Clean,
                }
            }
        };
        if let End::Abort = end {
            let _ = self.tx.send(Err(std::io::Error::other("watch dropped by admin"))).await;
        }
    }

    /// Whether the watched resource is still served. A watch on a custom resource whose CRD was deleted while
    /// the request was being set up ends at once instead of waiting for events that cannot come.
    fn still_served(&self) -> bool {
        !self.ri.is_custom() || self.sh.registry.read().by_key(&self.ri.key).is_some()
    }

    /// Deliver the events already received (the deletions that emptied a dropped resource) before ending.
    async fn drain(&mut self, rx: &mut broadcast::Receiver<Arc<Event>>) {
        while let Ok(ev) = rx.try_recv() {
            if !self.forward(&ev).await {
                return;
            }
        }
    }

    async fn forward(&mut self, ev: &Arc<Event>) -> bool {
        if ev.rv <= self.last_rv {
            return true;
        }
        self.last_rv = ev.rv;
        match self.classify(ev) {
            Some(t) => self.send_object(t, &ev.object).await,
            None => true,
        }
    }
}
