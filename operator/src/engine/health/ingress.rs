//! Ingress health (`networking.k8s.io` and `extensions`): gitops-engine `health_ingress.go`.

use serde_json::Value;

use super::{health, non_empty_array};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Argo CD's rule: Healthy once `status.loadBalancer.ingress` lists an address, Progressing until then.
/// (An Ingress controller that never publishes an address keeps its Ingresses Progressing; Argo users mark
/// such Ingresses `ignore-healthcheck`.)
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    if non_empty_array(obj, "/status/loadBalancer/ingress") {
        health(HealthStatusCode::Healthy, "")
    } else {
        health(HealthStatusCode::Progressing, "")
    }
}
