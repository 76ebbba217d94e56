//! Controller-level tests: the reconcile pipeline driven directly against an in-process devcluster,
//! with a local bare Git repository served over `git://` (`controllers::testsupport`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;

use super::{reconcile, State};
use crate::api::application::{
    ApplicationDestination, ApplicationSource, ApplicationSpec, HealthStatusCode, OperationPhase, SyncPolicy,
    SyncStatusCode,
};
use crate::api::Application;
use crate::controllers::testsupport::{auto, manual, Env, SyncPolicyExt};
use crate::controllers::{Context, Settings};

/// The context of these tests: waves 200 ms apart.
fn context(env: &Env) -> Arc<Context> {
    env.context(Settings {
        wave_delay: Duration::from_millis(200),
        ..Settings::default()
    })
}

fn cm(name: &str, extra: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{extra}data:\n  k: v\n")
}

pub(super) async fn create_app(env: &Env, name: &str, path: &str, sync_policy: SyncPolicy) -> Api<Application> {
    create_app_in(env, "apps", name, path, sync_policy).await
}

/// As [`create_app`], the Application in `namespace` (deploying to `apps`): in the operator namespace it
/// writes with the operator's own rights, elsewhere as the namespace's `capstan-deployer`.
pub(super) async fn create_app_in(
    env: &Env,
    namespace: &str,
    name: &str,
    path: &str,
    sync_policy: SyncPolicy,
) -> Api<Application> {
    let apps: Api<Application> = Api::namespaced(env.client.clone(), namespace);
    let mut app = Application::new(
        name,
        ApplicationSpec {
            source: ApplicationSource {
                repo_url: env.url.clone(),
                target_revision: Some("main".into()),
                path: Some(path.into()),
                ..ApplicationSource::default()
            },
            destination: ApplicationDestination {
                server: Some("https://kubernetes.default.svc".into()),
                name: None,
                namespace: Some("apps".into()),
                service_account_name: None,
            },
            sync_policy: Some(sync_policy),
            ..ApplicationSpec::default()
        },
    );
    app.metadata.namespace = Some(namespace.into());
    apps.create(&PostParams::default(), &app).await.expect("create app");
    apps
}

/// Reconciles `name` (fresh reads each time) until `done` holds or the deadline passes.
async fn drive(
    apps: &Api<Application>,
    name: &str,
    ctx: &Arc<Context>,
    state: &Arc<State>,
    limit: Duration,
    done: impl Fn(&Application) -> bool,
) -> Application {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let app = apps.get(name).await.expect("get app");
        if done(&app) {
            return app;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "condition not reached; status: {}",
            serde_json::to_string_pretty(&app.status).unwrap_or_default()
        );
        let _ = reconcile(Arc::new(app), Arc::clone(ctx), Arc::clone(state)).await;
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

fn synced_healthy(app: &Application) -> bool {
    let s = app.status.as_ref();
    s.and_then(|s| s.sync.as_ref())
        .is_some_and(|x| x.status == SyncStatusCode::Synced)
        && s.and_then(|s| s.health.as_ref())
            .is_some_and(|h| h.status == HealthStatusCode::Healthy)
        && s.and_then(|s| s.operation_state.as_ref())
            .is_none_or(|o| o.phase != OperationPhase::Running)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_app_syncs_prunes_and_never_prunes_on_render_failure() {
    let env = Env::start().await;
    env.commit(&[("app/a.yaml", &cm("alpha", "")), ("app/b.yaml", &cm("beta", ""))]);
    let apps = create_app(&env, "guestbook", "app", auto().prune()).await;
    let ctx = context(&env);
    let (state, _rx) = State::new();
    let app = drive(
        &apps,
        "guestbook",
        &ctx,
        &state,
        Duration::from_secs(60),
        synced_healthy,
    )
    .await;
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "apps");
    let alpha = cms.get("alpha").await.expect("alpha applied");
    let labels = alpha.metadata.labels.clone().unwrap_or_default();
    let annotations = alpha.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        labels.get("capstan.dev/app-instance"),
        Some(&crate::cluster::app_instance_id("apps", "guestbook"))
    );
    assert_eq!(
        annotations.get("capstan.dev/tracking-id").map(String::as_str),
        Some("apps/guestbook:/ConfigMap:apps/alpha")
    );
    let status = app.status.expect("status");
    assert_eq!(status.resources.len(), 2);
    assert_eq!(status.history.len(), 1, "the automated sync is recorded");
    assert!(status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True"));

    // A file leaves Git: with prune the object goes.
    env.commit(&[("app/a.yaml", &cm("alpha", ""))]);
    state.force("apps/guestbook".into());
    drive(&apps, "guestbook", &ctx, &state, Duration::from_secs(60), |a| {
        synced_healthy(a) && a.status.as_ref().is_some_and(|s| s.resources.len() == 1)
    })
    .await;
    for _ in 0..50 {
        if cms.get_opt("beta").await.expect("get").is_none() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(cms.get_opt("beta").await.expect("get").is_none(), "beta pruned");

    // Broken YAML: ComparisonError, sync Unknown, nothing pruned.
    env.commit(&[("app/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: [oops\n")]);
    state.force("apps/guestbook".into());
    let app = drive(&apps, "guestbook", &ctx, &state, Duration::from_secs(30), |a| {
        a.status
            .as_ref()
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "ComparisonError"))
    })
    .await;
    assert_eq!(app.status.unwrap().sync.unwrap().status, SyncStatusCode::Unknown);
    for _ in 0..3 {
        let app = apps.get("guestbook").await.expect("get");
        let _ = reconcile(Arc::new(app), Arc::clone(&ctx), Arc::clone(&state)).await;
    }
    assert!(
        cms.get_opt("alpha").await.expect("get").is_some(),
        "never prune on a render failure"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn presync_hook_and_waves_complete_in_order_and_survive_a_restart() {
    let env = Env::start().await;
    let job = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: migrate\n  annotations:\n    argocd.argoproj.io/hook: PreSync\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      - name: m\n        image: busybox\n";
    let wave1 = cm("late", "  annotations:\n    argocd.argoproj.io/sync-wave: \"1\"\n");
    env.commit(&[
        ("w/job.yaml", job),
        ("w/early.yaml", &cm("early", "")),
        ("w/late.yaml", &wave1),
    ]);
    let apps = create_app(&env, "waves", "w", auto()).await;
    let ctx = context(&env);
    let (state, _rx) = State::new();
    // Run until the sync is under way, then "restart": a fresh State and Context.
    drive(&apps, "waves", &ctx, &state, Duration::from_secs(60), |a| {
        a.status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .is_some_and(|o| o.phase == OperationPhase::Running)
    })
    .await;
    drop(state);
    let ctx = context(&env);
    let (state, _rx) = State::new();
    let app = drive(&apps, "waves", &ctx, &state, Duration::from_secs(90), |a| {
        synced_healthy(a)
            && a.status
                .as_ref()
                .and_then(|s| s.operation_state.as_ref())
                .is_some_and(|o| o.phase == OperationPhase::Succeeded)
    })
    .await;
    let status = app.status.expect("status");
    assert_eq!(status.history.len(), 1, "exactly one completed sync");
    let rows = &status
        .operation_state
        .expect("op")
        .sync_result
        .expect("result")
        .resources;
    let hook = rows.iter().find(|r| r.kind == "Job").expect("hook row");
    assert_eq!(hook.hook_phase, Some(OperationPhase::Succeeded));
    let jobs: Api<Job> = Api::namespaced(env.client.clone(), "apps");
    let listed = jobs.list(&Default::default()).await.expect("jobs");
    assert!(listed.items.len() <= 1, "the hook ran once");
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "apps");
    let early = cms.get("early").await.expect("early");
    let late = cms.get("late").await.expect("late");
    let rv = |c: &ConfigMap| {
        c.metadata
            .resource_version
            .clone()
            .unwrap_or_default()
            .parse::<u64>()
            .unwrap_or(0)
    };
    assert!(rv(&early) < rv(&late), "wave 0 before wave 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_live_cache_never_prunes() {
    let env = Env::start().await;
    env.commit(&[("p/a.yaml", &cm("keep", ""))]);
    let apps = create_app(&env, "careful", "p", auto().prune()).await;
    let ctx = context(&env);
    let (state, _rx) = State::new();
    drive(&apps, "careful", &ctx, &state, Duration::from_secs(60), synced_healthy).await;
    // The file leaves Git while the live cache cannot list ConfigMaps (a restarted operator whose
    // watch keeps failing): nothing may be pruned.
    env.commit(&[("p/other.yaml", &cm("other", ""))]);
    env.dev.inject_faults(devcluster::Fault {
        status: 500,
        count: 100_000,
        method: Some("GET".into()),
        path_prefix: Some("/api/v1/configmaps".into()),
        ..Default::default()
    });
    let ctx = context(&env);
    let (state, _rx) = State::new();
    for _ in 0..3 {
        let app = apps.get("careful").await.expect("get");
        let _ = reconcile(Arc::new(app), Arc::clone(&ctx), Arc::clone(&state)).await;
    }
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "apps");
    assert!(
        cms.get_opt("keep").await.expect("get").is_some(),
        "not pruned while the cache is incomplete"
    );
    let app = apps.get("careful").await.expect("get");
    let pruned = app
        .status
        .and_then(|s| s.operation_state)
        .and_then(|o| o.sync_result)
        .is_some_and(|r| {
            r.resources
                .iter()
                .any(|x| x.status == Some(crate::api::application::ResultCode::Pruned))
        });
    assert!(!pruned);
}

/// `Validate=true` (the default) writes with `fieldValidation=Strict`, as kubectl and Argo CD do: a field the
/// kind does not have fails the sync before anything is applied. `Validate=false` writes with `Ignore`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_fields_fail_the_sync_unless_validate_is_false() {
    let env = Env::start().await;
    env.commit(&[
        ("strict/cm.yaml", &cm("strict-cm", "spec:\n  oops: 1\n")),
        ("lenient/cm.yaml", &cm("lenient-cm", "spec:\n  oops: 1\n")),
    ]);
    let ctx = context(&env);
    let (state, _rx) = State::new();
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "apps");

    let apps = create_app(&env, "strict", "strict", auto()).await;
    let app = drive(&apps, "strict", &ctx, &state, Duration::from_secs(60), |a| {
        a.status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .is_some_and(|o| o.phase == OperationPhase::Failed)
    })
    .await;
    let message = app
        .status
        .and_then(|s| s.operation_state)
        .and_then(|o| o.message)
        .unwrap_or_default();
    assert!(message.contains("dry run") && message.contains("spec"), "{message}");
    assert!(
        cms.get_opt("strict-cm").await.expect("get").is_none(),
        "nothing applied"
    );

    let apps = create_app(&env, "lenient", "lenient", auto()).await;
    let patch = serde_json::json!({"spec": {"syncPolicy": {"syncOptions": ["Validate=false"]}}});
    apps.patch(
        "lenient",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .expect("set Validate=false");
    drive(&apps, "lenient", &ctx, &state, Duration::from_secs(60), |a| {
        a.status
            .as_ref()
            .and_then(|s| s.operation_state.as_ref())
            .is_some_and(|o| o.phase == OperationPhase::Succeeded)
    })
    .await;
    let applied = cms.get("lenient-cm").await.expect("applied with Validate=false");
    assert_eq!(applied.data.unwrap_or_default().get("k").map(String::as_str), Some("v"));
}

/// The promise of the status writer and the pipeline: once an Application is Synced and Healthy, a
/// reconcile that finds nothing new writes nothing — no status patch, no metadata patch, no apply.
/// devcluster's request log shows every request the second reconcile made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconciling_a_synced_application_again_writes_nothing() {
    let env = Env::start().await;
    env.commit(&[("steady/a.yaml", &cm("alpha", "")), ("steady/b.yaml", &cm("beta", ""))]);
    let apps = create_app(&env, "steady", "steady", auto().prune()).await;
    let ctx = context(&env);
    let (state, _rx) = State::new();
    drive(&apps, "steady", &ctx, &state, Duration::from_secs(60), synced_healthy).await;
    for round in ["first", "second"] {
        env.dev.clear_request_log();
        let app = apps.get("steady").await.expect("get app");
        assert!(synced_healthy(&app), "Synced and Healthy before the {round} reconcile");
        reconcile(Arc::new(app), Arc::clone(&ctx), Arc::clone(&state))
            .await
            .expect("the reconcile succeeds");
    }
    let writes: Vec<String> = env
        .dev
        .request_log()
        .into_iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(writes.is_empty(), "the second reconcile wrote: {writes:#?}");
}

/// A requested sync (`operation`) whose ServiceAccount does not exist fails — `Error`, naming the
/// ServiceAccount — and the request is cleared, instead of staying pending until the ServiceAccount
/// appears; `SyncError` says the same and nothing is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_requested_sync_without_its_service_account_fails_instead_of_pending() {
    let env = Env::start().await;
    env.commit(&[("app/a.yaml", &cm("alpha", ""))]);
    let apps = create_app(&env, "ghostly", "app", manual()).await;
    let request = serde_json::json!({
        "spec": {"destination": {"serviceAccountName": "ghost"}},
        "operation": {"initiatedBy": {"username": "test"}, "sync": {}},
    });
    apps.patch("ghostly", &PatchParams::default(), &Patch::Merge(&request))
        .await
        .expect("the sync is requested");
    let ctx = context(&env);
    let (state, _rx) = State::new();
    let app = drive(&apps, "ghostly", &ctx, &state, Duration::from_secs(60), |a| {
        a.operation.is_none() && a.status.as_ref().and_then(|s| s.operation_state.as_ref()).is_some()
    })
    .await;
    let status = app.status.expect("status");
    let op = status.operation_state.expect("the operation's state");
    assert_eq!(op.phase, OperationPhase::Error, "{op:?}");
    let message = op.message.unwrap_or_default();
    assert!(
        message.contains("apps/ghost") && message.contains("not found"),
        "{message}"
    );
    assert!(op.finished_at.is_some());
    let sync_error = status.conditions.iter().find(|c| c.type_ == "SyncError");
    assert!(
        sync_error.is_some_and(|c| c.reason == "ServiceAccountNotFound"),
        "{:?}",
        status.conditions
    );
    let cms: Api<ConfigMap> = Api::namespaced(env.client.clone(), "apps");
    assert!(cms.get_opt("alpha").await.expect("get").is_none(), "nothing applied");
}

/// A request the API server answers 503 is counted in `capstan_kube_requests_total` with its code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_request_is_counted_with_its_code() {
    let env = Env::start().await;
    let metrics = crate::metrics::Metrics::register(&prometheus::Registry::new()).expect("metrics");
    let client = crate::controllers::context::counting_client(env.config.clone(), &metrics).expect("client");
    env.dev.inject_faults(devcluster::Fault {
        status: 503,
        count: 1,
        method: Some("GET".into()),
        path_prefix: Some("/api/v1/namespaces/apps/configmaps/probe".into()),
        ..devcluster::Fault::default()
    });
    let cms: Api<ConfigMap> = Api::namespaced(client, "apps");
    let err = cms.get("probe").await.expect_err("the injected 503");
    assert!(
        err.to_string().contains("503") || matches!(&err, kube::Error::Api(s) if s.code == 503),
        "{err}"
    );
    assert_eq!(metrics.kube_requests.with_label_values(&["get", "503"]).get(), 1);
    let _ = cms.get("probe").await;
    assert_eq!(metrics.kube_requests.with_label_values(&["get", "404"]).get(), 1);
}

/// A reconcile whose status write fails is counted in `capstan_reconcile_errors_total` by its reason
/// (`StatusWrite`) and in `capstan_reconcile_total{result="error"}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_status_write_is_counted_as_a_reconcile_error() {
    let env = Env::start().await;
    env.commit(&[("app/a.yaml", &cm("alpha", ""))]);
    let apps = create_app(&env, "statusfail", "app", SyncPolicy::default()).await;
    let ctx = context(&env);
    let (state, _rx) = State::new();
    env.dev.inject_faults(devcluster::Fault {
        status: 503,
        count: 1,
        method: Some("PATCH".into()),
        path_prefix: Some("/apis/capstan.dev/v1alpha1/namespaces/apps/applications/statusfail/status".into()),
        ..devcluster::Fault::default()
    });
    let app = Arc::new(apps.get("statusfail").await.expect("app"));
    let result = crate::controllers::instrumented(
        super::CONTROLLER,
        app.as_ref(),
        &ctx,
        reconcile(Arc::clone(&app), Arc::clone(&ctx), Arc::clone(&state)),
    )
    .await;
    let err = result.expect_err("the status write failed");
    assert_eq!(err.category(), "StatusWrite", "{err}");
    let errors = ctx
        .metrics
        .reconcile_errors
        .with_label_values(&[super::CONTROLLER, "StatusWrite"]);
    assert_eq!(errors.get(), 1);
    let failed = ctx.metrics.reconciles.with_label_values(&[super::CONTROLLER, "error"]);
    assert_eq!(failed.get(), 1);
}
