//! Ending a running operation early: by the user (`status.operationState.phase: Terminating`, what
//! `argocd app terminate-op` writes) or by the sync timeout (Argo CD's `controller.sync.timeout.seconds`;
//! Capstan's `--sync-timeout`), so that no sync waits forever on a hook that never completes
//! (argo-cd#4811, #6880). Both go through the same step: running hooks are deleted, hook finalizers
//! removed, and the operation ends `Failed` with [`OPERATION_TERMINATED`]. A terminated operation is
//! not retried.

use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::api::application::{OperationPhase, OperationState};

/// Final message of a terminated operation (gitops-engine's wording), possibly followed by the reason.
pub const OPERATION_TERMINATED: &str = "Operation terminated";

/// The reason a sync timeout records while the operation is `Terminating`.
const TIMEOUT_REASON: &str = "the operation exceeded the sync timeout";

/// Whether `st` is still running after `timeout` from its start.
pub fn exceeded_timeout(st: &OperationState, timeout: Duration, now: Timestamp) -> bool {
    let Some(started) = st.started_at.as_ref() else {
        return false;
    };
    let elapsed_ms = now.as_millisecond().saturating_sub(started.0.as_millisecond());
    st.phase == OperationPhase::Running && elapsed_ms >= 0 && elapsed_ms as u128 >= timeout.as_millis()
}

/// Turns a running operation into a `Terminating` one because of the sync timeout.
pub fn terminate_for_timeout(st: &mut OperationState, timeout: Duration) {
    st.phase = OperationPhase::Terminating;
    st.message = Some(format!("{TIMEOUT_REASON} ({}s)", timeout.as_secs()));
}

/// The final message of the termination of `st`: the timeout's reason is kept, anything else (the
/// message of the step that was running when a user asked) is not.
pub fn final_message(st: &OperationState) -> String {
    match st.message.as_deref() {
        Some(m) if m.starts_with(TIMEOUT_REASON) => format!("{OPERATION_TERMINATED}: {m}"),
        _ => OPERATION_TERMINATED.to_string(),
    }
}

/// Whether a finished operation ended by termination (not retried, unlike a failure).
pub fn was_terminated(st: &OperationState) -> bool {
    st.phase == OperationPhase::Failed
        && st
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with(OPERATION_TERMINATED))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn running_since(secs: i64) -> OperationState {
        OperationState {
            phase: OperationPhase::Running,
            started_at: Some(Time(Timestamp::from_second(secs).unwrap())),
            message: Some("waiting for completion of hook batch/Job/migrate".into()),
            ..OperationState::default()
        }
    }

    #[test]
    fn only_running_operations_past_the_timeout_exceed_it() {
        let now = Timestamp::from_second(1_000).unwrap();
        let hour = Duration::from_secs(3600);
        assert!(!exceeded_timeout(&running_since(1_000 - 3599), hour, now));
        assert!(exceeded_timeout(&running_since(1_000 - 3600), hour, now));
        let mut done = running_since(0);
        done.phase = OperationPhase::Failed;
        assert!(
            !exceeded_timeout(&done, hour, now),
            "finished operations never time out"
        );
        let mut terminating = running_since(0);
        terminating.phase = OperationPhase::Terminating;
        assert!(!exceeded_timeout(&terminating, hour, now), "already terminating");
        let mut unstarted = running_since(0);
        unstarted.started_at = None;
        assert!(!exceeded_timeout(&unstarted, hour, now));
        // A clock that went backwards is not a timeout.
        assert!(!exceeded_timeout(&running_since(2_000), Duration::ZERO, now));
    }

    #[test]
    fn the_timeout_reason_survives_into_the_final_message_a_users_request_does_not() {
        let mut st = running_since(0);
        terminate_for_timeout(&mut st, Duration::from_secs(90));
        assert_eq!(st.phase, OperationPhase::Terminating);
        assert_eq!(
            final_message(&st),
            "Operation terminated: the operation exceeded the sync timeout (90s)"
        );
        let mut by_user = running_since(0);
        by_user.phase = OperationPhase::Terminating;
        assert_eq!(final_message(&by_user), OPERATION_TERMINATED);
    }

    #[test]
    fn terminated_is_recognised_only_on_a_failed_operation() {
        let mut st = running_since(0);
        st.phase = OperationPhase::Failed;
        st.message = Some(OPERATION_TERMINATED.into());
        assert!(was_terminated(&st));
        st.message = Some("one or more objects failed to apply".into());
        assert!(!was_terminated(&st));
        st.phase = OperationPhase::Running;
        st.message = Some(OPERATION_TERMINATED.into());
        assert!(!was_terminated(&st));
    }
}
