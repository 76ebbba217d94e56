//! `make demo`: the whole GitOps loop on one machine, in a form a person can follow.
//!
//! 1. starts `devcluster` (the embedded Kubernetes API) as a child process;
//! 2. installs Capstan's CRDs from `crds/` and the namespace `capstan-system`;
//! 3. creates a bare Git repository seeded from `config/samples/guestbook/` and serves it with `git daemon`
//!    on loopback (the real `git://` protocol);
//! 4. starts the operator (`capstan run`), logging to `target/demo/capstan.log`;
//! 5. starts `capstan-hub` (the reference SaaS receiver) and the reporter (`capstan run --controllers
//!    reporter`) pointed at it, and prints the hub page's URL;
//! 6. applies `config/samples/repository.yaml` and `config/samples/application.yaml` with the URL filled in;
//! 7. shows progress — the Application's sync and health status, the running operation (phase, wave) and
//!    each resource as it changes — one line per change, until it is Synced and Healthy; then prints how to
//!    use kubectl against the devcluster and how to change the sample in Git, and keeps running (and
//!    reporting changes) until Ctrl-C. Once Synced and Healthy, it also waits until the hub page shows the
//!    Application Synced/Healthy (the reporter got it there).
//!
//! Environment: `DEMO_ONESHOT=1` exits 0 once Synced and Healthy, or non-zero with the reason after
//! `DEMO_DEADLINE` (default `180s`); `DEMO_DIR` moves the work directory (default `target/demo`).
//! The binary expects `capstan`, `capstan-hub` and `devcluster` next to it (`cargo build --workspace --bins`).

use std::{
    collections::BTreeMap,
    fs,
    path::{Path, PathBuf},
    process::{ExitCode, Stdio},
    time::{Duration, Instant},
};

use anyhow::{anyhow, bail, Context, Result};
use capstan_e2e::{
    capstan::{
        free_port, health_status, http_get, operation_phase, resource, summarize_app, sync_status, synced_healthy,
        text, workspace_root, OPERATOR_NAMESPACE,
    },
    chart,
    fixtures::to_yaml,
    Kubectl,
};
use kube::{
    api::{Api, DynamicObject},
    config::{KubeConfigOptions, Kubeconfig},
    Client,
};
use serde_json::Value;
use tokio::{
    process::{Child, Command},
    signal::unix::{signal, SignalKind},
};

/// The Application and Repository in `config/samples/`.
const APP: &str = "guestbook";
/// The repository path the sample lives under (Argo CD's example layout).
const APP_PATH: &str = "guestbook";
/// The destination namespace of the sample Application.
const DEST_NAMESPACE: &str = "guestbook";
/// The token the demo's hub accepts and its reporter sends.
const HUB_TOKEN: &str = "demo-token";
/// How often the live view polls.
const REFRESH: Duration = Duration::from_millis(500);
/// Upper bound for each start-up step (devcluster, git daemon, operator readiness).
const STARTUP: Duration = Duration::from_secs(90);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("capstan-demo: {e:#}");
            return ExitCode::from(2);
        }
    };
    let mut demo = Demo::new(settings);
    let outcome = tokio::select! {
        result = demo.run() => result.map_or_else(Outcome::Failed, |()| Outcome::Finished),
        sig = interrupted() => Outcome::Interrupted(sig),
    };
    let code = match &outcome {
        Outcome::Finished => ExitCode::SUCCESS,
        Outcome::Interrupted(sig) => {
            say(&format!("{sig} received: stopping"));
            if demo.reached_goal || !demo.settings.oneshot {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(130)
            }
        }
        Outcome::Failed(e) => {
            eprintln!("\ncapstan-demo FAILED: {e:#}");
            ExitCode::FAILURE
        }
    };
    demo.shutdown().await;
    code
}

enum Outcome {
    /// `DEMO_ONESHOT`: the Application became Synced and Healthy.
    Finished,
    Interrupted(&'static str),
    Failed(anyhow::Error),
}

/// Waits for SIGINT (Ctrl-C) or SIGTERM.
async fn interrupted() -> &'static str {
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return "SIGINT";
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => "SIGINT",
        _ = term.recv() => "SIGTERM",
    }
}

/// What the environment asks for.
struct Settings {
    oneshot: bool,
    deadline: Duration,
    /// The work directory: kubeconfig, logs, the Git repository.
    dir: PathBuf,
    /// Where `capstan` and `devcluster` are (the directory of this binary).
    bin_dir: PathBuf,
    /// The workspace: `crds/`, `config/samples/`, `e2e/tools/`.
    root: PathBuf,
}

impl Settings {
    fn from_env() -> Result<Self> {
        let oneshot = std::env::var("DEMO_ONESHOT").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
        let deadline = match std::env::var("DEMO_DEADLINE") {
            Ok(v) if !v.trim().is_empty() => parse_duration(&v).with_context(|| format!("DEMO_DEADLINE={v:?}"))?,
            _ => Duration::from_secs(180),
        };
        let exe = std::env::current_exe().context("the path of capstan-demo")?;
        let bin_dir = exe
            .parent()
            .context("capstan-demo lives in target/<profile>/")?
            .to_path_buf();
        let root = workspace_root();
        let dir = match std::env::var_os("DEMO_DIR") {
            Some(d) if !d.is_empty() => PathBuf::from(d),
            _ => bin_dir
                .parent()
                .map_or_else(|| root.join("target"), Path::to_path_buf)
                .join("demo"),
        };
        let dir = std::path::absolute(&dir).with_context(|| format!("the work directory {}", dir.display()))?;
        Ok(Self {
            oneshot,
            deadline,
            dir,
            bin_dir,
            root,
        })
    }
}

/// `180s`, `3m`, `1m30s`, `500ms` or a plain number of seconds.
fn parse_duration(s: &str) -> Result<Duration> {
    let s = s.trim();
    if let Ok(secs) = s.parse::<u64>() {
        return Ok(Duration::from_secs(secs));
    }
    let mut total = Duration::ZERO;
    let mut rest = s;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        let n: u64 = rest[..digits].parse().map_err(|_| anyhow!("not a duration: {s}"))?;
        rest = &rest[digits..];
        let unit = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        total += match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n * 60),
            "h" => Duration::from_secs(n * 3600),
            other => bail!("unknown unit {other:?} in {s} (use ms, s, m or h)"),
        };
        rest = &rest[unit..];
    }
    Ok(total)
}

/// Waits until `capstan run` (`proc`, metrics on `addr`) answers `/readyz` 200, or fails with its log tail.
async fn wait_ready(proc: &mut Proc, addr: &str, log: &Path, what: &str) -> Result<()> {
    let socket = addr.parse().context("the metrics address")?;
    let deadline = Instant::now() + STARTUP;
    loop {
        if let Some((200, _)) = http_get(socket, "/readyz").await {
            return Ok(());
        }
        proc.check_running()?;
        if Instant::now() > deadline {
            bail!(
                "{what} did not become ready (GET /readyz = 200) within {STARTUP:?}\n{}",
                log_tail(log, 40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A child process the demo owns; SIGTERM on shutdown, SIGKILL when dropped.
struct Proc {
    name: &'static str,
    child: Child,
    log: PathBuf,
}

impl Proc {
    /// Starts `cmd` in its own process group (Ctrl-C reaches only the demo, which stops the children in
    /// order), with stdout and stderr appended to `log`.
    fn spawn(name: &'static str, mut cmd: Command, log: PathBuf) -> Result<Self> {
        let file = fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        cmd.stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .process_group(0)
            .kill_on_drop(true);
        let child = cmd.spawn().with_context(|| format!("cannot start {name}"))?;
        Ok(Self { name, child, log })
    }

    /// `Err` with the log tail if the process has exited.
    fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => bail!(
                "{} exited unexpectedly ({status})\n{}",
                self.name,
                log_tail(&self.log, 40)
            ),
            Err(e) => bail!("cannot check on {}: {e}", self.name),
        }
    }

    /// SIGTERM, up to `grace` to exit, then SIGKILL.
    async fn stop(mut self, grace: Duration) {
        if let Ok(Some(_)) = self.child.try_wait() {
            return;
        }
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .await;
        }
        if tokio::time::timeout(grace, self.child.wait()).await.is_err() {
            let _ = self.child.kill().await;
        }
    }
}

struct Demo {
    settings: Settings,
    started: Instant,
    // Stopped in this order: the reporter and the operator first, then the hub and Git, then the cluster.
    reporter: Option<Proc>,
    operator: Option<Proc>,
    hub: Option<Proc>,
    /// The hub's base URL (its page is at `/`).
    hub_url: Option<String>,
    git_daemon: Option<Proc>,
    devcluster: Option<Proc>,
    reached_goal: bool,
}

/// Everything the demo set up, for the instructions at the end.
struct Setup {
    kubeconfig: PathBuf,
    bare_repo: PathBuf,
    repo_url: String,
}

impl Demo {
    fn new(settings: Settings) -> Self {
        Self {
            settings,
            started: Instant::now(),
            reporter: None,
            operator: None,
            hub: None,
            hub_url: None,
            git_daemon: None,
            devcluster: None,
            reached_goal: false,
        }
    }

    async fn run(&mut self) -> Result<()> {
        let dir = self.settings.dir.clone();
        self.preflight()?;
        if dir.exists() {
            fs::remove_dir_all(&dir).with_context(|| format!("cannot clean {}", dir.display()))?;
        }
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        say(&format!(
            "Capstan demo: work directory {} (logs, kubeconfig, Git repository){}",
            dir.display(),
            if self.settings.oneshot {
                format!(
                    "; DEMO_ONESHOT: exits once Synced and Healthy, fails after {:?}",
                    self.settings.deadline
                )
            } else {
                String::new()
            }
        ));

        step(1, "starting devcluster, the embedded Kubernetes API");
        let kubeconfig = dir.join("kubeconfig");
        let url = self.start_devcluster(&kubeconfig).await?;
        detail(&format!(
            "devcluster ready: {url} (log: {})",
            dir.join("devcluster.log").display()
        ));
        let kubectl = Kubectl::new(&kubeconfig, dir.join("kubectl-cache"));

        step(2, "installing Capstan's CRDs (crds/) and the namespace capstan-system");
        self.install_crds(&kubectl).await?;

        step(
            3,
            "creating a Git repository from config/samples/guestbook/, served by git daemon",
        );
        let (bare_repo, repo_url) = self.create_repository().await?;
        detail(&format!("{} served at {repo_url}", bare_repo.display()));

        step(
            4,
            "starting the operator: capstan run, as the chart's ServiceAccount with the chart's RBAC",
        );
        let operator_kubeconfig = chart::kubeconfig_with(&kubectl, chart::Identity::Operator, &dir).await;
        self.start_operator(&operator_kubeconfig).await?;
        detail(&format!("operator ready (log: {})", dir.join("capstan.log").display()));

        step(5, "starting capstan-hub (the reference SaaS receiver) and the reporter");
        let hub_url = self.start_hub().await?;
        let reporter_kubeconfig = chart::kubeconfig_with(&kubectl, chart::Identity::Reporter, &dir).await;
        self.start_reporter(&kubectl, &reporter_kubeconfig, &hub_url).await?;
        detail(&format!(
            "hub page: {hub_url}/ (logs: {}, {})",
            dir.join("capstan-hub.log").display(),
            dir.join("reporter.log").display()
        ));

        step(
            6,
            "applying config/samples/repository.yaml and config/samples/application.yaml",
        );
        self.apply_samples(&kubectl, &repo_url).await?;

        step(
            7,
            &format!("watching Application {OPERATOR_NAMESPACE}/{APP} until it is Synced and Healthy"),
        );
        let client = client(&kubeconfig).await?;
        let setup = Setup {
            kubeconfig,
            bare_repo,
            repo_url,
        };
        self.watch(&client, &setup).await
    }

    /// The tools the demo needs, with a message that says what to do when one is missing.
    fn preflight(&self) -> Result<()> {
        for bin in ["capstan", "capstan-hub", "devcluster"] {
            let path = self.settings.bin_dir.join(bin);
            if !path.exists() {
                bail!(
                    "{} is missing: build the workspace binaries first (`cargo build --workspace --bins`, which `make demo` does)",
                    path.display()
                );
            }
        }
        for (tool, why) in [
            ("git", "git (with git daemon) serves the sample repository"),
            ("kubectl", "kubectl (1.32) applies the CRDs and samples"),
        ] {
            let found = std::process::Command::new(tool)
                .arg("version")
                .arg("--client")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if let Err(e) = found {
                if e.kind() == std::io::ErrorKind::NotFound {
                    bail!("{tool} is not on PATH: {why}");
                }
            }
        }
        Ok(())
    }

    async fn start_devcluster(&mut self, kubeconfig: &Path) -> Result<String> {
        let log = self.settings.dir.join("devcluster.log");
        let mut cmd = Command::new(self.settings.bin_dir.join("devcluster"));
        cmd.args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(kubeconfig);
        let proc = self.devcluster.insert(Proc::spawn("devcluster", cmd, log.clone())?);
        let deadline = Instant::now() + STARTUP;
        loop {
            let printed = fs::read_to_string(&log).unwrap_or_default();
            if let Some(line) = printed.lines().find(|l| l.starts_with("devcluster ready: ")) {
                if kubeconfig.exists() {
                    return Ok(line.trim_start_matches("devcluster ready: ").trim().to_owned());
                }
            }
            proc.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "devcluster did not print its ready line within {STARTUP:?}\n{}",
                    log_tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn install_crds(&self, kubectl: &Kubectl) -> Result<()> {
        let crds_dir = self.settings.root.join("crds");
        let crds = path_str(&crds_dir)?;
        kubectl_ok(
            kubectl,
            &["apply", "--server-side", "--field-manager=capstan-demo", "-f", crds],
            None,
        )
        .await?;
        let mut names = Vec::new();
        for entry in fs::read_dir(&crds_dir).with_context(|| format!("cannot read {}", crds_dir.display()))? {
            let name = entry?.file_name().to_string_lossy().into_owned();
            if let Some(crd) = name.strip_suffix(".yaml") {
                names.push(format!("crd/{crd}"));
            }
        }
        names.sort();
        let mut args = vec!["wait", "--for=condition=Established", "--timeout=60s"];
        args.extend(names.iter().map(String::as_str));
        kubectl_ok(kubectl, &args, None).await?;
        detail(&format!("{} CRDs Established", names.len()));
        let ns = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}});
        let out = kubectl_ok(kubectl, &["apply", "-f", "-"], Some(&ns.to_string())).await?;
        detail(out.trim());
        Ok(())
    }

    /// A bare repository `<dir>/git/guestbook.git` whose `main` holds `guestbook/` from the samples, and
    /// `git daemon` exporting it on a free loopback port. Returns the bare path and the `git://` URL.
    async fn create_repository(&mut self) -> Result<(PathBuf, String)> {
        let dir = &self.settings.dir;
        let srv = dir.join("git");
        let bare = srv.join(format!("{APP}.git"));
        let seed = dir.join("seed");
        fs::create_dir_all(&srv)?;
        git(
            dir,
            &["init", "-q", "--bare", "--initial-branch=main", path_str(&bare)?],
        )
        .await?;
        git(dir, &["init", "-q", "--initial-branch=main", path_str(&seed)?]).await?;
        let samples = self.settings.root.join("config/samples").join(APP_PATH);
        copy_tree(&samples, &seed.join(APP_PATH))?;
        fs::write(
            seed.join("README.md"),
            "# guestbook\n\nThe sample Application of `make demo` (from Capstan's `config/samples/guestbook/`).\n\
             Edit the manifests under `guestbook/`, commit and push: Capstan syncs the change.\n",
        )?;
        git(&seed, &["add", "-A"]).await?;
        git(
            &seed,
            &["commit", "-q", "-m", "guestbook: the sample from config/samples"],
        )
        .await?;
        git(&seed, &["push", "-q", path_str(&bare)?, "HEAD:refs/heads/main"]).await?;
        let sha = git(&seed, &["rev-parse", "--short", "HEAD"]).await?;
        detail(&format!("seeded main with commit {}", sha.trim()));

        // git-daemon itself rather than `git daemon`, which forks a child a SIGTERM would not reach.
        let exec_path = git(dir, &["--exec-path"]).await?;
        let port = free_port();
        let mut cmd = Command::new(Path::new(exec_path.trim()).join("git-daemon"));
        cmd.args([
            "--export-all",
            "--reuseaddr",
            "--informative-errors",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", srv.display()))
        .arg(&srv);
        let proc = self
            .git_daemon
            .insert(Proc::spawn("git daemon", cmd, dir.join("git-daemon.log"))?);
        let deadline = Instant::now() + STARTUP;
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            proc.check_running()?;
            if Instant::now() > deadline {
                bail!("git daemon did not listen on port {port} within {STARTUP:?}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok((bare, format!("git://127.0.0.1:{port}/{APP}.git")))
    }

    async fn start_operator(&mut self, kubeconfig: &Path) -> Result<()> {
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let tools = self.settings.root.join("e2e/tools");
        let path = std::env::var_os("PATH").unwrap_or_default();
        let path = std::env::join_paths(std::iter::once(tools).chain(std::env::split_paths(&path)))?;
        let args = [
            "run",
            "--namespace",
            OPERATOR_NAMESPACE,
            "--metrics-addr",
            &addr,
            "--controllers",
            "application,cluster,repository",
            "--sync-wave-delay",
            "2s",
            "--log-format",
            "text",
        ];
        detail(&format!("capstan {}", args.join(" ")));
        let mut cmd = Command::new(self.settings.bin_dir.join("capstan"));
        cmd.args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("PATH", path)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .env_remove("CAPSTAN_NAMESPACE");
        let log = self.settings.dir.join("capstan.log");
        let proc = self.operator.insert(Proc::spawn("capstan run", cmd, log.clone())?);
        wait_ready(proc, &addr, &log, "the operator").await
    }

    /// `capstan-hub` on a free loopback port with its database in the work directory; returns its URL.
    async fn start_hub(&mut self) -> Result<String> {
        let log = self.settings.dir.join("capstan-hub.log");
        let mut cmd = Command::new(self.settings.bin_dir.join("capstan-hub"));
        cmd.args(["--listen", "127.0.0.1:0", "--token", HUB_TOKEN, "--db"])
            .arg(self.settings.dir.join("hub.db"));
        detail(&format!(
            "capstan-hub --listen 127.0.0.1:0 --db {} --token …",
            self.settings.dir.join("hub.db").display()
        ));
        let proc = self.hub.insert(Proc::spawn("capstan-hub", cmd, log.clone())?);
        let deadline = Instant::now() + STARTUP;
        loop {
            let printed = fs::read_to_string(&log).unwrap_or_default();
            if let Some(url) = printed.lines().find_map(|l| l.strip_prefix("capstan-hub ready: ")) {
                let url = url.trim().to_owned();
                self.hub_url = Some(url.clone());
                return Ok(url);
            }
            proc.check_running()?;
            if Instant::now() > deadline {
                bail!(
                    "capstan-hub did not print its ready line within {STARTUP:?}\n{}",
                    log_tail(&log, 40)
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// ConfigMap and Secret `capstan-reporter` pointing at the hub, then `capstan run --controllers reporter`.
    async fn start_reporter(&mut self, kubectl: &Kubectl, kubeconfig: &Path, hub_url: &str) -> Result<()> {
        let settings = to_yaml(&[
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
                "data": {"url": hub_url, "agentId": "demo", "clusterName": "devcluster"}}),
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
                "stringData": {"token": HUB_TOKEN}}),
        ]);
        kubectl_ok(kubectl, &["apply", "-f", "-"], Some(&settings)).await?;
        let port = free_port();
        let addr = format!("127.0.0.1:{port}");
        let args = [
            "run",
            "--controllers",
            "reporter",
            "--namespace",
            OPERATOR_NAMESPACE,
            "--metrics-addr",
            &addr,
        ];
        detail(&format!("capstan {}", args.join(" ")));
        let mut cmd = Command::new(self.settings.bin_dir.join("capstan"));
        cmd.args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
            .env_remove("CAPSTAN_NAMESPACE");
        let log = self.settings.dir.join("reporter.log");
        let proc = self.reporter.insert(Proc::spawn("the reporter", cmd, log.clone())?);
        wait_ready(proc, &addr, &log, "the reporter").await
    }

    /// Waits (until `deadline`) for the hub page to show the Application Synced and Healthy.
    async fn wait_hub_page(&mut self, deadline: Instant) -> Result<()> {
        let Some(url) = self.hub_url.clone() else { return Ok(()) };
        let socket = url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .context("the hub's address")?;
        loop {
            if let Some((200, body)) = http_get(socket, "/api/applications").await {
                let apps: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
                let shown = apps.as_array().into_iter().flatten().any(|a| {
                    a["name"] == APP
                        && a["namespace"] == OPERATOR_NAMESPACE
                        && a["sync"] == "Synced"
                        && a["health"] == "Healthy"
                });
                if shown {
                    say(&format!("the hub page shows Application {APP} Synced/Healthy: {url}/"));
                    return Ok(());
                }
            }
            self.check_children()?;
            if Instant::now() > deadline {
                bail!(
                    "the hub page does not show {APP} Synced/Healthy within DEMO_DEADLINE\n{}",
                    log_tail(&self.settings.dir.join("reporter.log"), 40)
                );
            }
            tokio::time::sleep(REFRESH).await;
        }
    }

    /// The sample Repository and Application with the demo's repository URL filled in.
    async fn apply_samples(&self, kubectl: &Kubectl, repo_url: &str) -> Result<()> {
        let samples = self.settings.root.join("config/samples");
        let mut repository = read_yaml(&samples.join("repository.yaml"))?;
        *repository
            .pointer_mut("/spec/url")
            .context("repository.yaml has no spec.url")? = Value::from(repo_url);
        let mut application = read_yaml(&samples.join("application.yaml"))?;
        *application
            .pointer_mut("/spec/source/repoURL")
            .context("application.yaml has no spec.source.repoURL")? = Value::from(repo_url);
        let stream = to_yaml(&[repository, application]);
        let out = kubectl_ok(kubectl, &["apply", "-f", "-"], Some(&stream)).await?;
        for line in out.lines() {
            detail(line);
        }
        Ok(())
    }

    /// The live view: one line per change until Synced and Healthy (and on until Ctrl-C, unless oneshot).
    async fn watch(&mut self, client: &Client, setup: &Setup) -> Result<()> {
        let apps: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), OPERATOR_NAMESPACE, &resource("Application"));
        let repos: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), OPERATOR_NAMESPACE, &resource("Repository"));
        let watch_started = Instant::now();
        let deadline = watch_started + self.settings.deadline;
        let mut shown: BTreeMap<String, String> = BTreeMap::new();
        let mut last_app: Option<Value> = None;
        let mut last_repo: Option<Value> = None;
        let mut warned = false;
        let mut ticker = tokio::time::interval(REFRESH);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            self.check_children()?;
            let mut view = BTreeMap::new();
            match repos.get_opt(APP).await {
                Ok(Some(repo)) => {
                    let repo = serde_json::to_value(repo)?;
                    view.insert("0 repository".to_owned(), repository_line(&repo));
                    last_repo = Some(repo);
                }
                Ok(None) => {
                    view.insert("0 repository".to_owned(), format!("Repository {APP}: not found"));
                }
                Err(e) => {
                    view.insert(
                        "0 repository".to_owned(),
                        format!("Repository {APP}: cannot read it: {e}"),
                    );
                }
            }
            match apps.get_opt(APP).await {
                Ok(Some(app)) => {
                    let app = serde_json::to_value(app)?;
                    application_view(&app, &mut view);
                    last_app = Some(app);
                }
                Ok(None) => {
                    view.insert("1 application".to_owned(), format!("Application {APP}: not found"));
                }
                Err(e) => {
                    view.insert(
                        "1 application".to_owned(),
                        format!("Application {APP}: cannot read it: {e}"),
                    );
                }
            }
            self.print_changes(&mut shown, view);

            let healthy = last_app.as_ref().is_some_and(synced_healthy);
            if healthy && !self.reached_goal {
                self.reached_goal = true;
                let app = last_app.as_ref().expect("an Application was read");
                self.print_success(app, watch_started.elapsed());
                self.wait_hub_page(deadline).await?;
                if self.settings.oneshot {
                    say("DEMO_ONESHOT is set: stopping now (plain `make demo` keeps running)");
                    return Ok(());
                }
                self.print_instructions(setup);
            }
            if !self.reached_goal && !warned && Instant::now() > deadline {
                let why = self.diagnosis(last_app.as_ref(), last_repo.as_ref());
                if self.settings.oneshot {
                    bail!("{why}");
                }
                warned = true;
                eprintln!("\nWARNING: {why}\n(the demo keeps running so you can look around; Ctrl-C stops it)\n");
            }
        }
    }

    fn check_children(&mut self) -> Result<()> {
        for proc in [
            &mut self.reporter,
            &mut self.operator,
            &mut self.hub,
            &mut self.git_daemon,
            &mut self.devcluster,
        ]
        .into_iter()
        .flatten()
        {
            proc.check_running()?;
        }
        Ok(())
    }

    /// Prints a line for every view entry that appeared or changed, and for every one that went away.
    fn print_changes(&self, shown: &mut BTreeMap<String, String>, view: BTreeMap<String, String>) {
        let gone: Vec<String> = shown.keys().filter(|k| !view.contains_key(*k)).cloned().collect();
        for key in gone {
            if let Some(old) = shown.remove(&key) {
                let what = old.trim_start().split("  ").next().unwrap_or_default();
                if key.starts_with("4 resource") {
                    // A hook deleted by its hook-delete-policy, or an object pruned from Git.
                    self.line(&format!("  {what:<34} no longer listed (deleted)"));
                } else if key.starts_with("5 hook") {
                    self.line(&format!("  {what:<34} hook not part of the current operation"));
                } else {
                    self.line(&format!("{what}  (gone)"));
                }
            }
        }
        for (key, line) in view {
            if shown.get(&key) != Some(&line) {
                self.line(&line);
                shown.insert(key, line);
            }
        }
    }

    fn line(&self, text: &str) {
        println!("[{:>6.1}s] {text}", self.started.elapsed().as_secs_f64());
    }

    fn print_success(&self, app: &Value, took: Duration) {
        let revision = text(app, "/status/sync/revision");
        let short = revision.get(..7).unwrap_or(revision);
        println!();
        say(&format!(
            "Application {APP} is Synced and Healthy at revision {short} ({:.1}s after it was applied)",
            took.as_secs_f64()
        ));
        for r in app
            .pointer("/status/resources")
            .and_then(Value::as_array)
            .map_or(&[][..], Vec::as_slice)
        {
            let line = format!(
                "{:<34} {:<8} {}",
                format!("{}/{}", text(r, "/kind"), text(r, "/name")),
                text(r, "/status"),
                text(r, "/health/status"),
            );
            detail(line.trim_end());
        }
        let hooks: Vec<String> = hook_results(app)
            .map(|h| {
                format!(
                    "{} hook {}/{}: {}",
                    text(h, "/hookType"),
                    text(h, "/kind"),
                    text(h, "/name"),
                    text(h, "/hookPhase")
                )
            })
            .collect();
        for h in hooks {
            detail(&h);
        }
    }

    fn print_instructions(&self, setup: &Setup) {
        let kubeconfig = setup.kubeconfig.display();
        let bare = setup.bare_repo.display();
        let clone = self.settings.dir.join("my-guestbook");
        let clone = clone.display();
        println!(
            "
What next — in another terminal:

  # point kubectl at the devcluster
  export KUBECONFIG={kubeconfig}
  kubectl get capp -n {OPERATOR_NAMESPACE}          # the Application: sync status, health, revision
  kubectl get crepo -n {OPERATOR_NAMESPACE}         # the Repository ({url})
  kubectl get deploy,svc,cm -n {DEST_NAMESPACE}     # what Capstan deployed

  # change the sample in Git and watch it sync (the Repository polls every few seconds)
  git clone {bare} {clone}
  cd {clone}
  sed -i 's/replicas: 1/replicas: 3/' guestbook/guestbook-ui.yaml
  git -c user.name=you -c user.email=you@example.com commit -am 'guestbook-ui: 3 replicas'
  git push origin main
  kubectl get capp -n {OPERATOR_NAMESPACE} -w

  # or drift the cluster by hand: selfHeal puts it back
  kubectl scale deploy/guestbook-ui -n {DEST_NAMESPACE} --replicas=5

  # what the SaaS side sees (capstan-hub, fed by the reporter)
  open {hub}/

This terminal keeps reporting every change. Operator log: {log}. Ctrl-C stops the demo.
",
            url = setup.repo_url,
            hub = self.hub_url.as_deref().unwrap_or("(no hub)"),
            log = self.settings.dir.join("capstan.log").display(),
        );
    }

    /// Why the Application is not Synced and Healthy: its status, the Repository's, the operator's log.
    fn diagnosis(&self, app: Option<&Value>, repo: Option<&Value>) -> String {
        let mut out = format!(
            "Application {OPERATOR_NAMESPACE}/{APP} is not Synced and Healthy after {:?} (DEMO_DEADLINE)",
            self.settings.deadline
        );
        match app {
            Some(app) => {
                out.push_str(&format!(
                    "\nlast status: sync={} health={} operation={}",
                    or_dash(sync_status(app)),
                    or_dash(health_status(app)),
                    or_dash(operation_phase(app))
                ));
                let message = text(app, "/status/operationState/message");
                if !message.is_empty() {
                    out.push_str(&format!("\noperation message: {message}"));
                }
                for c in conditions(app) {
                    out.push_str(&format!(
                        "\ncondition {}={} ({}): {}",
                        text(c, "/type"),
                        text(c, "/status"),
                        text(c, "/reason"),
                        text(c, "/message")
                    ));
                }
                out.push_str(&format!("\n--- Application status ---\n{}", summarize_app(app)));
            }
            None => out.push_str("\nthe Application was never read back"),
        }
        if let Some(repo) = repo {
            out.push_str(&format!("\n--- Repository ---\n{}", repository_line(repo)));
            let err = text(repo, "/status/lastError");
            if !err.is_empty() {
                out.push_str(&format!(" lastError: {err}"));
            }
        }
        let log = self.settings.dir.join("capstan.log");
        out.push('\n');
        out.push_str(&log_tail(&log, 60));
        out.push_str(&format!(
            "\nfull logs: {} and {}",
            log.display(),
            self.settings.dir.join("devcluster.log").display()
        ));
        out
    }

    /// Stops the children: the operator first, then the Git server, then the cluster.
    async fn shutdown(&mut self) {
        let procs = [
            self.reporter.take(),
            self.operator.take(),
            self.hub.take(),
            self.git_daemon.take(),
            self.devcluster.take(),
        ];
        if procs.iter().any(Option::is_some) {
            say("stopping the reporter, the operator, capstan-hub, git daemon and devcluster");
        }
        for proc in procs.into_iter().flatten() {
            proc.stop(Duration::from_secs(10)).await;
        }
    }
}

/// The entries of the live view for an Application: its status line, the operation, the conditions worth
/// seeing, each resource and each hook. Keys sort into display order.
fn application_view(app: &Value, view: &mut BTreeMap<String, String>) {
    let revision = text(app, "/status/sync/revision");
    let revision = revision.get(..7).unwrap_or(revision);
    let mut line = format!(
        "Application {APP}  sync={}  health={}",
        or_dash(sync_status(app)),
        or_dash(health_status(app))
    );
    if !revision.is_empty() {
        line.push_str(&format!("  revision={revision}"));
    }
    let health_message = text(app, "/status/health/message");
    if !health_message.is_empty() && health_status(app) != "Healthy" {
        line.push_str(&format!("  ({health_message})"));
    }
    view.insert("1 application".to_owned(), line);

    if app.pointer("/status/operationState").is_some() {
        let mut op = format!("operation  {}", or_dash(operation_phase(app)));
        if operation_phase(app) == "Running" {
            if let Some(step) = app.pointer("/status/operationState/step") {
                op.push_str(&format!(
                    "  phase={} wave={}",
                    or_dash(text(step, "/phase")),
                    step.get("wave").and_then(Value::as_i64).unwrap_or(0)
                ));
            }
        }
        let message = text(app, "/status/operationState/message");
        if !message.is_empty() {
            op.push_str(&format!("  {}", truncate(message, 160)));
        }
        view.insert("2 operation".to_owned(), op);
    }

    for c in conditions(app) {
        let type_ = text(c, "/type");
        if matches!(type_, "Ready" | "Reconciling") || text(c, "/status") != "True" {
            continue;
        }
        view.insert(
            format!("3 condition {type_}"),
            format!("condition {type_}  {}", truncate(text(c, "/message"), 200)),
        );
    }

    for r in app
        .pointer("/status/resources")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
    {
        let id = format!("{}/{}", text(r, "/kind"), text(r, "/name"));
        let wave = r.get("syncWave").and_then(Value::as_i64).unwrap_or(0);
        let mut line = format!(
            "  {:<34} wave {:<3} sync={:<10} health={}",
            id,
            wave,
            or_dash(text(r, "/status")),
            or_dash(text(r, "/health/status"))
        );
        let message = text(r, "/health/message");
        if !message.is_empty() && text(r, "/health/status") != "Healthy" {
            line.push_str(&format!("  ({})", truncate(message, 120)));
        }
        view.insert(format!("4 resource {wave:>4} {id}"), line);
    }

    for h in hook_results(app) {
        let id = format!("{}/{}", text(h, "/kind"), text(h, "/name"));
        let mut line = format!(
            "  {:<34} {} hook  {}",
            id,
            or_dash(text(h, "/hookType")),
            or_dash(text(h, "/hookPhase"))
        );
        let message = text(h, "/message");
        if !message.is_empty() {
            line.push_str(&format!("  ({})", truncate(message, 120)));
        }
        view.insert(format!("5 hook {id}"), line);
    }
}

fn hook_results(app: &Value) -> impl Iterator<Item = &Value> {
    app.pointer("/status/operationState/syncResult/resources")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .filter(|r| !text(r, "/hookType").is_empty())
}

fn conditions(obj: &Value) -> impl Iterator<Item = &Value> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
}

fn repository_line(repo: &Value) -> String {
    let ready = conditions(repo).find(|c| text(c, "/type") == "Ready");
    let mut line = format!(
        "Repository {APP}  Ready={}",
        ready.map_or("-", |c| or_dash(text(c, "/status")))
    );
    if let Some(c) = ready {
        if text(c, "/status") != "True" {
            line.push_str(&format!(
                "  {}: {}",
                text(c, "/reason"),
                truncate(text(c, "/message"), 160)
            ));
        }
    }
    let revisions: Vec<String> = repo
        .pointer("/status/lastFetchedRevision")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .map(|r| {
            let sha = text(r, "/revision");
            format!("{}@{}", text(r, "/ref"), sha.get(..7).unwrap_or(sha))
        })
        .collect();
    if !revisions.is_empty() {
        line.push_str(&format!("  {}", revisions.join(" ")));
    }
    line
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

fn truncate(s: &str, max: usize) -> String {
    let s = s.replace('\n', " ");
    if s.chars().count() <= max {
        s
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

fn say(msg: &str) {
    println!("==> {msg}");
}

fn step(n: u32, msg: &str) {
    println!("==> [{n}/7] {msg}");
}

fn detail(msg: &str) {
    println!("    {msg}");
}

/// The last `n` lines of the file at `path`, headed by its name.
fn log_tail(path: &Path, n: usize) -> String {
    let content = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = content.lines().collect();
    let start = lines.len().saturating_sub(n);
    format!(
        "--- {} (last {} lines) ---\n{}",
        path.display(),
        lines.len() - start,
        lines[start..].join("\n")
    )
}

async fn client(kubeconfig: &Path) -> Result<Client> {
    let config = Kubeconfig::read_from(kubeconfig).context("the devcluster kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

/// Runs kubectl; `Err` with everything it printed when it fails.
async fn kubectl_ok(kubectl: &Kubectl, args: &[&str], stdin: Option<&str>) -> Result<String> {
    let out = kubectl.run_with_stdin(args, stdin).await;
    if out.success() {
        Ok(out.stdout)
    } else {
        bail!("{out}")
    }
}

/// Runs `git <args>` in `dir` with a fixed identity and no user configuration; returns stdout.
async fn git(dir: &Path, args: &[&str]) -> Result<String> {
    let mut cmd = Command::new("git");
    cmd.args(["-c", "user.name=Capstan Demo", "-c", "user.email=demo@capstan.dev"])
        .args(["-c", "commit.gpgsign=false", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let what = format!("git {}", args.join(" "));
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .map_err(|_| anyhow!("{what} did not finish within 60s"))?
        .with_context(|| format!("cannot run {what}"))?;
    if !out.status.success() {
        bail!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn copy_tree(from: &Path, to: &Path) -> Result<()> {
    fs::create_dir_all(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in fs::read_dir(from).with_context(|| format!("cannot read {}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target).with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}

fn read_yaml(path: &Path) -> Result<Value> {
    let content = fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    serde_saphyr::from_str(&content).with_context(|| format!("{} is not a YAML object", path.display()))
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str().with_context(|| format!("{} is not UTF-8", p.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_kubernetes() {
        assert_eq!(parse_duration("180").unwrap(), Duration::from_secs(180));
        assert_eq!(parse_duration("180s").unwrap(), Duration::from_secs(180));
        assert_eq!(parse_duration("3m").unwrap(), Duration::from_secs(180));
        assert_eq!(parse_duration("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert!(parse_duration("3 minutes").is_err());
        assert!(parse_duration("s").is_err());
    }
}
