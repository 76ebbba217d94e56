//! Simulated built-in controllers (spec §19), as pure functions: given a workload object and the
//! dependents it owns, what its status should be and which dependents should exist. The control loop that
//! calls these and writes the results lives in `controllers/workloads.rs`.
//! Behaviour can be steered per object with annotations (see the constants).
//! OWNER: sim helper. STUB — replace the bodies, keep the signatures.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

/// `ready` (default), `fail` (Degraded: e.g. Deployment ProgressDeadlineExceeded, Job Failed, Pod
/// CrashLoopBackOff), `progressing` (never becomes ready).
pub const ANN_BEHAVIOR: &str = "devcluster.capstan.dev/behavior";
/// A Go-style duration (`500ms`, `3s`, `1m`): become ready/complete (or fail) only this long after the
/// current generation was first observed.
pub const ANN_DELAY: &str = "devcluster.capstan.dev/delay";

/// What the simulation wants for one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The complete new `status`, or `None` to leave it alone.
    pub status: Option<Value>,
    /// The dependents that should exist (full objects with ownerReferences to the owner, controller=true).
    /// Existing dependents not listed here are deleted by the caller; listed ones are created or updated.
    pub children: Vec<Value>,
    /// Call again after this long (delays in progress).
    pub requeue_after: Option<Duration>,
}

/// Whether `kind` in `api_version` is simulated (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, Pod,
/// PersistentVolumeClaim, Service).
pub fn is_simulated(api_version: &str, kind: &str) -> bool {
    let _ = (api_version, kind);
    false
}

/// Simulate one object. `children` are the live objects whose controller ownerReference points at it.
pub fn simulate(obj: &Value, children: &[Value], now: DateTime<Utc>) -> Outcome {
    let _ = (obj, children, now);
    Outcome::default()
}
