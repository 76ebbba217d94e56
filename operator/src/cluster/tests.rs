//! Tests of the cluster layer against in-process devclusters (one, or two when one plays the remote).
//! Waits are bounded polls on conditions, with generous deadlines; none asserts a timing.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::ByteString;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::{Api, Client, Config, CustomResourceExt};
use serde_json::{json, Value};

use super::clients::{parse_kubeconfig, SECRET_BEARER_TOKEN, SECRET_CA_CERT, SECRET_KUBECONFIG};
use super::*;
use crate::api::application::ApplicationDestination;
use crate::api::labels::APP_INSTANCE_LABEL;
use crate::api::{Cluster, ClusterSpec, LocalObjectReference};
use crate::engine::object::ObjectKey;

const OPERATOR_NS: &str = "capstan-system";
const DEADLINE: Duration = Duration::from_secs(10);

fn start() -> devcluster::DevCluster {
    devcluster::start(devcluster::Config::default()).expect("devcluster starts")
}

async fn config_of(dc: &devcluster::DevCluster) -> Config {
    let kc = Kubeconfig::from_yaml(&dc.kubeconfig_yaml()).expect("kubeconfig parses");
    Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config loads")
}

async fn client_of(dc: &devcluster::DevCluster) -> Client {
    Client::try_from(config_of(dc).await).expect("client builds")
}

async fn handle_of(dc: &devcluster::DevCluster) -> Arc<ClusterHandle> {
    ClusterHandle::from_config("test", &dc.url(), config_of(dc).await, ClusterTimeouts::default(), None)
        .expect("handle")
}

/// Polls `check` until it holds or `DEADLINE` passes.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out waiting for: {what}");
}

fn cm_gvk() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn config_map(ns: &str, name: &str, instance: Option<&str>, data: Value) -> Value {
    let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data});
    if let Some(i) = instance {
        cm["metadata"]["labels"] = json!({ APP_INSTANCE_LABEL: i });
    }
    cm
}

async fn ensure_namespaces(h: &ClusterHandle, names: &[&str]) {
    for n in names {
        ops::apply(h, &namespace(n), &ApplyOptions::default())
            .await
            .expect("namespace applied");
    }
}

/// Installs the Cluster CRD and waits until Clusters can be listed.
async fn install_cluster_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.create(&PostParams::default(), &Cluster::crd())
        .await
        .expect("CRD created");
    let clusters: Api<Cluster> = Api::all(client.clone());
    eventually("Cluster CRD served", || {
        let clusters = clusters.clone();
        async move { clusters.list(&ListParams::default()).await.is_ok() }
    })
    .await;
}

async fn create_secret(client: &Client, ns: &str, name: &str, data: &[(&str, &str)]) {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: Some(
            data.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        ),
        ..Default::default()
    };
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .expect("secret created");
}

async fn create_cluster(
    client: &Client,
    ns: &str,
    name: &str,
    server: &str,
    secret: Option<&str>,
    namespaces: &[&str],
) {
    let api: Api<Cluster> = Api::namespaced(client.clone(), ns);
    let spec = ClusterSpec {
        server: server.into(),
        secret_ref: secret.map(|s| LocalObjectReference { name: s.into() }),
        namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        source_namespaces: vec!["*".into()],
    };
    api.create(&PostParams::default(), &Cluster::new(name, spec))
        .await
        .expect("cluster created");
}

fn by_server(server: &str) -> ApplicationDestination {
    ApplicationDestination {
        server: Some(server.into()),
        ..Default::default()
    }
}

fn by_name(name: &str) -> ApplicationDestination {
    ApplicationDestination {
        name: Some(name.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_ssa_apply_creates_updates_and_dry_run_does_not_persist() {
    let dc = start();
    let h = handle_of(&dc).await;
    ensure_namespaces(&h, &["shop"]).await;
    dc.clear_request_log();

    let created = ops::apply(
        &h,
        &config_map("shop", "cfg", Some("app"), json!({"a": "1"})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply creates");
    let managers: Vec<&str> = created["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert_eq!(managers, vec![FIELD_MANAGER]);
    let updated = ops::apply(
        &h,
        &config_map("shop", "cfg", Some("app"), json!({"a": "2"})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply updates");
    assert_eq!(updated["data"]["a"], "2");

    let patches: Vec<_> = dc.request_log().into_iter().filter(|r| r.method == "PATCH").collect();
    assert_eq!(patches.len(), 2);
    for p in &patches {
        assert!(
            p.query.contains("fieldManager=capstan") && p.query.contains("force=true"),
            "{}",
            p.query
        );
        assert!(
            p.content_type.starts_with("application/apply-patch+yaml"),
            "{}",
            p.content_type
        );
    }

    // Dry runs: a new object is not created, an existing one is not changed, yet the result shows the change.
    let dry = ApplyOptions {
        dry_run: true,
        ..ApplyOptions::default()
    };
    ops::apply(&h, &config_map("shop", "ghost", None, json!({})), &dry)
        .await
        .expect("dry-run create");
    let would = ops::dry_run_apply(&h, &config_map("shop", "cfg", Some("app"), json!({"a": "3"})))
        .await
        .expect("dry-run update");
    assert_eq!(would["data"]["a"], "3");
    assert!(ops::get(&h, &cm_gvk(), "shop", "ghost").await.expect("get").is_none());
    let live = ops::get(&h, &cm_gvk(), "shop", "cfg")
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(live["data"]["a"], "2");
    assert!(dc
        .request_log()
        .iter()
        .any(|r| r.method == "PATCH" && r.query.contains("dryRun=All")));

    // Cluster-scoped kinds take their scope from discovery: a namespace in the manifest is dropped.
    let mut ns = namespace("scoped");
    ns["metadata"]["namespace"] = json!("shop");
    ops::apply(&h, &ns, &ApplyOptions::default())
        .await
        .expect("cluster-scoped apply");
    // A namespaced object without a namespace is refused before any request.
    let err = ops::apply(&h, &config_map("", "x", None, json!({})), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert_eq!(err.category(), "Invalid");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_replace_create_and_delete_with_propagation_and_preconditions() {
    let dc = start();
    let h = handle_of(&dc).await;
    ensure_namespaces(&h, &["shop"]).await;

    let (first, outcome) = ops::replace(&h, &config_map("shop", "r", None, json!({"k": "1"})), false)
        .await
        .expect("replace creates");
    assert_eq!(outcome, ReplaceOutcome::Created);
    let (second, outcome) = ops::replace(&h, &config_map("shop", "r", None, json!({"k": "2"})), false)
        .await
        .expect("replace replaces");
    assert_eq!(outcome, ReplaceOutcome::Replaced);
    assert_eq!(second["data"]["k"], "2");
    assert_eq!(first["metadata"]["uid"], second["metadata"]["uid"]);

    // Hooks: generateName lets the server pick the name; create never overwrites.
    let mut hook = config_map("shop", "", None, json!({}));
    hook["metadata"].as_object_mut().expect("meta").remove("name");
    hook["metadata"]["generateName"] = json!("hook-");
    let made = ops::create(&h, &hook, false).await.expect("create with generateName");
    let hook_name = made["metadata"]["name"].as_str().expect("name").to_string();
    assert!(hook_name.starts_with("hook-") && hook_name.len() > 5);
    let dup = ops::create(&h, &config_map("shop", "r", None, json!({})), false)
        .await
        .unwrap_err();
    assert_eq!(dup.category(), "Conflict");

    // A uid precondition protects a same-named replacement.
    let wrong_uid = DeleteOptions {
        uid: Some("not-the-uid".into()),
        ..Default::default()
    };
    let err = ops::delete(&h, &cm_gvk(), "shop", "r", &wrong_uid).await.unwrap_err();
    assert_eq!(err.category(), "Conflict");

    // Background: gone at once.
    let background = DeleteOptions {
        propagation: Propagation::Background,
        uid: first["metadata"]["uid"].as_str().map(String::from),
        dry_run: false,
    };
    assert_eq!(
        ops::delete(&h, &cm_gvk(), "shop", "r", &background)
            .await
            .expect("delete"),
        DeleteOutcome::Deleted
    );
    assert!(ops::get(&h, &cm_gvk(), "shop", "r").await.expect("get").is_none());
    assert_eq!(
        ops::delete(&h, &cm_gvk(), "shop", "r", &background)
            .await
            .expect("delete"),
        DeleteOutcome::NotFound
    );

    // Foreground: the object lingers with a deletionTimestamp until the collector finishes.
    let foreground = DeleteOptions::default();
    match ops::delete(&h, &cm_gvk(), "shop", &hook_name, &foreground)
        .await
        .expect("delete")
    {
        DeleteOutcome::Deleting(obj) => assert!(obj["metadata"]["deletionTimestamp"].is_string()),
        DeleteOutcome::Deleted => {}
        other => panic!("unexpected outcome {other:?}"),
    }
    eventually("foreground-deleted object gone", || {
        let h = h.clone();
        let name = hook_name.clone();
        async move { matches!(ops::get(&h, &cm_gvk(), "shop", &name).await, Ok(None)) }
    })
    .await;
    assert!(dc
        .request_log()
        .iter()
        .any(|r| r.method == "DELETE" && r.path.ends_with(&format!("/configmaps/{hook_name}"))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_secret_errors_never_echo_values() {
    let dc = start();
    let h = handle_of(&dc).await;
    ensure_namespaces(&h, &["shop"]).await;
    // devcluster validates names on create, not data: an invalid name shows that the API's message (which, on a real
    // server, can quote a data value) reaches a ConfigMap error but is withheld from a Secret error.
    let bad = |kind: &str| {
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "Bad_Name", "namespace": "shop"},
            "data": {"password": "CANARY"}})
    };
    let echoed = ops::create(&h, &bad("ConfigMap"), false).await.unwrap_err();
    assert_eq!(echoed.category(), "Invalid", "{echoed}");
    assert!(echoed.to_string().contains("RFC 1123"), "{echoed}");
    let err = ops::create(&h, &bad("Secret"), false).await.unwrap_err();
    assert_eq!(err.category(), "Invalid", "{err}");
    assert!(
        !err.to_string().contains("RFC 1123") && !err.to_string().contains("CANARY"),
        "{err}"
    );
    assert!(err.to_string().contains("withheld"), "{err}");
}

#[test]
fn cluster_error_redaction_keeps_reason_and_code_only() {
    let status = kube::core::Status {
        code: 422,
        reason: "Invalid".into(),
        message: "Secret \"s\" is invalid: data[password]: Invalid value: \"CANARY\"".into(),
        ..Default::default()
    };
    let redacted = ClusterError::from_kube(kube::Error::Api(Box::new(status.clone())), "apply v1/Secret a/s", true);
    assert_eq!(redacted.category(), "Invalid");
    assert!(!redacted.to_string().contains("CANARY") && redacted.to_string().contains("422"));
    let plain = ClusterError::from_kube(kube::Error::Api(Box::new(status)), "apply v1/ConfigMap a/c", false);
    assert!(plain.to_string().contains("Invalid value"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_live_cache_watches_labelled_objects_and_tracks_sync() {
    let dc = start();
    let h = handle_of(&dc).await;
    ensure_namespaces(&h, &["shop"]).await;
    let client = client_of(&dc).await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "shop");
    let instance = app_instance_id("apps", "shop");
    let live = h.live();

    // Discovery first, then a slow server: the first list cannot have finished when we look.
    h.discovery().resolve(&cm_gvk()).await.expect("ConfigMap resolves");
    dc.set_latency(Duration::from_millis(800));
    live.ensure_watched(&cm_gvk()).await.expect("watch starts");
    assert!(!live.is_synced(&[cm_gvk()]), "not synced before InitDone");
    assert!(!live.is_synced(&[cm_gvk(), GroupVersionKind::gvk("apps", "v1", "Deployment")]));
    dc.set_latency(Duration::ZERO);
    assert!(live.wait_synced(&[cm_gvk()], DEADLINE).await, "synced after InitDone");

    let mut changes = live.subscribe();
    ops::apply(
        &h,
        &config_map("shop", "managed", Some(&instance), json!({"v": "1"})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply");
    cms.create(
        &PostParams::default(),
        &serde_json::from_value(config_map("shop", "unmanaged", None, json!({}))).expect("cm"),
    )
    .await
    .expect("unlabelled created");
    eventually("managed object cached", || async {
        live.objects_for(&instance).len() == 1
    })
    .await;
    let unmanaged = ObjectKey::new("", "ConfigMap", "shop", "unmanaged");
    assert!(
        live.get(&cm_gvk(), &unmanaged).is_none(),
        "unlabelled objects are never cached"
    );
    let watches: Vec<_> = dc
        .request_log()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path.ends_with("/configmaps"))
        .collect();
    assert!(!watches.is_empty());
    assert!(
        watches.iter().all(|r| r.query.contains("labelSelector=capstan.dev")),
        "every list/watch is label-selected: {:?}",
        watches.iter().map(|r| &r.query).collect::<Vec<_>>()
    );

    // An out-of-band change by another manager: notified, and only Capstan's managedFields are kept.
    let other = PatchParams::apply("intruder").force();
    let patch = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "managed"}, "data": {"x": "y"}});
    cms.patch("managed", &other, &Patch::Apply(&patch))
        .await
        .expect("out-of-band patch");
    let notified = tokio::time::timeout(DEADLINE, async {
        loop {
            match changes.recv().await {
                Ok(id) if id == instance => {
                    let objs = live.objects_for(&instance);
                    if objs.first().is_some_and(|o| o["data"]["x"] == "y") {
                        return true;
                    }
                }
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await;
    assert_eq!(notified, Ok(true), "change notification for the managed object");
    let cached = live.objects_for(&instance).remove(0);
    let managers: Vec<&str> = cached["metadata"]["managedFields"]
        .as_array()
        .expect("capstan's entry kept")
        .iter()
        .filter_map(|f| f["manager"].as_str())
        .collect();
    assert_eq!(managers, vec![FIELD_MANAGER]);
    assert_eq!(cached["apiVersion"], "v1");
    assert_eq!(cached["kind"], "ConfigMap");

    // Compaction: the watch gets 410, is not synced until the relist is done, then is again.
    dc.set_latency(Duration::from_millis(1500));
    dc.compact();
    eventually("unsynced after 410", || async { !live.is_synced(&[cm_gvk()]) }).await;
    assert_eq!(
        live.objects_for(&instance).len(),
        1,
        "old objects stay visible during a relist"
    );
    dc.set_latency(Duration::ZERO);
    assert!(live.wait_synced(&[cm_gvk()], DEADLINE).await, "synced after relist");
    assert_eq!(live.objects_for(&instance).len(), 1);

    // Deletion reaches the index and the channel.
    let _ = changes.resubscribe();
    let mut changes = live.subscribe();
    cms.delete("managed", &Default::default()).await.expect("delete");
    let got = tokio::time::timeout(DEADLINE, changes.recv()).await;
    assert!(matches!(got, Ok(Ok(ref id)) if id == &instance), "{got:?}");
    eventually("deleted object leaves the cache", || async {
        live.objects_for(&instance).is_empty()
    })
    .await;

    // Idle watches stop and forget their objects.
    assert_eq!(live.stop_idle(Duration::ZERO), vec![cm_gvk()]);
    assert!(live.watched().is_empty() && !live.is_synced(&[cm_gvk()]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_crd_created_at_runtime_is_discovered_and_watched() {
    let dc = start();
    let h = handle_of(&dc).await;
    ensure_namespaces(&h, &["shop"]).await;
    let widget = GroupVersionKind::gvk("example.com", "v1", "Widget");
    let err = h.live().ensure_watched(&widget).await.unwrap_err();
    assert_eq!(err.category(), "UnknownKind");

    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}});
    ops::apply(&h, &crd, &ApplyOptions::default())
        .await
        .expect("CRD applied");
    eventually("Widget kind becomes watchable", || {
        let h = h.clone();
        let widget = widget.clone();
        async move { h.live().ensure_watched(&widget).await.is_ok() }
    })
    .await;
    let resolved = h.discovery().resolve(&widget).await.expect("resolves");
    assert!(resolved.namespaced && resolved.resource.plural == "widgets");

    let instance = app_instance_id("apps", "widgets");
    let cr = json!({"apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "shop", "labels": {APP_INSTANCE_LABEL: instance}},
        "spec": {"size": 3}});
    ops::apply(&h, &cr, &ApplyOptions::default()).await.expect("CR applied");
    assert!(h.live().wait_synced(std::slice::from_ref(&widget), DEADLINE).await);
    eventually("Widget cached", || async { h.live().objects_for(&instance).len() == 1 }).await;
    assert_eq!(h.live().objects_for(&instance)[0]["spec"]["size"], 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_remote_destination_through_cluster_and_kubeconfig_secret() {
    let local = start();
    let remote = start();
    let local_client = client_of(&local).await;
    let clients = ClusterClients::new(config_of(&local).await, OPERATOR_NS).expect("clients");
    ensure_namespaces(clients.local(), &[OPERATOR_NS, "team-a", "team-b"]).await;
    install_cluster_crd(&local_client).await;

    create_secret(
        &local_client,
        "team-a",
        "remote-kc",
        &[(SECRET_KUBECONFIG, &remote.kubeconfig_yaml())],
    )
    .await;
    create_cluster(
        &local_client,
        "team-a",
        "remote",
        &remote.url(),
        Some("remote-kc"),
        &["apps"],
    )
    .await;

    // By server and by name, from the Cluster's own namespace.
    let dest = clients
        .resolve("team-a", &by_server(&remote.url()))
        .await
        .expect("resolves by server");
    assert_eq!(dest.cluster.server(), remote.url());
    assert_eq!(dest.cluster_ref, Some(("team-a".to_string(), "remote".to_string())));
    let again = clients
        .resolve("team-a", &by_name("remote"))
        .await
        .expect("resolves by name");
    assert!(Arc::ptr_eq(&dest.cluster, &again.cluster), "connection cached");

    // The allow-list.
    assert!(dest.check_namespace("apps").is_ok());
    assert_eq!(
        dest.check_namespace("other").unwrap_err().category(),
        "NamespaceNotAllowed"
    );
    assert!(
        dest.check_namespace("").is_err(),
        "cluster-scoped objects escape an allow-list"
    );

    // Applies land on the remote, not on the operator's cluster.
    ensure_namespaces(&dest.cluster, &["apps"]).await;
    ops::apply(
        &dest.cluster,
        &config_map("apps", "remote-cm", None, json!({"a": "1"})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply on remote");
    assert!(ops::get(&dest.cluster, &cm_gvk(), "apps", "remote-cm")
        .await
        .expect("get")
        .is_some());
    assert!(ops::get(clients.local(), &cm_gvk(), "apps", "remote-cm")
        .await
        .expect("get")
        .is_none());
    let v = probe(dest.cluster.client())
        .await
        .expect("probe through the Secret's credentials");
    assert_eq!(v.minor, 32);

    // A Cluster outside the operator namespace is not visible to other namespaces.
    let err = clients.resolve("team-b", &by_name("remote")).await.unwrap_err();
    assert_eq!(err.category(), "NotFound");
    // One in the operator namespace is shared.
    create_secret(
        &local_client,
        OPERATOR_NS,
        "shared-kc",
        &[(SECRET_KUBECONFIG, &remote.kubeconfig_yaml())],
    )
    .await;
    create_cluster(
        &local_client,
        OPERATOR_NS,
        "shared",
        &remote.url(),
        Some("shared-kc"),
        &[],
    )
    .await;
    let shared = clients
        .resolve("team-b", &by_name("shared"))
        .await
        .expect("shared cluster");
    assert!(shared.allowed_namespaces.is_empty());

    // Rotating the Secret rebuilds the connection.
    let secrets: Api<Secret> = Api::namespaced(local_client.clone(), "team-a");
    let rotated = json!({"data": {SECRET_BEARER_TOKEN: "bmV3LXRva2Vu"}});
    secrets
        .patch("remote-kc", &PatchParams::default(), &Patch::Merge(&rotated))
        .await
        .expect("secret rotated");
    let after = clients
        .resolve("team-a", &by_server(&remote.url()))
        .await
        .expect("resolves");
    assert!(
        !Arc::ptr_eq(&dest.cluster, &after.cluster),
        "rebuilt after the Secret changed"
    );

    // Destinations that are the operator's own cluster need no Cluster object.
    for d in [
        by_server(IN_CLUSTER_SERVER),
        by_server("https://kubernetes.default.svc/"),
        by_name(IN_CLUSTER_NAME),
    ] {
        let r = clients.resolve("team-b", &d).await.expect("in-cluster");
        assert!(Arc::ptr_eq(&r.cluster, clients.local()) && r.cluster_ref.is_none());
    }
    let both = ApplicationDestination {
        server: Some(remote.url()),
        name: Some("remote".into()),
        namespace: None,
        service_account_name: None,
    };
    assert_eq!(
        clients.resolve("team-a", &both).await.unwrap_err().category(),
        "InvalidConfig"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_bearer_token_secret_connects() {
    let local = start();
    let remote = start();
    let local_client = client_of(&local).await;
    let clients = ClusterClients::new(config_of(&local).await, OPERATOR_NS).expect("clients");
    ensure_namespaces(clients.local(), &[OPERATOR_NS]).await;
    install_cluster_crd(&local_client).await;
    // devcluster serves HTTPS with its own CA and authenticates the token.
    create_secret(
        &local_client,
        OPERATOR_NS,
        "token",
        &[
            (SECRET_BEARER_TOKEN, &remote.admin_token()),
            (SECRET_CA_CERT, &remote.ca_pem()),
        ],
    )
    .await;
    create_cluster(&local_client, OPERATOR_NS, "remote", &remote.url(), Some("token"), &[]).await;

    let dest = clients
        .resolve("anywhere", &by_server(&remote.url()))
        .await
        .expect("resolves");
    let version = probe(dest.cluster.client()).await.expect("probe");
    assert_eq!(version.minor, 32);
    ensure_namespaces(&dest.cluster, &["apps"]).await;
    ops::apply(
        &dest.cluster,
        &config_map("apps", "via-token", None, json!({})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply with a bearer token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_exec_kubeconfig_is_refused_without_spawning() {
    let local = start();
    let local_client = client_of(&local).await;
    let clients = ClusterClients::new(config_of(&local).await, OPERATOR_NS).expect("clients");
    ensure_namespaces(clients.local(), &[OPERATOR_NS]).await;
    install_cluster_crd(&local_client).await;

    let marker = std::env::temp_dir().join(format!("capstan-pwned-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {url}\n\
         contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n\
         users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
         command: /bin/sh\n      args: [\"-c\", \"touch {marker}\"]\n      interactiveMode: Never\n",
        url = local.url(),
        marker = marker.display()
    );
    create_secret(
        &local_client,
        OPERATOR_NS,
        "exec-kc",
        &[(SECRET_KUBECONFIG, &kubeconfig)],
    )
    .await;
    create_cluster(&local_client, OPERATOR_NS, "evil", &local.url(), Some("exec-kc"), &[]).await;
    let err = clients.resolve(OPERATOR_NS, &by_name("evil")).await.unwrap_err();
    assert_eq!(err.category(), "InvalidConfig");
    assert!(err.to_string().contains("exec"), "{err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!marker.exists(), "no process was spawned");
}

#[test]
fn cluster_kubeconfig_vetting_refuses_plugins_and_files() {
    let base = |user: &str, cluster_extra: &str| {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://x\n{cluster_extra}\
             contexts:\n- name: x\n  context:\n    cluster: c\n    user: u\ncurrent-context: x\n\
             users:\n- name: u\n  user:\n{user}"
        )
    };
    let refused = [
        base("    auth-provider:\n      name: gcp\n", ""),
        base(
            "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
            "",
        ),
        base("    client-certificate: /etc/cert\n    client-key: /etc/key\n", ""),
        base("    token: t\n", "    certificate-authority: /etc/ca.crt\n"),
    ];
    for kc in &refused {
        let err = parse_kubeconfig("ns/c", kc.as_bytes()).unwrap_err();
        assert_eq!(err.category(), "InvalidConfig", "{kc}");
    }
    assert!(parse_kubeconfig("ns/c", base("    token: CANARY\n", "").as_bytes()).is_ok());
    let garbage = parse_kubeconfig("ns/c", b"users: [token: CANARY-in-broken-yaml").unwrap_err();
    assert!(!garbage.to_string().contains("CANARY"), "{garbage}");
}

#[test]
fn cluster_namespace_allow_list() {
    let list = vec!["a".to_string(), "b".to_string()];
    assert!(namespace_allowed(&[], "anything") && namespace_allowed(&[], ""));
    assert!(namespace_allowed(&list, "a") && namespace_allowed(&list, "b"));
    assert!(!namespace_allowed(&list, "c") && !namespace_allowed(&list, ""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_probe_reports_version_and_unreachable() {
    let dc = start();
    let v = probe(&client_of(&dc).await).await.expect("probe");
    assert_eq!((v.major, v.minor), (1, 32));
    assert!(v.git_version.starts_with("v1.32"), "{}", v.git_version);

    let url = dc.url();
    drop(dc);
    let config = Config::new(url.parse().expect("url"));
    let h = ClusterHandle::from_config("gone", &url, config, ClusterTimeouts::default(), None).expect("handle");
    let err = probe(h.client()).await.unwrap_err();
    assert!(
        err.is_transient() && matches!(err.category(), "Unreachable" | "Timeout"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_discovery_survives_a_failing_group_list() {
    let dc = start();
    let h = handle_of(&dc).await;
    // Both full discoveries (aggregated, then legacy) fail on `/apis`; the kind still resolves through its
    // own group/version document.
    dc.inject_faults(devcluster::Fault {
        status: 500,
        count: 2,
        method: Some("GET".into()),
        path_prefix: Some("/apis".into()),
        ..Default::default()
    });
    let deployment = GroupVersionKind::gvk("apps", "v1", "Deployment");
    let resolved = h
        .discovery()
        .resolve(&deployment)
        .await
        .expect("resolves despite /apis failing");
    assert!(resolved.namespaced && resolved.resource.plural == "deployments");
    assert_eq!(
        dc.request_log().iter().filter(|r| r.status == 500).count(),
        2,
        "both full discoveries failed"
    );
    let missing = GroupVersionKind::gvk("apps", "v1", "NoSuchKind");
    assert_eq!(
        h.discovery().resolve(&missing).await.unwrap_err().category(),
        "UnknownKind"
    );
}

/// Every request of a handle built with a counter is counted: applies, discovery and watches, which the
/// operator's own client never sees.
#[tokio::test]
async fn cluster_handle_requests_are_counted() {
    let dc = start();
    let counter =
        prometheus::IntCounterVec::new(prometheus::Opts::new("requests", "test"), &["verb", "code"]).expect("counter");
    let h = ClusterHandle::from_config(
        "test",
        &dc.url(),
        config_of(&dc).await,
        ClusterTimeouts::default(),
        Some(&crate::cluster::requests::KubeRequestLayer::new(counter.clone())),
    )
    .expect("handle");
    ops::apply(
        &h,
        &config_map("default", "counted", None, json!({"k": "v"})),
        &ApplyOptions::default(),
    )
    .await
    .expect("apply");
    let patches =
        counter.with_label_values(&["patch", "200"]).get() + counter.with_label_values(&["patch", "201"]).get();
    assert_eq!(patches, 1, "one server-side apply");
    assert!(
        counter.with_label_values(&["get", "200"]).get() >= 1,
        "discovery requests are counted too"
    );
}

/// A certificate the trusted CA did not sign is a TLS failure, however deep the transport wraps the rustls error
/// (tokio-rustls puts it inside an io::Error, which can itself be wrapped), never a plain "unreachable".
#[test]
fn rustls_errors_inside_io_errors_are_tls_failures() {
    use std::io::{Error as IoError, ErrorKind};
    let bad = || rustls::Error::InvalidCertificate(rustls::CertificateError::BadSignature);
    let once = IoError::new(ErrorKind::InvalidData, bad());
    let twice = IoError::other(IoError::new(ErrorKind::InvalidData, bad()));
    for err in [once, twice] {
        let mapped = transport(&err, "GET /version");
        assert_eq!(mapped.category(), "TLSHandshakeFailed", "{mapped}");
        assert!(mapped.to_string().contains("invalid peer certificate"), "{mapped}");
    }
    let refused = transport(&IoError::from(ErrorKind::ConnectionRefused), "GET /version");
    assert_eq!(refused.category(), "Unreachable");
}
