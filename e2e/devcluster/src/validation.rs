//! Request validation shared by all kinds: object names (DNS-1123 subdomain or label), CRD specs
//! (spec §13.2), unknown fields of built-in kinds and duplicate JSON keys (fieldValidation, spec §18).
//! OWNER: schema helper. STUB — replace the bodies, keep the signatures.

use serde_json::Value;

use crate::error::Cause;

/// Causes for an invalid `metadata.name` of `kind` (Namespace and Service names are DNS-1123 labels, most
/// others DNS-1123 subdomains).
pub fn validate_name(kind: &str, name: &str) -> Vec<Cause> {
    let _ = (kind, name);
    Vec::new()
}

/// Causes for an invalid CustomResourceDefinition object (name = `<plural>.<group>`, exactly one storage
/// version, scope, schema present).
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let _ = crd;
    Vec::new()
}

/// Paths (`.spec.foo`) of fields a built-in kind does not declare.
pub fn unknown_builtin_fields(obj: &Value) -> Vec<String> {
    let _ = obj;
    Vec::new()
}

/// Paths of keys that occur twice in the same JSON object of a raw request body (`.spec.replicas`).
pub fn duplicate_json_keys(raw: &[u8]) -> Vec<String> {
    let _ = raw;
    Vec::new()
}
