//! Cluster: where manifests go.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{schema, LocalObjectReference};

/// A Kubernetes cluster Applications deploy to. The object's labels drive the ApplicationSet
/// cluster generator. The operator's own cluster (`https://kubernetes.default.svc`, name
/// `in-cluster`) needs no Cluster object.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "Cluster",
    plural = "clusters",
    namespaced,
    status = "ClusterStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "ccluster",
    category = "capstan",
    category = "gitops",
    doc = "A Kubernetes cluster that Applications deploy to.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Server", "type": "string", "jsonPath": ".spec.server"}"#,
    printcolumn = r#"{"name": "Version", "type": "string", "jsonPath": ".status.serverVersion"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterSpec {
    /// URL of the cluster's API server; Application destinations name it in
    /// `destination.server`, or name this object in `destination.name`.
    #[schemars(length(min = 1, max = 2048), regex(pattern = r"^https?://"))]
    pub server: String,

    /// Secret in this namespace with either `kubeconfig`, or `bearerToken` and `caCert`
    /// (optionally `insecureSkipTLSVerify: "true"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,

    /// Namespaces Applications may deploy to on this cluster; empty allows all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,

    /// Namespaces whose Applications and ApplicationSets may use this object, as patterns (`*` any run of
    /// characters, `?` one character, no negation; `"*"` = every namespace). Empty: only this object's own
    /// namespace. Only honoured in the operator namespace: elsewhere an object serves its own namespace alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    #[x_kube(validation = Rule::new("self.all(p, size(p) <= 253 && p.matches('^[a-z0-9*?-]+$'))")
        .message("sourceNamespaces entries are patterns of a-z, 0-9, '-', '*' and '?' (no '!' negation)"))]
    pub source_namespaces: Vec<String>,
}

/// Observed state of a Cluster.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterStatus {
    /// `Ready` (API server reachable with the credentials), `Reconciling`, `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// The API server's version (`gitVersion`, e.g. `v1.33.1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_version: Option<String>,

    /// When the API server was last probed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_probe_time: Option<Time>,

    /// How many Applications deploy to this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_applications: Option<i64>,
}
