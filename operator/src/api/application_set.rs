//! ApplicationSet: generators × template → Applications, in Argo CD's shape.
//!
//! Generators nest at most three levels deep, as in Argo CD: a top-level `matrix`/`merge`
//! holds [`NestedGenerator`]s, whose `matrix`/`merge` hold [`TerminalGenerator`]s. Structural
//! schemas cannot express unbounded recursion, and the bound keeps the CRD small.

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::application::{ApplicationSpec, ResourceHealth, SyncStatusCode};
use super::{is_false, schema};

/// Generates Applications from a template and the parameter sets of its generators.
/// Generated Applications carry an ownerReference to the set.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "capstan.dev",
    version = "v1alpha1",
    kind = "ApplicationSet",
    plural = "applicationsets",
    namespaced,
    status = "ApplicationSetStatus",
    derive = "Default",
    derive = "PartialEq",
    shortname = "cappset",
    category = "capstan",
    category = "gitops",
    doc = "Generates Applications from a template and the parameters of its generators.",
    printcolumn = r#"{"name": "Applications", "type": "integer", "jsonPath": ".status.resourcesCount"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSpec {
    /// Generators (at most 64); each produces parameter sets, and every set renders one
    /// Application.
    #[schemars(length(min = 1, max = 64))]
    pub generators: Vec<ApplicationSetGenerator>,

    /// The Application template; `{{param}}` (or Go template syntax with `goTemplate`) is
    /// substituted in every string.
    pub template: ApplicationSetTemplate,

    /// A Go template rendered per parameter set and merged over `template`, for fields that
    /// need non-string values. Requires `goTemplate`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_patch: Option<String>,

    /// Use Go template syntax (`{{ .param }}`) with the common Sprig functions.
    #[serde(default, skip_serializing_if = "is_false")]
    pub go_template: bool,

    /// Go template options, e.g. `missingkey=error`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub go_template_options: Vec<String>,

    /// What the controller may do to generated Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<ApplicationSetSyncPolicy>,

    /// Fields of generated Applications that users may change without the controller
    /// reverting them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_application_differences: Vec<ApplicationSetIgnoreDifferences>,

    /// How changes roll out to generated Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<ApplicationSetStrategy>,
}

/// A generator: exactly one of `list`, `clusters`, `git`, `matrix` or `merge`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.list), has(self.clusters), has(self.git), has(self.matrix), has(self.merge)].filter(x, x).size() == 1")
    .message("a generator sets exactly one of list, clusters, git, matrix or merge"))]
pub struct ApplicationSetGenerator {
    /// Parameter sets listed inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<ListGenerator>,

    /// One parameter set per Cluster object (and the operator's own cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterGenerator>,

    /// Parameter sets from directories or files in a Git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitGenerator>,

    /// The cartesian product of two child generators.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<MatrixGenerator>,

    /// Child generators' parameter sets joined on `mergeKeys`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<MergeGenerator>,

    /// Keep only the parameter sets whose values match this label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A child of a top-level `matrix` or `merge`: exactly one of `list`, `clusters`, `git`,
/// `matrix` or `merge`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.list), has(self.clusters), has(self.git), has(self.matrix), has(self.merge)].filter(x, x).size() == 1")
    .message("a generator sets exactly one of list, clusters, git, matrix or merge"))]
pub struct NestedGenerator {
    /// Parameter sets listed inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<ListGenerator>,

    /// One parameter set per Cluster object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterGenerator>,

    /// Parameter sets from a Git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitGenerator>,

    /// A matrix of terminal generators (the last level of nesting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix: Option<NestedMatrixGenerator>,

    /// A merge of terminal generators (the last level of nesting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge: Option<NestedMergeGenerator>,

    /// Keep only the parameter sets whose values match this label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// A generator at the last level of nesting: exactly one of `list`, `clusters` or `git`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("[has(self.list), has(self.clusters), has(self.git)].filter(x, x).size() == 1")
    .message("a generator at the last level of nesting sets exactly one of list, clusters or git"))]
pub struct TerminalGenerator {
    /// Parameter sets listed inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub list: Option<ListGenerator>,

    /// One parameter set per Cluster object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clusters: Option<ClusterGenerator>,

    /// Parameter sets from a Git repository.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<GitGenerator>,

    /// Keep only the parameter sets whose values match this label selector.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,
}

/// Parameter sets listed inline.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListGenerator {
    /// The parameter sets, one object each.
    #[serde(default)]
    #[schemars(schema_with = "schema::free_form_object_list")]
    pub elements: Vec<serde_json::Value>,

    /// The parameter sets as a YAML list (a string), e.g. produced by another generator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elements_yaml: Option<String>,

    /// Template fields that override `spec.template` for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub template: Option<serde_json::Value>,
}

/// One parameter set per Cluster object matching `selector`: `name`, `nameNormalized`,
/// `server`, `project`, `metadata.labels.*`, `metadata.annotations.*`, `values.*`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterGenerator {
    /// Which Cluster objects, by label; empty selects all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<LabelSelector>,

    /// Extra parameters (`values.<key>`) added to every set; may use the cluster's parameters.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,

    /// Template fields that override `spec.template` for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub template: Option<serde_json::Value>,
}

/// Parameter sets from directories or files in a Git repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitGenerator {
    /// URL of the repository.
    #[serde(rename = "repoURL")]
    #[schemars(length(min = 1))]
    pub repo_url: String,

    /// Branch, tag or commit to read (default `HEAD`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,

    /// One parameter set per matching directory: `path.path`, `path.segments`,
    /// `path.basename`, `path.basenameNormalized`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub directories: Vec<GitDirectoryGeneratorItem>,

    /// One parameter set per matching JSON/YAML file (or per list item in it), its keys
    /// flattened, plus the path parameters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<GitFileGeneratorItem>,

    /// Prefix for the path parameters (`<prefix>.path...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_param_prefix: Option<String>,

    /// Extra parameters (`values.<key>`) added to every set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub values: BTreeMap<String, String>,

    /// How often to re-read the repository, in seconds (default 180).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub requeue_after_seconds: Option<i64>,

    /// Template fields that override `spec.template` for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub template: Option<serde_json::Value>,
}

/// A directory glob for the Git generator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitDirectoryGeneratorItem {
    /// Glob of directories, e.g. `apps/*`.
    pub path: String,
    /// Exclude the directories matching `path` instead of including them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclude: bool,
}

/// A file glob for the Git generator.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GitFileGeneratorItem {
    /// Glob of files, e.g. `clusters/**/config.json`.
    pub path: String,
    /// Exclude the files matching `path` instead of including them.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclude: bool,
}

/// The cartesian product of two child generators; the second may use the first's
/// parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MatrixGenerator {
    /// Exactly two child generators.
    #[schemars(length(min = 2, max = 2))]
    pub generators: Vec<NestedGenerator>,

    /// Template fields that override `spec.template` for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub template: Option<serde_json::Value>,
}

/// Child generators' parameter sets joined on `mergeKeys`; later generators override.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MergeGenerator {
    /// The child generators (2 to 16); the first is the base.
    #[schemars(length(min = 2, max = 16))]
    pub generators: Vec<NestedGenerator>,

    /// Parameters whose values identify a set across children.
    #[schemars(length(min = 1))]
    pub merge_keys: Vec<String>,

    /// Template fields that override `spec.template` for this generator's Applications.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub template: Option<serde_json::Value>,
}

/// A matrix at the last level of nesting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedMatrixGenerator {
    /// Exactly two terminal generators.
    #[schemars(length(min = 2, max = 2))]
    pub generators: Vec<TerminalGenerator>,
}

/// A merge at the last level of nesting.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NestedMergeGenerator {
    /// The terminal generators (2 to 16); the first is the base.
    #[schemars(length(min = 2, max = 16))]
    pub generators: Vec<TerminalGenerator>,

    /// Parameters whose values identify a set across children.
    #[schemars(length(min = 1))]
    pub merge_keys: Vec<String>,
}

/// The Application template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetTemplate {
    /// Metadata of the generated Application.
    pub metadata: ApplicationSetTemplateMeta,
    /// Spec of the generated Application.
    pub spec: ApplicationSpec,
}

/// Metadata of a generated Application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetTemplateMeta {
    /// Name; must be unique per parameter set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Namespace; must be the ApplicationSet's namespace (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Finalizers, e.g. `capstan.dev/resources` for cascade deletion.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub finalizers: Vec<String>,
}

/// What the controller may do to generated Applications.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetSyncPolicy {
    /// `create-only`, `create-update`, `create-delete` or `sync` (the default: create,
    /// update and delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applications_sync: Option<ApplicationsSyncPolicy>,

    /// Keep the resources of a generated Application when it is deleted (no resources
    /// finalizer on generated Applications).
    #[serde(default, skip_serializing_if = "is_false")]
    pub preserve_resources_on_deletion: bool,
}

/// What the controller may do to generated Applications.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum ApplicationsSyncPolicy {
    /// Create; never update or delete.
    CreateOnly,
    /// Create and update; never delete.
    CreateUpdate,
    /// Create and delete; never update.
    CreateDelete,
    /// Create, update and delete.
    #[default]
    Sync,
}

/// Fields of generated Applications the controller leaves alone.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetIgnoreDifferences {
    /// Name of the Application; empty matches all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// JSON pointers (RFC 6901) of fields to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,
    /// jq path expressions of fields to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,
}

/// How changes roll out to generated Applications.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type != 'RollingSync' || has(self.rollingSync)")
    .message("strategy RollingSync needs rollingSync.steps"))]
pub struct ApplicationSetStrategy {
    /// `AllAtOnce` (the default) or `RollingSync`.
    #[serde(rename = "type", default)]
    pub type_: StrategyType,

    /// Steps of a `RollingSync`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolling_sync: Option<RollingSyncStrategy>,
}

/// Rollout strategy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum StrategyType {
    /// Update every Application at once.
    #[default]
    AllAtOnce,
    /// Sync Applications in steps; turns automated sync off on generated Applications.
    RollingSync,
}

/// A rolling sync: each step syncs the Applications it matches and waits until they are
/// Healthy before the next. Applications no step matches are never synced by the rollout.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingSyncStrategy {
    /// The steps, in order.
    #[serde(default)]
    pub steps: Vec<RollingSyncStep>,
}

/// One step of a rolling sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollingSyncStep {
    /// Label expressions selecting the step's Applications (all must match).
    #[serde(default)]
    pub match_expressions: Vec<ApplicationMatchExpression>,

    /// How many of the step's Applications sync at once: a number or a percentage (default
    /// 100%; percentages round down but to at least 1; `0` means manual).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_update: Option<IntOrString>,
}

/// A label expression.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationMatchExpression {
    /// Label key.
    pub key: String,
    /// `In` or `NotIn`.
    pub operator: MatchOperator,
    /// Label values.
    #[serde(default)]
    pub values: Vec<String>,
}

/// Operator of a label expression.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum MatchOperator {
    /// The label's value is one of `values`.
    #[default]
    In,
    /// The label is absent or its value is none of `values`.
    NotIn,
    /// The label is present (`values` must be empty).
    Exists,
    /// The label is absent (`values` must be empty).
    DoesNotExist,
}

/// Observed state of an ApplicationSet.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetStatus {
    /// `Ready`, `Reconciling`, `Stalled`, and Argo CD's `ErrorOccurred`,
    /// `ParametersGenerated`, `ResourcesUpToDate`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Rollout progress per generated Application.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub application_status: Vec<ApplicationSetApplicationStatus>,

    /// The generated Applications with their sync and health (capped; see `resourcesCount`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ApplicationSetResource>,

    /// How many Applications the set generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources_count: Option<i64>,
}

/// Rollout progress of one generated Application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetApplicationStatus {
    /// Name of the Application.
    pub application: String,
    /// `Waiting`, `Pending`, `Progressing` or `Healthy`.
    pub status: RolloutStatus,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The rolling sync step (1-based) the Application belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Rollout state of a generated Application.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum RolloutStatus {
    /// Out of sync, waiting for its step.
    #[default]
    Waiting,
    /// Its step started; the sync is about to be requested.
    Pending,
    /// Syncing or not yet Healthy.
    Progressing,
    /// Synced and Healthy.
    Healthy,
}

/// A generated Application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSetResource {
    /// Name of the Application.
    pub name: String,
    /// Namespace of the Application.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its sync status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SyncStatusCode>,
    /// Its health.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
}

/// Drops the CEL rules on the *contents* of strings (`self.matches(...)`: `helm.releaseName`,
/// `destination.serviceAccountName`) from the template's schema in the ApplicationSet CRD: a template holds
/// `{{name}}` placeholders there, which only become a name once generated. Each generated Application is
/// checked by the Application CRD's rules and by the controller, so nothing goes unchecked.
pub fn relax_template_rules(crd: &mut CustomResourceDefinition) {
    for version in &mut crd.spec.versions {
        let template = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|root| root.properties.as_mut()?.get_mut("spec"))
            .and_then(|spec| spec.properties.as_mut()?.get_mut("template"));
        if let Some(template) = template {
            drop_content_rules(template);
        }
    }
}

fn drop_content_rules(schema: &mut JSONSchemaProps) {
    if let Some(rules) = schema.x_kubernetes_validations.as_mut() {
        rules.retain(|r| !r.rule.contains("self.matches("));
        if rules.is_empty() {
            schema.x_kubernetes_validations = None;
        }
    }
    for child in schema.properties.iter_mut().flat_map(|p| p.values_mut()) {
        drop_content_rules(child);
    }
    match schema.items.as_mut() {
        Some(JSONSchemaPropsOrArray::Schema(item)) => drop_content_rules(item),
        Some(JSONSchemaPropsOrArray::Schemas(items)) => items.iter_mut().for_each(drop_content_rules),
        None => {}
    }
}
