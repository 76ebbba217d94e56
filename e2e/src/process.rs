//! Long-running child processes for end-to-end tests: the `devcluster` and `capstan` binaries, git
//! servers. Output is captured line by line so tests can wait for readiness lines with a deadline and
//! show the whole log when something fails. Children are killed when dropped.

use std::{
    path::PathBuf,
    process::{ExitStatus, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncRead, BufReader},
    process::{Child, Command},
    sync::mpsc,
};

use crate::{kubectl::Kubectl, wait::within};

/// A workspace binary (`devcluster`, `capstan`) next to the running test executable.
///
/// Cargo puts test executables in `target/<profile>/deps/` and binaries in `target/<profile>/`.
/// `cargo test -p capstan-e2e` does not build other packages' binaries: `make test` and `make e2e`
/// run `cargo build --bins` first.
pub fn workspace_binary(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executables live in target/<profile>/deps");
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build it first (`cargo build --workspace --bins`, or `make e2e`)",
        path.display()
    );
    path
}

/// A child process whose stdout and stderr lines are collected as they arrive.
pub struct BackgroundProcess {
    name: String,
    child: Child,
    lines: mpsc::UnboundedReceiver<String>,
    log: Arc<Mutex<Vec<String>>>,
}

impl BackgroundProcess {
    /// Spawns `cmd` with piped output; `name` labels it in failure messages.
    pub fn spawn(name: &str, mut cmd: Command) -> Self {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let (tx, lines) = mpsc::unbounded_channel();
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            forward(out, tx.clone(), Arc::clone(&log));
        }
        if let Some(err) = child.stderr.take() {
            forward(err, tx, Arc::clone(&log));
        }
        Self {
            name: name.to_owned(),
            child,
            lines,
            log,
        }
    }

    /// Waits for an output line (stdout or stderr) that satisfies `matches`, and returns it.
    pub async fn wait_for_line(&mut self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        let what = format!("{} to print the expected line", self.name);
        let found = within(&what, timeout, async {
            while let Some(line) = self.lines.recv().await {
                if matches(&line) {
                    return Some(line);
                }
            }
            None
        })
        .await;
        found.unwrap_or_else(|| panic!("{} exited first; its output:\n{}", self.name, self.output()))
    }

    /// Everything the process printed so far.
    pub fn output(&self) -> String {
        self.log.lock().map(|l| l.join("\n")).unwrap_or_default()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the process is still running")
    }

    /// Sends SIGKILL and waits (bounded) for the process to exit, as a crash would end it.
    pub async fn kill(mut self, timeout: Duration) -> ExitStatus {
        self.child.start_kill().expect("SIGKILL can be delivered");
        let what = format!("{} to exit after SIGKILL", self.name);
        within(&what, timeout, self.child.wait())
            .await
            .expect("wait for the child")
    }

    /// Sends SIGTERM and waits (bounded) for the process to exit.
    pub async fn terminate(mut self, timeout: Duration) -> ExitStatus {
        let pid = self.child.id().expect("the process is still running");
        let sent = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .await
            .expect("kill(1) runs");
        assert!(sent.success(), "SIGTERM could not be delivered to {}", self.name);
        let what = format!("{} to exit after SIGTERM", self.name);
        within(&what, timeout, self.child.wait())
            .await
            .expect("wait for the child")
    }
}

fn forward(
    pipe: impl AsyncRead + Unpin + Send + 'static,
    tx: mpsc::UnboundedSender<String>,
    log: Arc<Mutex<Vec<String>>>,
) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut log) = log.lock() {
                log.push(line.clone());
            }
            let _ = tx.send(line);
        }
    });
}

/// The `devcluster` binary running as a process, as `make demo` and the operator e2e tests use it.
pub struct DevClusterProcess {
    pub process: BackgroundProcess,
    pub url: String,
    pub kubectl: Kubectl,
    _dir: tempfile::TempDir,
}

impl DevClusterProcess {
    /// Starts `devcluster --listen 127.0.0.1:0 --kubeconfig-out <tmp>` and waits for its ready line.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// [`DevClusterProcess::start`] with extra flags (`--insecure-http`, `--tls-cert-dir DIR`, ...).
    pub async fn start_with(extra: &[&str]) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-devcluster-")
            .tempdir()
            .expect("a temporary directory");
        let kubeconfig = dir.path().join("kubeconfig");
        let mut cmd = Command::new(workspace_binary("devcluster"));
        cmd.args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .args(extra);
        let mut process = BackgroundProcess::spawn("devcluster", cmd);
        let ready = process
            .wait_for_line(crate::TIMEOUT, |l| l.starts_with("devcluster ready: "))
            .await;
        let url = ready.trim_start_matches("devcluster ready: ").trim().to_owned();
        let kubectl = Kubectl::new(kubeconfig, dir.path().join("kubectl-cache"));
        Self {
            process,
            url,
            kubectl,
            _dir: dir,
        }
    }
}

impl DevClusterProcess {
    /// The server for raw requests, as the admin user of its kubeconfig.
    pub fn endpoint(&self) -> crate::raw_http::Endpoint {
        crate::raw_http::Endpoint::from_kubeconfig(self.kubectl.kubeconfig())
    }
}
