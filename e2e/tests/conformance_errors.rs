//! Conformance of devcluster's error answers: every failure is a `Status` with the code and reason the
//! real API server uses, because clients branch on them (kube-rs `Error::Api`, kubectl's messages,
//! retry and conflict handling in the operator).

use capstan_e2e::{
    check::api_error,
    fixtures::{install_widget_crd, Widget, WidgetSpec},
    raw_http::{self, RawResponse},
    TestCluster,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{ListParams, Patch, PatchParams, PostParams},
    Api, ResourceExt,
};
use serde_json::json;

/// Asserts a raw response is a JSON `Status` failure with `code` and `reason`.
fn assert_status(response: &RawResponse, code: u16, reason: &str) {
    assert_eq!(response.status, code, "{response:?}");
    let content_type = response.header("content-type").unwrap_or_default();
    assert!(
        content_type.starts_with("application/json"),
        "errors are JSON, got {content_type:?}"
    );
    let status = response.json();
    assert_eq!(status["kind"], "Status", "{status:#}");
    assert_eq!(status["apiVersion"], "v1", "{status:#}");
    assert_eq!(status["status"], "Failure", "{status:#}");
    assert_eq!(status["code"], code, "{status:#}");
    assert_eq!(status["reason"], reason, "{status:#}");
}

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"a": "1"}})).expect("a ConfigMap")
}

#[tokio::test]
async fn malformed_json_body_is_a_400_bad_request_status() {
    let tc = TestCluster::start();
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"#.to_vec();
    let response = raw_http::request(
        &tc.endpoint(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        body,
    )
    .await;
    assert_status(&response, 400, "BadRequest");
}

#[tokio::test]
async fn unknown_resource_paths_are_404_not_found_statuses() {
    let tc = TestCluster::start();
    for path in [
        "/api/v1/namespaces/default/frobnicators",
        "/apis/nope.example.com/v1/things",
        "/apis/e2e.capstan.dev/v1/namespaces/default/widgets",
    ] {
        let response = raw_http::request(&tc.endpoint(), "GET", path, None, Vec::new()).await;
        assert_status(&response, 404, "NotFound");
    }
}

#[tokio::test]
async fn missing_objects_and_namespaces_are_404_with_details() {
    let tc = TestCluster::start();
    let client = tc.client().await;
    let status = api_error(Api::<ConfigMap>::default_namespaced(client.clone()).get("nope").await);
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    assert_eq!(status.message, r#"configmaps "nope" not found"#);
    let details = status.details.expect("details");
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("nope", "configmaps"));

    let status = api_error(
        Api::<ConfigMap>::namespaced(client, "t1")
            .create(&PostParams::default(), &cm("x"))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (404, "NotFound"));
    let details = status.details.expect("details");
    assert_eq!((details.name.as_str(), details.kind.as_str()), ("t1", "namespaces"));
}

#[tokio::test]
async fn creating_an_existing_name_is_409_already_exists() {
    let tc = TestCluster::start();
    let cms: Api<ConfigMap> = Api::default_namespaced(tc.client().await);
    cms.create(&PostParams::default(), &cm("twice"))
        .await
        .expect("first create");
    let status = api_error(cms.create(&PostParams::default(), &cm("twice")).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "AlreadyExists"));
}

#[tokio::test]
async fn put_with_a_stale_resource_version_is_a_409_conflict() {
    let tc = TestCluster::start();
    let cms: Api<ConfigMap> = Api::default_namespaced(tc.client().await);
    let original = cms.create(&PostParams::default(), &cm("stale")).await.expect("create");

    let mut fresh = original.clone();
    fresh.data = Some([("a".to_owned(), "2".to_owned())].into());
    let updated = cms
        .replace("stale", &PostParams::default(), &fresh)
        .await
        .expect("an up-to-date PUT");
    assert_ne!(updated.resource_version(), original.resource_version());

    let status = api_error(cms.replace("stale", &PostParams::default(), &original).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"), "{status:?}");
    assert!(status.message.contains("the object has been modified"), "{status:?}");
}

#[tokio::test]
async fn invalid_object_names_are_422_invalid_with_a_cause() {
    let tc = TestCluster::start();
    let cms: Api<ConfigMap> = Api::default_namespaced(tc.client().await);
    let status = api_error(cms.create(&PostParams::default(), &cm("Not_A_DNS_Name")).await);
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{status:?}");
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert!(causes.iter().any(|c| c.field == "metadata.name"), "{causes:?}");
}

#[tokio::test]
async fn request_bodies_over_3_mib_are_413() {
    let tc = TestCluster::start();
    let big = "x".repeat(3 * 1024 * 1024 + 1024);
    let body = serde_json::to_vec(&json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big"}, "data": {"x": big},
    }))
    .expect("JSON");
    let response = raw_http::request(
        &tc.endpoint(),
        "POST",
        "/api/v1/namespaces/default/configmaps",
        Some("application/json"),
        body,
    )
    .await;
    assert_status(&response, 413, "RequestEntityTooLarge");
}

#[tokio::test]
async fn strategic_merge_patch_on_a_custom_resource_is_415() {
    let tc = TestCluster::start();
    let client = tc.client().await;
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::default_namespaced(client);
    let spec = WidgetSpec {
        replicas: 1,
        image: "nginx:1".into(),
    };
    widgets
        .create(&PostParams::default(), &Widget::new("w", spec))
        .await
        .expect("create");
    let patch = Patch::Strategic(json!({"spec": {"replicas": 2}}));
    let status = api_error(widgets.patch("w", &PatchParams::default(), &patch).await);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (415, "UnsupportedMediaType"),
        "{status:?}"
    );
}

#[tokio::test]
async fn a_failing_json_patch_test_is_422_and_changes_nothing() {
    let tc = TestCluster::start();
    let cms: Api<ConfigMap> = Api::default_namespaced(tc.client().await);
    cms.create(&PostParams::default(), &cm("guarded"))
        .await
        .expect("create");
    let patch: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/data/a", "value": "not-1"},
        {"op": "replace", "path": "/data/a", "value": "2"},
    ]))
    .expect("a JSON patch");
    let status = api_error(
        cms.patch("guarded", &PatchParams::default(), &Patch::<()>::Json(patch))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"), "{status:?}");
    let live = cms.get("guarded").await.expect("get");
    assert_eq!(live.data.and_then(|d| d.get("a").cloned()).as_deref(), Some("1"));
}

#[tokio::test]
async fn apply_patch_without_field_manager_is_422() {
    let tc = TestCluster::start();
    let body = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec();
    let response = raw_http::request(
        &tc.endpoint(),
        "PATCH",
        "/api/v1/namespaces/default/configmaps/x",
        Some("application/apply-patch+yaml"),
        body,
    )
    .await;
    assert_status(&response, 422, "Invalid");
}

#[tokio::test]
async fn malformed_label_selectors_are_400() {
    let tc = TestCluster::start();
    let cms: Api<ConfigMap> = Api::default_namespaced(tc.client().await);
    let status = api_error(cms.list(&ListParams::default().labels("app in (x")).await);
    assert_eq!((status.code, status.reason.as_str()), (400, "BadRequest"), "{status:?}");
}
