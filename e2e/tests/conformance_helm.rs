//! Conformance of devcluster with the real Helm v4 engine (helm-python-sdk behind `e2e/tools/helm`): the whole
//! lifecycle of Capstan's own chart as a platform team runs it. Helm is a client-go program, so it also
//! exercises what kubectl does not: its release Secrets are written and deleted with protobuf bodies (a
//! protobuf `DeleteOptions` on uninstall), and `--wait` watches with client-go's streaming list
//! (`sendInitialEvents=true` without a `resourceVersion`).

use std::process::Stdio;

use capstan_e2e::capstan::workspace_root;
use capstan_e2e::requests::{format_log, is_watch, query_param};
use capstan_e2e::{within, TestCluster, TIMEOUT};
use serde_json::Value;
use tokio::process::Command;

const RELEASE: &str = "capstan";
const CRDS: [&str; 5] = [
    "applications.capstan.dev",
    "applicationsets.capstan.dev",
    "clusters.capstan.dev",
    "policysets.capstan.dev",
    "repositories.capstan.dev",
];

/// Runs `e2e/tools/helm <args> --kubeconfig <the cluster's>` and returns stdout; panics with stderr on failure.
async fn helm(tc: &TestCluster, args: &[&str]) -> String {
    let tool = workspace_root().join("e2e/tools/helm");
    let what = format!("helm {}", args.join(" "));
    let out = within(
        &what,
        TIMEOUT * 3,
        Command::new(tool)
            .args(args)
            .arg("--kubeconfig")
            .arg(tc.kubeconfig_path())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output(),
    )
    .await
    .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

fn chart() -> String {
    workspace_root().join("charts/capstan").display().to_string()
}

async fn deployment_image(tc: &TestCluster, ns: &str) -> String {
    tc.kubectl_ok(&[
        "get",
        "deployment",
        RELEASE,
        "-n",
        ns,
        "-o",
        "jsonpath={.spec.template.spec.containers[0].image}",
    ])
    .await
}

async fn history(tc: &TestCluster, ns: &str) -> Vec<Value> {
    let out = helm(tc, &["history", RELEASE, "-n", ns, "-o", "json"]).await;
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("helm history -o json: {e}: {out}"))
}

/// The release's objects (name-scoped, so another release's could not be mistaken for them).
async fn release_objects(tc: &TestCluster, ns: &str) -> Vec<String> {
    let mut found = Vec::new();
    for (what, namespaced) in [
        ("deployment", true),
        ("serviceaccount", true),
        ("clusterrole", false),
        ("clusterrolebinding", false),
    ] {
        let mut args = vec!["get", what, RELEASE, "--ignore-not-found", "-o", "name"];
        if namespaced {
            args.extend(["-n", ns]);
        }
        let out = tc.kubectl_ok(&args).await;
        found.extend(out.lines().map(str::to_string));
    }
    found
}

async fn release_secrets(tc: &TestCluster, ns: &str) -> Vec<String> {
    let out = tc
        .kubectl_ok(&[
            "get",
            "secrets",
            "-n",
            ns,
            "-l",
            "owner=helm,name=capstan",
            "-o",
            "name",
        ])
        .await;
    out.lines().map(str::to_string).collect()
}

#[tokio::test]
async fn helm_installs_upgrades_rolls_back_and_uninstalls_the_chart() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("helm").await;
    let chart = chart();

    let installed = helm(
        &tc,
        &["install", RELEASE, &chart, "-n", &ns, "--wait", "--timeout", "2m0s"],
    )
    .await;
    assert!(installed.contains("STATUS: deployed"), "{installed}");
    assert!(installed.contains("REVISION: 1"), "{installed}");
    assert_eq!(
        release_objects(&tc, &ns).await.len(),
        4,
        "{:?}",
        release_objects(&tc, &ns).await
    );
    for crd in CRDS {
        tc.kubectl_ok(&["get", "crd", crd]).await;
    }
    assert_eq!(deployment_image(&tc, &ns).await, "ghcr.io/capstan/capstan:0.1.0");
    assert_eq!(
        release_secrets(&tc, &ns).await,
        [format!("secret/sh.helm.release.v1.{RELEASE}.v1")]
    );
    // `--wait` watched with client-go's streaming list, which names no resourceVersion.
    let log = tc.requests();
    let streaming: Vec<_> = log
        .iter()
        .filter(|r| is_watch(r) && query_param(r, "sendInitialEvents").as_deref() == Some("true"))
        .collect();
    assert!(!streaming.is_empty(), "no streaming list:\n{}", format_log(&log));
    for r in &streaming {
        assert_eq!(r.status, 200, "{}", format_log(&log));
        assert_eq!(query_param(r, "resourceVersionMatch").as_deref(), Some("NotOlderThan"));
    }
    assert!(
        streaming.iter().any(|r| query_param(r, "resourceVersion").is_none()),
        "{}",
        format_log(&log)
    );

    helm(
        &tc,
        &[
            "upgrade",
            RELEASE,
            &chart,
            "-n",
            &ns,
            "--set",
            "image.tag=v2",
            "--set",
            "logFormat=text",
        ],
    )
    .await;
    assert_eq!(deployment_image(&tc, &ns).await, "ghcr.io/capstan/capstan:v2");
    let args = tc
        .kubectl_ok(&[
            "get",
            "deployment",
            RELEASE,
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.template.spec.containers[0].args}",
        ])
        .await;
    assert!(args.contains("--log-format=text"), "{args}");

    helm(&tc, &["rollback", RELEASE, "1", "-n", &ns, "--wait"]).await;
    assert_eq!(deployment_image(&tc, &ns).await, "ghcr.io/capstan/capstan:0.1.0");
    let revisions = history(&tc, &ns).await;
    let statuses: Vec<&str> = revisions.iter().map(|r| r["status"].as_str().unwrap_or("")).collect();
    assert_eq!(statuses, ["superseded", "superseded", "deployed"], "{revisions:?}");
    assert_eq!(revisions[2]["description"], "Rollback to 1", "{revisions:?}");
    let status = helm(&tc, &["status", RELEASE, "-n", &ns]).await;
    assert!(status.contains("REVISION: 3"), "{status}");

    tc.dev().clear_request_log();
    let out = helm(&tc, &["uninstall", RELEASE, "-n", &ns]).await;
    assert!(out.contains(&format!("release \"{RELEASE}\" uninstalled")), "{out}");
    assert!(
        release_objects(&tc, &ns).await.is_empty(),
        "{:?}",
        release_objects(&tc, &ns).await
    );
    assert!(release_secrets(&tc, &ns).await.is_empty());
    // Helm deletes its release Secrets with a protobuf DeleteOptions body.
    let log = tc.requests();
    let secret_deletes: Vec<_> = log
        .iter()
        .filter(|r| r.method == "DELETE" && r.path.contains("/secrets/sh.helm.release.v1."))
        .collect();
    assert_eq!(secret_deletes.len(), 3, "{}", format_log(&log));
    for r in secret_deletes {
        assert_eq!(
            r.content_type,
            "application/vnd.kubernetes.protobuf",
            "{}",
            format_log(&log)
        );
        assert_eq!(r.status, 200, "{}", format_log(&log));
    }
    // Helm never deletes the CRDs of a chart's crds/ directory.
    for crd in CRDS {
        tc.kubectl_ok(&["get", "crd", crd]).await;
    }
    let gone = tc.kubectl_fails(&["get", "deployment", RELEASE, "-n", &ns]).await;
    assert!(gone.stderr.contains("NotFound"), "{}", gone.stderr);
}
