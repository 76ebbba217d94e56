//! Application: one source, one destination, in Argo CD's shape.
//!
//! `Application` has a top-level `operation` beside `spec` and `status`, as in Argo CD, which
//! `#[derive(CustomResource)]` cannot express; so the root type, its `Resource` impl and its CRD
//! are written by hand here, with the schema generated exactly as kube-derive does.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceColumnDefinition, CustomResourceDefinition, CustomResourceDefinitionNames,
    CustomResourceDefinitionSpec, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::NamespaceResourceScope;
use kube::core::object::{HasSpec, HasStatus};
use kube::core::ApiResource;
use kube::{CustomResourceExt, KubeSchema, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{is_false, schema, API_VERSION, CATEGORIES, GROUP, VERSION};

const KIND: &str = "Application";
const PLURAL: &str = "applications";
const SINGULAR: &str = "application";
const SHORT_NAMES: &[&str] = &["capp"];

/// An Application: manifests from one source in Git, delivered to one destination.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(
    title = "Application",
    description = "An Application: manifests from one source in Git, delivered to one destination."
)]
pub struct Application {
    /// Standard object metadata.
    #[schemars(skip)]
    pub metadata: ObjectMeta,

    /// What to deliver, where, and how to sync it.
    pub spec: ApplicationSpec,

    /// A requested operation (a sync or rollback). Set it with kubectl to sync; the controller
    /// removes it once the operation has started and records it in `status.operationState`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<Operation>,

    /// Observed state, in Argo CD's shape plus metav1 conditions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ApplicationStatus>,
}

impl Application {
    /// A new Application with the given name and spec.
    pub fn new(name: &str, spec: ApplicationSpec) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            spec,
            operation: None,
            status: None,
        }
    }
}

impl Serialize for Application {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Repr<'a> {
            api_version: &'a str,
            kind: &'a str,
            metadata: &'a ObjectMeta,
            spec: &'a ApplicationSpec,
            #[serde(skip_serializing_if = "Option::is_none")]
            operation: Option<&'a Operation>,
            #[serde(skip_serializing_if = "Option::is_none")]
            status: Option<&'a ApplicationStatus>,
        }
        Repr {
            api_version: API_VERSION,
            kind: KIND,
            metadata: &self.metadata,
            spec: &self.spec,
            operation: self.operation.as_ref(),
            status: self.status.as_ref(),
        }
        .serialize(serializer)
    }
}

impl Resource for Application {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        KIND.into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        PLURAL.into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl HasSpec for Application {
    type Spec = ApplicationSpec;

    fn spec(&self) -> &ApplicationSpec {
        &self.spec
    }

    fn spec_mut(&mut self) -> &mut ApplicationSpec {
        &mut self.spec
    }
}

impl HasStatus for Application {
    type Status = ApplicationStatus;

    fn status(&self) -> Option<&ApplicationStatus> {
        self.status.as_ref()
    }

    fn status_mut(&mut self) -> &mut Option<ApplicationStatus> {
        &mut self.status
    }
}

impl CustomResourceExt for Application {
    fn crd() -> CustomResourceDefinition {
        CustomResourceDefinition {
            metadata: ObjectMeta {
                name: Some(Self::crd_name().to_owned()),
                ..ObjectMeta::default()
            },
            spec: CustomResourceDefinitionSpec {
                group: GROUP.to_owned(),
                names: CustomResourceDefinitionNames {
                    categories: Some(CATEGORIES.iter().map(|c| (*c).to_owned()).collect()),
                    kind: KIND.to_owned(),
                    plural: PLURAL.to_owned(),
                    short_names: Some(SHORT_NAMES.iter().map(|n| (*n).to_owned()).collect()),
                    singular: Some(SINGULAR.to_owned()),
                    ..CustomResourceDefinitionNames::default()
                },
                scope: "Namespaced".to_owned(),
                versions: vec![CustomResourceDefinitionVersion {
                    additional_printer_columns: Some(printer_columns()),
                    name: VERSION.to_owned(),
                    schema: Some(CustomResourceValidation {
                        open_api_v3_schema: Some(schema::crd_schema_for::<Application>()),
                    }),
                    served: true,
                    storage: true,
                    subresources: Some(CustomResourceSubresources {
                        scale: None,
                        status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
                    }),
                    ..CustomResourceDefinitionVersion::default()
                }],
                ..CustomResourceDefinitionSpec::default()
            },
            status: None,
        }
    }

    fn crd_name() -> &'static str {
        "applications.capstan.dev"
    }

    fn api_resource() -> ApiResource {
        ApiResource::erase::<Self>(&())
    }

    fn shortnames() -> &'static [&'static str] {
        SHORT_NAMES
    }
}

fn printer_columns() -> Vec<CustomResourceColumnDefinition> {
    let column = |name: &str, type_: &str, json_path: &str| CustomResourceColumnDefinition {
        name: name.to_owned(),
        type_: type_.to_owned(),
        json_path: json_path.to_owned(),
        ..CustomResourceColumnDefinition::default()
    };
    vec![
        column("Sync Status", "string", ".status.sync.status"),
        column("Health Status", "string", ".status.health.status"),
        column("Revision", "string", ".status.sync.revision"),
        column("Age", "date", ".metadata.creationTimestamp"),
    ]
}

// ---------------------------------------------------------------------------------------------
// Spec

/// What to deliver, where, and how to sync it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// Argo CD project. Accepted for compatibility and used as a label; Capstan has no
    /// AppProjects (PolicySets restrict Applications instead).
    #[serde(default = "default_project")]
    pub project: String,

    /// Where the manifests come from.
    pub source: ApplicationSource,

    /// Where the manifests go.
    pub destination: ApplicationDestination,

    /// When and how to sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_policy: Option<SyncPolicy>,

    /// Differences to ignore when comparing desired and live state.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_differences: Vec<ResourceIgnoreDifferences>,

    /// Extra information shown with the Application (name/value pairs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<Info>,

    /// How many entries `status.history` keeps (default 10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub revision_history_limit: Option<i64>,

    /// Names of Applications in this namespace that must be Synced and Healthy before this one
    /// syncs. Cycles are reported as a condition, never deadlocked. Capstan addition.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,

    /// Stop reconciling: no comparison, no automated sync. Capstan addition.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

fn default_project() -> String {
    "default".to_owned()
}

impl Default for ApplicationSpec {
    fn default() -> Self {
        Self {
            project: default_project(),
            source: ApplicationSource::default(),
            destination: ApplicationDestination::default(),
            sync_policy: None,
            ignore_differences: Vec::new(),
            info: Vec::new(),
            revision_history_limit: None,
            depends_on: Vec::new(),
            suspend: false,
        }
    }
}

/// The default `spec.revisionHistoryLimit`.
pub const DEFAULT_REVISION_HISTORY_LIMIT: i64 = 10;

/// Where manifests come from: a path in a Git repository at a revision, rendered as plain
/// YAML, Kustomize or Helm.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSource {
    /// URL of the repository (a Repository object, or a URL under a credential template,
    /// supplies credentials).
    #[serde(rename = "repoURL")]
    #[schemars(length(min = 1))]
    pub repo_url: String,

    /// Branch, tag or commit SHA to deploy; `HEAD` (the default) follows the default branch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_revision: Option<String>,

    /// Directory in the repository holding the manifests, Kustomization or chart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,

    /// Helm chart name, for Helm repositories (not supported yet; Git sources use `path`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<String>,

    /// Options for plain YAML directories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<ApplicationSourceDirectory>,

    /// Options for Kustomize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<ApplicationSourceKustomize>,

    /// Options for Helm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm: Option<ApplicationSourceHelm>,
}

/// Options for plain YAML/JSON directories.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceDirectory {
    /// Read subdirectories too.
    #[serde(default, skip_serializing_if = "is_false")]
    pub recurse: bool,

    /// Glob of files to include, e.g. `*.yaml` or `{a.yaml,b.yaml}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include: Option<String>,

    /// Glob of files to exclude, e.g. `test-*.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exclude: Option<String>,
}

/// Options for Kustomize.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceKustomize {
    /// Prefix added to every resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_prefix: Option<String>,

    /// Suffix added to every resource name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name_suffix: Option<String>,

    /// Image overrides (`name=newName:tag`, `name:tag`, `name@digest`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,

    /// Labels added to every resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_labels: BTreeMap<String, String>,

    /// Annotations added to every resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub common_annotations: BTreeMap<String, String>,

    /// Overwrite labels that already exist with `commonLabels`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_common_labels: bool,

    /// Overwrite annotations that already exist with `commonAnnotations`.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_common_annotations: bool,

    /// Namespace set on every namespaced resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Replica count overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<KustomizeReplica>,

    /// Kustomize components to add.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub components: Vec<String>,

    /// Kustomize patches (`patch` or `path`, optional `target` and `options`), as in a
    /// kustomization's `patches`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::free_form_object_list")]
    pub patches: Vec<serde_json::Value>,

    /// Kustomize version to use (a configured binary), if not the default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

/// A replica count override.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KustomizeReplica {
    /// Name of the Deployment or StatefulSet.
    pub name: String,
    /// Number of replicas.
    pub count: IntOrString,
}

/// Options for Helm (`helm template`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSourceHelm {
    /// Release name; defaults to the Application's name (also when empty). Helm's rule: a DNS-1123 subdomain
    /// of at most 53 characters (it is a positional argument of `helm template`, so nothing else may pass).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 53))]
    #[x_kube(validation = Rule::new("self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')")
        .message("releaseName must be a Helm release name: a DNS-1123 subdomain of at most 53 characters"))]
    pub release_name: Option<String>,

    /// Values files, relative to the chart directory and confined to the repository.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub value_files: Vec<String>,

    /// Values as a YAML string (merged after `valueFiles`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub values: Option<String>,

    /// Values as an object; takes precedence over `values`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::free_form_object")]
    pub values_object: Option<serde_json::Value>,

    /// Individual values (`--set`, or `--set-string` with `forceString`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parameters: Vec<HelmParameter>,

    /// Values read from files in the repository (`--set-file`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub file_parameters: Vec<HelmFileParameter>,

    /// Do not render the chart's CRDs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub skip_crds: bool,

    /// Ignore `valueFiles` that do not exist.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_missing_value_files: bool,

    /// Namespace to render the release into; defaults to the destination namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// Kubernetes version for `Capabilities.KubeVersion`; defaults to the destination's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_version: Option<String>,

    /// API versions for `Capabilities.APIVersions`; defaults to the destination's.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_versions: Vec<String>,
}

/// A Helm value set on the command line.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmParameter {
    /// Dotted path of the value, e.g. `image.tag`.
    pub name: String,
    /// The value.
    #[serde(default)]
    pub value: String,
    /// Always treat the value as a string (`--set-string`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force_string: bool,
}

/// A Helm value read from a file in the repository.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmFileParameter {
    /// Dotted path of the value.
    pub name: String,
    /// Path of the file, relative to the chart directory.
    pub path: String,
}

/// Where manifests go: a cluster (by API URL or Cluster name) and a default namespace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.server) != has(self.name)")
    .message("exactly one of destination.server or destination.name must be set"))]
pub struct ApplicationDestination {
    /// API server URL; `https://kubernetes.default.svc` is the operator's own cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub server: Option<String>,

    /// Name of a Cluster object; `in-cluster` is the operator's own cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub name: Option<String>,

    /// Namespace for namespaced resources that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// ServiceAccount in the Application's namespace whose rights every write of this Application uses
    /// (applies, prunes, hooks, deletion), through impersonation. Unset: the operator's
    /// `--default-service-account` for Applications outside the operator namespace, the operator's own
    /// rights inside it. A name only (a DNS-1123 label), never `namespace:name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')")
        .message("serviceAccountName must be a ServiceAccount name (a DNS-1123 label) in the Application's namespace"))]
    pub service_account_name: Option<String>,
}

/// When and how to sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicy {
    /// Sync automatically when Git or the live state changes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub automated: Option<SyncPolicyAutomated>,

    /// Sync options (`CreateNamespace=true`, `PruneLast=true`, `ServerSideApply=true`,
    /// `ApplyOutOfSyncOnly=true`, `Replace=true`, ...).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,

    /// Labels and annotations for the destination namespace created by `CreateNamespace=true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_namespace_metadata: Option<ManagedNamespaceMetadata>,

    /// Retries of failed syncs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStrategy>,
}

/// Automated sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncPolicyAutomated {
    /// Turns automated sync on or off without removing the block (default on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,

    /// Delete resources that left Git.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prune: bool,

    /// Sync when the live state drifts, not only when Git changes.
    #[serde(default, skip_serializing_if = "is_false")]
    pub self_heal: bool,

    /// Allow a sync that would leave the Application with no resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub allow_empty: bool,
}

/// Metadata of a namespace Capstan creates.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManagedNamespaceMetadata {
    /// Labels of the namespace.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,

    /// Annotations of the namespace.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Retries of a failed sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetryStrategy {
    /// Maximum number of retries; a negative number retries forever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,

    /// Time between retries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff: Option<Backoff>,

    /// Retry with the latest revision when a new one appears, instead of the failed one.
    #[serde(default, skip_serializing_if = "is_false")]
    pub refresh: bool,
}

/// Exponential backoff.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Backoff {
    /// First delay (a duration such as `5s`, or a number of seconds; default `5s`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::duration_or_seconds")]
    pub duration: Option<String>,

    /// Factor the delay grows by after each failure (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub factor: Option<i64>,

    /// Longest delay (default `3m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "schema::duration_or_seconds")]
    pub max_duration: Option<String>,
}

/// A rule that ignores differences in matching resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceIgnoreDifferences {
    /// API group of the resources (empty for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,

    /// Kind of the resources.
    pub kind: String,

    /// Name of the resource; empty matches every name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// Namespace of the resource; empty matches every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,

    /// JSON pointers (RFC 6901) of fields to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub json_pointers: Vec<String>,

    /// jq path expressions of fields to ignore.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub jq_path_expressions: Vec<String>,

    /// Ignore the fields owned by these field managers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub managed_fields_managers: Vec<String>,
}

/// A name/value pair.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    /// Name.
    pub name: String,
    /// Value.
    pub value: String,
}

// ---------------------------------------------------------------------------------------------
// Operation

/// A requested operation: exactly one of `sync` or `rollback`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.sync) != has(self.rollback)")
    .message("exactly one of operation.sync or operation.rollback must be set"))]
pub struct Operation {
    /// Sync to Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncOperation>,

    /// Sync to the revision and source of a `status.history` entry; refused while automated
    /// sync is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<RollbackOperation>,

    /// Who or what started the operation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiated_by: Option<OperationInitiator>,

    /// Extra information about the operation.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub info: Vec<Info>,

    /// Retries of this operation, overriding `spec.syncPolicy.retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryStrategy>,
}

/// A sync operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperation {
    /// Revision to sync to; defaults to `spec.source.targetRevision`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,

    /// Delete resources that left Git.
    #[serde(default, skip_serializing_if = "is_false")]
    pub prune: bool,

    /// Run every step with server-side dry-run; change nothing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub dry_run: bool,

    /// Sync only these resources; empty syncs all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<SyncOperationResource>,

    /// Sync options for this operation (as in `spec.syncPolicy.syncOptions`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sync_options: Vec<String>,

    /// How to apply resources and hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_strategy: Option<SyncStrategy>,

    /// Source to sync (set by rollback, from history); defaults to `spec.source`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApplicationSource>,
}

/// A resource selected for a partial sync.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperationResource {
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// Kind.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (empty for cluster-scoped resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// How a sync applies resources and hooks.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStrategy {
    /// Apply every resource, hooks included, the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply: Option<SyncStrategyOptions>,

    /// Apply resources and run hooks (the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook: Option<SyncStrategyOptions>,
}

/// Options of a sync strategy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStrategyOptions {
    /// Delete and re-create resources that cannot be updated in place.
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
}

/// A rollback to a `status.history` entry.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RollbackOperation {
    /// `id` of the `status.history` entry.
    pub id: i64,
}

/// Who or what started an operation.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationInitiator {
    /// The user who started it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub username: Option<String>,
    /// Started by automated sync.
    #[serde(default, skip_serializing_if = "is_false")]
    pub automated: bool,
}

// ---------------------------------------------------------------------------------------------
// Status

/// Observed state of an Application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// `Ready`, `Reconciling`, `Stalled`, and Argo CD's `ComparisonError`, `SyncError`,
    /// `SharedResourceWarning`, `OrphanedResourceWarning`, plus `PolicyDenied`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "schema::conditions")]
    pub conditions: Vec<Condition>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// Whether the live state matches Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<SyncStatus>,

    /// Aggregated health of the managed resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<HealthStatus>,

    /// Every managed resource, with its sync and health.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceStatus>,

    /// The current or last operation; also the resumable state of a running sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation_state: Option<OperationState>,

    /// Past syncs, newest last, at most `spec.revisionHistoryLimit`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub history: Vec<RevisionHistory>,

    /// When desired and live state were last compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reconciled_at: Option<Time>,

    /// When the live state was last observed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_at: Option<Time>,

    /// How the source is rendered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<ApplicationSourceType>,

    /// Images and external URLs of the managed resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<ApplicationSummary>,
}

/// Whether the live state matches Git.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStatus {
    /// `Synced`, `OutOfSync` or `Unknown`.
    pub status: SyncStatusCode,

    /// The commit SHA compared against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,

    /// The commit SHAs compared against, for multi-source Applications (Argo CD shape).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revisions: Vec<String>,

    /// The spec the comparison used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compared_to: Option<ComparedTo>,
}

/// Whether the live state matches Git: `Synced`, `OutOfSync` or `Unknown`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SyncStatusCode {
    /// Not compared yet, or the comparison failed.
    #[default]
    Unknown,
    /// Live matches desired.
    Synced,
    /// Live differs from desired.
    OutOfSync,
}

/// The spec a comparison used.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ComparedTo {
    /// The source.
    pub source: ApplicationSource,
    /// The destination.
    pub destination: ApplicationDestination,
    /// The ignore rules.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_differences: Vec<ResourceIgnoreDifferences>,
}

/// Health of an Application.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HealthStatus {
    /// `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` or `Unknown`.
    pub status: HealthStatusCode,

    /// Why, for anything but `Healthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

/// Health: `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` or `Unknown`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HealthStatusCode {
    /// Health cannot be assessed.
    #[default]
    Unknown,
    /// Not yet healthy, still making progress.
    Progressing,
    /// Healthy.
    Healthy,
    /// Paused or suspended (e.g. a suspended CronJob).
    Suspended,
    /// Failed or unable to reach a healthy state.
    Degraded,
    /// Should exist but does not.
    Missing,
}

/// Health of one resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceHealth {
    /// `Healthy`, `Progressing`, `Degraded`, `Suspended`, `Missing` or `Unknown`.
    pub status: HealthStatusCode,
    /// Why, for anything but `Healthy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A managed resource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceStatus {
    /// API group (empty for the core group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<String>,
    /// API version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// Whether the resource matches Git.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<SyncStatusCode>,
    /// Health of the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health: Option<ResourceHealth>,
    /// The resource is a hook.
    #[serde(default, skip_serializing_if = "is_false")]
    pub hook: bool,
    /// The resource left Git and will be deleted by a pruning sync.
    #[serde(default, skip_serializing_if = "is_false")]
    pub requires_pruning: bool,
    /// Sync wave of the resource.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
}

/// The current or last operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OperationState {
    /// The operation as requested.
    pub operation: Operation,

    /// `Running`, `Terminating`, `Failed`, `Error` or `Succeeded`.
    pub phase: OperationPhase,

    /// What happened, in a sentence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,

    /// The result per resource so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_result: Option<SyncOperationResult>,

    /// Where a running sync is: it advances at most one phase or wave per reconcile and
    /// resumes here after a restart. Capstan addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<SyncStep>,

    /// When the operation started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,

    /// When the operation finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<Time>,

    /// How many times the operation has been retried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_count: Option<i64>,
}

/// Phase of an operation or hook: `Running`, `Terminating`, `Failed`, `Error`, `Succeeded`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum OperationPhase {
    /// In progress.
    #[default]
    Running,
    /// Being stopped.
    Terminating,
    /// Finished and failed.
    Failed,
    /// Could not run.
    Error,
    /// Finished and succeeded.
    Succeeded,
}

/// The position of a running sync: the phase and wave being applied or waited on.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncStep {
    /// The sync phase.
    pub phase: SyncPhase,
    /// The wave within the phase.
    #[serde(default)]
    pub wave: i64,
    /// The server-side dry run that precedes the first real step has passed.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub validated: bool,
    /// Unix milliseconds when the last (phase, wave) group was applied: the wave delay and the grace period
    /// for objects not yet visible in the live cache count from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied_at_ms: Option<i64>,
}

/// Phase of a sync: `PreSync`, `Sync`, `PostSync` or `SyncFail`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum SyncPhase {
    /// Hooks before the resources.
    PreSync,
    /// The resources and `Sync` hooks.
    #[default]
    Sync,
    /// Hooks after every resource is healthy.
    PostSync,
    /// Hooks run when the sync fails.
    SyncFail,
}

/// Kind of hook: `PreSync`, `Sync`, `PostSync`, `SyncFail`, `PreDelete`, `PostDelete`, `Skip`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum HookType {
    /// Before the resources.
    PreSync,
    /// With the resources.
    Sync,
    /// After every resource is healthy.
    PostSync,
    /// When the sync fails.
    SyncFail,
    /// Before the Application's resources are deleted.
    PreDelete,
    /// After the Application's resources are deleted.
    PostDelete,
    /// Never applied.
    Skip,
}

/// Result of a sync operation.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SyncOperationResult {
    /// The commit SHA synced.
    pub revision: String,
    /// The source synced.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApplicationSource>,
    /// The result per resource and hook.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<ResourceResult>,
}

/// Result of syncing one resource or hook.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResourceResult {
    /// API group (empty for the core group).
    #[serde(default)]
    pub group: String,
    /// API version.
    #[serde(default)]
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Namespace (empty for cluster-scoped resources).
    #[serde(default)]
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `Synced`, `SyncFailed`, `Pruned` or `PruneSkipped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ResultCode>,
    /// What happened (e.g. `deployment.apps/x configured`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The hook type, for hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_type: Option<HookType>,
    /// The hook's phase, for hooks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hook_phase: Option<OperationPhase>,
    /// The sync phase the resource belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_phase: Option<SyncPhase>,
    /// The sync wave the resource belongs to. Capstan addition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync_wave: Option<i64>,
}

/// Result of syncing one resource: `Synced`, `SyncFailed`, `Pruned` or `PruneSkipped`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ResultCode {
    /// Applied.
    Synced,
    /// Apply failed.
    SyncFailed,
    /// Deleted because it left Git.
    Pruned,
    /// Left Git but not deleted (prune off, or `Prune=false`).
    PruneSkipped,
}

/// A past sync.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RevisionHistory {
    /// Id of the entry, for `operation.rollback.id`.
    pub id: i64,
    /// The commit SHA deployed.
    pub revision: String,
    /// The source deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<ApplicationSource>,
    /// When the sync finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at: Option<Time>,
    /// When the sync started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deploy_started_at: Option<Time>,
    /// Who or what started the sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initiated_by: Option<OperationInitiator>,
}

/// How a source is rendered: `Directory`, `Kustomize`, `Helm` or `Plugin`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ApplicationSourceType {
    /// Plain YAML/JSON files.
    Directory,
    /// A Kustomization.
    Kustomize,
    /// A Helm chart.
    Helm,
    /// A config management plugin (not supported).
    Plugin,
}

/// Images and external URLs of the managed resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSummary {
    /// Container images.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<String>,
    /// URLs from Ingresses and `link.argocd.argoproj.io/*` annotations.
    #[serde(default, rename = "externalURLs", skip_serializing_if = "Vec::is_empty")]
    pub external_urls: Vec<String>,
}
