//! Argo Workflows `Workflow` health: gitops-engine `health_argo.go`.

use serde_json::Value;

use super::{health, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule on `status.phase`: none, `Pending` or `Running` → Progressing; `Succeeded` → Healthy;
/// `Failed` or `Error` → Degraded; anything else → Unknown. The message is `status.message`.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    let message = str_at(obj, "/status/message");
    let status = match str_at(obj, "/status/phase") {
        "" | "Pending" | "Running" => HealthStatusCode::Progressing,
        "Succeeded" => HealthStatusCode::Healthy,
        "Failed" | "Error" => HealthStatusCode::Degraded,
        _ => HealthStatusCode::Unknown,
    };
    health(status, message)
}
