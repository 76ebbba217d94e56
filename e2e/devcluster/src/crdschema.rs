//! Structural-schema semantics for custom resources (spec §13.5): pruning of unknown fields (except under
//! `x-kubernetes-preserve-unknown-fields`), defaulting from `default:`, type validation, and the list/map
//! markers SSA needs (this type implements [`FieldSchema`]).
//! OWNER: schema helper. STUB — replace the bodies, keep the signatures.

use serde_json::Value;

use crate::error::Cause;
use crate::schema::{FieldSchema, ListType, SmpList};

/// The `openAPIV3Schema` of one CRD version.
#[derive(Debug, Clone)]
pub struct CrdSchema {
    root: Value,
}

impl CrdSchema {
    pub fn new(open_api_v3_schema: &Value) -> Self {
        CrdSchema { root: open_api_v3_schema.clone() }
    }

    /// Remove fields the schema does not declare (apiVersion, kind and metadata are always kept) and return
    /// their paths (`.spec.foo`) for fieldValidation warnings/errors.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let _ = (obj, &self.root);
        Vec::new()
    }

    /// Apply `default:` values for absent fields.
    pub fn default(&self, obj: &mut Value) {
        let _ = obj;
    }

    /// Type validation (`type`, `enum`, `required`, `minimum`/`maximum`, `pattern`, `maxLength`/`minLength`,
    /// `maxItems`, `format: int-or-string`, `x-kubernetes-int-or-string`) → 422 causes with field paths.
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        let _ = obj;
        Vec::new()
    }
}

impl FieldSchema for CrdSchema {
    fn list_type(&self, path: &[&str]) -> ListType {
        crate::schema::Opaque.list_type(path)
    }
    fn smp_list(&self, path: &[&str]) -> SmpList {
        crate::schema::Opaque.smp_list(path)
    }
    fn map_is_atomic(&self, _path: &[&str]) -> bool {
        false
    }
}
