//! The set of served resources: the static built-in table plus the resources of Established CRDs.
//! Everything else (discovery, OpenAPI, URL resolution, storage keys) is derived from here, so adding a kind
//! is one table row. CRD-served resources are added by the CRD controller and removed when the CRD goes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use serde_json::Value;

use crate::crdschema::CrdSchema;
use crate::table::PrinterColumn;

/// Storage identity of a resource: `group/plural` (shared by all versions of a CRD).
pub type ResKey = Arc<str>;

/// Where a scale subresource finds its fields (JSON paths like `.spec.replicas`).
#[derive(Debug, Clone)]
pub struct ScaleSpec {
    pub spec_replicas: String,
    pub status_replicas: String,
    pub label_selector: Option<String>,
}

/// Extra information for resources served from a CRD.
#[derive(Debug, Clone)]
pub struct CustomInfo {
    pub crd_name: String,
    pub schema: Option<Arc<CrdSchema>>,
    pub printer_columns: Option<Vec<PrinterColumn>>,
    pub storage_version: String,
}

/// One served resource in one group version.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    pub group: String,
    pub version: String,
    pub plural: String,
    pub singular: String,
    pub kind: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub status: bool,
    pub scale: Option<ScaleSpec>,
    /// Whether `metadata.generation` is maintained.
    pub generation: bool,
    /// Only `create` is served (the review resources of authorization.k8s.io and authentication.k8s.io).
    pub create_only: bool,
    pub custom: Option<CustomInfo>,
    pub key: ResKey,
}

impl ResourceInfo {
    /// `apps/v1` or `v1`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn verbs(&self) -> Vec<&'static str> {
        if self.create_only {
            vec!["create"]
        } else {
            STANDARD_VERBS.to_vec()
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn is_custom(&self) -> bool {
        self.custom.is_some()
    }
}

/// The verbs of every ordinary resource, in discovery order (also the "read-write" verbs of RBAC roles).
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

/// Storage key for a group and plural.
pub fn res_key(group: &str, plural: &str) -> ResKey {
    Arc::from(format!("{group}/{plural}").as_str())
}

struct Row {
    gv: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    status: bool,
    scale: bool,
    generation: bool,
    create_only: bool,
}

const fn row(gv: &'static str, plural: &'static str, kind: &'static str, namespaced: bool) -> Row {
    Row {
        gv,
        plural,
        kind,
        namespaced,
        short: &[],
        all: false,
        status: false,
        scale: false,
        generation: false,
        create_only: false,
    }
}

impl Row {
    const fn short(mut self, s: &'static [&'static str]) -> Self {
        self.short = s;
        self
    }
    const fn all(mut self) -> Self {
        self.all = true;
        self
    }
    const fn status(mut self) -> Self {
        self.status = true;
        self
    }
    const fn scale(mut self) -> Self {
        self.scale = true;
        self
    }
    const fn generation(mut self) -> Self {
        self.generation = true;
        self
    }
    /// A review resource: only `create`, nothing stored.
    const fn create_only(mut self) -> Self {
        self.create_only = true;
        self
    }
}

const NS: bool = true;
const CL: bool = false;

const BUILTINS: &[Row] = &[
    row("v1", "namespaces", "Namespace", CL).short(&["ns"]).status(),
    row("v1", "configmaps", "ConfigMap", NS).short(&["cm"]),
    row("v1", "secrets", "Secret", NS),
    row("v1", "services", "Service", NS).short(&["svc"]).all().status(),
    row("v1", "serviceaccounts", "ServiceAccount", NS).short(&["sa"]),
    row("v1", "pods", "Pod", NS).short(&["po"]).all().status(),
    row("v1", "events", "Event", NS).short(&["ev"]),
    row("v1", "endpoints", "Endpoints", NS).short(&["ep"]),
    row("v1", "persistentvolumeclaims", "PersistentVolumeClaim", NS)
        .short(&["pvc"])
        .status(),
    row("v1", "limitranges", "LimitRange", NS).short(&["limits"]),
    row("v1", "resourcequotas", "ResourceQuota", NS)
        .short(&["quota"])
        .status(),
    row("apps/v1", "deployments", "Deployment", NS)
        .short(&["deploy"])
        .all()
        .status()
        .scale()
        .generation(),
    row("apps/v1", "statefulsets", "StatefulSet", NS)
        .short(&["sts"])
        .all()
        .status()
        .scale()
        .generation(),
    row("apps/v1", "daemonsets", "DaemonSet", NS)
        .short(&["ds"])
        .all()
        .status()
        .generation(),
    row("apps/v1", "replicasets", "ReplicaSet", NS)
        .short(&["rs"])
        .all()
        .status()
        .scale()
        .generation(),
    row("events.k8s.io/v1", "events", "Event", NS).short(&["ev"]),
    row(
        "authorization.k8s.io/v1",
        "selfsubjectaccessreviews",
        "SelfSubjectAccessReview",
        CL,
    )
    .create_only(),
    row(
        "authorization.k8s.io/v1",
        "selfsubjectrulesreviews",
        "SelfSubjectRulesReview",
        CL,
    )
    .create_only(),
    row(
        "authorization.k8s.io/v1",
        "subjectaccessreviews",
        "SubjectAccessReview",
        CL,
    )
    .create_only(),
    row(
        "authorization.k8s.io/v1",
        "localsubjectaccessreviews",
        "LocalSubjectAccessReview",
        NS,
    )
    .create_only(),
    row(
        "authentication.k8s.io/v1",
        "selfsubjectreviews",
        "SelfSubjectReview",
        CL,
    )
    .create_only(),
    row("authentication.k8s.io/v1", "tokenreviews", "TokenReview", CL).create_only(),
    row(
        "autoscaling/v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        NS,
    )
    .short(&["hpa"])
    .all()
    .status(),
    row("batch/v1", "jobs", "Job", NS).all().status().generation(),
    row("batch/v1", "cronjobs", "CronJob", NS)
        .short(&["cj"])
        .all()
        .status()
        .generation(),
    row("networking.k8s.io/v1", "ingresses", "Ingress", NS)
        .short(&["ing"])
        .status(),
    row("networking.k8s.io/v1", "networkpolicies", "NetworkPolicy", NS).short(&["netpol"]),
    row("policy/v1", "poddisruptionbudgets", "PodDisruptionBudget", NS)
        .short(&["pdb"])
        .status()
        .generation(),
    row(
        "rbac.authorization.k8s.io/v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        CL,
    ),
    row("rbac.authorization.k8s.io/v1", "clusterroles", "ClusterRole", CL),
    row("rbac.authorization.k8s.io/v1", "rolebindings", "RoleBinding", NS),
    row("rbac.authorization.k8s.io/v1", "roles", "Role", NS),
    row(
        "apiextensions.k8s.io/v1",
        "customresourcedefinitions",
        "CustomResourceDefinition",
        CL,
    )
    .short(&["crd", "crds"])
    .status()
    .generation(),
    row("coordination.k8s.io/v1", "leases", "Lease", NS),
];

fn builtin(r: &Row) -> ResourceInfo {
    let (group, version) = r.gv.rsplit_once('/').unwrap_or(("", r.gv));
    let categories = if r.all {
        vec!["all".to_string()]
    } else if r.plural == "customresourcedefinitions" {
        vec!["api-extensions".to_string()]
    } else {
        Vec::new()
    };
    ResourceInfo {
        group: group.to_string(),
        version: version.to_string(),
        plural: r.plural.to_string(),
        singular: r.kind.to_lowercase(),
        kind: r.kind.to_string(),
        namespaced: r.namespaced,
        short_names: r.short.iter().map(|s| s.to_string()).collect(),
        categories,
        status: r.status,
        scale: r.scale.then(|| ScaleSpec {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".status.selector".into()),
        }),
        generation: r.generation,
        create_only: r.create_only,
        custom: None,
        key: builtin_key(group, r.plural),
    }
}

/// Storage key of a built-in resource. events.k8s.io/v1 Events live in the core/v1 Event storage (the real
/// server serves one resource in both groups, see `events.rs`).
fn builtin_key(group: &str, plural: &str) -> ResKey {
    if group == "events.k8s.io" && plural == "events" {
        res_key("", "events")
    } else {
        res_key(group, plural)
    }
}

/// The storage keys of every built-in resource (the etcd key layout is derived from them).
pub fn builtin_storage_keys() -> Vec<ResKey> {
    let mut keys: Vec<ResKey> = BUILTINS
        .iter()
        .map(|r| builtin_key(r.gv.rsplit_once('/').map_or("", |(g, _)| g), r.plural))
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// Kubernetes version priority: GA > beta > alpha, higher numbers first, then others alphabetically.
pub fn version_priority(v: &str) -> (u8, i64, i64, String) {
    let parse = |s: &str| -> Option<(u8, i64, i64)> {
        let rest = s.strip_prefix('v')?;
        let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
        let major: i64 = digits.parse().ok()?;
        let tail = &rest[digits.len()..];
        if tail.is_empty() {
            return Some((3, major, 0));
        }
        let (rank, num) = if let Some(n) = tail.strip_prefix("beta") {
            (2, n)
        } else if let Some(n) = tail.strip_prefix("alpha") {
            (1, n)
        } else {
            return None;
        };
        Some((rank, major, num.parse().ok()?))
    };
    match parse(v) {
        Some((rank, major, minor)) => (rank, major, minor, String::new()),
        None => (0, 0, 0, v.to_string()),
    }
}

/// Sort versions most preferred first.
pub fn sort_versions(versions: &mut [String]) {
    versions.sort_by(|a, b| {
        let (pa, pb) = (version_priority(a), version_priority(b));
        (pb.0, pb.1, pb.2)
            .cmp(&(pa.0, pa.1, pa.2))
            .then_with(|| pa.3.cmp(&pb.3))
    });
}

/// All served resources. Cheap to query; rebuilt indexes on every CRD change.
pub struct Registry {
    builtins: Vec<Arc<ResourceInfo>>,
    crds: BTreeMap<String, Vec<Arc<ResourceInfo>>>,
    by_gvr: HashMap<(String, String, String), Arc<ResourceInfo>>,
    by_gvk: HashMap<(String, String), Arc<ResourceInfo>>,
    by_key: HashMap<ResKey, Arc<ResourceInfo>>,
    /// Bumped on every change (discovery/OpenAPI hashes).
    pub generation: u64,
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    pub fn new() -> Self {
        let builtins = BUILTINS.iter().map(|r| Arc::new(builtin(r))).collect();
        let mut r = Registry {
            builtins,
            crds: BTreeMap::new(),
            by_gvr: HashMap::new(),
            by_gvk: HashMap::new(),
            by_key: HashMap::new(),
            generation: 1,
        };
        r.reindex();
        r
    }

    fn all(&self) -> impl Iterator<Item = &Arc<ResourceInfo>> {
        self.builtins.iter().chain(self.crds.values().flatten())
    }

    fn reindex(&mut self) {
        let mut by_gvr = HashMap::new();
        let mut by_gvk = HashMap::new();
        let mut by_key = HashMap::new();
        for ri in self.all() {
            by_gvr.insert((ri.group.clone(), ri.version.clone(), ri.plural.clone()), ri.clone());
            by_gvk
                .entry((ri.api_version(), ri.kind.clone()))
                .or_insert_with(|| ri.clone());
            // A CRD's storage version owns its key; of built-ins sharing a key (core and events.k8s.io
            // Events) the first row, the storage shape, does.
            let storage = ri.custom.as_ref().is_some_and(|c| c.storage_version == ri.version);
            if storage || !by_key.contains_key(&ri.key) {
                by_key.insert(ri.key.clone(), ri.clone());
            }
        }
        self.by_gvr = by_gvr;
        self.by_gvk = by_gvk;
        self.by_key = by_key;
        self.generation += 1;
    }

    pub fn find(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    pub fn by_gvk(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvk.get(&(api_version.to_string(), kind.to_string())).cloned()
    }

    /// The storage-version resource of a storage key.
    pub fn by_key(&self, key: &str) -> Option<Arc<ResourceInfo>> {
        self.by_key.get(key).cloned()
    }

    /// Groups in discovery order with their versions, most preferred first. The core group is `""`.
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for ri in self.all() {
            match out.iter_mut().find(|(g, _)| *g == ri.group) {
                Some((_, vs)) => {
                    if !vs.contains(&ri.version) {
                        vs.push(ri.version.clone());
                    }
                }
                None => out.push((ri.group.clone(), vec![ri.version.clone()])),
            }
        }
        for (_, vs) in out.iter_mut() {
            sort_versions(vs);
        }
        out
    }

    /// Resources of one group version, in table order.
    pub fn resources(&self, group: &str, version: &str) -> Vec<Arc<ResourceInfo>> {
        self.all()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    /// Every served resource of a group, all versions.
    pub fn group_resources(&self, group: &str) -> Vec<Arc<ResourceInfo>> {
        self.all().filter(|r| r.group == group).cloned().collect()
    }

    pub fn has_group(&self, group: &str) -> bool {
        self.all().any(|r| r.group == group)
    }

    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.all().any(|r| r.group == group && r.version == version)
    }

    /// Storage keys of every namespaced resource (namespace cleanup).
    pub fn namespaced_keys(&self) -> Vec<ResKey> {
        let mut keys: Vec<ResKey> = self
            .by_key
            .values()
            .filter(|r| r.namespaced)
            .map(|r| r.key.clone())
            .collect();
        keys.sort();
        keys
    }

    /// Replace the resources served for CRD `crd_name` (empty `infos` removes them).
    pub fn set_crd(&mut self, crd_name: &str, infos: Vec<ResourceInfo>) {
        if infos.is_empty() {
            if self.crds.remove(crd_name).is_none() {
                return;
            }
        } else {
            self.crds
                .insert(crd_name.to_string(), infos.into_iter().map(Arc::new).collect());
        }
        self.reindex();
    }

    pub fn crd_resources(&self, crd_name: &str) -> Option<&Vec<Arc<ResourceInfo>>> {
        self.crds.get(crd_name)
    }
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    let mut cur = v;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

fn str_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The resources a CRD object serves (one per `served: true` version, most preferred first).
pub fn infos_from_crd(crd: &Value) -> Vec<ResourceInfo> {
    let Some(name) = str_at(crd, &["metadata", "name"]) else {
        return Vec::new();
    };
    let Some(group) = str_at(crd, &["spec", "group"]) else {
        return Vec::new();
    };
    let names = &crd["spec"]["names"];
    let (Some(plural), Some(kind)) = (names["plural"].as_str(), names["kind"].as_str()) else {
        return Vec::new();
    };
    let singular = names["singular"]
        .as_str()
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let namespaced = crd["spec"]["scope"].as_str() != Some("Cluster");
    let versions = crd["spec"]["versions"].as_array().cloned().unwrap_or_default();
    let storage_version = versions
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))
        .and_then(|v| v["name"].as_str())
        .unwrap_or_default()
        .to_string();
    let mut out: Vec<ResourceInfo> = versions
        .iter()
        .filter(|v| v["served"].as_bool() != Some(false))
        .filter_map(|v| {
            let version = v["name"].as_str()?.to_string();
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .map(|s| Arc::new(CrdSchema::new(s)));
            let sub = &v["subresources"];
            let scale = sub.get("scale").filter(|s| s.is_object()).map(|s| ScaleSpec {
                spec_replicas: s["specReplicasPath"].as_str().unwrap_or(".spec.replicas").to_string(),
                status_replicas: s["statusReplicasPath"]
                    .as_str()
                    .unwrap_or(".status.replicas")
                    .to_string(),
                label_selector: s["labelSelectorPath"].as_str().map(str::to_string),
            });
            Some(ResourceInfo {
                group: group.to_string(),
                version,
                plural: plural.to_string(),
                singular: singular.clone(),
                kind: kind.to_string(),
                namespaced,
                short_names: str_list(names.get("shortNames")),
                categories: str_list(names.get("categories")),
                status: sub.get("status").is_some_and(|s| !s.is_null()),
                scale,
                generation: true,
                create_only: false,
                custom: Some(CustomInfo {
                    crd_name: name.to_string(),
                    schema,
                    printer_columns: crate::table::printer_columns_from_crd_version(v),
                    storage_version: storage_version.clone(),
                }),
                key: res_key(group, plural),
            })
        })
        .collect();
    out.sort_by(|a, b| {
        let (pa, pb) = (version_priority(&a.version), version_priority(&b.version));
        (pb.0, pb.1, pb.2)
            .cmp(&(pa.0, pa.1, pa.2))
            .then_with(|| pa.3.cmp(&pb.3))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn builtins_resolve() {
        let r = Registry::new();
        let d = r.find("apps", "v1", "deployments").unwrap();
        assert!(d.namespaced && d.status && d.scale.is_some() && d.generation);
        assert_eq!(r.by_gvk("v1", "ConfigMap").unwrap().plural, "configmaps");
        assert_eq!(r.by_key("/namespaces").unwrap().kind, "Namespace");
        let ev = r.find("events.k8s.io", "v1", "events").unwrap();
        assert_eq!(ev.key, r.find("", "v1", "events").unwrap().key);
        assert_eq!(
            r.by_key(&ev.key).unwrap().group,
            "",
            "core/v1 is the storage shape of Events"
        );
        assert!(r.find("", "v1", "nope").is_none());
    }

    #[test]
    fn version_order() {
        let mut v = vec![
            "v1beta1".to_string(),
            "v1".into(),
            "v2alpha1".into(),
            "v2".into(),
            "foo".into(),
        ];
        sort_versions(&mut v);
        assert_eq!(v, vec!["v2", "v1", "v1beta1", "v2alpha1", "foo"]);
    }

    #[test]
    fn crd_infos() {
        let crd = json!({"metadata":{"name":"apps.demo.example.com"},"spec":{"group":"demo.example.com","scope":"Namespaced",
            "names":{"plural":"apps","kind":"App","shortNames":["ap"]},
            "versions":[{"name":"v1","served":true,"storage":true,"subresources":{"status":{},"scale":{"specReplicasPath":".spec.replicas","statusReplicasPath":".status.replicas"}}},
                        {"name":"v1beta1","served":false,"storage":false}]}});
        let infos = infos_from_crd(&crd);
        assert_eq!(infos.len(), 1);
        assert_eq!(infos[0].singular, "app");
        assert!(infos[0].status && infos[0].scale.is_some());
        let mut r = Registry::new();
        r.set_crd("apps.demo.example.com", infos);
        assert!(r.find("demo.example.com", "v1", "apps").is_some());
        assert!(r.groups().iter().any(|(g, _)| g == "demo.example.com"));
        r.set_crd("apps.demo.example.com", Vec::new());
        assert!(r.find("demo.example.com", "v1", "apps").is_none());
    }
}
