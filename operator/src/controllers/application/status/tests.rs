//! Status computation: conditions, history cap, truncation.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::application::{Operation, SyncOperation, SyncOperationResult};
use crate::controllers::status::find_condition;

fn at(s: i64) -> Time {
    Time(Timestamp::from_second(s).unwrap())
}

fn compared(sync: SyncStatusCode, health: HealthStatusCode) -> Compared {
    Compared {
        revision: "a".repeat(40),
        sync,
        health: HealthStatus {
            status: health,
            message: None,
            last_transition_time: None,
        },
        ..Compared::default()
    }
}

fn input<'a>(
    spec: &'a ApplicationSpec,
    old: Option<&'a ApplicationStatus>,
    c: Option<&'a Compared>,
) -> StatusInput<'a> {
    StatusInput {
        old,
        generation: Some(1),
        spec,
        compared: c,
        comparison_error: None,
        operation_state: None,
        record_history: false,
        sync_error: None,
        dependency: None,
        deletion_error: None,
        invalid_spec: None,
        policy_denied: None,
        policy_warning: None,
        now: at(100),
    }
}

fn op(phase: OperationPhase, rev: &str) -> OperationState {
    OperationState {
        operation: Operation {
            sync: Some(SyncOperation::default()),
            ..Operation::default()
        },
        phase,
        sync_result: Some(SyncOperationResult {
            revision: rev.into(),
            ..SyncOperationResult::default()
        }),
        ..OperationState::default()
    }
}

fn ready(s: &ApplicationStatus) -> (String, String) {
    let c = find_condition(&s.conditions, CONDITION_READY).unwrap();
    (c.status.clone(), c.reason.clone())
}

#[test]
fn ready_only_when_synced_healthy_and_idle() {
    let spec = ApplicationSpec::default();
    let c = compared(SyncStatusCode::Synced, HealthStatusCode::Healthy);
    let s = compute(&input(&spec, None, Some(&c)));
    assert_eq!(ready(&s), ("True".into(), "SyncedAndHealthy".into()));
    assert!(find_condition(&s.conditions, CONDITION_RECONCILING).is_none());

    let running = op(OperationPhase::Running, "x");
    let mut i = input(&spec, None, Some(&c));
    i.operation_state = Some(&running);
    let s = compute(&i);
    assert_eq!(ready(&s), ("False".into(), "SyncRunning".into()));
    assert!(find_condition(&s.conditions, CONDITION_RECONCILING).is_some());

    let c = compared(SyncStatusCode::OutOfSync, HealthStatusCode::Healthy);
    assert_eq!(ready(&compute(&input(&spec, None, Some(&c)))).1, "OutOfSync");
    let c = compared(SyncStatusCode::Synced, HealthStatusCode::Degraded);
    assert_eq!(ready(&compute(&input(&spec, None, Some(&c)))).1, "Degraded");
}

#[test]
fn comparison_error_makes_sync_unknown_and_keeps_resources() {
    let spec = ApplicationSpec::default();
    let mut c = compared(SyncStatusCode::Synced, HealthStatusCode::Healthy);
    c.resources = vec![ResourceStatus {
        kind: "ConfigMap".into(),
        name: "a".into(),
        ..ResourceStatus::default()
    }];
    let first = compute(&input(&spec, None, Some(&c)));
    let mut i = input(&spec, Some(&first), None);
    i.comparison_error = Some(Problem::invalid_spec("InvalidYaml", "bad yaml in a.yaml"));
    let s = compute(&i);
    assert_eq!(s.sync.as_ref().unwrap().status, SyncStatusCode::Unknown);
    assert_eq!(s.resources.len(), 1, "resources kept");
    assert_eq!(ready(&s), ("False".into(), "InvalidYaml".into()));
    assert!(find_condition(&s.conditions, CONDITION_COMPARISON_ERROR).is_some());
    assert!(
        find_condition(&s.conditions, CONDITION_STALLED).is_some(),
        "a bad manifest stalls"
    );
    // Recovery removes the error conditions.
    let s = compute(&input(&spec, Some(&s), Some(&c)));
    assert!(find_condition(&s.conditions, CONDITION_COMPARISON_ERROR).is_none());
    assert!(find_condition(&s.conditions, CONDITION_STALLED).is_none());
}

#[test]
fn health_transition_time_moves_only_on_change() {
    let spec = ApplicationSpec::default();
    let c = compared(SyncStatusCode::Synced, HealthStatusCode::Healthy);
    let s1 = compute(&input(&spec, None, Some(&c)));
    let mut i = input(&spec, Some(&s1), Some(&c));
    i.now = at(500);
    let s2 = compute(&i);
    assert_eq!(s2.health.as_ref().unwrap().last_transition_time, Some(at(100)));
    assert!(
        crate::controllers::status::eq_ignoring_time(&s1, &s2),
        "no write when nothing changed"
    );
}

#[test]
fn history_capped_and_ids_grow() {
    let spec = ApplicationSpec {
        revision_history_limit: Some(3),
        ..ApplicationSpec::default()
    };
    let mut status: Option<ApplicationStatus> = None;
    for n in 0..5 {
        let done = op(OperationPhase::Succeeded, &format!("rev{n}"));
        let mut i = input(&spec, status.as_ref(), None);
        i.operation_state = Some(&done);
        i.record_history = true;
        status = Some(compute(&i));
    }
    let h = &status.unwrap().history;
    assert_eq!(h.iter().map(|e| e.id).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(h.last().unwrap().revision, "rev4");
    let mut h2 = h.clone();
    cap_history(&mut h2, None);
    assert_eq!(h2.len(), 3);
    cap_history(&mut h2, Some(-1));
    assert!(h2.is_empty());
}

#[test]
fn messages_and_resources_bounded() {
    let spec = ApplicationSpec::default();
    let mut c = compared(SyncStatusCode::Synced, HealthStatusCode::Progressing);
    c.health.message = Some("x".repeat(10_000));
    c.resources = (0..MAX_RESOURCES + 10)
        .map(|i| ResourceStatus {
            kind: "ConfigMap".into(),
            name: format!("cm{i}"),
            ..ResourceStatus::default()
        })
        .collect();
    let mut long_op = op(OperationPhase::Failed, "r");
    long_op.message = Some("y".repeat(10_000));
    let mut i = input(&spec, None, Some(&c));
    i.operation_state = Some(&long_op);
    let s = compute(&i);
    assert_eq!(s.resources.len(), MAX_RESOURCES);
    assert!(find_condition(&s.conditions, CONDITION_RESOURCES_TRUNCATED).is_some());
    assert!(s.health.unwrap().message.unwrap().len() <= MAX_STATUS_MESSAGE);
    assert!(s.operation_state.unwrap().message.unwrap().len() <= MAX_STATUS_MESSAGE);
    assert!(s.conditions.iter().all(|c| c.message.len() <= 1024));
}

#[test]
fn dependency_and_shared_conditions() {
    let spec = ApplicationSpec::default();
    let mut c = compared(SyncStatusCode::OutOfSync, HealthStatusCode::Missing);
    c.shared = vec!["/ConfigMap:ns/a is part of application ns/other".into()];
    let mut i = input(&spec, None, Some(&c));
    i.dependency = Some(Problem::new(
        REASON_DEPENDENCY_NOT_READY,
        "waiting for dependencies: db",
    ));
    let s = compute(&i);
    assert_eq!(ready(&s).1, "DependencyNotReady");
    assert!(find_condition(&s.conditions, CONDITION_SHARED_RESOURCE_WARNING).is_some());
    assert!(find_condition(&s.conditions, CONDITION_STALLED).is_none());
    i.dependency = Some(Problem::invalid_spec(
        REASON_DEPENDENCY_CYCLE,
        "dependsOn forms a cycle: a -> a",
    ));
    let s = compute(&i);
    assert_eq!(ready(&s).1, "DependencyCycle");
    assert!(find_condition(&s.conditions, CONDITION_STALLED).is_some());
}
