//! In-memory object storage with one global, strictly increasing resourceVersion (an etcd-revision analogue,
//! spec §5.5) and a bounded event history for watches (§9.3, §9.4).
//!
//! Why this shape: every write goes through [`Store::commit`], a compare-and-swap on the object's
//! resourceVersion, so request handlers compute new objects *outside* the lock and retry on a race. Objects are
//! indexed per resource in BTreeMaps keyed by (namespace, name), which gives etcd key order for lists and cheap
//! namespace ranges. Events fan out through a broadcast channel (watch streams) and unbounded channels
//! (controllers, which must never miss one).

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::{broadcast, mpsc};

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

/// One committed change. `prev` is the state before (for selector transitions, spec §9.7).
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

/// The object store.
pub struct Store {
    inner: Mutex<Inner>,
    tx: broadcast::Sender<Arc<Event>>,
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

    fn check_namespace(&self, ns: &str) -> Result<(), CommitError> {
        let table = self.tables.get(NAMESPACES);
        match table.and_then(|t| t.get(&(String::new(), ns.to_string()))) {
            None => Err(CommitError::NamespaceMissing),
            Some(n) if n.pointer("/metadata/deletionTimestamp").is_some() => Err(CommitError::NamespaceTerminating),
            Some(_) => Ok(()),
        }
    }

    fn emit(&mut self, ev: Event, tx: &broadcast::Sender<Arc<Event>>) {
        let ev = Arc::new(ev);
        self.history.push_back(ev.clone());
        while self.history.len() > self.history_limit {
            if let Some(old) = self.history.pop_front() {
                self.oldest_rv = old.rv;
            }
        }
        let _ = tx.send(ev.clone());
        self.controllers.retain(|c| c.send(ev.clone()).is_ok());
    }
}

impl Store {
    /// A store whose first resourceVersion is `seed_rv + 1` (seed from wall-clock microseconds, spec §5.5).
    pub fn new(seed_rv: u64, history_limit: usize) -> Self {
        let (tx, _) = broadcast::channel(history_limit.clamp(1024, 1 << 16));
        Store {
            inner: Mutex::new(Inner {
                rv: seed_rv,
                tables: HashMap::new(),
                history: VecDeque::new(),
                history_limit: history_limit.max(1),
                oldest_rv: seed_rv,
                uids: HashMap::new(),
                owners: HashMap::new(),
                controllers: Vec::new(),
            }),
            tx,
        }
    }

    pub fn current_rv(&self) -> u64 {
        self.inner.lock().rv
    }

    pub fn get(&self, res: &ResKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        let g = self.inner.lock();
        g.tables.get(res)?.get(&(ns.to_string(), name.to_string())).cloned()
    }

    /// The current RV and the objects of `res` (in `ns`, or all namespaces), in (namespace, name) order.
    pub fn list(&self, res: &ResKey, ns: Option<&str>) -> (u64, Vec<Arc<Value>>) {
        let g = self.inner.lock();
        let Some(t) = g.tables.get(res) else {
            return (g.rv, Vec::new());
        };
        let items = match ns {
            None => t.values().cloned().collect(),
            Some(ns) => range_ns(t, ns).map(|(_, v)| v.clone()).collect(),
        };
        (g.rv, items)
    }

    /// The object with this uid.
    pub fn by_uid(&self, uid: &str) -> Option<(ObjRef, Arc<Value>)> {
        let g = self.inner.lock();
        let r = g.uids.get(uid)?;
        let obj = g.tables.get(&r.res)?.get(&(r.ns.clone(), r.name.clone()))?.clone();
        Some((r.clone(), obj))
    }

    /// Objects whose ownerReferences name `owner_uid`.
    pub fn dependents(&self, owner_uid: &str) -> Vec<(ObjRef, Arc<Value>)> {
        let g = self.inner.lock();
        let Some(set) = g.owners.get(owner_uid) else {
            return Vec::new();
        };
        set.iter()
            .filter_map(|r| {
                let obj = g.tables.get(&r.res)?.get(&(r.ns.clone(), r.name.clone()))?;
                Some((r.clone(), obj.clone()))
            })
            .collect()
    }

    /// Every object in namespace `ns` (across resources).
    pub fn in_namespace(&self, ns: &str) -> Vec<(ObjRef, Arc<Value>)> {
        let g = self.inner.lock();
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
        let g = self.inner.lock();
        g.tables.values().map(|t| range_ns(t, ns).count()).sum()
    }

    pub fn count(&self, res: &ResKey) -> usize {
        self.inner.lock().tables.get(res).map_or(0, |t| t.len())
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
        let mut g = self.inner.lock();
        let key = (r.ns.clone(), r.name.clone());
        let current = g.tables.get(&r.res).and_then(|t| t.get(&key)).cloned();
        match (&current, expected) {
            (Some(_), None) => return Err(CommitError::AlreadyExists),
            (None, Some(_)) => return Err(CommitError::Stale),
            (Some(c), Some(e)) if rv_of(c) != e => return Err(CommitError::Stale),
            _ => {}
        }
        if current.is_none() {
            if let Some(ns) = namespace {
                g.check_namespace(ns)?;
            }
        }
        g.rv += 1;
        let rv = g.rv;
        match write {
            Write::Put(mut obj) => {
                set_rv(&mut obj, rv);
                let obj = Arc::new(obj);
                if let Some(c) = &current {
                    g.index_remove(r, c);
                }
                g.index_add(r, &obj);
                g.tables.entry(r.res.clone()).or_default().insert(key, obj.clone());
                let kind = if current.is_some() {
                    EventType::Modified
                } else {
                    EventType::Added
                };
                g.emit(
                    Event {
                        rv,
                        kind,
                        obj: r.clone(),
                        object: obj.clone(),
                        prev: current,
                    },
                    &self.tx,
                );
                Ok(obj)
            }
            Write::Delete(final_state) => {
                let Some(c) = current else {
                    return Err(CommitError::Stale);
                };
                g.index_remove(r, &c);
                if let Some(t) = g.tables.get_mut(&r.res) {
                    t.remove(&key);
                }
                let mut last = final_state.unwrap_or_else(|| (*c).clone());
                set_rv(&mut last, rv);
                let last = Arc::new(last);
                g.emit(
                    Event {
                        rv,
                        kind: EventType::Deleted,
                        obj: r.clone(),
                        object: last.clone(),
                        prev: Some(c),
                    },
                    &self.tx,
                );
                Ok(last)
            }
        }
    }

    /// Start a watch atomically: the replay plus a receiver for every later event.
    pub fn watch(
        &self,
        res: &ResKey,
        ns: Option<&str>,
        start: WatchStart,
    ) -> Result<(Replay, u64, broadcast::Receiver<Arc<Event>>), TooOld> {
        let g = self.inner.lock();
        let rx = self.tx.subscribe();
        match start {
            WatchStart::Snapshot => {
                let items = match g.tables.get(res) {
                    None => Vec::new(),
                    Some(t) => match ns {
                        None => t.values().cloned().collect(),
                        Some(ns) => range_ns(t, ns).map(|(_, v)| v.clone()).collect(),
                    },
                };
                Ok((Replay::Snapshot(g.rv, items), g.rv, rx))
            }
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

    /// An unbounded, lossless event feed (controllers).
    pub fn subscribe_controller(&self) -> mpsc::UnboundedReceiver<Arc<Event>> {
        let (tx, rx) = mpsc::unbounded_channel();
        self.inner.lock().controllers.push(tx);
        rx
    }

    /// Drop the event history: watches from any RV up to now get 410 Expired. The RV advances (without an
    /// event) so a client that relists gets an RV it can watch from.
    pub fn compact(&self) {
        let mut g = self.inner.lock();
        g.history.clear();
        g.rv += 1;
        g.oldest_rv = g.rv;
    }

    /// Forget every object of a resource (CRD removal).
    pub fn drop_resource(&self, res: &ResKey) {
        let mut g = self.inner.lock();
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
}
