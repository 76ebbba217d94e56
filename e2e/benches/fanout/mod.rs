//! Scale issue scenarios S5 (monorepo fan-out) and S7 (polling at scale), selected with
//! `CAPSTAN_BENCH_ONLY=s5,s7`. Their figures go between their own `operator-bench-fanout` markers of
//! docs/benchmarks.md, so a run of them leaves the other scenarios' table alone.
//!
//! - S5: one repository, 1,000 plain-directory Applications each on its own path; commits touching one
//!   path, each announced through the generic push webhook: the handler's answer time, commit → that
//!   Application's ConfigMap updated, commit → all 1,000 at the new revision, and the renders counted
//!   (`capstan_render_total{result}`);
//! - S7: 200 Repositories polled every 60 s, nothing moving: operator CPU per poll, fetches made, and
//!   the polls per 1-second bucket (sampled from `capstan_git_request_total`) in steady state and in the
//!   minute after a restart.

use super::*;

pub(super) const START: &str = "<!-- operator-bench-fanout:start -->";
pub(super) const END: &str = "<!-- operator-bench-fanout:end -->";

/// The sum of the `/metrics` samples of `family` whose labels contain `labels` (e.g. `result="rendered"`).
async fn metric_sum(op: &Operator, family: &str, labels: &str) -> f64 {
    let text = http_get(op.metrics, "/metrics")
        .await
        .map(|(_, t)| t)
        .unwrap_or_default();
    text.lines()
        .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains(labels))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

// ------------------------------------------------------------------------------------------------
// S5: monorepo fan-out

pub(super) async fn s5(report: &mut Report) -> anyhow::Result<()> {
    const APPS: usize = 1000;
    const COMMITS: usize = 3;
    eprintln!("operator bench S5: setup ({APPS} Applications on one repository)");
    let cluster = Cluster::start().await?;
    cluster.namespace("s5-dest").await;
    let repo = GitRepo::start("s5").await;
    for a in 0..APPS {
        repo.write(
            &format!("apps/app-{a:04}/cm.yaml"),
            &configmap_yaml(&format!("cm-{a:04}"), 256, "0"),
        );
    }
    repo.commit("1,000 apps").await;
    let setup = format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: capstan-webhook\n  namespace: {OPERATOR_NAMESPACE}\n\
         stringData:\n  generic: {WEBHOOK_TOKEN}\n---\napiVersion: capstan.dev/v1alpha1\nkind: Repository\n\
         metadata:\n  name: s5\n  namespace: {OPERATOR_NAMESPACE}\nspec:\n  url: {}\n  pollInterval: 24h\n",
        repo.url()
    );
    cluster.kubectl.ok_with_stdin(&["apply", "-f", "-"], &setup).await;
    let op = Operator::start(&cluster, &[]).await?;
    let apps: Vec<Value> = (0..APPS)
        .map(|a| {
            let name = format!("app-{a:04}");
            // In the operator namespace: the operator's own rights (elsewhere an Application needs a
            // deployer ServiceAccount and a Repository that lists its namespace).
            application(
                OPERATOR_NAMESPACE,
                &name,
                &repo.url(),
                &format!("apps/{name}"),
                "s5-dest",
                automated(true, false),
            )
        })
        .collect();
    create_and_settle(&cluster, apps, Duration::from_secs(1), "S5 initial sync").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cms: Api<DynamicObject> = Api::namespaced_with(cluster.client.clone(), "s5-dest", &resource("ConfigMap"));
    let body = json!({"repoURL": repo.url(), "ref": "refs/heads/main"}).to_string();
    let auth = format!("Bearer {WEBHOOK_TOKEN}");
    let headers = [("Content-Type", "application/json"), ("Authorization", auth.as_str())];
    let (mut handler, mut applied, mut everyone, mut rendered, mut reused) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (o0, r0) = (
        op.cpu(),
        metric_sum(&op, "capstan_render_total", "result=\"rendered\"").await,
    );
    for c in 1..=COMMITS {
        let target = format!("cm-{:04}", c * 250);
        let value = c.to_string();
        let before = (
            metric_sum(&op, "capstan_render_total", "result=\"rendered\"").await,
            metric_sum(&op, "capstan_render_total", "result=\"unchanged\"").await,
        );
        repo.write(
            &format!("apps/app-{:04}/cm.yaml", c * 250),
            &configmap_yaml(&target, 256, &value),
        );
        let sha = repo.commit(&format!("touch app-{:04}", c * 250)).await;
        let t0 = Instant::now();
        let (status, answer) = raw_http(op.webhook, "POST", "/api/webhook", &headers, body.as_bytes()).await?;
        anyhow::ensure!((200..300).contains(&status), "webhook answered {status}: {answer}");
        handler.push(t0.elapsed().as_secs_f64());
        loop {
            let cm = serde_json::to_value(cms.get(&target).await?)?;
            if text(&cm, "/data/value") == value {
                break;
            }
            if t0.elapsed() > Duration::from_secs(120) {
                bail!("S5: {target} not updated within 120 s; log {}", op.log.display());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        applied.push(t0.elapsed().as_secs_f64());
        wait_apps(
            &cluster,
            OPERATOR_NAMESPACE,
            Duration::from_millis(250),
            "S5 all at the new commit",
            |apps| apps.iter().filter(|a| text(a, "/status/sync/revision") == sha).count() == APPS,
        )
        .await?;
        everyone.push(t0.elapsed().as_secs_f64());
        rendered.push(metric_sum(&op, "capstan_render_total", "result=\"rendered\"").await - before.0);
        reused.push(metric_sum(&op, "capstan_render_total", "result=\"unchanged\"").await - before.1);
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let cpu = op.cpu() - o0;
    let renders_total = metric_sum(&op, "capstan_render_total", "result=\"rendered\"").await - r0;
    let rss = format!("{:.0} MiB", op.hwm());
    let row = |measure: String, value: String, spread: String, target: &str, ok: bool| Row {
        scenario: "S5".into(),
        measure,
        value,
        spread,
        cpu: format!("{cpu:.2} s for {COMMITS} commits"),
        rss: rss.clone(),
        writes: "—".into(),
        target: target.into(),
        verdict: verdict(ok),
    };
    let per_commit = |xs: &[f64]| xs.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(", ");
    report.rows.push(row(
        format!("webhook handler answer time, generic push, {APPS} Apps on the repository"),
        format!("p50 {}", secs(median(&handler))),
        format!("max {}", secs(max(&handler))),
        "< 100 ms",
        max(&handler) < 0.1,
    ));
    report.rows.push(row(
        "commit → webhook → the one touched Application's ConfigMap updated".into(),
        format!("p50 {}", secs(median(&applied))),
        format!("max {}", secs(max(&applied))),
        "< 2 s",
        median(&applied) < 2.0,
    ));
    report.rows.push(row(
        format!("commit → all {APPS} Applications at the new revision (status.sync.revision)"),
        format!("p50 {}", secs(median(&everyone))),
        format!("max {}", secs(max(&everyone))),
        "— (Argo CD: 4–5 min at 800+ apps without the annotation)",
        true,
    ));
    report.rows.push(row(
        "renders per commit (`capstan_render_total`): `rendered` / `unchanged` (previous render reused)".into(),
        format!("{} / {}", per_commit(&rendered), per_commit(&reused)),
        format!("{renders_total:.0} renders for {COMMITS} commits"),
        "exactly 1 rendered",
        rendered.iter().all(|r| *r == 1.0),
    ));
    Ok(())
}

// ------------------------------------------------------------------------------------------------
// S7: polling at scale

/// `capstan_git_request_total{request_type="ls-remote"}` sampled every second for `window`: the
/// polls of each second.
async fn polls_per_second(op: &Operator, window: Duration) -> Vec<f64> {
    let mut buckets = Vec::new();
    let mut last = metric_sum(op, "capstan_git_request_total", "request_type=\"ls-remote\"").await;
    let started = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.tick().await;
    while started.elapsed() < window {
        tick.tick().await;
        let now = metric_sum(op, "capstan_git_request_total", "request_type=\"ls-remote\"").await;
        buckets.push(now - last);
        last = now;
    }
    buckets
}

pub(super) async fn s7(report: &mut Report) -> anyhow::Result<()> {
    const REPOS: usize = 200;
    const INTERVAL: Duration = Duration::from_secs(60);
    eprintln!("operator bench S7: setup ({REPOS} Repositories, pollInterval 60s)");
    let cluster = Cluster::start().await?;
    cluster.namespace("s7").await;
    let upstream = capstan_e2e::git::Upstream::new();
    for r in 0..REPOS {
        upstream.create(&format!("repo-{r:03}"));
    }
    let daemon = capstan_e2e::git::git_daemon(&upstream.base());
    let repos: String = (0..REPOS)
        .map(|r| {
            format!(
                "apiVersion: capstan.dev/v1alpha1\nkind: Repository\nmetadata:\n  name: repo-{r:03}\n  namespace: s7\n\
                 spec:\n  url: git://127.0.0.1:{}/repo-{r:03}.git\n  pollInterval: 60s\n---\n",
                daemon.port
            )
        })
        .collect();
    cluster.kubectl.ok_with_stdin(&["apply", "-f", "-"], &repos).await;
    let mut op = Operator::start(&cluster, &["--controllers", "repository"]).await?;
    let ready = |want: usize| {
        let cluster = &cluster;
        async move {
            let started = Instant::now();
            loop {
                let listed = list_objects(&cluster.client, "s7", "Repository").await;
                let n = listed
                    .iter()
                    .filter(|r| r.pointer("/status/lastFetchedRevision/0").is_some())
                    .count();
                if n >= want {
                    return anyhow::Ok(());
                }
                if started.elapsed() > Duration::from_secs(300) {
                    bail!("S7: {n} of {want} Repositories listed after 300 s");
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    };
    ready(REPOS).await?;
    // Steady state: one full interval after the start-up round.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (o0, f0) = (
        op.cpu(),
        metric_sum(&op, "capstan_git_request_total", "request_type=\"fetch\"").await,
    );
    let steady = polls_per_second(&op, INTERVAL).await;
    let cpu = op.cpu() - o0;
    let fetches = metric_sum(&op, "capstan_git_request_total", "request_type=\"fetch\"").await - f0;
    let polls: f64 = steady.iter().sum();
    let per_poll_ms = if polls > 0.0 { cpu * 1000.0 / polls } else { f64::NAN };
    let rss = format!("{:.0} MiB", op.hwm());
    report.rows.push(Row {
        scenario: "S7".into(),
        measure: format!(
            "operator CPU per poll, {REPOS} Repositories × 60 s, no ref moving ({polls:.0} polls in 60 s)"
        ),
        value: format!("{per_poll_ms:.2} ms"),
        spread: format!("{fetches:.0} fetches"),
        cpu: format!("{cpu:.2} s in 60 s"),
        rss: rss.clone(),
        writes: "—".into(),
        target: "≤ 10 ms per poll, 0 fetches".into(),
        verdict: verdict(per_poll_ms <= 10.0 && fetches == 0.0),
    });
    report.rows.push(Row {
        scenario: "S7".into(),
        measure: "polls in the busiest 1-second bucket of a steady-state minute (even: 200/60 ≈ 3.3)".into(),
        value: format!("{:.0}", max(&steady)),
        spread: format!("{} of 60 buckets empty", steady.iter().filter(|b| **b == 0.0).count()),
        cpu: "—".into(),
        rss: rss.clone(),
        writes: "—".into(),
        target: "≤ 5".into(),
        verdict: verdict(max(&steady) <= 5.0),
    });
    // A restart: Repositories whose last poll is recent keep their slots.
    eprintln!("operator bench S7: restart");
    op.child.kill().await?;
    drop(op);
    let op = Operator::start(&cluster, &["--controllers", "repository"]).await?;
    let after = polls_per_second(&op, INTERVAL).await;
    report.rows.push(Row {
        scenario: "S7".into(),
        measure: "polls in the busiest 1-second bucket of the minute after a restart".into(),
        value: format!("{:.0}", max(&after)),
        spread: format!("{:.0} polls in that minute", after.iter().sum::<f64>()),
        cpu: "—".into(),
        rss: format!("{:.0} MiB", op.hwm()),
        writes: "—".into(),
        target: "≤ 5 (no herd)".into(),
        verdict: verdict(max(&after) <= 5.0),
    });
    drop(daemon);
    Ok(())
}

/// The section for docs/benchmarks.md.
pub(super) fn render(report: &Report, loads: &BTreeMap<String, String>, failures: &[String]) -> String {
    let mut out = String::new();
    out += START;
    out += "\n### Scale: monorepo fan-out (S5) and polling at scale (S7) (`CAPSTAN_BENCH_ONLY=s5,s7`)\n\n";
    out += &format!(
        "{} · {} · release build · load average (1/5/15 min) per scenario: {}. The machine is shared with other \
         builds and tests, so wall times are noisy; the operator's CPU-seconds are the steadier figure.\n\n",
        machine(),
        date(),
        loads
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    out += "| scenario | what is measured | value | spread | operator CPU | operator peak RSS | target | verdict |\n\
            |---|---|---|---|---|---|---|---|\n";
    for r in &report.rows {
        out += &format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.scenario, r.measure, r.value, r.spread, r.cpu, r.rss, r.target, r.verdict
        );
    }
    out += "\n";
    for n in &report.notes {
        out += &format!("- {n}\n");
    }
    for f in failures {
        out += &format!("- **failed**: {f}\n");
    }
    out += "\nHow it is measured: S5 — 1,000 plain-directory Applications (one 256-byte ConfigMap each, automated) \
on one `git daemon` repository with a Repository (`pollInterval: 24h`); each of 3 commits changes one \
Application's file and is announced with the generic webhook; the handler time is the POST's round trip; \
renders are the operator's own `capstan_render_total` counters. S7 — 200 Repositories on one `git daemon`, \
`pollInterval: 60s`, the operator running only the Repository controller; polls per second are the per-second \
increase of `capstan_git_request_total{request_type=\"ls-remote\"}`; CPU per poll = the operator's CPU over the \
minute / the polls in it (everything the process did, not just the polls).\n";
    out += END;
    out += "\n";
    out
}
