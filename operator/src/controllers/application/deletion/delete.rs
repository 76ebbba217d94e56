//! The deletes of the cascade, against the destination through the Application's writer.

use serde_json::Value;

use crate::cluster::ops::{self, DeleteOptions, DeleteOutcome, Propagation};
use crate::cluster::{ClusterError, ClusterHandle};
use crate::controllers::application::compare::gvk_of;
use crate::engine::object;

/// Deletes the live object `obj` (guarded by its uid, so a re-created object of the same name is
/// spared); already gone or replaced counts as done.
pub async fn delete_live(cluster: &ClusterHandle, obj: &Value, propagation: Propagation) -> Result<(), ClusterError> {
    let Some(gvk) = gvk_of(obj) else { return Ok(()) };
    let opts = DeleteOptions {
        propagation,
        uid: obj.pointer("/metadata/uid").and_then(Value::as_str).map(str::to_string),
        dry_run: false,
    };
    match ops::delete(cluster, &gvk, object::namespace(obj), object::name(obj), &opts).await {
        Ok(DeleteOutcome::Deleted | DeleteOutcome::Deleting(_) | DeleteOutcome::NotFound) => Ok(()),
        Err(ClusterError::NotFound(_) | ClusterError::Conflict(_)) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes every object of `wave`; every delete is tried, the first failure is returned.
pub async fn delete_wave(
    cluster: &ClusterHandle,
    wave: &[&Value],
    propagation: Propagation,
) -> Result<(), ClusterError> {
    let mut first_error = None;
    for obj in wave {
        if let Err(e) = delete_live(cluster, obj, propagation).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}
