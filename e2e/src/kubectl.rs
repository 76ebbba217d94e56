//! Running the real `kubectl`.
//!
//! `kubectl` on PATH is the google-cloud-sdk dispatcher: it asks `/version` for the server's minor version
//! and runs `kubectl.1.<minor>`, so devcluster reporting minor 32 is what makes these tests exercise
//! kubectl 1.32 (protobuf creates, aggregated discovery v2). `CAPSTAN_E2E_KUBECTL` overrides the binary.
//!
//! Every invocation gets `--kubeconfig` and a private `--cache-dir`: kubectl caches discovery on disk per
//! host:port, and a cache shared between tests (or left from an earlier devcluster on the same port)
//! would hide discovery bugs and make CRD tests order-dependent.

use std::{
    fmt,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};

/// Longest a single kubectl command may run before it is killed and the test fails.
pub const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// How to run kubectl against one cluster.
#[derive(Debug, Clone)]
pub struct Kubectl {
    binary: PathBuf,
    kubeconfig: PathBuf,
    cache_dir: PathBuf,
}

/// The outcome of one kubectl run.
#[derive(Debug, Clone)]
pub struct KubectlOutput {
    /// The arguments after the `--kubeconfig`/`--cache-dir` prefix, for messages.
    pub args: Vec<String>,
    /// The exit code; `None` if kubectl was killed by a signal.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl KubectlOutput {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }
}

impl fmt::Display for KubectlOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "kubectl {} (exit code {:?})", self.args.join(" "), self.code)?;
        writeln!(f, "--- stdout ---\n{}", self.stdout)?;
        write!(f, "--- stderr ---\n{}", self.stderr)
    }
}

impl Kubectl {
    /// kubectl for the cluster in `kubeconfig`, caching discovery under `cache_dir`.
    pub fn new(kubeconfig: impl Into<PathBuf>, cache_dir: impl Into<PathBuf>) -> Self {
        let binary = std::env::var_os("CAPSTAN_E2E_KUBECTL").map_or_else(|| PathBuf::from("kubectl"), PathBuf::from);
        Self {
            binary,
            kubeconfig: kubeconfig.into(),
            cache_dir: cache_dir.into(),
        }
    }

    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A `Command` with the cluster flags set, for callers that need more control (env, cwd).
    pub fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.binary);
        cmd.arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .arg("--cache-dir")
            .arg(&self.cache_dir)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        cmd
    }

    /// Runs kubectl to completion (killed after [`KUBECTL_TIMEOUT`]) and returns what it printed.
    pub async fn run(&self, args: &[&str]) -> KubectlOutput {
        self.run_with_stdin(args, None).await
    }

    /// Runs kubectl with `stdin` piped in, as in `kubectl apply -f -`.
    pub async fn run_with_stdin(&self, args: &[&str], stdin: Option<&str>) -> KubectlOutput {
        let mut cmd = self.command(args);
        if stdin.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", self.binary));
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            let input = input.to_owned();
            // A separate task, so a large manifest cannot deadlock against kubectl's full stdout pipe.
            tokio::spawn(async move {
                let _ = pipe.write_all(input.as_bytes()).await;
            });
        }
        let output = match tokio::time::timeout(KUBECTL_TIMEOUT, child.wait_with_output()).await {
            Ok(output) => output.expect("kubectl's output can be read"),
            // Dropping the future drops the child, and kill_on_drop kills it.
            Err(_) => panic!("kubectl {} did not finish within {KUBECTL_TIMEOUT:?}", args.join(" ")),
        };
        KubectlOutput {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            code: output.status.code(),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }

    /// Runs kubectl, asserts it succeeded (printing everything if not), and returns its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        expect_success(self.run(args).await)
    }

    /// [`Kubectl::ok`] with `stdin` piped in.
    pub async fn ok_with_stdin(&self, args: &[&str], stdin: &str) -> String {
        expect_success(self.run_with_stdin(args, Some(stdin)).await)
    }

    /// Runs kubectl and asserts it failed; returns the output so the caller can check the message.
    pub async fn fails(&self, args: &[&str]) -> KubectlOutput {
        let out = self.run(args).await;
        assert!(!out.success(), "expected kubectl to fail, but it succeeded:\n{out}");
        out
    }

    /// [`Kubectl::fails`] with `stdin` piped in.
    pub async fn fails_with_stdin(&self, args: &[&str], stdin: &str) -> KubectlOutput {
        let out = self.run_with_stdin(args, Some(stdin)).await;
        assert!(!out.success(), "expected kubectl to fail, but it succeeded:\n{out}");
        out
    }

    /// Starts a long-running kubectl (`get -w`, `logs -f`) whose stdout is read line by line.
    pub fn spawn_lines(&self, args: &[&str]) -> KubectlWatch {
        let mut child = self
            .command(args)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run {:?}: {e}", self.binary));
        let stdout = child.stdout.take().expect("stdout is piped");
        let stderr = Arc::new(Mutex::new(String::new()));
        if let Some(mut pipe) = child.stderr.take() {
            let sink = Arc::clone(&stderr);
            tokio::spawn(async move {
                let mut buf = String::new();
                let _ = pipe.read_to_string(&mut buf).await;
                sink.lock().expect("stderr buffer").push_str(&buf);
            });
        }
        KubectlWatch {
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            child,
            lines: BufReader::new(stdout).lines(),
            seen: Vec::new(),
            stderr,
        }
    }
}

fn expect_success(out: KubectlOutput) -> String {
    assert!(out.success(), "kubectl failed:\n{out}");
    out.stdout
}

/// A running kubectl whose output is consumed line by line with deadlines. Killed when dropped.
#[derive(Debug)]
pub struct KubectlWatch {
    args: Vec<String>,
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    seen: Vec<String>,
    stderr: Arc<Mutex<String>>,
}

impl KubectlWatch {
    /// Reads lines until one satisfies `matches` and returns it. Panics, showing every line seen and
    /// kubectl's stderr, if none does within `timeout` or kubectl exits first.
    pub async fn wait_for_line(&mut self, timeout: Duration, matches: impl Fn(&str) -> bool) -> String {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.lines.next_line()).await {
                Ok(Ok(Some(line))) => {
                    self.seen.push(line.clone());
                    if matches(&line) {
                        return line;
                    }
                }
                Ok(Ok(None)) => self.fail("kubectl exited before printing the expected line"),
                Ok(Err(e)) => self.fail(&format!("reading kubectl's output failed: {e}")),
                Err(_) => self.fail(&format!("no matching line within {timeout:?}")),
            }
        }
    }

    /// Every line read so far.
    pub fn seen(&self) -> &[String] {
        &self.seen
    }

    fn fail(&self, why: &str) -> ! {
        panic!(
            "kubectl {}: {why}\n--- lines seen ---\n{}\n--- stderr ---\n{}",
            self.args.join(" "),
            self.seen.join("\n"),
            self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
        )
    }

    /// Stops kubectl now (also done on drop).
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}
