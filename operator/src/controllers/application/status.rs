//! Pure status computation for an Application: everything the reconcile learned goes in as a
//! [`StatusInput`], one complete [`ApplicationStatus`] comes out. No I/O, so every rule (conditions,
//! history cap, truncation) is unit-tested without a cluster; the caller writes the result with ONE
//! status patch (none when only timestamps would change).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::application::{
    ApplicationSourceType, ApplicationSpec, ApplicationStatus, ApplicationSummary, ComparedTo, HealthStatus,
    HealthStatusCode, OperationPhase, OperationState, ResourceStatus, RevisionHistory, SyncStatus, SyncStatusCode,
    DEFAULT_REVISION_HISTORY_LIMIT,
};
use crate::api::conditions::{
    CONDITION_COMPARISON_ERROR, CONDITION_POLICY_DENIED, CONDITION_POLICY_WARNING, CONDITION_READY,
    CONDITION_RECONCILING, CONDITION_SHARED_RESOURCE_WARNING, CONDITION_STALLED, CONDITION_SYNC_ERROR, REASON_DEGRADED,
    REASON_DEPENDENCY_CYCLE, REASON_DEPENDENCY_NOT_READY, REASON_OUT_OF_SYNC, REASON_PROGRESSING,
    REASON_SYNCED_AND_HEALTHY, REASON_SYNC_FAILED, REASON_SYNC_RUNNING, STATUS_FALSE, STATUS_TRUE,
};
use crate::cluster::ClusterError;
use crate::controllers::status::{remove_condition, set_condition};
use crate::render::RenderError;
use crate::source::SourceError;
use crate::text::truncate;

/// Condition type: cascade deletion of the managed resources keeps failing (Argo CD's `DeletionError`).
pub const CONDITION_DELETION_ERROR: &str = "DeletionError";
/// Condition type: `status.resources` was cut to [`MAX_RESOURCES`] entries. Capstan addition.
pub const CONDITION_RESOURCES_TRUNCATED: &str = "ResourcesTruncated";
/// Condition type: a destination or object namespace is outside the Cluster's `spec.namespaces`.
pub const CONDITION_INVALID_SPEC_ERROR: &str = "InvalidSpecError";
/// Condition type: a self-protection guard held a resource back from a prune (reason `Guard`; the
/// message names the guard and the resource). Capstan addition.
pub const CONDITION_PROTECTED_RESOURCE: &str = "ProtectedResourceWarning";
/// Most entries kept in `status.resources` (status stays far below etcd's object size limit).
pub const MAX_RESOURCES: usize = 5000;
/// Longest `operationState.message` / health message kept.
pub const MAX_STATUS_MESSAGE: usize = 1024;

/// The outcome of comparing desired and live state.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Compared {
    /// The commit compared against.
    pub revision: String,
    /// Every resource, sorted; hooks included with `hook: true`.
    pub resources: Vec<ResourceStatus>,
    /// Application sync status (`Synced`/`OutOfSync`).
    pub sync: SyncStatusCode,
    /// Aggregated health.
    pub health: HealthStatus,
    /// How the source was rendered.
    pub source_type: Option<ApplicationSourceType>,
    /// Container images of the desired objects, sorted and deduplicated.
    pub images: Vec<String>,
    /// Desired objects tracked by another Application: `"<key> is part of application <ns>/<name>"`.
    pub shared: Vec<String>,
}

/// What kind of trouble a [`Problem`] is: decides `Stalled` and how a failed comparison is retried.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProblemKind {
    /// May clear up by itself (network, API server, timeouts): retried with backoff.
    Transient,
    /// The spec, or what Git holds for it, cannot work as written (bad YAML, a path escaping the
    /// checkout, a namespace outside the Cluster's allow-list, a `dependsOn` cycle): `Stalled` until it
    /// changes.
    InvalidSpec,
    /// Needs a fix elsewhere (credentials, a missing repository or Cluster, a refused tool), or is a
    /// state rather than a failure (a refused sync, a dependency not ready).
    #[default]
    Permanent,
}

/// An error condition to set: reason (a stable category), sanitized message and kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Stable PascalCase reason.
    pub reason: &'static str,
    /// Sanitized message.
    pub message: String,
    /// What kind of trouble it is.
    pub kind: ProblemKind,
}

impl Problem {
    /// A [`ProblemKind::Permanent`] problem with `reason` and `message`.
    pub fn new(reason: &'static str, message: impl Into<String>) -> Self {
        Problem::of_kind(ProblemKind::Permanent, reason, message)
    }

    /// A [`ProblemKind::InvalidSpec`] problem.
    pub fn invalid_spec(reason: &'static str, message: impl Into<String>) -> Self {
        Problem::of_kind(ProblemKind::InvalidSpec, reason, message)
    }

    /// A problem of `kind`.
    pub fn of_kind(kind: ProblemKind, reason: &'static str, message: impl Into<String>) -> Self {
        Problem {
            reason,
            message: message.into(),
            kind,
        }
    }

    /// A destination failure: the namespace allow-list and the Cluster configuration are the spec's
    /// (or the Cluster's) to fix; network and server trouble is transient.
    pub fn from_cluster(e: &ClusterError) -> Self {
        let kind = match e {
            ClusterError::NamespaceNotAllowed(_) | ClusterError::InvalidConfig(_) => ProblemKind::InvalidSpec,
            e if e.is_transient() => ProblemKind::Transient,
            _ => ProblemKind::Permanent,
        };
        Problem::of_kind(kind, e.category(), e.to_string())
    }

    /// A source failure with its sanitized `message`.
    pub fn from_source(e: &SourceError, message: String) -> Self {
        let kind = if e.is_transient() {
            ProblemKind::Transient
        } else {
            ProblemKind::Permanent
        };
        Problem::of_kind(kind, e.category(), message)
    }

    /// A render failure: what Git holds cannot work as written (bad YAML, paths, spec), the tool ran
    /// out of time or I/O failed (transient), or something else needs a fix (permanent).
    pub fn from_render(e: &RenderError) -> Self {
        let kind = match e {
            RenderError::InvalidYaml(_)
            | RenderError::InvalidSpec(_)
            | RenderError::PathEscape(_)
            | RenderError::InvalidPath(_) => ProblemKind::InvalidSpec,
            RenderError::Timeout(_) | RenderError::Io(_) => ProblemKind::Transient,
            _ => ProblemKind::Permanent,
        };
        Problem::of_kind(kind, e.category().as_str(), e.to_string())
    }
}

/// Everything one reconcile learned.
#[derive(Clone, Debug)]
pub struct StatusInput<'a> {
    /// The previous status.
    pub old: Option<&'a ApplicationStatus>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// The spec compared against (becomes `sync.comparedTo`).
    pub spec: &'a ApplicationSpec,
    /// The comparison; `None` when it failed or did not run (previous resources and health are kept).
    pub compared: Option<&'a Compared>,
    /// Why the comparison failed (sync status becomes `Unknown`).
    pub comparison_error: Option<Problem>,
    /// The operation state after this reconcile (`None` keeps the previous one).
    pub operation_state: Option<&'a OperationState>,
    /// Record the operation in `status.history` (a complete, real, successful sync just finished).
    pub record_history: bool,
    /// A sync could not be started or failed for good (automated sync refused, rollback refused, ...).
    pub sync_error: Option<Problem>,
    /// Waiting for `spec.dependsOn` (reason `DependencyNotReady` or `DependencyCycle`).
    pub dependency: Option<Problem>,
    /// Cascade deletion keeps failing.
    pub deletion_error: Option<Problem>,
    /// The spec cannot work (namespace outside the Cluster's allow-list, invalid destination, ...).
    pub invalid_spec: Option<Problem>,
    /// PolicySets deny syncing the rendered state (`PolicyDenied`).
    pub policy_denied: Option<Problem>,
    /// PolicySets warn about it (`PolicyWarning`).
    pub policy_warning: Option<Problem>,
    /// Now.
    pub now: Time,
}

/// The new status (see the module doc).
pub fn compute(input: &StatusInput<'_>) -> ApplicationStatus {
    let mut status = input.old.cloned().unwrap_or_default();
    status.observed_generation = input.generation;
    if let Some(op) = input.operation_state {
        let mut op = op.clone();
        op.message = op.message.map(|m| truncate(&m, MAX_STATUS_MESSAGE));
        if input.record_history {
            push_history(&mut status.history, &op, input.spec.revision_history_limit);
        }
        status.operation_state = Some(op);
    }
    cap_history(&mut status.history, input.spec.revision_history_limit);
    apply_comparison(&mut status, input);
    set_conditions(&mut status, input);
    status
}

fn apply_comparison(status: &mut ApplicationStatus, input: &StatusInput<'_>) {
    let compared_to = ComparedTo {
        source: input.spec.source.clone(),
        destination: input.spec.destination.clone(),
        ignore_differences: input.spec.ignore_differences.clone(),
    };
    if let Some(c) = input.compared {
        status.sync = Some(SyncStatus {
            status: if input.comparison_error.is_some() {
                SyncStatusCode::Unknown
            } else {
                c.sync
            },
            revision: Some(c.revision.clone()).filter(|r| !r.is_empty()),
            revisions: Vec::new(),
            compared_to: Some(compared_to),
        });
        let mut health = c.health.clone();
        health.message = health.message.map(|m| truncate(&m, MAX_STATUS_MESSAGE));
        health.last_transition_time = match &status.health {
            Some(old) if old.status == health.status => old.last_transition_time.clone(),
            _ => Some(input.now.clone()),
        };
        status.health = Some(health);
        let mut resources = c.resources.clone();
        resources.truncate(MAX_RESOURCES);
        status.resources = resources;
        status.source_type = c.source_type;
        status.summary = (!c.images.is_empty()).then(|| ApplicationSummary {
            images: c.images.clone(),
            external_urls: Vec::new(),
        });
        status.reconciled_at = Some(input.now.clone());
        status.observed_at = Some(input.now.clone());
    } else if input.comparison_error.is_some() {
        let old = status.sync.take().unwrap_or_default();
        status.sync = Some(SyncStatus {
            status: SyncStatusCode::Unknown,
            compared_to: Some(compared_to),
            ..old
        });
        status.reconciled_at = Some(input.now.clone());
    }
}

/// The guards the last sync's prunes tripped (their results start with "guard "), as one problem.
fn guarded(status: &ApplicationStatus) -> Option<Problem> {
    let results = status.operation_state.as_ref()?.sync_result.as_ref()?;
    let held: Vec<&str> = results
        .resources
        .iter()
        .filter_map(|r| r.message.as_deref())
        .filter(|m| m.starts_with("guard "))
        .collect();
    (!held.is_empty()).then(|| Problem::new("Guard", truncate(&held.join("; "), MAX_STATUS_MESSAGE)))
}

fn set_conditions(status: &mut ApplicationStatus, input: &StatusInput<'_>) {
    let (gen, now) = (input.generation, &input.now);
    let protected = guarded(status);
    let conds = &mut status.conditions;
    let mut toggle = |type_: &str, problem: Option<&Problem>| match problem {
        Some(p) => set_condition(conds, type_, STATUS_TRUE, p.reason, &p.message, gen, now),
        None => remove_condition(conds, type_),
    };
    toggle(CONDITION_COMPARISON_ERROR, input.comparison_error.as_ref());
    toggle(CONDITION_SYNC_ERROR, input.sync_error.as_ref());
    toggle(CONDITION_DELETION_ERROR, input.deletion_error.as_ref());
    toggle(CONDITION_INVALID_SPEC_ERROR, input.invalid_spec.as_ref());
    toggle(CONDITION_POLICY_DENIED, input.policy_denied.as_ref());
    toggle(CONDITION_POLICY_WARNING, input.policy_warning.as_ref());
    toggle(CONDITION_PROTECTED_RESOURCE, protected.as_ref());
    if let Some(c) = input.compared {
        let shared = (!c.shared.is_empty()).then(|| Problem::new("SharedResource", c.shared.join("; ")));
        toggle(CONDITION_SHARED_RESOURCE_WARNING, shared.as_ref());
        let truncated = (c.resources.len() > MAX_RESOURCES).then(|| {
            Problem::new(
                "TooManyResources",
                format!(
                    "status.resources lists the first {MAX_RESOURCES} of {} resources",
                    c.resources.len()
                ),
            )
        });
        toggle(CONDITION_RESOURCES_TRUNCATED, truncated.as_ref());
    }
    let (ready, reason, message) = readiness(status, input);
    let conds = &mut status.conditions;
    let ready_status = if ready { STATUS_TRUE } else { STATUS_FALSE };
    set_condition(conds, CONDITION_READY, ready_status, &reason, &message, gen, now);
    if [REASON_SYNC_RUNNING, REASON_PROGRESSING, REASON_DEPENDENCY_NOT_READY].contains(&reason.as_str()) {
        set_condition(conds, CONDITION_RECONCILING, STATUS_TRUE, &reason, &message, gen, now);
    } else {
        remove_condition(conds, CONDITION_RECONCILING);
    }
    match stalled(input) {
        Some(p) => set_condition(conds, CONDITION_STALLED, STATUS_TRUE, p.reason, &p.message, gen, now),
        None => remove_condition(conds, CONDITION_STALLED),
    }
}

/// `Stalled`: nothing will change without a change to the spec or Git — the first
/// [`ProblemKind::InvalidSpec`] problem among the invalid spec, the dependencies (a cycle) and the
/// comparison (bad YAML, a path escaping the checkout).
fn stalled<'a>(input: &'a StatusInput<'_>) -> Option<&'a Problem> {
    [&input.invalid_spec, &input.dependency, &input.comparison_error]
        .into_iter()
        .flatten()
        .find(|p| p.kind == ProblemKind::InvalidSpec)
}

/// `Ready` = Synced and Healthy, no operation running or failed, no error condition.
fn readiness(status: &ApplicationStatus, input: &StatusInput<'_>) -> (bool, String, String) {
    let problem = input
        .invalid_spec
        .as_ref()
        .or(input.comparison_error.as_ref())
        .or(input.deletion_error.as_ref())
        .or(input.policy_denied.as_ref());
    if let Some(p) = problem {
        return (false, p.reason.to_string(), p.message.clone());
    }
    if let Some(p) = &input.dependency {
        // A cycle stalls; anything else (a dependency not ready, PolicySets not listed) is waited for.
        let reason = match p.kind {
            ProblemKind::InvalidSpec => REASON_DEPENDENCY_CYCLE,
            _ => REASON_DEPENDENCY_NOT_READY,
        };
        return (false, reason.into(), p.message.clone());
    }
    let op = status.operation_state.as_ref();
    if let Some(op) = op.filter(|o| matches!(o.phase, OperationPhase::Running | OperationPhase::Terminating)) {
        let message = op.message.clone().unwrap_or_else(|| "sync operation running".into());
        return (false, REASON_SYNC_RUNNING.into(), message);
    }
    if let Some(p) = &input.sync_error {
        return (false, REASON_SYNC_FAILED.into(), p.message.clone());
    }
    let sync = status.sync.as_ref().map(|s| s.status).unwrap_or_default();
    let health = status.health.as_ref().map(|h| h.status).unwrap_or_default();
    let last_failed = op.is_some_and(|o| matches!(o.phase, OperationPhase::Failed | OperationPhase::Error));
    if last_failed && sync != SyncStatusCode::Synced {
        let message = op
            .and_then(|o| o.message.clone())
            .unwrap_or_else(|| "the last sync failed".into());
        return (false, REASON_SYNC_FAILED.into(), message);
    }
    let (ready, reason, message) = match (sync, health) {
        (SyncStatusCode::Synced, HealthStatusCode::Healthy) => {
            (true, REASON_SYNCED_AND_HEALTHY, "Synced and Healthy".into())
        }
        (SyncStatusCode::OutOfSync, _) => (false, REASON_OUT_OF_SYNC, "the live state differs from Git".into()),
        (SyncStatusCode::Unknown, _) => (false, REASON_PROGRESSING, "not compared yet".into()),
        (_, HealthStatusCode::Degraded) => (false, REASON_DEGRADED, health_message(status)),
        (_, _) => (false, REASON_PROGRESSING, health_message(status)),
    };
    (ready, reason.to_string(), message)
}

fn health_message(status: &ApplicationStatus) -> String {
    status
        .health
        .as_ref()
        .map(|h| match &h.message {
            Some(m) => format!("health {:?}: {m}", h.status),
            None => format!("health {:?}", h.status),
        })
        .unwrap_or_else(|| "health unknown".into())
}

/// Appends the finished operation to `history` (ids grow from the last one), capped at `limit`.
pub fn push_history(history: &mut Vec<RevisionHistory>, op: &OperationState, limit: Option<i64>) {
    let Some(result) = op.sync_result.as_ref() else { return };
    let id = history.iter().map(|h| h.id).max().map_or(0, |m| m + 1);
    history.push(RevisionHistory {
        id,
        revision: result.revision.clone(),
        source: result.source.clone(),
        deployed_at: op.finished_at.clone(),
        deploy_started_at: op.started_at.clone(),
        initiated_by: op.operation.initiated_by.clone(),
    });
    cap_history(history, limit);
}

/// Keeps the newest `limit` entries (default 10; negative counts as 0).
pub fn cap_history(history: &mut Vec<RevisionHistory>, limit: Option<i64>) {
    let limit = usize::try_from(limit.unwrap_or(DEFAULT_REVISION_HISTORY_LIMIT).max(0)).unwrap_or(0);
    if history.len() > limit {
        let excess = history.len() - limit;
        history.drain(..excess);
    }
}

#[cfg(test)]
mod tests;
