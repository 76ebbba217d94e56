//! `/openapi/v2`: one Swagger 2.0 document for every served kind, derived from the v3 documents, in JSON and
//! in the protobuf form kubectl asks for (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`, the
//! gnostic `openapi.v2.Document` message). kubectl's client-side validation of a `kind: List` (whose items
//! have no PATCH operation to ask about) reads it, and so do older clients.

use serde_json::{json, Map, Value};

use super::builtin::REF_PREFIX;

/// What kubectl asks for.
pub const PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// What kube-openapi answers with: `@` is not a token character, and Go's MIME parser refuses it.
pub const PROTOBUF_RESPONSE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// The Swagger 2.0 document: every v3 document's schemas under `definitions`, its PATCH operations as v2
/// operations (query parameters inline, the GVK extension as an object).
pub fn document<'a>(v3_docs: impl Iterator<Item = &'a Value>) -> Value {
    let (mut paths, mut definitions) = (Map::new(), Map::new());
    for doc in v3_docs {
        if let Some(schemas) = doc.pointer("/components/schemas").and_then(Value::as_object) {
            for (name, schema) in schemas {
                definitions.entry(name.clone()).or_insert_with(|| to_v2_schema(schema));
            }
        }
        for (path, item) in doc["paths"].as_object().into_iter().flatten() {
            paths.insert(path.clone(), json!({"patch": to_v2_operation(&item["patch"])}));
        }
    }
    json!({"swagger": "2.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
        "definitions": definitions})
}

fn to_v2_operation(op: &Value) -> Value {
    let params: Vec<Value> = op["parameters"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| json!({"name": p["name"], "in": p["in"], "type": p["schema"]["type"], "uniqueItems": true}))
        .collect();
    let consumes: Vec<&String> = op["requestBody"]["content"]
        .as_object()
        .into_iter()
        .flat_map(|c| c.keys())
        .collect();
    let gvk = op["x-kubernetes-group-version-kind"].clone();
    json!({"operationId": op["operationId"], "consumes": consumes, "parameters": params,
        "responses": {"200": {"description": "OK"}}, "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": gvk})
}

/// A v3 schema in v2 form: references point at `#/definitions/`, and int-or-string fields get the v2 spelling
/// (`type: string, format: int-or-string`) that v2 validators understand.
fn to_v2_schema(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut out = Map::new();
            for (k, x) in o {
                match (k.as_str(), x) {
                    ("$ref", Value::String(r)) => {
                        let name = r.strip_prefix(REF_PREFIX).unwrap_or(r);
                        out.insert(k.clone(), Value::String(format!("#/definitions/{name}")));
                    }
                    ("nullable", _) => {}
                    _ => {
                        out.insert(k.clone(), to_v2_schema(x));
                    }
                }
            }
            if o.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true)) && !o.contains_key("type") {
                out.insert("type".into(), json!("string"));
                out.insert("format".into(), json!("int-or-string"));
            }
            Value::Object(out)
        }
        Value::Array(a) => Value::Array(a.iter().map(to_v2_schema).collect()),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Protobuf encoding of the gnostic `openapi.v2` messages (field numbers from gnostic's OpenAPIv2.proto)
// ---------------------------------------------------------------------------------------------------------------

/// A protobuf message being written.
#[derive(Default)]
struct Msg(Vec<u8>);

impl Msg {
    fn varint(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }

    fn bytes(&mut self, num: u64, b: &[u8]) {
        self.varint(num << 3 | 2);
        self.varint(b.len() as u64);
        self.0.extend_from_slice(b);
    }

    fn string(&mut self, num: u64, s: &str) {
        if !s.is_empty() {
            self.bytes(num, s.as_bytes());
        }
    }

    fn msg(&mut self, num: u64, m: Msg) {
        self.bytes(num, &m.0);
    }

    fn int(&mut self, num: u64, v: i64) {
        if v != 0 {
            self.varint(num << 3);
            self.varint(v as u64);
        }
    }

    fn boolean(&mut self, num: u64, v: bool) {
        if v {
            self.int(num, 1);
        }
    }

    fn double(&mut self, num: u64, v: f64) {
        if v != 0.0 {
            self.varint(num << 3 | 1);
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }
}

/// The whole document as `openapi.v2.Document`.
pub fn encode(doc: &Value) -> Vec<u8> {
    let mut out = Msg::default();
    out.string(1, doc["swagger"].as_str().unwrap_or("2.0"));
    let mut info = Msg::default();
    info.string(1, doc["info"]["title"].as_str().unwrap_or(""));
    info.string(2, doc["info"]["version"].as_str().unwrap_or(""));
    out.msg(2, info);
    let mut paths = Msg::default();
    for (path, item) in doc["paths"].as_object().into_iter().flatten() {
        let mut path_item = Msg::default();
        path_item.msg(8, operation(&item["patch"]));
        paths.msg(2, named(path, path_item));
    }
    out.msg(8, paths);
    let mut definitions = Msg::default();
    for (name, schema) in doc["definitions"].as_object().into_iter().flatten() {
        definitions.msg(1, named(name, schema_msg(schema)));
    }
    out.msg(9, definitions);
    out.0
}

/// A `Named*` message {1 name, 2 value}.
fn named(name: &str, value: Msg) -> Msg {
    let mut m = Msg::default();
    m.string(1, name);
    m.msg(2, value);
    m
}

fn operation(op: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(5, op["operationId"].as_str().unwrap_or(""));
    for c in op["consumes"].as_array().into_iter().flatten() {
        m.string(7, c.as_str().unwrap_or(""));
    }
    for p in op["parameters"].as_array().into_iter().flatten() {
        let mut query = Msg::default();
        query.string(2, p["in"].as_str().unwrap_or(""));
        query.string(4, p["name"].as_str().unwrap_or(""));
        query.string(6, p["type"].as_str().unwrap_or(""));
        query.boolean(20, p["uniqueItems"].as_bool().unwrap_or(false));
        let mut non_body = Msg::default();
        non_body.msg(3, query);
        let mut parameter = Msg::default();
        parameter.msg(2, non_body);
        let mut item = Msg::default();
        item.msg(1, parameter);
        m.msg(8, item);
    }
    let mut responses = Msg::default();
    for (code, r) in op["responses"].as_object().into_iter().flatten() {
        let mut response = Msg::default();
        response.string(1, r["description"].as_str().unwrap_or(""));
        let mut value = Msg::default();
        value.msg(1, response);
        responses.msg(1, named(code, value));
    }
    m.msg(9, responses);
    for (k, v) in op
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.starts_with("x-"))
    {
        m.msg(13, named_any(k, v));
    }
    m
}

/// gnostic `Any` {2 yaml}: the value's YAML text; JSON is YAML, and that is what clients parse it with.
fn any(v: &Value) -> Msg {
    let mut m = Msg::default();
    m.string(2, &v.to_string());
    m
}

fn named_any(name: &str, v: &Value) -> Msg {
    named(name, any(v))
}

fn schema_msg(s: &Value) -> Msg {
    let mut m = Msg::default();
    let Some(o) = s.as_object() else { return m };
    let str_of = |k: &str| o.get(k).and_then(Value::as_str).unwrap_or("");
    let int_of = |k: &str| o.get(k).and_then(Value::as_i64).unwrap_or(0);
    let bool_of = |k: &str| o.get(k).and_then(Value::as_bool).unwrap_or(false);
    let f64_of = |k: &str| o.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    m.string(1, str_of("$ref"));
    m.string(2, str_of("format"));
    m.string(3, str_of("title"));
    m.string(4, str_of("description"));
    if let Some(d) = o.get("default") {
        m.msg(5, any(d));
    }
    m.double(6, f64_of("multipleOf"));
    m.double(7, f64_of("maximum"));
    m.boolean(8, bool_of("exclusiveMaximum"));
    m.double(9, f64_of("minimum"));
    m.boolean(10, bool_of("exclusiveMinimum"));
    for (num, key) in [(11, "maxLength"), (12, "minLength"), (14, "maxItems"), (15, "minItems")] {
        m.int(num, int_of(key));
    }
    m.string(13, str_of("pattern"));
    m.boolean(16, bool_of("uniqueItems"));
    m.int(17, int_of("maxProperties"));
    m.int(18, int_of("minProperties"));
    for r in o.get("required").and_then(Value::as_array).into_iter().flatten() {
        m.string(19, r.as_str().unwrap_or(""));
    }
    for e in o.get("enum").and_then(Value::as_array).into_iter().flatten() {
        m.msg(20, any(e));
    }
    match o.get("additionalProperties") {
        Some(Value::Bool(b)) => {
            let mut item = Msg::default();
            item.varint(2 << 3);
            item.varint(u64::from(*b));
            m.msg(21, item);
        }
        Some(schema @ Value::Object(_)) => {
            let mut item = Msg::default();
            item.msg(1, schema_msg(schema));
            m.msg(21, item);
        }
        _ => {}
    }
    schema_structure(&mut m, o);
    m.string(26, str_of("discriminator"));
    m.boolean(27, bool_of("readOnly"));
    if let Some(e) = o.get("example") {
        m.msg(30, any(e));
    }
    for (k, v) in o.iter().filter(|(k, _)| k.starts_with("x-")) {
        m.msg(31, named_any(k, v));
    }
    m
}

/// `type`, `items`, `allOf` and `properties`: the members that nest schemas.
fn schema_structure(m: &mut Msg, o: &Map<String, Value>) {
    let types: Vec<&str> = match o.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !types.is_empty() {
        let mut t = Msg::default();
        types.iter().for_each(|x| t.string(1, x));
        m.msg(22, t);
    }
    let items: Vec<&Value> = match o.get("items") {
        Some(Value::Array(a)) => a.iter().collect(),
        Some(s @ Value::Object(_)) => vec![s],
        _ => Vec::new(),
    };
    if !items.is_empty() {
        let mut item = Msg::default();
        items.iter().for_each(|s| item.msg(1, schema_msg(s)));
        m.msg(23, item);
    }
    for s in o.get("allOf").and_then(Value::as_array).into_iter().flatten() {
        m.msg(24, schema_msg(s));
    }
    if let Some(props) = o.get("properties").and_then(Value::as_object) {
        let mut p = Msg::default();
        for (name, s) in props {
            p.msg(1, named(name, schema_msg(s)));
        }
        m.msg(25, p);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v3_schemas_become_v2_definitions() {
        let v3 = json!({"paths": {"/api/v1/namespaces/{name}": {"patch": {"operationId": "patchCoreV1Namespace",
            "parameters": [{"name": "fieldValidation", "in": "query", "schema": {"type": "string"}}],
            "requestBody": {"content": {"application/merge-patch+json": {}}},
            "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Namespace"}}}},
            "components": {"schemas": {"A": {"properties": {"b": {"allOf": [{"$ref": "#/components/schemas/B"}]},
                "n": {"x-kubernetes-int-or-string": true}}}}}});
        let v2 = document(std::iter::once(&v3));
        assert_eq!(
            v2["definitions"]["A"]["properties"]["b"]["allOf"][0]["$ref"],
            "#/definitions/B"
        );
        assert_eq!(v2["definitions"]["A"]["properties"]["n"]["format"], "int-or-string");
        let op = &v2["paths"]["/api/v1/namespaces/{name}"]["patch"];
        assert_eq!(
            op["parameters"][0],
            json!({"name": "fieldValidation", "in": "query", "type": "string", "uniqueItems": true})
        );
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Namespace");
        let pb = encode(&v2);
        // Document.swagger (field 1) comes first; the definition name and the extension's YAML are in the bytes.
        assert_eq!(&pb[..5], b"\x0a\x032.0");
        let text = String::from_utf8_lossy(&pb);
        assert!(text.contains("x-kubernetes-group-version-kind"));
        assert!(text.contains("#/definitions/B"));
    }
}
