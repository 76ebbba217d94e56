//! The operation choice (pure): which operation a reconcile advances, decided from what the earlier
//! steps found, with one `now` for every time comparison. No I/O, no `Result`: every rule is
//! table-tested (`choice/tests.rs`).
//!
//! In order, the first that applies decides:
//! 1. a **running operation** goes on (turned `Terminating` first when it ran past `--sync-timeout`);
//! 2. **PolicySets** not listed yet, or denying the rendered state: nothing new starts (a requested
//!    `operation` is refused and removed, with a `SyncDenied` event);
//! 3. a **requested `operation`** (sync or rollback): refused (rollback under automated sync),
//!    retried, removed once done, or started once `dependsOn` is ready;
//! 4. a **failed operation with a retry strategy**: restarted at the new commit (`retry.refresh`),
//!    restarted when its backoff is due, or waited for;
//! 5. nothing when the spec is invalid or the comparison failed;
//! 6. **automated sync** ([`auto_sync::decide`]), started once `dependsOn` is ready.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::auto_sync::{self, AutoDecision, AutoInput};
use super::dependencies::Verdict;
use super::findings::{DEPENDENCY_REQUEUE, POLICY_REQUEUE, WAIT_REQUEUE};
use super::status::{Compared, Problem};
use super::sync::{self, is_completed};
use crate::api::application::{Operation, OperationPhase, OperationState, RevisionHistory, SyncPolicy};
use crate::api::conditions::{REASON_DEPENDENCY_CYCLE, REASON_DEPENDENCY_NOT_READY};
use crate::engine::plan::termination;

/// What the PolicySets that apply allow.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyGate {
    /// Syncs may start.
    Open,
    /// The PolicySets have not been listed yet: no sync starts (fail closed), shown as a wait.
    Pending(Problem),
    /// A `Deny` PolicySet refuses the rendered state.
    Denied(Problem),
}

/// Everything the choice reads.
#[derive(Clone, Debug)]
pub struct ChoiceInput<'a> {
    /// `status.operationState`: the running or last operation.
    pub current: Option<&'a OperationState>,
    /// The requested `operation` (a manual sync or rollback).
    pub requested: Option<&'a Operation>,
    /// `status.history`.
    pub history: &'a [RevisionHistory],
    /// `spec.syncPolicy`.
    pub sync_policy: Option<&'a SyncPolicy>,
    /// `--sync-timeout` (`None`: never).
    pub sync_timeout: Option<Duration>,
    /// What the PolicySets allow.
    pub gate: &'a PolicyGate,
    /// The rendered target commit and its comparison; `None` when rendering or comparing failed.
    pub target: Option<(&'a str, &'a Compared)>,
    /// The spec cannot work (a namespace outside the Cluster's allow-list) or the comparison failed:
    /// no automated sync.
    pub blocked: bool,
    /// SelfHeal syncs already made at the target commit.
    pub self_heal_attempts: u32,
    /// `spec.dependsOn`.
    pub dependencies: &'a Verdict,
}

/// The operation to advance.
#[derive(Clone, Debug, Default, PartialEq)]
pub enum Next {
    /// None this reconcile.
    #[default]
    Nothing,
    /// The running operation, as it is to continue (possibly just marked `Terminating`).
    Continue(OperationState),
    /// A failed operation restarted: its new state.
    Retry(OperationState),
    /// A new operation. `self_heal` is set for automated syncs: whether it is a selfHeal sync (a
    /// sync of only the drifted resources after a completed one), for the selfHeal backoff.
    Start {
        /// The operation.
        operation: Operation,
        /// For automated syncs: whether it is a selfHeal sync.
        self_heal: Option<bool>,
    },
}

impl Next {
    /// The operation and its persisted state (`None` starts it), as the sync step takes them.
    pub fn into_step(self) -> Option<(Operation, Option<OperationState>)> {
        match self {
            Next::Nothing => None,
            Next::Continue(state) | Next::Retry(state) => Some((state.operation.clone(), Some(state))),
            Next::Start { operation, .. } => Some((operation, None)),
        }
    }
}

/// What the choice came to.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Choice {
    /// The operation to advance.
    pub next: Next,
    /// Look again within this long.
    pub requeue: Option<Duration>,
    /// A sync could not be started (condition `SyncError`).
    pub sync_error: Option<Problem>,
    /// Waiting for `dependsOn` (or the PolicySets), or a dependency cycle.
    pub dependency: Option<Problem>,
    /// Remove the requested `operation` (done or refused).
    pub clear_operation: bool,
    /// A requested sync was refused by PolicySets: the `SyncDenied` event's note.
    pub denied: Option<String>,
}

/// The operation choice (see the module doc).
pub fn choose(input: &ChoiceInput<'_>, now: Timestamp) -> Choice {
    let mut choice = Choice::default();
    if let Some(op) = input.current.filter(|o| !is_completed(o)) {
        choice.next = Next::Continue(running(op, input.sync_timeout, now));
        return choice;
    }
    match input.gate {
        PolicyGate::Open => {}
        PolicyGate::Pending(problem) => {
            choice.dependency = Some(problem.clone());
            choice.requeue = Some(WAIT_REQUEUE);
            return choice;
        }
        PolicyGate::Denied(problem) => {
            // A running operation went on above (it was allowed when it started); nothing new starts.
            if input.requested.is_some() {
                choice.denied = Some(format!("requested sync refused: {}", problem.message));
                choice.sync_error = Some(problem.clone());
                choice.clear_operation = true;
            }
            choice.requeue = Some(POLICY_REQUEUE);
            return choice;
        }
    }
    if let Some(requested) = input.requested {
        requested_operation(input, requested, now, &mut choice);
        return choice;
    }
    if let Some(last) = input.current.filter(|o| retryable(o)) {
        if retry(input, last, now, &mut choice) {
            return choice;
        }
    }
    if !input.blocked {
        automated(input, now, &mut choice);
    }
    choice
}

/// The running operation `op`, marked `Terminating` when it ran past the sync timeout.
fn running(op: &OperationState, sync_timeout: Option<Duration>, now: Timestamp) -> OperationState {
    let mut op = op.clone();
    if let Some(timeout) = sync_timeout {
        if termination::exceeded_timeout(&op, timeout, now) {
            termination::terminate_for_timeout(&mut op, timeout);
        }
    }
    op
}

/// A requested `operation`: refused (rollback with automated sync), finished already (removed, unless
/// a retry is due or pending), or started once `dependsOn` is ready.
fn requested_operation(input: &ChoiceInput<'_>, requested: &Operation, now: Timestamp, choice: &mut Choice) {
    let op = match requested.rollback.as_ref() {
        Some(rb) => match auto_sync::rollback_to_sync(requested, rb.id, input.history, input.sync_policy) {
            Ok(op) => op,
            Err(message) => {
                choice.sync_error = Some(Problem::new("RollbackRefused", message));
                choice.clear_operation = true;
                return;
            }
        },
        None => requested.clone(),
    };
    if let Some(done) = input.current.filter(|c| c.operation == op) {
        if retryable(done) {
            match retry_verdict(done, now) {
                RetryVerdict::Due => {
                    choice.next = Next::Retry(sync::restart(done, now));
                    return;
                }
                RetryVerdict::Wait(d) => {
                    choice.requeue = Some(d);
                    return;
                }
                RetryVerdict::Exhausted => {}
            }
        }
        choice.clear_operation = true;
        return;
    }
    if dependencies_ready(input, choice) {
        choice.next = Next::Start {
            operation: op,
            self_heal: None,
        };
    }
}

/// A failed operation with a retry strategy: restarted at the new target commit when it asks for
/// that, restarted when its backoff is due, or waited for. `false` when its retries are exhausted
/// (the choice goes on to automated sync).
fn retry(input: &ChoiceInput<'_>, last: &OperationState, now: Timestamp, choice: &mut Choice) -> bool {
    let verdict = retry_verdict(last, now);
    let latest = input.target.map(|(commit, _)| commit).unwrap_or_default();
    if !matches!(verdict, RetryVerdict::Exhausted) {
        if let Some(next) = sync::refresh_retry(last, latest, now) {
            choice.next = Next::Retry(next);
            return true;
        }
    }
    match verdict {
        RetryVerdict::Due => choice.next = Next::Retry(sync::restart(last, now)),
        RetryVerdict::Wait(d) => choice.requeue = Some(d),
        RetryVerdict::Exhausted => return false,
    }
    true
}

/// Automated sync at the target commit, once `dependsOn` is ready.
fn automated(input: &ChoiceInput<'_>, now: Timestamp, choice: &mut Choice) {
    let Some((commit, compared)) = input.target else {
        return;
    };
    let since_last = input
        .current
        .and_then(|o| o.finished_at.as_ref())
        .map(|t| Duration::from_millis((now.as_millisecond() - t.0.as_millisecond()).max(0) as u64));
    let decision = auto_sync::decide(&AutoInput {
        sync_policy: input.sync_policy,
        sync: compared.sync,
        revision: commit,
        resources: &compared.resources,
        last: input.current,
        self_heal_attempts: input.self_heal_attempts,
        since_last,
    });
    match decision {
        AutoDecision::Idle => {}
        AutoDecision::Backoff(d) => choice.requeue = Some(d),
        AutoDecision::AlreadyFailed(m) | AutoDecision::Refused(m) => {
            choice.sync_error = Some(Problem::new("SyncFailed", m));
        }
        AutoDecision::Sync(op) => {
            if dependencies_ready(input, choice) {
                let self_heal = input.current.is_some() && op.sync.as_ref().is_some_and(|s| !s.resources.is_empty());
                choice.next = Next::Start {
                    operation: *op,
                    self_heal: Some(self_heal),
                };
            }
        }
    }
}

/// `spec.dependsOn`: ready, or the wait (or cycle) recorded in `choice`.
fn dependencies_ready(input: &ChoiceInput<'_>, choice: &mut Choice) -> bool {
    match input.dependencies {
        Verdict::Ready => true,
        Verdict::Waiting(m) => {
            choice.dependency = Some(Problem::new(REASON_DEPENDENCY_NOT_READY, m.clone()));
            choice.requeue = Some(DEPENDENCY_REQUEUE);
            false
        }
        Verdict::Cycle(m) => {
            choice.dependency = Some(Problem::invalid_spec(REASON_DEPENDENCY_CYCLE, m.clone()));
            false
        }
    }
}

/// Whether a finished operation failed, carries a retry strategy and was not terminated (Argo CD does
/// not retry a terminated operation).
pub fn retryable(op: &OperationState) -> bool {
    matches!(op.phase, OperationPhase::Failed | OperationPhase::Error)
        && op.operation.retry.is_some()
        && !termination::was_terminated(op)
}

/// When a failed operation is retried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryVerdict {
    /// Now.
    Due,
    /// After this long.
    Wait(Duration),
    /// Never: the retry limit is reached.
    Exhausted,
}

/// When the failed operation `op` is retried, at `now`.
pub fn retry_verdict(op: &OperationState, now: Timestamp) -> RetryVerdict {
    let strategy = op.operation.retry.clone().unwrap_or_default();
    let Some(delay) = auto_sync::next_retry(&strategy, op.retry_count.unwrap_or(0)) else {
        return RetryVerdict::Exhausted;
    };
    let finished = op.finished_at.as_ref().map_or(0, |t| t.0.as_millisecond());
    let elapsed = Duration::from_millis((now.as_millisecond() - finished).max(0) as u64);
    if elapsed >= delay {
        RetryVerdict::Due
    } else {
        RetryVerdict::Wait(delay - elapsed)
    }
}

#[cfg(test)]
mod tests;
