//! One sync step: builds the planner's input, asks `engine::plan::next_step` for the next (phase, wave)
//! step, persists the write-ahead state, executes the step's actions and folds the outcome back with
//! `record_outcome` (the persistence contract of `engine::plan`):
//!
//! 1. persist `StepOutput::state` (intents recorded) BEFORE executing anything that changes the
//!    cluster — so a restart resumes at the wave that was running and never re-runs a finished hook;
//! 2. execute through [`super::executor`] (the check before the first write through
//!    [`super::validation`]: client-side against the cluster's schemas, dry runs for the rest);
//! 3. `record_outcome`, and the caller persists the result with the reconcile's status patch.
//!
//! [`PlanState`] lives in `operationState.step.{validated, appliedAtMs}`.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::application::{Operation, OperationPhase, OperationState, SyncOperationResult, SyncPolicy, SyncStep};
use crate::cluster::ClusterHandle;
use crate::controllers::Error;
use crate::engine::plan::{self, LiveObject, PlanContext, PlanState, ScopeLookup, Step, StepInput, StepOutput};
use crate::text::truncate;

use super::compare::LiveView;
use super::executor::{self, Owner};
use super::validation;

/// What a step did.
#[derive(Clone, Debug)]
pub struct StepResult {
    /// The operation state to persist.
    pub state: OperationState,
    /// The step that was decided (for requeue, history and events).
    pub step: Step,
    /// After a step that only applied objects: the objects as the server stored them, so the
    /// comparison can see the result at once. Empty after any step that pruned or deleted.
    pub applied: Vec<Value>,
}

/// Everything a step is decided from (borrowed from the reconcile).
#[derive(Clone, Copy)]
pub struct StepArgs<'a> {
    /// Namespace and name of the Application.
    pub owner: Owner<'a>,
    /// Destination namespace.
    pub destination_namespace: &'a str,
    /// The commit being synced.
    pub revision: &'a str,
    /// Rendered objects at that commit (empty when `rendered` is false).
    pub desired: &'a [Value],
    /// Live objects with health and diff verdicts.
    pub live: &'a [LiveObject],
    /// The live view (scopes, completeness).
    pub view: &'a LiveView,
    /// The live destination namespace, when `CreateNamespace=true`.
    pub namespace_live: Option<&'a LiveObject>,
    /// The operation.
    pub operation: &'a Operation,
    /// `spec.syncPolicy`.
    pub sync_policy: Option<&'a SyncPolicy>,
    /// The persisted state (`None` starts the operation).
    pub state: Option<&'a OperationState>,
    /// Delay between waves.
    pub wave_delay: Duration,
    /// The manifests were rendered at `revision`.
    pub rendered: bool,
    /// `Prune=confirm` approved.
    pub prune_confirmed: bool,
}

struct Scopes<'a>(&'a LiveView);

impl ScopeLookup for Scopes<'_> {
    fn is_namespaced(&self, group: &str, kind: &str) -> Option<bool> {
        self.0.namespaced(group, kind)
    }
}

/// The planner's decision for `args` (pure).
pub fn decide(args: &StepArgs<'_>, now: Timestamp) -> StepOutput {
    let scopes = Scopes(args.view);
    let plan_state = args.state.and_then(plan_state_of);
    let input = StepInput {
        ctx: PlanContext {
            app_namespace: args.owner.namespace,
            app_name: args.owner.name,
            operator_namespace: args.owner.operator_namespace,
            destination_namespace: args.destination_namespace,
            revision: args.revision,
            scope: &scopes,
        },
        desired: args.desired,
        live: args.live,
        namespace_live: args.namespace_live,
        operation: args.operation,
        sync_policy: args.sync_policy,
        state: args.state,
        plan_state: plan_state.as_ref(),
        now,
        wave_delay: args.wave_delay,
        rendered: args.rendered,
        live_cache_complete: args.view.complete,
        prune_confirmed: args.prune_confirmed,
    };
    plan::next_step(&input)
}

/// Decides, persists (write-ahead), executes and records one step. `persist` writes an operation
/// state to `status.operationState`; it is called only when the step changes the cluster.
///
/// A passed validation (a dry run: nothing changed, nothing persisted) is followed at once by the
/// first real step, decided from the same inputs and the validated state, instead of a requeue and
/// a second full reconcile that would compute the same thing.
pub async fn run<F, Fut>(cluster: &ClusterHandle, args: &StepArgs<'_>, persist: F) -> Result<StepResult, Error>
where
    F: FnOnce(OperationState) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let out = decide(args, Timestamp::now());
    if !matches!(out.step, Step::Validate { .. }) {
        return execute(cluster, args, out, persist).await;
    }
    let validated = execute(cluster, args, out, |_| async { Ok(()) }).await?;
    if is_completed(&validated.state) {
        return Ok(validated);
    }
    let next = StepArgs {
        state: Some(&validated.state),
        ..*args
    };
    let out = decide(&next, Timestamp::now());
    execute(cluster, &next, out, persist).await
}

/// Persists (unless the step is a dry-run validation), executes and records a decided step.
async fn execute<F, Fut>(
    cluster: &ClusterHandle,
    args: &StepArgs<'_>,
    out: plan::StepOutput,
    persist: F,
) -> Result<StepResult, Error>
where
    F: FnOnce(OperationState) -> Fut,
    Fut: Future<Output = Result<(), Error>>,
{
    let acts = out.step.actions();
    let mutating = !(acts.prune.is_empty()
        && acts.delete.is_empty()
        && acts.apply.is_empty()
        && acts.delete_on_success.is_empty());
    if !mutating {
        if !acts.remove_finalizers.is_empty() {
            executor::execute(cluster, args.owner, acts).await;
        }
        let state = with_step(out.state.clone(), &out.plan_state, &out.step, args.state);
        return Ok(StepResult {
            state,
            step: out.step,
            applied: Vec::new(),
        });
    }
    let dry_validation = matches!(out.step, Step::Validate { .. });
    if !dry_validation {
        persist(with_step(out.state.clone(), &out.plan_state, &out.step, args.state)).await?;
    }
    let outcome = if dry_validation {
        // Boxed: the check holds an executor of its own (for its dry runs) beside the schema lookups, and inline
        // it would double the executor's share of every reconcile future (a test driving a reconcile on its
        // own thread's stack overflowed it in a debug build).
        Box::pin(validation::validate(cluster, args.owner, acts)).await
    } else {
        executor::execute(cluster, args.owner, acts).await
    };
    let (state, mut plan_state) = plan::record_outcome(&out, &outcome, Timestamp::now());
    if matches!(out.step, Step::Run { .. }) {
        plan_state.applied_at_ms = Some(Timestamp::now().as_millisecond());
    }
    let state = with_step(state, &plan_state, &out.step, args.state);
    let only_applies = acts.prune.is_empty() && acts.delete.is_empty() && acts.delete_on_success.is_empty();
    let applied = if only_applies { outcome.live } else { Vec::new() };
    Ok(StepResult {
        state,
        step: out.step,
        applied,
    })
}

/// The [`PlanState`] persisted in `operationState.step`.
pub fn plan_state_of(op: &OperationState) -> Option<PlanState> {
    op.step.as_ref().map(|s| PlanState {
        validated: s.validated,
        applied_at_ms: s.applied_at_ms,
    })
}

/// `state` with `operationState.step` set from the plan state and the step's (phase, wave).
pub fn with_step(
    mut state: OperationState,
    plan_state: &PlanState,
    step: &Step,
    previous: Option<&OperationState>,
) -> OperationState {
    let prev = previous.and_then(|p| p.step.clone()).unwrap_or_default();
    let (phase, wave) = match step {
        Step::Run { phase, wave, .. } => (*phase, *wave),
        _ => (prev.phase, prev.wave),
    };
    state.step = if matches!(
        state.phase,
        OperationPhase::Succeeded | OperationPhase::Failed | OperationPhase::Error
    ) {
        None
    } else {
        Some(SyncStep {
            phase,
            wave,
            validated: plan_state.validated,
            applied_at_ms: plan_state.applied_at_ms,
        })
    };
    state
}

/// A retry of a failed operation: the same operation, started afresh with `retryCount + 1`.
pub fn restart(failed: &OperationState, now: Timestamp) -> OperationState {
    OperationState {
        operation: failed.operation.clone(),
        phase: OperationPhase::Running,
        message: Some(format!("Retrying attempt #{}", failed.retry_count.unwrap_or(0) + 1)),
        sync_result: None,
        step: None,
        started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now)),
        finished_at: None,
        retry_count: Some(failed.retry_count.unwrap_or(0) + 1),
    }
}

/// `syncPolicy.retry.refresh`: a failed operation pinned to a commit that is no longer the target is
/// retried at once with `latest` instead of waiting for its backoff to retry the old commit. `None`
/// when the strategy does not ask for it, the operation syncs another source (a rollback), or the
/// commit is still the target.
pub fn refresh_retry(failed: &OperationState, latest: &str, now: Timestamp) -> Option<OperationState> {
    let strategy = failed.operation.retry.as_ref()?;
    let sync = failed.operation.sync.as_ref()?;
    let pinned = sync.revision.as_deref()?;
    if !strategy.refresh || sync.source.is_some() || pinned == latest || latest.is_empty() {
        return None;
    }
    let mut next = restart(failed, now);
    if let Some(s) = next.operation.sync.as_mut() {
        s.revision = Some(latest.to_string());
    }
    next.message = Some(format!(
        "Retrying attempt #{} with the new revision {}",
        next.retry_count.unwrap_or(1),
        crate::text::short_sha(latest)
    ));
    Some(next)
}

/// The end of an operation that cannot have a writer (its ServiceAccount is missing or not a valid name,
/// or looking it up failed; see `identity::writer`): `Error` with `why`, nothing (more) applied or pruned.
/// Left waiting instead, a requested operation would stay pending, unexplained in `operationState`, until
/// someone created the ServiceAccount.
pub fn without_writer(args: &StepArgs<'_>, why: &str, now: Timestamp) -> StepResult {
    let mut state = args.state.cloned().unwrap_or_else(|| OperationState {
        operation: args.operation.clone(),
        sync_result: Some(SyncOperationResult {
            revision: args.revision.to_string(),
            source: args.operation.sync.as_ref().and_then(|s| s.source.clone()),
            resources: Vec::new(),
        }),
        started_at: Some(Time(now)),
        ..OperationState::default()
    });
    let message = truncate(
        &format!("{why}; nothing (more) was applied or pruned"),
        plan::MAX_MESSAGE_CHARS,
    );
    state.phase = OperationPhase::Error;
    state.message = Some(message.clone());
    state.finished_at = Some(Time(now));
    state.step = None;
    StepResult {
        state,
        step: Step::Done {
            phase: OperationPhase::Error,
            message,
            record_history: false,
            actions: Default::default(),
        },
        applied: Vec::new(),
    }
}

/// Whether an operation state is finished.
pub fn is_completed(op: &OperationState) -> bool {
    matches!(
        op.phase,
        OperationPhase::Succeeded | OperationPhase::Failed | OperationPhase::Error
    )
}

#[cfg(test)]
mod retry_tests {
    use super::*;
    use crate::api::application::{RetryStrategy, SyncOperation};

    fn failed_at(revision: &str, refresh: bool) -> OperationState {
        OperationState {
            operation: Operation {
                sync: Some(SyncOperation {
                    revision: Some(revision.into()),
                    ..SyncOperation::default()
                }),
                retry: Some(RetryStrategy {
                    limit: Some(5),
                    refresh,
                    ..RetryStrategy::default()
                }),
                ..Operation::default()
            },
            phase: OperationPhase::Failed,
            retry_count: Some(1),
            ..OperationState::default()
        }
    }

    #[test]
    fn refresh_restarts_a_failed_retry_on_the_new_commit_only_when_asked() {
        let now = Timestamp::from_second(100).unwrap();
        let next = refresh_retry(&failed_at("aaaaaaaa", true), "bbbbbbbbb", now).expect("a restart");
        assert_eq!(next.phase, OperationPhase::Running);
        assert_eq!(
            next.operation.sync.as_ref().and_then(|s| s.revision.as_deref()),
            Some("bbbbbbbbb")
        );
        assert_eq!(next.retry_count, Some(2));
        assert_eq!(
            next.message.as_deref(),
            Some("Retrying attempt #2 with the new revision bbbbbbb")
        );
        assert!(
            refresh_retry(&failed_at("aaaaaaaa", false), "bbbbbbbbb", now).is_none(),
            "not asked"
        );
        assert!(
            refresh_retry(&failed_at("aaaaaaaa", true), "aaaaaaaa", now).is_none(),
            "same commit"
        );
        let mut rollback = failed_at("aaaaaaaa", true);
        if let Some(s) = rollback.operation.sync.as_mut() {
            s.source = Some(Default::default());
        }
        assert!(refresh_retry(&rollback, "bbbbbbbbb", now).is_none(), "another source");
    }
}
