//! StatefulSet health: gitops-engine `health_statefulset.go`, itself kubectl's `rollout status`.

use serde_json::Value;

use super::{health, int, int_or_zero, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule, in order:
/// - `status.observedGeneration` is 0 or behind `metadata.generation` → Progressing;
/// - `status.readyReplicas < spec.replicas` → Progressing;
/// - `RollingUpdate` strategy with a `rollingUpdate` block: with a partition, `updatedReplicas < replicas −
///   partition` → Progressing; otherwise Healthy ("partitioned roll out complete");
/// - `OnDelete` strategy → Healthy (pods are replaced by hand);
/// - `status.updateRevision ≠ status.currentRevision` → Progressing;
/// - else Healthy.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    let generation = int_or_zero(obj, "/metadata/generation");
    let observed = int_or_zero(obj, "/status/observedGeneration");
    if observed == 0 || generation > observed {
        return progressing("Waiting for statefulset spec update to be observed...".into());
    }
    let desired = int(obj, "/spec/replicas");
    let ready = int_or_zero(obj, "/status/readyReplicas");
    let updated = int_or_zero(obj, "/status/updatedReplicas");
    if let Some(desired) = desired.filter(|d| ready < *d) {
        return progressing(format!(
            "Waiting for {} pods to be ready...",
            desired.saturating_sub(ready)
        ));
    }
    let strategy = str_at(obj, "/spec/updateStrategy/type");
    let rolling_update = obj
        .pointer("/spec/updateStrategy/rollingUpdate")
        .is_some_and(Value::is_object);
    if strategy == "RollingUpdate" && rolling_update {
        let partition = int(obj, "/spec/updateStrategy/rollingUpdate/partition");
        if let (Some(desired), Some(partition)) = (desired, partition) {
            let expected = desired.saturating_sub(partition);
            if updated < expected {
                return progressing(format!(
                    "Waiting for partitioned roll out to finish: {updated} out of {expected} new pods have been updated..."
                ));
            }
        }
        return healthy(format!(
            "partitioned roll out complete: {updated} new pods have been updated..."
        ));
    }
    if strategy == "OnDelete" {
        return healthy(format!("statefulset has {ready} ready pods"));
    }
    let update_revision = str_at(obj, "/status/updateRevision");
    let current_revision = str_at(obj, "/status/currentRevision");
    if update_revision != current_revision {
        return progressing(format!(
            "waiting for statefulset rolling update to complete {updated} pods at revision {update_revision}..."
        ));
    }
    let current = int_or_zero(obj, "/status/currentReplicas");
    healthy(format!(
        "statefulset rolling update complete {current} pods at revision {current_revision}..."
    ))
}

fn progressing(message: String) -> ResourceHealth {
    health(HealthStatusCode::Progressing, message)
}

fn healthy(message: String) -> ResourceHealth {
    health(HealthStatusCode::Healthy, message)
}
