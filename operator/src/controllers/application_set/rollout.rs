//! Progressive rollout: `strategy.type: RollingSync` (Argo CD's progressive syncs).
//!
//! Pure part, [`decide`]: each Application belongs to the first step whose `matchExpressions`
//! all match its labels (none: never synced by the rollout). Per Application the rollout status
//! moves as in Argo CD's `updateApplicationSetApplicationStatus`:
//! - `Waiting`: out of sync, waiting for its step (or for a slot in it);
//! - `Pending`: its step started and a sync was requested (`operation.sync` set);
//! - `Progressing`: the controller picked the sync up (an `operationState` started after the
//!   request) and the Application is not Synced and Healthy yet;
//! - `Healthy`: Synced and Healthy. An Application that goes out of sync again is `Waiting`.
//!
//! A step starts when every Application of every earlier step is `Healthy`; in a started step,
//! `Waiting` Applications become `Pending` while fewer than `maxUpdate` of the step are `Pending`
//! or `Progressing` (default 100%; percentages round down but to at least 1; `0` = never synced
//! by the rollout). I/O part: [`advance`] requests the syncs [`decide`] allows; [`request_sync`] sets
//! `operation.sync` on one Application.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use crate::api::application::{HealthStatusCode, OperationPhase, SyncStatusCode};
use crate::api::application_set::{
    ApplicationMatchExpression, ApplicationSet, ApplicationSetApplicationStatus, MatchOperator, RollingSyncStep,
    RolloutStatus,
};
use crate::api::Application;

use super::apply::FIELD_MANAGER;

/// A Pending Application whose sync request is not visible after this long is asked again.
pub const REREQUEST_AFTER_SECS: i64 = 30;

/// The user name recorded in `operation.initiatedBy` of rollout syncs.
pub const INITIATOR: &str = "applicationset-controller";

/// What the rollout needs to know of one Application.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RolloutApp {
    /// Name.
    pub name: String,
    /// Labels (steps match on them).
    pub labels: BTreeMap<String, String>,
    /// `status.sync.status`.
    pub sync: SyncStatusCode,
    /// `status.health.status`.
    pub health: HealthStatusCode,
    /// Whether `operation` is set (requested, not picked up yet).
    pub operation_requested: bool,
    /// `status.operationState.phase`.
    pub phase: Option<OperationPhase>,
    /// `status.operationState.startedAt`.
    pub started_at: Option<Time>,
}

impl RolloutApp {
    /// The rollout's view of `app`.
    pub fn of(app: &Application) -> RolloutApp {
        let status = app.status.as_ref();
        let op = status.and_then(|s| s.operation_state.as_ref());
        RolloutApp {
            name: app.metadata.name.clone().unwrap_or_default(),
            labels: app.metadata.labels.clone().unwrap_or_default(),
            sync: status
                .and_then(|s| s.sync.as_ref())
                .map(|s| s.status)
                .unwrap_or_default(),
            health: status
                .and_then(|s| s.health.as_ref())
                .map(|h| h.status)
                .unwrap_or_default(),
            operation_requested: app.operation.is_some(),
            phase: op.map(|o| o.phase),
            started_at: op.and_then(|o| o.started_at.clone()),
        }
    }

    fn synced_and_healthy(&self) -> bool {
        self.sync == SyncStatusCode::Synced && self.health == HealthStatusCode::Healthy
    }

    fn running(&self) -> bool {
        matches!(self.phase, Some(OperationPhase::Running | OperationPhase::Terminating))
    }
}

/// The rollout decision of one reconcile.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Decision {
    /// `status.applicationStatus`, sorted by name.
    pub statuses: Vec<ApplicationSetApplicationStatus>,
    /// Applications to sync now (`operation.sync`), sorted by name.
    pub to_sync: Vec<String>,
    /// Whether any Application matched by a step is not `Healthy` yet.
    pub progressing: bool,
}

/// Whether every expression matches `labels` (`In`: the label is one of `values`; `NotIn`: the
/// label is absent or none of `values`). No expressions match everything.
pub fn step_matches(expressions: &[ApplicationMatchExpression], labels: &BTreeMap<String, String>) -> bool {
    expressions.iter().all(|e| {
        let value = labels.get(&e.key);
        match e.operator {
            MatchOperator::In => value.is_some_and(|v| e.values.contains(v)),
            MatchOperator::NotIn => value.is_none_or(|v| !e.values.contains(v)),
            MatchOperator::Exists => value.is_some(),
            MatchOperator::DoesNotExist => value.is_none(),
        }
    })
}

/// The 0-based step of an Application: the first step matching its labels.
pub fn step_of(steps: &[RollingSyncStep], labels: &BTreeMap<String, String>) -> Option<usize> {
    steps.iter().position(|s| step_matches(&s.match_expressions, labels))
}

/// How many Applications of a step of `size` may be Pending or Progressing at once.
pub fn max_update(value: Option<&IntOrString>, size: usize) -> usize {
    match value {
        None => size,
        Some(IntOrString::Int(n)) => usize::try_from(*n).unwrap_or(0),
        Some(IntOrString::String(s)) => {
            let s = s.trim();
            match s.strip_suffix('%') {
                Some(p) => match p.trim().parse::<u64>() {
                    Ok(0) | Err(_) => 0,
                    Ok(p) => {
                        let scaled = (p.min(100) as usize * size) / 100;
                        scaled.max(1).min(size.max(1))
                    }
                },
                None => s.parse::<usize>().unwrap_or(0),
            }
        }
    }
}

/// Decides the rollout: new statuses and the Applications to sync now. `previous` is the set's
/// current `status.applicationStatus`.
pub fn decide(
    steps: &[RollingSyncStep],
    apps: &[RolloutApp],
    previous: &[ApplicationSetApplicationStatus],
    now: &Time,
) -> Decision {
    let prev: HashMap<&str, &ApplicationSetApplicationStatus> =
        previous.iter().map(|p| (p.application.as_str(), p)).collect();
    let mut apps: Vec<&RolloutApp> = apps.iter().collect();
    apps.sort_by(|a, b| a.name.cmp(&b.name));
    // 1. Per-Application transitions.
    let mut entries: Vec<(Option<usize>, ApplicationSetApplicationStatus, bool)> = Vec::new();
    for app in &apps {
        let step = step_of(steps, &app.labels);
        let before = prev.get(app.name.as_str()).copied();
        let (status, message, resync) = transition(app, before, now);
        let entry = status_entry(app, step, status, message, before, now);
        entries.push((step, entry, resync));
    }
    // 2. Step gating and maxUpdate.
    let mut to_sync = Vec::new();
    let mut earlier_healthy = true;
    for (index, step) in steps.iter().enumerate() {
        let size = entries.iter().filter(|(s, _, _)| *s == Some(index)).count();
        if earlier_healthy {
            let limit = max_update(step.max_update.as_ref(), size);
            let mut busy = entries
                .iter()
                .filter(|(s, e, _)| {
                    *s == Some(index) && matches!(e.status, RolloutStatus::Pending | RolloutStatus::Progressing)
                })
                .count();
            for (s, e, resync) in entries.iter_mut() {
                if *s != Some(index) {
                    continue;
                }
                if e.status == RolloutStatus::Pending && *resync {
                    to_sync.push(e.application.clone());
                }
                if e.status == RolloutStatus::Waiting && busy < limit {
                    set_status(e, RolloutStatus::Pending, PENDING, now);
                    busy += 1;
                    to_sync.push(e.application.clone());
                }
            }
        }
        earlier_healthy = earlier_healthy
            && entries
                .iter()
                .filter(|(s, _, _)| *s == Some(index))
                .all(|(_, e, _)| e.status == RolloutStatus::Healthy);
    }
    let progressing = entries
        .iter()
        .any(|(s, e, _)| s.is_some() && e.status != RolloutStatus::Healthy);
    to_sync.sort();
    to_sync.dedup();
    Decision {
        statuses: entries.into_iter().map(|(_, e, _)| e).collect(),
        to_sync,
        progressing,
    }
}

/// Rollout status messages (Argo CD's wording).
const WAITING: &str = "Application has pending changes, setting status to Waiting";
const ALREADY_HEALTHY: &str = "Application resource is already Healthy, updating status from Waiting to Healthy";
const PENDING: &str = "Application moved to Pending status, watching for the Application resource to start Progressing";
const BECAME_HEALTHY: &str = "Application resource became Healthy, updating status from Progressing to Healthy";
const BECAME_PROGRESSING: &str = "Application resource became Progressing, updating status from Pending to Progressing";

/// The next status of one Application, its message, and whether a sync must be (re)requested for it.
type Transition = (RolloutStatus, &'static str, bool);

/// The next status of one Application and whether a sync must be (re)requested for it.
fn transition(app: &RolloutApp, before: Option<&ApplicationSetApplicationStatus>, now: &Time) -> Transition {
    let healthy = app.synced_and_healthy();
    let out_of_sync = app.sync == SyncStatusCode::OutOfSync;
    match before.map(|b| b.status) {
        None | Some(RolloutStatus::Waiting) if healthy => (RolloutStatus::Healthy, ALREADY_HEALTHY, false),
        None | Some(RolloutStatus::Waiting) => (RolloutStatus::Waiting, WAITING, false),
        Some(RolloutStatus::Pending) => from_pending(app, before, now),
        Some(RolloutStatus::Progressing) => from_progressing(app),
        Some(RolloutStatus::Healthy) if out_of_sync => (RolloutStatus::Waiting, WAITING, false),
        Some(RolloutStatus::Healthy) => (RolloutStatus::Healthy, ALREADY_HEALTHY, false),
    }
}

/// A `Pending` Application: still requested, picked up by the Application controller (an operation
/// started after the request), or its request lost and asked again once overdue.
fn from_pending(app: &RolloutApp, before: Option<&ApplicationSetApplicationStatus>, now: &Time) -> Transition {
    let requested_at = before.and_then(|b| b.last_transition_time.as_ref());
    let picked_up = !app.operation_requested
        && match (&app.started_at, requested_at) {
            (Some(started), Some(requested)) => started.0 >= requested.0,
            _ => false,
        };
    if app.operation_requested {
        (RolloutStatus::Pending, PENDING, false)
    } else if !picked_up {
        // The request was lost (or never written): ask again once the cache had time to see it.
        let overdue = requested_at.is_none_or(|r| now.0.duration_since(r.0).as_secs() >= REREQUEST_AFTER_SECS);
        (RolloutStatus::Pending, PENDING, overdue)
    } else if app.synced_and_healthy() && !app.running() {
        (RolloutStatus::Healthy, BECAME_HEALTHY, false)
    } else {
        (RolloutStatus::Progressing, BECAME_PROGRESSING, false)
    }
}

/// A `Progressing` Application: Healthy once synced and idle, back to `Waiting` when out of sync with
/// nothing running or requested.
fn from_progressing(app: &RolloutApp) -> Transition {
    let out_of_sync = app.sync == SyncStatusCode::OutOfSync;
    if app.synced_and_healthy() && !app.running() {
        (RolloutStatus::Healthy, BECAME_HEALTHY, false)
    } else if out_of_sync && !app.running() && !app.operation_requested {
        (RolloutStatus::Waiting, WAITING, false)
    } else {
        (RolloutStatus::Progressing, BECAME_PROGRESSING, false)
    }
}

fn status_entry(
    app: &RolloutApp,
    step: Option<usize>,
    status: RolloutStatus,
    message: &str,
    before: Option<&ApplicationSetApplicationStatus>,
    now: &Time,
) -> ApplicationSetApplicationStatus {
    let message = match step {
        Some(_) => message.to_owned(),
        None => "Application is matched by no RollingSync step: the rollout never syncs it".to_owned(),
    };
    let mut entry = ApplicationSetApplicationStatus {
        application: app.name.clone(),
        status,
        message: Some(message),
        step: step.map(|s| (s + 1).to_string()),
        last_transition_time: before.and_then(|b| b.last_transition_time.clone()),
    };
    if before.is_none_or(|b| b.status != status) || entry.last_transition_time.is_none() {
        entry.last_transition_time = Some(now.clone());
    }
    entry
}

fn set_status(entry: &mut ApplicationSetApplicationStatus, status: RolloutStatus, message: &str, now: &Time) {
    if entry.status != status {
        entry.last_transition_time = Some(now.clone());
    }
    entry.status = status;
    entry.message = Some(message.to_owned());
}

/// What [`advance`] came to: the per-Application rollout status and whether the rollout is progressing.
#[derive(Clone, Debug, PartialEq)]
pub struct Advanced {
    /// `status.applicationStatus`.
    pub statuses: Vec<ApplicationSetApplicationStatus>,
    /// Some step is not done yet.
    pub progressing: bool,
}

/// What each generated Application wants, by name: its labels and its automated prune flag.
pub type Wanted<'a> = (&'a HashMap<String, BTreeMap<String, String>>, &'a HashMap<String, bool>);

/// One step of the rollout of `set` over its Applications (`owned`; `None`: created in this reconcile,
/// not in the cache yet): [`decide`], then the sync requests it allows. `wanted` holds the labels and
/// the automated prune flag of each generated Application. An Application created just now waits for
/// the next reconcile (its creation triggers it); a failed sync request is logged and asked again.
pub async fn advance(
    api: &Api<Application>,
    set: &ApplicationSet,
    owned: &BTreeMap<String, Option<Arc<Application>>>,
    (labels, prunes): Wanted<'_>,
    now: &Time,
) -> Advanced {
    let steps = set
        .spec
        .strategy
        .as_ref()
        .and_then(|s| s.rolling_sync.as_ref())
        .map(|r| r.steps.clone())
        .unwrap_or_default();
    let views: Vec<RolloutApp> = owned
        .iter()
        .map(|(n, a)| match a {
            Some(a) => RolloutApp::of(a),
            None => RolloutApp {
                name: n.clone(),
                labels: labels.get(n).cloned().unwrap_or_default(),
                ..Default::default()
            },
        })
        .collect();
    let previous = set
        .status
        .as_ref()
        .map(|s| s.application_status.as_slice())
        .unwrap_or_default();
    let mut decision = decide(&steps, &views, previous, now);
    for entry in decision.statuses.iter_mut() {
        let unseen = owned.get(&entry.application).is_some_and(Option::is_none);
        if unseen && decision.to_sync.contains(&entry.application) {
            entry.status = RolloutStatus::Waiting;
            entry.message = Some("Application was just created".to_owned());
        }
    }
    decision.to_sync.retain(|n| owned.get(n).is_some_and(Option::is_some));
    for n in &decision.to_sync {
        if let Some(Some(app)) = owned.get(n) {
            let prune = prunes.get(n).copied().unwrap_or(false);
            if let Err(e) = request_sync(api, app, prune).await {
                tracing::warn!(
                    namespace = set.metadata.namespace.as_deref().unwrap_or_default(),
                    name = set.metadata.name.as_deref().unwrap_or_default(),
                    application = n,
                    "rollout sync request failed: {e}"
                );
            }
        }
    }
    Advanced {
        statuses: decision.statuses,
        progressing: decision.progressing,
    }
}

/// Requests a sync of `name` as Argo CD's RollingSync does: `operation.sync` (with `prune` from the
/// template's automated policy and its sync options and retry), initiated by the controller.
pub async fn request_sync(api: &Api<Application>, app: &Application, prune: bool) -> Result<(), kube::Error> {
    let name = app.metadata.name.clone().unwrap_or_default();
    let policy = app.spec.sync_policy.as_ref();
    let mut operation = json!({
        "initiatedBy": {"username": INITIATOR, "automated": true},
        "info": [{"name": "Reason", "value": "ApplicationSet RollingSync triggered a sync of this Application resource"}],
        "sync": {"prune": prune},
    });
    if let Some(options) = policy.map(|p| &p.sync_options).filter(|o| !o.is_empty()) {
        operation["sync"]["syncOptions"] = json!(options);
    }
    if let Some(retry) = policy.and_then(|p| p.retry.as_ref()) {
        operation["retry"] = serde_json::to_value(retry).unwrap_or_default();
    }
    let patch = json!({ "operation": operation });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    api.patch(&name, &params, &Patch::Merge(&patch)).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn step(env: &[&str], max: Option<IntOrString>) -> RollingSyncStep {
        RollingSyncStep {
            match_expressions: vec![ApplicationMatchExpression {
                key: "env".into(),
                operator: MatchOperator::In,
                values: env.iter().map(|s| s.to_string()).collect(),
            }],
            max_update: max,
        }
    }

    fn app(name: &str, env: &str, sync: SyncStatusCode, health: HealthStatusCode) -> RolloutApp {
        RolloutApp {
            name: name.into(),
            labels: [("env".to_owned(), env.to_owned())].into(),
            sync,
            health,
            ..RolloutApp::default()
        }
    }

    use HealthStatusCode as H;
    use SyncStatusCode as S;

    #[test]
    fn max_update_numbers_percentages_and_zero() {
        assert_eq!(max_update(None, 7), 7);
        assert_eq!(max_update(Some(&IntOrString::Int(2)), 7), 2);
        assert_eq!(max_update(Some(&IntOrString::Int(0)), 7), 0);
        assert_eq!(max_update(Some(&IntOrString::Int(-3)), 7), 0);
        assert_eq!(
            max_update(Some(&IntOrString::String("50%".into())), 7),
            3,
            "rounds down"
        );
        assert_eq!(max_update(Some(&IntOrString::String("10%".into())), 3), 1, "at least 1");
        assert_eq!(max_update(Some(&IntOrString::String("0%".into())), 3), 0, "manual");
        assert_eq!(max_update(Some(&IntOrString::String("100%".into())), 3), 3);
        assert_eq!(max_update(Some(&IntOrString::String("250%".into())), 3), 3);
        assert_eq!(max_update(Some(&IntOrString::String("2".into())), 3), 2);
        assert_eq!(max_update(Some(&IntOrString::String("x%".into())), 3), 0);
    }

    #[test]
    fn expressions_in_and_not_in() {
        let labels: BTreeMap<String, String> = [("env".to_owned(), "dev".to_owned())].into();
        let e = |op, v: &[&str]| ApplicationMatchExpression {
            key: "env".into(),
            operator: op,
            values: v.iter().map(|s| s.to_string()).collect(),
        };
        assert!(step_matches(&[e(MatchOperator::In, &["dev", "qa"])], &labels));
        assert!(!step_matches(&[e(MatchOperator::In, &["prod"])], &labels));
        assert!(step_matches(&[e(MatchOperator::NotIn, &["prod"])], &labels));
        assert!(step_matches(&[e(MatchOperator::NotIn, &["prod"])], &BTreeMap::new()));
        assert!(!step_matches(&[e(MatchOperator::In, &["dev"])], &BTreeMap::new()));
        assert!(step_matches(&[e(MatchOperator::Exists, &[])], &labels));
        assert!(!step_matches(&[e(MatchOperator::Exists, &[])], &BTreeMap::new()));
        assert!(step_matches(&[e(MatchOperator::DoesNotExist, &[])], &BTreeMap::new()));
        assert!(step_matches(&[], &labels), "no expressions match everything");
    }

    #[test]
    fn first_step_syncs_first_and_next_waits_for_health() {
        let steps = vec![step(&["dev"], None), step(&["qa"], None), step(&["prod"], None)];
        let apps = vec![
            app("a-dev", "dev", S::OutOfSync, H::Healthy),
            app("b-qa", "qa", S::OutOfSync, H::Healthy),
            app("c-prod", "prod", S::OutOfSync, H::Healthy),
            app("z-other", "none", S::OutOfSync, H::Healthy),
        ];
        let d = decide(&steps, &apps, &[], &at(100));
        assert_eq!(d.to_sync, vec!["a-dev"]);
        assert!(d.progressing);
        let by = |d: &Decision, n: &str| d.statuses.iter().find(|s| s.application == n).unwrap().clone();
        assert_eq!(by(&d, "a-dev").status, RolloutStatus::Pending);
        assert_eq!(by(&d, "a-dev").step.as_deref(), Some("1"));
        assert_eq!(by(&d, "b-qa").status, RolloutStatus::Waiting);
        assert_eq!(by(&d, "c-prod").step.as_deref(), Some("3"));
        assert_eq!(by(&d, "z-other").step, None);

        // The sync was requested but not picked up: nothing new, no duplicate request.
        let mut apps2 = apps.clone();
        apps2[0].operation_requested = true;
        let d2 = decide(&steps, &apps2, &d.statuses, &at(101));
        assert!(d2.to_sync.is_empty(), "{:?}", d2.to_sync);
        assert_eq!(by(&d2, "a-dev").status, RolloutStatus::Pending);

        // Picked up and running, Progressing health: Progressing; qa still waits.
        let mut apps3 = apps.clone();
        apps3[0].phase = Some(OperationPhase::Running);
        apps3[0].started_at = Some(at(102));
        apps3[0].health = H::Progressing;
        let d3 = decide(&steps, &apps3, &d2.statuses, &at(103));
        assert_eq!(by(&d3, "a-dev").status, RolloutStatus::Progressing);
        assert!(d3.to_sync.is_empty());

        // Synced and Healthy: step 2 starts.
        let mut apps4 = apps3.clone();
        apps4[0].phase = Some(OperationPhase::Succeeded);
        apps4[0].sync = S::Synced;
        apps4[0].health = H::Healthy;
        let d4 = decide(&steps, &apps4, &d3.statuses, &at(104));
        assert_eq!(by(&d4, "a-dev").status, RolloutStatus::Healthy);
        assert_eq!(d4.to_sync, vec!["b-qa"]);
        assert_eq!(by(&d4, "b-qa").status, RolloutStatus::Pending);
        assert_eq!(by(&d4, "b-qa").last_transition_time, Some(at(104)));
        assert_eq!(by(&d4, "c-prod").status, RolloutStatus::Waiting);
        assert!(
            !d4.to_sync.contains(&"z-other".to_owned()),
            "unmatched apps are never synced"
        );
    }

    #[test]
    fn lost_request_is_repeated_and_held_progressing_blocks_next_step() {
        let steps = vec![step(&["dev"], None), step(&["prod"], None)];
        let apps = vec![
            app("a", "dev", S::OutOfSync, H::Healthy),
            app("b", "prod", S::OutOfSync, H::Healthy),
        ];
        let d = decide(&steps, &apps, &[], &at(10));
        assert_eq!(d.to_sync, vec!["a"]);
        // No operation on the object and no operationState since: not yet (the cache may lag)...
        let d = decide(&steps, &apps, &d.statuses, &at(20));
        assert!(d.to_sync.is_empty());
        // ... but after a while, ask again.
        let d = decide(&steps, &apps, &d.statuses, &at(45));
        assert_eq!(d.to_sync, vec!["a"]);
        // Synced but Progressing forever: step 2 never starts.
        let mut held = apps.clone();
        held[0].sync = S::Synced;
        held[0].health = H::Progressing;
        held[0].phase = Some(OperationPhase::Succeeded);
        held[0].started_at = Some(at(25));
        let mut statuses = d.statuses;
        for t in 30..35 {
            let d = decide(&steps, &held, &statuses, &at(t));
            assert!(d.to_sync.is_empty());
            assert_eq!(d.statuses[0].status, RolloutStatus::Progressing);
            assert_eq!(d.statuses[1].status, RolloutStatus::Waiting);
            statuses = d.statuses;
        }
    }

    #[test]
    fn max_update_limits_concurrent_syncs() {
        let apps: Vec<RolloutApp> = (0..5)
            .map(|i| app(&format!("a{i}"), "dev", S::OutOfSync, H::Healthy))
            .collect();
        let d = decide(&[step(&["dev"], Some(IntOrString::Int(2)))], &apps, &[], &at(1));
        assert_eq!(d.to_sync, vec!["a0", "a1"]);
        let d = decide(
            &[step(&["dev"], Some(IntOrString::String("50%".into())))],
            &apps,
            &[],
            &at(1),
        );
        assert_eq!(d.to_sync, vec!["a0", "a1"], "50% of 5 rounds down to 2");
        let d = decide(
            &[step(&["dev"], Some(IntOrString::String("1%".into())))],
            &apps,
            &[],
            &at(1),
        );
        assert_eq!(d.to_sync, vec!["a0"], "at least 1");
        let d = decide(&[step(&["dev"], Some(IntOrString::Int(0)))], &apps, &[], &at(1));
        assert!(d.to_sync.is_empty(), "0 = manual");
        assert!(d.statuses.iter().all(|s| s.status == RolloutStatus::Waiting));
        // A manual step holds every later step.
        let mut two = apps.clone();
        two.push(app("p", "prod", S::OutOfSync, H::Healthy));
        let d = decide(
            &[step(&["dev"], Some(IntOrString::Int(0))), step(&["prod"], None)],
            &two,
            &[],
            &at(1),
        );
        assert!(d.to_sync.is_empty());
    }

    #[test]
    fn healthy_apps_need_no_sync_and_out_of_sync_returns_to_waiting() {
        let steps = vec![step(&["dev"], None), step(&["prod"], None)];
        let apps = vec![
            app("a", "dev", S::Synced, H::Healthy),
            app("b", "prod", S::Synced, H::Healthy),
        ];
        let d = decide(&steps, &apps, &[], &at(1));
        assert!(d.to_sync.is_empty());
        assert!(!d.progressing);
        let mut changed = apps.clone();
        changed[1].sync = S::OutOfSync;
        let d = decide(&steps, &changed, &d.statuses, &at(2));
        // Step 1 is Healthy, so the prod app goes Waiting → Pending at once.
        assert_eq!(d.to_sync, vec!["b"]);
        assert!(d.progressing);
    }
}
