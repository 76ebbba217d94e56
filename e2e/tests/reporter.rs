//! The reporter (`capstan run --controllers reporter`) against `capstan-hub` and devcluster: first
//! registration, deltas and deletes, what is never sent, and the receiver's faults (Retry-After, 401 and
//! token rotation, commit-then-drop, a huge status, an outage, a restart mid-backlog, a leader failover).
//! No operator runs here: the tests write Application status themselves, so they decide what the
//! reporter sees.

use std::time::Duration;

use capstan_e2e::capstan::{events_about, OPERATOR_NAMESPACE};
use capstan_e2e::hub::HubOptions;
use capstan_e2e::reporter::{metric, rss_kib, set_status, ReporterEnv, ReporterOptions, HUB_TIMEOUT};
use capstan_e2e::wait::{wait_for, wait_until};
use serde_json::{json, Value};

const POLL: Duration = Duration::from_millis(250);

async fn env(prefix: &str) -> ReporterEnv {
    ReporterEnv::start(prefix, ReporterOptions::default()).await
}

/// The items of every `/reports` request the hub logged, with the batch's epoch.
fn items(requests: &[Value]) -> Vec<(u64, Value)> {
    requests
        .iter()
        .flat_map(|r| {
            let epoch = r["body"]["epoch"].as_u64().unwrap_or(0);
            r["body"]["items"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(move |i| (epoch, i))
        })
        .collect()
}

/// First registration is a snapshot; a status change is one delta item; a deletion is a tombstone;
/// a change of `reconciledAt` alone is not sent. A Repository's Secret password (a canary) is in no
/// request the hub received, nor in the reporter's log.
#[tokio::test]
async fn registers_sends_deltas_and_deletes_and_never_a_credential() {
    let env = env("rep-basic").await;
    let canary = "canary-pw-7f3a9d1c-do-not-send";
    let manifests = vec![
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "git-creds", "namespace": env.ns,
               "labels": {"capstan.dev/secret-type": "repository"}},
               "stringData": {"username": "u", "password": canary}}),
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Repository", "metadata": {"name": "repo", "namespace": env.ns},
               "spec": {"url": format!("https://u:{canary}@git.example/apps.git"), "secretRef": {"name": "git-creds"}}}),
    ];
    env.cluster
        .kubectl_ok_stdin(&["apply", "-f", "-"], &capstan_e2e::fixtures::to_yaml(&manifests))
        .await;
    for (name, health) in [("web", "Healthy"), ("api", "Progressing"), ("db", "Healthy")] {
        env.create_app(name, health).await;
    }
    env.wait_hub_health("api", "Progressing").await;
    env.wait_hub_health("web", "Healthy").await;
    let repo = wait_for("the Repository at the hub", HUB_TIMEOUT, POLL, || {
        env.hub_object("Repository", "repo")
    })
    .await;
    assert_eq!(repo["status"]["url"], "https://git.example/apps.git", "{repo}");
    let snapshots: Vec<Value> = env
        .requests_to("reports")
        .await
        .into_iter()
        .filter(|r| r["body"]["mode"] == "snapshot")
        .collect();
    assert!(!snapshots.is_empty(), "first registration is a snapshot");

    let event = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "web.test", "namespace": env.ns},
        "involvedObject": {"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "name": "web", "namespace": env.ns},
        "reason": "TestReason", "message": "an event about web", "type": "Normal", "count": 1});
    env.cluster
        .kubectl_ok_stdin(&["apply", "-f", "-"], &capstan_e2e::fixtures::to_yaml(&[event]))
        .await;
    let path = format!("/api/agents/{}/events", env.agent);
    wait_until("the Event at the hub", HUB_TIMEOUT, POLL, || async {
        let (_, events) = env.hub.get(&path).await;
        events
            .as_array()
            .into_iter()
            .flatten()
            .any(|e| e["status"]["reason"] == "TestReason" && e["status"]["involvedObject"]["name"] == "web")
    })
    .await;

    env.set_health("api", "Healthy").await;
    env.wait_hub_health("api", "Healthy").await;
    let client = env.client().await;
    set_status(
        &client,
        &env.ns,
        "web",
        &json!({"reconciledAt": "2030-01-01T00:00:00Z"}),
    )
    .await;
    env.cluster
        .kubectl_ok(&["delete", "applications.capstan.dev", "db", "-n", &env.ns])
        .await;
    wait_until("the hub to delete db", HUB_TIMEOUT, POLL, || async {
        env.hub_object("Application", "db").await.is_none()
    })
    .await;
    let sent = items(&env.requests_to("reports").await);
    let web_items = sent.iter().filter(|(_, i)| i["ref"]["name"] == "web").count();
    assert_eq!(
        web_items, 1,
        "web changed only its reconciledAt after the snapshot: not sent again"
    );
    assert!(sent
        .iter()
        .any(|(_, i)| i["op"] == "delete" && i["ref"]["name"] == "db"));

    assert!(env.hub.search(canary).await.is_empty(), "the canary reached the hub");
    assert!(
        env.hub.search(&base64(canary)).await.is_empty(),
        "the canary (base64) reached the hub"
    );
    assert!(
        env.hub
            .search(env.hub.token())
            .await
            .iter()
            .all(|m| m["where"] == "headers"),
        "the token only in headers"
    );
    assert!(
        !env.reporters[0].logs().contains(canary),
        "the canary is in the reporter's log"
    );
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
    let metrics = env.reporters[0].metrics().await;
    assert_eq!(metric(&metrics, "capstan_reporter_leader"), 1.0);
    assert_eq!(metric(&metrics, "capstan_reporter_items_dropped_total"), 0.0);
    assert!(metric(&metrics, "capstan_reporter_items_total") >= 4.0, "{metrics}");
}

fn base64(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

/// 503 and 429 with `Retry-After: 5`: no request of any kind before the deadline (the hub checks).
#[tokio::test]
async fn retry_after_is_honoured_by_every_lane() {
    let env = env("rep-retry").await;
    env.create_app("web", "Healthy").await;
    env.wait_hub_health("web", "Healthy").await;
    for status in [503, 429] {
        env.hub
            .faults(json!({"kind": "status", "status": status, "retryAfter": 5, "endpoint": "reports"}))
            .await;
        let health = if status == 503 { "Degraded" } else { "Healthy" };
        env.set_health("web", health).await;
        env.wait_hub_health("web", health).await;
    }
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
    let metrics = env.reporters[0].metrics().await;
    assert!(
        metric(&metrics, "capstan_reporter_retries_total{reason=\"retry_after\"}") >= 2.0,
        "{metrics}"
    );
}

/// 401: sending stops, `ReporterAuthFailed`, no crash loop; a new token in the Secret resumes it.
#[tokio::test]
async fn auth_failure_stops_sending_until_the_token_secret_changes() {
    let env = ReporterEnv::start(
        "rep-auth",
        ReporterOptions {
            hub: HubOptions {
                tokens: vec!["old-token".into()],
                ..HubOptions::default()
            },
            ..ReporterOptions::default()
        },
    )
    .await;
    env.create_app("web", "Healthy").await;
    env.wait_hub_health("web", "Healthy").await;
    env.hub.tokens(&["new-token"], &["old-token"]).await;
    env.set_health("web", "Degraded").await;
    let client = env.client().await;
    wait_until("a ReporterAuthFailed event", HUB_TIMEOUT, POLL, || async {
        events_about(&client, OPERATOR_NAMESPACE, "ConfigMap", "capstan-reporter")
            .await
            .iter()
            .any(|(_, reason, _)| reason == "ReporterAuthFailed")
    })
    .await;
    let metrics = env.reporters[0].metrics().await;
    assert!(metric(&metrics, "capstan_reporter_auth_failures_total") >= 1.0);
    assert!(env.reporters[0].pid().is_some(), "the reporter is still running");
    env.configure("new-token", None).await;
    env.wait_hub_health("web", "Degraded").await;
    let verify = env.hub.verify().await;
    assert!(
        verify.ok,
        "no request after the 401 until the token changed: {:?}",
        verify.violations
    );
    assert_eq!(
        env.reporters[0].logs().matches("old-token").count(),
        0,
        "the token is in the log"
    );
}

/// The hub commits a batch and drops the answer: the batch comes again (same batchId, same seqs) and is
/// harmless.
#[tokio::test]
async fn commit_then_drop_makes_a_harmless_duplicate() {
    let env = env("rep-dup").await;
    env.create_app("web", "Healthy").await;
    env.wait_hub_health("web", "Healthy").await;
    env.hub
        .faults(json!({"kind": "commitThenDrop", "endpoint": "reports"}))
        .await;
    env.set_health("web", "Degraded").await;
    env.wait_hub_health("web", "Degraded").await;
    env.set_health("web", "Healthy").await;
    env.wait_hub_health("web", "Healthy").await;
    let reports = env.requests_to("reports").await;
    let ids: Vec<&str> = reports.iter().filter_map(|r| r["body"]["batchId"].as_str()).collect();
    let repeated = ids
        .iter()
        .filter(|id| ids.iter().filter(|o| o == id).count() > 1)
        .count();
    assert!(
        repeated >= 2,
        "the dropped batch was sent again with its batchId: {ids:?}"
    );
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

/// A 2 MiB condition message: the item is cut down and marked truncated, the others flow.
#[tokio::test]
async fn a_huge_status_is_truncated_and_the_rest_flows() {
    let env = env("rep-huge").await;
    env.create_app("big", "Healthy").await;
    env.create_app("small", "Healthy").await;
    env.wait_hub_health("small", "Healthy").await;
    let client = env.client().await;
    let huge = "x".repeat(2 << 20);
    set_status(
        &client,
        &env.ns,
        "big",
        &json!({"health": {"status": "Degraded"},
                "conditions": [{"type": "SyncError", "status": "True", "reason": "Huge", "message": huge,
                                "lastTransitionTime": "2026-01-01T00:00:00Z"}]}),
    )
    .await;
    env.set_health("small", "Degraded").await;
    let big = env.wait_hub_health("big", "Degraded").await;
    assert_eq!(
        big["truncated"],
        true,
        "{}",
        &big.to_string()[..400.min(big.to_string().len())]
    );
    assert!(big["status"].to_string().len() < 256 * 1024);
    env.wait_hub_health("small", "Degraded").await;
    let metrics = env.reporters[0].metrics().await;
    assert_eq!(
        metric(&metrics, "capstan_reporter_items_dropped_total"),
        0.0,
        "{metrics}"
    );
}

/// SIGKILL while a backlog waits (the hub answers 500): the restarted reporter goes through `/digest` (its
/// checkpoint says a snapshot completed), sends no snapshot, only what changed, and a delete by uid for the
/// Application deleted while no reporter ran.
#[tokio::test]
async fn a_restart_mid_backlog_goes_through_the_digest() {
    let mut env = env("rep-digest").await;
    let names: Vec<String> = (0..40).map(|i| format!("app-{i:02}")).collect();
    let client = env.client().await;
    for n in &names {
        capstan_e2e::reporter::create_app(&client, &env.ns, n, "Healthy").await;
    }
    env.wait_hub_health("app-39", "Healthy").await;
    wait_until(
        "the checkpoint to record the completed snapshot",
        HUB_TIMEOUT,
        POLL,
        || async {
            let cm = env
                .cluster
                .kubectl(&[
                    "get",
                    "configmap",
                    "capstan-reporter-checkpoint",
                    "-n",
                    OPERATOR_NAMESPACE,
                    "-o",
                    "jsonpath={.data.lastSnapshotCompleteAt}",
                ])
                .await;
            cm.code == Some(0) && !cm.stdout.trim().is_empty()
        },
    )
    .await;
    env.hub
        .faults(json!({"kind": "status", "status": 500, "endpoint": "reports", "count": 1000}))
        .await;
    for n in names.iter().take(10) {
        set_status(&client, &env.ns, n, &json!({"health": {"status": "Degraded"}})).await;
    }
    wait_until("the backlog to be seen", HUB_TIMEOUT, POLL, || async {
        let m = env.reporters[0].metrics().await;
        metric(&m, "capstan_reporter_dirty_objects") >= 9.0
    })
    .await;
    env.reporter().kill().await;
    // Deleted while no reporter runs: only the digest can tell the hub.
    env.cluster
        .kubectl_ok(&["delete", "applications.capstan.dev", "app-39", "-n", &env.ns])
        .await;
    env.hub.clear_faults().await;
    let before = env
        .hub
        .requests(&env.agent)
        .await
        .last()
        .and_then(|r| r["id"].as_i64())
        .unwrap_or(0);
    env.reporter().restart().await;
    for n in names.iter().take(10) {
        env.wait_hub_health(n, "Degraded").await;
    }
    wait_until(
        "the hub to delete app-39 (a digest need the reporter no longer knows)",
        HUB_TIMEOUT,
        POLL,
        || async { env.hub_object("Application", "app-39").await.is_none() },
    )
    .await;
    let after: Vec<Value> = env
        .hub
        .requests(&env.agent)
        .await
        .into_iter()
        .filter(|r| r["id"].as_i64().unwrap_or(0) > before)
        .collect();
    assert!(
        after.iter().any(|r| r["endpoint"] == "digest"),
        "no /digest after the restart"
    );
    let reports: Vec<Value> = after
        .iter()
        .filter(|r| r["endpoint"] == "reports" && r["code"] == 200)
        .cloned()
        .collect();
    assert!(
        reports.iter().all(|r| r["body"]["mode"] == "delta"),
        "a snapshot was sent after the restart"
    );
    let sent = items(&reports).len();
    assert!(
        sent <= 12,
        "only the changed objects are sent after the digest, not {sent}"
    );
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

/// Two replicas, one sender; the leader is killed, the other takes over with a higher epoch and the hub
/// never sees an older epoch after it.
#[tokio::test]
async fn a_standby_takes_over_with_a_higher_epoch() {
    let mut env = ReporterEnv::start(
        "rep-ha",
        ReporterOptions {
            replicas: 2,
            ..ReporterOptions::default()
        },
    )
    .await;
    env.create_app("web", "Healthy").await;
    env.wait_hub_health("web", "Healthy").await;
    let leader = wait_for("one leader", HUB_TIMEOUT, POLL, || async {
        let mut leaders = Vec::new();
        for (i, r) in env.reporters.iter().enumerate() {
            if metric(&r.metrics().await, "capstan_reporter_leader") == 1.0 {
                leaders.push(i);
            }
        }
        (leaders.len() == 1).then(|| leaders[0])
    })
    .await;
    let first_epoch = env.hub_object("Application", "web").await.unwrap()["epoch"]
        .as_u64()
        .unwrap();
    env.reporters[leader].kill().await;
    let other = 1 - leader;
    wait_until("the standby to lead", Duration::from_secs(60), POLL, || async {
        metric(&env.reporters[other].metrics().await, "capstan_reporter_leader") == 1.0
    })
    .await;
    env.set_health("web", "Degraded").await;
    let web = env.wait_hub_health("web", "Degraded").await;
    assert!(web["epoch"].as_u64().unwrap() > first_epoch, "{web}");
    let epochs: Vec<u64> = env
        .hub
        .requests(&env.agent)
        .await
        .iter()
        .filter_map(|r| r["body"]["epoch"].as_u64())
        .collect();
    let top = epochs.iter().position(|e| *e > first_epoch).expect("the new epoch");
    assert!(
        epochs[top..].iter().all(|e| *e > first_epoch),
        "an older epoch after the new one: {epochs:?}"
    );
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

/// The hub is down for two minutes while 200 Applications change status 10 times each: afterwards every
/// final state arrives, in at most 2 batches per 200 changed objects (plus the batch that was in flight
/// when the hub went away), and the reporter's memory did not grow with the number of changes.
#[tokio::test]
async fn a_two_minute_outage_costs_one_item_per_changed_object() {
    let mut env = env("rep-outage").await;
    let client = env.client().await;
    let names: Vec<String> = (0..200).map(|i| format!("app-{i:03}")).collect();
    for n in &names {
        capstan_e2e::reporter::create_app(&client, &env.ns, n, "Healthy").await;
    }
    env.wait_hub_health("app-199", "Healthy").await;
    let pid = env.reporters[0].pid().expect("the reporter runs");
    let rss_before = rss_kib(pid);
    let before = env
        .hub
        .requests(&env.agent)
        .await
        .last()
        .and_then(|r| r["id"].as_i64())
        .unwrap_or(0);
    env.hub.stop().await;
    let healths = ["Progressing", "Degraded", "Suspended", "Missing", "Unknown"];
    for round in 0..10 {
        for n in &names {
            let health = if round == 9 {
                "Degraded"
            } else {
                healths[round % healths.len()]
            };
            set_status(
                &client,
                &env.ns,
                n,
                &json!({"health": {"status": health}, "sync": {"revision": format!("r{round}")}}),
            )
            .await;
        }
    }
    wait_until(
        "the backlog to be two minutes old",
        // Two minutes, plus room for the reporter to catch up with the 2,000 status writes on a loaded machine.
        Duration::from_secs(360),
        Duration::from_secs(1),
        || async {
            metric(
                &env.reporters[0].metrics().await,
                "capstan_reporter_oldest_dirty_age_seconds",
            ) >= 120.0
        },
    )
    .await;
    let rss_during = rss_kib(pid);
    env.hub.restart().await;
    wait_until(
        "every final state at the hub",
        Duration::from_secs(420),
        Duration::from_secs(1),
        || async {
            let objects = env.hub.objects(&env.agent).await;
            let done = objects
                .iter()
                .filter(|o| o["summary"]["health"] == "Degraded" && o["summary"]["revision"] == "r9")
                .count();
            done == names.len()
        },
    )
    .await;
    let reports: Vec<Value> = env
        .hub
        .requests(&env.agent)
        .await
        .into_iter()
        .filter(|r| r["id"].as_i64().unwrap_or(0) > before && r["endpoint"] == "reports" && r["code"] == 200)
        .collect();
    let distinct: std::collections::BTreeSet<&str> =
        reports.iter().filter_map(|r| r["body"]["batchId"].as_str()).collect();
    assert!(
        distinct.len() <= 3,
        "{} batches after the outage for 200 changed objects",
        distinct.len()
    );
    assert!(items(&reports).len() <= 200 + 200, "{} items", items(&reports).len());
    assert!(
        rss_during <= rss_before + 32 * 1024,
        "RSS grew from {rss_before} KiB to {rss_during} KiB during the outage"
    );
    let verify = env.hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

/// A hostile receiver answers in turn malformed JSON, a 10 MB body and a redirect to another host
/// (127.0.0.2): the reporter keeps running, says what went wrong, and never sends anything (let alone the
/// token) to the other host.
#[tokio::test]
async fn a_hostile_receiver_is_survived_and_named() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let other = tokio::net::TcpListener::bind("127.0.0.2:0")
        .await
        .expect("bind 127.0.0.2");
    let other_addr = other.local_addr().unwrap();
    let reached_other = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reached_other);
    tokio::spawn(async move {
        while let Ok((_s, _)) = other.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let hostile = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", hostile.local_addr().unwrap());
    let turn = Arc::new(AtomicUsize::new(0));
    tokio::spawn(async move {
        while let Ok((mut s, _)) = hostile.accept().await {
            let turn = Arc::clone(&turn);
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut got = Vec::new();
                loop {
                    let Ok(n) = s.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    got.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&got).to_string();
                    let Some(head_end) = text.find("\r\n\r\n") else {
                        continue;
                    };
                    let len = text[..head_end]
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .and_then(|v| v.trim().parse::<usize>().ok())
                        })
                        .unwrap_or(0);
                    if got.len() < head_end + 4 + len {
                        continue;
                    }
                    let answer = match turn.fetch_add(1, Ordering::SeqCst) % 3 {
                        0 => "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 9\r\n\r\nnot json{".to_string(),
                        1 => format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n", 10 << 20),
                        _ => format!("HTTP/1.1 307 Temporary Redirect\r\nlocation: http://{other_addr}/steal\r\ncontent-length: 0\r\n\r\n"),
                    };
                    if s.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    if answer.contains(&format!("{}", 10 << 20)) {
                        let chunk = vec![b'x'; 1 << 20];
                        for _ in 0..10 {
                            if s.write_all(&chunk).await.is_err() {
                                return;
                            }
                        }
                    }
                    got.clear();
                }
            });
        }
    });
    let cluster = capstan_e2e::TestCluster::start();
    capstan_e2e::capstan::install_crds(cluster.kubectl_runner()).await;
    let ns = cluster.with_namespace("rep-hostile").await;
    let objects = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
               "data": {"url": url, "agentId": "hostile"}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
               "stringData": {"token": "hostile-test-token"}}),
    ];
    cluster
        .kubectl_ok_stdin(&["apply", "-f", "-"], &capstan_e2e::fixtures::to_yaml(&objects))
        .await;
    let kubeconfig = capstan_e2e::chart::kubeconfig_for(&cluster, capstan_e2e::chart::Identity::Reporter).await;
    let reporter = capstan_e2e::capstan::Operator::start(&kubeconfig, capstan_e2e::reporter::reporter_options()).await;
    capstan_e2e::reporter::create_app(&cluster.client().await, &ns, "web", "Healthy").await;
    wait_until(
        "the reporter to name all three faults",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let logs = reporter.logs();
            logs.contains("malformed answer")
                && logs.contains("answer larger than")
                && logs.contains("redirect to another host")
        },
    )
    .await;
    assert!(
        matches!(reporter.http_get("/healthz").await, Some((200, _))),
        "the reporter died"
    );
    assert_eq!(
        reached_other.load(Ordering::SeqCst),
        0,
        "a request reached the other host"
    );
    assert!(
        !reporter.logs().contains("hostile-test-token"),
        "the token is in the log"
    );
}
