//! The three non-apply patch formats (spec §10): JSON Patch with evanphx/json-patch semantics, JSON Merge
//! Patch (RFC 7386) and strategic merge patch for built-in kinds. Pure functions over `serde_json::Value`.
//! OWNER: patch helper. STUB — replace the bodies, keep the signatures.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::schema::FieldSchema;

/// Apply an RFC 6902 patch (a JSON array of operations) with evanphx semantics: `test` with `value: null`
/// succeeds on a missing path. A failing operation is 422 Invalid; an undecodable patch 400; more than 10000
/// operations 413.
pub fn json_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    let _ = (target, patch);
    Err(ApiError::internal("json patch not implemented"))
}

/// Apply an RFC 7386 merge patch: objects merge recursively, `null` deletes, everything else replaces.
pub fn merge_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    let _ = (target, patch);
    Err(ApiError::internal("merge patch not implemented"))
}

/// Apply a strategic merge patch using `schema` for list merge keys, with the directives `$patch`,
/// `$setElementOrder/<list>`, `$retainKeys` and `$deleteFromPrimitiveList/<list>`.
pub fn strategic_merge_patch(target: &Value, patch: &Value, schema: &dyn FieldSchema) -> ApiResult<Value> {
    let _ = (target, patch, schema);
    Err(ApiError::internal("strategic merge patch not implemented"))
}
