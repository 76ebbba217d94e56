//! Job health: gitops-engine `health_job.go`.

use serde_json::Value;

use super::{conditions, health};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule on the terminal conditions:
/// - `Failed` → Degraded with its message (e.g. "Job has reached the specified backoff limit");
/// - `Suspended=True` → Suspended (aggregated as Healthy, see [`super::aggregate`]);
/// - `Complete` → Healthy;
/// - none of them yet → Progressing (still running, or not started).
///
/// Only conditions with status `True` count; Argo reads `Complete`/`Failed` whatever their status (the Job
/// controller only ever sets them `True`) and treats a resumed Job (`Suspended=False`) as finished, which
/// Capstan does not.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    let conds = conditions(obj);
    let find = |t: &str| conds.iter().find(|c| c.type_ == t && c.is_true());
    if let Some(failed) = find("Failed") {
        return health(HealthStatusCode::Degraded, failed.message);
    }
    if let Some(suspended) = find("Suspended") {
        return health(HealthStatusCode::Suspended, suspended.message);
    }
    if let Some(complete) = find("Complete") {
        return health(HealthStatusCode::Healthy, complete.message);
    }
    health(HealthStatusCode::Progressing, "")
}
