//! Capstan: a Kubernetes GitOps operator that delivers what Git declares.

pub mod api;
pub mod appset;
pub mod bootstrap;
pub mod cluster;
pub mod controllers;
pub mod crdgen;
pub mod engine;
pub mod glob;
pub mod http;
pub mod metrics;
pub mod policy;
pub mod render;
pub mod reporter;
pub mod source;
pub mod telemetry;
pub mod text;
pub mod webhook;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Every Capstan CRD, in a stable order.
pub fn crds() -> Vec<CustomResourceDefinition> {
    api::crds()
}
