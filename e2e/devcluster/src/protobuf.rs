//! Decoding of the Kubernetes protobuf envelope (`k8s\0` + runtime.Unknown) into the JSON object form the
//! rest of devcluster works on: every kind devcluster serves, the review and token kinds, and the
//! `DeleteOptions` body of a DELETE. kube-apiserver accepts all of these in protobuf, and Go clients send
//! protobuf whenever they can: kubectl >= 1.32's typed clients (which never retry a 415 as JSON), and Helm,
//! which writes and deletes its release Secrets that way. Patch bodies are JSON or YAML by definition.
//!
//! The decoder is table-driven: `tables.rs` holds one static list of `(field number, JSON name, type,
//! presence)` per Go struct, generated from the Go types of k8s.io/api (see `tools/gen-protobuf-tables.py`).
//! Fields the tables do not list are skipped, as the Go decoder skips unknown fields.
//!
//! Go's gogo-protobuf marshaller writes every non-pointer field, so unset strings arrive as `""`, unset
//! numbers as `0` and unset structs as empty messages. The JSON form is what Go's JSON encoder would write
//! for the decoded struct: zero values of `omitempty` fields are dropped, fields that are pointers in Go
//! (`replicas`, `immutable`, ...) keep their value even when it is zero, because there presence is the
//! information.

use base64::Engine;
use chrono::DateTime;
use serde_json::{Map, Value};

use crate::error::{ApiError, ApiResult};

#[rustfmt::skip]
mod tables;

pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// The 4-byte prefix of every Kubernetes protobuf body (`runtime/serializer/protobuf`).
const MAGIC: &[u8; 4] = b"k8s\x00";

/// Nesting bound: CRD schemas nest `JSONSchemaProps` without limit, and every level costs stack.
const MAX_DEPTH: usize = 200;

/// Decode one protobuf request body into a JSON object carrying `apiVersion` and `kind`. Unset strings
/// (`""`) are treated as unset. Kinds without a table answer 415 with a clear message.
// NB: `ApiError` is the crate-wide error type; boxing it here alone would only make callers unwrap a box.
#[allow(clippy::result_large_err)]
pub fn decode(body: &[u8]) -> ApiResult<Value> {
    let Some(envelope) = body.strip_prefix(MAGIC.as_slice()) else {
        return Err(ApiError::bad_request(
            "protobuf body does not start with the Kubernetes magic prefix \"k8s\\x00\"",
        ));
    };
    let unknown = Unknown::decode(envelope).map_err(bad_body)?;
    if !unknown.content_encoding.is_empty() {
        return Err(ApiError::unsupported_media_type(format!(
            "protobuf contentEncoding {:?} is not supported; send an unencoded body or application/json",
            unknown.content_encoding
        )));
    }
    if unknown.kind.is_empty() {
        return Err(ApiError::bad_request(
            "protobuf body carries no kind in its runtime.Unknown typeMeta",
        ));
    }
    let Some(fields) = schema_for(&unknown.api_version, &unknown.kind) else {
        return Err(ApiError::unsupported_media_type(format!(
            "the protobuf encoding of {} (apiVersion {:?}) is not supported by this server; send application/json",
            unknown.kind, unknown.api_version
        )));
    };
    let mut object = Map::new();
    object.insert("apiVersion".into(), Value::String(unknown.api_version));
    object.insert("kind".into(), Value::String(unknown.kind));
    object.extend(decode_message(unknown.raw, fields, 0).map_err(bad_body)?);
    if fields.iter().any(|f| f.name == "metadata") {
        object.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    }
    Ok(Value::Object(object))
}

fn bad_body(e: String) -> ApiError {
    ApiError::bad_request(format!("failed to decode the protobuf request body: {e}"))
}

// ---------------------------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------------------------

/// One field value as it appears on the wire.
#[derive(Debug, Clone, Copy)]
enum Wire<'a> {
    Varint(u64),
    Fixed64(u64),
    Bytes(&'a [u8]),
    Fixed32(u32),
}

/// A bounds-checked cursor over protobuf bytes; every read fails instead of panicking.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut value = 0u64;
        for shift in 0..10u32 {
            let byte = *self.buf.get(self.pos).ok_or("truncated varint")?;
            self.pos += 1;
            value |= u64::from(byte & 0x7f) << (7 * shift);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|e| *e <= self.buf.len())
            .ok_or("truncated field")?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    /// The next `(field number, value)`, or `None` at the end of the buffer.
    fn field(&mut self) -> Result<Option<(u64, Wire<'a>)>, String> {
        if self.pos >= self.buf.len() {
            return Ok(None);
        }
        let key = self.varint()?;
        let number = key >> 3;
        if number == 0 {
            return Err("field number 0".into());
        }
        let value = match key & 7 {
            0 => Wire::Varint(self.varint()?),
            1 => Wire::Fixed64(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| "bad fixed64")?)),
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| "length overflows")?;
                Wire::Bytes(self.take(len)?)
            }
            5 => Wire::Fixed32(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| "bad fixed32")?)),
            t => return Err(format!("unsupported wire type {t} for field {number}")),
        };
        Ok(Some((number, value)))
    }
}

/// `runtime.Unknown`: {1 typeMeta{1 apiVersion, 2 kind}, 2 raw, 3 contentEncoding, 4 contentType}.
#[derive(Default)]
struct Unknown<'a> {
    api_version: String,
    kind: String,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Unknown<'a> {
    fn decode(buf: &'a [u8]) -> Result<Self, String> {
        let mut out = Unknown::default();
        let mut r = Reader::new(buf);
        while let Some((number, value)) = r.field()? {
            match (number, value) {
                (1, Wire::Bytes(b)) => (out.api_version, out.kind) = decode_type_meta(b)?,
                (2, Wire::Bytes(b)) => out.raw = b,
                (3, Wire::Bytes(b)) => out.content_encoding = utf8(b),
                (4, Wire::Bytes(_)) => {}
                (1..=4, _) => return Err(format!("runtime.Unknown field {number} has the wrong wire type")),
                _ => {}
            }
        }
        Ok(out)
    }
}

fn decode_type_meta(buf: &[u8]) -> Result<(String, String), String> {
    let (mut api_version, mut kind) = (String::new(), String::new());
    let mut r = Reader::new(buf);
    while let Some((number, value)) = r.field()? {
        match (number, value) {
            (1, Wire::Bytes(b)) => api_version = utf8(b),
            (2, Wire::Bytes(b)) => kind = utf8(b),
            (1 | 2, _) => return Err("typeMeta field has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok((api_version, kind))
}

/// Go strings may hold any bytes; JSON cannot, so invalid UTF-8 is replaced rather than refused.
fn utf8(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

// ---------------------------------------------------------------------------------------------------------------
// Field tables
// ---------------------------------------------------------------------------------------------------------------

/// The fields of one message.
pub type Table = &'static [F];

/// How one field's wire value becomes JSON.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Str,
    /// `bytes` → base64, as Go's JSON encoding of `[]byte`.
    Bytes,
    /// Any varint integer (int32/int64; negatives arrive sign-extended to 64 bits).
    Int,
    /// `double` (fixed64), e.g. a CRD schema's `maximum`.
    Double,
    Bool,
    Msg(&'static Table),
    /// A Go embedded struct (e.g. `VolumeSource` in `Volume`): its JSON fields are inlined.
    Inline(&'static Table),
    /// `map<string, V>`, sent as repeated entries {1 key, 2 value}.
    Map(&'static Ty),
    /// meta/v1 `Time` {1 seconds, 2 nanos} → RFC 3339 (second precision, as the JSON form).
    Time,
    /// meta/v1 `MicroTime` {1 seconds, 2 nanos} → RFC 3339 with microseconds.
    MicroTime,
    /// resource `Quantity` {1 string}.
    Quantity,
    /// intstr `IntOrString` {1 type, 2 intVal, 3 strVal}.
    IntOrString,
    /// A message {1 raw bytes} whose JSON form is those bytes: meta/v1 `FieldsV1`, runtime `RawExtension`,
    /// apiextensions `JSON`.
    RawJson,
    /// authentication/authorization `ExtraValue` {1 repeated items} → a JSON array of strings.
    StrList,
    /// apiextensions `JSONSchemaPropsOrArray` {1 schema, 2 repeated jSONSchemas} → a schema or an array.
    SchemaOrArray,
    /// apiextensions `JSONSchemaPropsOrBool` {1 allows, 2 schema} → a schema or a boolean.
    SchemaOrBool,
    /// apiextensions `JSONSchemaPropsOrStringArray` {1 schema, 2 repeated property} → a schema or strings.
    SchemaOrStringArray,
}

/// How a field's presence maps to JSON, from its Go type and `json` tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Card {
    /// A non-pointer `omitempty` field: Go writes it always, its zero value is left out of JSON.
    Opt,
    /// A pointer: presence is the information, so zero values are kept (`replicas: 0`).
    Ptr,
    /// A non-pointer field without `omitempty`: Go's JSON always carries it.
    Req,
    /// A slice or repeated field; every element is kept (`apiGroups: [""]` is the core group).
    Rep,
}
pub const OPT: Card = Card::Opt;
pub const PTR: Card = Card::Ptr;
pub const REQ: Card = Card::Req;
pub const REP: Card = Card::Rep;

/// One field of a message table.
#[derive(Debug, Clone, Copy)]
pub struct F {
    num: u64,
    /// The JSON name; empty for an inlined struct.
    name: &'static str,
    ty: Ty,
    card: Card,
}

impl F {
    pub const fn new(num: u64, name: &'static str, ty: Ty, card: Card) -> Self {
        F { num, name, ty, card }
    }
}

/// The table of a root kind. DeleteOptions is registered in every group version, so client-go sends it
/// under the version of whichever client issues the DELETE (`v1`, `apps/v1`, `meta.k8s.io/v1`, ...).
fn schema_for(api_version: &str, kind: &str) -> Option<Table> {
    tables::ROOTS
        .iter()
        .find(|(v, k, _)| *k == kind && (*v == "*" || *v == api_version))
        .map(|(_, _, t)| **t)
}

// ---------------------------------------------------------------------------------------------------------------
// Table-driven decoding
// ---------------------------------------------------------------------------------------------------------------

fn decode_message(buf: &[u8], fields: Table, depth: usize) -> Result<Map<String, Value>, String> {
    if depth > MAX_DEPTH {
        return Err("message nesting too deep".into());
    }
    let mut out = Map::new();
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        let Some(field) = fields.iter().find(|f| f.num == number) else {
            continue;
        };
        let named = |e: String| format!("{}: {e}", display_name(field));
        if let (Card::Rep, Wire::Bytes(b), Ty::Int | Ty::Bool | Ty::Double) = (field.card, wire, field.ty) {
            // A packed repeated scalar: proto3 writers pack them, Go's proto2 marshaller does not.
            for value in unpack(b, field.ty).map_err(named)? {
                store(&mut out, field, value);
            }
            continue;
        }
        let value = decode_value(field.ty, wire, depth).map_err(named)?;
        store(&mut out, field, value);
    }
    Ok(out)
}

fn unpack(buf: &[u8], ty: Ty) -> Result<Vec<Value>, String> {
    let mut reader = Reader::new(buf);
    let mut out = Vec::new();
    while reader.pos < buf.len() {
        let wire = match ty {
            Ty::Double => Wire::Fixed64(u64::from_le_bytes(
                reader.take(8)?.try_into().map_err(|_| "bad fixed64")?,
            )),
            _ => Wire::Varint(reader.varint()?),
        };
        out.push(decode_value(ty, wire, 0)?);
    }
    Ok(out)
}

fn display_name(field: &F) -> &'static str {
    if field.name.is_empty() {
        "(inline)"
    } else {
        field.name
    }
}

/// Place one decoded value: append for repeated, merge for maps and inlined structs, drop the zero values
/// Go's JSON encoder leaves out (`omitempty` on a non-pointer field).
fn store(out: &mut Map<String, Value>, field: &F, value: Value) {
    match (field.ty, value) {
        (Ty::Inline(_), Value::Object(m)) => out.extend(m),
        (Ty::Map(_), Value::Object(entry)) => {
            let target = out.entry(field.name).or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(m) = target {
                m.extend(entry);
            }
        }
        (_, v) if field.card == Card::Rep => {
            let target = out.entry(field.name).or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(a) = target {
                a.push(v);
            }
        }
        (_, Value::Null) => {}
        (_, v) if field.card == Card::Opt && is_zero(&v) => {}
        (_, v) => {
            out.insert(field.name.to_string(), v);
        }
    }
}

fn is_zero(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Decode one wire value; `Value::Null` means "unset" (e.g. a zero `Time`).
fn decode_value(ty: Ty, wire: Wire<'_>, depth: usize) -> Result<Value, String> {
    match (ty, wire) {
        (Ty::Int, Wire::Varint(v)) => Ok(Value::from(v as i64)),
        (Ty::Int, Wire::Fixed64(v)) => Ok(Value::from(v as i64)),
        (Ty::Int, Wire::Fixed32(v)) => Ok(Value::from(v as i32)),
        (Ty::Double, Wire::Fixed64(v)) => Ok(json_number(f64::from_bits(v))),
        (Ty::Double, Wire::Fixed32(v)) => Ok(json_number(f64::from(f32::from_bits(v)))),
        (Ty::Bool, Wire::Varint(v)) => Ok(Value::Bool(v != 0)),
        (Ty::Str, Wire::Bytes(b)) => Ok(Value::String(utf8(b))),
        (Ty::Bytes, Wire::Bytes(b)) => Ok(Value::String(base64::engine::general_purpose::STANDARD.encode(b))),
        (Ty::Msg(fields) | Ty::Inline(fields), Wire::Bytes(b)) => {
            Ok(Value::Object(decode_message(b, fields, depth + 1)?))
        }
        (Ty::Map(value_ty), Wire::Bytes(b)) => decode_map_entry(b, *value_ty, depth),
        (Ty::Time, Wire::Bytes(b)) => decode_time(b, false),
        (Ty::MicroTime, Wire::Bytes(b)) => decode_time(b, true),
        (Ty::Quantity, Wire::Bytes(b)) => decode_quantity(b),
        (Ty::IntOrString, Wire::Bytes(b)) => decode_int_or_string(b),
        (Ty::RawJson, Wire::Bytes(b)) => decode_raw_json(b),
        (Ty::StrList, Wire::Bytes(b)) => decode_str_list(b),
        (Ty::SchemaOrArray | Ty::SchemaOrBool | Ty::SchemaOrStringArray, Wire::Bytes(b)) => {
            decode_schema_or(ty, b, depth + 1)
        }
        (_, w) => Err(format!("unexpected wire type {}", wire_name(&w))),
    }
}

/// A finite double as a JSON number (NaN and infinities have no JSON form, so they read as unset).
fn json_number(f: f64) -> Value {
    if f.fract() == 0.0 && f.abs() < 9.0e15 {
        return Value::from(f as i64);
    }
    serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
}

fn wire_name(w: &Wire<'_>) -> &'static str {
    match w {
        Wire::Varint(_) => "varint",
        Wire::Fixed64(_) => "fixed64",
        Wire::Bytes(_) => "length-delimited",
        Wire::Fixed32(_) => "fixed32",
    }
}

/// A map entry {1 key, 2 value} as a one-key object; a missing key or value is the proto default.
fn decode_map_entry(buf: &[u8], value_ty: Ty, depth: usize) -> Result<Value, String> {
    let mut key = String::new();
    let mut value = None;
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => key = utf8(b),
            (1, _) => return Err("map key has the wrong wire type".into()),
            (2, w) => value = Some(decode_value(value_ty, w, depth + 1)?),
            _ => {}
        }
    }
    let value = match (value, value_ty) {
        (Some(v), _) => v,
        (None, Ty::Str | Ty::Bytes) => Value::String(String::new()),
        (None, Ty::Msg(_) | Ty::SchemaOrStringArray) => Value::Object(Map::new()),
        (None, Ty::StrList) => Value::Array(Vec::new()),
        (None, _) => Value::Null,
    };
    let mut entry = Map::new();
    entry.insert(key, value);
    Ok(Value::Object(entry))
}

/// meta/v1 `Time` and `MicroTime`; an empty message is Go's zero time (`null` in JSON), so it reads as unset.
fn decode_time(buf: &[u8], micro: bool) -> Result<Value, String> {
    let (mut seconds, mut nanos) = (0i64, 0i64);
    let mut reader = Reader::new(buf);
    let mut any = false;
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => seconds = v as i64,
            (2, Wire::Varint(v)) => nanos = i64::from(v as i32),
            (1 | 2, _) => return Err("Time field has the wrong wire type".into()),
            _ => continue,
        }
        any = true;
    }
    // Go's zero time.Time (year 1) is what a marshalled zero value would carry if it were ever sent.
    const GO_ZERO_TIME_UNIX: i64 = -62_135_596_800;
    if !any || seconds == GO_ZERO_TIME_UNIX {
        return Ok(Value::Null);
    }
    let t = DateTime::from_timestamp(seconds, nanos.clamp(0, 999_999_999) as u32).ok_or("Time out of range")?;
    let format = if micro {
        "%Y-%m-%dT%H:%M:%S%.6fZ"
    } else {
        "%Y-%m-%dT%H:%M:%SZ"
    };
    Ok(Value::String(t.format(format).to_string()))
}

fn decode_quantity(buf: &[u8]) -> Result<Value, String> {
    let mut out = Value::Null;
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => out = Value::String(utf8(b)),
            (1, _) => return Err("Quantity has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(out)
}

/// intstr {1 type (0 int, 1 string), 2 intVal, 3 strVal}.
fn decode_int_or_string(buf: &[u8]) -> Result<Value, String> {
    let (mut is_string, mut int_val, mut str_val) = (false, 0i64, String::new());
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Varint(v)) => is_string = v == 1,
            (2, Wire::Varint(v)) => int_val = i64::from(v as i32),
            (3, Wire::Bytes(b)) => str_val = utf8(b),
            (1..=3, _) => return Err("IntOrString field has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(if is_string {
        Value::String(str_val)
    } else {
        Value::from(int_val)
    })
}

/// A message {1 raw}: JSON bytes as they are (an empty `raw` is Go's nil, `null` in JSON).
fn decode_raw_json(buf: &[u8]) -> Result<Value, String> {
    let mut reader = Reader::new(buf);
    let mut out = Value::Null;
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes([])) => {}
            (1, Wire::Bytes(b)) => {
                out = serde_json::from_slice(b).map_err(|e| format!("raw value is not JSON: {e}"))?
            }
            (1, _) => return Err("raw JSON has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(out)
}

/// `ExtraValue` {1 repeated items}.
fn decode_str_list(buf: &[u8]) -> Result<Value, String> {
    let mut reader = Reader::new(buf);
    let mut out = Vec::new();
    while let Some((number, wire)) = reader.field()? {
        match (number, wire) {
            (1, Wire::Bytes(b)) => out.push(Value::String(utf8(b))),
            (1, _) => return Err("ExtraValue item has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(Value::Array(out))
}

/// The `JSONSchemaPropsOr*` unions; their JSON form is whichever member is set, as their Go MarshalJSON.
fn decode_schema_or(ty: Ty, buf: &[u8], depth: usize) -> Result<Value, String> {
    let schema = |b: &[u8]| decode_message(b, tables::APIEXTENSIONS_V1_JSON_SCHEMA_PROPS, depth + 1).map(Value::Object);
    let (mut one, mut many, mut allows) = (None, Vec::new(), false);
    let mut reader = Reader::new(buf);
    while let Some((number, wire)) = reader.field()? {
        match (ty, number, wire) {
            (Ty::SchemaOrArray | Ty::SchemaOrStringArray, 1, Wire::Bytes(b))
            | (Ty::SchemaOrBool, 2, Wire::Bytes(b)) => one = Some(schema(b)?),
            (Ty::SchemaOrArray, 2, Wire::Bytes(b)) => many.push(schema(b)?),
            (Ty::SchemaOrStringArray, 2, Wire::Bytes(b)) => many.push(Value::String(utf8(b))),
            (Ty::SchemaOrBool, 1, Wire::Varint(v)) => allows = v != 0,
            (_, 1 | 2, _) => return Err("schema union member has the wrong wire type".into()),
            _ => {}
        }
    }
    Ok(match (ty, one) {
        (Ty::SchemaOrBool, Some(s)) => s,
        (Ty::SchemaOrBool, None) => Value::Bool(allows),
        (_, Some(s)) if many.is_empty() => s,
        (Ty::SchemaOrArray, None) if many.is_empty() => Value::Null,
        _ => Value::Array(many),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // A tiny encoder that writes what Go's gogo-protobuf marshaller writes, including the empty strings and
    // zero numbers of every non-pointer field.

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes(num: u64, b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3 | 2, &mut out);
        varint(b.len() as u64, &mut out);
        out.extend_from_slice(b);
        out
    }

    fn s(num: u64, v: &str) -> Vec<u8> {
        bytes(num, v.as_bytes())
    }

    fn v(num: u64, val: i64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3, &mut out);
        varint(val as u64, &mut out);
        out
    }

    fn m(num: u64, parts: &[Vec<u8>]) -> Vec<u8> {
        bytes(num, &parts.concat())
    }

    fn entry(num: u64, k: &str, val: &[u8]) -> Vec<u8> {
        m(num, &[s(1, k), bytes(2, val)])
    }

    /// ObjectMeta as kubectl's typed client sends it: all strings present, empty creationTimestamp.
    fn object_meta(name: &str, namespace: &str, labels: &[(&str, &str)]) -> Vec<u8> {
        let mut parts = vec![
            s(1, name),
            s(2, ""),
            s(3, namespace),
            s(4, ""),
            s(5, ""),
            s(6, ""),
            v(7, 0),
            m(8, &[]),
        ];
        parts.extend(labels.iter().map(|(k, val)| entry(11, k, val.as_bytes())));
        parts.concat()
    }

    fn envelope(api_version: &str, kind: &str, raw: &[u8]) -> Vec<u8> {
        let mut out = b"k8s\x00".to_vec();
        out.extend(m(1, &[s(1, api_version), s(2, kind)]));
        out.extend(bytes(2, raw));
        out.extend(s(3, ""));
        out.extend(s(4, ""));
        out
    }

    #[test]
    fn kubectl_create_namespace() {
        // kubectl create namespace t1
        let raw = [bytes(1, &object_meta("t1", "", &[])), m(2, &[]), m(3, &[s(1, "")])].concat();
        let got = decode(&envelope("v1", "Namespace", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}})
        );
    }

    #[test]
    fn kubectl_create_configmap_from_literal() {
        // kubectl create configmap c --from-literal=a=b (plus an empty value and binaryData from --from-file)
        let raw = [
            bytes(1, &object_meta("c", "", &[])),
            entry(2, "a", b"b"),
            entry(2, "empty", b""),
            entry(3, "bin", &[0xff, 0x00]),
        ]
        .concat();
        let got = decode(&envelope("v1", "ConfigMap", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"},
                   "data": {"a": "b", "empty": ""}, "binaryData": {"bin": "/wA="}})
        );
    }

    #[test]
    fn kubectl_create_secret_generic() {
        // kubectl create secret generic s --from-literal=k=v -n dev  (type left empty: the server defaults it)
        let raw = [bytes(1, &object_meta("s", "dev", &[])), entry(2, "k", b"v"), s(3, "")].concat();
        let got = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "dev"},
                   "data": {"k": "dg=="}})
        );
        // secret tls / docker-registry carry a type; immutable is a pointer so false is kept.
        let raw = [bytes(1, &object_meta("t", "", &[])), s(3, "kubernetes.io/tls"), v(5, 0)].concat();
        let got = decode(&envelope("v1", "Secret", &raw)).unwrap();
        assert_eq!(got["type"], "kubernetes.io/tls");
        assert_eq!(got["immutable"], false);
    }

    fn kubectl_container(name: &str, image: &str, extra: &[Vec<u8>]) -> Vec<u8> {
        let mut parts = vec![s(1, name), s(2, image), s(5, "")];
        parts.extend_from_slice(extra);
        parts.extend([m(8, &[]), s(13, ""), s(14, ""), v(16, 0), v(17, 0), v(18, 0), s(20, "")]);
        parts.concat()
    }

    fn kubectl_pod_spec(container: Vec<u8>) -> Vec<u8> {
        [
            bytes(2, &container),
            s(3, ""),
            s(6, ""),
            s(8, ""),
            s(9, ""),
            s(10, ""),
            v(11, 0),
            v(12, 0),
            v(13, 0),
            s(16, ""),
            s(17, ""),
            s(19, ""),
            s(24, ""),
        ]
        .concat()
    }

    #[test]
    fn kubectl_create_deployment() {
        // kubectl create deployment d --image=nginx
        let labels = [("app", "d")];
        let spec = [
            v(1, 1),
            m(2, &[entry(1, "app", b"d")]),
            m(
                3,
                &[
                    bytes(1, &object_meta("", "", &labels)),
                    bytes(2, &kubectl_pod_spec(kubectl_container("nginx", "nginx", &[]))),
                ],
            ),
            m(4, &[s(1, "")]),
            v(5, 0),
            v(7, 0),
        ];
        let status = m(3, &[v(1, 0), v(2, 0), v(3, 0), v(4, 0), v(5, 0), v(7, 0)]);
        let raw = [bytes(1, &object_meta("d", "", &labels)), m(2, &spec), status].concat();
        let got = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "d", "labels": {"app": "d"}},
                   "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                            "template": {"metadata": {"labels": {"app": "d"}},
                                         "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}})
        );
    }

    #[test]
    fn deployment_with_zero_replicas_port_and_resources() {
        // kubectl create deployment d --image=nginx:1 --replicas=0 --port=80, plus limits and a rolling update
        let port = m(6, &[s(1, ""), v(2, 0), v(3, 80), s(4, ""), s(5, "")]);
        let container = [
            s(1, "nginx"),
            s(2, "nginx:1"),
            port,
            m(8, &[m(1, &[s(1, "cpu"), m(2, &[s(1, "500m")])])]),
            m(7, &[s(1, "A"), s(2, "")]),
        ]
        .concat();
        let strategy = m(
            4,
            &[
                s(1, "RollingUpdate"),
                m(
                    2,
                    &[
                        m(1, &[v(1, 0), v(2, 0), s(3, "")]),
                        m(2, &[v(1, 1), v(2, 0), s(3, "25%")]),
                    ],
                ),
            ],
        );
        let spec = [v(1, 0), m(3, &[bytes(2, &kubectl_pod_spec(container))]), strategy].concat();
        let raw = [bytes(1, &object_meta("d", "", &[])), bytes(2, &spec)].concat();
        let got = decode(&envelope("apps/v1", "Deployment", &raw)).unwrap();
        assert_eq!(got["spec"]["replicas"], 0);
        let c = &got["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(c["ports"], json!([{"containerPort": 80}]));
        assert_eq!(c["resources"], json!({"limits": {"cpu": "500m"}}));
        assert_eq!(c["env"], json!([{"name": "A"}]));
        assert_eq!(
            got["spec"]["strategy"],
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "25%"}})
        );
    }

    #[test]
    fn service_account_and_ssar() {
        let raw = bytes(1, &object_meta("bot", "ns", &[]));
        let got = decode(&envelope("v1", "ServiceAccount", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bot", "namespace": "ns"}})
        );

        // kubectl auth can-i list pods -n default
        let attrs = [
            s(1, "default"),
            s(2, "list"),
            s(3, ""),
            s(4, ""),
            s(5, "pods"),
            s(6, ""),
            s(7, ""),
        ]
        .concat();
        let raw = [
            bytes(1, &object_meta("", "", &[])),
            m(2, &[bytes(1, &attrs)]),
            m(3, &[v(1, 0), s(2, ""), s(3, ""), v(4, 0)]),
        ]
        .concat();
        let got = decode(&envelope("authorization.k8s.io/v1", "SelfSubjectAccessReview", &raw)).unwrap();
        // `allowed` has no omitempty in Go, so its JSON form carries it even when false.
        assert_eq!(
            got,
            json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                   "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}},
                   "status": {"allowed": false}})
        );
    }

    #[test]
    fn metadata_fields() {
        let meta = [
            s(1, "x"),
            s(2, "gen-"),
            v(7, 3),
            m(8, &[v(1, 1_795_000_000)]),
            entry(12, "note", b"hello"),
            m(13, &[s(1, "App"), s(3, "web"), s(4, "u1"), s(5, "demo/v1"), v(6, 1)]),
            s(14, "demo.example.com/cleanup"),
            m(17, &[s(1, "kubectl"), s(2, "Apply"), m(7, &[s(1, "{\"f:data\":{}}")])]),
        ]
        .concat();
        let got = decode(&envelope("v1", "ConfigMap", &bytes(1, &meta))).unwrap();
        let md = &got["metadata"];
        assert_eq!(md["generateName"], "gen-");
        assert_eq!(md["generation"], 3);
        assert_eq!(md["creationTimestamp"], "2026-11-18T11:06:40Z");
        assert_eq!(md["annotations"], json!({"note": "hello"}));
        assert_eq!(
            md["ownerReferences"],
            json!([{"kind": "App", "name": "web", "uid": "u1", "apiVersion": "demo/v1", "controller": true}])
        );
        assert_eq!(md["finalizers"], json!(["demo.example.com/cleanup"]));
        assert_eq!(
            md["managedFields"],
            json!([{"manager": "kubectl", "operation": "Apply", "fieldsV1": {"f:data": {}}}])
        );
    }

    #[test]
    fn rbac_keeps_empty_strings_inside_lists() {
        // kubectl create role r --verb=get --resource=pods: apiGroups [""] means the core group.
        let rule = m(2, &[s(1, "get"), s(2, ""), s(3, "pods")]);
        let raw = [bytes(1, &object_meta("r", "", &[])), rule].concat();
        let got = decode(&envelope("rbac.authorization.k8s.io/v1", "Role", &raw)).unwrap();
        assert_eq!(
            got["rules"],
            json!([{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}])
        );
    }

    #[test]
    fn negative_and_unknown_fields() {
        // A negative int64 (10-byte varint) and a field number no table knows are both fine.
        let mut fixed = Vec::new();
        varint(97 << 3 | 5, &mut fixed);
        fixed.extend([0; 4]);
        varint(96 << 3 | 1, &mut fixed);
        fixed.extend([0; 8]);
        let raw = [
            bytes(1, &object_meta("p", "", &[])),
            m(2, &[v(4, -1)]),
            v(99, 5),
            m(98, &[]),
            fixed,
        ]
        .concat();
        let got = decode(&envelope("v1", "Pod", &raw)).unwrap();
        assert_eq!(got["spec"]["terminationGracePeriodSeconds"], -1);
    }

    #[test]
    fn unknown_kind_is_415() {
        let err = decode(&envelope("v1", "Node", &[])).unwrap_err();
        assert_eq!(err.code, 415);
        assert!(err.message.contains("Node"), "{}", err.message);
    }

    #[test]
    fn gzip_content_encoding_is_415() {
        let mut body = b"k8s\x00".to_vec();
        body.extend(m(1, &[s(1, "v1"), s(2, "ConfigMap")]));
        body.extend(s(3, "gzip"));
        assert_eq!(decode(&body).unwrap_err().code, 415);
    }

    #[test]
    fn garbage_is_400() {
        let cases: Vec<Vec<u8>> = vec![
            b"{\"kind\":\"Namespace\"}".to_vec(),
            b"k8s".to_vec(),
            b"k8s\x00".to_vec(),
            [b"k8s\x00".as_slice(), &[0x0a, 0x50, 0x01]].concat(),
            [b"k8s\x00".as_slice(), &[0xff; 11]].concat(),
            [b"k8s\x00".as_slice(), &[0x0b]].concat(),
            [b"k8s\x00".as_slice(), &[0x00, 0x01]].concat(),
            envelope("v1", "Namespace", &[0x0a, 0x05, 0x0a]),
            envelope("v1", "Namespace", &v(1, 7)),
            envelope("v1", "ConfigMap", &m(1, &[m(17, &[m(7, &[s(1, "not json")])])])),
            [
                b"k8s\x00".as_slice(),
                &[0x12, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f],
            ]
            .concat(),
        ];
        for body in cases {
            let err = decode(&body).unwrap_err();
            assert_eq!(err.code, 400, "{body:?}: {}", err.message);
            assert_eq!(err.reason, "BadRequest");
        }
    }

    fn unhex(h: &str) -> Vec<u8> {
        (0..h.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bodies captured from kubectl 1.32.4 against a recording HTTP listener.
    #[test]
    fn real_kubectl_1_32_bodies() {
        let cases = [
            (
                "6b3873000a0f0a02763112094e616d657370616365121a0a120a02743112001a0022002a0032003800420012001a020a001a002200",
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "t1"}}),
            ),
            (
                "6b3873000a0f0a0276311209436f6e6669674d6170121b0a110a016312001a0022002a0032003800420012060a01611201621a002200",
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}}),
            ),
            (
                "6b3873000a0c0a0276311206536563726574121d0a110a017312001a0022002a0032003800420012060a016b1201761a001a002200",
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}}),
            ),
            (
                concat!(
                    "6b3873000a150a07617070732f7631120a4465706c6f796d656e7412a3010a1b0a016412001a0022002a003200380042",
                    "005a080a0361707012016412760801120a0a080a036170701201641a5e0a1a0a0012001a0022002a00320038004200",
                    "5a080a03617070120164124012220a056e67696e7812056e67696e782a0042006a00720080010088010090010",
                    "0a201001a00320042004a0052005800600068008201008a01009a0100c2010022020a00280038001a0c080010001800",
                    "2000280038001a002200"
                ),
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {"app": "d"}},
                       "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "d"}},
                                "template": {"metadata": {"labels": {"app": "d"}},
                                             "spec": {"containers": [{"name": "nginx", "image": "nginx"}]}}}}),
            ),
            (
                concat!(
                    "6b3873000a320a17617574686f72697a6174696f6e2e6b38732e696f2f7631121753656c665375626a656374416363",
                    "657373526576696577123d0a100a0012001a0022002a00320038004200121f0a1d0a0764656661756c7412046c6973",
                    "741a0022002a04706f647332003a001a08080012001a0020001a002200"
                ),
                json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "metadata": {},
                       "spec": {"resourceAttributes": {"namespace": "default", "verb": "list", "resource": "pods"}},
                       "status": {"allowed": false}}),
            ),
        ];
        for (hex, want) in cases {
            assert_eq!(decode(&unhex(hex)).unwrap(), want);
        }
    }

    /// Helm's release-Secret DELETE (client-go typed client): an empty DeleteOptions under apiVersion v1.
    #[test]
    fn helm_delete_options() {
        let got = decode(&unhex("6b3873000a130a027631120d44656c6574654f7074696f6e7312001a002200")).unwrap();
        assert_eq!(got, json!({"apiVersion": "v1", "kind": "DeleteOptions"}));
        let raw = [
            v(1, 0),
            m(2, &[s(1, "u-1"), s(2, "42")]),
            s(4, "Foreground"),
            s(5, "All"),
        ]
        .concat();
        let got = decode(&envelope("apps/v1", "DeleteOptions", &raw)).unwrap();
        assert_eq!(
            got,
            json!({"apiVersion": "apps/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "preconditions": {"uid": "u-1", "resourceVersion": "42"},
                   "propagationPolicy": "Foreground", "dryRun": ["All"]})
        );
    }

    fn fixed64(num: u64, f: f64) -> Vec<u8> {
        let mut out = Vec::new();
        varint(num << 3 | 1, &mut out);
        out.extend(f.to_le_bytes());
        out
    }

    #[test]
    fn crd_schemas_nest_and_keep_their_unions() {
        let leaf = [
            s(5, "integer"),
            fixed64(9, 10.0),
            fixed64(11, 0.5),
            bytes(8, &s(1, "3")),
        ]
        .concat();
        let props = [
            entry(29, "replicas", &leaf),
            entry(
                29,
                "tags",
                &[s(5, "array"), m(24, &[bytes(1, &s(5, "string"))])].concat(),
            ),
            entry(29, "labels", &[s(5, "object"), m(30, &[v(1, 1)])].concat()),
            v(38, 1),
        ]
        .concat();
        let spec_schema = [s(5, "object"), props].concat();
        let root = [s(5, "object"), entry(29, "spec", &spec_schema)].concat();
        let version = [s(1, "v1"), v(2, 1), v(3, 1), m(4, &[bytes(1, &root)])].concat();
        let names = [s(1, "widgets"), s(4, "Widget")].concat();
        let spec = [
            s(1, "example.com"),
            bytes(3, &names),
            s(4, "Namespaced"),
            bytes(7, &version),
        ]
        .concat();
        let raw = [bytes(1, &object_meta("widgets.example.com", "", &[])), bytes(2, &spec)].concat();
        let got = decode(&envelope("apiextensions.k8s.io/v1", "CustomResourceDefinition", &raw)).unwrap();
        let schema = &got["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            schema["properties"]["replicas"],
            json!({"type": "integer", "maximum": 10, "minimum": 0.5, "default": 3})
        );
        assert_eq!(schema["properties"]["tags"]["items"], json!({"type": "string"}));
        assert_eq!(schema["properties"]["labels"]["additionalProperties"], true);
        assert_eq!(schema["x-kubernetes-preserve-unknown-fields"], true);
        assert_eq!(got["spec"]["names"], json!({"plural": "widgets", "kind": "Widget"}));
        assert_eq!(got["spec"]["versions"][0]["served"], true);
    }

    #[test]
    fn lease_micro_times_and_packed_repeated_integers() {
        let lease = [
            s(1, "holder"),
            v(2, 15),
            m(3, &[v(1, 1_795_000_000), v(2, 123_456_000)]),
        ]
        .concat();
        let got = decode(&envelope(
            "coordination.k8s.io/v1",
            "Lease",
            &[bytes(1, &object_meta("l", "", &[])), bytes(2, &lease)].concat(),
        ))
        .unwrap();
        assert_eq!(
            got["spec"],
            json!({"holderIdentity": "holder", "leaseDurationSeconds": 15, "acquireTime": "2026-11-18T11:06:40.123456Z"})
        );
        // supplementalGroups []int64, packed as a proto3 writer would.
        let mut packed = Vec::new();
        for g in [1000u64, 2000] {
            varint(g, &mut packed);
        }
        let spec = [m(2, &[s(1, "c")]), m(14, &[bytes(4, &packed)])].concat();
        let got = decode(&envelope(
            "v1",
            "Pod",
            &[bytes(1, &object_meta("p", "", &[])), bytes(2, &spec)].concat(),
        ))
        .unwrap();
        assert_eq!(
            got["spec"]["securityContext"]["supplementalGroups"],
            json!([1000, 2000])
        );
    }

    proptest::proptest! {
        #[test]
        fn decode_never_panics(body in proptest::collection::vec(proptest::num::u8::ANY, 0..256)) {
            let _ = decode(&body);
            let _ = decode(&[b"k8s\x00".as_slice(), &body].concat());
        }

        #[test]
        fn decode_never_panics_inside_known_kinds(raw in proptest::collection::vec(proptest::num::u8::ANY, 0..256),
                                                  k in 0usize..4) {
            let (api, kind) = [("v1", "Namespace"), ("v1", "Secret"), ("apps/v1", "Deployment"), ("batch/v1", "CronJob")][k];
            let _ = decode(&envelope(api, kind, &raw));
        }
    }
}
