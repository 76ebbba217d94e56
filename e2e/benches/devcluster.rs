//! `make bench` — devcluster throughput, so that later scale benchmarks measure Capstan and not the test
//! control plane (foundation issue, item 6).
//!
//! Creates, gets, server-side applies and lists of 10,000 ConfigMaps, each measured with two clients:
//! - kube-rs (the client the operator uses), 16 requests in flight on a separate runtime;
//! - a minimal HTTP/1.1 keep-alive client over 16 TCP connections that neither serializes typed objects
//!   nor parses responses, so the difference between the two is client cost, not devcluster's.
//!
//! Both clients run twice: over HTTPS (the default) and over plain HTTP (`insecure_http`), each time as a
//! ServiceAccount with the `edit` role in the bench namespace, so every request pays for token
//! authentication and an RBAC decision as it would on a real cluster.
//!
//! Then the fan-out of 1,000 changes to 50 concurrent kube-rs watchers, with per-event delivery latency.
//! The create/get/apply/list suites run a second time on `--etcd` storage: a local etcd (Debian's
//! etcd-server) whose data directory is on disk, started fresh for each run; their CPU adds etcd's.
//! Every scenario runs on a fresh devcluster, `CAPSTAN_BENCH_RUNS` times (default 3); the report gives the
//! median and the min–max spread, plus CPU time per operation (whole process, and devcluster's own threads).
//!
//! Not a test: nothing here asserts a time. Run with `cargo bench -p capstan-e2e --bench devcluster`.
//! Figures go between the `devcluster-bench` markers of docs/benchmarks.md; the rest of the file is kept.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::Client;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use capstan_e2e::etcd::EtcdServer;

#[path = "../../operator/benches/support/report.rs"]
mod report;
use report::{clock_ticks, date, loadavg, machine};

const OBJECTS: usize = 10_000;
const CONCURRENCY: usize = 16;
const WATCHERS: usize = 50;
const WATCH_CHANGES: usize = 1_000;
/// List calls per run (each is one sample).
const LIST_CALLS: usize = 5;
const DEFAULT_RUNS: usize = 3;
/// Targets from the foundation issue.
const TARGET_WRITES_PER_S: f64 = 2_000.0;
/// Target for creates with `--etcd` (devcluster issue 10).
const TARGET_ETCD_WRITES_PER_S: f64 = 1_000.0;
const TARGET_LIST_MS: f64 = 200.0;

const START: &str = "<!-- devcluster-bench:start -->";
const END: &str = "<!-- devcluster-bench:end -->";

// ------------------------------------------------------------------------------------------------
// Measurements

/// CPU time consumed so far: the whole process, devcluster's threads alone, and the etcd process.
#[derive(Clone, Copy, Default)]
struct Cpu {
    process: Duration,
    server: Duration,
    etcd: Duration,
}

/// `(comm, utime + stime in ticks)` from a `/proc/.../stat` file.
fn stat_ticks(path: &std::path::Path) -> Option<(String, u64)> {
    let s = std::fs::read_to_string(path).ok()?;
    let open = s.find('(')?;
    let close = s.rfind(')')?;
    let comm = s[open + 1..close].to_string();
    let fields: Vec<&str> = s[close + 1..].split_whitespace().collect();
    // Fields after the comm start at field 3 (state); utime and stime are fields 14 and 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

fn cpu_now(ticks: f64, etcd_pid: Option<u32>) -> Cpu {
    let to = |t: u64| Duration::from_secs_f64(t as f64 / ticks);
    let process = stat_ticks(std::path::Path::new("/proc/self/stat"))
        .map(|(_, t)| t)
        .unwrap_or(0);
    let mut server = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for task in dir.flatten() {
            if let Some((comm, t)) = stat_ticks(&task.path().join("stat")) {
                // devcluster's threads are "devcluster", "devcluster-worker" and "devcluster-etcd" (comm is
                // cut at 15 bytes). Not a prefix match: this bench's own main thread is named after the
                // binary, `devcluster-<hash>`, and runs the client's main task.
                if comm == "devcluster" || comm == "devcluster-work" || comm == "devcluster-etcd" {
                    server += t;
                }
            }
        }
    }
    let etcd = etcd_pid
        .and_then(|pid| stat_ticks(&std::path::Path::new("/proc").join(pid.to_string()).join("stat")))
        .map_or(0, |(_, t)| t);
    Cpu {
        process: to(process),
        server: to(server),
        etcd: to(etcd),
    }
}

/// One timed sample.
#[derive(Clone, Copy)]
struct Sample {
    elapsed: Duration,
    ops: usize,
    cpu: Cpu,
}

#[derive(Clone, Copy)]
struct Meter {
    ticks: f64,
    /// The etcd of the devcluster being measured, if any.
    etcd_pid: Option<u32>,
}

impl Meter {
    async fn measure<F, Fut>(&self, ops: usize, f: F) -> anyhow::Result<Sample>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = anyhow::Result<()>>,
    {
        let cpu0 = cpu_now(self.ticks, self.etcd_pid);
        let start = Instant::now();
        f().await?;
        let elapsed = start.elapsed();
        let cpu1 = cpu_now(self.ticks, self.etcd_pid);
        Ok(Sample {
            elapsed,
            ops,
            cpu: Cpu {
                process: cpu1.process.saturating_sub(cpu0.process),
                server: cpu1.server.saturating_sub(cpu0.server),
                etcd: cpu1.etcd.saturating_sub(cpu0.etcd),
            },
        })
    }
}

/// What a scenario is compared against.
#[derive(Clone, Copy)]
enum Target {
    None,
    /// Operations per second, at least.
    Rate(f64),
    /// Wall time of one operation, at most (ms).
    Millis(f64),
}

/// Samples of one scenario, in report order.
struct Scenario {
    name: &'static str,
    client: &'static str,
    target: Target,
    samples: Vec<Sample>,
    note: String,
}

#[derive(Default)]
struct Report {
    scenarios: Vec<Scenario>,
}

impl Report {
    fn add(&mut self, name: &'static str, client: &'static str, target: Target, sample: Sample) {
        match self.scenarios.iter_mut().find(|s| s.name == name && s.client == client) {
            Some(s) => s.samples.push(sample),
            None => self.scenarios.push(Scenario {
                name,
                client,
                target,
                samples: vec![sample],
                note: String::new(),
            }),
        }
    }

    fn note(&mut self, name: &str, client: &str, note: String) {
        if let Some(s) = self.scenarios.iter_mut().find(|s| s.name == name && s.client == client) {
            s.note = note;
        }
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn median_of<T: Copy + PartialOrd>(v: &[T]) -> T {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    v[v.len() / 2]
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

// ------------------------------------------------------------------------------------------------
// Objects

fn cm_json(i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:05}"), "labels": {"bench": "devcluster"}},
        "data": {"index": i.to_string(), "payload": "x".repeat(200)}
    })
}

fn cm(i: usize) -> ConfigMap {
    serde_json::from_value(cm_json(i)).expect("static ConfigMap")
}

/// The applied configuration: drops the label, adds a key (so the first apply changes every object).
fn applied_json(i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i:05}")},
        "data": {"index": i.to_string(), "payload": "x".repeat(200), "applied": "yes"}
    })
}

// ------------------------------------------------------------------------------------------------
// kube-rs

async fn client_from(yaml: &str) -> anyhow::Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

async fn kube_client(dc: &devcluster::DevCluster) -> anyhow::Result<Client> {
    client_from(&dc.kubeconfig_yaml()).await
}

/// How the clients reach devcluster, and where it keeps its objects.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    /// HTTPS, objects in memory (the default).
    Https,
    /// `--insecure-http`, objects in memory.
    Http,
    /// HTTPS, objects in a fresh etcd whose data is on disk.
    HttpsEtcd,
}

impl Setup {
    /// A fresh devcluster (with a fresh etcd for [`Setup::HttpsEtcd`]) and the meter for it.
    fn start(self, meter: &Meter) -> anyhow::Result<(devcluster::DevCluster, Option<EtcdServer>, Meter)> {
        let etcd = (self == Setup::HttpsEtcd).then(|| EtcdServer::start_in(&std::env::temp_dir()));
        let dc = devcluster::start(devcluster::Config {
            insecure_http: self == Setup::Http,
            etcd: etcd.as_ref().map(EtcdServer::url),
            ..devcluster::Config::default()
        })?;
        let meter = Meter {
            etcd_pid: etcd.as_ref().and_then(EtcdServer::pid),
            ..*meter
        };
        Ok((dc, etcd, meter))
    }

    /// The client column of the report.
    fn label(self, client: &'static str) -> &'static str {
        match (self, client) {
            (Setup::Https, "kube-rs") => "kube-rs, HTTPS",
            (Setup::Https, _) => "raw HTTP/1.1, HTTPS",
            (Setup::Http, "kube-rs") => "kube-rs, HTTP",
            (Setup::Http, _) => "raw HTTP/1.1, HTTP",
            (Setup::HttpsEtcd, "kube-rs") => "kube-rs, HTTPS, etcd",
            (Setup::HttpsEtcd, _) => "raw HTTP/1.1, HTTPS, etcd",
        }
    }

    fn create_target(self) -> Target {
        match self {
            Setup::HttpsEtcd => Target::Rate(TARGET_ETCD_WRITES_PER_S),
            _ => Target::Rate(TARGET_WRITES_PER_S),
        }
    }
}

/// Namespace `ns` with ServiceAccount `bench` bound to `edit` there; returns a token for it.
async fn bench_account(dc: &devcluster::DevCluster, ns: &str) -> anyhow::Result<String> {
    let admin = kube_client(dc).await?;
    create_namespace(&admin, ns).await?;
    let post = |kind: &str, body: serde_json::Value| {
        let admin = admin.clone();
        let kind = kind.to_string();
        async move {
            let (group, version, plural) = match kind.as_str() {
                "ServiceAccount" => ("", "v1", "serviceaccounts"),
                _ => ("rbac.authorization.k8s.io", "v1", "rolebindings"),
            };
            let gvk = kube::api::GroupVersionKind::gvk(group, version, &kind);
            let ar = kube::api::ApiResource::from_gvk_with_plural(&gvk, plural);
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(admin, ns, &ar);
            api.create(&PostParams::default(), &serde_json::from_value(body)?)
                .await?;
            anyhow::Ok(())
        }
    };
    post(
        "ServiceAccount",
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bench"}}),
    )
    .await?;
    post(
        "RoleBinding",
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "bench"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
            "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": ns}]}),
    )
    .await?;
    let token = dc.create_token(ns, "bench", 3600)?;
    wait_for_rights(dc, ns, &token).await?;
    Ok(token)
}

/// The `edit` role is filled by devcluster's aggregation controller, as kube's is, so a binding to it can
/// take effect a moment after it was written: wait (bounded) until the token may create ConfigMaps, checked
/// with a dry-run create, before anything is measured.
async fn wait_for_rights(dc: &devcluster::DevCluster, ns: &str, token: &str) -> anyhow::Result<()> {
    let client = client_from(&dc.kubeconfig_for_token("bench", token)).await?;
    let api: Api<ConfigMap> = Api::namespaced(client, ns);
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match api.create(&dry_run, &cm(0)).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e.into()),
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

async fn create_namespace(client: &Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
    )
    .await?;
    Ok(())
}

/// Runs `op(i)` for every object index with [`CONCURRENCY`] in flight.
async fn each<F, Fut>(op: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    stream::iter(0..OBJECTS)
        .map(op)
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn kube_suite(meter: &Meter, report: &mut Report, setup: Setup) -> anyhow::Result<()> {
    let c = setup.label("kube-rs");
    let (dc, etcd, meter) = setup.start(meter)?;
    let token = bench_account(&dc, "bench").await?;
    let client = client_from(&dc.kubeconfig_for_token("bench", &token)).await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench");

    let s = meter
        .measure(OBJECTS, || {
            each(|i| {
                let api = api.clone();
                async move { Ok(api.create(&PostParams::default(), &cm(i)).await.map(|_| ())?) }
            })
        })
        .await?;
    report.add("create (POST)", c, setup.create_target(), s);

    let s = meter
        .measure(OBJECTS, || {
            each(|i| {
                let api = api.clone();
                async move { Ok(api.get(&format!("cm-{i:05}")).await.map(|_| ())?) }
            })
        })
        .await?;
    report.add("get", c, Target::None, s);

    for name in [
        "server-side apply, changes data",
        "server-side apply, no-op (same again)",
    ] {
        let s = meter
            .measure(OBJECTS, || {
                each(|i| {
                    let api = api.clone();
                    async move {
                        let pp = PatchParams::apply("bench").force();
                        let obj: ConfigMap = serde_json::from_value(applied_json(i))?;
                        Ok(api
                            .patch(&format!("cm-{i:05}"), &pp, &Patch::Apply(&obj))
                            .await
                            .map(|_| ())?)
                    }
                })
            })
            .await?;
        report.add(name, c, Target::None, s);
    }

    for _ in 0..LIST_CALLS {
        let s = meter
            .measure(1, || async {
                let all = api.list(&ListParams::default()).await?;
                anyhow::ensure!(all.items.len() == OBJECTS, "list returned {} objects", all.items.len());
                Ok(())
            })
            .await?;
        report.add("list 10,000 (one request)", c, Target::Millis(TARGET_LIST_MS), s);
        let s = meter
            .measure(1, || async {
                let mut seen = 0;
                let mut lp = ListParams::default().limit(500);
                loop {
                    let page = api.list(&lp).await?;
                    seen += page.items.len();
                    match page.metadata.continue_ {
                        Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
                        _ => break,
                    }
                }
                anyhow::ensure!(seen == OBJECTS, "paged list returned {seen} objects");
                Ok(())
            })
            .await?;
        report.add("list 10,000 (pages of 500)", c, Target::None, s);
    }
    drop(dc);
    drop(etcd);
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Minimal keep-alive HTTP/1.1 client

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

struct RawConn {
    io: BufReader<Box<dyn Io>>,
    host: String,
    token: String,
}

/// A TLS client trusting the cluster CA only.
fn tls_connector(ca_pem: &str) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots.add(cert?)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(cfg)))
}

impl RawConn {
    async fn connect(dc: &devcluster::DevCluster, token: &str) -> anyhow::Result<RawConn> {
        let url = dc.url();
        let host = url
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string();
        let tcp = TcpStream::connect(&host).await?;
        tcp.set_nodelay(true)?;
        let io: Box<dyn Io> = if url.starts_with("https://") {
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
            Box::new(tls_connector(&dc.ca_pem())?.connect(name, tcp).await?)
        } else {
            Box::new(tcp)
        };
        Ok(RawConn {
            io: BufReader::new(io),
            host,
            token: token.to_string(),
        })
    }

    /// Sends one request and reads the whole response body; fails on a non-2xx status.
    async fn call(&mut self, method: &str, path: &str, ctype: &str, body: &[u8]) -> anyhow::Result<Vec<u8>> {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nAuthorization: Bearer {}\r\n",
            self.host, self.token
        );
        if !body.is_empty() || method != "GET" {
            req += &format!("Content-Type: {ctype}\r\nContent-Length: {}\r\n", body.len());
        }
        req += "\r\n";
        let mut buf = req.into_bytes();
        buf.extend_from_slice(body);
        self.io.get_mut().write_all(&buf).await?;

        let mut line = String::new();
        self.io.read_line(&mut line).await?;
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| anyhow::anyhow!("bad status line {line:?}"))?;
        let (mut length, mut chunked) = (None, false);
        loop {
            line.clear();
            self.io.read_line(&mut line).await?;
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                if k == "content-length" {
                    length = v.parse::<usize>().ok();
                } else if k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked") {
                    chunked = true;
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                self.io.read_line(&mut line).await?;
                let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)?;
                if size == 0 {
                    // Trailers, then the blank line.
                    loop {
                        line.clear();
                        self.io.read_line(&mut line).await?;
                        if line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let at = body.len();
                body.resize(at + size, 0);
                self.io.read_exact(&mut body[at..]).await?;
                let mut crlf = [0u8; 2];
                self.io.read_exact(&mut crlf).await?;
            }
        } else {
            let n = length.ok_or_else(|| anyhow::anyhow!("response without length"))?;
            body.resize(n, 0);
            self.io.read_exact(&mut body).await?;
        }
        anyhow::ensure!(
            (200..300).contains(&status),
            "{method} {path}: HTTP {status}: {}",
            String::from_utf8_lossy(&body[..body.len().min(300)])
        );
        Ok(body)
    }
}

/// Runs `op(conn, i)` over [`CONCURRENCY`] connections, each taking every CONCURRENCY-th index.
async fn raw_each<F>(conns: &mut [RawConn], op: F) -> anyhow::Result<()>
where
    F: Fn(usize) -> (&'static str, String, &'static str, Vec<u8>) + Sync,
{
    let op = &op;
    let n = conns.len();
    futures::future::try_join_all(conns.iter_mut().enumerate().map(|(k, conn)| async move {
        let mut i = k;
        while i < OBJECTS {
            let (method, path, ctype, body) = op(i);
            conn.call(method, &path, ctype, &body).await?;
            i += n;
        }
        anyhow::Ok(())
    }))
    .await?;
    Ok(())
}

async fn raw_suite(meter: &Meter, report: &mut Report, setup: Setup) -> anyhow::Result<()> {
    let c = setup.label("raw HTTP/1.1");
    const BASE: &str = "/api/v1/namespaces/bench/configmaps";
    let (dc, etcd, meter) = setup.start(meter)?;
    let token = bench_account(&dc, "bench").await?;
    let mut conns = Vec::new();
    for _ in 0..CONCURRENCY {
        conns.push(RawConn::connect(&dc, &token).await?);
    }
    let bodies: Vec<Vec<u8>> = (0..OBJECTS)
        .map(|i| serde_json::to_vec(&cm_json(i)).expect("json"))
        .collect();
    let applied: Vec<Vec<u8>> = (0..OBJECTS)
        .map(|i| serde_json::to_vec(&applied_json(i)).expect("json"))
        .collect();

    let s = meter
        .measure(OBJECTS, || {
            raw_each(&mut conns, |i| {
                ("POST", BASE.to_string(), "application/json", bodies[i].clone())
            })
        })
        .await?;
    report.add("create (POST)", c, setup.create_target(), s);

    let s = meter
        .measure(OBJECTS, || {
            raw_each(&mut conns, |i| ("GET", format!("{BASE}/cm-{i:05}"), "", Vec::new()))
        })
        .await?;
    report.add("get", c, Target::None, s);

    for name in [
        "server-side apply, changes data",
        "server-side apply, no-op (same again)",
    ] {
        let s = meter
            .measure(OBJECTS, || {
                raw_each(&mut conns, |i| {
                    (
                        "PATCH",
                        format!("{BASE}/cm-{i:05}?fieldManager=bench&force=true"),
                        "application/apply-patch+yaml",
                        applied[i].clone(),
                    )
                })
            })
            .await?;
        report.add(name, c, Target::None, s);
    }

    for _ in 0..LIST_CALLS {
        let mut body = Vec::new();
        let s = meter
            .measure(1, || async {
                body = conns[0].call("GET", BASE, "", &[]).await?;
                Ok(())
            })
            .await?;
        let list: serde_json::Value = serde_json::from_slice(&body)?;
        let n = list["items"].as_array().map_or(0, Vec::len);
        anyhow::ensure!(n == OBJECTS, "raw list returned {n} objects");
        report.add("list 10,000 (one request)", c, Target::Millis(TARGET_LIST_MS), s);
    }
    drop(conns);
    drop(dc);
    drop(etcd);
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Watch fan-out

async fn watch_suite(meter: &Meter, report: &mut Report, latencies: &mut Vec<Duration>) -> anyhow::Result<()> {
    let dc = devcluster::start(devcluster::Config::default())?;
    let client = kube_client(&dc).await?;
    create_namespace(&client, "bench-watch").await?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "bench-watch");
    api.create(&PostParams::default(), &cm(0)).await?;
    let rv = api
        .list(&ListParams::default())
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let origin = Instant::now();
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..WATCH_CHANGES).map(|_| AtomicU64::new(0)).collect());
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS {
        let wp = WatchParams::default().timeout(290);
        let mut s = api.watch(&wp, &rv).await?.boxed();
        let sent = sent.clone();
        watchers.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(WATCH_CHANGES);
            while lat.len() < WATCH_CHANGES {
                match tokio::time::timeout(Duration::from_secs(120), s.try_next()).await {
                    Ok(Ok(Some(WatchEvent::Modified(obj)))) => {
                        let now = origin.elapsed().as_nanos() as u64;
                        let seq = obj
                            .data
                            .as_ref()
                            .and_then(|d| d.get("seq"))
                            .and_then(|v| v.parse::<usize>().ok());
                        if let Some(i) = seq.filter(|i| *i < WATCH_CHANGES) {
                            let at = sent[i].load(Ordering::Acquire);
                            lat.push(Duration::from_nanos(now.saturating_sub(at)));
                        }
                    }
                    Ok(Ok(Some(_))) => {}
                    _ => break,
                }
            }
            lat
        }));
    }
    let mut writes_done = Duration::ZERO;
    let s = meter
        .measure(WATCHERS * WATCH_CHANGES, || async {
            let start = Instant::now();
            for (i, at) in sent.iter().enumerate() {
                at.store(origin.elapsed().as_nanos() as u64, Ordering::Release);
                let patch = json!({"data": {"seq": i.to_string()}});
                api.patch("cm-00000", &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
            }
            writes_done = start.elapsed();
            let mut delivered = 0;
            for w in watchers {
                let lat = w.await?;
                delivered += lat.len();
                latencies.extend(lat);
            }
            anyhow::ensure!(delivered == WATCHERS * WATCH_CHANGES, "watchers saw {delivered} events");
            Ok(())
        })
        .await?;
    report.add("watch fan-out: 1,000 changes × 50 watchers", "kube-rs", Target::None, s);
    report.add(
        "sequential merge patches (1 in flight, 50 watchers attached)",
        "kube-rs",
        Target::None,
        Sample {
            elapsed: writes_done,
            ops: WATCH_CHANGES,
            cpu: Cpu::default(),
        },
    );
    drop(dc);
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Report

fn fmt_rate(r: f64) -> String {
    if r >= 100.0 {
        format!("{:.0}/s", r)
    } else {
        format!("{:.1}/s", r)
    }
}

fn render(report: &Report, runs: usize, load_before: &str, latencies: &mut [Duration]) -> String {
    let mut out = format!("{START}\n## devcluster (foundation issue, item 6)\n\n");
    out += &format!(
        "Run {} on {}; load average before the run {load_before}, after {}. \
         `cargo bench -p capstan-e2e --bench devcluster` (release profile). Each throughput scenario ran \
         {runs} times, each time on a fresh in-process devcluster (its own 2-thread runtime) driven from a \
         separate 2-thread client runtime in the same process, so client and server share the 2 cores. \
         Lists: {LIST_CALLS} calls per run ({} samples). ConfigMaps carry ~250 bytes of data.\n\n",
        date(),
        machine(),
        loadavg(),
        runs * LIST_CALLS
    );
    out += "Clients: **kube-rs** = kube 5 `Api<ConfigMap>` (typed, what the operator uses), \
            16 requests in flight; **raw HTTP/1.1** = a minimal keep-alive client on 16 connections that \
            sends pre-serialized JSON and does not parse responses, to separate client cost from \
            devcluster's. **HTTPS** = TLS 1.3 with the cluster CA (the default); **HTTP** = `--insecure-http`. \
            Both authenticate as a ServiceAccount token bound to `edit` in the namespace, so every request \
            is token-authenticated and RBAC-authorized; the watch fan-out uses the admin kubeconfig over \
            HTTPS. Rows whose client says **etcd** ran on `--etcd` storage (HTTPS): a fresh \
            single-member etcd 3.4 (Debian's etcd-server) per run, its data directory on disk so every commit is \
            fsynced; *+ etcd* is that process's CPU per operation. CPU/op is process CPU time (client + server) per operation, the mean over all samples; \
            *server* (in parentheses) counts devcluster's own threads only.\n\n";
    out += "| operation | client | median wall | min – max | median rate | CPU/op (server) | target | verdict |\n";
    out += "|---|---|---|---|---|---|---|---|\n";
    for sc in &report.scenarios {
        let walls: Vec<f64> = sc.samples.iter().map(|s| ms(s.elapsed)).collect();
        let med = median_of(&walls);
        let min = walls.iter().cloned().fold(f64::INFINITY, f64::min);
        let max = walls.iter().cloned().fold(0.0, f64::max);
        let ops = sc.samples[0].ops;
        let rate = ops as f64 / (med / 1e3);
        // Mean over all samples: the kernel accounts CPU in clock ticks (10 ms), too coarse for one list.
        let total_ops: usize = sc.samples.iter().map(|s| s.ops).sum();
        let per_op = |f: fn(&Sample) -> Duration| {
            sc.samples.iter().map(f).sum::<Duration>().as_secs_f64() * 1e6 / total_ops as f64
        };
        let (cpu_process, cpu_server) = (per_op(|s| s.cpu.process), per_op(|s| s.cpu.server));
        let cpu_etcd = per_op(|s| s.cpu.etcd);
        let mut cpu = if sc.samples.iter().all(|s| s.cpu.process.is_zero()) {
            "—".to_string()
        } else if ops == 1 {
            format!("{:.0} ms ({:.0} ms)", cpu_process / 1e3, cpu_server / 1e3)
        } else {
            format!("{cpu_process:.0} µs ({cpu_server:.0} µs)")
        };
        if sc.samples.iter().any(|s| !s.cpu.etcd.is_zero()) {
            cpu += &if ops == 1 {
                format!(" + etcd {:.0} ms", cpu_etcd / 1e3)
            } else {
                format!(" + etcd {cpu_etcd:.0} µs")
            };
        }
        let wall = |v: f64| {
            if v >= 1000.0 {
                format!("{:.2} s", v / 1e3)
            } else {
                format!("{v:.1} ms")
            }
        };
        let (target, verdict) = match sc.target {
            Target::None => ("—".to_string(), "—".to_string()),
            Target::Rate(t) => (
                format!("≥ {t:.0}/s"),
                if rate >= t {
                    "**met**".to_string()
                } else {
                    format!("**not met** ({:.0}% of target)", 100.0 * rate / t)
                },
            ),
            Target::Millis(t) => (
                format!("< {t:.0} ms"),
                if med < t {
                    "**met**".to_string()
                } else {
                    format!("**not met** ({:.1}× target)", med / t)
                },
            ),
        };
        let rate_s = if ops == 1 { "—".to_string() } else { fmt_rate(rate) };
        let name = if sc.note.is_empty() {
            sc.name.to_string()
        } else {
            format!("{} ({})", sc.name, sc.note)
        };
        out += &format!(
            "| {name} | {} | {} | {} – {} | {rate_s} | {cpu} | {target} | {verdict} |\n",
            sc.client,
            wall(med),
            wall(min),
            wall(max)
        );
    }
    latencies.sort();
    out += &format!(
        "\nWatch delivery latency (patch sent → event decoded by a kube-rs watcher, {} events over {runs} runs): \
         p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms.\n",
        latencies.len(),
        ms(percentile(latencies, 0.5)),
        ms(percentile(latencies, 0.9)),
        ms(percentile(latencies, 0.99)),
        ms(percentile(latencies, 1.0)),
    );
    out += &format!(
        "\nTargets (foundation issue, on a 2-core machine): ≥ {TARGET_WRITES_PER_S:.0} simple writes/s (the \
         `create` rows) and a list of 10,000 ConfigMaps in < {TARGET_LIST_MS:.0} ms (the one-request list rows); \
         with etcd (issue 10) ≥ {TARGET_ETCD_WRITES_PER_S:.0} creates/s.\n"
    );
    out += END;
    out += "\n";
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    // `cargo bench` passes `--bench`; a filter or `--list` from the harness protocol is ignored.
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let runs = std::env::var("CAPSTAN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_RUNS);
    let meter = Meter {
        ticks: clock_ticks(),
        etcd_pid: None,
    };
    let load_before = loadavg();
    let mut report = Report::default();
    let mut latencies = Vec::new();
    for run in 1..=runs {
        eprintln!("devcluster bench: run {run}/{runs}");
        for setup in [Setup::Https, Setup::Http] {
            kube_suite(&meter, &mut report, setup).await?;
            raw_suite(&meter, &mut report, setup).await?;
        }
        watch_suite(&meter, &mut report, &mut latencies).await?;
        kube_suite(&meter, &mut report, Setup::HttpsEtcd).await?;
        raw_suite(&meter, &mut report, Setup::HttpsEtcd).await?;
    }
    report.note(
        "watch fan-out: 1,000 changes × 50 watchers",
        "kube-rs",
        "rate = events delivered".into(),
    );
    let section = render(&report, runs, &load_before, &mut latencies);
    print!("{section}");
    let path = report::write_section(START, END, &section)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
