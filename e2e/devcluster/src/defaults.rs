//! Server-side defaulting for built-in kinds (what the real API server's defaulters set on create and
//! update): e.g. Deployment replicas/strategy/revisionHistoryLimit/progressDeadlineSeconds, container port
//! protocol, Service type/clusterIP/port protocol/targetPort, Pod restartPolicy, Namespace finalizers and
//! phase, Secret type. Defaults matter: SSA list-map keys include defaulted fields, and clients diff against
//! the defaulted live object.
//! OWNER: sim helper. STUB — replace the body, keep the signature.

use serde_json::Value;

/// Fill in API defaults on `obj` (a built-in kind identified by its apiVersion/kind) in place.
pub fn apply_defaults(obj: &mut Value) {
    let _ = obj;
}
