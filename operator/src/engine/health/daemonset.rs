//! DaemonSet health: gitops-engine `health_daemonset.go`, itself kubectl's `rollout status`.

use serde_json::Value;

use super::{health, int_or_zero, spec_not_observed, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};
use crate::engine::object;

/// Argo CD's rule, in order:
/// - `metadata.generation > status.observedGeneration` → Progressing;
/// - `OnDelete` strategy → Healthy (pods are replaced by hand);
/// - `status.updatedNumberScheduled < status.desiredNumberScheduled` → Progressing;
/// - `status.numberAvailable < status.desiredNumberScheduled` → Progressing;
/// - else Healthy.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if let Some(waiting) = spec_not_observed(obj, "daemon set") {
        return waiting;
    }
    let desired = int_or_zero(obj, "/status/desiredNumberScheduled");
    let updated = int_or_zero(obj, "/status/updatedNumberScheduled");
    let available = int_or_zero(obj, "/status/numberAvailable");
    if str_at(obj, "/spec/updateStrategy/type") == "OnDelete" {
        return health(
            HealthStatusCode::Healthy,
            format!("daemon set {updated} out of {desired} new pods have been updated"),
        );
    }
    let name = object::name(obj);
    if updated < desired {
        return health(
            HealthStatusCode::Progressing,
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {updated} out of {desired} new pods have been updated..."
            ),
        );
    }
    if available < desired {
        return health(
            HealthStatusCode::Progressing,
            format!(
                "Waiting for daemon set {name:?} rollout to finish: {available} of {desired} updated pods are available..."
            ),
        );
    }
    health(HealthStatusCode::Healthy, "")
}
