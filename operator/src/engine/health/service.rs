//! Service health: gitops-engine `health_service.go`.

use serde_json::Value;

use super::{health, non_empty_array, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule: a `LoadBalancer` Service is Progressing until `status.loadBalancer.ingress` lists an
/// address; every other Service is Healthy.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if str_at(obj, "/spec/type") == "LoadBalancer" && !non_empty_array(obj, "/status/loadBalancer/ingress") {
        return health(HealthStatusCode::Progressing, "");
    }
    health(HealthStatusCode::Healthy, "")
}
