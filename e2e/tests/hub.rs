//! capstan-hub over HTTP, driven like a reporter drives it: gzip bodies, bearer tokens, HMAC signatures,
//! `(epoch, seq)` order, snapshots and digests, tasks, every fault switch, and `verify` firing on bad
//! sequences. Each test starts its own hub process on a free port with its own database.

use std::time::Duration;

use capstan_e2e::hub::{application, batch, heartbeat, AgentClient, Hub, HubOptions, Reply};
use capstan_e2e::{wait_for, wait_until, POLL, TIMEOUT};
use serde_json::{json, Value};

fn ok(reply: Result<Reply, String>) -> Reply {
    let reply = reply.unwrap_or_else(|e| panic!("the hub did not answer: {e}"));
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply
}

fn status(reply: Result<Reply, String>) -> (u16, Value) {
    let reply = reply.unwrap_or_else(|e| panic!("the hub did not answer: {e}"));
    (reply.status, reply.body)
}

/// The `(health of each live Application)` the hub holds for `agent`, sorted by name.
async fn healths(hub: &Hub, agent: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = hub
        .objects(agent)
        .await
        .iter()
        .map(|o| {
            (
                o["name"].as_str().unwrap_or("").to_owned(),
                o["summary"]["health"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

fn snapshot(id: &str, part: u64, total: Option<u64>, confirmed_empty: bool) -> Option<Value> {
    Some(
        json!({"id": id, "part": part, "final": total.is_some(), "totalObjects": total, "confirmedEmpty": confirmed_empty}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_stored_in_order_and_duplicates_are_harmless() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("prod-eu-1");
    ok(a.heartbeat(&heartbeat(1, 0.0)).await);
    let first = batch(
        "prod-eu-1",
        1,
        "1-1",
        None,
        vec![application(1, "team-a", "web", Some("Progressing"), "OutOfSync")],
    );
    let answer = ok(a.report(&first).await);
    assert_eq!(answer.body, json!({"ackSeq": 1, "results": [], "resync": null}));
    let second = batch(
        "prod-eu-1",
        1,
        "1-2",
        None,
        vec![application(2, "team-a", "web", Some("Healthy"), "Synced")],
    );
    ok(a.report(&second).await);
    // The first batch again (a retry) and an item older than what is held: no-ops, not errors.
    assert_eq!(ok(a.report(&first).await).body["results"], json!([]));
    assert_eq!(healths(&hub, "prod-eu-1").await, pairs(&[("web", "Healthy")]));
    // A plain (uncompressed) body is accepted too.
    let mut plain = a.clone();
    plain.gzip = false;
    ok(plain
        .report(&batch(
            "prod-eu-1",
            1,
            "1-3",
            None,
            vec![application(3, "team-a", "api", Some("Healthy"), "Synced")],
        ))
        .await);
    assert_eq!(
        healths(&hub, "prod-eu-1").await,
        pairs(&[("api", "Healthy"), ("web", "Healthy")])
    );
    let view = hub.agent_view("prod-eu-1").await.expect("the agent is listed");
    assert_eq!(
        (view["state"].as_str(), view["repeatedBatches"].as_i64()),
        (Some("connected"), Some(1))
    );
    let verify = hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acknowledged_batch_survives_a_crash_of_the_hub() {
    let mut hub = Hub::start(HubOptions::default()).await;
    let items = (1..=50)
        .map(|i| application(i, "team-a", &format!("app-{i}"), Some("Healthy"), "Synced"))
        .collect();
    ok(hub.agent("a1").report(&batch("a1", 1, "1-1", None, items)).await);
    let id = hub
        .enqueue_task("a1", "sync", "team-a", "app-1", json!({"prune": true}))
        .await;
    hub.kill().await;
    hub.restart().await;
    assert_eq!(hub.objects("a1").await.len(), 50, "{}", hub.output());
    assert_eq!(hub.task(&id).await["state"], "queued");
    // The epoch survived too: the deposed term is still fenced.
    ok(hub.agent("a1").heartbeat(&heartbeat(3, 0.0)).await);
    hub.stop().await;
    hub.restart().await;
    let (code, body) = status(hub.agent("a1").heartbeat(&heartbeat(2, 0.0)).await);
    assert_eq!((code, body), (409, json!({"error": "stale_epoch", "currentEpoch": 3})));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lower_epoch_is_answered_409_and_stores_nothing() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    ok(a.report(&batch(
        "a1",
        2,
        "2-1",
        None,
        vec![application(1, "n", "web", Some("Healthy"), "Synced")],
    ))
    .await);
    let deposed = batch(
        "a1",
        1,
        "1-9",
        None,
        vec![application(9, "n", "web", Some("Degraded"), "Synced")],
    );
    let (code, body) = status(a.report(&deposed).await);
    assert_eq!((code, body), (409, json!({"error": "stale_epoch", "currentEpoch": 2})));
    let (code, _) = status(
        a.digest(&json!({"epoch": 1, "digestId": "1-1", "part": 1, "final": true, "items": []}))
            .await,
    );
    assert_eq!(code, 409);
    assert_eq!(healths(&hub, "a1").await, pairs(&[("web", "Healthy")]));
    // A new term starts its seq again from 1 and wins.
    ok(a.report(&batch(
        "a1",
        3,
        "3-1",
        None,
        vec![application(1, "n", "web", Some("Degraded"), "Synced")],
    ))
    .await);
    assert_eq!(healths(&hub, "a1").await, pairs(&[("web", "Degraded")]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_delete_by_absence_only_when_complete_and_never_most_of_an_agent() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    let three = ["x", "y", "z"]
        .iter()
        .enumerate()
        .map(|(i, n)| application(i as u64 + 1, "n", n, Some("Healthy"), "Synced"));
    ok(a.report(&batch("a1", 1, "1-1", None, three.collect())).await);
    // Two parts, but the final part claims three uids while two arrived: nothing deleted, a full resync asked.
    ok(a.report(&batch(
        "a1",
        2,
        "2-1",
        snapshot("s1", 1, None, false),
        vec![application(1, "n", "x", Some("Healthy"), "Synced")],
    ))
    .await);
    let last = ok(a
        .report(&batch(
            "a1",
            2,
            "2-2",
            snapshot("s1", 2, Some(3), false),
            vec![application(2, "n", "y", Some("Healthy"), "Synced")],
        ))
        .await);
    assert_eq!(last.body["resync"], "full");
    assert_eq!(hub.objects("a1").await.len(), 3);
    // A complete snapshot of x and y: z goes.
    let part1 = ok(a
        .report(&batch(
            "a1",
            2,
            "2-3",
            snapshot("s2", 1, None, false),
            vec![application(3, "n", "x", Some("Healthy"), "Synced")],
        ))
        .await);
    assert_eq!(
        part1.body["resync"],
        Value::Null,
        "the new snapshot is what the resync asked for"
    );
    ok(a.report(&batch(
        "a1",
        2,
        "2-4",
        snapshot("s2", 2, Some(2), false),
        vec![application(4, "n", "y", Some("Healthy"), "Synced")],
    ))
    .await);
    assert_eq!(healths(&hub, "a1").await, pairs(&[("x", "Healthy"), ("y", "Healthy")]));

    // 30 objects; a snapshot listing 5 would delete 25 (> half, > 20): refused without confirmedEmpty.
    let many: Vec<Value> = (0..30)
        .map(|i| application(10 + i, "m", &format!("m{i:02}"), Some("Healthy"), "Synced"))
        .collect();
    ok(hub.agent("a2").report(&batch("a2", 1, "1-1", None, many)).await);
    let five: Vec<Value> = (0..5)
        .map(|i| application(100 + i, "m", &format!("m{i:02}"), Some("Healthy"), "Synced"))
        .collect();
    ok(hub
        .agent("a2")
        .report(&batch("a2", 1, "1-2", snapshot("big", 1, Some(5), false), five.clone()))
        .await);
    assert_eq!(hub.objects("a2").await.len(), 30);
    let snapshots = hub.get("/api/agents/a2/snapshots").await.1;
    assert!(
        snapshots[0]["outcome"].as_str().unwrap_or("").starts_with("refused"),
        "{snapshots}"
    );
    let five: Vec<Value> = (0..5)
        .map(|i| application(200 + i, "m", &format!("m{i:02}"), Some("Healthy"), "Synced"))
        .collect();
    ok(hub
        .agent("a2")
        .report(&batch("a2", 1, "1-3", snapshot("big2", 1, Some(5), true), five))
        .await);
    assert_eq!(hub.objects("a2").await.len(), 5, "confirmedEmpty allows it");
    let verify = hub.verify().await;
    assert!(verify.ok, "{:?}", verify.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_digest_needs_changed_missing_and_unlisted_uids() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    let held: Vec<Value> = ["a", "b", "c"]
        .iter()
        .enumerate()
        .map(|(i, n)| application(i as u64 + 1, "n", n, Some("Healthy"), "Synced"))
        .collect();
    ok(a.report(&batch("a1", 1, "1-1", None, held.clone())).await);
    // An Event is kept, but it is not an object: the final chunk does not ask for it.
    let event = json!({"op": "event", "seq": 4,
        "ref": {"apiVersion": "v1", "kind": "Event", "namespace": "n", "name": "a.17f3", "uid": "event-1"},
        "resourceVersion": "9", "generation": null, "contentHash": null, "observedAt": "2026-11-26T10:04:04.900Z",
        "summary": null, "truncated": false,
        "status": {"involvedObject": {"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "namespace": "n",
                                      "name": "a", "uid": "uid-n-a"},
                   "reason": "SyncFailed", "type": "Warning", "message": "boom", "count": 1,
                   "firstTimestamp": "2026-11-26T10:04:00Z", "lastTimestamp": "2026-11-26T10:04:00Z"}});
    assert_eq!(
        ok(a.report(&batch("a1", 1, "1-2", None, vec![event])).await).body["results"],
        json!([])
    );
    assert_eq!(
        hub.get("/api/agents/a1/events").await.1[0]["status"]["reason"],
        "SyncFailed"
    );
    let entry = |item: &Value, hash: Option<&str>| json!({"uid": item["ref"]["uid"], "kind": "Application", "contentHash": hash.map_or(item["contentHash"].clone(), |h| json!(h))});
    let other = capstan_e2e::hub::content_hash("changed");
    let d = application(9, "n", "d", Some("Healthy"), "Synced");
    let chunk1 = json!({"epoch": 2, "digestId": "2-1", "part": 1, "final": false, "items": [entry(&held[0], None), entry(&held[1], Some(&other))]});
    assert_eq!(
        ok(a.digest(&chunk1).await).body,
        json!({"need": ["uid-n-b"], "resync": null})
    );
    let chunk2 = json!({"epoch": 2, "digestId": "2-1", "part": 2, "final": true, "items": [entry(&d, None)]});
    // The final chunk also needs c, held but listed by no chunk (the reporter then sends its delete).
    assert_eq!(ok(a.digest(&chunk2).await).body["need"], json!(["uid-n-c", "uid-n-d"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_signatures_are_checked() {
    let options = HubOptions {
        hmac_key: Some("hmac-secret".into()),
        ..HubOptions::default()
    };
    let hub = Hub::start(options).await;
    let a = hub.agent("a1");
    ok(a.heartbeat(&heartbeat(1, 0.0)).await);
    ok(a.tasks(0).await);
    let mut unsigned = a.clone();
    unsigned.hmac_key = None;
    assert_eq!(status(unsigned.heartbeat(&heartbeat(1, 0.0)).await).0, 401);
    let mut wrong_key = a.clone();
    wrong_key.hmac_key = Some("other".into());
    assert_eq!(status(wrong_key.heartbeat(&heartbeat(1, 0.0)).await).0, 401);
    let mut tampered = a.clone();
    let sig = capstan_e2e::hub::signature(b"hmac-secret", b"something else");
    tampered.hmac_key = None;
    let body = heartbeat(1, 0.0).to_string().into_bytes();
    assert_eq!(
        status(
            tampered
                .send("POST", "/heartbeat", Some(body), &[("x-capstan-signature", &sig)])
                .await
        )
        .0,
        401
    );
    // Tokens: a wrong one is refused; one added at run time is accepted, and refused again once removed.
    let mut rotated = a.clone();
    rotated.token = "rotated-token".into();
    assert_eq!(status(rotated.heartbeat(&heartbeat(1, 0.0)).await).0, 401);
    hub.tokens(&["rotated-token"], &[]).await;
    ok(rotated.heartbeat(&heartbeat(1, 0.0)).await);
    hub.tokens(&[], &["rotated-token"]).await;
    assert_eq!(status(rotated.heartbeat(&heartbeat(1, 0.0)).await).0, 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_clear_errors_and_a_bad_item_blocks_nothing() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    let (code, body) = status(
        a.send(
            "POST",
            "/reports",
            Some(b"{not json".to_vec()),
            &[("idempotency-key", "x")],
        )
        .await,
    );
    assert_eq!(code, 400, "{body}");
    let mut typo = batch("a1", 1, "1-1", None, vec![]);
    typo["leaderEpoch"] = json!(1);
    let (code, body) = status(a.report(&typo).await);
    assert_eq!(code, 422);
    assert!(body["message"].as_str().unwrap_or("").contains("leaderEpoch"), "{body}");
    let good = batch("a1", 1, "1-2", None, vec![]);
    let (code, body) = status(
        a.send("POST", "/reports", Some(good.to_string().into_bytes()), &[])
            .await,
    );
    assert_eq!(code, 400, "no Idempotency-Key: {body}");
    let too_many = batch(
        "a1",
        1,
        "1-3",
        None,
        (1..=201)
            .map(|i| application(i, "n", &format!("a{i}"), Some("Healthy"), "Synced"))
            .collect(),
    );
    assert_eq!(status(a.report(&too_many).await).0, 413);
    let huge = vec![b' '; 9 * 1024 * 1024];
    let mut plain = a.clone();
    plain.gzip = false;
    assert_eq!(
        status(
            plain
                .send("POST", "/reports", Some(huge), &[("idempotency-key", "x")])
                .await
        )
        .0,
        413
    );
    let (code, _) = status(a.send("GET", "/reports", None, &[]).await);
    assert_eq!(code, 405);
    // One invalid item (a Secret) and one too large: listed, not retryable; the others are stored.
    let mut secret = application(2, "n", "s", Some("Healthy"), "Synced");
    secret["ref"]["kind"] = json!("Secret");
    let mut big = application(3, "n", "big", Some("Healthy"), "Synced");
    big["status"]["message"] = json!("x".repeat(300 * 1024));
    let mixed = batch(
        "a1",
        1,
        "1-4",
        None,
        vec![
            application(1, "n", "web", Some("Healthy"), "Synced"),
            secret,
            big,
            application(4, "n", "api", Some("Healthy"), "Synced"),
        ],
    );
    let answer = ok(a.report(&mixed).await);
    assert_eq!(
        answer.body,
        json!({"ackSeq": 4, "results": [{"i": 1, "code": "invalid", "retryable": false}, {"i": 2, "code": "too_large", "retryable": false}], "resync": null})
    );
    assert_eq!(
        healths(&hub, "a1").await,
        pairs(&[("api", "Healthy"), ("web", "Healthy")])
    );
    let log = hub.requests("a1").await;
    let note = log.last().and_then(|r| r["note"].as_str()).unwrap_or("").to_owned();
    assert!(
        note.contains("item 1 not stored (invalid)") && note.contains("Secret"),
        "{note}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_long_polled_redelivered_and_their_results_idempotent() {
    let options = HubOptions {
        task_redelivery: Some(Duration::from_secs(1)),
        ..HubOptions::default()
    };
    let hub = Hub::start(options).await;
    let a = hub.agent("a1");
    assert_eq!(ok(a.tasks(0).await).body, json!({"tasks": []}));
    // A task enqueued while the agent polls is answered at once, not at the end of the wait.
    let poll = tokio::spawn({
        let a = a.clone();
        async move { a.tasks(50).await }
    });
    wait_until("the long poll to be waiting", TIMEOUT, POLL, || async {
        hub.agent_view("a1").await.is_some_and(|v| v["polling"] == 1)
    })
    .await;
    let id = hub
        .enqueue_task(
            "a1",
            "sync",
            "team-a",
            "web",
            json!({"revision": "main", "prune": true}),
        )
        .await;
    let tasks = ok(capstan_e2e::within("the long poll to answer", TIMEOUT, poll)
        .await
        .expect("the poll task"))
    .body;
    assert_eq!(
        tasks,
        json!({"tasks": [{"id": id, "type": "sync", "target": {"namespace": "team-a", "name": "web"}, "args": {"revision": "main", "prune": true}}]})
    );
    // No result within the re-delivery delay: delivered again.
    let again = wait_for("the task to be delivered again", TIMEOUT, POLL, || async {
        let body = ok(a.tasks(0).await).body;
        (!body["tasks"].as_array().is_some_and(Vec::is_empty)).then_some(body)
    })
    .await;
    assert_eq!(again["tasks"][0]["id"], json!(id));
    ok(a.result(
        &id,
        &json!({"state": "failed", "message": "denied by PolicySet no-prod"}),
    )
    .await);
    ok(a.result(&id, &json!({"state": "succeeded", "message": "again"})).await);
    let task = hub.task(&id).await;
    assert_eq!(
        (task["state"].as_str(), task["message"].as_str()),
        (Some("failed"), Some("denied by PolicySet no-prod"))
    );
    assert_eq!(
        (task["deliveries"].as_i64(), task["results"].as_i64()),
        (Some(2), Some(2))
    );
    assert_eq!(status(a.result("t-999", &json!({"state": "succeeded"})).await).0, 404);
    assert_eq!(
        status(hub.agent("other").result(&id, &json!({"state": "succeeded"})).await).0,
        404
    );
    let (code, _) = hub
        .post(
            "/api/tasks",
            &json!({"agentId": "a1", "type": "explode", "target": {"namespace": "n", "name": "w"}}),
        )
        .await;
    assert_eq!(code, 422);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_faults_answer_instead_of_storing() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    ok(a.heartbeat(&heartbeat(4, 0.0)).await);
    let item = || vec![application(1, "n", "web", Some("Healthy"), "Synced")];
    hub.faults(json!({"kind": "status", "status": 503, "retryAfter": 7, "endpoint": "reports"}))
        .await;
    let reply = a.report(&batch("a1", 4, "4-1", None, item())).await.expect("an answer");
    assert_eq!((reply.status, reply.header("retry-after")), (503, Some("7")));
    hub.faults(json!({"kind": "status", "status": 429, "retryAfter": 3, "retryAfterFormat": "http-date"}))
        .await;
    let reply = a.heartbeat(&heartbeat(4, 0.0)).await.expect("an answer");
    assert_eq!(reply.status, 429);
    assert!(
        reply.header("retry-after").is_some_and(|d| d.ends_with(" GMT")),
        "{:?}",
        reply.headers
    );
    for code in [500, 413, 401] {
        hub.faults(json!({"kind": "status", "status": code, "agent": "a1"}))
            .await;
        assert_eq!(status(a.report(&batch("a1", 4, "4-1", None, item())).await).0, code);
    }
    hub.faults(json!({"kind": "status", "status": 409, "variant": "stale_epoch"}))
        .await;
    assert_eq!(
        status(a.report(&batch("a1", 4, "4-1", None, item())).await),
        (409, json!({"error": "stale_epoch", "currentEpoch": 5}))
    );
    hub.faults(json!({"kind": "status", "status": 409, "variant": "resync"}))
        .await;
    assert_eq!(
        status(a.report(&batch("a1", 4, "4-1", None, item())).await),
        (409, json!({"error": "resync_required"}))
    );
    assert!(hub.objects("a1").await.is_empty(), "no faulted answer stored anything");
    // A fault for another agent leaves this one alone; latency only delays.
    hub.faults(json!({"kind": "status", "status": 500, "agent": "b"})).await;
    hub.faults(json!({"kind": "latency", "ms": 300, "count": 1})).await;
    ok(a.report(&batch("a1", 4, "4-1", None, item())).await);
    assert_eq!(
        hub.get("/_hub/faults").await.1["pending"].as_array().map(Vec::len),
        Some(1)
    );
    hub.clear_faults().await;
    assert_eq!(hub.get("/_hub/faults").await.1["pending"], json!([]));
    let (code, body) = hub
        .post("/_hub/faults", &json!({"kind": "status", "status": 418}))
        .await;
    assert_eq!(code, 422, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_faults_reset_drop_and_reject_items() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    let b1 = batch(
        "a1",
        1,
        "1-1",
        None,
        vec![application(1, "n", "web", Some("Healthy"), "Synced")],
    );
    // Reset while reading: no answer, nothing stored.
    hub.faults(json!({"kind": "reset", "phase": "read"})).await;
    assert!(a.report(&b1).await.is_err(), "a reset is not an answer");
    assert!(hub.objects("a1").await.is_empty());
    // Commit then drop: no answer, but stored; the retry of the same batch is harmless.
    hub.faults(json!({"kind": "commitThenDrop"})).await;
    assert!(a.report(&b1).await.is_err());
    assert_eq!(hub.objects("a1").await.len(), 1);
    ok(a.report(&b1).await);
    // Reset while writing: half an answer, then a reset; stored.
    let b2 = batch(
        "a1",
        1,
        "1-2",
        None,
        vec![application(2, "n", "api", Some("Healthy"), "Synced")],
    );
    hub.faults(json!({"kind": "reset", "phase": "write"})).await;
    assert!(a.report(&b2).await.is_err());
    assert_eq!(hub.objects("a1").await.len(), 2);
    // Partial rejects: the listed item is not stored and can be retried.
    let b3 = batch(
        "a1",
        1,
        "1-3",
        None,
        vec![
            application(3, "n", "web", Some("Degraded"), "Synced"),
            application(4, "n", "api", Some("Degraded"), "Synced"),
        ],
    );
    hub.faults(json!({"kind": "rejectItems", "items": [1]})).await;
    assert_eq!(
        ok(a.report(&b3).await).body["results"],
        json!([{"i": 1, "code": "unavailable", "retryable": true}])
    );
    assert_eq!(
        healths(&hub, "a1").await,
        pairs(&[("api", "Healthy"), ("web", "Degraded")])
    );
    let notes: Vec<String> = hub
        .requests("a1")
        .await
        .iter()
        .filter_map(|r| r["note"].as_str().map(str::to_owned))
        .collect();
    assert!(
        notes.iter().any(|n| n.starts_with("fault: committed, then closed")),
        "{notes:?}"
    );
    assert!(
        notes
            .iter()
            .any(|n| n.starts_with("fault: connection reset while reading")),
        "{notes:?}"
    );
    let verify = hub.verify().await;
    assert!(verify.ok, "the retried batch repeats its keys: {:?}", verify.violations);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forgetting_everything_asks_for_a_full_snapshot_until_one_starts() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    ok(a.report(&batch(
        "a1",
        3,
        "3-1",
        None,
        vec![application(1, "n", "web", Some("Healthy"), "Synced")],
    ))
    .await);
    assert_eq!(
        hub.faults(json!({"kind": "forget"})).await,
        json!({"forgotten": {"objects": 1}})
    );
    assert!(hub.objects("a1").await.is_empty());
    assert_eq!(
        ok(a.heartbeat(&heartbeat(3, 0.0)).await).body,
        json!({"resync": "full"})
    );
    assert_eq!(ok(a.tasks(0).await).body, json!({"tasks": [], "resync": "full"}));
    let part1 = batch(
        "a1",
        3,
        "3-2",
        snapshot("after-forget", 1, Some(1), false),
        vec![application(2, "n", "web", Some("Healthy"), "Synced")],
    );
    assert_eq!(ok(a.report(&part1).await).body["resync"], Value::Null);
    assert_eq!(healths(&hub, "a1").await, pairs(&[("web", "Healthy")]));
    // A digest round asked for one agent only.
    assert_eq!(
        hub.faults(json!({"kind": "resync", "mode": "digest", "agent": "a1"}))
            .await,
        json!({"agents": 1})
    );
    assert_eq!(
        ok(a.heartbeat(&heartbeat(3, 0.0)).await).body,
        json!({"resync": "digest"})
    );
    ok(
        a.digest(&json!({"epoch": 3, "digestId": "3-1", "part": 1, "final": true, "items": []}))
            .await,
    );
    assert_eq!(ok(a.heartbeat(&heartbeat(3, 0.0)).await).body, json!({"resync": null}));
}

/// Sends heartbeats as `a` until `verify` reports a violation of `kind` (a request must start past the
/// grace window after the gating answer to count).
async fn until_violation(hub: &Hub, kind: &str, a: &AgentClient) -> Vec<String> {
    wait_for(format!("verify to report {kind}"), TIMEOUT, POLL, || async {
        a.heartbeat(&heartbeat(1, 0.0)).await.expect("an answer");
        let verify = hub.verify().await;
        (!verify.ok).then(|| verify.kinds())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_requests_inside_retry_after_and_after_a_401() {
    let hub = Hub::start(HubOptions::default()).await;
    let a = hub.agent("a1");
    hub.faults(json!({"kind": "status", "status": 503, "retryAfter": 120}))
        .await;
    assert_eq!(status(a.heartbeat(&heartbeat(1, 0.0)).await).0, 503);
    let kinds = until_violation(&hub, "retry_after", &a).await;
    assert!(kinds.iter().all(|k| k == "retry_after"), "{kinds:?}");

    let hub = Hub::start(HubOptions::default()).await;
    let mut bad = hub.agent("a1");
    bad.token = "revoked".into();
    assert_eq!(status(bad.heartbeat(&heartbeat(1, 0.0)).await).0, 401);
    // A new token is fine at once...
    ok(hub.agent("a1").heartbeat(&heartbeat(1, 0.0)).await);
    assert!(hub.verify().await.ok);
    // ...the refused one again is not.
    let kinds = until_violation(&hub, "after_auth_failure", &bad).await;
    assert!(kinds.iter().all(|k| k == "after_auth_failure"), "{kinds:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_items_out_of_order_resurrected_and_with_a_reused_seq() {
    let cases: [(&str, Vec<Vec<Value>>); 3] = [
        (
            "out_of_order",
            vec![
                vec![application(5, "n", "web", Some("Healthy"), "Synced")],
                vec![application(4, "n", "web", Some("Degraded"), "Synced")],
            ],
        ),
        (
            "resurrected_delete",
            vec![
                vec![application(5, "n", "web", None, "")],
                vec![application(3, "n", "web", Some("Healthy"), "Synced")],
            ],
        ),
        (
            "seq_reused",
            vec![
                vec![application(5, "n", "web", Some("Healthy"), "Synced")],
                vec![application(5, "n", "api", Some("Healthy"), "Synced")],
            ],
        ),
    ];
    for (kind, batches) in cases {
        let hub = Hub::start(HubOptions::default()).await;
        let a = hub.agent("a1");
        for (i, items) in batches.into_iter().enumerate() {
            ok(a.report(&batch("a1", 1, &format!("1-{i}"), None, items)).await);
        }
        let verify = hub.verify().await;
        assert_eq!(verify.kinds(), [kind], "{:?}", verify.violations);
        // The hub itself kept the newer state.
        if kind != "seq_reused" {
            let live = healths(&hub, "a1").await;
            assert!(
                live.is_empty() || live == pairs(&[("web", "Healthy")]),
                "{kind}: {live:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_agents_report_at_once() {
    let hub = Hub::start(HubOptions::default()).await;
    let agents: Vec<AgentClient> = (0..12).map(|i| hub.agent(&format!("agent-{i}"))).collect();
    let sends = agents.iter().map(|a| async move {
        for b in 0..5u64 {
            let items = (0..20)
                .map(|i| {
                    application(
                        b * 20 + i + 1,
                        "n",
                        &format!("app-{}", b * 20 + i),
                        Some("Healthy"),
                        "Synced",
                    )
                })
                .collect();
            ok(a.report(&batch(&a.agent, 1, &format!("1-{b}"), None, items)).await);
            ok(a.heartbeat(&heartbeat(1, 0.0)).await);
        }
    });
    futures::future::join_all(sends).await;
    for a in &agents {
        assert_eq!(hub.objects(&a.agent).await.len(), 100, "{}", a.agent);
    }
    assert_eq!(hub.agents().await.len(), 12);
    assert!(hub.verify().await.ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_serves_the_protocol_and_the_search_finds_what_arrived() {
    let hub = Hub::start(HubOptions {
        tls: true,
        ..HubOptions::default()
    })
    .await;
    assert!(hub.url().starts_with("https://127.0.0.1:"), "{}", hub.url());
    let a = hub.agent("a1");
    let mut item = application(1, "n", "web", Some("Healthy"), "Synced");
    item["status"]["message"] = json!("a canary-9f3c2 inside a status");
    ok(a.report(&batch("a1", 1, "1-1", None, vec![item])).await);
    let found = hub.search("canary-9f3c2").await;
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0]["where"].as_str(), found[0]["endpoint"].as_str()),
        (Some("body"), Some("reports"))
    );
    assert!(hub.search("never-sent-7c1d").await.is_empty());
    // A misrouted request is logged too.
    let (code, _) = status(
        a.send("POST", "/status", Some(b"{\"x\":\"canary-in-url-8d\"}".to_vec()), &[])
            .await,
    );
    assert_eq!(code, 404);
    assert_eq!(hub.search("canary-in-url-8d").await.len(), 1);
}
