//! Structural-schema semantics for custom resources: pruning of unknown fields (except under
//! `x-kubernetes-preserve-unknown-fields`), defaulting from `default:`, type validation, and the list/map
//! markers SSA needs (this type implements [`FieldSchema`]).
//!
//! The behaviour follows the apiextensions-apiserver (`pkg/apiserver/schema/{pruning,defaulting}`) and the
//! kube-openapi validator it uses, so that operators see the same objects and the same 422 causes as against a
//! real cluster. Deliberate gaps:
//! - `x-kubernetes-validations` (CEL) rules are not evaluated (kube-apiserver does; no test here depends on them);
//! - string `format`s (`date-time`, `uuid`, ...) are not checked, except `int-or-string`;
//! - `uniqueItems` and `additionalProperties: false` produce no causes (structural schemas forbid both, and
//!   pruning already removed undeclared fields).
//!
//! Schemas and objects both come from clients, so every walk is bounded by [`MAX_DEPTH`] and nothing panics.

use std::collections::{BTreeSet, HashMap};

use regex::Regex;
use serde_json::{Map, Value};

use crate::error::Cause;
use crate::schema::{FieldSchema, ListType, SmpList};

/// Deepest nesting any walk follows. JSON bodies are already limited to ~128 levels by serde_json; 100 levels
/// of schema is far beyond any real CRD, and the bound keeps hostile input from exhausting the stack.
const MAX_DEPTH: usize = 100;

/// Upper bound on the compiled size of one `pattern`, so a hostile CRD cannot make us build a huge automaton.
const MAX_REGEX_SIZE: usize = 1 << 20;

/// The fields of `ObjectMeta` a client may send; anything else under a resource's `metadata` is dropped, as the
/// apiserver's typed ObjectMeta decoding does.
const OBJECT_META_FIELDS: &[&str] = &[
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
];

/// The `openAPIV3Schema` of one CRD version.
#[derive(Debug, Clone)]
pub struct CrdSchema {
    root: Value,
    /// Every `pattern` of the schema, compiled once; a pattern that does not compile is skipped at validation.
    patterns: HashMap<String, Regex>,
    /// Whether any node declares a `default:` (reads then need defaulting; most schemas have none).
    has_defaults: bool,
}

impl CrdSchema {
    pub fn new(open_api_v3_schema: &Value) -> Self {
        let mut patterns = HashMap::new();
        collect_patterns(open_api_v3_schema, 0, &mut patterns);
        CrdSchema {
            root: open_api_v3_schema.clone(),
            patterns,
            has_defaults: declares_default(open_api_v3_schema, 0),
        }
    }

    /// Whether [`CrdSchema::default`] can change anything. Objects are defaulted on every read (as the real
    /// server does when decoding from etcd), so schemas without defaults skip that copy.
    /// The `openAPIV3Schema` as the CRD declares it.
    pub fn root(&self) -> &Value {
        &self.root
    }

    pub fn has_defaults(&self) -> bool {
        self.has_defaults
    }

    /// Remove fields the schema does not declare (apiVersion, kind and metadata are always kept) and return
    /// their paths (`.spec.foo`) for fieldValidation warnings/errors.
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut removed = Vec::new();
        // The resource root is treated like an embedded resource, exactly as the apiserver does.
        prune_object_root(obj, &self.root, "", 0, &mut removed);
        removed
    }

    /// Apply `default:` values for absent fields. As in the apiserver, `null` values of non-nullable fields are
    /// first dropped (those without a default) and then defaulted (those with one).
    pub fn default(&self, obj: &mut Value) {
        prune_non_nullable_nulls(obj, &self.root, 0);
        apply_defaults(obj, &self.root, 0);
    }

    /// Type validation (`type`, `enum`, `required`, `minimum`/`maximum`, `pattern`, `maxLength`/`minLength`,
    /// `maxItems`, `format: int-or-string`, `x-kubernetes-int-or-string`) → 422 causes with field paths.
    pub fn validate(&self, obj: &Value) -> Vec<Cause> {
        let mut v = Validator {
            patterns: &self.patterns,
            causes: Vec::new(),
        };
        v.node(obj, &self.root, "", 0);
        v.causes
    }

    /// The schema node at `path` (field names, list positions omitted), or `None` if the path leaves the
    /// declared schema (undeclared or preserved-unknown subtrees).
    fn node_at(&self, path: &[&str]) -> Option<&Value> {
        if path.len() > MAX_DEPTH {
            return None;
        }
        let mut node = &self.root;
        for seg in path {
            node = through_items(node);
            node = child_schema(node, seg)?;
        }
        Some(node)
    }
}

impl FieldSchema for CrdSchema {
    fn list_type(&self, path: &[&str]) -> ListType {
        if path.first() == Some(&"metadata") {
            return crate::schema::Opaque.list_type(path);
        }
        self.node_at(path).map(list_type_of).unwrap_or(ListType::Atomic)
    }

    /// Strategic merge patch is never allowed for custom resources (415), so there is no strategy to report.
    fn smp_list(&self, path: &[&str]) -> SmpList {
        crate::schema::Opaque.smp_list(path)
    }

    fn map_is_atomic(&self, path: &[&str]) -> bool {
        if path.first() == Some(&"metadata") {
            return false;
        }
        // A path names a list's items by the list's own path, so look through `items`.
        self.node_at(path)
            .map(through_items)
            .is_some_and(|n| str_of(n, "x-kubernetes-map-type") == Some("atomic"))
    }
}

// ---------------------------------------------------------------------------------------------------------
// Schema accessors
// ---------------------------------------------------------------------------------------------------------

fn str_of<'a>(s: &'a Value, key: &str) -> Option<&'a str> {
    s.get(key).and_then(Value::as_str)
}

fn flag(s: &Value, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn property<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    properties(s).and_then(|p| p.get(name))
}

/// `additionalProperties` as a schema (`true` and `false` carry no schema).
fn additional_schema(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

fn items_schema(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

fn preserves_unknown(s: &Value) -> bool {
    flag(s, "x-kubernetes-preserve-unknown-fields") || s.get("additionalProperties") == Some(&Value::Bool(true))
}

fn is_int_or_string(s: &Value) -> bool {
    flag(s, "x-kubernetes-int-or-string") || str_of(s, "format") == Some("int-or-string")
}

/// The schema of the field or map value `name` inside object schema `s`.
fn child_schema<'a>(s: &'a Value, name: &str) -> Option<&'a Value> {
    property(s, name).or_else(|| additional_schema(s))
}

/// Step from a list schema to its item schema (repeatedly for lists of lists), since paths omit positions.
fn through_items(mut s: &Value) -> &Value {
    for _ in 0..MAX_DEPTH {
        match items_schema(s) {
            Some(items) => s = items,
            None => break,
        }
    }
    s
}

fn list_type_of(s: &Value) -> ListType {
    match str_of(s, "x-kubernetes-list-type") {
        Some("set") => ListType::Set,
        Some("map") => {
            let keys: Vec<String> = s
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|ks| ks.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default();
            if keys.is_empty() {
                ListType::Atomic
            } else {
                ListType::Map { keys }
            }
        }
        _ => ListType::Atomic,
    }
}

/// Compile every `pattern` found anywhere in the schema (bounded); invalid or oversized ones are left out.
fn collect_patterns(s: &Value, depth: usize, out: &mut HashMap<String, Regex>) {
    if depth > MAX_DEPTH {
        return;
    }
    match s {
        Value::Object(map) => {
            if let Some(Value::String(p)) = map.get("pattern") {
                if !out.contains_key(p) {
                    if let Ok(re) = regex::RegexBuilder::new(p).size_limit(MAX_REGEX_SIZE).build() {
                        out.insert(p.clone(), re);
                    }
                }
            }
            for v in map.values() {
                collect_patterns(v, depth + 1, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_patterns(v, depth + 1, out)),
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------------------

/// `.spec.foo`-style path used for pruned-field reports (fieldValidation).
fn dot_child(path: &str, key: &str) -> String {
    format!("{path}.{key}")
}

/// `spec.foo`-style path used in validation causes (no leading dot, like field.Path).
fn field_child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn index_child(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

// ---------------------------------------------------------------------------------------------------------
// Pruning
// ---------------------------------------------------------------------------------------------------------

/// Prune a resource root or an `x-kubernetes-embedded-resource` object: `apiVersion`/`kind` strings and the
/// `metadata` object are kept (metadata reduced to ObjectMeta fields), everything else follows the schema.
fn prune_object_root(v: &mut Value, s: &Value, path: &str, depth: usize, removed: &mut Vec<String>) {
    let Value::Object(map) = v else { return };
    let keys: Vec<String> = map.keys().cloned().collect();
    for k in keys {
        let child_path = dot_child(path, &k);
        let Some(child) = map.get_mut(&k) else { continue };
        match (k.as_str(), &*child) {
            ("apiVersion" | "kind", Value::String(_)) => {}
            ("metadata", Value::Object(_)) => prune_object_meta(child, &child_path, removed),
            _ => {
                if !prune_field(map, &k, s, &child_path, depth, removed) {
                    removed.push(child_path);
                }
            }
        }
    }
}

/// Drop keys of a `metadata` object that ObjectMeta does not declare.
fn prune_object_meta(v: &mut Value, path: &str, removed: &mut Vec<String>) {
    let Value::Object(map) = v else { return };
    map.retain(|k, _| {
        let known = OBJECT_META_FIELDS.contains(&k.as_str());
        if !known {
            removed.push(dot_child(path, k));
        }
        known
    });
}

/// Prune field `k` of object `map` (schema `s`) in place. Returns false if the field was removed.
fn prune_field(
    map: &mut Map<String, Value>,
    k: &str,
    s: &Value,
    path: &str,
    depth: usize,
    removed: &mut Vec<String>,
) -> bool {
    match child_schema(s, k) {
        Some(cs) => {
            if let Some(child) = map.get_mut(k) {
                prune_value(child, cs, path, depth + 1, removed);
            }
            true
        }
        None if preserves_unknown(s) => true,
        None => {
            map.remove(k);
            false
        }
    }
}

/// Prune `v` against schema `s`; `path` is the `.a.b` path of `v`.
fn prune_value(v: &mut Value, s: &Value, path: &str, depth: usize, removed: &mut Vec<String>) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Object(_) if flag(s, "x-kubernetes-embedded-resource") => prune_object_root(v, s, path, depth, removed),
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let child_path = dot_child(path, &k);
                if !prune_field(map, &k, s, &child_path, depth, removed) {
                    removed.push(child_path);
                }
            }
        }
        Value::Array(items) => {
            // Without an item schema (only legal under preserve-unknown-fields) items are kept as they are.
            if let Some(is) = items_schema(s) {
                for (i, item) in items.iter_mut().enumerate() {
                    prune_value(item, is, &index_child(path, i), depth + 1, removed);
                }
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------------------
// Defaulting
// ---------------------------------------------------------------------------------------------------------

/// Whether a schema node or any schema below it has a `default:`. Only schema positions are followed, so a
/// property that happens to be *named* `default` does not count.
fn declares_default(s: &Value, depth: usize) -> bool {
    let Some(m) = s.as_object() else { return false };
    if depth > MAX_DEPTH {
        return false;
    }
    if m.contains_key("default") {
        return true;
    }
    let any = |v: &Value| match v {
        Value::Array(a) => a.iter().any(|x| declares_default(x, depth + 1)),
        other => declares_default(other, depth + 1),
    };
    m.iter().any(|(k, v)| match k.as_str() {
        "properties" | "patternProperties" => v
            .as_object()
            .is_some_and(|props| props.values().any(|p| declares_default(p, depth + 1))),
        "items" | "additionalProperties" | "allOf" | "anyOf" | "oneOf" | "not" => any(v),
        _ => false,
    })
}

fn has_default(s: &Value) -> bool {
    s.get("default").is_some()
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

/// `PruneNonNullableNullsWithoutDefaults`: a `null` for a declared, non-nullable property without a default
/// means "unset", so it is removed rather than failing type validation.
fn prune_non_nullable_nulls(v: &mut Value, s: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Object(map) => {
            map.retain(|k, child| {
                !(child.is_null() && property(s, k).is_some_and(|p| !has_default(p) && !nullable(p)))
            });
            for (k, child) in map.iter_mut() {
                if let Some(cs) = child_schema(s, k) {
                    prune_non_nullable_nulls(child, cs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            if let Some(is) = items_schema(s) {
                items
                    .iter_mut()
                    .for_each(|item| prune_non_nullable_nulls(item, is, depth + 1));
            }
        }
        _ => {}
    }
}

/// Set `default:` of absent (or non-nullable null) properties, then recurse, including into the values just
/// defaulted, into array items and into additionalProperties values.
fn apply_defaults(v: &mut Value, s: &Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match v {
        Value::Object(map) => {
            if let Some(props) = properties(s) {
                for (k, ps) in props {
                    let Some(d) = ps.get("default") else { continue };
                    let absent = map.get(k).is_none_or(|cur| cur.is_null() && !nullable(ps));
                    if absent {
                        map.insert(k.clone(), d.clone());
                    }
                }
            }
            for (k, child) in map.iter_mut() {
                if let Some(cs) = child_schema(s, k) {
                    apply_defaults(child, cs, depth + 1);
                }
            }
        }
        Value::Array(items) => {
            let Some(is) = items_schema(s) else { return };
            for item in items.iter_mut() {
                if item.is_null() && !nullable(is) {
                    if let Some(d) = is.get("default") {
                        *item = d.clone();
                    }
                }
                apply_defaults(item, is, depth + 1);
            }
        }
        _ => {}
    }
}

// ---------------------------------------------------------------------------------------------------------
// Validation
// ---------------------------------------------------------------------------------------------------------

/// The JSON type name kube-openapi reports for a value.
fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether value `v` satisfies the single schema type `t`.
fn matches_type(v: &Value, t: &str) -> bool {
    match (t, v) {
        ("integer", Value::Number(n)) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        ("number", Value::Number(_)) => true,
        ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) => true,
        ("object", Value::Object(_)) => true,
        ("array", Value::Array(_)) => true,
        ("null", Value::Null) => true,
        _ => false,
    }
}

/// The allowed types of a node: int-or-string nodes accept both, like the apiserver's converted schema.
fn allowed_types(s: &Value) -> Vec<String> {
    if is_int_or_string(s) {
        return vec!["integer".into(), "string".into()];
    }
    match s.get("type") {
        Some(Value::String(t)) if !t.is_empty() => vec![t.clone()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).map(str::to_string).collect(),
        _ => Vec::new(),
    }
}

/// A value as Go's field.Error prints it: strings quoted, scalars bare, composites as JSON.
fn render_value(v: &Value) -> String {
    match v {
        Value::Null => "\"null\"".to_string(),
        Value::Number(_) => go_number(v),
        other => other.to_string(),
    }
}

/// A number as Go's `%v` prints a float64 holding it: integral values without a fraction (`1`, not `1.0`).
fn go_number(v: &Value) -> String {
    match v.as_f64() {
        Some(f) if v.is_f64() && f.fract() == 0.0 && f.abs() < 1e15 => format!("{}", f as i64),
        _ => v.to_string(),
    }
}

fn quote(s: &str) -> String {
    Value::String(s.to_string()).to_string()
}

/// The relation `x` violates against a `minimum` (`lower`) or `maximum` bound, in kube-openapi's words.
fn bound_violation(x: f64, bound: &Value, exclusive: bool, lower: bool) -> Option<&'static str> {
    let b = bound.as_f64()?;
    match (lower, exclusive) {
        (true, true) if x <= b => Some("greater than"),
        (true, false) if x < b => Some("greater than or equal to"),
        (false, true) if x >= b => Some("less than"),
        (false, false) if x > b => Some("less than or equal to"),
        _ => None,
    }
}

fn count(s: &Value, key: &str) -> Option<u64> {
    s.get(key).and_then(Value::as_u64)
}

struct Validator<'a> {
    patterns: &'a HashMap<String, Regex>,
    causes: Vec<Cause>,
}

impl Validator<'_> {
    fn invalid(&mut self, path: &str, value: &Value, detail: String) {
        self.causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: {}: {}", render_value(value), detail),
            path,
        ));
    }

    /// Validate `v` at `path` against schema node `s`.
    fn node(&mut self, v: &Value, s: &Value, path: &str, depth: usize) {
        if depth > MAX_DEPTH || !s.is_object() {
            return;
        }
        if v.is_null() && nullable(s) {
            return;
        }
        // Like kube-openapi, every validator runs even after a type error; each one only looks at values of the
        // kind it understands.
        self.check_type(v, s, path);
        self.check_enum(v, s, path);
        match v {
            Value::String(st) => self.check_string(st, v, s, path),
            Value::Number(_) => self.check_number(v, s, path),
            Value::Array(items) => self.check_array(items, s, path, depth),
            Value::Object(map) => self.check_object(map, s, path, depth),
            _ => {}
        }
        self.check_composition(v, s, path, depth);
    }

    fn check_type(&mut self, v: &Value, s: &Value, path: &str) {
        let types = allowed_types(s);
        if types.is_empty() || types.iter().any(|t| matches_type(v, t)) {
            return;
        }
        let actual = type_name(v);
        self.causes.push(Cause::new(
            "FieldValueTypeInvalid",
            format!(
                "Invalid value: \"{actual}\": {} in body must be of type {}: \"{actual}\"",
                path,
                types.join(",")
            ),
            path,
        ));
    }

    fn check_enum(&mut self, v: &Value, s: &Value, path: &str) {
        let Some(allowed) = s.get("enum").and_then(Value::as_array) else {
            return;
        };
        if allowed.is_empty() || allowed.iter().any(|a| json_equal(a, v)) {
            return;
        }
        let supported: Vec<String> = allowed
            .iter()
            .map(|a| match a {
                Value::String(st) => quote(st),
                other => quote(&other.to_string()),
            })
            .collect();
        self.causes.push(Cause::new(
            "FieldValueNotSupported",
            format!(
                "Unsupported value: {}: supported values: {}",
                render_value(v),
                supported.join(", ")
            ),
            path,
        ));
    }

    fn check_string(&mut self, st: &str, v: &Value, s: &Value, path: &str) {
        let len = st.chars().count() as u64;
        if let Some(max) = count(s, "maxLength") {
            if len > max {
                let unit = if max == 1 { "byte" } else { "bytes" };
                self.causes.push(Cause::new(
                    "FieldValueTooLong",
                    format!("Too long: may not be more than {max} {unit}"),
                    path,
                ));
            }
        }
        if let Some(min) = count(s, "minLength") {
            if len < min {
                self.invalid(path, v, format!("{path} in body should be at least {min} chars long"));
            }
        }
        if let Some(p) = str_of(s, "pattern") {
            if self.patterns.get(p).is_some_and(|re| !re.is_match(st)) {
                self.invalid(path, v, format!("{path} in body should match '{p}'"));
            }
        }
    }

    fn check_number(&mut self, v: &Value, s: &Value, path: &str) {
        let Some(x) = v.as_f64() else { return };
        for (key, exclusive_key, lower) in [
            ("minimum", "exclusiveMinimum", true),
            ("maximum", "exclusiveMaximum", false),
        ] {
            let Some(bound) = s.get(key).filter(|b| b.is_number()) else {
                continue;
            };
            if let Some(rel) = bound_violation(x, bound, flag(s, exclusive_key), lower) {
                self.invalid(path, v, format!("{path} in body should be {rel} {}", go_number(bound)));
            }
        }
        if let Some(mult) = s.get("multipleOf").filter(|m| m.as_f64().is_some_and(|f| f > 0.0)) {
            let q = x / mult.as_f64().unwrap_or(1.0);
            if (q - q.round()).abs() > 1e-9 {
                self.invalid(
                    path,
                    v,
                    format!("{path} in body should be a multiple of {}", go_number(mult)),
                );
            }
        }
    }

    fn too_many(&mut self, path: &str, actual: usize, max: u64) {
        let unit = if max == 1 { "item" } else { "items" };
        self.causes.push(Cause::new(
            "FieldValueTooMany",
            format!("Too many: {actual}: must have at most {max} {unit}"),
            path,
        ));
    }

    fn check_array(&mut self, items: &[Value], s: &Value, path: &str, depth: usize) {
        let n = items.len();
        if let Some(max) = count(s, "maxItems") {
            if n as u64 > max {
                self.too_many(path, n, max);
            }
        }
        if let Some(min) = count(s, "minItems") {
            if (n as u64) < min {
                self.invalid(
                    path,
                    &Value::from(n),
                    format!("{path} in body should have at least {min} items"),
                );
            }
        }
        if let Some(is) = items_schema(s) {
            for (i, item) in items.iter().enumerate() {
                self.node(item, is, &index_child(path, i), depth + 1);
            }
        }
    }

    fn check_object(&mut self, map: &Map<String, Value>, s: &Value, path: &str, depth: usize) {
        if let Some(req) = s.get("required").and_then(Value::as_array) {
            for name in req.iter().filter_map(Value::as_str) {
                if !map.contains_key(name) {
                    self.causes.push(Cause::new(
                        "FieldValueRequired",
                        "Required value",
                        field_child(path, name),
                    ));
                }
            }
        }
        let n = map.len();
        if let Some(max) = count(s, "maxProperties") {
            if n as u64 > max {
                self.too_many(path, n, max);
            }
        }
        if let Some(min) = count(s, "minProperties") {
            if (n as u64) < min {
                let detail = format!("{path} in body should have at least {min} properties");
                self.invalid(path, &Value::from(n), detail);
            }
        }
        for (k, child) in map {
            if let Some(cs) = child_schema(s, k) {
                self.node(child, cs, &field_child(path, k), depth + 1);
            }
        }
    }

    /// Validate `v` against a sub-schema in isolation, returning its causes.
    fn sub(&self, v: &Value, s: &Value, path: &str, depth: usize) -> Vec<Cause> {
        let mut inner = Validator {
            patterns: self.patterns,
            causes: Vec::new(),
        };
        inner.node(v, s, path, depth + 1);
        inner.causes
    }

    /// A composition failure is reported on the root field with the path quoted in the message, the way the
    /// apiserver renders kube-openapi's composite errors.
    fn composite(&mut self, path: &str, what: &str) {
        self.causes.push(Cause::new(
            "FieldValueInvalid",
            format!("Invalid value: \"\": {} {what}", quote(path)),
            "",
        ));
    }

    fn check_composition(&mut self, v: &Value, s: &Value, path: &str, depth: usize) {
        if let Some(alts) = s.get("anyOf").and_then(Value::as_array) {
            let results: Vec<Vec<Cause>> = alts.iter().map(|a| self.sub(v, a, path, depth)).collect();
            if !results.iter().any(Vec::is_empty) && !results.is_empty() {
                self.composite(path, "must validate at least one schema (anyOf)");
                self.causes.extend(best(results));
            }
        }
        if let Some(alts) = s.get("oneOf").and_then(Value::as_array) {
            let results: Vec<Vec<Cause>> = alts.iter().map(|a| self.sub(v, a, path, depth)).collect();
            let valid = results.iter().filter(|r| r.is_empty()).count();
            if valid != 1 && !results.is_empty() {
                self.composite(path, "must validate one and only one schema (oneOf)");
                if valid == 0 {
                    self.causes.extend(best(results));
                }
            }
        }
        if let Some(alts) = s.get("allOf").and_then(Value::as_array) {
            let failed: Vec<Cause> = alts.iter().flat_map(|a| self.sub(v, a, path, depth)).collect();
            if !failed.is_empty() {
                self.composite(path, "must validate all the schemas (allOf)");
                self.causes.extend(failed);
            }
        }
        if let Some(not) = s.get("not").filter(|n| n.is_object()) {
            if self.sub(v, not, path, depth).is_empty() {
                self.composite(path, "must not validate the schema (not)");
            }
        }
    }
}

/// The failures of the alternative that came closest (fewest causes), as kube-openapi reports them.
fn best(results: Vec<Vec<Cause>>) -> Vec<Cause> {
    results.into_iter().min_by_key(Vec::len).unwrap_or_default()
}

/// JSON equality where `1` and `1.0` are the same number (enum values come from YAML or JSON).
fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64()),
        (Value::Array(x), Value::Array(y)) => x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q)),
        (Value::Object(x), Value::Object(y)) => {
            let kx: BTreeSet<&String> = x.keys().collect();
            let ky: BTreeSet<&String> = y.keys().collect();
            kx == ky && x.iter().all(|(k, p)| y.get(k).is_some_and(|q| json_equal(p, q)))
        }
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn app_schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "kind": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "required": ["image"],
                    "properties": {
                        "image": {"type": "string", "minLength": 1, "maxLength": 20, "pattern": "^[a-z0-9./:-]+$"},
                        "replicas": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10, "default": 1},
                        "mode": {"type": "string", "enum": ["fast", "safe"], "default": "safe"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "values": {"type": "object", "nullable": true, "x-kubernetes-preserve-unknown-fields": true},
                        "ports": {
                            "type": "array",
                            "maxItems": 3,
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {
                                "type": "object",
                                "properties": {
                                    "name": {"type": "string"},
                                    "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                                    "protocol": {"type": "string", "default": "TCP"}
                                }
                            }
                        },
                        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                        "selector": {"type": "object", "x-kubernetes-map-type": "atomic", "additionalProperties": {"type": "string"}},
                        "note": {"type": "string", "nullable": true},
                        "tolerations": {"type": "array", "items": {"type": "object", "properties": {"key": {"type": "string"}}}},
                        "template": {
                            "type": "object",
                            "x-kubernetes-embedded-resource": true,
                            "x-kubernetes-preserve-unknown-fields": true
                        },
                        "config": {
                            "type": "object",
                            "properties": {
                                "retries": {"type": "integer", "default": 3},
                                "nested": {"type": "object", "properties": {"deep": {"type": "boolean", "default": true}}}
                            },
                            "default": {}
                        }
                    }
                },
                "status": {"type": "object", "nullable": true, "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    fn schema() -> CrdSchema {
        CrdSchema::new(&app_schema())
    }

    #[test]
    fn prune_removes_undeclared_fields_in_document_order() {
        let mut obj = json!({
            "apiVersion": "demo.example.com/v1", "kind": "App",
            "metadata": {"name": "a", "bogus": 1, "labels": {"x": "y"}},
            "spec": {"image": "nginx", "foo": 1, "ports": [{"name": "http", "port": 80, "extra": true}]},
            "status": {"ready": true, "phase": "x"},
            "top": 1
        });
        let removed = schema().prune(&mut obj);
        assert_eq!(
            removed,
            vec![
                ".metadata.bogus",
                ".spec.foo",
                ".spec.ports[0].extra",
                ".status.phase",
                ".top"
            ]
        );
        assert_eq!(obj["metadata"], json!({"name": "a", "labels": {"x": "y"}}));
        assert_eq!(obj["spec"]["ports"], json!([{"name": "http", "port": 80}]));
        assert_eq!(obj["apiVersion"], "demo.example.com/v1");
    }

    #[test]
    fn prune_keeps_preserved_subtrees_and_additional_properties() {
        let mut obj = json!({
            "spec": {
                "image": "x",
                "values": {"anything": {"deep": [1, {"a": 2}]}},
                "labels": {"free": "form", "keys": "kept"},
                "template": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "junk": 1}, "spec": {"x": 1}}
            }
        });
        let before = obj.clone();
        let removed = schema().prune(&mut obj);
        assert_eq!(removed, vec![".spec.template.metadata.junk"]);
        assert_eq!(obj["spec"]["values"], before["spec"]["values"]);
        assert_eq!(obj["spec"]["labels"], before["spec"]["labels"]);
        assert_eq!(obj["spec"]["template"]["spec"], json!({"x": 1}));
    }

    #[test]
    fn prune_declared_fields_under_preserve_unknown_are_still_pruned() {
        let s = CrdSchema::new(&json!({
            "type": "object",
            "properties": {"spec": {
                "type": "object", "x-kubernetes-preserve-unknown-fields": true,
                "properties": {"known": {"type": "object", "properties": {"a": {"type": "string"}}}}
            }}
        }));
        let mut obj = json!({"spec": {"known": {"a": "x", "b": "y"}, "free": {"z": 1}}});
        assert_eq!(s.prune(&mut obj), vec![".spec.known.b"]);
        assert_eq!(obj, json!({"spec": {"known": {"a": "x"}, "free": {"z": 1}}}));
    }

    #[test]
    fn prune_empty_object_schema_drops_everything_inside() {
        let s = CrdSchema::new(&json!({"type": "object", "properties": {"spec": {"type": "object"}}}));
        let mut obj = json!({"spec": {"a": 1, "b": 2}});
        assert_eq!(s.prune(&mut obj), vec![".spec.a", ".spec.b"]);
        assert_eq!(obj, json!({"spec": {}}));
    }

    #[test]
    fn knows_whether_it_declares_defaults() {
        assert!(schema().has_defaults());
        let none = CrdSchema::new(&json!({"type": "object", "properties": {
            "default": {"type": "string"}, "spec": {"type": "array", "items": {"type": "object"}}}}));
        assert!(!none.has_defaults(), "a property named default is not a default");
        let in_items = CrdSchema::new(&json!({"type": "object", "properties": {
            "spec": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "integer", "default": 1}}}}}}));
        assert!(in_items.has_defaults());
    }

    #[test]
    fn defaults_nested_arrays_and_defaulted_values() {
        let mut obj = json!({"spec": {"image": "x", "ports": [{"name": "a"}, {"name": "b", "protocol": "UDP"}]}});
        schema().default(&mut obj);
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["mode"], "safe");
        assert_eq!(obj["spec"]["ports"][0]["protocol"], "TCP");
        assert_eq!(obj["spec"]["ports"][1]["protocol"], "UDP");
        // `config` defaults to {} and then its own properties are defaulted; `nested` has no default.
        assert_eq!(obj["spec"]["config"], json!({"retries": 3}));
        assert!(obj.get("status").is_none(), "no default for status, parent must exist");
    }

    #[test]
    fn defaults_apply_inside_additional_properties_values() {
        let s = CrdSchema::new(&json!({
            "type": "object",
            "properties": {"spec": {"type": "object", "additionalProperties": {
                "type": "object", "properties": {"weight": {"type": "integer", "default": 5}}
            }}}
        }));
        let mut obj = json!({"spec": {"a": {}, "b": {"weight": 1}}});
        s.default(&mut obj);
        assert_eq!(obj, json!({"spec": {"a": {"weight": 5}, "b": {"weight": 1}}}));
    }

    #[test]
    fn null_handling_matches_the_apiserver() {
        let mut obj = json!({"spec": {"image": "x", "replicas": null, "note": null, "tolerations": null}});
        schema().default(&mut obj);
        // non-nullable with default → defaulted; nullable → kept; non-nullable without default → removed
        assert_eq!(obj["spec"]["replicas"], 1);
        assert_eq!(obj["spec"]["note"], Value::Null);
        assert!(obj["spec"].get("tolerations").is_none());
        assert!(schema().validate(&obj).is_empty());
    }

    #[test]
    fn validate_type_error_message() {
        let obj = json!({"spec": {"image": "x", "replicas": "string"}});
        let causes = schema().validate(&obj);
        assert_eq!(
            causes,
            vec![Cause::new(
                "FieldValueTypeInvalid",
                "Invalid value: \"string\": spec.replicas in body must be of type integer: \"string\"",
                "spec.replicas"
            )]
        );
    }

    #[test]
    fn validate_required_enum_bounds_pattern_lengths() {
        let obj = json!({"spec": {"replicas": 11, "mode": "slow", "labels": {"a": 1}}});
        let causes = schema().validate(&obj);
        let got: Vec<(&str, &str, &str)> = causes
            .iter()
            .map(|c| (c.reason.as_str(), c.field.as_str(), c.message.as_str()))
            .collect();
        assert!(
            got.contains(&("FieldValueRequired", "spec.image", "Required value")),
            "{got:?}"
        );
        assert!(got.contains(&(
            "FieldValueNotSupported",
            "spec.mode",
            "Unsupported value: \"slow\": supported values: \"fast\", \"safe\""
        )));
        assert!(got.contains(&(
            "FieldValueInvalid",
            "spec.replicas",
            "Invalid value: 11: spec.replicas in body should be less than or equal to 10"
        )));
        assert!(got.contains(&(
            "FieldValueTypeInvalid",
            "spec.labels.a",
            "Invalid value: \"integer\": spec.labels.a in body must be of type string: \"integer\""
        )));

        let long = json!({"spec": {"image": "UPPER_and_much_too_long_image"}});
        let causes = schema().validate(&long);
        assert_eq!(
            causes[0],
            Cause::new(
                "FieldValueTooLong",
                "Too long: may not be more than 20 bytes",
                "spec.image"
            )
        );
        assert_eq!(
            causes[1].message,
            "Invalid value: \"UPPER_and_much_too_long_image\": spec.image in body should match '^[a-z0-9./:-]+$'"
        );
        let empty = json!({"spec": {"image": ""}});
        assert_eq!(
            schema().validate(&empty)[0].message,
            "Invalid value: \"\": spec.image in body should be at least 1 chars long"
        );
    }

    #[test]
    fn validate_arrays_and_int_or_string() {
        let obj = json!({"spec": {"image": "x", "ports": [
            {"name": "a", "port": 80}, {"name": "b", "port": "http"}, {"name": "c", "port": true}, {"name": "d"}
        ]}});
        let causes = schema().validate(&obj);
        let fields: Vec<&str> = causes.iter().map(|c| c.field.as_str()).collect();
        assert!(causes.iter().any(|c| c.reason == "FieldValueTooMany"
            && c.field == "spec.ports"
            && c.message == "Too many: 4: must have at most 3 items"));
        assert!(causes.iter().any(|c| c.reason == "FieldValueTypeInvalid"
            && c.field == "spec.ports[2].port"
            && c.message.contains("must be of type integer,string: \"boolean\"")));
        assert!(causes.iter().any(|c| c.field.is_empty()
            && c.message == "Invalid value: \"\": \"spec.ports[2].port\" must validate at least one schema (anyOf)"));
        assert!(!fields.contains(&"spec.ports[0].port") && !fields.contains(&"spec.ports[1].port"));
    }

    #[test]
    fn validate_nullable_and_non_nullable_null() {
        let s = schema();
        assert!(s
            .validate(&json!({"spec": {"image": "x", "note": null}, "status": null}))
            .is_empty());
        let causes = s.validate(&json!({"spec": {"image": null}}));
        assert_eq!(
            causes[0].message,
            "Invalid value: \"null\": spec.image in body must be of type string: \"null\""
        );
    }

    #[test]
    fn validate_composition_and_numbers() {
        let s = CrdSchema::new(&json!({"type": "object", "properties": {
            "n": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "multipleOf": 0.5},
            "i": {"type": "integer"},
            "o": {"type": "object", "minProperties": 1, "maxProperties": 2, "additionalProperties": {"type": "string"}},
            "x": {"type": "string", "not": {"enum": ["forbidden"]}},
            "one": {"oneOf": [{"type": "string", "maxLength": 3}, {"type": "string", "minLength": 2}]},
            "all": {"type": "string", "allOf": [{"minLength": 2}, {"maxLength": 3}]}
        }}));
        assert!(s
            .validate(&json!({"n": 1.5, "i": 3.0, "o": {"a": "b"}, "x": "ok", "one": "a", "all": "ab"}))
            .is_empty());
        let c = s.validate(&json!({"n": 0, "o": {}, "x": "forbidden", "one": "ab", "all": "abcd"}));
        let msgs: Vec<&str> = c.iter().map(|c| c.message.as_str()).collect();
        assert!(
            msgs.contains(&"Invalid value: 0: n in body should be greater than 0"),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"Invalid value: 0: o in body should have at least 1 properties"));
        assert!(msgs.contains(&"Invalid value: \"\": \"x\" must not validate the schema (not)"));
        assert!(msgs.contains(&"Invalid value: \"\": \"one\" must validate one and only one schema (oneOf)"));
        assert!(msgs.contains(&"Invalid value: \"\": \"all\" must validate all the schemas (allOf)"));
        assert!(msgs.contains(&"Too long: may not be more than 3 bytes"));
        let c = s.validate(&json!({"n": 0.7, "o": {"a": "1", "b": "2", "c": "3"}}));
        let msgs: Vec<&str> = c.iter().map(|c| c.message.as_str()).collect();
        assert!(
            msgs.contains(&"Invalid value: 0.7: n in body should be a multiple of 0.5"),
            "{msgs:?}"
        );
        assert!(msgs.contains(&"Too many: 3: must have at most 2 items"));
        let f = CrdSchema::new(
            &json!({"type": "object", "properties": {"f": {"type": "integer", "minimum": 1.0, "maximum": 5}}}),
        );
        assert_eq!(
            f.validate(&json!({"f": 0}))[0].message,
            "Invalid value: 0: f in body should be greater than or equal to 1"
        );
        assert_eq!(
            f.validate(&json!({"f": 6.0}))[0].message,
            "Invalid value: 6: f in body should be less than or equal to 5"
        );
    }

    #[test]
    fn list_and_map_markers() {
        let s = schema();
        assert_eq!(
            s.list_type(&["spec", "ports"]),
            ListType::Map {
                keys: vec!["name".into()]
            }
        );
        assert_eq!(s.list_type(&["spec", "tags"]), ListType::Set);
        assert_eq!(s.list_type(&["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(s.list_type(&["spec", "values", "anything"]), ListType::Atomic);
        assert_eq!(s.list_type(&["spec", "nope"]), ListType::Atomic);
        assert_eq!(s.list_type(&["metadata", "finalizers"]), ListType::Set);
        assert_eq!(
            s.list_type(&["metadata", "ownerReferences"]),
            ListType::Map {
                keys: vec!["uid".into()]
            }
        );
        assert_eq!(s.smp_list(&["spec", "ports"]), SmpList::Replace);
        assert!(s.map_is_atomic(&["spec", "selector"]));
        assert!(!s.map_is_atomic(&["spec", "labels"]));
        assert!(!s.map_is_atomic(&["metadata", "labels"]));
    }

    #[test]
    fn markers_inside_list_items_and_map_values() {
        let s = CrdSchema::new(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "groups": {"type": "array", "items": {"type": "object", "x-kubernetes-map-type": "atomic", "properties": {
                    "members": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}}
                }}},
                "byName": {"type": "object", "additionalProperties": {"type": "array",
                    "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k", "v"], "items": {"type": "object"}}}
            }}}}),
        );
        assert_eq!(s.list_type(&["spec", "groups", "members"]), ListType::Set);
        assert!(s.map_is_atomic(&["spec", "groups"]));
        assert_eq!(
            s.list_type(&["spec", "byName", "any"]),
            ListType::Map {
                keys: vec!["k".into(), "v".into()]
            }
        );
    }

    /// The shape kube-derive/schemars emits for a typical operator CRD.
    #[test]
    fn kube_rs_generated_schema() {
        let s = CrdSchema::new(&json!({
            "description": "Auto-generated derived type for AppSpec via `CustomResource`",
            "properties": {
                "spec": {
                    "properties": {
                        "image": {"type": "string"},
                        "replicas": {"format": "int32", "nullable": true, "type": "integer"},
                        "values": {"nullable": true, "type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
                        "env": {"items": {"properties": {"name": {"type": "string"}, "value": {"nullable": true, "type": "string"}},
                                          "required": ["name"], "type": "object"}, "nullable": true, "type": "array"}
                    },
                    "required": ["image"],
                    "type": "object"
                },
                "status": {"nullable": true, "properties": {"observedGeneration": {"format": "int64", "nullable": true, "type": "integer"}}, "type": "object"}
            },
            "required": ["spec"],
            "title": "App",
            "type": "object"
        }));
        let mut obj = json!({
            "apiVersion": "demo.example.com/v1", "kind": "App", "metadata": {"name": "a"},
            "spec": {"image": "nginx", "replicas": null, "values": {"a": {"b": [1]}}, "port": "http",
                     "env": [{"name": "A", "value": null, "valueFrom": {}}]},
            "status": null
        });
        assert_eq!(s.prune(&mut obj), vec![".spec.env[0].valueFrom"]);
        s.default(&mut obj);
        assert!(s.validate(&obj).is_empty(), "{:?}", s.validate(&obj));
        assert_eq!(
            s.validate(&json!({"metadata": {}}))[0],
            Cause::new("FieldValueRequired", "Required value", "spec")
        );
        let bad = json!({"spec": {"image": "x", "env": [{"value": "v"}]}});
        assert_eq!(
            s.validate(&bad),
            vec![Cause::new("FieldValueRequired", "Required value", "spec.env[0].name")]
        );
    }

    #[test]
    fn hostile_depth_and_bad_patterns_do_not_panic() {
        let mut deep_schema = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
        let mut deep_obj = json!({});
        for _ in 0..300 {
            deep_schema = json!({"type": "object", "properties": {"a": deep_schema}, "default": {}});
            deep_obj = json!({"a": deep_obj});
        }
        let s = CrdSchema::new(&deep_schema);
        let mut o = deep_obj.clone();
        s.prune(&mut o);
        s.default(&mut o);
        s.validate(&o);
        let _ = s.list_type(&["a"; 400]);
        let bad = CrdSchema::new(&json!({"type": "object", "properties": {"x": {"type": "string", "pattern": "(["}}}));
        assert!(bad.validate(&json!({"x": "y"})).is_empty());
        let weird = CrdSchema::new(&json!({"type": 5, "properties": [1], "items": "x", "required": "spec"}));
        let mut w = json!({"a": [1, {"b": null}]});
        weird.prune(&mut w);
        weird.default(&mut w);
        weird.validate(&w);
    }
}
