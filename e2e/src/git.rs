//! Real Git servers on loopback for the Repository end-to-end tests, adapted from
//! `operator/src/source/testsupport.rs`: upstream bare repositories (built with the `git` CLI),
//! `git daemon`, smart HTTP (`git http-backend` behind a small Python server with basic auth),
//! `sshd` with a generated host key and user key, and a tarpit that accepts and never answers.
//!
//! Every server binds 127.0.0.1 on a free port, is killed (and reaped) on drop, and every wait is
//! bounded. Commands are argv lists; nothing goes through a shell.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long any server may take to start accepting connections.
const STARTUP: Duration = Duration::from_secs(15);

/// The sshd binary the SSH tests need (Debian's openssh-server; `.ci/run` installs it).
pub const SSHD: &str = "/usr/sbin/sshd";

/// A free TCP port on 127.0.0.1 (released before use; the tiny race is acceptable in tests).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

/// Waits until `port` accepts TCP connections or `child` exits, at most [`STARTUP`].
fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + STARTUP;
    while Instant::now() < until {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port} within {STARTUP:?}");
}

/// Runs `git` with a fixed identity and no user or system configuration; panics on failure.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Capstan Test", "-c", "user.email=test@capstan.dev"])
        .args(["-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .stdin(Stdio::null())
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} failed in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Upstream bare repositories `<base>/<name>.git`, each with a working clone for commits.
pub struct Upstream {
    dir: TempDir,
}

impl Default for Upstream {
    fn default() -> Self {
        Self::new()
    }
}

impl Upstream {
    /// An empty base directory.
    pub fn new() -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-upstream-")
            .tempdir()
            .expect("tempdir");
        std::fs::create_dir_all(dir.path().join("srv")).expect("srv");
        Upstream { dir }
    }

    /// The directory servers export (`<base>/<name>.git` are the repositories).
    pub fn base(&self) -> PathBuf {
        self.dir.path().join("srv")
    }

    /// The bare repository `name`.
    pub fn path(&self, name: &str) -> PathBuf {
        self.base().join(format!("{name}.git"))
    }

    fn work(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("work-{name}"))
    }

    /// Creates bare repository `name` (default branch `main`) with one commit; returns its SHA.
    pub fn create(&self, name: &str) -> String {
        let bare = self.path(name);
        git(
            &self.base(),
            &["init", "-q", "--bare", bare.to_str().expect("utf-8 path")],
        );
        git(
            self.dir.path(),
            &["clone", "-q", bare.to_str().expect("utf-8"), &format!("work-{name}")],
        );
        git(&self.work(name), &["checkout", "-q", "-B", "main"]);
        std::fs::write(self.work(name).join("README.md"), format!("# {name}\n")).expect("write");
        git(&self.work(name), &["add", "-A"]);
        self.commit(name, "initial")
    }

    /// Commits (an empty commit is fine) on `main` of `name`, pushes, and returns the new SHA.
    pub fn commit(&self, name: &str, message: &str) -> String {
        let work = self.work(name);
        git(&work, &["commit", "-q", "--allow-empty", "-m", message]);
        git(&work, &["push", "-q", "origin", "HEAD:refs/heads/main"]);
        git(&work, &["rev-parse", "HEAD"])
    }
}

/// A child process killed (and reaped) on drop.
pub struct Server {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    _dir: Option<TempDir>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `git --exec-path`: where git's helper programs live.
fn git_exec_path() -> PathBuf {
    PathBuf::from(git(Path::new("/"), &["--exec-path"]))
}

/// `git daemon` serving `base` over `git://127.0.0.1:<port>/<name>.git`.
pub fn git_daemon(base: &Path) -> Server {
    let port = free_port();
    // Run git-daemon itself: `git daemon` forks it as a child that would outlive a killed `git`.
    let mut child = Command::new(git_exec_path().join("git-daemon"))
        .args([
            "--export-all",
            "--reuseaddr",
            "--informative-errors",
            "--listen=127.0.0.1",
        ])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(base)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn git daemon");
    wait_for_port(port, &mut child, "git daemon");
    Server {
        child,
        port,
        _dir: None,
    }
}

const HTTP_SERVER_PY: &str = r#"
import base64, os, subprocess, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
port, root, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
expected = "Basic " + base64.b64encode((user + ":" + password).encode()).decode()
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        self.git()
    def do_POST(self):
        self.git()
    def git(self):
        if self.headers.get("Authorization", "") != expected:
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        env = {"PATH": os.environ.get("PATH", ""), "GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_USER": user, "REMOTE_ADDR": "127.0.0.1", "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
        p = subprocess.run(["git", "http-backend"], input=body, env=env, capture_output=True, timeout=30)
        sep = b"\r\n\r\n" if b"\r\n\r\n" in p.stdout else b"\n\n"
        head, _, payload = p.stdout.partition(sep)
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            k, _, v = line.partition(":")
            if not k:
                continue
            if k.lower() == "status":
                status = int(v.split()[0])
            else:
                headers.append((k, v.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"#;

/// Smart HTTP on `http://127.0.0.1:<port>/<name>.git` requiring basic auth `user:password`.
///
/// The password travels on the server's argv: only the test's own process tree can see it, and
/// the operator never does (it reads it from a Secret).
pub fn http_server(base: &Path, user: &str, password: &str) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("server.py");
    std::fs::File::create(&script)
        .and_then(|mut f| f.write_all(HTTP_SERVER_PY.as_bytes()))
        .expect("script");
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(port.to_string())
        .arg(base)
        .arg(user)
        .arg(password)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python http server");
    wait_for_port(port, &mut child, "http server");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

/// An sshd on loopback with a fresh host key and one authorized user key.
pub struct Sshd {
    /// The server process.
    pub server: Server,
    /// known_hosts line for this server.
    pub known_hosts: String,
    /// known_hosts line for this address with a different key (a host that is not this one).
    pub wrong_known_hosts: String,
    /// The authorized private key (OpenSSH format).
    pub user_key: String,
    /// The login name.
    pub user: String,
}

fn keygen(dir: &Path, name: &str) -> (String, String) {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "capstan-test", "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen");
    assert!(status.success(), "ssh-keygen failed");
    let private = std::fs::read_to_string(&path).expect("read key");
    let public = std::fs::read_to_string(path.with_extension("pub")).expect("read pub");
    (private, public)
}

/// Whether the SSH tests can run here.
pub fn sshd_available() -> bool {
    Path::new(SSHD).exists()
}

/// Starts sshd (Debian openssh-server) as the current user on a free port.
pub fn sshd() -> Sshd {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_, host_pub) = keygen(d, "host_ed25519");
    let (_, other_host_pub) = keygen(d, "other_host_ed25519");
    let (user_key, user_pub) = keygen(d, "user_ed25519");
    std::fs::write(d.join("authorized_keys"), user_pub).expect("authorized_keys");
    let _ = std::fs::create_dir_all("/run/sshd");
    let port = free_port();
    let config = format!(
        "Port {port}\nListenAddress 127.0.0.1\nHostKey {hk}\nPidFile {pid}\nAuthorizedKeysFile {ak}\n\
         StrictModes no\nPasswordAuthentication no\nKbdInteractiveAuthentication no\nPubkeyAuthentication yes\n\
         UsePAM no\nPermitRootLogin prohibit-password\nLogLevel ERROR\n",
        hk = d.join("host_ed25519").display(),
        pid = d.join("sshd.pid").display(),
        ak = d.join("authorized_keys").display(),
    );
    std::fs::write(d.join("sshd_config"), config).expect("config");
    let mut child = Command::new(SSHD)
        .args(["-D", "-e", "-f"])
        .arg(d.join("sshd_config"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn sshd");
    wait_for_port(port, &mut child, "sshd");
    let line = |public: &str| {
        let mut fields = public.split_whitespace();
        let (kind, key) = (fields.next().unwrap_or_default(), fields.next().unwrap_or_default());
        format!("[127.0.0.1]:{port} {kind} {key}\n")
    };
    let user = std::env::var("USER").unwrap_or_else(|_| "root".into());
    Sshd {
        known_hosts: line(&host_pub),
        wrong_known_hosts: line(&other_host_pub),
        server: Server {
            child,
            port,
            _dir: Some(dir),
        },
        user_key,
        user,
    }
}

/// Accepts TCP connections and never answers. Stops (and drops the connections) on drop.
pub struct Tarpit {
    /// The port it listens on.
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Tarpit {
    /// Starts the tarpit.
    pub fn start() -> Tarpit {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            while !flag.load(Ordering::Relaxed) {
                if let Ok((conn, _)) = listener.accept() {
                    held.push(conn);
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Tarpit {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Tarpit {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
