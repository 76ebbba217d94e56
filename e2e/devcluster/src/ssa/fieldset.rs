//! Field sets: the sets of field paths that managedFields entries own, their `FieldsV1` JSON form,
//! the set algebra the ownership rules need, and the `.spec.containers[name="c"].image` rendering used in
//! conflict causes.
//!
//! A set is a tree whose edges are serialized path elements (`f:name`, `k:{"name":"c"}`, `v:"x"`, `i:0`).
//! Keeping the serialized form as the edge label makes the tree its own `FieldsV1` encoding and lets paths
//! from client-written entries be compared with computed ones without a second representation.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// A set of field paths, as a tree of path elements.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet {
    /// The path leading to this node is itself a member (`".": {}` when the node also has children).
    pub member: bool,
    /// Sub-paths, keyed by serialized path element. Never holds empty nodes.
    pub children: BTreeMap<String, FieldSet>,
}

impl FieldSet {
    /// A set holding only the path leading to it.
    pub fn leaf() -> Self {
        FieldSet {
            member: true,
            children: BTreeMap::new(),
        }
    }

    /// No member anywhere in the tree.
    pub fn is_empty(&self) -> bool {
        !self.member && self.children.values().all(FieldSet::is_empty)
    }

    pub fn child(&self, pe: &str) -> Option<&FieldSet> {
        self.children.get(pe)
    }

    /// Attach a child subtree, dropping it when it holds no member (keeps the no-empty-node invariant).
    pub fn attach(&mut self, pe: String, child: FieldSet) {
        if child.is_empty() {
            return;
        }
        match self.children.get_mut(&pe) {
            Some(existing) => existing.union_with(&child),
            None => {
                self.children.insert(pe, child);
            }
        }
    }

    /// Whether `path` (relative to this node) is a member.
    pub fn contains(&self, path: &[String]) -> bool {
        match path.split_first() {
            None => self.member,
            Some((pe, rest)) => self.children.get(pe).is_some_and(|c| c.contains(rest)),
        }
    }

    /// Add every member of `other`.
    pub fn union_with(&mut self, other: &FieldSet) {
        self.member |= other.member;
        for (pe, theirs) in &other.children {
            match self.children.get_mut(pe) {
                Some(mine) => mine.union_with(theirs),
                None => {
                    if !theirs.is_empty() {
                        self.children.insert(pe.clone(), theirs.clone());
                    }
                }
            }
        }
    }

    /// Remove every member of `other` (member by member: a member of `other` does not remove the paths below it).
    pub fn subtract(&mut self, other: &FieldSet) {
        if other.member {
            self.member = false;
        }
        for (pe, theirs) in &other.children {
            if let Some(mine) = self.children.get_mut(pe) {
                mine.subtract(theirs);
                if mine.is_empty() {
                    self.children.remove(pe);
                }
            }
        }
    }

    /// The members present in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            member: self.member && other.member,
            children: BTreeMap::new(),
        };
        for (pe, mine) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                out.attach(pe.clone(), mine.intersection(theirs));
            }
        }
        out
    }

    /// Every member path, in serialized order (parents before their children).
    pub fn members(&self) -> Vec<Vec<String>> {
        let mut out = Vec::new();
        self.collect_members(&mut Vec::new(), &mut out);
        out
    }

    fn collect_members(&self, prefix: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
        if self.member && !prefix.is_empty() {
            out.push(prefix.clone());
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_members(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` JSON form. `"."` is written first, then children in path-element order, so the output is
    /// the same whether or not serde_json preserves insertion order.
    pub fn to_fields_v1(&self) -> Value {
        let mut m = Map::new();
        if self.member && !self.children.is_empty() {
            m.insert(".".into(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            m.insert(pe.clone(), child.to_fields_v1());
        }
        Value::Object(m)
    }

    /// Parse a `fieldsV1` object. Path elements are canonicalized (key JSON re-serialized with sorted keys) so
    /// that entries written by clients compare equal to computed ones.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(m) = v else {
            return Err("fieldsV1 must be an object".into());
        };
        let mut out = FieldSet {
            member: false,
            children: BTreeMap::new(),
        };
        for (key, child) in m {
            if key == "." {
                out.member = true;
                continue;
            }
            let pe = canonical_pe(key)?;
            let mut sub = FieldSet::from_fields_v1(child)?;
            // A node with no children is a member by definition (`f:x: {}`).
            if sub.children.is_empty() {
                sub.member = true;
            }
            out.attach(pe, sub);
        }
        Ok(out)
    }
}

/// `f:<name>`
pub fn field_pe(name: &str) -> String {
    format!("f:{name}")
}

/// `v:<json>` for a set item.
pub fn value_pe(v: &Value) -> String {
    format!("v:{}", canonical_json(v))
}

/// `k:{...}` for a list-map item: compact JSON of the key fields, sorted by name as the real server writes them.
pub fn key_pe(fields: &BTreeMap<String, Value>) -> String {
    let obj: Map<String, Value> = fields.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    format!("k:{}", canonical_json(&Value::Object(obj)))
}

/// Compact JSON with object keys sorted, independent of serde_json's `preserve_order` feature.
pub fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let sorted: BTreeMap<&String, &Value> = m.iter().collect();
            let parts: Vec<String> = sorted
                .into_iter()
                .map(|(k, v)| format!("{}:{}", Value::String(k.clone()), canonical_json(v)))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!("[{}]", a.iter().map(canonical_json).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

/// Validate one serialized path element and bring it to canonical form.
fn canonical_pe(key: &str) -> Result<String, String> {
    let bad = || format!("invalid path element {key:?} in fieldsV1");
    let (prefix, rest) = key.split_at_checked(2).ok_or_else(bad)?;
    match prefix {
        "f:" => Ok(key.to_string()),
        "i:" => rest.parse::<u64>().map(|_| key.to_string()).map_err(|_| bad()),
        "k:" => match serde_json::from_str::<Value>(rest) {
            Ok(v @ Value::Object(_)) => Ok(format!("k:{}", canonical_json(&v))),
            _ => Err(bad()),
        },
        "v:" => serde_json::from_str::<Value>(rest)
            .map(|v| value_pe(&v))
            .map_err(|_| bad()),
        _ => Err(bad()),
    }
}

/// Render a member path the way conflict causes print it: `.spec.template.spec.containers[name="c"].image`,
/// `.spec.ports[containerPort=80,protocol="TCP"]`, `.metadata.finalizers[="x"]`, `.spec.args[0]`.
pub fn render_path(path: &[String]) -> String {
    let mut out = String::new();
    for pe in path {
        let (prefix, rest) = pe.split_at_checked(2).unwrap_or(("", pe.as_str()));
        match prefix {
            "f:" => {
                out.push('.');
                out.push_str(rest);
            }
            "k:" => out.push_str(&render_key(rest)),
            "v:" => out.push_str(&format!("[={rest}]")),
            "i:" => out.push_str(&format!("[{rest}]")),
            _ => out.push_str(pe),
        }
    }
    out
}

fn render_key(json: &str) -> String {
    let Ok(Value::Object(m)) = serde_json::from_str::<Value>(json) else {
        return format!("[{json}]");
    };
    let sorted: BTreeMap<&String, &Value> = m.iter().collect();
    let parts: Vec<String> = sorted
        .into_iter()
        .map(|(k, v)| format!("{k}={}", canonical_json(v)))
        .collect();
    format!("[{}]", parts.join(","))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_with_dot() {
        let v = json!({"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}});
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert_eq!(s.to_fields_v1(), v);
        assert_eq!(s.members().len(), 3);
        assert_eq!(render_path(&s.members()[1]), ".spec.containers[name=\"c\"].image");
    }

    #[test]
    fn key_order_is_canonical() {
        let v = json!({"k:{\"protocol\":\"TCP\",\"containerPort\":80}": {}});
        let s = FieldSet::from_fields_v1(&v).unwrap();
        assert!(s.children.contains_key("k:{\"containerPort\":80,\"protocol\":\"TCP\"}"));
        assert_eq!(render_path(&s.members()[0]), "[containerPort=80,protocol=\"TCP\"]");
    }

    #[test]
    fn rejects_garbage() {
        assert!(FieldSet::from_fields_v1(&json!({"x:y": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"k:[1]": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!("f:a")).is_err());
    }

    #[test]
    fn algebra() {
        let a = FieldSet::from_fields_v1(&json!({"f:a": {}, "f:b": {"f:c": {}}})).unwrap();
        let b = FieldSet::from_fields_v1(&json!({"f:b": {"f:c": {}, "f:d": {}}})).unwrap();
        assert_eq!(a.intersection(&b).to_fields_v1(), json!({"f:b": {"f:c": {}}}));
        let mut d = a.clone();
        d.subtract(&b);
        assert_eq!(d.to_fields_v1(), json!({"f:a": {}}));
        let mut u = a;
        u.union_with(&b);
        assert_eq!(u.members().len(), 3);
        assert!(u.contains(&["f:b".to_string(), "f:d".to_string()]));
    }
}
