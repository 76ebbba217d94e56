//! Server-side-apply field ownership: `metadata.managedFields[].fieldsV1` parsed into a tree of path
//! elements (structured-merge-diff's `fieldpath.Set` serialization: `f:<field>`, `k:<json keys>`,
//! `v:<json value>`, `i:<index>`, and `.` for "this element itself").
//!
//! Used twice by the diff: fields the `capstan` applier owns but Git no longer has (SSA will remove them →
//! OutOfSync), and `ignoreDifferences.managedFieldsManagers` (fields owned by trusted managers are ignored,
//! as Argo CD's `managedfields.Normalize`).

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::normalize::{equivalent_scalar, MAX_DEPTH};

/// One step of a managed-fields path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PathElement {
    /// `f:<name>`: a field of a map/struct.
    Field(String),
    /// `k:{"name":"app"}`: a list-map item by its key fields (stored as canonical JSON text).
    Key(String),
    /// `v:<json>`: a set-list item by value (stored as canonical JSON text).
    Value(String),
    /// `i:<n>`: a list item by position.
    Index(usize),
}

/// A set of owned fields: `own` is the `.` marker (the element itself is owned), `children` the owned
/// descendants. A node with no children is a leaf: the whole value at that path is owned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    pub own: bool,
    pub children: BTreeMap<PathElement, FieldSet>,
}

impl FieldSet {
    /// Parses a `fieldsV1` object; unknown or malformed entries are skipped, never a panic.
    pub fn from_fields_v1(v: &Value) -> FieldSet {
        parse_node(v, 0)
    }

    /// Whether this node owns the whole value at its path (no finer-grained children).
    pub fn is_leaf(&self) -> bool {
        self.children.is_empty()
    }

    /// Adds every path of `other` to `self`.
    pub fn union(&mut self, other: &FieldSet) {
        self.own |= other.own;
        for (k, child) in &other.children {
            self.children.entry(k.clone()).or_default().union(child);
        }
    }

    /// The child node for `elem`, if owned.
    pub fn child(&self, elem: &PathElement) -> Option<&FieldSet> {
        self.children.get(elem)
    }
}

fn parse_node(v: &Value, depth: usize) -> FieldSet {
    let mut set = FieldSet::default();
    let Some(map) = v.as_object() else {
        return set;
    };
    if depth > MAX_DEPTH {
        return set;
    }
    for (k, child) in map {
        if k == "." {
            set.own = true;
            continue;
        }
        if let Some(elem) = parse_element(k) {
            set.children
                .entry(elem)
                .or_default()
                .union(&parse_node(child, depth + 1));
        }
    }
    set
}

/// Parses one `fieldsV1` key.
pub fn parse_element(k: &str) -> Option<PathElement> {
    let (prefix, rest) = k.split_once(':')?;
    match prefix {
        "f" => Some(PathElement::Field(rest.to_string())),
        "k" => {
            let keys: Map<String, Value> = serde_json::from_str(rest).ok()?;
            Some(PathElement::Key(canonical_json(&Value::Object(keys))))
        }
        "v" => {
            let value: Value = serde_json::from_str(rest).ok()?;
            Some(PathElement::Value(canonical_json(&value)))
        }
        "i" => rest.parse().ok().map(PathElement::Index),
        _ => None,
    }
}

/// JSON text with sorted object keys, so equal values compare equal as strings.
fn canonical_json(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let sorted: BTreeMap<&String, Value> = m.iter().map(|(k, v)| (k, sort(v))).collect();
                Value::Object(sorted.into_iter().map(|(k, v)| (k.clone(), v)).collect())
            }
            other => other.clone(),
        }
    }
    serde_json::to_string(&sort(v)).unwrap_or_default()
}

/// The union of the field sets of every `managedFields` entry of `live` accepted by `pick(manager,
/// operation)`.
pub fn owned_by(live: &Value, pick: impl Fn(&str, &str) -> bool) -> FieldSet {
    let mut set = FieldSet::default();
    let entries = live.pointer("/metadata/managedFields").and_then(Value::as_array);
    for entry in entries.into_iter().flatten() {
        let manager = entry.get("manager").and_then(Value::as_str).unwrap_or_default();
        let operation = entry.get("operation").and_then(Value::as_str).unwrap_or_default();
        if !pick(manager, operation) {
            continue;
        }
        if let Some(fields) = entry.get("fieldsV1") {
            set.union(&FieldSet::from_fields_v1(fields));
        }
    }
    set
}

/// The position in `v` designated by `elem`: a map key or list indexes (a `k:`/`v:` element may match
/// several items of a malformed list). Key fields missing from an item match when absent (Git often omits
/// defaulted key fields such as a port's `protocol: TCP`).
pub fn locate(v: &Value, elem: &PathElement) -> Vec<Locator> {
    match (elem, v) {
        (PathElement::Field(name), Value::Object(m)) if m.contains_key(name) => vec![Locator::Key(name.clone())],
        (PathElement::Index(i), Value::Array(a)) if *i < a.len() => vec![Locator::Index(*i)],
        (PathElement::Key(keys), Value::Array(a)) => {
            let Ok(Value::Object(keys)) = serde_json::from_str::<Value>(keys) else {
                return Vec::new();
            };
            (0..a.len())
                .filter(|&i| item_has_keys(&a[i], &keys))
                .map(Locator::Index)
                .collect()
        }
        (PathElement::Value(text), Value::Array(a)) => (0..a.len())
            .filter(|&i| canonical_json(&a[i]) == *text)
            .map(Locator::Index)
            .collect(),
        _ => Vec::new(),
    }
}

fn item_has_keys(item: &Value, keys: &Map<String, Value>) -> bool {
    let Some(obj) = item.as_object() else {
        return false;
    };
    let mut matched_any = false;
    for (k, want) in keys {
        match obj.get(k) {
            Some(have) if equivalent_scalar(want, have) => matched_any = true,
            Some(_) => return false,
            None => {}
        }
    }
    matched_any || keys.is_empty()
}

/// A position inside a JSON value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Locator {
    Key(String),
    Index(usize),
}

impl Locator {
    pub fn get<'a>(&self, v: &'a Value) -> Option<&'a Value> {
        match self {
            Locator::Key(k) => v.get(k),
            Locator::Index(i) => v.get(*i),
        }
    }

    pub fn get_mut<'a>(&self, v: &'a mut Value) -> Option<&'a mut Value> {
        match self {
            Locator::Key(k) => v.get_mut(k),
            Locator::Index(i) => v.get_mut(*i),
        }
    }

    /// JSON pointer token (RFC 6901 escaped).
    pub fn token(&self) -> String {
        match self {
            Locator::Key(k) => k.replace('~', "~0").replace('/', "~1"),
            Locator::Index(i) => i.to_string(),
        }
    }
}

/// Removes `locs` from `v` (list indexes highest first so the others stay valid).
pub fn remove_all(v: &mut Value, locs: &[Locator]) {
    let mut indexes: Vec<usize> = Vec::new();
    for loc in locs {
        match (loc, &mut *v) {
            (Locator::Key(k), Value::Object(m)) => {
                m.remove(k);
            }
            (Locator::Index(i), Value::Array(_)) => indexes.push(*i),
            _ => {}
        }
    }
    indexes.sort_unstable();
    indexes.dedup();
    if let Value::Array(a) = v {
        for i in indexes.into_iter().rev() {
            if i < a.len() {
                a.remove(i);
            }
        }
    }
}

/// Removes from `v` every value owned by `set` (leaves only: a node with children is descended, never
/// removed whole, so fields other managers own inside it survive). Mirrors the effect of Argo CD's
/// `managedFieldsManagers`: the trusted manager's fields take no part in the comparison.
pub fn remove_owned(v: &mut Value, set: &FieldSet, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut leaves: Vec<Locator> = Vec::new();
    for (elem, child) in &set.children {
        let locs = locate(v, elem);
        if child.is_leaf() {
            leaves.extend(locs);
            continue;
        }
        for loc in locs {
            if let Some(sub) = loc.get_mut(v) {
                remove_owned(sub, child, depth + 1);
            }
        }
    }
    remove_all(v, &leaves);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn parses_fields_v1() {
        let f = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:template": {"f:spec": {"f:containers": {
                    "k:{\"name\":\"web\"}": {".": {}, "f:image": {}, "f:ports": {
                        "k:{\"protocol\":\"TCP\",\"containerPort\":80}": {".": {}, "f:containerPort": {}}
                    }}
                }}}
            },
            "f:finalizers": {"v:\"x\"": {}},
            "i:3": {},
            "bogus": {},
            "k:not json": {}
        });
        let set = FieldSet::from_fields_v1(&f);
        let spec = set.child(&PathElement::Field("spec".into())).unwrap();
        assert!(spec.child(&PathElement::Field("replicas".into())).unwrap().is_leaf());
        let labels = set
            .child(&PathElement::Field("metadata".into()))
            .and_then(|m| m.child(&PathElement::Field("labels".into())))
            .unwrap();
        assert!(labels.own && !labels.is_leaf());
        assert!(set.child(&PathElement::Index(3)).is_some());
        assert_eq!(set.children.len(), 4);
    }

    #[test]
    fn key_elements_are_order_insensitive_and_lenient_on_missing_defaults() {
        let a = parse_element("k:{\"protocol\":\"TCP\",\"containerPort\":80}").unwrap();
        let b = parse_element("k:{\"containerPort\":80,\"protocol\":\"TCP\"}").unwrap();
        assert_eq!(a, b);
        let ports = json!([{"containerPort": 8080}, {"containerPort": 80}]);
        assert_eq!(locate(&ports, &a), vec![Locator::Index(1)]);
    }

    #[test]
    fn removes_owned_leaves_only() {
        let mut obj = json!({"spec": {"replicas": 3, "paused": false, "list": [{"name": "a", "x": 1, "y": 2}]}});
        let set = FieldSet::from_fields_v1(&json!({"f:spec": {"f:replicas": {}, "f:list": {
            "k:{\"name\":\"a\"}": {".": {}, "f:x": {}}
        }}}));
        remove_owned(&mut obj, &set, 0);
        assert_eq!(obj, json!({"spec": {"paused": false, "list": [{"name": "a", "y": 2}]}}));
    }

    #[test]
    fn malformed_managed_fields_never_panic() {
        for live in [
            json!({"metadata": {"managedFields": "x"}}),
            json!({"metadata": {"managedFields": [1, null, {"manager": 5, "fieldsV1": []}]}}),
            json!({"metadata": {"managedFields": [{"manager": "capstan", "operation": "Apply", "fieldsV1": {"f:a": 7}}]}}),
        ] {
            let set = owned_by(&live, |_, _| true);
            let mut v = live.clone();
            remove_owned(&mut v, &set, 0);
        }
    }
}
