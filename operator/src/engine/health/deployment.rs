//! Deployment health: gitops-engine `health_deployment.go`, itself kubectl's `rollout status`.

use serde_json::Value;

use super::{bool_at, condition, health, int, int_or_zero, spec_not_observed};
use crate::api::application::{HealthStatusCode, ResourceHealth};
use crate::engine::object;

/// Argo CD's rule, in order:
/// - `spec.paused` → Suspended "Deployment is paused";
/// - `metadata.generation > status.observedGeneration` → Progressing (the controller has not seen the spec);
/// - `Progressing` condition with reason `ProgressDeadlineExceeded` → Degraded;
/// - `status.updatedReplicas < spec.replicas` → Progressing (new replicas not all created);
/// - `status.replicas > status.updatedReplicas` → Progressing (old replicas still terminating);
/// - `status.availableReplicas < status.updatedReplicas` → Progressing (new replicas not all available);
/// - else Healthy.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if bool_at(obj, "/spec/paused") {
        return health(HealthStatusCode::Suspended, "Deployment is paused");
    }
    if let Some(waiting) = spec_not_observed(obj, "deployment") {
        return waiting;
    }
    if condition(obj, "Progressing").is_some_and(|c| c.reason == "ProgressDeadlineExceeded") {
        return health(
            HealthStatusCode::Degraded,
            format!("Deployment {:?} exceeded its progress deadline", object::name(obj)),
        );
    }
    let replicas = int_or_zero(obj, "/status/replicas");
    let updated = int_or_zero(obj, "/status/updatedReplicas");
    let available = int_or_zero(obj, "/status/availableReplicas");
    if let Some(desired) = int(obj, "/spec/replicas").filter(|d| updated < *d) {
        return progressing(format!(
            "Waiting for rollout to finish: {updated} out of {desired} new replicas have been updated..."
        ));
    }
    if replicas > updated {
        return progressing(format!(
            "Waiting for rollout to finish: {} old replicas are pending termination...",
            replicas.saturating_sub(updated)
        ));
    }
    if available < updated {
        return progressing(format!(
            "Waiting for rollout to finish: {available} of {updated} updated replicas are available..."
        ));
    }
    health(HealthStatusCode::Healthy, "")
}

fn progressing(message: impl Into<String>) -> ResourceHealth {
    health(HealthStatusCode::Progressing, message)
}
