//! Live state of managed objects, one cache per cluster.
//!
//! For each GVK some Application needs, one `kube::runtime::watcher` lists and watches only objects that
//! carry the `capstan.dev/app-instance` label (never the whole cluster), started lazily by
//! [`LiveCache::ensure_watched`] and stopped by [`LiveCache::stop_idle`] once unused. Objects are stored
//! with `managedFields` cut down to Capstan's own entry (the diff needs only the fields Capstan owns; the
//! rest dominates memory) and the `last-applied-configuration` annotation dropped (memory, and it can carry
//! a Secret's body), as compact JSON text ([`Cached`]): a parsed `serde_json::Value` takes about nine times
//! the bytes of its text (every JSON object is a B-tree with nodes of its own), the cache holds every managed
//! object of the cluster, and a reconcile reads only its own Application's (freshly parsed, dropped after
//! it). An index app-instance → objects answers [`LiveCache::objects_for`] without
//! scanning the cache (a scan per Application is what makes large installations slow).
//!
//! Completeness: a watch is *synced* only after it emitted `InitDone` since its last (re)start. A relist (a
//! `410 Gone`, compaction) marks it not synced from the error until the new `InitDone`, and the relisted set
//! replaces the old one atomically at `InitDone`. Callers must not decide that something is missing unless
//! [`LiveCache::is_synced`] holds for every kind they look at: an object not listed yet is not gone, and
//! pruning on an incomplete cache deletes what Git still declares (docs/architecture.md, "Safety rules").
//!
//! Changes: every ADDED/MODIFIED/DELETED of a managed object, and every object that changed across a
//! relist, sends its app-instance id on a broadcast channel ([`LiveCache::subscribe`]); a receiver that
//! lags (`RecvError::Lagged`) must treat every Application as changed. [`LiveCache::wait_synced`] waits for
//! watches to sync, for callers that found them incomplete.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde_json::Value;
use sha2::{Digest, Sha256};
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use super::discovery::{display_gvk, DiscoveryCache};
use super::ops::dynamic_to_value;
use super::scope::{self, WatchScope};
use super::{ClusterError, FIELD_MANAGER};
use crate::api::labels::APP_INSTANCE_LABEL;
use crate::engine::diff::normalize::LAST_APPLIED;
use crate::engine::object::{self, ObjectKey};

/// Capacity of the change channel; a receiver further behind gets `Lagged` and must resync everything.
const CHANGE_CHANNEL_CAPACITY: usize = 4096;
/// Length of the readable name part of an app-instance id (63 − 1 − 16 hex).
const INSTANCE_NAME_PART: usize = 46;

/// The app-instance id Capstan puts on every object it applies as label `capstan.dev/app-instance`:
/// `<name>-<h>`, where `h` is the first 16 hex characters of sha256(`<namespace>/<name>`) and `<name>` is
/// the Application's name cut to 46 characters (trailing `-`/`.` trimmed). Always a valid label value
/// (≤ 63 characters, alphanumeric at both ends), stable across restarts, and distinct for same-named
/// Applications in different namespaces (the hash covers the namespace; 64 bits make collisions
/// negligible). The name part is only for people reading labels; selection is by the whole value.
pub fn app_instance_id(app_namespace: &str, app_name: &str) -> String {
    let digest = Sha256::digest(format!("{app_namespace}/{app_name}").as_bytes());
    let hash = hex::encode(&digest[..8]);
    let safe: String = app_name
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        .take(INSTANCE_NAME_PART)
        .collect();
    let name = safe.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if name.is_empty() {
        hash
    } else {
        format!("{name}-{hash}")
    }
}

/// State of one watch, for conditions and diagnostics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchStatus {
    /// `InitDone` seen since the last (re)start.
    pub synced: bool,
    /// Objects cached for this kind.
    pub objects: usize,
    /// The last watch error, cleared by the next successful event (never contains credentials).
    pub last_error: Option<String>,
}

/// The live cache of one cluster. Cheap to clone; watches stop when the last clone is dropped.
#[derive(Clone)]
pub struct LiveCache {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    discovery: Arc<DiscoveryCache>,
    /// Where the watches look (a namespaced install watches its namespaces only).
    scope: WatchScope,
    shared: Arc<Shared>,
    tasks: Mutex<HashMap<GroupVersionKind, JoinHandle<()>>>,
    generation: AtomicU64,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for (_, task) in self.tasks.get_mut().unwrap_or_else(|e| e.into_inner()).drain() {
            task.abort();
        }
    }
}

/// What watch tasks and readers share.
struct Shared {
    state: RwLock<State>,
    changes: broadcast::Sender<String>,
    /// Bumped whenever some watch becomes synced or unsynced; [`LiveCache::wait_synced`] listens.
    sync_epoch: watch::Sender<u64>,
}

impl LiveCache {
    /// A cache whose watches use `client` (no read timeout) and resolve kinds through `discovery`.
    pub fn new(client: Client, discovery: Arc<DiscoveryCache>) -> Self {
        Self::scoped(client, discovery, WatchScope::Cluster)
    }

    /// As [`LiveCache::new`], watching only where `scope` says; cluster-scoped kinds are refused in a
    /// namespaced scope (the watch would be a cluster-wide request).
    pub fn scoped(client: Client, discovery: Arc<DiscoveryCache>, scope: WatchScope) -> Self {
        let (changes, _) = broadcast::channel(CHANGE_CHANNEL_CAPACITY);
        let (sync_epoch, _) = watch::channel(0);
        LiveCache {
            inner: Arc::new(Inner {
                client,
                discovery,
                scope,
                shared: Arc::new(Shared {
                    state: RwLock::new(State::default()),
                    changes,
                    sync_epoch,
                }),
                tasks: Mutex::new(HashMap::new()),
                generation: AtomicU64::new(0),
            }),
        }
    }

    /// Starts watching `gvk` unless already watched; marks it used either way, so callers should ensure every
    /// kind they rely on at each reconcile (that is what keeps it from [`Self::stop_idle`]). A kind the
    /// cluster does not serve is `UnknownKind` (retry later: its CRD may be on its way).
    pub async fn ensure_watched(&self, gvk: &GroupVersionKind) -> Result<(), ClusterError> {
        if self.touch(gvk) {
            return Ok(());
        }
        let kind = self.inner.discovery.resolve(gvk).await?;
        if !kind.supports("list") || !kind.supports("watch") {
            return Err(ClusterError::Invalid(format!(
                "{} cannot be listed and watched",
                display_gvk(gvk)
            )));
        }
        if !kind.namespaced && self.inner.scope != WatchScope::Cluster {
            return Err(ClusterError::NamespaceNotAllowed(format!(
                "{} is cluster-scoped: a namespaced installation (--watch-namespaces: {}) cannot watch it",
                display_gvk(gvk),
                self.inner.scope.describe()
            )));
        }
        let mut tasks = self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner());
        if tasks.contains_key(gvk) {
            drop(tasks);
            self.touch(gvk);
            return Ok(());
        }
        let generation = self.inner.generation.fetch_add(1, Ordering::Relaxed) + 1;
        self.inner.shared.write().start(gvk, generation);
        let (client, resource) = (&self.inner.client, &kind.resource);
        let config = watcher::Config::default().labels(APP_INSTANCE_LABEL);
        let stream = scope::watch_in(&self.inner.scope, config, |ns| match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, resource),
            None => Api::all_with(client.clone(), resource),
        });
        let task = tokio::spawn(run_watch(
            self.inner.shared.clone(),
            gvk.clone(),
            generation,
            stream,
            kind.resource.clone(),
        ));
        tasks.insert(gvk.clone(), task);
        Ok(())
    }

    /// Where this cache watches (the installation's scope).
    pub fn scope(&self) -> &WatchScope {
        &self.inner.scope
    }

    /// True only if every kind in `gvks` is watched and has listed completely since its last (re)start.
    pub fn is_synced(&self, gvks: &[GroupVersionKind]) -> bool {
        let state = self.inner.shared.read();
        gvks.iter().all(|g| state.kinds.get(g).is_some_and(|k| k.synced))
    }

    /// Waits up to `limit` for [`Self::is_synced`]; returns whether it holds.
    pub async fn wait_synced(&self, gvks: &[GroupVersionKind], limit: Duration) -> bool {
        let mut epochs = self.inner.shared.sync_epoch.subscribe();
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            if self.is_synced(gvks) {
                return true;
            }
            match tokio::time::timeout_at(deadline, epochs.changed()).await {
                Ok(Ok(())) => continue,
                _ => return self.is_synced(gvks),
            }
        }
    }

    /// Every cached object labelled with `app_instance`, ordered by key then apiVersion.
    pub fn objects_for(&self, app_instance: &str) -> Vec<Arc<Value>> {
        self.inner.shared.read().objects_for(app_instance)
    }

    /// One cached object.
    pub fn get(&self, gvk: &GroupVersionKind, key: &ObjectKey) -> Option<Arc<Value>> {
        let state = self.inner.shared.read();
        state
            .kinds
            .get(gvk)
            .and_then(|k| k.objects.get(key))
            .and_then(|o| o.value(key))
    }

    /// App-instance ids whose objects changed, as they change.
    pub fn subscribe(&self) -> broadcast::Receiver<String> {
        self.inner.shared.changes.subscribe()
    }

    /// State of the watch of `gvk`, if watched.
    pub fn status(&self, gvk: &GroupVersionKind) -> Option<WatchStatus> {
        let state = self.inner.shared.read();
        state.kinds.get(gvk).map(|k| WatchStatus {
            synced: k.synced,
            objects: k.objects.len(),
            last_error: k.last_error.clone(),
        })
    }

    /// The kinds being watched.
    pub fn watched(&self) -> Vec<GroupVersionKind> {
        let mut kinds: Vec<_> = self.inner.shared.read().kinds.keys().cloned().collect();
        kinds.sort_by_key(display_gvk);
        kinds
    }

    /// Stops watches not ensured within `idle` and drops their objects; returns the kinds stopped.
    pub fn stop_idle(&self, idle: Duration) -> Vec<GroupVersionKind> {
        let now = Instant::now();
        let stale: Vec<GroupVersionKind> = {
            let state = self.inner.shared.read();
            state
                .kinds
                .iter()
                .filter(|(_, k)| now.duration_since(k.last_used) >= idle)
                .map(|(g, _)| g.clone())
                .collect()
        };
        for gvk in &stale {
            self.stop(gvk);
        }
        stale
    }

    /// Stops the watch of `gvk` and drops its objects.
    pub fn stop(&self, gvk: &GroupVersionKind) {
        if let Some(task) = self.inner.tasks.lock().unwrap_or_else(|e| e.into_inner()).remove(gvk) {
            task.abort();
        }
        self.inner.shared.write().remove(gvk);
    }

    /// Marks `gvk` used; false if it is not watched.
    fn touch(&self, gvk: &GroupVersionKind) -> bool {
        let mut state = self.inner.shared.write();
        match state.kinds.get_mut(gvk) {
            Some(k) => {
                k.last_used = Instant::now();
                true
            }
            None => false,
        }
    }
}

impl Shared {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies one watcher event, then notifies (outside the lock).
    fn handle(&self, gvk: &GroupVersionKind, generation: u64, event: Update) {
        let (changed, sync_changed) = self.write().update(gvk, generation, event);
        for instance in changed {
            let _ = self.changes.send(instance);
        }
        if sync_changed {
            self.sync_epoch.send_modify(|e| *e += 1);
        }
    }
}

/// One watcher event, objects already converted and pruned.
enum Update {
    Init,
    InitApply(ObjectKey, Cached),
    InitDone,
    Apply(ObjectKey, Cached),
    Delete(ObjectKey),
    Error { message: String, gone: bool },
}

/// The watch loop of one kind: runs until aborted; the watcher retries with backoff on its own.
async fn run_watch(
    shared: Arc<Shared>,
    gvk: GroupVersionKind,
    generation: u64,
    stream: scope::WatchStream<DynamicObject>,
    resource: ApiResource,
) {
    let mut stream = stream.default_backoff().boxed();
    while let Some(item) = stream.next().await {
        let update = match item {
            Ok(watcher::Event::Init) => Update::Init,
            Ok(watcher::Event::InitApply(o)) => {
                let (key, obj) = Cached::of(&prune(dynamic_to_value(o, &resource)));
                Update::InitApply(key, obj)
            }
            Ok(watcher::Event::InitDone) => Update::InitDone,
            Ok(watcher::Event::Apply(o)) => {
                let (key, obj) = Cached::of(&prune(dynamic_to_value(o, &resource)));
                Update::Apply(key, obj)
            }
            Ok(watcher::Event::Delete(o)) => Update::Delete(ObjectKey::of(&dynamic_to_value(o, &resource))),
            Err(e) => {
                let gone = matches!(&e, watcher::Error::WatchError(s) if s.code == 410);
                let message = watch_error_message(&e);
                tracing::debug!(gvk = %display_gvk(&gvk), error = %message, "watch error");
                Update::Error { message, gone }
            }
        };
        shared.handle(&gvk, generation, update);
    }
}

/// A watch error in few words: the API status or the transport failure, never request details.
fn watch_error_message(e: &watcher::Error) -> String {
    let inner = match e {
        watcher::Error::InitialListFailed(k) | watcher::Error::WatchStartFailed(k) | watcher::Error::WatchFailed(k) => {
            ClusterError::from_kube(clone_kube_error(k), "watch", false).to_string()
        }
        watcher::Error::WatchError(s) => format!(
            "watch: {} ({})",
            crate::text::truncate(&s.message, super::MAX_MESSAGE_LEN),
            s.code
        ),
        other => format!("watch: {other}"),
    };
    crate::text::truncate(&inner, super::MAX_MESSAGE_LEN)
}

/// `kube::Error` is not `Clone`; keep what categorization needs.
fn clone_kube_error(e: &kube::Error) -> kube::Error {
    match e {
        kube::Error::Api(s) => kube::Error::Api(s.clone()),
        other => kube::Error::Service(other.to_string().into()),
    }
}

/// Keeps only Capstan's `managedFields` entry and drops `last-applied-configuration` (see module doc);
/// a child Application keeps only the status its health check reads.
pub fn prune(mut obj: Value) -> Value {
    slim_application_status(&mut obj);
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return obj;
    };
    if let Some(Value::Array(fields)) = meta.get_mut("managedFields") {
        fields.retain(|f| f.get("manager").and_then(Value::as_str) == Some(FIELD_MANAGER));
        if fields.is_empty() {
            meta.remove("managedFields");
        }
    }
    if let Some(Value::Object(annotations)) = meta.get_mut("annotations") {
        annotations.remove(LAST_APPLIED);
    }
    obj
}

/// A live Application (an app of apps' child) is read for its health only (`engine::health::application`:
/// `status.health`, `status.sync`, the operation's phase and message). Its resource list, history and sync
/// result, which grow with the child's own size, are dropped: the S3 heap profile found the live cache
/// of 1,000 children to be one of the largest parts of peak memory. The diff never reads status.
fn slim_application_status(obj: &mut Value) {
    let is_application = obj.get("kind").and_then(Value::as_str) == Some("Application")
        && obj
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|v| v.starts_with("capstan.dev/") || v.starts_with("argoproj.io/"));
    let Some(status) = obj
        .get_mut("status")
        .and_then(Value::as_object_mut)
        .filter(|_| is_application)
    else {
        return;
    };
    status.retain(|k, _| matches!(k.as_str(), "health" | "sync" | "operationState"));
    if let Some(Value::Object(op)) = status.get_mut("operationState") {
        op.retain(|k, _| matches!(k.as_str(), "phase" | "message"));
    }
}

/// An object's place in the index: the watch it came from and its key.
type Slot = (Arc<GroupVersionKind>, ObjectKey);

/// One cached object as compact JSON text (see the module doc), with what the index and the change
/// detection read without parsing it.
#[derive(Clone, Debug)]
struct Cached {
    /// Label `capstan.dev/app-instance` (empty when missing: such an object is not kept).
    instance: Box<str>,
    resource_version: Box<str>,
    json: Box<str>,
}

impl Cached {
    fn of(obj: &Value) -> (ObjectKey, Cached) {
        let cached = Cached {
            instance: object::label(obj, APP_INSTANCE_LABEL).unwrap_or_default().into(),
            resource_version: object::metadata_field(obj, "resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .into(),
            // Serializing a `Value` cannot fail (its keys are strings).
            json: serde_json::to_string(obj).unwrap_or_default().into(),
        };
        (ObjectKey::of(obj), cached)
    }

    /// The object, parsed again. Text written from a `Value` parses back to the same `Value` (the API
    /// server's JSON was parsed with the same depth limit); `None` only if that ever broke, logged.
    fn value(&self, key: &ObjectKey) -> Option<Arc<Value>> {
        match serde_json::from_str(&self.json) {
            Ok(v) => Some(Arc::new(v)),
            Err(e) => {
                tracing::error!(object = %key, error = %e, "a cached live object does not parse back; skipped");
                None
            }
        }
    }
}

#[derive(Default)]
struct State {
    kinds: HashMap<GroupVersionKind, KindState>,
    /// app-instance → objects with that label.
    by_instance: HashMap<String, HashSet<Slot>>,
}

struct KindState {
    gvk: Arc<GroupVersionKind>,
    /// Which watch task owns this entry; events of a stopped task are ignored.
    generation: u64,
    synced: bool,
    objects: HashMap<ObjectKey, Cached>,
    /// Objects of a relist in progress, swapped in at `InitDone`.
    relist: Option<HashMap<ObjectKey, Cached>>,
    last_used: Instant,
    last_error: Option<String>,
}

impl State {
    fn start(&mut self, gvk: &GroupVersionKind, generation: u64) {
        self.remove(gvk);
        self.kinds.insert(
            gvk.clone(),
            KindState {
                gvk: Arc::new(gvk.clone()),
                generation,
                synced: false,
                objects: HashMap::new(),
                relist: None,
                last_used: Instant::now(),
                last_error: None,
            },
        );
    }

    fn remove(&mut self, gvk: &GroupVersionKind) {
        let Some(kind) = self.kinds.remove(gvk) else { return };
        for (key, obj) in &kind.objects {
            unindex(&mut self.by_instance, &obj.instance, &(kind.gvk.clone(), key.clone()));
        }
    }

    /// Applies an event; returns the app-instances that changed and whether the synced flag flipped.
    fn update(&mut self, gvk: &GroupVersionKind, generation: u64, event: Update) -> (Vec<String>, bool) {
        let Some(kind) = self.kinds.get_mut(gvk).filter(|k| k.generation == generation) else {
            return (Vec::new(), false);
        };
        match event {
            Update::Init => {
                kind.relist = Some(HashMap::new());
                (Vec::new(), std::mem::replace(&mut kind.synced, false))
            }
            Update::InitApply(key, obj) => {
                kind.relist.get_or_insert_with(HashMap::new).insert(key, obj);
                (Vec::new(), false)
            }
            Update::InitDone => {
                let listed = kind.relist.take().unwrap_or_default();
                kind.last_error = None;
                let flipped = !std::mem::replace(&mut kind.synced, true);
                (self.replace_all(gvk, listed), flipped)
            }
            Update::Apply(key, obj) => {
                kind.last_error = None;
                (self.put(gvk, key, Some(obj)), false)
            }
            Update::Delete(key) => {
                kind.last_error = None;
                (self.put(gvk, key, None), false)
            }
            Update::Error { message, gone } => {
                kind.last_error = Some(message);
                let flipped = gone && std::mem::replace(&mut kind.synced, false);
                (Vec::new(), flipped)
            }
        }
    }

    /// Sets (or, with `None`, removes) one object; returns the instances affected when it really changed.
    fn put(&mut self, gvk: &GroupVersionKind, key: ObjectKey, obj: Option<Cached>) -> Vec<String> {
        let Some(kind) = self.kinds.get_mut(gvk) else {
            return Vec::new();
        };
        // A label that no longer selects the object (or was emptied) takes it out of the cache.
        let obj = obj.filter(|o| !o.instance.is_empty());
        let old = match &obj {
            Some(o) => kind.objects.insert(key.clone(), o.clone()),
            None => kind.objects.remove(&key),
        };
        if old.is_none() && obj.is_none() {
            return Vec::new();
        }
        if let (Some(a), Some(b)) = (&old, &obj) {
            if a.resource_version == b.resource_version && !a.resource_version.is_empty() {
                return Vec::new();
            }
        }
        let slot = (kind.gvk.clone(), key);
        let mut changed = Vec::new();
        if let Some(o) = &old {
            let instance = &*o.instance;
            unindex(&mut self.by_instance, instance, &slot);
            changed.push(instance.to_string());
        }
        if let Some(o) = &obj {
            let instance = &*o.instance;
            self.by_instance
                .entry(instance.to_string())
                .or_default()
                .insert(slot.clone());
            if !changed.iter().any(|c| c == instance) {
                changed.push(instance.to_string());
            }
        }
        changed
    }

    /// Swaps in a relisted set; returns the instances of objects added, removed or changed by it.
    fn replace_all(&mut self, gvk: &GroupVersionKind, listed: HashMap<ObjectKey, Cached>) -> Vec<String> {
        let old_keys: Vec<ObjectKey> = match self.kinds.get(gvk) {
            Some(k) => k
                .objects
                .keys()
                .filter(|key| !listed.contains_key(*key))
                .cloned()
                .collect(),
            None => return Vec::new(),
        };
        let mut changed: Vec<String> = Vec::new();
        for key in old_keys {
            changed.extend(self.put(gvk, key, None));
        }
        for (key, obj) in listed {
            changed.extend(self.put(gvk, key, Some(obj)));
        }
        changed.sort();
        changed.dedup();
        changed
    }

    fn objects_for(&self, instance: &str) -> Vec<Arc<Value>> {
        let Some(slots) = self.by_instance.get(instance) else {
            return Vec::new();
        };
        let mut found: Vec<(&ObjectKey, &str, &Cached)> = slots
            .iter()
            .filter_map(|(gvk, key)| {
                let obj = self.kinds.get(gvk.as_ref())?.objects.get(key)?;
                Some((key, gvk.version.as_str(), obj))
            })
            .collect();
        found.sort_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
        found.into_iter().filter_map(|(key, _, o)| o.value(key)).collect()
    }
}

fn unindex(index: &mut HashMap<String, HashSet<Slot>>, instance: &str, slot: &Slot) {
    if let Some(set) = index.get_mut(instance) {
        set.remove(slot);
        if set.is_empty() {
            index.remove(instance);
        }
    }
}

#[cfg(test)]
mod unit_tests {
    use serde_json::json;

    use super::*;

    fn cm(name: &str, instance: Option<&str>, rv: &str) -> Value {
        let mut labels = serde_json::Map::new();
        if let Some(i) = instance {
            labels.insert(APP_INSTANCE_LABEL.into(), json!(i));
        }
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": "ns", "resourceVersion": rv, "labels": labels}})
    }

    fn init_apply(name: &str, instance: Option<&str>, rv: &str) -> Update {
        let (key, obj) = Cached::of(&cm(name, instance, rv));
        Update::InitApply(key, obj)
    }

    fn apply(name: &str, instance: Option<&str>, rv: &str) -> Update {
        let (key, obj) = Cached::of(&cm(name, instance, rv));
        Update::Apply(key, obj)
    }

    fn gvk() -> GroupVersionKind {
        GroupVersionKind::gvk("", "v1", "ConfigMap")
    }

    #[test]
    fn instance_ids_are_stable_label_values() {
        let a = app_instance_id("team-a", "guestbook");
        assert_eq!(a, app_instance_id("team-a", "guestbook"));
        assert_ne!(a, app_instance_id("team-b", "guestbook"));
        assert!(a.starts_with("guestbook-") && a.len() == "guestbook-".len() + 16);
        let long = app_instance_id("ns", &format!("{}.-x", "a".repeat(300)));
        assert!(long.len() <= 63, "{long}");
        let ok = |s: &str| {
            s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
                && s.starts_with(|c: char| c.is_ascii_alphanumeric())
                && s.ends_with(|c: char| c.is_ascii_alphanumeric())
        };
        assert!(ok(&a) && ok(&long));
        assert!(ok(&app_instance_id("ns", "---")));
        let trimmed = app_instance_id("ns", &format!("{}.b", "a".repeat(45)));
        assert!(ok(&trimmed), "{trimmed}");
    }

    #[test]
    fn prune_keeps_only_capstan_fields() {
        let obj = json!({"metadata": {"name": "x", "annotations": {LAST_APPLIED: "{...}", "keep": "1"},
            "managedFields": [{"manager": "capstan", "operation": "Apply"}, {"manager": "kubectl", "operation": "Update"}]}});
        let p = prune(obj);
        assert_eq!(
            p.pointer("/metadata/managedFields").unwrap().as_array().unwrap().len(),
            1
        );
        assert_eq!(p.pointer("/metadata/annotations"), Some(&json!({"keep": "1"})));
        let none = prune(json!({"metadata": {"managedFields": [{"manager": "kubectl"}]}}));
        assert!(none.pointer("/metadata/managedFields").is_none());
    }

    #[test]
    fn child_applications_keep_only_what_their_health_reads() {
        let child = json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "metadata": {"name": "c"},
            "spec": {"project": "default"},
            "status": {"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "abc"},
                "resources": [{"kind": "ConfigMap", "name": "x"}], "history": [{"id": 1}],
                "operationState": {"phase": "Succeeded", "message": "ok", "syncResult": {"resources": []}}}});
        let slim = prune(child.clone());
        assert_eq!(
            slim["status"],
            json!({"health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "abc"},
                "operationState": {"phase": "Succeeded", "message": "ok"}})
        );
        assert_eq!(slim["spec"], child["spec"]);
        assert_eq!(
            crate::engine::health::assess(&slim),
            crate::engine::health::assess(&child),
            "the health verdict is unchanged"
        );
        // Other kinds keep their whole status (their health checks read it).
        let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment", "status": {"replicas": 1, "x": 2}});
        assert_eq!(prune(deployment.clone()), deployment);
    }

    #[test]
    fn relist_swaps_atomically_and_reports_changes() {
        let mut s = State::default();
        s.start(&gvk(), 1);
        assert_eq!(s.update(&gvk(), 1, Update::Init), (vec![], false));
        s.update(&gvk(), 1, init_apply("a", Some("app1"), "1"));
        s.update(&gvk(), 1, init_apply("b", Some("app2"), "1"));
        assert!(s.objects_for("app1").is_empty(), "nothing visible before InitDone");
        let (changed, flipped) = s.update(&gvk(), 1, Update::InitDone);
        assert_eq!(changed, vec!["app1".to_string(), "app2".to_string()]);
        assert!(flipped && s.kinds[&gvk()].synced);

        // 410: unsynced at once, old objects stay visible until the relist completes.
        let (_, flipped) = s.update(
            &gvk(),
            1,
            Update::Error {
                message: "gone".into(),
                gone: true,
            },
        );
        assert!(flipped && !s.kinds[&gvk()].synced);
        s.update(&gvk(), 1, Update::Init);
        s.update(&gvk(), 1, init_apply("a", Some("app1"), "1"));
        assert_eq!(s.objects_for("app2").len(), 1);
        let (changed, flipped) = s.update(&gvk(), 1, Update::InitDone);
        assert_eq!(changed, vec!["app2".to_string()], "only b vanished");
        assert!(flipped && s.objects_for("app2").is_empty());

        // A stale generation is ignored.
        assert_eq!(s.update(&gvk(), 7, apply("c", Some("app3"), "2")), (vec![], false));
    }

    #[test]
    fn cached_objects_read_back_exactly_as_pruned() {
        // What the diff and health checks read must survive the compact form: Capstan's managedFields
        // entry (fieldsV1 intact), data, status, numbers of every kind, key order irrelevant.
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7",
                "labels": {APP_INSTANCE_LABEL: "app1"},
                "annotations": {LAST_APPLIED: "{}", "capstan.dev/tracking-id": "ns/app1:/ConfigMap:ns/a"},
                "managedFields": [
                    {"manager": "capstan", "operation": "Apply", "fieldsType": "FieldsV1",
                     "fieldsV1": {"f:data": {"f:value": {}}, "f:metadata": {"f:labels": {}}}},
                    {"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {"f:other": {}}}}]},
            "data": {"value": "v1", "other": "ü\n\"x\""},
            "status": {"replicas": 3, "ratio": 0.25, "big": 18446744073709551615u64, "neg": -1, "none": null}});
        let mut s = State::default();
        s.start(&gvk(), 1);
        let (key, obj) = Cached::of(&prune(live.clone()));
        s.update(&gvk(), 1, Update::Apply(key.clone(), obj));
        let read = s.objects_for("app1");
        assert_eq!(read.len(), 1);
        assert_eq!(*read[0], prune(live));
        assert_eq!(read[0]["metadata"]["managedFields"][0]["manager"], "capstan");
        assert!(read[0].pointer("/metadata/managedFields/1").is_none());
        assert!(read[0]
            .pointer("/metadata/annotations/kubectl.kubernetes.io~1last-applied-configuration")
            .is_none());
        assert_eq!(s.kinds[&gvk()].objects[&key].resource_version.as_ref(), "7");
    }

    #[test]
    fn relabel_moves_object_between_instances() {
        let mut s = State::default();
        s.start(&gvk(), 1);
        s.update(&gvk(), 1, apply("a", Some("app1"), "1"));
        let (changed, _) = s.update(&gvk(), 1, apply("a", Some("app2"), "2"));
        assert_eq!(changed, vec!["app1".to_string(), "app2".to_string()]);
        assert!(s.objects_for("app1").is_empty());
        assert_eq!(s.objects_for("app2").len(), 1);
        let (same, _) = s.update(&gvk(), 1, apply("a", Some("app2"), "2"));
        assert!(same.is_empty(), "same resourceVersion is no change");
        let (gone, _) = s.update(&gvk(), 1, apply("a", None, "3"));
        assert_eq!(gone, vec!["app2".to_string()]);
        assert!(s.by_instance.is_empty());
    }
}
