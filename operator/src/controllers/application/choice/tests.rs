//! The operation choice as a table: every row is a situation (what the earlier steps found) and what
//! the choice comes to.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::*;
use crate::api::application::{
    OperationInitiator, ResourceStatus, RetryStrategy, RollbackOperation, SyncOperation, SyncOperationResult,
    SyncStatusCode,
};
use crate::controllers::application::status::ProblemKind;
use crate::controllers::testsupport::{auto, SyncPolicyExt};

const REV: &str = "0123456789012345678901234567890123456789";
const OLD: &str = "ffffffffffffffffffffffffffffffffffffffff";
const NOW: i64 = 1_700_000_000;

fn at(secs_ago: i64) -> Option<Time> {
    Some(Time(Timestamp::from_second(NOW - secs_ago).unwrap()))
}

/// Everything a choice reads, owned; built up row by row.
#[derive(Clone)]
struct Case {
    current: Option<OperationState>,
    requested: Option<Operation>,
    history: Vec<RevisionHistory>,
    sync_policy: Option<SyncPolicy>,
    sync_timeout: Option<Duration>,
    gate: PolicyGate,
    target: Option<(String, Compared)>,
    blocked: bool,
    self_heal_attempts: u32,
    dependencies: Verdict,
}

/// A manual Application, OutOfSync at `REV` (one drifted ConfigMap), nothing running.
fn case() -> Case {
    let compared = Compared {
        revision: REV.into(),
        sync: SyncStatusCode::OutOfSync,
        resources: vec![ResourceStatus {
            kind: "ConfigMap".into(),
            name: "a".into(),
            status: Some(SyncStatusCode::OutOfSync),
            ..ResourceStatus::default()
        }],
        ..Compared::default()
    };
    Case {
        current: None,
        requested: None,
        history: Vec::new(),
        sync_policy: None,
        sync_timeout: None,
        gate: PolicyGate::Open,
        target: Some((REV.into(), compared)),
        blocked: false,
        self_heal_attempts: 0,
        dependencies: Verdict::Ready,
    }
}

fn sync_to(revision: &str) -> Operation {
    Operation {
        sync: Some(SyncOperation {
            revision: Some(revision.into()),
            ..SyncOperation::default()
        }),
        ..Operation::default()
    }
}

fn retry(limit: i64, refresh: bool) -> Option<RetryStrategy> {
    Some(RetryStrategy {
        limit: Some(limit),
        backoff: None,
        refresh,
    })
}

/// `operation` in `phase`, started an hour ago, finished `finished_ago` seconds ago (unless running).
fn state(operation: Operation, phase: OperationPhase, finished_ago: i64) -> OperationState {
    let revision = operation
        .sync
        .as_ref()
        .and_then(|s| s.revision.clone())
        .unwrap_or_default();
    OperationState {
        operation,
        phase,
        message: Some("boom".into()),
        sync_result: Some(SyncOperationResult {
            revision,
            ..SyncOperationResult::default()
        }),
        started_at: at(3600),
        finished_at: (phase != OperationPhase::Running).then(|| at(finished_ago)).flatten(),
        ..OperationState::default()
    }
}

impl Case {
    fn sync_policy(mut self, sync_policy: SyncPolicy) -> Self {
        self.sync_policy = Some(sync_policy);
        self
    }
    fn current(mut self, op: OperationState) -> Self {
        self.current = Some(op);
        self
    }
    fn requested(mut self, op: Operation) -> Self {
        self.requested = Some(op);
        self
    }
    fn gate(mut self, gate: PolicyGate) -> Self {
        self.gate = gate;
        self
    }
    fn dependencies(mut self, verdict: Verdict) -> Self {
        self.dependencies = verdict;
        self
    }
    fn with(mut self, f: impl FnOnce(&mut Case)) -> Self {
        f(&mut self);
        self
    }

    fn choose(&self) -> Choice {
        let input = ChoiceInput {
            current: self.current.as_ref(),
            requested: self.requested.as_ref(),
            history: &self.history,
            sync_policy: self.sync_policy.as_ref(),
            sync_timeout: self.sync_timeout,
            gate: &self.gate,
            target: self.target.as_ref().map(|(c, cmp)| (c.as_str(), cmp)),
            blocked: self.blocked,
            self_heal_attempts: self.self_heal_attempts,
            dependencies: &self.dependencies,
        };
        choose(&input, Timestamp::from_second(NOW).unwrap())
    }
}

/// What a row checks: the kind of operation advanced and everything else the choice says.
#[derive(Debug, PartialEq)]
struct Got {
    next: &'static str,
    requeue: Option<u64>,
    sync_error: Option<&'static str>,
    dependency: Option<&'static str>,
    clear: bool,
    denied: bool,
}

fn got(c: &Choice) -> Got {
    let next = match &c.next {
        Next::Nothing => "nothing",
        Next::Continue(s) if s.phase == OperationPhase::Terminating => "continue-terminating",
        Next::Continue(_) => "continue",
        Next::Retry(_) => "retry",
        Next::Start { self_heal: None, .. } => "start",
        Next::Start {
            self_heal: Some(false), ..
        } => "start-auto",
        Next::Start {
            self_heal: Some(true), ..
        } => "start-self-heal",
    };
    Got {
        next,
        requeue: c.requeue.map(|d| d.as_secs()),
        sync_error: c.sync_error.as_ref().map(|p| p.reason),
        dependency: c.dependency.as_ref().map(|p| p.reason),
        clear: c.clear_operation,
        denied: c.denied.is_some(),
    }
}

fn expect(next: &'static str) -> Got {
    Got {
        next,
        requeue: None,
        sync_error: None,
        dependency: None,
        clear: false,
        denied: false,
    }
}

#[test]
fn choice_table() {
    let pending = Problem::new("PolicyPending", "waiting for the PolicySets to be listed");
    let denied = Problem::new("PolicyDenied", "sync denied by policy: no");
    let rollback = Operation {
        rollback: Some(RollbackOperation { id: 1 }),
        ..Operation::default()
    };
    let history = vec![RevisionHistory {
        id: 1,
        revision: OLD.into(),
        ..RevisionHistory::default()
    }];
    let mut automated_op = sync_to(REV);
    automated_op.retry = retry(3, false);
    automated_op.initiated_by = Some(OperationInitiator {
        username: None,
        automated: true,
    });
    let mut requested_failed = state(sync_to(REV), OperationPhase::Failed, 60);
    requested_failed.operation.retry = retry(3, false);
    let mut pinned_old = state(sync_to(OLD), OperationPhase::Failed, 1);
    pinned_old.operation.retry = retry(3, true);
    let mut exhausted = state(automated_op.clone(), OperationPhase::Failed, 3600);
    exhausted.retry_count = Some(3);
    let with = |g: Got, f: fn(&mut Got)| {
        let mut g = g;
        f(&mut g);
        g
    };

    let rows: Vec<(&str, Case, Got)> = vec![
        (
            "a running operation goes on",
            case().current(state(sync_to(REV), OperationPhase::Running, 0)),
            expect("continue"),
        ),
        (
            "a running operation past --sync-timeout is terminated",
            case()
                .current(state(sync_to(REV), OperationPhase::Running, 0))
                .with(|c| c.sync_timeout = Some(Duration::from_secs(1800))),
            expect("continue-terminating"),
        ),
        (
            "a running operation goes on even when PolicySets deny",
            case()
                .current(state(sync_to(REV), OperationPhase::Running, 0))
                .gate(PolicyGate::Denied(denied.clone())),
            expect("continue"),
        ),
        (
            "PolicySets not listed yet: nothing starts, shown as a wait",
            case().sync_policy(auto()).gate(PolicyGate::Pending(pending.clone())),
            with(expect("nothing"), |g| {
                g.requeue = Some(5);
                g.dependency = Some("PolicyPending");
            }),
        ),
        (
            "PolicySets deny: a requested sync is refused and removed",
            case().requested(sync_to(REV)).gate(PolicyGate::Denied(denied.clone())),
            with(expect("nothing"), |g| {
                g.requeue = Some(30);
                g.sync_error = Some("PolicyDenied");
                g.clear = true;
                g.denied = true;
            }),
        ),
        (
            "PolicySets deny: no automated sync, no SyncError",
            case().sync_policy(auto()).gate(PolicyGate::Denied(denied)),
            with(expect("nothing"), |g| g.requeue = Some(30)),
        ),
        (
            "a requested sync starts",
            case().requested(sync_to(REV)),
            expect("start"),
        ),
        (
            "a requested sync waits for dependsOn",
            case()
                .requested(sync_to(REV))
                .dependencies(Verdict::Waiting("waiting for db".into())),
            with(expect("nothing"), |g| {
                g.requeue = Some(10);
                g.dependency = Some("DependencyNotReady");
            }),
        ),
        (
            "a dependsOn cycle: no automated sync",
            case()
                .sync_policy(auto())
                .dependencies(Verdict::Cycle("a -> b -> a".into())),
            with(expect("nothing"), |g| g.dependency = Some("DependencyCycle")),
        ),
        (
            "a rollback is refused while automated sync is on",
            case().sync_policy(auto()).requested(rollback.clone()),
            with(expect("nothing"), |g| {
                g.sync_error = Some("RollbackRefused");
                g.clear = true;
            }),
        ),
        (
            "a rollback syncs to the history entry",
            case().requested(rollback).with(|c| c.history = history),
            expect("start"),
        ),
        (
            "a requested sync that completed is removed",
            case()
                .requested(sync_to(REV))
                .current(state(sync_to(REV), OperationPhase::Succeeded, 5)),
            with(expect("nothing"), |g| g.clear = true),
        ),
        (
            "a requested sync that failed is retried when its backoff is due",
            case()
                .requested(requested_failed.operation.clone())
                .current(requested_failed.clone()),
            expect("retry"),
        ),
        (
            "a requested sync that failed waits for its backoff",
            case()
                .requested(requested_failed.operation.clone())
                .current(requested_failed.clone().with_finished(at(1))),
            with(expect("nothing"), |g| g.requeue = Some(4)),
        ),
        (
            "a failed automated sync is retried when its backoff is due",
            case()
                .sync_policy(auto())
                .current(state(automated_op.clone(), OperationPhase::Failed, 60).with_retry(retry(3, false))),
            expect("retry"),
        ),
        (
            "retry.refresh: a failed sync pinned to an old commit restarts at the new one",
            case().sync_policy(auto()).current(pinned_old),
            expect("retry"),
        ),
        (
            "retries exhausted: automated sync does not try the failed commit again",
            case().sync_policy(auto()).current(exhausted),
            with(expect("nothing"), |g| g.sync_error = Some("SyncFailed")),
        ),
        (
            "the comparison failed: nothing",
            case().sync_policy(auto()).with(|c| {
                c.target = None;
                c.blocked = true;
            }),
            expect("nothing"),
        ),
        (
            "an invalid spec: no automated sync",
            case().sync_policy(auto()).with(|c| c.blocked = true),
            expect("nothing"),
        ),
        (
            "automated, OutOfSync at a new commit: a full sync",
            case()
                .sync_policy(auto())
                .current(state(sync_to(OLD), OperationPhase::Succeeded, 3600)),
            expect("start-auto"),
        ),
        (
            "automated with selfHeal, drifted after a sync of this commit: the drifted resources",
            case()
                .sync_policy(auto().self_heal())
                .current(state(sync_to(REV), OperationPhase::Succeeded, 3600)),
            expect("start-self-heal"),
        ),
        (
            "selfHeal backs off (2 s after the last sync)",
            case()
                .sync_policy(auto().self_heal())
                .current(state(sync_to(REV), OperationPhase::Succeeded, 1)),
            with(expect("nothing"), |g| g.requeue = Some(1)),
        ),
        ("a manual Application never syncs by itself", case(), expect("nothing")),
    ];
    for (name, case, want) in rows {
        assert_eq!(got(&case.choose()), want, "{name}");
    }
}

#[test]
fn a_dependency_cycle_stalls_and_a_wait_does_not() {
    let cycle = case()
        .sync_policy(auto())
        .dependencies(Verdict::Cycle("a -> a".into()))
        .choose();
    assert_eq!(cycle.dependency.map(|p| p.kind), Some(ProblemKind::InvalidSpec));
    let wait = case()
        .sync_policy(auto())
        .dependencies(Verdict::Waiting("db".into()))
        .choose();
    assert_eq!(wait.dependency.map(|p| p.kind), Some(ProblemKind::Permanent));
}

#[test]
fn what_is_advanced() {
    // The timeout marks the running operation Terminating; the step does the rest.
    let running = case()
        .current(state(sync_to(REV), OperationPhase::Running, 0))
        .with(|c| c.sync_timeout = Some(Duration::from_secs(60)))
        .choose();
    let Some((_, Some(st))) = running.next.into_step() else {
        panic!("the running operation goes on")
    };
    assert!(st.message.unwrap_or_default().contains("sync timeout"));
    // retry.refresh restarts the failed operation at the new target commit, counting the retry.
    let mut pinned = state(sync_to(OLD), OperationPhase::Failed, 1);
    pinned.operation.retry = retry(3, true);
    let Next::Retry(next) = case().sync_policy(auto()).current(pinned).choose().next else {
        panic!("a retry")
    };
    assert_eq!(next.operation.sync.and_then(|s| s.revision).as_deref(), Some(REV));
    assert_eq!(next.retry_count, Some(1));
    // An automated sync targets the compared commit.
    let Next::Start { operation, .. } = case().sync_policy(auto()).choose().next else {
        panic!("a start")
    };
    assert_eq!(operation.sync.and_then(|s| s.revision).as_deref(), Some(REV));
}

trait StateExt {
    fn with_finished(self, at: Option<Time>) -> Self;
    fn with_retry(self, retry: Option<RetryStrategy>) -> Self;
}

impl StateExt for OperationState {
    fn with_finished(mut self, at: Option<Time>) -> Self {
        self.finished_at = at;
        self
    }
    fn with_retry(mut self, retry: Option<RetryStrategy>) -> Self {
        self.operation.retry = retry;
        self
    }
}
