//! Test objects: the `Widget` custom resource and builders for the built-in manifests tests apply.
//!
//! Manifests are built as JSON values and rendered to YAML, so tests state only the fields they care
//! about and kubectl still reads the YAML a user would write.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    api::{Patch, PatchParams},
    runtime::{conditions, wait::await_condition},
    Api, Client, CustomResource, CustomResourceExt,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::wait::within;

/// The name of the Widget CRD (`<plural>.<group>`).
pub const WIDGET_CRD: &str = "widgets.e2e.capstan.dev";

/// The simulated-workload annotations devcluster understands.
pub const BEHAVIOR: &str = "devcluster.capstan.dev/behavior";
pub const DELAY: &str = "devcluster.capstan.dev/delay";

/// A small namespaced custom resource with printer columns (one of them wide-only) and a status
/// subresource, so one type exercises CRD discovery, Table output, SSA and controllers.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "e2e.capstan.dev",
    version = "v1",
    kind = "Widget",
    namespaced,
    status = "WidgetStatus",
    shortname = "wd",
    printcolumn = r#"{"name":"Replicas","type":"integer","jsonPath":".spec.replicas"}"#,
    printcolumn = r#"{"name":"Image","type":"string","jsonPath":".spec.image","priority":1}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct WidgetSpec {
    pub replicas: i32,
    #[serde(default)]
    pub image: String,
}

/// What the test controller reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WidgetStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<String>,
}

/// The Widget CRD as YAML, as a user would `kubectl apply` it.
pub fn widget_crd_yaml() -> String {
    serde_saphyr::to_string(&Widget::crd()).expect("the CRD serialises to YAML")
}

/// Installs the Widget CRD with kube-rs (SSA, forced) and waits until it is Established.
pub async fn install_widget_crd(client: &Client) -> CustomResourceDefinition {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        WIDGET_CRD,
        &PatchParams::apply("capstan-e2e").force(),
        &Patch::Apply(Widget::crd()),
    )
    .await
    .expect("the Widget CRD is applied");
    let established = await_condition(crds, WIDGET_CRD, conditions::is_crd_established());
    within("the Widget CRD to be Established", crate::TIMEOUT, established)
        .await
        .expect("await_condition on the CRD works")
        .expect("the CRD exists")
}

/// Renders objects as a multi-document YAML stream.
pub fn to_yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_saphyr::to_string(o).expect("a manifest serialises to YAML"))
        .collect::<Vec<_>>()
        .join("---\n")
}

/// A Widget manifest.
pub fn widget(ns: &str, name: &str, replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "e2e.capstan.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"replicas": replicas, "image": image},
    })
}

/// A ConfigMap manifest with `data`.
pub fn configmap(ns: &str, name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "data": data,
    })
}

/// A ConfigMap with `labels` and no data, for selector tests.
pub fn labelled_configmap(ns: &str, name: &str, labels: Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
    })
}

/// A one-container Deployment; `annotations` steer devcluster's simulation (see [`BEHAVIOR`], [`DELAY`]).
pub fn deployment(ns: &str, name: &str, image: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": image}]},
            },
        },
    })
}

/// A one-container Job; `annotations` steer devcluster's simulation.
pub fn job(ns: &str, name: &str, annotations: Value) -> Value {
    json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
                },
            },
        },
    })
}
