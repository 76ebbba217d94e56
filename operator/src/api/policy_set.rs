//! PolicySet: Rego policies that gate syncs.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::schema;

/// Rego (v1) policies evaluated before every sync, automated ones included, and on every
/// comparison. A policy produces `deny contains msg` and `warn contains msg` sets.
#[derive(CustomResource, Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "PolicySet",
    plural = "policysets",
    namespaced,
    status = "PolicySetStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "cpolicy",
    category = "capstan",
    category = "gitops",
    doc = "Rego policies that gate the syncs of matching Applications.",
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Enforcement", "type": "string", "jsonPath": ".spec.enforcement"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PolicySetSpec {
    /// The policies (at most 256); each is a Rego v1 module.
    #[schemars(length(min = 1, max = 256))]
    pub policies: Vec<Policy>,

    /// `Deny` blocks the sync (condition `PolicyDenied`), `Warn` records the messages,
    /// `DryRun` only reports them in this object's status.
    #[serde(default)]
    pub enforcement: Enforcement,

    /// Which Applications the policies apply to, by label; empty selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Namespaces of the Applications the policies apply to; empty means this PolicySet's own
    /// namespace, or every namespace for a PolicySet in the operator namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,

    /// What the policies are evaluated against: `Application` (input `{application, cluster,
    /// repository}`, once per sync) and/or `Resource` (input `{resource, application}`, once
    /// per rendered object).
    #[serde(default = "default_targets")]
    #[schemars(length(min = 1))]
    pub targets: Vec<PolicyTarget>,
}

fn default_targets() -> Vec<PolicyTarget> {
    vec![PolicyTarget::Application, PolicyTarget::Resource]
}

impl Default for PolicySetSpec {
    fn default() -> Self {
        Self {
            policies: Vec::new(),
            enforcement: Enforcement::default(),
            selector: None,
            namespaces: Vec::new(),
            targets: default_targets(),
        }
    }
}

/// One Rego module, inline or from a ConfigMap.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.rego) != has(self.configMapRef)")
    .message("exactly one of rego or configMapRef must be set"))]
pub struct Policy {
    /// Name of the policy; it appears in every message the policy produces.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,

    /// The Rego v1 module source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rego: Option<String>,

    /// A key of a ConfigMap in this namespace that holds the Rego v1 module source.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<ConfigMapKeyReference>,
}

/// A key of a ConfigMap in the referring object's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapKeyReference {
    /// Name of the ConfigMap.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key in the ConfigMap's `data`.
    #[schemars(length(min = 1))]
    pub key: String,
}

/// What a policy violation does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum Enforcement {
    /// Block the sync and set `PolicyDenied`; a policy that fails to compile blocks too.
    #[default]
    Deny,
    /// Record the messages on the Application; never block.
    Warn,
    /// Only report in this PolicySet's status.
    DryRun,
}

/// What policies are evaluated against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum PolicyTarget {
    /// The Application as a whole, with its cluster and repository.
    Application,
    /// Each rendered object, with its Application.
    Resource,
}

/// Observed state of a PolicySet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PolicySetStatus {
    /// `Ready` (every policy compiles), `Reconciling`, `Stalled`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// How many policies compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiled_policies: Option<i64>,

    /// Compile errors per policy, or the last evaluation summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}
