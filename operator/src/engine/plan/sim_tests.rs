//! Simulated syncs: [`next_step`] and [`record_outcome`] driven in a loop against a tiny in-memory cluster, as the
//! controller drives them, including restarts at every possible point.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};

use super::step::MISSING_GRACE;
use super::*;
use crate::api::application::{
    HealthStatusCode, Operation, OperationPhase, OperationState, ResourceHealth, ResourceStatus, ResultCode,
    SyncOperation, SyncOperationResource, SyncPhase, SyncPolicy, SyncPolicyAutomated,
};
use crate::engine::object::{self, ObjectKey};

const APP_NS: &str = "capstan";
const APP: &str = "shop";
const REV: &str = "a1b2c3d4e5f6a7b8";

fn scope(group: &str, kind: &str) -> Option<bool> {
    match (group, kind) {
        ("", "Namespace") | ("apiextensions.k8s.io", "CustomResourceDefinition") => Some(false),
        ("example.com", _) => None,
        _ => Some(true),
    }
}

fn tracking(obj: &Value, app: &str) -> String {
    format!("{app}:{}", ObjectKey::of(obj))
}

fn with_annotations(mut obj: Value, annotations: &[(&str, &str)]) -> Value {
    for (k, v) in annotations {
        obj["metadata"]["annotations"][*k] = json!(v);
    }
    obj
}

fn cm(name: &str, wave: i64) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name,
        "annotations": {"argocd.argoproj.io/sync-wave": wave.to_string()}}, "data": {"k": "v"}})
}

fn deployment(name: &str, wave: i64, ready_after: u32, result: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "annotations": {
        "argocd.argoproj.io/sync-wave": wave.to_string(), "test/ready-after": ready_after.to_string(),
        "test/result": result}}})
}

fn job_hook(name: &str, hook: &str, ready_after: u32, result: &str) -> Value {
    let mut meta = json!({"annotations": {"argocd.argoproj.io/hook": hook,
        "test/ready-after": ready_after.to_string(), "test/result": result}});
    match name.strip_suffix('-') {
        Some(_) => meta["generateName"] = json!(name),
        None => meta["name"] = json!(name),
    }
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": meta})
}

// ---------------------------------------------------------------------------------------------
// The fake cluster

#[derive(Clone, Debug)]
struct FakeObj {
    obj: Value,
    age: u32,
}

/// Objects keyed by identity; workloads (Deployment, Job) turn Healthy (or `test/result`) `test/ready-after`
/// ticks after their last apply; pruned objects terminate for one tick.
#[derive(Clone, Debug, Default)]
struct FakeCluster {
    objects: BTreeMap<ObjectKey, FakeObj>,
    created: BTreeMap<String, u32>,
    log: Vec<String>,
    fail_apply: BTreeSet<String>,
    now_ms: i64,
}

impl FakeCluster {
    fn put(&mut self, obj: Value) {
        self.objects.insert(ObjectKey::of(&obj), FakeObj { obj, age: 100 });
    }

    fn put_tracked(&mut self, mut obj: Value, app: &str) {
        if object::namespace(&obj).is_empty()
            && scope(&object::group_version(&obj).0, object::kind(&obj)) != Some(false)
        {
            obj["metadata"]["namespace"] = json!("shop");
        }
        let id = tracking(&obj, app);
        obj["metadata"]["annotations"]["capstan.dev/tracking-id"] = json!(id);
        self.put(obj);
    }

    fn health(obj: &Value, age: u32) -> Option<ResourceHealth> {
        if !matches!(object::kind(obj), "Deployment" | "Job") {
            return None;
        }
        let ready_after = object::annotation(obj, "test/ready-after")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        let status = if age < ready_after {
            HealthStatusCode::Progressing
        } else if object::annotation(obj, "test/result") == Some("Degraded") {
            HealthStatusCode::Degraded
        } else {
            HealthStatusCode::Healthy
        };
        Some(ResourceHealth {
            status,
            message: Some(format!("{status:?}")),
        })
    }

    fn live(&self) -> Vec<LiveObject> {
        self.objects
            .values()
            .map(|o| LiveObject {
                health: Self::health(&o.obj, o.age),
                in_sync: object::annotation(&o.obj, "test/in-sync") == Some("true"),
                object: o.obj.clone().into(),
            })
            .collect()
    }

    fn namespace(&self, name: &str) -> Option<LiveObject> {
        self.objects
            .get(&ObjectKey::new("", "Namespace", "", name))
            .map(|o| LiveObject::new(o.obj.clone()))
    }

    fn tick(&mut self) {
        self.objects.retain(|_, o| {
            let terminating = o
                .obj
                .pointer("/metadata/deletionTimestamp")
                .is_some_and(|v| !v.is_null());
            o.age < 1 || !terminating
        });
        for o in self.objects.values_mut() {
            o.age += 1;
        }
    }

    fn label(&self, what: &str, key: &ObjectKey) -> String {
        format!("{:>6} {what} {}/{}", self.now_ms, key.kind, key.name)
    }

    fn execute(&mut self, actions: &Actions) -> Outcome {
        let mut out = Outcome::default();
        for r in &actions.remove_finalizers {
            let key = ObjectKey::of(&json!({"apiVersion": r.api_version, "kind": r.kind,
                "metadata": {"name": r.name, "namespace": r.namespace}}));
            if let Some(o) = self.objects.get_mut(&key) {
                if let Some(Value::Object(m)) = o.obj.get_mut("metadata") {
                    m.remove("finalizers");
                }
            }
        }
        for p in &actions.prune {
            let key = key_of(&p.target);
            self.log.push(self.label("prune", &key));
            if let Some(o) = self.objects.get_mut(&key) {
                o.obj["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
                o.age = 0;
            }
            out.pruned.insert(p.id.clone(), Ok("pruned".into()));
        }
        for d in &actions.delete {
            let key = key_of(&d.target);
            self.log.push(self.label(&format!("delete({:?})", d.reason), &key));
            self.objects.remove(&key);
            out.deleted.insert(d.id.clone(), Ok("deleted".into()));
        }
        let mut all_ok = true;
        for a in &actions.apply {
            let key = ObjectKey::of(&a.object);
            if self.fail_apply.contains(&key.name) {
                all_ok = false;
                out.applied
                    .insert(a.id.clone(), Err(format!("admission webhook denied {}", key.name)));
                continue;
            }
            if a.dry_run {
                out.applied
                    .insert(a.id.clone(), Ok(format!("{} configured (dry run)", key.name)));
                continue;
            }
            let mut obj = a.object.clone();
            if a.track {
                obj["metadata"]["annotations"]["capstan.dev/tracking-id"] = json!(tracking(&a.object, "capstan/shop"));
            }
            let verb = if self.objects.contains_key(&key) {
                "configure"
            } else {
                "create"
            };
            if verb == "create" {
                *self.created.entry(format!("{}/{}", key.kind, key.name)).or_default() += 1;
            }
            self.log.push(self.label(verb, &key));
            self.objects.insert(key.clone(), FakeObj { obj, age: 0 });
            out.applied.insert(a.id.clone(), Ok(format!("{} {verb}d", key.name)));
        }
        if all_ok {
            for d in &actions.delete_on_success {
                let key = key_of(&d.target);
                self.log.push(self.label(&format!("delete({:?})", d.reason), &key));
                self.objects.remove(&key);
                out.deleted.insert(d.id.clone(), Ok("deleted".into()));
            }
        }
        out
    }
}

fn key_of(r: &ObjectRef) -> ObjectKey {
    let group = r.api_version.split_once('/').map(|(g, _)| g).unwrap_or_default();
    ObjectKey::new(group, &r.kind, &r.namespace, &r.name)
}

// ---------------------------------------------------------------------------------------------
// The controller loop

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Crash {
    /// Persisted the step's state, died before executing it.
    BeforeExecute,
    /// Executed the step, died before recording its outcome.
    AfterExecute,
}

struct Sync {
    desired: Vec<Value>,
    operation: Operation,
    policy: SyncPolicy,
    cache_complete: bool,
    rendered: bool,
    prune_confirmed: bool,
    crash: Option<(usize, Crash)>,
    /// Someone deletes the object of this name just before step N.
    vandal: Option<(usize, &'static str)>,
}

impl Sync {
    fn new(desired: Vec<Value>) -> Self {
        Sync {
            desired,
            operation: Operation {
                sync: Some(SyncOperation {
                    prune: true,
                    ..SyncOperation::default()
                }),
                ..Operation::default()
            },
            policy: SyncPolicy::default(),
            cache_complete: true,
            rendered: true,
            prune_confirmed: false,
            crash: None,
            vandal: None,
        }
    }

    fn sync_op(&mut self) -> &mut SyncOperation {
        self.operation.sync.get_or_insert_with(SyncOperation::default)
    }
}

struct Run {
    state: OperationState,
    steps: Vec<Step>,
    step_times: Vec<i64>,
}

impl Run {
    fn done(&self) -> (OperationPhase, String, bool) {
        match self.steps.last() {
            Some(Step::Done {
                phase,
                message,
                record_history,
                ..
            }) => (*phase, message.clone(), *record_history),
            other => panic!("not done: {other:?}"),
        }
    }

    fn result(&self, name: &str) -> Option<&crate::api::application::ResourceResult> {
        self.state
            .sync_result
            .as_ref()?
            .resources
            .iter()
            .find(|r| r.name == name)
    }
}

fn drive(cluster: &mut FakeCluster, sync: &Sync) -> Run {
    let mut state: Option<OperationState> = None;
    let mut plan: Option<PlanState> = None;
    let mut steps = Vec::new();
    let mut step_times = Vec::new();
    cluster.now_ms = 1_700_000_000_000;
    for i in 0..200 {
        if let Some((_, name)) = sync.vandal.filter(|(at, _)| *at == i) {
            cluster.objects.retain(|k, _| !k.name.starts_with(name));
        }
        let live = cluster.live();
        let ns_live = cluster.namespace("shop");
        let now = Timestamp::from_millisecond(cluster.now_ms).expect("valid time");
        let input = StepInput {
            namespace_live: ns_live.as_ref(),
            now,
            ..step_input(sync, &live, state.as_ref().zip(plan.as_ref()))
        };
        let out = next_step(&input);
        state = Some(out.state.clone());
        plan = Some(out.plan_state.clone());
        steps.push(out.step.clone());
        step_times.push(cluster.now_ms);
        if let Step::Done { actions, .. } = &out.step {
            cluster.execute(actions);
            return Run {
                state: out.state,
                steps,
                step_times,
            };
        }
        let crash = sync.crash.filter(|(at, _)| *at == i).map(|(_, c)| c);
        if crash != Some(Crash::BeforeExecute) {
            let outcome = cluster.execute(out.step.actions());
            if crash != Some(Crash::AfterExecute) {
                let (st, pl) = record_outcome(&out, &outcome, now);
                state = Some(st);
                plan = Some(pl);
            }
        }
        cluster.tick();
        let wait = out
            .step
            .requeue_after(DEFAULT_WAVE_DELAY)
            .unwrap_or(Duration::from_secs(1));
        cluster.now_ms += wait.as_millis() as i64;
    }
    panic!("the sync did not finish in 200 steps: {steps:#?}");
}

fn kinds(run: &Run) -> Vec<String> {
    run.steps
        .iter()
        .map(|s| match s {
            Step::Validate { .. } => "validate".to_string(),
            Step::Run { phase, wave, .. } => format!("run {phase:?}/{wave}"),
            Step::SyncFail { .. } => "syncfail".to_string(),
            Step::Wait { reason, .. } => format!("wait: {reason}"),
            Step::Done { phase, .. } => format!("done {phase:?}"),
        })
        .collect()
}

/// Drives `sync` to its end and checks that it succeeded.
fn drive_succeeded(cluster: &mut FakeCluster, sync: &Sync) -> Run {
    let run = drive(cluster, sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded, "{:?}", run.done());
    run
}

/// Drives `sync` to success and checks that it pruned ConfigMap `old`, and nothing else.
fn succeeds_pruning_old(cluster: &mut FakeCluster, sync: &Sync) -> Run {
    let run = drive_succeeded(cluster, sync);
    assert_eq!(logged(cluster, "prune"), ["prune ConfigMap/old"]);
    run
}

fn logged(cluster: &FakeCluster, what: &str) -> Vec<String> {
    cluster
        .log
        .iter()
        .filter(|l| l.contains(what))
        .map(|l| l.split_once(' ').map(|(_, r)| r.trim().to_string()).unwrap_or_default())
        .collect()
}

fn position(cluster: &FakeCluster, needle: &str) -> usize {
    cluster
        .log
        .iter()
        .position(|l| l.ends_with(needle))
        .unwrap_or_else(|| panic!("{needle} not in {:#?}", cluster.log))
}

fn time_of(cluster: &FakeCluster, needle: &str) -> i64 {
    let line = &cluster.log[position(cluster, needle)];
    line.split_whitespace()
        .next()
        .and_then(|t| t.parse().ok())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Tests

#[test]
fn plain_single_wave_sync_succeeds_right_after_apply() {
    let mut cluster = FakeCluster::default();
    let sync = Sync::new(vec![cm("a", 0), deployment("web", 0, 5, "Degraded")]);
    let run = drive(&mut cluster, &sync);
    assert_eq!(kinds(&run), ["validate", "run Sync/0", "done Succeeded"]);
    assert_eq!(
        run.done(),
        (
            OperationPhase::Succeeded,
            "successfully synced (all tasks run)".into(),
            true
        )
    );
    let web = run.result("web").expect("result");
    assert_eq!(web.status, Some(ResultCode::Synced));
    assert_eq!(
        logged(&cluster, "create"),
        ["create ConfigMap/a", "create Deployment/web"]
    );
}

#[test]
fn presync_job_waves_and_postsync_hook_run_in_order_with_the_wave_delay() {
    let mut cluster = FakeCluster::default();
    let post = with_annotations(
        job_hook("smoke", "PostSync", 1, ""),
        &[("argocd.argoproj.io/hook-delete-policy", "HookSucceeded")],
    );
    let sync = Sync::new(vec![
        deployment("web", 1, 2, ""),
        cm("config", 0),
        job_hook("migrate-", "PreSync", 2, ""),
        post,
    ]);
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded, "{:#?}", kinds(&run));
    assert_eq!(run.done().1, "successfully synced (no more tasks)");
    let migrate = format!("create Job/migrate-{}-presync-{}", &REV[..7], 1_700_000_000);
    assert_eq!(
        logged(&cluster, "create"),
        [
            migrate.as_str(),
            "create ConfigMap/config",
            "create Deployment/web",
            "create Job/smoke"
        ]
    );
    // Each wave starts only after the previous one is healthy and at least 2 s later.
    assert!(time_of(&cluster, "Deployment/web") - time_of(&cluster, "ConfigMap/config") >= 2_000);
    let runs: Vec<i64> = run
        .steps
        .iter()
        .zip(&run.step_times)
        .filter(|(s, _)| matches!(s, Step::Run { .. }))
        .map(|(_, t)| *t)
        .collect();
    assert!(runs.windows(2).all(|w| w[1] - w[0] >= 2_000), "{runs:?}");
    assert!(position(&cluster, "create Job/smoke") > position(&cluster, "create Deployment/web"));
    // The PostSync hook was deleted on success (HookSucceeded); the PreSync one kept (BeforeHookCreation).
    assert_eq!(
        logged(&cluster, "delete(HookSucceeded)"),
        ["delete(HookSucceeded) Job/smoke"]
    );
    let (_, kept) = cluster
        .objects
        .iter()
        .find(|(k, _)| k.name.starts_with("migrate-"))
        .expect("kept hook");
    assert!(
        kept.obj.pointer("/metadata/finalizers").is_none(),
        "the hook finalizer is removed once completed"
    );
    let hook = run.result("smoke").expect("hook result");
    assert_eq!(hook.hook_phase, Some(OperationPhase::Succeeded));
    assert_eq!(hook.sync_phase, Some(SyncPhase::PostSync));
    assert!(kinds(&run)
        .iter()
        .any(|k| k.starts_with("wait: waiting for completion of hook batch/Job/migrate-")));
    assert!(kinds(&run)
        .iter()
        .any(|k| k == "wait: waiting for healthy state of apps/Deployment/web"));
}

#[test]
fn degraded_deployment_in_wave_1_fails_the_sync_and_runs_syncfail_hooks() {
    let mut cluster = FakeCluster::default();
    let sync = Sync::new(vec![
        cm("first", 0),
        deployment("web", 1, 1, "Degraded"),
        cm("never", 2),
        job_hook("notify-", "SyncFail", 1, ""),
    ]);
    let run = drive(&mut cluster, &sync);
    let (phase, message, history) = run.done();
    assert_eq!(phase, OperationPhase::Failed);
    assert!(
        message.starts_with("one or more synchronization tasks completed unsuccessfully"),
        "{message}"
    );
    assert!(!history);
    assert!(!cluster.log.iter().any(|l| l.contains("ConfigMap/never")));
    assert_eq!(
        cluster
            .created
            .iter()
            .filter(|(k, _)| k.starts_with("Job/notify-"))
            .map(|(_, n)| *n)
            .sum::<u32>(),
        1
    );
    assert!(kinds(&run).contains(&"syncfail".to_string()));
    assert_eq!(
        run.result("web").and_then(|r| r.hook_phase),
        Some(OperationPhase::Failed)
    );
}

#[test]
fn an_apply_error_fails_the_sync() {
    let mut cluster = FakeCluster::default();
    cluster.fail_apply.insert("bad".into());
    let mut sync = Sync::new(vec![cm("ok", 0), cm("bad", 1)]);
    sync.crash = None;
    // The dry run refuses the sync before anything is applied.
    let run = drive(&mut cluster, &sync);
    let (phase, message, _) = run.done();
    assert_eq!(phase, OperationPhase::Failed);
    assert!(message.starts_with("one or more objects failed to apply (dry run), reason: admission webhook denied bad"));
    assert!(cluster.objects.is_empty());
}

#[test]
fn restart_anywhere_creates_each_hook_once_and_completes_once() {
    let desired = vec![
        job_hook("migrate-", "PreSync", 2, ""),
        cm("config", 0),
        deployment("web", 1, 2, ""),
        job_hook("seed", "Sync", 1, ""),
        with_annotations(
            job_hook("smoke", "PostSync", 1, ""),
            &[("argocd.argoproj.io/hook-delete-policy", "HookSucceeded")],
        ),
    ];
    let baseline = drive(&mut FakeCluster::default(), &Sync::new(desired.clone()));
    assert_eq!(baseline.done().0, OperationPhase::Succeeded);
    for at in 0..baseline.steps.len() {
        for crash in [Crash::BeforeExecute, Crash::AfterExecute] {
            let mut cluster = FakeCluster::default();
            let mut sync = Sync::new(desired.clone());
            sync.crash = Some((at, crash));
            let run = drive(&mut cluster, &sync);
            assert_eq!(
                run.done().0,
                OperationPhase::Succeeded,
                "crash {crash:?} at step {at}: {:#?}",
                kinds(&run)
            );
            for (hook, n) in cluster.created.iter().filter(|(k, _)| k.starts_with("Job/")) {
                assert_eq!(
                    *n, 1,
                    "crash {crash:?} at step {at}: {hook} created {n} times; log {:#?}",
                    cluster.log
                );
            }
            assert_eq!(cluster.created.keys().filter(|k| k.starts_with("Job/")).count(), 3);
            assert_eq!(run.steps.iter().filter(|s| matches!(s, Step::Done { .. })).count(), 1);
        }
    }
}

#[test]
fn a_running_hook_that_disappears_fails_the_sync_after_the_grace_period() {
    let mut cluster = FakeCluster::default();
    let mut sync = Sync::new(vec![job_hook("migrate", "PreSync", 1000, ""), cm("a", 0)]);
    sync.vandal = Some((3, "migrate"));
    let run = drive(&mut cluster, &sync);
    let (phase, message, _) = run.done();
    assert_eq!(phase, OperationPhase::Failed);
    assert!(
        message.contains("Resource batch/Job/migrate is missing, it might have been deleted"),
        "{message}"
    );
    assert!(!cluster.log.iter().any(|l| l.contains("ConfigMap/a")));
    let waits = kinds(&run)
        .iter()
        .filter(|k| k.starts_with("wait: waiting for completion of hook"))
        .count();
    assert!(
        waits >= (MISSING_GRACE.as_secs() / 5) as usize,
        "the cache gets a grace period first"
    );
}

#[test]
fn before_hook_creation_deletes_the_previous_instance_first() {
    let mut cluster = FakeCluster::default();
    let hook = job_hook("migrate", "PreSync", 1, "");
    cluster.put_tracked(hook.clone(), "capstan/shop");
    let sync = Sync::new(vec![hook, cm("config", 0)]);
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    assert!(position(&cluster, "delete(BeforeHookCreation) Job/migrate") < position(&cluster, "create Job/migrate"));
    assert!(cluster.log.iter().any(|l| l.ends_with("create Job/migrate")));
    assert_eq!(cluster.created.get("Job/migrate"), Some(&1));
    assert!(kinds(&run).iter().any(|k| k == "run PreSync/0"));
}

#[test]
fn selective_sync_applies_only_the_listed_resources_without_hooks_or_history() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("gone", 0), "capstan/shop");
    let mut sync = Sync::new(vec![cm("a", 0), cm("b", 0), job_hook("migrate-", "PreSync", 0, "")]);
    sync.sync_op().resources = vec![SyncOperationResource {
        group: None,
        kind: "ConfigMap".into(),
        name: "b".into(),
        namespace: Some("shop".into()),
    }];
    let run = drive(&mut cluster, &sync);
    let (phase, _, history) = run.done();
    assert_eq!(phase, OperationPhase::Succeeded);
    assert!(!history, "selective syncs are not recorded in history");
    assert_eq!(logged(&cluster, "create"), ["create ConfigMap/b"]);
    assert!(cluster
        .objects
        .contains_key(&ObjectKey::new("", "ConfigMap", "shop", "gone")));
}

#[test]
fn dry_run_changes_nothing() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("gone", 0), "capstan/shop");
    let before: Vec<Value> = cluster.objects.values().map(|o| o.obj.clone()).collect();
    let mut sync = Sync::new(vec![
        cm("a", 0),
        deployment("web", 1, 3, ""),
        job_hook("migrate-", "PreSync", 3, ""),
    ]);
    sync.sync_op().dry_run = true;
    let run = drive(&mut cluster, &sync);
    let (phase, _, history) = run.done();
    assert_eq!(phase, OperationPhase::Succeeded);
    assert!(!history);
    let after: Vec<Value> = cluster.objects.values().map(|o| o.obj.clone()).collect();
    assert_eq!(before, after);
    assert!(cluster.created.is_empty());
    assert_eq!(
        run.result("gone").and_then(|r| r.message.clone()).as_deref(),
        Some("pruned (dry run)")
    );
    for s in &run.steps {
        assert!(
            s.actions().apply.iter().all(|a| a.dry_run)
                && s.actions().prune.is_empty()
                && s.actions().delete.is_empty()
        );
    }
}

#[test]
fn apply_out_of_sync_only_skips_in_sync_resources() {
    let mut cluster = FakeCluster::default();
    let same = with_annotations(cm("same", 0), &[("test/in-sync", "true")]);
    cluster.put_tracked(same.clone(), "capstan/shop");
    let mut sync = Sync::new(vec![same, cm("changed", 0)]);
    sync.policy.sync_options = vec!["ApplyOutOfSyncOnly=true".into()];
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    assert_eq!(logged(&cluster, "create"), ["create ConfigMap/changed"]);
    assert!(!cluster.log.iter().any(|l| l.contains("ConfigMap/same")));
}

#[test]
fn prune_rules() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("old", 0), "capstan/shop");
    cluster.put_tracked(
        with_annotations(cm("keep", 0), &[("argocd.argoproj.io/sync-options", "Prune=false")]),
        "capstan/shop",
    );
    cluster.put_tracked(cm("theirs", 0), "capstan/other");
    cluster
        .put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "untracked", "namespace": "shop"}}));
    let sync = Sync::new(vec![cm("a", 0)]);
    let run = succeeds_pruning_old(&mut cluster, &sync);
    // The final group succeeds right after the delete is issued; the object goes once it terminated.
    cluster.tick();
    cluster.tick();
    for name in ["keep", "theirs", "untracked", "a"] {
        assert!(cluster.objects.keys().any(|k| k.name == name), "{name} must survive");
    }
    assert!(!cluster.objects.keys().any(|k| k.name == "old"));
    let keep = run.result("keep").expect("keep");
    assert_eq!(
        (keep.status, keep.message.as_deref()),
        (Some(ResultCode::PruneSkipped), Some("ignored (no prune)"))
    );
    assert!(run.result("theirs").is_none() && run.result("untracked").is_none());

    let mut no_prune = FakeCluster::default();
    no_prune.put_tracked(cm("old", 0), "capstan/shop");
    let mut sync = Sync::new(vec![cm("a", 0)]);
    sync.sync_op().prune = false;
    let run = drive(&mut no_prune, &sync);
    assert_eq!(
        run.result("old").and_then(|r| r.message.as_deref()),
        Some("ignored (requires pruning)")
    );
    assert!(no_prune.objects.keys().any(|k| k.name == "old"));
}

#[test]
fn pruning_follows_mirrored_waves_and_waits_for_deletion() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("low", -1), "capstan/shop");
    cluster.put_tracked(cm("high", 5), "capstan/shop");
    let sync = Sync::new(vec![cm("a", 0)]);
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    assert_eq!(
        logged(&cluster, "prune"),
        ["prune ConfigMap/high", "prune ConfigMap/low"]
    );
    assert!(kinds(&run)
        .iter()
        .any(|k| k == "wait: waiting for deletion of /ConfigMap/high"));
}

#[test]
fn prune_last_prunes_after_everything_else() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("old", 0), "capstan/shop");
    let mut sync = Sync::new(vec![cm("a", 0), cm("b", 3)]);
    sync.policy.sync_options = vec!["PruneLast=true".into()];
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    assert!(position(&cluster, "prune ConfigMap/old") > position(&cluster, "create ConfigMap/b"));
    assert_eq!(run.result("old").and_then(|r| r.sync_wave), Some(4));
}

#[test]
fn prune_confirm_waits_for_approval() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(
        with_annotations(cm("old", 0), &[("argocd.argoproj.io/sync-options", "Prune=confirm")]),
        "capstan/shop",
    );
    let mut sync = Sync::new(vec![cm("a", 0)]);
    let live = cluster.live();
    let input = step_input(&sync, &live, None);
    let validate = next_step(&input);
    let (st, plan) = record_outcome(&validate, &Outcome::default(), input.now);
    let input = step_input(&sync, &live, Some((&st, &plan)));
    let out = next_step(&input);
    match &out.step {
        Step::Wait { reason, .. } => assert_eq!(reason, "Waiting for pruning confirmation of v1/ConfigMap/old"),
        other => panic!("expected a wait, got {other:?}"),
    }
    sync.prune_confirmed = true;
    succeeds_pruning_old(&mut cluster, &sync);
}

#[test]
fn never_prunes_without_a_render_or_a_complete_cache() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("old", 0), "capstan/shop");
    let mut sync = Sync::new(vec![cm("a", 0)]);
    sync.cache_complete = false;
    let live = cluster.live();
    let out = next_step(&step_input(&sync, &live, None));
    assert!(matches!(out.step, Step::Wait { .. }));
    assert!(out.step.actions().is_empty());

    sync.cache_complete = true;
    sync.rendered = false;
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Error);
    assert!(cluster.log.is_empty());

    // A render with no objects never prunes everything unless allowEmpty.
    let mut empty = Sync::new(Vec::new());
    let run = drive(&mut cluster, &empty);
    assert_eq!(run.done().0, OperationPhase::Error);
    assert!(run.done().1.starts_with("refusing to prune"));
    assert!(cluster.log.is_empty());
    empty.policy.automated = Some(SyncPolicyAutomated {
        allow_empty: true,
        ..SyncPolicyAutomated::default()
    });
    succeeds_pruning_old(&mut cluster, &empty);
}

#[test]
fn fail_on_shared_resource() {
    let mut cluster = FakeCluster::default();
    cluster.put_tracked(cm("shared", 0), "team/billing");
    let mut sync = Sync::new(vec![cm("shared", 0)]);
    sync.policy.sync_options = vec!["FailOnSharedResource=true".into()];
    let run = drive(&mut cluster, &sync);
    let (phase, message, _) = run.done();
    assert_eq!(phase, OperationPhase::Failed);
    assert_eq!(
        message,
        "Shared resource found: /ConfigMap:shop/shared is part of application team/billing"
    );
    assert!(cluster.log.is_empty());
    // Without the option the resource is taken over, and the warning is still available.
    let sync = Sync::new(vec![cm("shared", 0)]);
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
}

#[test]
fn create_namespace_runs_first() {
    let mut cluster = FakeCluster::default();
    let mut sync = Sync::new(vec![cm("a", 0)]);
    sync.policy.sync_options = vec!["CreateNamespace=true".into()];
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    assert_eq!(
        logged(&cluster, "create"),
        ["create Namespace/shop", "create ConfigMap/a"]
    );
    let ns = &cluster.objects[&ObjectKey::new("", "Namespace", "", "shop")];
    assert!(
        object::tracking_id_of(&ns.obj).is_none(),
        "the created namespace is not tracked, so never pruned"
    );
    let validate = &run.steps[0];
    assert!(validate
        .actions()
        .apply
        .iter()
        .any(|a| a.skip_dry_run_if_missing && object::name(&a.object) == "a"));
}

#[test]
fn replace_mode_is_chosen_except_for_crds_and_namespaces() {
    let mut cluster = FakeCluster::default();
    let replace = [("argocd.argoproj.io/sync-options", "Replace=true")];
    cluster.put_tracked(with_annotations(cm("existing", 0), &replace), "capstan/shop");
    let crd = with_annotations(
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget"}}}),
        &replace,
    );
    let ns = with_annotations(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "extra"}}),
        &replace,
    );
    let mut sync = Sync::new(vec![
        with_annotations(cm("existing", 0), &replace),
        with_annotations(cm("new", 0), &replace),
        crd,
        ns,
    ]);
    sync.policy.sync_options = vec!["Force=true".into()];
    let run = drive(&mut cluster, &sync);
    assert_eq!(run.done().0, OperationPhase::Succeeded);
    let modes: BTreeMap<String, ApplyMode> = run
        .steps
        .iter()
        .filter(|s| matches!(s, Step::Run { .. }))
        .flat_map(|s| {
            s.actions()
                .apply
                .iter()
                .map(|a| (object::name(&a.object).to_string(), a.mode))
        })
        .collect();
    let ssa = ApplyMode::ServerSideApply {
        force_conflicts: true,
        field_manager: "capstan",
    };
    assert_eq!(modes["existing"], ApplyMode::Replace { force: true });
    assert_eq!(modes["new"], ApplyMode::Create);
    assert_eq!(modes["widgets.example.com"], ssa);
    assert_eq!(modes["extra"], ssa);
}

#[test]
fn terminate_deletes_running_hooks() {
    let mut cluster = FakeCluster::default();
    let sync = Sync::new(vec![job_hook("migrate", "PreSync", 50, ""), cm("a", 0)]);
    let live = cluster.live();
    let mut st: Option<OperationState> = None;
    let mut plan: Option<PlanState> = None;
    for _ in 0..2 {
        let out = next_step(&step_input(&sync, &live, st.as_ref().zip(plan.as_ref())));
        let outcome = cluster.execute(out.step.actions());
        let (s, p) = record_outcome(&out, &outcome, Timestamp::UNIX_EPOCH);
        st = Some(s);
        plan = Some(p);
    }
    assert!(cluster.objects.keys().any(|k| k.name == "migrate"));
    let mut terminating = st.expect("state");
    terminating.phase = OperationPhase::Terminating;
    let live = cluster.live();
    let out = next_step(&step_input(
        &sync,
        &live,
        Some((&terminating, plan.as_ref().expect("plan"))),
    ));
    match &out.step {
        Step::Done { phase, message, .. } => {
            assert_eq!(
                (*phase, message.as_str()),
                (OperationPhase::Failed, "Operation terminated")
            )
        }
        other => panic!("expected done, got {other:?}"),
    }
    assert_eq!(out.step.actions().delete.len(), 1);
    assert_eq!(out.step.actions().delete[0].reason, DeleteReason::Terminated);
}

#[test]
fn completed_operations_stay_done() {
    let mut cluster = FakeCluster::default();
    let sync = Sync::new(vec![cm("a", 0)]);
    let run = drive(&mut cluster, &sync);
    let live = cluster.live();
    let plan = PlanState::default();
    let again = next_step(&step_input(&sync, &live, Some((&run.state, &plan))));
    assert!(matches!(
        again.step,
        Step::Done {
            phase: OperationPhase::Succeeded,
            ..
        }
    ));
    assert!(again.step.actions().is_empty());
    assert_eq!(again.state, run.state);
}

#[test]
fn automated_sync_refusal_mirrors_argo() {
    let prune_all = SyncPolicy {
        automated: Some(SyncPolicyAutomated {
            prune: true,
            ..SyncPolicyAutomated::default()
        }),
        ..SyncPolicy::default()
    };
    let res = |prune: bool| ResourceStatus {
        kind: "ConfigMap".into(),
        name: "x".into(),
        requires_pruning: prune,
        ..ResourceStatus::default()
    };
    assert_eq!(
        automated_sync_refusal(&prune_all, &[res(true), res(true)]).as_deref(),
        Some("auto-sync will wipe out all resources")
    );
    assert_eq!(automated_sync_refusal(&prune_all, &[res(true), res(false)]), None);
    let mut allow = prune_all.clone();
    if let Some(a) = allow.automated.as_mut() {
        a.allow_empty = true;
    }
    assert_eq!(automated_sync_refusal(&allow, &[res(true)]), None);
    let mut no_prune = prune_all.clone();
    if let Some(a) = no_prune.automated.as_mut() {
        a.prune = false;
    }
    assert_eq!(automated_sync_refusal(&no_prune, &[res(true)]), None);
    assert_eq!(automated_sync_refusal(&SyncPolicy::default(), &[res(true)]), None);
}

fn step_input<'a>(
    sync: &'a Sync,
    live: &'a [LiveObject],
    state: Option<(&'a OperationState, &'a PlanState)>,
) -> StepInput<'a> {
    StepInput {
        ctx: PlanContext {
            app_namespace: APP_NS,
            app_name: APP,
            operator_namespace: "capstan-system",
            destination_namespace: "shop",
            revision: REV,
            scope: &scope,
        },
        desired: &sync.desired,
        live,
        namespace_live: None,
        operation: &sync.operation,
        sync_policy: Some(&sync.policy),
        state: state.map(|s| s.0),
        plan_state: state.map(|s| s.1),
        now: Timestamp::UNIX_EPOCH,
        wave_delay: DEFAULT_WAVE_DELAY,
        rendered: sync.rendered,
        live_cache_complete: sync.cache_complete,
        prune_confirmed: sync.prune_confirmed,
    }
}
