//! The Helm chart as a platform team installs it: `helm template --include-crds` (the real Helm engine behind
//! `e2e/tools/helm`) applied with the real kubectl; the CRDs are served, the operator runs under its own
//! ServiceAccount, and every flag the chart passes is one `capstan run` accepts.

use std::process::Stdio;

use capstan_e2e::capstan::{
    application, automated, get_object, synced_healthy, workspace_root, GitRepo, Operator, OperatorOptions, PodCommand,
    APP_TIMEOUT, OPERATOR_NAMESPACE,
};
use capstan_e2e::chart::{self, find};
use capstan_e2e::process::workspace_binary;
use capstan_e2e::{wait_until, within, TestCluster, POLL, TIMEOUT};
use tokio::process::Command;

async fn output(cmd: &mut Command, what: &str) -> String {
    let out = within(what, TIMEOUT, cmd.stdin(Stdio::null()).output())
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

#[tokio::test]
async fn helm_chart_installs_crds_rbac_and_an_operator_that_accepts_its_flags() {
    let root = workspace_root();
    let values = tempfile::tempdir().expect("tempdir");
    let values_file = values.path().join("values.yaml");
    std::fs::write(
        &values_file,
        "controllers: repository,application\nextraArgs: [\"--app-concurrency=64\", \"--git-timeout=120s\"]\n",
    )
    .expect("values");
    let rendered = output(
        Command::new(root.join("e2e/tools/helm"))
            .args(["template", "capstan"])
            .arg(root.join("charts/capstan"))
            .args(["--namespace", OPERATOR_NAMESPACE, "--include-crds", "-f"])
            .arg(&values_file),
        "helm template",
    )
    .await;

    let cluster = TestCluster::start();
    cluster.kubectl_ok(&["create", "namespace", OPERATOR_NAMESPACE]).await;
    cluster
        .kubectl_ok_stdin(&["apply", "--server-side", "-f", "-"], &rendered)
        .await;
    for crd in [
        "applications",
        "applicationsets",
        "repositories",
        "clusters",
        "policysets",
    ] {
        let listed = cluster
            .kubectl_ok(&["get", &format!("{crd}.capstan.dev"), "-A", "-o", "name"])
            .await;
        assert!(
            listed.trim().is_empty(),
            "{crd}: a fresh cluster has none, got {listed}"
        );
    }
    let account = cluster
        .kubectl_ok(&[
            "get",
            "clusterrolebinding",
            "capstan",
            "-o",
            "jsonpath={.subjects[0].namespace}/{.subjects[0].name}",
        ])
        .await;
    assert_eq!(account, format!("{OPERATOR_NAMESPACE}/capstan"));
    cluster
        .kubectl_ok(&["get", "serviceaccount", "capstan", "-n", OPERATOR_NAMESPACE])
        .await;

    let args_json = cluster
        .kubectl_ok(&[
            "get",
            "deployment",
            "capstan",
            "-n",
            OPERATOR_NAMESPACE,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ])
        .await;
    let args: Vec<String> = serde_json::from_str(&args_json).expect("args are a JSON list");
    assert_eq!(args.first().map(String::as_str), Some("run"), "{args:?}");
    for expected in [
        "--namespace=capstan-system",
        "--controllers=repository,application",
        "--app-concurrency=64",
        "--git-timeout=120s",
    ] {
        assert!(args.iter().any(|a| a == expected), "{expected} missing from {args:?}");
    }
    assert_known_flags(&args).await;
}

/// Every flag the chart passes (after `run`) is one the binary knows: a typo would crash-loop the Deployment.
async fn assert_known_flags(args: &[String]) {
    let help = output(
        Command::new(workspace_binary("capstan")).args(["run", "--help"]),
        "capstan run --help",
    )
    .await;
    for flag in args.iter().skip(1) {
        let name = flag.split('=').next().unwrap_or(flag);
        assert!(help.contains(name), "`capstan run` does not know {name}");
    }
}

/// The chart rendered with `values` (a values file's text), through the harness's cached Helm rendering.
async fn render(values: &str) -> Vec<serde_json::Value> {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("values.yaml");
    std::fs::write(&file, values).expect("values");
    chart::render(&["-f".to_owned(), file.display().to_string()])
        .await
        .to_vec()
}

fn verbs_on(role: &serde_json::Value, resource: &str) -> Vec<String> {
    role["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == resource))
        })
        .flat_map(|r| r["verbs"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// `reporter.enabled` (off by default): its own Deployment running `--controllers=reporter` with flags the binary
/// knows, its own ServiceAccount, read-only access to the five kinds and Events, its Lease, checkpoint, settings
/// and token by name — and write access to Applications only when `reporter.tasks.namespaces` is set.
#[tokio::test]
async fn helm_chart_reporter_is_opt_in_and_least_privilege() {
    let default = render("{}\n").await;
    assert!(
        find(&default, "Deployment", "capstan-reporter").is_none(),
        "the reporter is off by default"
    );

    let on = render("reporter:\n  enabled: true\n  config: {url: \"https://saas.example\", agentId: prod-1}\n").await;
    let deployment = find(&on, "Deployment", "capstan-reporter").expect("the reporter Deployment");
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "capstan-reporter");
    let args: Vec<String> = serde_json::from_value(pod["containers"][0]["args"].clone()).expect("args");
    assert!(args.iter().any(|a| a == "--controllers=reporter"), "{args:?}");
    assert_known_flags(&args).await;
    let cluster_role = find(&on, "ClusterRole", "capstan-reporter").expect("the reporter ClusterRole");
    for kind in [
        "applications",
        "applicationsets",
        "repositories",
        "clusters",
        "policysets",
        "events",
    ] {
        assert_eq!(verbs_on(cluster_role, kind), ["get", "list", "watch"], "{kind}");
    }
    assert!(
        verbs_on(cluster_role, "secrets").is_empty(),
        "the reporter never reads Secrets cluster-wide"
    );
    let role = find(&on, "Role", "capstan-reporter").expect("the reporter Role");
    let by_name: Vec<&serde_json::Value> = role["rules"]
        .as_array()
        .expect("rules")
        .iter()
        .filter(|r| {
            r["resources"]
                .as_array()
                .is_some_and(|rs| rs.iter().any(|x| x == "secrets"))
        })
        .collect();
    assert_eq!(by_name.len(), 1);
    assert_eq!(by_name[0]["resourceNames"], serde_json::json!(["capstan-reporter"]));
    let settings = find(&on, "ConfigMap", "capstan-reporter").expect("the settings ConfigMap");
    assert_eq!(settings["data"]["agentId"], "prod-1");
    assert_eq!(settings["data"]["tasks.namespaces"], "");

    let tasks = render("reporter:\n  enabled: true\n  tasks: {namespaces: \"team-*\"}\n").await;
    let cluster_role = find(&tasks, "ClusterRole", "capstan-reporter").expect("the reporter ClusterRole");
    assert!(verbs_on(cluster_role, "applications").contains(&"patch".to_string()));
    assert!(verbs_on(cluster_role, "applications/status").contains(&"patch".to_string()));
    assert!(
        find(&tasks, "ConfigMap", "capstan-reporter").is_none(),
        "no url: the ConfigMap is the user's"
    );
}

/// The operator's RBAC comes in two parts: ClusterRole `capstan` names exactly what the controllers use (no
/// wildcard; Secrets and ConfigMaps read only), and ClusterRole `capstan-deploy` is what Applications may deploy:
/// everything by default, narrowed by `rbac.deploy.rules`, gone with `rbac.deploy.enabled: false`. The e2e tests
/// run the operator under the first with a narrow second, so they prove the controllers' part.
#[tokio::test]
async fn helm_chart_splits_the_controllers_rights_from_what_applications_may_deploy() {
    let default = render("{}\n").await;
    let controller = find(&default, "ClusterRole", "capstan").expect("the controllers' ClusterRole");
    for rule in controller["rules"].as_array().expect("rules") {
        for field in ["apiGroups", "resources", "verbs"] {
            assert!(
                !rule[field].as_array().into_iter().flatten().any(|v| v == "*"),
                "no wildcard in the controllers' role: {rule}"
            );
        }
    }
    assert!(verbs_on(controller, "applications/status").contains(&"patch".to_owned()));
    assert_eq!(verbs_on(controller, "secrets"), ["get", "list", "watch"]);
    let deploy = find(&default, "ClusterRole", "capstan-deploy").expect("the deploy ClusterRole");
    assert_eq!(
        deploy["rules"],
        serde_json::json!([{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}])
    );
    let binding = find(&default, "ClusterRoleBinding", "capstan-deploy").expect("the deploy binding");
    assert_eq!(binding["subjects"][0]["name"], "capstan");

    let narrow =
        render("rbac:\n  deploy:\n    rules: [{apiGroups: [apps], resources: [deployments], verbs: ['*']}]\n").await;
    let deploy = find(&narrow, "ClusterRole", "capstan-deploy").expect("the deploy ClusterRole");
    assert_eq!(verbs_on(deploy, "deployments"), ["*"]);
    assert!(verbs_on(deploy, "configmaps").is_empty());

    let off = render("rbac:\n  deploy:\n    enabled: false\n").await;
    assert!(find(&off, "ClusterRole", "capstan-deploy").is_none());
    assert!(find(&off, "ClusterRoleBinding", "capstan-deploy").is_none());
    assert!(find(&off, "ClusterRole", "capstan").is_some());
}

// ---------------------------------------------------------------------------------------------
// The whole lifecycle with the real Helm engine, and the operator started as the chart installs it.

const RELEASE: &str = "capstan";

/// `e2e/tools/helm <args> --kubeconfig <cluster's>`: stdout, or the failure's stderr as `Err`.
async fn helm(cluster: &TestCluster, args: &[&str]) -> Result<String, String> {
    let out = within(
        format!("helm {}", args.join(" ")),
        TIMEOUT * 3,
        Command::new(workspace_root().join("e2e/tools/helm"))
            .args(args)
            .arg("--kubeconfig")
            .arg(cluster.kubeconfig_path())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .expect("helm runs");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(stdout)
    } else {
        Err(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)))
    }
}

async fn helm_ok(cluster: &TestCluster, args: &[&str]) -> String {
    helm(cluster, args)
        .await
        .unwrap_or_else(|e| panic!("helm {}: {e}", args.join(" ")))
}

/// Every object the chart installs with monitoring, dashboard and webhook ingress on.
const INSTALLED: [(&str, &str); 11] = [
    ("deployment", RELEASE),
    ("serviceaccount", RELEASE),
    ("service", "capstan-metrics"),
    ("service", "capstan-webhook"),
    ("ingress", "capstan-webhook"),
    ("poddisruptionbudget", RELEASE),
    ("servicemonitor", RELEASE),
    ("prometheusrule", RELEASE),
    ("configmap", "capstan-dashboard"),
    ("clusterrole", RELEASE),
    ("clusterrolebinding", RELEASE),
];

async fn installed_objects(cluster: &TestCluster) -> Vec<String> {
    let mut found = Vec::new();
    for (kind, name) in INSTALLED {
        let out = cluster
            .kubectl_ok(&[
                "get",
                kind,
                name,
                "-n",
                OPERATOR_NAMESPACE,
                "--ignore-not-found",
                "-o",
                "name",
            ])
            .await;
        found.extend(out.lines().map(str::to_owned));
    }
    found
}

async fn deployment(cluster: &TestCluster) -> serde_json::Value {
    let out = cluster
        .kubectl_ok(&["get", "deployment", RELEASE, "-n", OPERATOR_NAMESPACE, "-o", "json"])
        .await;
    serde_json::from_str(&out).expect("the Deployment as JSON")
}

/// What the kubelet would run for the Deployment's pod: its container args and env (the pod name
/// resolved), and the ServiceAccount it runs as.
fn pod_command(deployment: &serde_json::Value, cache_dir: &std::path::Path) -> (PodCommand, String) {
    capstan_e2e::kubelet::pod_command_of(&deployment["spec"]["template"], OPERATOR_NAMESPACE, cache_dir)
}

/// Plays kubelet for the installed Deployment: `capstan run` with its pod's exact args and env,
/// authenticated with a token of its ServiceAccount; returns once it leads.
async fn run_as_installed(cluster: &TestCluster, installed: &serde_json::Value, cache: &std::path::Path) -> Operator {
    let (pod, account) = pod_command(installed, cache);
    assert!(pod.args.iter().any(|a| a == "--leader-elect"), "{:?}", pod.args);
    assert_known_flags(&pod.args).await;
    let token = cluster.create_token(OPERATOR_NAMESPACE, &account);
    let kubeconfig = cluster.dir().join("pod.kubeconfig");
    std::fs::write(&kubeconfig, cluster.dev().kubeconfig_for_token(&account, &token)).expect("kubeconfig");
    let options = OperatorOptions {
        as_pod: Some(pod),
        ..OperatorOptions::default()
    };
    let operator = Operator::start(&kubeconfig, options).await;
    wait_until("the pod leads", TIMEOUT, POLL, || async {
        operator.metrics().await.lines().any(|l| l == "capstan_leader 1")
    })
    .await;
    operator
}

/// `helm install` → every object exists, and `capstan run` started with the installed Deployment's
/// exact args and env, authenticated as its ServiceAccount, leads and syncs an Application; `helm
/// upgrade` with other values changes the Deployment, `helm rollback` restores it, `helm uninstall`
/// removes everything but the CRDs and what the Applications deployed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_lifecycle_runs_the_operator_as_installed() {
    let cluster = TestCluster::start();
    let monitoring = workspace_root().join("e2e/fixtures/install/prometheus-operator-crds.yaml");
    cluster
        .kubectl_ok(&["apply", "-f", monitoring.to_str().expect("utf-8 path")])
        .await;
    cluster.kubectl_ok(&["create", "namespace", OPERATOR_NAMESPACE]).await;
    let chart = workspace_root().join("charts/capstan").display().to_string();
    // The pod's webhook port through values: the chart's default (9443) would collide between two
    // concurrent runs of this test on one machine.
    let webhook_port = capstan_e2e::capstan::free_port();
    let webhook_port_value = format!("--set=webhook.port={webhook_port}");
    let on = [
        "--set=metrics.serviceMonitor.enabled=true",
        "--set=metrics.rules.enabled=true",
        "--set=dashboards.enabled=true",
        "--set=webhook.enabled=true",
        "--set=webhook.ingress.enabled=true",
        "--set=webhook.ingress.host=capstan.example",
        webhook_port_value.as_str(),
    ];
    let mut install = vec!["install", RELEASE, chart.as_str(), "-n", OPERATOR_NAMESPACE];
    install.extend(on);
    let out = helm_ok(&cluster, &install).await;
    assert!(out.contains("STATUS: deployed"), "{out}");
    let found = installed_objects(&cluster).await;
    assert_eq!(found.len(), INSTALLED.len(), "{found:?}");
    for crd in [
        "applications",
        "applicationsets",
        "repositories",
        "clusters",
        "policysets",
    ] {
        let kept = cluster
            .kubectl_ok(&[
                "get",
                "crd",
                &format!("{crd}.capstan.dev"),
                "-o",
                "jsonpath={.metadata.annotations.helm\\.sh/resource-policy}",
            ])
            .await;
        assert_eq!(kept, "keep", "{crd}");
    }

    let installed = deployment(&cluster).await;
    let container = &installed["spec"]["template"]["spec"]["containers"][0];
    let webhook_arg = format!("--webhook-addr=0.0.0.0:{webhook_port}");
    assert!(
        container["args"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|a| a == &webhook_arg),
        "{container}"
    );
    assert!(
        container["ports"].to_string().contains(&webhook_port.to_string()),
        "{container}"
    );
    let cache = tempfile::tempdir().expect("tempdir");
    let mut operator = run_as_installed(&cluster, &installed, cache.path()).await;
    let apps = cluster.with_namespace("apps").await;
    // A tenant namespace: its Applications write as its `capstan-deployer`, which the installed operator
    // impersonates with the chart's rule.
    cluster.apply(&capstan_e2e::capstan::admin_deployer(&apps), &[]).await;
    let repo = GitRepo::start("install").await;
    repo.write(
        "app/settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"1\"}\n",
    );
    repo.commit("one ConfigMap").await;
    let app = application(&apps, "settings", &repo.url(), "app", &apps, automated(true, false));
    cluster.apply(&capstan_e2e::fixtures::to_yaml(&[app]), &[]).await;
    let client = cluster.client().await;
    wait_until("the Application is Synced and Healthy", APP_TIMEOUT, POLL, || async {
        get_object(&client, &apps, "Application", "settings")
            .await
            .is_some_and(|a| synced_healthy(&a))
    })
    .await;
    operator.terminate().await;

    let mut upgrade = vec!["upgrade", RELEASE, chart.as_str(), "-n", OPERATOR_NAMESPACE];
    upgrade.extend(on);
    upgrade.extend([
        "--set=replicas=3",
        "--set=logFormat=text",
        "--set=sharding.enabled=true",
    ]);
    helm_ok(&cluster, &upgrade).await;
    let upgraded = deployment(&cluster).await;
    assert_eq!(upgraded["spec"]["replicas"], 3);
    let args = upgraded["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--log-format=text"), "{args}");
    assert!(
        args.contains("--shard-count=3"),
        "one shard per replica by default: {args}"
    );

    helm_ok(&cluster, &["rollback", RELEASE, "1", "-n", OPERATOR_NAMESPACE]).await;
    let rolled_back = deployment(&cluster).await;
    assert_eq!(rolled_back["spec"]["template"], installed["spec"]["template"]);
    assert_eq!(rolled_back["spec"]["replicas"], installed["spec"]["replicas"]);

    helm_ok(&cluster, &["uninstall", RELEASE, "-n", OPERATOR_NAMESPACE]).await;
    let left = installed_objects(&cluster).await;
    assert!(left.is_empty(), "left after uninstall: {left:?}");
    cluster.kubectl_ok(&["get", "crd", "applications.capstan.dev"]).await;
    cluster
        .kubectl_ok(&["get", "application", "settings", "-n", &apps])
        .await;
    cluster.kubectl_ok(&["get", "configmap", "settings", "-n", &apps]).await;
}

/// `helm lint --strict` is clean, and a values file with a wrong type or an unknown top-level key is
/// refused by the schema, naming the key.
#[tokio::test]
async fn chart_lints_strict_and_its_schema_names_bad_values() {
    let cluster = TestCluster::start();
    let chart = workspace_root().join("charts/capstan").display().to_string();
    let lint = helm_ok(&cluster, &["lint", &chart, "--strict"]).await;
    assert!(lint.contains("0 chart(s) failed"), "{lint}");
    let dir = tempfile::tempdir().expect("tempdir");
    for (values, key) in [
        ("replicas: two\n", "/replicas"),
        ("metrics: {port: \"8080x\"}\n", "/metrics/port"),
        ("cache: {medium: Disk}\n", "/cache/medium"),
        ("leaderElection: {enabled: \"yes\"}\n", "/leaderElection/enabled"),
        ("sharding: {enabled: true, shardCount: 65}\n", "/sharding/shardCount"),
        ("replica: 2\n", "'replica'"),
    ] {
        let file = dir.path().join("values.yaml");
        std::fs::write(&file, values).expect("values");
        let file = file.display().to_string();
        let refused = helm(&cluster, &["template", RELEASE, &chart, "-f", &file])
            .await
            .expect_err(values);
        assert!(refused.contains(key), "{values}: {refused}");
        let refused = helm(&cluster, &["lint", &chart, "--strict", "-f", &file])
            .await
            .expect_err(values);
        assert!(refused.contains(key), "{values}: {refused}");
    }
    // One shard is no sharding: the chart refuses to render it rather than run with sharding silently
    // off (at render only: `helm lint` reports a template's `fail` as information).
    let file = dir.path().join("one-shard.yaml");
    std::fs::write(&file, "replicas: 1\nsharding: {enabled: true}\n").expect("values");
    let file = file.display().to_string();
    let refused = helm(&cluster, &["template", RELEASE, &chart, "-f", &file])
        .await
        .expect_err("one shard");
    assert!(refused.contains("sharding.enabled needs 2 or more shards"), "{refused}");
}

/// Helm's own labels, which only the chart's rendering carries.
const HELM_LABELS: [&str; 3] = [
    "helm.sh/chart",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/version",
];

/// Numbers as floats: kustomize writes a CRD's `minimum: 1.0` back as `1`, the same number.
fn numbers_as_floats(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Number(n) => *v = serde_json::json!(n.as_f64()),
        serde_json::Value::Array(items) => items.iter_mut().for_each(numbers_as_floats),
        serde_json::Value::Object(map) => map.values_mut().for_each(numbers_as_floats),
        _ => {}
    }
}

/// Objects of a YAML stream by `kind namespace/name`, Helm's labels removed.
fn by_identity(stream: &str) -> std::collections::BTreeMap<String, serde_json::Value> {
    stream
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<serde_json::Value>(doc).ok())
        .filter(|v| v.is_object())
        .map(|mut v| {
            numbers_as_floats(&mut v);
            if let Some(labels) = v["metadata"]["labels"].as_object_mut() {
                for label in HELM_LABELS {
                    labels.remove(label);
                }
            }
            let id = format!(
                "{} {}/{}",
                v["kind"].as_str().unwrap_or_default(),
                v["metadata"]["namespace"].as_str().unwrap_or_default(),
                v["metadata"]["name"].as_str().unwrap_or_default()
            );
            (id, v)
        })
        .collect()
}

/// `kubectl kustomize config/default` builds the chart's default objects (CRDs, RBAC, Deployment,
/// Service, PodDisruptionBudget) object by object, plus the namespace the chart leaves to Helm.
#[tokio::test]
async fn kustomize_default_builds_what_the_chart_renders_by_default() {
    let root = workspace_root();
    let chart = output(
        Command::new(root.join("e2e/tools/helm"))
            .args(["template", RELEASE])
            .arg(root.join("charts/capstan"))
            .args(["--namespace", OPERATOR_NAMESPACE, "--include-crds"]),
        "helm template",
    )
    .await;
    let cluster = TestCluster::start();
    let config = root.join("config/default");
    let kustomized = cluster
        .kubectl_ok(&["kustomize", config.to_str().expect("utf-8 path")])
        .await;
    let chart = by_identity(&chart);
    let mut kustomized = by_identity(&kustomized);
    assert!(
        kustomized.remove(&format!("Namespace /{OPERATOR_NAMESPACE}")).is_some(),
        "config/default creates the namespace"
    );
    assert_eq!(
        chart.keys().collect::<Vec<_>>(),
        kustomized.keys().collect::<Vec<_>>(),
        "the same objects"
    );
    for (id, object) in &chart {
        assert_eq!(
            Some(object),
            kustomized.get(id),
            "{id} differs between the chart and config/default"
        );
    }
}

/// The chart's alerts (`charts/capstan/files/alerts.yaml`, the PrometheusRule's spec) pass Prometheus's
/// own checker and their unit tests: each fires on the series that should trigger it and stays silent
/// on a healthy installation (e2e/fixtures/install/alerts_test.yaml).
#[tokio::test]
async fn alerts_pass_promtool_unit_tests() {
    let root = workspace_root();
    let check = output(
        Command::new("promtool")
            .args(["check", "rules"])
            .arg(root.join("charts/capstan/files/alerts.yaml")),
        "promtool check rules (Debian package prometheus; .ci/run installs it)",
    )
    .await;
    assert!(check.contains("SUCCESS: 7 rules found"), "{check}");
    let tests = output(
        Command::new("promtool")
            .args(["test", "rules"])
            .arg(root.join("e2e/fixtures/install/alerts_test.yaml")),
        "promtool test rules",
    )
    .await;
    assert!(tests.contains("SUCCESS"), "{tests}");
}

// ---------------------------------------------------------------------------------------------
// A namespaced install: Roles in the watched namespaces only, and an operator that stays inside them.

/// Whether a request of the operator stays inside `watched`: a namespaced path in one of them, discovery
/// (`/api`, `/apis/<group>[/<version>]`, `/version`, `/openapi/...`), or the SelfSubjectAccessReview that
/// checks the Lease rights at start (a question about the operator itself, allowed to every user).
fn inside(path: &str, watched: &[&str]) -> bool {
    let segments: Vec<&str> = path.trim_matches('/').split('/').collect();
    let namespaced = match segments.as_slice() {
        ["api", _, "namespaces", ns, _, ..] | ["apis", _, _, "namespaces", ns, _, ..] => Some(*ns),
        _ => None,
    };
    if let Some(ns) = namespaced {
        return watched.contains(&ns);
    }
    matches!(
        segments.as_slice(),
        ["api"]
            | ["api", _]
            | ["apis"]
            | ["apis", _]
            | ["apis", _, _]
            | ["version"]
            | ["openapi", ..]
            | ["apis", "authorization.k8s.io", _, "selfsubjectaccessreviews"]
    )
}

/// `rbac.scope=namespace, watchNamespaces=[team-a]`: no ClusterRole or ClusterRoleBinding for the
/// operator; the installed operator (its pod's args, its token) starts without any cluster-wide right,
/// syncs an Application in team-a, refuses a team-a Application deploying to team-b with a clear
/// error, leaves an Application in team-b alone, and sends no request outside its namespaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn helm_namespaced_install_stays_in_its_namespaces() {
    let cluster = TestCluster::start();
    for ns in [OPERATOR_NAMESPACE, "team-a", "team-b"] {
        cluster.kubectl_ok(&["create", "namespace", ns]).await;
    }
    let chart = workspace_root().join("charts/capstan").display().to_string();
    let install = [
        "install",
        RELEASE,
        chart.as_str(),
        "-n",
        OPERATOR_NAMESPACE,
        "--set=rbac.scope=namespace",
        "--set-json=watchNamespaces=[\"team-a\"]",
    ];
    let out = helm_ok(&cluster, &install).await;
    assert!(out.contains("STATUS: deployed"), "{out}");
    for (kind, name) in [
        ("clusterrole", RELEASE),
        ("clusterrolebinding", RELEASE),
        ("clusterrole", "capstan-deploy"),
        ("clusterrolebinding", "capstan-deploy"),
    ] {
        let found = cluster
            .kubectl_ok(&["get", kind, name, "--ignore-not-found", "-o", "name"])
            .await;
        assert!(found.trim().is_empty(), "a namespaced install made {found}");
    }
    for ns in [OPERATOR_NAMESPACE, "team-a"] {
        cluster.kubectl_ok(&["get", "role", RELEASE, "-n", ns]).await;
        cluster.kubectl_ok(&["get", "rolebinding", RELEASE, "-n", ns]).await;
    }
    let none = cluster
        .kubectl_ok(&["get", "role,rolebinding", "-n", "team-b", "-o", "name"])
        .await;
    assert!(none.trim().is_empty(), "{none}");

    let installed = deployment(&cluster).await;
    let args = installed["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(args.contains("--watch-namespaces=team-a,capstan-system"), "{args}");
    cluster.dev().clear_request_log();
    let cache = tempfile::tempdir().expect("tempdir");
    let mut operator = run_as_installed(&cluster, &installed, cache.path()).await;

    for ns in ["team-a", "team-b"] {
        cluster.apply(&capstan_e2e::capstan::admin_deployer(ns), &[]).await;
    }
    let repo = GitRepo::start("namespaced").await;
    repo.write(
        "app/settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: \"1\"}\n",
    );
    repo.commit("one ConfigMap").await;
    let apps = [
        application(
            "team-b",
            "ignored",
            &repo.url(),
            "app",
            "team-b",
            automated(true, false),
        ),
        application(
            "team-a",
            "outside",
            &repo.url(),
            "app",
            "team-b",
            automated(true, false),
        ),
        application(
            "team-a",
            "settings",
            &repo.url(),
            "app",
            "team-a",
            automated(true, false),
        ),
    ];
    cluster.apply(&capstan_e2e::fixtures::to_yaml(&apps), &[]).await;
    let client = cluster.client().await;
    wait_until(
        "team-a's Application is Synced and Healthy",
        APP_TIMEOUT,
        POLL,
        || async {
            get_object(&client, "team-a", "Application", "settings")
                .await
                .is_some_and(|a| synced_healthy(&a))
        },
    )
    .await;
    wait_until(
        "the Application deploying outside is refused",
        APP_TIMEOUT,
        POLL,
        || async {
            get_object(&client, "team-a", "Application", "outside")
                .await
                .is_some_and(|a| {
                    a["status"]["conditions"].as_array().into_iter().flatten().any(|c| {
                        c["message"].as_str().is_some_and(|m| {
                            m.contains("namespace \"team-b\" is not watched by this namespaced installation")
                        })
                    })
                })
        },
    )
    .await;
    let ignored = get_object(&client, "team-b", "Application", "ignored")
        .await
        .expect("team-b's Application");
    assert!(ignored.get("status").is_none_or(|s| s.is_null()), "{ignored}");
    cluster
        .kubectl_ok(&["get", "configmap", "settings", "-n", "team-a"])
        .await;
    let stray = cluster
        .kubectl_ok(&[
            "get",
            "configmap",
            "settings",
            "-n",
            "team-b",
            "--ignore-not-found",
            "-o",
            "name",
        ])
        .await;
    assert!(stray.trim().is_empty(), "{stray}");
    operator.terminate().await;

    let user = format!("system:serviceaccount:{OPERATOR_NAMESPACE}:{RELEASE}");
    let log = cluster.requests();
    let outside: Vec<_> = log
        .iter()
        .filter(|r| r.user == user && !inside(&r.path, &["team-a", OPERATOR_NAMESPACE]))
        .cloned()
        .collect();
    assert!(
        log.iter().any(|r| r.user == user),
        "the operator's requests are in the log"
    );
    assert!(
        outside.is_empty(),
        "requests outside the watched namespaces:\n{}",
        capstan_e2e::requests::format_log(&outside)
    );
}

#[test]
fn inside_the_watched_namespaces() {
    let watched = ["team-a"];
    for ok in [
        "/api/v1/namespaces/team-a/configmaps",
        "/apis/capstan.dev/v1alpha1/namespaces/team-a/applications/x/status",
        "/api",
        "/apis/apps/v1",
        "/version",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    ] {
        assert!(inside(ok, &watched), "{ok}");
    }
    for outside in [
        "/api/v1/namespaces/team-b/configmaps",
        "/api/v1/configmaps",
        "/api/v1/namespaces/team-a",
        "/apis/capstan.dev/v1alpha1/applications",
        "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    ] {
        assert!(!inside(outside, &watched), "{outside}");
    }
}
