//! Client-side validation of rendered objects against the schemas the destination cluster publishes under
//! `/openapi/v3` (one document per group/version), so that the check before a sync's first write needs no
//! API request per object.
//!
//! What is checked is what the API server's schema layer rejects with `fieldValidation=Strict`: fields the
//! kind does not declare (unless `additionalProperties` or `x-kubernetes-preserve-unknown-fields` allows
//! them), JSON types (int-or-string, quantities as string or number, `format: byte` as base64), `required`,
//! `enum`, numeric and length bounds, and duplicate keys of `x-kubernetes-list-type: map|set` lists, the
//! same for built-in kinds and for custom resources (their CRD's structural schema).
//!
//! A schema may hold rules this module does not evaluate (`pattern`, `x-kubernetes-validations` (CEL),
//! `multipleOf`, `not`, ...). Such an object is [`Verdict::Unchecked`]: the caller asks the server (a dry
//! run) for that object instead, so nothing the server would refuse passes unnoticed because of them.
//! `null` is accepted anywhere: the server treats it as an absent field.
//!
//! Pure: no I/O. The documents are fetched and cached by `cluster::openapi`.

use std::collections::{HashMap, HashSet};
use std::fmt;

use base64::Engine as _;
use serde_json::{Map, Value};

/// Where OpenAPI v3 keeps its definitions.
const REF_PREFIX: &str = "#/components/schemas/";
/// Most errors reported for one object (the server stops early too).
const MAX_ERRORS: usize = 10;
/// Deepest object nesting walked; deeper documents are left to the server.
const MAX_DEPTH: usize = 64;
/// Schema keywords that constrain values in ways this module does not evaluate.
const UNCHECKED_KEYWORDS: &[&str] = &[
    "pattern",
    "x-kubernetes-validations",
    "multipleOf",
    "not",
    "uniqueItems",
    "minProperties",
    "maxProperties",
    "exclusiveMinimum",
    "exclusiveMaximum",
];
/// String formats checked here (the others are left to the server when a value is present).
const KNOWN_FORMATS: &[&str] = &["byte", "int32", "int64", "double", "float", "int-or-string", "quantity"];

/// The schemas of one group/version document: its `components.schemas`, descriptions dropped, and which
/// definition is the root of each kind (by `x-kubernetes-group-version-kind`).
#[derive(Debug, Default)]
pub struct SchemaDoc {
    schemas: Map<String, Value>,
    kinds: HashMap<String, String>,
}

impl SchemaDoc {
    /// Keeps what validation needs of an OpenAPI v3 document for `group`/`version` (paths, descriptions and
    /// examples are dropped: they are most of a document's size).
    pub fn from_document(mut doc: Value, group: &str, version: &str) -> SchemaDoc {
        let mut schemas = match doc.pointer_mut("/components/schemas").map(Value::take) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let mut kinds = HashMap::new();
        for (name, schema) in schemas.iter_mut() {
            strip_docs(schema);
            for gvk in schema
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let is = |k: &str, want: &str| gvk.get(k).and_then(Value::as_str) == Some(want);
                if let (true, true, Some(kind)) = (
                    is("group", group),
                    is("version", version),
                    gvk.get("kind").and_then(Value::as_str),
                ) {
                    kinds.insert(kind.to_string(), name.clone());
                }
            }
        }
        SchemaDoc { schemas, kinds }
    }

    /// Whether the document publishes a schema for `kind`.
    pub fn has_kind(&self, kind: &str) -> bool {
        self.kinds.contains_key(kind)
    }

    /// Validates `obj` (whose kind this document covers). `redact` (Secrets): messages never quote values.
    pub fn validate(&self, obj: &Value, redact: bool) -> Verdict {
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let Some(root) = self.kinds.get(kind).and_then(|n| self.schemas.get(n)) else {
            return Verdict::Unchecked(format!("no published schema for kind {kind:?}"));
        };
        let mut w = Walker {
            defs: &self.schemas,
            errors: Vec::new(),
            unchecked: None,
            redact,
        };
        w.check(root, obj, &mut String::new(), 0);
        match (w.unchecked, w.errors.is_empty()) {
            (_, false) => Verdict::Invalid(w.errors),
            (Some(why), true) => Verdict::Unchecked(why),
            (None, true) => Verdict::Valid,
        }
    }
}

/// Drops `description` and `example` keys everywhere below `v` (never a property named so: those live one
/// level down, under `properties`).
fn strip_docs(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("description");
            o.remove("example");
            for (k, child) in o.iter_mut() {
                if k == "properties" {
                    if let Value::Object(props) = child {
                        props.values_mut().for_each(strip_docs);
                    }
                } else {
                    strip_docs(child);
                }
            }
        }
        Value::Array(a) => a.iter_mut().for_each(strip_docs),
        _ => {}
    }
}

/// The result of validating one object.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every rule of the schema holds.
    Valid,
    /// Violations, by field path.
    Invalid(Vec<FieldError>),
    /// No violation found, but the schema has rules not evaluated here (or no schema): ask the server.
    Unchecked(String),
}

/// One violation: the field path (`.spec.template.spec.containers[0].name`) and what is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() { "<root>" } else { &self.path };
        write!(f, "{path}: {}", self.message)
    }
}

struct Walker<'a> {
    defs: &'a Map<String, Value>,
    errors: Vec<FieldError>,
    unchecked: Option<String>,
    redact: bool,
}

impl<'a> Walker<'a> {
    fn error(&mut self, path: &str, message: String) {
        if self.errors.len() < MAX_ERRORS {
            self.errors.push(FieldError {
                path: path.to_string(),
                message,
            });
        }
    }

    fn unchecked(&mut self, path: &str, why: &str) {
        if self.unchecked.is_none() {
            self.unchecked = Some(format!("{}: {why}", if path.is_empty() { "<root>" } else { path }));
        }
    }

    fn resolve(&mut self, schema: &'a Value, path: &str) -> Option<&'a Value> {
        let Some(r) = schema.get("$ref").and_then(Value::as_str) else {
            return Some(schema);
        };
        let target = r.strip_prefix(REF_PREFIX).and_then(|n| self.defs.get(n));
        if target.is_none() {
            self.unchecked(path, &format!("unresolved schema reference {r}"));
        }
        target
    }

    /// Checks `value` against `schema` at `path`.
    fn check(&mut self, schema: &'a Value, value: &Value, path: &mut String, depth: usize) {
        if value.is_null() || self.errors.len() >= MAX_ERRORS {
            return;
        }
        if depth > MAX_DEPTH {
            return self.unchecked(path, "nested too deeply");
        }
        let Some(schema) = self.resolve(schema, path) else {
            return;
        };
        if let Some(word) = UNCHECKED_KEYWORDS.iter().find(|k| schema.get(**k).is_some()) {
            self.unchecked(path, &format!("schema rule {word} is checked by the server"));
        }
        for branch in schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            self.check(branch, value, path, depth + 1);
        }
        if !self.check_alternatives(schema, value, path) {
            return;
        }
        if flag(schema, "x-kubernetes-int-or-string") {
            if !(is_integer(value) || value.is_string()) {
                self.error(path, format!("expected integer or string, got {}", type_name(value)));
            }
            return;
        }
        if !self.check_type(schema, value, path) {
            return;
        }
        self.check_enum(schema, value, path);
        self.check_bounds(schema, value, path);
        match value {
            Value::Object(o) => self.check_object(schema, o, path, depth),
            Value::Array(items) => self.check_array(schema, items, path, depth),
            _ => {}
        }
    }

    /// `anyOf`/`oneOf` whose branches only name types (how int-or-string and quantities are published): the
    /// value must have one of them. Other alternatives are left to the server. False: stop here.
    fn check_alternatives(&mut self, schema: &Value, value: &Value, path: &str) -> bool {
        for key in ["anyOf", "oneOf"] {
            let Some(branches) = schema.get(key).and_then(Value::as_array) else {
                continue;
            };
            let types: Option<Vec<&str>> = branches
                .iter()
                .map(|b| {
                    let o = b.as_object()?;
                    let only_type = o.keys().all(|k| k == "type" || k == "format");
                    o.get("type").and_then(Value::as_str).filter(|_| only_type)
                })
                .collect();
            let Some(types) = types else {
                self.unchecked(path, &format!("schema rule {key} is checked by the server"));
                continue;
            };
            if !types.iter().any(|t| has_type(t, value)) {
                self.error(
                    path,
                    format!("expected {}, got {}", types.join(" or "), type_name(value)),
                );
                return false;
            }
        }
        true
    }

    fn check_type(&mut self, schema: &Value, value: &Value, path: &str) -> bool {
        let format = schema.get("format").and_then(Value::as_str).unwrap_or_default();
        let expected = match format {
            "int-or-string" => Some("integer or string"),
            "quantity" => Some("string or number"),
            _ => schema.get("type").and_then(Value::as_str),
        };
        let Some(expected) = expected else {
            return true;
        };
        let ok = expected.split(" or ").any(|t| has_type(t, value));
        if !ok {
            self.error(path, format!("expected {expected}, got {}", type_name(value)));
            return false;
        }
        if let Value::String(s) = value {
            self.check_string_format(format, s, path);
        } else if let Some(n) = value.as_i64() {
            let range = match format {
                "int32" => Some((i64::from(i32::MIN), i64::from(i32::MAX))),
                _ => None,
            };
            if range.is_some_and(|(lo, hi)| n < lo || n > hi) {
                self.error(path, format!("{n} does not fit a 32-bit integer"));
            }
        }
        true
    }

    fn check_string_format(&mut self, format: &str, s: &str, path: &str) {
        if format.is_empty() || KNOWN_FORMATS.contains(&format) {
            if format == "byte" && base64::engine::general_purpose::STANDARD.decode(s).is_err() {
                self.error(path, "illegal base64 data".to_string());
            }
            return;
        }
        self.unchecked(path, &format!("format {format} is checked by the server"));
    }

    fn check_enum(&mut self, schema: &Value, value: &Value, path: &str) {
        let Some(allowed) = schema.get("enum").and_then(Value::as_array) else {
            return;
        };
        if allowed.contains(value) {
            return;
        }
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        let shown = if self.redact {
            "(value withheld)".to_string()
        } else {
            value.to_string()
        };
        self.error(
            path,
            format!("Unsupported value: {shown}: supported values: {}", list.join(", ")),
        );
    }

    fn check_bounds(&mut self, schema: &Value, value: &Value, path: &str) {
        let size = match value {
            Value::String(s) => Some(("length", "Length", s.chars().count())),
            Value::Array(a) => Some(("items", "Items", a.len())),
            _ => None,
        };
        if let Some((what, key, n)) = size {
            let n = n as u64;
            if let Some(max) = schema
                .get(format!("max{key}"))
                .and_then(Value::as_u64)
                .filter(|m| n > *m)
            {
                self.error(path, format!("Too long: must have at most {max} {what}"));
            }
            if let Some(min) = schema
                .get(format!("min{key}"))
                .and_then(Value::as_u64)
                .filter(|m| n < *m)
            {
                self.error(path, format!("Invalid value: must have at least {min} {what}"));
            }
        }
        if let Some(x) = value.as_f64() {
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64).filter(|m| x > *m) {
                self.error(path, format!("Invalid value: must be less than or equal to {max}"));
            }
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64).filter(|m| x < *m) {
                self.error(path, format!("Invalid value: must be greater than or equal to {min}"));
            }
        }
    }

    fn check_object(&mut self, schema: &'a Value, obj: &Map<String, Value>, path: &mut String, depth: usize) {
        let props = schema.get("properties").and_then(Value::as_object);
        let additional = schema.get("additionalProperties");
        let preserve = flag(schema, "x-kubernetes-preserve-unknown-fields");
        // The type fields and metadata of an object are always accepted at the root and in embedded objects.
        let embedded = depth == 0 || flag(schema, "x-kubernetes-embedded-resource");
        for name in schema.get("required").and_then(Value::as_array).into_iter().flatten() {
            if let Some(name) = name.as_str().filter(|n| !obj.contains_key(*n)) {
                self.error(&format!("{path}.{name}"), "Required value".to_string());
            }
        }
        // A schema that declares no fields at all (RawExtension and the like) says nothing about them.
        let open = preserve
            || additional.is_some_and(|a| a.as_bool() == Some(true))
            || (props.is_none() && additional.is_none());
        for (key, child) in obj {
            let len = path.len();
            path.push('.');
            path.push_str(key);
            match (props.and_then(|p| p.get(key)), additional.filter(|a| a.is_object())) {
                (Some(sub), _) | (None, Some(sub)) => self.check(sub, child, path, depth + 1),
                (None, None) if open => {}
                (None, None) if embedded && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") => {}
                (None, None) => self.error(path, "field not declared in schema".to_string()),
            }
            path.truncate(len);
        }
    }

    fn check_array(&mut self, schema: &'a Value, items: &[Value], path: &mut String, depth: usize) {
        if let Some(item_schema) = schema.get("items").filter(|s| s.is_object()) {
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                self.check(item_schema, item, path, depth + 1);
                path.truncate(len);
            }
        }
        match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => {
                let mut seen = HashSet::new();
                if let Some(dup) = items.iter().find(|v| !seen.insert(v.to_string())) {
                    let shown = if self.redact {
                        "(value withheld)".to_string()
                    } else {
                        dup.to_string()
                    };
                    self.error(path, format!("duplicate entries for value {shown}"));
                }
            }
            Some("map") => self.check_map_keys(schema, items, path),
            _ => {}
        }
    }

    /// `x-kubernetes-list-type: map`: no two items with the same values of the map keys.
    fn check_map_keys(&mut self, schema: &Value, items: &[Value], path: &str) {
        let keys: Vec<&str> = schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if keys.is_empty() {
            return;
        }
        let mut seen = HashSet::new();
        for item in items {
            // Absent keys take their default on the server (e.g. protocol TCP): too uncertain to compare.
            let Some(tuple) = keys
                .iter()
                .map(|k| item.get(*k).filter(|v| !v.is_null()))
                .collect::<Option<Vec<_>>>()
            else {
                continue;
            };
            let shown: Vec<String> = keys.iter().zip(&tuple).map(|(k, v)| format!("{k}={v}")).collect();
            if !seen.insert(shown.join(",")) {
                self.error(path, format!("duplicate entries for key [{}]", shown.join(",")));
                return;
            }
        }
    }
}

fn flag(schema: &Value, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool) == Some(true)
}

/// An integral number (a float with no fraction counts: YAML `3.0` decodes as one).
fn is_integer(v: &Value) -> bool {
    v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0)
}

fn has_type(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "integer" => is_integer(v),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "object" => v.is_object(),
        "array" => v.is_array(),
        _ => true,
    }
}

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

#[cfg(test)]
mod tests;
