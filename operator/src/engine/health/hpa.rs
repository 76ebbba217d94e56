//! HorizontalPodAutoscaler health: gitops-engine `health_hpa.go`.

use serde_json::Value;

use super::{conditions, conditions_of, health, Condition};
use crate::api::application::{HealthStatusCode, ResourceHealth};
use crate::engine::object;

/// Where `autoscaling/v1` keeps the v2 conditions.
const V1_CONDITIONS_ANNOTATION: &str = "autoscaling.alpha.kubernetes.io/conditions";

/// Condition reasons that mean the autoscaler cannot do its job (Argo CD's `isDegraded`, with the metric
/// reasons of current Argo CD).
const DEGRADED: [(&str, &str); 8] = [
    ("AbleToScale", "FailedGetScale"),
    ("AbleToScale", "FailedUpdateScale"),
    ("ScalingActive", "FailedGetResourceMetric"),
    ("ScalingActive", "FailedGetObjectMetric"),
    ("ScalingActive", "FailedGetPodsMetric"),
    ("ScalingActive", "FailedGetExternalMetric"),
    ("ScalingActive", "FailedComputeMetricsReplicas"),
    ("ScalingActive", "InvalidSelector"),
];

/// `autoscaling/v2` (and v2beta1/v2beta2): the rule of [`from_conditions`] on `status.conditions`. An
/// object read at v1 but carrying `status.conditions` is read the same way.
pub(super) fn assess_v2(obj: &Value) -> ResourceHealth {
    from_conditions(&conditions(obj))
}

/// `autoscaling/v1`: the conditions are a JSON list in the annotation
/// `autoscaling.alpha.kubernetes.io/conditions`; without it (or with an empty list) → Progressing "Waiting to
/// Autoscale"; an unparsable annotation → Unknown (Argo CD's conversion error).
pub(super) fn assess_v1(obj: &Value) -> ResourceHealth {
    let Some(raw) = object::annotation(obj, V1_CONDITIONS_ANNOTATION) else {
        return assess_v2(obj);
    };
    match serde_json::from_str::<Value>(raw) {
        Ok(list) if list.is_array() => from_conditions(&conditions_of(&list)),
        Ok(_) => health(
            HealthStatusCode::Unknown,
            "failed to convert conditions annotation to typed: not a list",
        ),
        Err(e) => health(
            HealthStatusCode::Unknown,
            format!("failed to convert conditions annotation to typed: {e}"),
        ),
    }
}

/// Argo CD's `checkConditions`: a degraded reason on any condition (`AbleToScale`: `FailedGetScale`,
/// `FailedUpdateScale`; `ScalingActive`: `FailedGet*Metric`, `FailedComputeMetricsReplicas`,
/// `InvalidSelector`) → Degraded with its message; else `AbleToScale=True` or `ScalingLimited=True` →
/// Healthy; else Progressing "Waiting to Autoscale".
fn from_conditions(conds: &[Condition<'_>]) -> ResourceHealth {
    if let Some(c) = conds.iter().find(|c| DEGRADED.contains(&(c.type_, c.reason))) {
        return health(HealthStatusCode::Degraded, c.message);
    }
    if let Some(c) = conds
        .iter()
        .find(|c| matches!(c.type_, "AbleToScale" | "ScalingLimited") && c.is_true())
    {
        return health(HealthStatusCode::Healthy, c.message);
    }
    health(HealthStatusCode::Progressing, "Waiting to Autoscale")
}
