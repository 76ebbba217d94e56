//! Real git servers on loopback for the source tests: a fixture repository, `git daemon`,
//! smart HTTP (`git http-backend` behind a small Python server with basic or bearer auth), `sshd`
//! and a tarpit. Every server binds 127.0.0.1 on a free port, is killed on drop, and every wait is
//! bounded. Commands are argv lists; nothing goes through a shell.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// How long any server may take to start accepting connections.
const STARTUP: Duration = Duration::from_secs(10);

/// Ports handed out by [`free_port`]: below Linux's ephemeral range (32768–60999), so that neither
/// `bind(0)` nor an outgoing connection of any process can take one between the check and its use.
const TEST_PORTS: std::ops::Range<u16> = 20_000..32_000;

/// A free TCP port on 127.0.0.1, never the same one twice in this process.
///
/// The port is released before use. Drawing from the kernel's ephemeral range once gave a test the
/// same port for `--metrics-addr` and `--webhook-addr`, and any outgoing connection may occupy an
/// ephemeral port too; so ports come from [`TEST_PORTS`], starting at a per-process pseudo-random
/// offset (tests run as parallel processes), each checked bindable and remembered.
pub fn free_port() -> u16 {
    static NEXT: std::sync::Mutex<Option<u16>> = std::sync::Mutex::new(None);
    let mut next = NEXT.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let span = TEST_PORTS.end - TEST_PORTS.start;
    let mut offset = next.unwrap_or_else(|| process_seed() % span);
    for _ in 0..span {
        let port = TEST_PORTS.start + offset;
        offset = (offset + 1) % span;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            *next = Some(offset);
            return port;
        }
    }
    panic!("no free loopback port in {TEST_PORTS:?}");
}

/// A number that differs between concurrently running test processes.
fn process_seed() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    (hasher.finish() % u64::from(u16::MAX)) as u16
}

/// Waits until `port` accepts TCP connections or `child` exits, at most [`STARTUP`].
fn wait_for_port(port: u16, child: &mut Child, what: &str) {
    wait_for_addr([127, 0, 0, 1], port, child, what);
}

fn wait_for_addr(host: [u8; 4], port: u16, child: &mut Child, what: &str) {
    let until = Instant::now() + STARTUP;
    while Instant::now() < until {
        if TcpStream::connect_timeout(&(host, port).into(), Duration::from_millis(200)).is_ok() {
            return;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("{what} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("{what} did not listen on {port} within {STARTUP:?}");
}

/// A child process killed (and reaped) on drop.
pub struct Server {
    child: Child,
    /// The port it listens on.
    pub port: u16,
    _dir: Option<TempDir>,
}

/// The request log of the smart-HTTP servers, in their private directory.
const REQUEST_LOG: &str = "requests.log";

impl Server {
    /// The smart-HTTP server's requests so far, one `METHOD /path want|-` line each (`want`: the
    /// request asked for objects, i.e. a fetch); empty for other servers.
    pub fn requests(&self) -> Vec<String> {
        self._dir
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.path().join(REQUEST_LOG)).ok())
            .map(|log| log.lines().map(str::to_string).collect())
            .unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An upstream bare repository with known history:
/// `main`: c1 → c2 (HEAD), `feature`: c1 → f1, tags `v1` (lightweight → c1) and `v2` (annotated → c2).
pub struct Fixture {
    /// Keeps the directory alive.
    pub _dir: TempDir,
    /// Base path served by daemons (`<dir>/srv`).
    pub base: PathBuf,
    /// `<base>/repo.git`.
    pub repo_path: PathBuf,
    /// c1, c2, f1.
    pub c1: git2::Oid,
    /// Tip of main.
    pub c2: git2::Oid,
    /// Tip of feature.
    pub f1: git2::Oid,
}

impl Default for Fixture {
    fn default() -> Self {
        Self::new()
    }
}

impl Fixture {
    /// Builds the fixture with git2 (no git CLI needed for content).
    pub fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tempdir");
        let base = dir.path().join("srv");
        let repo_path = base.join("repo.git");
        let repo = git2::Repository::init_bare(&repo_path).expect("init");
        let c1 = commit(
            &repo,
            "refs/heads/main",
            &[],
            &[("app/cm.yaml", "kind: ConfigMap\n")],
            "c1",
        );
        let c2 = commit(
            &repo,
            "refs/heads/main",
            &[c1],
            &[("app/cm.yaml", "kind: ConfigMap\ndata: {a: b}\n")],
            "c2",
        );
        let f1 = commit(&repo, "refs/heads/feature", &[c1], &[("feature.txt", "f\n")], "f1");
        repo.reference("refs/tags/v1", c1, true, "tag").expect("tag v1");
        let sig = git2::Signature::now("Test", "test@example.com").expect("sig");
        let obj = repo.find_object(c2, None).expect("c2");
        repo.tag("v2", &obj, &sig, "release v2", true).expect("tag v2");
        repo.set_head("refs/heads/main").expect("head");
        Fixture {
            _dir: dir,
            base,
            repo_path,
            c1,
            c2,
            f1,
        }
    }

    /// Opens the upstream repository.
    pub fn repo(&self) -> git2::Repository {
        git2::Repository::open_bare(&self.repo_path).expect("open")
    }

    /// `file://` URL of the upstream.
    pub fn file_url(&self) -> String {
        format!("file://{}", self.repo_path.display())
    }
}

/// Commits `files` on top of `parents` and moves `refname` there.
pub fn commit(
    repo: &git2::Repository,
    refname: &str,
    parents: &[git2::Oid],
    files: &[(&str, &str)],
    msg: &str,
) -> git2::Oid {
    let tree = build_tree(repo, files);
    let sig = git2::Signature::now("Test", "test@example.com").expect("sig");
    let parents: Vec<git2::Commit<'_>> = parents.iter().map(|p| repo.find_commit(*p).expect("parent")).collect();
    let parent_refs: Vec<&git2::Commit<'_>> = parents.iter().collect();
    let tree = repo.find_tree(tree).expect("tree");
    let oid = repo.commit(None, &sig, &sig, msg, &tree, &parent_refs).expect("commit");
    repo.reference(refname, oid, true, msg).expect("ref");
    oid
}

/// Builds a tree from `path → content` (paths of any depth, `/`-separated).
pub fn build_tree(repo: &git2::Repository, files: &[(&str, &str)]) -> git2::Oid {
    /// A directory: subdirectories and files.
    #[derive(Default)]
    struct Dir<'a>(BTreeMap<&'a str, Dir<'a>>, BTreeMap<&'a str, &'a str>);
    fn write(repo: &git2::Repository, dir: &Dir<'_>) -> git2::Oid {
        let mut tb = repo.treebuilder(None).expect("tb");
        for (name, content) in &dir.1 {
            let blob = repo.blob(content.as_bytes()).expect("blob");
            tb.insert(name, blob, 0o100644).expect("insert");
        }
        for (name, sub) in &dir.0 {
            tb.insert(name, write(repo, sub), 0o040000).expect("insert dir");
        }
        tb.write().expect("write tree")
    }
    let mut root = Dir::default();
    for (path, content) in files {
        let mut parts: Vec<&str> = path.split('/').collect();
        let file = parts.pop().expect("file name");
        let dir = parts
            .into_iter()
            .fold(&mut root, |cur, part| cur.0.entry(part).or_default());
        dir.1.insert(file, content);
    }
    write(repo, &root)
}

/// `git daemon` serving `base` over git://.
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

/// `git --exec-path`: where git's helper programs live.
fn git_exec_path() -> PathBuf {
    let out = Command::new("git")
        .arg("--exec-path")
        .stdin(Stdio::null())
        .output()
        .expect("git --exec-path");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// How the HTTP server authenticates.
pub enum HttpAuth<'a> {
    /// `Authorization: Basic base64(user:password)`.
    Basic(&'a str, &'a str),
    /// `Authorization: Bearer <token>`.
    Bearer(&'a str),
}

const HTTP_SERVER_PY: &str = r#"
import base64, os, ssl, subprocess, sys
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
port, root, mode, secret = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
tls = sys.argv[5:8]
expected = ("Basic " + base64.b64encode(secret.encode()).decode()) if mode == "basic" else ("Bearer " + secret)
class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        self.git()
    def do_POST(self):
        self.git()
    def git(self):
        elsewhere = os.environ.get("CAPSTAN_TEST_ELSEWHERE")
        if elsewhere and self.path.startswith("/elsewhere/"):
            self.send_response(302)
            self.send_header("Location", elsewhere + self.path[len("/elsewhere"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.path.startswith("/moved/"):
            self.send_response(301)
            self.send_header("Location", self.path[len("/moved"):])
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if self.headers.get("Authorization", "") != expected:
            self.send_response(401)
            if mode == "basic":
                self.send_header("WWW-Authenticate", 'Basic realm="git"')
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        path, _, query = self.path.partition("?")
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        log = os.environ.get("CAPSTAN_TEST_REQUEST_LOG")
        if log:
            # One line per request: method, path, and whether it asked for objects (a fetch).
            with open(log, "a") as f:
                f.write("%s %s %s\n" % (self.command, path, "want" if b"want " in body else "-"))
        env = {"PATH": os.environ.get("PATH", ""), "GIT_PROJECT_ROOT": root, "GIT_HTTP_EXPORT_ALL": "1",
               "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
               "CONTENT_TYPE": self.headers.get("Content-Type", ""), "CONTENT_LENGTH": str(len(body)),
               "REMOTE_USER": "test", "REMOTE_ADDR": "127.0.0.1", "GIT_PROTOCOL": self.headers.get("Git-Protocol", "")}
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
server = ThreadingHTTPServer((os.environ.get("CAPSTAN_TEST_BIND", "127.0.0.1"), port), H)
if tls:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(tls[0], tls[1])
    if len(tls) > 2:
        ctx.verify_mode = ssl.CERT_REQUIRED
        ctx.load_verify_locations(tls[2])
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
server.serve_forever()
"#;

/// Smart HTTP on `http://127.0.0.1:<port>/<repo>` requiring `auth`.
pub fn http_server(base: &Path, auth: HttpAuth<'_>) -> Server {
    start_http(base, auth, None)
}

/// A test CA, a server certificate for IP 127.0.0.1 and a client certificate signed by it.
pub struct TestPki {
    /// CA certificate, PEM.
    pub ca_pem: String,
    /// CA certificate path.
    pub ca: PathBuf,
    /// Server certificate path.
    pub cert: PathBuf,
    /// Server key path.
    pub key: PathBuf,
    /// Client certificate (`CN=capstan`, clientAuth), PEM.
    pub client_cert_pem: String,
    /// Its private key (PKCS#8 EC P-256), PEM.
    pub client_key_pem: String,
    _dir: TempDir,
}

fn openssl(args: &[&str], dir: &Path) {
    let status = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success(), "openssl {args:?}");
}

/// Generates a CA, a server certificate and a client certificate with the openssl CLI.
pub fn test_pki(ca_name: &str) -> TestPki {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let subj = format!("/CN={ca_name}");
    openssl(
        &[
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", &subj,
        ],
        d,
    );
    let server_ext = "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
    issue(d, "srv", &["-newkey", "rsa:2048"], "/CN=127.0.0.1", server_ext);
    let client_ext = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";
    let ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"];
    issue(d, "client", &ec, "/CN=capstan", client_ext);
    let read = |f: &str| std::fs::read_to_string(d.join(f)).expect("read pki file");
    TestPki {
        ca_pem: read("ca.pem"),
        ca: d.join("ca.pem"),
        cert: d.join("srv.pem"),
        key: d.join("srv.key"),
        client_cert_pem: read("client.pem"),
        client_key_pem: read("client.key"),
        _dir: dir,
    }
}

/// `<name>.key` (made with `key_args`) and `<name>.pem` signed by `ca.pem`/`ca.key` in `d`, with `extensions`.
fn issue(d: &Path, name: &str, key_args: &[&str], subject: &str, extensions: &str) {
    let (key, csr, pem, ext) = (
        format!("{name}.key"),
        format!("{name}.csr"),
        format!("{name}.pem"),
        format!("{name}.cnf"),
    );
    let mut request = vec!["req"];
    request.extend_from_slice(key_args);
    request.extend_from_slice(&["-nodes", "-keyout", &key, "-out", &csr, "-subj", subject]);
    openssl(&request, d);
    std::fs::write(d.join(&ext), extensions).expect("extensions file");
    let sign = [
        "x509",
        "-req",
        "-in",
        &csr,
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        &pem,
        "-days",
        "2",
        "-extfile",
        &ext,
    ];
    openssl(&sign, d);
}

/// Smart HTTPS on `https://127.0.0.1:<port>/<repo>` with `pki`'s server certificate.
pub fn https_server(base: &Path, auth: HttpAuth<'_>, pki: &TestPki) -> Server {
    start_http(base, auth, Some((pki, false)))
}

/// As [`https_server`], and the TLS handshake requires a client certificate signed by `pki`'s CA.
pub fn mtls_server(base: &Path, auth: HttpAuth<'_>, pki: &TestPki) -> Server {
    start_http(base, auth, Some((pki, true)))
}

/// Plain HTTP on `http://<host>:<port>/<repo>`; `/elsewhere/<path>` answers 302 to `<elsewhere>/<path>`.
pub fn http_server_on(base: &Path, auth: HttpAuth<'_>, host: [u8; 4], elsewhere: Option<&str>) -> Server {
    start_http_with(base, auth, None, host, elsewhere)
}

/// Plain HTTP, HTTPS, or HTTPS requiring a client certificate (`(pki, true)`).
fn start_http(base: &Path, auth: HttpAuth<'_>, tls: Option<(&TestPki, bool)>) -> Server {
    start_http_with(base, auth, tls, [127, 0, 0, 1], None)
}

fn start_http_with(
    base: &Path,
    auth: HttpAuth<'_>,
    tls: Option<(&TestPki, bool)>,
    host: [u8; 4],
    elsewhere: Option<&str>,
) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let script = dir.path().join("server.py");
    std::fs::File::create(&script)
        .and_then(|mut f| f.write_all(HTTP_SERVER_PY.as_bytes()))
        .expect("script");
    let (mode, secret) = match auth {
        HttpAuth::Basic(u, p) => ("basic", format!("{u}:{p}")),
        HttpAuth::Bearer(t) => ("bearer", t.to_string()),
    };
    let port = free_port();
    let mut child = Command::new("python3")
        .arg(&script)
        .arg(port.to_string())
        .arg(base)
        .arg(mode)
        .arg(secret)
        .args(tls.map(tls_args).unwrap_or_default())
        .env("CAPSTAN_TEST_BIND", std::net::Ipv4Addr::from(host).to_string())
        .env("CAPSTAN_TEST_ELSEWHERE", elsewhere.unwrap_or_default())
        .env("CAPSTAN_TEST_REQUEST_LOG", dir.path().join(REQUEST_LOG))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn python http server");
    wait_for_addr(host, port, &mut child, "http server");
    Server {
        child,
        port,
        _dir: Some(dir),
    }
}

fn tls_args((pki, client_auth): (&TestPki, bool)) -> Vec<PathBuf> {
    let mut args = vec![pki.cert.clone(), pki.key.clone()];
    if client_auth {
        args.push(pki.ca.clone());
    }
    args
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
    /// A private key that is not authorized.
    pub other_key: String,
    /// The login name.
    pub user: String,
}

fn keygen(dir: &Path, name: &str, kind: &str) -> (String, String) {
    let path = dir.join(name);
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", kind, "-N", "", "-C", "capstan-test", "-f"])
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen");
    assert!(status.success());
    let private = std::fs::read_to_string(&path).expect("read key");
    let public = std::fs::read_to_string(path.with_extension("pub")).expect("read pub");
    (private, public)
}

/// The sshd binary the SSH tests need (Debian's openssh-server; `.ci/run` installs it).
pub const SSHD: &str = "/usr/sbin/sshd";

/// Whether the SSH tests can run here.
pub fn sshd_available() -> bool {
    Path::new(SSHD).exists()
}

/// Starts sshd (Debian openssh-server) as the current user on a free port.
pub fn sshd() -> Sshd {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    let (_, host_pub) = keygen(d, "host_ed25519", "ed25519");
    let (_, other_host_pub) = keygen(d, "other_host_ed25519", "ed25519");
    let (user_key, user_pub) = keygen(d, "user_ed25519", "ed25519");
    let (other_key, _) = keygen(d, "other_ed25519", "ed25519");
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
        server: Server {
            child,
            port,
            _dir: Some(dir),
        },
        known_hosts: line(&host_pub),
        wrong_known_hosts: line(&other_host_pub),
        user_key,
        other_key,
        user,
    }
}

/// A loopback listener whose accept loop runs on a thread until dropped.
pub struct AcceptLoop {
    /// The port it listens on.
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl AcceptLoop {
    /// Hands every accepted connection to `on_connection` (on the loop's thread) until dropped;
    /// whatever the handler keeps is dropped with it.
    pub fn start(mut on_connection: impl FnMut(TcpStream) + Send + 'static) -> AcceptLoop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let port = listener.local_addr().expect("addr").port();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            while !flag.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => on_connection(conn),
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        AcceptLoop {
            port,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for AcceptLoop {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accepts TCP connections and never answers. Stops (and drops the connections) on drop.
pub struct Tarpit {
    /// The port it listens on.
    pub port: u16,
    _server: AcceptLoop,
}

impl Tarpit {
    /// Starts the tarpit.
    pub fn start() -> Tarpit {
        let mut held = Vec::new();
        let server = AcceptLoop::start(move |conn| held.push(conn));
        Tarpit {
            port: server.port,
            _server: server,
        }
    }
}

/// Counts objects (loose and packed) in a bare repository.
pub fn object_count(repo_dir: &Path) -> usize {
    let Ok(repo) = git2::Repository::open_bare(repo_dir) else {
        return 0;
    };
    let Ok(odb) = repo.odb() else { return 0 };
    let mut n = 0;
    let _ = odb.foreach(|_| {
        n += 1;
        true
    });
    n
}

/// An HTTP CONNECT proxy on loopback that records every tunnel target. Stops on drop.
pub struct ConnectProxy {
    /// The accept loop (`server.port` is the proxy's port).
    pub server: AcceptLoop,
    /// `host:port` of every CONNECT it served.
    pub tunnels: Arc<std::sync::Mutex<Vec<String>>>,
}

impl ConnectProxy {
    /// Starts the proxy; each connection is served on its own thread.
    pub fn start() -> ConnectProxy {
        let tunnels = Arc::new(std::sync::Mutex::new(Vec::new()));
        let log = tunnels.clone();
        let server = AcceptLoop::start(move |conn| {
            let log = log.clone();
            std::thread::spawn(move || tunnel(conn, &log));
        });
        ConnectProxy { server, tunnels }
    }
}

/// Serves one CONNECT: reads the head (bounded), dials the target, then copies both ways.
fn tunnel(mut client: TcpStream, log: &std::sync::Mutex<Vec<String>>) {
    use std::io::Read;
    let _ = client.set_nonblocking(false);
    let _ = client.set_read_timeout(Some(Duration::from_secs(10)));
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") && head.len() < 8192 {
        match client.read(&mut byte) {
            Ok(1) => head.push(byte[0]),
            _ => return,
        }
    }
    let head = String::from_utf8_lossy(&head);
    let Some(target) = head.strip_prefix("CONNECT ").and_then(|r| r.split(' ').next()) else {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    log.lock().expect("log").push(target.to_string());
    let Ok(upstream) = TcpStream::connect(target) else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let _ = client.set_read_timeout(None);
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .is_err()
    {
        return;
    }
    let (mut c2, mut u2) = match (client.try_clone(), upstream.try_clone()) {
        (Ok(c), Ok(u)) => (c, u),
        _ => return,
    };
    let (mut client, mut upstream) = (client, upstream);
    let up = std::thread::spawn(move || {
        let _ = std::io::copy(&mut c2, &mut u2);
        let _ = u2.shutdown(std::net::Shutdown::Write);
    });
    let _ = std::io::copy(&mut upstream, &mut client);
    let _ = client.shutdown(std::net::Shutdown::Write);
    let _ = up.join();
}
