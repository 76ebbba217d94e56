//! The etcd key of every object, laid out as kube-apiserver lays out its keys, so `etcdctl get --prefix
//! /registry/` on devcluster's etcd reads like a real cluster's: built-in resources of the core and the
//! other built-in groups under their resource name (`/registry/configmaps/<ns>/<name>`,
//! `/registry/deployments/<ns>/<name>`, `/registry/clusterroles/<name>`, with kube's few renames such as
//! `services/specs`), custom resources and the CRDs themselves under their group
//! (`/registry/capstan.dev/applications/<ns>/<name>`,
//! `/registry/apiextensions.k8s.io/customresourcedefinitions/<name>`). Cluster-scoped objects have no
//! namespace segment. The mapping is a bijection, so the watch that feeds the cache can turn any key back
//! into the object it names.

use std::collections::HashMap;
use std::sync::Arc;

use crate::registry::{builtin_storage_keys, ResKey};

use super::ObjRef;

/// Root of every object key.
pub const PREFIX: &str = "/registry/";

/// A devcluster bookkeeping key inside the root: the final state a deletion announces in its DELETED event,
/// written in the same transaction as the deletion (see `etcd.rs`). It names no object.
pub const DELETION_RECORD: &str = "/registry/devcluster/deletion";

/// Built-in groups that kube-apiserver stores under their group name.
const GROUPED_BUILTINS: &[&str] = &["apiextensions.k8s.io", "apiregistration.k8s.io"];

/// Built-in resources whose kube-apiserver directory is not their plural.
const RENAMED: &[(&str, &str)] = &[
    ("/services", "services/specs"),
    ("/endpoints", "services/endpoints"),
    ("/nodes", "minions"),
    ("/replicationcontrollers", "controllers"),
    ("networking.k8s.io/ingresses", "ingress"),
];

/// Storage key (`group/plural`) ↔ etcd directory.
pub struct Keys {
    dirs: HashMap<ResKey, String>,
    by_dir: HashMap<String, ResKey>,
}

impl Default for Keys {
    fn default() -> Self {
        Self::new()
    }
}

impl Keys {
    pub fn new() -> Self {
        let mut dirs = HashMap::new();
        let mut by_dir = HashMap::new();
        for key in builtin_storage_keys() {
            let (group, plural) = key.split_once('/').unwrap_or(("", &key));
            let dir = match RENAMED.iter().find(|(k, _)| **k == *key) {
                Some((_, d)) => d.to_string(),
                None if GROUPED_BUILTINS.contains(&group) => format!("{group}/{plural}"),
                None => plural.to_string(),
            };
            by_dir.insert(dir.clone(), key.clone());
            dirs.insert(key, dir);
        }
        Keys { dirs, by_dir }
    }

    /// The directory of a resource below [`PREFIX`]; a custom resource's storage key is its directory.
    fn dir<'a>(&'a self, res: &'a str) -> &'a str {
        self.dirs.get(res).map_or(res, String::as_str)
    }

    /// `/registry/<dir>/`: every object of a resource.
    pub fn resource_prefix(&self, res: &str) -> String {
        format!("{PREFIX}{}/", self.dir(res))
    }

    /// Every object of a resource in one namespace, or all of them.
    pub fn list_prefix(&self, res: &str, ns: Option<&str>) -> String {
        match ns {
            Some(ns) => format!("{PREFIX}{}/{ns}/", self.dir(res)),
            None => self.resource_prefix(res),
        }
    }

    /// The key of one object.
    pub fn object(&self, r: &ObjRef) -> String {
        if r.ns.is_empty() {
            format!("{PREFIX}{}/{}", self.dir(&r.res), r.name)
        } else {
            format!("{PREFIX}{}/{}/{}", self.dir(&r.res), r.ns, r.name)
        }
    }

    /// The object a key names; `None` for keys that name none (bookkeeping, other programs' keys).
    pub fn parse(&self, key: &str) -> Option<ObjRef> {
        let segs: Vec<&str> = key.strip_prefix(PREFIX)?.split('/').collect();
        // Two-segment directories first: a group (`capstan.dev/applications`) or a rename (`services/specs`).
        for n in [2, 1] {
            if segs.len() <= n {
                continue;
            }
            let dir = segs[..n].join("/");
            let res = match self.by_dir.get(&dir) {
                Some(r) => r.clone(),
                None if n == 2 && segs[0].contains('.') => Arc::from(dir.as_str()),
                None => continue,
            };
            return match &segs[n..] {
                [name] if !name.is_empty() => Some(ObjRef {
                    res,
                    ns: String::new(),
                    name: name.to_string(),
                }),
                [ns, name] if !ns.is_empty() && !name.is_empty() => Some(ObjRef {
                    res,
                    ns: ns.to_string(),
                    name: name.to_string(),
                }),
                _ => None,
            };
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(res: &str, ns: &str, name: &str) -> ObjRef {
        ObjRef {
            res: Arc::from(res),
            ns: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn kube_layout_round_trips() {
        let k = Keys::new();
        let cases = [
            (r("/configmaps", "default", "a"), "/registry/configmaps/default/a"),
            (r("/namespaces", "", "default"), "/registry/namespaces/default"),
            (r("/services", "ns", "web"), "/registry/services/specs/ns/web"),
            (r("/endpoints", "ns", "web"), "/registry/services/endpoints/ns/web"),
            (r("apps/deployments", "ns", "d"), "/registry/deployments/ns/d"),
            (r("networking.k8s.io/ingresses", "ns", "i"), "/registry/ingress/ns/i"),
            (
                r("rbac.authorization.k8s.io/clusterroles", "", "system:aggregate-to-view"),
                "/registry/clusterroles/system:aggregate-to-view",
            ),
            (
                r(
                    "apiextensions.k8s.io/customresourcedefinitions",
                    "",
                    "applications.capstan.dev",
                ),
                "/registry/apiextensions.k8s.io/customresourcedefinitions/applications.capstan.dev",
            ),
            (
                r("capstan.dev/applications", "argocd", "app"),
                "/registry/capstan.dev/applications/argocd/app",
            ),
            (
                r("example.com/clusterthings", "", "x.y"),
                "/registry/example.com/clusterthings/x.y",
            ),
        ];
        for (obj, key) in cases {
            assert_eq!(k.object(&obj), key);
            assert_eq!(k.parse(key), Some(obj), "{key}");
        }
        assert_eq!(k.list_prefix("/configmaps", Some("ns")), "/registry/configmaps/ns/");
        assert_eq!(
            k.resource_prefix("capstan.dev/applications"),
            "/registry/capstan.dev/applications/"
        );
    }

    #[test]
    fn foreign_keys_name_nothing() {
        let k = Keys::new();
        for key in [
            DELETION_RECORD,
            "/registry/",
            "/other/configmaps/a/b",
            "/registry/unknown/x",
            "/registry/configmaps/a/b/c",
        ] {
            assert_eq!(k.parse(key), None, "{key}");
        }
    }
}
