//! `make bench` — git sources on loopback and rendering (git-sources issue, item 7).
//!
//! Starts `git daemon` (git://) and smart HTTP (`git http-backend` run as a CGI by a tiny in-process HTTP/1.1
//! server, one backend process per request as a web server would) on 127.0.0.1 ephemeral ports, builds an
//! upstream repository of 500 YAML files, and measures through [`Git2Source`] (what the controllers use):
//! `ls_remote`, a fetch with nothing new, and the fetch of one new commit, for both transports. Then it
//! renders a 2,000-object directory (one multi-document file, and 2,000 files), a Kustomize overlay
//! (`kubectl kustomize`) and a Helm chart (`e2e/tools/helm`, the real Helm engine via helm-python-sdk),
//! each next to the bare tool run from the command line, so Capstan's own overhead is visible.
//!
//! CPU time: *client* is this process (libgit2, parsing, tokio), from `getrusage(RUSAGE_SELF)`; *server
//! and tools* is reaped child processes (`git http-backend`, `kubectl`, `helm`) from
//! `getrusage(RUSAGE_CHILDREN)`, plus `git daemon` and the upload-packs it forks, from its `/proc` stat.
//!
//! Not a test: nothing here asserts a time. Run with `cargo bench -p capstan --bench source_render`.
//! Figures go between the `source-render-bench` markers of docs/benchmarks.md; the rest is kept.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use capstan::render::{Binaries, KustomizeOptions, Limits, RenderRequest, Renderer, SourceOptions, Tool};
use capstan::source::git::{Git2Source, GitConfig};
use capstan::source::{Credentials, GitSource, RepoUrl, Revision};

#[path = "support/report.rs"]
mod report;
use report::{clock_ticks, command_line, date, loadavg, machine};

const LS_REMOTE_RUNS: usize = 50;
const FETCH_RUNS: usize = 20;
const CLONE_RUNS: usize = 5;
const RENDER_RUNS: usize = 10;
const REPO_FILES: usize = 500;
const DIR_OBJECTS: usize = 2_000;
const KUSTOMIZE_DEPLOYMENTS: usize = 100;
const HELM_COUNT: usize = 50;

const START: &str = "<!-- source-render-bench:start -->";
const END: &str = "<!-- source-render-bench:end -->";

// ------------------------------------------------------------------------------------------------
// CPU accounting

fn rusage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage writes into the zeroed struct we own; `who` is RUSAGE_SELF or RUSAGE_CHILDREN.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(who, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// utime + stime + cutime + cstime of a process (the daemon and the children it reaped).
fn proc_cpu(pid: u32) -> Duration {
    let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return Duration::ZERO;
    };
    let Some(close) = s.rfind(')') else {
        return Duration::ZERO;
    };
    let f: Vec<u64> = s[close + 1..]
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // After the comm, field 3 (state) is index 0: utime 14, stime 15, cutime 16, cstime 17.
    let ticks: u64 = f.get(11..15).map(|v| v.iter().sum()).unwrap_or(0);
    Duration::from_secs_f64(ticks as f64 / clock_ticks())
}

#[derive(Clone, Copy, Default)]
struct CpuMark {
    me: Duration,
    children: Duration,
    daemon: Duration,
}

fn cpu_mark(daemon: Option<u32>) -> CpuMark {
    CpuMark {
        me: rusage(libc::RUSAGE_SELF),
        children: rusage(libc::RUSAGE_CHILDREN),
        daemon: daemon.map(proc_cpu).unwrap_or_default(),
    }
}

// ------------------------------------------------------------------------------------------------
// Figures

struct Figure {
    section: &'static str,
    name: String,
    walls: Vec<Duration>,
    /// Client CPU (this process) and server/tool CPU, per run.
    cpu_client: Duration,
    cpu_server: Duration,
    anchor: String,
    /// Upper bound (ms) the median is judged against, when there is one.
    bound_ms: Option<f64>,
    note: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn sorted(v: &[Duration]) -> Vec<Duration> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn pct(v: &[Duration], p: f64) -> Duration {
    let s = sorted(v);
    let i = ((s.len() as f64 - 1.0) * p).round() as usize;
    s[i.min(s.len() - 1)]
}

/// Runs `op` `warmup + runs` times; times the last `runs`, with CPU used per run.
async fn measure<F, Fut>(runs: usize, warmup: usize, daemon: Option<u32>, mut op: F) -> anyhow::Result<Sampled>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    for _ in 0..warmup {
        op().await?;
    }
    let mut walls = Vec::with_capacity(runs);
    let c0 = cpu_mark(daemon);
    for _ in 0..runs {
        let t = Instant::now();
        op().await?;
        walls.push(t.elapsed());
    }
    if daemon.is_some() {
        // git daemon reaps its upload-pack children from its main loop; let it catch up.
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let c1 = cpu_mark(daemon);
    let n = runs as u32;
    Ok(Sampled {
        walls,
        cpu_client: (c1.me - c0.me) / n,
        cpu_server: ((c1.children - c0.children) + (c1.daemon.saturating_sub(c0.daemon))) / n,
    })
}

struct Sampled {
    walls: Vec<Duration>,
    cpu_client: Duration,
    cpu_server: Duration,
}

impl Sampled {
    fn figure(self, section: &'static str, name: impl Into<String>, anchor: &str, bound_ms: Option<f64>) -> Figure {
        Figure {
            section,
            name: name.into(),
            walls: self.walls,
            cpu_client: self.cpu_client,
            cpu_server: self.cpu_server,
            anchor: anchor.to_string(),
            bound_ms,
            note: String::new(),
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Servers

/// A child process killed (and reaped) on drop.
struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn wait_for_port(port: u16, child: &mut Child) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        if TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            anyhow::bail!("server exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    anyhow::bail!("server did not listen on {port}")
}

fn git_exec_path() -> anyhow::Result<PathBuf> {
    let out = Command::new("git").arg("--exec-path").stdin(Stdio::null()).output()?;
    Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
}

/// `git daemon` serving `base` over git:// (git-daemon itself, so killing it stops the server).
fn git_daemon(base: &Path) -> anyhow::Result<Server> {
    let port = free_port()?;
    let mut child = Command::new(git_exec_path()?.join("git-daemon"))
        .args(["--export-all", "--reuseaddr", "--listen=127.0.0.1"])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(base)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("spawn git daemon")?;
    wait_for_port(port, &mut child)?;
    Ok(Server { child, port })
}

/// Smart HTTP: an HTTP/1.1 keep-alive server on a thread per connection that runs `git-http-backend`
/// as a CGI for every request. Lives until the process exits.
fn http_backend_server(root: &Path) -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let backend = git_exec_path()?.join("git-http-backend");
    let root = root.to_path_buf();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (backend, root) = (backend.clone(), root.clone());
            std::thread::spawn(move || {
                let _ = serve_connection(conn, &backend, &root);
            });
        }
    });
    Ok(port)
}

fn serve_connection(conn: TcpStream, backend: &Path, root: &Path) -> anyhow::Result<()> {
    conn.set_nodelay(true)?;
    let mut out = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut parts = line.split_whitespace();
        let (method, target) = (
            parts.next().unwrap_or("GET").to_string(),
            parts.next().unwrap_or("/").to_string(),
        );
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let mut body = Vec::new();
        if headers
            .get("transfer-encoding")
            .is_some_and(|v| v.eq_ignore_ascii_case("chunked"))
        {
            loop {
                let mut size = String::new();
                reader.read_line(&mut size)?;
                let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)?;
                if n == 0 {
                    let mut end = String::new();
                    reader.read_line(&mut end)?;
                    break;
                }
                let at = body.len();
                body.resize(at + n, 0);
                reader.read_exact(&mut body[at..])?;
                let mut crlf = [0u8; 2];
                reader.read_exact(&mut crlf)?;
            }
        } else if let Some(n) = headers.get("content-length").and_then(|v| v.parse::<usize>().ok()) {
            body.resize(n, 0);
            reader.read_exact(&mut body)?;
        }
        let (path, query) = target.split_once('?').unwrap_or((&target, ""));
        let header = |k: &str| headers.get(k).cloned().unwrap_or_default();
        let mut child = Command::new(backend)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("GIT_PROJECT_ROOT", root)
            .env("GIT_HTTP_EXPORT_ALL", "1")
            .env("PATH_INFO", path)
            .env("QUERY_STRING", query)
            .env("REQUEST_METHOD", &method)
            .env("CONTENT_TYPE", header("content-type"))
            .env("CONTENT_LENGTH", body.len().to_string())
            .env("HTTP_CONTENT_ENCODING", header("content-encoding"))
            .env("GIT_PROTOCOL", header("git-protocol"))
            .env("REMOTE_ADDR", "127.0.0.1")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let mut stdin = child.stdin.take().context("stdin")?;
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&body);
        });
        let mut cgi = Vec::new();
        child.stdout.take().context("stdout")?.read_to_end(&mut cgi)?;
        let _ = writer.join();
        child.wait()?;
        let (head, payload) = match find(&cgi, b"\r\n\r\n") {
            Some(i) => (&cgi[..i], &cgi[i + 4..]),
            None => match find(&cgi, b"\n\n") {
                Some(i) => (&cgi[..i], &cgi[i + 2..]),
                None => (&cgi[..0], &cgi[..]),
            },
        };
        let mut status = "200 OK".to_string();
        let mut response = Vec::new();
        for l in String::from_utf8_lossy(head).lines() {
            if let Some((k, v)) = l.split_once(':') {
                if k.eq_ignore_ascii_case("status") {
                    status = v.trim().to_string();
                } else {
                    response.extend_from_slice(format!("{}: {}\r\n", k.trim(), v.trim()).as_bytes());
                }
            }
        }
        let mut msg = format!("HTTP/1.1 {status}\r\n").into_bytes();
        msg.extend_from_slice(&response);
        msg.extend_from_slice(format!("Content-Length: {}\r\n\r\n", payload.len()).as_bytes());
        msg.extend_from_slice(payload);
        out.write_all(&msg)?;
        if header("connection").eq_ignore_ascii_case("close") {
            return Ok(());
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

// ------------------------------------------------------------------------------------------------
// Content

fn deployment(i: usize, namespace: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i:04}
  namespace: {namespace}
  labels:
    app.kubernetes.io/name: app-{i:04}
    app.kubernetes.io/part-of: bench
spec:
  replicas: 2
  selector:
    matchLabels:
      app.kubernetes.io/name: app-{i:04}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: app-{i:04}
    spec:
      containers:
      - name: web
        image: registry.example.com/team/web:1.{i}.0
        ports:
        - containerPort: 8080
          name: http
        env:
        - name: INDEX
          value: \"{i}\"
        - name: LOG_LEVEL
          value: info
        resources:
          requests: {{cpu: 100m, memory: 64Mi}}
          limits: {{cpu: 500m, memory: 128Mi}}
        readinessProbe:
          httpGet: {{path: /healthz, port: http}}
          periodSeconds: 10
"
    )
}

fn service(i: usize) -> String {
    format!(
        "apiVersion: v1
kind: Service
metadata:
  name: app-{i:04}
spec:
  selector:
    app.kubernetes.io/name: app-{i:04}
  ports:
  - name: http
    port: 80
    targetPort: http
"
    )
}

fn write(path: &Path, content: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, content)?;
    Ok(())
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=Bench",
            "-c",
            "user.email=bench@example.com",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The upstream: a work tree at `<base>/repo` (served as `/repo`), 500 YAML files in 10 app directories.
fn upstream(base: &Path) -> anyhow::Result<PathBuf> {
    let repo = base.join("repo");
    std::fs::create_dir_all(&repo)?;
    git(&repo, &["init", "-q", "-b", "main"])?;
    for i in 0..REPO_FILES {
        write(
            &repo.join(format!("apps/app-{:02}/deploy-{i:03}.yaml", i / 50)),
            &deployment(i, "bench"),
        )?;
    }
    git(&repo, &["add", "-A"])?;
    git(&repo, &["commit", "-q", "-m", "500 files"])?;
    Ok(repo)
}

/// Commits a one-line change upstream; returns the new commit id.
fn new_commit(repo: &Path, n: usize) -> anyhow::Result<String> {
    write(&repo.join("apps/app-00/changing.yaml"), &format!("# change {n}\n"))?;
    git(repo, &["add", "-A"])?;
    git(repo, &["commit", "-q", "-m", &format!("change {n}")])?;
    git(repo, &["rev-parse", "HEAD"])
}

// ------------------------------------------------------------------------------------------------
// Git scenarios

fn git_config() -> GitConfig {
    GitConfig {
        connect_timeout: Duration::from_secs(5),
        io_timeout: Duration::from_secs(10),
        total_timeout: Duration::from_secs(60),
        ..GitConfig::default()
    }
}

async fn git_scenarios(
    figures: &mut Vec<Figure>,
    label: &'static str,
    url: &RepoUrl,
    repo: &Path,
    daemon: Option<u32>,
    commits: &mut usize,
) -> anyhow::Result<()> {
    const S: &str = "git";
    let none = Credentials::default();
    let main = Revision::parse("main")?;
    let cache = tempfile::tempdir()?;
    let src = Git2Source::new(cache.path(), git_config());

    let s = measure(LS_REMOTE_RUNS, 3, daemon, || async {
        let refs = src.ls_remote(url, &none).await?;
        anyhow::ensure!(refs.iter().any(|r| r.name == "refs/heads/main"), "no main");
        Ok(())
    })
    .await?;
    let (anchor, bound) = match label {
        "git://" => ("libgit2 ls-remote git:// 2–8 ms (median 7.95) [L]", Some(8.0)),
        _ => (
            "no libgit2 HTTP anchor; git CLI over a Python CGI 19.0 ms [L]",
            Some(19.0),
        ),
    };
    figures.push(s.figure(S, format!("ls-remote, {label}"), anchor, bound));

    // Initial fetch into an empty cache plus checkout (a clone), each in a fresh cache.
    let s = measure(CLONE_RUNS, 0, daemon, || async {
        let cache = tempfile::tempdir()?;
        let src = Git2Source::new(cache.path(), git_config());
        src.fetch(url, &none, &main).await?;
        let commit = src.resolve(url, &main).await?;
        let dir = src.checkout(url, &commit).await?;
        anyhow::ensure!(dir.join("apps/app-00/deploy-000.yaml").exists(), "checkout incomplete");
        Ok(())
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("first fetch (shallow) + resolve + checkout of 500 files, {label}"),
        "libgit2 full clone with checkout 47.7 ms; git CLI clone --depth 1 94 ms (git:// v0), 114 ms (HTTP) [L]",
        Some(if label == "git://" { 94.0 } else { 114.0 }),
    ));

    src.fetch(url, &none, &main).await?;
    let s = measure(FETCH_RUNS, 1, daemon, || async {
        src.fetch(url, &none, &main).await?;
        src.resolve(url, &main).await?;
        Ok(())
    })
    .await?;
    let (anchor, bound) = match label {
        "git://" => ("libgit2 fetch, nothing new 6.74 ms (min 2.28) [L]", Some(6.74)),
        _ => ("git CLI fetch over HTTP, nothing new 25 ms [L]", Some(25.0)),
    };
    figures.push(s.figure(S, format!("fetch + resolve, nothing new, {label}"), anchor, bound));

    // One new commit upstream (not timed), then fetch + resolve (timed). `measure` cannot interleave
    // untimed work, so time each run by hand.
    let mut walls = Vec::new();
    let mut checkout_walls = Vec::new();
    let (mut client, mut server, mut co_client) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
    for _ in 0..FETCH_RUNS {
        *commits += 1;
        let want = new_commit(repo, *commits)?;
        let c0 = cpu_mark(daemon);
        let t = Instant::now();
        src.fetch(url, &none, &main).await?;
        let got = src.resolve(url, &main).await?;
        walls.push(t.elapsed());
        let c1 = cpu_mark(daemon);
        anyhow::ensure!(got.sha() == want, "fetched {} but upstream is at {want}", got.sha());
        client += c1.me - c0.me;
        server += (c1.children - c0.children) + c1.daemon.saturating_sub(c0.daemon);
        let t = Instant::now();
        let dir = src.checkout(url, &got).await?;
        checkout_walls.push(t.elapsed());
        co_client += cpu_mark(daemon).me - c1.me;
        anyhow::ensure!(dir.join("apps/app-00/changing.yaml").exists(), "checkout incomplete");
    }
    let n = FETCH_RUNS as u32;
    let (anchor, bound) = match label {
        "git://" => ("git CLI fetch of one new commit 59 ms (v0) [L]", Some(59.0)),
        _ => ("no HTTP anchor; git CLI git:// 59 ms [L]", Some(59.0)),
    };
    figures.push(Figure {
        section: S,
        name: format!("fetch + resolve of one new commit, {label}"),
        walls,
        cpu_client: client / n,
        cpu_server: server / n,
        anchor: anchor.into(),
        bound_ms: bound,
        note: "shallow (depth 1, the default)".into(),
    });
    if label == "git://" {
        figures.push(Figure {
            section: S,
            name: "checkout (export) of a new commit, 501 files".into(),
            walls: checkout_walls,
            cpu_client: co_client / n,
            cpu_server: Duration::ZERO,
            anchor: "git CLI `checkout -f` 500 files 2.6 ms (only rewrites changed files) [L]".into(),
            bound_ms: None,
            note: "a full export into a per-commit directory".into(),
        });
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Render scenarios

fn helm_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/tools/helm")
}

fn request(root: &Path, app_path: &str, source: SourceOptions) -> RenderRequest {
    RenderRequest {
        checkout_root: root.to_path_buf(),
        app_path: app_path.to_string(),
        repo_url: "https://git.example.com/bench.git".into(),
        revision: "0123456789abcdef0123456789abcdef01234567".into(),
        source,
        app_name: "bench".into(),
        app_namespace: "capstan-system".into(),
        destination_namespace: "team-a".into(),
        limits: Limits::default(),
        binaries: Binaries {
            helm: helm_path(),
            ..Binaries::default()
        },
    }
}

async fn render_count(renderer: &Renderer, req: &RenderRequest, want: usize, tool: Tool) -> anyhow::Result<()> {
    let out = renderer.render(req).await.map_err(|e| anyhow::anyhow!("render: {e}"))?;
    anyhow::ensure!(out.tool == tool, "detected {:?}", out.tool);
    anyhow::ensure!(
        out.objects.len() == want,
        "rendered {} objects, want {want}",
        out.objects.len()
    );
    Ok(())
}

/// Runs a command line (the bare tool, for comparison) and checks it succeeds.
async fn run_cli(program: &Path, args: &[&str], dir: &Path) -> anyhow::Result<()> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .await?;
    anyhow::ensure!(
        out.status.success(),
        "{program:?} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

async fn render_scenarios(figures: &mut Vec<Figure>) -> anyhow::Result<()> {
    const S: &str = "render";
    let renderer = Renderer::new();
    let tmp = tempfile::tempdir()?;
    let root = tmp.path();

    // 2,000 Deployments: one multi-document file, and 2,000 files.
    let docs: Vec<String> = (0..DIR_OBJECTS).map(|i| deployment(i, "bench")).collect();
    let stream = docs.join("---\n");
    let bytes = stream.len();
    write(&root.join("one-file/all.yaml"), &stream)?;
    for (i, d) in docs.iter().enumerate() {
        write(&root.join(format!("many-files/deploy-{i:04}.yaml")), d)?;
    }
    let yaml_anchor = "YAML → JSON: serde-saphyr 6.2–8.0 MB/s, 7.4k–9.6k docs/s ⇒ 2,000 docs ≈ 208–270 ms [L]";
    for (app, what) in [("one-file", "one multi-document file"), ("many-files", "2,000 files")] {
        let req = request(root, app, SourceOptions::default());
        let s = measure(RENDER_RUNS, 1, None, || {
            render_count(&renderer, &req, DIR_OBJECTS, Tool::Directory)
        })
        .await?;
        let mut f = s.figure(
            S,
            format!("directory, 2,000 Deployments, {what}"),
            yaml_anchor,
            Some(DIR_OBJECTS as f64 / 7_400.0 * 1e3),
        );
        let med = ms(pct(&f.walls, 0.5));
        f.note = format!(
            "{:.1} MB, {:.1} MB/s, {:.0} objects/s",
            bytes as f64 / 1e6,
            bytes as f64 / 1e6 / (med / 1e3),
            DIR_OBJECTS as f64 / (med / 1e3)
        );
        figures.push(f);
    }

    // Kustomize: a base of 100 Deployments + 100 Services, an overlay with namePrefix/images/commonLabels.
    let k = root.join("kustomize");
    write(
        &k.join("base/deployments.yaml"),
        &(0..KUSTOMIZE_DEPLOYMENTS)
            .map(|i| deployment(i, "team-a"))
            .collect::<Vec<_>>()
            .join("---\n"),
    )?;
    write(
        &k.join("base/services.yaml"),
        &(0..KUSTOMIZE_DEPLOYMENTS)
            .map(service)
            .collect::<Vec<_>>()
            .join("---\n"),
    )?;
    write(
        &k.join("base/kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- deployments.yaml\n- services.yaml\n",
    )?;
    write(
        &k.join("overlays/prod/kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- ../../base\n\
         namePrefix: prod-\ncommonLabels:\n  env: prod\nimages:\n- name: registry.example.com/team/web\n  newTag: 2.0.0\n",
    )?;
    let objects = 2 * KUSTOMIZE_DEPLOYMENTS;
    let kubectl = PathBuf::from("kubectl");
    let s = measure(RENDER_RUNS, 1, None, || {
        run_cli(&kubectl, &["kustomize", "overlays/prod"], &k)
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("`kubectl kustomize` overlay alone (CLI), {objects} objects"),
        "tool cost, for comparison; kustomize ~4,000 resources 4.8 s at best (#5084) [M]",
        None,
    ));
    let req = request(&k, "overlays/prod", SourceOptions::default());
    let s = measure(RENDER_RUNS, 1, None, || {
        render_count(&renderer, &req, objects, Tool::Kustomize)
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("Kustomize overlay (namePrefix, images, commonLabels), {objects} objects"),
        "the CLI row above + parsing",
        None,
    ));
    let argo = SourceOptions {
        kustomize: Some(KustomizeOptions {
            name_suffix: "-blue".into(),
            images: vec!["registry.example.com/team/web:3.0.0".into()],
            common_labels: BTreeMap::from([("team".to_string(), "a".to_string())]),
            ..KustomizeOptions::default()
        }),
        ..SourceOptions::default()
    };
    let req = request(&k, "overlays/prod", argo);
    let s = measure(RENDER_RUNS, 1, None, || {
        render_count(&renderer, &req, objects, Tool::Kustomize)
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("same overlay + Application kustomize options (private copy, edits), {objects} objects"),
        "the CLI row above + copy + parsing",
        None,
    ));

    // Helm: a chart of HELM_COUNT Deployments and Services plus a ConfigMap.
    let c = root.join("helm/chart");
    write(
        &c.join("Chart.yaml"),
        "apiVersion: v2\nname: bench\nversion: 0.1.0\nappVersion: \"1.0\"\n",
    )?;
    write(
        &c.join("values.yaml"),
        &format!(
            "count: {HELM_COUNT}\nreplicas: 2\nimage:\n  repository: registry.example.com/team/web\n  tag: 1.0.0\n"
        ),
    )?;
    write(
        &c.join("templates/_helpers.tpl"),
        "{{- define \"bench.labels\" -}}\napp.kubernetes.io/managed-by: {{ .Release.Service }}\nhelm.sh/chart: {{ .Chart.Name }}-{{ .Chart.Version }}\n{{- end -}}\n",
    )?;
    write(
        &c.join("templates/workloads.yaml"),
        r#"{{- range $i := until (int .Values.count) }}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ $.Release.Name }}-app-{{ $i }}
  labels:
    {{- include "bench.labels" $ | nindent 4 }}
spec:
  replicas: {{ $.Values.replicas }}
  selector:
    matchLabels:
      app: {{ $.Release.Name }}-app-{{ $i }}
  template:
    metadata:
      labels:
        app: {{ $.Release.Name }}-app-{{ $i }}
    spec:
      containers:
      - name: web
        image: "{{ $.Values.image.repository }}:{{ $.Values.image.tag }}"
        ports:
        - containerPort: 8080
          name: http
        env:
        - name: INDEX
          value: {{ $i | quote }}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ $.Release.Name }}-app-{{ $i }}
spec:
  selector:
    app: {{ $.Release.Name }}-app-{{ $i }}
  ports:
  - name: http
    port: 80
    targetPort: http
{{- end }}
"#,
    )?;
    write(
        &c.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-config\ndata:\n  count: {{ .Values.count | quote }}\n",
    )?;
    let objects = 2 * HELM_COUNT + 1;
    let helm = helm_path();
    let helm_dir = root.join("helm");
    let s = measure(RENDER_RUNS, 1, None, || {
        run_cli(&helm, &["template", "bench", "chart", "-n", "team-a"], &helm_dir)
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("`helm template` alone (CLI: e2e/tools/helm), {objects} objects"),
        "tool cost, for comparison (Python start-up + Helm engine via helm-python-sdk)",
        None,
    ));
    let req = request(&helm_dir, "chart", SourceOptions::default());
    let s = measure(RENDER_RUNS, 1, None, || {
        render_count(&renderer, &req, objects, Tool::Helm)
    })
    .await?;
    figures.push(s.figure(
        S,
        format!("Helm chart, {objects} objects"),
        "the CLI row above + parsing",
        None,
    ));
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Report

fn fmt_ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} s", v / 1e3)
    } else if v >= 100.0 {
        format!("{v:.0} ms")
    } else if v >= 10.0 {
        format!("{v:.1} ms")
    } else {
        format!("{v:.2} ms")
    }
}

fn render_report(figures: &[Figure], load_before: &str) -> String {
    let kubectl = command_line("kubectl", &["version", "--client"]);
    let helm = command_line(&helm_path().to_string_lossy(), &["version", "--short"]);
    let mut out = format!("{START}\n## Git sources and rendering (git-sources issue, item 7)\n\n");
    out += &format!(
        "Run {} on {}; load average before the run {load_before}, after {}. \
         `cargo bench -p capstan --bench source_render` (release profile). {}; kubectl {}; helm {}.\n\n",
        date(),
        machine(),
        loadavg(),
        command_line("git", &["--version"]),
        kubectl.trim_start_matches("Client Version: "),
        helm,
    );
    out += "Git: the upstream is a work tree of 500 Deployment YAML files (~0.4 MB) served by `git daemon` \
            (git://, protocol v0 as libgit2 speaks it) and by smart HTTP (`git http-backend` run as a CGI, one \
            process per request, by an in-process HTTP/1.1 keep-alive server) on 127.0.0.1. Every operation goes \
            through `Git2Source` (libgit2 on a blocking thread, with its deadline machinery), i.e. what a \
            controller pays. Rendering goes through `Renderer::render` (tool detection, path confinement, \
            symlink check, subprocess sandboxing, YAML parsing, validation); the `alone (CLI)` rows run the \
            bare tool on the same input for comparison.\n\n";
    out += "CPU/op: *client* = this process (libgit2, parsing); *server/tool* = child processes \
            (`git-http-backend`, `kubectl`, `helm`) and `git daemon` with its `upload-pack`s. \
            Anchors are the comparable figures of the git CLI, libgit2, kustomize and helm; [L] = measured on a 2-core development machine \
            under load, [M] = published measurement. The verdict compares the median with the anchor's figure.\n\n";
    for (section, title) in [("git", "### Git on loopback\n\n"), ("render", "### Rendering\n\n")] {
        out += title;
        out += "| operation | runs | median | p90 | min – max | CPU/op client + server/tool | anchor | verdict |\n";
        out += "|---|---|---|---|---|---|---|---|\n";
        for f in figures.iter().filter(|f| f.section == section) {
            let med = ms(pct(&f.walls, 0.5));
            let verdict = match f.bound_ms {
                None => "—".to_string(),
                Some(b) if med <= b => format!("**met** (≤ {})", fmt_ms(b)),
                Some(b) => format!("**not met** ({:.2}× {})", med / b, fmt_ms(b)),
            };
            let name = if f.note.is_empty() {
                f.name.clone()
            } else {
                format!("{} — {}", f.name, f.note)
            };
            out += &format!(
                "| {name} | {} | {} | {} | {} – {} | {} + {} | {} | {verdict} |\n",
                f.walls.len(),
                fmt_ms(med),
                fmt_ms(ms(pct(&f.walls, 0.9))),
                fmt_ms(ms(pct(&f.walls, 0.0))),
                fmt_ms(ms(pct(&f.walls, 1.0))),
                fmt_ms(ms(f.cpu_client)),
                fmt_ms(ms(f.cpu_server)),
                f.anchor,
            );
        }
        out += "\n";
    }
    out += END;
    out += "\n";
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let load_before = loadavg();
    let srv = tempfile::tempdir()?;
    let base = srv.path().join("srv");
    let repo = upstream(&base)?;
    let daemon = git_daemon(&base)?;
    let http_port = http_backend_server(&base)?;
    let mut figures = Vec::new();
    let mut commits = 0;

    eprintln!("source_render bench: git://");
    let u = RepoUrl::parse(&format!("git://127.0.0.1:{}/repo", daemon.port))?;
    git_scenarios(&mut figures, "git://", &u, &repo, Some(daemon.child.id()), &mut commits).await?;
    eprintln!("source_render bench: http");
    let u = RepoUrl::parse(&format!("http://127.0.0.1:{http_port}/repo"))?;
    git_scenarios(&mut figures, "http", &u, &repo, None, &mut commits).await?;
    drop(daemon);
    eprintln!("source_render bench: render");
    render_scenarios(&mut figures).await?;

    let section = render_report(&figures, &load_before);
    print!("{section}");
    let path = report::write_section(START, END, &section)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
