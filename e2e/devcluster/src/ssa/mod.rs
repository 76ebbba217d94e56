//! Server-side apply and field ownership: field sets in `FieldsV1` form, the schema-driven merge
//! of an applied configuration into the live object, conflicts, removal of fields a manager stopped applying,
//! and `metadata.managedFields` bookkeeping for Update operations.
//! OWNER: ssa helper.
//!
//! The algorithm follows sigs.k8s.io/structured-merge-diff (`merge.Updater.Apply` / `Update`): merge, prune what
//! the applier dropped, compare live with the result, and move ownership of what changed. Submodules:
//! [`fieldset`] (sets and `FieldsV1`), [`walk`] (schema-driven merge/compare/prune), [`managed`] (entries).

// `ApiResult` is the crate-wide error type and the signatures here are fixed by the HTTP layer; boxing it is
// the error module's call, not this one's.
#![allow(clippy::result_large_err)]

pub mod fieldset;
mod managed;
mod walk;

#[cfg(test)]
mod tests;

use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::schema::FieldSchema;
use fieldset::{render_path, FieldSet};
use managed::{Entry, APPLY, UPDATE};

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
/// When nothing changes the result is a clone of `live`, so the caller can detect the no-op by equality.
pub fn apply(req: ApplyRequest<'_>) -> ApiResult<Value> {
    check_depth(req.applied)?;
    if let Some(live) = req.live {
        check_depth(live)?;
    }
    let schema = req.schema;
    let sub = req.subresource.unwrap_or("");
    let mut config = req.applied.clone();
    walk::strip_nulls(&mut config);
    walk::check_lists(schema, &[], &mut Vec::new(), &config).map_err(ApiError::invalid_msg)?;

    let base = req.live.cloned().unwrap_or_else(|| walk::untracked_part(&config));
    let new_set = walk::to_set(schema, &[], &config);
    let mut entries = managed::decode(managed::managed_fields_of(&base));
    let mine = entries
        .iter()
        .position(|e| e.is(req.manager, APPLY, req.api_version, sub));

    let mut result = walk::merge(schema, &[], &base, &config);
    if let Some(i) = mine {
        prune_dropped(schema, &mut result, &entries, i, &new_set);
    }
    let cmp = walk::compare(schema, &[], &base, &result);
    let changed = cmp.changed();
    let conflicts = find_conflicts(&entries, mine, sub, &changed);
    if !conflicts.is_empty() && !req.force {
        return Err(conflict_error(&conflicts));
    }
    transfer(&mut entries, mine, sub, &changed, &cmp.removed);
    match mine {
        Some(i) => entries[i].replace_set(new_set, req.api_version, req.now),
        None => entries.push(Entry::new(req.manager, APPLY, req.api_version, sub, req.now, new_set)),
    }
    managed::store(&mut result, managed::encode(entries, false));
    match req.live {
        Some(live) if *live == result => Ok(live.clone()),
        _ => Ok(result),
    }
}

/// Bookkeeping for a non-apply write (create, update, merge/JSON/strategic patch) by `manager`:
/// the manager gains, under an `Update` entry for `subresource`, every field the write added or changed
/// relative to `old`; other managers lose those fields; empty entries are dropped. Client-written
/// `metadata.managedFields` in `new` (differing from `old`'s) are kept verbatim after validation (422 when
/// malformed); `[{}]` clears them; `[]` means unchanged. Updates never conflict.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    subresource: Option<&str>,
    api_version: &str,
    schema: &dyn FieldSchema,
    now: &str,
) -> ApiResult<()> {
    check_depth(new)?;
    if let Some(old) = old {
        check_depth(old)?;
    }
    let sub = subresource.unwrap_or("");
    let old_list = old.and_then(managed::managed_fields_of);
    let mut entries = match client_intent(old_list, new, subresource.is_some()) {
        Intent::Verbatim(list) => return validate_client(new, &list),
        Intent::Clear => Vec::new(),
        Intent::Keep => managed::decode(old_list),
    };
    let empty = json!({});
    let cmp = walk::compare(schema, &[], old.unwrap_or(&empty), new);
    let changed = cmp.changed();
    let mine = entries.iter().position(|e| e.is(manager, UPDATE, api_version, sub));
    transfer(&mut entries, mine, sub, &changed, &cmp.removed);
    let mut set = mine.map(|i| entries[i].set.clone()).unwrap_or_default();
    set.union_with(&changed);
    set.subtract(&cmp.removed);
    match mine {
        Some(i) => entries[i].replace_set(set, api_version, now),
        None => entries.push(Entry::new(manager, UPDATE, api_version, sub, now, set)),
    }
    managed::store(new, managed::encode(entries, false));
    Ok(())
}

/// Reject objects nested deeper than the walks are prepared to recurse.
fn check_depth(v: &Value) -> ApiResult<()> {
    if walk::depth(v) > walk::MAX_DEPTH {
        return Err(ApiError::invalid_msg(format!(
            "object nesting exceeds {} levels",
            walk::MAX_DEPTH
        )));
    }
    Ok(())
}

/// Apply, removal of fields: delete what the applier owned last time, no longer applies, and nobody else owns.
fn prune_dropped(schema: &dyn FieldSchema, result: &mut Value, entries: &[Entry], mine: usize, new_set: &FieldSet) {
    let mut keep = new_set.clone();
    for (i, e) in entries.iter().enumerate() {
        if i != mine {
            keep.union_with(&e.set);
        }
    }
    walk::prune(schema, &[], result, &entries[mine].set, Some(&keep));
}

/// Other entries of the same subresource that own a field this write changes, as (who, path) pairs sorted
/// by manager (paths stay in field-set order within a manager).
fn find_conflicts(entries: &[Entry], mine: Option<usize>, sub: &str, changed: &FieldSet) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if Some(i) == mine || e.subresource != sub {
            continue;
        }
        out.extend(
            e.set
                .intersection(changed)
                .members()
                .iter()
                .map(|p| (e.display(), render_path(p))),
        );
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// 409 with one `FieldManagerConflict` cause per conflicting field.
fn conflict_error(conflicts: &[(String, String)]) -> ApiError {
    let causes = conflicts
        .iter()
        .map(|(who, path)| Cause::new("FieldManagerConflict", format!("conflict with {who}"), path.clone()))
        .collect();
    let list = conflicts
        .iter()
        .map(|(who, path)| format!("conflict with {who}: {path}"))
        .collect::<Vec<_>>()
        .join("; ");
    let noun = if conflicts.len() == 1 { "conflict" } else { "conflicts" };
    ApiError::conflict_msg(format!("Apply failed with {} {noun}: {list}", conflicts.len())).with_causes(causes)
}

/// Move ownership after a write: other entries of the same subresource lose the fields it changed (value
/// changes move ownership; for a forced apply these are exactly the conflicts), and every entry loses fields
/// that no longer exist.
fn transfer(entries: &mut [Entry], mine: Option<usize>, sub: &str, changed: &FieldSet, removed: &FieldSet) {
    for (i, e) in entries.iter_mut().enumerate() {
        if Some(i) == mine {
            continue;
        }
        if e.subresource == sub {
            e.lose(changed);
        }
        e.lose(removed);
    }
}

/// What a non-apply write says about managedFields.
enum Intent {
    /// The client wrote its own entries: store them as they are.
    Verbatim(Value),
    /// `[{}]`: start from no entries.
    Clear,
    /// Absent, `null`, `[]` or unchanged: normal bookkeeping on the stored entries.
    Keep,
}

fn client_intent(old_list: Option<&Vec<Value>>, new: &Value, subresource: bool) -> Intent {
    // Writes through a subresource cannot rewrite managedFields (apimachinery ignores them there).
    let written = new.get("metadata").and_then(|m| m.get("managedFields"));
    match written {
        _ if subresource => Intent::Keep,
        None | Some(Value::Null) => Intent::Keep,
        Some(Value::Array(l)) if l.is_empty() || Some(l) == old_list => Intent::Keep,
        Some(Value::Array(l)) if l.len() == 1 && l[0] == json!({}) => Intent::Clear,
        Some(other) => Intent::Verbatim(other.clone()),
    }
}

/// 422 for malformed client-written entries; well-formed ones stay in `new` untouched.
fn validate_client(new: &Value, list: &Value) -> ApiResult<()> {
    let causes = match list {
        Value::Array(l) => managed::validate(l),
        _ => vec![Cause::new(
            "FieldValueInvalid",
            "Invalid value: must be a list",
            "metadata.managedFields",
        )],
    };
    if causes.is_empty() {
        return Ok(());
    }
    let s = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let kind = s(new.get("kind"));
    let api_version = s(new.get("apiVersion"));
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let name = s(new.get("metadata").and_then(|m| m.get("name")));
    Err(ApiError::invalid(&kind, group, &name, causes))
}
