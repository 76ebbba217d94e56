//! Capstan scraped by a real Prometheus (the Debian `prometheus` package; `.ci/run` installs it), the way the
//! chart's ServiceMonitor has it scraped: job per metrics endpoint, path `/metrics`. The Grafana dashboard's
//! panels and the alerts are evaluated against that Prometheus, and `/metrics` keeps answering while the API
//! server fails every request.

use std::{collections::BTreeSet, net::SocketAddr, path::Path, time::Duration};

use capstan::metrics::APP_INFO_LABELS;
use capstan_e2e::capstan::{application, automated, free_port, http_get, synced_healthy, workspace_root, AppEnv};
use capstan_e2e::process::BackgroundProcess;
use capstan_e2e::{wait_for, POLL};
use devcluster::Fault;
use serde_json::Value;
use tokio::process::Command;

/// How long Prometheus may take to start, scrape and answer.
const PROM_TIMEOUT: Duration = Duration::from_secs(60);
const JOB: &str = "capstan-metrics";

/// A Prometheus process on a free loopback port, with its TSDB in a temporary directory; stopped by PID on drop.
struct Prometheus {
    process: Option<BackgroundProcess>,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second, as the ServiceMonitor's endpoint (`port: metrics`,
    /// `path: /metrics`) would be scraped, and waits until it is ready.
    async fn start(target: SocketAddr) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-prom-")
            .tempdir()
            .expect("a temporary directory");
        let config = format!(
            "global: {{scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s}}\n\
             scrape_configs:\n  - job_name: {JOB}\n    metrics_path: /metrics\n    scheme: http\n    \
             static_configs: [{{targets: ['{target}']}}]\n"
        );
        let config_path = dir.path().join("prometheus.yml");
        std::fs::write(&config_path, config).expect("the scrape config can be written");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("a loopback address");
        let mut cmd = Command::new("prometheus");
        cmd.arg(format!("--config.file={}", config_path.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={addr}"));
        let mut process = BackgroundProcess::spawn("prometheus (Debian package; .ci/run installs it)", cmd);
        process
            .wait_for_line(PROM_TIMEOUT, |l| l.contains("Server is ready to receive web requests"))
            .await;
        Self {
            process: Some(process),
            addr,
            _dir: dir,
        }
    }

    /// `GET /api/v1/<endpoint>?query=<query>`: Prometheus's JSON answer (status 200 or 400 alike).
    async fn api(&self, endpoint: &str, query: &str) -> Value {
        let path = format!("/api/v1/{endpoint}?query={}", percent_encode(query));
        match http_get(self.addr, &path).await {
            Some((_, body)) => serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}")),
            None => panic!("Prometheus did not answer {path}\n{}", self.log()),
        }
    }

    /// The instant vector `query` evaluates to; panics on an error answer.
    async fn query(&self, query: &str) -> Vec<Value> {
        let answer = self.api("query", query).await;
        assert_eq!(answer["status"], "success", "query {query}: {answer}");
        answer["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `query` returns at least one series; returns them.
    async fn series(&self, what: &str, query: &str) -> Vec<Value> {
        let what = format!("Prometheus has series for {what} ({query})");
        wait_for(what, PROM_TIMEOUT, POLL, || async {
            Some(self.query(query).await).filter(|r| !r.is_empty())
        })
        .await
    }

    fn log(&self) -> String {
        self.process.as_ref().map(BackgroundProcess::output).unwrap_or_default()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        // kill_on_drop sends SIGKILL to this PID (and only it) when the process handle goes.
        self.process.take();
    }
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn label<'a>(series: &'a Value, name: &str) -> &'a str {
    series["metric"][name].as_str().unwrap_or("")
}

/// An operator that has synced the guestbook (git fetches, a sync, reconciles) from its test repository.
async fn guestbook_synced(prefix: &str) -> AppEnv {
    let env = AppEnv::start(prefix).await;
    env.repo.copy_fixture("guestbook", "guestbook");
    env.repo.commit("guestbook").await;
    let (ns, url) = (env.ns.as_str(), env.repo.url());
    env.apply(&[application(
        ns,
        "guestbook",
        &url,
        "guestbook",
        ns,
        automated(true, false),
    )])
    .await;
    env.wait_app("guestbook", "synced and healthy", synced_healthy).await;
    env
}

/// The synced guestbook's operator, scraped by Prometheus.
async fn scraped_operator() -> (AppEnv, Prometheus) {
    let env = guestbook_synced("prom").await;
    let prometheus = Prometheus::start(env.operator.metrics_addr()).await;
    (env, prometheus)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_the_documented_series_and_evaluates_the_dashboard_and_alerts() {
    let (env, prom) = scraped_operator().await;
    let ns = env.ns.as_str();

    let up = prom
        .series("the operator's target", &format!("up{{job=\"{JOB}\"}} == 1"))
        .await;
    assert_eq!(up.len(), 1, "one target, up: {up:?}");

    let info = prom
        .series(
            "capstan_app_info",
            &format!("capstan_app_info{{namespace=\"{ns}\",name=\"guestbook\"}}"),
        )
        .await;
    for l in &APP_INFO_LABELS[2..] {
        assert!(!label(&info[0], l).is_empty(), "capstan_app_info lacks {l}: {info:?}");
    }
    assert!(
        !label(&info[0], "repo").contains('@'),
        "the repo label carries no credentials: {info:?}"
    );

    let syncs = prom
        .series(
            "sync counters",
            &format!("capstan_app_sync_total{{namespace=\"{ns}\",name=\"guestbook\"}} > 0"),
        )
        .await;
    assert_eq!(label(&syncs[0], "phase"), "Succeeded", "{syncs:?}");

    prom.series(
        "reconcile histogram",
        "capstan_reconcile_duration_seconds_count{controller=\"application\"} > 0",
    )
    .await;
    // The queue depth of every controller this operator runs, from its start (0 when idle).
    for controller in ["application", "repository", "cluster"] {
        prom.series(
            "reconcile queue depth",
            &format!("capstan_reconcile_queue_depth{{controller=\"{controller}\"}} >= 0"),
        )
        .await;
    }
    prom.series(
        "application reconcile histogram",
        "capstan_app_reconcile_duration_seconds_bucket{le=\"+Inf\"} > 0",
    )
    .await;
    prom.series("render counter", "capstan_render_total{result=\"rendered\"} > 0")
        .await;
    for request_type in ["fetch"] {
        let git = prom
            .series(
                "git requests",
                &format!("capstan_git_request_total{{request_type=\"{request_type}\"}} > 0"),
            )
            .await;
        assert!(
            label(&git[0], "repo").starts_with("git://"),
            "repo label is the URL: {git:?}"
        );
        prom.series(
            "git request durations",
            &format!("capstan_git_request_duration_seconds_count{{request_type=\"{request_type}\"}} > 0"),
        )
        .await;
    }

    let exported = exported_names(&prom).await;
    let mut checked = 0;
    for (what, expr) in dashboard_expressions().into_iter().chain(alert_expressions()) {
        let answer = prom.api("query", &expr).await;
        assert_eq!(
            answer["status"], "success",
            "{what}: `{expr}` does not evaluate: {answer}"
        );
        for name in metric_names(&expr) {
            assert!(
                exported.contains(&name),
                "{what}: `{expr}` names {name}, which Capstan does not export (exported: {exported:?})"
            );
        }
        checked += 1;
    }
    assert!(
        checked >= 14 + 7,
        "every dashboard panel and alert was checked ({checked})"
    );
}

/// Every metric name Prometheus holds series for, plus families this scenario leaves without series: the
/// reporter's (it runs in its own Deployment) and reconcile errors and Repository readiness (none here), taken from Capstan's
/// own metric registration in-process.
async fn exported_names(prom: &Prometheus) -> BTreeSet<String> {
    let answer = match http_get(prom.addr, "/api/v1/label/__name__/values").await {
        Some((200, body)) => serde_json::from_str::<Value>(&body).expect("JSON"),
        other => panic!("label values: {other:?}"),
    };
    let mut names: BTreeSet<String> = answer["data"]
        .as_array()
        .expect("a list of names")
        .iter()
        .filter_map(|v| v.as_str().map(str::to_owned))
        .collect();
    let registry = prometheus::Registry::new();
    capstan::reporter::ReporterMetrics::register(&registry).expect("the reporter's metrics register");
    let operator = capstan::metrics::Metrics::register(&registry).expect("the operator's metrics register");
    operator.observe_reconcile("application", "error", Some("transient"));
    operator.repository_ready.with_label_values(&["ns", "name"]).set(1);
    for family in registry.gather() {
        let name = family.name().to_owned();
        if family.get_field_type() == prometheus::proto::MetricType::HISTOGRAM {
            names.extend(["_bucket", "_sum", "_count"].map(|s| format!("{name}{s}")));
        }
        names.insert(name);
    }
    names
}

/// `capstan_*` identifiers in a PromQL expression.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("capstan_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_owned());
        rest = &tail[end..];
    }
    names
}

fn read(rel: &str) -> String {
    let path = workspace_root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", Path::new(&path).display()))
}

/// (panel title, expression) of every target of every panel of the dashboard.
fn dashboard_expressions() -> Vec<(String, String)> {
    let dashboard: Value = serde_json::from_str(&read("charts/capstan/files/dashboard.json")).expect("JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    let out: Vec<(String, String)> = panels
        .iter()
        .flat_map(|p| {
            let title = format!("panel {:?}", p["title"].as_str().unwrap_or("?"));
            p["targets"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter_map(move |t| t["expr"].as_str().map(|e| (title.clone(), e.to_owned())))
        })
        .collect();
    assert!(!out.is_empty(), "the dashboard has panel expressions");
    out
}

/// (alert name, expression) of every rule of the alerts file.
fn alert_expressions() -> Vec<(String, String)> {
    let rules: Value = serde_saphyr::from_str(&read("charts/capstan/files/alerts.yaml")).expect("YAML");
    rules["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            let name = format!("alert {}", r["alert"].as_str().unwrap_or("?"));
            let expr = r["expr"].as_str().expect("every rule has an expr").to_owned();
            (name, expr)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_answer_while_the_api_server_fails_every_request() {
    let env = guestbook_synced("prom-outage").await;

    // The outage: every request answers 503 and the open watches break, so the operator's clients retry.
    env.cluster.dev().inject_faults(Fault {
        status: 503,
        count: usize::MAX,
        ..Fault::default()
    });
    env.cluster.dev().drop_watches();
    env.eventually(
        "the operator met the outage and /metrics still answers",
        Duration::from_secs(60),
        || async {
            let text = match env.operator.http_get("/metrics").await {
                Some((200, body)) => body,
                other => return Err(format!("GET /metrics: {other:?}")),
            };
            let met = env.operator.logs().contains("503 Service Unavailable");
            if met && text.contains("capstan_app_info{") {
                Ok(())
            } else {
                Err(format!("outage seen in the operator log: {met}\n{text}"))
            }
        },
    )
    .await;
    // Still answering after the failures went on (liveness stays independent of the API server).
    let (status, _) = env.operator.http_get("/metrics").await.expect("/metrics answers");
    assert_eq!(status, 200);
    let (status, _) = http_get(env.operator.metrics_addr(), "/healthz")
        .await
        .expect("/healthz answers");
    assert_eq!(status, 200, "/healthz does not depend on the API server");
}
