//! Server-side apply and field ownership (spec §11): field sets in `FieldsV1` form, the schema-driven merge
//! of an applied configuration into the live object, conflicts, removal of fields a manager stopped applying,
//! and `metadata.managedFields` bookkeeping for Update operations.
//! OWNER: ssa helper. STUB — replace the bodies, keep the signatures.

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::schema::FieldSchema;

/// One server-side apply request, after the HTTP layer has decoded the body, checked apiVersion/kind/name and
/// masked what the subresource does not own (it strips `status` from `applied` for a main-resource apply of a
/// kind with a status subresource, and keeps only `status` for a `/status` apply).
pub struct ApplyRequest<'a> {
    /// The stored object, `None` when the apply creates it.
    pub live: Option<&'a Value>,
    /// The applied configuration (full object form: apiVersion, kind, metadata, ...).
    pub applied: &'a Value,
    /// `fieldManager` (required for apply; the HTTP layer rejects a missing one).
    pub manager: &'a str,
    pub force: bool,
    /// `None` for the main resource, `Some("status")` / `Some("scale")` for subresources.
    pub subresource: Option<&'a str>,
    /// `apiVersion` recorded in the managedFields entry (e.g. `apps/v1`, `v1`).
    pub api_version: &'a str,
    pub schema: &'a dyn FieldSchema,
    /// RFC 3339 time for the entry's `time` (only changes when the entry's field set changes).
    pub now: &'a str,
}

/// Merge `applied` into `live` (or create from it), detect conflicts with other managers (409 `Conflict` with
/// `FieldManagerConflict` causes unless `force`), remove fields the manager applied before but no longer does
/// and that nobody else owns, and return the resulting object with `metadata.managedFields` updated.
/// Fields outside ownership tracking (apiVersion, kind, metadata.name/namespace/uid/resourceVersion/
/// generation/creationTimestamp/deletionTimestamp/managedFields/generateName) are taken from `live`
/// (or from `applied` when creating) and never appear in field sets.
pub fn apply(req: ApplyRequest<'_>) -> ApiResult<Value> {
    let _ = req;
    Err(ApiError::internal("server-side apply not implemented"))
}

/// Bookkeeping for a non-apply write (create, update, merge/JSON/strategic patch) by `manager`:
/// the manager gains, under an `Update` entry for `subresource`, every field the write added or changed
/// relative to `old`; other managers lose those fields; empty entries are dropped. Client-written
/// `metadata.managedFields` in `new` (differing from `old`'s) are kept verbatim after validation (422 when
/// malformed); `[{}]` clears them; `[]` means unchanged (spec §11.9). Updates never conflict.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    schema: &dyn FieldSchema,
    now: &str,
) -> ApiResult<()> {
    let _ = (old, new, manager, subresource, api_version, schema, now);
    Ok(())
}
