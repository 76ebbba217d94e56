//! Conformance of devcluster with the real kubectl 1.32: what a user typing kubectl commands relies on.
//!
//! Each test starts its own devcluster (and namespace), drives it only through kubectl where the user
//! would, and checks both the visible result and, through the request log, how kubectl talked to it.

use capstan_e2e::{
    check::{self, assert_has_row, header, lines, managed_entry, owns, row},
    fixtures::{
        self, configmap, deployment, job, labelled_configmap, to_yaml, widget, Widget, BEHAVIOR, DELAY, WIDGET_CRD,
    },
    requests::{format_log, is_watch, matching, query_param},
    TestCluster, TIMEOUT,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{
    api::{ListParams, Patch, PatchParams},
    Api,
};
use serde_json::{json, Value};

/// A finalizer no controller handles: objects carrying it stay until a test removes it.
const HOLD: &str = "e2e.capstan.dev/hold";

/// Applies the Widget CRD with `kubectl apply` and waits with `kubectl wait` until it is Established.
async fn install_crd_with_kubectl(tc: &TestCluster) {
    let out = tc.apply(&fixtures::widget_crd_yaml(), &[]).await;
    assert!(
        out.contains(&format!(
            "customresourcedefinition.apiextensions.k8s.io/{WIDGET_CRD} created"
        )),
        "{out}"
    );
    let out = tc
        .kubectl_ok(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{WIDGET_CRD}"),
            "--timeout=30s",
        ])
        .await;
    assert!(out.contains("condition met"), "{out}");
}

/// `kubectl get <what> -n <ns> -o jsonpath=<path>`.
async fn jsonpath(tc: &TestCluster, ns: &str, what: &str, path: &str) -> String {
    tc.kubectl_ok(&["get", what, "-n", ns, "-o", &format!("jsonpath={path}")])
        .await
}

/// `kubectl get <what> -n <ns> -o json`, parsed.
async fn get_json(tc: &TestCluster, ns: &str, what: &str, extra: &[&str]) -> Value {
    let mut args = vec!["get", what, "-n", ns, "-o", "json"];
    args.extend_from_slice(extra);
    check::json(&tc.kubectl_ok(&args).await)
}

/// Asserts that `kubectl get <what>` reports NotFound.
async fn assert_not_found(tc: &TestCluster, ns: &str, what: &str) {
    let out = tc.kubectl_fails(&["get", what, "-n", ns]).await;
    assert!(
        out.stderr.contains("NotFound") && out.stderr.contains("not found"),
        "{out}"
    );
}

// ---------------------------------------------------------------------------------------------------
// Discovery

#[tokio::test]
async fn api_resources_lists_builtin_kinds_with_short_names_groups_and_scope() {
    let tc = TestCluster::start();
    let out = tc.kubectl_ok(&["api-resources"]).await;
    assert_eq!(header(&out), ["NAME", "SHORTNAMES", "APIVERSION", "NAMESPACED", "KIND"]);
    assert_has_row(&out, &["deployments", "deploy", "apps/v1", "true", "Deployment"]);
    assert_has_row(&out, &["configmaps", "cm", "v1", "true", "ConfigMap"]);
    assert_has_row(&out, &["namespaces", "ns", "v1", "false", "Namespace"]);
    assert_has_row(&out, &["secrets", "v1", "true", "Secret"]);
    assert_has_row(&out, &["jobs", "batch/v1", "true", "Job"]);
    assert_has_row(
        &out,
        &[
            "customresourcedefinitions",
            "crd,crds",
            "apiextensions.k8s.io/v1",
            "false",
            "CustomResourceDefinition",
        ],
    );

    let versions = lines(&tc.kubectl_ok(&["api-versions"]).await);
    for gv in [
        "v1",
        "apps/v1",
        "batch/v1",
        "apiextensions.k8s.io/v1",
        "events.k8s.io/v1",
    ] {
        assert!(versions.contains(gv), "api-versions lacks {gv}: {versions:?}");
    }

    // kubectl 1.32 asks for aggregated discovery v2 first; devcluster must have answered that request.
    let log = tc.requests();
    let aggregated = matching(&log, "GET", "/apis")
        .into_iter()
        .any(|r| r.status == 200 && r.accept.contains("v=v2;as=APIGroupDiscoveryList"));
    assert!(
        aggregated,
        "no aggregated discovery request to /apis:\n{}",
        format_log(&log)
    );
}

#[tokio::test]
async fn crd_applied_with_kubectl_becomes_established_and_appears_in_api_resources() {
    let tc = TestCluster::start();
    install_crd_with_kubectl(&tc).await;

    let out = tc.kubectl_ok(&["api-resources", "--api-group=e2e.capstan.dev"]).await;
    assert_has_row(&out, &["widgets", "wd", "e2e.capstan.dev/v1", "true", "Widget"]);

    let crd = check::json(&tc.kubectl_ok(&["get", "crd", WIDGET_CRD, "-o", "json"]).await);
    let established = crd["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Established" && c["status"] == "True");
    assert!(established, "CRD status lacks Established=True: {crd:#}");

    // The new resource is usable by its plural and short name right away.
    let out = tc.kubectl(&["get", "wd", "-A"]).await;
    assert!(out.success() && out.stderr.contains("No resources found"), "{out}");
}

// ---------------------------------------------------------------------------------------------------
// Client-side and server-side apply

#[tokio::test]
async fn client_side_apply_creates_then_patches_crs_with_merge_patch_and_builtins_with_strategic_merge() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("csa").await;
    install_crd_with_kubectl(&tc).await;

    let first = to_yaml(&[
        widget(&ns, "w", 1, "nginx:1"),
        configmap(&ns, "cfg", json!({"a": "1"})),
        deployment(&ns, "web", "nginx:1", json!({})),
    ]);
    let out = tc.apply(&first, &[]).await;
    for created in [
        "widget.e2e.capstan.dev/w created",
        "configmap/cfg created",
        "deployment.apps/web created",
    ] {
        assert!(out.contains(created), "expected {created:?} in:\n{out}");
    }

    tc.dev().clear_request_log();
    let second = to_yaml(&[
        widget(&ns, "w", 3, "nginx:1"),
        configmap(&ns, "cfg", json!({"a": "2"})),
        deployment(&ns, "web", "nginx:2", json!({})),
    ]);
    let out = tc.apply(&second, &[]).await;
    for configured in [
        "widget.e2e.capstan.dev/w configured",
        "configmap/cfg configured",
        "deployment.apps/web configured",
    ] {
        assert!(out.contains(configured), "expected {configured:?} in:\n{out}");
    }

    let log = tc.requests();
    let patch_type = |path: String| {
        let patches = matching(&log, "PATCH", &path);
        assert_eq!(patches.len(), 1, "expected one PATCH of {path}:\n{}", format_log(&log));
        assert_eq!(patches[0].status, 200, "{}", format_log(&log));
        assert_eq!(
            query_param(patches[0], "fieldManager").as_deref(),
            Some("kubectl-client-side-apply")
        );
        patches[0].content_type.clone()
    };
    let cr = patch_type(format!("/apis/e2e.capstan.dev/v1/namespaces/{ns}/widgets/w"));
    assert!(cr.starts_with("application/merge-patch+json"), "CR patched with {cr}");
    let cm = patch_type(format!("/api/v1/namespaces/{ns}/configmaps/cfg"));
    assert!(
        cm.starts_with("application/strategic-merge-patch+json"),
        "ConfigMap patched with {cm}"
    );
    let deploy = patch_type(format!("/apis/apps/v1/namespaces/{ns}/deployments/web"));
    assert!(
        deploy.starts_with("application/strategic-merge-patch+json"),
        "Deployment patched with {deploy}"
    );

    assert_eq!(jsonpath(&tc, &ns, "widget/w", "{.spec.replicas}").await, "3");
    assert_eq!(jsonpath(&tc, &ns, "configmap/cfg", "{.data.a}").await, "2");
    assert_eq!(
        jsonpath(&tc, &ns, "deployment/web", "{.spec.template.spec.containers[0].image}").await,
        "nginx:2"
    );

    // A third identical apply changes nothing.
    let out = tc.apply(&second, &[]).await;
    assert_eq!(out.matches("unchanged").count(), 3, "{out}");
}

#[tokio::test]
async fn server_side_apply_conflict_fails_and_force_conflicts_takes_ownership() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("ssa").await;
    let one = to_yaml(&[configmap(&ns, "cfg", json!({"key": "one"}))]);
    let out = tc.apply(&one, &["--server-side", "--field-manager=team-a"]).await;
    assert!(out.contains("configmap/cfg serverside-applied"), "{out}");

    let two = to_yaml(&[configmap(&ns, "cfg", json!({"key": "two"}))]);
    let conflict = tc.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &two).await;
    assert!(!conflict.success(), "a conflicting apply must fail:\n{conflict}");
    assert!(conflict.stderr.to_lowercase().contains("conflict"), "{conflict}");
    assert!(
        conflict.stderr.contains("team-a"),
        "the message names the owner:\n{conflict}"
    );
    assert_eq!(jsonpath(&tc, &ns, "cm/cfg", "{.data.key}").await, "one");

    let log = tc.requests();
    let refused = matching(&log, "PATCH", &format!("/api/v1/namespaces/{ns}/configmaps/cfg"))
        .into_iter()
        .find(|r| r.status == 409)
        .unwrap_or_else(|| panic!("no 409 PATCH:\n{}", format_log(&log)));
    assert!(refused.content_type.starts_with("application/apply-patch+yaml"));
    assert_eq!(query_param(refused, "force").as_deref(), Some("false"));

    let out = tc.apply(&two, &["--server-side", "--force-conflicts"]).await;
    assert!(out.contains("serverside-applied"), "{out}");
    let live = get_json(&tc, &ns, "cm/cfg", &["--show-managed-fields"]).await;
    assert_eq!(live["data"]["key"], "two");
    assert!(managed_entry(&live, "kubectl", "Apply").is_some(), "{live:#}");
    assert!(
        owns(&live, "kubectl", &["f:data", "f:key"]),
        "kubectl must own data.key: {live:#}"
    );
    assert!(
        !owns(&live, "team-a", &["f:data", "f:key"]),
        "team-a lost data.key: {live:#}"
    );
}

#[tokio::test]
async fn server_side_apply_with_force_conflicts_migrates_a_client_side_applied_object() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("migrate").await;
    tc.apply(&to_yaml(&[configmap(&ns, "cfg", json!({"a": "1"}))]), &[])
        .await;
    let v2 = to_yaml(&[configmap(&ns, "cfg", json!({"a": "2"}))]);

    let conflict = tc.kubectl_stdin(&["apply", "--server-side", "-f", "-"], &v2).await;
    assert!(!conflict.success(), "{conflict}");
    assert!(conflict.stderr.contains("kubectl-client-side-apply"), "{conflict}");

    tc.dev().clear_request_log();
    tc.apply(&v2, &["--server-side", "--force-conflicts"]).await;
    let live = get_json(&tc, &ns, "cm/cfg", &["--show-managed-fields"]).await;
    assert_eq!(live["data"]["a"], "2");
    assert!(owns(&live, "kubectl", &["f:data", "f:a"]), "{live:#}");
    assert!(
        !owns(&live, "kubectl-client-side-apply", &["f:data", "f:a"]),
        "{live:#}"
    );

    // kubectl's CSA-to-SSA upgrade rewrites managedFields with a JSON patch; the server must accept it.
    let log = tc.requests();
    let upgrade = matching(&log, "PATCH", &format!("/api/v1/namespaces/{ns}/configmaps/cfg"))
        .into_iter()
        .any(|r| r.content_type.starts_with("application/json-patch+json") && r.status == 200);
    assert!(upgrade, "no managedFields JSON patch:\n{}", format_log(&log));
}

// ---------------------------------------------------------------------------------------------------
// Imperative commands (protobuf bodies)

#[tokio::test]
async fn imperative_create_commands_send_protobuf_and_create_the_objects() {
    let tc = TestCluster::start();
    let ns = format!("imperative-{}", std::process::id());
    let out = tc.kubectl_ok(&["create", "namespace", &ns]).await;
    assert!(out.contains(&format!("namespace/{ns} created")), "{out}");
    tc.kubectl_ok(&["create", "configmap", "c1", "-n", &ns, "--from-literal=k=v"])
        .await;
    tc.kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "s1",
        "-n",
        &ns,
        "--from-literal=password=hunter2",
    ])
    .await;
    tc.kubectl_ok(&["create", "serviceaccount", "sa1", "-n", &ns]).await;
    tc.kubectl_ok(&["create", "deployment", "d1", "-n", &ns, "--image=nginx:1"])
        .await;

    let log = tc.requests();
    for path in [
        "/api/v1/namespaces".to_owned(),
        format!("/api/v1/namespaces/{ns}/configmaps"),
        format!("/api/v1/namespaces/{ns}/secrets"),
    ] {
        let posts = matching(&log, "POST", &path);
        let protobuf = posts
            .iter()
            .any(|r| r.status == 201 && r.content_type.starts_with("application/vnd.kubernetes.protobuf"));
        assert!(protobuf, "no successful protobuf POST to {path}:\n{}", format_log(&log));
    }

    assert_eq!(jsonpath(&tc, &ns, "cm/c1", "{.data.k}").await, "v");
    assert_eq!(
        jsonpath(&tc, &ns, "secret/s1", "{.data.password}").await,
        "aHVudGVyMg=="
    );
    assert_eq!(jsonpath(&tc, &ns, "secret/s1", "{.type}").await, "Opaque");
    assert_eq!(
        tc.kubectl_ok(&["get", "sa", "sa1", "-n", &ns, "-o", "name"])
            .await
            .trim(),
        "serviceaccount/sa1"
    );
    assert_eq!(
        jsonpath(&tc, &ns, "deploy/d1", "{.spec.template.spec.containers[0].image}").await,
        "nginx:1"
    );
    assert_eq!(
        jsonpath(&tc, &ns, &format!("ns/{ns}"), "{.status.phase}").await,
        "Active"
    );
}

// ---------------------------------------------------------------------------------------------------
// kubectl get: output formats and printer columns

#[tokio::test]
async fn get_prints_crd_printer_columns_in_default_and_wide_output() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("columns").await;
    install_crd_with_kubectl(&tc).await;
    tc.apply(&to_yaml(&[widget(&ns, "w", 3, "nginx:1.27")]), &[]).await;
    let widgets: Api<Widget> = Api::namespaced(tc.client().await, &ns);
    widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"phase": "Running"}})),
        )
        .await
        .expect("the status subresource accepts a merge patch");

    let out = tc.kubectl_ok(&["get", "widgets", "-n", &ns]).await;
    assert_eq!(header(&out), ["NAME", "REPLICAS", "PHASE", "AGE"], "{out}");
    assert_eq!(row(&out, "w")[..3], ["w", "3", "Running"], "{out}");

    let wide = tc.kubectl_ok(&["get", "widgets", "-n", &ns, "-o", "wide"]).await;
    assert_eq!(header(&wide), ["NAME", "REPLICAS", "IMAGE", "PHASE", "AGE"], "{wide}");
    assert_eq!(row(&wide, "w")[..4], ["w", "3", "nginx:1.27", "Running"], "{wide}");

    let log = tc.requests();
    let table = matching(
        &log,
        "GET",
        &format!("/apis/e2e.capstan.dev/v1/namespaces/{ns}/widgets"),
    )
    .into_iter()
    .any(|r| r.status == 200 && r.accept.contains("as=Table"));
    assert!(table, "kubectl get did not ask for a Table:\n{}", format_log(&log));
}

#[tokio::test]
async fn get_prints_builtin_printer_columns_for_deployments_configmaps_and_namespaces() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("builtin-columns").await;
    tc.apply(
        &to_yaml(&[
            deployment(&ns, "web", "nginx:1", json!({})),
            configmap(&ns, "cfg", json!({"a": "1", "b": "2"})),
        ]),
        &[],
    )
    .await;
    tc.kubectl_ok(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "-n",
        &ns,
        "--timeout=30s",
    ])
    .await;

    let out = tc.kubectl_ok(&["get", "deployments", "-n", &ns]).await;
    assert_eq!(
        header(&out),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"],
        "{out}"
    );
    assert_eq!(row(&out, "web")[..4], ["web", "2/2", "2", "2"], "{out}");
    let wide = tc.kubectl_ok(&["get", "deployments", "-n", &ns, "-o", "wide"]).await;
    assert_eq!(
        header(&wide),
        [
            "NAME",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "AGE",
            "CONTAINERS",
            "IMAGES",
            "SELECTOR"
        ],
        "{wide}"
    );
    assert_eq!(row(&wide, "web")[5..], ["main", "nginx:1", "app=web"], "{wide}");

    let out = tc.kubectl_ok(&["get", "configmaps", "cfg", "-n", &ns]).await;
    assert_eq!(header(&out), ["NAME", "DATA", "AGE"], "{out}");
    assert_eq!(row(&out, "cfg")[..2], ["cfg", "2"], "{out}");

    let out = tc.kubectl_ok(&["get", "namespace", &ns]).await;
    assert_eq!(header(&out), ["NAME", "STATUS", "AGE"], "{out}");
    assert_eq!(row(&out, &ns)[1], "Active", "{out}");
}

#[tokio::test]
async fn get_supports_yaml_json_name_jsonpath_and_custom_columns_output() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("formats").await;
    let cm = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cfg", "namespace": ns, "labels": {"app": "x"}},
        "data": {"a": "1"},
    });
    tc.apply(&to_yaml(&[cm]), &[]).await;

    let yaml = tc.kubectl_ok(&["get", "cm", "cfg", "-n", &ns, "-o", "yaml"]).await;
    let from_yaml: Value = serde_saphyr::from_str(&yaml).expect("kubectl printed YAML");
    let from_json = get_json(&tc, &ns, "cm/cfg", &[]).await;
    for object in [&from_yaml, &from_json] {
        assert_eq!(object["apiVersion"], "v1");
        assert_eq!(object["kind"], "ConfigMap");
        assert_eq!(object["data"]["a"], "1");
        assert_eq!(object["metadata"]["labels"]["app"], "x");
        assert!(
            object["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()),
            "{object:#}"
        );
        assert!(object["metadata"]["resourceVersion"]
            .as_str()
            .is_some_and(|rv| !rv.is_empty()));
        assert!(object["metadata"]["creationTimestamp"].is_string());
        assert!(
            object["metadata"].get("managedFields").is_none(),
            "kubectl hides managedFields by default"
        );
    }
    assert_eq!(from_yaml, from_json, "YAML and JSON output describe the same object");

    let list = get_json(&tc, &ns, "configmaps", &[]).await;
    assert_eq!(list["kind"], "List");
    assert!(list["items"]
        .as_array()
        .is_some_and(|items| items.iter().any(|i| i["metadata"]["name"] == "cfg")));

    assert_eq!(
        tc.kubectl_ok(&["get", "cm", "cfg", "-n", &ns, "-o", "name"])
            .await
            .trim(),
        "configmap/cfg"
    );
    let out = tc
        .kubectl_ok(&[
            "get",
            "cm",
            "cfg",
            "-n",
            &ns,
            "-o",
            "custom-columns=NAME:.metadata.name,A:.data.a,APP:.metadata.labels.app",
        ])
        .await;
    assert_eq!(check::table(&out), [["NAME", "A", "APP"], ["cfg", "1", "x"]], "{out}");
}

// ---------------------------------------------------------------------------------------------------
// Watches and waiting

#[tokio::test]
async fn get_watch_prints_added_modified_and_deleted_events() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("watch").await;
    tc.apply(&to_yaml(&[configmap(&ns, "w1", json!({"a": "1"}))]), &[])
        .await;

    let mut watch = tc.kubectl_watch(&["get", "configmaps", "-n", &ns, "--watch", "--output-watch-events"]);
    let event =
        |kind: &'static str, name: &'static str| move |line: &str| line.split_whitespace().take(2).eq([kind, name]);
    watch.wait_for_line(TIMEOUT, event("ADDED", "w1")).await;
    tc.apply(&to_yaml(&[configmap(&ns, "w2", json!({}))]), &[]).await;
    watch.wait_for_line(TIMEOUT, event("ADDED", "w2")).await;
    tc.kubectl_ok(&["label", "cm", "w1", "-n", &ns, "stage=two"]).await;
    watch.wait_for_line(TIMEOUT, event("MODIFIED", "w1")).await;
    tc.kubectl_ok(&["delete", "cm", "w1", "-n", &ns]).await;
    watch.wait_for_line(TIMEOUT, event("DELETED", "w1")).await;
    watch.stop().await;

    let log = tc.requests();
    let watches: Vec<_> = matching(&log, "GET", &format!("/api/v1/namespaces/{ns}/configmaps"))
        .into_iter()
        .filter(|r| is_watch(r))
        .collect();
    assert!(!watches.is_empty(), "no watch request:\n{}", format_log(&log));
    assert!(
        watches.iter().all(|r| r.status == 200 && r.accept.contains("as=Table")),
        "{}",
        format_log(&log)
    );
    assert!(
        watches.iter().all(|r| query_param(r, "resourceVersion").is_some()),
        "{}",
        format_log(&log)
    );
}

#[tokio::test]
async fn kubectl_wait_returns_once_a_delayed_deployment_is_available_and_a_job_is_complete() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("wait").await;
    tc.apply(
        &to_yaml(&[
            deployment(&ns, "web", "nginx:1", json!({DELAY: "2s"})),
            job(&ns, "once", json!({DELAY: "1s"})),
        ]),
        &[],
    )
    .await;

    let out = tc
        .kubectl_ok(&[
            "wait",
            "--for=condition=Available",
            "deployment/web",
            "-n",
            &ns,
            "--timeout=60s",
        ])
        .await;
    assert!(out.contains("deployment.apps/web condition met"), "{out}");
    assert_eq!(
        jsonpath(&tc, &ns, "deployment/web", "{.status.availableReplicas}").await,
        "2"
    );

    let out = tc
        .kubectl_ok(&[
            "wait",
            "--for=condition=Complete",
            "job/once",
            "-n",
            &ns,
            "--timeout=60s",
        ])
        .await;
    assert!(out.contains("job.batch/once condition met"), "{out}");
    assert_eq!(jsonpath(&tc, &ns, "job/once", "{.status.succeeded}").await, "1");
}

#[tokio::test]
async fn kubectl_wait_times_out_for_a_deployment_that_never_becomes_available() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("stuck").await;
    tc.apply(
        &to_yaml(&[deployment(&ns, "slow", "nginx:1", json!({BEHAVIOR: "progressing"}))]),
        &[],
    )
    .await;
    let out = tc
        .kubectl_fails(&[
            "wait",
            "--for=condition=Available",
            "deployment/slow",
            "-n",
            &ns,
            "--timeout=3s",
        ])
        .await;
    assert!(out.stderr.contains("timed out"), "{out}");
}

#[tokio::test]
async fn rollout_status_reports_a_successful_rollout() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("rollout").await;
    tc.apply(
        &to_yaml(&[deployment(&ns, "web", "nginx:1", json!({DELAY: "1s"}))]),
        &[],
    )
    .await;
    let out = tc
        .kubectl_ok(&["rollout", "status", "deployment/web", "-n", &ns, "--timeout=60s"])
        .await;
    assert!(out.contains("deployment \"web\" successfully rolled out"), "{out}");

    // A new template is a new rollout, and it completes too.
    tc.apply(
        &to_yaml(&[deployment(&ns, "web", "nginx:2", json!({DELAY: "1s"}))]),
        &[],
    )
    .await;
    let out = tc
        .kubectl_ok(&["rollout", "status", "deployment/web", "-n", &ns, "--timeout=60s"])
        .await;
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(
        jsonpath(&tc, &ns, "deployment/web", "{.status.observedGeneration}").await,
        jsonpath(&tc, &ns, "deployment/web", "{.metadata.generation}").await
    );
}

#[tokio::test]
async fn rollout_status_fails_for_a_deployment_that_exceeds_its_progress_deadline() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("rollout-fail").await;
    tc.apply(
        &to_yaml(&[deployment(&ns, "bad", "nginx:1", json!({BEHAVIOR: "fail"}))]),
        &[],
    )
    .await;
    let out = tc
        .kubectl_fails(&["rollout", "status", "deployment/bad", "-n", &ns, "--timeout=60s"])
        .await;
    assert!(out.stderr.contains("exceeded its progress deadline"), "{out}");
}

// ---------------------------------------------------------------------------------------------------
// Deletion: finalizers, namespaces, garbage collection

#[tokio::test]
async fn delete_leaves_a_finalized_object_terminating_until_a_json_patch_removes_the_finalizer() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("finalizer").await;
    let held = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": [HOLD]},
    });
    tc.apply(&to_yaml(&[held]), &[]).await;

    let out = tc
        .kubectl_ok(&["delete", "cm", "held", "-n", &ns, "--wait=false"])
        .await;
    assert!(out.contains("configmap \"held\" deleted"), "{out}");
    let live = get_json(&tc, &ns, "cm/held", &[]).await;
    assert!(live["metadata"]["deletionTimestamp"].is_string(), "{live:#}");
    assert_eq!(live["metadata"]["finalizers"], json!([HOLD]));

    remove_finalizers(&tc, &ns, "cm/held").await;
    tc.kubectl_ok(&["wait", "--for=delete", "cm/held", "-n", &ns, "--timeout=30s"])
        .await;
    assert_not_found(&tc, &ns, "cm/held").await;
}

#[tokio::test]
async fn deleting_a_namespace_deletes_everything_in_it() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("doomed").await;
    install_crd_with_kubectl(&tc).await;
    tc.apply(
        &to_yaml(&[
            configmap(&ns, "cfg", json!({"a": "1"})),
            deployment(&ns, "web", "nginx:1", json!({})),
            widget(&ns, "w", 1, "nginx:1"),
        ]),
        &[],
    )
    .await;

    let out = tc.kubectl_ok(&["delete", "namespace", &ns, "--timeout=60s"]).await;
    assert!(out.contains(&format!("namespace \"{ns}\" deleted")), "{out}");
    let gone = tc.kubectl_fails(&["get", "namespace", &ns]).await;
    assert!(gone.stderr.contains("NotFound"), "{gone}");

    let in_ns = ListParams::default().fields(&format!("metadata.namespace={ns}"));
    let client = tc.client().await;
    let cms = Api::<ConfigMap>::all(client.clone())
        .list(&in_ns)
        .await
        .expect("list configmaps");
    assert!(cms.items.is_empty(), "configmaps survived: {:?}", cms.items);
    let widgets = Api::<Widget>::all(client).list(&in_ns).await.expect("list widgets");
    assert!(widgets.items.is_empty(), "widgets survived: {:?}", widgets.items);
    let deployments = tc.kubectl_ok(&["get", "deployments", "-A", "-o", "name"]).await;
    assert!(!deployments.contains("deployment.apps/web"), "{deployments}");
}

#[tokio::test]
async fn a_terminating_namespace_refuses_new_objects_until_its_content_is_gone() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("terminating").await;
    let held = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": [HOLD]},
    });
    tc.apply(&to_yaml(&[held]), &[]).await;
    tc.kubectl_ok(&["delete", "namespace", &ns, "--wait=false"]).await;
    assert_eq!(
        jsonpath(&tc, &ns, &format!("ns/{ns}"), "{.status.phase}").await,
        "Terminating"
    );

    let refused = tc
        .kubectl_fails(&["create", "configmap", "late", "-n", &ns, "--from-literal=a=b"])
        .await;
    // kubectl 1.32's typed create prints "error: failed to create configmap: ... is forbidden: ...".
    let message = refused.stderr.to_lowercase();
    assert!(
        message.contains("forbidden") && message.contains("being terminated"),
        "{refused}"
    );

    remove_finalizers(&tc, &ns, "cm/held").await;
    tc.kubectl_ok(&["wait", "--for=delete", &format!("namespace/{ns}"), "--timeout=30s"])
        .await;
}

/// Applies ConfigMap `parent` and ConfigMap `child` owned by it. A `held` child also carries a finalizer
/// and a blocking owner reference, so a foreground deletion of the parent has to wait for it.
async fn parent_and_child(tc: &TestCluster, ns: &str, held: bool) {
    tc.apply(&to_yaml(&[configmap(ns, "parent", json!({}))]), &[]).await;
    let uid = jsonpath(tc, ns, "cm/parent", "{.metadata.uid}").await;
    let mut owner = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "parent", "uid": uid});
    let mut meta = json!({"name": "child", "namespace": ns});
    if held {
        owner["blockOwnerDeletion"] = json!(true);
        meta["finalizers"] = json!([HOLD]);
    }
    meta["ownerReferences"] = json!([owner]);
    tc.apply(
        &to_yaml(&[json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta})]),
        &[],
    )
    .await;
}

/// `kubectl patch --type=json` that removes every finalizer of `what`.
async fn remove_finalizers(tc: &TestCluster, ns: &str, what: &str) {
    let patch = r#"[{"op":"remove","path":"/metadata/finalizers"}]"#;
    tc.kubectl_ok(&["patch", what, "-n", ns, "--type=json", "-p", patch])
        .await;
}

#[tokio::test]
async fn background_deletion_garbage_collects_dependents() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("gc-background").await;
    parent_and_child(&tc, &ns, false).await;
    tc.kubectl_ok(&["delete", "cm", "parent", "-n", &ns]).await;
    tc.kubectl_ok(&["wait", "--for=delete", "cm/child", "-n", &ns, "--timeout=30s"])
        .await;
    assert_not_found(&tc, &ns, "cm/child").await;
}

#[tokio::test]
async fn foreground_deletion_keeps_the_owner_until_blocking_dependents_are_gone() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("gc-foreground").await;
    parent_and_child(&tc, &ns, true).await;
    tc.kubectl_ok(&[
        "delete",
        "cm",
        "parent",
        "-n",
        &ns,
        "--cascade=foreground",
        "--wait=false",
    ])
    .await;
    let parent = get_json(&tc, &ns, "cm/parent", &[]).await;
    assert!(parent["metadata"]["deletionTimestamp"].is_string(), "{parent:#}");
    assert!(
        parent["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.contains(&json!("foregroundDeletion"))),
        "{parent:#}"
    );
    let cms: Api<ConfigMap> = Api::namespaced(tc.client().await, &ns);
    capstan_e2e::wait_until(
        "the GC starts deleting the child",
        TIMEOUT,
        capstan_e2e::POLL,
        || async {
            cms.get("child")
                .await
                .is_ok_and(|c| c.metadata.deletion_timestamp.is_some())
        },
    )
    .await;
    // The owner waits for its blocking dependent.
    assert!(
        cms.get("parent").await.is_ok(),
        "the owner must stay while a blocking dependent exists"
    );

    remove_finalizers(&tc, &ns, "cm/child").await;
    tc.kubectl_ok(&[
        "wait",
        "--for=delete",
        "cm/child",
        "cm/parent",
        "-n",
        &ns,
        "--timeout=30s",
    ])
    .await;
}

#[tokio::test]
async fn orphan_deletion_keeps_dependents_and_removes_their_owner_reference() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("gc-orphan").await;
    parent_and_child(&tc, &ns, false).await;
    tc.kubectl_ok(&["delete", "cm", "parent", "-n", &ns, "--cascade=orphan"])
        .await;
    tc.kubectl_ok(&["wait", "--for=delete", "cm/parent", "-n", &ns, "--timeout=30s"])
        .await;
    let child = get_json(&tc, &ns, "cm/child", &[]).await;
    let refs = child["metadata"]["ownerReferences"].as_array().map_or(0, Vec::len);
    assert_eq!(refs, 0, "the orphaned child keeps no owner reference: {child:#}");
}

// ---------------------------------------------------------------------------------------------------
// Lists: selectors and pagination

#[tokio::test]
async fn label_selectors_filter_lists_with_equality_and_set_expressions() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("labels").await;
    tc.apply(
        &to_yaml(&[
            labelled_configmap(&ns, "a", json!({"app": "x", "tier": "fe"})),
            labelled_configmap(&ns, "b", json!({"app": "x", "tier": "y"})),
            labelled_configmap(&ns, "c", json!({"app": "x"})),
            labelled_configmap(&ns, "d", json!({"app": "z", "env": "a"})),
            labelled_configmap(&ns, "e", json!({"env": "b"})),
            labelled_configmap(&ns, "f", json!({"env": "c"})),
        ]),
        &[],
    )
    .await;
    let select = |selector: &'static str| {
        let tc = &tc;
        let ns = ns.clone();
        async move {
            lines(
                &tc.kubectl_ok(&["get", "cm", "-n", &ns, "-l", selector, "-o", "name"])
                    .await,
            )
        }
    };
    let names = |n: &[&str]| {
        n.iter()
            .map(|n| format!("configmap/{n}"))
            .collect::<std::collections::BTreeSet<_>>()
    };

    assert_eq!(select("app=x,tier!=y").await, names(&["a", "c"]));
    assert_eq!(select("env in (a,b)").await, names(&["d", "e"]));
    assert_eq!(select("env notin (a),!tier").await, names(&["c", "e", "f"]));
    assert_eq!(select("tier").await, names(&["a", "b"]));
    assert_eq!(select("app==x,tier=fe").await, names(&["a"]));

    let log = tc.requests();
    let sent = matching(&log, "GET", &format!("/api/v1/namespaces/{ns}/configmaps"))
        .into_iter()
        .any(|r| query_param(r, "labelSelector").as_deref() == Some("env in (a,b)"));
    assert!(sent, "the selector reached the server as typed:\n{}", format_log(&log));
}

#[tokio::test]
async fn field_selectors_filter_by_name_and_namespace_and_reject_unknown_fields() {
    let tc = TestCluster::start();
    let one = tc.with_namespace("fields-one").await;
    let two = tc.with_namespace("fields-two").await;
    for ns in [&one, &two] {
        tc.apply(
            &to_yaml(&[configmap(ns, "same", json!({})), configmap(ns, "other", json!({}))]),
            &[],
        )
        .await;
    }
    let columns = "custom-columns=NS:.metadata.namespace,NAME:.metadata.name";
    let by_name = tc
        .kubectl_ok(&[
            "get",
            "cm",
            "-A",
            "--field-selector",
            "metadata.name=same",
            "-o",
            columns,
            "--no-headers",
        ])
        .await;
    let expected = [format!("{one} same"), format!("{two} same")];
    let found: Vec<String> = check::table(&by_name).iter().map(|r| r.join(" ")).collect();
    assert_eq!(found, expected, "{by_name}");

    let selector = format!("metadata.namespace={one},metadata.name!=same");
    let out = tc
        .kubectl_ok(&["get", "cm", "-A", "--field-selector", &selector, "-o", "name"])
        .await;
    assert!(
        out.contains("configmap/other") && !out.contains("configmap/same"),
        "{out}"
    );

    let bad = tc
        .kubectl_fails(&["get", "cm", "-n", &one, "--field-selector", "spec.nonsense=1"])
        .await;
    assert!(bad.stderr.contains("field label not supported"), "{bad}");
}

#[tokio::test]
async fn chunked_get_returns_every_item_across_pages() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("chunks").await;
    let names = ["c1", "c2", "c3", "c4", "c5"];
    let cms: Vec<Value> = names
        .iter()
        .map(|n| labelled_configmap(&ns, n, json!({"chunk": "yes"})))
        .collect();
    tc.apply(&to_yaml(&cms), &[]).await;
    tc.dev().clear_request_log();

    let out = tc
        .kubectl_ok(&[
            "get",
            "cm",
            "-n",
            &ns,
            "-l",
            "chunk=yes",
            "--chunk-size=2",
            "-o",
            "name",
        ])
        .await;
    let expected: Vec<String> = names.iter().map(|n| format!("configmap/{n}")).collect();
    assert_eq!(
        out.lines().collect::<Vec<_>>(),
        expected,
        "every item once, in key order"
    );

    let log = tc.requests();
    let pages = matching(&log, "GET", &format!("/api/v1/namespaces/{ns}/configmaps"));
    assert_eq!(pages.len(), 3, "5 items in pages of 2:\n{}", format_log(&log));
    assert!(pages.iter().all(|r| query_param(r, "limit").as_deref() == Some("2")));
    assert!(query_param(pages[0], "continue").is_none());
    assert!(pages[1..]
        .iter()
        .all(|r| query_param(r, "continue").is_some_and(|c| !c.is_empty())));
}

// ---------------------------------------------------------------------------------------------------
// Dry run and field validation

#[tokio::test]
async fn server_dry_run_create_and_apply_persist_nothing() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("dry-run").await;

    let out = tc
        .kubectl_ok(&[
            "create",
            "configmap",
            "dry",
            "-n",
            &ns,
            "--from-literal=a=b",
            "--dry-run=server",
            "-o",
            "yaml",
        ])
        .await;
    assert!(out.contains("name: dry"), "{out}");
    assert_not_found(&tc, &ns, "cm/dry").await;

    let dry2 = to_yaml(&[configmap(&ns, "dry2", json!({"a": "1"}))]);
    let out = tc.apply(&dry2, &["--dry-run=server"]).await;
    assert!(out.contains("configmap/dry2 created (server dry run)"), "{out}");
    let out = tc.apply(&dry2, &["--server-side", "--dry-run=server"]).await;
    assert!(out.contains("serverside-applied (server dry run)"), "{out}");
    assert_not_found(&tc, &ns, "cm/dry2").await;

    tc.apply(&to_yaml(&[configmap(&ns, "live", json!({"a": "1"}))]), &[])
        .await;
    let rv = jsonpath(&tc, &ns, "cm/live", "{.metadata.resourceVersion}").await;
    let out = tc
        .apply(
            &to_yaml(&[configmap(&ns, "live", json!({"a": "2"}))]),
            &["--dry-run=server"],
        )
        .await;
    assert!(out.contains("configmap/live configured (server dry run)"), "{out}");
    assert_eq!(jsonpath(&tc, &ns, "cm/live", "{.data.a}").await, "1");
    assert_eq!(jsonpath(&tc, &ns, "cm/live", "{.metadata.resourceVersion}").await, rv);

    let log = tc.requests();
    let dry_writes = log
        .iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PATCH") && r.path.contains("/configmaps"))
        .filter(|r| query_param(r, "dryRun").as_deref() == Some("All"))
        .count();
    assert!(
        dry_writes >= 4,
        "dry-run writes carry dryRun=All:\n{}",
        format_log(&log)
    );
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_fields_and_validate_false_accepts_them() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("validation").await;
    let mut bad = deployment(&ns, "web", "nginx:1", json!({}));
    bad["spec"]["foo"] = json!("bar");
    let manifest = to_yaml(&[bad]);

    let refused = tc.kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
    assert!(!refused.success(), "{refused}");
    assert!(refused.stderr.contains(r#"unknown field "spec.foo""#), "{refused}");
    assert_not_found(&tc, &ns, "deployment/web").await;

    tc.apply(&manifest, &["--validate=false"]).await;
    let live = get_json(&tc, &ns, "deployment/web", &[]).await;
    assert!(
        live["spec"].get("foo").is_none(),
        "the unknown field is dropped: {live:#}"
    );

    let log = tc.requests();
    let posts = matching(&log, "POST", &format!("/apis/apps/v1/namespaces/{ns}/deployments"));
    let modes: Vec<_> = posts
        .iter()
        .map(|r| (r.status, query_param(r, "fieldValidation")))
        .collect();
    assert!(
        modes.contains(&(400, Some("Strict".to_owned()))),
        "{modes:?}\n{}",
        format_log(&log)
    );
    assert!(
        modes.contains(&(201, Some("Ignore".to_owned()))),
        "{modes:?}\n{}",
        format_log(&log)
    );
}

#[tokio::test]
async fn strict_field_validation_rejects_unknown_fields_in_custom_resources() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("cr-validation").await;
    install_crd_with_kubectl(&tc).await;
    let mut bad = widget(&ns, "w", 1, "nginx:1");
    bad["spec"]["bogus"] = json!(true);
    let refused = tc.kubectl_stdin(&["apply", "-f", "-"], &to_yaml(&[bad])).await;
    assert!(!refused.success(), "{refused}");
    assert!(refused.stderr.contains(r#"unknown field "spec.bogus""#), "{refused}");
}

// ---------------------------------------------------------------------------------------------------
// diff, scale, describe, get all

#[tokio::test]
async fn diff_shows_pending_changes_client_and_server_side_without_applying_them() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("diff").await;
    let v1 = to_yaml(&[configmap(&ns, "cfg", json!({"a": "1"}))]);
    tc.apply(&v1, &[]).await;
    let v2 = to_yaml(&[configmap(&ns, "cfg", json!({"a": "2"}))]);

    // Server-side diff of an object last applied client-side must force: kubectl-client-side-apply owns data.a.
    for mode in [&[][..], &["--server-side", "--force-conflicts"][..]] {
        let mut args = vec!["diff", "-f", "-"];
        args.extend_from_slice(mode);
        let changed = tc.kubectl_stdin(&args, &v2).await;
        assert_eq!(
            changed.code,
            Some(1),
            "diff exits 1 when there are differences:\n{changed}"
        );
        let removed = changed
            .stdout
            .lines()
            .any(|l| l.starts_with('-') && l.contains(r#"a: "1""#));
        let added = changed
            .stdout
            .lines()
            .any(|l| l.starts_with('+') && l.contains(r#"a: "2""#));
        assert!(removed && added, "{changed}");
        assert_eq!(
            jsonpath(&tc, &ns, "cm/cfg", "{.data.a}").await,
            "1",
            "diff applies nothing"
        );
    }

    let same = tc.kubectl_stdin(&["diff", "-f", "-"], &v1).await;
    assert_eq!(same.code, Some(0), "no differences, exit 0:\n{same}");
    assert!(same.stdout.trim().is_empty(), "{same}");

    let log = tc.requests();
    let dry_patches = matching(&log, "PATCH", &format!("/api/v1/namespaces/{ns}/configmaps/cfg"))
        .into_iter()
        .filter(|r| query_param(r, "dryRun").as_deref() == Some("All"))
        .count();
    assert!(dry_patches >= 2, "diff is a dry-run PATCH:\n{}", format_log(&log));
}

#[tokio::test]
async fn scale_changes_replicas_through_the_scale_subresource() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("scale").await;
    tc.apply(&to_yaml(&[deployment(&ns, "web", "nginx:1", json!({}))]), &[])
        .await;
    let out = tc
        .kubectl_ok(&["scale", "deployment/web", "-n", &ns, "--replicas=4"])
        .await;
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    tc.kubectl_ok(&["rollout", "status", "deployment/web", "-n", &ns, "--timeout=60s"])
        .await;
    assert_eq!(jsonpath(&tc, &ns, "deployment/web", "{.spec.replicas}").await, "4");
    assert_eq!(
        jsonpath(&tc, &ns, "deployment/web", "{.status.readyReplicas}").await,
        "4"
    );

    let log = tc.requests();
    let scale = matching(
        &log,
        "PATCH",
        &format!("/apis/apps/v1/namespaces/{ns}/deployments/web/scale"),
    );
    assert!(scale.iter().any(|r| r.status == 200), "{}", format_log(&log));
}

#[tokio::test]
async fn describe_and_get_all_work_for_workloads() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("describe").await;
    tc.apply(&to_yaml(&[deployment(&ns, "web", "nginx:1", json!({}))]), &[])
        .await;
    tc.kubectl_ok(&[
        "wait",
        "--for=condition=Available",
        "deployment/web",
        "-n",
        &ns,
        "--timeout=30s",
    ])
    .await;

    let described = tc.kubectl_ok(&["describe", "deployment", "web", "-n", &ns]).await;
    for expected in ["Name:", "web", "Replicas:", "2 desired", "nginx:1"] {
        assert!(
            described.contains(expected),
            "describe lacks {expected:?}:\n{described}"
        );
    }
    let all = tc.kubectl_ok(&["get", "all", "-n", &ns]).await;
    assert!(all.contains("deployment.apps/web"), "{all}");
}

#[tokio::test]
async fn secret_string_data_is_stored_base64_encoded_in_data() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("string-data").await;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "creds", "namespace": ns},
        "stringData": {"password": "s3cret"},
    });
    tc.apply(&to_yaml(&[secret]), &[]).await;
    let live = get_json(&tc, &ns, "secret/creds", &[]).await;
    assert_eq!(
        live["data"]["password"], "czNjcmV0",
        "stringData is merged into data: {live:#}"
    );
    assert!(live.get("stringData").is_none(), "stringData is write-only: {live:#}");
    assert_eq!(live["type"], "Opaque", "the type defaults to Opaque");
}

/// Applies the chart's CRDs (Capstan's own kinds) with kubectl and waits until they are served.
async fn install_capstan_crds(tc: &TestCluster) {
    let dir = capstan_e2e::capstan::workspace_root().join("crds");
    let dir = dir.to_str().expect("a UTF-8 path");
    tc.kubectl_ok(&["apply", "-f", dir]).await;
    tc.kubectl_ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=30s"])
        .await;
}

#[tokio::test]
async fn explain_describes_builtin_and_custom_resource_fields() {
    let tc = TestCluster::start();
    install_capstan_crds(&tc).await;

    let replicas = tc.kubectl_ok(&["explain", "deployment.spec.replicas"]).await;
    assert!(replicas.contains("KIND:       Deployment"), "{replicas}");
    assert!(replicas.contains("FIELD: replicas <integer>"), "{replicas}");
    assert!(replicas.contains("Number of desired pods"), "{replicas}");

    let containers = tc.kubectl_ok(&["explain", "pods.spec.containers"]).await;
    assert!(containers.contains("FIELD: containers <[]Container>"), "{containers}");
    assert!(containers.contains("image\t<string>"), "{containers}");

    let spec = tc.kubectl_ok(&["explain", "applications.capstan.dev.spec"]).await;
    assert!(spec.contains("GROUP:      capstan.dev"), "{spec}");
    assert!(spec.contains("KIND:       Application"), "{spec}");
    assert!(spec.contains("destination\t<Object> -required-"), "{spec}");
    let meta = tc
        .kubectl_ok(&["explain", "applications.capstan.dev.metadata.name"])
        .await;
    assert!(meta.contains("FIELD: name <string>"), "{meta}");
}

#[tokio::test]
async fn apply_of_a_list_validates_its_items_against_openapi_v2() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("list").await;
    install_capstan_crds(&tc).await;
    let app = json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "guestbook", "namespace": ns},
        "spec": {"source": {"repoURL": "https://example.com/repo.git", "path": "guestbook"},
                 "destination": {"namespace": ns}}});
    let list = |extra: Value| {
        let mut cm = configmap(&ns, "cfg", json!({"a": "1"}));
        if let (Some(o), Some(e)) = (cm.as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        let items = [cm, deployment(&ns, "web", "nginx:1", json!({})), app.clone()];
        serde_json::to_string(&json!({"apiVersion": "v1", "kind": "List", "items": items})).expect("JSON")
    };

    tc.dev().clear_request_log();
    let out = tc.apply(&list(json!({})), &[]).await;
    for created in [
        "configmap/cfg created",
        "deployment.apps/web created",
        "application.capstan.dev/guestbook created",
    ] {
        assert!(out.contains(created), "expected {created:?} in:\n{out}");
    }
    let log = tc.requests();
    let v2 = matching(&log, "GET", "/openapi/v2");
    assert!(!v2.is_empty(), "{}", format_log(&log));
    assert!(v2[0].accept.contains("protobuf"), "{}", format_log(&log));
    assert_eq!(v2[0].status, 200);

    // kubectl validates each item against the v2 schemas itself: an unknown field never reaches the server.
    tc.dev().clear_request_log();
    let bad = tc
        .kubectl_runner()
        .fails_with_stdin(&["apply", "-f", "-"], &list(json!({"bogus": 1})))
        .await;
    assert!(
        bad.stderr
            .contains(r#"unknown field "bogus" in io.k8s.api.core.v1.ConfigMap"#),
        "{}",
        bad.stderr
    );
    let log = tc.requests();
    assert!(
        log.iter().all(|r| r.method == "GET"),
        "nothing was written:\n{}",
        format_log(&log)
    );
}

#[tokio::test]
async fn watches_with_client_go_streaming_lists_start_without_a_resource_version() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("watchlist").await;
    let held = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "held", "namespace": ns, "finalizers": [HOLD]}});
    tc.apply(&to_yaml(&[held]), &[]).await;
    tc.dev().clear_request_log();

    // kubectl delete waits for the object with an informer; with client-go's WatchListClient feature on, the
    // informer starts with a streaming list: sendInitialEvents=true and no resourceVersion.
    let mut cmd = tc
        .kubectl_runner()
        .command(&["delete", "cm", "held", "-n", &ns, "--timeout=60s"]);
    let deleting = cmd.env("KUBE_FEATURE_WatchListClient", "true").output();
    let path = format!("/api/v1/namespaces/{ns}/configmaps");
    let streaming_started = async {
        capstan_e2e::wait_until("kubectl's streaming list", TIMEOUT, capstan_e2e::POLL, || {
            let log = tc.requests();
            let started = matching(&log, "GET", &path)
                .iter()
                .any(|r| is_watch(r) && query_param(r, "sendInitialEvents").as_deref() == Some("true"));
            async move { started }
        })
        .await;
        remove_finalizers(&tc, &ns, "cm/held").await;
    };
    let (out, ()) = tokio::join!(
        capstan_e2e::within("kubectl delete", TIMEOUT * 2, deleting),
        streaming_started
    );
    let out = out.expect("kubectl runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_not_found(&tc, &ns, "cm/held").await;

    let log = tc.requests();
    let streaming: Vec<_> = matching(&log, "GET", &path)
        .into_iter()
        .filter(|r| is_watch(r) && query_param(r, "sendInitialEvents").as_deref() == Some("true"))
        .collect();
    assert!(!streaming.is_empty(), "{}", format_log(&log));
    for r in streaming {
        assert_eq!(r.status, 200, "{}", format_log(&log));
        assert_eq!(query_param(r, "resourceVersion"), None, "{}", format_log(&log));
        assert_eq!(query_param(r, "resourceVersionMatch").as_deref(), Some("NotOlderThan"));
    }
}

fn pod(ns: &str, name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "annotations": annotations},
        "spec": {"containers": [{"name": "main", "image": "nginx:1"}]}})
}

async fn wait_running(tc: &TestCluster, ns: &str, name: &str) {
    tc.kubectl_ok(&[
        "wait",
        "--for=condition=Ready",
        &format!("pod/{name}"),
        "-n",
        ns,
        "--timeout=30s",
    ])
    .await;
}

#[tokio::test]
async fn a_pod_that_ignores_sigterm_terminates_for_its_grace_period_unless_forced() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("grace").await;
    let stubborn = json!({"devcluster.capstan.dev/ignore-sigterm": "true"});
    tc.apply(
        &to_yaml(&[pod(&ns, "stubborn", stubborn.clone()), pod(&ns, "short", stubborn)]),
        &[],
    )
    .await;
    wait_running(&tc, &ns, "stubborn").await;
    wait_running(&tc, &ns, "short").await;

    tc.kubectl_ok(&["delete", "pod", "stubborn", "-n", &ns, "--wait=false"])
        .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(tc.client().await, &ns);
    let live = pods.get("stubborn").await.expect("the Pod is still there");
    assert_eq!(live.metadata.deletion_grace_period_seconds, Some(30), "{live:?}");
    // deletionTimestamp is when the grace period ends: 30 s after the deletion, so after the creation.
    let seconds = |t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| {
        t.as_ref().map(|t| t.0.as_second()).expect("a timestamp")
    };
    let ends_after_creation = seconds(&live.metadata.deletion_timestamp) - seconds(&live.metadata.creation_timestamp);
    assert!(
        ends_after_creation >= 30,
        "deletionTimestamp is {ends_after_creation} s after creation"
    );
    let table = tc.kubectl_ok(&["get", "pod", "stubborn", "-n", &ns]).await;
    assert!(table.contains("Terminating"), "{table}");

    let out = tc
        .kubectl_ok(&["delete", "pod", "stubborn", "-n", &ns, "--grace-period=0", "--force"])
        .await;
    assert!(out.contains("force deleted"), "{out}");
    assert_not_found(&tc, &ns, "pod/stubborn").await;

    // A shorter grace period on a Pod: the DELETE answers with the terminating Pod, which goes once the
    // kubelet has waited that long.
    let params = kube::api::DeleteParams {
        grace_period_seconds: Some(2),
        ..Default::default()
    };
    let terminating = pods
        .delete("short", &params)
        .await
        .expect("DELETE")
        .left()
        .expect("the Pod, still there");
    assert_eq!(
        terminating.metadata.deletion_grace_period_seconds,
        Some(2),
        "{terminating:?}"
    );
    tc.kubectl_ok(&["wait", "--for=delete", "pod/short", "-n", &ns, "--timeout=30s"])
        .await;
}

#[tokio::test]
async fn a_pod_that_handles_sigterm_shows_its_deletion_then_goes_at_once() {
    let tc = TestCluster::start();
    let ns = tc.with_namespace("sigterm").await;
    tc.apply(&to_yaml(&[pod(&ns, "nice", json!({}))]), &[]).await;
    wait_running(&tc, &ns, "nice").await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(tc.client().await, &ns);
    let rv = pods
        .get("nice")
        .await
        .expect("the Pod")
        .metadata
        .resource_version
        .unwrap_or_default();
    let params = kube::api::WatchParams::default().fields("metadata.name=nice");
    let mut events = pods.watch(&params, &rv).await.expect("a watch").boxed();

    tc.kubectl_ok(&["delete", "pod", "nice", "-n", &ns, "--timeout=30s"])
        .await;
    assert_not_found(&tc, &ns, "pod/nice").await;
    let mut terminating = Vec::new();
    loop {
        let event = capstan_e2e::within("the Pod's DELETED event", TIMEOUT, events.next())
            .await
            .expect("the watch goes on")
            .expect("a watch event");
        match event {
            kube::api::WatchEvent::Modified(p) if p.metadata.deletion_timestamp.is_some() => terminating.push(p),
            kube::api::WatchEvent::Deleted(_) => break,
            _ => {}
        }
    }
    let first = terminating
        .first()
        .expect("a MODIFIED event showed the deletion before DELETED");
    assert_eq!(first.metadata.deletion_grace_period_seconds, Some(30));
}
