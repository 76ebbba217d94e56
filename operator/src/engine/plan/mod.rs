//! Sync planning: the pure half of Argo CD's sync engine (gitops-engine `pkg/sync`), written as a resumable step
//! function. The I/O half (apply, delete, patch) lives in `cluster`; the controller glues the two together and
//! persists the operation state in `status.operationState` between steps.
//!
//! # Vocabulary
//!
//! - **Task**: apply one desired object, run one hook in one phase, or prune one live object ([`tasks`]).
//! - **Phase**: PreSync → Sync → PostSync; SyncFail runs only when the sync fails.
//! - **Wave**: `argocd.argoproj.io/sync-wave` (or `capstan.dev/sync-wave`, or `helm.sh/hook-weight` for Helm
//!   hooks), default 0. Tasks run by (phase, wave), then kind order, then name ([`order`]).
//! - **Hook**: an object annotated `hook: PreSync|Sync|PostSync|SyncFail` (or a Helm hook). It is created, then
//!   waited on until it completes; `hook-delete-policy` (default `BeforeHookCreation`) says when it is deleted.
//!
//! # How does it work together?
//!
//! Every call of [`next_step`] rebuilds the task set from the desired objects, the live objects and the
//! persisted `OperationState`, and decides the single next thing to do, as one `Sync()` iteration of
//! gitops-engine does:
//!
//! 1. refresh running tasks from what the caller observed: a hook's phase comes from its health (a Job or Pod
//!    completing), a resource is done when Healthy and failed when Degraded; kinds without health are done at once;
//! 2. if the sync is *multi-step* (its first and last task differ in phase or wave) and a task is still running, or
//!    any hook is running, wait;
//! 3. if pruned objects are still terminating, wait;
//! 4. completed hooks lose their finalizer and are collected for deletion per policy;
//! 5. if a task failed, delete the `HookFailed` hooks, run the SyncFail hooks, wait for them, and fail;
//! 6. keep the pending tasks (only the out-of-sync ones with `ApplyOutOfSyncOnly`); none left: delete the
//!    `HookSucceeded` hooks and succeed;
//! 7. run the first (phase, wave) group: prunes first, then `BeforeHookCreation` deletions (the group stays
//!    pending until the old instances are gone), then applies. Between groups the wave delay (2 s) elapses;
//! 8. when that group is the last one and holds no hook, the operation succeeds right after the apply, even if the
//!    objects turn Degraded later: a plain single-wave Application never waits for health.
//!
//! Before the first real step every task is validated once ([`Step::Validate`], dry-run applies; the controller
//! checks them against the cluster's published schemas and sends to the server only what it cannot decide); if
//! anything fails the sync is refused. Selective syncs (`operation.sync.resources`) run no hooks and are not recorded in
//! history; `dryRun` operations run every step as a dry run and change nothing.
//!
//! # The step contract (persistence)
//!
//! [`next_step`] returns a [`StepOutput`]: the [`Step`] to execute and the state to persist
//! (`OperationState` plus [`PlanState`]). The controller must:
//!
//! 1. **persist `StepOutput::state` and `StepOutput::plan_state` before executing the step.** This state is a
//!    write-ahead log: every apply and prune the step is about to perform is already recorded as an *intent*
//!    (a result row with `hookPhase: Running` and no `status`);
//! 2. execute the step's [`Actions`] in their documented order (see [`Actions`]) and collect an [`Outcome`];
//! 3. call [`record_outcome`] and **persist its result after executing**; it turns intents into results
//!    (`Synced`/`SyncFailed`/`Pruned`) and applies the success shortcut of rule 8;
//! 4. requeue after [`Step::requeue_after`] (or on a watch event) and call [`next_step`] again, until it returns
//!    [`Step::Done`].
//!
//! A process that dies between 1 and 3 leaves intents behind. The next [`next_step`] resolves them from the live
//! state: a hook intent whose object is live was created (its name is deterministic, see [`tasks::hook_name`]) and
//! is waited on, never deleted or created a second time; a hook intent whose object is absent, an apply intent of
//! a resource, and a prune intent are simply executed again — server-side apply, delete (NotFound = done) and
//! hook creation by a name that does not exist yet are idempotent. Finished hooks are never re-run: their result
//! rows say so. A restart therefore resumes at the wave that was running.
//!
//! The planner never prunes when the manifests could not be rendered, and waits (doing nothing) while the live
//! cache is incomplete; it only ever prunes live objects whose tracking annotation names this Application.

pub mod delete_hooks;
pub mod options;
pub mod order;
pub mod step;
pub mod tasks;
pub mod termination;

#[cfg(test)]
mod sim_tests;

use std::sync::Arc;

use serde_json::Value;

use crate::api::application::ResourceHealth;

pub use options::{AppOptions, Propagation, PruneOption, ResourceOptions};
pub use step::{
    automated_sync_refusal, next_step, record_outcome, Actions, ApplyAction, ApplyMode, DeleteAction, DeleteReason,
    ObjectRef, Outcome, PlanState, PruneAction, Step, StepInput, StepOutput, DEFAULT_WAVE_DELAY, FIELD_MANAGER,
};
pub use tasks::{build_tasks, shared_resources, ScopeLookup, SharedResource, SyncTask, TaskSet, TaskSetInput};

/// Finalizer put on hooks so a completed hook is not garbage-collected before its result is read; removed once
/// the hook completed (Argo CD's `argocd.argoproj.io/hook-finalizer`).
pub const HOOK_FINALIZER: &str = "capstan.dev/hook-finalizer";

/// Longest message kept in a result row or the operation message, in bytes (status stays small).
pub const MAX_MESSAGE_CHARS: usize = 512;

/// The Application being synced and where it goes.
pub struct PlanContext<'a> {
    /// Namespace of the Application.
    pub app_namespace: &'a str,
    /// Name of the Application.
    pub app_name: &'a str,
    /// The operator's own namespace (never pruned, see `engine::protect`).
    pub operator_namespace: &'a str,
    /// `spec.destination.namespace` (may be empty).
    pub destination_namespace: &'a str,
    /// The resolved revision being synced (commit SHA).
    pub revision: &'a str,
    /// Which kinds are namespaced.
    pub scope: &'a dyn ScopeLookup,
}

/// A live object and what the caller observed about it.
#[derive(Clone, Debug, PartialEq)]
pub struct LiveObject {
    /// The object as the cluster returned it, shared with the live cache (large Applications have
    /// thousands; a deep copy per reconcile was a large part of peak memory).
    pub object: Arc<Value>,
    /// Its health (computed with `engine::health`); `None` when the kind has no health check.
    pub health: Option<ResourceHealth>,
    /// The diff found live equal to desired (used by `ApplyOutOfSyncOnly`).
    pub in_sync: bool,
}

impl LiveObject {
    /// A live object without health and not known to be in sync.
    pub fn new(object: impl Into<Arc<Value>>) -> Self {
        LiveObject {
            object: object.into(),
            health: None,
            in_sync: false,
        }
    }
}
