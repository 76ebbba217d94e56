//! PersistentVolumeClaim health: gitops-engine `health_pvc.go` (current Argo CD).

use serde_json::Value;

use super::{health, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};
use crate::engine::object;

/// Annotations the PV controller sets on a claim once a provisioner is working on it (the beta key is the
/// one Argo CD reads; Kubernetes ≥ 1.23 sets both).
const STORAGE_PROVISIONER_ANNOTATIONS: [&str; 2] = [
    "volume.beta.kubernetes.io/storage-provisioner",
    "volume.kubernetes.io/storage-provisioner",
];

/// Argo CD's rule on `status.phase`:
/// - `Bound` → Healthy;
/// - `Pending` with a storage-provisioner annotation → Progressing "Provisioning volume";
/// - `Pending` without one → Healthy "Waiting for consumer": a `WaitForFirstConsumer` claim binds only
///   once a pod uses it, so it must not hold back the sync wave that creates that pod;
/// - `Lost` → Degraded;
/// - anything else → Unknown.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    match str_at(obj, "/status/phase") {
        "Bound" => health(HealthStatusCode::Healthy, ""),
        "Pending" if object::annotation_any(obj, &STORAGE_PROVISIONER_ANNOTATIONS).is_some() => {
            health(HealthStatusCode::Progressing, "Provisioning volume")
        }
        "Pending" => health(HealthStatusCode::Healthy, "Waiting for consumer"),
        "Lost" => health(HealthStatusCode::Degraded, ""),
        _ => health(HealthStatusCode::Unknown, ""),
    }
}
