//! The Capstan operator under test: the `capstan` binary started against a devcluster, a Git
//! repository served by `git daemon`, and the questions tests ask about Applications and the objects
//! they manage.
//!
//! - [`install_crds`]: Capstan's CRDs (from `crds/`) and the operator namespace;
//! - [`GitRepo`]: a bare repository behind `git daemon --export-all` on a free loopback port, with a
//!   working clone to commit fixture trees and edits; the daemon can be stopped and restarted to make
//!   the repository unreachable;
//! - [`Operator`]: `capstan run` as a child process on free ports, ready once `/readyz` answers 200,
//!   `/metrics` on demand, every line it printed (across restarts) for failure messages, SIGKILL and
//!   SIGTERM;
//! - [`Recorder`]: watches of a namespace's objects, kept in resourceVersion order, so tests assert
//!   the order in which the operator created and changed things and how often it created each one;
//! - [`AppEnv`]: one devcluster + one repository + one operator (as the chart's ServiceAccount, with the
//!   chart's RBAC: see [`crate::chart`]) + one namespace, with bounded waits
//!   on Application status that print the last observation and the operator's log when they time out.
//!
//! Every wait is bounded ([`APP_TIMEOUT`] at most); the deadlines are upper bounds for a loaded
//! machine, not timings.
//!
//! Debugging: `CAPSTAN_E2E_ECHO=1` echoes the operator's output as it arrives, and
//! `CAPSTAN_E2E_RUST_LOG` sets its `RUST_LOG` (default `info`). Timeouts print the last observed
//! Application status and the tail of the operator's log.

use std::{
    collections::BTreeSet,
    fmt::Write as _,
    future::Future,
    net::SocketAddr,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use futures::StreamExt;
use kube::{
    api::{Api, DynamicObject, Patch, PatchParams},
    core::{ApiResource, GroupVersionKind},
    runtime::watcher,
    Client,
};
use serde_json::{json, Value};
use tempfile::TempDir;
use tokio::{
    io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader},
    process::{Child, Command},
    task::JoinHandle,
    time::Instant,
};

use crate::{fixtures::to_yaml, kubectl::Kubectl, process::workspace_binary, wait::within, TestCluster};

/// Upper bound for anything the operator does on its own (a sync with waves and delays, a refresh
/// after a commit, a self-heal). Generous on purpose for a loaded 2-core machine.
pub const APP_TIMEOUT: Duration = Duration::from_secs(90);

/// Upper bound for the operator's start (CRD discovery, caches synced).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How often status is polled.
pub const APP_POLL: Duration = Duration::from_millis(250);

/// The operator namespace tests run Capstan with.
pub const OPERATOR_NAMESPACE: &str = "capstan-system";

/// The in-cluster destination (the operator's own cluster).
pub const IN_CLUSTER: &str = "https://kubernetes.default.svc";

/// The workspace root (`/work/main` in CI), found from this crate's manifest directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e/ lives in the workspace")
        .to_path_buf()
}

/// A sample repository tree under `e2e/fixtures/application/`.
pub fn fixture(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/application")
        .join(name);
    assert!(dir.is_dir(), "fixture {} is missing", dir.display());
    dir
}

/// A loopback port nobody listens on right now.
pub use crate::git::free_port;

/// Applies Capstan's CRDs (server-side: they are too large for the last-applied annotation), waits
/// until they are Established, and creates the operator namespace.
pub async fn install_crds(kubectl: &Kubectl) {
    let crds = workspace_root().join("crds");
    let crds = crds.to_str().expect("a UTF-8 path");
    kubectl
        .ok(&["apply", "--server-side", "--field-manager=e2e", "-f", crds])
        .await;
    kubectl
        .ok(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/applications.capstan.dev",
            "crd/clusters.capstan.dev",
            "crd/repositories.capstan.dev",
        ])
        .await;
    let ns = to_yaml(&[json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}})]);
    kubectl.ok_with_stdin(&["apply", "-f", "-"], &ns).await;
}

// ---------------------------------------------------------------------------------------------
// Git

/// A bare repository served over `git://` by `git daemon`, with a working clone for commits.
pub struct GitRepo {
    dir: TempDir,
    name: String,
    port: u16,
    daemon: Option<Child>,
}

impl GitRepo {
    /// Creates `<name>.git` (default branch `main`), an empty working clone, and starts the daemon.
    pub async fn start(name: &str) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-git-")
            .tempdir()
            .expect("a temporary directory");
        let repo = Self {
            dir,
            name: name.to_owned(),
            port: free_port(),
            daemon: None,
        };
        std::fs::create_dir_all(repo.base()).expect("the daemon's base path");
        let bare = repo.bare();
        git(
            &repo.base(),
            &["init", "--bare", "--initial-branch=main", path_str(&bare)],
        )
        .await;
        git(&repo.dir.path().to_path_buf(), &["clone", path_str(&bare), "work"]).await;
        git(&repo.work(), &["checkout", "-B", "main"]).await;
        let mut repo = repo;
        repo.start_daemon().await;
        repo
    }

    fn base(&self) -> PathBuf {
        self.dir.path().join("srv")
    }

    fn bare(&self) -> PathBuf {
        self.base().join(format!("{}.git", self.name))
    }

    /// The working clone; files written here are committed by [`GitRepo::commit`].
    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// `git://127.0.0.1:PORT/<name>.git`.
    pub fn url(&self) -> String {
        format!("git://127.0.0.1:{}/{}.git", self.port, self.name)
    }

    /// `file://` and the bare repository's path: the same repository as a file on the operator's disk
    /// (what a tenant could name to read what the operator can read).
    pub fn file_url(&self) -> String {
        format!("file://{}", self.bare().display())
    }

    /// Copies the fixture tree `fixture` (see [`fixture`]) to `dest` in the working clone.
    pub fn copy_fixture(&self, fixture_name: &str, dest: &str) {
        copy_tree(&fixture(fixture_name), &self.work().join(dest));
    }

    /// Writes `content` to `rel` in the working clone, creating directories.
    pub fn write(&self, rel: &str, content: &str) {
        let path = self.work().join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("the parent directory");
        }
        std::fs::write(&path, content).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    }

    /// Removes the file or directory `rel` from the working clone.
    pub fn remove(&self, rel: &str) {
        let path = self.work().join(rel);
        if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        }
        .unwrap_or_else(|e| panic!("cannot remove {}: {e}", path.display()));
    }

    /// Commits everything in the working clone, pushes `main`, and returns the commit SHA.
    pub async fn commit(&self, message: &str) -> String {
        let work = self.work();
        git(&work, &["add", "-A"]).await;
        git(&work, &["commit", "--allow-empty", "-q", "-m", message]).await;
        git(&work, &["push", "-q", "origin", "HEAD:refs/heads/main"]).await;
        git(&work, &["rev-parse", "HEAD"]).await.trim().to_owned()
    }

    /// Stops the daemon: the repository becomes unreachable (connection refused).
    pub async fn stop_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.start_kill();
            let _ = within("git daemon to exit", Duration::from_secs(10), child.wait()).await;
        }
        wait_port(self.port, false, Duration::from_secs(10)).await;
    }

    /// Starts (or restarts) the daemon on the same port.
    pub async fn start_daemon(&mut self) {
        assert!(self.daemon.is_none(), "the git daemon is already running");
        // git-daemon itself, not `git daemon`: that forks a child a kill would not reach.
        let exec_path = git(&self.base(), &["--exec-path"]).await;
        let mut cmd = Command::new(Path::new(exec_path.trim()).join("git-daemon"));
        cmd.args([
            "--export-all",
            "--reuseaddr",
            "--informative-errors",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={}", self.port))
        .arg(format!("--base-path={}", self.base().display()))
        .arg(self.base())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true);
        self.daemon = Some(cmd.spawn().expect("git daemon starts"));
        wait_port(self.port, true, Duration::from_secs(20)).await;
    }
}

/// Runs `git <args>` in `dir` with a fixed identity and no user configuration; returns stdout.
async fn git(dir: &PathBuf, args: &[&str]) -> String {
    let mut cmd = Command::new("git");
    cmd.args([
        "-c",
        "user.name=Capstan E2E",
        "-c",
        "user.email=e2e@capstan.test",
        "-c",
        "commit.gpgsign=false",
        "-c",
        "init.defaultBranch=main",
    ])
    .args(args)
    .current_dir(dir)
    .env("GIT_CONFIG_NOSYSTEM", "1")
    .env("GIT_CONFIG_GLOBAL", "/dev/null")
    .env("GIT_TERMINAL_PROMPT", "0")
    .stdin(Stdio::null())
    .kill_on_drop(true);
    let what = format!("git {}", args.join(" "));
    let out = within(&what, Duration::from_secs(60), cmd.output())
        .await
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap_or_else(|e| panic!("cannot create {}: {e}", to.display()));
    let entries = std::fs::read_dir(from).unwrap_or_else(|e| panic!("cannot read {}: {e}", from.display()));
    for entry in entries {
        let entry = entry.expect("a directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("a file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target)
                .unwrap_or_else(|e| panic!("cannot copy {}: {e}", entry.path().display()));
        }
    }
}

/// Waits until `port` accepts connections (`open`) or refuses them (`!open`).
async fn wait_port(port: u16, open: bool, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let accepts = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok();
        if accepts == open {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "port {port} did not become {} within {timeout:?}",
            if open { "open" } else { "closed" }
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Operator

/// How to run `capstan run`.
#[derive(Debug, Clone)]
pub struct OperatorOptions {
    /// `--controllers`.
    pub controllers: String,
    /// `--reconcile-interval`.
    pub reconcile_interval: String,
    /// `--sync-wave-delay`, when not the operator's default.
    pub sync_wave_delay: Option<String>,
    /// More arguments after `run`.
    pub extra_args: Vec<String>,
    /// Run exactly these arguments and environment, as a pod of an installed Deployment would (the
    /// fields above are then ignored). Only what a pod has of its own is replaced: the address of
    /// `--metrics-addr` (a free loopback port) and the directory of `--cache-dir` (a temporary one,
    /// the pod's emptyDir).
    pub as_pod: Option<PodCommand>,
}

/// The container command of a Deployment, for [`OperatorOptions::as_pod`].
#[derive(Debug, Clone, Default)]
pub struct PodCommand {
    /// `args` of the container (starting with `run`).
    pub args: Vec<String>,
    /// `env` of the container, `valueFrom` already resolved.
    pub env: Vec<(String, String)>,
    /// The emptyDir mounted at `--cache-dir`.
    pub cache_dir: PathBuf,
}

impl PodCommand {
    /// The args with the pod-local parts replaced (see [`OperatorOptions::as_pod`]).
    fn local_args(&self, metrics_port: u16) -> Vec<String> {
        self.args
            .iter()
            .map(|a| {
                if a.starts_with("--metrics-addr=") {
                    format!("--metrics-addr=127.0.0.1:{metrics_port}")
                } else if a.starts_with("--cache-dir=") {
                    format!("--cache-dir={}", self.cache_dir.display())
                } else {
                    a.clone()
                }
            })
            .collect()
    }
}

impl Default for OperatorOptions {
    fn default() -> Self {
        Self {
            controllers: "application,cluster,repository".into(),
            reconcile_interval: "20s".into(),
            sync_wave_delay: None,
            extra_args: Vec::new(),
            as_pod: None,
        }
    }
}

/// `capstan run` as a child process, restartable; output of every run is kept.
pub struct Operator {
    kubeconfig: PathBuf,
    options: OperatorOptions,
    child: Option<Child>,
    metrics_port: u16,
    log: Arc<Mutex<Vec<String>>>,
    runs: usize,
}

impl Operator {
    /// Starts the operator against the cluster in `kubeconfig` and waits until `/readyz` answers 200.
    pub async fn start(kubeconfig: &Path, options: OperatorOptions) -> Self {
        let mut operator = Self {
            kubeconfig: kubeconfig.to_path_buf(),
            options,
            child: None,
            metrics_port: 0,
            log: Arc::new(Mutex::new(Vec::new())),
            runs: 0,
        };
        operator.spawn().await;
        operator
    }

    async fn spawn(&mut self) {
        assert!(self.child.is_none(), "the operator is already running");
        self.runs += 1;
        self.metrics_port = free_port();
        self.push_log(format!(
            "=== capstan run #{} (metrics on port {}) ===",
            self.runs, self.metrics_port
        ));
        let tools = workspace_root().join("e2e/tools");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path =
            std::env::join_paths(std::iter::once(tools).chain(std::env::split_paths(&path))).expect("PATH joins");
        let mut cmd = Command::new(workspace_binary("capstan"));
        if let Some(pod) = &self.options.as_pod {
            cmd.args(pod.local_args(self.metrics_port))
                .envs(pod.env.iter().map(|(k, v)| (k, v)));
        } else {
            cmd.arg("run")
                .args(["--namespace", OPERATOR_NAMESPACE])
                .args(["--controllers", &self.options.controllers])
                .args(["--metrics-addr", &format!("127.0.0.1:{}", self.metrics_port)])
                .args(["--reconcile-interval", &self.options.reconcile_interval])
                .args(["--log-format", "text"]);
            if let Some(delay) = &self.options.sync_wave_delay {
                cmd.args(["--sync-wave-delay", delay]);
            }
            cmd.args(&self.options.extra_args);
        }
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("PATH", path)
            .env(
                "RUST_LOG",
                std::env::var("CAPSTAN_E2E_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("RUST_BACKTRACE", "1")
            .env_remove("CAPSTAN_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().expect("the capstan binary starts");
        if let Some(out) = child.stdout.take() {
            collect(out, Arc::clone(&self.log));
        }
        if let Some(err) = child.stderr.take() {
            collect(err, Arc::clone(&self.log));
        }
        self.child = Some(child);
        self.wait_ready().await;
    }

    fn push_log(&self, line: String) {
        if let Ok(mut log) = self.log.lock() {
            log.push(line);
        }
    }

    /// Waits until `/readyz` answers 200; fails at once with the output if the process exits.
    pub async fn wait_ready(&mut self) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    // Let the output readers drain.
                    tokio::time::sleep(Duration::from_millis(200)).await;
                    panic!(
                        "capstan run exited with {status} before becoming ready:\n{}",
                        self.logs()
                    );
                }
            }
            if let Some((200, _)) = self.http_get("/readyz").await {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "capstan did not become ready (/readyz 200) within {START_TIMEOUT:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The process id of the running operator.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(Child::id)
    }

    /// `http://127.0.0.1:PORT` of `/metrics`, `/healthz`, `/readyz`.
    pub fn metrics_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.metrics_port))
    }

    /// GET `path` on the metrics address: status and body, or `None` when nothing answers.
    pub async fn http_get(&self, path: &str) -> Option<(u16, String)> {
        http_get(self.metrics_addr(), path).await
    }

    /// The Prometheus text from `/metrics`.
    pub async fn metrics(&self) -> String {
        match self.http_get("/metrics").await {
            Some((200, body)) => body,
            other => panic!("GET /metrics answered {other:?}\n{}", self.log_tail(60)),
        }
    }

    /// SIGKILL: no chance to clean up, as when a node dies. Returns once the process is gone.
    pub async fn kill(&mut self) {
        let mut child = self.child.take().expect("the operator is running");
        child.start_kill().expect("SIGKILL can be sent");
        within("capstan to die after SIGKILL", Duration::from_secs(20), child.wait())
            .await
            .expect("wait for capstan");
        self.push_log("=== killed (SIGKILL) ===".into());
    }

    /// SIGTERM, and a bounded wait for a clean exit; returns whether it exited 0.
    pub async fn terminate(&mut self) -> bool {
        let mut child = self.child.take().expect("the operator is running");
        let pid = child.id().expect("the operator has a pid");
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .expect("kill(1) runs");
        assert!(sent.success(), "SIGTERM could not be delivered to capstan");
        let status = within("capstan to exit after SIGTERM", Duration::from_secs(30), child.wait())
            .await
            .expect("wait for capstan");
        self.push_log(format!("=== terminated: {status} ==="));
        status.success()
    }

    /// Starts the operator again (after [`Operator::kill`] or [`Operator::terminate`]).
    pub async fn restart(&mut self) {
        self.spawn().await;
    }

    /// Everything every run printed so far.
    pub fn logs(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// The last `n` lines of output.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log.lock().map(|l| l.clone()).unwrap_or_default();
        let start = log.len().saturating_sub(n);
        format!(
            "--- operator log (last {} lines) ---\n{}",
            log.len() - start,
            log[start..].join("\n")
        )
    }
}

fn collect(pipe: impl AsyncRead + Unpin + Send + 'static, log: Arc<Mutex<Vec<String>>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if std::env::var_os("CAPSTAN_E2E_ECHO").is_some() {
                eprintln!("[capstan] {line}");
            }
            if let Ok(mut log) = log.lock() {
                log.push(line);
            }
        }
    });
}

/// A minimal HTTP/1.1 GET (`Connection: close`); `None` when the connection fails or times out.
pub async fn http_get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let head = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nAccept: */*\r\n\r\n");
        stream.write_all(head.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        let chunked = head.lines().any(|l| {
            l.to_ascii_lowercase().starts_with("transfer-encoding:") && l.to_ascii_lowercase().contains("chunked")
        });
        let body = if chunked { dechunk(body) } else { body.to_owned() };
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .ok()
        .flatten()
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Objects

/// The API resource for the kinds these tests touch (`ConfigMap`, `Deployment`, `Service`, `Job`,
/// `Pod`, `Secret`, `Namespace`, `Event` (events.k8s.io), `Application`, `ApplicationSet`, `Cluster`,
/// `Repository`, `PolicySet`).
pub fn resource(kind: &str) -> ApiResource {
    let (group, version, plural) = match kind {
        "ConfigMap" => ("", "v1", "configmaps"),
        "Service" => ("", "v1", "services"),
        "Pod" => ("", "v1", "pods"),
        "Secret" => ("", "v1", "secrets"),
        "Namespace" => ("", "v1", "namespaces"),
        "CustomResourceDefinition" => ("apiextensions.k8s.io", "v1", "customresourcedefinitions"),
        "Deployment" => ("apps", "v1", "deployments"),
        "ReplicaSet" => ("apps", "v1", "replicasets"),
        "Job" => ("batch", "v1", "jobs"),
        "Event" => ("events.k8s.io", "v1", "events"),
        "Application" => ("capstan.dev", "v1alpha1", "applications"),
        "ApplicationSet" => ("capstan.dev", "v1alpha1", "applicationsets"),
        "Cluster" => ("capstan.dev", "v1alpha1", "clusters"),
        "Repository" => ("capstan.dev", "v1alpha1", "repositories"),
        "PolicySet" => ("capstan.dev", "v1alpha1", "policysets"),
        other => panic!("no API resource known for kind {other}"),
    };
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// The object `kind`/`name` in `ns` (`""` for cluster-scoped kinds) as JSON, or `None` if it does not exist.
pub async fn get_object(client: &Client, ns: &str, kind: &str, name: &str) -> Option<Value> {
    let api: Api<DynamicObject> = if ns.is_empty() {
        Api::all_with(client.clone(), &resource(kind))
    } else {
        Api::namespaced_with(client.clone(), ns, &resource(kind))
    };
    match api.get_opt(name).await {
        Ok(found) => found.map(|o| serde_json::to_value(o).expect("an object serialises")),
        Err(e) => panic!("GET {kind} {ns}/{name} failed: {e}"),
    }
}

/// Every object of `kind` in `ns`, as JSON.
pub async fn list_objects(client: &Client, ns: &str, kind: &str) -> Vec<Value> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    api.list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("LIST {kind} in {ns} failed: {e}"))
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).expect("an object serialises"))
        .collect()
}

/// The `events.k8s.io/v1` Events in `ns` about `kind`/`name`, as `(type, reason, note)`.
pub async fn events_about(client: &Client, ns: &str, kind: &str, name: &str) -> Vec<(String, String, String)> {
    list_objects(client, ns, "Event")
        .await
        .into_iter()
        .filter(|e| text(e, "/regarding/kind") == kind && text(e, "/regarding/name") == name)
        .map(|e| {
            (
                text(&e, "/type").to_owned(),
                text(&e, "/reason").to_owned(),
                text(&e, "/note").to_owned(),
            )
        })
        .collect()
}

/// The names of the objects of `kind` in `ns`.
pub async fn list_names(client: &Client, ns: &str, kind: &str) -> BTreeSet<String> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
    api.list(&Default::default())
        .await
        .unwrap_or_else(|e| panic!("LIST {kind} in {ns} failed: {e}"))
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect()
}

/// The string at JSON pointer `ptr`, or `""`.
pub fn text<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or("")
}

/// `status.sync.status` of an Application.
pub fn sync_status(app: &Value) -> &str {
    text(app, "/status/sync/status")
}

/// `status.health.status` of an Application.
pub fn health_status(app: &Value) -> &str {
    text(app, "/status/health/status")
}

/// `status.operationState.phase` of an Application.
pub fn operation_phase(app: &Value) -> &str {
    text(app, "/status/operationState/phase")
}

/// The condition `type_` of an object's `status.conditions`, if present.
pub fn condition<'a>(obj: &'a Value, type_: &str) -> Option<&'a Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| text(c, "/type") == type_))
}

/// Whether condition `type_` is present with status `True`.
pub fn condition_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| text(c, "/status") == "True")
}

/// `status.resources[]` entry for `kind`/`name`.
pub fn resource_entry<'a>(app: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    app.pointer("/status/resources")
        .and_then(Value::as_array)
        .and_then(|rs| rs.iter().find(|r| text(r, "/kind") == kind && text(r, "/name") == name))
}

/// `status.operationState.syncResult.resources[]` entry for `kind`/`name`.
pub fn sync_result_entry<'a>(app: &'a Value, kind: &str, name: &str) -> Option<&'a Value> {
    app.pointer("/status/operationState/syncResult/resources")
        .and_then(Value::as_array)
        .and_then(|rs| rs.iter().find(|r| text(r, "/kind") == kind && text(r, "/name") == name))
}

/// A compact view of an Application's status for failure messages.
pub fn summarize_app(app: &Value) -> String {
    let status = app.get("status").cloned().unwrap_or(Value::Null);
    let mut view = json!({
        "operation": app.get("operation"),
        "sync": status.get("sync").map(|s| json!({"status": s.get("status"), "revision": s.get("revision")})),
        "health": status.get("health"),
        "conditions": status.get("conditions"),
        "operationState": status.get("operationState").map(|o| json!({
            "phase": o.get("phase"),
            "message": o.get("message"),
            "step": o.get("step"),
            "startedAt": o.get("startedAt"),
            "syncResult": o.get("syncResult"),
        })),
        "resources": status.get("resources"),
        "history": status.get("history"),
    });
    if let Some(obj) = view.as_object_mut() {
        obj.retain(|_, v| !v.is_null());
    }
    let mut out = serde_json::to_string_pretty(&view).unwrap_or_default();
    if out.len() > 6000 {
        let mut end = 6000;
        while !out.is_char_boundary(end) {
            end -= 1;
        }
        out.truncate(end);
        out.push_str("\n…(truncated)");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Recorder

/// One observation of an object by a [`Recorder`].
#[derive(Debug, Clone)]
pub struct Seen {
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// The object's resourceVersion (devcluster's are global and increasing).
    pub rv: u64,
    pub deleted: bool,
    pub object: Value,
}

/// Watches objects of some kinds in one namespace from before a test acts, keeping every event.
pub struct Recorder {
    seen: Arc<Mutex<Vec<Seen>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Recorder {
    /// Starts one watch per kind in `ns` and returns once each has listed what exists.
    pub async fn start(client: &Client, ns: &str, kinds: &[&str]) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for kind in kinds {
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource(kind));
            let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
            let seen = Arc::clone(&seen);
            let kind_name = (*kind).to_owned();
            tasks.push(tokio::spawn(async move {
                let mut ready = Some(ready_tx);
                let mut stream = watcher(api, watcher::Config::default()).boxed();
                while let Some(event) = stream.next().await {
                    let (obj, deleted) = match event {
                        Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => (o, false),
                        Ok(watcher::Event::Delete(o)) => (o, true),
                        Ok(watcher::Event::InitDone) => {
                            if let Some(tx) = ready.take() {
                                let _ = tx.send(());
                            }
                            continue;
                        }
                        Ok(watcher::Event::Init) | Err(_) => continue,
                    };
                    let record = Seen {
                        kind: kind_name.clone(),
                        name: obj.metadata.name.clone().unwrap_or_default(),
                        uid: obj.metadata.uid.clone().unwrap_or_default(),
                        rv: obj
                            .metadata
                            .resource_version
                            .as_deref()
                            .and_then(|rv| rv.parse().ok())
                            .unwrap_or(0),
                        deleted,
                        object: serde_json::to_value(&obj).unwrap_or(Value::Null),
                    };
                    if let Ok(mut seen) = seen.lock() {
                        seen.push(record);
                    }
                }
            }));
            within(
                format!("the {kind} watch in {ns} to list"),
                Duration::from_secs(30),
                ready_rx,
            )
            .await
            .expect("the watch task runs");
        }
        Self { seen, tasks }
    }

    /// Every observation, in resourceVersion order.
    pub fn all(&self) -> Vec<Seen> {
        let mut all = self.seen.lock().map(|s| s.clone()).unwrap_or_default();
        all.sort_by_key(|s| s.rv);
        all
    }

    /// Observations of `kind`/`name`, in resourceVersion order.
    pub fn of(&self, kind: &str, name: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|s| s.kind == kind && s.name == name)
            .collect()
    }

    /// The distinct uids `kind`/`name` had: how many times it was created.
    pub fn uids(&self, kind: &str, name: &str) -> BTreeSet<String> {
        self.of(kind, name).into_iter().map(|s| s.uid).collect()
    }

    /// The resourceVersion at which `kind`/`name` was first seen (its creation).
    pub fn created(&self, kind: &str, name: &str) -> Option<u64> {
        self.of(kind, name).first().map(|s| s.rv)
    }

    /// The first resourceVersion at which `kind`/`name` satisfied `pred`.
    pub fn first_where(&self, kind: &str, name: &str, pred: impl Fn(&Value) -> bool) -> Option<u64> {
        self.of(kind, name)
            .into_iter()
            .find(|s| !s.deleted && pred(&s.object))
            .map(|s| s.rv)
    }

    /// A one-line-per-event trace (`rv kind/name [deleted]`), for failure messages.
    pub fn trace(&self) -> String {
        let mut out = String::new();
        for s in self.all() {
            let _ = writeln!(
                out,
                "{:>6} {}/{} uid={}{}",
                s.rv,
                s.kind,
                s.name,
                s.uid.get(..8).unwrap_or(&s.uid),
                if s.deleted { " DELETED" } else { "" }
            );
        }
        out
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The environment of one test

/// One devcluster with Capstan's CRDs, one Git repository, one operator and one test namespace.
pub struct AppEnv {
    // Declared first: the operator stops before the cluster it talks to.
    pub operator: Operator,
    pub repo: GitRepo,
    pub cluster: TestCluster,
    /// The namespace holding the test's Applications (and, by default, their destination).
    pub ns: String,
}

impl AppEnv {
    /// A devcluster, CRDs, the namespace `<prefix>-…`, an empty repository `<prefix>.git`, and the
    /// operator with default options. Commit the repository's content before creating Applications.
    pub async fn start(prefix: &str) -> Self {
        Self::start_with(prefix, OperatorOptions::default()).await
    }

    /// As [`AppEnv::start`], with operator options. The test namespace gets a `capstan-deployer`
    /// ServiceAccount bound to `cluster-admin`: tests about something else than tenancy deploy anything
    /// (tenancy tests use [`AppEnv::start_tenant`]).
    pub async fn start_with(prefix: &str, options: OperatorOptions) -> Self {
        let env = Self::start_tenant(prefix, options).await;
        env.cluster.apply(&admin_deployer(&env.ns), &[]).await;
        env
    }

    /// As [`AppEnv::start_with`] without any ServiceAccount: the test sets up the tenant's rights itself.
    pub async fn start_tenant(prefix: &str, options: OperatorOptions) -> Self {
        let cluster = TestCluster::start();
        install_crds(cluster.kubectl_runner()).await;
        let ns = cluster.with_namespace(prefix).await;
        let repo = GitRepo::start(prefix).await;
        let kubeconfig = crate::chart::kubeconfig_for(&cluster, crate::chart::Identity::Operator).await;
        let operator = Operator::start(&kubeconfig, options).await;
        Self {
            operator,
            repo,
            cluster,
            ns,
        }
    }

    pub async fn client(&self) -> Client {
        self.cluster.client().await
    }

    /// `kubectl apply -f -` of `objects` (YAML).
    pub async fn apply(&self, objects: &[Value]) {
        self.cluster.apply(&to_yaml(objects), &[]).await;
    }

    /// Applies the Application `name` of the test namespace: the test repository's `path`, deployed to
    /// the test namespace, with `spec` merged over those defaults (see [`application`]).
    pub async fn create_app(&self, name: &str, path: &str, spec: Value) {
        self.apply(&[application(&self.ns, name, &self.repo.url(), path, &self.ns, spec)])
            .await;
    }

    /// The Application `name` in the test namespace; panics if it does not exist.
    pub async fn app(&self, name: &str) -> Value {
        self.app_in(&self.ns, name).await
    }

    /// The Application `name` in `ns`; panics if it does not exist.
    pub async fn app_in(&self, ns: &str, name: &str) -> Value {
        get_object(&self.client().await, ns, "Application", name)
            .await
            .unwrap_or_else(|| panic!("Application {ns}/{name} does not exist"))
    }

    /// The object `kind`/`name` in the test namespace, if it exists.
    pub async fn get(&self, kind: &str, name: &str) -> Option<Value> {
        get_object(&self.client().await, &self.ns, kind, name).await
    }

    /// The object `kind`/`name` in the test namespace; panics with the operator log if missing.
    pub async fn must_get(&self, kind: &str, name: &str) -> Value {
        match self.get(kind, name).await {
            Some(v) => v,
            None => self.fail(&format!("{kind} {}/{name} does not exist", self.ns)),
        }
    }

    /// Panics with `msg` and the operator's recent log.
    pub fn fail(&self, msg: &str) -> ! {
        panic!("{msg}\n{}", self.operator.log_tail(80))
    }

    /// Polls `check` until it returns `Ok`; `Err` carries the last observation. Panics after
    /// `timeout` with `what`, the last observation and the operator's log.
    pub async fn eventually<T, F, Fut>(&self, what: &str, timeout: Duration, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, String>>,
    {
        let deadline = Instant::now() + timeout;
        let mut last = String::from("(not checked yet)");
        loop {
            match tokio::time::timeout_at(deadline, check()).await {
                Ok(Ok(value)) => return value,
                Ok(Err(observed)) => last = observed,
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                self.fail(&format!(
                    "timed out after {timeout:?} waiting until {what}\n--- last observed ---\n{last}"
                ));
            }
            tokio::time::sleep(APP_POLL).await;
        }
    }

    /// Waits until the Application `name` satisfies `pred`; returns it.
    pub async fn wait_app(&self, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_app_in(&self.ns.clone(), name, what, pred).await
    }

    /// Waits until the sync operation of Application `name` that started at `started_at` succeeds
    /// (resumed after a kill, not started again); returns the Application.
    pub async fn wait_resumed(&self, name: &str, started_at: &str) -> Value {
        let app = self
            .wait_app(name, "the sync operation Succeeded", |a| {
                operation_phase(a) == "Succeeded"
            })
            .await;
        assert_eq!(
            text(&app, "/status/operationState/startedAt"),
            started_at,
            "the same operation was resumed, not started again"
        );
        app
    }

    /// Waits until the Application `ns`/`name` satisfies `pred`; returns it.
    pub async fn wait_app_in(&self, ns: &str, name: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        self.wait_app_within(ns, name, what, APP_TIMEOUT, pred).await
    }

    /// As [`AppEnv::wait_app_in`] with a deadline of `timeout`, for things that must follow promptly
    /// from something already observed (a handled refresh).
    pub async fn wait_app_within(
        &self,
        ns: &str,
        name: &str,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Value) -> bool,
    ) -> Value {
        let client = self.client().await;
        let what = format!("Application {ns}/{name}: {what}");
        self.eventually(&what, timeout, || {
            let client = client.clone();
            let pred = &pred;
            async move {
                match get_object(&client, ns, "Application", name).await {
                    Some(app) if pred(&app) => Ok(app),
                    Some(app) => Err(summarize_app(&app)),
                    None => Err("the Application does not exist".into()),
                }
            }
        })
        .await
    }

    /// Waits until the Application `name` no longer exists (its finalizers are all removed).
    pub async fn wait_app_gone(&self, name: &str) {
        let client = self.client().await;
        let what = format!("Application {}/{name} is gone", self.ns);
        self.eventually(&what, APP_TIMEOUT, || {
            let client = client.clone();
            async move {
                match get_object(&client, &self.ns, "Application", name).await {
                    None => Ok(()),
                    Some(app) => Err(summarize_app(&app)),
                }
            }
        })
        .await
    }

    /// Waits until the Application is Synced and Healthy with no operation running.
    pub async fn wait_synced_healthy(&self, name: &str) -> Value {
        self.wait_app(name, "Synced and Healthy, no operation running", synced_healthy)
            .await
    }

    /// Waits until `kind`/`name` in the test namespace satisfies `pred` (`None` = absent); returns it.
    pub async fn wait_object(
        &self,
        kind: &str,
        name: &str,
        what: &str,
        pred: impl Fn(Option<&Value>) -> bool,
    ) -> Option<Value> {
        let client = self.client().await;
        let ns = self.ns.clone();
        let what = format!("{kind} {ns}/{name} {what}");
        self.eventually(&what, APP_TIMEOUT, || {
            let (client, ns, pred) = (client.clone(), ns.clone(), &pred);
            async move {
                let obj = get_object(&client, &ns, kind, name).await;
                if pred(obj.as_ref()) {
                    Ok(obj)
                } else {
                    Err(obj.map_or_else(
                        || "absent".to_owned(),
                        |o| serde_json::to_string_pretty(&o).unwrap_or_default(),
                    ))
                }
            }
        })
        .await
    }

    /// Asks for a refresh the Argo CD way a user would: `kubectl annotate capp NAME
    /// capstan.dev/refresh=normal`.
    pub async fn refresh(&self, name: &str, level: &str) {
        let annotation = format!("capstan.dev/refresh={level}");
        self.cluster
            .kubectl_ok(&["annotate", "-n", &self.ns, "capp", name, &annotation, "--overwrite"])
            .await;
    }

    /// [`AppEnv::refresh`], then waits until the operator has handled it (removed the annotation).
    pub async fn refresh_handled(&self, name: &str, level: &str) -> Value {
        self.refresh(name, level).await;
        self.wait_app(name, "the refresh is handled (annotation removed)", |a| {
            a.pointer("/metadata/annotations/capstan.dev~1refresh").is_none()
        })
        .await
    }

    /// Starts a manual sync as `argocd app sync` does: sets `operation.sync` with a merge patch.
    pub async fn sync(&self, name: &str, sync: Value) {
        let patch = json!({"operation": {"initiatedBy": {"username": "e2e"}, "sync": sync}});
        self.patch_app(name, &patch).await;
    }

    /// `kubectl patch capp NAME --type merge -p PATCH`.
    pub async fn patch_app(&self, name: &str, patch: &Value) {
        self.cluster
            .kubectl_ok(&[
                "patch",
                "-n",
                &self.ns,
                "capp",
                name,
                "--type",
                "merge",
                "-p",
                &patch.to_string(),
            ])
            .await;
    }

    /// Server-side applies `patch` to `kind`/`name` in the test namespace as field manager `e2e`
    /// (forced), the way another actor would change a managed object.
    pub async fn ssa_object(&self, kind: &str, name: &str, patch: &Value) {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client().await, &self.ns, &resource(kind));
        api.patch(name, &PatchParams::apply("e2e").force(), &Patch::Apply(patch))
            .await
            .unwrap_or_else(|e| panic!("apply to {kind} {name} failed: {e}"));
    }
}

/// Synced, Healthy, and no operation running or pending.
pub fn synced_healthy(app: &Value) -> bool {
    sync_status(app) == "Synced"
        && health_status(app) == "Healthy"
        && app.get("operation").is_none_or(Value::is_null)
        && operation_phase(app) != "Running"
}

/// An Application manifest in Argo CD's shape (`capstan.dev/v1alpha1`), destination in-cluster.
///
/// `source` is merged over `{repoURL, targetRevision: HEAD, path}`; `spec` is merged over the spec.
pub fn application(ns: &str, name: &str, repo_url: &str, path: &str, dest_ns: &str, spec: Value) -> Value {
    let mut app = json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "project": "default",
            "source": {"repoURL": repo_url, "targetRevision": "HEAD", "path": path},
            "destination": {"server": IN_CLUSTER, "namespace": dest_ns},
        },
    });
    merge(&mut app["spec"], &spec);
    app
}

/// ServiceAccount `capstan-deployer` in `ns` (what tenant Applications of `ns` write as), bound to
/// `cluster-admin`.
pub fn admin_deployer(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: capstan-deployer, namespace: {ns}}}\n---\n\
         apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: capstan-deployer-{ns}}}\n\
         roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\n\
         subjects: [{{kind: ServiceAccount, name: capstan-deployer, namespace: {ns}}}]\n"
    )
}

/// `syncPolicy.automated` with `prune` and `selfHeal`.
pub fn automated(prune: bool, self_heal: bool) -> Value {
    json!({"syncPolicy": {"automated": {"prune": prune, "selfHeal": self_heal}}})
}

/// JSON merge (RFC 7386 without deletions): objects merge recursively, everything else replaces.
pub fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Whether an object carries Capstan's ownership marks for Application `ns`/`app`: the
/// `capstan.dev/app-instance` label and a `capstan.dev/tracking-id` naming the Application.
pub fn tracked_by(obj: &Value, ns: &str, app: &str) -> bool {
    let label = text(obj, "/metadata/labels/capstan.dev~1app-instance");
    let tracking = text(obj, "/metadata/annotations/capstan.dev~1tracking-id");
    !label.is_empty() && tracking.starts_with(&format!("{ns}/{app}:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn git_repo_serves_commits_over_git_daemon_and_can_go_away() {
        let mut repo = GitRepo::start("selftest").await;
        repo.copy_fixture("guestbook", "guestbook");
        let sha = repo.commit("guestbook").await;
        assert_eq!(sha.len(), 40, "{sha}");
        let out = git(&repo.work(), &["ls-remote", &repo.url(), "HEAD"]).await;
        assert!(
            out.starts_with(&sha),
            "ls-remote HEAD over git:// gives the commit: {out}"
        );

        repo.stop_daemon().await;
        let down = Command::new("git")
            .args(["ls-remote", &repo.url()])
            .env("GIT_TERMINAL_PROMPT", "0")
            .output()
            .await
            .expect("git runs");
        assert!(
            !down.status.success(),
            "the repository is unreachable while the daemon is stopped"
        );
        repo.start_daemon().await;
        let out = git(&repo.work(), &["ls-remote", &repo.url(), "refs/heads/main"]).await;
        assert!(out.starts_with(&sha), "{out}");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn crds_install_and_the_recorder_sees_creations_in_order() {
        let cluster = TestCluster::start();
        install_crds(cluster.kubectl_runner()).await;
        let ns = cluster.with_namespace("selftest").await;
        let client = cluster.client().await;
        let rec = Recorder::start(&client, &ns, &["ConfigMap", "Application"]).await;
        let app = application(&ns, "app", "git://127.0.0.1:1/x.git", "p", &ns, automated(true, false));
        let cms = [
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": ns}}),
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "namespace": ns}}),
        ];
        cluster.apply(&to_yaml(&[app, cms[0].clone()]), &[]).await;
        cluster.apply(&to_yaml(&[cms[1].clone()]), &[]).await;
        crate::wait_until("both ConfigMaps are recorded", crate::TIMEOUT, crate::POLL, || async {
            rec.created("ConfigMap", "b").is_some()
        })
        .await;
        assert!(
            rec.created("ConfigMap", "a") < rec.created("ConfigMap", "b"),
            "{}",
            rec.trace()
        );
        assert_eq!(rec.uids("Application", "app").len(), 1, "{}", rec.trace());
        let stored = get_object(&client, &ns, "Application", "app")
            .await
            .expect("the Application");
        assert_eq!(text(&stored, "/spec/destination/server"), IN_CLUSTER);
    }
}
