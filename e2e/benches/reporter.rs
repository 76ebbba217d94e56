//! `make bench` — the reporter's figures (reporter issue, "Figures"): R1 first registration of 1,000
//! Applications, R2 steady state (1,000 Applications each changing status once a minute), R3 end-to-end
//! latency (change seen → acknowledged) under that load, R4 an outage with 20,000 status changes.
//!
//! Release binaries (`target/release/capstan`, `capstan-hub`; the Makefile builds them), an in-process
//! devcluster, no operator: the bench writes Application status itself. Not a test: nothing asserts a
//! time. R4 is scaled down in duration: the hub is down for as long as the 20,000 status writes take
//! (about a minute here) plus `CAPSTAN_BENCH_R4_EXTRA_SECS` (default 60), not 10 minutes, because what
//! the outage costs depends on the changes (coalesced per object), not on the wall time. `CAPSTAN_BENCH_R2_SECS`
//! (default 120) sets the steady-state window. Figures go between the `reporter-bench` markers of
//! docs/benchmarks.md.

use std::time::{Duration, Instant};

use capstan_e2e::capstan::{install_crds, Operator};
use capstan_e2e::chart;
use capstan_e2e::hub::{Hub, HubOptions};
use capstan_e2e::reporter::{create_app, metric, reporter_options, set_status, ReporterEnv};
use capstan_e2e::TestCluster;
use futures::{stream, StreamExt};
use serde_json::{json, Value};

#[path = "../../operator/benches/support/report.rs"]
mod report;
use report::{clock_ticks, date, loadavg, machine};

const START: &str = "<!-- reporter-bench:start -->";
const END: &str = "<!-- reporter-bench:end -->";
const APPS: usize = 1000;

fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rfind(')').map_or("", |i| &s[i + 1..]);
    let f: Vec<u64> = rest.split_whitespace().map(|x| x.parse().unwrap_or(0)).collect();
    (f.get(11).unwrap_or(&0) + f.get(12).unwrap_or(&0)) as f64 / clock_ticks()
}

fn status_mib(pid: u32, key: &str) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn env_secs(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

fn names() -> Vec<String> {
    (0..APPS).map(|i| format!("app-{i:04}")).collect()
}

async fn write_all(env: &ReporterEnv, names: &[String], status: impl Fn(&str) -> Value) {
    let client = env.client().await;
    stream::iter(names.iter().map(|n| {
        let (client, body, ns) = (client.clone(), status(n), env.ns.clone());
        async move { set_status(&client, &ns, n, &body).await }
    }))
    .buffer_unordered(8)
    .collect::<Vec<()>>()
    .await;
}

/// How many Applications the hub holds with `pred` on their summary.
async fn held(env: &ReporterEnv, pred: impl Fn(&Value) -> bool) -> usize {
    env.hub
        .objects(&env.agent)
        .await
        .iter()
        .filter(|o| o["kind"] == "Application" && pred(&o["summary"]))
        .count()
}

async fn wait_held(
    env: &ReporterEnv,
    what: &str,
    limit: Duration,
    pred: impl Fn(&Value) -> bool,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    while held(env, &pred).await < APPS {
        if started.elapsed() > limit {
            anyhow::bail!("{what}: not reached within {limit:?}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    Ok(started.elapsed())
}

/// Quantile of a Prometheus histogram (linear inside the bucket), from `/metrics` text.
fn quantile(text: &str, name: &str, q: f64) -> Option<f64> {
    let mut buckets: Vec<(f64, f64)> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
        .filter_map(|l| {
            let le = l.split("le=\"").nth(1)?.split('"').next()?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, l.rsplit(' ').next()?.parse().ok()?))
        })
        .collect();
    buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total = buckets.last()?.1;
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for (le, count) in buckets {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let inside = if count > prev.1 {
                (rank - prev.1) / (count - prev.1)
            } else {
                1.0
            };
            return Some(prev.0 + (le - prev.0) * inside);
        }
        prev = (le, count);
    }
    None
}

async fn requests_after(env: &ReporterEnv, after: i64, endpoint: &str) -> Vec<Value> {
    env.hub
        .requests(&env.agent)
        .await
        .into_iter()
        .filter(|r| r["id"].as_i64().unwrap_or(0) > after && r["endpoint"] == endpoint)
        .collect()
}

async fn last_request_id(env: &ReporterEnv) -> i64 {
    env.hub
        .requests(&env.agent)
        .await
        .last()
        .and_then(|r| r["id"].as_i64())
        .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    let mut lines = Vec::new();
    // The environment, without a reporter yet: 1,000 Applications first.
    let cluster = TestCluster::start();
    install_crds(cluster.kubectl_runner()).await;
    let ns = cluster.with_namespace("bench").await;
    let hub = Hub::start(HubOptions::default()).await;
    let mut env = ReporterEnv {
        reporters: Vec::new(),
        hub,
        cluster,
        ns,
        agent: "bench".into(),
    };
    env.configure(env.hub.token(), None).await;
    let client = env.client().await;
    let names = names();
    stream::iter(names.iter().map(|n| {
        let (client, ns) = (client.clone(), env.ns.clone());
        async move { create_app(&client, &ns, n, "Healthy").await }
    }))
    .buffer_unordered(8)
    .collect::<Vec<()>>()
    .await;

    // R1: first registration.
    let kubeconfig = chart::kubeconfig_for(&env.cluster, chart::Identity::Reporter).await;
    let started = Instant::now();
    env.reporters
        .push(Operator::start(&kubeconfig, reporter_options()).await);
    let ready = started.elapsed();
    let synced = wait_held(&env, "R1", Duration::from_secs(600), |s| s["health"] == "Healthy").await?;
    let r1 = ready + synced;
    let reports = requests_after(&env, 0, "reports").await;
    let bytes: i64 = reports.iter().filter_map(|r| r["bodyBytes"].as_i64()).sum();
    let uncompressed: usize = reports.iter().map(|r| r["body"].to_string().len()).sum();
    lines.push(format!(
        "| R1 | first registration of {APPS} Applications: reporter start → hub holds all | {:.1} s ({:.1} s of it start-up and cache sync) | {} requests, {:.0} B per Application gzip ({:.0} B JSON) | < 10 s, < 2 KiB per Application |",
        r1.as_secs_f64(),
        ready.as_secs_f64(),
        reports.len(),
        bytes as f64 / APPS as f64,
        uncompressed as f64 / APPS as f64
    ));
    eprintln!("{}", lines.last().unwrap());

    // R2 + R3: each Application changes once a minute.
    let pid = env.reporters[0].pid().expect("the reporter runs");
    let window = Duration::from_secs(env_secs("CAPSTAN_BENCH_R2_SECS", 120));
    let before_metrics = env.reporters[0].metrics().await;
    let cpu0 = cpu_secs(pid);
    let t0 = Instant::now();
    let per_change = Duration::from_secs(60) / APPS as u32;
    let mut i = 0usize;
    while t0.elapsed() < window {
        let name = &names[i % APPS];
        let health = if (i / APPS).is_multiple_of(2) {
            "Progressing"
        } else {
            "Healthy"
        };
        set_status(
            &client,
            &env.ns,
            name,
            &json!({"health": {"status": health}, "sync": {"revision": format!("r{i}")}}),
        )
        .await;
        i += 1;
        let next = t0 + per_change * i as u32;
        tokio::time::sleep_until(next.into()).await;
    }
    let cpu = (cpu_secs(pid) - cpu0) / t0.elapsed().as_secs_f64() * 100.0;
    let after_metrics = env.reporters[0].metrics().await;
    let rss = status_mib(pid, "VmRSS");
    let hwm = status_mib(pid, "VmHWM");
    lines.push(format!(
        "| R2 | steady state: {APPS} Applications, each changing status once a minute ({i} changes in {} s) | reporter CPU {cpu:.2} % of a core | RSS {rss:.0} MiB (peak {hwm:.0} MiB) | < 2 % CPU, < 64 MiB |",
        window.as_secs()
    ));
    eprintln!("{}", lines.last().unwrap());
    let name = "capstan_reporter_end_to_end_latency_seconds";
    let count = metric(&after_metrics, &format!("{name}_count")) - metric(&before_metrics, &format!("{name}_count"));
    let (p50, p99) = (
        quantile(&after_metrics, name, 0.5),
        quantile(&after_metrics, name, 0.99),
    );
    lines.push(format!(
        "| R3 | end-to-end latency during R2 (change seen by the reporter's watch → acknowledged by the hub; `end_to_end_latency_seconds`, {count:.0} items, quantiles interpolated in buckets) | p50 {:.2} s | p99 {:.2} s | p50 < 1.5 s, p99 < 3 s |",
        p50.unwrap_or(f64::NAN),
        p99.unwrap_or(f64::NAN)
    ));
    eprintln!("{}", lines.last().unwrap());

    // R4: an outage with 20,000 changes.
    let rounds: usize = 20;
    let before = last_request_id(&env).await;
    env.hub.stop().await;
    let outage = Instant::now();
    for round in 0..rounds {
        let health = if round == rounds - 1 {
            "Degraded"
        } else if round.is_multiple_of(2) {
            "Progressing"
        } else {
            "Healthy"
        };
        write_all(
            &env,
            &names,
            |_| json!({"health": {"status": health}, "sync": {"revision": format!("outage-{round}")}}),
        )
        .await;
    }
    let writes = outage.elapsed();
    tokio::time::sleep(Duration::from_secs(env_secs("CAPSTAN_BENCH_R4_EXTRA_SECS", 60))).await;
    let down = outage.elapsed();
    let rss_down = status_mib(pid, "VmRSS");
    env.hub.restart().await;
    let back = Instant::now();
    let final_revision = format!("outage-{}", rounds - 1);
    let caught_up = wait_held(&env, "R4", Duration::from_secs(900), |s| {
        s["revision"] == final_revision.as_str()
    })
    .await?;
    let reports = requests_after(&env, before, "reports").await;
    let ok: Vec<&Value> = reports.iter().filter(|r| r["code"] == 200).collect();
    let items: usize = ok
        .iter()
        .map(|r| r["body"]["items"].as_array().map_or(0, Vec::len))
        .sum();
    let first = reports
        .first()
        .and_then(|r| r["startedAt"].as_str())
        .unwrap_or("-")
        .to_string();
    let _ = back;
    lines.push(format!(
        "| R4 | hub down {:.0} s while {APPS} Applications change {rounds} times ({} status writes, written in {:.0} s) | catch-up {:.1} s after the hub is back (first report at {first}) | {} report requests after the outage ({} acknowledged, {items} items); reporter RSS {rss_down:.0} MiB at the end of the outage | — |",
        down.as_secs_f64(),
        APPS * rounds,
        writes.as_secs_f64(),
        caught_up.as_secs_f64(),
        reports.len(),
        ok.len()
    ));
    eprintln!("{}", lines.last().unwrap());
    let section = render(&lines);
    print!("{section}");
    if std::env::var_os("CAPSTAN_BENCH_NO_WRITE").is_none() {
        let path = report::write_section(START, END, &section)?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

fn render(lines: &[String]) -> String {
    let mut out = format!("{START}\n## Reporter (`cargo bench -p capstan-e2e --bench reporter`)\n\n");
    out += &format!(
        "{} · {} · release build · load average at the end {} · in-process devcluster, release `capstan` and `capstan-hub` on loopback, no operator (the bench writes status). R4 is scaled down: the outage lasts as long as the 20,000 writes take plus a minute, not 10 minutes (what it costs depends on the changed objects, not the wall time). Catch-up includes the reporter's backoff sleep at the moment the hub returned (full jitter, up to 2 min after a 2-minute outage).\n\n",
        machine(),
        date(),
        loadavg()
    );
    out += "| figure | what is measured | result | also | target |\n|---|---|---|---|---|\n";
    for l in lines {
        out += l;
        out += "\n";
    }
    out += &format!("{END}\n");
    out
}
