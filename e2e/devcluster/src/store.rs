//! Object storage with one global, strictly increasing resourceVersion and a bounded event
//! history for watches.
//!
//! Why this shape: every write goes through [`Store::commit`], a compare-and-swap on the object's
//! resourceVersion, so request handlers compute new objects *outside* the lock and retry on a race. Objects are
//! indexed per resource in BTreeMaps keyed by (namespace, name), which gives etcd key order for lists and cheap
//! namespace ranges. Events fan out through a broadcast channel (watch streams) and unbounded channels
//! (controllers, which must never miss one).
//!
//! Two backends share that shape. By default everything lives in memory and the resourceVersion is a counter
//! seeded from the wall clock. With `--etcd URL` ([`Store::etcd`], module `etcd`) etcd holds every object:
//! a write is an etcd transaction conditioned on the object's mod revision, the resourceVersion *is* that
//! revision, and the in-memory tables become a cache fed by one etcd watch, as kube-apiserver's watch cache
//! is. Reads stay synchronous and cheap; before a request reads, [`Store::sync`] asks etcd for its current
//! revision and waits until the cache has applied it, so a read is never staler than etcd, and fails with
//! [`Unavailable`] (a 503) when etcd cannot answer. Writes, too, fail with [`CommitError::Unavailable`]
//! rather than guess.

mod etcd;
mod etcd_api;
pub mod keys;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};

use crate::registry::ResKey;

/// Watch event types as they appear on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// Identity of a stored object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjRef {
    pub res: ResKey,
    pub ns: String,
    pub name: String,
}

/// One committed change. `prev` is the state before (for selector transitions).
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub obj: ObjRef,
    pub object: Arc<Value>,
    pub prev: Option<Arc<Value>>,
}

/// What a commit writes.
pub enum Write {
    /// Store this object (the store sets `metadata.resourceVersion`).
    Put(Value),
    /// Remove the object; the DELETED event carries `final_state` (or the stored one) with the deletion's RV.
    Delete(Option<Value>),
}

/// Why a commit was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommitError {
    /// The object changed (or appeared/disappeared) since it was read: recompute and retry.
    Stale,
    AlreadyExists,
    NamespaceMissing,
    NamespaceTerminating,
    /// The storage backend (etcd) could not be reached; nothing is known to be written.
    Unavailable(String),
}

/// The storage backend cannot serve a consistent read right now (etcd down or lagging).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Why a read at an older resourceVersion failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAtError {
    /// That revision is no longer (or not yet) available.
    Expired,
    Unavailable(String),
}

/// Where a watch starts.
pub enum WatchStart {
    /// Current state as synthetic ADDED events (RV unset or "0", or sendInitialEvents).
    Snapshot,
    /// Every change after this RV.
    After(u64),
}

/// The replay part of a watch.
pub enum Replay {
    Snapshot(u64, Vec<Arc<Value>>),
    Events(Vec<Arc<Event>>),
}

/// Too-old watch start: `(requested, oldest available)`.
#[derive(Debug)]
pub struct TooOld(pub u64, pub u64);

type Table = BTreeMap<(String, String), Arc<Value>>;

struct Inner {
    rv: u64,
    tables: HashMap<ResKey, Table>,
    history: VecDeque<Arc<Event>>,
    history_limit: usize,
    /// Watches may start from any RV >= this.
    oldest_rv: u64,
    uids: HashMap<String, ObjRef>,
    owners: HashMap<String, BTreeSet<ObjRef>>,
    controllers: Vec<mpsc::UnboundedSender<Arc<Event>>>,
}

/// State shared by the store and, with etcd, the task that applies etcd's changes to it.
struct Core {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
    /// The revision up to which etcd's changes are applied (etcd only; requests wait on it).
    applied: watch::Sender<u64>,
    /// Bumped when history is lost under open watches (compaction): they end with 410 Expired.
    compacted: watch::Sender<u64>,
}

/// The object store.
pub struct Store {
    core: Arc<Core>,
    etcd: Option<etcd::Backend>,
}

pub const NAMESPACES: &str = "/namespaces";

/// `metadata.resourceVersion` as a number (0 when absent or malformed).
pub fn rv_of(obj: &Value) -> u64 {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn uid_of(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/uid").and_then(Value::as_str)
}

fn owner_uids(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|o| o["uid"].as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

fn set_rv(obj: &mut Value, rv: u64) {
    if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        m.insert("resourceVersion".into(), Value::String(rv.to_string()));
    }
}

impl Inner {
    fn new(rv: u64, history_limit: usize) -> Self {
        Inner {
            rv,
            tables: HashMap::new(),
            history: VecDeque::new(),
            history_limit: history_limit.max(1),
            oldest_rv: rv,
            uids: HashMap::new(),
            owners: HashMap::new(),
            controllers: Vec::new(),
        }
    }

    fn index_remove(&mut self, r: &ObjRef, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.remove(uid);
        }
        for o in owner_uids(obj) {
            if let Some(set) = self.owners.get_mut(&o) {
                set.remove(r);
                if set.is_empty() {
                    self.owners.remove(&o);
                }
            }
        }
    }

    fn index_add(&mut self, r: &ObjRef, obj: &Value) {
        if let Some(uid) = uid_of(obj) {
            self.uids.insert(uid.to_string(), r.clone());
        }
        for o in owner_uids(obj) {
            self.owners.entry(o).or_default().insert(r.clone());
        }
    }

    fn get(&self, r: &ObjRef) -> Option<Arc<Value>> {
        self.tables.get(&r.res)?.get(&(r.ns.clone(), r.name.clone())).cloned()
    }

    /// The namespace's resourceVersion, if it exists and is not terminating.
    fn check_namespace(&self, ns: &str) -> Result<u64, CommitError> {
        let table = self.tables.get(NAMESPACES);
        match table.and_then(|t| t.get(&(String::new(), ns.to_string()))) {
            None => Err(CommitError::NamespaceMissing),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(CommitError::NamespaceTerminating),
            Some(n) => Ok(rv_of(n)),
        }
    }

    /// The checks of a commit against the current state. Returns the stored object and, for a create in a
    /// namespace, the namespace's resourceVersion (etcd conditions the write on it).
    #[allow(clippy::type_complexity)]
    fn precheck(
        &self,
        r: &ObjRef,
        expected: Option<u64>,
        delete: bool,
        namespace: Option<&str>,
    ) -> Result<(Option<Arc<Value>>, Option<u64>), CommitError> {
        let current = self.get(r);
        match (&current, expected) {
            (Some(_), None) => return Err(CommitError::AlreadyExists),
            (None, Some(_)) => return Err(CommitError::Stale),
            (Some(c), Some(e)) if rv_of(c) != e => return Err(CommitError::Stale),
            (None, None) if delete => return Err(CommitError::Stale),
            _ => {}
        }
        let ns_rv = match (current.is_none(), namespace) {
            (true, Some(ns)) => Some(self.check_namespace(ns)?),
            _ => None,
        };
        Ok((current, ns_rv))
    }

    /// Store `obj` (its resourceVersion already `rv`) and announce it.
    fn put(&mut self, r: &ObjRef, obj: Arc<Value>, rv: u64, tx: &broadcast::Sender<Arc<Event>>) {
        let prev = self.get(r);
        if let Some(c) = &prev {
            self.index_remove(r, c);
        }
        self.index_add(r, &obj);
        self.tables
            .entry(r.res.clone())
            .or_default()
            .insert((r.ns.clone(), r.name.clone()), obj.clone());
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.rv = self.rv.max(rv);
        self.emit(
            Event {
                rv,
                kind,
                obj: r.clone(),
                object: obj,
                prev,
            },
            tx,
        );
    }

    /// Remove an object and announce its last state (`final_state`, or the stored one) at `rv`.
    fn remove(
        &mut self,
        r: &ObjRef,
        final_state: Option<Value>,
        rv: u64,
        tx: &broadcast::Sender<Arc<Event>>,
    ) -> Option<Arc<Value>> {
        let current = self.get(r)?;
        self.index_remove(r, &current);
        if let Some(t) = self.tables.get_mut(&r.res) {
            t.remove(&(r.ns.clone(), r.name.clone()));
        }
        let mut last = final_state.unwrap_or_else(|| (*current).clone());
        set_rv(&mut last, rv);
        let last = Arc::new(last);
        self.rv = self.rv.max(rv);
        self.emit(
            Event {
                rv,
                kind: EventType::Deleted,
                obj: r.clone(),
                object: last.clone(),
                prev: Some(current),
            },
            tx,
        );
        Some(last)
    }

    /// Keep an event for watches that resume from an older RV.
    fn record(&mut self, ev: Arc<Event>) {
        self.history.push_back(ev);
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.oldest_rv = old.rv;
            }
        }
    }

    fn emit(&mut self, ev: Event, tx: &broadcast::Sender<Arc<Event>>) {
        let ev = Arc::new(ev);
        self.record(ev.clone());
        let _ = tx.send(ev.clone());
        self.controllers.retain(|c| c.send(ev.clone()).is_ok());
    }

    /// Replace every object at once (loading from etcd), rebuilding the indexes. Returns the changes relative
    /// to the previous contents, for controllers.
    fn replace_all(&mut self, tables: HashMap<ResKey, Table>, rv: u64) -> Vec<Event> {
        let mut changes = Vec::new();
        for (res, old) in &self.tables {
            for ((ns, name), obj) in old {
                if !tables
                    .get(res)
                    .is_some_and(|t| t.contains_key(&(ns.clone(), name.clone())))
                {
                    let mut last = (**obj).clone();
                    set_rv(&mut last, rv);
                    changes.push(Event {
                        rv,
                        kind: EventType::Deleted,
                        obj: ObjRef {
                            res: res.clone(),
                            ns: ns.clone(),
                            name: name.clone(),
                        },
                        object: Arc::new(last),
                        prev: Some(obj.clone()),
                    });
                }
            }
        }
        for (res, new) in &tables {
            for ((ns, name), obj) in new {
                let prev = self.tables.get(res).and_then(|t| t.get(&(ns.clone(), name.clone())));
                if prev.is_some_and(|p| rv_of(p) == rv_of(obj)) {
                    continue;
                }
                changes.push(Event {
                    rv: rv_of(obj),
                    kind: if prev.is_some() {
                        EventType::Modified
                    } else {
                        EventType::Added
                    },
                    obj: ObjRef {
                        res: res.clone(),
                        ns: ns.clone(),
                        name: name.clone(),
                    },
                    object: obj.clone(),
                    prev: prev.cloned(),
                });
            }
        }
        self.tables = tables;
        self.uids.clear();
        self.owners.clear();
        let all: Vec<(ObjRef, Arc<Value>)> = self
            .tables
            .iter()
            .flat_map(|(res, t)| {
                t.iter().map(move |((ns, name), obj)| {
                    (
                        ObjRef {
                            res: res.clone(),
                            ns: ns.clone(),
                            name: name.clone(),
                        },
                        obj.clone(),
                    )
                })
            })
            .collect();
        for (r, obj) in all {
            self.index_add(&r, &obj);
        }
        self.history.clear();
        self.rv = rv;
        self.oldest_rv = rv;
        changes
    }

    /// Every object as a synthetic ADDED event: namespaces, then CRDs, then the rest, so a controller that
    /// starts on existing state sees owners before what they own.
    fn snapshot_events(&self) -> Vec<Arc<Event>> {
        let rank = |res: &str| match res {
            NAMESPACES => 0,
            "apiextensions.k8s.io/customresourcedefinitions" => 1,
            _ => 2,
        };
        let mut resources: Vec<&ResKey> = self.tables.keys().collect();
        resources.sort_by_key(|r| (rank(r), r.to_string()));
        let mut out = Vec::new();
        for res in resources {
            for ((ns, name), obj) in &self.tables[res] {
                out.push(Arc::new(Event {
                    rv: rv_of(obj),
                    kind: EventType::Added,
                    obj: ObjRef {
                        res: res.clone(),
                        ns: ns.clone(),
                        name: name.clone(),
                    },
                    object: obj.clone(),
                    prev: None,
                }));
            }
        }
        out
    }

    fn objects(&self, res: &ResKey, ns: Option<&str>) -> Vec<Arc<Value>> {
        match self.tables.get(res) {
            None => Vec::new(),
            Some(t) => match ns {
                None => t.values().cloned().collect(),
                Some(ns) => range_ns(t, ns).map(|(_, v)| v.clone()).collect(),
            },
        }
    }
}

impl Core {
    fn new(rv: u64, history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(history_limit.clamp(1024, 1 << 16));
        Core {
            inner: Mutex::new(Inner::new(rv, history_limit)),
            tx,
            applied: watch::channel(rv).0,
            compacted: watch::channel(0).0,
        }
    }
}

impl Store {
    /// An in-memory store whose first resourceVersion is `seed_rv + 1` (seed from wall-clock
    /// microseconds, so a restarted server never hands out a resourceVersion a client still holds).
    pub fn new(seed_rv: u64, history_limit: usize) -> Self {
        Store {
            core: Arc::new(Core::new(seed_rv, history_limit)),
            etcd: None,
        }
    }

    /// A store kept in the etcd at `url` (`http://host:port`). Loads every object and the last
    /// `history_limit` revisions of history (so watches from before a restart resume), then follows etcd.
    pub fn etcd(url: &str, history_limit: usize) -> anyhow::Result<Self> {
        let core = Arc::new(Core::new(0, history_limit));
        let backend = etcd::Backend::connect(url, core.clone())?;
        Ok(Store {
            core,
            etcd: Some(backend),
        })
    }

    /// The etcd endpoint, when the store is kept in etcd.
    pub fn etcd_url(&self) -> Option<&str> {
        self.etcd.as_ref().map(etcd::Backend::url)
    }

    /// The signal that tells open watches their history is gone (they answer 410 Expired and end).
    pub fn compaction_signal(&self) -> watch::Sender<u64> {
        self.core.compacted.clone()
    }

    /// Make the cache as fresh as the backend before a read: a no-op in memory; with etcd, wait until every
    /// change up to etcd's current revision is applied.
    pub async fn sync(&self) -> Result<(), Unavailable> {
        match &self.etcd {
            None => Ok(()),
            Some(b) => b.sync().await,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.core.inner.lock().rv
    }

    /// Whether new objects may be created in `ns` (it exists and is not terminating), the check a create
    /// makes at commit; a dry run makes it without committing (kube-apiserver's admission refuses a dry-run
    /// create in a missing namespace too).
    pub fn check_namespace(&self, ns: &str) -> Result<(), CommitError> {
        self.core.inner.lock().check_namespace(ns).map(|_| ())
    }

    pub fn get(&self, res: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        let g = self.core.inner.lock();
        g.tables.get(res)?.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The current RV and the objects of `res` (in `ns`, or all namespaces), in (namespace, name) order.
    pub fn list(&self, res: &ResKey, ns: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        let g = self.core.inner.lock();
        (g.rv, g.objects(res, ns))
    }

    /// The objects of `res` as they were at resourceVersion `rv`, in (namespace, name) order. In memory only
    /// the current state is kept; etcd answers for any revision it has not compacted.
    pub fn list_at(&self, res: &ResKey, ns: Option<&str>, rv: u64) -> Result<Vec<Arc<Value>>, ReadAtError> {
        match &self.etcd {
            Some(b) => b.list_at(res, ns, rv),
            None => {
                let (current, items) = self.list(res, ns);
                if current == rv {
                    Ok(items)
                } else {
                    Err(ReadAtError::Expired)
                }
            }
        }
    }

    /// Whether state at `rv` can still be read (etcd has not compacted it). In memory, snapshots kept by the
    /// caller stay valid until [`Store::compact`], which the caller hears about.
    pub fn revision_available(&self, rv: u64) -> Result<(), ReadAtError> {
        match &self.etcd {
            Some(b) if rv < self.current_rv() => b.revision_available(rv),
            _ => Ok(()),
        }
    }

    /// The object with this uid.
    pub fn by_uid(&self, uid: &str) -> Option<(ObjRef, Arc<Value>)> {
        let g = self.core.inner.lock();
        let r = g.uids.get(uid)?;
        let obj = g.get(r)?;
        Some((r.clone(), obj))
    }

    /// Objects whose ownerReferences name `owner_uid`.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(ObjRef, Arc<Value>)> {
        let g = self.core.inner.lock();
        let Some(set) = g.owners.get(owner_uid) else {
            return Vec::new();
        };
        set.iter().filter_map(|r| Some((r.clone(), g.get(r)?))).collect()
    }

    /// Every object in namespace `ns` (across resources).
    pub fn in_namespace(&self, ns: &str) -> Vec<(ObjRef, Arc<Value>)> {
        let g = self.core.inner.lock();
        let mut out = Vec::new();
        for (res, t) in g.tables.iter() {
            for ((n, name), obj) in range_ns(t, ns) {
                out.push((
                    ObjRef {
                        res: res.clone(),
                        ns: n.clone(),
                        name: name.clone(),
                    },
                    obj.clone(),
                ));
            }
        }
        out
    }

    pub fn count_in_namespace(&self, ns: &str) -> usize {
        let g = self.core.inner.lock();
        g.tables.values().map(|t| range_ns(t, ns).count()).sum()
    }

    pub fn count(&self, res: &ResKey) -> usize {
        self.core.inner.lock().tables.get(res).map_or(0, |t| t.len())
    }

    /// Compare-and-swap write. `expected` is the RV the caller read (`None`: the object must not exist).
    /// `namespace` (for creates of namespaced objects) must exist and not be terminating.
    pub fn commit(
        &self,
        r: &ObjRef,
        expected: Option<u64>,
        write: Write,
        namespace: Option<&str>,
    ) -> Result<Arc<Value>, CommitError> {
        if let Some(b) = &self.etcd {
            return b.commit(r, expected, write, namespace);
        }
        let mut g = self.core.inner.lock();
        let delete = matches!(write, Write::Delete(_));
        g.precheck(r, expected, delete, namespace)?;
        let rv = g.rv + 1;
        match write {
            Write::Put(mut obj) => {
                set_rv(&mut obj, rv);
                let obj = Arc::new(obj);
                g.put(r, obj.clone(), rv, &self.core.tx);
                Ok(obj)
            }
            Write::Delete(final_state) => g.remove(r, final_state, rv, &self.core.tx).ok_or(CommitError::Stale),
        }
    }

    /// Start a watch atomically: the replay plus a receiver for every later event.
    pub fn watch(
        &self,
        res: &ResKey,
        ns: Option<&str>,
        start: WatchStart,
    ) -> Result<(Replay, u64, broadcast::Receiver<Arc<Event>>), TooOld> {
        if let (Some(b), WatchStart::After(n)) = (&self.etcd, &start) {
            // History kept here may outlive etcd's: an etcd compaction expires it too.
            let current = self.current_rv();
            if *n < current && b.revision_available(n + 1) == Err(ReadAtError::Expired) {
                return Err(TooOld(*n, current));
            }
        }
        let g = self.core.inner.lock();
        let rx = self.core.tx.subscribe();
        match start {
            WatchStart::Snapshot => Ok((Replay::Snapshot(g.rv, g.objects(res, ns)), g.rv, rx)),
            WatchStart::After(n) => {
                if n < g.oldest_rv || n > g.rv {
                    return Err(TooOld(n, g.oldest_rv));
                }
                let start = g.history.partition_point(|e| e.rv <= n);
                let events = g
                    .history
                    .iter()
                    .skip(start)
                    .filter(|e| e.obj.res == *res && ns.is_none_or(|ns| e.obj.ns == ns))
                    .cloned()
                    .collect();
                Ok((Replay::Events(events), g.rv, rx))
            }
        }
    }

    /// An unbounded, lossless event feed (controllers). It starts with every stored object as an ADDED event,
    /// as an informer's initial list does, so controllers started on persisted state (etcd) reconcile it.
    pub fn subscribe_controller(&self) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut g = self.core.inner.lock();
        for ev in g.snapshot_events() {
            let _ = tx.send(ev);
        }
        g.controllers.push(tx);
        rx
    }

    /// Drop the event history: watches from any RV up to now get 410 Expired. In memory the RV advances
    /// (without an event) so a client that relists gets an RV it can watch from; etcd compacts its own
    /// history at the current revision, which a relist returns and which stays watchable.
    pub fn compact(&self) {
        if let Some(b) = &self.etcd {
            let rv = self.current_rv();
            if let Err(e) = b.compact(rv) {
                tracing::warn!(revision = rv, error = %e, "etcd compaction");
            }
            let mut g = self.core.inner.lock();
            g.history.clear();
            g.oldest_rv = g.rv;
            return;
        }
        let mut g = self.core.inner.lock();
        g.history.clear();
        g.rv += 1;
        g.oldest_rv = g.rv;
    }

    /// Forget every object of a resource (CRD removal).
    pub fn drop_resource(&self, res: &ResKey) {
        let mut g = self.core.inner.lock();
        if let Some(t) = g.tables.remove(res) {
            for ((ns, name), obj) in t {
                let r = ObjRef {
                    res: res.clone(),
                    ns,
                    name,
                };
                g.index_remove(&r, &obj);
            }
        }
        drop(g);
        if let Some(b) = &self.etcd {
            b.drop_resource(res);
        }
    }
}

fn range_ns<'a>(t: &'a Table, ns: &'a str) -> impl Iterator<Item = (&'a (String, String), &'a Arc<Value>)> + 'a {
    t.range((ns.to_string(), String::new())..)
        .take_while(move |((n, _), _)| n == ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn r(name: &str) -> ObjRef {
        ObjRef {
            res: Arc::from("/configmaps"),
            ns: "default".into(),
            name: name.into(),
        }
    }

    fn ns_store() -> Store {
        let s = Store::new(100, 3);
        let nsr = ObjRef {
            res: Arc::from(NAMESPACES),
            ns: String::new(),
            name: "default".into(),
        };
        s.commit(&nsr, None, Write::Put(json!({"metadata":{"name":"default"}})), None)
            .unwrap();
        s
    }

    #[test]
    fn rv_increases_and_cas() {
        let s = ns_store();
        let a = s
            .commit(
                &r("a"),
                None,
                Write::Put(json!({"metadata":{"name":"a","uid":"u1"}})),
                Some("default"),
            )
            .unwrap();
        assert_eq!(rv_of(&a), 102);
        assert_eq!(
            s.commit(&r("a"), None, Write::Put(json!({"metadata":{}})), Some("default"))
                .unwrap_err(),
            CommitError::AlreadyExists
        );
        assert_eq!(
            s.commit(&r("a"), Some(1), Write::Put(json!({"metadata":{}})), None)
                .unwrap_err(),
            CommitError::Stale
        );
        let b = s
            .commit(
                &r("a"),
                Some(102),
                Write::Put(json!({"metadata":{"name":"a","uid":"u1"}})),
                None,
            )
            .unwrap();
        assert_eq!(rv_of(&b), 103);
        assert!(s.by_uid("u1").is_some());
        s.commit(&r("a"), Some(103), Write::Delete(None), None).unwrap();
        assert!(s.by_uid("u1").is_none());
        assert_eq!(s.current_rv(), 104);
    }

    #[test]
    fn namespace_checks() {
        let s = ns_store();
        let mut x = r("x");
        x.ns = "nope".into();
        assert_eq!(
            s.commit(&x, None, Write::Put(json!({"metadata":{}})), Some("nope"))
                .unwrap_err(),
            CommitError::NamespaceMissing
        );
    }

    #[test]
    fn watch_start_points_and_history_limit() {
        let s = ns_store();
        for i in 0..5 {
            s.commit(
                &r(&format!("o{i}")),
                None,
                Write::Put(json!({"metadata":{}})),
                Some("default"),
            )
            .unwrap();
        }
        // history limit 3: events 104..106 retained, oldest_rv = 103
        assert!(s
            .watch(&Arc::from("/configmaps"), None, WatchStart::After(102))
            .is_err());
        let (replay, _, _) = s
            .watch(&Arc::from("/configmaps"), None, WatchStart::After(104))
            .unwrap();
        match replay {
            Replay::Events(e) => assert_eq!(e.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![105, 106]),
            Replay::Snapshot(..) => panic!("expected events"),
        }
        assert!(s
            .watch(&Arc::from("/configmaps"), None, WatchStart::After(999))
            .is_err());
        s.compact();
        assert!(s
            .watch(&Arc::from("/configmaps"), None, WatchStart::After(105))
            .is_err());
        let (replay, _, _) = s
            .watch(&Arc::from("/configmaps"), Some("default"), WatchStart::Snapshot)
            .unwrap();
        match replay {
            Replay::Snapshot(rv, items) => {
                assert_eq!(rv, 107);
                assert_eq!(items.len(), 5);
            }
            Replay::Events(_) => panic!("expected snapshot"),
        }
    }

    #[test]
    fn owner_index() {
        let s = ns_store();
        s.commit(
            &r("child"),
            None,
            Write::Put(json!({"metadata":{"uid":"c","ownerReferences":[{"uid":"p"}]}})),
            Some("default"),
        )
        .unwrap();
        assert_eq!(s.dependents("p").len(), 1);
        assert_eq!(s.in_namespace("default").len(), 1);
        assert_eq!(s.count_in_namespace("default"), 1);
    }

    #[test]
    fn controllers_start_with_every_stored_object_namespaces_first() {
        let s = ns_store();
        s.commit(
            &r("a"),
            None,
            Write::Put(json!({"metadata":{"name":"a"}})),
            Some("default"),
        )
        .unwrap();
        let mut rx = s.subscribe_controller();
        let first = rx.try_recv().unwrap();
        assert_eq!((first.kind, first.obj.res.as_ref()), (EventType::Added, NAMESPACES));
        let second = rx.try_recv().unwrap();
        assert_eq!((second.obj.name.as_str(), second.rv), ("a", 102));
        assert!(rx.try_recv().is_err());
        s.commit(
            &r("b"),
            None,
            Write::Put(json!({"metadata":{"name":"b"}})),
            Some("default"),
        )
        .unwrap();
        assert_eq!(rx.try_recv().unwrap().obj.name, "b");
    }

    #[test]
    fn replace_all_reports_the_differences_and_resets_history() {
        let s = ns_store();
        for name in ["gone", "same", "changed"] {
            s.commit(
                &r(name),
                None,
                Write::Put(json!({"metadata":{"name":name,"uid":name}})),
                Some("default"),
            )
            .unwrap();
        }
        let stored = |name: &str, rv: u64| {
            Arc::new(json!({"metadata":{"name":name,"uid":name,"resourceVersion":rv.to_string()}}))
        };
        let mut table = Table::new();
        table.insert(
            ("default".into(), "same".into()),
            s.get(&Arc::from("/configmaps"), "default", "same").unwrap(),
        );
        table.insert(("default".into(), "changed".into()), stored("changed", 200));
        table.insert(("default".into(), "new".into()), stored("new", 201));
        let mut tables = HashMap::new();
        tables.insert(Arc::from("/configmaps"), table);
        let mut changes: Vec<String> = s
            .core
            .inner
            .lock()
            .replace_all(tables, 300)
            .into_iter()
            .map(|e| format!("{} {}", e.kind.as_str(), e.obj.name))
            .collect();
        changes.sort();
        // The namespace table is not in the new state either.
        assert_eq!(
            changes,
            ["ADDED new", "DELETED default", "DELETED gone", "MODIFIED changed"]
        );
        assert!(s.by_uid("gone").is_none());
        assert!(s.by_uid("new").is_some());
        assert_eq!(s.current_rv(), 300);
        assert!(s
            .watch(&Arc::from("/configmaps"), None, WatchStart::After(299))
            .is_err());
        assert!(s.watch(&Arc::from("/configmaps"), None, WatchStart::After(300)).is_ok());
    }
}
