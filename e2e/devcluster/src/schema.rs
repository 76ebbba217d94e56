//! How the fields of a kind merge: the list types and map types that strategic merge patch (SMP) and
//! server-side apply (SSA) need. Built-in kinds use the static table below, derived from
//! the Go struct tags of k8s.io/api; custom resources use their CRD's structural schema
//! (`x-kubernetes-list-type`, `x-kubernetes-list-map-keys`, `x-kubernetes-map-type`), see `crdschema.rs`.
//!
//! A *path* is the sequence of field names from the object root with list positions left out, e.g. the
//! containers of a Deployment are at `["spec", "template", "spec", "containers"]` and their ports at
//! `["spec", "template", "spec", "containers", "ports"]`.

/// How server-side apply treats a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced and owned whole (the default for lists without markers, and for every CR list without a schema marker).
    Atomic,
    /// Scalars, union by value; each value owned separately (`v:<json>`).
    Set,
    /// Items matched on the key tuple and merged recursively (`k:{...}`). A key field missing from an item takes
    /// its API default when there is one: `protocol` defaults to `"TCP"` (see [`key_default`]).
    Map { keys: Vec<String> },
}

/// How strategic merge patch treats a list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SmpList {
    /// Replace the whole list (no patchStrategy).
    Replace,
    /// `patchStrategy: merge` + `patchMergeKey`: merge items by this key.
    MergeByKey(String),
    /// `patchStrategy: merge` on a list of scalars: union.
    MergePrimitives,
}

/// Field-merge information for one kind.
pub trait FieldSchema: Send + Sync {
    /// SSA list type of the list at `path`.
    fn list_type(&self, path: &[&str]) -> ListType;
    /// SMP strategy of the list at `path`.
    fn smp_list(&self, path: &[&str]) -> SmpList;
    /// Whether the map/struct at `path` is atomic (`x-kubernetes-map-type: atomic`, `+structType=atomic`).
    fn map_is_atomic(&self, path: &[&str]) -> bool;
}

/// The API default of a list-map key field that an item may omit (SSA keys `[containerPort, protocol]`).
pub fn key_default(key: &str) -> Option<serde_json::Value> {
    match key {
        "protocol" => Some(serde_json::Value::String("TCP".into())),
        _ => None,
    }
}

/// Schema for kinds we know nothing about: every list atomic, every map granular.
pub struct Opaque;

impl FieldSchema for Opaque {
    fn list_type(&self, path: &[&str]) -> ListType {
        metadata_list_type(path).unwrap_or(ListType::Atomic)
    }
    fn smp_list(&self, path: &[&str]) -> SmpList {
        metadata_smp_list(path).unwrap_or(SmpList::Replace)
    }
    fn map_is_atomic(&self, _path: &[&str]) -> bool {
        false
    }
}

/// Lists inside `metadata` behave the same for every kind, CRs included.
fn metadata_list_type(path: &[&str]) -> Option<ListType> {
    match path {
        ["metadata", "ownerReferences"] => Some(ListType::Map {
            keys: vec!["uid".into()],
        }),
        ["metadata", "finalizers"] => Some(ListType::Set),
        ["metadata", "managedFields"] => Some(ListType::Atomic),
        _ => None,
    }
}

fn metadata_smp_list(path: &[&str]) -> Option<SmpList> {
    match path {
        ["metadata", "ownerReferences"] => Some(SmpList::MergeByKey("uid".into())),
        ["metadata", "finalizers"] => Some(SmpList::MergePrimitives),
        _ => None,
    }
}

/// The table for the built-in kinds devcluster serves.
pub struct Builtin {
    kind: String,
}

impl Builtin {
    pub fn new(kind: &str) -> Self {
        Builtin { kind: kind.to_string() }
    }

    fn last_two<'a>(path: &[&'a str]) -> (Option<&'a str>, Option<&'a str>) {
        let n = path.len();
        (if n >= 2 { Some(path[n - 2]) } else { None }, path.last().copied())
    }

    fn is_container_list(name: &str) -> bool {
        matches!(name, "containers" | "initContainers" | "ephemeralContainers")
    }

    fn is_service_ports(&self, path: &[&str]) -> bool {
        self.kind == "Service" && path == ["spec", "ports"]
    }
}

/// Lists keyed by a single field, the same for SMP and SSA.
fn single_key(parent: Option<&str>, last: &str) -> Option<&'static str> {
    let in_container = parent.is_some_and(Builtin::is_container_list);
    match last {
        "containers" | "initContainers" | "ephemeralContainers" => Some("name"),
        "env" if in_container => Some("name"),
        "volumeMounts" if in_container => Some("mountPath"),
        "volumeDevices" if in_container => Some("devicePath"),
        "volumes" | "imagePullSecrets" => Some("name"),
        "hostAliases" => Some("ip"),
        "conditions" => Some("type"),
        _ => None,
    }
}

impl FieldSchema for Builtin {
    fn list_type(&self, path: &[&str]) -> ListType {
        if let Some(t) = metadata_list_type(path) {
            return t;
        }
        let (parent, last) = Self::last_two(path);
        let Some(last) = last else { return ListType::Atomic };
        if last == "ports" && parent.is_some_and(Self::is_container_list) {
            return ListType::Map {
                keys: vec!["containerPort".into(), "protocol".into()],
            };
        }
        if self.is_service_ports(path) {
            return ListType::Map {
                keys: vec!["port".into(), "protocol".into()],
            };
        }
        match single_key(parent, last) {
            Some(k) => ListType::Map {
                keys: vec![k.to_string()],
            },
            None => ListType::Atomic,
        }
    }

    fn smp_list(&self, path: &[&str]) -> SmpList {
        if let Some(t) = metadata_smp_list(path) {
            return t;
        }
        let (parent, last) = Self::last_two(path);
        let Some(last) = last else { return SmpList::Replace };
        if last == "ports" && parent.is_some_and(Self::is_container_list) {
            return SmpList::MergeByKey("containerPort".into());
        }
        if self.is_service_ports(path) {
            return SmpList::MergeByKey("port".into());
        }
        match single_key(parent, last) {
            Some(k) => SmpList::MergeByKey(k.to_string()),
            None => SmpList::Replace,
        }
    }

    fn map_is_atomic(&self, path: &[&str]) -> bool {
        // metav1.LabelSelector is `+structType=atomic` where workloads use it as their selector.
        matches!(
            self.kind.as_str(),
            "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet" | "Job"
        ) && path == ["spec", "selector"]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn container_ports_differ_between_smp_and_ssa() {
        let s = Builtin::new("Deployment");
        let p = ["spec", "template", "spec", "containers", "ports"];
        assert_eq!(s.smp_list(&p), SmpList::MergeByKey("containerPort".into()));
        assert_eq!(
            s.list_type(&p),
            ListType::Map {
                keys: vec!["containerPort".into(), "protocol".into()]
            }
        );
    }

    #[test]
    fn service_ports_and_selector() {
        let s = Builtin::new("Service");
        assert_eq!(
            s.list_type(&["spec", "ports"]),
            ListType::Map {
                keys: vec!["port".into(), "protocol".into()]
            }
        );
        assert!(!s.map_is_atomic(&["spec", "selector"]));
        assert!(Builtin::new("Deployment").map_is_atomic(&["spec", "selector"]));
    }

    #[test]
    fn unknown_lists_are_atomic() {
        let s = Builtin::new("Pod");
        assert_eq!(s.list_type(&["spec", "tolerations"]), ListType::Atomic);
        assert_eq!(s.smp_list(&["spec", "containers", "args"]), SmpList::Replace);
        assert_eq!(s.list_type(&["metadata", "finalizers"]), ListType::Set);
    }
}
