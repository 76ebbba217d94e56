//! The three non-apply patch formats: JSON Patch with evanphx/json-patch semantics, JSON Merge
//! Patch (RFC 7386) and strategic merge patch for built-in kinds. Pure functions over `serde_json::Value`.
//!
//! Every function takes client input, so none of them may panic: all indexing is checked, and inputs nested
//! deeper than [`MAX_DEPTH`] are rejected up front so that the recursive merges cannot overflow the stack.

use std::io;

use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};
use crate::schema::{FieldSchema, SmpList};

/// Deepest nesting of objects/arrays accepted in a target or a patch. The merges recurse along the patch,
/// so this bounds their stack use; real objects are far shallower (serde_json's own parser stops at 128).
pub const MAX_DEPTH: usize = 200;

/// Kubernetes' `maxJSONPatchOperations`: longer JSON patches are answered with 413.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;

/// The apiserver's `JSONPatchMaxCopyBytes`: `copy` operations may grow a document by at most this many bytes,
/// otherwise a few hundred doubling copies would exhaust memory.
pub const MAX_JSON_PATCH_COPY_BYTES: usize = 3 * 1024 * 1024;

/// Prefix of every 422 the apiserver returns for a JSON patch that does not apply
/// (`NewGenericServerResponse(http.StatusUnprocessableEntity, ...)`).
const REJECTED: &str = "the server rejected our request due to an error in our request";

const DIRECTIVE_MARKER: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";

// ---------------------------------------------------------------------------------------------------------------
// Shared helpers
// ---------------------------------------------------------------------------------------------------------------

/// Whether `v` nests objects/arrays more than `limit` levels deep (a scalar is depth 0, `{}` depth 1).
/// Recursion stops as soon as the limit is crossed, so this is itself safe on any input.
fn exceeds_depth(v: &Value, limit: usize) -> bool {
    match v {
        Value::Array(items) => limit == 0 || items.iter().any(|x| exceeds_depth(x, limit - 1)),
        Value::Object(map) => limit == 0 || map.values().any(|x| exceeds_depth(x, limit - 1)),
        _ => false,
    }
}

/// Reject (400) a document whose nesting would make the recursive algorithms below unsafe.
fn check_depth(v: &Value, what: &str) -> ApiResult<()> {
    if exceeds_depth(v, MAX_DEPTH) {
        return Err(ApiError::bad_request(format!(
            "{what} is nested more than {MAX_DEPTH} levels deep"
        )));
    }
    Ok(())
}

/// JSON equality as Go sees it after decoding into `interface{}`: every number is a float64, so `1` equals
/// `1.0`. Used by JSON-patch `test` and by the strategic merge key and set comparisons.
fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || ((x.is_f64() || y.is_f64()) && x.as_f64() == y.as_f64()),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(l, r)| values_equal(l, r)),
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, l)| y.get(k).is_some_and(|r| values_equal(l, r)))
        }
        _ => a == b,
    }
}

/// The name Go's `encoding/json` uses for a JSON value's type in "cannot unmarshal" errors.
fn go_json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

// ---------------------------------------------------------------------------------------------------------------
// JSON Patch (RFC 6902, evanphx/json-patch v4 semantics)
// ---------------------------------------------------------------------------------------------------------------

/// Apply an RFC 6902 patch (a JSON array of operations) with evanphx semantics: `test` with `value: null`
/// succeeds on a missing path. A failing operation is 422 Invalid; an undecodable patch 400; more than 10000
/// operations 413.
pub fn json_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    check_depth(patch, "the JSON patch")?;
    let ops = decode_json_patch(patch)?;
    check_depth(target, "the object")?;
    let mut doc = target.clone();
    let mut copied = 0usize;
    for op in ops {
        apply_operation(&mut doc, op, &mut copied).map_err(|m| ApiError::invalid_msg(format!("{REJECTED}: {m}")))?;
    }
    Ok(doc)
}

/// The empty operation a JSON `null` array element decodes to in Go (a nil map); it fails as kind "unknown".
static EMPTY_OPERATION: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();

/// Decode the patch the way `jsonpatch.DecodePatch` does: it must be an array of objects (400 otherwise), and
/// the apiserver then caps the number of operations (413). Unknown `op`s are *not* decode errors: they fail
/// while applying, hence 422, exactly as in Kubernetes.
fn decode_json_patch(patch: &Value) -> ApiResult<Vec<&Map<String, Value>>> {
    let Value::Array(items) = patch else {
        return Err(ApiError::bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            go_json_type(patch)
        )));
    };
    let mut ops = Vec::with_capacity(items.len().min(MAX_JSON_PATCH_OPERATIONS + 1));
    for item in items {
        match item {
            Value::Object(op) => ops.push(op),
            Value::Null => ops.push(EMPTY_OPERATION.get_or_init(Map::new)),
            other => {
                return Err(ApiError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                    go_json_type(other)
                )))
            }
        }
    }
    if ops.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(ApiError::too_large(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.len()
        )));
    }
    Ok(ops)
}

/// A decoded JSON pointer: the original text (for messages) and its unescaped reference tokens.
struct Pointer {
    text: String,
    tokens: Vec<String>,
}

impl Pointer {
    /// The last reference token: the key or index the operation acts on inside its container.
    fn key(&self) -> &str {
        self.tokens.last().map(String::as_str).unwrap_or("")
    }

    /// The tokens leading to the container that holds [`Pointer::key`].
    fn parents(&self) -> &[String] {
        &self.tokens[..self.tokens.len().saturating_sub(1)]
    }
}

/// Read and parse the pointer in `op[field]`. Like evanphx v4, the root pointer `""` (and anything not
/// starting with `/`) names no container, so every operation on it fails.
fn operation_pointer(op: &Map<String, Value>, field: &str, kind: &str) -> Result<Pointer, String> {
    let Some(Value::String(text)) = op.get(field) else {
        return Err(format!("{kind} operation failed to decode {field}"));
    };
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!(
            "{kind} operation does not apply: doc is missing path: \"{text}\""
        ));
    };
    // RFC 6901: `~1` before `~0`, so that `~01` decodes to `~1`.
    let tokens = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    Ok(Pointer {
        text: text.clone(),
        tokens,
    })
}

/// Index of an existing array element, Go `strconv.Atoi` style (`+1`, `01` and, as evanphx supports,
/// negative indices counted from the end).
fn existing_index(token: &str, len: usize) -> Option<usize> {
    let i: i64 = token.parse().ok()?;
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { i.checked_add(len)? } else { i };
    if (0..len).contains(&i) {
        usize::try_from(i).ok()
    } else {
        None
    }
}

/// Index at which `add` inserts into an array of `len` items: `0..=len`, negative counted from `len + 1`.
fn insertion_index(token: &str, len: usize) -> Option<usize> {
    existing_index(token, len + 1)
}

/// The container (object or array) that the tokens lead to, or `None` if any step is missing, `null` or a
/// scalar (evanphx `findObject`).
fn container_mut<'a>(doc: &'a mut Value, tokens: &[String]) -> Option<&'a mut Value> {
    let mut cur = doc;
    for token in tokens {
        cur = match cur {
            Value::Object(map) => map.get_mut(token)?,
            Value::Array(items) => {
                let i = existing_index(token, items.len())?;
                items.get_mut(i)?
            }
            _ => return None,
        };
    }
    matches!(cur, Value::Object(_) | Value::Array(_)).then_some(cur)
}

/// The container holding `ptr`'s target, with the evanphx message when it is missing.
fn parent_of<'a>(doc: &'a mut Value, ptr: &Pointer, kind: &str) -> Result<&'a mut Value, String> {
    container_mut(doc, ptr.parents())
        .ok_or_else(|| format!("{kind} operation does not apply: doc is missing path: \"{}\"", ptr.text))
}

/// evanphx's message for an array index that is not a number or out of range.
fn invalid_index(token: &str) -> String {
    format!("Unable to access invalid index: {token}: invalid index referenced")
}

/// Refuse inserts that would push the document past [`MAX_DEPTH`]; repeated `copy`s into a child could
/// otherwise double the depth with every operation.
fn check_insert_depth(ptr: &Pointer, value: &Value) -> Result<(), String> {
    let room = MAX_DEPTH.saturating_sub(ptr.tokens.len());
    if ptr.tokens.len() > MAX_DEPTH || exceeds_depth(value, room) {
        return Err(format!(
            "the result would be nested more than {MAX_DEPTH} levels deep at {}",
            ptr.text
        ));
    }
    Ok(())
}

/// RFC 6902 `add`: set an object member, or insert into an array (`-` appends).
fn add_at(doc: &mut Value, ptr: &Pointer, value: Value) -> Result<(), String> {
    check_insert_depth(ptr, &value)?;
    let key = ptr.key();
    match parent_of(doc, ptr, "add")? {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            let i = if key == "-" {
                items.len()
            } else {
                insertion_index(key, items.len()).ok_or_else(|| invalid_index(key))?
            };
            items.insert(i, value);
        }
        _ => {
            return Err(format!(
                "add operation does not apply: doc is missing path: \"{}\"",
                ptr.text
            ))
        }
    }
    Ok(())
}

/// RFC 6902 `remove`, returning the removed value (for `move`). A missing member is an error.
fn remove_at(doc: &mut Value, ptr: &Pointer, kind: &str) -> Result<Value, String> {
    let key = ptr.key();
    match parent_of(doc, ptr, kind)? {
        Value::Object(map) => map
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: missing value")),
        Value::Array(items) => {
            let i = existing_index(key, items.len())
                .ok_or_else(|| format!("Unable to remove invalid index: {key}: invalid index referenced"))?;
            Ok(items.remove(i))
        }
        _ => Err(format!(
            "{kind} operation does not apply: doc is missing path: \"{}\"",
            ptr.text
        )),
    }
}

/// RFC 6902 `replace`. evanphx v4 quirk kept on purpose: replacing a *missing object member* succeeds and
/// adds it (its map `get` never fails); a missing array index fails.
fn replace_at(doc: &mut Value, ptr: &Pointer, value: Value) -> Result<(), String> {
    check_insert_depth(ptr, &value)?;
    let key = ptr.key();
    match parent_of(doc, ptr, "replace")? {
        Value::Object(map) => {
            map.insert(key.to_string(), value);
        }
        Value::Array(items) => {
            let slot = existing_index(key, items.len())
                .and_then(|i| items.get_mut(i))
                .ok_or_else(|| {
                    format!(
                        "replace operation does not apply: doc is missing key: {}: missing value",
                        ptr.text
                    )
                })?;
            *slot = value;
        }
        _ => {
            return Err(format!(
                "replace operation does not apply: doc is missing path: \"{}\"",
                ptr.text
            ))
        }
    }
    Ok(())
}

/// The value at `ptr`, `Ok(None)` for a missing object member (or a JSON null, which Go cannot tell apart),
/// and an error for a missing container or an invalid array index.
fn value_at<'a>(doc: &'a mut Value, ptr: &Pointer, kind: &str) -> Result<Option<&'a Value>, String> {
    let key = ptr.key();
    match parent_of(doc, ptr, kind)? {
        Value::Object(map) => Ok(map.get(key).filter(|v| !v.is_null())),
        Value::Array(items) => {
            let i = existing_index(key, items.len()).ok_or_else(|| invalid_index(key))?;
            Ok(items.get(i).filter(|v| !v.is_null()))
        }
        _ => Err(format!(
            "{kind} operation does not apply: doc is missing path: \"{}\"",
            ptr.text
        )),
    }
}

/// RFC 6902 `test` with evanphx semantics: a missing (or null) value equals an expected `null` (or an absent
/// `value`), which is what kube-runtime's finalizer helper relies on.
fn test_at(doc: &mut Value, ptr: &Pointer, expected: Option<&Value>) -> Result<(), String> {
    let actual = value_at(doc, ptr, "test").map_err(|e| {
        if e.contains("does not apply") {
            e
        } else {
            format!("error in test for path: '{}': {e}", ptr.text)
        }
    })?;
    let expected = expected.filter(|v| !v.is_null());
    let ok = match (actual, expected) {
        (None, None) => true,
        (Some(a), Some(e)) => values_equal(a, e),
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!("testing value {} failed: test failed", ptr.text))
    }
}

/// Serialized size of `v`, counting stops shortly after `limit` so that a huge value costs no more than that.
fn serialized_size(v: &Value, limit: usize) -> usize {
    struct Counter {
        bytes: usize,
        limit: usize,
    }
    impl io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.bytes = self.bytes.saturating_add(buf.len());
            if self.bytes > self.limit {
                return Err(io::Error::other("copy size limit exceeded"));
            }
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter { bytes: 0, limit };
    // An error only means the limit was crossed; `bytes` already says so.
    let _ = serde_json::to_writer(&mut counter, v);
    counter.bytes
}

/// RFC 6902 `copy`, bounded by [`MAX_JSON_PATCH_COPY_BYTES`] accumulated over the whole patch.
fn copy_at(doc: &mut Value, from: &Pointer, to: &Pointer, copied: &mut usize) -> Result<(), String> {
    let value = value_at(doc, from, "copy")?.cloned().ok_or_else(|| {
        format!(
            "copy operation does not apply: doc is missing from path: \"{}\"",
            from.text
        )
    })?;
    let budget = MAX_JSON_PATCH_COPY_BYTES.saturating_sub(*copied);
    *copied = copied.saturating_add(serialized_size(&value, budget));
    if *copied > MAX_JSON_PATCH_COPY_BYTES {
        return Err(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {MAX_JSON_PATCH_COPY_BYTES}",
            *copied
        ));
    }
    add_at(doc, to, value)
}

/// Apply one operation to `doc`; the error text becomes the detail of the 422.
fn apply_operation(doc: &mut Value, op: &Map<String, Value>, copied: &mut usize) -> Result<(), String> {
    let kind = match op.get("op") {
        Some(Value::String(s)) => s.as_str(),
        _ => "unknown",
    };
    // evanphx treats an absent `value` as JSON null.
    let value = || op.get("value").cloned().unwrap_or(Value::Null);
    match kind {
        "add" => add_at(doc, &operation_pointer(op, "path", kind)?, value()),
        "remove" => {
            let path = operation_pointer(op, "path", kind)?;
            match remove_at(doc, &path, kind) {
                Err(e) if !e.contains("does not apply") => {
                    Err(format!("error in remove for path: '{}': {e}", path.text))
                }
                other => other.map(drop),
            }
        }
        "replace" => replace_at(doc, &operation_pointer(op, "path", kind)?, value()),
        "move" => {
            let from = operation_pointer(op, "from", kind)?;
            let to = operation_pointer(op, "path", kind)?;
            let moved = remove_at(doc, &from, kind)?;
            add_at(doc, &to, moved)
        }
        "copy" => {
            let from = operation_pointer(op, "from", kind)?;
            let to = operation_pointer(op, "path", kind)?;
            copy_at(doc, &from, &to, copied)
        }
        "test" => test_at(doc, &operation_pointer(op, "path", kind)?, op.get("value")),
        other => Err(format!("Unexpected kind: {other}")),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// JSON Merge Patch (RFC 7386)
// ---------------------------------------------------------------------------------------------------------------

/// Apply an RFC 7386 merge patch: objects merge recursively, `null` deletes, everything else replaces.
///
/// The patch must be an object: evanphx answers `ErrBadJSONPatch` ("Invalid JSON Patch", 400 in the apiserver)
/// for `null` and scalars, and an array patch would replace the whole object, which no API object survives.
pub fn merge_patch(target: &Value, patch: &Value) -> ApiResult<Value> {
    check_depth(patch, "the merge patch")?;
    check_depth(target, "the object")?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request("Invalid JSON Patch"));
    };
    Ok(Value::Object(merge_objects(target.as_object(), patch)))
}

/// RFC 7386 `MergePatch` for an object patch; a non-object target starts from `{}`.
fn merge_objects(target: Option<&Map<String, Value>>, patch: &Map<String, Value>) -> Map<String, Value> {
    let mut out = target.cloned().unwrap_or_default();
    for (key, pv) in patch {
        match pv {
            Value::Null => {
                out.remove(key);
            }
            Value::Object(po) => {
                let merged = merge_objects(out.get(key).and_then(Value::as_object), po);
                out.insert(key.clone(), Value::Object(merged));
            }
            other => {
                out.insert(key.clone(), prune_nulls(other));
            }
        }
    }
    out
}

/// A copy of a patch value with `null` members removed from every nested object (evanphx `pruneNulls`):
/// in a merge patch they mean "absent", never a stored null. Null array elements are kept.
fn prune_nulls(v: &Value) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(_, x)| !x.is_null())
                .map(|(k, x)| (k.clone(), prune_nulls(x)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(prune_nulls).collect()),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Strategic merge patch
// ---------------------------------------------------------------------------------------------------------------

/// Apply a strategic merge patch using `schema` for list merge keys, with the directives `$patch`,
/// `$setElementOrder/<list>`, `$retainKeys` and `$deleteFromPrimitiveList/<list>`.
///
/// This follows `k8s.io/apimachinery/pkg/util/strategicpatch` (`StrategicMergeMapPatch`), including its
/// ordering rules: items named in the patch keep the patch's (or `$setElementOrder`'s) order, the others keep
/// the live order, and a new item without `$setElementOrder` lands *before* the live items. Deliberate
/// differences, all on inputs Kubernetes mishandles: directives and `null`s inside newly added values are
/// processed instead of being stored verbatim, and malformed directives are 400 instead of 500.
pub fn strategic_merge_patch(target: &Value, patch: &Value, schema: &dyn FieldSchema) -> ApiResult<Value> {
    check_depth(patch, "the strategic merge patch")?;
    check_depth(target, "the object")?;
    let Value::Object(patch) = patch else {
        return Err(ApiError::bad_request("invalid JSON document"));
    };
    let original = target.as_object().cloned().unwrap_or_default();
    let mut merger = Smp {
        schema,
        path: Vec::new(),
    };
    Ok(Value::Object(merger.merge_map(original, patch)?))
}

/// How two list items are identified when merging, ordering and deleting.
#[derive(Clone, Copy)]
enum Identity<'k> {
    /// Maps, by the value of their merge key.
    Key(&'k str),
    /// Scalars, by value.
    Value,
}

impl Identity<'_> {
    /// The part of `item` that identifies it, or `None` for a map without the merge key.
    fn of(self, item: &Value) -> Option<&Value> {
        match self {
            Identity::Key(k) => item.as_object()?.get(k),
            Identity::Value => Some(item),
        }
    }

    /// Position of the first item of `list` with the same identity as `item`.
    fn index_in(self, list: &[Value], item: &Value) -> Option<usize> {
        let id = self.of(item)?;
        list.iter()
            .position(|x| self.of(x).is_some_and(|y| values_equal(y, id)))
    }
}

/// The strategic merge of one request: the schema plus the field path of the map being merged (list
/// positions omitted, as [`FieldSchema::smp_list`] expects).
struct Smp<'s> {
    schema: &'s dyn FieldSchema,
    path: Vec<String>,
}

/// `mergepatch.ErrNoMergeKey`.
fn no_merge_key(item: &Map<String, Value>, key: &str) -> ApiError {
    ApiError::bad_request(format!(
        "map: {} does not contain declared merge key: {key}",
        Value::Object(item.clone())
    ))
}

/// `mergepatch.ErrBadPatchType`.
fn bad_patch_type(directive: &Value) -> ApiError {
    ApiError::bad_request(format!("unknown patch type: {directive} in map"))
}

/// The list name in `$setElementOrder/<list>` or `$deleteFromPrimitiveList/<list>`; anything else with that
/// prefix is malformed (`extractKey`).
fn directive_list_key<'k>(key: &'k str, prefix: &str, error: &str) -> ApiResult<&'k str> {
    match key.split_once('/') {
        Some((p, rest)) if p == prefix => Ok(rest),
        _ => Err(ApiError::bad_request(error.to_string())),
    }
}

fn is_delete_directive(map: &Map<String, Value>) -> bool {
    map.get(DIRECTIVE_MARKER).and_then(Value::as_str) == Some("delete")
}

impl Smp<'_> {
    /// SMP strategy of the list `key` inside the current map.
    fn list_strategy(&self) -> SmpList {
        let path: Vec<&str> = self.path.iter().map(String::as_str).collect();
        self.schema.smp_list(&path)
    }

    /// `mergeMap`: honour a `$patch` directive on the map itself, then merge member by member.
    /// `$patch: merge` is accepted as the (default) merge; Kubernetes rejects it in maps.
    fn merge_map(&mut self, original: Map<String, Value>, patch: &Map<String, Value>) -> ApiResult<Map<String, Value>> {
        match patch.get(DIRECTIVE_MARKER) {
            None => self.merge_members(original, patch),
            Some(Value::String(d)) if d == "merge" => self.merge_members(original, patch),
            Some(Value::String(d)) if d == "replace" => self.merge_members(Map::new(), patch),
            Some(Value::String(d)) if d == "delete" => Ok(Map::new()),
            Some(other) => Err(bad_patch_type(other)),
        }
    }

    /// The body of `mergeMap` after the map-level directive: `$retainKeys`, then `$setElementOrder` lists,
    /// then `$deleteFromPrimitiveList` lists, then the ordinary members.
    fn merge_members(
        &mut self,
        mut original: Map<String, Value>,
        patch: &Map<String, Value>,
    ) -> ApiResult<Map<String, Value>> {
        apply_retain_keys(&mut original, patch)?;
        let ordered = self.apply_set_element_order(&mut original, patch)?;
        apply_delete_from_primitive_lists(&mut original, patch)?;
        for (key, pv) in patch {
            if is_directive_key(key) || ordered.contains(&key.as_str()) {
                continue;
            }
            let current = original.remove(key);
            if pv.is_null() {
                continue;
            }
            self.path.push(key.clone());
            let merged = self.merge_value(current, pv);
            self.path.pop();
            if let Some(v) = merged? {
                original.insert(key.clone(), v);
            }
        }
        Ok(original)
    }

    /// Merge one member value (the path already ends in its key). `None` means "leave the member out": a
    /// `$patch: delete` map for a member the object does not have.
    fn merge_value(&mut self, current: Option<Value>, pv: &Value) -> ApiResult<Option<Value>> {
        match (current, pv) {
            (Some(Value::Object(cur)), Value::Object(p)) => Ok(Some(Value::Object(self.merge_map(cur, p)?))),
            (Some(Value::Array(cur)), Value::Array(p)) => Ok(Some(Value::Array(self.merge_list(cur, p)?))),
            (_, Value::Object(p)) if is_delete_directive(p) => Ok(None),
            (_, Value::Object(p)) => Ok(Some(Value::Object(self.merge_map(Map::new(), p)?))),
            (_, Value::Array(p)) => Ok(Some(Value::Array(self.merge_list(Vec::new(), p)?))),
            (_, scalar) => Ok(Some(scalar.clone())),
        }
    }

    /// `mergeSliceHandler`/`mergeSlice` for the list at the current path.
    fn merge_list(&mut self, original: Vec<Value>, patch: &[Value]) -> ApiResult<Vec<Value>> {
        let key = match self.list_strategy() {
            SmpList::Replace => return self.replace_list(patch),
            SmpList::MergeByKey(k) => Some(k),
            SmpList::MergePrimitives => None,
        };
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        match list_element_kind(&original, patch)? {
            ElementKind::Scalar => Ok(union_scalars(original, patch)),
            ElementKind::Map => match key {
                Some(k) => self.merge_keyed(original, patch, &k),
                None => Err(ApiError::bad_request(format!(
                    "cannot merge lists without merge key for {}",
                    self.path.join(".")
                ))),
            },
        }
    }

    /// A list without a merge strategy is replaced by the patch's. Its items are still cleaned (directives,
    /// and `null`s inside maps, removed) so that no directive is ever stored.
    fn replace_list(&mut self, patch: &[Value]) -> ApiResult<Vec<Value>> {
        let mut out = Vec::with_capacity(patch.len());
        for item in patch {
            match item {
                Value::Object(m) if m.contains_key(DIRECTIVE_MARKER) => {
                    // A bare `{"$patch": ...}` marker or a deleted item contributes nothing.
                    if is_delete_directive(m) || m.len() == 1 {
                        validate_list_directive(m)?;
                        continue;
                    }
                    out.push(Value::Object(self.merge_map(Map::new(), m)?));
                }
                Value::Object(m) => out.push(Value::Object(self.merge_map(Map::new(), m)?)),
                Value::Array(inner) => out.push(Value::Array(self.replace_list(inner)?)),
                scalar => out.push(scalar.clone()),
            }
        }
        Ok(out)
    }

    /// `mergeSlice` for maps with a merge key: handle `$patch` items (`delete` removes matching live items,
    /// `replace` makes the patch items the whole list), merge matching items, add new ones, then order.
    fn merge_keyed(&mut self, mut original: Vec<Value>, patch: &[Value], key: &str) -> ApiResult<Vec<Value>> {
        let id = Identity::Key(key);
        let mut items: Vec<&Map<String, Value>> = Vec::with_capacity(patch.len());
        let mut replace = false;
        for m in patch.iter().filter_map(Value::as_object) {
            match m.get(DIRECTIVE_MARKER) {
                None => items.push(m),
                Some(Value::String(d)) if d == "merge" => items.push(m),
                Some(Value::String(d)) if d == "replace" => replace = true,
                Some(Value::String(d)) if d == "delete" => {
                    let kv = m.get(key).ok_or_else(|| no_merge_key(m, key))?;
                    original.retain(|o| !id.of(o).is_some_and(|ov| values_equal(ov, kv)));
                }
                Some(other) => return Err(bad_patch_type(other)),
            }
        }
        if replace {
            return items
                .into_iter()
                .map(|m| Ok(Value::Object(self.merge_map(Map::new(), m)?)))
                .collect();
        }
        let mut merged = original.clone();
        for m in &items {
            let kv = m.get(key).ok_or_else(|| no_merge_key(m, key))?;
            let found = merged
                .iter()
                .position(|o| id.of(o).is_some_and(|ov| values_equal(ov, kv)));
            match found.and_then(|i| merged.get_mut(i)) {
                Some(slot) => {
                    let live = match std::mem::take(slot) {
                        Value::Object(m) => m,
                        _ => Map::new(),
                    };
                    *slot = Value::Object(self.merge_map(live, m)?);
                }
                None => merged.push(Value::Object(self.merge_map(Map::new(), m)?)),
            }
        }
        let order: Vec<Value> = items.into_iter().map(|m| Value::Object(m.clone())).collect();
        Ok(order_merged(merged, &order, &original, id))
    }

    /// Process every `$setElementOrder/<list>` of `patch` (`mergePatchIntoOriginal`): merge the list, then
    /// order it by the directive. Returns the list names handled, which the member loop must skip.
    fn apply_set_element_order<'p>(
        &mut self,
        original: &mut Map<String, Value>,
        patch: &'p Map<String, Value>,
    ) -> ApiResult<Vec<&'p str>> {
        const MALFORMED: &str = "invalid patch format of setElementOrder list";
        let mut handled = Vec::new();
        for (directive, order) in patch.iter().filter(|(k, _)| k.starts_with(SET_ELEMENT_ORDER)) {
            let list = directive_list_key(directive, SET_ELEMENT_ORDER, MALFORMED)?;
            let Value::Array(order) = order else {
                return Err(ApiError::bad_request(MALFORMED));
            };
            let patch_list = match patch.get(list) {
                None => None,
                Some(Value::Array(p)) => Some(p.as_slice()),
                Some(_) => return Err(ApiError::bad_request(MALFORMED)),
            };
            handled.push(list);
            let live = match original.get(list) {
                Some(Value::Array(l)) => Some(l.clone()),
                _ => None,
            };
            self.path.push(list.to_string());
            let result = self.merge_ordered_list(live, patch_list, order);
            self.path.pop();
            if let Some(merged) = result? {
                original.insert(list.to_string(), Value::Array(merged));
            }
        }
        Ok(handled)
    }

    /// Merge one list that has a `$setElementOrder` directive and order the result by it (precedence:
    /// `$setElementOrder`, then the live order). `None` when neither the object nor the patch has the list.
    fn merge_ordered_list(
        &mut self,
        live: Option<Vec<Value>>,
        patch: Option<&[Value]>,
        order: &[Value],
    ) -> ApiResult<Option<Vec<Value>>> {
        let strategy = self.list_strategy();
        if strategy == SmpList::Replace {
            return match (live, patch) {
                (_, Some(p)) => self.replace_list(p).map(Some),
                (live, None) => Ok(live),
            };
        }
        let key = match &strategy {
            SmpList::MergeByKey(k) => Some(k.as_str()),
            _ => None,
        };
        let id_for = |items: &[Value]| match key {
            Some(k) if items.iter().any(Value::is_object) => Identity::Key(k),
            _ => Identity::Value,
        };
        if let Some(p) = patch {
            validate_against_order(p, order, id_for(p))?;
        }
        let live_order = live.clone().unwrap_or_default();
        let merged = match (live, patch) {
            (None, None) => return Ok(None),
            (Some(l), None) => l,
            (l, Some(p)) => self.merge_list(l.unwrap_or_default(), p)?,
        };
        let id = id_for(&merged);
        Ok(Some(order_merged(merged, order, &live_order, id)))
    }
}

/// Whether `key` is one of the SMP directives consumed by [`Smp::merge_members`].
fn is_directive_key(key: &str) -> bool {
    key == DIRECTIVE_MARKER
        || key == RETAIN_KEYS
        || key.starts_with(SET_ELEMENT_ORDER)
        || key.starts_with(DELETE_FROM_PRIMITIVE_LIST)
}

/// A `$patch` value inside a list item must be one of the known directives.
fn validate_list_directive(item: &Map<String, Value>) -> ApiResult<()> {
    match item.get(DIRECTIVE_MARKER).and_then(Value::as_str) {
        Some("delete" | "replace" | "merge") | None => Ok(()),
        Some(_) => Err(bad_patch_type(item.get(DIRECTIVE_MARKER).unwrap_or(&Value::Null))),
    }
}

/// `$retainKeys` (`applyRetainKeysDirective`): every non-null member of the patch must be listed (400
/// otherwise), and live members not listed are dropped before the merge.
fn apply_retain_keys(original: &mut Map<String, Value>, patch: &Map<String, Value>) -> ApiResult<()> {
    const MALFORMED: &str = "invalid patch format of retainKeys";
    let Some(retain) = patch.get(RETAIN_KEYS) else {
        return Ok(());
    };
    let Value::Array(retain) = retain else {
        return Err(ApiError::bad_request(MALFORMED));
    };
    let listed = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
    let unlisted_patch_member = patch
        .iter()
        .any(|(k, v)| !v.is_null() && !is_directive_key(k) && !listed(k));
    if unlisted_patch_member {
        return Err(ApiError::bad_request(MALFORMED));
    }
    original.retain(|k, _| listed(k));
    Ok(())
}

/// `$deleteFromPrimitiveList/<list>: [...]`: remove those values from the live list, whatever its strategy.
fn apply_delete_from_primitive_lists(original: &mut Map<String, Value>, patch: &Map<String, Value>) -> ApiResult<()> {
    const MALFORMED: &str = "invalid patch format of primitive list";
    for (directive, values) in patch.iter().filter(|(k, _)| k.starts_with(DELETE_FROM_PRIMITIVE_LIST)) {
        let list = directive_list_key(directive, DELETE_FROM_PRIMITIVE_LIST, MALFORMED)?;
        let Value::Array(values) = values else {
            return Err(ApiError::bad_request(MALFORMED));
        };
        if let Some(Value::Array(live)) = original.get_mut(list) {
            live.retain(|v| !values.iter().any(|d| values_equal(d, v)));
        }
    }
    Ok(())
}

/// What a merging list holds; lists of lists and mixed lists cannot be merged.
enum ElementKind {
    Map,
    Scalar,
}

/// `sliceElementType`, lenient about mixing scalar types (Go rejects `["a", 1]`, which no schema allows).
fn list_element_kind(original: &[Value], patch: &[Value]) -> ApiResult<ElementKind> {
    let all = || original.iter().chain(patch);
    if all().any(Value::is_array) {
        return Err(ApiError::invalid_msg("lists of lists are not supported"));
    }
    match (all().any(Value::is_object), all().all(Value::is_object)) {
        (true, true) => Ok(ElementKind::Map),
        (false, _) => Ok(ElementKind::Scalar),
        (true, false) => Err(ApiError::bad_request("list element types are not identical")),
    }
}

/// Union of two scalar lists (`patchStrategy: merge` on primitives, e.g. finalizers), duplicates removed.
fn union_scalars(original: Vec<Value>, patch: &[Value]) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
    for v in original.iter().chain(patch) {
        if !merged.iter().any(|m| values_equal(m, v)) {
            merged.push(v.clone());
        }
    }
    order_merged(merged, patch, &original, Identity::Value)
}

/// `normalizeElementOrder`: split `merged` into the items named in `patch_order` and the server-only rest,
/// sort each by its reference order, then interleave them (`mergeSortedSlice`).
fn order_merged(merged: Vec<Value>, patch_order: &[Value], server_order: &[Value], id: Identity) -> Vec<Value> {
    let (mut named, mut server_only): (Vec<Value>, Vec<Value>) =
        merged.into_iter().partition(|v| id.index_in(patch_order, v).is_some());
    named.sort_by_cached_key(|v| id.index_in(patch_order, v).unwrap_or(usize::MAX));
    server_only.sort_by_cached_key(|v| id.index_in(server_order, v).unwrap_or(usize::MAX));
    interleave(server_only, named, server_order, id)
}

/// `mergeSortedSlice`: keep both lists' internal order; a server-only item goes first only when both items
/// are live and it precedes the patch item in the live order. So patch items that are new come before the
/// remaining server-only items, exactly as Kubernetes does.
fn interleave(left: Vec<Value>, right: Vec<Value>, server_order: &[Value], id: Identity) -> Vec<Value> {
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => match (id.index_in(server_order, l), id.index_in(server_order, r)) {
                (Some(li), Some(ri)) => li < ri,
                _ => false,
            },
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    out
}

/// `validatePatchWithSetOrderList`: the patch list's items (ignoring `$patch` items) must appear in
/// `$setElementOrder` in the same relative order; anything else is a malformed patch.
fn validate_against_order(patch: &[Value], order: &[Value], id: Identity) -> ApiResult<()> {
    if let Identity::Key(k) = id {
        for item in patch.iter().chain(order) {
            let Some(m) = item.as_object() else {
                return Err(ApiError::bad_request("invalid patch format of setElementOrder list"));
            };
            if !m.contains_key(k) && !m.contains_key(DIRECTIVE_MARKER) {
                return Err(no_merge_key(m, k));
            }
        }
    }
    let mut wanted = patch
        .iter()
        .filter(|v| !v.as_object().is_some_and(|m| m.contains_key(DIRECTIVE_MARKER)))
        .filter_map(|v| id.of(v))
        .peekable();
    for o in order.iter().filter_map(|o| id.of(o)) {
        if wanted.peek().is_some_and(|w| values_equal(w, o)) {
            wanted.next();
        }
    }
    if wanted.peek().is_some() {
        return Err(ApiError::bad_request(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            Value::Array(patch.to_vec()),
            Value::Array(order.to_vec())
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::schema::{Builtin, Opaque};

    fn jp(target: Value, patch: Value) -> ApiResult<Value> {
        json_patch(&target, &patch)
    }

    fn smp(kind: &str, target: Value, patch: Value) -> ApiResult<Value> {
        strategic_merge_patch(&target, &patch, &Builtin::new(kind))
    }

    fn names(list: &Value) -> Vec<&str> {
        list.as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect()
    }

    // ----- JSON patch -----------------------------------------------------------------------------------------

    #[test]
    fn json_patch_kube_runtime_finalizer_add_on_object_without_finalizers() {
        let obj = json!({"metadata": {"name": "web"}, "spec": {}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["demo.example.com/cleanup"]}
        ]);
        let out = jp(obj, patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["demo.example.com/cleanup"]));
    }

    #[test]
    fn json_patch_test_null_fails_when_finalizers_exist() {
        let obj = json!({"metadata": {"finalizers": ["x"]}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": ["y"]}
        ]);
        let err = jp(obj, patch).unwrap_err();
        assert_eq!(err.code, 422);
        assert_eq!(err.reason, "Invalid");
        assert!(err
            .message
            .starts_with("the server rejected our request due to an error in our request: "));
        assert!(
            err.message.contains("testing value /metadata/finalizers failed"),
            "{}",
            err.message
        );
    }

    #[test]
    fn json_patch_test_without_value_behaves_like_null() {
        let obj = json!({"metadata": {}});
        assert!(jp(obj.clone(), json!([{"op": "test", "path": "/metadata/finalizers"}])).is_ok());
        let err = jp(json!({"a": 1}), json!([{"op": "test", "path": "/a"}])).unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn json_patch_test_on_missing_parent_fails() {
        let err = jp(
            json!({}),
            json!([{"op": "test", "path": "/metadata/finalizers", "value": null}]),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn json_patch_finalizer_removal_trace() {
        let obj = json!({"metadata": {"finalizers": ["demo.example.com/cleanup", "other"]}});
        let patch = json!([
            {"op": "test", "path": "/metadata/finalizers/0", "value": "demo.example.com/cleanup"},
            {"op": "remove", "path": "/metadata/finalizers/0"}
        ]);
        assert_eq!(jp(obj, patch).unwrap()["metadata"]["finalizers"], json!(["other"]));
    }

    #[test]
    fn json_patch_kubectl_remove_finalizers_and_missing_remove_fails() {
        let obj = json!({"metadata": {"name": "a", "finalizers": ["x"]}});
        let out = jp(obj, json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap();
        assert_eq!(out, json!({"metadata": {"name": "a"}}));
        let err = jp(out, json!([{"op": "remove", "path": "/metadata/finalizers"}])).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(
            err.message.contains("Unable to remove nonexistent key: finalizers"),
            "{}",
            err.message
        );
    }

    #[test]
    fn json_patch_add_into_missing_parent_fails() {
        let err = jp(
            json!({"metadata": {}}),
            json!([{"op": "add", "path": "/spec/replicas", "value": 3}]),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("missing path"), "{}", err.message);
    }

    #[test]
    fn json_patch_kubectl_csa_to_ssa_migration() {
        let obj = json!({"metadata": {"name": "cfg", "resourceVersion": "111",
            "managedFields": [{"manager": "kubectl-client-side-apply", "operation": "Update"}]}, "data": {"a": "1"}});
        let mf = json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1",
            "time": "2024-01-01T00:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}}}}]);
        let patch = json!([
            {"op": "replace", "path": "/metadata/managedFields", "value": mf},
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "112"}
        ]);
        let out = jp(obj, patch).unwrap();
        assert_eq!(out["metadata"]["managedFields"], mf);
        assert_eq!(out["metadata"]["resourceVersion"], "112");
        assert_eq!(out["data"], json!({"a": "1"}));
    }

    #[test]
    fn json_patch_replace_of_missing_member_adds_it_like_evanphx_v4() {
        let out = jp(
            json!({"metadata": {}}),
            json!([{"op": "replace", "path": "/metadata/managedFields", "value": []}]),
        );
        assert_eq!(out.unwrap(), json!({"metadata": {"managedFields": []}}));
        let err = jp(
            json!({"a": [1]}),
            json!([{"op": "replace", "path": "/a/1", "value": 2}]),
        )
        .unwrap_err();
        assert_eq!(err.code, 422);
    }

    #[test]
    fn json_patch_pointer_escapes() {
        let obj = json!({"metadata": {"annotations": {"a/b": "1", "c~d": "2"}}});
        let patch = json!([
            {"op": "replace", "path": "/metadata/annotations/a~1b", "value": "x"},
            {"op": "remove", "path": "/metadata/annotations/c~0d"},
            {"op": "add", "path": "/metadata/annotations/e~01", "value": "y"}
        ]);
        assert_eq!(
            jp(obj, patch).unwrap()["metadata"]["annotations"],
            json!({"a/b": "x", "e~1": "y"})
        );
    }

    #[test]
    fn json_patch_array_indices() {
        let patch = json!([
            {"op": "add", "path": "/l/-", "value": 4},
            {"op": "add", "path": "/l/0", "value": 0},
            {"op": "add", "path": "/l/5", "value": 5},
            {"op": "replace", "path": "/l/-1", "value": 50},
            {"op": "remove", "path": "/l/1"}
        ]);
        assert_eq!(
            jp(json!({"l": [1, 2, 4]}), patch).unwrap(),
            json!({"l": [0, 2, 4, 4, 50]})
        );
        assert_eq!(
            jp(json!({"l": [1]}), json!([{"op": "add", "path": "/l/3", "value": 0}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            jp(json!({"l": [1]}), json!([{"op": "remove", "path": "/l/x"}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            jp(json!({"l": []}), json!([{"op": "remove", "path": "/l/-"}]))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn json_patch_move_copy_and_numeric_test() {
        let patch = json!([
            {"op": "copy", "from": "/a", "path": "/b"},
            {"op": "move", "from": "/a/x", "path": "/c"},
            {"op": "test", "path": "/c", "value": 1.0}
        ]);
        assert_eq!(
            jp(json!({"a": {"x": 1}}), patch).unwrap(),
            json!({"a": {}, "b": {"x": 1}, "c": 1})
        );
        assert_eq!(
            jp(json!({}), json!([{"op": "move", "from": "/a", "path": "/b"}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            jp(json!({}), json!([{"op": "copy", "from": "/a", "path": "/b"}]))
                .unwrap_err()
                .code,
            422
        );
        // Moving a value into its own child fails: the parent is gone once the value is removed.
        assert_eq!(
            jp(json!({"a": {}}), json!([{"op": "move", "from": "/a", "path": "/a/b"}]))
                .unwrap_err()
                .code,
            422
        );
    }

    #[test]
    fn json_patch_failure_leaves_no_partial_result_and_is_all_or_nothing() {
        let target = json!({"a": 1});
        let patch = json!([{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/zz"}]);
        assert!(json_patch(&target, &patch).is_err());
        assert_eq!(target, json!({"a": 1}));
    }

    #[test]
    fn json_patch_decode_errors_are_400_and_apply_errors_422() {
        assert_eq!(jp(json!({}), json!({"op": "add"})).unwrap_err().code, 400);
        assert_eq!(jp(json!({}), json!("x")).unwrap_err().code, 400);
        assert_eq!(jp(json!({}), json!([1])).unwrap_err().code, 400);
        assert_eq!(jp(json!({}), json!(["add"])).unwrap_err().code, 400);
        // Decodable but not applicable, as in the apiserver: 422.
        let unknown = jp(json!({}), json!([{"op": "frobnicate", "path": "/a"}])).unwrap_err();
        assert_eq!(
            (unknown.code, unknown.message.contains("Unexpected kind: frobnicate")),
            (422, true)
        );
        assert_eq!(jp(json!({}), json!([{"path": "/a"}])).unwrap_err().code, 422);
        assert_eq!(jp(json!({}), json!([null])).unwrap_err().code, 422);
        assert_eq!(jp(json!({}), json!([{"op": "add", "value": 1}])).unwrap_err().code, 422);
        assert_eq!(
            jp(json!({}), json!([{"op": "add", "path": 5, "value": 1}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            jp(json!({}), json!([{"op": "add", "path": "", "value": 1}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(
            jp(json!({}), json!([{"op": "add", "path": "a", "value": 1}]))
                .unwrap_err()
                .code,
            422
        );
        assert_eq!(jp(json!({}), json!([])).unwrap(), json!({}));
    }

    #[test]
    fn json_patch_operation_limit_is_413() {
        let ops: Vec<Value> = (0..10_001).map(|_| json!({"op": "test", "path": "/a"})).collect();
        let err = jp(json!({}), Value::Array(ops)).unwrap_err();
        assert_eq!(err.code, 413);
        assert_eq!(err.reason, "RequestEntityTooLarge");
        let ops: Vec<Value> = (0..10_000).map(|_| json!({"op": "test", "path": "/a"})).collect();
        assert!(jp(json!({}), Value::Array(ops)).is_ok());
    }

    #[test]
    fn json_patch_doubling_copies_hit_the_copy_limit() {
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": "0123456789abcdef"})];
        for _ in 0..40 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/b"}));
            ops.push(json!({"op": "add", "path": "/a", "value": [{"op": "x"}]}));
            ops.push(json!({"op": "copy", "from": "/b", "path": "/a/0/x"}));
            ops.push(json!({"op": "copy", "from": "/b", "path": "/a/-"}));
        }
        let err = jp(json!({}), Value::Array(ops)).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("exceeding the limit"), "{}", err.message);
    }

    #[test]
    fn json_patch_cannot_build_arbitrarily_deep_documents() {
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": {}})];
        for _ in 0..300 {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/b"}));
            ops.push(json!({"op": "move", "from": "/b", "path": "/a/n"}));
            // /a now holds {n: <old a>}: one level deeper each round.
        }
        let err = jp(json!({}), Value::Array(ops)).unwrap_err();
        assert_eq!(err.code, 422);
        assert!(err.message.contains("nested more than"), "{}", err.message);
    }

    #[test]
    fn too_deep_inputs_are_400_not_a_stack_overflow() {
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 5) {
            deep = json!({ "a": deep });
        }
        assert_eq!(jp(deep.clone(), json!([])).unwrap_err().code, 400);
        assert_eq!(
            jp(json!({}), json!([{"op": "add", "path": "/x", "value": deep}]))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(merge_patch(&json!({}), &deep).unwrap_err().code, 400);
        assert_eq!(strategic_merge_patch(&json!({}), &deep, &Opaque).unwrap_err().code, 400);
        assert_eq!(strategic_merge_patch(&deep, &json!({}), &Opaque).unwrap_err().code, 400);
    }

    // ----- merge patch ----------------------------------------------------------------------------------------

    #[test]
    fn merge_patch_rfc7386_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "b"}), json!({"b": "c"}), json!({"a": "b", "b": "c"})),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (json!({"a": "b", "b": "c"}), json!({"a": null}), json!({"b": "c"})),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (json!({"a": [{"b": "c"}]}), json!({"a": [1]}), json!({"a": [1]})),
            (json!({"e": null}), json!({"a": 1}), json!({"e": null, "a": 1})),
            (json!([1, 2]), json!({"a": "b", "c": null}), json!({"a": "b"})),
            (json!({}), json!({"a": {"bb": {"ccc": null}}}), json!({"a": {"bb": {}}})),
        ];
        for (target, patch, want) in cases {
            assert_eq!(merge_patch(&target, &patch).unwrap(), want, "{target} + {patch}");
        }
    }

    #[test]
    fn merge_patch_kubectl_uses() {
        let dep = json!({"metadata": {"name": "d", "labels": {"a": "1"}}, "spec": {"replicas": 1, "paused": true}});
        let out = merge_patch(&dep, &json!({"spec": {"replicas": 3}})).unwrap();
        assert_eq!(out["spec"], json!({"replicas": 3, "paused": true}));
        let out = merge_patch(&out, &json!({"metadata": {"labels": {"a": null, "b": "2"}}})).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"b": "2"}));
        // Lists are replaced whole; nulls inside new objects are pruned like evanphx does.
        let out = merge_patch(&json!({"l": [1, 2]}), &json!({"l": [{"x": null, "y": 1}, null]})).unwrap();
        assert_eq!(out, json!({"l": [{"y": 1}, null]}));
    }

    #[test]
    fn merge_patch_non_object_patch_is_400() {
        for patch in [json!(null), json!(1), json!("x"), json!([1])] {
            assert_eq!(merge_patch(&json!({}), &patch).unwrap_err().code, 400, "{patch}");
        }
    }

    // ----- strategic merge patch ------------------------------------------------------------------------------

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "dep", "resourceVersion": "111", "labels": {"app": "web"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [
                        {"name": "c", "image": "nginx:0",
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                         "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}],
                         "args": ["a", "b"]},
                        {"name": "sidecar", "image": "busybox"}
                    ]}
                }
            }
        })
    }

    #[test]
    fn smp_kubectl_apply_trace_changes_image_with_set_element_order() {
        // `kubectl apply` of a Deployment with a single container `c` (A.4), on a live object with one container.
        let live = json!({"metadata": {"name": "dep", "resourceVersion": "111"},
            "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:0", "imagePullPolicy": "IfNotPresent"}]}}}});
        let patch = json!({"metadata": {"resourceVersion": "111"}, "spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [{"image": "nginx:1", "name": "c"}]}}}});
        let out = smp("Deployment", live, patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "c", "image": "nginx:1", "imagePullPolicy": "IfNotPresent"}])
        );
        assert_eq!(out["metadata"]["resourceVersion"], "111");
        assert!(!out.to_string().contains("$setElementOrder"));
    }

    #[test]
    fn smp_image_change_keeps_other_containers_and_fields() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}, {"name": "sidecar"}],
            "containers": [{"name": "c", "image": "nginx:1"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let containers = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(names(containers), ["c", "sidecar"]);
        assert_eq!(containers[0]["image"], "nginx:1");
        assert_eq!(
            containers[0]["env"],
            deployment()["spec"]["template"]["spec"]["containers"][0]["env"]
        );
        assert_eq!(containers[1]["image"], "busybox");
        assert_eq!(out["spec"]["replicas"], 1);
    }

    #[test]
    fn smp_set_element_order_reorders_and_places_new_items() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "new"}, {"name": "c"}],
            "containers": [{"name": "new", "image": "x"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            names(&out["spec"]["template"]["spec"]["containers"]),
            ["sidecar", "new", "c"]
        );
    }

    #[test]
    fn smp_set_element_order_mismatch_is_400() {
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "c"}],
            "containers": [{"name": "other", "image": "x"}]}}}});
        assert_eq!(smp("Deployment", deployment(), patch).unwrap_err().code, 400);
        let patch = json!({"spec": {"template": {"spec": {"$setElementOrder/containers": {"name": "c"}}}}});
        assert_eq!(smp("Deployment", deployment(), patch).unwrap_err().code, 400);
        let patch = json!({"spec": {"$setElementOrderX": []}});
        assert_eq!(smp("Deployment", deployment(), patch).unwrap_err().code, 400);
    }

    #[test]
    fn smp_set_element_order_on_a_missing_subtree_leaves_no_directive() {
        let live = json!({"metadata": {"name": "dep"}});
        let patch = json!({"spec": {"template": {"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [{"name": "b", "image": "y"}, {"name": "a", "image": "x", "ports": null}]}}}});
        let out = smp("Deployment", live, patch).unwrap();
        assert_eq!(
            out["spec"],
            json!({"template": {"spec": {"containers": [{"name": "b", "image": "y"}, {"name": "a", "image": "x"}]}}})
        );
    }

    #[test]
    fn smp_env_merges_by_name() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c",
            "env": [{"name": "B", "value": "20"}, {"name": "C", "value": "3"}]}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let env = &out["spec"]["template"]["spec"]["containers"][0]["env"];
        // Kubernetes' order: new patch items precede the remaining live items they are not anchored to.
        assert_eq!(
            env,
            &json!([{"name": "A", "value": "1"}, {"name": "B", "value": "20"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["image"], "nginx:0");
    }

    #[test]
    fn smp_new_item_without_order_directive_goes_first_like_kubernetes() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "new", "image": "x"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            names(&out["spec"]["template"]["spec"]["containers"]),
            ["new", "c", "sidecar"]
        );
    }

    #[test]
    fn smp_ports_merge_by_container_port() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 443, "name": "https"}, {"containerPort": 8080}]}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let ports = &out["spec"]["template"]["spec"]["containers"][0]["ports"];
        assert_eq!(
            ports,
            &json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443, "name": "https"}, {"containerPort": 8080}])
        );
    }

    #[test]
    fn smp_merge_keys_compare_numbers_like_go() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c",
            "ports": [{"containerPort": 80.0, "name": "http"}]}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        let ports = out["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .unwrap()
            .clone();
        assert_eq!(ports.len(), 2);
        assert_eq!(ports[0]["name"], "http");
    }

    #[test]
    fn smp_service_ports_merge_by_port() {
        let live = json!({"spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443}]}});
        let out = smp(
            "Service",
            live,
            json!({"spec": {"ports": [{"port": 80, "targetPort": 9090}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["ports"],
            json!([{"port": 80, "targetPort": 9090}, {"port": 443}])
        );
    }

    #[test]
    fn smp_atomic_lists_are_replaced() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "args": ["z"]}],
            "tolerations": [{"key": "k"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(out["spec"]["template"]["spec"]["containers"][0]["args"], json!(["z"]));
        assert_eq!(out["spec"]["template"]["spec"]["tolerations"], json!([{"key": "k"}]));
    }

    #[test]
    fn smp_configmap_data_merge_and_null_delete() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg",
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "keep": "1"}},
            "data": {"a": "1", "b": "2"}});
        let patch = json!({"data": {"b": null, "c": "3", "a": "10"},
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"x\":1}"}}});
        let out = smp("ConfigMap", cm, patch).unwrap();
        assert_eq!(out["data"], json!({"a": "10", "c": "3"}));
        assert_eq!(out["metadata"]["annotations"]["keep"], "1");
        assert_eq!(
            out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            "{\"x\":1}"
        );
        // A null for a member that does not exist is simply dropped.
        let out = smp("ConfigMap", out, json!({"binaryData": null, "immutable": null})).unwrap();
        assert!(out.get("binaryData").is_none() && out.get("immutable").is_none());
    }

    #[test]
    fn smp_finalizers_union_and_delete_from_primitive_list() {
        let live = json!({"metadata": {"finalizers": ["a", "b"]}});
        let out = smp(
            "ConfigMap",
            live.clone(),
            json!({"metadata": {"finalizers": ["b", "c"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b", "c"]));
        let out = smp("ConfigMap", live.clone(), json!({"metadata": {"finalizers": ["c"]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"], "finalizers": ["d"]}});
        let out = smp("ConfigMap", live.clone(), patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["d", "b"]));
        let patch = json!({"metadata": {"$setElementOrder/finalizers": ["b", "a", "c"], "finalizers": ["c"]}});
        let out = smp("ConfigMap", live.clone(), patch).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["b", "a", "c"]));
        let bad = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}});
        assert_eq!(smp("ConfigMap", live.clone(), bad).unwrap_err().code, 400);
        let bad = json!({"metadata": {"$deleteFromPrimitiveListfinalizers": ["a"]}});
        assert_eq!(smp("ConfigMap", live, bad).unwrap_err().code, 400);
    }

    #[test]
    fn smp_owner_references_merge_by_uid() {
        let live = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}, {"uid": "2", "name": "b"}]}});
        let patch = json!({"metadata": {"ownerReferences": [{"uid": "2", "controller": true}, {"uid": "1", "$patch": "delete"}]}});
        let out = strategic_merge_patch(&live, &patch, &Opaque).unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "b", "controller": true}])
        );
    }

    #[test]
    fn smp_patch_delete_list_item() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(names(&out["spec"]["template"]["spec"]["containers"]), ["c"]);
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"$patch": "delete"}]}}}});
        assert_eq!(smp("Deployment", deployment(), patch).unwrap_err().code, 400);
    }

    #[test]
    fn smp_patch_replace_list_and_map() {
        let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "i"}, {"$patch": "replace"}]}}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "i"}])
        );
        let patch = json!({"metadata": {"labels": {"$patch": "replace", "x": "y"}}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"x": "y"}));
        assert_eq!(out["metadata"]["name"], "dep");
        let out = smp(
            "Deployment",
            deployment(),
            json!({"$patch": "replace", "kind": "Deployment"}),
        )
        .unwrap();
        assert_eq!(out, json!({"kind": "Deployment"}));
    }

    #[test]
    fn smp_patch_delete_map_and_merge_directive() {
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({}));
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"annotations": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert!(out["metadata"].get("annotations").is_none());
        let out = smp(
            "Deployment",
            deployment(),
            json!({"metadata": {"labels": {"$patch": "merge", "b": "2"}}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["labels"], json!({"app": "web", "b": "2"}));
        assert_eq!(
            smp("Deployment", deployment(), json!({"metadata": {"$patch": "explode"}}))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            smp("Deployment", deployment(), json!({"$patch": 7})).unwrap_err().code,
            400
        );
        let item = json!({"spec": {"template": {"spec": {"containers": [{"name": "c", "$patch": "nope"}]}}}});
        assert_eq!(smp("Deployment", deployment(), item).unwrap_err().code, 400);
    }

    #[test]
    fn smp_retain_keys() {
        let live = json!({"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}});
        let patch = json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}});
        let out = smp("Deployment", live.clone(), patch).unwrap();
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {"maxSurge": 2}}}});
        assert_eq!(smp("Deployment", live.clone(), bad).unwrap_err().code, 400);
        let bad = json!({"spec": {"strategy": {"$retainKeys": "type"}}});
        assert_eq!(smp("Deployment", live.clone(), bad).unwrap_err().code, 400);
        // Nulls are allowed for unlisted keys.
        let ok = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": null}}});
        assert_eq!(
            smp("Deployment", live, ok).unwrap()["spec"]["strategy"],
            json!({"type": "RollingUpdate"})
        );
    }

    #[test]
    fn smp_selector_merges_as_a_map_and_nulls_delete() {
        let patch = json!({"spec": {"selector": {"matchLabels": {"tier": "fe"}}, "replicas": null}});
        let out = smp("Deployment", deployment(), patch).unwrap();
        assert_eq!(
            out["spec"]["selector"],
            json!({"matchLabels": {"app": "web", "tier": "fe"}})
        );
        assert!(out["spec"].get("replicas").is_none());
    }

    #[test]
    fn smp_errors() {
        assert_eq!(smp("Deployment", deployment(), json!([1])).unwrap_err().code, 400);
        let no_key = json!({"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}});
        let err = smp("Deployment", deployment(), no_key).unwrap_err();
        assert_eq!(err.code, 400);
        assert!(
            err.message.contains("does not contain declared merge key: name"),
            "{}",
            err.message
        );
        let mixed = json!({"spec": {"template": {"spec": {"containers": ["x"]}}}});
        assert_eq!(smp("Deployment", deployment(), mixed).unwrap_err().code, 400);
        let lol = json!({"metadata": {"finalizers": [["x"]]}});
        assert_eq!(smp("Deployment", deployment(), lol).unwrap_err().code, 422);
    }

    #[test]
    fn smp_type_changes_replace() {
        let out = smp(
            "ConfigMap",
            json!({"data": "x", "l": [1]}),
            json!({"data": {"a": "1", "n": null}, "l": {"k": 1}}),
        )
        .unwrap();
        assert_eq!(out, json!({"data": {"a": "1"}, "l": {"k": 1}}));
    }

    // ----- properties -----------------------------------------------------------------------------------------

    mod props {
        use proptest::prelude::*;
        use serde_json::{json, Map, Value};

        use super::super::*;
        use crate::schema::Builtin;

        /// Keys that exercise the schema (merge lists, directives) as well as plain members.
        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                Just("metadata".to_string()),
                Just("finalizers".to_string()),
                Just("spec".to_string()),
                Just("template".to_string()),
                Just("containers".to_string()),
                Just("env".to_string()),
                Just("ports".to_string()),
                Just("name".to_string()),
                Just("containerPort".to_string()),
                Just("$patch".to_string()),
                Just("$retainKeys".to_string()),
                Just("$setElementOrder/containers".to_string()),
                Just("$setElementOrder/finalizers".to_string()),
                Just("$deleteFromPrimitiveList/finalizers".to_string()),
                "[a-c]{1,2}",
            ]
        }

        fn scalar() -> impl Strategy<Value = Value> {
            prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                (-3i64..3).prop_map(|n| json!(n)),
                Just(json!(1.0)),
                prop_oneof![
                    Just("replace"),
                    Just("delete"),
                    Just("merge"),
                    Just("c"),
                    Just("a"),
                    Just("/a"),
                    Just("-")
                ]
                .prop_map(|s| json!(s)),
            ]
        }

        fn any_json() -> impl Strategy<Value = Value> {
            scalar().prop_recursive(5, 48, 5, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::btree_map(key(), inner, 0..5)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        /// JSON without nulls anywhere and without `$` keys: merge_patch(x, x) must be x.
        fn null_free() -> impl Strategy<Value = Value> {
            let leaf = prop_oneof![
                any::<bool>().prop_map(Value::Bool),
                (-3i64..3).prop_map(|n| json!(n)),
                "[a-z]{0,3}".prop_map(Value::String)
            ];
            leaf.prop_recursive(5, 48, 5, |inner| {
                prop_oneof![
                    prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                    prop::collection::btree_map("[a-c]{1,2}", inner, 0..5)
                        .prop_map(|m| Value::Object(m.into_iter().collect())),
                ]
            })
        }

        fn pointer() -> impl Strategy<Value = Value> {
            prop::collection::vec(
                prop_oneof![
                    key(),
                    Just("0".to_string()),
                    Just("-".to_string()),
                    Just("-1".to_string()),
                    Just("9".to_string())
                ],
                0..4,
            )
            .prop_map(|parts| {
                json!(parts
                    .iter()
                    .map(|p| format!("/{}", p.replace('~', "~0").replace('/', "~1")))
                    .collect::<String>())
            })
        }

        fn operation() -> impl Strategy<Value = Value> {
            let op = prop_oneof![
                Just("add"),
                Just("remove"),
                Just("replace"),
                Just("move"),
                Just("copy"),
                Just("test"),
                Just("bogus")
            ];
            (op, pointer(), pointer(), prop::option::of(any_json())).prop_map(|(op, path, from, value)| {
                let mut m = Map::new();
                m.insert("op".into(), json!(op));
                m.insert("path".into(), path);
                m.insert("from".into(), from);
                if let Some(v) = value {
                    m.insert("value".into(), v);
                }
                Value::Object(m)
            })
        }

        /// Whether any object in `v` has a directive key.
        fn has_directive(v: &Value) -> bool {
            match v {
                Value::Object(m) => m.iter().any(|(k, x)| is_directive_key(k) || has_directive(x)),
                Value::Array(a) => a.iter().any(has_directive),
                _ => false,
            }
        }

        /// Targets look like stored objects: no directive keys.
        fn target() -> impl Strategy<Value = Value> {
            any_json().prop_filter("stored objects carry no directives", |v| !has_directive(v))
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(400))]

            #[test]
            fn json_patch_never_panics(t in any_json(), ops in prop::collection::vec(operation(), 0..8), raw in any_json()) {
                let _ = json_patch(&t, &Value::Array(ops));
                let _ = json_patch(&t, &raw);
            }

            #[test]
            fn merge_patch_never_panics(t in any_json(), p in any_json()) {
                let _ = merge_patch(&t, &p);
            }

            #[test]
            fn smp_never_panics_and_never_stores_directives(t in target(), p in any_json()) {
                for kind in ["Deployment", "Service", "ConfigMap"] {
                    if let Ok(out) = strategic_merge_patch(&t, &p, &Builtin::new(kind)) {
                        prop_assert!(!has_directive(&out), "{} + {} = {}", t, p, out);
                    }
                }
            }

            #[test]
            fn merge_patch_with_itself_is_identity(x in null_free()) {
                if x.is_object() {
                    prop_assert_eq!(merge_patch(&x, &x).unwrap(), x);
                }
            }

            #[test]
            fn smp_with_itself_is_identity_for_scalar_maps(x in prop::collection::btree_map("[a-c]{1,2}", "[a-z]{0,3}", 0..6)) {
                let x = json!({"data": x});
                prop_assert_eq!(strategic_merge_patch(&x, &x, &Builtin::new("ConfigMap")).unwrap(), x);
            }
        }
    }
}
