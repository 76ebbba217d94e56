//! Normalization of desired and live objects before comparison (Argo CD's diff normalizers): server-owned metadata and `status` dropped, Secret `stringData` folded
//! into `data`, and the scalar equivalences the API server introduces (quantities, numbers vs numeric
//! strings, zero values that `omitempty` drops).

use base64::Engine as _;
use serde_json::{Map, Value};

use super::quantity;

/// Deepest nesting walked by any recursive function of the diff; deeper values are compared whole.
/// (Kubernetes objects nest ~20 levels; serde_json's own parser stops at 128.)
pub const MAX_DEPTH: usize = 100;

/// The annotation `kubectl apply` writes with the whole applied object: never compared, never shown.
pub const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Metadata the API server writes: never part of a comparison (Argo CD ignores `generation`,
/// `resourceVersion` and `managedFields` always, and its diff never shows the others).
const SERVER_METADATA: [&str; 8] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "generation",
    "creationTimestamp",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Maps whose values are user data: compared strictly (no zero-value or number/string folding).
const DATA_MAPS: [&str; 5] = ["data", "stringData", "binaryData", "labels", "annotations"];

/// Map fields whose values are quantities (`resources.{limits,requests}`, PV `capacity`, ResourceQuota
/// `hard`, LimitRange `max/min/default/defaultRequest/maxLimitRequestRatio`, PodSpec `overhead`).
const QUANTITY_MAPS: [&str; 10] = [
    "limits",
    "requests",
    "capacity",
    "allocatable",
    "hard",
    "overhead",
    "max",
    "min",
    "default",
    "defaultRequest",
];

/// Fields that are quantities themselves (emptyDir `sizeLimit`, PVC `storage`, autoscaling/v2beta targets,
/// LimitRange `maxLimitRequestRatio`).
const QUANTITY_FIELDS: [&str; 5] = [
    "sizeLimit",
    "storage",
    "targetAverageValue",
    "targetValue",
    "maxLimitRequestRatio",
];

/// Fields of an autoscaling/v2 metric `target` that are quantities.
const TARGET_QUANTITY_FIELDS: [&str; 2] = ["value", "averageValue"];

/// Where a value sits: its own key and its parent's key, enough for the positional rules.
#[derive(Clone, Copy, Debug, Default)]
pub struct Ctx<'a> {
    pub key: Option<&'a str>,
    pub parent: Option<&'a str>,
}

impl<'a> Ctx<'a> {
    /// The context of a child at `key` below this one.
    pub fn child(self, key: &'a str) -> Ctx<'a> {
        Ctx {
            key: Some(key),
            parent: self.key,
        }
    }

    /// The context of a list item: items keep the list's key, so `ports[0]` is still "inside ports".
    pub fn item(self) -> Ctx<'a> {
        self
    }

    /// Inside user data (`data`, `labels`, ...): strict comparison.
    pub fn in_data_map(self) -> bool {
        self.parent.is_some_and(|p| DATA_MAPS.contains(&p))
    }

    fn is_quantity_position(self) -> bool {
        self.parent.is_some_and(|p| QUANTITY_MAPS.contains(&p))
            || self.key.is_some_and(|k| QUANTITY_FIELDS.contains(&k))
            || (self.parent == Some("target") && self.key.is_some_and(|k| TARGET_QUANTITY_FIELDS.contains(&k)))
    }
}

/// The normalized copy of an object: `status` dropped (Argo CD's default `ignoreResourceStatusField: all`),
/// server metadata and the last-applied annotation removed, empty `labels`/`annotations` dropped, Secret
/// `stringData` folded into `data`.
pub fn normalize(obj: &Value) -> Value {
    let mut out = obj.clone();
    let Some(map) = out.as_object_mut() else {
        return out;
    };
    map.remove("status");
    if let Some(Value::Object(meta)) = map.get_mut("metadata") {
        for k in SERVER_METADATA {
            meta.remove(k);
        }
        if let Some(Value::Object(ann)) = meta.get_mut("annotations") {
            ann.remove(LAST_APPLIED);
        }
        for k in ["annotations", "labels"] {
            if meta
                .get(k)
                .is_some_and(|v| v.is_null() || v.as_object().is_some_and(Map::is_empty))
            {
                meta.remove(k);
            }
        }
    }
    if is_secret(&out) {
        fold_string_data(&mut out);
    }
    out
}

/// Whether `obj` is a core `Secret` (apiVersion `v1`).
pub fn is_secret(obj: &Value) -> bool {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    obj.get("kind").and_then(Value::as_str) == Some("Secret") && !api_version.contains('/')
}

/// Moves Secret `stringData` into `data`, base64-encoding string values; non-string values are copied as
/// they are (so they are still masked and the apply still fails) — gitops-engine `normalizeSecret`
/// after the GHSA-47g2 fix. A `stringData` that is not a map is moved whole.
pub fn fold_string_data(obj: &mut Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(string_data) = map.remove("stringData") else {
        return;
    };
    let Value::Object(entries) = string_data else {
        if !string_data.is_null() {
            map.insert("data".into(), string_data);
        }
        return;
    };
    if entries.is_empty() {
        return;
    }
    let data = map.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    if let Value::Object(data) = data {
        for (k, v) in entries {
            let folded = match v {
                Value::String(s) => Value::String(base64::engine::general_purpose::STANDARD.encode(s)),
                other => other,
            };
            data.insert(k, folded);
        }
    }
}

/// Scalar equality as the API server sees it, position-independent: identical values, equal numbers
/// (`1` vs `1.0`), and a number vs its decimal string (`containerPort: "80"` vs `80`, int-or-string
/// `targetPort`/`maxSurge`).
pub fn equivalent_scalar(a: &Value, b: &Value) -> bool {
    if a == b {
        return true;
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Number(n), Value::String(s)) | (Value::String(s), Value::Number(n)) => {
            let s = s.trim();
            !s.is_empty() && s.parse::<serde_json::Number>().is_ok_and(|m| numbers_equal(n, &m))
        }
        _ => false,
    }
}

fn numbers_equal(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    matches!((x.as_f64(), y.as_f64()), (Some(a), Some(b)) if a == b)
}

/// Scalar equality at a position: [`equivalent_scalar`] outside user data, plus quantity equality at
/// quantity positions (`cpu: 1000m` vs `cpu: "1"`). Inside `data`/`labels`/... only identical values match.
pub fn equivalent_at(ctx: Ctx<'_>, desired: &Value, live: &Value) -> bool {
    if ctx.in_data_map() {
        return desired == live;
    }
    equivalent_scalar(desired, live) || (ctx.is_quantity_position() && quantity::equal(desired, live))
}

/// Whether a desired value means the same as an absent live field: `null`, `{}`, `[]`, maps of such, and
/// (outside user data) the zero values `false`, `0`, `""` that Go's `omitempty` drops, so the server never
/// stores them (Argo CD reaches the same result by re-marshalling known types).
pub fn absent_equivalent(ctx: Ctx<'_>, v: &Value, depth: usize) -> bool {
    if depth > MAX_DEPTH {
        return false;
    }
    match v {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.iter().all(|(k, v)| absent_equivalent(ctx.child(k), v, depth + 1)),
        _ if ctx.in_data_map() => false,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn drops_server_fields() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u", "resourceVersion": "1", "generation": 2,
                "creationTimestamp": "t", "managedFields": [], "annotations": {LAST_APPLIED: "{}"}},
            "status": {"x": 1}, "data": {"a": "b"}});
        assert_eq!(
            normalize(&live),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"a": "b"}})
        );
        assert_eq!(normalize(&json!("scalar")), json!("scalar"));
    }

    #[test]
    fn folds_string_data_including_invalid_values() {
        let s = json!({"apiVersion": "v1", "kind": "Secret", "data": {"k3": false},
            "stringData": {"k": "v", "n": 5}});
        assert_eq!(
            normalize(&s),
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"k3": false, "k": "dg==", "n": 5}})
        );
        let odd = json!({"apiVersion": "v1", "kind": "Secret", "data": "x", "stringData": {"k": "v"}});
        assert_eq!(normalize(&odd)["data"], json!({"k": "dg=="}));
    }

    #[test]
    fn scalar_equivalences() {
        assert!(equivalent_scalar(&json!(80), &json!("80")));
        assert!(equivalent_scalar(&json!(1), &json!(1.0)));
        assert!(!equivalent_scalar(&json!("25%"), &json!(25)));
        assert!(!equivalent_scalar(&json!(true), &json!("true")));
        let cpu = Ctx::default().child("limits").child("cpu");
        assert!(equivalent_at(cpu, &json!("1000m"), &json!("1")));
        let data = Ctx::default().child("data").child("k");
        assert!(!equivalent_at(data, &json!("1000m"), &json!("1")));
        assert!(!equivalent_at(data, &json!(80), &json!("80")));
        let image = Ctx::default().child("spec").child("image");
        assert!(!equivalent_at(image, &json!("1k"), &json!("1000")));
    }

    #[test]
    fn absent_equivalents() {
        let c = Ctx::default().child("spec").child("x");
        for v in [
            json!(null),
            json!({}),
            json!([]),
            json!({"a": {}}),
            json!(false),
            json!(0),
            json!(""),
        ] {
            assert!(absent_equivalent(c, &v, 0), "{v}");
        }
        for v in [json!([1]), json!(true), json!("a"), json!({"a": 1})] {
            assert!(!absent_equivalent(c, &v, 0), "{v}");
        }
        let label = Ctx::default().child("labels").child("team");
        assert!(!absent_equivalent(label, &json!(""), 0));
    }
}
