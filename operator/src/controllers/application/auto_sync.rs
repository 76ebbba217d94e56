//! The automated-sync decision (pure), as Argo CD's `autoSync` makes it: automated sync only when
//! OutOfSync, one attempt per revision, selfHeal re-applying only drifted resources with its own
//! backoff, refusal to prune everything without `allowEmpty`; and the rules around it: retries of
//! failed operations with exponential backoff, rollback refused while automated sync is on, the refresh
//! annotations. Which operation a reconcile advances, all things considered, is [`super::choice`].

use std::time::Duration;

use crate::api::application::{
    Backoff, Operation, OperationInitiator, OperationPhase, OperationState, ResourceStatus, RetryStrategy,
    RevisionHistory, SyncOperation, SyncOperationResource, SyncPolicy, SyncPolicyAutomated, SyncStatusCode,
};
use crate::controllers::parse_duration;
use crate::engine::plan::automated_sync_refusal;
use crate::text::short_sha;

/// Retry limit of an automated sync whose sync policy has no `retry` block (Argo CD's default).
pub const AUTOMATED_DEFAULT_RETRY_LIMIT: i64 = 5;
/// Default first retry delay.
pub const RETRY_DURATION: Duration = Duration::from_secs(5);
/// Default retry growth factor.
pub const RETRY_FACTOR: u32 = 2;
/// Default longest retry delay.
pub const RETRY_MAX: Duration = Duration::from_secs(180);
/// SelfHeal backoff: first delay, factor and cap (`controller.self.heal.backoff.*`).
pub const SELF_HEAL_DURATION: Duration = Duration::from_secs(2);
/// SelfHeal backoff factor.
pub const SELF_HEAL_FACTOR: u32 = 3;
/// SelfHeal backoff cap.
pub const SELF_HEAL_MAX: Duration = Duration::from_secs(300);

/// The automated sync policy when it is switched on (`automated` present and `enabled` not false).
pub fn automated(sync_policy: Option<&SyncPolicy>) -> Option<&SyncPolicyAutomated> {
    sync_policy
        .and_then(|p| p.automated.as_ref())
        .filter(|a| a.enabled != Some(false))
}

/// What automated sync decides.
#[derive(Clone, Debug, PartialEq)]
pub enum AutoDecision {
    /// Nothing to do (not automated, in sync, only pruning needed with prune off, already done).
    Idle,
    /// Start this sync operation.
    Sync(Box<Operation>),
    /// The last attempt at this revision failed: no new attempt (condition `SyncError`).
    AlreadyFailed(String),
    /// The sync would delete every resource and `allowEmpty` is off (condition `SyncError`).
    Refused(String),
    /// SelfHeal is due but backing off; look again after this long.
    Backoff(Duration),
}

/// Everything the automated decision reads.
#[derive(Clone, Debug)]
pub struct AutoInput<'a> {
    /// `spec.syncPolicy`.
    pub sync_policy: Option<&'a SyncPolicy>,
    /// The comparison's sync status (never `Unknown` here: comparison errors never sync).
    pub sync: SyncStatusCode,
    /// The resolved revision compared against.
    pub revision: &'a str,
    /// The comparison's resources.
    pub resources: &'a [ResourceStatus],
    /// The last (completed) operation.
    pub last: Option<&'a OperationState>,
    /// SelfHeal syncs already made for the current revision (resets when a sync is not a self-heal).
    pub self_heal_attempts: u32,
    /// Time since the last operation finished.
    pub since_last: Option<Duration>,
}

/// Argo CD's `autoSync` decision table.
pub fn decide(input: &AutoInput<'_>) -> AutoDecision {
    let Some(auto) = automated(input.sync_policy) else {
        return AutoDecision::Idle;
    };
    if input.sync != SyncStatusCode::OutOfSync {
        return AutoDecision::Idle;
    }
    if let Some(reason) = input
        .sync_policy
        .and_then(|p| automated_sync_refusal(p, input.resources))
    {
        return AutoDecision::Refused(reason);
    }
    let needs_apply = input
        .resources
        .iter()
        .any(|r| !r.hook && !r.requires_pruning && r.status == Some(SyncStatusCode::OutOfSync));
    if !needs_apply && !auto.prune {
        return AutoDecision::Idle;
    }
    let attempted = input.last.filter(|op| {
        op.sync_result.as_ref().is_some_and(|r| r.revision == input.revision)
            && op.operation.sync.as_ref().is_some_and(|s| !s.dry_run)
    });
    match attempted {
        Some(op) if matches!(op.phase, OperationPhase::Failed | OperationPhase::Error) => {
            let message = op.message.as_deref().unwrap_or("sync failed");
            AutoDecision::AlreadyFailed(format!(
                "Failed last sync attempt to {}: {message}",
                short_sha(input.revision)
            ))
        }
        Some(_) if !auto.self_heal => AutoDecision::Idle,
        Some(_) => {
            let delay = backoff(
                SELF_HEAL_DURATION,
                SELF_HEAL_FACTOR,
                SELF_HEAL_MAX,
                input.self_heal_attempts,
            );
            match input.since_last {
                Some(elapsed) if elapsed < delay => AutoDecision::Backoff(delay - elapsed),
                _ => AutoDecision::Sync(Box::new(self_heal_operation(input, auto.prune))),
            }
        }
        None => AutoDecision::Sync(Box::new(automated_operation(
            input.revision,
            auto.prune,
            Vec::new(),
            input.sync_policy,
        ))),
    }
}

/// SelfHeal syncs only what drifted: the non-Synced resources (pruning ones only with auto-prune).
fn self_heal_operation(input: &AutoInput<'_>, prune: bool) -> Operation {
    let resources: Vec<SyncOperationResource> = input
        .resources
        .iter()
        .filter(|r| !r.hook && r.status != Some(SyncStatusCode::Synced))
        .filter(|r| prune || !r.requires_pruning)
        .map(|r| SyncOperationResource {
            group: r.group.clone().filter(|g| !g.is_empty()),
            kind: r.kind.clone(),
            name: r.name.clone(),
            namespace: r.namespace.clone().filter(|n| !n.is_empty()),
        })
        .collect();
    automated_operation(input.revision, prune, resources, input.sync_policy)
}

fn automated_operation(
    revision: &str,
    prune: bool,
    resources: Vec<SyncOperationResource>,
    sync_policy: Option<&SyncPolicy>,
) -> Operation {
    Operation {
        sync: Some(SyncOperation {
            revision: Some(revision.to_string()),
            prune,
            resources,
            sync_options: sync_policy.map(|p| p.sync_options.clone()).unwrap_or_default(),
            ..SyncOperation::default()
        }),
        initiated_by: Some(OperationInitiator {
            username: None,
            automated: true,
        }),
        retry: Some(retry_strategy(sync_policy, true)),
        ..Operation::default()
    }
}

/// The retry strategy of an operation: its own, else the sync policy's, else limit 5 for automated syncs
/// (Argo CD's `RetryStrategy{Limit: 5}`), else none (limit 0).
pub fn retry_strategy(sync_policy: Option<&SyncPolicy>, automated: bool) -> RetryStrategy {
    match sync_policy.and_then(|p| p.retry.clone()) {
        Some(r) => r,
        None if automated => RetryStrategy {
            limit: Some(AUTOMATED_DEFAULT_RETRY_LIMIT),
            ..RetryStrategy::default()
        },
        None => RetryStrategy::default(),
    }
}

/// When a failed operation is retried: `Some(delay)` while `retryCount < limit` (negative limit:
/// forever), with delay = duration·factorⁿ capped at maxDuration (`NextRetryAt`).
pub fn next_retry(strategy: &RetryStrategy, retry_count: i64) -> Option<Duration> {
    let limit = strategy.limit.unwrap_or(0);
    if limit >= 0 && retry_count >= limit {
        return None;
    }
    let b = strategy.backoff.clone().unwrap_or_default();
    let (first, factor, max) = backoff_params(&b);
    let n = u32::try_from(retry_count.max(0)).unwrap_or(u32::MAX);
    Some(backoff(first, factor, max, n))
}

fn backoff_params(b: &Backoff) -> (Duration, u32, Duration) {
    let parse = |s: &Option<String>, default: Duration| {
        s.as_deref()
            .and_then(|s| {
                parse_duration(s)
                    .ok()
                    .or_else(|| s.parse::<u64>().ok().map(Duration::from_secs))
            })
            .unwrap_or(default)
    };
    let factor = b
        .factor
        .and_then(|f| u32::try_from(f).ok())
        .filter(|f| *f >= 1)
        .unwrap_or(RETRY_FACTOR);
    (
        parse(&b.duration, RETRY_DURATION),
        factor,
        parse(&b.max_duration, RETRY_MAX),
    )
}

/// `first · factorⁿ`, capped at `max`, without overflow.
pub fn backoff(first: Duration, factor: u32, max: Duration, n: u32) -> Duration {
    let mut d = first;
    for _ in 0..n.min(64) {
        d = d.saturating_mul(factor);
        if d >= max {
            return max;
        }
    }
    d.min(max)
}

/// A rollback turned into a sync to the history entry's revision and source, or why it is refused.
pub fn rollback_to_sync(
    op: &Operation,
    id: i64,
    history: &[RevisionHistory],
    sync_policy: Option<&SyncPolicy>,
) -> Result<Operation, String> {
    if automated(sync_policy).is_some() {
        return Err("rollback cannot be initiated when auto-sync is enabled".into());
    }
    let entry = history
        .iter()
        .find(|h| h.id == id)
        .ok_or_else(|| format!("history entry with id {id} not found"))?;
    Ok(Operation {
        sync: Some(SyncOperation {
            revision: Some(entry.revision.clone()),
            source: entry.source.clone(),
            ..SyncOperation::default()
        }),
        rollback: None,
        ..op.clone()
    })
}

/// The refresh requested by the refresh annotations: `Some(true)` hard, `Some(false)` normal.
pub fn refresh_requested(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<bool> {
    let annotations = annotations?;
    let values: Vec<&String> = crate::api::labels::REFRESH_ANNOTATIONS
        .iter()
        .filter_map(|k| annotations.get(*k))
        .collect();
    if values.is_empty() {
        return None;
    }
    Some(values.iter().any(|v| v.as_str() == crate::api::labels::REFRESH_HARD))
}

#[cfg(test)]
mod tests;
