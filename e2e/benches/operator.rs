//! `make bench` — Capstan operator scenarios ("First run and proof" issue, items 2–3), each set against
//! the target that beats the published Argo CD / Flux figure for the same workload (see
//! docs/benchmarks.md).
//!
//! Release-mode processes only: `target/release/devcluster` and `target/release/capstan` (the Makefile
//! builds them before `cargo bench`), one devcluster and one operator per scenario environment, a
//! `git daemon` repository per scenario. Each scenario reports wall time with the operator's CPU-seconds
//! (`/proc/<pid>/stat` utime+stime over the measured interval) and peak RSS (`VmHWM`), and the API write
//! requests the operator made (devcluster's request log: non-GET requests not sent by kubectl or by this
//! bench, which marks its own kube-rs client with the `capstan-bench` user agent).
//!
//! - P0: one Application with 500 ConfigMaps vs `kubectl apply --server-side -f` of the same directory;
//! - S2: 1,000 Applications × 5 ConfigMaps in sync, `kubectl annotate capp --all capstan.dev/refresh=normal`;
//! - S3: one commit adds 1,000 one-ConfigMap Applications to an app-of-apps;
//! - S6: self-heal latency over 50 edits and 50 deletions of managed ConfigMaps;
//! - S4: commit → applied latency through the generic push webhook, and through a 10 s poll;
//! - S1 (`s1`, `s1b`): 500 Applications × 100 ConfigMaps (`s1b`: 50 × 1,000) in sync: RSS once all are
//!   Synced and at most during a no-op refresh of all (100 ms samples), the initial sync's peak (`VmHWM`),
//!   CPU of the refresh, one drift repaired under that load.
//!   `s1x` runs the same scenario at `CAPSTAN_BENCH_S1X=<apps>x<objects>` (default `10x1000`), a smaller
//!   variant for profiling iterations (only when selected).
//! - S5, S7: monorepo fan-out and polling at scale, see `fanout/mod.rs`.
//!
//! All of them but `s1x` run by default; S1, S5 and S7 take about ten minutes together.
//!
//! Every scenario's Applications live in the operator namespace: the platform team's Applications, written
//! with the operator's own rights (elsewhere an Application writes as a deployer ServiceAccount, which needs a
//! Repository that lists its namespace, and is dry-run on the server object by object).
//!
//! Not a test: nothing asserts a time. `CAPSTAN_BENCH_RUNS` (default 3) sets the runs of P0 and S3 and the
//! refreshes of S2; `CAPSTAN_BENCH_ONLY=p0,s2,...` selects scenarios; `CAPSTAN_BENCH_P0_VALIDATE=server` gives
//! P0's Application `Validate=server` (dry runs before the first write, the behaviour before client-side
//! validation); `CAPSTAN_BENCH_RUST_LOG` sets the
//! operator's log filter (default `info`; the log goes to a file in the scenario's temporary directory,
//! kept when `CAPSTAN_BENCH_KEEP` is set). Figures go between the `operator-bench` markers of
//! docs/benchmarks.md; the rest of the file is kept.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use capstan_e2e::capstan::{
    application, automated, free_port, http_get, install_crds, list_objects, resource, GitRepo, IN_CLUSTER,
    OPERATOR_NAMESPACE,
};
use capstan_e2e::process::workspace_binary;
use capstan_e2e::raw_http::{self, Endpoint};
use capstan_e2e::{chart, Kubectl};
use devcluster::RequestRecord;
use futures::{stream, StreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

#[path = "../../operator/benches/support/report.rs"]
mod report;
// S5 and S7 (scale issue): their own module and their own section of docs/benchmarks.md.
mod fanout;
use report::{clock_ticks, date, loadavg, machine};

const START: &str = "<!-- operator-bench:start -->";
const END: &str = "<!-- operator-bench:end -->";
const DEFAULT_RUNS: usize = 3;
const BENCH_UA: &str = "capstan-bench";
const WEBHOOK_TOKEN: &str = "bench-token";
/// Upper bound of any wait; a scenario that hits it is reported as failed, not timed.
const LONG: Duration = Duration::from_secs(900);

// ------------------------------------------------------------------------------------------------
// Processes and /proc

/// Fields after the `(comm)` of `/proc/<pid>/stat` (index 0 = field 3, state).
fn stat_fields(pid: &str) -> Vec<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rfind(')').map_or("", |i| &s[i + 1..]);
    rest.split_whitespace().map(|f| f.parse().unwrap_or(0)).collect()
}

/// utime + stime of `pid`, in seconds.
fn cpu_secs(pid: u32) -> f64 {
    let f = stat_fields(&pid.to_string());
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) as f64 / clock_ticks()
}

/// CPU of this process's reaped children (cutime + cstime), in seconds: kubectl's cost.
fn children_cpu_secs() -> f64 {
    let f = stat_fields("self");
    (f.get(13).unwrap_or(&0) + f.get(14).unwrap_or(&0)) as f64 / clock_ticks()
}

/// A `/proc/<pid>/status` value in MiB (`VmHWM`, `VmRSS`).
fn status_mib(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|k| k.parse::<f64>().ok()))
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `CAPSTAN_BENCH_BIN_DIR/<name>` when set (a private copy, safe from concurrent builds in a shared target
/// directory), else the workspace binary next to this bench.
fn binary(name: &str) -> PathBuf {
    match std::env::var_os("CAPSTAN_BENCH_BIN_DIR") {
        Some(dir) => PathBuf::from(dir).join(name),
        None => workspace_binary(name),
    }
}

fn pid_of(child: &Child) -> u32 {
    child.id().expect("the child is running")
}

/// One devcluster process with Capstan's CRDs, a kubectl runner and a kube-rs client marked as the bench.
struct Cluster {
    dir: tempfile::TempDir,
    child: Child,
    /// devcluster over HTTPS as its admin (the test hooks need `system:masters`).
    endpoint: Endpoint,
    /// The operator's: the chart's ServiceAccount with the chart's RBAC.
    operator_kubeconfig: PathBuf,
    kubectl: Kubectl,
    client: Client,
}

impl Cluster {
    async fn start() -> anyhow::Result<Cluster> {
        let dir = tempfile::Builder::new().prefix("capstan-bench-").tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig");
        let mut child = Command::new(binary("devcluster"))
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kubeconfig)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("devcluster starts")?;
        let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), async {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Some(url) = line.strip_prefix("devcluster ready: ") {
                    return Some(url.trim().to_string());
                }
            }
            None
        })
        .await
        .ok()
        .flatten()
        .context("devcluster printed its ready line")?;
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let endpoint = Endpoint::from_kubeconfig(&kubeconfig);
        anyhow::ensure!(
            endpoint.url == ready,
            "the kubeconfig names {}, not {ready}",
            endpoint.url
        );
        let kubectl = Kubectl::new(&kubeconfig, dir.path().join("kubectl-cache"));
        install_crds(&kubectl).await;
        let operator_kubeconfig = chart::kubeconfig_with(&kubectl, chart::Identity::Operator, dir.path()).await;
        let mut config =
            kube::Config::from_custom_kubeconfig(Kubeconfig::read_from(&kubeconfig)?, &KubeConfigOptions::default())
                .await?;
        config
            .headers
            .push((http::header::USER_AGENT, http::HeaderValue::from_static(BENCH_UA)));
        let client = Client::try_from(config)?;
        Ok(Cluster {
            dir,
            child,
            endpoint,
            operator_kubeconfig,
            kubectl,
            client,
        })
    }

    fn pid(&self) -> u32 {
        pid_of(&self.child)
    }

    async fn namespace(&self, name: &str) {
        self.kubectl.ok(&["create", "namespace", name]).await;
    }

    async fn clear_requests(&self) -> anyhow::Result<()> {
        let r = raw_http::request(&self.endpoint, "DELETE", "/_devcluster/requests", None, Vec::new()).await;
        if r.status != 200 {
            bail!("DELETE /_devcluster/requests answered {}", r.status);
        }
        Ok(())
    }

    async fn requests(&self) -> anyhow::Result<Vec<RequestRecord>> {
        let r = raw_http::request(&self.endpoint, "GET", "/_devcluster/requests", None, Vec::new()).await;
        if r.status != 200 {
            bail!("GET /_devcluster/requests answered {}", r.status);
        }
        Ok(serde_json::from_slice(&r.body)?)
    }

    async fn create(&self, obj: Value) -> anyhow::Result<()> {
        let kind = obj["kind"].as_str().unwrap_or_default().to_string();
        let ns = obj["metadata"]["namespace"].as_str().unwrap_or_default().to_string();
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), &ns, &resource(&kind));
        api.create(&PostParams::default(), &serde_json::from_value(obj)?)
            .await?;
        Ok(())
    }

    async fn create_all(&self, objs: Vec<Value>) -> anyhow::Result<()> {
        let results: Vec<anyhow::Result<()>> = stream::iter(objs)
            .map(|o| self.create(o))
            .buffer_unordered(16)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// A normal refresh of each named Application in `ns`: the merge patch `kubectl annotate
    /// capstan.dev/refresh=normal` sends, from the bench's client, 16 at a time. For Applications that list
    /// thousands of resources in their status, kubectl's own client-side work (a GET and a computed patch
    /// per object) takes longer than the refresh it starts.
    async fn refresh_each(&self, ns: &str, names: &[String]) -> anyhow::Result<()> {
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &resource("Application"));
        let patch = Patch::Merge(json!({"metadata": {"annotations": {"capstan.dev/refresh": "normal"}}}));
        let params = PatchParams::default();
        let results: Vec<kube::Result<DynamicObject>> = stream::iter(names)
            .map(|name| api.patch(name, &params, &patch))
            .buffer_unordered(16)
            .collect()
            .await;
        for result in results {
            result?;
        }
        Ok(())
    }
}

/// `capstan run` with its output in a log file; killed on drop.
struct Operator {
    child: Child,
    metrics: SocketAddr,
    webhook: SocketAddr,
    log: PathBuf,
}

impl Operator {
    async fn start(cluster: &Cluster, extra: &[&str]) -> anyhow::Result<Operator> {
        let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let webhook = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = cluster.dir.path().join("capstan.log");
        let cache = cluster.dir.path().join("capstan-cache");
        std::fs::create_dir_all(&cache)?;
        let out = std::fs::File::create(&log)?;
        let child = Command::new(binary("capstan"))
            .arg("run")
            .args(["--namespace", OPERATOR_NAMESPACE])
            .args(["--metrics-addr", &metrics.to_string()])
            .args(["--webhook-addr", &webhook.to_string()])
            .args(["--log-format", "text"])
            .args(extra)
            .env("CAPSTAN_CACHE_DIR", &cache)
            .env("KUBECONFIG", &cluster.operator_kubeconfig)
            .env(
                "RUST_LOG",
                std::env::var("CAPSTAN_BENCH_RUST_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env_remove("CAPSTAN_NAMESPACE")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .context("capstan starts")?;
        let op = Operator {
            child,
            metrics,
            webhook,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            if let Some((200, _)) = http_get(op.metrics, "/readyz").await {
                return Ok(op);
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(&op.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(30).collect();
                bail!(
                    "capstan not ready within 120 s; its log ends:\n{}",
                    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    fn pid(&self) -> u32 {
        pid_of(&self.child)
    }

    fn cpu(&self) -> f64 {
        cpu_secs(self.pid())
    }

    fn hwm(&self) -> f64 {
        status_mib(self.pid(), "VmHWM:")
    }

    fn rss(&self) -> f64 {
        status_mib(self.pid(), "VmRSS:")
    }

    /// Starts sampling this operator's RSS every 100 ms (see [`RssWatch`]).
    fn watch_rss(&self) -> RssWatch {
        RssWatch::start(self.pid())
    }
}

/// The highest RSS of a process seen by a 100 ms sampler since the last [`RssWatch::take_max`]: the peak
/// of one phase, where `VmHWM` only knows the peak of the process's whole life.
struct RssWatch {
    max_kib: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl RssWatch {
    fn start(pid: u32) -> RssWatch {
        let max_kib = Arc::new(AtomicU64::new(0));
        let max = max_kib.clone();
        let task = tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_millis(100));
            every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            loop {
                every.tick().await;
                let kib = (status_mib(pid, "VmRSS:") * 1024.0) as u64;
                max.fetch_max(kib, Ordering::Relaxed);
            }
        });
        RssWatch { max_kib, task }
    }

    /// The highest RSS since the start or the previous call, in MiB; starts the next phase.
    fn take_max(&self) -> f64 {
        self.max_kib.swap(0, Ordering::Relaxed) as f64 / 1024.0
    }
}

impl Drop for RssWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A minimal HTTP/1.1 exchange (`Connection: close`); returns status and (de-chunked) body.
async fn raw_http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> anyhow::Result<(u16, String)> {
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await?;
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(body).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        let text = String::from_utf8_lossy(&raw).into_owned();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let chunked = head.to_ascii_lowercase().contains("transfer-encoding: chunked");
        let body = if chunked { dechunk(body) } else { body.to_string() };
        anyhow::Ok((status, body))
    };
    tokio::time::timeout(Duration::from_secs(60), exchange)
        .await
        .context("HTTP exchange timed out")?
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

// ------------------------------------------------------------------------------------------------
// Request log

/// The operator's write requests in a request log, by class.
#[derive(Clone, Debug, Default)]
struct Writes {
    /// Application metadata/spec patches (refresh annotation removal, finished `operation`).
    app_metadata: usize,
    /// Application status writes.
    app_status: usize,
    /// Events (core or events.k8s.io).
    events: usize,
    /// Everything else: managed objects (applies, creates, deletes), namespaces, Repositories.
    objects: usize,
}

impl Writes {
    fn total(&self) -> usize {
        self.app_metadata + self.app_status + self.events + self.objects
    }

    fn of(records: &[RequestRecord]) -> Writes {
        let mut w = Writes::default();
        for r in records {
            if r.method == "GET" || r.user_agent.starts_with("kubectl") || r.user_agent == BENCH_UA {
                continue;
            }
            if r.path.contains("/events") {
                w.events += 1;
            } else if r.path.contains("/applications/") && r.path.ends_with("/status") {
                w.app_status += 1;
            } else if r.path.contains("/applications/") {
                w.app_metadata += 1;
            } else {
                w.objects += 1;
            }
        }
        w
    }

    fn describe(&self) -> String {
        format!(
            "{} (objects {}, app status {}, app metadata {}, events {})",
            self.total(),
            self.objects,
            self.app_status,
            self.app_metadata,
            self.events
        )
    }
}

// ------------------------------------------------------------------------------------------------
// Fixtures and waits

/// A ConfigMap manifest (no namespace: the Application's destination namespace applies) with a payload
/// of about `bytes` bytes.
fn configmap_yaml(name: &str, bytes: usize, value: &str) -> String {
    let payload: String = std::iter::repeat_n("0123456789abcdef", bytes / 16 + 1)
        .collect::<String>()
        .chars()
        .take(bytes)
        .collect();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  labels:\n    bench: capstan\ndata:\n  \
         value: \"{value}\"\n  payload: \"{payload}\"\n"
    )
}

fn app_yaml(ns: &str, name: &str, repo_url: &str, path: &str, dest_ns: &str) -> String {
    format!(
        "apiVersion: capstan.dev/v1alpha1\nkind: Application\nmetadata:\n  name: {name}\n  namespace: {ns}\nspec:\n  \
         project: default\n  source:\n    repoURL: {repo_url}\n    targetRevision: HEAD\n    path: {path}\n  \
         destination:\n    server: {IN_CLUSTER}\n    namespace: {dest_ns}\n  syncPolicy:\n    automated:\n      \
         prune: true\n      selfHeal: true\n"
    )
}

fn text<'a>(v: &'a Value, ptr: &str) -> &'a str {
    v.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

fn settled(app: &Value) -> bool {
    text(app, "/status/sync/status") == "Synced"
        && text(app, "/status/health/status") == "Healthy"
        && app.get("operation").is_none_or(Value::is_null)
        && text(app, "/status/operationState/phase") != "Running"
}

fn refresh_pending(app: &Value) -> bool {
    app.pointer("/metadata/annotations/capstan.dev~1refresh").is_some()
}

/// Polls the Applications of `ns` every `poll` until `done(apps)`; returns the time it took.
async fn wait_apps(
    cluster: &Cluster,
    ns: &str,
    poll: Duration,
    what: &str,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    loop {
        let apps = list_objects(&cluster.client, ns, "Application").await;
        if done(&apps) {
            return Ok(started.elapsed());
        }
        if started.elapsed() > LONG {
            let bad: Vec<String> = apps
                .iter()
                .filter(|a| !settled(a))
                .take(3)
                .map(|a| format!("{} {}", text(a, "/metadata/name"), a["status"]))
                .collect();
            bail!("timed out waiting until {what}; e.g. {bad:?}");
        }
        tokio::time::sleep(poll).await;
    }
}

/// Creates `apps` (Applications named `app-…` in the operator namespace) and waits until every one of
/// them is settled.
async fn create_and_settle(
    cluster: &Cluster,
    apps: Vec<Value>,
    poll: Duration,
    what: &str,
) -> anyhow::Result<Duration> {
    let n = apps.len();
    cluster.create_all(apps).await?;
    wait_apps(cluster, OPERATOR_NAMESPACE, poll, what, move |list| {
        list.len() == n && count_settled(list, "app-") == n
    })
    .await
}

/// `kubectl annotate capp --all capstan.dev/refresh=normal --overwrite` in the operator namespace: a
/// normal refresh of every Application.
async fn refresh_all(cluster: &Cluster) {
    cluster
        .kubectl
        .ok(&[
            "annotate",
            "capp",
            "--all",
            "-n",
            OPERATOR_NAMESPACE,
            "capstan.dev/refresh=normal",
            "--overwrite",
        ])
        .await;
}

fn count_settled(apps: &[Value], name_prefix: &str) -> usize {
    apps.iter()
        .filter(|a| text(a, "/metadata/name").starts_with(name_prefix) && settled(a))
        .count()
}

// ------------------------------------------------------------------------------------------------
// Statistics and results

fn median(xs: &[f64]) -> f64 {
    percentile(xs, 0.5)
}

fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(f64::total_cmp);
    let idx = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[idx.min(v.len() - 1)]
}

fn min(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(xs: &[f64]) -> f64 {
    xs.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// One row of the figures table.
#[derive(Default)]
struct Row {
    scenario: String,
    measure: String,
    value: String,
    spread: String,
    cpu: String,
    rss: String,
    writes: String,
    target: String,
    verdict: String,
}

#[derive(Default)]
struct Report {
    rows: Vec<Row>,
    notes: Vec<String>,
}

fn secs(x: f64) -> String {
    if x < 1.0 {
        format!("{:.0} ms", x * 1000.0)
    } else {
        format!("{x:.2} s")
    }
}

fn verdict(ok: bool) -> String {
    if ok { "**met**" } else { "**not met**" }.to_string()
}

// ------------------------------------------------------------------------------------------------
// P0: one Application with 500 objects vs kubectl apply --server-side

async fn p0(runs: usize, report: &mut Report) -> anyhow::Result<()> {
    const OBJECTS: usize = 500;
    let (mut kubectl_wall, mut kubectl_cpu, mut capstan_wall, mut capstan_cpu) = (vec![], vec![], vec![], vec![]);
    let (mut dev_cpu_k, mut dev_cpu_c, mut rss, mut ratios) = (vec![], vec![], vec![], vec![]);
    // kubectl --validate=false: the floor of kubectl, without its per-object schema check.
    let (mut floor_wall, mut floor_cpu, mut floor_ratios) = (vec![], vec![], vec![]);
    let mut writes = Vec::new();
    for run in 1..=runs {
        eprintln!("operator bench P0: run {run}/{runs}");
        let cluster = Cluster::start().await?;
        for ns in ["p0-kubectl", "p0-kubectl-floor", "p0-capstan"] {
            cluster.namespace(ns).await;
        }
        let repo = GitRepo::start("p0").await;
        for i in 0..OBJECTS {
            repo.write(
                &format!("p0/cm-{i:03}.yaml"),
                &configmap_yaml(&format!("cm-{i:03}"), 1024, "v1"),
            );
        }
        let sha = repo.commit("500 ConfigMaps").await;
        let op = Operator::start(&cluster, &[]).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;

        // kubectl apply --server-side -f <the same directory>; then once more with --validate=false: kubectl
        // checks every object against the server's /openapi/v3 document before sending it (~15 ms of CPU
        // each), and the floor shows what kubectl costs without that check.
        let dir = repo.work().join("p0");
        let dir = dir.to_str().expect("utf-8");
        let (kw, kc, kd) = timed_apply(&cluster, "p0-kubectl", dir, &[]).await;
        kubectl_wall.push(kw);
        kubectl_cpu.push(kc);
        dev_cpu_k.push(kd);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (fw, fc, _) = timed_apply(&cluster, "p0-kubectl-floor", dir, &["--validate=false"]).await;
        floor_wall.push(fw);
        floor_cpu.push(fc);
        tokio::time::sleep(Duration::from_secs(1)).await;

        // Capstan: Application created → Synced, Healthy, operation Succeeded at the commit.
        cluster.clear_requests().await?;
        let (o0, d0, t0) = (op.cpu(), cpu_secs(cluster.pid()), Instant::now());
        // In the operator namespace: the platform team's Application, written with the operator's own rights
        // (as kubectl writes with its user's); a tenant's would dry-run every object as its ServiceAccount.
        let mut app = application(
            OPERATOR_NAMESPACE,
            "big",
            &repo.url(),
            "p0",
            "p0-capstan",
            automated(true, false),
        );
        // `CAPSTAN_BENCH_P0_VALIDATE=server`: the check before the first write as a server dry run of every
        // object (what every sync did before client-side validation), for a before/after comparison.
        if let Ok(v) = std::env::var("CAPSTAN_BENCH_P0_VALIDATE") {
            app["spec"]["syncPolicy"]["syncOptions"] = json!([format!("Validate={v}")]);
        }
        cluster.create(app).await?;
        let sha2 = sha.clone();
        wait_apps(
            &cluster,
            OPERATOR_NAMESPACE,
            Duration::from_millis(50),
            "P0 synced",
            move |apps| {
                apps.iter().any(|a| {
                    settled(a)
                        && text(a, "/status/sync/revision") == sha2
                        && text(a, "/status/operationState/phase") == "Succeeded"
                })
            },
        )
        .await?;
        let cw = t0.elapsed().as_secs_f64();
        capstan_wall.push(cw);
        capstan_cpu.push(op.cpu() - o0);
        dev_cpu_c.push(cpu_secs(cluster.pid()) - d0);
        rss.push(op.hwm());
        ratios.push(kw / cw);
        floor_ratios.push(fw / cw);
        let n = list_objects(&cluster.client, "p0-capstan", "ConfigMap")
            .await
            .iter()
            .filter(|c| text(c, "/metadata/labels/bench") == "capstan")
            .count();
        if n != OBJECTS {
            bail!("P0: {n} ConfigMaps applied, expected {OBJECTS}");
        }
        writes.push(Writes::of(&cluster.requests().await?));
        if std::env::var_os("CAPSTAN_BENCH_KEEP").is_some() {
            eprintln!("P0 operator log: {}", op.log.display());
            let _kept = cluster.dir.keep();
        }
        drop(op);
    }
    let w = writes.last().cloned().unwrap_or_default();
    report.rows.push(Row {
        scenario: "P0".into(),
        measure: "`kubectl apply --server-side -f` 500 ConfigMaps (1 KiB)".into(),
        value: secs(median(&kubectl_wall)),
        spread: format!("{} – {}", secs(min(&kubectl_wall)), secs(max(&kubectl_wall))),
        cpu: format!("kubectl {:.2} s", median(&kubectl_cpu)),
        rss: "—".into(),
        writes: "500 (kubectl)".into(),
        target: "—".into(),
        verdict: format!("devcluster CPU {:.2} s", median(&dev_cpu_k)),
    });
    report.rows.push(Row {
        scenario: "P0".into(),
        measure: "`kubectl apply --server-side --validate=false -f`, same 500 (kubectl's floor)".into(),
        value: secs(median(&floor_wall)),
        spread: format!("{} – {}", secs(min(&floor_wall)), secs(max(&floor_wall))),
        cpu: format!("kubectl {:.2} s", median(&floor_cpu)),
        rss: "—".into(),
        writes: "500 (kubectl)".into(),
        target: "—".into(),
        verdict: "—".into(),
    });
    report.rows.push(Row {
        scenario: "P0".into(),
        measure: "Application created → Synced/Healthy/Succeeded, same 500 objects".into(),
        value: secs(median(&capstan_wall)),
        spread: format!("{} – {}", secs(min(&capstan_wall)), secs(max(&capstan_wall))),
        cpu: format!("{:.2} s", median(&capstan_cpu)),
        rss: format!("{:.0} MiB", median(&rss)),
        writes: w.describe(),
        target: "—".into(),
        verdict: format!("devcluster CPU {:.2} s", median(&dev_cpu_c)),
    });
    let r = median(&ratios);
    report.rows.push(Row {
        scenario: "P0".into(),
        measure: "ratio kubectl wall / Capstan wall".into(),
        value: format!("{r:.2}×"),
        spread: format!("{:.2}× – {:.2}×", min(&ratios), max(&ratios)),
        cpu: String::new(),
        rss: String::new(),
        writes: String::new(),
        target: "≥ 2×".into(),
        verdict: verdict(r >= 2.0),
    });
    let f = median(&floor_ratios);
    report.rows.push(Row {
        scenario: "P0".into(),
        measure: "ratio kubectl `--validate=false` wall / Capstan wall (Capstan still validates)".into(),
        value: format!("{f:.2}×"),
        spread: format!("{:.2}× – {:.2}×", min(&floor_ratios), max(&floor_ratios)),
        cpu: String::new(),
        rss: String::new(),
        writes: String::new(),
        target: "—".into(),
        verdict: "—".into(),
    });
    Ok(())
}

/// `kubectl apply --server-side` of `dir` into `ns` (plus `extra` flags): wall seconds, kubectl's CPU
/// seconds (reaped children), devcluster's CPU seconds.
async fn timed_apply(cluster: &Cluster, ns: &str, dir: &str, extra: &[&str]) -> (f64, f64, f64) {
    let (c0, d0, t0) = (children_cpu_secs(), cpu_secs(cluster.pid()), Instant::now());
    let mut args = vec!["apply", "--server-side", "--field-manager=bench", "-n", ns, "-f", dir];
    args.extend_from_slice(extra);
    cluster.kubectl.ok(&args).await;
    (
        t0.elapsed().as_secs_f64(),
        children_cpu_secs() - c0,
        cpu_secs(cluster.pid()) - d0,
    )
}

// ------------------------------------------------------------------------------------------------
// S2: 1,000 Applications × 5 objects, forced full refresh

async fn s2(runs: usize, report: &mut Report) -> anyhow::Result<()> {
    const APPS: usize = 1000;
    const PER_APP: usize = 5;
    eprintln!("operator bench S2: setup ({APPS} Applications × {PER_APP} ConfigMaps)");
    let cluster = Cluster::start().await?;
    cluster.namespace("s2-dest").await;
    let repo = GitRepo::start("s2").await;
    for a in 0..APPS {
        for o in 0..PER_APP {
            repo.write(
                &format!("s2/app-{a:04}/cm-{o}.yaml"),
                &configmap_yaml(&format!("app-{a:04}-cm-{o}"), 256, "v1"),
            );
        }
    }
    repo.commit("1000 apps x 5 ConfigMaps").await;
    let op = Operator::start(&cluster, &[]).await?;
    let t0 = Instant::now();
    let (o0, d0) = (op.cpu(), cpu_secs(cluster.pid()));
    let apps: Vec<Value> = (0..APPS)
        .map(|a| {
            application(
                OPERATOR_NAMESPACE,
                &format!("app-{a:04}"),
                &repo.url(),
                &format!("s2/app-{a:04}"),
                "s2-dest",
                automated(true, true),
            )
        })
        .collect();
    create_and_settle(&cluster, apps, Duration::from_millis(500), "S2 initial sync").await?;
    let setup = t0.elapsed().as_secs_f64();
    let setup_cpu = op.cpu() - o0;
    let setup_dev = cpu_secs(cluster.pid()) - d0;
    let setup_hwm = op.hwm();
    report.notes.push(format!(
        "S2 setup (not a target): creating the 1,000 Applications (5,000 ConfigMaps) until all Synced took {}; \
         operator CPU {setup_cpu:.1} s, devcluster CPU {setup_dev:.1} s, operator peak RSS {setup_hwm:.0} MiB.",
        secs(setup)
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;

    let (mut walls, mut annotate, mut cpus, mut devs, mut writes) = (vec![], vec![], vec![], vec![], vec![]);
    for run in 1..=runs {
        eprintln!("operator bench S2: refresh {run}/{runs}");
        cluster.clear_requests().await?;
        let (o0, d0, t0) = (op.cpu(), cpu_secs(cluster.pid()), Instant::now());
        refresh_all(&cluster).await;
        annotate.push(t0.elapsed().as_secs_f64());
        wait_apps(
            &cluster,
            OPERATOR_NAMESPACE,
            Duration::from_millis(200),
            "S2 refresh handled",
            |apps| apps.len() == APPS && apps.iter().all(|a| settled(a) && !refresh_pending(a)),
        )
        .await?;
        walls.push(t0.elapsed().as_secs_f64());
        cpus.push(op.cpu() - o0);
        devs.push(cpu_secs(cluster.pid()) - d0);
        writes.push(Writes::of(&cluster.requests().await?));
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    let w = writes
        .iter()
        .max_by_key(|w| w.objects + w.app_status)
        .cloned()
        .unwrap_or_default();
    let m = median(&walls);
    report.rows.push(Row {
        scenario: "S2".into(),
        measure: "1,000 Apps × 5 ConfigMaps in sync: `kubectl annotate capp --all refresh=normal` start → every \
                  annotation removed by Capstan and every App Synced/Healthy"
            .into(),
        value: secs(m),
        spread: format!("{} – {}", secs(min(&walls)), secs(max(&walls))),
        cpu: format!("{:.2} s", median(&cpus)),
        rss: format!("{:.0} MiB (RSS now {:.0})", op.hwm(), op.rss()),
        writes: w.describe(),
        target: "< 10 s, 0 writes (besides the 1,000 annotation removals)".into(),
        verdict: verdict(m < 10.0 && w.objects == 0 && w.app_status == 0),
    });
    report.notes.push(format!(
        "S2: kubectl's own `annotate --all` (1,000 sequential PATCHes) took {} median of that wall time \
         ({}); devcluster CPU during a refresh {:.2} s median.",
        secs(median(&annotate)),
        annotate.iter().map(|a| secs(*a)).collect::<Vec<_>>().join(", "),
        median(&devs)
    ));
    drop(op);
    drop(cluster);
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// S3: one commit adds 1,000 one-object Applications (app of apps)

async fn s3(runs: usize, report: &mut Report) -> anyhow::Result<()> {
    const APPS: usize = 1000;
    let (mut walls, mut created, mut cpus, mut rss, mut devs, mut writes) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for run in 1..=runs {
        eprintln!("operator bench S3: run {run}/{runs}");
        let cluster = Cluster::start().await?;
        cluster.namespace("s3-dest").await;
        let repo = GitRepo::start("s3").await;
        repo.write(
            "s3/apps/placeholder.yaml",
            &configmap_yaml("root-placeholder", 16, "v1"),
        );
        repo.commit("root").await;
        let op = Operator::start(&cluster, &[]).await?;
        let root = app_yaml(OPERATOR_NAMESPACE, "root", &repo.url(), "s3/apps", OPERATOR_NAMESPACE);
        cluster.kubectl.ok_with_stdin(&["apply", "-f", "-"], &root).await;
        wait_apps(
            &cluster,
            OPERATOR_NAMESPACE,
            Duration::from_millis(200),
            "S3 root synced",
            |apps| apps.len() == 1 && settled(&apps[0]),
        )
        .await?;
        for a in 0..APPS {
            repo.write(
                &format!("s3/apps/app-{a:04}.yaml"),
                &app_yaml(
                    OPERATOR_NAMESPACE,
                    &format!("app-{a:04}"),
                    &repo.url(),
                    &format!("s3/cms/{a:04}"),
                    "s3-dest",
                ),
            );
            repo.write(
                &format!("s3/cms/{a:04}/cm.yaml"),
                &configmap_yaml(&format!("cm-{a:04}"), 2048, "v1"),
            );
        }
        repo.commit("1000 Applications").await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        cluster.clear_requests().await?;
        let (o0, d0, t0) = (op.cpu(), cpu_secs(cluster.pid()), Instant::now());
        cluster
            .kubectl
            .ok(&[
                "annotate",
                "capp",
                "root",
                "-n",
                OPERATOR_NAMESPACE,
                "capstan.dev/refresh=normal",
            ])
            .await;
        let mut all_created = None;
        loop {
            let apps = list_objects(&cluster.client, OPERATOR_NAMESPACE, "Application").await;
            if all_created.is_none() && apps.len() > APPS {
                all_created = Some(t0.elapsed().as_secs_f64());
            }
            if count_settled(&apps, "app-") == APPS {
                break;
            }
            if t0.elapsed() > LONG {
                bail!(
                    "S3: only {} of {APPS} Applications settled; log {}",
                    count_settled(&apps, "app-"),
                    op.log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        walls.push(t0.elapsed().as_secs_f64());
        created.push(all_created.unwrap_or(f64::NAN));
        cpus.push(op.cpu() - o0);
        devs.push(cpu_secs(cluster.pid()) - d0);
        rss.push(op.hwm());
        writes.push(Writes::of(&cluster.requests().await?));
        if std::env::var_os("CAPSTAN_BENCH_KEEP").is_some() {
            eprintln!("S3 operator log: {}", op.log.display());
            let _kept = cluster.dir.keep();
        }
    }
    let m = median(&walls);
    let r = median(&rss);
    let w = writes.last().cloned().unwrap_or_default();
    report.rows.push(Row {
        scenario: "S3".into(),
        measure: "one commit adds 1,000 one-ConfigMap (2 KiB) Applications to an app of apps: root refresh → all \
                  1,000 Synced/Healthy"
            .into(),
        value: secs(m),
        spread: format!("{} – {}", secs(min(&walls)), secs(max(&walls))),
        cpu: format!("{:.1} s", median(&cpus)),
        rss: format!("{r:.0} MiB"),
        writes: w.describe(),
        target: "< 2 min, < 200 MiB".into(),
        verdict: verdict(m < 120.0 && r < 200.0),
    });
    report.notes.push(format!(
        "S3: all 1,000 child Applications existed after {} median (the root's sync); devcluster CPU {:.1} s median; \
         {:.0} Applications/s end to end.",
        secs(median(&created)),
        median(&devs),
        APPS as f64 / m
    ));
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// S1: many managed objects in sync (50,000 ConfigMaps)

/// The size of the `s1x` variant: `CAPSTAN_BENCH_S1X=<apps>x<objects>`, default 10 × 1,000.
fn s1x_size() -> (usize, usize) {
    std::env::var("CAPSTAN_BENCH_S1X")
        .ok()
        .and_then(|v| {
            let (a, o) = v.split_once('x')?;
            Some((a.trim().parse().ok()?, o.trim().parse().ok()?))
        })
        .filter(|(a, o)| *a > 0 && *o > 0)
        .unwrap_or((10, 1000))
}

/// S1: `apps` Applications (in the operator namespace) × `per_app` ConfigMaps, all Synced: the operator's RSS
/// then (the goal), at most during a no-op refresh of every Application at once, and at the initial sync's
/// peak; the refresh's CPU, and the time for one drift to be repaired under that load.
async fn s1(apps: usize, per_app: usize, report: &mut Report) -> anyhow::Result<()> {
    let ns = format!("s1-{apps}");
    let dest = format!("{ns}-dest");
    let label = format!("S1 ({apps} × {per_app})");
    eprintln!("operator bench {label}: setup");
    let cluster = Cluster::start().await?;
    cluster.namespace(&dest).await;
    let repo = GitRepo::start(&ns).await;
    for a in 0..apps {
        for o in 0..per_app {
            repo.write(
                &format!("{ns}/app-{a:04}/cm-{o:04}.yaml"),
                &configmap_yaml(&format!("app-{a:04}-cm-{o:04}"), 256, "v1"),
            );
        }
    }
    repo.commit("S1 objects").await;
    let op = Operator::start(&cluster, &[]).await?;
    let (o0, d0, t0) = (op.cpu(), cpu_secs(cluster.pid()), Instant::now());
    let manifests: Vec<Value> = (0..apps)
        .map(|a| {
            let name = format!("app-{a:04}");
            application(
                OPERATOR_NAMESPACE,
                &name,
                &repo.url(),
                &format!("{ns}/{name}"),
                &dest,
                automated(true, true),
            )
        })
        .collect();
    create_and_settle(&cluster, manifests, Duration::from_secs(1), "S1 initial sync").await?;
    report.notes.push(format!(
        "{label} setup: creating the Applications until all {} objects were Synced took {}; operator CPU {:.1} s, \
         devcluster CPU {:.1} s, operator peak RSS {:.0} MiB.",
        apps * per_app,
        secs(t0.elapsed().as_secs_f64()),
        op.cpu() - o0,
        cpu_secs(cluster.pid()) - d0,
        op.hwm()
    ));
    tokio::time::sleep(Duration::from_secs(10)).await;
    // The goal's measure: RSS once every object is Synced (the initial sync's peak is reported beside it).
    let synced_rss = op.rss();
    let setup_peak = op.hwm();

    cluster.clear_requests().await?;
    let watch = op.watch_rss();
    let (o0, t0) = (op.cpu(), Instant::now());
    let names: Vec<String> = (0..apps).map(|a| format!("app-{a:04}")).collect();
    cluster.refresh_each(OPERATOR_NAMESPACE, &names).await?;
    wait_apps(
        &cluster,
        OPERATOR_NAMESPACE,
        Duration::from_millis(500),
        "S1 refresh handled",
        |list| list.len() == apps && list.iter().all(|a| settled(a) && !refresh_pending(a)),
    )
    .await?;
    let (refresh_wall, refresh_cpu) = (t0.elapsed().as_secs_f64(), op.cpu() - o0);
    let refresh_rss = watch.take_max();
    let w = Writes::of(&cluster.requests().await?);
    tokio::time::sleep(Duration::from_secs(5)).await;

    // One drift under that load: an edited ConfigMap of a self-healing Application.
    let cms: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), &dest, &resource("ConfigMap"));
    let name = format!("app-{:04}-cm-{:04}", apps / 2, per_app / 2);
    let t0 = Instant::now();
    let patch = json!({"data": {"value": "drifted"}});
    cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    loop {
        let cm = serde_json::to_value(cms.get(&name).await?)?;
        if text(&cm, "/data/value") == "v1" {
            break;
        }
        if t0.elapsed() > Duration::from_secs(300) {
            bail!("{label}: {name} not repaired within 300 s; log {}", op.log.display());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let drift = t0.elapsed().as_secs_f64();
    let drift_rss = watch.take_max();
    report.rows.push(Row {
        scenario: label.clone(),
        measure: format!(
            "{} managed ConfigMaps (256 B), all Synced: operator RSS",
            apps * per_app
        ),
        value: format!("{synced_rss:.0} MiB"),
        spread: format!("{:.0} MiB after the refresh and the drift below", op.rss()),
        rss: format!("{synced_rss:.0} MiB"),
        target: "< 250 MiB".into(),
        verdict: verdict(synced_rss < 250.0),
        ..Row::default()
    });
    report.rows.push(Row {
        scenario: label.clone(),
        measure: "operator RSS at most, while every Application is refreshed at once (the refresh below)".into(),
        value: format!("{refresh_rss:.0} MiB"),
        spread: "100 ms samples".into(),
        rss: format!("{refresh_rss:.0} MiB"),
        target: "< 250 MiB".into(),
        verdict: verdict(refresh_rss < 250.0),
        ..Row::default()
    });
    report.rows.push(Row {
        scenario: label.clone(),
        measure: format!(
            "operator peak RSS (`VmHWM`) while syncing all {} objects from nothing",
            apps * per_app
        ),
        value: format!("{setup_peak:.0} MiB"),
        spread: format!("{:.2}× the Synced RSS", setup_peak / synced_rss.max(1.0)),
        rss: format!("{setup_peak:.0} MiB"),
        target: "< 2× the Synced RSS".into(),
        verdict: verdict(setup_peak < 2.0 * synced_rss),
        ..Row::default()
    });
    report.rows.push(Row {
        scenario: label.clone(),
        measure: "no-op refresh of every Application (annotation `capstan.dev/refresh=normal` patched on each → all \
                  handled)"
            .into(),
        value: secs(refresh_wall),
        spread: "1 refresh".into(),
        cpu: format!("{refresh_cpu:.2} s"),
        rss: format!("{refresh_rss:.0} MiB (max during it)"),
        writes: w.describe(),
        target: "—".into(),
        verdict: "—".into(),
    });
    report.rows.push(Row {
        scenario: label,
        measure: "one drift (merge patch of `data`) → repaired, under that load".into(),
        value: secs(drift),
        spread: "1 drift".into(),
        rss: format!("{drift_rss:.0} MiB (max during it)"),
        target: "—".into(),
        verdict: "—".into(),
        ..Row::default()
    });
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// S6: drift self-heal latency

async fn s6(report: &mut Report) -> anyhow::Result<()> {
    const APPS: usize = 100;
    const EDITS: usize = 50;
    eprintln!("operator bench S6: setup");
    let cluster = Cluster::start().await?;
    cluster.namespace("s6-dest").await;
    let repo = GitRepo::start("s6").await;
    for a in 0..APPS {
        repo.write(
            &format!("s6/app-{a:03}/cm.yaml"),
            &configmap_yaml(&format!("cm-{a:03}"), 512, "v1"),
        );
    }
    repo.commit("100 apps").await;
    let op = Operator::start(&cluster, &[]).await?;
    let apps: Vec<Value> = (0..APPS)
        .map(|a| {
            application(
                OPERATOR_NAMESPACE,
                &format!("app-{a:03}"),
                &repo.url(),
                &format!("s6/app-{a:03}"),
                "s6-dest",
                automated(true, true),
            )
        })
        .collect();
    create_and_settle(&cluster, apps, Duration::from_millis(300), "S6 initial sync").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cms: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), "s6-dest", &resource("ConfigMap"));
    let (o0, t_all) = (op.cpu(), Instant::now());
    let (mut edits, mut deletes) = (Vec::new(), Vec::new());
    for a in 0..APPS {
        let name = format!("cm-{a:03}");
        let before = cms.get(&name).await?;
        let uid = before.metadata.uid.clone().unwrap_or_default();
        let edit = a < EDITS;
        let t0 = Instant::now();
        if edit {
            let patch = json!({"data": {"value": "drifted"}});
            cms.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        } else {
            cms.delete(&name, &DeleteParams::default()).await?;
        }
        loop {
            if let Some(cm) = cms.get_opt(&name).await? {
                let v = serde_json::to_value(&cm)?;
                let restored = if edit {
                    text(&v, "/data/value") == "v1"
                } else {
                    cm.metadata.uid.as_deref() != Some(uid.as_str())
                };
                if restored {
                    break;
                }
            }
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("S6: {name} not restored within 120 s; log {}", op.log.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let l = t0.elapsed().as_secs_f64();
        if edit {
            edits.push(l);
        } else {
            deletes.push(l);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let cpu = op.cpu() - o0;
    let span = t_all.elapsed().as_secs_f64();
    for (what, xs) in [("50 edits (merge patch of `data`)", &edits), ("50 deletions", &deletes)] {
        let p50 = median(xs);
        report.rows.push(Row {
            scenario: "S6".into(),
            measure: format!("self-heal latency, {what}: change sent → live object equals Git again"),
            value: format!("p50 {}", secs(p50)),
            spread: format!("p90 {}, max {}", secs(percentile(xs, 0.9)), secs(max(xs))),
            cpu: format!("{cpu:.2} s for all 100 ({span:.0} s)"),
            rss: format!("{:.0} MiB", op.hwm()),
            writes: "—".into(),
            target: "p50 < 1 s".into(),
            verdict: verdict(p50 < 1.0),
        });
    }
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// S4: commit → applied latency (webhook, poll)

async fn s4(report: &mut Report) -> anyhow::Result<()> {
    const WEBHOOK_COMMITS: usize = 30;
    const POLL_COMMITS: usize = 10;
    eprintln!("operator bench S4: setup");
    let cluster = Cluster::start().await?;
    cluster.namespace("s4").await;
    let repo = GitRepo::start("s4").await;
    repo.write("s4/cm.yaml", &configmap_yaml("latency", 64, "0"));
    repo.commit("rev 0").await;
    let secret = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: capstan-webhook\n  namespace: {OPERATOR_NAMESPACE}\n\
         stringData:\n  generic: {WEBHOOK_TOKEN}\n---\napiVersion: capstan.dev/v1alpha1\nkind: Repository\n\
         metadata:\n  name: s4\n  namespace: {OPERATOR_NAMESPACE}\nspec:\n  url: {}\n  pollInterval: 24h\n",
        repo.url()
    );
    cluster.kubectl.ok_with_stdin(&["apply", "-f", "-"], &secret).await;
    let op = Operator::start(&cluster, &[]).await?;
    let app = app_yaml(OPERATOR_NAMESPACE, "latency", &repo.url(), "s4", "s4");
    cluster.kubectl.ok_with_stdin(&["apply", "-f", "-"], &app).await;
    wait_apps(
        &cluster,
        OPERATOR_NAMESPACE,
        Duration::from_millis(200),
        "S4 synced",
        |apps| apps.len() == 1 && settled(&apps[0]),
    )
    .await?;
    let cms: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), "s4", &resource("ConfigMap"));
    let body = json!({"repoURL": repo.url(), "ref": "refs/heads/main"}).to_string();
    let auth = format!("Bearer {WEBHOOK_TOKEN}");
    let headers = [("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    let mut rev = 0;
    let mut measure = |webhook: bool| {
        rev += 1;
        let (repo, cms, body, headers, op) = (&repo, &cms, &body, &headers, &op);
        let value = rev.to_string();
        async move {
            repo.write("s4/cm.yaml", &configmap_yaml("latency", 64, &value));
            repo.commit(&format!("rev {value}")).await;
            let t0 = Instant::now();
            let mut handler = None;
            if webhook {
                let (status, answer) = raw_http(op.webhook, "POST", "/api/webhook", headers, body.as_bytes()).await?;
                if !(200..300).contains(&status) {
                    bail!("webhook answered {status}: {answer}");
                }
                handler = Some(t0.elapsed().as_secs_f64());
            }
            loop {
                let cm = serde_json::to_value(cms.get("latency").await?)?;
                if text(&cm, "/data/value") == value {
                    break;
                }
                if t0.elapsed() > Duration::from_secs(120) {
                    bail!("S4: rev {value} not applied within 120 s; log {}", op.log.display());
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            anyhow::Ok((t0.elapsed().as_secs_f64(), handler))
        }
    };
    eprintln!("operator bench S4: {WEBHOOK_COMMITS} commits through the webhook");
    let o0 = op.cpu();
    let (mut hooked, mut handler) = (Vec::new(), Vec::new());
    for _ in 0..WEBHOOK_COMMITS {
        // Wait out the 1 s per-Repository coalescing window so every push is measured on its own.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let (l, h) = measure(true).await?;
        hooked.push(l);
        handler.extend(h);
    }
    let webhook_cpu = op.cpu() - o0;
    report.rows.push(Row {
        scenario: "S4".into(),
        measure: format!(
            "commit pushed → generic webhook POST → ConfigMap updated ({WEBHOOK_COMMITS} commits, one App)"
        ),
        value: format!("p50 {}", secs(median(&hooked))),
        spread: format!("p99 {}, max {}", secs(percentile(&hooked, 0.99)), secs(max(&hooked))),
        cpu: format!("{webhook_cpu:.2} s for {WEBHOOK_COMMITS}"),
        rss: format!("{:.0} MiB", op.hwm()),
        writes: "—".into(),
        target: "p50 < 1 s, p99 < 2 s (no published webhook figure)".into(),
        verdict: verdict(median(&hooked) < 1.0 && percentile(&hooked, 0.99) < 2.0),
    });
    report.notes.push(format!(
        "S4: webhook handler answered in {} median (202 after queueing the Repository refresh).",
        secs(median(&handler))
    ));

    // Polling: the Repository polls every 10 s; no webhook.
    let patch = json!({"spec": {"pollInterval": "10s"}});
    let repos: Api<DynamicObject> =
        Api::namespaced_with(cluster.client.clone(), OPERATOR_NAMESPACE, &resource("Repository"));
    repos
        .patch("s4", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    tokio::time::sleep(Duration::from_secs(12)).await;
    eprintln!("operator bench S4: {POLL_COMMITS} commits found by a 10 s poll");
    let o0 = op.cpu();
    let mut polled = Vec::new();
    for i in 0..POLL_COMMITS {
        // Spread the commits over the poll period.
        tokio::time::sleep(Duration::from_millis(300 + 700 * i as u64 % 10_000)).await;
        polled.push(measure(false).await?.0);
    }
    let poll_cpu = op.cpu() - o0;
    report.rows.push(Row {
        scenario: "S4".into(),
        measure: format!("commit pushed → ConfigMap updated, Repository `pollInterval: 10s` ({POLL_COMMITS} commits)"),
        value: format!("p50 {}", secs(median(&polled))),
        spread: format!("p99 {}, max {}", secs(percentile(&polled, 0.99)), secs(max(&polled))),
        cpu: format!("{poll_cpu:.2} s for {POLL_COMMITS}"),
        rss: format!("{:.0} MiB", op.hwm()),
        writes: "—".into(),
        target: "worst ≤ interval + 5 s = 15 s".into(),
        verdict: verdict(max(&polled) <= 15.0),
    });
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// Report

fn render(report: &Report, runs: usize, loads: &BTreeMap<String, String>, failures: &[String]) -> String {
    let mut out = String::new();
    out += START;
    out += "\n## Operator scenarios (`cargo bench -p capstan-e2e --bench operator`)\n\n";
    out += &format!(
        "{} · {} · release build · load average (1/5/15 min) per scenario: {} · P0 and S3: {runs} runs, each on a \
         fresh devcluster + operator; S2: {runs} forced refreshes of one 1,000-App environment; S6: 100 drifts; \
         S4: 30 webhook commits + 10 polled commits. The machine is shared with other builds and tests running at \
         the same time, so wall times are noisy (often pessimistic); the operator's CPU-seconds are the steadier \
         figure.\n\n",
        machine(),
        date(),
        loads
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out +=
        "| scenario | what is measured | median | spread | operator CPU | operator peak RSS | operator API writes | \
            target | verdict |\n|---|---|---|---|---|---|---|---|---|\n";
    for r in &report.rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario, r.measure, r.value, r.spread, r.cpu, r.rss, r.writes, r.target, r.verdict
        );
    }
    out += "\n";
    for n in &report.notes {
        out += &format!("- {n}\n");
    }
    for f in failures {
        out += &format!("- **failed**: {f}\n");
    }
    out += "\nHow it is measured:\n\n\
- One `devcluster` and one `capstan run` process (release builds, default flags: `--reconcile-interval 120s`, \
`--sync-wave-delay 2s`) per environment; the repository is served by `git daemon` on loopback. Operator CPU = \
utime+stime from `/proc/<pid>/stat` over the measured interval; peak RSS = `VmHWM` of the operator process at the \
end of the measurement (its whole life so far, including setup).\n\
- API writes = devcluster request-log entries (cleared right before the measured interval) that are not GET and \
were sent neither by kubectl nor by the bench's own client (user agent `capstan-bench`), so only the operator's; \
classified as managed objects, Application status, Application metadata (removal of the refresh annotation, of a \
finished `operation`) and Events.\n\
- P0: wall time of `kubectl apply --server-side -f DIR` (kubectl's CPU from the bench's reaped-children time) \
vs. the time from creating the Application (automated sync) until it reports Synced, Healthy and a Succeeded \
operation at the commit; Capstan's time includes the git fetch, the render and the sync; both into their own \
namespace of the same devcluster.\n\
- S2: every Application is annotated with `kubectl annotate capp --all capstan.dev/refresh=normal --overwrite`; \
the wall time runs from the start of that command until every Application is Synced and Healthy and no longer \
carries the annotation. Capstan writes nothing when only timestamps would change, so `status.reconciledAt` does \
not move on a no-op refresh; the removal of the annotation (written after the status step of that reconcile) is \
the observable end of each Application's refresh. Those 1,000 metadata PATCHes are the refresh protocol's (Argo \
CD removes the annotation the same way); the target of 0 writes applies to managed objects and status.\n\
- S3: an app-of-apps root Application; one commit adds 1,000 Application manifests and their 1,000 ConfigMaps \
(2 KiB); the clock starts when the root is annotated for refresh (detection through webhook or poll is S4's \
subject) and stops when all 1,000 children are Synced and Healthy.\n\
- S6: 100 Applications (automated, selfHeal) of one ConfigMap each; 50 ConfigMaps edited (merge patch of \
`data`), 50 deleted, one at a time, each in a different Application so that every drift is that Application's \
first self-heal (Capstan, like Argo CD ≥ 2.14, backs off repeated self-heals of one Application at one revision: \
2 s after the last sync, ×3 per attempt, capped at 5 min); latency = change sent → a 20 ms GET poll sees the \
Git value (or a new uid) again.\n\
- S4: one Application; the clock starts when `git push` has returned; the webhook POST (generic provider) is sent \
at once; latency until a 20 ms GET poll sees the new value in the ConfigMap. Commits are 1.5 s apart to stay \
outside the per-Repository 1 s coalescing window. The polling row uses the same Repository with \
`pollInterval: 10s` and no webhook.\n\
- S1: 500 Applications × 100 ConfigMaps of 256 B (S1b: 50 × 1,000), automated with self-heal, created 16 at a \
time; once all are Synced and 10 s have passed, the RSS is read (the goal); every Application is then refreshed \
at once (the annotation patched on each, 16 at a time), with the RSS sampled every 100 ms until all are handled; \
then one ConfigMap is edited and the time until a 20 ms GET poll sees the Git value again is the drift row. \
The peak row is `VmHWM`, reached while syncing everything from nothing.\n";
    out += END;
    out += "\n";
    out
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let runs = std::env::var("CAPSTAN_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(DEFAULT_RUNS);
    let only = std::env::var("CAPSTAN_BENCH_ONLY").unwrap_or_else(|_| "p0,s2,s3,s6,s4,s1,s1b,s5,s7".into());
    let selected: Vec<String> = only.split(',').map(|s| s.trim().to_ascii_lowercase()).collect();
    let mut report = Report::default();
    let mut loads = BTreeMap::new();
    let mut failures = Vec::new();
    for name in ["p0", "s2", "s3", "s6", "s4", "s1", "s1b", "s1x"] {
        if !selected.iter().any(|s| s == name) {
            continue;
        }
        loads.insert(name.to_ascii_uppercase(), loadavg());
        let result = match name {
            "p0" => p0(runs, &mut report).await,
            "s2" => s2(runs, &mut report).await,
            "s3" => s3(runs, &mut report).await,
            "s6" => s6(&mut report).await,
            "s1" => s1(500, 100, &mut report).await,
            "s1b" => s1(50, 1000, &mut report).await,
            "s1x" => {
                let (apps, per_app) = s1x_size();
                s1(apps, per_app, &mut report).await
            }
            _ => s4(&mut report).await,
        };
        if let Err(e) = result {
            eprintln!("operator bench {name} failed: {e:#}");
            failures.push(format!("{}: {e:#}", name.to_ascii_uppercase()));
        }
    }
    let (mut scale, mut scale_loads, mut scale_failures) = (Report::default(), BTreeMap::new(), Vec::new());
    for name in ["s5", "s7"] {
        if !selected.iter().any(|s| s == name) {
            continue;
        }
        scale_loads.insert(name.to_ascii_uppercase(), loadavg());
        let result = match name {
            "s5" => fanout::s5(&mut scale).await,
            _ => fanout::s7(&mut scale).await,
        };
        if let Err(e) = result {
            eprintln!("operator bench {name} failed: {e:#}");
            scale_failures.push(format!("{}: {e:#}", name.to_ascii_uppercase()));
        }
    }
    let write = std::env::var_os("CAPSTAN_BENCH_NO_WRITE").is_none();
    if !loads.is_empty() {
        let section = render(&report, runs, &loads, &failures);
        print!("{section}");
        if write {
            let path = report::write_section(START, END, &section)?;
            eprintln!("wrote {}", path.display());
        }
    }
    if !scale_loads.is_empty() {
        let section = fanout::render(&scale, &scale_loads, &scale_failures);
        print!("{section}");
        if write {
            let path = report::write_section(fanout::START, fanout::END, &section)?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}
