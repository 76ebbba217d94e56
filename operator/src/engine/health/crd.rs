//! CustomResourceDefinition health. Argo CD ships this as Lua (and lately as Go); Capstan follows kstatus
//! (`cli-utils` `crdConditions`), which the sync engine needs to order CRs after their CRDs.

use serde_json::Value;

use super::{condition, health};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// kstatus' rule:
/// - `NamesAccepted=False` (the plural or kind clashes with another CRD) → Degraded;
/// - `Established=True` → Healthy (the API serves the new type);
/// - else Progressing: the API server has not established it yet.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if let Some(c) = condition(obj, "NamesAccepted").filter(|c| c.is_false()) {
        return health(
            HealthStatusCode::Degraded,
            format!("CRD names have not been accepted: {}", c.message),
        );
    }
    match condition(obj, "Established") {
        Some(c) if c.is_true() => health(HealthStatusCode::Healthy, "CRD is established"),
        Some(c) if !c.message.is_empty() => health(
            HealthStatusCode::Progressing,
            format!("CRD is not established yet: {}", c.message),
        ),
        _ => health(HealthStatusCode::Progressing, "CRD is not established yet"),
    }
}
