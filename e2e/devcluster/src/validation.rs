//! Request validation shared by all kinds: object names (DNS-1123 subdomain or label), CRD specs,
//! unknown fields of built-in kinds and duplicate JSON keys (fieldValidation).
//!
//! Messages copy the apiserver's (`k8s.io/apimachinery/pkg/util/validation`, apiextensions validation) so that
//! kubectl output and operator error handling look the same as against a real cluster. Everything here takes
//! client input and therefore never panics; recursion is bounded.

use std::collections::HashSet;
use std::fmt;

use serde::de::{DeserializeOwned, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::Serialize;
use serde_json::Value;

use crate::error::Cause;

/// Deepest nesting the object and schema walks follow (serde_json limits parsed bodies to ~128 levels anyway).
const MAX_DEPTH: usize = 128;

/// How many `null`-valued fields [`unknown_builtin_fields`] probes with an extra round trip; beyond that, null
/// fields are assumed known (they are rare, and each probe costs a full typed decode).
const MAX_NULL_PROBES: usize = 32;

// ---------------------------------------------------------------------------------------------------------
// Names
// ---------------------------------------------------------------------------------------------------------

const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";
// The double space after 'my-name', is in the apiserver's message too (RegexError's example joining).
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

/// `[a-z0-9]([-a-z0-9]*[a-z0-9])?`, without the length limit.
fn is_label_shape(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => alnum(f) && alnum(l) && b.iter().all(|c| alnum(c) || *c == b'-'),
        _ => false,
    }
}

/// Error messages of `IsDNS1123Subdomain` (length first, then shape, as the apiserver lists them).
fn dns1123_subdomain_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 253 {
        errs.push("must be no more than 253 characters".to_string());
    }
    if !name.split('.').all(is_label_shape) {
        errs.push(DNS1123_SUBDOMAIN_MSG.to_string());
    }
    errs
}

/// Error messages of `IsDNS1123Label`.
fn dns1123_label_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_shape(name) {
        errs.push(DNS1123_LABEL_MSG.to_string());
    }
    errs
}

/// Error messages of `IsDNS1035Label` (a DNS-1123 label that starts with a letter).
fn dns1035_label_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name.len() > 63 {
        errs.push("must be no more than 63 characters".to_string());
    }
    if !is_label_shape(name) || !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        errs.push(DNS1035_LABEL_MSG.to_string());
    }
    errs
}

/// Error messages of `ValidatePathSegmentName`, the rule for RBAC names (`system:controller:x` is legal).
fn path_segment_errors(name: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if name == "." || name == ".." {
        errs.push(format!("may not be '{name}'"));
    }
    for bad in ["/", "%"] {
        if name.contains(bad) {
            errs.push(format!("may not contain '{bad}'"));
        }
    }
    errs
}

/// `Invalid value: "x": detail` as Go's field.Error renders a string value.
fn invalid_str(value: &str, detail: &str) -> String {
    format!("Invalid value: {}: {detail}", quote(value))
}

fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// Causes for an invalid `metadata.name` of `kind` (Namespace and Service names are DNS-1123 labels, most
/// others DNS-1123 subdomains).
///
/// As in Kubernetes 1.33: Namespace → DNS-1123 label, Service → DNS-1035 label (must start with a letter),
/// RBAC kinds → path segment (colons allowed), CronJob → subdomain of at most 52 characters (the Job names
/// it creates get a suffix), everything else (custom resources included) → DNS-1123 subdomain.
pub fn validate_name(kind: &str, name: &str) -> Vec<Cause> {
    if name.is_empty() {
        return vec![Cause::new(
            "FieldValueRequired",
            "Required value: name or generateName is required",
            "metadata.name",
        )];
    }
    let mut errs = match kind {
        "Namespace" => dns1123_label_errors(name),
        "Service" => dns1035_label_errors(name),
        "Role" | "ClusterRole" | "RoleBinding" | "ClusterRoleBinding" => path_segment_errors(name),
        _ => dns1123_subdomain_errors(name),
    };
    if kind == "CronJob" && name.len() > 52 {
        errs.push("must be no more than 52 characters".to_string());
    }
    errs.into_iter()
        .map(|e| Cause::new("FieldValueInvalid", invalid_str(name, &e), "metadata.name"))
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// CustomResourceDefinition
// ---------------------------------------------------------------------------------------------------------

fn required(field: &str, detail: &str) -> Cause {
    let msg = if detail.is_empty() {
        "Required value".to_string()
    } else {
        format!("Required value: {detail}")
    };
    Cause::new("FieldValueRequired", msg, field)
}

fn invalid(field: &str, value: &str, detail: &str) -> Cause {
    Cause::new("FieldValueInvalid", invalid_str(value, detail), field)
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// Causes for an invalid CustomResourceDefinition object (name = `<plural>.<group>`, exactly one storage
/// version, scope, schema present).
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = Vec::new();
    let (plural, group) = (text(crd, "/spec/names/plural"), text(crd, "/spec/group"));
    let name = text(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        causes.push(invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    validate_crd_group(group, &mut causes);
    validate_crd_names(crd, &mut causes);
    validate_crd_scope(text(crd, "/spec/scope"), &mut causes);
    validate_crd_versions(crd, &mut causes);
    causes
}

fn validate_crd_group(group: &str, causes: &mut Vec<Cause>) {
    if group.is_empty() {
        causes.push(required("spec.group", ""));
        return;
    }
    let errs = dns1123_subdomain_errors(group);
    if !errs.is_empty() {
        causes.push(invalid("spec.group", group, &errs.join(",")));
    }
    if !group.contains('.') {
        causes.push(invalid("spec.group", group, "should be a domain with at least one dot"));
    }
}

fn validate_crd_names(crd: &Value, causes: &mut Vec<Cause>) {
    for field in ["plural", "singular"] {
        let v = text(crd, &format!("/spec/names/{field}"));
        let errs = dns1035_label_errors(v);
        if v.is_empty() {
            if field == "plural" {
                causes.push(required("spec.names.plural", ""));
            }
        } else if !errs.is_empty() {
            causes.push(invalid(&format!("spec.names.{field}"), v, &errs.join(",")));
        }
    }
    for field in ["kind", "listKind"] {
        let v = text(crd, &format!("/spec/names/{field}"));
        // listKind is defaulted to <kind>List by the apiserver, so only kind is required.
        if v.is_empty() {
            if field == "kind" {
                causes.push(required("spec.names.kind", ""));
            }
            continue;
        }
        let errs = dns1035_label_errors(&v.to_ascii_lowercase());
        if !errs.is_empty() {
            let detail = format!("may have mixed case, but should otherwise match: {}", errs.join(","));
            causes.push(invalid(&format!("spec.names.{field}"), v, &detail));
        }
    }
}

fn validate_crd_scope(scope: &str, causes: &mut Vec<Cause>) {
    match scope {
        "Cluster" | "Namespaced" => {}
        "" => causes.push(required("spec.scope", "")),
        other => causes.push(Cause::new(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: \"Cluster\", \"Namespaced\"",
                quote(other)
            ),
            "spec.scope",
        )),
    }
}

fn validate_crd_versions(crd: &Value, causes: &mut Vec<Cause>) {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    if versions.is_empty() {
        causes.push(required("spec.versions", "must have at least one version"));
    }
    let mut seen = HashSet::new();
    let mut storage = 0;
    for (i, version) in versions.iter().enumerate() {
        let field = format!("spec.versions[{i}]");
        let name = text(version, "/name");
        if name.is_empty() {
            causes.push(required(&format!("{field}.name"), ""));
        } else if !seen.insert(name) {
            causes.push(Cause::new(
                "FieldValueDuplicate",
                format!("Duplicate value: {}", quote(name)),
                format!("{field}.name"),
            ));
        } else {
            let errs = dns1035_label_errors(name);
            if !errs.is_empty() {
                causes.push(invalid(&format!("{field}.name"), name, &errs.join(",")));
            }
        }
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        validate_version_schema(version, &field, causes);
    }
    if !versions.is_empty() && storage != 1 {
        let names: Vec<&str> = versions.iter().map(|v| text(v, "/name")).collect();
        let value = serde_json::to_string(&names).unwrap_or_default();
        causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {value}: must have exactly one version marked as storage version"),
            "spec.versions",
        ));
    }
}

/// apiextensions.k8s.io/v1 requires a schema for every version, and it must be structural.
fn validate_version_schema(version: &Value, field: &str, causes: &mut Vec<Cause>) {
    let schema_field = format!("{field}.schema.openAPIV3Schema");
    match version.pointer("/schema/openAPIV3Schema") {
        Some(s) if s.is_object() => structural_errors(s, &schema_field, Level::Root, 0, causes),
        _ => causes.push(required(&schema_field, "schemas are required")),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Field,
    Item,
}

/// The subset of the structural-schema rules that decides whether pruning and defaulting can work: a `type` on
/// every node reached through properties/items/additionalProperties (unless int-or-string or preserve-unknown),
/// `object` at the root, and no properties next to additionalProperties. Value validations (anyOf, ...) are not
/// inspected.
fn structural_errors(s: &Value, field: &str, level: Level, depth: usize, causes: &mut Vec<Cause>) {
    if depth > MAX_DEPTH {
        return;
    }
    let ty = s.get("type").and_then(Value::as_str).unwrap_or("");
    let flag = |k: &str| s.get(k).and_then(Value::as_bool).unwrap_or(false);
    if ty.is_empty() && !flag("x-kubernetes-int-or-string") && !flag("x-kubernetes-preserve-unknown-fields") {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        causes.push(required(&format!("{field}.type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        causes.push(invalid(&format!("{field}.type"), ty, "must be object at the root"));
    }
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties");
    if props.is_some() && additional.is_some() {
        causes.push(Cause::new(
            "FieldValueForbidden",
            "Forbidden: additionalProperties and properties are mutual exclusive",
            format!("{field}.additionalProperties"),
        ));
    }
    for (k, p) in props.into_iter().flatten() {
        structural_errors(p, &format!("{field}.properties[{k}]"), Level::Field, depth + 1, causes);
    }
    if let Some(items) = s.get("items").filter(|i| i.is_object()) {
        structural_errors(items, &format!("{field}.items"), Level::Item, depth + 1, causes);
    }
    if let Some(a) = additional.filter(|a| a.is_object()) {
        structural_errors(
            a,
            &format!("{field}.additionalProperties"),
            Level::Field,
            depth + 1,
            causes,
        );
    }
}

// ---------------------------------------------------------------------------------------------------------
// Unknown fields of built-in kinds
// ---------------------------------------------------------------------------------------------------------

type RoundTrip = fn(&Value) -> Result<Value, ()>;

/// Decode into the typed k8s-openapi struct (which ignores unknown keys) and encode again.
fn roundtrip<T: DeserializeOwned + Serialize>(v: &Value) -> Result<Value, ()> {
    let typed: T = serde_json::from_value(v.clone()).map_err(|_| ())?;
    serde_json::to_value(&typed).map_err(|_| ())
}

/// The typed round trip for a built-in `apiVersion`/`kind`, if devcluster serves it.
fn roundtripper(api_version: &str, kind: &str) -> Option<RoundTrip> {
    use k8s_openapi::api::{apps, autoscaling, batch, coordination, core, events, networking, policy, rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions;
    let f: RoundTrip = match (api_version, kind) {
        ("v1", "ConfigMap") => roundtrip::<core::v1::ConfigMap>,
        ("v1", "Secret") => roundtrip::<core::v1::Secret>,
        ("v1", "Namespace") => roundtrip::<core::v1::Namespace>,
        ("v1", "Service") => roundtrip::<core::v1::Service>,
        ("v1", "ServiceAccount") => roundtrip::<core::v1::ServiceAccount>,
        ("v1", "Pod") => roundtrip::<core::v1::Pod>,
        ("v1", "Event") => roundtrip::<core::v1::Event>,
        ("v1", "Endpoints") => roundtrip::<core::v1::Endpoints>,
        ("v1", "PersistentVolumeClaim") => roundtrip::<core::v1::PersistentVolumeClaim>,
        ("v1", "LimitRange") => roundtrip::<core::v1::LimitRange>,
        ("v1", "ResourceQuota") => roundtrip::<core::v1::ResourceQuota>,
        ("v1", "Node") => roundtrip::<core::v1::Node>,
        ("apps/v1", "Deployment") => roundtrip::<apps::v1::Deployment>,
        ("apps/v1", "StatefulSet") => roundtrip::<apps::v1::StatefulSet>,
        ("apps/v1", "DaemonSet") => roundtrip::<apps::v1::DaemonSet>,
        ("apps/v1", "ReplicaSet") => roundtrip::<apps::v1::ReplicaSet>,
        ("batch/v1", "Job") => roundtrip::<batch::v1::Job>,
        ("batch/v1", "CronJob") => roundtrip::<batch::v1::CronJob>,
        ("coordination.k8s.io/v1", "Lease") => roundtrip::<coordination::v1::Lease>,
        ("events.k8s.io/v1", "Event") => roundtrip::<events::v1::Event>,
        ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => {
            roundtrip::<apiextensions::v1::CustomResourceDefinition>
        }
        ("rbac.authorization.k8s.io/v1", "Role") => roundtrip::<rbac::v1::Role>,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => roundtrip::<rbac::v1::RoleBinding>,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => roundtrip::<rbac::v1::ClusterRole>,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => roundtrip::<rbac::v1::ClusterRoleBinding>,
        ("networking.k8s.io/v1", "Ingress") => roundtrip::<networking::v1::Ingress>,
        ("networking.k8s.io/v1", "NetworkPolicy") => roundtrip::<networking::v1::NetworkPolicy>,
        ("policy/v1", "PodDisruptionBudget") => roundtrip::<policy::v1::PodDisruptionBudget>,
        ("autoscaling/v2", "HorizontalPodAutoscaler") => roundtrip::<autoscaling::v2::HorizontalPodAutoscaler>,
        ("autoscaling/v1", "HorizontalPodAutoscaler") => roundtrip::<autoscaling::v1::HorizontalPodAutoscaler>,
        ("autoscaling/v1", "Scale") => roundtrip::<autoscaling::v1::Scale>,
        _ => return None,
    };
    Some(f)
}

#[derive(Clone, Debug)]
enum Seg {
    Key(String),
    Index(usize),
}

fn render_path(segs: &[Seg]) -> String {
    segs.iter()
        .map(|s| match s {
            Seg::Key(k) => format!(".{k}"),
            Seg::Index(i) => format!("[{i}]"),
        })
        .collect()
}

/// A key of the input that the round trip lost.
struct Missing {
    path: Vec<Seg>,
    was_null: bool,
}

/// Collect, in document order, the keys present in `input` but absent from `output` at the same place.
fn missing_keys(input: &Value, output: &Value, path: &mut Vec<Seg>, out: &mut Vec<Missing>) {
    if path.len() > MAX_DEPTH {
        return;
    }
    match (input, output) {
        (Value::Object(i), Value::Object(o)) => {
            for (k, iv) in i {
                path.push(Seg::Key(k.clone()));
                match o.get(k) {
                    Some(ov) => missing_keys(iv, ov, path, out),
                    None => out.push(Missing {
                        path: path.clone(),
                        was_null: iv.is_null(),
                    }),
                }
                path.pop();
            }
        }
        (Value::Array(i), Value::Array(o)) => {
            for (n, (iv, ov)) in i.iter().zip(o).enumerate() {
                path.push(Seg::Index(n));
                missing_keys(iv, ov, path, out);
                path.pop();
            }
        }
        _ => {}
    }
}

fn get_at<'a>(v: &'a Value, path: &[Seg]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, seg| match seg {
        Seg::Key(k) => cur.get(k.as_str()),
        Seg::Index(i) => cur.get(*i),
    })
}

fn get_at_mut<'a>(v: &'a mut Value, path: &[Seg]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |cur, seg| match seg {
        Seg::Key(k) => cur.get_mut(k.as_str()),
        Seg::Index(i) => cur.get_mut(*i),
    })
}

/// A `null` value decodes to "unset" whether or not the field exists, so it vanishes either way. Replace it by
/// a string and decode again: a known field either keeps the string or rejects it (wrong type), an unknown one
/// is silently ignored.
fn null_field_is_unknown(obj: &Value, path: &[Seg], rt: RoundTrip) -> bool {
    let mut probe = obj.clone();
    let Some(slot) = get_at_mut(&mut probe, path) else {
        return false;
    };
    *slot = Value::String("x".into());
    match rt(&probe) {
        Ok(out) => get_at(&out, path).is_none(),
        Err(()) => false,
    }
}

/// Paths (`.spec.foo`) of fields a built-in kind does not declare.
///
/// The object is decoded into the k8s-openapi type for its apiVersion/kind and encoded again; keys that do not
/// survive are unknown. Objects that do not decode at all (wrong value types) give no paths: the caller reports
/// the decode error instead. Unknown kinds give no paths.
pub fn unknown_builtin_fields(obj: &Value) -> Vec<String> {
    prune_unknown_builtin_fields(&mut obj.clone())
}

/// Remove the fields a built-in kind does not declare and return their paths (`.spec.foo`).
///
/// The real API server decodes built-in kinds into their Go structs, so unknown fields never reach storage in
/// any `fieldValidation` mode; `Ignore` and `Warn` only change whether the client hears about them. Only the
/// unknown keys are removed (rather than storing the typed round trip) so that values the typed decoding would
/// normalise, such as quantities, stay exactly as the client sent them.
pub fn prune_unknown_builtin_fields(obj: &mut Value) -> Vec<String> {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let Some(rt) = roundtripper(api_version, kind) else {
        return Vec::new();
    };
    let Ok(output) = rt(obj) else { return Vec::new() };
    let mut missing = Vec::new();
    missing_keys(obj, &output, &mut Vec::new(), &mut missing);
    let mut probes = 0;
    let mut unknown = Vec::new();
    let mut removals = Vec::new();
    for m in missing {
        let is_unknown = if m.was_null {
            probes += 1;
            probes <= MAX_NULL_PROBES && null_field_is_unknown(obj, &m.path, rt)
        } else {
            true
        };
        if is_unknown {
            unknown.push(render_path(&m.path));
            removals.push(m.path);
        }
    }
    // Only object keys are removed, so list positions of the remaining paths stay valid.
    for path in removals {
        remove_at(obj, &path);
    }
    unknown
}

/// Remove the object key a path ends in; other paths are ignored.
fn remove_at(obj: &mut Value, path: &[Seg]) {
    let Some((Seg::Key(last), parent)) = path.split_last() else {
        return;
    };
    if let Some(Value::Object(m)) = get_at_mut(obj, parent) {
        m.remove(last.as_str());
    }
}

// ---------------------------------------------------------------------------------------------------------
// Duplicate JSON keys
// ---------------------------------------------------------------------------------------------------------

/// Walks a JSON document without building it, recording `path.key` for every key seen twice in one object.
struct DupFinder<'a> {
    path: String,
    out: &'a mut Vec<String>,
}

impl<'de> DeserializeSeed<'de> for DupFinder<'_> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for DupFinder<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let out = self.out;
        let mut i = 0;
        while seq
            .next_element_seed(DupFinder {
                path: format!("{}[{i}]", self.path),
                out: &mut *out,
            })?
            .is_some()
        {
            i += 1;
        }
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let out = self.out;
        let mut seen = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            let path = format!("{}.{key}", self.path);
            if !seen.insert(key) {
                out.push(path.clone());
            }
            map.next_value_seed(DupFinder { path, out: &mut *out })?;
        }
        Ok(())
    }
}

/// Paths of keys that occur twice in the same JSON object of a raw request body (`.spec.replicas`).
pub fn duplicate_json_keys(raw: &[u8]) -> Vec<String> {
    let mut out = Vec::new();
    let mut de = serde_json::Deserializer::from_slice(raw);
    let parsed = DupFinder {
        path: String::new(),
        out: &mut out,
    }
    .deserialize(&mut de)
    .and_then(|()| de.end());
    match parsed {
        Ok(()) => out,
        Err(_) => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(causes: &[Cause]) -> Vec<(&str, &str)> {
        causes.iter().map(|c| (c.reason.as_str(), c.field.as_str())).collect()
    }

    #[test]
    fn subdomain_names() {
        assert!(validate_name("ConfigMap", "my-config.v1").is_empty());
        assert!(validate_name("Deployment", "a").is_empty());
        assert!(validate_name("App", "0abc").is_empty());
        let c = validate_name("ConfigMap", "Bad_Name");
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].reason, "FieldValueInvalid");
        assert_eq!(c[0].field, "metadata.name");
        assert_eq!(
            c[0].message,
            "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
        for bad in ["-a", "a-", "a..b", ".a", "a.", "a_b", "A"] {
            assert_eq!(validate_name("Secret", bad).len(), 1, "{bad}");
        }
        let long = "a".repeat(254);
        let c = validate_name("Secret", &long);
        assert_eq!(c.len(), 1);
        assert!(c[0].message.ends_with(": must be no more than 253 characters"));
    }

    #[test]
    fn label_names_for_namespaces_and_services() {
        assert!(validate_name("Namespace", "team-a").is_empty());
        assert!(validate_name("Namespace", "1team").is_empty());
        let c = validate_name("Namespace", "a.b");
        assert_eq!(c.len(), 1);
        assert!(c[0].message.contains("a lowercase RFC 1123 label must consist"));
        assert!(c[0].message.contains("(e.g. 'my-name',  or '123-abc'"));
        assert_eq!(validate_name("Namespace", &"a".repeat(64)).len(), 1);
        assert!(validate_name("Service", "web").is_empty());
        let c = validate_name("Service", "1web");
        assert_eq!(c.len(), 1);
        assert!(c[0].message.contains("a DNS-1035 label must consist"));
        assert_eq!(validate_name("Service", "x.y").len(), 1);
    }

    #[test]
    fn special_name_rules() {
        assert!(validate_name("ClusterRole", "system:controller:capstan").is_empty());
        assert_eq!(
            validate_name("Role", "a/b")[0].message,
            "Invalid value: \"a/b\": may not contain '/'"
        );
        assert_eq!(validate_name("RoleBinding", "..").len(), 1);
        assert_eq!(validate_name("CronJob", &"c".repeat(53)).len(), 1);
        assert!(validate_name("Job", &"c".repeat(53)).is_empty());
        assert_eq!(
            fields(&validate_name("Pod", "")),
            vec![("FieldValueRequired", "metadata.name")]
        );
    }

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "apps.demo.example.com"},
            "spec": {
                "group": "demo.example.com",
                "names": {"plural": "apps", "singular": "app", "kind": "App", "listKind": "AppList"},
                "scope": "Namespaced",
                "versions": [
                    {"name": "v1", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "properties": {
                            "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                            "tags": {"type": "array", "items": {"type": "string"}}
                        }}
                     }}}},
                    {"name": "v1beta1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
                ]
            }
        })
    }

    #[test]
    fn valid_crd_has_no_causes() {
        assert_eq!(validate_crd(&crd()), vec![]);
    }

    #[test]
    fn crd_name_scope_and_storage() {
        let mut c = crd();
        c["metadata"]["name"] = json!("apps.wrong.com");
        c["spec"]["scope"] = json!("Global");
        c["spec"]["versions"][1]["storage"] = json!(true);
        let causes = validate_crd(&c);
        assert_eq!(
            fields(&causes),
            vec![
                ("FieldValueInvalid", "metadata.name"),
                ("FieldValueNotSupported", "spec.scope"),
                ("FieldValueInvalid", "spec.versions"),
            ]
        );
        assert_eq!(
            causes[0].message,
            "Invalid value: \"apps.wrong.com\": must be spec.names.plural+\".\"+spec.group"
        );
        assert_eq!(
            causes[1].message,
            "Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""
        );
        assert_eq!(
            causes[2].message,
            "Invalid value: [\"v1\",\"v1beta1\"]: must have exactly one version marked as storage version"
        );
    }

    #[test]
    fn crd_missing_pieces() {
        let c = json!({"metadata": {"name": "x"}, "spec": {"group": "nodot", "names": {}, "versions": []}});
        let causes = validate_crd(&c);
        assert_eq!(
            fields(&causes),
            vec![
                ("FieldValueInvalid", "metadata.name"),
                ("FieldValueInvalid", "spec.group"),
                ("FieldValueRequired", "spec.names.plural"),
                ("FieldValueRequired", "spec.names.kind"),
                ("FieldValueRequired", "spec.scope"),
                ("FieldValueRequired", "spec.versions"),
            ]
        );
        assert_eq!(causes[5].message, "Required value: must have at least one version");
    }

    #[test]
    fn crd_schema_must_be_present_and_structural() {
        let mut c = crd();
        c["spec"]["versions"][1].as_object_mut().map(|v| v.remove("schema"));
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["loose"] = json!({});
        c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["tags"]["items"] =
            json!({"description": "no type"});
        let causes = validate_crd(&c);
        assert_eq!(
            causes,
            vec![
                Cause::new(
                    "FieldValueRequired",
                    "Required value: must not be empty for specified object fields",
                    "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[loose].type"
                ),
                Cause::new(
                    "FieldValueRequired",
                    "Required value: must not be empty for specified array items",
                    "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[tags].items.type"
                ),
                Cause::new(
                    "FieldValueRequired",
                    "Required value: schemas are required",
                    "spec.versions[1].schema.openAPIV3Schema"
                ),
            ]
        );
        let mut c = crd();
        c["spec"]["versions"][1]["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        let causes = validate_crd(&c);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"string\": must be object at the root"
        );
        assert_eq!(causes[0].field, "spec.versions[1].schema.openAPIV3Schema.type");
    }

    #[test]
    fn crd_duplicate_and_bad_version_names() {
        let mut c = crd();
        c["spec"]["versions"][1]["name"] = json!("v1");
        c["spec"]["versions"][0]["storage"] = json!(true);
        assert_eq!(
            validate_crd(&c),
            vec![Cause::new(
                "FieldValueDuplicate",
                "Duplicate value: \"v1\"",
                "spec.versions[1].name"
            )]
        );
        c["spec"]["versions"][1]["name"] = json!("V2");
        assert_eq!(
            fields(&validate_crd(&c)),
            vec![("FieldValueInvalid", "spec.versions[1].name")]
        );
    }

    #[test]
    fn unknown_fields_in_deployment() {
        let d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "creationTimestamp": null, "labels": {"a": "b"}, "bogus": null},
            "spec": {
                "replicas": 2, "foo": {"bar": 1},
                "selector": {"matchLabels": {"a": "b"}},
                "template": {
                    "metadata": {"labels": {"a": "b"}},
                    "spec": {"containers": [
                        {"name": "c", "imagee": "nginx", "ports": [{"containerPort": 80, "protocol": "TCP"}], "resources": {}},
                        {"name": "d", "imagee": "typo", "env": [{"name": "X", "value": "1", "valu": "2"}]}
                    ]}
                }
            },
            "status": {"replicas": 1, "phase": "nope"}
        });
        assert_eq!(
            unknown_builtin_fields(&d),
            vec![
                ".metadata.bogus",
                ".spec.foo",
                ".spec.template.spec.containers[0].imagee",
                ".spec.template.spec.containers[1].env[0].valu",
                ".spec.template.spec.containers[1].imagee",
                ".status.phase",
            ]
        );
    }

    #[test]
    fn unknown_fields_in_configmap_and_others() {
        let cm =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "dat": {"a": "b"}, "data": {}});
        assert_eq!(unknown_builtin_fields(&cm), vec![".dat"]);
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "imagee": "x"}]}, "status": {}});
        assert_eq!(unknown_builtin_fields(&pod), vec![".spec.containers[0].imagee"]);
        let ok = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
            "data": {"k": "dmFsdWU="}, "stringData": {"x": "y"}, "immutable": null});
        assert!(unknown_builtin_fields(&ok).is_empty());
        let crd_obj = crd();
        assert!(
            unknown_builtin_fields(&crd_obj).is_empty(),
            "{:?}",
            unknown_builtin_fields(&crd_obj)
        );
        let mut bad_crd = crd();
        bad_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["typo"] = json!(1);
        assert_eq!(
            unknown_builtin_fields(&bad_crd),
            vec![".spec.versions[0].schema.openAPIV3Schema.typo"]
        );
        let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
            "spec": {"holderIdentity": "me", "renewTime": "2026-11-22T01:27:18.721491Z", "leaseDurationSecond": 15}});
        assert_eq!(unknown_builtin_fields(&lease), vec![".spec.leaseDurationSecond"]);
        let ev = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e"},
            "eventTime": "2026-11-22T01:27:18.721491Z", "reportingController": "x", "reportingInstance": "y",
            "series": {"count": 2, "lastObservedTime": "2026-11-22T01:27:18.721491Z"}, "note": "n", "extra": 1});
        assert_eq!(unknown_builtin_fields(&ev), vec![".extra"]);
    }

    #[test]
    fn unknown_fields_edge_cases() {
        let unknown_kind = json!({"apiVersion": "demo.example.com/v1", "kind": "App", "spec": {"x": 1}});
        assert!(unknown_builtin_fields(&unknown_kind).is_empty());
        // Undecodable (wrong value type): the caller reports the decode error.
        let bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "spec": {"replicas": "two", "foo": 1}});
        assert!(unknown_builtin_fields(&bad).is_empty());
        // Known fields with null values are not unknown.
        let nulls = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "annotations": null},
            "spec": {"replicas": null, "strategy": null, "template": {"spec": {"containers": [{"name": "c", "command": null}]}}},
            "status": null});
        assert!(unknown_builtin_fields(&nulls).is_empty());
    }

    #[test]
    fn pruning_removes_only_unknown_keys() {
        let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "bogus": 1},
            "spec": {"foo": "bar", "replicas": 2, "template": {"spec": {"containers": [
                {"name": "c", "image": "nginx", "imagee": "typo", "resources": {"limits": {"cpu": "0.5"}}}]}}}});
        let removed = prune_unknown_builtin_fields(&mut d);
        assert_eq!(
            removed,
            vec![
                ".metadata.bogus",
                ".spec.foo",
                ".spec.template.spec.containers[0].imagee"
            ]
        );
        assert_eq!(
            d,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
                "spec": {"replicas": 2, "template": {"spec": {"containers": [
                    {"name": "c", "image": "nginx", "resources": {"limits": {"cpu": "0.5"}}}]}}}}),
            "quantities keep their spelling"
        );
        let mut unknown_kind = json!({"apiVersion": "demo.example.com/v1", "kind": "App", "spec": {"x": 1}});
        assert!(prune_unknown_builtin_fields(&mut unknown_kind).is_empty());
        assert_eq!(unknown_kind["spec"]["x"], 1);
    }

    #[test]
    fn duplicate_keys() {
        let raw = br#"{"spec":{"replicas":1,"replicas":2,"template":{"spec":{"containers":[{"name":"a","name":"b"}]}}},"kind":"X","kind":"Y"}"#;
        assert_eq!(
            duplicate_json_keys(raw),
            vec![".spec.replicas", ".spec.template.spec.containers[0].name", ".kind"]
        );
        assert!(duplicate_json_keys(br#"{"a":{"x":1},"b":{"x":1}}"#).is_empty());
        assert!(duplicate_json_keys(br#"{"a":1,"a":"#).is_empty());
        assert!(duplicate_json_keys(br#"{"a":1,"a":2} trailing"#).is_empty());
        assert!(duplicate_json_keys(b"[1,2,3]").is_empty());
        assert_eq!(duplicate_json_keys(br#"[{"k\u0031":1,"k1":2}]"#), vec!["[0].k1"]);
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(duplicate_json_keys(deep.as_bytes()).is_empty());
    }
}
