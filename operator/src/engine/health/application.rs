//! Health of a child Application (`capstan.dev` or `argoproj.io`), so that app-of-apps sync waves wait for
//! their children. Argo CD removed the built-in check in 1.8; this is the `argoproj.io/Application` Lua
//! customization its docs give (`health.md`), extended the way Argo users extend it: a child counts as
//! ready only once it is Synced and its sync operation has finished.

use serde_json::Value;

use super::{health, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// In order:
/// - a sync operation still running (`status.operationState.phase` `Running` or `Terminating`) →
///   Progressing, whatever the last health said;
/// - no `status.health.status` yet (never reconciled) → Progressing, as the Lua check;
/// - the child's own health Degraded → Degraded with its message;
/// - OutOfSync after a failed sync (`operationState.phase` `Failed`/`Error`) → Degraded: nothing will
///   bring it in sync by itself, so the parent must not wait forever;
/// - OutOfSync → Progressing: the child has not applied what Git says yet (it may be Healthy on the old
///   revision, or Missing because nothing is applied yet);
/// - else the child's own health (`Healthy`, `Suspended`, `Progressing`, `Missing`, `Unknown`) with its
///   message; an unrecognised value → Unknown.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    let operation = str_at(obj, "/status/operationState/phase");
    let operation_message = str_at(obj, "/status/operationState/message");
    if matches!(operation, "Running" | "Terminating") {
        let message = match operation_message {
            "" => "Waiting for the sync operation to finish".to_string(),
            m => format!("Waiting for the sync operation to finish: {m}"),
        };
        return health(HealthStatusCode::Progressing, message);
    }
    let own = str_at(obj, "/status/health/status");
    let own_message = str_at(obj, "/status/health/message");
    if own.is_empty() {
        return health(
            HealthStatusCode::Progressing,
            "Waiting for the Application to be reconciled",
        );
    }
    let code = parse_code(own);
    if code == HealthStatusCode::Degraded {
        return health(code, own_message);
    }
    if str_at(obj, "/status/sync/status") == "OutOfSync" {
        if matches!(operation, "Failed" | "Error") {
            let message = match operation_message {
                "" => "OutOfSync and the last sync failed".to_string(),
                m => format!("OutOfSync and the last sync failed: {m}"),
            };
            return health(HealthStatusCode::Degraded, message);
        }
        return health(
            HealthStatusCode::Progressing,
            "Waiting for the Application to be Synced",
        );
    }
    health(code, own_message)
}

/// A health status code by its name; Unknown for anything else.
fn parse_code(s: &str) -> HealthStatusCode {
    match s {
        "Healthy" => HealthStatusCode::Healthy,
        "Progressing" => HealthStatusCode::Progressing,
        "Degraded" => HealthStatusCode::Degraded,
        "Suspended" => HealthStatusCode::Suspended,
        "Missing" => HealthStatusCode::Missing,
        _ => HealthStatusCode::Unknown,
    }
}
