//! What the pipeline's steps learn on the way to the status step, the one requeue rule, and the
//! failure a reconcile returns once its status is written.

use std::time::Duration;

use kube::runtime::events::EventType;

use super::choice::PolicyGate;
use super::status::{Compared, Problem, ProblemKind, StatusInput};
use crate::api::application::{Application, OperationState};
use crate::api::conditions::REASON_POLICY_DENIED;
use crate::controllers::{policy_access, Error, ErrorKind};

/// Look again after a comparison failure that is not transient: the fix may come from Git or from a
/// Cluster, and neither wakes the Application by itself.
pub const ERROR_REQUEUE: Duration = Duration::from_secs(30);
/// Look again while PolicySets deny a sync (a PolicySet change also wakes the Application).
pub const POLICY_REQUEUE: Duration = Duration::from_secs(30);
/// Look again while the live cache is incomplete or the PolicySets are not listed yet.
pub const WAIT_REQUEUE: Duration = Duration::from_secs(5);
/// Look again while `spec.dependsOn` waits (status changes of the dependencies also wake it).
pub const DEPENDENCY_REQUEUE: Duration = Duration::from_secs(10);
/// Compare again this soon after an operation finished: the sync changed the live state.
pub const RECOMPARE_REQUEUE: Duration = Duration::from_secs(1);
/// Look again after the `DeletionError` condition reported a failed deletion hook (a fix by hand, or
/// the orphan annotation, also wakes the Application).
pub const DELETION_ERROR_REQUEUE: Duration = Duration::from_secs(10);
/// First delay of the backoff between failed cascade-deletion attempts.
pub const DELETION_RETRY_FIRST: Duration = Duration::from_secs(2);
/// Growth factor of that backoff.
pub const DELETION_RETRY_FACTOR: u32 = 2;
/// Longest delay of that backoff.
pub const DELETION_RETRY_MAX: Duration = Duration::from_secs(60);

/// An Event to publish about the Application: type, reason, note.
pub type AppEvent = (EventType, &'static str, String);

/// Everything the status step needs, gathered by the earlier steps.
#[derive(Default)]
pub struct Findings {
    /// The comparison (after a sync that just succeeded: against what it applied).
    pub compared: Option<Compared>,
    /// Why the source, render or destination failed (sync status `Unknown`).
    pub comparison_error: Option<Problem>,
    /// The operation state after this reconcile's step.
    pub operation_state: Option<OperationState>,
    /// A successful sync finished: record it in `status.history`.
    pub record_history: bool,
    /// A sync could not start or failed for good.
    pub sync_error: Option<Problem>,
    /// Waiting for `spec.dependsOn` (or for the PolicySets to be listed).
    pub dependency: Option<Problem>,
    /// The spec cannot work (destination or object namespace not allowed, no cluster clients).
    pub invalid_spec: Option<Problem>,
    /// Remove the finished (or refused) `operation`.
    pub clear_operation: bool,
    /// Events to publish after the status write.
    pub events: Vec<AppEvent>,
    /// What the PolicySets that apply said about the rendered state (`None`: none applies, or the
    /// render failed).
    pub policy_sets: Option<policy_access::Findings>,
    /// The PolicySet cache has not listed yet: no sync may start (fail closed at start-up).
    pub policy_sets_pending: bool,
    requeue: Option<Duration>,
}

impl Findings {
    /// The one requeue rule: look again within `after`. Every step asks for what it needs; the earliest
    /// wins, so no step can postpone what another needs sooner.
    pub fn requeue_within(&mut self, after: Duration) {
        self.requeue = Some(self.requeue.map_or(after, |r| r.min(after)));
    }

    /// The earliest requeue asked for, if any.
    pub fn requeue(&self) -> Option<Duration> {
        self.requeue
    }

    /// The source, render or destination failed.
    pub fn fail_comparison(&mut self, problem: Problem) {
        self.comparison_error.get_or_insert(problem);
        self.requeue_within(ERROR_REQUEUE);
    }

    /// The destination cannot be used: an invalid spec, or a failed comparison.
    pub fn fail_destination(&mut self, problem: Problem) {
        if problem.kind == ProblemKind::InvalidSpec {
            self.invalid_spec = Some(problem);
            self.requeue_within(ERROR_REQUEUE);
        } else {
            self.fail_comparison(problem);
        }
    }

    /// What the PolicySets allow now.
    pub fn policy_gate(&self) -> PolicyGate {
        if self.policy_sets_pending {
            return PolicyGate::Pending(Problem::new("PolicyPending", "waiting for the PolicySets to be listed"));
        }
        match self.policy_denied() {
            Some(p) => PolicyGate::Denied(p),
            None => PolicyGate::Open,
        }
    }

    /// `PolicyDenied`: the deny messages of the PolicySets that apply.
    pub fn policy_denied(&self) -> Option<Problem> {
        let denied = &self.policy_sets.as_ref()?.denied;
        (!denied.is_empty()).then(|| {
            Problem::new(
                REASON_POLICY_DENIED,
                format!("sync denied by policy: {}", denied.join("; ")),
            )
        })
    }

    /// `PolicyWarning`: their warn messages.
    pub fn policy_warning(&self) -> Option<Problem> {
        let warned = &self.policy_sets.as_ref()?.warned;
        (!warned.is_empty()).then(|| Problem::new("PolicyWarning", warned.join("; ")))
    }

    /// The status step's input for `app`.
    pub fn status_input<'a>(
        &'a self,
        app: &'a Application,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time,
    ) -> StatusInput<'a> {
        StatusInput {
            old: app.status.as_ref(),
            generation: app.metadata.generation,
            spec: &app.spec,
            compared: self.compared.as_ref(),
            comparison_error: self.comparison_error.clone(),
            operation_state: self.operation_state.as_ref(),
            record_history: self.record_history,
            sync_error: self.sync_error.clone(),
            dependency: self.dependency.clone(),
            deletion_error: None,
            invalid_spec: self.invalid_spec.clone(),
            policy_denied: self.policy_denied(),
            policy_warning: self.policy_warning(),
            now,
        }
    }

    /// The failure this reconcile returns after writing its status, so the per-object backoff, the
    /// logs and `capstan_reconcile_errors_total` see it: the source, render or destination failed (no
    /// comparison could be made). Transient trouble backs off; anything else is looked at again after
    /// [`ERROR_REQUEUE`]. `None` while an operation is still running: it keeps its own pace (waves,
    /// hooks), and the failure is returned once it is over.
    pub fn failure(&self) -> Option<Error> {
        let running = self
            .operation_state
            .as_ref()
            .is_some_and(|o| !super::sync::is_completed(o));
        if running {
            return None;
        }
        let uncompared = self.invalid_spec.as_ref().filter(|_| self.compared.is_none());
        let p = self.comparison_error.as_ref().or(uncompared)?;
        let retry = match p.kind {
            ProblemKind::Transient => ErrorKind::Transient,
            ProblemKind::InvalidSpec | ProblemKind::Permanent => ErrorKind::Waiting(ERROR_REQUEUE),
        };
        Some(Error::Reported {
            category: p.reason,
            message: p.message.clone(),
            retry,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_earliest_requeue_wins() {
        let mut f = Findings::default();
        assert_eq!(f.requeue(), None);
        f.requeue_within(Duration::from_secs(30));
        f.requeue_within(Duration::from_secs(5));
        f.requeue_within(Duration::from_secs(60));
        assert_eq!(f.requeue(), Some(Duration::from_secs(5)));
    }

    #[test]
    fn a_failed_comparison_is_returned_as_an_error_of_its_kind() {
        let mut f = Findings::default();
        assert!(f.failure().is_none());
        f.fail_comparison(Problem::of_kind(ProblemKind::Transient, "Timeout", "git timed out"));
        let e = f.failure().expect("a failure");
        assert_eq!((e.category(), e.kind()), ("Timeout", ErrorKind::Transient));
        assert_eq!(f.requeue(), Some(ERROR_REQUEUE));

        let mut f = Findings::default();
        f.fail_destination(Problem::invalid_spec("NamespaceNotAllowed", "namespace x not allowed"));
        assert!(f.comparison_error.is_none() && f.invalid_spec.is_some());
        let e = f.failure().expect("no comparison was made");
        assert_eq!(e.kind(), ErrorKind::Waiting(ERROR_REQUEUE));

        // An invalid spec found after a comparison (an object's namespace) is shown, not returned.
        f.compared = Some(Compared::default());
        assert!(f.failure().is_none());
    }
}
