//! The ApplicationSet controller end to end: the `capstan` binary (ApplicationSet, Application,
//! Repository and Cluster controllers) against a devcluster, manifests served by `git daemon`,
//! everything driven with the real kubectl. ApplicationSets are written in Argo CD's shape with only
//! `apiVersion` changed.

use std::time::Duration;

use capstan_e2e::capstan::{get_object, list_names, AppEnv, OperatorOptions, IN_CLUSTER};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::Value;

const TIMEOUT: Duration = Duration::from_secs(90);

fn options() -> OperatorOptions {
    OperatorOptions {
        controllers: "application,applicationset,cluster,repository".into(),
        ..OperatorOptions::default()
    }
}

async fn appset(env: &AppEnv, name: &str) -> Value {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("capstan.dev", "v1alpha1", "ApplicationSet"),
        "applicationsets",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(env.client().await, &env.ns, &resource);
    let set = api.get(name).await.expect("the ApplicationSet exists");
    serde_json::to_value(set).expect("serialises")
}

fn configmap(name: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  k: v\n")
}

async fn app_names(env: &AppEnv) -> Vec<String> {
    list_names(&env.client().await, &env.ns, "Application")
        .await
        .into_iter()
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_directories_create_and_delete_applications_as_git_changes() {
    let env = AppEnv::start_with("appset-dirs", options()).await;
    env.repo.write("apps/alpha/cm.yaml", &configmap("alpha"));
    env.repo.write("apps/beta/cm.yaml", &configmap("beta"));
    env.repo.write("README.md", "not an app\n");
    env.repo.commit("two apps").await;
    let ns = &env.ns;
    let manifest = format!(
        "apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata:
  name: dirs
  namespace: {ns}
spec:
  generators:
  - git:
      repoURL: {url}
      revision: HEAD
      directories:
      - path: apps/*
  template:
    metadata:
      name: '{{{{path.basename}}}}'
    spec:
      project: default
      source:
        repoURL: {url}
        targetRevision: HEAD
        path: '{{{{path}}}}'
      destination:
        server: {IN_CLUSTER}
        namespace: {ns}
      syncPolicy:
        automated: {{}}
",
        url = env.repo.url()
    );
    env.cluster.apply(&manifest, &[]).await;
    env.cluster
        .kubectl_ok(&[
            "wait",
            "-n",
            ns,
            "cappset/dirs",
            "--for=condition=Ready",
            "--timeout=90s",
        ])
        .await;
    env.eventually("Applications alpha and beta exist", TIMEOUT, || async {
        let names = app_names(&env).await;
        (names == ["alpha", "beta"]).then_some(()).ok_or(format!("{names:?}"))
    })
    .await;
    env.wait_synced_healthy("alpha").await;
    env.wait_object("ConfigMap", "beta", "exists", |o| o.is_some()).await;
    let set = appset(&env, "dirs").await;
    assert_eq!(set.pointer("/status/resourcesCount"), Some(&Value::from(2)), "{set:#}");
    let table = env.cluster.kubectl_ok(&["get", "cappset", "-n", ns]).await;
    assert!(table.contains("APPLICATIONS") && table.contains('2'), "{table}");

    // beta leaves Git, gamma arrives; a refresh annotation makes the set look now.
    env.repo.remove("apps/beta");
    env.repo.write("apps/gamma/cm.yaml", &configmap("gamma"));
    env.repo.commit("beta out, gamma in").await;
    env.cluster
        .kubectl_ok(&[
            "annotate",
            "-n",
            ns,
            "cappset",
            "dirs",
            "argocd.argoproj.io/application-set-refresh=true",
            "--overwrite",
        ])
        .await;
    env.eventually("Applications alpha and gamma (beta deleted)", TIMEOUT, || async {
        let names = app_names(&env).await;
        (names == ["alpha", "gamma"]).then_some(()).ok_or(format!("{names:?}"))
    })
    .await;
    // The deleted Application's resources go with it (resources finalizer), the new one syncs.
    env.wait_object("ConfigMap", "beta", "is deleted", |o| o.is_none())
        .await;
    env.wait_synced_healthy("gamma").await;
    let set = env
        .eventually("the refresh annotation is removed", TIMEOUT, || async {
            let set = appset(&env, "dirs").await;
            match set.pointer("/metadata/annotations/argocd.argoproj.io~1application-set-refresh") {
                None => Ok(set),
                Some(_) => Err("still annotated".into()),
            }
        })
        .await;
    assert_eq!(set.pointer("/status/resourcesCount"), Some(&Value::from(2)), "{set:#}");
    let metrics = env.operator.metrics().await;
    assert!(
        metrics.contains(&format!(
            "capstan_appset_owned_applications{{name=\"dirs\",namespace=\"{ns}\"}} 2"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("capstan_appset_info{"), "{metrics}");
}

fn deployment(name: &str, held: bool) -> String {
    let annotations = if held {
        "  annotations:\n    devcluster.capstan.dev/behavior: progressing\n"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
{annotations}spec:
  replicas: 1
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      containers:
      - name: web
        image: nginx:1.27
"
    )
}

fn rollout_entry<'a>(set: &'a Value, app: &str) -> Option<&'a Value> {
    set.pointer("/status/applicationStatus")?
        .as_array()?
        .iter()
        .find(|e| e["application"] == app)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_sync_holds_the_next_step_while_one_is_progressing() {
    let env = AppEnv::start_with("appset-rollout", options()).await;
    env.repo.write("envs/dev/deploy.yaml", &deployment("web-dev", false));
    env.repo.write("envs/qa/deploy.yaml", &deployment("web-qa", true));
    env.repo.write("envs/prod/deploy.yaml", &deployment("web-prod", false));
    env.repo.commit("three environments").await;
    let ns = &env.ns;
    let manifest = format!(
        "apiVersion: capstan.dev/v1alpha1
kind: ApplicationSet
metadata:
  name: rollout
  namespace: {ns}
spec:
  generators:
  - list:
      elements:
      - env: dev
      - env: qa
      - env: prod
  strategy:
    type: RollingSync
    rollingSync:
      steps:
      - matchExpressions:
        - {{key: envLabel, operator: In, values: [dev]}}
      - matchExpressions:
        - {{key: envLabel, operator: In, values: [qa]}}
        maxUpdate: 100%
      - matchExpressions:
        - {{key: envLabel, operator: In, values: [prod]}}
        maxUpdate: 1
  template:
    metadata:
      name: 'web-{{{{env}}}}'
      labels:
        envLabel: '{{{{env}}}}'
    spec:
      project: default
      source:
        repoURL: {url}
        targetRevision: HEAD
        path: 'envs/{{{{env}}}}'
      destination:
        server: {IN_CLUSTER}
        namespace: {ns}
      syncPolicy:
        automated:
          prune: true
",
        url = env.repo.url()
    );
    env.cluster.apply(&manifest, &[]).await;
    // dev syncs first and becomes Healthy; qa syncs next and stays Progressing.
    env.wait_synced_healthy("web-dev").await;
    env.wait_app("web-qa", "synced, health Progressing", |app| {
        app.pointer("/status/sync/status") == Some(&Value::from("Synced"))
            && app.pointer("/status/health/status") == Some(&Value::from("Progressing"))
    })
    .await;
    let set = env
        .eventually("qa Progressing, prod Waiting in applicationStatus", TIMEOUT, || async {
            let set = appset(&env, "rollout").await;
            let status = |app: &str| rollout_entry(&set, app).map(|e| e["status"].clone());
            if status("web-dev") == Some("Healthy".into())
                && status("web-qa") == Some("Progressing".into())
                && status("web-prod") == Some("Waiting".into())
            {
                Ok(set)
            } else {
                Err(format!("{:#}", set.pointer("/status").cloned().unwrap_or_default()))
            }
        })
        .await;
    assert_eq!(rollout_entry(&set, "web-qa").unwrap()["step"], "2");
    assert!(rollout_entry(&set, "web-qa").unwrap()["lastTransitionTime"].is_string());
    let progressing = set["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "RolloutProgressing")
        .cloned()
        .unwrap_or_default();
    assert_eq!(progressing["status"], "True", "{set:#}");
    // RollingSync turned automated sync off on the generated Applications...
    let prod = env.app("web-prod").await;
    assert!(prod.pointer("/spec/syncPolicy/automated").is_none(), "{prod:#}");
    // ... so prod is never synced while qa is held: no operation, no Deployment.
    assert!(prod.get("operation").is_none_or(Value::is_null), "{prod:#}");
    assert_ne!(prod.pointer("/status/sync/status"), Some(&Value::from("Synced")));
    assert!(get_object(&env.client().await, ns, "Deployment", "web-prod")
        .await
        .is_none());
}
