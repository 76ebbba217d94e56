//! Self-protection end to end: the guards of `engine::protect` hold against a real prune and a real
//! cascade deletion. A CustomResourceDefinition, a `capstan.dev` CRD, the operator's namespace and
//! Deployment, the Application itself, `Delete=false` and `helm.sh/resource-policy: keep` objects
//! stay; everything else goes; a held prune is reported in the `ProtectedResourceWarning` condition,
//! a held cascade delete in a `DeletionGuarded` Event. Upgrades by commit: a CRD that drops a stored
//! version refuses the whole sync, and a CRD change goes to the API server before the Deployment of
//! the same commit.

use capstan_e2e::capstan::{
    application, automated, condition, events_about, get_object, sync_result_entry, text, workspace_root, AppEnv,
    APP_TIMEOUT, IN_CLUSTER, OPERATOR_NAMESPACE,
};
use capstan_e2e::fixtures::to_yaml;
use serde_json::{json, Value};

fn crd(group: &str, plural: &str, kind: &str) -> Value {
    crd_versions(group, plural, kind, &["v1"], json!([]))
}

/// A CRD serving `versions` (the first one is the storage version), with printer `columns`.
fn crd_versions(group: &str, plural: &str, kind: &str, versions: &[&str], columns: Value) -> Value {
    let versions: Vec<Value> = versions
        .iter()
        .map(|v| {
            json!({"name": v, "served": true, "storage": *v == versions[0],
                   "additionalPrinterColumns": columns,
                   "schema": {"openAPIV3Schema": {"type": "object",
                              "x-kubernetes-preserve-unknown-fields": true}}})
        })
        .collect();
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind},
                 "versions": versions}
    })
}

fn configmap(name: &str, annotations: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "annotations": annotations}, "data": {"k": name}})
}

/// The real `applications.capstan.dev` CRD, as `crds/` holds it.
fn capstan_crd() -> String {
    std::fs::read_to_string(workspace_root().join("crds/applications.capstan.dev.yaml")).expect("crds/ is readable")
}

/// An Application `self` in the test namespace that lists itself (a self-managing Application).
fn self_app(env: &AppEnv, finalizer: bool) -> Value {
    let mut app = application(&env.ns, "self", &env.repo.url(), "app", &env.ns, automated(true, false));
    if finalizer {
        app["metadata"]["finalizers"] = json!(["capstan.dev/resources"]);
    }
    app
}

/// The Application's tree: a plain ConfigMap, and with `with_protected` one object per guard — the
/// Application `self` itself included when `with_self` (a self-managing Application, whose deletion
/// cascades nothing at all).
fn write_tree(env: &AppEnv, with_protected: bool, with_self: bool) {
    let mut objects = vec![configmap("plain", json!({}))];
    if with_protected {
        objects.push(crd("example.com", "widgets", "Widget"));
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}));
        objects.push(configmap(
            "delete-false",
            json!({"capstan.dev/sync-options": "Delete=false"}),
        ));
        objects.push(configmap("helm-keep", json!({"helm.sh/resource-policy": "keep"})));
    }
    if with_protected && with_self {
        let mut me = self_app(env, false);
        me["spec"]["destination"] = json!({"server": IN_CLUSTER, "namespace": env.ns});
        objects.push(me);
    }
    env.repo.write("app/objects.yaml", &to_yaml(&objects));
    if with_protected {
        env.repo.write("app/capstan-crd.yaml", &capstan_crd());
    } else {
        env.repo.remove("app/capstan-crd.yaml");
    }
}

/// Refreshes the Application `self` and waits until its sync at `rev` reports held prunes; every one
/// of `guards` must be named in the `ProtectedResourceWarning` condition. Returns the Application.
async fn wait_guards_held(env: &AppEnv, rev: &str, guards: &[&str]) -> Value {
    env.refresh("self", "normal").await;
    let app = env
        .wait_app("self", "the guards reported", |a| {
            text(a, "/status/operationState/syncResult/revision") == rev
                && condition(a, "ProtectedResourceWarning").is_some()
        })
        .await;
    let message = text(
        condition(&app, "ProtectedResourceWarning").expect("condition"),
        "/message",
    );
    for guard in guards {
        assert!(message.contains(&format!("guard {guard} held")), "{guard} in {message}");
    }
    app
}

/// A commit removing the CRDs, the operator namespace and the Application itself from Git prunes
/// none of them; the condition names each guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_never_removes_crds_the_operator_namespace_or_the_application_itself() {
    let env = AppEnv::start("guardprune").await;
    write_tree(&env, true, true);
    env.repo.commit("protected objects").await;
    env.apply(&[self_app(&env, false)]).await;
    env.wait_synced_healthy("self").await;

    write_tree(&env, false, true);
    let rev = env.repo.commit("everything protected removed").await;
    let guards = [
        "CustomResourceDefinition",
        "CapstanCRD",
        "OperatorNamespace",
        "SelfApplication",
    ];
    let app = wait_guards_held(&env, &rev, &guards).await;
    let client = env.client().await;
    for (kind, name) in [
        ("CustomResourceDefinition", "widgets.example.com"),
        ("CustomResourceDefinition", "applications.capstan.dev"),
        ("Namespace", OPERATOR_NAMESPACE),
    ] {
        assert!(
            get_object(&client, "", kind, name).await.is_some(),
            "{kind} {name} was pruned"
        );
    }
    let held = sync_result_entry(&app, "CustomResourceDefinition", "widgets.example.com").expect("a result row");
    assert_eq!(text(held, "/status"), "PruneSkipped");
    // Deleted objects that no guard holds still go: the guards are not "never prune".
    assert!(
        env.get("ConfigMap", "delete-false").await.is_none(),
        "Delete=false is about cascade only"
    );
}

/// Deleting an Application with a cascade finalizer deletes only what no guard holds (one that lists
/// itself cascades nothing at all: see `deleting_the_self_managed_folder_keeps_the_installation`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_deletion_leaves_guarded_objects_and_says_so() {
    let env = AppEnv::start("guardcascade").await;
    write_tree(&env, true, false);
    env.repo.commit("protected objects").await;
    env.apply(&[self_app(&env, true)]).await;
    env.wait_synced_healthy("self").await;
    let client = env.client().await;

    env.cluster
        .kubectl_ok(&["delete", "capp", "self", "-n", &env.ns, "--wait=false"])
        .await;
    env.eventually(
        "the Application and the unguarded ConfigMap are gone",
        APP_TIMEOUT,
        || {
            let (client, ns) = (client.clone(), env.ns.clone());
            async move {
                let app = get_object(&client, &ns, "Application", "self").await;
                let plain = get_object(&client, &ns, "ConfigMap", "plain").await;
                match (app, plain) {
                    (None, None) => Ok(()),
                    (a, p) => Err(format!(
                        "application present: {}, plain present: {}",
                        a.is_some(),
                        p.is_some()
                    )),
                }
            }
        },
    )
    .await;
    for (ns, kind, name) in [
        ("", "CustomResourceDefinition", "widgets.example.com"),
        ("", "CustomResourceDefinition", "applications.capstan.dev"),
        ("", "Namespace", OPERATOR_NAMESPACE),
        (env.ns.as_str(), "ConfigMap", "delete-false"),
        (env.ns.as_str(), "ConfigMap", "helm-keep"),
    ] {
        assert!(
            get_object(&client, ns, kind, name).await.is_some(),
            "{kind} {name} was deleted"
        );
    }
    let events = events_about(&client, &env.ns, "Application", "self").await;
    let guarded: Vec<&str> = events
        .iter()
        .filter(|(_, reason, _)| reason == "DeletionGuarded")
        .map(|(_, _, message)| message.as_str())
        .collect();
    for guard in [
        "CustomResourceDefinition",
        "CapstanCRD",
        "OperatorNamespace",
        "DeleteFalse",
        "HelmResourcePolicyKeep",
    ] {
        assert!(
            guarded.iter().any(|m| m.contains(&format!("guard {guard} held"))),
            "{guard} in {guarded:?}"
        );
    }
}

/// A config map with `data.k: value`.
fn marker(value: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "marker"}, "data": {"k": value}})
}

/// A commit whose CRD drops the version its live object stores is refused as a whole: `SyncError`
/// with reason `StoredVersionRemoved` names the CRD and the version, an Event says so, and nothing of
/// the commit is applied (the ConfigMap beside it keeps its old data).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_dropping_a_stored_version_is_refused_before_anything_is_applied() {
    let env = AppEnv::start("storedver").await;
    let widgets = |versions: &[&str]| crd_versions("example.com", "widgets", "Widget", versions, json!([]));
    env.repo
        .write("app/objects.yaml", &to_yaml(&[widgets(&["v1"]), marker("one")]));
    env.repo.commit("widgets v1").await;
    env.create_app("crds", "app", automated(true, false)).await;
    env.wait_synced_healthy("crds").await;
    let client = env.client().await;
    let live = get_object(&client, "", "CustomResourceDefinition", "widgets.example.com")
        .await
        .expect("the CRD");
    assert_eq!(
        live["status"]["storedVersions"],
        json!(["v1"]),
        "the API server keeps storedVersions"
    );

    env.repo
        .write("app/objects.yaml", &to_yaml(&[widgets(&["v2"]), marker("two")]));
    env.repo.commit("widgets v2 only").await;
    env.refresh("crds", "normal").await;
    let app = env
        .wait_app("crds", "the sync is refused", |a| {
            condition(a, "SyncError").is_some_and(|c| text(c, "/reason") == "StoredVersionRemoved")
        })
        .await;
    let message = text(condition(&app, "SyncError").expect("condition"), "/message").to_owned();
    assert!(
        message.contains("CustomResourceDefinition widgets.example.com drops version(s) v1"),
        "{message}"
    );
    let live = get_object(&client, "", "CustomResourceDefinition", "widgets.example.com")
        .await
        .expect("the CRD");
    assert_eq!(live["spec"]["versions"][0]["name"], "v1", "the CRD was not updated");
    let cm = env.must_get("ConfigMap", "marker").await;
    assert_eq!(cm["data"]["k"], "one", "nothing of the refused commit was applied");
    let events = events_about(&client, &env.ns, "Application", "crds").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, note)| reason == "SyncError" && note.contains("storedVersions")),
        "{events:?}"
    );
}

/// An upgrade by commit (a new printer column on a CRD, a new image on a Deployment of the same wave)
/// reaches the API server CRD first: devcluster's request log orders the two writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crd_change_is_applied_before_the_deployment_of_the_same_commit() {
    let env = AppEnv::start("upgradeorder").await;
    let tree = |image: &str, columns: Value| {
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "operator"},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "operator"}},
                     "template": {"metadata": {"labels": {"app": "operator"}},
                                  "spec": {"containers": [{"name": "op", "image": image}]}}}
        });
        // The Deployment first in the file: the order of the applies is the engine's, not Git's.
        to_yaml(&[
            deployment,
            crd_versions("example.com", "gadgets", "Gadget", &["v1"], columns),
        ])
    };
    env.repo.write("app/objects.yaml", &tree("example.com/op:1", json!([])));
    env.repo.commit("v1").await;
    env.create_app("upgrade", "app", automated(true, false)).await;
    env.wait_synced_healthy("upgrade").await;

    let before = env.cluster.requests().len();
    let column = json!([{"name": "Phase", "type": "string", "jsonPath": ".status.phase"}]);
    env.repo.write("app/objects.yaml", &tree("example.com/op:2", column));
    let rev = env.repo.commit("new column, new image").await;
    env.refresh("upgrade", "normal").await;
    env.wait_app("upgrade", "synced at the new commit", |a| {
        text(a, "/status/sync/revision") == rev && text(a, "/status/sync/status") == "Synced"
    })
    .await;
    let writes: Vec<String> = env.cluster.requests()[before..]
        .iter()
        .filter(|r| r.method == "PATCH" && !r.query.contains("dryRun"))
        .map(|r| r.path.clone())
        .collect();
    let position = |suffix: &str| {
        writes
            .iter()
            .position(|p| p.ends_with(suffix))
            .unwrap_or_else(|| panic!("no write of {suffix} in {writes:?}"))
    };
    let crd = position("/customresourcedefinitions/gadgets.example.com");
    let deployment = position(&format!("/namespaces/{}/deployments/operator", env.ns));
    assert!(crd < deployment, "CRD first: {writes:?}");
    let live = get_object(
        &env.client().await,
        "",
        "CustomResourceDefinition",
        "gadgets.example.com",
    )
    .await
    .expect("the CRD");
    assert_eq!(
        live["spec"]["versions"][0]["additionalPrinterColumns"][0]["name"],
        "Phase"
    );
}

/// A new CRD and a Deployment in one wave: the CRD is applied first and read back until Established
/// (devcluster establishes it asynchronously, after the apply's response) before the Deployment is
/// applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_crd_is_established_before_the_rest_of_its_wave_is_applied() {
    let env = AppEnv::start("crdfirst").await;
    env.repo.write("app/objects.yaml", &to_yaml(&[marker("one")]));
    env.repo.commit("a ConfigMap").await;
    env.create_app("crds", "app", automated(true, false)).await;
    env.wait_synced_healthy("crds").await;

    let before = env.cluster.requests().len();
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "web", "image": "example.com/web:1"}]}}}
    });
    let objects = [
        deployment,
        marker("one"),
        crd_versions("example.com", "gizmos", "Gizmo", &["v1"], json!([])),
    ];
    env.repo.write("app/objects.yaml", &to_yaml(&objects));
    let rev = env.repo.commit("a new CRD and a Deployment").await;
    env.refresh("crds", "normal").await;
    env.wait_app("crds", "synced at the new commit", |a| {
        text(a, "/status/sync/revision") == rev && text(a, "/status/sync/status") == "Synced"
    })
    .await;
    let crd_path = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/gizmos.example.com";
    let log: Vec<(String, String)> = env.cluster.requests()[before..]
        .iter()
        .filter(|r| !r.query.contains("dryRun") && !r.query.contains("watch"))
        .map(|r| (r.method.clone(), r.path.clone()))
        .collect();
    let at = |method: &str, suffix: &str| {
        log.iter()
            .position(|(m, p)| m == method && p.ends_with(suffix))
            .unwrap_or_else(|| panic!("no {method} {suffix} in {log:?}"))
    };
    let applied = at("PATCH", crd_path);
    let read_back = applied
        + 1
        + log[applied + 1..]
            .iter()
            .position(|(m, p)| m == "GET" && p == crd_path)
            .unwrap_or_else(|| panic!("the CRD was not read back after its apply: {log:?}"));
    assert!(read_back < at("PATCH", "/deployments/web"), "{log:?}");
}

/// A self-managing Application (`cluster/` holds the `capstan.dev` CRD, the operator's namespace and
/// Deployment, and the Application itself in `capstan-system/`, user Applications in `apps/`): a
/// commit deleting the whole `capstan-system/` folder, with automated prune on, prunes none of the
/// installation and the condition names each guard that held; user Applications stay. Deleting the
/// self Application with a cascade finalizer then deletes nothing guarded either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_self_managed_folder_keeps_the_installation() {
    let env = AppEnv::start("selffolder").await;
    let mut me = application(
        &env.ns,
        "self",
        &env.repo.url(),
        "cluster",
        &env.ns,
        automated(true, false),
    );
    me["spec"]["source"]["directory"] = json!({"recurse": true});
    let operator = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "capstan", "namespace": OPERATOR_NAMESPACE,
                     "labels": {"app.kubernetes.io/name": "capstan"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": "capstan"}},
                 "template": {"metadata": {"labels": {"app.kubernetes.io/name": "capstan"}},
                              "spec": {"containers": [{"name": "capstan", "image": "capstan:dev"}]}}}
    });
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}});
    env.repo.write("cluster/capstan-system/crds.yaml", &capstan_crd());
    env.repo.write(
        "cluster/capstan-system/components.yaml",
        &to_yaml(&[namespace, operator, me.clone()]),
    );
    let user = application(
        &env.ns,
        "user",
        &env.repo.url(),
        "workload",
        &env.ns,
        automated(true, false),
    );
    env.repo.write("cluster/apps/user.yaml", &to_yaml(&[user]));
    env.repo.write(
        "workload/objects.yaml",
        &to_yaml(&[configmap("user-workload", json!({}))]),
    );
    env.repo.commit("a self-managed installation").await;
    env.apply(&[me]).await;
    env.wait_synced_healthy("self").await;
    env.wait_synced_healthy("user").await;

    env.repo.remove("cluster/capstan-system");
    let rev = env.repo.commit("the installation folder deleted").await;
    let guards = ["CapstanCRD", "OperatorNamespace", "OperatorWorkload", "SelfApplication"];
    wait_guards_held(&env, &rev, &guards).await;
    let client = env.client().await;
    let installation = [
        ("", "CustomResourceDefinition", "applications.capstan.dev"),
        ("", "Namespace", OPERATOR_NAMESPACE),
        (OPERATOR_NAMESPACE, "Deployment", "capstan"),
    ];
    for (ns, kind, name) in installation {
        assert!(
            get_object(&client, ns, kind, name).await.is_some(),
            "{kind} {name} was pruned"
        );
    }
    assert!(
        env.get("Application", "user").await.is_some(),
        "the user Application stays"
    );

    env.cluster
        .kubectl_ok(&[
            "patch",
            "capp",
            "self",
            "-n",
            &env.ns,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":["capstan.dev/resources"]}}"#,
        ])
        .await;
    env.cluster
        .kubectl_ok(&["delete", "capp", "self", "-n", &env.ns, "--wait=false"])
        .await;
    env.wait_app_gone("self").await;
    for (ns, kind, name) in installation {
        assert!(
            get_object(&client, ns, kind, name).await.is_some(),
            "{kind} {name} was cascade-deleted"
        );
    }
    let events = events_about(&client, &env.ns, "Application", "self").await;
    assert!(
        events
            .iter()
            .any(|(_, reason, note)| reason == "DeletionGuarded" && note.contains("guard SelfApplication held")),
        "{events:?}"
    );
    // A self-managing Application's deletion cascades nothing: the Applications it manages and
    // their workloads stay too.
    assert!(
        env.get("Application", "user").await.is_some(),
        "the user Application was cascade-deleted"
    );
    assert!(env.get("ConfigMap", "user-workload").await.is_some());
}
