//! `capstan bootstrap` end to end: a devcluster, an empty repository, the real binary.
//!
//! There is no container runtime, so this test plays kubelet: once bootstrap has applied the
//! operator's Deployment, the test reads the *applied* Deployment's args and runs `capstan run`
//! with them (through the harness's `Operator`, which only adds its own loopback metrics address,
//! the controllers it needs and the devcluster kubeconfig). A test that changes the pod template
//! restarts that process the same way.

use std::path::Path;
use std::process::Output;

use capstan_e2e::capstan::{get_object, text, Operator, OperatorOptions, APP_TIMEOUT, OPERATOR_NAMESPACE};
use capstan_e2e::process::workspace_binary;
use capstan_e2e::{wait_for, TestCluster, POLL};
use serde_json::Value;
use tokio::process::Command;

fn git(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(url.trim_start_matches("file://"))
        .args(args)
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// An empty bare repository and its `file://` URL.
fn empty_repo(dir: &Path) -> String {
    let url = format!("file://{}", dir.join("fleet.git").display());
    git(&url, &["init", "--bare", "-q"]);
    url
}

fn bootstrap_at(cluster: &TestCluster, url: &str, path: &str, extra: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_binary("capstan"));
    cmd.args([
        "bootstrap",
        "--url",
        url,
        "--path",
        path,
        "--image",
        "capstan:e2e",
        "--timeout",
        "150s",
    ])
    .arg("--kubeconfig")
    .arg(cluster.kubeconfig_path())
    .args(extra)
    .kill_on_drop(true);
    cmd
}

fn bootstrap_cmd(cluster: &TestCluster, url: &str, extra: &[&str]) -> Command {
    bootstrap_at(cluster, url, "clusters/dev", extra)
}

async fn bootstrap(cluster: &TestCluster, url: &str, extra: &[&str]) -> Output {
    bootstrap_cmd(cluster, url, extra)
        .output()
        .await
        .expect("capstan bootstrap runs")
}

fn show(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The harness as kubelet: `capstan run` with the applied Deployment's args.
async fn run_deployment(cluster: &TestCluster) -> Operator {
    let client = cluster.client().await;
    let deploy = wait_for("bootstrap applies the Deployment", APP_TIMEOUT, POLL, || {
        let client = client.clone();
        async move { get_object(&client, OPERATOR_NAMESPACE, "Deployment", "capstan").await }
    })
    .await;
    let args: Vec<String> = deploy
        .pointer("/spec/template/spec/containers/0/args")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    // `run`, the flags the harness sets itself (namespace, metrics address, log format) and the pod's
    // emptyDir cache path (the harness's default cache lives in a temporary directory) are left out.
    const LOCAL: [&str; 4] = ["--namespace", "--metrics-addr", "--log-format", "--cache-dir"];
    let extra = args
        .into_iter()
        .filter(|a| a != "run" && !LOCAL.iter().any(|flag| a.starts_with(flag)))
        .collect();
    let options = OperatorOptions {
        controllers: "application,cluster,repository".into(),
        extra_args: extra,
        reconcile_interval: "5s".into(),
        ..OperatorOptions::default()
    };
    Operator::start(cluster.kubeconfig_path(), options).await
}

fn commits(url: &str) -> Vec<String> {
    git(url, &["rev-list", "refs/heads/main"])
        .lines()
        .map(str::to_string)
        .collect()
}

fn files(url: &str) -> Vec<String> {
    git(url, &["ls-tree", "-r", "--name-only", "refs/heads/main"])
        .lines()
        .map(str::to_string)
        .collect()
}

/// T1 fresh bootstrap, T2 rerun, T6 dry run, T7 another path.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_installs_capstan_which_then_manages_itself() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().expect("tmp");
    let url = empty_repo(dir.path());

    // T1: one commit with exactly the documented tree; the operator takes over.
    let child = bootstrap_cmd(&cluster, &url, &[]).output();
    let child = tokio::spawn(child);
    let mut operator = run_deployment(&cluster).await;
    let out = child.await.expect("joins").expect("runs");
    assert!(out.status.success(), "{}\n{}", show(&out), operator.log_tail(40));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(stdout.contains("bootstrapped: Synced and Healthy at"), "{stdout}");
    let history = commits(&url);
    assert_eq!(history.len(), 1, "one commit");
    assert_eq!(
        files(&url),
        [
            "clusters/dev/apps/README.md",
            "clusters/dev/capstan-system/bootstrap.yaml",
            "clusters/dev/capstan-system/capstan-components.yaml",
            "clusters/dev/capstan-system/capstan-sync.yaml",
            "clusters/dev/capstan-system/kustomization.yaml",
        ]
    );
    let client = cluster.client().await;
    let app = get_object(&client, OPERATOR_NAMESPACE, "Application", "capstan-system")
        .await
        .expect("the self app");
    assert_eq!(text(&app, "/status/sync/status"), "Synced");
    assert_eq!(text(&app, "/status/sync/revision"), history[0]);
    let deploy = get_object(&client, OPERATOR_NAMESPACE, "Deployment", "capstan")
        .await
        .expect("the Deployment");
    let managers: Vec<&str> = deploy
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|m| m.iter().filter_map(|f| f["manager"].as_str()).collect())
        .unwrap_or_default();
    assert!(
        managers.contains(&"capstan"),
        "the operator manages its own Deployment: {managers:?}"
    );
    assert!(
        text(&deploy, "/metadata/annotations/capstan.dev~1tracking-id").starts_with("capstan-system/capstan-system:"),
        "tracked by the self Application"
    );

    // T2: a rerun changes nothing: no commit and no write request.
    operator.kill().await;
    let before = cluster.requests().len();
    let out = bootstrap(&cluster, &url, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("up to date, Synced at"),
        "{}",
        show(&out)
    );
    assert_eq!(commits(&url).len(), 1, "no commit");
    let writes: Vec<String> = cluster.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET")
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(writes.is_empty(), "a rerun writes nothing: {writes:?}");

    // T6: a dry run with a password shows both plans, writes nothing, prints no secret.
    let before = cluster.requests().len();
    let out = bootstrap_cmd(
        &cluster,
        &url,
        &[
            "--dry-run",
            "--values",
            "/dev/null",
            "--username",
            "u",
            "--password-env",
            "E2E_PW",
        ],
    )
    .env("E2E_PW", "s3cr3t-pa55")
    .output()
    .await
    .expect("runs");
    assert!(out.status.success(), "{}", show(&out));
    let printed = show(&out);
    assert!(!printed.contains("s3cr3t-pa55"), "the password is never printed");
    assert!(
        printed.contains("cluster: create /Secret:capstan-system/capstan-system-git (data <redacted>)"),
        "{printed}"
    );
    assert!(
        printed.contains("cluster: unchanged apps/Deployment:capstan-system/capstan"),
        "{printed}"
    );
    let writes: Vec<String> = cluster.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET" && !r.query.contains("dryRun"))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect();
    assert!(writes.is_empty(), "a dry run writes nothing: {writes:?}");
    assert_eq!(commits(&url).len(), 1, "no commit");

    // T7: another path than the live self Application is refused; nothing is pushed.
    let out = bootstrap_at(&cluster, &url, "clusters/other", &[])
        .output()
        .await
        .expect("runs");
    assert!(!out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--force"),
        "{}",
        show(&out)
    );
    assert_eq!(commits(&url).len(), 1, "nothing pushed");
}
