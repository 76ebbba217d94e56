//! `metadata.managedFields` entries: decoding stored entries, validating client-written
//! ones, and encoding them back. Entries the write did not touch are re-emitted from their stored JSON, so a
//! no-op write yields a byte-identical object.

use chrono::DateTime;
use serde_json::{Map, Value};

use super::fieldset::FieldSet;
use crate::error::Cause;

pub const APPLY: &str = "Apply";
pub const UPDATE: &str = "Update";

/// Longest accepted `manager` (apimachinery `FieldManagerMaxLength`).
const MAX_MANAGER_LEN: usize = 128;

/// One managedFields entry with its decoded field set.
#[derive(Debug, Clone)]
pub struct Entry {
    pub manager: String,
    pub operation: String,
    pub api_version: String,
    /// Empty for the main resource.
    pub subresource: String,
    pub time: Option<String>,
    pub set: FieldSet,
    /// The stored JSON, re-emitted while the entry is unchanged.
    original: Option<Value>,
    /// The stored `fieldsV1` could not be decoded: keep the entry as it is and never give it ownership.
    opaque: bool,
}

impl Entry {
    pub fn new(
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: &str,
        time: &str,
        set: FieldSet,
    ) -> Self {
        Entry {
            manager: manager.to_string(),
            operation: operation.to_string(),
            api_version: api_version.to_string(),
            subresource: subresource.to_string(),
            time: Some(time.to_string()),
            set,
            original: None,
            opaque: false,
        }
    }

    /// Whether this entry is the one a write by `(manager, operation, apiVersion, subresource)` records into.
    /// Apply entries are identified without their apiVersion, as in apimachinery's `BuildManagerIdentifier`.
    pub fn is(&self, manager: &str, operation: &str, api_version: &str, subresource: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == APPLY || self.api_version == api_version)
            && !self.opaque
    }

    /// Replace the field set; a different set (or apiVersion) makes the entry new, with `time = now`.
    pub fn replace_set(&mut self, set: FieldSet, api_version: &str, now: &str) {
        if set != self.set {
            self.time = Some(now.to_string());
            self.original = None;
        }
        if api_version != self.api_version {
            self.original = None;
        }
        self.set = set;
        self.api_version = api_version.to_string();
    }

    /// Drop the members of `other` from this entry. Another manager taking fields over does not change this
    /// entry's `time`.
    pub fn lose(&mut self, other: &FieldSet) {
        if self.opaque {
            return;
        }
        let before = self.set.clone();
        self.set.subtract(other);
        if self.set != before {
            self.original = None;
        }
    }

    pub fn is_dirty(&self) -> bool {
        self.original.is_none()
    }

    /// Whether the entry should be written out (empty entries are dropped).
    pub fn is_live(&self) -> bool {
        self.opaque || !self.set.is_empty()
    }

    /// How conflict messages name the entry (apimachinery `printManager`): Update entries carry their version.
    pub fn display(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == UPDATE {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The JSON form, fields in the order the real server writes them.
    pub fn to_value(&self) -> Value {
        if let Some(v) = &self.original {
            return v.clone();
        }
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert("operation".into(), Value::String(self.operation.clone()));
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.set.to_fields_v1());
        if !self.subresource.is_empty() {
            m.insert("subresource".into(), Value::String(self.subresource.clone()));
        }
        Value::Object(m)
    }

    /// Decode one stored entry; `None` for something that is not an object at all.
    fn from_value(v: &Value) -> Option<Entry> {
        let m = v.as_object()?;
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let decoded = m
            .get("fieldsV1")
            .map(FieldSet::from_fields_v1)
            .unwrap_or(Ok(FieldSet::default()));
        let opaque = decoded.is_err() || !matches!(s("operation").as_str(), APPLY | UPDATE);
        Some(Entry {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            subresource: s("subresource"),
            time: m.get("time").and_then(Value::as_str).map(str::to_string),
            set: decoded.unwrap_or_default(),
            original: Some(v.clone()),
            opaque,
        })
    }

    /// Sort key of apimachinery's `sortEncodedManagedFields`: operation, time (seconds), manager, version,
    /// subresource.
    fn sort_key(&self) -> (String, i64, String, String, String) {
        let secs = self
            .time
            .as_deref()
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map_or(0, |t| t.timestamp());
        (
            self.operation.clone(),
            secs,
            self.manager.clone(),
            self.api_version.clone(),
            self.subresource.clone(),
        )
    }
}

/// `metadata.managedFields` of an object, when it is a list.
pub fn managed_fields_of(obj: &Value) -> Option<&Vec<Value>> {
    obj.get("metadata")?.get("managedFields")?.as_array()
}

/// Decode stored entries. Undecodable ones are kept opaque rather than dropped, so a write never loses them.
pub fn decode(list: Option<&Vec<Value>>) -> Vec<Entry> {
    list.map(|l| l.iter().filter_map(Entry::from_value).collect())
        .unwrap_or_default()
}

/// Encode entries after a write. When any entry changed they are sorted as the real server sorts them;
/// otherwise the stored order is kept so that an unchanged object stays byte-identical.
pub fn encode(mut entries: Vec<Entry>, reorder: bool) -> Vec<Value> {
    entries.retain(Entry::is_live);
    if reorder || entries.iter().any(Entry::is_dirty) {
        entries.sort_by_key(Entry::sort_key);
    }
    entries.iter().map(Entry::to_value).collect()
}

/// Set (or, when `list` is empty, remove) `metadata.managedFields`.
pub fn store(obj: &mut Value, list: Vec<Value>) {
    let Value::Object(root) = obj else { return };
    let meta = root.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Validate client-written entries (apimachinery `ValidateManagedFields`, plus a decodable `fieldsV1`).
pub fn validate(list: &[Value]) -> Vec<Cause> {
    let mut causes = Vec::new();
    for (i, v) in list.iter().enumerate() {
        let at = |f: &str| format!("metadata.managedFields[{i}]{f}");
        let Some(m) = v.as_object() else {
            causes.push(Cause::new(
                "FieldValueInvalid",
                "Invalid value: must be an object",
                at(""),
            ));
            continue;
        };
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or_default();
        if !matches!(s("operation"), APPLY | UPDATE) {
            let msg = format!("Invalid value: {:?}: must be `Apply` or `Update`", s("operation"));
            causes.push(Cause::new("FieldValueInvalid", msg, at(".operation")));
        }
        if s("fieldsType") != "FieldsV1" {
            let msg = format!("Invalid value: {:?}: must be `FieldsV1`", s("fieldsType"));
            causes.push(Cause::new("FieldValueInvalid", msg, at(".fieldsType")));
        }
        causes.extend(validate_manager(s("manager")).map(|msg| Cause::new("FieldValueInvalid", msg, at(".manager"))));
        if let Some(Err(e)) = m.get("fieldsV1").map(FieldSet::from_fields_v1) {
            causes.push(Cause::new(
                "FieldValueInvalid",
                format!("Invalid value: {e}"),
                at(".fieldsV1"),
            ));
        }
    }
    causes
}

fn validate_manager(manager: &str) -> Option<String> {
    if manager.len() > MAX_MANAGER_LEN {
        return Some(format!("Too long: may not be more than {MAX_MANAGER_LEN} bytes"));
    }
    manager
        .chars()
        .enumerate()
        .find(|(_, c)| !is_printable(*c))
        .map(|(i, c)| {
            format!(
                "Invalid value: {manager:?}: invalid character U+{:04X} (at position {i})",
                c as u32
            )
        })
}

/// Go's `unicode.IsPrint`, closely enough: no control characters and no whitespace other than ' '.
fn is_printable(c: char) -> bool {
    !c.is_control() && (c == ' ' || !c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sorts_apply_first_then_time() {
        let list = vec![
            json!({"manager": "b", "operation": "Update", "apiVersion": "v1", "time": "2026-01-01T00:00:00Z",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}}),
            json!({"manager": "a", "operation": "Apply", "apiVersion": "v1", "time": "2026-01-02T00:00:00Z",
                   "fieldsType": "FieldsV1", "fieldsV1": {"f:x": {}}}),
        ];
        let entries = decode(Some(&list));
        assert_eq!(
            encode(entries.clone(), false),
            list,
            "unchanged entries keep their order"
        );
        let sorted = encode(entries, true);
        assert_eq!(sorted[0]["manager"], "a");
    }

    #[test]
    fn validation_messages() {
        let causes = validate(&[json!({"manager": "m\u{7}", "operation": "Patch", "fieldsType": "FieldsV2"})]);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "metadata.managedFields[0].operation",
                "metadata.managedFields[0].fieldsType",
                "metadata.managedFields[0].manager"
            ]
        );
        assert!(
            validate(&[json!({"manager": "x".repeat(129), "operation": "Apply", "fieldsType": "FieldsV1"})])
                .iter()
                .any(|c| c.message.starts_with("Too long"))
        );
        assert!(
            validate(&[json!({"manager": "ok", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}})])
                .is_empty()
        );
    }

    #[test]
    fn display_names_update_versions() {
        let e = Entry::new("kube-controller", UPDATE, "apps/v1", "status", "t", FieldSet::leaf());
        assert_eq!(
            e.display(),
            "\"kube-controller\" with subresource \"status\" using apps/v1"
        );
        assert_eq!(
            Entry::new("kubectl", APPLY, "v1", "", "t", FieldSet::leaf()).display(),
            "\"kubectl\""
        );
    }
}
