//! ReplicaSet health: gitops-engine `health_replicaset.go`.

use serde_json::Value;

use super::{condition, health, int, int_or_zero, spec_not_observed};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule, in order:
/// - `metadata.generation > status.observedGeneration` → Progressing;
/// - `ReplicaFailure=True` (quota, admission denied, …) → Degraded with the condition's message;
/// - `status.availableReplicas < spec.replicas` → Progressing;
/// - else Healthy.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if let Some(waiting) = spec_not_observed(obj, "replica set") {
        return waiting;
    }
    if let Some(failure) = condition(obj, "ReplicaFailure").filter(|c| c.is_true()) {
        return health(HealthStatusCode::Degraded, failure.message);
    }
    let available = int_or_zero(obj, "/status/availableReplicas");
    if let Some(desired) = int(obj, "/spec/replicas").filter(|d| available < *d) {
        return health(
            HealthStatusCode::Progressing,
            format!("Waiting for rollout to finish: {available} out of {desired} new replicas are available..."),
        );
    }
    health(HealthStatusCode::Healthy, "")
}
