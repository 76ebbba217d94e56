//! The step function: one iteration of gitops-engine's `syncContext.Sync()` (`sync_context.go`), returning a
//! decision for the I/O layer instead of performing it, plus [`record_outcome`] to fold the I/O results back into
//! the persisted state. The contract is described in the parent module.
//!
//! Pure: no I/O; never panics.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::options::{AppOptions, Propagation, PruneOption};
use super::order;
use super::tasks::{self, has_hook_finalizer, SyncTask, TaskSet, TaskSetInput};
use super::{LiveObject, PlanContext, MAX_MESSAGE_CHARS};
use crate::api::application::{
    HealthStatusCode, Operation, OperationPhase, OperationState, ResourceResult, ResourceStatus, ResultCode,
    SyncOperation, SyncOperationResult, SyncPhase, SyncPolicy, SyncStep,
};
use crate::engine::object::{self, ObjectKey};
use crate::engine::protect::{self, Guard, Protection, Removal};
use crate::text::truncate;

/// Default delay between two sync waves (`controller.sync.wave.delay.seconds`, 2 s in Argo CD).
pub const DEFAULT_WAVE_DELAY: Duration = Duration::from_secs(2);
/// Field manager of every server-side apply.
pub use crate::api::labels::FIELD_MANAGER;
/// Requeue while waiting for health, hooks, deletions or the live cache.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(5);
/// How long an applied object may stay invisible in the live cache before it counts as deleted.
pub const MISSING_GRACE: Duration = Duration::from_secs(30);

/// Everything one step is decided from.
pub struct StepInput<'a> {
    /// Application, destination, revision, scope lookup.
    pub ctx: PlanContext<'a>,
    /// Rendered objects at the operation's revision, hooks included.
    pub desired: &'a [Value],
    /// Live objects: every object tracked by this Application, plus every object living at a desired key
    /// (whoever tracks it), each with its health and diff verdict.
    pub live: &'a [LiveObject],
    /// The live destination namespace (looked up when `CreateNamespace=true`); `None` if it does not exist.
    pub namespace_live: Option<&'a LiveObject>,
    /// The requested operation (used when no operation state exists yet).
    pub operation: &'a Operation,
    /// `spec.syncPolicy`.
    pub sync_policy: Option<&'a SyncPolicy>,
    /// The persisted `status.operationState` of this operation; `None` starts it.
    pub state: Option<&'a OperationState>,
    /// The persisted [`PlanState`]; `None` with a new operation.
    pub plan_state: Option<&'a PlanState>,
    /// The current time.
    pub now: Timestamp,
    /// Delay between sync waves ([`DEFAULT_WAVE_DELAY`]).
    pub wave_delay: Duration,
    /// The manifests were rendered (repository reachable, revision resolved, render succeeded). False: the
    /// operation errors and nothing is applied or pruned.
    pub rendered: bool,
    /// The live cache holds every kind the Application manages. False: wait, never prune.
    pub live_cache_complete: bool,
    /// Pruning of `Prune=confirm` resources has been approved (`deletion-approved` annotation newer than the
    /// operation start).
    pub prune_confirmed: bool,
}

/// Resumable state beyond what `OperationState` holds. Store it next to `status.operationState` (proposed: fields
/// `appliedAt` and `validated` of `status.operationState.step`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanState {
    /// The dry run that precedes the first real step has passed.
    #[serde(default)]
    pub validated: bool,
    /// Unix milliseconds when the last (phase, wave) group was run: the wave delay and the grace for objects
    /// not yet visible in the live cache count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at_ms: Option<i64>,
}

/// What [`next_step`] decided, with the state to persist before executing it.
#[derive(Clone, Debug)]
pub struct StepOutput {
    /// The decision.
    pub step: Step,
    /// The operation state to persist BEFORE executing the step (intents recorded).
    pub state: OperationState,
    /// The plan state to persist with it.
    pub plan_state: PlanState,
}

/// The decision of one step.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    /// Dry-run every task once before the first real step; any failure refuses the sync.
    Validate {
        /// Dry-run applies.
        actions: Actions,
    },
    /// Run one (phase, wave) group.
    Run {
        /// The phase of the group.
        phase: SyncPhase,
        /// The wave of the group.
        wave: i64,
        /// Last group and no hooks in it: the operation succeeds as soon as every action succeeded.
        final_group: bool,
        /// What to do.
        actions: Actions,
    },
    /// Start the SyncFail hooks of a failed sync.
    SyncFail {
        /// What to do.
        actions: Actions,
    },
    /// Nothing to apply now; call again after `requeue_after` or on a watch event.
    Wait {
        /// Why, in a sentence (also the operation message).
        reason: String,
        /// When to call again at the latest.
        requeue_after: Duration,
        /// Housekeeping to do meanwhile (hook finalizers).
        actions: Actions,
    },
    /// The operation finished; execute `actions` (hook clean-up, best effort).
    Done {
        /// `Succeeded`, `Failed` or `Error`.
        phase: OperationPhase,
        /// Why, in a sentence.
        message: String,
        /// Record the sync in `status.history` (not for selective syncs, dry runs or failures).
        record_history: bool,
        /// Clean-up.
        actions: Actions,
    },
}

impl Step {
    /// The actions to execute.
    pub fn actions(&self) -> &Actions {
        match self {
            Step::Validate { actions }
            | Step::Run { actions, .. }
            | Step::SyncFail { actions }
            | Step::Wait { actions, .. }
            | Step::Done { actions, .. } => actions,
        }
    }

    /// When to call [`next_step`] again: the wave delay after a group, `requeue_after` while waiting, soon after
    /// anything else; `None` once done.
    pub fn requeue_after(&self, wave_delay: Duration) -> Option<Duration> {
        match self {
            Step::Run { .. } => Some(wave_delay.max(Duration::from_millis(100))),
            Step::Validate { .. } | Step::SyncFail { .. } => Some(Duration::from_millis(100)),
            Step::Wait { requeue_after, .. } => Some(*requeue_after),
            Step::Done { .. } => None,
        }
    }
}

/// I/O for the executor, performed in this order:
///
/// 1. `remove_finalizers` (best effort; errors are retried by a later step);
/// 2. `prune`, all of them; if any failed, stop here;
/// 3. `delete`, all of them; if any failed, stop here;
/// 4. `apply`, in order (consecutive objects of the same kind may run in parallel); keep going after a failure;
/// 5. `delete_on_success`, only if every prune, delete and apply succeeded.
///
/// Deleting or pruning an object that is already gone succeeds; creating a hook (`ApplyMode::Create`) that
/// already exists succeeds. Every executed prune, delete and apply is reported in the [`Outcome`] by its `id`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Actions {
    /// Remove [`super::HOOK_FINALIZER`] from these completed hooks.
    pub remove_finalizers: Vec<ObjectRef>,
    /// Delete pruned objects.
    pub prune: Vec<PruneAction>,
    /// Delete hooks (previous instances, failed hooks, terminated hooks).
    pub delete: Vec<DeleteAction>,
    /// Apply objects.
    pub apply: Vec<ApplyAction>,
    /// Delete succeeded hooks once everything above succeeded.
    pub delete_on_success: Vec<DeleteAction>,
}

impl Actions {
    /// Nothing to do.
    pub fn is_empty(&self) -> bool {
        self.remove_finalizers.is_empty()
            && self.prune.is_empty()
            && self.delete.is_empty()
            && self.apply.is_empty()
            && self.delete_on_success.is_empty()
    }
}

/// An object to act on.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef {
    /// `apiVersion` (`apps/v1`).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped objects).
    pub namespace: String,
    /// Name.
    pub name: String,
}

impl ObjectRef {
    /// The reference to `obj`.
    pub fn of(obj: &Value) -> ObjectRef {
        ObjectRef {
            api_version: obj
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            kind: object::kind(obj).to_string(),
            namespace: object::namespace(obj).to_string(),
            name: object::name(obj).to_string(),
        }
    }
}

/// How an object is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyMode {
    /// Server-side apply (the default) with force on conflicts.
    ServerSideApply {
        /// Take over conflicting fields.
        force_conflicts: bool,
        /// Always [`FIELD_MANAGER`].
        field_manager: &'static str,
    },
    /// `Replace=true` on an existing object: PUT it; with `force`, delete and re-create it.
    Replace {
        /// `Force=true` (or the operation's force).
        force: bool,
    },
    /// `Replace=true` on a missing object: POST it.
    Create,
}

/// Apply one object.
#[derive(Clone, Debug, PartialEq)]
pub struct ApplyAction {
    /// Key for the [`Outcome`].
    pub id: String,
    /// The manifest, namespace and name filled in (the executor adds tracking metadata when `track`).
    pub object: Value,
    /// How to write it.
    pub mode: ApplyMode,
    /// Dry run only (server-side `dryRun=All`).
    pub dry_run: bool,
    /// In a dry run, succeed without validating when the kind or namespace is not known yet.
    pub skip_dry_run_if_missing: bool,
    /// Validate against the schema (`Validate=false` turns it off).
    pub validate: bool,
    /// `Validate=server`: the check before the first write is a server-side dry run even when the cluster
    /// publishes the kind's schema.
    pub server_validation: bool,
    /// Write the tracking label and annotation.
    pub track: bool,
    /// The object is a hook.
    pub hook: bool,
    /// The result row this action updates.
    pub record: ResourceResult,
}

/// Prune one object.
#[derive(Clone, Debug, PartialEq)]
pub struct PruneAction {
    /// Key for the [`Outcome`].
    pub id: String,
    /// The object.
    pub target: ObjectRef,
    /// `DeleteOptions.propagationPolicy`.
    pub propagation: Propagation,
    /// The result row this action updates.
    pub record: ResourceResult,
}

/// Why a hook is deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// The previous instance goes before the hook is created again.
    BeforeHookCreation,
    /// The hook succeeded and its policy is `HookSucceeded`.
    HookSucceeded,
    /// The hook failed (or the sync did) and its policy is `HookFailed`.
    HookFailed,
    /// The operation was terminated while the hook ran.
    Terminated,
}

/// Delete one hook.
#[derive(Clone, Debug, PartialEq)]
pub struct DeleteAction {
    /// Key for the [`Outcome`].
    pub id: String,
    /// The object.
    pub target: ObjectRef,
    /// Why.
    pub reason: DeleteReason,
    /// `DeleteOptions.propagationPolicy`.
    pub propagation: Propagation,
    /// The result row a failure is recorded on.
    pub record: ResourceResult,
}

/// What the executor did: per action id, `Ok(message)` or `Err(error)`. Actions not executed are absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Results of `apply`.
    pub applied: BTreeMap<String, Result<String, String>>,
    /// Results of `prune`.
    pub pruned: BTreeMap<String, Result<String, String>>,
    /// Results of `delete` and `delete_on_success`.
    pub deleted: BTreeMap<String, Result<String, String>>,
    /// The objects as the server returned them after successful real (not dry-run) applies: the live
    /// state right after the step, before any watch has reported it.
    pub live: Vec<Value>,
}

// ---------------------------------------------------------------------------------------------
// next_step

/// Decide the next step of a sync operation. See the module documentation of `engine::plan` for the contract.
pub fn next_step(input: &StepInput<'_>) -> StepOutput {
    let state = input.state.cloned().unwrap_or_else(|| new_state(input));
    let plan = input.plan_state.cloned().unwrap_or_default();
    let mut p = Planner {
        input,
        st: state,
        plan,
        now_ms: input.now.as_millisecond(),
    };
    let step = p.decide();
    StepOutput {
        step,
        state: p.st,
        plan_state: p.plan,
    }
}

fn new_state(input: &StepInput<'_>) -> OperationState {
    let source = input.operation.sync.as_ref().and_then(|s| s.source.clone());
    OperationState {
        operation: input.operation.clone(),
        phase: OperationPhase::Running,
        message: None,
        sync_result: Some(SyncOperationResult {
            revision: input.ctx.revision.to_string(),
            source,
            resources: Vec::new(),
        }),
        step: None,
        started_at: Some(Time(input.now)),
        finished_at: None,
        retry_count: None,
    }
}

fn is_completed(phase: OperationPhase) -> bool {
    matches!(
        phase,
        OperationPhase::Succeeded | OperationPhase::Failed | OperationPhase::Error
    )
}

struct Planner<'i, 'a> {
    input: &'i StepInput<'a>,
    st: OperationState,
    plan: PlanState,
    now_ms: i64,
}

impl<'i, 'a> Planner<'i, 'a> {
    fn decide(&mut self) -> Step {
        if is_completed(self.st.phase) {
            return self.done_as_is();
        }
        let Some(sync) = self.st.operation.sync.clone() else {
            return self.finish(
                OperationPhase::Error,
                "only sync operations can be run; turn a rollback into a sync",
            );
        };
        if !self.input.rendered {
            return self.finish(
                OperationPhase::Error,
                "the manifests could not be rendered; nothing was applied or pruned",
            );
        }
        if !self.input.live_cache_complete {
            return self.wait(
                "waiting for the live state cache to be complete".into(),
                WAIT_REQUEUE,
                Actions::default(),
            );
        }
        let opts = AppOptions::parse([self.policy_options(), sync.sync_options.as_slice()]);
        let started_unix = self.st.started_at.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
        let skip_hooks = sync.sync_strategy.as_ref().is_some_and(|s| s.apply.is_some()) || !sync.resources.is_empty();
        let task_input = TaskSetInput {
            ctx: &self.input.ctx,
            desired: self.input.desired,
            live: self.input.live,
            options: &opts,
            skip_hooks,
            selected: &sync.resources,
            started_unix,
            managed_namespace_metadata: self
                .input
                .sync_policy
                .and_then(|p| p.managed_namespace_metadata.as_ref()),
            namespace_live: self.input.namespace_live,
        };
        let set = match tasks::build_tasks(&task_input) {
            Ok(set) => set,
            Err(e) => return self.finish(OperationPhase::Error, &e.0),
        };
        if self.st.phase == OperationPhase::Terminating {
            return self.terminate(set);
        }
        if let Some(step) = self.refuse(&sync, &opts, &set) {
            return step;
        }
        let TaskSet { mut tasks, .. } = set;
        order::arrange(&mut tasks, opts.resource.prune_last);
        let mut run = Run {
            sync: &sync,
            opts: &opts,
            force: sync_force(&sync),
            tasks,
        };
        self.enrich(&mut run.tasks);
        if !self.plan.validated && self.results().is_empty() {
            if let Some(step) = self.validate(&run) {
                return step;
            }
        }
        self.plan.validated = true;
        self.iterate(run)
    }

    fn policy_options(&self) -> &'i [String] {
        self.input.sync_policy.map(|p| p.sync_options.as_slice()).unwrap_or(&[])
    }

    /// Conditions under which the sync must not start or go on: shared resources with `FailOnSharedResource`
    /// (`controller/sync.go`), and a render that yields no objects while pruning would delete everything.
    fn refuse(&mut self, sync: &SyncOperation, opts: &AppOptions, set: &TaskSet<'_>) -> Option<Step> {
        if opts.fail_on_shared_resource && !set.shared.is_empty() {
            let list: Vec<String> = set
                .shared
                .iter()
                .map(|s| format!("{} is part of application {}", s.key, s.application))
                .collect();
            return Some(self.finish(
                OperationPhase::Failed,
                &format!("Shared resource found: {}", list.join(", ")),
            ));
        }
        let allow_empty = self
            .input
            .sync_policy
            .and_then(|p| p.automated.as_ref())
            .is_some_and(|a| a.allow_empty);
        let would_prune = set
            .tasks
            .iter()
            .any(|t| t.is_prune() && t.options.prune != PruneOption::Disabled);
        if set.targets == 0 && sync.prune && would_prune && !allow_empty {
            return Some(self.finish(
                OperationPhase::Error,
                "refusing to prune: the manifests rendered no objects but the Application manages some \
                 (set syncPolicy.automated.allowEmpty to allow an empty Application)",
            ));
        }
        None
    }

    // --- results -----------------------------------------------------------------------------

    fn results(&self) -> &[ResourceResult] {
        self.st
            .sync_result
            .as_ref()
            .map(|r| r.resources.as_slice())
            .unwrap_or(&[])
    }

    fn results_mut(&mut self) -> &mut Vec<ResourceResult> {
        let revision = self.input.ctx.revision.to_string();
        &mut self
            .st
            .sync_result
            .get_or_insert_with(|| SyncOperationResult {
                revision,
                source: None,
                resources: Vec::new(),
            })
            .resources
    }

    /// `WithInitialState` + "enrich tasks with the result", then resolve intents left by a step whose outcome
    /// was never recorded. A prune intent whose object is gone (no task any more) was executed.
    fn enrich(&mut self, tasks: &mut [SyncTask<'_>]) {
        let by_key: BTreeMap<String, ResourceResult> = self.results().iter().map(|r| (row_key(r), r.clone())).collect();
        let task_keys: BTreeSet<String> = tasks.iter().map(SyncTask::result_key).collect();
        for r in self.results_mut().iter_mut() {
            if is_intent(r) && is_prune_row(r) && !task_keys.contains(&row_key(r)) {
                r.status = Some(ResultCode::Pruned);
                r.hook_phase = Some(OperationPhase::Succeeded);
                r.message = Some("pruned".into());
            }
        }
        for t in tasks.iter_mut() {
            let Some(r) = by_key.get(&t.result_key()) else {
                continue;
            };
            t.status = r.status;
            t.op_phase = r.hook_phase;
            t.message = r.message.clone();
            if is_intent(r) {
                self.resolve_intent(t);
            }
        }
    }

    /// An intent is an action recorded before it ran. A hook whose object is live was created: it is confirmed
    /// (never deleted or created again). Anything else goes back to pending and runs again (idempotent).
    fn resolve_intent(&mut self, t: &mut SyncTask<'_>) {
        if t.hook && t.live.is_some() && !t.is_prune() {
            t.status = Some(ResultCode::Synced);
            self.set_result(t, Some(ResultCode::Synced), Some(OperationPhase::Running), None);
        } else {
            t.op_phase = None;
            t.status = None;
            let (key, phase) = (t.key.clone(), t.phase);
            self.results_mut().retain(|r| !is_row_of(r, &key, phase));
        }
    }

    /// `setResourceResult`: insert or update the row of `t`; a message is replaced only by a non-empty one.
    fn set_result(
        &mut self,
        t: &mut SyncTask<'_>,
        status: Option<ResultCode>,
        phase: Option<OperationPhase>,
        message: Option<String>,
    ) {
        t.status = status;
        t.op_phase = phase;
        if let Some(m) = message.filter(|m| !m.is_empty()) {
            t.message = Some(truncate(&m, MAX_MESSAGE_CHARS));
        }
        let row = record_of(t);
        let rows = self.results_mut();
        match rows.iter_mut().find(|r| same_row(r, &row)) {
            Some(existing) => {
                existing.status = row.status;
                existing.hook_phase = row.hook_phase;
                existing.message = row.message;
                existing.sync_wave = row.sync_wave;
            }
            None => rows.push(row),
        }
    }

    // --- validation --------------------------------------------------------------------------

    /// The dry run before the first real step (`Sync()` when `!started()`): every task (only out-of-sync ones with
    /// `ApplyOutOfSyncOnly`) applied with `dryRun`. Prunes are not executed in a dry run; hooks whose previous
    /// instance is deleted first are skipped, as their dry run would hit the old instance's immutable fields.
    fn validate(&mut self, run: &Run<'_, '_>) -> Option<Step> {
        let apply: Vec<ApplyAction> = run
            .tasks
            .iter()
            .filter(|t| !t.is_prune() && !t.delete_before_creation())
            .filter(|t| !run.opts.apply_out_of_sync_only || t.hook || !is_in_sync(t))
            .map(|t| apply_action(t, run.force, true))
            .collect();
        if apply.is_empty() {
            return None;
        }
        Some(Step::Validate {
            actions: Actions {
                apply,
                ..Actions::default()
            },
        })
    }

    // --- one iteration -----------------------------------------------------------------------

    fn iterate(&mut self, mut run: Run<'_, '_>) -> Step {
        self.refresh_running(&mut run.tasks);
        if let Some(step) = self.wait_for_running(&mut run.tasks) {
            return step;
        }
        if let Some(step) = self.wait_for_terminating_prunes(&run.tasks) {
            return step;
        }
        let mut actions = Actions {
            remove_finalizers: completed_hook_finalizers(&run.tasks),
            ..Actions::default()
        };
        let (delete_on_success, delete_on_failure) = finished_hook_deletes(&run.tasks, run.opts.prune_propagation);

        let (sync_fail, mut tasks): (Vec<SyncTask<'_>>, Vec<SyncTask<'_>>) =
            run.tasks.into_iter().partition(|t| t.phase == SyncPhase::SyncFail);
        if tasks.iter().any(|t| t.completed() && !t.successful()) {
            actions.delete = delete_on_failure;
            return self.fail(&run_with(run.sync, run.opts, run.force), sync_fail, &tasks, actions);
        }

        tasks.retain(SyncTask::pending);
        if run.opts.apply_out_of_sync_only {
            tasks.retain(|t| t.hook || !is_in_sync(t));
        }
        if tasks.is_empty() {
            actions.delete_on_success = delete_on_success;
            return self.finish_with(
                OperationPhase::Succeeded,
                "successfully synced (no more tasks)",
                actions,
            );
        }

        let (phase, wave) = (tasks[0].phase, tasks[0].wave);
        let (group, remaining): (Vec<SyncTask<'_>>, Vec<SyncTask<'_>>) =
            tasks.into_iter().partition(|t| t.phase == phase && t.wave == wave);
        if let Some(step) = self.wave_delay(phase, wave, actions.clone()) {
            return step;
        }
        let final_group = remaining.is_empty() && !group.iter().any(|t| t.hook);
        if final_group {
            actions.delete_on_success = delete_on_success;
        }
        let run = run_with(run.sync, run.opts, run.force);
        self.group_step(&run, group, (phase, wave), final_group, actions)
    }

    /// The step that runs the (phase, wave) group `group`: blocked (wait), deleting hooks first, or
    /// applying.
    fn group_step(
        &mut self,
        run: &Run<'_, '_>,
        group: Vec<SyncTask<'_>>,
        (phase, wave): (SyncPhase, i64),
        final_group: bool,
        mut actions: Actions,
    ) -> Step {
        match self.run_group(run, group, &mut actions) {
            GroupRun::Blocked(reason) => self.wait(
                reason,
                WAIT_REQUEUE,
                Actions {
                    remove_finalizers: actions.remove_finalizers,
                    ..Actions::default()
                },
            ),
            GroupRun::DeletingHooks => {
                self.mark_group(phase, wave);
                Step::Run {
                    phase,
                    wave,
                    final_group: false,
                    actions: Actions {
                        delete_on_success: Vec::new(),
                        ..actions
                    },
                }
            }
            GroupRun::Applying => {
                self.mark_group(phase, wave);
                self.st.message = Some("one or more tasks are running".into());
                Step::Run {
                    phase,
                    wave,
                    final_group,
                    actions,
                }
            }
        }
    }

    fn mark_group(&mut self, phase: SyncPhase, wave: i64) {
        self.st.step = Some(SyncStep {
            phase,
            wave,
            ..Default::default()
        });
        self.plan.applied_at_ms = Some(self.now_ms);
    }

    /// Step 1: running tasks take their phase from the observed health. Hooks: completion (`getOperationPhase`);
    /// resources: Healthy → Succeeded, Degraded → Failed, no health check → Succeeded.
    fn refresh_running(&mut self, tasks: &mut [SyncTask<'_>]) {
        for t in tasks.iter_mut() {
            let Some(live) = t.live.filter(|_| t.running() && !t.is_prune()) else {
                continue;
            };
            let status = t.status;
            if t.hook {
                let (phase, message) = hook_phase(live);
                self.set_result(t, status, Some(phase), message);
                continue;
            }
            match &live.health {
                None => self.set_result(t, status, Some(OperationPhase::Succeeded), None),
                Some(h) if h.status == HealthStatusCode::Healthy => {
                    self.set_result(t, status, Some(OperationPhase::Succeeded), h.message.clone())
                }
                Some(h) if h.status == HealthStatusCode::Degraded => {
                    self.set_result(t, status, Some(OperationPhase::Failed), h.message.clone())
                }
                Some(_) => {}
            }
        }
    }

    /// Step 2: a multi-step sync waits for running tasks; any sync waits for running hooks. A running task whose
    /// object stays missing from the live cache past [`MISSING_GRACE`] fails ("it might have been deleted").
    fn wait_for_running(&mut self, tasks: &mut [SyncTask<'_>]) -> Option<Step> {
        let multi_step = match (tasks.first(), tasks.last()) {
            (Some(first), Some(last)) => first.wave != last.wave || first.phase != last.phase,
            _ => false,
        };
        let running: Vec<usize> = (0..tasks.len())
            .filter(|&i| (multi_step || tasks[i].hook) && tasks[i].running())
            .collect();
        if running.is_empty() {
            return None;
        }
        let grace_over = self
            .plan
            .applied_at_ms
            .is_none_or(|at| self.now_ms.saturating_sub(at) >= MISSING_GRACE.as_millis() as i64);
        for &i in &running {
            let t = &mut tasks[i];
            if t.live.is_none() && grace_over {
                let msg = format!(
                    "Resource {}/{}/{} is missing, it might have been deleted",
                    t.key.group, t.key.kind, t.key.name
                );
                self.set_result(t, Some(ResultCode::SyncFailed), Some(OperationPhase::Error), Some(msg));
            }
        }
        let waiting: Vec<&SyncTask<'_>> = running.iter().map(|&i| &tasks[i]).collect();
        Some(self.wait(running_message(&waiting, false), WAIT_REQUEUE, Actions::default()))
    }

    /// Step 3: pruned objects still terminating.
    fn wait_for_terminating_prunes(&mut self, tasks: &[SyncTask<'_>]) -> Option<Step> {
        let terminating: Vec<&SyncTask<'_>> = tasks
            .iter()
            .filter(|t| t.status == Some(ResultCode::Pruned) && t.live_obj().is_some_and(is_terminating))
            .collect();
        if terminating.is_empty() {
            return None;
        }
        Some(self.wait(running_message(&terminating, true), WAIT_REQUEUE, Actions::default()))
    }

    /// The wave delay (`syncWaveHook`): a new group starts no earlier than `wave_delay` after the previous one.
    fn wave_delay(&mut self, phase: SyncPhase, wave: i64, actions: Actions) -> Option<Step> {
        let previous = self.st.step.as_ref()?;
        if previous.phase == phase && previous.wave == wave {
            return None;
        }
        let at = self.plan.applied_at_ms?;
        let due = at.saturating_add(self.input.wave_delay.as_millis() as i64);
        if self.now_ms >= due {
            return None;
        }
        let remaining = Duration::from_millis(due.saturating_sub(self.now_ms).max(0) as u64);
        Some(self.wait(
            format!(
                "waiting {}ms before sync wave {wave} of phase {phase:?}",
                remaining.as_millis()
            ),
            remaining,
            Actions {
                remove_finalizers: actions.remove_finalizers,
                ..Actions::default()
            },
        ))
    }

    /// `runTasks` for one group: prunes, then BeforeHookCreation deletions (the group stays pending while old
    /// instances go), then applies. Intents are recorded for every prune and apply.
    fn run_group(&mut self, run: &Run<'_, '_>, mut group: Vec<SyncTask<'_>>, actions: &mut Actions) -> GroupRun {
        let dry_run = run.sync.dry_run;
        let needs_confirmation: Vec<&SyncTask<'_>> = group
            .iter()
            .filter(|t| t.is_prune() && t.options.prune == PruneOption::Confirm)
            .collect();
        if !needs_confirmation.is_empty() && !self.input.prune_confirmed {
            let first = needs_confirmation[0];
            let mut msg = format!(
                "Waiting for pruning confirmation of {}/{}/{}",
                first
                    .obj()
                    .get("apiVersion")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                first.key.kind,
                first.key.name
            );
            if needs_confirmation.len() > 1 {
                msg.push_str(&format!(" and {} more resources", needs_confirmation.len() - 1));
            }
            return GroupRun::Blocked(msg);
        }
        for t in group.iter_mut().filter(|t| t.is_prune()) {
            self.plan_prune(run, t, dry_run, actions);
        }
        if !dry_run {
            let old: Vec<&SyncTask<'_>> = group.iter().filter(|t| t.delete_before_creation()).collect();
            if !old.is_empty() {
                actions.delete = old
                    .iter()
                    .map(|t| delete_action(t, DeleteReason::BeforeHookCreation, run.opts.prune_propagation))
                    .collect();
                self.st.message = Some(running_message(&old, true));
                return GroupRun::DeletingHooks;
            }
        }
        for t in group.iter_mut().filter(|t| !t.is_prune()) {
            actions.apply.push(apply_action(t, run.force, dry_run));
            self.set_result(t, None, Some(OperationPhase::Running), None);
        }
        GroupRun::Applying
    }

    /// `pruneObject`: decide a prune without I/O where Argo CD needs none, else record an intent.
    fn plan_prune(&mut self, run: &Run<'_, '_>, t: &mut SyncTask<'_>, dry_run: bool, actions: &mut Actions) {
        let done = |code, msg: &str| Some((code, msg.to_string()));
        let decided = if !run.sync.prune {
            done(ResultCode::PruneSkipped, "ignored (requires pruning)")
        } else if t.options.prune == PruneOption::Disabled {
            done(ResultCode::PruneSkipped, "ignored (no prune)")
        } else if let Some(g) = self.guard(t) {
            Some((ResultCode::PruneSkipped, g.message(t.obj())))
        } else if dry_run {
            done(ResultCode::Pruned, "pruned (dry run)")
        } else if t.live_obj().is_some_and(is_terminating) {
            done(ResultCode::Pruned, "pruned")
        } else {
            None
        };
        match decided {
            Some((code, msg)) => self.set_result(t, Some(code), Some(OperationPhase::Succeeded), Some(msg)),
            None => {
                actions.prune.push(PruneAction {
                    id: t.result_key(),
                    target: ObjectRef::of(t.obj()),
                    propagation: run.opts.prune_propagation,
                    record: record_of(t),
                });
                self.set_result(t, None, Some(OperationPhase::Running), Some(PRUNE_INTENT.into()));
            }
        }
    }

    /// The self-protection guard that holds `t`'s live object back from a prune, if any.
    fn guard(&self, t: &SyncTask<'_>) -> Option<Guard> {
        let ctx = &self.input.ctx;
        let who = Protection {
            operator_namespace: ctx.operator_namespace,
            app_namespace: ctx.app_namespace,
            app_name: ctx.app_name,
        };
        protect::guard(&who, t.obj(), Removal::Prune(t.options.prune))
    }

    /// Step 5 (`executeSyncFailPhase`): fail, after running the SyncFail hooks if there are any.
    fn fail(
        &mut self,
        run: &Run<'_, '_>,
        mut sync_fail: Vec<SyncTask<'_>>,
        tasks: &[SyncTask<'_>],
        mut actions: Actions,
    ) -> Step {
        let apply_failed = tasks.iter().any(|t| t.status == Some(ResultCode::SyncFailed));
        let base = if apply_failed && sync_fail.is_empty() {
            "one or more objects failed to apply"
        } else {
            "one or more synchronization tasks completed unsuccessfully"
        };
        let reasons: Vec<&str> = tasks
            .iter()
            .filter(|t| t.status == Some(ResultCode::SyncFailed))
            .filter_map(|t| t.message.as_deref())
            .collect();
        let mut message = with_reasons(base, &reasons);
        if sync_fail.is_empty() {
            return self.finish_with(OperationPhase::Failed, &message, actions);
        }
        if sync_fail.iter().all(SyncTask::completed) {
            let failed: Vec<&str> = sync_fail
                .iter()
                .filter(|t| t.status == Some(ResultCode::SyncFailed) || !t.successful())
                .filter_map(|t| t.message.as_deref())
                .collect();
            if sync_fail.iter().any(|t| !t.successful()) {
                message = format!(
                    "{message}\n{}",
                    with_reasons("one or more SyncFail hooks failed", &failed)
                );
            }
            return self.finish_with(OperationPhase::Failed, &message, actions);
        }
        let pending: Vec<SyncTask<'_>> = sync_fail.drain(..).filter(|t| t.pending()).collect();
        let waiting_msg = running_message(&pending.iter().collect::<Vec<_>>(), false);
        let mut group_actions = Actions::default();
        match self.run_group(run, pending, &mut group_actions) {
            GroupRun::Blocked(reason) => return self.wait(reason, WAIT_REQUEUE, actions),
            GroupRun::DeletingHooks | GroupRun::Applying => {}
        }
        actions.delete.extend(group_actions.delete);
        actions.apply = group_actions.apply;
        self.st.phase = OperationPhase::Running;
        self.st.message = Some(truncate(&waiting_msg, MAX_MESSAGE_CHARS));
        self.plan.applied_at_ms = Some(self.now_ms);
        Step::SyncFail { actions }
    }

    /// `Terminate`: remove hook finalizers, delete running hooks (and completed ones due for deletion on failure),
    /// and fail the operation.
    fn terminate(&mut self, set: TaskSet<'_>) -> Step {
        let mut tasks = set.tasks;
        self.enrich(&mut tasks);
        let mut actions = Actions {
            remove_finalizers: tasks
                .iter()
                .filter(|t| t.hook && t.live_obj().is_some_and(has_hook_finalizer))
                .map(|t| ObjectRef::of(t.obj()))
                .collect(),
            ..Actions::default()
        };
        for t in tasks.iter_mut().filter(|t| t.hook && t.running()) {
            let Some(live) = t.live else {
                let status = t.status;
                self.set_result(t, status, Some(OperationPhase::Succeeded), Some("Terminated".into()));
                continue;
            };
            let (phase, message) = hook_phase(live);
            if phase == OperationPhase::Running || t.delete_on_failure() {
                actions
                    .delete
                    .push(delete_action(t, DeleteReason::Terminated, Propagation::Foreground));
            }
            let status = t.status;
            if is_completed(phase) {
                self.set_result(t, status, Some(phase), message);
            } else {
                self.set_result(t, status, Some(OperationPhase::Failed), Some("Terminated".into()));
            }
        }
        let message = super::termination::final_message(&self.st);
        self.finish_with(OperationPhase::Failed, &message, actions)
    }

    // --- endings -----------------------------------------------------------------------------

    fn wait(&mut self, reason: String, requeue_after: Duration, actions: Actions) -> Step {
        self.st.phase = OperationPhase::Running;
        self.st.message = Some(truncate(&reason, MAX_MESSAGE_CHARS));
        Step::Wait {
            reason,
            requeue_after,
            actions,
        }
    }

    fn finish(&mut self, phase: OperationPhase, message: &str) -> Step {
        self.finish_with(phase, message, Actions::default())
    }

    fn finish_with(&mut self, phase: OperationPhase, message: &str, actions: Actions) -> Step {
        let message = truncate(message, MAX_MESSAGE_CHARS);
        self.st.phase = phase;
        self.st.message = Some(message.clone());
        self.st.finished_at = Some(Time(self.input.now));
        Step::Done {
            phase,
            message,
            record_history: record_history(&self.st),
            actions,
        }
    }

    fn done_as_is(&self) -> Step {
        Step::Done {
            phase: self.st.phase,
            message: self.st.message.clone().unwrap_or_default(),
            record_history: record_history(&self.st),
            actions: Actions::default(),
        }
    }
}

/// The per-operation settings of one iteration.
struct Run<'o, 'a> {
    sync: &'o SyncOperation,
    opts: &'o AppOptions,
    force: bool,
    tasks: Vec<SyncTask<'a>>,
}

fn run_with<'o, 'a>(sync: &'o SyncOperation, opts: &'o AppOptions, force: bool) -> Run<'o, 'a> {
    Run {
        sync,
        opts,
        force,
        tasks: Vec::new(),
    }
}

enum GroupRun {
    /// Prune confirmation is missing: nothing runs.
    Blocked(String),
    /// Previous hook instances are being deleted; applies wait for the next step.
    DeletingHooks,
    /// Prunes and applies planned.
    Applying,
}

/// History is recorded for successful, complete (not selective), real (not dry-run) syncs.
fn record_history(st: &OperationState) -> bool {
    let sync = st.operation.sync.as_ref();
    st.phase == OperationPhase::Succeeded && sync.is_some_and(|s| !s.dry_run && s.resources.is_empty())
}

fn sync_force(sync: &SyncOperation) -> bool {
    sync.sync_strategy
        .as_ref()
        .is_some_and(|s| s.apply.as_ref().or(s.hook.as_ref()).is_some_and(|o| o.force))
}

fn is_in_sync(t: &SyncTask<'_>) -> bool {
    t.target.is_some() && t.live.is_some_and(|l| l.in_sync)
}

fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null())
}

/// `getOperationPhase`: a hook's phase from its health. No health → Succeeded; Unknown/Degraded → Failed;
/// Progressing/Suspended → Running; Healthy → Succeeded.
pub(super) fn hook_phase(live: &LiveObject) -> (OperationPhase, Option<String>) {
    let created = Some(format!("{} created", object::name(&live.object)));
    let Some(h) = &live.health else {
        return (OperationPhase::Succeeded, created);
    };
    let phase = match h.status {
        HealthStatusCode::Unknown | HealthStatusCode::Degraded => OperationPhase::Failed,
        HealthStatusCode::Progressing | HealthStatusCode::Suspended => OperationPhase::Running,
        HealthStatusCode::Healthy => OperationPhase::Succeeded,
        HealthStatusCode::Missing => return (OperationPhase::Succeeded, created),
    };
    (phase, h.message.clone())
}

/// `setRunningPhase`: "waiting for healthy state of apps/Deployment/web and 2 more resources".
fn running_message(tasks: &[&SyncTask<'_>], deletion: bool) -> String {
    let Some(first) = tasks.first() else {
        return "one or more tasks are running".into();
    };
    let (waiting_for, more) = match (deletion, first.hook) {
        (true, _) => ("deletion of", if first.hook { "hooks" } else { "resources" }),
        (false, true) => ("completion of hook", "hooks"),
        (false, false) => ("healthy state of", "resources"),
    };
    let mut msg = format!(
        "waiting for {waiting_for} {}/{}/{}",
        first.key.group, first.key.kind, first.key.name
    );
    if tasks.len() > 1 {
        msg.push_str(&format!(" and {} more {more}", tasks.len() - 1));
    }
    msg
}

fn with_reasons(message: &str, reasons: &[&str]) -> String {
    if reasons.is_empty() {
        message.to_string()
    } else {
        format!("{message}, reason: {}", reasons.join(","))
    }
}

fn completed_hook_finalizers(tasks: &[SyncTask<'_>]) -> Vec<ObjectRef> {
    tasks
        .iter()
        .filter(|t| t.hook && t.completed() && t.live_obj().is_some_and(has_hook_finalizer))
        .map(|t| ObjectRef::of(t.live_obj().unwrap_or(&Value::Null)))
        .collect()
}

/// Apply mode: `Replace=true` creates or replaces, except CRDs and Namespaces (replacing those would delete every
/// instance or everything inside); otherwise server-side apply with field manager `capstan`, forcing conflicts.
pub fn apply_mode(t: &SyncTask<'_>, force: bool) -> ApplyMode {
    let protected =
        t.target.as_ref().is_some_and(order::is_crd) || (t.key.kind == "Namespace" && t.key.group.is_empty());
    if t.options.replace && !protected {
        if t.live.is_some() {
            ApplyMode::Replace {
                force: force || t.options.force,
            }
        } else {
            ApplyMode::Create
        }
    } else {
        ApplyMode::ServerSideApply {
            force_conflicts: true,
            field_manager: FIELD_MANAGER,
        }
    }
}

fn apply_action(t: &SyncTask<'_>, force: bool, dry_run: bool) -> ApplyAction {
    ApplyAction {
        id: t.result_key(),
        object: t.target.clone().unwrap_or(Value::Null),
        mode: apply_mode(t, force),
        dry_run,
        skip_dry_run_if_missing: t.skip_dry_run_if_missing,
        validate: t.options.validate,
        server_validation: t.options.server_validation,
        track: t.track,
        hook: t.hook,
        record: record_of(t),
    }
}

/// The deletes of finished hooks whose delete policy says so: `(HookSucceeded, HookFailed)`.
fn finished_hook_deletes(tasks: &[SyncTask<'_>], propagation: Propagation) -> (Vec<DeleteAction>, Vec<DeleteAction>) {
    let (mut on_success, mut on_failure) = (Vec::new(), Vec::new());
    for t in tasks.iter().filter(|t| t.hook && !t.running()) {
        if t.delete_on_success() {
            on_success.push(delete_action(t, DeleteReason::HookSucceeded, propagation));
        }
        if t.delete_on_failure() {
            on_failure.push(delete_action(t, DeleteReason::HookFailed, propagation));
        }
    }
    (on_success, on_failure)
}

fn delete_action(t: &SyncTask<'_>, reason: DeleteReason, propagation: Propagation) -> DeleteAction {
    DeleteAction {
        id: t.result_key(),
        target: ObjectRef::of(t.live_obj().unwrap_or(t.obj())),
        reason,
        propagation,
        record: record_of(t),
    }
}

/// The result row of a task in its current state.
fn record_of(t: &SyncTask<'_>) -> ResourceResult {
    ResourceResult {
        group: t.key.group.clone(),
        version: t.version.clone(),
        kind: t.key.kind.clone(),
        namespace: t.key.namespace.clone(),
        name: t.key.name.clone(),
        status: t.status,
        message: t.message.clone(),
        hook_type: t.hook_type(),
        hook_phase: t.op_phase,
        sync_phase: Some(t.phase),
        sync_wave: Some(t.wave),
    }
}

fn row_key(r: &ResourceResult) -> String {
    let key = ObjectKey::new(&r.group, &r.kind, &r.namespace, &r.name);
    tasks::result_key(&key, r.sync_phase.unwrap_or_default())
}

/// Whether `r` is the row of object `key` in `phase` (the row `tasks::result_key` names), field by field: rows
/// are found by a scan on every result update, and formatting a key per row made a 500-object sync spend more
/// time in that scan than in its 500 API requests.
fn is_row_of(r: &ResourceResult, key: &ObjectKey, phase: SyncPhase) -> bool {
    r.name == key.name
        && r.kind == key.kind
        && r.namespace == key.namespace
        && r.group == key.group
        && r.sync_phase.unwrap_or_default() == phase
}

/// Whether two rows are about the same object in the same sync phase (`is_row_of` for a row).
fn same_row(a: &ResourceResult, b: &ResourceResult) -> bool {
    a.name == b.name
        && a.kind == b.kind
        && a.namespace == b.namespace
        && a.group == b.group
        && a.sync_phase.unwrap_or_default() == b.sync_phase.unwrap_or_default()
}

/// An action recorded before it ran: running, with no result code yet.
fn is_intent(r: &ResourceResult) -> bool {
    r.status.is_none() && r.hook_phase == Some(OperationPhase::Running)
}

/// A prune intent: an intent row with the message `pruning` (written by `plan_prune`).
fn is_prune_row(r: &ResourceResult) -> bool {
    r.message.as_deref() == Some(PRUNE_INTENT)
}

const PRUNE_INTENT: &str = "pruning";

// ---------------------------------------------------------------------------------------------
// record_outcome

/// Fold the executor's [`Outcome`] of `out.step` into the state `out` recorded before executing it; persist the
/// result. Intents of executed actions become results, intents of actions that did not run go back to pending, a
/// failed dry run refuses the sync, and a final group that fully succeeded completes the operation
/// ("successfully synced (all tasks run)").
pub fn record_outcome(out: &StepOutput, outcome: &Outcome, now: Timestamp) -> (OperationState, PlanState) {
    let mut st = out.state.clone();
    let mut plan = out.plan_state.clone();
    let dry_run_op = st.operation.sync.as_ref().is_some_and(|s| s.dry_run);
    let rows = &mut st
        .sync_result
        .get_or_insert_with(SyncOperationResult::default)
        .resources;
    match &out.step {
        Step::Validate { actions } => {
            plan.validated = true;
            let mut failures = Vec::new();
            for a in &actions.apply {
                if let Some(Err(e)) = outcome.applied.get(&a.id) {
                    let msg = truncate(e, MAX_MESSAGE_CHARS);
                    upsert(
                        rows,
                        &a.record,
                        Some(ResultCode::SyncFailed),
                        Some(OperationPhase::Failed),
                        Some(msg.clone()),
                    );
                    failures.push(msg);
                }
            }
            if !failures.is_empty() {
                let refs: Vec<&str> = failures.iter().map(String::as_str).collect();
                complete(
                    &mut st,
                    OperationPhase::Failed,
                    &with_reasons("one or more objects failed to apply (dry run)", &refs),
                    now,
                );
            }
        }
        Step::Run {
            actions, final_group, ..
        } => {
            let all_ok = record_actions(rows, actions, outcome, dry_run_op);
            if *final_group && all_ok {
                complete(
                    &mut st,
                    OperationPhase::Succeeded,
                    "successfully synced (all tasks run)",
                    now,
                );
            }
        }
        Step::SyncFail { actions } => {
            record_actions(rows, actions, outcome, dry_run_op);
        }
        Step::Wait { .. } | Step::Done { .. } => {}
    }
    (st, plan)
}

/// Record apply, prune and hook-deletion results; true when every action ran and succeeded.
fn record_actions(rows: &mut Vec<ResourceResult>, actions: &Actions, outcome: &Outcome, dry_run_op: bool) -> bool {
    let mut all_ok = true;
    for a in &actions.prune {
        let done = (ResultCode::Pruned, OperationPhase::Succeeded);
        all_ok &= record_result(rows, &a.record, outcome.pruned.get(&a.id), done, |_| "pruned".into());
    }
    for a in &actions.delete {
        match outcome.deleted.get(&a.id) {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                all_ok = false;
                let msg = format!("failed to delete resource: {e}");
                upsert(rows, &a.record, a.record.status, Some(OperationPhase::Error), Some(msg));
            }
            None => all_ok = false,
        }
    }
    let running = if dry_run_op {
        OperationPhase::Succeeded
    } else {
        OperationPhase::Running
    };
    for a in &actions.apply {
        let done = (ResultCode::Synced, running);
        all_ok &= record_result(rows, &a.record, outcome.applied.get(&a.id), done, str::to_string);
    }
    all_ok
}

/// Records the result of one prune or apply: `done` with `message(server's message)` when it succeeded,
/// `SyncFailed`/`Failed` with the error when it failed, the intent reverted when it did not run. True
/// only when it ran and succeeded.
fn record_result(
    rows: &mut Vec<ResourceResult>,
    record: &ResourceResult,
    result: Option<&Result<String, String>>,
    (code, phase): (ResultCode, OperationPhase),
    message: impl FnOnce(&str) -> String,
) -> bool {
    match result {
        Some(Ok(msg)) => {
            upsert(rows, record, Some(code), Some(phase), Some(message(msg)));
            true
        }
        Some(Err(e)) => {
            let failed = (Some(ResultCode::SyncFailed), Some(OperationPhase::Failed));
            upsert(rows, record, failed.0, failed.1, Some(e.clone()));
            false
        }
        None => {
            revert_intent(rows, record);
            false
        }
    }
}

fn complete(st: &mut OperationState, phase: OperationPhase, message: &str, now: Timestamp) {
    st.phase = phase;
    st.message = Some(truncate(message, MAX_MESSAGE_CHARS));
    st.finished_at = Some(Time(now));
}

fn upsert(
    rows: &mut Vec<ResourceResult>,
    record: &ResourceResult,
    status: Option<ResultCode>,
    phase: Option<OperationPhase>,
    message: Option<String>,
) {
    let message = message
        .filter(|m| !m.is_empty())
        .map(|m| truncate(&m, MAX_MESSAGE_CHARS));
    match rows.iter_mut().find(|r| same_row(r, record)) {
        Some(r) => {
            r.status = status;
            r.hook_phase = phase;
            if message.is_some() {
                r.message = message;
            }
        }
        None => rows.push(ResourceResult {
            status,
            hook_phase: phase,
            message: message.or_else(|| record.message.clone()),
            ..record.clone()
        }),
    }
}

/// An action that did not run: its intent row goes away, the task is pending again.
fn revert_intent(rows: &mut Vec<ResourceResult>, record: &ResourceResult) {
    rows.retain(|r| !(same_row(r, record) && is_intent(r)));
}

// ---------------------------------------------------------------------------------------------
// automated sync

/// Argo CD's `autoSync` guard: with automated prune and without `allowEmpty`, a sync that would prune every
/// resource is refused (condition `SyncError`). `resources` is the comparison's `status.resources`.
pub fn automated_sync_refusal(sync_policy: &SyncPolicy, resources: &[ResourceStatus]) -> Option<String> {
    let auto = sync_policy.automated.as_ref().filter(|a| a.enabled != Some(false))?;
    if auto.prune && !auto.allow_empty && resources.iter().all(|r| r.requires_pruning) {
        return Some("auto-sync will wipe out all resources".into());
    }
    None
}
