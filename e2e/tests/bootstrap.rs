//! `capstan bootstrap` and `capstan uninstall` end to end: a devcluster, an empty repository, the
//! real binary.
//!
//! There is no container runtime, so these tests play kubelet (`capstan_e2e::kubelet::Kubelet`):
//! once bootstrap has applied the operator's Deployment, the harness reads the *applied*
//! Deployment's container args and env and runs `capstan run` with them, authenticated with a token
//! of the Deployment's ServiceAccount; when the pod template changes (a commit the operator applied
//! to itself) it restarts the process with the new template, and when the Deployment is deleted
//! (uninstall) it stops it. Only the metrics address and the emptyDir cache path are the harness's.

use std::path::Path;
use std::process::Output;

use capstan_e2e::capstan::{get_object, text, APP_TIMEOUT, OPERATOR_NAMESPACE};
use capstan_e2e::kubelet::Kubelet;
use capstan_e2e::process::workspace_binary;
use capstan_e2e::{wait_for, wait_until, TestCluster, POLL};
use devcluster::RequestRecord;
use serde_json::Value;
use tokio::process::Command;

/// `git --git-dir <the bare repository at url> args…` (the project's one git runner).
fn git(url: &str, args: &[&str]) -> String {
    let bare = Path::new(url.trim_start_matches("file://"));
    let dir = bare.to_str().expect("utf-8");
    let argv: Vec<&str> = ["--git-dir", dir].into_iter().chain(args.iter().copied()).collect();
    capstan_e2e::git::git(bare.parent().expect("a parent folder"), &argv)
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
    // A local repository is only served in the operator namespace, and only by an operator run with the flag.
    if url.starts_with("file://") {
        cmd.arg("--allow-local-repositories");
    }
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

/// A devcluster playing kubelet for the operator's Deployment (see the module doc).
async fn kubelet(cluster: &TestCluster) -> Kubelet {
    Kubelet::start(cluster, OPERATOR_NAMESPACE, "capstan").await
}

/// Runs a bootstrap command while `kubelet` runs what it installs; asserts success, returns the output.
async fn bootstrapped(kubelet: &Kubelet, mut cmd: Command) -> String {
    let out = cmd.output().await.expect("capstan bootstrap runs");
    assert!(out.status.success(), "{}\n{}", show(&out), kubelet.logs(40).await);
    show(&out)
}

/// Every request other than a GET since the `before`-th that `counts`, as `METHOD path?query`.
fn writes_since(cluster: &TestCluster, before: usize, counts: impl Fn(&RequestRecord) -> bool) -> Vec<String> {
    cluster.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET" && counts(r))
        .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
        .collect()
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

    // A local repository needs the explicit flag (which the operator is then installed with).
    let mut unflagged = Command::new(workspace_binary("capstan"));
    unflagged
        .args(["bootstrap", "--url", &url, "--image", "capstan:e2e", "--kubeconfig"])
        .arg(cluster.kubeconfig_path());
    let refused = unflagged.output().await.expect("capstan bootstrap runs");
    assert!(
        !refused.status.success() && String::from_utf8_lossy(&refused.stderr).contains("--allow-local-repositories"),
        "{}",
        show(&refused)
    );

    // T1: one commit with exactly the documented tree; the operator takes over.
    let pod = kubelet(&cluster).await;
    let stdout = bootstrapped(&pod, bootstrap_cmd(&cluster, &url, &[])).await;
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
    assert!(
        deploy["spec"]["template"]["spec"]["containers"][0]["args"]
            .to_string()
            .contains("--allow-local-repositories"),
        "the operator serves its file:// Repository only with the flag"
    );

    // T2: a rerun changes nothing: no commit and no write request (the operator is stopped first).
    pod.stop().await;
    let before = cluster.requests().len();
    let out = bootstrap(&cluster, &url, &[]).await;
    assert!(out.status.success(), "{}", show(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("up to date, Synced at"),
        "{}",
        show(&out)
    );
    assert_eq!(commits(&url).len(), 1, "no commit");
    // Only the CLI's requests (it is the admin): a request of the killed operator (its ServiceAccount)
    // may still have been in flight.
    let writes = writes_since(&cluster, before, |r| !r.user.contains("serviceaccount"));
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
    let writes = writes_since(&cluster, before, |r| !r.query.contains("dryRun"));
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

/// Commits `files` (path, content) to `main` of the bare repository at `url` with the git CLI.
fn commit_files(url: &str, files: &[(&str, &str)], message: &str) -> String {
    let work = tempfile::tempdir().expect("tmp");
    let bare = url.trim_start_matches("file://");
    let run = |args: &[&str]| capstan_e2e::git::git(work.path(), args);
    run(&["clone", "-q", "--branch", "main", bare, "."]);
    for (path, content) in files {
        let file = work.path().join(path);
        std::fs::create_dir_all(file.parent().expect("a folder")).expect("mkdir");
        std::fs::write(file, content).expect("write");
    }
    run(&["add", "-A"]);
    run(&["commit", "-q", "-m", message]);
    run(&["push", "-q", "origin", "HEAD:refs/heads/main"]);
    run(&["rev-parse", "HEAD"])
}

/// A user Application in `apps/` (with a cascade finalizer) deploying ConfigMap `team/web`.
fn user_application(url: &str) -> [(String, String); 2] {
    let app = format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata:\n  name: web\n  namespace: capstan-system\n  \
         finalizers: [capstan.dev/resources]\nspec:\n  project: default\n  source: {{repoURL: \"{url}\", targetRevision: main, \
         path: workloads/web}}\n  destination: {{server: \"https://kubernetes.default.svc\", namespace: team}}\n  \
         syncPolicy: {{automated: {{prune: true, selfHeal: true}}}}\n"
    );
    let cm = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web}\ndata: {greeting: hello}\n".to_string();
    [
        ("clusters/dev/apps/web.yaml".to_string(), app),
        ("workloads/web/configmap.yaml".to_string(), cm),
    ]
}

fn uninstall_cmd(cluster: &TestCluster, extra: &[&str]) -> Command {
    let mut cmd = Command::new(workspace_binary("capstan"));
    cmd.args(["uninstall", "--timeout", "120s"])
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path())
        .args(extra)
        .kill_on_drop(true);
    cmd
}

async fn crds(cluster: &TestCluster) -> Vec<String> {
    let out = cluster.kubectl_ok(&["get", "crd", "-o", "name"]).await;
    out.lines()
        .filter(|l| l.ends_with(".capstan.dev"))
        .map(str::to_string)
        .collect()
}

/// T8 disaster recovery: a new cluster bootstrapped from the same repository with the same flags is
/// restored without a commit (the user's Applications too). T9 uninstall: `--dry-run` writes nothing;
/// then the CRDs and the operator are gone, the user's workload stays; bootstrapping again works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_cluster_is_restored_from_git_and_uninstall_leaves_the_workloads() {
    let dir = tempfile::tempdir().expect("tmp");
    let url = empty_repo(dir.path());
    {
        let lost = TestCluster::start();
        let pod = kubelet(&lost).await;
        bootstrapped(&pod, bootstrap_cmd(&lost, &url, &[])).await;
        pod.stop().await;
    }
    let files = user_application(&url);
    let refs: Vec<(&str, &str)> = files.iter().map(|(p, c)| (p.as_str(), c.as_str())).collect();
    let head = commit_files(&url, &refs, "a user Application");

    // T8: the same flags against a new cluster: no commit, everything back, the user's app included.
    let cluster = TestCluster::start();
    cluster.kubectl_ok(&["create", "namespace", "team"]).await;
    let pod = kubelet(&cluster).await;
    let out = bootstrapped(&pod, bootstrap_cmd(&cluster, &url, &[])).await;
    assert!(out.contains("bootstrapped: Synced and Healthy at"), "{out}");
    assert_eq!(commits(&url)[0], head, "recovery commits nothing");
    let client = cluster.client().await;
    let app = get_object(&client, OPERATOR_NAMESPACE, "Application", "capstan-system")
        .await
        .expect("the self app");
    assert_eq!(text(&app, "/status/sync/revision"), head);
    wait_for("the user's ConfigMap", APP_TIMEOUT, POLL, || {
        let client = client.clone();
        async move { get_object(&client, "team", "ConfigMap", "web").await }
    })
    .await;
    assert_eq!(crds(&cluster).await.len(), 5);

    // T9: the dry run prints the plan and sends only reads.
    let before = cluster.requests().len();
    let out = uninstall_cmd(&cluster, &["--dry-run"]).output().await.expect("runs");
    assert!(out.status.success(), "{}", show(&out));
    let plan = show(&out);
    for line in [
        "remove finalizers capstan.dev/resources from Application capstan-system/web",
        "delete Deployment capstan-system/capstan",
        "delete CustomResourceDefinition applications.capstan.dev",
        "delete Namespace capstan-system",
    ] {
        assert!(plan.contains(line), "{line}: {plan}");
    }
    // The operator (as its ServiceAccount) goes on writing status meanwhile; the CLI is the admin.
    let writes = writes_since(&cluster, before, |r| !r.user.contains("serviceaccount"));
    assert!(writes.is_empty(), "a dry run writes nothing: {writes:?}");
    assert_eq!(crds(&cluster).await.len(), 5);

    // Without --yes and without a terminal it refuses.
    let out = uninstall_cmd(&cluster, &[]).output().await.expect("runs");
    assert!(!out.status.success() && show(&out).contains("--yes"), "{}", show(&out));

    let out = uninstall_cmd(&cluster, &["--yes"]).output().await.expect("runs");
    assert!(out.status.success(), "{}\n{}", show(&out), pod.logs(40).await);
    assert!(crds(&cluster).await.is_empty(), "the CRDs are gone");
    assert!(get_object(&client, OPERATOR_NAMESPACE, "Deployment", "capstan")
        .await
        .is_none());
    let kept = get_object(&client, "team", "ConfigMap", "web").await;
    assert_eq!(
        kept.as_ref().map(|c| text(c, "/data/greeting")),
        Some("hello"),
        "the workload stays"
    );
    wait_until(
        "the kubelet stops the deleted Deployment's pod",
        APP_TIMEOUT,
        POLL,
        || async { !pod.running().await },
    )
    .await;

    // Bootstrapping again works and commits nothing.
    let out = bootstrapped(&pod, bootstrap_cmd(&cluster, &url, &[])).await;
    assert!(out.contains("Synced and Healthy at"), "{out}");
    assert_eq!(commits(&url)[0], head);
    assert_eq!(crds(&cluster).await.len(), 5);
    pod.stop().await;
}

/// T10: bootstrap over HTTPS (a test CA) with basic auth: the push goes through the same transport
/// as the operator's fetches, the operator fetches with the Secret bootstrap made, and the password
/// is in no object of the repository (every blob of every revision), no output and no log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bootstrap_over_https_keeps_the_password_out_of_git_output_and_logs() {
    const PASSWORD: &str = "E2E-https-pa55-7f3c";
    let dir = tempfile::tempdir().expect("tmp");
    let srv = dir.path().join("srv");
    std::fs::create_dir_all(&srv).expect("srv");
    let bare = format!("file://{}", srv.join("fleet.git").display());
    git(&bare, &["init", "--bare", "-q"]);
    let pki = capstan_e2e::git::test_pki("capstan-e2e-ca");
    let server = capstan_e2e::git::https_server(&srv, "fleet", PASSWORD, &pki);
    let url = format!("https://127.0.0.1:{}/fleet.git", server.port);
    let ca = pki.ca.display().to_string();

    let cluster = TestCluster::start();
    let pod = kubelet(&cluster).await;
    let mut cmd = bootstrap_cmd(
        &cluster,
        &url,
        &[
            "--username",
            "fleet",
            "--password-env",
            "E2E_GIT_PASSWORD",
            "--ca-file",
            &ca,
        ],
    );
    cmd.env("E2E_GIT_PASSWORD", PASSWORD);
    let out = bootstrapped(&pod, cmd).await;
    assert!(out.contains("bootstrapped: Synced and Healthy at"), "{out}");
    assert!(!out.contains(PASSWORD), "the password is never printed");
    assert_eq!(commits(&bare).len(), 1);

    let objects = std::process::Command::new("git")
        .arg("--git-dir")
        .arg(srv.join("fleet.git"))
        .args(["cat-file", "--batch-all-objects", "--batch"])
        .output()
        .expect("git cat-file runs");
    assert!(objects.status.success());
    let every_object = String::from_utf8_lossy(&objects.stdout);
    assert!(
        every_object.contains("capstan-system-git"),
        "the Repository names the Secret"
    );
    assert!(
        !every_object.contains(PASSWORD),
        "the password is in no object of the repository"
    );
    let logs = pod.logs(usize::MAX).await;
    assert!(logs.contains("=== capstan run #1"), "the operator ran: {logs}");
    assert!(!logs.contains(PASSWORD), "the password is in no log line");
    pod.stop().await;
}

/// The committed components file with the Deployment's image set to `image` and a printer column
/// added to the Application CRD: what a newer `capstan bootstrap --export` would write.
fn newer_components(url: &str, image: &str) -> String {
    let path = "main:clusters/dev/capstan-system/capstan-components.yaml";
    let text = git(url, &["show", path]);
    let header: String = text
        .lines()
        .take_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut docs: Vec<Value> = serde_saphyr::from_multiple(&text).expect("the components parse");
    for doc in &mut docs {
        match (text_of(doc, "/kind"), text_of(doc, "/metadata/name")) {
            ("Deployment", "capstan") => doc["spec"]["template"]["spec"]["containers"][0]["image"] = image.into(),
            ("CustomResourceDefinition", "applications.capstan.dev") => {
                for version in doc["spec"]["versions"].as_array_mut().expect("versions") {
                    let columns = version["additionalPrinterColumns"].as_array_mut().expect("columns");
                    columns.push(serde_json::json!({"name": "Project", "type": "string", "jsonPath": ".spec.project"}));
                }
            }
            _ => {}
        }
    }
    header + &capstan_e2e::fixtures::to_yaml(&docs)
}

fn text_of<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// T3 configuration by commit: a patch in `kustomization.yaml` changes the Deployment, and the
/// restarted operator runs with the new flag. T4 upgrade by commit: a new CRD printer column and a new
/// image in one commit; the operator applies the CRD before its own Deployment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_and_upgrades_are_commits_the_operator_applies_to_itself() {
    let cluster = TestCluster::start();
    let dir = tempfile::tempdir().expect("tmp");
    let url = empty_repo(dir.path());
    let pod = kubelet(&cluster).await;
    // The Repository polls every 2s, so a commit reaches the operator quickly.
    bootstrapped(&pod, bootstrap_cmd(&cluster, &url, &["--interval", "2s"])).await;
    let client = cluster.client().await;

    // T3
    let kustomization = "resources:\n  - capstan-components.yaml\n  - capstan-sync.yaml\npatches:\n  \
        - target: {kind: Deployment, name: capstan}\n    patch: |-\n      - op: add\n        \
        path: /spec/template/spec/containers/0/args/-\n        value: --reconcile-interval=30s\n";
    let t3 = commit_files(
        &url,
        &[("clusters/dev/capstan-system/kustomization.yaml", kustomization)],
        "reconcile every 30s",
    );
    let flag = "--reconcile-interval=30s";
    wait_until(
        "the restarted operator runs with the new flag",
        APP_TIMEOUT,
        POLL,
        || async {
            pod.starts()
                .await
                .last()
                .is_some_and(|args| args.iter().any(|a| a == flag))
        },
    )
    .await;
    let deploy = get_object(&client, OPERATOR_NAMESPACE, "Deployment", "capstan")
        .await
        .expect("the Deployment");
    let args = deploy
        .pointer("/spec/template/spec/containers/0/args")
        .expect("args")
        .to_string();
    assert!(args.contains(flag), "{args}");
    // The pod that applied T3 is replaced mid-sync, and its successor finishes that sync: wait for it,
    // so the writes counted below belong to T4 alone.
    wait_until("the T3 sync finished", APP_TIMEOUT, POLL, || {
        let client = client.clone();
        let t3 = t3.clone();
        async move {
            get_object(&client, OPERATOR_NAMESPACE, "Application", "capstan-system")
                .await
                .is_some_and(|app| {
                    text_of(&app, "/status/operationState/phase") == "Succeeded"
                        && text_of(&app, "/status/operationState/syncResult/revision") == t3
                })
        }
    })
    .await;

    // T4
    let before = cluster.requests().len();
    let components = newer_components(&url, "capstan:e2e-2");
    commit_files(
        &url,
        &[(
            "clusters/dev/capstan-system/capstan-components.yaml",
            components.as_str(),
        )],
        "capstan e2e-2",
    );
    let deploy = wait_for("the new image", APP_TIMEOUT, POLL, || {
        let client = client.clone();
        async move {
            let d = get_object(&client, OPERATOR_NAMESPACE, "Deployment", "capstan").await?;
            (text_of(&d, "/spec/template/spec/containers/0/image") == "capstan:e2e-2").then_some(d)
        }
    })
    .await;
    assert!(deploy
        .pointer("/spec/template/spec/containers/0/args")
        .expect("args")
        .to_string()
        .contains(flag));
    let crd = cluster
        .kubectl_ok(&[
            "get",
            "crd",
            "applications.capstan.dev",
            "-o",
            "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
        ])
        .await;
    assert!(crd.contains("Project"), "{crd}");
    let writes = writes_since(&cluster, before, |r| {
        r.user.contains("serviceaccount") && !r.query.contains("dryRun")
    });
    let at = |suffix: &str| {
        writes
            .iter()
            .position(|w| w.split('?').next().is_some_and(|p| p.ends_with(suffix)))
    };
    let crd_at = at("/customresourcedefinitions/applications.capstan.dev").expect("the operator wrote the CRD");
    let deploy_at = at("/deployments/capstan").expect("the operator wrote the Deployment");
    assert!(crd_at < deploy_at, "the CRD first: {writes:#?}");
    pod.stop().await;
}
