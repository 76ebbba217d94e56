//! Conformance of devcluster with kube-rs 5: what the operator's own client code relies on
//! (discovery, paging, watchers across compaction, controllers with owned objects and finalizers,
//! server-side apply next to kubectl, retries).

use std::{sync::Arc, time::Duration};

use capstan_e2e::{
    check::{self, api_error, owns},
    fixtures::{configmap, install_widget_crd, Widget, WidgetSpec},
    requests::{format_log, is_watch, matching, query_param},
    wait_for,
    watching::EventTape,
    within, TestCluster, POLL, TIMEOUT,
};
use futures::StreamExt;
use k8s_openapi::api::{core::v1::ConfigMap, events::v1::Event as K8sEvent};
use kube::{
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    core::GroupVersionKind,
    discovery::{Discovery, Scope},
    runtime::{
        controller::Action,
        events::{Event, EventType, Recorder, Reporter},
        finalizer::{finalizer, Event as Finalized},
        watcher, Controller,
    },
    Api, Client, Resource, ResourceExt,
};
use serde_json::json;
use tokio::sync::mpsc;

/// A ConfigMap with `name` and string `data`, as kube-rs would create it.
fn cm(name: &str, data: serde_json::Value) -> ConfigMap {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).expect("a valid ConfigMap")
}

// ---------------------------------------------------------------------------------------------------
// Version and discovery

#[tokio::test]
async fn version_and_aggregated_discovery_describe_builtin_and_crd_resources() {
    let tc = TestCluster::start();
    let client = tc.client().await;
    let version = client.apiserver_version().await.expect("GET /version");
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "32"));

    let discovery = Discovery::new(client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery");
    let (deployments, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("apps", "v1", "Deployment"))
        .expect("apps/v1 Deployment is discovered");
    assert_eq!(deployments.plural, "deployments");
    assert_eq!(caps.scope, Scope::Namespaced);
    let (_, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
        .expect("v1 Namespace is discovered");
    assert_eq!(caps.scope, Scope::Cluster);

    install_widget_crd(&client).await;
    let widget = GroupVersionKind::gvk("e2e.capstan.dev", "v1", "Widget");
    for discovery in [
        Discovery::new(client.clone())
            .run_aggregated()
            .await
            .expect("aggregated discovery"),
        Discovery::new(client.clone()).run().await.expect("legacy discovery"),
    ] {
        let (resource, caps) = discovery
            .resolve_gvk(&widget)
            .expect("an established CRD is discovered");
        assert_eq!(resource.plural, "widgets");
        assert_eq!(caps.scope, Scope::Namespaced);
    }

    let log = tc.requests();
    let aggregated = matching(&log, "GET", "/apis")
        .into_iter()
        .any(|r| r.accept.contains("v=v2;as=APIGroupDiscoveryList"));
    assert!(aggregated, "{}", format_log(&log));
}

// ---------------------------------------------------------------------------------------------------
// Lists

#[tokio::test]
async fn list_params_limit_pages_through_one_consistent_snapshot() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("paging").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    for i in 1..=5 {
        let mut object = cm(&format!("p{i}"), json!({}));
        object.metadata.labels = Some([("page".to_owned(), "yes".to_owned())].into());
        cms.create(&PostParams::default(), &object).await.expect("create");
    }

    let params = ListParams::default().labels("page=yes").limit(2);
    let first = cms.list(&params).await.expect("first page");
    assert_eq!(first.items.len(), 2);
    assert_eq!(first.metadata.remaining_item_count, Some(3));
    let token = first.metadata.continue_.clone().expect("a continue token");

    // Written after the first page and sorting after every item: a snapshot read must not show it.
    let mut late = cm("p9-late", json!({}));
    late.metadata.labels = Some([("page".to_owned(), "yes".to_owned())].into());
    cms.create(&PostParams::default(), &late).await.expect("create");

    let mut names: Vec<String> = first.items.iter().map(ResourceExt::name_any).collect();
    let mut token = Some(token);
    let mut pages = 1;
    while let Some(t) = token.filter(|t| !t.is_empty()) {
        let page = cms.list(&params.clone().continue_token(&t)).await.expect("next page");
        assert_eq!(
            page.metadata.resource_version, first.metadata.resource_version,
            "pages share one RV"
        );
        names.extend(page.items.iter().map(ResourceExt::name_any));
        token = page.metadata.continue_;
        pages += 1;
    }
    assert_eq!(pages, 3);
    assert_eq!(names, ["p1", "p2", "p3", "p4", "p5"], "every item once, in key order");

    let log = tc.requests();
    let limited = matching(&log, "GET", &format!("/api/v1/namespaces/{ns}/configmaps"))
        .into_iter()
        .filter(|r| query_param(r, "limit").as_deref() == Some("2"))
        .count();
    assert_eq!(limited, 3, "{}", format_log(&log));
}

// ---------------------------------------------------------------------------------------------------
// Watchers

#[tokio::test]
async fn watcher_relists_after_compaction_and_keeps_delivering_changes() {
    // Long bookmark interval: a bookmark would move the watcher past the compaction point.
    let tc = TestCluster::start_with(devcluster::Config {
        bookmark_interval: Duration::from_secs(3600),
        ..devcluster::Config::default()
    });
    let ns = tc.with_namespace("relist").await;
    let elsewhere = tc.with_namespace("elsewhere").await;
    let client = tc.client().await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    cms.create(&PostParams::default(), &cm("before", json!({})))
        .await
        .expect("create");

    let mut events = EventTape::watch(cms.clone(), watcher::Config::default());
    assert_eq!(events.until("initdone").await, ["init", "initapply:before", "initdone"]);
    cms.create(&PostParams::default(), &cm("live", json!({})))
        .await
        .expect("create");
    assert_eq!(events.next("apply:live").await, "apply:live");

    // Move the global resourceVersion past the watcher's, out of its sight, then compact and cut the
    // watch: resuming from its old RV must fail with an in-stream 410 and trigger a relist.
    Api::<ConfigMap>::namespaced(client, &elsewhere)
        .create(&PostParams::default(), &cm("unseen", json!({})))
        .await
        .expect("create");
    tc.dev().compact();
    tc.dev().drop_watches();
    let relist = events.until("initdone").await;
    assert!(
        relist.contains(&"error:410".to_owned()),
        "expected a 410 before the relist: {relist:?}"
    );
    let tail = &relist[relist
        .iter()
        .position(|e| e == "init")
        .expect("a relist starts with init")..];
    assert_eq!(tail, ["init", "initapply:before", "initapply:live", "initdone"]);

    cms.create(&PostParams::default(), &cm("after", json!({})))
        .await
        .expect("create");
    assert_eq!(events.next("apply:after").await, "apply:after");

    let log = tc.requests();
    let collection = format!("/api/v1/namespaces/{ns}/configmaps");
    let all = matching(&log, "GET", &collection);
    let lists = all.iter().filter(|r| !is_watch(r)).count();
    assert!(lists >= 2, "an initial list and a relist:\n{}", format_log(&log));
    let watches: Vec<_> = all.iter().filter(|r| is_watch(r)).collect();
    assert!(watches.len() >= 2, "{}", format_log(&log));
    for w in watches {
        assert_eq!(w.status, 200, "too-old RVs are answered in-stream, never with HTTP 410");
        assert_eq!(query_param(w, "allowWatchBookmarks").as_deref(), Some("true"));
        assert!(query_param(w, "resourceVersion").is_some());
    }
}

#[tokio::test]
async fn streaming_list_watcher_gets_initial_events_then_live_changes() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("streaming").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    cms.create(&PostParams::default(), &cm("first", json!({})))
        .await
        .expect("create");

    let config = watcher::Config::default().streaming_lists();
    let mut events = EventTape::watch(cms.clone(), config);
    assert_eq!(events.until("initdone").await, ["init", "initapply:first", "initdone"]);
    cms.delete("first", &DeleteParams::default()).await.expect("delete");
    assert_eq!(events.next("delete:first").await, "delete:first");

    let log = tc.requests();
    let streaming = matching(&log, "GET", &format!("/api/v1/namespaces/{ns}/configmaps"))
        .into_iter()
        .any(|r| is_watch(r) && query_param(r, "sendInitialEvents").as_deref() == Some("true"));
    assert!(streaming, "{}", format_log(&log));
}

// ---------------------------------------------------------------------------------------------------
// A controller with owns(), finalizer() and an event Recorder

const FINALIZER: &str = "e2e.capstan.dev/cleanup";
const MANAGER: &str = "widget-controller";

/// What the test controller needs, and how it reports cleanups to the test.
struct Ctx {
    client: Client,
    recorder: Recorder,
    cleaned_up: mpsc::UnboundedSender<String>,
}

async fn reconcile(widget: Arc<Widget>, ctx: Arc<Ctx>) -> Result<Action, kube::runtime::finalizer::Error<kube::Error>> {
    let ns = widget.namespace().expect("widgets are namespaced");
    let widgets: Api<Widget> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&widgets, FINALIZER, widget, |event| async {
        match event {
            Finalized::Apply(widget) => apply_widget(&widget, &ctx).await,
            Finalized::Cleanup(widget) => {
                let _ = ctx.cleaned_up.send(widget.name_any());
                Ok(Action::await_change())
            }
        }
    })
    .await
}

/// Converges one Widget: an owned ConfigMap (SSA), the status (SSA on /status), and an Event.
async fn apply_widget(widget: &Widget, ctx: &Ctx) -> Result<Action, kube::Error> {
    let ns = widget.namespace().expect("widgets are namespaced");
    let name = widget.name_any();
    let owner = widget.controller_owner_ref(&()).expect("a stored widget has a uid");
    let cm_name = format!("{name}-cfg");
    let owned = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "ownerReferences": [owner]},
        "data": {"replicas": widget.spec.replicas.to_string()},
    });
    let apply = PatchParams::apply(MANAGER).force();
    Api::<ConfigMap>::namespaced(ctx.client.clone(), &ns)
        .patch(&cm_name, &apply, &Patch::Apply(owned))
        .await?;
    let status = json!({
        "apiVersion": "e2e.capstan.dev/v1", "kind": "Widget",
        "status": {"phase": "Ready", "observedGeneration": widget.metadata.generation, "configMap": cm_name},
    });
    Api::<Widget>::namespaced(ctx.client.clone(), &ns)
        .patch_status(&name, &apply, &Patch::Apply(status))
        .await?;
    let event = Event {
        type_: EventType::Normal,
        reason: "Reconciled".into(),
        note: Some(format!("ConfigMap {cm_name} is up to date")),
        action: "Reconcile".into(),
        secondary: None,
    };
    ctx.recorder.publish(&event, &widget.object_ref(&())).await?;
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// Runs the Widget controller until the returned handle is aborted (or dropped with the runtime).
fn spawn_controller(client: Client, cleaned_up: mpsc::UnboundedSender<String>) -> tokio::task::JoinHandle<()> {
    let reporter = Reporter {
        controller: MANAGER.into(),
        instance: None,
    };
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        cleaned_up,
    });
    let controller = Controller::new(Api::<Widget>::all(client.clone()), watcher::Config::default())
        .owns(Api::<ConfigMap>::all(client), watcher::Config::default())
        .run(reconcile, |_, _, _| Action::requeue(Duration::from_millis(500)), ctx)
        .for_each(|_| futures::future::ready(()));
    tokio::spawn(controller)
}

/// Waits until the ConfigMap `name` exists and satisfies `check`, and returns it.
async fn wait_for_cm(cms: &Api<ConfigMap>, name: &str, what: &str, check: impl Fn(&ConfigMap) -> bool) -> ConfigMap {
    wait_for(what, TIMEOUT, POLL, || async {
        cms.get_opt(name).await.ok().flatten().filter(|c| check(c))
    })
    .await
}

#[tokio::test]
async fn controller_with_owns_and_finalizer_reconciles_a_widget_and_cleans_up_on_delete() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("controller").await;
    let client = tc.client().await;
    install_widget_crd(&client).await;
    let (cleaned_tx, mut cleaned_rx) = mpsc::unbounded_channel();
    let controller = spawn_controller(client.clone(), cleaned_tx);

    let widgets: Api<Widget> = Api::namespaced(client.clone(), &ns);
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let spec = WidgetSpec {
        replicas: 2,
        image: "nginx:1".into(),
    };
    let created = widgets
        .create(&PostParams::default(), &Widget::new("w", spec))
        .await
        .expect("create the widget");
    let uid = created.uid().expect("a uid");

    // Reconciled: status written, finalizer added, owned ConfigMap applied, Event published.
    let ready = wait_for("the widget to be Ready for generation 1", TIMEOUT, POLL, || async {
        let w = widgets.get("w").await.ok()?;
        let status = w.status.as_ref()?;
        (status.phase.as_deref() == Some("Ready") && status.observed_generation == Some(1)).then_some(w)
    })
    .await;
    assert_eq!(ready.finalizers(), [FINALIZER]);
    let owned = wait_for_cm(&cms, "w-cfg", "the owned ConfigMap", |_| true).await;
    let owner = &owned.metadata.owner_references.as_ref().expect("owner references")[0];
    assert_eq!((owner.uid.as_str(), owner.controller), (uid.as_str(), Some(true)));
    assert_eq!(
        owned.data.as_ref().and_then(|d| d.get("replicas")).map(String::as_str),
        Some("2")
    );
    let events: Api<K8sEvent> = Api::namespaced(client.clone(), &ns);
    let published = wait_for("the Reconciled event", TIMEOUT, POLL, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items.into_iter().find(|e| {
            e.reason.as_deref() == Some("Reconciled")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("w")
        })
    })
    .await;
    assert_eq!(published.reporting_controller.as_deref(), Some(MANAGER));

    // A spec change is reconciled (generation 2), and a deleted owned object is recreated via owns().
    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 3}})),
        )
        .await
        .expect("patch the spec");
    wait_for_cm(&cms, "w-cfg", "replicas 3 in the ConfigMap", |c| {
        c.data.as_ref().and_then(|d| d.get("replicas")).map(String::as_str) == Some("3")
    })
    .await;
    let old_uid = cms.get("w-cfg").await.expect("get").uid();
    cms.delete("w-cfg", &DeleteParams::default())
        .await
        .expect("delete the owned ConfigMap");
    wait_for_cm(&cms, "w-cfg", "the owned ConfigMap to be recreated", |c| {
        c.uid() != old_uid
    })
    .await;

    // Deletion runs cleanup, removes the finalizer, and the garbage collector takes the ConfigMap.
    widgets
        .delete("w", &DeleteParams::default())
        .await
        .expect("delete the widget");
    let cleaned = within("the controller's cleanup", TIMEOUT, cleaned_rx.recv()).await;
    assert_eq!(cleaned.as_deref(), Some("w"));
    capstan_e2e::wait_until("the widget to disappear", TIMEOUT, POLL, || async {
        matches!(widgets.get_opt("w").await, Ok(None))
    })
    .await;
    capstan_e2e::wait_until("the owned ConfigMap to be garbage collected", TIMEOUT, POLL, || async {
        matches!(cms.get_opt("w-cfg").await, Ok(None))
    })
    .await;
    controller.abort();

    assert_controller_traffic(&tc.requests(), &ns);
}

/// How kube-runtime talked: metadata-only list/watch for owned ConfigMaps, a JSON patch for the
/// finalizer, SSA for the owned object, and an events.k8s.io Event.
fn assert_controller_traffic(log: &[devcluster::RequestRecord], ns: &str) {
    let cms = matching(log, "GET", "/api/v1/configmaps");
    assert!(
        cms.iter()
            .any(|r| !is_watch(r) && r.accept.contains("as=PartialObjectMetadataList")),
        "owns() lists metadata only:\n{}",
        format_log(log)
    );
    assert!(
        cms.iter()
            .any(|r| is_watch(r) && r.accept.contains("as=PartialObjectMetadata;")),
        "owns() watches metadata only:\n{}",
        format_log(log)
    );
    let widget = format!("/apis/e2e.capstan.dev/v1/namespaces/{ns}/widgets/w");
    assert!(
        matching(log, "PATCH", &widget)
            .iter()
            .any(|r| r.status == 200 && r.content_type.starts_with("application/json-patch+json")),
        "finalizer() patches with JSON patch:\n{}",
        format_log(log)
    );
    let owned = format!("/api/v1/namespaces/{ns}/configmaps/w-cfg");
    assert!(
        matching(log, "PATCH", &owned).iter().any(|r| {
            r.content_type.starts_with("application/apply-patch+yaml")
                && query_param(r, "fieldManager").as_deref() == Some(MANAGER)
        }),
        "{}",
        format_log(log)
    );
    let events = format!("/apis/events.k8s.io/v1/namespaces/{ns}/events");
    assert!(
        matching(log, "POST", &events).iter().any(|r| r.status == 201),
        "{}",
        format_log(log)
    );
}

// ---------------------------------------------------------------------------------------------------
// Server-side apply shared between kubectl and kube-rs

#[tokio::test]
async fn kubectl_and_kube_rs_appliers_own_separate_fields_and_conflicts_are_409() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("shared-ssa").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    let kubectl_config = capstan_e2e::fixtures::to_yaml(&[configmap(&ns, "shared", json!({"a": "1"}))]);
    tc.apply(&kubectl_config, &["--server-side", "--field-manager=kubectl-team"])
        .await;

    let rust = |data: serde_json::Value| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "shared"}, "data": data}))
    };
    cms.patch("shared", &PatchParams::apply("rust-team"), &rust(json!({"b": "2"})))
        .await
        .expect("a disjoint apply succeeds");
    let live = live_json(&tc, &ns).await;
    assert_eq!(live["data"], json!({"a": "1", "b": "2"}));
    assert!(owns(&live, "kubectl-team", &["f:data", "f:a"]) && !owns(&live, "kubectl-team", &["f:data", "f:b"]));
    assert!(owns(&live, "rust-team", &["f:data", "f:b"]) && !owns(&live, "rust-team", &["f:data", "f:a"]));

    let status = api_error(
        cms.patch("shared", &PatchParams::apply("rust-team"), &rust(json!({"a": "9"})))
            .await,
    );
    assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"), "{status:?}");
    assert!(status.message.contains("kubectl-team"), "{status:?}");
    let causes = status.details.map(|d| d.causes).unwrap_or_default();
    assert!(causes.iter().any(|c| c.field == ".data.a"), "{causes:?}");
    assert_eq!(
        live_json(&tc, &ns).await["data"],
        json!({"a": "1", "b": "2"}),
        "a refused apply changes nothing"
    );

    // Forced, rust-team takes data.a; data.b, which it no longer applies and nobody else owns, goes away.
    cms.patch(
        "shared",
        &PatchParams::apply("rust-team").force(),
        &rust(json!({"a": "9"})),
    )
    .await
    .expect("a forced apply succeeds");
    let live = live_json(&tc, &ns).await;
    assert_eq!(live["data"], json!({"a": "9"}));
    assert!(owns(&live, "rust-team", &["f:data", "f:a"]) && !owns(&live, "kubectl-team", &["f:data", "f:a"]));

    // Now kubectl is the one in conflict.
    let out = tc
        .kubectl_stdin(
            &["apply", "--server-side", "--field-manager=kubectl-team", "-f", "-"],
            &kubectl_config,
        )
        .await;
    assert!(!out.success() && out.stderr.contains("rust-team"), "{out}");
}

/// The shared ConfigMap as kubectl shows it with managedFields.
async fn live_json(tc: &TestCluster, ns: &str) -> serde_json::Value {
    check::json(
        &tc.kubectl_ok(&["get", "cm", "shared", "-n", ns, "-o", "json", "--show-managed-fields"])
            .await,
    )
}

// ---------------------------------------------------------------------------------------------------
// Retries and dry run

#[tokio::test]
async fn kube_client_and_kubectl_retry_429_with_retry_after() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("retry").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    cms.create(&PostParams::default(), &cm("target", json!({"a": "1"})))
        .await
        .expect("create");
    let path = format!("/api/v1/namespaces/{ns}/configmaps/target");
    let throttle = || devcluster::Fault {
        status: 429,
        count: 2,
        retry_after_seconds: 1,
        method: Some("GET".into()),
        path_prefix: Some(path.clone()),
    };

    tc.dev().clear_request_log();
    tc.dev().inject_faults(throttle());
    let got = within("a throttled get", TIMEOUT, cms.get("target"))
        .await
        .expect("kube-rs retries 429");
    assert_eq!(got.data.and_then(|d| d.get("a").cloned()).as_deref(), Some("1"));
    let statuses: Vec<u16> = matching(&tc.requests(), "GET", &path)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 429, 200]);

    tc.dev().clear_request_log();
    tc.dev().inject_faults(throttle());
    let out = tc
        .kubectl_ok(&["get", "cm", "target", "-n", &ns, "-o", "jsonpath={.data.a}"])
        .await;
    assert_eq!(out, "1");
    let statuses: Vec<u16> = matching(&tc.requests(), "GET", &path)
        .iter()
        .map(|r| r.status)
        .collect();
    assert_eq!(statuses, [429, 429, 200]);
}

#[tokio::test]
async fn kube_rs_dry_run_create_and_apply_persist_nothing() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("kr-dry-run").await;
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let would_be = cms
        .create(&dry, &cm("ghost", json!({"a": "1"})))
        .await
        .expect("dry-run create");
    assert_eq!(would_be.name_any(), "ghost");
    let apply = PatchParams::apply("dry").dry_run();
    let body = Patch::Apply(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost"}, "data": {"a": "1"}}),
    );
    cms.patch("ghost", &apply, &body).await.expect("dry-run apply");
    assert!(
        cms.get_opt("ghost").await.expect("get").is_none(),
        "dry runs persist nothing"
    );
}
