//! The Helm chart as a platform team installs it: `helm template --include-crds` (the real Helm engine behind
//! `e2e/tools/helm`) applied with the real kubectl; the CRDs are served, the operator runs under its own
//! ServiceAccount, and every flag the chart passes is one `capstan run` accepts.

use std::process::Stdio;

use capstan_e2e::capstan::{workspace_root, OPERATOR_NAMESPACE};
use capstan_e2e::chart::{self, find};
use capstan_e2e::process::workspace_binary;
use capstan_e2e::{within, TestCluster, TIMEOUT};
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
