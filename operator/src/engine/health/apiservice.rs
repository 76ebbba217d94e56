//! APIService health: gitops-engine `health_apiservice.go`.

use serde_json::Value;

use super::{condition, health, Condition};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule: the `Available` condition decides, `True` → Healthy, otherwise Progressing (message
/// `<reason>: <message>`, e.g. `FailedDiscoveryCheck: failing or missing response from ...`); without the
/// condition → Progressing "Waiting to be processed".
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    match condition(obj, "Available") {
        Some(c) if c.is_true() => health(HealthStatusCode::Healthy, describe(&c)),
        Some(c) => health(HealthStatusCode::Progressing, describe(&c)),
        None => health(HealthStatusCode::Progressing, "Waiting to be processed"),
    }
}

fn describe(c: &Condition<'_>) -> String {
    match (c.reason, c.message) {
        ("", m) => m.to_string(),
        (r, "") => r.to_string(),
        (r, m) => format!("{r}: {m}"),
    }
}
