//! The check before the first write, against an in-process devcluster that publishes `/openapi/v3` for its
//! built-in kinds and for CRDs from their schemas. The Applications live in the operator namespace (they
//! write with the operator's own rights, so the client-side check applies): valid objects need no dry-run
//! request, invalid ones stop the sync before anything is written (with the field path), and kinds whose
//! schema the cluster does not publish, a namespace that does not exist, `Validate=server` and a tenant's
//! Application (written as its ServiceAccount) go through server-side dry runs.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, PostParams};
use kube::Api;

use crate::api::application::{OperationPhase, SyncPolicy};
use crate::api::Application;
use crate::controllers::application::tests as app_tests;
use crate::controllers::application::{reconcile, State};
use crate::controllers::testsupport::{auto, Env, NS, OPERATOR_NS};
use crate::controllers::{Context, Settings};

fn context(env: &Env) -> Arc<Context> {
    env.context(Settings {
        wave_delay: Duration::from_millis(200),
        ..Settings::default()
    })
}

/// An automated Application of the files under `name/` in the operator namespace (the operator's own
/// rights), with `sync_options`.
async fn create_app(env: &Env, name: &str, sync_options: &[&str]) {
    create_app_in(env, OPERATOR_NS, name, sync_options).await;
}

async fn create_app_in(env: &Env, namespace: &str, name: &str, sync_options: &[&str]) {
    let mut policy: SyncPolicy = auto();
    policy.sync_options = sync_options.iter().map(|s| s.to_string()).collect();
    app_tests::create_app_in(env, namespace, name, name, policy).await;
}

/// Reconciles `name` (in the operator namespace) until its operation finished; returns (phase, message).
async fn finish(env: &Env, ctx: &Arc<Context>, state: &Arc<State>, name: &str) -> (OperationPhase, String) {
    finish_in(env, ctx, state, OPERATOR_NS, name).await
}

async fn finish_in(
    env: &Env,
    ctx: &Arc<Context>,
    state: &Arc<State>,
    namespace: &str,
    name: &str,
) -> (OperationPhase, String) {
    let apps: Api<Application> = Api::namespaced(env.client.clone(), namespace);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let app = apps.get(name).await.expect("get app");
        let op = app.status.as_ref().and_then(|s| s.operation_state.as_ref());
        if let Some(op) = op.filter(|o| matches!(o.phase, OperationPhase::Succeeded | OperationPhase::Failed)) {
            return (op.phase, op.message.clone().unwrap_or_default());
        }
        assert!(
            Instant::now() < deadline,
            "{name}: the sync never finished: {:?}",
            app.status
        );
        let _ = reconcile(Arc::new(app), Arc::clone(ctx), Arc::clone(state)).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Paths of the dry-run writes in devcluster's request log.
fn dry_runs(env: &Env) -> Vec<String> {
    dry_runs_as(env).into_iter().map(|(path, _)| path).collect()
}

/// Paths of the dry-run writes with the user they were made as (the impersonated one, if any).
fn dry_runs_as(env: &Env) -> Vec<(String, String)> {
    env.dev
        .request_log()
        .into_iter()
        .filter(|r| r.method != "GET" && r.query.contains("dryRun=All"))
        .map(|r| (r.path, r.impersonated_user.unwrap_or(r.user)))
        .collect()
}

fn cm(name: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n{extra}")
}

fn deployment(name: &str, spec_extra: &str, selector: bool) -> String {
    let selector = if selector {
        "  selector:\n    matchLabels: {app: web}\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\nspec:\n{selector}{spec_extra}  template:\n    \
         metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n      - name: web\n        image: nginx\n        \
         ports: [{{containerPort: 80}}]\n        resources: {{limits: {{cpu: 1, memory: 64Mi}}}}\n"
    )
}

const WIDGET_CRD: &str = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
  "metadata": {"name": "widgets.example.com"},
  "spec": {"group": "example.com", "scope": "Namespaced",
    "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
    "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
      "type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
        "size": {"type": "integer", "maximum": 10},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}}"#;

async fn install_widgets(env: &Env) {
    let crd: CustomResourceDefinition = serde_json::from_str(WIDGET_CRD).expect("crd");
    Api::<CustomResourceDefinition>::all(env.client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("create crd");
    let ar = ApiResource::from_gvk_with_plural(
        &kube::core::GroupVersionKind::gvk("example.com", "v1", "Widget"),
        "widgets",
    );
    let widgets: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), NS, &ar);
    let deadline = Instant::now() + Duration::from_secs(10);
    while widgets.list(&Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "Widget never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn widget(name: &str, spec: &str) -> String {
    format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec: {spec}\n")
}

/// A valid Application of built-in kinds and a custom resource syncs with no dry-run request at all; the
/// same objects with `Validate=server` are dry-run on the server, one request each, and so are a tenant's
/// (an Application outside the operator namespace), as its ServiceAccount: that dry run is also the check
/// that the ServiceAccount may write each object, before the first write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_objects_are_validated_without_dry_runs_unless_validate_is_server() {
    let env = Env::start().await;
    install_widgets(&env).await;
    let files = |app: &str| {
        vec![
            (format!("{app}/cm.yaml"), cm(&format!("{app}-cm"), "")),
            (
                format!("{app}/deploy.yaml"),
                deployment(&format!("{app}-web"), "  replicas: 2\n", true),
            ),
            (
                format!("{app}/widget.yaml"),
                widget(&format!("{app}-w"), "{size: 3, mode: fast, extra: {any: [1]}}"),
            ),
        ]
    };
    let all: Vec<(String, String)> = ["client", "server", "tenant"].into_iter().flat_map(files).collect();
    let refs: Vec<(&str, &str)> = all.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    env.commit(&refs);
    let ctx = context(&env);
    let (state, _rx) = State::new();

    create_app(&env, "client", &[]).await;
    env.dev.clear_request_log();
    assert_eq!(finish(&env, &ctx, &state, "client").await.0, OperationPhase::Succeeded);
    assert_eq!(
        dry_runs(&env),
        Vec::<String>::new(),
        "no dry run for kinds with a published schema"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    assert!(cms.get_opt("client-cm").await.expect("get").is_some());

    create_app(&env, "server", &["Validate=server"]).await;
    env.dev.clear_request_log();
    assert_eq!(finish(&env, &ctx, &state, "server").await.0, OperationPhase::Succeeded);
    let dry = dry_runs(&env);
    assert_eq!(dry.len(), 3, "Validate=server dry-runs every object: {dry:#?}");
    assert!(dry.iter().any(|p| p.ends_with("/widgets/server-w")), "{dry:#?}");

    create_app_in(&env, NS, "tenant", &[]).await;
    env.dev.clear_request_log();
    assert_eq!(
        finish_in(&env, &ctx, &state, NS, "tenant").await.0,
        OperationPhase::Succeeded
    );
    let dry = dry_runs_as(&env);
    let deployer = format!("system:serviceaccount:{NS}:capstan-deployer");
    assert_eq!(dry.len(), 3, "a tenant's objects are dry-run, each: {dry:#?}");
    assert!(dry.iter().all(|(_, user)| *user == deployer), "{dry:#?}");
}

/// An object in a namespace that does not exist: the first object of that namespace is dry-run (the
/// server's answer says whether the namespace exists), so the sync fails before any write; the objects of
/// the existing namespace need no dry run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_namespace_stops_the_sync_before_any_write() {
    let env = Env::start().await;
    let nowhere = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: lost\n  namespace: nowhere\ndata:\n  k: v\n";
    env.commit(&[
        ("ns/a.yaml", &cm("ns-a", "")),
        ("ns/b.yaml", &cm("ns-b", "")),
        ("ns/lost.yaml", nowhere),
    ]);
    let ctx = context(&env);
    let (state, _rx) = State::new();
    create_app(&env, "ns", &[]).await;
    env.dev.clear_request_log();
    let (phase, message) = finish(&env, &ctx, &state, "ns").await;
    assert_eq!(phase, OperationPhase::Failed, "{message}");
    assert!(message.contains("nowhere"), "names the namespace: {message}");
    let dry = dry_runs(&env);
    assert_eq!(
        dry,
        ["/api/v1/namespaces/nowhere/configmaps/lost"],
        "only the missing namespace's object is dry-run"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    assert!(
        cms.get_opt("ns-a").await.expect("get").is_none(),
        "nothing written: {message}"
    );
}

/// Each Application holds a valid ConfigMap (applied first, by kind order) and one invalid object: the
/// sync fails before anything is written, its message names the object and the field path, and no dry
/// run was needed to find out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_object_stops_the_sync_before_any_write() {
    let env = Env::start().await;
    install_widgets(&env).await;
    let cases = [
        (
            "unknown",
            cm("unknown-bad", "spec:\n  oops: 1\n"),
            "configmap/unknown-bad: .spec: field not declared in schema",
        ),
        (
            "wrongtype",
            deployment("wrongtype-web", "  replicas: two\n", true),
            ".spec.replicas: expected integer, got string",
        ),
        (
            "required",
            deployment("required-web", "", false),
            "deployment.apps/required-web: .spec.selector: Required value",
        ),
        (
            "enum",
            widget("enum-w", "{size: 1, mode: medium}"),
            r#".spec.mode: Unsupported value: "medium": supported values: "fast", "slow""#,
        ),
        (
            "crd",
            widget("crd-w", "{size: 11, oops: true}"),
            ".spec.size: Invalid value: must be less than or equal to 10",
        ),
    ];
    let mut files = Vec::new();
    for (app, bad, _) in &cases {
        files.push((format!("{app}/ok.yaml"), cm(&format!("{app}-ok"), "")));
        files.push((format!("{app}/bad.yaml"), bad.clone()));
    }
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    env.commit(&refs);
    let ctx = context(&env);
    let (state, _rx) = State::new();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    for (app, _, expected) in &cases {
        create_app(&env, app, &[]).await;
        env.dev.clear_request_log();
        let (phase, message) = finish(&env, &ctx, &state, app).await;
        assert_eq!(phase, OperationPhase::Failed, "{app}: {message}");
        assert!(
            message.contains(expected),
            "{app}: expected {expected:?} in {message:?}"
        );
        assert!(message.contains("(dry run)"), "{app}: {message}");
        assert!(
            cms.get_opt(&format!("{app}-ok")).await.expect("get").is_none(),
            "{app}: nothing written"
        );
        assert_eq!(dry_runs(&env), Vec::<String>::new(), "{app}: found on the client");
    }
    let deployments: Api<Deployment> = Api::namespaced(env.client.clone(), NS);
    assert!(deployments.get_opt("wrongtype-web").await.expect("get").is_none());
}

/// When the cluster does not publish a kind's schema (here: its group's document is unavailable), that
/// kind's objects are dry-run on the server, the others are still checked on the client; an invalid one
/// still stops the sync before any write, with the server's message.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_without_a_published_schema_falls_back_to_a_dry_run() {
    let env = Env::start().await;
    install_widgets(&env).await;
    env.dev.inject_faults(devcluster::Fault {
        status: 404,
        count: 1_000_000,
        method: Some("GET".into()),
        path_prefix: Some("/openapi/v3/apis/example.com".into()),
        ..Default::default()
    });
    env.commit(&[
        ("good/cm.yaml", &cm("good-cm", "")),
        ("good/widget.yaml", &widget("good-w", "{size: 2}")),
        ("bad/cm.yaml", &cm("bad-cm", "")),
        ("bad/widget.yaml", &widget("bad-w", "{size: 11}")),
    ]);
    let ctx = context(&env);
    let (state, _rx) = State::new();

    create_app(&env, "good", &[]).await;
    env.dev.clear_request_log();
    assert_eq!(finish(&env, &ctx, &state, "good").await.0, OperationPhase::Succeeded);
    let dry = dry_runs(&env);
    assert!(
        dry.len() == 1 && dry[0].ends_with("/widgets/good-w"),
        "only the Widget is dry-run: {dry:#?}"
    );

    create_app(&env, "bad", &[]).await;
    let (phase, message) = finish(&env, &ctx, &state, "bad").await;
    assert_eq!(phase, OperationPhase::Failed, "{message}");
    assert!(
        message.contains("spec.size"),
        "the server's error names the field: {message}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), NS);
    assert!(cms.get_opt("bad-cm").await.expect("get").is_none(), "nothing written");
}
