//! Capstan's custom resource types (group `capstan.dev`, version `v1alpha1`).
//!
//! Data only: the types, their schemas, condition reasons and annotation/label keys. No I/O.
//! Where Argo CD has a field, the field keeps Argo CD's name and meaning, so an Argo CD
//! Application or ApplicationSet moves over by changing its `apiVersion`.

pub mod application;
pub mod application_set;
pub mod cluster;
pub mod conditions;
pub mod labels;
pub mod names;
pub mod policy_set;
pub mod repository;
pub mod schema;
pub mod tenancy;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use application::{Application, ApplicationSpec, ApplicationStatus, Operation};
pub use application_set::{ApplicationSet, ApplicationSetSpec, ApplicationSetStatus};
pub use cluster::{Cluster, ClusterSpec, ClusterStatus};
pub use policy_set::{PolicySet, PolicySetSpec, PolicySetStatus};
pub use repository::{Repository, RepositorySpec, RepositoryStatus};

/// The API group of every Capstan custom resource.
pub const GROUP: &str = "capstan.dev";
/// The API version of every Capstan custom resource.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of every Capstan custom resource.
pub const API_VERSION: &str = "capstan.dev/v1alpha1";
/// Categories of every Capstan CRD, so `kubectl get capstan` lists them all.
pub const CATEGORIES: [&str; 2] = ["capstan", "gitops"];

/// Every Capstan CRD, in a stable order (alphabetical by plural name).
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut application_set = ApplicationSet::crd();
    application_set::relax_template_rules(&mut application_set);
    let mut crds = vec![
        Application::crd(),
        application_set,
        Cluster::crd(),
        PolicySet::crd(),
        Repository::crd(),
    ];
    // Deleting a CRD deletes every object of its kind: no `helm uninstall`, and no Capstan cascade
    // (which honours this annotation), may take the Applications with it.
    for crd in &mut crds {
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(RESOURCE_POLICY.into(), "keep".into());
    }
    crds
}

/// Helm's annotation that keeps an object when its release is uninstalled.
pub const RESOURCE_POLICY: &str = "helm.sh/resource-policy";

/// A reference to an object by name, in the namespace of the referring object.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referenced object.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// `skip_serializing_if` helper for boolean fields that default to false.
pub(crate) fn is_false(value: &bool) -> bool {
    !*value
}

#[cfg(test)]
mod tests;
