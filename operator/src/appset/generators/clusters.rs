//! The cluster generator: one parameter set per Cluster object, as Argo CD's
//! `ClusterGenerator` does per cluster Secret.
//!
//! Parameters: `name` (the Cluster's name), `nameNormalized`, `server`, the Cluster's labels
//! and annotations (`metadata.labels.<k>` flat, `.metadata.labels.k` with Go templates; with Go
//! templates `metadata` holds only the non-empty ones), and `values.<k>`. The operator's own
//! cluster (`in-cluster`, `https://kubernetes.default.svc`) is included first when the
//! generator has no selector and no Cluster object already names that server; it has no
//! labels, so any selector leaves it out.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{append_values, selector, Ctx};
use crate::api::application_set::ClusterGenerator;
use crate::api::cluster::Cluster;
use crate::appset::error::AppSetError;
use crate::appset::params::{sanitize_name, ParamSet};

/// Name of the operator's own cluster.
pub const IN_CLUSTER_NAME: &str = "in-cluster";
/// Server URL of the operator's own cluster.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";

/// One parameter set per selected Cluster (sorted by name), the local cluster first.
pub(crate) fn generate(gen: &ClusterGenerator, ctx: &Ctx<'_>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    let selector = gen.selector.as_ref().filter(|s| !selector::is_empty(s));
    if let Some(s) = selector {
        selector::validate(s).map_err(|e| AppSetError::InvalidSelector(format!("{path}.selector: {e}")))?;
    }
    let mut clusters: Vec<&Cluster> = ctx.inputs.clusters.iter().collect();
    clusters.sort_by(|a, b| cluster_name(a).cmp(cluster_name(b)));
    let mut sets = Vec::new();
    let has_local_object = clusters
        .iter()
        .any(|c| c.spec.server.trim_end_matches('/') == IN_CLUSTER_SERVER);
    if selector.is_none() && !has_local_object {
        let mut params = local_params();
        append_values(&gen.values, &mut params, ctx)?;
        sets.push(params);
    }
    for cluster in clusters {
        let labels = cluster.metadata.labels.clone().unwrap_or_default();
        if selector.is_some_and(|s| !selector::matches(s, &labels)) {
            continue;
        }
        let mut params = cluster_params(cluster, ctx.renderer.is_go());
        append_values(&gen.values, &mut params, ctx)?;
        sets.push(params);
        ctx.check_count(sets.len(), path)?;
    }
    Ok(sets)
}

fn cluster_name(cluster: &Cluster) -> &str {
    cluster.metadata.name.as_deref().unwrap_or_default()
}

/// Argo CD gives the local cluster its name unnormalized (it is already a valid name).
fn local_params() -> ParamSet {
    let mut params = ParamSet::new();
    params.insert("name".to_owned(), Value::String(IN_CLUSTER_NAME.to_owned()));
    params.insert("nameNormalized".to_owned(), Value::String(IN_CLUSTER_NAME.to_owned()));
    params.insert("server".to_owned(), Value::String(IN_CLUSTER_SERVER.to_owned()));
    params
}

fn cluster_params(cluster: &Cluster, go: bool) -> ParamSet {
    let name = cluster_name(cluster);
    let mut params = ParamSet::new();
    params.insert("name".to_owned(), Value::String(name.to_owned()));
    params.insert("nameNormalized".to_owned(), Value::String(sanitize_name(name)));
    params.insert("server".to_owned(), Value::String(cluster.spec.server.clone()));
    let labels = cluster.metadata.labels.clone().unwrap_or_default();
    let annotations = cluster.metadata.annotations.clone().unwrap_or_default();
    if go {
        let mut meta = Map::new();
        if !annotations.is_empty() {
            meta.insert("annotations".to_owned(), string_map(&annotations));
        }
        if !labels.is_empty() {
            meta.insert("labels".to_owned(), string_map(&labels));
        }
        params.insert("metadata".to_owned(), Value::Object(meta));
    } else {
        for (k, v) in &annotations {
            params.insert(format!("metadata.annotations.{k}"), Value::String(v.clone()));
        }
        for (k, v) in &labels {
            params.insert(format!("metadata.labels.{k}"), Value::String(v.clone()));
        }
    }
    params
}

fn string_map(map: &BTreeMap<String, String>) -> Value {
    Value::Object(map.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect())
}
