//! Capstan: a Kubernetes GitOps operator that delivers what Git declares.

pub mod api;
pub mod appset;
pub mod crdgen;
pub mod engine;
pub mod render;
pub mod source;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every Capstan CRD, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    api::crds()
}
