//! The etcd backend of [`Store`](super::Store): etcd holds every object, the store's tables are a cache.
//!
//! - **Keys and values**: kube-apiserver's key layout ([`Keys`]), values are the objects' JSON without
//!   `metadata.resourceVersion`, which is the key's mod revision, set when an object is read back.
//! - **Writes** are transactions conditioned on the object's mod revision (absent, for a create) and, for a
//!   create in a namespace, on the namespace's, so a namespace marked for deletion in the meantime refuses
//!   new content exactly as in memory. A refused transaction waits until the cache has caught up and
//!   re-checks, so the caller sees the same `Stale`/`AlreadyExists`/namespace errors as in memory.
//! - **The cache** is fed by one etcd watch over the whole keyspace, started at the revision the initial
//!   load read: every revision etcd reaches passes through it, which is what lets [`Backend::sync`] wait for
//!   "etcd's current revision is applied" (kube-apiserver's consistent reads from its watch cache). At
//!   startup the watch begins `history_limit` revisions earlier, with previous values, to refill the event
//!   history, so a watch a client opened before a restart resumes from its resourceVersion.
//! - **Deletions** announce a final state in their DELETED event (an object whose last finalizer was just
//!   removed, a namespace with its finalizers cleared). etcd's delete carries no value, so the same
//!   transaction writes that final state to one bookkeeping key ([`DELETION_RECORD`]); the watch delivers
//!   both changes of a revision in one message.
//! - **Failures**: a request that cannot reach etcd, or whose revision the cache does not reach in time,
//!   fails (503 to the client); nothing is served from a cache that might be stale. When the watch breaks it
//!   reconnects from the next revision; if etcd compacted that revision meanwhile, everything is loaded
//!   again, controllers get the differences and open watches end with 410.
//!
//! All etcd I/O runs on a small runtime of its own. The store's API is synchronous (handlers and controllers
//! compute objects under no lock and call it from many places), so a synchronous call hands its request to
//! that runtime and waits, inside `block_in_place` when it runs on a multi-thread runtime worker, so the
//! server's other tasks keep running.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tokio::runtime::{Handle, Runtime, RuntimeFlavor};
use tokio::sync::oneshot;

use super::etcd_api::{Api, Compare, EtcdError, EventKind, Kv, Op, WatchEvent, WatchMessage};
use super::keys::{Keys, DELETION_RECORD, PREFIX};
use super::{set_rv, CommitError, Core, Event, EventType, ObjRef, ReadAtError, Table, Unavailable, Write, NAMESPACES};
use crate::registry::ResKey;

/// How long a request waits for the cache to apply a revision etcd has already reached.
const CATCH_UP: Duration = Duration::from_secs(5);
/// How long startup waits for etcd to answer and for the history to load.
const STARTUP: Duration = Duration::from_secs(30);
/// Commit attempts while the cache was behind etcd.
const COMMIT_ATTEMPTS: usize = 16;
/// Watch reconnection backoff bounds.
const BACKOFF_MIN: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// What the backend's tasks share.
struct Link {
    api: Api,
    keys: Keys,
    core: Arc<Core>,
}

pub(super) struct Backend {
    rt: Option<Runtime>,
    handle: Handle,
    link: Arc<Link>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        // The store may be dropped inside another runtime, where a blocking shutdown is not allowed.
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl Backend {
    /// Connect (waiting up to [`STARTUP`] for etcd), load every object and the recent history, and start
    /// following etcd.
    pub fn connect(url: &str, core: Arc<Core>) -> anyhow::Result<Backend> {
        let api = Api::new(url).map_err(anyhow::Error::msg)?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("devcluster-etcd")
            .enable_all()
            .build()?;
        let link = Arc::new(Link {
            api,
            keys: Keys::new(),
            core,
        });
        let backend = Backend {
            handle: rt.handle().clone(),
            rt: Some(rt),
            link: link.clone(),
        };
        backend
            .block(start(link))
            .and_then(|r| r)
            .map_err(|e| anyhow::anyhow!("etcd at {url}: {e}"))?;
        Ok(backend)
    }

    pub fn url(&self) -> &str {
        self.link.api.url()
    }

    /// Run `fut` on the backend's runtime and wait for it from synchronous code.
    fn block<T: Send + 'static>(&self, fut: impl Future<Output = T> + Send + 'static) -> Result<T, String> {
        let task = self.handle.spawn(fut);
        let wait = move || futures::executor::block_on(task).map_err(|e| format!("etcd request aborted: {e}"));
        match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(wait),
            _ => wait(),
        }
    }

    /// Wait until the cache holds everything etcd holds now.
    pub async fn sync(&self) -> Result<(), Unavailable> {
        let link = self.link.clone();
        let task = self.handle.spawn(async move {
            let rev = link
                .api
                .current_revision(DELETION_RECORD)
                .await
                .map_err(|e| e.to_string())?;
            if wait_applied(&link.core, rev, CATCH_UP).await {
                Ok(())
            } else {
                Err(format!("the storage cache has not caught up with etcd revision {rev}"))
            }
        });
        match task.await {
            Ok(r) => r.map_err(Unavailable),
            Err(e) => Err(Unavailable(format!("etcd request aborted: {e}"))),
        }
    }

    pub fn commit(
        &self,
        r: &ObjRef,
        expected: Option<u64>,
        write: Write,
        namespace: Option<&str>,
    ) -> Result<Arc<Value>, CommitError> {
        let link = self.link.clone();
        let (r, ns) = (r.clone(), namespace.map(str::to_string));
        self.block(async move { commit(&link, &r, expected, write, ns.as_deref()).await })
            .unwrap_or_else(|e| Err(CommitError::Unavailable(e)))
    }

    /// The objects under a resource (and namespace) at revision `rv`, in (namespace, name) order.
    pub fn list_at(&self, res: &ResKey, ns: Option<&str>, rv: u64) -> Result<Vec<Arc<Value>>, ReadAtError> {
        let link = self.link.clone();
        let prefix = link.keys.list_prefix(res, ns);
        let range = self
            .block(async move { link.api.range_prefix(&prefix, rv).await })
            .map_err(ReadAtError::Unavailable)?
            .map_err(read_at_error)?;
        let mut items: Vec<(ObjRef, Arc<Value>)> = range
            .kvs
            .iter()
            .filter_map(|kv| Some((self.link.keys.parse(&kv.key)?, decode(kv)?)))
            .collect();
        items.sort_by(|(a, _), (b, _)| (&a.ns, &a.name).cmp(&(&b.ns, &b.name)));
        Ok(items.into_iter().map(|(_, v)| v).collect())
    }

    /// Whether etcd can still read at revision `rv`.
    pub fn revision_available(&self, rv: u64) -> Result<(), ReadAtError> {
        let link = self.link.clone();
        self.block(async move { link.api.check_revision(DELETION_RECORD, rv).await })
            .map_err(ReadAtError::Unavailable)?
            .map_err(read_at_error)
    }

    /// Compact etcd's history up to `rv` (already compacted there: fine).
    pub fn compact(&self, rv: u64) -> Result<(), String> {
        let link = self.link.clone();
        match self.block(async move { link.api.compact(rv).await })? {
            Ok(()) | Err(EtcdError::Compacted) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Delete every stored object of a resource (its CRD is gone).
    pub fn drop_resource(&self, res: &ResKey) {
        let link = self.link.clone();
        let prefix = link.keys.resource_prefix(res);
        let out = self.block(async move { link.api.delete_prefix(&prefix).await });
        if let Err(e) = out.and_then(|r| r.map_err(|e| e.to_string())) {
            tracing::warn!(resource = %res, error = %e, "deleting a dropped resource's objects from etcd");
        }
    }
}

fn read_at_error(e: EtcdError) -> ReadAtError {
    match e {
        EtcdError::Compacted | EtcdError::FutureRevision => ReadAtError::Expired,
        e => ReadAtError::Unavailable(e.to_string()),
    }
}

/// A stored value as an object whose resourceVersion is its mod revision.
fn decode(kv: &Kv) -> Option<Arc<Value>> {
    match serde_json::from_slice::<Value>(&kv.value) {
        Ok(mut v) if v.is_object() => {
            set_rv(&mut v, kv.mod_revision);
            Some(Arc::new(v))
        }
        _ => {
            tracing::warn!(key = %kv.key, "etcd value is not a JSON object; ignored");
            None
        }
    }
}

/// An object as stored: its JSON without `metadata.resourceVersion`.
fn encode(obj: &Value) -> Vec<u8> {
    let mut stored = obj.clone();
    if let Some(m) = stored.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("resourceVersion");
    }
    serde_json::to_vec(&stored).unwrap_or_default()
}

async fn wait_applied(core: &Core, rev: u64, limit: Duration) -> bool {
    let mut rx = core.applied.subscribe();
    let reached = tokio::time::timeout(limit, rx.wait_for(|v| *v >= rev)).await;
    matches!(reached, Ok(Ok(_)))
}

/// The writes of one commit's transaction.
fn plan_write(key: &str, write: &Write) -> Vec<Op> {
    match write {
        Write::Put(obj) => vec![Op::Put(key.to_string(), encode(obj))],
        Write::Delete(None) => vec![Op::Delete(key.to_string())],
        Write::Delete(Some(last)) => {
            let record = json!({"key": key, "object": last});
            vec![
                Op::Put(
                    DELETION_RECORD.to_string(),
                    serde_json::to_vec(&record).unwrap_or_default(),
                ),
                Op::Delete(key.to_string()),
            ]
        }
    }
}

async fn commit(
    link: &Link,
    r: &ObjRef,
    expected: Option<u64>,
    write: Write,
    namespace: Option<&str>,
) -> Result<Arc<Value>, CommitError> {
    let key = link.keys.object(r);
    let delete = matches!(write, Write::Delete(_));
    let ops = plan_write(&key, &write);
    for _ in 0..COMMIT_ATTEMPTS {
        let (current, ns_rv) = link.core.inner.lock().precheck(r, expected, delete, namespace)?;
        let mut compare = vec![match expected {
            None => Compare::Absent(key.clone()),
            Some(rv) => Compare::ModRevision(key.clone(), rv),
        }];
        if let (Some(ns), Some(ns_rv)) = (namespace, ns_rv) {
            let ns_ref = ObjRef {
                res: Arc::from(NAMESPACES),
                ns: String::new(),
                name: ns.to_string(),
            };
            compare.push(Compare::ModRevision(link.keys.object(&ns_ref), ns_rv));
        }
        let txn = link
            .api
            .txn(&compare, &ops)
            .await
            .map_err(|e| CommitError::Unavailable(e.to_string()))?;
        let caught_up = wait_applied(&link.core, txn.revision, CATCH_UP).await;
        if txn.succeeded {
            if !caught_up {
                tracing::warn!(
                    revision = txn.revision,
                    "committed, but the storage cache is behind etcd"
                );
            }
            let mut out = match write {
                Write::Put(obj) => obj,
                Write::Delete(last) => last.unwrap_or_else(|| current.map(|c| (*c).clone()).unwrap_or_default()),
            };
            set_rv(&mut out, txn.revision);
            return Ok(Arc::new(out));
        }
        if !caught_up {
            return Err(CommitError::Unavailable(format!(
                "the storage cache has not caught up with etcd revision {}",
                txn.revision
            )));
        }
        // Refused: the cache now holds what refused it; check again.
    }
    Err(CommitError::Stale)
}

/// Read every object. Returns the revision read at and the tables.
async fn load_tables(link: &Link) -> Result<(u64, HashMap<ResKey, Table>), EtcdError> {
    let range = link.api.range_prefix(PREFIX, 0).await?;
    let mut tables: HashMap<ResKey, Table> = HashMap::new();
    for kv in &range.kvs {
        let (Some(r), Some(obj)) = (link.keys.parse(&kv.key), decode(kv)) else {
            continue;
        };
        tables.entry(r.res).or_default().insert((r.ns, r.name), obj);
    }
    Ok((range.revision, tables))
}

async fn start(link: Arc<Link>) -> Result<(), String> {
    let deadline = Instant::now() + STARTUP;
    let (rev, tables) = loop {
        match load_tables(&link).await {
            Ok(loaded) => break loaded,
            Err(EtcdError::Unavailable(m)) if Instant::now() < deadline => {
                tracing::info!(error = %m, "waiting for etcd");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.to_string()),
        }
    };
    let history_limit = {
        let mut g = link.core.inner.lock();
        g.replace_all(tables, rev);
        g.history_limit as u64
    };
    link.core.applied.send_replace(rev);
    let (ready, ready_rx) = oneshot::channel();
    let applier = Applier::new(link, rev, history_limit, ready);
    tokio::spawn(applier.run());
    match tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), ready_rx).await {
        Ok(Ok(())) => Ok(()),
        _ => Err("the watch history could not be loaded in time".into()),
    }
}

/// The task that applies etcd's changes to the cache.
struct Applier {
    link: Arc<Link>,
    /// The next revision to receive.
    next: u64,
    /// Changes up to this revision only refill the history: the tables already hold their result.
    backfill_until: u64,
    ready: Option<oneshot::Sender<()>>,
}

impl Applier {
    fn new(link: Arc<Link>, loaded: u64, history_limit: u64, ready: oneshot::Sender<()>) -> Self {
        // Revision 1 is an empty store's: the first change is revision 2.
        let from = (loaded + 1).saturating_sub(history_limit).max(2);
        if from <= loaded {
            link.core.inner.lock().oldest_rv = from - 1;
        }
        Applier {
            link,
            next: from,
            backfill_until: loaded,
            ready: Some(ready),
        }
    }

    fn backfilling(&self) -> bool {
        self.next <= self.backfill_until
    }

    fn signal_ready(&mut self) {
        if let Some(tx) = self.ready.take() {
            let _ = tx.send(());
        }
    }

    async fn run(mut self) {
        let mut backoff = BACKOFF_MIN;
        loop {
            let backfilling = self.backfilling();
            if !backfilling {
                self.signal_ready();
            }
            // Previous values are only needed to rebuild history; live changes find them in the cache.
            match self.link.api.watch_all(self.next, backfilling).await {
                Ok(mut stream) => loop {
                    match stream.next().await {
                        Ok(Some(WatchMessage::Events(events))) => {
                            backoff = BACKOFF_MIN;
                            self.apply(events);
                            if backfilling && !self.backfilling() {
                                // History is complete: follow on without previous values.
                                backoff = Duration::ZERO;
                                break;
                            }
                        }
                        Ok(Some(WatchMessage::Canceled {
                            compact_revision,
                            reason,
                        })) => {
                            if compact_revision > 0 {
                                self.compacted(compact_revision).await;
                                backoff = Duration::ZERO;
                            } else {
                                tracing::warn!(reason, "etcd canceled the watch");
                            }
                            break;
                        }
                        Ok(Some(_)) => {}
                        Ok(None) => break,
                        Err(e) => {
                            tracing::debug!(error = %e, "etcd watch ended");
                            break;
                        }
                    }
                },
                Err(e) => tracing::debug!(error = %e, "etcd watch failed"),
            }
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
        }
    }

    /// The revisions after `next` are gone from etcd.
    async fn compacted(&mut self, compact_revision: u64) {
        if self.backfilling() && compact_revision <= self.backfill_until + 1 {
            // Part of the history to refill is gone: keep the rest, from a gap-free start.
            let mut g = self.link.core.inner.lock();
            g.history.clear();
            g.oldest_rv = compact_revision - 1;
            self.next = compact_revision;
            return;
        }
        self.relist().await;
    }

    /// Changes were missed: load everything again, tell controllers what changed and end open watches.
    async fn relist(&mut self) {
        tracing::warn!(
            next = self.next,
            "etcd compacted revisions the cache had not seen; reloading"
        );
        loop {
            match load_tables(&self.link).await {
                Ok((rev, tables)) => {
                    {
                        let mut g = self.link.core.inner.lock();
                        for ev in g.replace_all(tables, rev) {
                            let ev = Arc::new(ev);
                            g.controllers.retain(|c| c.send(ev.clone()).is_ok());
                        }
                    }
                    self.link.core.applied.send_modify(|v| *v = (*v).max(rev));
                    self.link.core.compacted.send_modify(|n| *n += 1);
                    self.next = rev + 1;
                    self.backfill_until = rev;
                    self.signal_ready();
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "reloading from etcd");
                    tokio::time::sleep(BACKOFF_MAX).await;
                }
            }
        }
    }

    fn apply(&mut self, events: Vec<WatchEvent>) {
        let link = self.link.clone();
        let mut finals = deletion_records(&events);
        let mut last = self.next.saturating_sub(1);
        let mut g = link.core.inner.lock();
        for ev in events {
            let rev = ev.kv.mod_revision;
            last = last.max(rev);
            let Some(r) = link.keys.parse(&ev.kv.key) else {
                continue;
            };
            let final_state = finals.remove(&(rev, ev.kv.key.clone()));
            if rev <= self.backfill_until {
                if let Some(h) = history_event(&r, &ev, final_state) {
                    g.record(Arc::new(h));
                }
                continue;
            }
            match ev.kind {
                EventKind::Put => {
                    if let Some(obj) = decode(&ev.kv) {
                        g.put(&r, obj, rev, &link.core.tx);
                    }
                }
                EventKind::Delete => {
                    g.remove(&r, final_state, rev, &link.core.tx);
                }
            }
        }
        g.rv = g.rv.max(last);
        drop(g);
        self.next = last + 1;
        link.core.applied.send_modify(|v| *v = (*v).max(last));
    }
}

/// The final states written beside deletions, by (revision, deleted key).
fn deletion_records(events: &[WatchEvent]) -> BTreeMap<(u64, String), Value> {
    events
        .iter()
        .filter(|e| e.kind == EventKind::Put && e.kv.key == DELETION_RECORD)
        .filter_map(|e| {
            let mut v: Value = serde_json::from_slice(&e.kv.value).ok()?;
            let key = v["key"].as_str()?.to_string();
            Some(((e.kv.mod_revision, key), v.get_mut("object")?.take()))
        })
        .collect()
}

/// A history event rebuilt from an etcd change with its previous value.
fn history_event(r: &ObjRef, ev: &WatchEvent, final_state: Option<Value>) -> Option<Event> {
    let rv = ev.kv.mod_revision;
    let prev = ev.prev.as_ref().and_then(decode);
    match ev.kind {
        EventKind::Put => Some(Event {
            rv,
            kind: if prev.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            },
            obj: r.clone(),
            object: decode(&ev.kv)?,
            prev,
        }),
        EventKind::Delete => {
            let prev = prev?;
            let mut last = final_state.unwrap_or_else(|| (*prev).clone());
            set_rv(&mut last, rv);
            Some(Event {
                rv,
                kind: EventType::Deleted,
                obj: r.clone(),
                object: Arc::new(last),
                prev: Some(prev),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: Value, rev: u64) -> Kv {
        Kv {
            key: key.into(),
            value: serde_json::to_vec(&value).unwrap(),
            mod_revision: rev,
        }
    }

    #[test]
    fn stored_values_carry_no_resource_version() {
        let obj = json!({"metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "v"}});
        let stored: Value = serde_json::from_slice(&encode(&obj)).unwrap();
        assert_eq!(stored, json!({"metadata": {"name": "a"}, "data": {"k": "v"}}));
        let back = decode(&kv("/registry/configmaps/ns/a", stored, 9)).unwrap();
        assert_eq!(back["metadata"]["resourceVersion"], "9");
        assert!(decode(&Kv {
            key: "/registry/x".into(),
            value: b"not json".to_vec(),
            mod_revision: 3
        })
        .is_none());
    }

    #[test]
    fn history_rebuilt_from_changes_with_previous_values() {
        let r = ObjRef {
            res: Arc::from("/configmaps"),
            ns: "ns".into(),
            name: "a".into(),
        };
        let key = "/registry/configmaps/ns/a";
        let put = WatchEvent {
            kind: EventKind::Put,
            kv: kv(key, json!({"metadata": {"name": "a"}, "data": {"v": "2"}}), 5),
            prev: Some(kv(key, json!({"metadata": {"name": "a"}, "data": {"v": "1"}}), 4)),
        };
        let ev = history_event(&r, &put, None).unwrap();
        assert_eq!((ev.kind, ev.rv), (EventType::Modified, 5));
        assert_eq!(ev.prev.unwrap()["metadata"]["resourceVersion"], "4");

        // A deletion whose transaction recorded a final state announces it, at the deletion's revision.
        let record = json!({"key": key, "object": {"metadata": {"name": "a"}, "final": true}});
        let events = vec![
            WatchEvent {
                kind: EventKind::Put,
                kv: kv(DELETION_RECORD, record, 6),
                prev: None,
            },
            WatchEvent {
                kind: EventKind::Delete,
                kv: Kv {
                    key: key.into(),
                    value: Vec::new(),
                    mod_revision: 6,
                },
                prev: Some(kv(key, json!({"metadata": {"name": "a"}}), 5)),
            },
        ];
        let mut finals = deletion_records(&events);
        let ev = history_event(&r, &events[1], finals.remove(&(6, key.to_string()))).unwrap();
        assert_eq!((ev.kind, ev.rv), (EventType::Deleted, 6));
        assert_eq!(ev.object["final"], true);
        assert_eq!(ev.object["metadata"]["resourceVersion"], "6");
        assert!(finals.is_empty());
    }
}
