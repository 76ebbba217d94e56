//! The Application controller end to end: the `capstan` binary against a devcluster, manifests served
//! by `git daemon`, everything driven with the real kubectl. Sources (plain YAML, Kustomize, Helm),
//! cascade deletion, remote destinations and metrics. Sync ordering lives in `application_sync.rs`,
//! prune/self-heal/failure safety in `application_safety.rs`.
//!
//! Each test has its own devcluster, repository, operator and namespace. Applications are written in
//! Argo CD's shape with only `apiVersion` changed, and repositories use Argo CD's annotations.

use capstan_e2e::{
    capstan::{
        application, automated, condition, condition_true, get_object, health_status, list_names, operation_phase,
        resource_entry, sync_status, synced_healthy, text, tracked_by, AppEnv, Recorder, IN_CLUSTER,
        OPERATOR_NAMESPACE,
    },
    chart, check, TestCluster,
};
use serde_json::{json, Value};

/// The guestbook image in Argo CD's example repository.
const GUESTBOOK_IMAGE: &str = "gcr.io/heptio-images/ks-guestbook-demo:0.2";

/// Commits Argo CD's guestbook example at `guestbook/` and returns the commit SHA.
async fn commit_guestbook(env: &AppEnv) -> String {
    env.repo.copy_fixture("guestbook", "guestbook");
    env.repo.commit("guestbook").await
}

fn list<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_yaml_guestbook_syncs_automatically_and_reports_ready() {
    let env = AppEnv::start("guestbook").await;
    let sha = commit_guestbook(&env).await;
    let ns = &env.ns;

    // What a user writes for Argo CD, with only the apiVersion changed.
    let manifest = format!(
        "apiVersion: capstan.dev/v1alpha1
kind: Application
metadata:
  name: guestbook
  namespace: {ns}
spec:
  project: default
  source:
    repoURL: {url}
    targetRevision: HEAD
    path: guestbook
  destination:
    server: {IN_CLUSTER}
    namespace: {ns}
  syncPolicy:
    automated: {{}}
",
        url = env.repo.url()
    );
    env.cluster.apply(&manifest, &[]).await;

    let app = env
        .wait_app("guestbook", "Ready=True", |a| condition_true(a, "Ready"))
        .await;
    // `kubectl wait` sees the same condition.
    let waited = env
        .cluster
        .kubectl(&[
            "wait",
            "-n",
            ns,
            "--for=condition=Ready",
            "capp/guestbook",
            "--timeout=30s",
        ])
        .await;
    if !waited.success() {
        env.fail(&format!("kubectl wait for Ready failed:\n{waited}"));
    }
    let app = if synced_healthy(&app) {
        app
    } else {
        env.wait_synced_healthy("guestbook").await
    };

    assert_eq!(sync_status(&app), "Synced");
    assert_eq!(health_status(&app), "Healthy");
    assert_eq!(
        text(&app, "/status/sync/revision"),
        sha,
        "sync.revision is the commit deployed"
    );
    assert_eq!(text(&app, "/status/sourceType"), "Directory");
    assert_eq!(
        app.pointer("/status/observedGeneration"),
        app.pointer("/metadata/generation"),
        "observedGeneration follows metadata.generation"
    );
    let ready = condition(&app, "Ready").expect("a Ready condition");
    assert_eq!(text(ready, "/reason"), "SyncedAndHealthy", "{ready}");

    // Argo CD's operation state and history of the automated sync.
    assert_eq!(operation_phase(&app), "Succeeded");
    assert_eq!(
        app.pointer("/status/operationState/operation/initiatedBy/automated"),
        Some(&json!(true)),
        "an automated sync says so in initiatedBy"
    );
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), sha);
    let history = list(&app, "/status/history");
    assert_eq!(history.len(), 1, "one sync, one history entry: {history:?}");
    assert_eq!(text(&history[0], "/revision"), sha);

    // Every managed resource is listed, in sync.
    let deployment = resource_entry(&app, "Deployment", "guestbook-ui").expect("the Deployment is listed");
    assert_eq!(text(deployment, "/group"), "apps");
    assert_eq!(text(deployment, "/version"), "v1");
    assert_eq!(text(deployment, "/namespace"), ns.as_str());
    assert_eq!(text(deployment, "/status"), "Synced");
    let service = resource_entry(&app, "Service", "guestbook-ui").expect("the Service is listed");
    assert_eq!(text(service, "/status"), "Synced");
    assert_eq!(
        list(&app, "/status/resources").len(),
        2,
        "only the two objects from Git"
    );
    let images: Vec<&str> = list(&app, "/status/summary/images")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(images.contains(&GUESTBOOK_IMAGE), "summary.images: {images:?}");

    // The objects carry Capstan's ownership marks, and were server-side applied by field manager `capstan`.
    let deploy = env.must_get("Deployment", "guestbook-ui").await;
    let svc = env.must_get("Service", "guestbook-ui").await;
    for obj in [&deploy, &svc] {
        assert!(
            check::managed_entry(obj, "capstan", "Apply").is_some(),
            "no server-side apply by `capstan`: {}",
            obj["metadata"]["managedFields"]
        );
    }
    assert!(tracked_by(&deploy, ns, "guestbook"), "{}", deploy["metadata"]);
    assert_eq!(
        text(&deploy, "/metadata/annotations/capstan.dev~1tracking-id"),
        format!("{ns}/guestbook:apps/Deployment:{ns}/guestbook-ui")
    );
    assert_eq!(
        text(&svc, "/metadata/annotations/capstan.dev~1tracking-id"),
        format!("{ns}/guestbook:/Service:{ns}/guestbook-ui")
    );
    assert_eq!(
        text(&deploy, "/metadata/labels/capstan.dev~1app-instance"),
        text(&svc, "/metadata/labels/capstan.dev~1app-instance"),
        "one app-instance label value per Application"
    );
    // The label is selectable: what a user (or the operator's own watches) would query.
    let selector = format!(
        "capstan.dev/app-instance={}",
        text(&deploy, "/metadata/labels/capstan.dev~1app-instance")
    );
    let selected = env
        .cluster
        .kubectl_ok(&["get", "deployments,services", "-n", ns, "-l", &selector, "-o", "name"])
        .await;
    assert_eq!(
        check::lines(&selected),
        ["deployment.apps/guestbook-ui", "service/guestbook-ui"]
            .into_iter()
            .map(String::from)
            .collect(),
        "{selected}"
    );

    // kubectl's table shows sync and health like `kubectl get applications` under Argo CD.
    let table = env.cluster.kubectl_ok(&["get", "capp", "guestbook", "-n", ns]).await;
    let header = table.lines().next().unwrap_or_default();
    assert!(
        header.contains("SYNC STATUS") && header.contains("HEALTH STATUS"),
        "{table}"
    );
    let row = check::row(&table, "guestbook");
    assert!(
        row.contains(&"Synced".to_owned()) && row.contains(&"Healthy".to_owned()),
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kustomize_overlay_applies_name_prefix_common_labels_and_image_override() {
    let env = AppEnv::start("kustomize").await;
    env.repo.copy_fixture("kustomize-guestbook", "kustomize-guestbook");
    env.repo.commit("kustomize guestbook").await;
    let mut spec = automated(false, false);
    spec["source"] = json!({"kustomize": {"images": ["gcr.io/heptio-images/ks-guestbook-demo:0.3"]}});
    env.create_app("kustomize-guestbook", "kustomize-guestbook/overlays/staging", spec)
        .await;

    let app = env.wait_synced_healthy("kustomize-guestbook").await;
    assert_eq!(text(&app, "/status/sourceType"), "Kustomize");
    assert!(resource_entry(&app, "Deployment", "staging-guestbook-ui").is_some());
    assert!(resource_entry(&app, "Service", "staging-guestbook-ui").is_some());

    let deploy = env.must_get("Deployment", "staging-guestbook-ui").await;
    assert_eq!(
        text(&deploy, "/metadata/labels/env"),
        "staging",
        "the overlay's commonLabels"
    );
    assert_eq!(text(&deploy, "/spec/selector/matchLabels/env"), "staging");
    assert_eq!(
        text(&deploy, "/spec/template/spec/containers/0/image"),
        "gcr.io/heptio-images/ks-guestbook-demo:0.3",
        "spec.source.kustomize.images overrides the base's tag"
    );
    assert!(tracked_by(&deploy, &env.ns, "kustomize-guestbook"));
    let svc = env.must_get("Service", "staging-guestbook-ui").await;
    assert_eq!(text(&svc, "/metadata/labels/env"), "staging");
    assert_eq!(text(&svc, "/spec/selector/env"), "staging");

    let client = env.client().await;
    assert_eq!(
        list_names(&client, &env.ns, "Deployment").await,
        ["staging-guestbook-ui".to_owned()].into(),
        "nothing unprefixed from the base"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_chart_values_follow_argo_precedence() {
    let env = AppEnv::start("helm").await;
    env.repo.copy_fixture("helm-settings", "charts/settings");
    env.repo.commit("settings chart").await;
    let mut spec = automated(false, false);
    spec["source"] = json!({
        "helm": {
            "releaseName": "demo",
            "valueFiles": ["values-prod.yaml"],
            "values": "fromValues: values\nfromParameter: values\n",
            "parameters": [{"name": "fromParameter", "value": "parameter"}],
        }
    });
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap"]).await;
    env.create_app("settings", "charts/settings", spec).await;

    let app = env.wait_synced_healthy("settings").await;
    assert_eq!(text(&app, "/status/sourceType"), "Helm");
    // The chart's `helm.sh/hook: pre-install` Job ran as a PreSync hook, and `hook-succeeded` removed it.
    let hook_done = rec.of("Job", "demo-prepare").into_iter().find(|s| {
        s.object["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(|c| c["type"] == "Complete" && c["status"] == "True"))
    });
    let cm_created = rec.created("ConfigMap", "demo-settings");
    assert!(
        matches!((hook_done.as_ref().map(|s| s.rv), cm_created), (Some(a), Some(b)) if a < b),
        "the pre-install hook completes before the chart's resources are applied\n{}",
        rec.trace()
    );
    env.wait_object("Job", "demo-prepare", "is deleted (hook-succeeded)", |o| o.is_none())
        .await;
    let hook = capstan_e2e::capstan::sync_result_entry(&app, "Job", "demo-prepare");
    assert!(
        hook.is_some_and(|h| text(h, "/hookType") == "PreSync"),
        "the Helm hook is recorded as a PreSync hook: {hook:?}"
    );
    let cm = env.must_get("ConfigMap", "demo-settings").await;
    // parameters > values > valueFiles > the chart's values.yaml.
    assert_eq!(
        cm["data"],
        json!({
            "fromChart": "chart",
            "fromValueFile": "value-file",
            "fromValues": "values",
            "fromParameter": "parameter",
            "releaseNamespace": env.ns,
        }),
        "{cm}"
    );
    assert_eq!(
        text(&cm, "/metadata/labels/app.kubernetes.io~1instance"),
        "demo",
        "helm.releaseName"
    );
    assert!(tracked_by(&cm, &env.ns, "settings"));
}

/// `CreateNamespace=true` creates the missing destination namespace with `managedNamespaceMetadata`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_namespace_sync_option_creates_the_destination_namespace() {
    let env = AppEnv::start("createns").await;
    commit_guestbook(&env).await;
    let dest = format!("{}-created", env.ns);
    let mut spec = automated(false, false);
    spec["syncPolicy"]["syncOptions"] = json!(["CreateNamespace=true"]);
    spec["syncPolicy"]["managedNamespaceMetadata"] = json!({"labels": {"team": "guestbook"}});
    env.apply(&[application(
        &env.ns,
        "guestbook",
        &env.repo.url(),
        "guestbook",
        &dest,
        spec,
    )])
    .await;
    env.wait_synced_healthy("guestbook").await;
    let client = env.client().await;
    let ns = get_object(&client, "", "Namespace", &dest)
        .await
        .unwrap_or_else(|| env.fail(&format!("namespace {dest} was not created")));
    assert_eq!(text(&ns, "/metadata/labels/team"), "guestbook", "{}", ns["metadata"]);
    assert!(get_object(&client, &dest, "Deployment", "guestbook-ui").await.is_some());
}

/// Cascade deletion with `capstan.dev/resources`; without a finalizer the resources are orphaned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_application_cascades_only_with_the_resources_finalizer() {
    let env = AppEnv::start("cascade").await;
    commit_guestbook(&env).await;
    let cascade_ns = env.cluster.with_namespace("cascade-dest").await;
    let orphan_ns = env.cluster.with_namespace("orphan-dest").await;
    let mut cascade = application(
        &env.ns,
        "cascade",
        &env.repo.url(),
        "guestbook",
        &cascade_ns,
        automated(true, false),
    );
    cascade["metadata"]["finalizers"] = json!(["capstan.dev/resources"]);
    let orphan = application(
        &env.ns,
        "orphan",
        &env.repo.url(),
        "guestbook",
        &orphan_ns,
        automated(true, false),
    );
    env.apply(&[cascade, orphan]).await;
    env.wait_synced_healthy("cascade").await;
    env.wait_synced_healthy("orphan").await;
    let client = env.client().await;
    let orphan_uid = text(
        &get_object(&client, &orphan_ns, "Deployment", "guestbook-ui")
            .await
            .expect("orphan's Deployment"),
        "/metadata/uid",
    )
    .to_owned();

    // No finalizer: the Application goes at once, its objects stay.
    env.cluster
        .kubectl_ok(&["delete", "capp", "orphan", "-n", &env.ns, "--timeout=60s"])
        .await;

    // The finalizer: the objects go first, then the Application.
    env.cluster
        .kubectl_ok(&["delete", "capp", "cascade", "-n", &env.ns, "--wait=false"])
        .await;
    env.eventually(
        "the cascade Application and its objects are gone",
        capstan_e2e::capstan::APP_TIMEOUT,
        || {
            let client = client.clone();
            let (ns, cascade_ns) = (env.ns.clone(), cascade_ns.clone());
            async move {
                let app = get_object(&client, &ns, "Application", "cascade").await;
                let deploy = get_object(&client, &cascade_ns, "Deployment", "guestbook-ui").await;
                let svc = get_object(&client, &cascade_ns, "Service", "guestbook-ui").await;
                match (&app, &deploy, &svc) {
                    (None, None, None) => Ok(()),
                    _ => Err(format!(
                        "application present: {}, deployment present: {}, service present: {}",
                        app.is_some(),
                        deploy.is_some(),
                        svc.is_some()
                    )),
                }
            }
        },
    )
    .await;

    // The orphaned objects survived everything the operator did meanwhile.
    let deploy = get_object(&client, &orphan_ns, "Deployment", "guestbook-ui")
        .await
        .unwrap_or_else(|| env.fail("the orphaned Deployment was deleted"));
    assert_eq!(
        text(&deploy, "/metadata/uid"),
        orphan_uid,
        "the orphaned Deployment was not re-created"
    );
    assert!(
        get_object(&client, &orphan_ns, "Service", "guestbook-ui")
            .await
            .is_some(),
        "the orphaned Service was deleted"
    );
}

/// An Application moved from Argo CD keeps Argo's finalizer; it must cascade, not hang forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn argo_cd_resources_finalizer_cascades_too() {
    let env = AppEnv::start("argofinalizer").await;
    commit_guestbook(&env).await;
    let mut app = application(
        &env.ns,
        "moved",
        &env.repo.url(),
        "guestbook",
        &env.ns,
        automated(false, false),
    );
    app["metadata"]["finalizers"] = json!(["resources-finalizer.argocd.argoproj.io"]);
    env.apply(&[app]).await;
    env.wait_synced_healthy("moved").await;

    env.cluster
        .kubectl_ok(&["delete", "capp", "moved", "-n", &env.ns, "--wait=false"])
        .await;
    let client = env.client().await;
    env.eventually(
        "the Application and its objects are gone",
        capstan_e2e::capstan::APP_TIMEOUT,
        || {
            let client = client.clone();
            let ns = env.ns.clone();
            async move {
                let app = get_object(&client, &ns, "Application", "moved").await;
                let deploy = get_object(&client, &ns, "Deployment", "guestbook-ui").await;
                if app.is_none() && deploy.is_none() {
                    Ok(())
                } else {
                    Err(format!(
                        "application present: {}, deployment present: {}",
                        app.is_some(),
                        deploy.is_some()
                    ))
                }
            }
        },
    )
    .await;
}

/// `destination.name` names a Cluster whose Secret holds `bearerToken` + `caCert`: a ServiceAccount token of the
/// chart's own ServiceAccount on a second devcluster over HTTPS. Objects go to that cluster only. A Cluster whose
/// `caCert` is another CA is `Ready=False` with a TLS reason: never a silent insecure fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_cluster_destination_by_name_receives_the_objects() {
    let env = AppEnv::start("remote").await;
    commit_guestbook(&env).await;
    let remote = TestCluster::start();
    let remote_ns = remote.with_namespace("edge-apps").await;
    remote.kubectl_ok(&["create", "namespace", OPERATOR_NAMESPACE]).await;
    // Writes are made as the Application's ServiceAccount on the remote cluster (impersonated with the chart's
    // rights there): it must exist there, in a namespace named like the Application's.
    remote.kubectl_ok(&["create", "namespace", &env.ns]).await;
    remote.apply(&capstan_e2e::capstan::admin_deployer(&env.ns), &[]).await;
    let token = chart::token_for(&remote, chart::Identity::Operator).await;
    let secret = |name: &str, ca: String| {
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": env.ns},
            "type": "Opaque",
            "stringData": {"bearerToken": token, "caCert": ca},
        })
    };
    let cluster_object = |name: &str, secret: &str| {
        json!({
            "apiVersion": "capstan.dev/v1alpha1",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": env.ns, "labels": {"env": "edge"}},
            "spec": {"server": remote.url(), "secretRef": {"name": secret}},
        })
    };
    env.apply(&[
        secret("edge-token", remote.dev().ca_pem()),
        cluster_object("edge", "edge-token"),
        // The operator's own cluster's CA did not sign the remote's certificate.
        secret("wrong-ca-token", env.cluster.dev().ca_pem()),
        cluster_object("wrong-ca", "wrong-ca-token"),
    ])
    .await;
    let wrong = env
        .wait_object("Cluster", "wrong-ca", "is Ready=False", |c| {
            c.and_then(|c| condition(c, "Ready"))
                .is_some_and(|r| text(r, "/status") == "False")
        })
        .await
        .expect("the Cluster exists");
    let ready = condition(&wrong, "Ready").expect("a Ready condition");
    assert_eq!(text(ready, "/reason"), "TLSHandshakeFailed", "{ready}");
    assert!(
        text(ready, "/message").to_lowercase().contains("certificate"),
        "the message names the certificate problem: {ready}"
    );

    let client = env.client().await;
    let cluster = env
        .eventually(
            "Cluster edge is Ready with a serverVersion",
            capstan_e2e::capstan::APP_TIMEOUT,
            || {
                let client = client.clone();
                let ns = env.ns.clone();
                async move {
                    match get_object(&client, &ns, "Cluster", "edge").await {
                        Some(c) if condition_true(&c, "Ready") && !text(&c, "/status/serverVersion").is_empty() => {
                            Ok(c)
                        }
                        other => Err(format!("{other:?}")),
                    }
                }
            },
        )
        .await;
    assert!(
        text(&cluster, "/status/serverVersion").starts_with("v1."),
        "serverVersion is the remote's /version gitVersion: {}",
        cluster["status"]
    );

    let mut app = application(
        &env.ns,
        "edge-guestbook",
        &env.repo.url(),
        "guestbook",
        &remote_ns,
        automated(true, false),
    );
    app["spec"]["destination"] = json!({"name": "edge", "namespace": remote_ns});
    env.apply(&[app]).await;
    env.wait_synced_healthy("edge-guestbook").await;

    let remote_client = remote.client().await;
    let deploy = get_object(&remote_client, &remote_ns, "Deployment", "guestbook-ui")
        .await
        .unwrap_or_else(|| env.fail("the Deployment is not in the remote cluster"));
    assert!(tracked_by(&deploy, &env.ns, "edge-guestbook"), "{}", deploy["metadata"]);
    assert!(get_object(&remote_client, &remote_ns, "Service", "guestbook-ui")
        .await
        .is_some());

    // Nothing landed in the operator's own cluster.
    let local = env
        .cluster
        .kubectl_ok(&[
            "get",
            "deployments,services",
            "-A",
            "-l",
            "capstan.dev/app-instance",
            "-o",
            "name",
        ])
        .await;
    assert!(
        local.trim().is_empty(),
        "managed objects in the local cluster:\n{local}"
    );
    let local_ns = env.cluster.kubectl(&["get", "namespace", &remote_ns]).await;
    assert!(!local_ns.success(), "the remote namespace exists locally:\n{local_ns}");

    env.eventually(
        "Cluster edge counts one managed Application",
        capstan_e2e::capstan::APP_TIMEOUT,
        || {
            let client = client.clone();
            let ns = env.ns.clone();
            async move {
                let c = get_object(&client, &ns, "Cluster", "edge").await.unwrap_or(Value::Null);
                match c.pointer("/status/managedApplications").and_then(Value::as_i64) {
                    Some(1) => Ok(()),
                    _ => Err(format!("{}", c["status"])),
                }
            }
        },
    )
    .await;
}

/// The canary: `/metrics` carries Argo CD's application metrics under `capstan_`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_expose_app_info_and_sync_total() {
    let env = AppEnv::start("metrics").await;
    commit_guestbook(&env).await;
    env.create_app("guestbook", "guestbook", automated(false, false)).await;
    env.wait_synced_healthy("guestbook").await;

    let name = r#"name="guestbook""#;
    let namespace = format!(r#"namespace="{}""#, env.ns);
    let text = env
        .eventually(
            "/metrics shows the app Synced and Healthy",
            capstan_e2e::capstan::APP_TIMEOUT,
            || async {
                let text = env.operator.metrics().await;
                let info: Vec<&str> = series(&text, "capstan_app_info", &[name, &namespace]);
                let ok = info.len() == 1
                    && info[0].contains(r#"sync_status="Synced""#)
                    && info[0].contains(r#"health_status="Healthy""#)
                    && info[0].ends_with(" 1");
                let synced = series(&text, "capstan_app_sync_total", &[name, &namespace])
                    .iter()
                    .any(|l| l.contains(r#"phase="Succeeded""#) && value(l) >= 1.0);
                if ok && synced {
                    Ok(text.clone())
                } else {
                    let mine: Vec<&str> = text.lines().filter(|l| l.starts_with("capstan_app")).collect();
                    Err(mine.join("\n"))
                }
            },
        )
        .await;
    let info = series(&text, "capstan_app_info", &[name, &namespace])[0].to_owned();
    for label in [
        r#"project="default""#.to_owned(),
        format!(r#"dest_namespace="{}""#, env.ns),
        format!(r#"dest_server="{IN_CLUSTER}""#),
        format!(r#"repo="{}""#, env.repo.url()),
    ] {
        assert!(info.contains(&label), "capstan_app_info lacks {label}: {info}");
    }
    assert!(
        text.contains("# TYPE capstan_app_sync_total counter"),
        "capstan_app_sync_total is a counter"
    );
}

/// The sample lines of metric `metric` whose labels include every one of `labels`.
fn series<'a>(text: &'a str, metric: &str, labels: &[&str]) -> Vec<&'a str> {
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .collect()
}

fn value(line: &str) -> f64 {
    line.rsplit(' ').next().and_then(|v| v.parse().ok()).unwrap_or(0.0)
}
