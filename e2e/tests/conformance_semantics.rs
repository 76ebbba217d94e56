//! Conformance of object and watch semantics that controllers depend on without noticing: no-op writes
//! are silent, generation moves only with the spec, selector watches see objects leave and enter,
//! bookmarks and watch timeouts keep long watches healthy, CRD deletion takes its objects along, and
//! Events written through events.k8s.io are what `kubectl describe` shows.

use std::time::Duration;

use capstan_e2e::{
    check,
    fixtures::{install_widget_crd, Widget, WidgetSpec, WIDGET_CRD},
    wait_until,
    watching::EventTape,
    within, TestCluster, POLL, TIMEOUT,
};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::{
    api::core::v1::ConfigMap, apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams},
    core::GroupVersionKind,
    discovery::Discovery,
    runtime::{
        events::{Event, EventType, Recorder, Reporter},
        watcher,
    },
    Api, Resource, ResourceExt,
};
use serde_json::json;

fn cm(name: &str, labels: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "data": {"a": "1"}}))
        .expect("a ConfigMap")
}

fn widget(name: &str, replicas: i32) -> Widget {
    Widget::new(
        name,
        WidgetSpec {
            replicas,
            image: "nginx:1".into(),
        },
    )
}

#[tokio::test]
async fn identical_writes_keep_the_resource_version_and_emit_no_watch_event() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("noop").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "same"}, "data": {"a": "1"}});
    let apply = PatchParams::apply("noop-manager");
    let first = cms
        .patch("same", &apply, &Patch::Apply(&body))
        .await
        .expect("first apply");

    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    within("the watcher's initial list", TIMEOUT, async {
        while !matches!(events.try_next().await, Ok(Some(watcher::Event::InitDone))) {}
    })
    .await;

    let again = cms
        .patch("same", &apply, &Patch::Apply(&body))
        .await
        .expect("identical apply");
    assert_eq!(
        again.resource_version(),
        first.resource_version(),
        "a no-op apply is not a write"
    );
    assert_eq!(
        again.managed_fields(),
        first.managed_fields(),
        "managedFields times stay too"
    );
    let merged = cms
        .patch(
            "same",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"a": "1"}})),
        )
        .await
        .expect("identical merge patch");
    assert_eq!(merged.resource_version(), first.resource_version());

    // Events arrive in resourceVersion order: if the no-op writes had emitted anything, it would come first.
    cms.create(&PostParams::default(), &cm("marker", json!({})))
        .await
        .expect("create");
    let next = within("the marker event", TIMEOUT, events.try_next())
        .await
        .expect("no watch error");
    match next {
        Some(watcher::Event::Apply(o)) => assert_eq!(o.name_any(), "marker", "no event for the no-op writes"),
        other => panic!("expected the marker's Apply, got {other:?}"),
    }
}

#[tokio::test]
async fn generation_changes_with_the_spec_but_not_with_status_or_metadata() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("generation").await;
    let client = tc.client().await;
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let created = widgets
        .create(&PostParams::default(), &widget("g", 1))
        .await
        .expect("create");
    assert_eq!(created.metadata.generation, Some(1));

    let merge = |v: serde_json::Value| Patch::Merge(v);
    let pp = PatchParams::default();
    let spec = widgets
        .patch("g", &pp, &merge(json!({"spec": {"replicas": 2}})))
        .await
        .expect("spec patch");
    assert_eq!(spec.metadata.generation, Some(2));
    let status = widgets
        .patch_status("g", &pp, &merge(json!({"status": {"phase": "Running"}})))
        .await
        .expect("status patch");
    assert_eq!(
        status.metadata.generation,
        Some(2),
        "status writes never bump generation"
    );
    let labels = widgets
        .patch("g", &pp, &merge(json!({"metadata": {"labels": {"x": "y"}}})))
        .await
        .expect("label patch");
    assert_eq!(
        labels.metadata.generation,
        Some(2),
        "metadata writes never bump generation"
    );
    let ignored = widgets
        .patch("g", &pp, &merge(json!({"status": {"phase": "Hacked"}})))
        .await
        .expect("status through the main resource");
    assert_eq!(
        ignored.status.and_then(|s| s.phase).as_deref(),
        Some("Running"),
        "with a status subresource, writes to the main resource ignore status"
    );

    let cms: Api<ConfigMap> = Api::namespaced(client, &ns);
    let plain = cms
        .create(&PostParams::default(), &cm("plain", json!({})))
        .await
        .expect("create");
    assert_eq!(plain.metadata.generation, None, "ConfigMaps have no generation");
}

#[tokio::test]
async fn label_selector_watch_sees_objects_leave_and_enter_the_selection() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("selector-watch").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    cms.create(&PostParams::default(), &cm("m", json!({"app": "x"})))
        .await
        .expect("create");
    cms.create(&PostParams::default(), &cm("other", json!({"app": "y"})))
        .await
        .expect("create");

    let mut events = EventTape::watch(cms.clone(), watcher::Config::default().labels("app=x"));
    assert_eq!(events.until("initdone").await, ["init", "initapply:m", "initdone"]);

    let relabel = |app: &'static str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    cms.patch("m", &PatchParams::default(), &relabel("y"))
        .await
        .expect("relabel");
    assert_eq!(
        events.next("delete:m").await,
        "delete:m",
        "leaving the selection is a DELETED event"
    );
    cms.patch("other", &PatchParams::default(), &relabel("x"))
        .await
        .expect("relabel");
    assert_eq!(
        events.next("apply:other").await,
        "apply:other",
        "entering the selection is an ADDED event"
    );
}

#[tokio::test]
async fn watches_send_bookmarks_and_end_cleanly_at_their_timeout() {
    let tc = TestCluster::start_with(devcluster::Config {
        bookmark_interval: Duration::from_millis(200),
        ..devcluster::Config::default()
    });
    let ns = tc.with_namespace("bookmarks").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version;
    let rv = rv.expect("lists carry a resourceVersion");

    let params = WatchParams::default().timeout(3);
    let stream = cms.watch(&params, &rv).await.expect("watch starts");
    let events: Vec<_> = within("a 3 s watch to end by itself", TIMEOUT, stream.try_collect::<Vec<_>>())
        .await
        .expect("the watch stream ends without an error");
    let bookmarks: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            WatchEvent::Bookmark(b) => Some(b.metadata.resource_version.clone()),
            _ => None,
        })
        .collect();
    assert!(!bookmarks.is_empty(), "bookmarks every 200 ms, got {events:?}");
    assert!(bookmarks.iter().all(|rv| !rv.is_empty()), "{bookmarks:?}");
}

#[tokio::test]
async fn deleting_a_crd_deletes_its_objects_and_removes_it_from_discovery() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("crd-delete").await;
    let client = tc.client().await;
    install_widget_crd(&client).await;
    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    widgets
        .create(&PostParams::default(), &widget("doomed", 1))
        .await
        .expect("create");

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.delete(WIDGET_CRD, &DeleteParams::default())
        .await
        .expect("delete the CRD");
    wait_until("the CRD to disappear", TIMEOUT, POLL, || async {
        matches!(crds.get_opt(WIDGET_CRD).await, Ok(None))
    })
    .await;

    let status = check::api_error(widgets.get("doomed").await);
    assert_eq!(status.code, 404, "{status:?}");
    // As on kube-apiserver, discovery drops the group version after the CRD object is gone, not in the
    // same instant: a client waits for it (bounded).
    let gvk = GroupVersionKind::gvk("e2e.capstan.dev", "v1", "Widget");
    wait_until("a deleted CRD leaves discovery", TIMEOUT, POLL, || async {
        let discovery = Discovery::new(client.clone())
            .run_aggregated()
            .await
            .expect("discovery");
        discovery.resolve_gvk(&gvk).is_none()
    })
    .await;
}

#[tokio::test]
async fn events_published_with_the_events_api_show_in_kubectl_get_events_and_describe() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("events").await;
    let client = tc.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let target = cms
        .create(&PostParams::default(), &cm("noted", json!({})))
        .await
        .expect("create");

    let reporter = Reporter {
        controller: "e2e-recorder".into(),
        instance: None,
    };
    let event = Event {
        type_: EventType::Warning,
        reason: "SomethingHappened".into(),
        note: Some("a note for humans".into()),
        action: "Check".into(),
        secondary: None,
    };
    Recorder::new(client, reporter)
        .publish(&event, &target.object_ref(&()))
        .await
        .expect("the event is published");

    // kubectl reads core/v1 Events; the real API server serves events.k8s.io Events through it too.
    let listed = tc.kubectl_ok(&["get", "events", "-n", &ns]).await;
    assert!(
        listed.contains("SomethingHappened") && listed.contains("configmap/noted"),
        "{listed}"
    );
    let described = tc.kubectl_ok(&["describe", "configmap", "noted", "-n", &ns]).await;
    assert!(
        described.contains("SomethingHappened") && described.contains("a note for humans"),
        "{described}"
    );
}

#[tokio::test]
async fn leases_keep_microsecond_times_and_reject_stale_updates() {
    use k8s_openapi::api::coordination::v1::Lease;

    let tc = TestCluster::start();
    let ns = tc.with_namespace("lease").await;
    let leases: Api<Lease> = Api::namespaced(tc.client().await, &ns);
    let renew = "2026-11-22T01:27:18.721491Z";
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "leader"},
        "spec": {"holderIdentity": "pod-a", "leaseDurationSeconds": 15, "renewTime": renew},
    }))
    .expect("a Lease");
    let created = leases.create(&PostParams::default(), &lease).await.expect("create");
    let stored = serde_json::to_value(&created).expect("JSON");
    assert_eq!(stored["spec"]["renewTime"], renew, "MicroTime keeps its microseconds");

    // Two candidates race from the same read: the second update must lose (leader election relies on it).
    let mut first = created.clone();
    first.spec.as_mut().expect("spec").holder_identity = Some("pod-b".into());
    leases
        .replace("leader", &PostParams::default(), &first)
        .await
        .expect("the first update wins");
    let mut second = created;
    second.spec.as_mut().expect("spec").holder_identity = Some("pod-c".into());
    let status = check::api_error(leases.replace("leader", &PostParams::default(), &second).await);
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"), "{status:?}");
    let holder = leases
        .get("leader")
        .await
        .expect("get")
        .spec
        .and_then(|s| s.holder_identity);
    assert_eq!(holder.as_deref(), Some("pod-b"));
}
