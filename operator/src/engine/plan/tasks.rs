//! The task set of a sync: desired and live objects paired into tasks (gitops-engine `sync.Reconcile` and
//! `syncContext.getSyncTasks`).
//!
//! - Objects marked `Skip` are left out; hooks are split from resources and become one task per sync phase they
//!   name (PreDelete/PostDelete hooks run only on Application deletion, so they make no task).
//! - A hook with only `generateName` gets a deterministic name (Argo CD's scheme), so a restarted operator finds the
//!   instance it already created instead of creating a second one.
//! - Namespaced targets without a namespace get the destination namespace; cluster-scoped targets lose a stray one.
//! - Live objects paired with no target are pruned only when their tracking annotation names this Application and
//!   they are not hooks. Untracked objects and objects of other Applications are never prune candidates.
//! - `CreateNamespace=true` adds a PreSync task for the destination namespace.
//!
//! Pure: no I/O.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use super::options::{AppOptions, ResourceOptions};
use super::order;
use super::{LiveObject, PlanContext, HOOK_FINALIZER};
use crate::api::application::{
    HookType, ManagedNamespaceMetadata, OperationPhase, ResultCode, SyncOperationResource, SyncPhase,
};
use crate::engine::object::{self, HookDeletePolicy, ObjectKey};

/// One unit of a sync: apply a target (with its live counterpart, if any), run a hook, or prune a live object.
#[derive(Clone, Debug)]
pub struct SyncTask<'a> {
    /// The sync phase the task runs in (a hook's phase; `Sync` for resources and prunes).
    pub phase: SyncPhase,
    /// The effective wave: annotation, then bubbling, prune mirroring and `PruneLast`.
    pub wave: i64,
    /// The object to apply (namespace and name filled in); `None` for a prune task.
    pub target: Option<Value>,
    /// The live object and what the caller observed about it.
    pub live: Option<&'a LiveObject>,
    /// Identity (of the target, else of the live object).
    pub key: ObjectKey,
    /// API version of the target (else of the live object).
    pub version: String,
    /// Whether the task is a hook.
    pub hook: bool,
    /// Hook delete policies (empty for resources).
    pub delete_policies: Vec<HookDeletePolicy>,
    /// Sync options of this resource (app-level merged with the annotation).
    pub options: ResourceOptions,
    /// Skip the dry run when the kind or namespace does not exist yet (CRD or namespace created by this sync,
    /// or `SkipDryRunOnMissingResource`).
    pub skip_dry_run_if_missing: bool,
    /// Write the tracking annotation when applying (false for the namespace created by `CreateNamespace`).
    pub track: bool,
    /// Result code recorded so far.
    pub status: Option<ResultCode>,
    /// Operation phase recorded so far (`None` = pending).
    pub op_phase: Option<OperationPhase>,
    /// Message recorded so far.
    pub message: Option<String>,
}

impl<'a> SyncTask<'a> {
    /// A prune task: a live object with no target.
    pub fn is_prune(&self) -> bool {
        self.target.is_none()
    }

    /// The target, else the live object (`syncTask.obj()`).
    pub fn obj(&self) -> &Value {
        match (&self.target, self.live) {
            (Some(t), _) => t,
            (None, Some(l)) => &l.object,
            (None, None) => &Value::Null,
        }
    }

    /// The live object, if any.
    pub fn live_obj(&self) -> Option<&'a Value> {
        self.live.map(|l| &*l.object)
    }

    /// Not started (`operationState == ""`).
    pub fn pending(&self) -> bool {
        self.op_phase.is_none()
    }

    /// Running (applied and waiting for health or completion).
    pub fn running(&self) -> bool {
        matches!(
            self.op_phase,
            Some(OperationPhase::Running | OperationPhase::Terminating)
        )
    }

    /// Finished, successfully or not.
    pub fn completed(&self) -> bool {
        matches!(
            self.op_phase,
            Some(OperationPhase::Succeeded | OperationPhase::Failed | OperationPhase::Error)
        )
    }

    /// Finished successfully.
    pub fn successful(&self) -> bool {
        self.op_phase == Some(OperationPhase::Succeeded)
    }

    /// The hook type of a hook task (its phase), `None` for resources.
    pub fn hook_type(&self) -> Option<HookType> {
        self.hook.then(|| hook_type_of(self.phase))
    }

    fn has_policy(&self, policy: HookDeletePolicy) -> bool {
        self.hook && self.delete_policies.contains(&policy)
    }

    /// `deleteBeforeCreation`: a pending hook whose previous instance is live and whose policy is
    /// BeforeHookCreation.
    pub fn delete_before_creation(&self) -> bool {
        self.live.is_some() && self.pending() && self.has_policy(HookDeletePolicy::BeforeHookCreation)
    }

    /// `deleteOnPhaseSuccessful`.
    pub fn delete_on_success(&self) -> bool {
        self.live.is_some() && self.has_policy(HookDeletePolicy::HookSucceeded)
    }

    /// `deleteOnPhaseFailed`.
    pub fn delete_on_failure(&self) -> bool {
        self.live.is_some() && self.has_policy(HookDeletePolicy::HookFailed)
    }

    /// The key results are stored under: resource key and sync phase (`resourceResultKey`).
    pub fn result_key(&self) -> String {
        result_key(&self.key, self.phase)
    }

    #[cfg(test)]
    pub(crate) fn for_test(target: Value, phase: SyncPhase) -> SyncTask<'static> {
        SyncTask {
            phase,
            wave: object::sync_wave(&target),
            key: ObjectKey::of(&target),
            version: object::group_version(&target).1,
            hook: phase != SyncPhase::Sync,
            delete_policies: Vec::new(),
            options: ResourceOptions::default().for_object(&target),
            target: Some(target),
            live: None,
            skip_dry_run_if_missing: false,
            track: true,
            status: None,
            op_phase: None,
            message: None,
        }
    }

    #[cfg(test)]
    pub(crate) fn prune_for_test(live: Value) -> SyncTask<'static> {
        let leaked: &'static LiveObject = Box::leak(Box::new(LiveObject::new(live)));
        let mut t = SyncTask::for_test((*leaked.object).clone(), SyncPhase::Sync);
        t.hook = false;
        t.target = None;
        t.live = Some(leaked);
        t
    }
}

/// `<group>/<kind>:<namespace>/<name>:<phase>`.
pub fn result_key(key: &ObjectKey, phase: SyncPhase) -> String {
    format!("{key}:{phase:?}")
}

/// The hook type matching a sync phase.
pub fn hook_type_of(phase: SyncPhase) -> HookType {
    match phase {
        SyncPhase::PreSync => HookType::PreSync,
        SyncPhase::Sync => HookType::Sync,
        SyncPhase::PostSync => HookType::PostSync,
        SyncPhase::SyncFail => HookType::SyncFail,
    }
}

/// The sync phases a hook runs in (`syncPhases`): PreDelete, PostDelete and Skip make none.
fn sync_phases(hooks: &[HookType]) -> Vec<SyncPhase> {
    hooks
        .iter()
        .filter_map(|h| match h {
            HookType::PreSync => Some(SyncPhase::PreSync),
            HookType::Sync => Some(SyncPhase::Sync),
            HookType::PostSync => Some(SyncPhase::PostSync),
            HookType::SyncFail => Some(SyncPhase::SyncFail),
            _ => None,
        })
        .collect()
}

/// Tells whether a kind is namespaced. `None` when the cluster does not know the kind (yet).
pub trait ScopeLookup {
    /// `Some(true)` for namespaced kinds, `Some(false)` for cluster-scoped ones, `None` when unknown.
    fn is_namespaced(&self, group: &str, kind: &str) -> Option<bool>;
}

impl<F: Fn(&str, &str) -> Option<bool>> ScopeLookup for F {
    fn is_namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self(group, kind)
    }
}

/// Everything the task set is built from.
pub struct TaskSetInput<'a> {
    /// Application, destination, revision, scope lookup.
    pub ctx: &'a PlanContext<'a>,
    /// Rendered objects, hooks included.
    pub desired: &'a [Value],
    /// Live objects: every object tracked by this Application plus whatever lives at a desired key.
    pub live: &'a [LiveObject],
    /// Merged app-level options.
    pub options: &'a AppOptions,
    /// Leave hooks out (selective sync, apply strategy).
    pub skip_hooks: bool,
    /// Selective sync: only these resources (empty = all).
    pub selected: &'a [SyncOperationResource],
    /// Unix seconds of the operation start (part of generated hook names).
    pub started_unix: i64,
    /// Labels and annotations for the namespace created by `CreateNamespace=true`.
    pub managed_namespace_metadata: Option<&'a ManagedNamespaceMetadata>,
    /// The live destination namespace, when `CreateNamespace=true` (`None` = it does not exist).
    pub namespace_live: Option<&'a LiveObject>,
}

/// A desired object whose live counterpart is tracked by another Application (`SharedResourceWarning`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedResource {
    /// The resource.
    pub key: ObjectKey,
    /// `<namespace>/<name>` of the Application whose tracking annotation the live object carries.
    pub application: String,
}

/// The task set, unsorted, plus what the caller reports about it.
#[derive(Debug, Default)]
pub struct TaskSet<'a> {
    /// Every task.
    pub tasks: Vec<SyncTask<'a>>,
    /// Desired objects whose live counterpart belongs to another Application.
    pub shared: Vec<SharedResource>,
    /// Number of desired (non-hook, non-skipped) objects.
    pub targets: usize,
}

/// Why a task set cannot be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidObject(pub String);

/// Build the task set (`Reconcile` + `getSyncTasks`), unsorted. Call [`order::arrange`] afterwards.
pub fn build_tasks<'a>(input: &TaskSetInput<'a>) -> Result<TaskSet<'a>, InvalidObject> {
    let ctx = input.ctx;
    let scopes = ScopeResolver::new(ctx, input.desired);
    let live_index = index_live(input.live);
    let mut claimed: BTreeSet<ObjectKey> = BTreeSet::new();
    let mut set = TaskSet::default();

    for obj in input.desired {
        validate(obj)?;
        let skipped = object::is_skipped(obj);
        if object::is_hook(obj) && !skipped {
            continue;
        }
        let target = scopes.enrich(obj);
        let (key, live) = find_live(&live_index, &scopes, &target);
        if let Some(k) = &key {
            claimed.insert(k.clone());
        }
        if skipped {
            continue;
        }
        set.targets += 1;
        if !selected(input.selected, &ObjectKey::of(&target)) {
            continue;
        }
        if let Some(owner) = live.and_then(|l| other_owner(ctx, &l.object)) {
            set.shared.push(SharedResource {
                key: ObjectKey::of(&target),
                application: owner,
            });
        }
        if live.is_some_and(|l| object::is_hook(&l.object)) {
            continue;
        }
        set.tasks.push(resource_task(input, Some(target), live));
    }

    for live in input.live {
        let key = ObjectKey::of(&live.object);
        if claimed.contains(&key) || !is_prune_candidate(ctx, &live.object) || !selected(input.selected, &key) {
            continue;
        }
        set.tasks.push(resource_task(input, None, Some(live)));
    }

    if !input.skip_hooks {
        for obj in input.desired.iter().filter(|o| object::is_hook(o)) {
            set.tasks.extend(hook_tasks(input, &scopes, &live_index, obj));
        }
    }

    if let Some(ns) = namespace_task(input) {
        set.tasks.push(ns);
    }
    mark_skip_dry_run(&mut set.tasks, input);
    Ok(set)
}

/// The shared resources alone, for the `SharedResourceWarning` condition.
pub fn shared_resources(input: &TaskSetInput<'_>) -> Vec<SharedResource> {
    build_tasks(input).map(|s| s.shared).unwrap_or_default()
}

fn validate(obj: &Value) -> Result<(), InvalidObject> {
    let named = !object::name(obj).is_empty() || (object::is_hook(obj) && object::generate_name(obj).is_some());
    if object::kind(obj).is_empty() || obj.get("apiVersion").and_then(Value::as_str).is_none() || !named {
        let key = ObjectKey::of(obj);
        return Err(InvalidObject(format!("object {key} has no apiVersion, kind or name")));
    }
    Ok(())
}

fn index_live(live: &[LiveObject]) -> BTreeMap<ObjectKey, &LiveObject> {
    live.iter().map(|l| (ObjectKey::of(&l.object), l)).collect()
}

/// Live object at the target's key. When the scope is unknown both the namespaced and the cluster-scoped key are
/// tried (Argo CD: "we risk missing the object and deleting it").
fn find_live<'a>(
    index: &BTreeMap<ObjectKey, &'a LiveObject>,
    scopes: &ScopeResolver<'_>,
    target: &Value,
) -> (Option<ObjectKey>, Option<&'a LiveObject>) {
    let key = ObjectKey::of(target);
    let mut candidates = vec![key.clone()];
    if scopes.namespaced(target).is_none() {
        candidates.push(ObjectKey {
            namespace: String::new(),
            ..key.clone()
        });
    }
    for k in candidates {
        if let Some(l) = index.get(&k) {
            return (Some(k), Some(*l));
        }
    }
    (Some(key), None)
}

fn selected(list: &[SyncOperationResource], key: &ObjectKey) -> bool {
    let matches = |want: &str, have: &str| want == "*" || want == have;
    list.is_empty()
        || list.iter().any(|r| {
            matches(r.group.as_deref().unwrap_or_default(), &key.group)
                && matches(&r.kind, &key.kind)
                && matches(r.namespace.as_deref().unwrap_or_default(), &key.namespace)
                && matches(&r.name, &key.name)
        })
}

/// `<namespace>/<name>` of the Application named by a tracking id.
fn tracking_app(tracking_id: &str) -> &str {
    tracking_id.split_once(':').map(|(app, _)| app).unwrap_or(tracking_id)
}

/// The other Application a live object is tracked by, if it is not this one.
fn other_owner(ctx: &PlanContext<'_>, live: &Value) -> Option<String> {
    let app = tracking_app(object::tracking_id_of(live)?);
    (app != format!("{}/{}", ctx.app_namespace, ctx.app_name)).then(|| app.to_string())
}

/// Only objects whose tracking annotation names this Application (and this very object) are pruned; hooks never.
fn is_prune_candidate(ctx: &PlanContext<'_>, live: &Value) -> bool {
    object::is_tracked_by(live, ctx.app_namespace, ctx.app_name) && !object::is_hook(live) && !object::is_skipped(live)
}

fn resource_task<'a>(input: &TaskSetInput<'a>, target: Option<Value>, live: Option<&'a LiveObject>) -> SyncTask<'a> {
    let obj = target.as_ref().or(live.map(|l| &*l.object)).unwrap_or(&Value::Null);
    let options = input.options.resource.for_object(obj);
    SyncTask {
        phase: SyncPhase::Sync,
        wave: object::sync_wave(obj),
        key: ObjectKey::of(obj),
        version: object::group_version(obj).1,
        hook: false,
        delete_policies: Vec::new(),
        options,
        skip_dry_run_if_missing: false,
        track: true,
        target,
        live,
        status: None,
        op_phase: None,
        message: None,
    }
}

/// One task per sync phase of the hook, with its name generated when it has only `generateName`.
fn hook_tasks<'a>(
    input: &TaskSetInput<'a>,
    scopes: &ScopeResolver<'_>,
    live: &BTreeMap<ObjectKey, &'a LiveObject>,
    obj: &Value,
) -> Vec<SyncTask<'a>> {
    let policies = object::hook_delete_policies(obj);
    let options = input.options.resource.for_object(obj);
    sync_phases(&object::hook_types(obj))
        .into_iter()
        .map(|phase| {
            let mut target = scopes.enrich(obj);
            if object::name(&target).is_empty() {
                let name = hook_name(object::generate_name(obj).unwrap_or_default(), input, phase);
                set_meta(&mut target, "name", Value::String(name));
            }
            add_finalizer(&mut target);
            let (_, live_obj) = find_live(live, scopes, &target);
            SyncTask {
                phase,
                wave: object::sync_wave(obj),
                key: ObjectKey::of(&target),
                version: object::group_version(&target).1,
                hook: true,
                delete_policies: policies.clone(),
                options: options.clone(),
                skip_dry_run_if_missing: false,
                track: true,
                target: Some(target),
                live: live_obj,
                status: None,
                op_phase: None,
                message: None,
            }
        })
        .collect()
}

/// Argo CD's deterministic name for a `generateName` hook: `<generateName><rev[:7]>-<phase>-<start unix>`, lower
/// case. The same operation always yields the same name, so a restart finds the instance it created.
pub fn hook_name(generate_name: &str, input: &TaskSetInput<'_>, phase: SyncPhase) -> String {
    let short = crate::text::short_sha(input.ctx.revision);
    let postfix = format!("{short}-{phase:?}-{}", input.started_unix).to_lowercase();
    format!("{generate_name}{postfix}")
}

fn set_meta(obj: &mut Value, field: &str, value: Value) {
    if !obj.is_object() {
        return;
    }
    let meta = obj
        .as_object_mut()
        .map(|o| o.entry("metadata").or_insert_with(|| Value::Object(Default::default())));
    if let Some(Value::Object(m)) = meta {
        m.insert(field.to_string(), value);
    }
}

fn remove_meta(obj: &mut Value, field: &str) {
    if let Some(Value::Object(m)) = obj.get_mut("metadata") {
        m.remove(field);
    }
}

/// Hooks carry the hook finalizer so that a completed hook (a Pod, a Job with a TTL) is not garbage-collected
/// before its result is read; it is removed once the hook completed.
fn add_finalizer(obj: &mut Value) {
    let mut finalizers: Vec<Value> = obj
        .pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if !finalizers.iter().any(|f| f.as_str() == Some(HOOK_FINALIZER)) {
        finalizers.push(Value::String(HOOK_FINALIZER.to_string()));
    }
    set_meta(obj, "finalizers", Value::Array(finalizers));
}

/// Whether a live object carries the hook finalizer.
pub fn has_hook_finalizer(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| f.iter().any(|v| v.as_str() == Some(HOOK_FINALIZER)))
}

/// `autoCreateNamespace`: a PreSync task creating the destination namespace unless a desired Namespace of that name
/// exists; when it is already live, only when `managedNamespaceMetadata` is not yet on it.
fn namespace_task<'a>(input: &TaskSetInput<'a>) -> Option<SyncTask<'a>> {
    let ns = input.ctx.destination_namespace;
    if !input.options.create_namespace || ns.is_empty() {
        return None;
    }
    let declared = input
        .desired
        .iter()
        .any(|o| object::kind(o) == "Namespace" && object::group_version(o).0.is_empty() && object::name(o) == ns);
    if declared {
        return None;
    }
    let target = managed_namespace(ns, input.managed_namespace_metadata);
    if let Some(live) = input.namespace_live {
        if !metadata_missing(&target, &live.object) {
            return None;
        }
    }
    let mut task = resource_task(input, Some(target), input.namespace_live);
    task.phase = SyncPhase::PreSync;
    task.wave = 0;
    task.track = false;
    Some(task)
}

fn managed_namespace(ns: &str, meta: Option<&ManagedNamespaceMetadata>) -> Value {
    let mut obj = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
    if let Some(m) = meta {
        if !m.labels.is_empty() {
            set_meta(&mut obj, "labels", serde_json::to_value(&m.labels).unwrap_or_default());
        }
        if !m.annotations.is_empty() {
            set_meta(
                &mut obj,
                "annotations",
                serde_json::to_value(&m.annotations).unwrap_or_default(),
            );
        }
    }
    obj
}

fn metadata_missing(target: &Value, live: &Value) -> bool {
    ["labels", "annotations"].iter().any(|field| {
        let want = target.pointer(&format!("/metadata/{field}")).and_then(Value::as_object);
        let have = live.pointer(&format!("/metadata/{field}")).and_then(Value::as_object);
        want.is_some_and(|w| w.iter().any(|(k, v)| have.and_then(|h| h.get(k)) != Some(v)))
    })
}

/// The dry run is skipped, when the kind is missing, for custom resources whose CRD is in this sync and for
/// `SkipDryRunOnMissingResource`; and, when the namespace is missing, for objects in the namespace created by this
/// sync (Argo CD validates client-side, which never looks the namespace up).
fn mark_skip_dry_run(tasks: &mut [SyncTask<'_>], input: &TaskSetInput<'_>) {
    let crds: BTreeSet<String> = input.desired.iter().filter_map(order::crd_group_kind).collect();
    let namespaces: BTreeSet<String> = tasks
        .iter()
        .filter(|t| t.key.kind == "Namespace" && t.key.group.is_empty() && t.live.is_none() && !t.is_prune())
        .map(|t| t.key.name.clone())
        .collect();
    for t in tasks.iter_mut() {
        let gk = format!("{}/{}", t.key.group, t.key.kind);
        t.skip_dry_run_if_missing = t.options.skip_dry_run_on_missing_resource
            || input.options.skip_dry_run_on_missing_resource
            || crds.contains(&gk)
            || namespaces.contains(&t.key.namespace);
    }
}

/// Resolves the scope of kinds: the caller's lookup, else the scope of a CRD in the desired set.
struct ScopeResolver<'a> {
    ctx: &'a PlanContext<'a>,
    crd_scopes: BTreeMap<String, bool>,
}

impl<'a> ScopeResolver<'a> {
    fn new(ctx: &'a PlanContext<'a>, desired: &[Value]) -> Self {
        let crd_scopes = desired
            .iter()
            .filter_map(|o| {
                let gk = order::crd_group_kind(o)?;
                let scope = o.pointer("/spec/scope").and_then(Value::as_str)?;
                Some((gk, scope == "Namespaced"))
            })
            .collect();
        ScopeResolver { ctx, crd_scopes }
    }

    fn namespaced(&self, obj: &Value) -> Option<bool> {
        let (group, _) = object::group_version(obj);
        let kind = object::kind(obj);
        self.ctx
            .scope
            .is_namespaced(&group, kind)
            .or_else(|| self.crd_scopes.get(&format!("{group}/{kind}")).copied())
    }

    /// Namespaced (or unknown-scope) targets without a namespace get the destination namespace; cluster-scoped
    /// targets lose a namespace they should not have.
    fn enrich(&self, obj: &Value) -> Value {
        let mut target = obj.clone();
        match self.namespaced(obj) {
            Some(false) => remove_meta(&mut target, "namespace"),
            _ if object::namespace(obj).is_empty() && !self.ctx.destination_namespace.is_empty() => set_meta(
                &mut target,
                "namespace",
                Value::String(self.ctx.destination_namespace.to_string()),
            ),
            _ => {}
        }
        target
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    pub(crate) fn scope(group: &str, kind: &str) -> Option<bool> {
        match (group, kind) {
            ("", "Namespace") | ("rbac.authorization.k8s.io", "ClusterRole") => Some(false),
            ("apiextensions.k8s.io", _) => Some(false),
            ("example.com", _) => None,
            _ => Some(true),
        }
    }

    fn ctx() -> PlanContext<'static> {
        PlanContext {
            app_namespace: "capstan",
            app_name: "shop",
            operator_namespace: "capstan-system",
            destination_namespace: "shop",
            revision: "0123456789abcdef",
            scope: &scope,
        }
    }

    fn tracked(mut obj: Value, app: &str) -> LiveObject {
        let key = ObjectKey::of(&obj);
        obj["metadata"]["annotations"] = json!({"capstan.dev/tracking-id": format!("{app}:{key}")});
        LiveObject::new(obj)
    }

    fn input<'a>(
        ctx: &'a PlanContext<'a>,
        desired: &'a [Value],
        live: &'a [LiveObject],
        options: &'a AppOptions,
    ) -> TaskSetInput<'a> {
        TaskSetInput {
            ctx,
            desired,
            live,
            options,
            skip_hooks: false,
            selected: &[],
            started_unix: 1_700_000_000,
            managed_namespace_metadata: None,
            namespace_live: None,
        }
    }

    fn keys(set: &TaskSet<'_>) -> Vec<String> {
        let mut v: Vec<String> = set
            .tasks
            .iter()
            .map(|t| format!("{}{}", if t.is_prune() { "prune " } else { "" }, t.result_key()))
            .collect();
        v.sort();
        v
    }

    #[test]
    fn pairs_targets_hooks_and_prune_candidates() {
        let ctx = ctx();
        let desired = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "reader", "namespace": "stray"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "migrate-",
                "annotations": {"argocd.argoproj.io/hook": "PreSync,PostSync"}}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "cleanup",
                "annotations": {"argocd.argoproj.io/hook": "PreDelete"}}}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "skipped",
                "annotations": {"argocd.argoproj.io/hook": "Skip"}}}),
        ];
        let live = vec![
            tracked(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"}}),
                "capstan/shop",
            ),
            tracked(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "old", "namespace": "shop"}}),
                "capstan/shop",
            ),
            tracked(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "theirs", "namespace": "shop"}}),
                "capstan/other",
            ),
            LiveObject::new(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "untracked", "namespace": "shop"}}),
            ),
            tracked(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "skipped", "namespace": "shop"}}),
                "capstan/shop",
            ),
            tracked(
                json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "old-hook", "namespace": "shop",
                "annotations": {"argocd.argoproj.io/hook": "PreSync"}}}),
                "capstan/shop",
            ),
        ];
        // The hook annotation must survive `tracked` for the live hook.
        let mut live = live;
        std::sync::Arc::make_mut(&mut live[5].object)["metadata"]["annotations"]["argocd.argoproj.io/hook"] =
            json!("PreSync");
        let opts = AppOptions::default();
        let set = build_tasks(&input(&ctx, &desired, &live, &opts)).expect("valid");
        assert_eq!(
            keys(&set),
            [
                "/ConfigMap:shop/cfg:Sync",
                "batch/Job:shop/migrate-0123456-postsync-1700000000:PostSync",
                "batch/Job:shop/migrate-0123456-presync-1700000000:PreSync",
                "prune /ConfigMap:shop/old:Sync",
                "rbac.authorization.k8s.io/ClusterRole:/reader:Sync",
            ]
        );
        let cfg = set.tasks.iter().find(|t| t.key.name == "cfg").expect("cfg");
        assert!(cfg.live.is_some());
        let hook = set.tasks.iter().find(|t| t.phase == SyncPhase::PreSync).expect("hook");
        assert!(has_hook_finalizer(hook.target.as_ref().expect("target")));
        assert_eq!(hook.delete_policies, vec![HookDeletePolicy::BeforeHookCreation]);
        assert!(set.shared.is_empty());
    }

    #[test]
    fn generated_hook_names_are_stable() {
        let ctx = ctx();
        let desired = vec![
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"generateName": "smoke-",
            "annotations": {"helm.sh/hook": "post-install"}}}),
        ];
        let opts = AppOptions::default();
        let a = build_tasks(&input(&ctx, &desired, &[], &opts)).expect("valid");
        let b = build_tasks(&input(&ctx, &desired, &[], &opts)).expect("valid");
        assert_eq!(a.tasks[0].key.name, "smoke-0123456-postsync-1700000000");
        assert_eq!(a.tasks[0].key, b.tasks[0].key);
        let mut later = input(&ctx, &desired, &[], &opts);
        later.started_unix += 60;
        assert_ne!(build_tasks(&later).expect("valid").tasks[0].key, a.tasks[0].key);
    }

    #[test]
    fn shared_resources_and_selective_sync() {
        let ctx = ctx();
        let desired = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}),
            json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "h",
                "annotations": {"argocd.argoproj.io/hook": "PreSync"}}}),
        ];
        let live = vec![tracked(
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "shop"}}),
            "team/billing",
        )];
        let opts = AppOptions::default();
        let i = input(&ctx, &desired, &live, &opts);
        assert_eq!(
            shared_resources(&i),
            vec![SharedResource {
                key: ObjectKey::new("", "ConfigMap", "shop", "a"),
                application: "team/billing".into()
            }]
        );
        let pick = [SyncOperationResource {
            group: None,
            kind: "ConfigMap".into(),
            name: "b".into(),
            namespace: Some("shop".into()),
        }];
        let mut sel = input(&ctx, &desired, &live, &opts);
        sel.selected = &pick;
        sel.skip_hooks = true;
        assert_eq!(keys(&build_tasks(&sel).expect("valid")), ["/ConfigMap:shop/b:Sync"]);
    }

    #[test]
    fn unknown_scope_uses_the_crd_in_the_sync() {
        let ctx = ctx();
        let desired = vec![
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "gizmos.example.com"},
                "spec": {"group": "example.com", "scope": "Cluster", "names": {"kind": "Gizmo"}}}),
            json!({"apiVersion": "example.com/v1", "kind": "Gizmo", "metadata": {"name": "g", "namespace": "x"}}),
            json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}),
        ];
        let opts = AppOptions::default();
        let set = build_tasks(&input(&ctx, &desired, &[], &opts)).expect("valid");
        assert_eq!(
            keys(&set),
            [
                "apiextensions.k8s.io/CustomResourceDefinition:/gizmos.example.com:Sync",
                "example.com/Gizmo:/g:Sync",
                "example.com/Widget:shop/w:Sync",
            ]
        );
        assert!(set
            .tasks
            .iter()
            .filter(|t| t.key.group == "example.com")
            .all(|t| t.skip_dry_run_if_missing == (t.key.kind == "Gizmo")));
    }

    #[test]
    fn create_namespace_task() {
        let ctx = ctx();
        let desired = vec![json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}})];
        let opts = AppOptions::parse([["CreateNamespace=true".to_string()].as_slice()]);
        let set = build_tasks(&input(&ctx, &desired, &[], &opts)).expect("valid");
        let ns = set
            .tasks
            .iter()
            .find(|t| t.key.kind == "Namespace")
            .expect("namespace task");
        assert_eq!(ns.phase, SyncPhase::PreSync);
        assert!(!ns.track);
        assert!(set
            .tasks
            .iter()
            .find(|t| t.key.name == "a")
            .is_some_and(|t| t.skip_dry_run_if_missing));
        let live_ns = LiveObject::new(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shop"}}));
        let mut exists = input(&ctx, &desired, &[], &opts);
        exists.namespace_live = Some(&live_ns);
        assert!(build_tasks(&exists)
            .expect("valid")
            .tasks
            .iter()
            .all(|t| t.key.kind != "Namespace"));
    }

    #[test]
    fn invalid_objects_are_reported_not_panicked_on() {
        let ctx = ctx();
        let opts = AppOptions::default();
        for bad in [
            json!(null),
            json!("x"),
            json!({"kind": "ConfigMap"}),
            json!({"apiVersion": "v1", "kind": "X"}),
        ] {
            let desired = vec![bad];
            assert!(build_tasks(&input(&ctx, &desired, &[], &opts)).is_err());
        }
    }
}
