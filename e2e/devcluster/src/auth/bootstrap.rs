//! The default RBAC policy kube-apiserver creates at start (its "bootstrap policy"), for the parts that mean
//! something here: `cluster-admin`; the user-facing `admin`, `edit` and `view`, aggregated from
//! `system:aggregate-to-admin`/`-edit`/`-view` (so a CRD's ClusterRole labelled
//! `rbac.authorization.k8s.io/aggregate-to-view: "true"` extends `view`, as on a real cluster); discovery,
//! public-info, basic-user, monitoring and auth-delegator roles; and their default bindings. The rules are
//! kube's own, including resources devcluster does not serve, so a role copied from a real cluster grants
//! the same here.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::server::ops::{self, WriteOpts};
use crate::server::Shared;

use super::rbac::RBAC_GROUP;
use super::rules::Rule;
use super::{SERVICE_ACCOUNTS_GROUP, SYSTEM_AUTHENTICATED, SYSTEM_MASTERS, SYSTEM_UNAUTHENTICATED};

pub const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
pub const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
pub const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const READ_WRITE: &[&str] = crate::registry::STANDARD_VERBS;

fn meta(name: &str, labels: &[&str]) -> Value {
    let mut l = json!({"kubernetes.io/bootstrapping": "rbac-defaults"});
    for k in labels {
        l[*k] = json!("true");
    }
    json!({"name": name, "labels": l, "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"}})
}

fn role(name: &str, labels: &[&str], rules: Vec<Rule>) -> Value {
    let rules: Vec<Value> = rules.iter().map(Rule::to_json).collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(name, labels),
        "rules": rules})
}

fn aggregated(name: &str, labels: &[&str], selector_label: &str) -> Value {
    let mut r = role(name, labels, Vec::new());
    r["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {selector_label: "true"}}]});
    r
}

fn r(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
    Rule::new(verbs, groups, resources)
}

fn aggregate_to_view() -> Vec<Rule> {
    vec![
        r(
            READ,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
        ),
        r(
            READ,
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
        ),
        r(READ, &[""], &["namespaces"]),
        r(READ, &["discovery.k8s.io"], &["endpointslices"]),
        r(
            READ,
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
        ),
        r(
            READ,
            &["autoscaling"],
            &["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
        ),
        r(
            READ,
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
        ),
        r(
            READ,
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
        ),
        r(
            READ,
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
        ),
        r(
            READ,
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
        ),
    ]
}

fn aggregate_to_edit() -> Vec<Rule> {
    vec![
        r(
            READ,
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
        ),
        r(&["impersonate"], &[""], &["serviceaccounts"]),
        r(
            WRITE,
            &[""],
            &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
        ),
        r(&["create"], &[""], &["pods/eviction"]),
        r(
            WRITE,
            &[""],
            &[
                "configmaps",
                "endpoints",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
        ),
        r(&["create"], &[""], &["serviceaccounts/token"]),
        r(
            WRITE,
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
        ),
        r(WRITE, &["autoscaling"], &["horizontalpodautoscalers"]),
        r(WRITE, &["batch"], &["cronjobs", "jobs"]),
        r(
            WRITE,
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
        ),
        r(WRITE, &["policy"], &["poddisruptionbudgets"]),
        r(WRITE, &["networking.k8s.io"], &["ingresses", "networkpolicies"]),
        r(READ_WRITE, &["coordination.k8s.io"], &["leases"]),
    ]
}

fn aggregate_to_admin() -> Vec<Rule> {
    vec![
        r(&["create"], &["authorization.k8s.io"], &["localsubjectaccessreviews"]),
        r(READ_WRITE, &[RBAC_GROUP], &["rolebindings", "roles"]),
    ]
}

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let get = &["get"];
    vec![
        role(
            "cluster-admin",
            &[],
            vec![r(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])],
        ),
        aggregated("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated("edit", &[AGGREGATE_TO_ADMIN], AGGREGATE_TO_EDIT),
        aggregated("view", &[AGGREGATE_TO_EDIT], AGGREGATE_TO_VIEW),
        role("system:aggregate-to-admin", &[AGGREGATE_TO_ADMIN], aggregate_to_admin()),
        role("system:aggregate-to-edit", &[AGGREGATE_TO_EDIT], aggregate_to_edit()),
        role("system:aggregate-to-view", &[AGGREGATE_TO_VIEW], aggregate_to_view()),
        role(
            "system:discovery",
            &[],
            vec![Rule::urls(
                get,
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
            )],
        ),
        role(
            "system:public-info-viewer",
            &[],
            vec![Rule::urls(
                get,
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
            )],
        ),
        role(
            "system:basic-user",
            &[],
            vec![
                r(
                    &["create"],
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                ),
                r(&["create"], &["authentication.k8s.io"], &["selfsubjectreviews"]),
            ],
        ),
        role(
            "system:monitoring",
            &[],
            vec![Rule::urls(
                get,
                &[
                    "/healthz",
                    "/healthz/*",
                    "/livez",
                    "/livez/*",
                    "/metrics",
                    "/metrics/slis",
                    "/readyz",
                    "/readyz/*",
                ],
            )],
        ),
        role(
            "system:auth-delegator",
            &[],
            vec![
                r(&["create"], &["authentication.k8s.io"], &["tokenreviews"]),
                r(&["create"], &["authorization.k8s.io"], &["subjectaccessreviews"]),
            ],
        ),
        role(
            "system:service-account-issuer-discovery",
            &[],
            vec![Rule::urls(
                get,
                &["/.well-known/openid-configuration", "/openid/v1/jwks"],
            )],
        ),
    ]
}

fn binding(role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"kind": "Group", "apiGroup": RBAC_GROUP, "name": g}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(role, &[]),
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": role}, "subjects": subjects})
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", &[SYSTEM_MASTERS]),
        binding("system:discovery", &[SYSTEM_AUTHENTICATED]),
        binding("system:basic-user", &[SYSTEM_AUTHENTICATED]),
        binding(
            "system:public-info-viewer",
            &[SYSTEM_AUTHENTICATED, SYSTEM_UNAUTHENTICATED],
        ),
        binding("system:monitoring", &["system:monitoring"]),
        binding("system:service-account-issuer-discovery", &[SERVICE_ACCOUNTS_GROUP]),
    ]
}

/// Create the default policy objects that do not exist yet (a restarted cluster keeps its own edits).
pub fn create_defaults(sh: &Arc<Shared>) {
    let reg = sh.registry.read();
    let (Some(roles), Some(bindings)) = (
        reg.find(RBAC_GROUP, "v1", "clusterroles"),
        reg.find(RBAC_GROUP, "v1", "clusterrolebindings"),
    ) else {
        return;
    };
    drop(reg);
    let opts = WriteOpts::system("rbac-bootstrap");
    for (ri, objs) in [(roles, cluster_roles()), (bindings, cluster_role_bindings())] {
        for obj in objs {
            let name = obj["metadata"]["name"].as_str().unwrap_or_default().to_string();
            if sh.store.get(&ri.key, "", &name).is_some() {
                continue;
            }
            if let Err(e) = ops::create(sh, &ri, None, obj, &[], &opts) {
                tracing::warn!(name, error = %e, "default RBAC object");
            }
        }
    }
}
