//! Live state and comparison: which kinds to watch, the live objects of this Application (from the
//! destination's [`LiveCache`] only — never a cluster-wide list), and desired ↔ live per resource: diff
//! with `ignoreDifferences`/`IgnoreExtraneous`, health per resource, aggregated sync and health.
//!
//! Completeness: [`LiveView::complete`] is false until every kind looked at has listed since its last
//! (re)start. An incomplete view is used for display only: no resource is called missing, nothing is
//! pruned, and the sync step waits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::core::GroupVersionKind;
use kube::ResourceExt;
use serde_json::Value;

use crate::api::application::{ResourceStatus, SyncStatusCode};
use crate::api::labels::{APP_INSTANCE_LABEL, TRACKING_ID_ANNOTATION};
use crate::api::Application;
use crate::cluster::{ClusterError, ClusterHandle};
use crate::engine::diff::{app_sync_status, diff, DiffOptions, ResourceSync};
use crate::engine::health::{self, ChildHealth};
use crate::engine::object::{self, ObjectKey};
use crate::engine::plan::LiveObject;

use super::status::Compared;

/// How long a reconcile waits for freshly started watches to list.
const SYNC_WAIT: Duration = Duration::from_secs(3);

/// The live objects relevant to one Application.
#[derive(Clone, Debug, Default)]
pub struct LiveView {
    /// Objects labelled with this Application's instance id.
    pub own: Vec<Arc<Value>>,
    /// Objects living at a desired key but labelled for another Application.
    pub others: Vec<Arc<Value>>,
    /// Every kind looked at has listed completely.
    pub complete: bool,
    /// `(group, kind)` → namespaced, from discovery.
    pub scopes: HashMap<(String, String), bool>,
}

impl LiveView {
    /// This view with `applied` (objects as the server returned them after this reconcile's applies)
    /// in place of what the cache held at their keys: the state right after a sync, before the watch
    /// reports it.
    pub fn with_applied(&self, applied: &[Value]) -> LiveView {
        let mut view = self.clone();
        // One key per object, looked up by hash: a large sync applies thousands of objects.
        let mut slots: HashMap<ObjectKey, usize> = view
            .own
            .iter()
            .enumerate()
            .map(|(i, o)| (ObjectKey::of(o), i))
            .collect();
        let mut taken = std::collections::HashSet::new();
        for obj in applied {
            let key = ObjectKey::of(obj);
            let fresh = Arc::new(crate::cluster::live::prune(obj.clone()));
            match slots.get(&key) {
                Some(&i) => view.own[i] = fresh,
                None => {
                    slots.insert(key.clone(), view.own.len());
                    view.own.push(fresh);
                }
            }
            taken.insert(key);
        }
        view.others.retain(|o| !taken.contains(&ObjectKey::of(o)));
        view
    }

    /// Whether `(group, kind)` is namespaced (`None` when the cluster does not know it yet).
    pub fn namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.scopes.get(&(group.to_string(), kind.to_string())).copied()
    }
}

/// `group/version/kind` of an object.
pub fn gvk_of(obj: &Value) -> Option<GroupVersionKind> {
    let (group, version) = object::group_version(obj);
    let kind = object::kind(obj);
    (!version.is_empty() && !kind.is_empty()).then(|| GroupVersionKind::gvk(&group, &version, kind))
}

/// The kinds an Application looks at: every desired kind and every kind it managed before (its
/// previous `status.resources`), so objects that left Git are still seen (and can be pruned).
pub fn kinds_to_watch(desired: &[Value], previous: &[ResourceStatus]) -> Vec<GroupVersionKind> {
    let mut kinds: BTreeSet<(String, String, String)> = BTreeSet::new();
    for obj in desired {
        if let Some(g) = gvk_of(obj) {
            kinds.insert((g.group, g.version, g.kind));
        }
    }
    for r in previous {
        let (group, version) = (
            r.group.clone().unwrap_or_default(),
            r.version.clone().unwrap_or_default(),
        );
        if !version.is_empty() {
            kinds.insert((group, version, r.kind.clone()));
        }
    }
    kinds
        .into_iter()
        .map(|(g, v, k)| GroupVersionKind::gvk(&g, &v, &k))
        .collect()
}

/// [`observe`] for `app`: its instance's objects, in the kinds of `desired` and of the resources its
/// status last listed (so objects that left Git are still seen, to prune or delete).
pub async fn observe_app(
    cluster: &ClusterHandle,
    app: &Application,
    desired: &[Value],
    dest_namespace: &str,
) -> LiveView {
    let instance = crate::cluster::app_instance_id(&app.namespace().unwrap_or_default(), &app.name_any());
    let previous = app.status.as_ref().map(|s| s.resources.as_slice()).unwrap_or_default();
    let kinds = kinds_to_watch(desired, previous);
    observe(cluster, &instance, &kinds, desired, dest_namespace).await
}

/// Watches `kinds` on `cluster` (starting watches as needed), waits briefly for them to list, and
/// returns the live objects of `instance` plus whatever lives at a desired key. Kinds the cluster does
/// not serve are skipped (nothing of them can exist); other watch failures make the view incomplete.
pub async fn observe(
    cluster: &ClusterHandle,
    instance: &str,
    kinds: &[GroupVersionKind],
    desired: &[Value],
    dest_namespace: &str,
) -> LiveView {
    let live = cluster.live();
    let mut watched = Vec::new();
    let mut complete = true;
    let mut scopes = HashMap::new();
    for gvk in kinds {
        match cluster.discovery().resolve(gvk).await {
            Ok(kind) => {
                scopes.insert((gvk.group.clone(), gvk.kind.clone()), kind.namespaced);
            }
            Err(ClusterError::UnknownKind(_)) => continue,
            Err(_) => complete = false,
        }
        match live.ensure_watched(gvk).await {
            Ok(()) => watched.push(gvk.clone()),
            Err(ClusterError::UnknownKind(_)) => {}
            Err(e) => {
                tracing::debug!(instance, error = %e, "cannot watch kind");
                complete = false;
            }
        }
    }
    if !live.is_synced(&watched) && !live.wait_synced(&watched, SYNC_WAIT).await {
        complete = false;
    }
    let own = live.objects_for(instance);
    let own_keys: BTreeSet<ObjectKey> = own.iter().map(|o| ObjectKey::of(o)).collect();
    let mut others = Vec::new();
    for obj in desired {
        let Some(gvk) = gvk_of(obj) else { continue };
        let mut key = ObjectKey::of(obj);
        if key.namespace.is_empty() && scopes.get(&(gvk.group.clone(), gvk.kind.clone())) == Some(&true) {
            key.namespace = dest_namespace.to_string();
        }
        if own_keys.contains(&key) {
            continue;
        }
        if let Some(found) = live.get(&gvk, &key) {
            others.push(found);
        }
    }
    LiveView {
        own,
        others,
        complete,
        scopes,
    }
}

/// A desired object as it will be applied: namespace filled in for namespaced kinds without one (the
/// destination namespace), dropped for cluster-scoped kinds.
pub fn with_namespace(obj: &Value, view: &LiveView, dest_namespace: &str) -> Value {
    let mut out = obj.clone();
    let (group, _) = object::group_version(obj);
    let namespaced = view.namespaced(&group, object::kind(obj));
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        match namespaced {
            Some(true) if object::namespace(obj).is_empty() && !dest_namespace.is_empty() => {
                meta.insert("namespace".into(), Value::String(dest_namespace.to_string()));
            }
            Some(false) => {
                meta.remove("namespace");
            }
            _ => {}
        }
    }
    out
}

/// The comparison and, per desired key, whether live equals desired (for `ApplyOutOfSyncOnly`).
#[derive(Clone, Debug, Default)]
pub struct Comparison {
    /// Status-ready result.
    pub compared: Compared,
    /// Live objects for the planner, with health and diff verdict.
    pub live: Vec<LiveObject>,
}

/// Compares `desired` (namespaces filled in) with the live view for Application `app_ns/app_name`.
pub fn compare(
    app_ns: &str,
    app_name: &str,
    revision: &str,
    desired: &[Value],
    view: &LiveView,
    opts: &DiffOptions,
) -> Comparison {
    let app_key = ObjectKey::new("capstan.dev", "Application", app_ns, app_name);
    let mut live_by_key: BTreeMap<ObjectKey, &Value> = BTreeMap::new();
    for obj in view.others.iter().chain(view.own.iter()) {
        live_by_key.insert(ObjectKey::of(obj), obj.as_ref());
    }
    let mut resources = Vec::new();
    let mut syncs = Vec::new();
    let mut children = Vec::new();
    let mut in_sync: BTreeMap<ObjectKey, bool> = BTreeMap::new();
    let mut seen: BTreeSet<ObjectKey> = BTreeSet::new();
    for d in desired.iter().filter(|d| !object::is_hook(d)) {
        let key = ObjectKey::of(d);
        seen.insert(key.clone());
        let live = live_by_key.get(&key).copied();
        let result = diff(Some(&with_tracking(d, app_ns, app_name)), live, opts);
        let mut sync = ResourceSync::of(Some(d), live, &result);
        if live.is_none() && !view.complete {
            // Not known to be missing: the live cache has not listed everything yet.
            sync.status = sync.status.map(|_| SyncStatusCode::Unknown);
        }
        in_sync.insert(key.clone(), !result.modified);
        children.push(ChildHealth::observe(&app_key, Some(d), live));
        resources.push(resource_status(d, live, sync.status, false, false));
        syncs.push(sync);
    }
    for l in &view.own {
        let key = ObjectKey::of(l);
        if seen.contains(&key) || !object::is_tracked_by(l, app_ns, app_name) {
            continue;
        }
        seen.insert(key);
        if object::is_hook(l) {
            resources.push(resource_status(l, Some(l), None, true, false));
            continue;
        }
        let result = diff(None, Some(l), opts);
        let sync = ResourceSync::of(None, Some(l), &result);
        children.push(ChildHealth::observe(&app_key, None, Some(l)));
        resources.push(resource_status(l, Some(l), sync.status, false, true));
        syncs.push(sync);
    }
    resources.sort_by_key(resource_order);
    let shared = shared_messages(desired, view, app_ns, app_name);
    let live = planner_live(view, &in_sync);
    Comparison {
        compared: Compared {
            revision: revision.to_string(),
            resources,
            sync: app_sync_status(syncs.iter()),
            health: health::aggregate(children),
            source_type: None,
            images: images(desired),
            shared,
        },
        live,
    }
}

fn planner_live(view: &LiveView, in_sync: &BTreeMap<ObjectKey, bool>) -> Vec<LiveObject> {
    view.own
        .iter()
        .chain(view.others.iter())
        .map(|o| {
            let key = ObjectKey::of(o);
            LiveObject {
                object: Arc::clone(o),
                health: health::assess(o),
                in_sync: in_sync.get(&key).copied().unwrap_or(false),
            }
        })
        .collect()
}

/// `desired` with the label and annotation the executor writes, so they are compared too.
pub fn with_tracking(obj: &Value, app_ns: &str, app_name: &str) -> Value {
    let mut out = obj.clone();
    let key = ObjectKey::of(obj);
    let instance = crate::cluster::app_instance_id(app_ns, app_name);
    let tracking = object::tracking_id(app_ns, app_name, &key);
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        let labels = meta
            .entry("labels")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(l) = labels.as_object_mut() {
            l.insert(APP_INSTANCE_LABEL.into(), Value::String(instance));
        }
        let annotations = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Default::default()));
        if let Some(a) = annotations.as_object_mut() {
            a.insert(TRACKING_ID_ANNOTATION.into(), Value::String(tracking));
        }
    }
    out
}

fn resource_status(
    obj: &Value,
    live: Option<&Value>,
    status: Option<SyncStatusCode>,
    hook: bool,
    requires_pruning: bool,
) -> ResourceStatus {
    let (group, version) = object::group_version(obj);
    let ns = object::namespace(obj);
    ResourceStatus {
        group: Some(group).filter(|g| !g.is_empty()),
        version: Some(version),
        kind: object::kind(obj).to_string(),
        namespace: Some(ns.to_string()).filter(|n| !n.is_empty()),
        name: object::name(obj).to_string(),
        status,
        health: live.and_then(health::assess),
        hook,
        requires_pruning,
        sync_wave: Some(object::sync_wave(obj)),
    }
}

fn resource_order(r: &ResourceStatus) -> (String, String, String, String) {
    (
        r.group.clone().unwrap_or_default(),
        r.kind.clone(),
        r.namespace.clone().unwrap_or_default(),
        r.name.clone(),
    )
}

/// `"<key> is part of application <ns>/<name>"` for desired objects tracked by another Application.
fn shared_messages(desired: &[Value], view: &LiveView, app_ns: &str, app_name: &str) -> Vec<String> {
    let me = format!("{app_ns}/{app_name}");
    let wanted: BTreeSet<ObjectKey> = desired.iter().map(ObjectKey::of).collect();
    let mut out: Vec<String> = view
        .others
        .iter()
        .chain(view.own.iter())
        .filter(|o| wanted.contains(&ObjectKey::of(o)))
        .filter_map(|o| {
            let owner = object::tracking_id_of(o)?.split_once(':')?.0.to_string();
            (owner != me).then(|| format!("{} is part of application {owner}", ObjectKey::of(o)))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Container images of the desired objects (pod templates, pods), sorted, deduplicated.
fn images(desired: &[Value]) -> Vec<String> {
    let mut out = BTreeSet::new();
    for obj in desired {
        for spec in ["/spec/template/spec", "/spec", "/spec/jobTemplate/spec/template/spec"] {
            let Some(pod) = obj.pointer(spec) else { continue };
            for list in ["containers", "initContainers"] {
                for c in pod.get(list).and_then(Value::as_array).into_iter().flatten() {
                    if let Some(image) = c.get("image").and_then(Value::as_str) {
                        out.insert(image.to_string());
                    }
                }
            }
        }
    }
    out.into_iter().take(100).collect()
}
