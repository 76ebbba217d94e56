//! Schema-driven walks over object values: which fields a configuration sets, how two versions of
//! an object differ, how an applied configuration merges into the live object, and which previously applied
//! fields an apply removes. Every walk classifies a value with [`shape`], so all of them agree on what is a
//! leaf (scalars, atomic lists and maps), a granular map, a set, or a list-map.
//!
//! Callers bound the nesting depth first ([`depth`] against [`MAX_DEPTH`]), which bounds the recursion here.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Map, Value};

use super::fieldset::{field_pe, key_pe, render_path, value_pe, FieldSet};
use crate::schema::{key_default, FieldSchema, ListType};

/// Deepest nesting accepted from clients; keeps every recursive walk well inside the stack.
pub const MAX_DEPTH: usize = 100;

/// Nesting depth of a value, computed without recursion so that hostile input cannot overflow the stack.
pub fn depth(v: &Value) -> usize {
    let mut max = 0;
    let mut stack = vec![(v, 1usize)];
    while let Some((v, d)) = stack.pop() {
        max = max.max(d);
        match v {
            Value::Object(m) => stack.extend(m.values().map(|c| (c, d + 1))),
            Value::Array(a) => stack.extend(a.iter().map(|c| (c, d + 1))),
            _ => {}
        }
    }
    max
}

/// Fields the server sets itself; they never enter a field set and an apply never changes them.
pub fn untracked(path: &[&str]) -> bool {
    match path {
        ["apiVersion"] | ["kind"] => true,
        ["metadata", f] => matches!(
            *f,
            "name"
                | "namespace"
                | "uid"
                | "resourceVersion"
                | "generation"
                | "creationTimestamp"
                | "deletionTimestamp"
                | "deletionGracePeriodSeconds"
                | "managedFields"
                | "generateName"
                | "selfLink"
        ),
        _ => false,
    }
}

/// The untracked fields of `obj` alone: the starting point when an apply creates the object.
pub fn untracked_part(obj: &Value) -> Value {
    let mut out = Map::new();
    let Value::Object(m) = obj else {
        return Value::Object(out);
    };
    for key in ["apiVersion", "kind"] {
        if let Some(v) = m.get(key) {
            out.insert(key.into(), v.clone());
        }
    }
    let mut meta = Map::new();
    if let Some(Value::Object(md)) = m.get("metadata") {
        for (k, v) in md {
            if untracked(&["metadata", k]) && k != "managedFields" {
                meta.insert(k.clone(), v.clone());
            }
        }
    }
    out.insert("metadata".into(), Value::Object(meta));
    Value::Object(out)
}

/// Drop `null` map values: in an applied configuration `null` means "not specified".
pub fn strip_nulls(v: &mut Value) {
    match v {
        Value::Object(m) => {
            m.retain(|_, c| !c.is_null());
            m.values_mut().for_each(strip_nulls);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_nulls),
        _ => {}
    }
}

fn child_path<'p>(path: &[&'p str], name: &'p str) -> Vec<&'p str> {
    let mut p = path.to_vec();
    p.push(name);
    p
}

/// How a value merges and is owned.
pub enum Shape<'v> {
    /// Scalars, atomic lists and atomic maps: replaced and owned whole.
    Leaf,
    /// Granular maps and structs: merged and owned key by key.
    Map(&'v Map<String, Value>),
    /// `listType: set`: items identified by value (`v:`), duplicates collapsed.
    Set(Vec<(String, &'v Value)>),
    /// `listType: map`: items identified by their key fields (`k:`).
    Assoc(Vec<(String, &'v Value)>),
}

/// Classify `v` at `path`. A list-map whose items cannot all be keyed (missing key, duplicate, non-object
/// item) degrades to a leaf, so stored data the server did not validate never makes a walk fail.
pub fn shape<'v>(schema: &dyn FieldSchema, path: &[&str], v: &'v Value) -> Shape<'v> {
    match v {
        Value::Object(m) if !schema.map_is_atomic(path) => Shape::Map(m),
        Value::Array(items) => match schema.list_type(path) {
            ListType::Atomic => Shape::Leaf,
            ListType::Set => Shape::Set(set_items(items)),
            ListType::Map { keys } => assoc_items(items, &keys).map_or(Shape::Leaf, Shape::Assoc),
        },
        _ => Shape::Leaf,
    }
}

fn set_items(items: &[Value]) -> Vec<(String, &Value)> {
    let mut seen = HashSet::new();
    items
        .iter()
        .map(|v| (value_pe(v), v))
        .filter(|(pe, _)| seen.insert(pe.clone()))
        .collect()
}

fn assoc_items<'v>(items: &'v [Value], keys: &[String]) -> Option<Vec<(String, &'v Value)>> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        let pe = item_key(item, keys).ok()?;
        if !seen.insert(pe.clone()) {
            return None;
        }
        out.push((pe, item));
    }
    Some(out)
}

/// The `k:{...}` path element of a list-map item; key fields it omits take their API default.
pub fn item_key(item: &Value, keys: &[String]) -> Result<String, String> {
    let Value::Object(m) = item else {
        return Err("associative list with keys may not have non-map elements".into());
    };
    let mut fields = BTreeMap::new();
    for k in keys {
        let v = match m.get(k).filter(|v| !v.is_null()) {
            Some(v) => v.clone(),
            None => key_default(k)
                .ok_or_else(|| format!("associative list with keys has an element that omits key field {k:?}"))?,
        };
        fields.insert(k.clone(), v);
    }
    Ok(key_pe(&fields))
}

/// Reject applied list-maps whose items cannot be keyed: an apply must say which item it means.
pub fn check_lists(schema: &dyn FieldSchema, path: &[&str], pes: &mut Vec<String>, v: &Value) -> Result<(), String> {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                pes.push(field_pe(k));
                check_lists(schema, &child_path(path, k), pes, c)?;
                pes.pop();
            }
            Ok(())
        }
        Value::Array(items) => match schema.list_type(path) {
            ListType::Map { keys } => check_assoc(schema, path, pes, items, &keys),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

fn check_assoc(
    schema: &dyn FieldSchema,
    path: &[&str],
    pes: &mut Vec<String>,
    items: &[Value],
    keys: &[String],
) -> Result<(), String> {
    let mut seen = HashSet::new();
    for (i, item) in items.iter().enumerate() {
        let pe = item_key(item, keys).map_err(|e| format!("{}: element {i}: {e}", render_path(pes)))?;
        if !seen.insert(pe.clone()) {
            let mut dup = pes.clone();
            dup.push(pe);
            return Err(format!(
                "{}: duplicate entries for key {}",
                render_path(pes),
                render_path(&dup[pes.len()..])
            ));
        }
        pes.push(pe);
        check_lists(schema, path, pes, item)?;
        pes.pop();
    }
    Ok(())
}

/// The fields a configuration sets (structured-merge-diff `ToFieldSet`): leaves, atomic units, set values,
/// list-map items (as members, plus their fields) and empty maps. Untracked fields are left out.
pub fn to_set(schema: &dyn FieldSchema, path: &[&str], v: &Value) -> FieldSet {
    match shape(schema, path, v) {
        Shape::Leaf => FieldSet::leaf(),
        Shape::Map(m) => {
            let mut out = FieldSet {
                member: m.is_empty() && !path.is_empty(),
                ..FieldSet::default()
            };
            for (k, c) in m {
                let p = child_path(path, k);
                if !untracked(&p) {
                    out.attach(field_pe(k), to_set(schema, &p, c));
                }
            }
            out
        }
        Shape::Set(items) => {
            let mut out = FieldSet::default();
            for (pe, _) in items {
                out.attach(pe, FieldSet::leaf());
            }
            out
        }
        Shape::Assoc(items) => {
            let mut out = FieldSet::default();
            for (pe, item) in items {
                let mut s = to_set(schema, path, item);
                s.member = true;
                out.attach(pe, s);
            }
            out
        }
    }
}

/// Fields that are always present (non-pointer structs, lists without `omitempty`) in the typed objects the
/// real server compares, so an Update that fills them in never owns the field itself: real Update entries
/// show `f:spec` and `f:containers` without `".": {}`, but `f:labels`, `f:ports` and `f:env` with it.
fn always_present(path: &[&str]) -> bool {
    matches!(
        path.last(),
        Some(&("metadata" | "spec" | "status" | "template" | "containers"))
    )
}

/// Every node of `v` as a member. `as_update` leaves out the always-present structs (for Added sets).
fn all_nodes(schema: &dyn FieldSchema, path: &[&str], v: &Value, as_update: bool) -> FieldSet {
    let mut out = FieldSet::leaf();
    let shaped = shape(schema, path, v);
    if as_update && always_present(path) && !is_empty_container(v) {
        out.member = false;
    }
    match shaped {
        Shape::Leaf => out.member = true,
        Shape::Map(m) => {
            for (k, c) in m {
                let p = child_path(path, k);
                if !untracked(&p) {
                    out.attach(field_pe(k), all_nodes(schema, &p, c, as_update));
                }
            }
        }
        Shape::Set(items) => items.into_iter().for_each(|(pe, _)| out.attach(pe, FieldSet::leaf())),
        Shape::Assoc(items) => {
            for (pe, item) in items {
                let mut s = all_nodes(schema, path, item, as_update);
                s.member = true;
                out.attach(pe, s);
            }
        }
    }
    out
}

/// How an object changed (structured-merge-diff `Compare`): leaves and atomic units whose value changed, and
/// every node (interior ones included) that appeared or disappeared.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Comparison {
    pub added: FieldSet,
    pub modified: FieldSet,
    pub removed: FieldSet,
}

impl Comparison {
    fn attach(&mut self, pe: &str, c: Comparison) {
        self.added.attach(pe.to_string(), c.added);
        self.modified.attach(pe.to_string(), c.modified);
        self.removed.attach(pe.to_string(), c.removed);
    }

    /// Fields whose value a write set: what the writer takes over from other managers.
    pub fn changed(&self) -> FieldSet {
        let mut s = self.added.clone();
        s.union_with(&self.modified);
        s
    }
}

/// Compare two versions of the value at `path`.
pub fn compare(schema: &dyn FieldSchema, path: &[&str], old: &Value, new: &Value) -> Comparison {
    let mut out = Comparison::default();
    match (shape(schema, path, old), shape(schema, path, new)) {
        (Shape::Map(a), Shape::Map(b)) => compare_maps(schema, path, a, b, &mut out),
        (Shape::Set(a), Shape::Set(b)) => compare_items(schema, path, &a, &b, &mut out),
        (Shape::Assoc(a), Shape::Assoc(b)) => compare_items(schema, path, &a, &b, &mut out),
        _ if old == new => {}
        _ => {
            // The unit changed value (or kind): it is modified; whatever was below it is gone or new.
            out.modified.member = true;
            out.removed = all_nodes(schema, path, old, false);
            out.removed.member = false;
            out.added = all_nodes(schema, path, new, true);
            out.added.member = false;
        }
    }
    out
}

fn compare_maps(
    schema: &dyn FieldSchema,
    path: &[&str],
    a: &Map<String, Value>,
    b: &Map<String, Value>,
    out: &mut Comparison,
) {
    let keys: Vec<&String> = a.keys().chain(b.keys().filter(|k| !a.contains_key(*k))).collect();
    for k in keys {
        let p = child_path(path, k);
        if untracked(&p) {
            continue;
        }
        let pe = field_pe(k);
        match (a.get(k), b.get(k)) {
            (Some(x), Some(y)) => out.attach(&pe, compare(schema, &p, x, y)),
            (Some(x), None) => out.removed.attach(pe, all_nodes(schema, &p, x, false)),
            (None, Some(y)) => out.added.attach(pe, all_nodes(schema, &p, y, true)),
            (None, None) => {}
        }
    }
}

fn compare_items(
    schema: &dyn FieldSchema,
    path: &[&str],
    a: &[(String, &Value)],
    b: &[(String, &Value)],
    out: &mut Comparison,
) {
    let old: HashMap<&str, &Value> = a.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    let new: HashMap<&str, &Value> = b.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    for (pe, x) in a {
        match new.get(pe.as_str()) {
            Some(y) => out.attach(pe, compare(schema, path, x, y)),
            None => out.removed.attach(pe.clone(), item_nodes(schema, path, x, false)),
        }
    }
    for (pe, y) in b {
        if !old.contains_key(pe.as_str()) {
            out.added.attach(pe.clone(), item_nodes(schema, path, y, true));
        }
    }
}

/// A list item and everything below it (a set value is a plain leaf).
fn item_nodes(schema: &dyn FieldSchema, path: &[&str], item: &Value, as_update: bool) -> FieldSet {
    let mut s = match item {
        Value::Object(_) => all_nodes(schema, path, item, as_update),
        _ => FieldSet::leaf(),
    };
    s.member = true;
    s
}

/// Merge an applied configuration into the live value (structured-merge-diff `Merge`): granular maps key by
/// key, sets and list-maps item by item in [`merge_order`], everything else replaced by the applied value.
/// Untracked fields keep their live value.
pub fn merge(schema: &dyn FieldSchema, path: &[&str], live: &Value, applied: &Value) -> Value {
    match (shape(schema, path, live), shape(schema, path, applied)) {
        (Shape::Map(l), Shape::Map(a)) => {
            let mut out = l.clone();
            for (k, av) in a {
                let p = child_path(path, k);
                if untracked(&p) {
                    continue;
                }
                let merged = match l.get(k) {
                    Some(lv) => merge(schema, &p, lv, av),
                    None => av.clone(),
                };
                out.insert(k.clone(), merged);
            }
            Value::Object(out)
        }
        (Shape::Set(l), Shape::Set(a)) => Value::Array(
            merge_order(&l, &a)
                .into_iter()
                .filter_map(|(lv, av)| av.or(lv).cloned())
                .collect(),
        ),
        (Shape::Assoc(l), Shape::Assoc(a)) => Value::Array(
            merge_order(&l, &a)
                .into_iter()
                .filter_map(|pair| match pair {
                    (Some(lv), Some(av)) => Some(merge(schema, path, lv, av)),
                    (lv, av) => av.or(lv).cloned(),
                })
                .collect(),
        ),
        _ => applied.clone(),
    }
}

type Pair<'v> = (Option<&'v Value>, Option<&'v Value>);

/// Interleave live (`lhs`) and applied (`rhs`) list items the way structured-merge-diff orders a merged
/// associative list: items both sides share follow the applier's order, items only the applier has are
/// placed relative to those, and live-only items stay where they were.
pub fn merge_order<'v>(lhs: &[(String, &'v Value)], rhs: &[(String, &'v Value)]) -> Vec<Pair<'v>> {
    let lmap: HashMap<&str, &'v Value> = lhs.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    let rmap: HashMap<&str, &'v Value> = rhs.iter().map(|(pe, v)| (pe.as_str(), *v)).collect();
    let mut shared = rhs.iter().map(|(pe, _)| pe.as_str()).filter(|pe| lmap.contains_key(pe));
    let mut next_shared = shared.next();
    let mut merged_rhs: HashSet<&str> = HashSet::new();
    let mut out = Vec::with_capacity(lhs.len() + rhs.len());
    let (mut li, mut ri) = (0, 0);
    while li < lhs.len() || ri < rhs.len() {
        if li < lhs.len() && ri < rhs.len() {
            let pe = lhs[li].0.as_str();
            if pe == rhs[ri].0 {
                merged_rhs.insert(pe);
                out.push((lmap.get(pe).copied(), rmap.get(pe).copied()));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if rmap.contains_key(pe) && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs.len() {
            let pe = lhs[li].0.as_str();
            if !rmap.contains_key(pe) {
                out.push((Some(lhs[li].1), None));
                li += 1;
                continue;
            }
            if merged_rhs.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ri < rhs.len() {
            let pe = rhs[ri].0.as_str();
            merged_rhs.insert(pe);
            out.push((lmap.get(pe).copied(), rmap.get(pe).copied()));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// What pruning does with one node the applier owned last time.
enum Prune {
    /// Nobody owns it or anything below it any more: delete it from the object.
    Remove,
    /// Someone still owns part of it: look at what the applier owned below it.
    Descend,
    Keep,
}

fn decide(last: &FieldSet, keep: Option<&FieldSet>) -> Prune {
    let kept = keep.is_some_and(|k| !k.is_empty());
    if last.member && !kept {
        Prune::Remove
    } else if !last.children.is_empty() {
        Prune::Descend
    } else {
        Prune::Keep
    }
}

/// Remove from `v` the fields, map keys and list items of `last` (the applier's previous set) that nobody in
/// `keep` (the applier's new set and every other entry) owns at or below. Maps and lists
/// emptied by the removal go too, unless someone owns them. Key fields of surviving list-map items stay.
pub fn prune(schema: &dyn FieldSchema, path: &[&str], v: &mut Value, last: &FieldSet, keep: Option<&FieldSet>) {
    let kind = match shape(schema, path, v) {
        Shape::Leaf => return,
        Shape::Map(_) => None,
        Shape::Set(_) => Some(None),
        Shape::Assoc(_) => match schema.list_type(path) {
            ListType::Map { keys } => Some(Some(keys)),
            _ => return,
        },
    };
    match (kind, v) {
        (None, Value::Object(m)) => prune_map(schema, path, m, last, keep, &[]),
        (Some(keys), Value::Array(items)) => prune_list(schema, path, items, keys.as_deref(), last, keep),
        _ => {}
    }
}

fn prune_map(
    schema: &dyn FieldSchema,
    path: &[&str],
    m: &mut Map<String, Value>,
    last: &FieldSet,
    keep: Option<&FieldSet>,
    protected: &[String],
) {
    for (pe, last_child) in &last.children {
        let Some(name) = pe.strip_prefix("f:") else { continue };
        let p = child_path(path, name);
        if untracked(&p) || protected.iter().any(|k| k == name) {
            continue;
        }
        let keep_child = keep.and_then(|k| k.child(pe));
        let Some(cv) = m.get_mut(name) else { continue };
        match decide(last_child, keep_child) {
            Prune::Remove => {
                m.remove(name);
            }
            Prune::Descend => {
                let was_empty = is_empty_container(cv);
                prune(schema, &p, cv, last_child, keep_child);
                if !was_empty && is_empty_container(cv) && !keep_child.is_some_and(|k| k.member) {
                    m.remove(name);
                }
            }
            Prune::Keep => {}
        }
    }
}

fn prune_list(
    schema: &dyn FieldSchema,
    path: &[&str],
    items: &mut Vec<Value>,
    keys: Option<&[String]>,
    last: &FieldSet,
    keep: Option<&FieldSet>,
) {
    let atomic_items = schema.map_is_atomic(path);
    items.retain_mut(|item| {
        let pe = match keys {
            Some(keys) => match item_key(item, keys) {
                Ok(pe) => pe,
                Err(_) => return true,
            },
            None => value_pe(item),
        };
        let Some(last_child) = last.child(&pe) else { return true };
        let keep_child = keep.and_then(|k| k.child(&pe));
        match decide(last_child, keep_child) {
            Prune::Remove => false,
            Prune::Descend => {
                if let (Some(keys), Value::Object(m), false) = (keys, item, atomic_items) {
                    prune_map(schema, path, m, last_child, keep_child, keys);
                }
                true
            }
            Prune::Keep => true,
        }
    });
}

fn is_empty_container(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.is_empty(),
        Value::Array(a) => a.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{Builtin, Opaque};
    use serde_json::json;

    fn pes(v: &Value) -> Vec<(String, &Value)> {
        v.as_array().unwrap().iter().map(|i| (i["n"].to_string(), i)).collect()
    }

    fn order(live: Value, applied: Value) -> Vec<String> {
        merge_order(&pes(&live), &pes(&applied))
            .into_iter()
            .map(|(l, r)| r.or(l).unwrap()["n"].as_str().unwrap().to_string())
            .collect()
    }

    #[test]
    fn merge_order_keeps_live_only_items_in_place() {
        let live = json!([{"n": "a"}, {"n": "x"}, {"n": "b"}]);
        assert_eq!(
            order(live.clone(), json!([{"n": "a"}, {"n": "c"}, {"n": "b"}])),
            ["a", "x", "c", "b"]
        );
        assert_eq!(order(live.clone(), json!([{"n": "b"}, {"n": "a"}])), ["x", "b", "a"]);
        assert_eq!(order(live, json!([{"n": "z"}])), ["a", "x", "b", "z"]);
    }

    #[test]
    fn depth_is_iterative() {
        let mut v = json!(1);
        for _ in 0..1_000 {
            v = Value::Array(vec![v]);
        }
        assert!(depth(&v) == 1_001);
    }

    #[test]
    fn to_set_skips_untracked_and_keys_ports() {
        let s = Builtin::new("Pod");
        let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"a": "b"}},
            "spec": {"containers": [{"name": "c", "ports": [{"containerPort": 80}]}]}});
        let set = to_set(&s, &[], &pod);
        let paths: Vec<String> = set.members().iter().map(|p| render_path(p)).collect();
        assert_eq!(
            paths,
            [
                ".metadata.labels.a",
                ".spec.containers[name=\"c\"]",
                ".spec.containers[name=\"c\"].name",
                ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"]",
                ".spec.containers[name=\"c\"].ports[containerPort=80,protocol=\"TCP\"].containerPort",
            ]
        );
    }

    #[test]
    fn compare_marks_new_maps_as_members_except_structs() {
        let c = compare(
            &Opaque,
            &[],
            &json!({"metadata": {}}),
            &json!({"metadata": {"labels": {"a": "1"}}, "data": {"x": "y"}}),
        );
        assert_eq!(
            c.added.to_fields_v1(),
            json!({"f:data": {".": {}, "f:x": {}}, "f:metadata": {"f:labels": {".": {}, "f:a": {}}}})
        );
        assert!(c.modified.is_empty() && c.removed.is_empty());
    }

    #[test]
    fn check_lists_reports_duplicates() {
        let s = Builtin::new("Pod");
        let pod = json!({"spec": {"containers": [{"name": "c"}, {"name": "c"}]}});
        let err = check_lists(&s, &[], &mut Vec::new(), &pod).unwrap_err();
        assert_eq!(err, ".spec.containers: duplicate entries for key [name=\"c\"]");
        let err = check_lists(
            &s,
            &[],
            &mut Vec::new(),
            &json!({"spec": {"containers": [{"image": "i"}]}}),
        )
        .unwrap_err();
        assert!(err.contains("omits key field \"name\""), "{err}");
    }
}
