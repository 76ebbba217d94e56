//! A real etcd (Debian's `etcd-server`, installed by `.ci/run`) for devcluster's `--etcd` storage.
//!
//! Each [`EtcdServer`] is a single-member cluster of its own on two free loopback ports with a temporary
//! data directory (in `/dev/shm` when there is one: a tmpfs makes etcd's fsyncs free, which keeps a test's
//! etcd cheap). It is stopped by its PID when dropped, and can be killed and started again on the same
//! directory and ports to test an outage. Set `CAPSTAN_E2E_ETCD=1` to run every [`crate::TestCluster`]
//! on one (how `make test` runs the conformance suites a second time).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use capstan::source::testsupport::free_port;
use tempfile::TempDir;

/// The variable that puts every `TestCluster` on an etcd of its own.
pub const ETCD_ENV: &str = "CAPSTAN_E2E_ETCD";

/// How long etcd may take to become healthy.
const STARTUP: Duration = Duration::from_secs(20);

/// Whether `CAPSTAN_E2E_ETCD` asks for etcd storage.
pub fn requested() -> bool {
    std::env::var(ETCD_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// A running etcd, killed (by PID) when dropped.
pub struct EtcdServer {
    child: Option<Child>,
    dir: TempDir,
    client_port: u16,
    peer_port: u16,
}

impl EtcdServer {
    /// Starts an etcd on free loopback ports and waits until it reports healthy.
    pub fn start() -> Self {
        let shm = PathBuf::from("/dev/shm");
        let parent = if shm.is_dir() { shm } else { std::env::temp_dir() };
        Self::start_in(&parent)
    }

    /// Like [`EtcdServer::start`], with the data directory under `parent` (the benchmark keeps it on disk, so
    /// every commit pays for its fsync as in a real cluster).
    pub fn start_in(parent: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-etcd-")
            .tempdir_in(parent)
            .expect("a temporary directory for etcd");
        let mut server = Self {
            child: None,
            dir,
            client_port: free_port(),
            peer_port: free_port(),
        };
        server.resume();
        server
    }

    /// `http://127.0.0.1:PORT`, for devcluster's `--etcd`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    /// The etcd process's id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("etcd.log")
    }

    /// Everything etcd logged.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Kills etcd (SIGKILL, no chance to flush anything) and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts etcd again on the same data directory and ports, and waits until it is healthy.
    pub fn resume(&mut self) {
        assert!(self.child.is_none(), "etcd is already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("etcd's log file");
        let (client, peer) = (self.url(), format!("http://127.0.0.1:{}", self.peer_port));
        let mut cmd = Command::new("etcd");
        cmd.args(["--name", "capstan-test", "--data-dir"])
            .arg(self.dir.path().join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("capstan-test={peer}")])
            .args(["--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd's log file"))
            .stderr(log);
        let child = cmd.spawn().unwrap_or_else(|e| {
            panic!("cannot start etcd ({e}): install Debian's etcd-server (`.ci/run` does) to run the etcd tests")
        });
        self.child = Some(child);
        self.wait_healthy();
    }

    fn wait_healthy(&mut self) {
        let until = Instant::now() + STARTUP;
        while Instant::now() < until {
            if let Some(Ok(Some(status))) = self.child.as_mut().map(Child::try_wait) {
                panic!("etcd exited during startup ({status}); its log:\n{}", self.log());
            }
            if health(self.client_port) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("etcd was not healthy within {STARTUP:?}; its log:\n{}", self.log());
    }

    /// Runs the real `etcdctl` against this etcd.
    pub fn etcdctl(&self, args: &[&str]) -> Output {
        Command::new("etcdctl")
            .env("ETCDCTL_API", "3")
            .args(["--endpoints", &self.url(), "--dial-timeout=2s", "--command-timeout=5s"])
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run etcdctl ({e}): install Debian's etcd-client (`.ci/run` does)"))
    }

    /// Runs `etcdctl` and returns its stdout, asserting success.
    pub fn etcdctl_ok(&self, args: &[&str]) -> String {
        let out = self.etcdctl(args);
        assert!(
            out.status.success(),
            "etcdctl {args:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The store's current revision (`etcdctl endpoint status`).
    pub fn revision(&self) -> u64 {
        let out = self.etcdctl_ok(&["endpoint", "status", "--write-out", "json"]);
        let v: serde_json::Value = serde_json::from_str(&out).expect("etcdctl prints JSON");
        v[0]["Status"]["header"]["revision"]
            .as_u64()
            .expect("a revision in etcdctl's status")
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether etcd's `/health` answers `"health":"true"`.
fn health(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let req = format!("GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.contains("\"health\":\"true\"")
}
