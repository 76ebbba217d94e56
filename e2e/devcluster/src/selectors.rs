//! Label selectors (full grammar, spec §8.1) and field selectors (spec §8.2).
//! OWNER: table helper. STUB — replace the bodies, keep the signatures.

use serde_json::{Map, Value};

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    raw: String,
}

impl LabelSelector {
    /// Parse `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, comma-joined (already URL-decoded).
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(LabelSelector { raw: s.to_string() })
    }

    pub fn is_empty(&self) -> bool {
        self.raw.trim().is_empty()
    }

    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let _ = labels;
        true
    }
}

/// A parsed field selector: `metadata.name`, `metadata.namespace` on every kind, plus the per-kind fields of
/// spec §8.2, with `=`, `==`, `!=`, comma-joined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    raw: String,
}

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        Ok(FieldSelector { raw: s.to_string() })
    }

    pub fn is_empty(&self) -> bool {
        self.raw.trim().is_empty()
    }

    /// `Err("field label not supported: <label>")` when a requirement names a field `kind` does not support.
    pub fn check_supported(&self, kind: &str) -> Result<(), String> {
        let _ = kind;
        Ok(())
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let _ = obj;
        true
    }
}
