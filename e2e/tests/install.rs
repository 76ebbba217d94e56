//! The Helm chart as a platform team installs it: `helm template --include-crds` (the real Helm engine behind
//! `e2e/tools/helm`) applied with the real kubectl; the CRDs are served, the operator runs under its own
//! ServiceAccount, and every flag the chart passes is one `capstan run` accepts.

use std::process::Stdio;

use capstan_e2e::capstan::{workspace_root, OPERATOR_NAMESPACE};
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
    // Every flag the chart passes is one the binary knows: a typo would crash-loop the Deployment.
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
