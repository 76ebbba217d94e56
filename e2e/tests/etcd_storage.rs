//! devcluster on a real etcd (`--etcd`): what only persistent storage can show. Every object survives a
//! restart of the API server and watches resume from a resourceVersion handed out before it; an etcd
//! compaction expires old watches, lists and continue tokens with 410; an etcd outage is answered with 500 and a
//! Status, never with stale data, and service comes back with etcd. Clients are the real kubectl,
//! etcdctl and kube-rs. (The conformance suites run on etcd as well, through `CAPSTAN_E2E_ETCD=1`.)

use std::time::Duration;

use capstan_e2e::{
    check::{self, api_error},
    etcd::EtcdServer,
    fixtures::{self, install_widget_crd},
    requests::{format_log, is_watch, matching},
    wait_until,
    watching::EventTape,
    TestCluster, POLL, TIMEOUT,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{ListParams, PostParams},
    runtime::watcher,
    Api, ResourceExt,
};
use serde_json::{json, Value};

fn cm(name: &str) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": {"k": name}})).expect("a valid ConfigMap")
}

/// A devcluster on `etcd`; long bookmark intervals, so a watcher's resourceVersion moves only with the
/// events it receives.
fn cluster_on(etcd: &EtcdServer) -> TestCluster {
    TestCluster::start_with(devcluster::Config {
        etcd: Some(etcd.url()),
        bookmark_interval: Duration::from_secs(3600),
        ..devcluster::Config::default()
    })
}

/// `kind/name uid creationTimestamp resourceVersion` of every object kubectl lists in `ns`.
async fn identities(tc: &TestCluster, ns: &str) -> Vec<String> {
    let out = tc
        .kubectl_ok(&[
            "get",
            "configmaps,widgets,deployments,replicasets,pods,serviceaccounts",
            "-n",
            ns,
            "-o",
            "json",
        ])
        .await;
    let mut ids: Vec<String> = check::json(&out)["items"]
        .as_array()
        .expect("a List")
        .iter()
        .map(|o| {
            let m = &o["metadata"];
            format!(
                "{}/{} {} {} {}",
                o["kind"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or(""),
                m["uid"].as_str().unwrap_or(""),
                m["creationTimestamp"].as_str().unwrap_or(""),
                m["resourceVersion"].as_str().unwrap_or("")
            )
        })
        .collect();
    ids.sort();
    ids
}

/// `kubectl get --raw` of a watch from `rv`; the watch ends by `timeoutSeconds` (or a 410 ERROR).
async fn raw_watch(tc: &TestCluster, collection: &str, rv: &str) -> Vec<Value> {
    let path = format!("{collection}?watch=1&resourceVersion={rv}&timeoutSeconds=2");
    let out = tc.kubectl_ok(&["get", "--raw", &path]).await;
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("a watch event ({e}): {l}")))
        .collect()
}

fn event_names(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["type"].as_str().unwrap_or(""),
                e["object"]["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

#[tokio::test]
async fn restart_on_the_same_etcd_keeps_every_object_and_resumes_watches() {
    let etcd = EtcdServer::start();
    let mut tc = cluster_on(&etcd);
    let ns = tc.with_namespace("persist").await;
    let client = tc.client().await;
    install_widget_crd(&client).await;
    tc.apply(&fixtures::to_yaml(&[fixtures::widget(&ns, "w1", 1, "nginx:1")]), &[])
        .await;
    tc.apply(
        &fixtures::to_yaml(&[fixtures::deployment(&ns, "web", "nginx:1", json!({}))]),
        &[],
    )
    .await;
    tc.kubectl_ok(&["rollout", "status", "deployment/web", "-n", &ns, "--timeout=30s"])
        .await;
    let generated =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "gen-", "namespace": ns}});
    tc.kubectl_ok_stdin(&["create", "-f", "-"], &fixtures::to_yaml(&[generated]))
        .await;
    let held = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": ["e2e.capstan.dev/hold"]}});
    tc.apply(&fixtures::to_yaml(&[held]), &[]).await;
    tc.kubectl_ok(&["delete", "configmap", "held", "-n", &ns, "--wait=false"])
        .await;

    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    cms.create(&PostParams::default(), &cm("before")).await.expect("create");
    let mut events = EventTape::watch(cms.clone(), watcher::Config::default());
    let init = events.until("initdone").await;
    assert!(init.contains(&"initapply:before".to_owned()), "{init:?}");
    let listed_rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    let listed_rv = listed_rv.expect("a list resourceVersion");

    // The watcher misses this change before the restart: it must get it from the new server's history.
    tc.dev().pause_events(true);
    cms.create(&PostParams::default(), &cm("while-paused"))
        .await
        .expect("create");
    let before = identities(&tc, &ns).await;

    tc.restart();

    let after = identities(&tc, &ns).await;
    assert_eq!(
        after, before,
        "every object, with its uid, creationTimestamp and resourceVersion"
    );
    assert!(after.iter().any(|id| id.starts_with("ConfigMap/gen-")), "{after:?}");
    let held = check::json(
        &tc.kubectl_ok(&["get", "configmap", "held", "-n", &ns, "-o", "json"])
            .await,
    );
    assert!(
        held["metadata"]["deletionTimestamp"].is_string(),
        "still terminating: {held}"
    );

    // kube-rs resumes its watch from its pre-restart resourceVersion, without a relist.
    let resumed = events.until("apply:while-paused").await;
    assert!(!resumed.contains(&"init".to_owned()), "no relist: {resumed:?}");
    let log = tc.requests();
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    let from_kube_rs: Vec<_> = matching(&log, "GET", &collection)
        .into_iter()
        .filter(|r| !r.user_agent.starts_with("kubectl"))
        .collect();
    assert!(
        !from_kube_rs.is_empty() && from_kube_rs.iter().all(|r| is_watch(r) && r.status == 200),
        "kube-rs only watches the restarted server, it does not relist:\n{}",
        format_log(&log)
    );
    // kubectl, too, resumes from a pre-restart resourceVersion.
    let replayed = event_names(&raw_watch(&tc, &collection, &listed_rv).await);
    assert_eq!(
        replayed.first().map(String::as_str),
        Some("ADDED:while-paused"),
        "{replayed:?}"
    );

    // Writes carry on from etcd's revision; the finalizer keeps working across the restart.
    cms.create(&PostParams::default(), &cm("after")).await.expect("create");
    assert_eq!(events.next("apply:after").await, "apply:after");
    let newest: u64 = cms
        .get("after")
        .await
        .expect("get")
        .resource_version()
        .expect("an RV")
        .parse()
        .expect("numeric");
    assert!(newest > listed_rv.parse::<u64>().expect("numeric"));
    tc.kubectl_ok(&[
        "patch",
        "configmap",
        "held",
        "-n",
        &ns,
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ])
    .await;
    wait_until("held to be deleted", TIMEOUT, POLL, || async {
        !tc.kubectl(&["get", "configmap", "held", "-n", &ns]).await.success()
    })
    .await;
    let keys = etcd.etcdctl_ok(&["get", "--prefix", "--keys-only", "/registry/"]);
    for key in [
        format!("/registry/configmaps/{ns}/before"),
        format!("/registry/deployments/{ns}/web"),
        format!("/registry/e2e.capstan.dev/widgets/{ns}/w1"),
        format!(
            "/registry/apiextensions.k8s.io/customresourcedefinitions/{}",
            fixtures::WIDGET_CRD
        ),
        format!("/registry/namespaces/{ns}"),
    ] {
        assert!(keys.lines().any(|k| k == key), "{key} in etcd:\n{keys}");
    }
    assert!(!keys.lines().any(|k| k.ends_with("/held")), "{keys}");
}

#[tokio::test]
async fn etcd_compaction_expires_old_watches_lists_and_continue_tokens() {
    let etcd = EtcdServer::start();
    let mut tc = cluster_on(&etcd);
    let ns = tc.with_namespace("compact").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    for name in ["a1", "a2", "a3"] {
        cms.create(&PostParams::default(), &cm(name)).await.expect("create");
    }
    let paged = ListParams::default().limit(2);
    let first = cms.list(&paged).await.expect("first page");
    let token = first.metadata.continue_.clone().expect("a continue token");
    let old_rv = first.metadata.resource_version.clone().expect("a list RV");
    cms.create(&PostParams::default(), &cm("a4")).await.expect("create");

    // Lists at a revision: the state as it was, read from etcd's history.
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    let exact = format!("{collection}?resourceVersion={old_rv}&resourceVersionMatch=Exact");
    let at_old = check::json(&tc.kubectl_ok(&["get", "--raw", &exact]).await);
    assert_eq!(at_old["metadata"]["resourceVersion"], json!(old_rv));
    let names: Vec<&str> = at_old["items"]
        .as_array()
        .expect("items")
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, ["a1", "a2", "a3"]);
    let watched = event_names(&raw_watch(&tc, &collection, &old_rv).await);
    assert_eq!(watched, ["ADDED:a4"]);

    // Compacting at the current revision keeps that revision: change once more, so the one after `old_rv`
    // (a4's creation) is gone.
    tc.kubectl_ok(&["label", "configmap", "a4", "-n", &ns, "again=yes"])
        .await;
    etcd.etcdctl_ok(&["compact", &etcd.revision().to_string()]);

    let expired = api_error(cms.list(&paged.clone().continue_token(&token)).await);
    assert_eq!((expired.code, expired.reason.as_str()), (410, "Expired"), "{expired:?}");
    let out = tc.kubectl_fails(&["get", "--raw", &exact]).await;
    assert!(
        out.stderr.contains("(Expired)") && out.stderr.contains("too old resource version"),
        "{out}"
    );
    for restarted in [false, true] {
        if restarted {
            tc.restart();
        }
        let events = raw_watch(&tc, &collection, &old_rv).await;
        assert_eq!(events.len(), 1, "restarted {restarted}: {events:?}");
        assert_eq!(events[0]["type"], "ERROR");
        assert_eq!(events[0]["object"]["code"], 410);
        assert_eq!(events[0]["object"]["reason"], "Expired");
    }
    // A client that relists gets a revision it can watch from.
    let mut tape = EventTape::watch(cms.clone(), watcher::Config::default());
    let init = tape.until("initdone").await;
    assert_eq!(init.len(), 6, "{init:?}");
    cms.create(&PostParams::default(), &cm("a5")).await.expect("create");
    assert_eq!(tape.next("apply:a5").await, "apply:a5");
}

#[tokio::test]
async fn etcd_outage_is_answered_with_500_and_service_returns_with_etcd() {
    let mut etcd = EtcdServer::start();
    let tc = cluster_on(&etcd);
    let ns = tc.with_namespace("outage").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    cms.create(&PostParams::default(), &cm("kept")).await.expect("create");
    let mut events = EventTape::watch(cms.clone(), watcher::Config::default());
    events.until("initdone").await;

    etcd.kill();

    let out = tc.kubectl_fails(&["get", "configmap", "kept", "-n", &ns]).await;
    assert!(
        out.stderr
            .contains("Error from server (InternalError): Internal error occurred: storage is unavailable"),
        "{out}"
    );
    let out = tc.kubectl_fails(&["create", "configmap", "lost", "-n", &ns]).await;
    assert!(out.stderr.contains("storage is unavailable"), "{out}");
    let raw = capstan_e2e::raw_http::request(
        &tc.endpoint(),
        "GET",
        &format!("/api/v1/namespaces/{ns}/configmaps"),
        None,
        Vec::new(),
    )
    .await;
    assert_eq!(raw.status, 500);
    let status = raw.json();
    assert_eq!(
        (status["kind"].as_str(), status["code"].as_i64()),
        (Some("Status"), Some(500)),
        "{status}"
    );
    assert_eq!(status["reason"], "InternalError");
    let err = api_error(cms.create(&PostParams::default(), &cm("lost")).await);
    assert_eq!((err.code, err.reason.as_str()), (500, "InternalError"), "{err:?}");

    etcd.resume();

    wait_until("devcluster to serve again", TIMEOUT, POLL, || async {
        tc.kubectl(&["get", "configmap", "kept", "-n", &ns]).await.success()
    })
    .await;
    let kept = check::json(
        &tc.kubectl_ok(&["get", "configmap", "kept", "-n", &ns, "-o", "json"])
            .await,
    );
    assert_eq!(kept["data"], json!({"k": "kept"}));
    let out = tc.kubectl_fails(&["get", "configmap", "lost", "-n", &ns]).await;
    assert!(
        out.stderr.contains("NotFound"),
        "the refused create left nothing: {out}"
    );
    tc.kubectl_ok(&["create", "configmap", "after", "-n", &ns]).await;
    // The watch opened before the outage delivers changes made after it.
    let seen = events.until("apply:after").await;
    assert!(!seen.iter().any(|e| e.contains("lost")), "{seen:?}");
}
