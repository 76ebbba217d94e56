//! The automated-sync decision table (OutOfSync/Synced × automated/selfHeal × last attempt
//! failed/succeeded at the same revision × allowEmpty), retries and rollback.

use std::time::Duration;

use super::*;
use crate::api::application::{OperationState, SyncOperationResult};
use crate::controllers::testsupport::{auto, manual, SyncPolicyExt};

const REV: &str = "0123456789012345678901234567890123456789";

fn res(name: &str, status: SyncStatusCode, prune: bool) -> ResourceStatus {
    ResourceStatus {
        kind: "ConfigMap".into(),
        name: name.into(),
        namespace: Some("ns".into()),
        status: Some(status),
        requires_pruning: prune,
        ..ResourceStatus::default()
    }
}

fn last(phase: OperationPhase, rev: &str) -> OperationState {
    OperationState {
        operation: Operation {
            sync: Some(SyncOperation::default()),
            ..Operation::default()
        },
        phase,
        message: Some("boom".into()),
        sync_result: Some(SyncOperationResult {
            revision: rev.into(),
            ..SyncOperationResult::default()
        }),
        ..OperationState::default()
    }
}

fn decide_with(
    p: &SyncPolicy,
    sync: SyncStatusCode,
    resources: &[ResourceStatus],
    last: Option<&OperationState>,
) -> AutoDecision {
    decide(&AutoInput {
        sync_policy: Some(p),
        sync,
        revision: REV,
        resources,
        last,
        self_heal_attempts: 0,
        since_last: Some(Duration::from_secs(3600)),
    })
}

#[test]
fn decision_table() {
    let drifted = [
        res("a", SyncStatusCode::OutOfSync, false),
        res("b", SyncStatusCode::Synced, false),
    ];
    let failed = last(OperationPhase::Failed, REV);
    let succeeded = last(OperationPhase::Succeeded, REV);
    let older = last(OperationPhase::Succeeded, "ffff");
    // Synced: never.
    for p in [auto().prune().self_heal().allow_empty(), manual()] {
        assert_eq!(
            decide_with(&p, SyncStatusCode::Synced, &drifted, None),
            AutoDecision::Idle
        );
    }
    // Manual policy: never.
    assert_eq!(
        decide_with(&manual(), SyncStatusCode::OutOfSync, &drifted, None),
        AutoDecision::Idle
    );
    // Automated, new revision (or never synced): full sync.
    for l in [None, Some(&older)] {
        match decide_with(&auto(), SyncStatusCode::OutOfSync, &drifted, l) {
            AutoDecision::Sync(op) => {
                let s = op.sync.unwrap();
                assert!(s.resources.is_empty() && !s.prune && s.revision.as_deref() == Some(REV));
                assert!(op.initiated_by.unwrap().automated);
                assert_eq!(op.retry.unwrap().limit, Some(AUTOMATED_DEFAULT_RETRY_LIMIT));
            }
            other => panic!("{other:?}"),
        }
    }
    // Last attempt at this revision failed: one attempt per revision, with or without selfHeal.
    for p in [auto(), auto().self_heal()] {
        match decide_with(&p, SyncStatusCode::OutOfSync, &drifted, Some(&failed)) {
            AutoDecision::AlreadyFailed(m) => {
                assert!(m.starts_with("Failed last sync attempt to 0123456: boom"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
    // Succeeded at this revision: only selfHeal re-syncs, and only the drifted resources.
    assert_eq!(
        decide_with(&auto(), SyncStatusCode::OutOfSync, &drifted, Some(&succeeded)),
        AutoDecision::Idle
    );
    match decide_with(
        &auto().self_heal(),
        SyncStatusCode::OutOfSync,
        &drifted,
        Some(&succeeded),
    ) {
        AutoDecision::Sync(op) => {
            let names: Vec<String> = op.sync.unwrap().resources.into_iter().map(|r| r.name).collect();
            assert_eq!(names, vec!["a".to_string()]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn allow_empty_and_prune_only() {
    let all_pruned = [
        res("a", SyncStatusCode::OutOfSync, true),
        res("b", SyncStatusCode::OutOfSync, true),
    ];
    match decide_with(&auto().prune(), SyncStatusCode::OutOfSync, &all_pruned, None) {
        AutoDecision::Refused(m) => assert!(m.contains("wipe out all resources")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        decide_with(
            &auto().prune().allow_empty(),
            SyncStatusCode::OutOfSync,
            &all_pruned,
            None
        ),
        AutoDecision::Sync(_)
    ));
    // Only pruning needed and auto-prune off: nothing to do.
    let prune_only = [
        res("a", SyncStatusCode::Synced, false),
        res("b", SyncStatusCode::OutOfSync, true),
    ];
    assert_eq!(
        decide_with(&auto(), SyncStatusCode::OutOfSync, &prune_only, None),
        AutoDecision::Idle
    );
    // `enabled: false` switches automation off while keeping the flags.
    let mut off = auto().prune().self_heal().allow_empty();
    off.automated.as_mut().unwrap().enabled = Some(false);
    assert_eq!(
        decide_with(&off, SyncStatusCode::OutOfSync, &prune_only, None),
        AutoDecision::Idle
    );
}

#[test]
fn self_heal_backs_off() {
    let p = auto().self_heal();
    let drifted = [res("a", SyncStatusCode::OutOfSync, false)];
    let succeeded = last(OperationPhase::Succeeded, REV);
    let at = |attempts: u32, since: u64| {
        decide(&AutoInput {
            sync_policy: Some(&p),
            sync: SyncStatusCode::OutOfSync,
            revision: REV,
            resources: &drifted,
            last: Some(&succeeded),
            self_heal_attempts: attempts,
            since_last: Some(Duration::from_secs(since)),
        })
    };
    assert_eq!(at(0, 1), AutoDecision::Backoff(Duration::from_secs(1)));
    assert!(matches!(at(0, 2), AutoDecision::Sync(_)));
    assert_eq!(at(2, 10), AutoDecision::Backoff(Duration::from_secs(8)));
    assert_eq!(
        at(20, 0),
        AutoDecision::Backoff(Duration::from_secs(300)),
        "capped at 300 s"
    );
}

#[test]
fn retries_back_off_and_stop_at_the_limit() {
    let strategy = RetryStrategy {
        limit: Some(3),
        backoff: None,
        refresh: false,
    };
    let delays: Vec<Option<u64>> = (0..4).map(|n| next_retry(&strategy, n).map(|d| d.as_secs())).collect();
    assert_eq!(delays, vec![Some(5), Some(10), Some(20), None]);
    let forever = RetryStrategy {
        limit: Some(-1),
        backoff: Some(Backoff {
            duration: Some("1s".into()),
            factor: Some(3),
            max_duration: Some("10".into()),
        }),
        refresh: false,
    };
    assert_eq!(next_retry(&forever, 1000), Some(Duration::from_secs(10)));
    assert_eq!(
        next_retry(&RetryStrategy::default(), 0),
        None,
        "no retry block: no retries"
    );
    assert_eq!(retry_strategy(None, true).limit, Some(5));
    assert_eq!(retry_strategy(None, false).limit, None);
}

#[test]
fn rollback_refused_while_automated() {
    let history = vec![RevisionHistory {
        id: 4,
        revision: "abc".into(),
        ..RevisionHistory::default()
    }];
    let op = Operation::default();
    assert!(rollback_to_sync(&op, 4, &history, Some(&auto())).is_err());
    let sync = rollback_to_sync(&op, 4, &history, Some(&manual())).unwrap();
    assert_eq!(sync.sync.unwrap().revision.as_deref(), Some("abc"));
    assert!(rollback_to_sync(&op, 9, &history, None).unwrap_err().contains("id 9"));
}

#[test]
fn refresh_annotations() {
    let mut a = std::collections::BTreeMap::new();
    assert_eq!(refresh_requested(Some(&a)), None);
    a.insert("argocd.argoproj.io/refresh".to_string(), "normal".to_string());
    assert_eq!(refresh_requested(Some(&a)), Some(false));
    a.insert("capstan.dev/refresh".to_string(), "hard".to_string());
    assert_eq!(refresh_requested(Some(&a)), Some(true));
}
