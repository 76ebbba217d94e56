//! Multi-tenancy end to end, on devcluster with RBAC and impersonation enforced: a tenant Application
//! writes as a ServiceAccount of its namespace (docs/multi-tenancy.md), so the cluster's RBAC decides what
//! it may deploy. Each escape attempt fails with a clear condition and leaves the cluster untouched; the
//! allowed path syncs; every write made for a tenant carries the impersonation header of the right
//! ServiceAccount and no group header (counted in devcluster's request log).

use capstan_e2e::capstan::{
    application, automated, condition, condition_true, events_about, get_object, list_names, summarize_app, text,
    workspace_root, AppEnv, OperatorOptions, APP_TIMEOUT, IN_CLUSTER, OPERATOR_NAMESPACE,
};
use capstan_e2e::chart;
use devcluster::RequestRecord;
use serde_json::{json, Value};

/// The deploying ServiceAccount of a team: `capstan-deployer` with a Role on ConfigMaps, Roles,
/// RoleBindings, Jobs, Services and Deployments of `ns` only (what a platform team grants a team; no cluster-wide right).
fn team_rbac(ns: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: capstan-deployer, namespace: {ns}}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {{name: deployer, namespace: {ns}}}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["*"]
  - apiGroups: ["rbac.authorization.k8s.io"]
    resources: ["roles", "rolebindings"]
    verbs: ["*"]
  - apiGroups: ["batch"]
    resources: ["jobs"]
    verbs: ["*"]
  - apiGroups: [""]
    resources: ["services"]
    verbs: ["*"]
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: deployer, namespace: {ns}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: deployer}}
subjects:
  - {{kind: ServiceAccount, name: capstan-deployer, namespace: {ns}}}
"#
    )
}

const CLUSTER_ADMIN_BINDING: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: tenant-is-admin}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}
subjects:
  - {kind: ServiceAccount, name: default, namespace: team-a}
"#;

const OWN_ROLE_BINDING: &str = r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: reader}
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get", "list"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: reader}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: reader}
subjects:
  - {kind: ServiceAccount, name: default}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: settings}
data: {mode: tenant}
"#;

/// Every condition and the operation message of `app`, for assertions on what it reports.
fn reported(app: &Value) -> String {
    let mut out = text(app, "/status/operationState/message").to_string();
    for c in app
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "\n{}/{}: {}",
            text(c, "/type"),
            text(c, "/reason"),
            text(c, "/message")
        ));
    }
    for r in app
        .pointer("/status/operationState/syncResult/resources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        out.push_str(&format!(
            "\n{} {}: {}",
            text(r, "/kind"),
            text(r, "/name"),
            text(r, "/message")
        ));
    }
    out
}

/// Writes the operator made after `from` for the cluster's content (not its own custom resources' status,
/// not Events).
fn content_writes(records: &[RequestRecord]) -> Vec<&RequestRecord> {
    records
        .iter()
        .filter(|r| r.method != "GET" && !r.path.starts_with("/apis/capstan.dev/"))
        .filter(|r| !r.path.contains("/events") && !r.path.starts_with("/apis/events.k8s.io/"))
        .collect()
}

/// A team's environment: the operator with `options`, and the team namespace with its deployer
/// ([`team_rbac`]).
async fn team(prefix: &str, options: OperatorOptions) -> AppEnv {
    let env = AppEnv::start_tenant(prefix, options).await;
    env.cluster.apply(&team_rbac(&env.ns), &[]).await;
    env
}

/// A ConfigMap manifest (in the destination namespace unless `ns` is given).
fn configmap(name: &str, ns: Option<&str>) -> String {
    let ns = ns.map(|n| format!(", namespace: {n}")).unwrap_or_default();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}{ns}}}\ndata: {{a: b}}\n")
}

/// Waits until the Application `name` carries condition `type_` with `reason`; returns it.
async fn wait_condition(env: &AppEnv, name: &str, type_: &str, reason: &str) -> Value {
    let app = env
        .wait_app(name, &format!("condition {type_}/{reason}"), |a| {
            condition(a, type_).is_some_and(|c| text(c, "/reason") == reason)
        })
        .await;
    condition(&app, type_).cloned().unwrap_or_default()
}

/// Asserts that nothing `app` reports (conditions, operation, events) mentions any of `secrets`.
async fn assert_no_hint(env: &AppEnv, app: &str, secrets: &[&str]) {
    let mut said = reported(&env.app(app).await);
    for (_, reason, note) in events_about(&env.client().await, &env.ns, "Application", app).await {
        said.push_str(&format!("\n{reason}: {note}"));
    }
    for secret in secrets {
        assert!(!said.contains(secret), "{secret:?} is hinted at:\n{said}");
    }
}

/// A Secret in the operator namespace with `data`, and the shared `kind` (Repository or Cluster) `name`
/// there using it, with `spec` and a `sourceNamespaces` that lists only `shop-*`.
fn shared_with_secret(kind: &str, name: &str, (secret, data): (&str, Value), mut spec: Value) -> [Value; 2] {
    spec["secretRef"] = json!({"name": secret});
    spec["sourceNamespaces"] = json!(["shop-*"]);
    // A Repository uses a Secret marked as repository credentials only.
    let labels = match kind {
        "Repository" => json!({"capstan.dev/secret-type": "repository"}),
        _ => json!({}),
    };
    [
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": secret, "namespace": OPERATOR_NAMESPACE, "labels": labels}, "stringData": data}),
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": kind,
               "metadata": {"name": name, "namespace": OPERATOR_NAMESPACE}, "spec": spec}),
    ]
}

/// The Application `app` is refused the use of a shared object (`ComparisonError` / `NotPermitted`
/// naming its namespace), nothing it reports hints at `hidden` nor at the allow-list, and its ConfigMap
/// `absent` was not deployed.
async fn assert_not_permitted(env: &AppEnv, app: &str, hidden: &[&str], absent: &str) {
    let denied = wait_condition(env, app, "ComparisonError", "NotPermitted").await;
    assert!(
        text(&denied, "/message").contains(&env.ns),
        "names the namespace: {denied}"
    );
    assert_no_hint(env, app, &[hidden, &["shop-*"]].concat()).await;
    kubectl_absent(env, &["get", "configmap", absent, "-n", &env.ns]).await;
}

async fn kubectl_absent(env: &AppEnv, args: &[&str]) {
    let out = env.cluster.kubectl(args).await;
    assert!(
        out.code != Some(0) && out.stderr.contains("NotFound"),
        "kubectl {args:?} must find nothing: {out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_writes_are_impersonated_and_escapes_fail() {
    let env = team("team", OperatorOptions::default()).await;
    let other = env.cluster.with_namespace("other").await;
    env.repo.write("escape/crb.yaml", CLUSTER_ADMIN_BINDING);
    env.repo.write("allowed/rbac.yaml", OWN_ROLE_BINDING);
    env.repo.write(
        "other/cm.yaml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: planted, namespace: {other}}}\ndata: {{a: b}}\n"),
    );
    env.repo.write(
        "system/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: planted}\ndata: {a: b}\n",
    );
    env.repo.commit("a tenant's manifests").await;
    let mark = env.cluster.requests().len();

    let auto = automated(true, false);
    env.apply(&[
        application(&env.ns, "allowed", &env.repo.url(), "allowed", &env.ns, auto.clone()),
        application(&env.ns, "escape", &env.repo.url(), "escape", &env.ns, auto.clone()),
        application(&env.ns, "other-team", &env.repo.url(), "other", &env.ns, auto.clone()),
        application(&env.ns, "kube-system", &env.repo.url(), "system", "kube-system", auto),
    ])
    .await;

    // The allowed path: a Role and RoleBinding in its own namespace.
    env.wait_synced_healthy("allowed").await;
    env.must_get("ConfigMap", "settings").await;
    env.cluster
        .kubectl_ok(&["get", "rolebinding", "reader", "-n", &env.ns])
        .await;

    // Each escape fails with the API server's Forbidden naming the ServiceAccount; nothing is created.
    let sa = format!("system:serviceaccount:{}:capstan-deployer", env.ns);
    for name in ["escape", "other-team", "kube-system"] {
        let app = env
            .wait_app(name, "the sync failed as Forbidden for the ServiceAccount", |a| {
                let r = reported(a);
                r.contains("forbidden") && r.contains(&sa)
            })
            .await;
        assert!(
            condition(&app, "SyncError").is_some() || text(&app, "/status/operationState/phase") != "Succeeded",
            "a clear failure is reported: {}",
            summarize_app(&app)
        );
    }
    kubectl_absent(&env, &["get", "clusterrolebinding", "tenant-is-admin"]).await;
    kubectl_absent(&env, &["get", "configmap", "planted", "-n", &other]).await;
    kubectl_absent(&env, &["get", "configmap", "planted", "-n", "kube-system"]).await;

    // Every write for the tenant carried Impersonate-User for its ServiceAccount and no group header
    // (without one, the API server derives exactly the ServiceAccount's groups).
    let records = env.cluster.requests();
    let writes = content_writes(&records[mark..]);
    let expected_groups = vec![
        "system:serviceaccounts".to_string(),
        format!("system:serviceaccounts:{}", env.ns),
        "system:authenticated".to_string(),
    ];
    let wrong: Vec<String> = writes
        .iter()
        .filter(|r| r.impersonated_user.as_deref() != Some(sa.as_str()) || r.impersonated_groups != expected_groups)
        .map(|r| {
            format!(
                "{} {} {} as {:?} {:?}",
                r.status, r.method, r.path, r.impersonated_user, r.impersonated_groups
            )
        })
        .collect();
    assert!(wrong.is_empty(), "writes not made as {sa}:\n{}", wrong.join("\n"));
    let denied = writes.iter().filter(|r| r.status == 403).count();
    let applied = writes.iter().filter(|r| r.status < 300).count();
    assert!(
        denied >= 3 && applied >= 3,
        "the escapes were denied and the allowed objects written, all impersonated ({denied} denied, {applied} ok of {})",
        writes.len()
    );
    assert!(
        writes.iter().any(|r| r.path.contains("clusterrolebindings")),
        "the ClusterRoleBinding was attempted (and refused) as the ServiceAccount"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_or_invalid_service_accounts_stop_the_sync() {
    let env = AppEnv::start_tenant("nosa", OperatorOptions::default()).await;
    env.repo.write(
        "app/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n",
    );
    env.repo.commit("a configmap").await;
    let auto = automated(true, false);
    let mut ghost = application(&env.ns, "ghost", &env.repo.url(), "app", &env.ns, auto.clone());
    ghost["spec"]["destination"]["serviceAccountName"] = json!("ghost");
    let mut smuggled = application(&env.ns, "smuggled", &env.repo.url(), "app", &env.ns, auto.clone());
    smuggled["spec"]["destination"]["serviceAccountName"] = json!("kube-system:default");
    // No serviceAccountName and no capstan-deployer in the namespace: the default is missing too.
    let default = application(&env.ns, "default", &env.repo.url(), "app", &env.ns, auto);
    env.apply(&[ghost, smuggled, default]).await;

    for (name, reason, names) in [
        ("ghost", "ServiceAccountNotFound", format!("{}/ghost", env.ns)),
        (
            "default",
            "ServiceAccountNotFound",
            format!("{}/capstan-deployer", env.ns),
        ),
        (
            "smuggled",
            "InvalidServiceAccountName",
            "kube-system:default".to_string(),
        ),
    ] {
        env.wait_app(name, "SyncError names the ServiceAccount", |a| {
            condition(a, "SyncError")
                .is_some_and(|c| text(c, "/reason") == reason && text(c, "/message").contains(&names))
        })
        .await;
    }
    // A requested (manual) sync without its ServiceAccount fails instead of staying pending.
    let mut asked = application(&env.ns, "asked", &env.repo.url(), "app", &env.ns, json!({}));
    asked["spec"]["destination"]["serviceAccountName"] = json!("ghost");
    env.apply(&[asked]).await;
    env.sync("asked", json!({})).await;
    let failed = env
        .wait_app("asked", "the requested sync failed and was cleared", |a| {
            a.get("operation").is_none_or(Value::is_null) && text(a, "/status/operationState/phase") == "Error"
        })
        .await;
    let message = text(&failed, "/status/operationState/message");
    assert!(
        message.contains(&format!("{}/ghost", env.ns)) && message.contains("not found"),
        "the operation says why: {}",
        summarize_app(&failed)
    );
    kubectl_absent(&env, &["get", "configmap", "settings", "-n", &env.ns]).await;
}

/// A shared Repository in the operator namespace serves only the namespaces it lists: a tenant
/// Application of another namespace gets `ComparisonError` / `NotPermitted`, nothing is fetched with the
/// Repository's credentials nor deployed, and nothing it reports names the Repository, its Secret or the
/// Secret's content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_repository_not_listing_the_namespace_is_not_permitted() {
    let env = team("borrow", OperatorOptions::default()).await;
    env.repo.write("app/cm.yaml", &configmap("from-shared", None));
    env.repo.commit("the platform's manifests").await;
    env.apply(&shared_with_secret(
        "Repository",
        "platform-repo",
        (
            "platform-creds",
            json!({"username": "platform", "password": "canary-8f2e"}),
        ),
        json!({"url": env.repo.url()}),
    ))
    .await;
    env.create_app("borrower", "app", automated(true, false)).await;

    assert_not_permitted(
        &env,
        "borrower",
        &["platform-repo", "platform-creds", "canary-8f2e"],
        "from-shared",
    )
    .await;
}

/// A shared Cluster in the operator namespace serves only the namespaces it lists (`NotPermitted`,
/// nothing deployed); once its `sourceNamespaces` lists the team by a glob, the same Application syncs
/// through it (writing as the team's ServiceAccount).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_cluster_serves_only_the_namespaces_it_lists() {
    let env = team("clusteruse", OperatorOptions::default()).await;
    env.repo.write("app/cm.yaml", &configmap("via-shared", None));
    env.repo.commit("a configmap").await;
    let token = chart::token_for(&env.cluster, chart::Identity::Operator).await;
    env.apply(&shared_with_secret(
        "Cluster",
        "shared",
        (
            "shared-cluster-token",
            json!({"bearerToken": token, "caCert": env.cluster.dev().ca_pem()}),
        ),
        json!({"server": env.cluster.url()}),
    ))
    .await;
    let mut app = application(
        &env.ns,
        "remote",
        &env.repo.url(),
        "app",
        &env.ns,
        automated(true, false),
    );
    app["spec"]["destination"] = json!({"name": "shared", "namespace": env.ns});
    env.apply(&[app]).await;

    let url = env.cluster.url();
    assert_not_permitted(&env, "remote", &["shared-cluster-token", &token, &url], "via-shared").await;

    let listed = json!({"spec": {"sourceNamespaces": ["shop-*", "clusteruse-*"]}}).to_string();
    env.cluster
        .kubectl_ok(&[
            "patch",
            "clusters.capstan.dev",
            "shared",
            "-n",
            OPERATOR_NAMESPACE,
            "--type",
            "merge",
            "-p",
            &listed,
        ])
        .await;
    env.wait_synced_healthy("remote").await;
    env.must_get("ConfigMap", "via-shared").await;
}

/// An ApplicationSet of a team whose template names `metadata.namespace: capstan-system` is refused as a
/// whole with a condition on the ApplicationSet; no Application is created anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_applicationset_cannot_create_applications_in_the_operator_namespace() {
    let options = OperatorOptions {
        controllers: "application,applicationset,cluster,repository".into(),
        ..OperatorOptions::default()
    };
    let env = team("setescape", options).await;
    env.repo.write("app/cm.yaml", &configmap("generated", None));
    env.repo.commit("a configmap").await;
    let set = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
        "metadata": {"name": "escape", "namespace": env.ns},
        "spec": {
            "generators": [{"list": {"elements": [{"name": "one"}]}}],
            "template": {
                "metadata": {"name": "escaped-{{name}}", "namespace": OPERATOR_NAMESPACE},
                "spec": {
                    "project": "default",
                    "source": {"repoURL": env.repo.url(), "targetRevision": "HEAD", "path": "app"},
                    "destination": {"server": IN_CLUSTER, "namespace": env.ns},
                },
            },
        },
    });
    env.apply(&[set]).await;
    let client = env.client().await;
    let refused = env
        .eventually(
            "the ApplicationSet reports the refused namespace",
            APP_TIMEOUT,
            || async {
                let set = get_object(&client, &env.ns, "ApplicationSet", "escape")
                    .await
                    .unwrap_or_default();
                match condition(&set, "ErrorOccurred") {
                    Some(c) if condition_true(&set, "ErrorOccurred") => Ok(c.clone()),
                    _ => Err(set["status"].to_string()),
                }
            },
        )
        .await;
    assert!(
        text(&refused, "/message").contains(OPERATOR_NAMESPACE),
        "the condition names the namespace: {refused}"
    );
    for ns in [OPERATOR_NAMESPACE, env.ns.as_str()] {
        let apps = list_names(&client, ns, "Application").await;
        assert!(apps.is_empty(), "no Application is created in {ns}: {apps:?}");
    }
    kubectl_absent(&env, &["get", "configmap", "generated", "-n", &env.ns]).await;
}

/// A PreSync hook Job aimed at another team's namespace: the hook's creation is Forbidden for the team's
/// ServiceAccount (the message names the verb, the resource and the ServiceAccount), the sync fails
/// before its Sync phase (the ConfigMap is not applied) and no Job exists in the other namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_job_in_another_namespace_is_forbidden() {
    let env = team("hookescape", OperatorOptions::default()).await;
    let other = env.cluster.with_namespace("other").await;
    env.repo.write("app/cm.yaml", &configmap("after-hook", None));
    env.repo.write(
        "app/hook.yaml",
        &format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: sneak\n  namespace: {other}\n  annotations:\n    \
             argocd.argoproj.io/hook: PreSync\nspec:\n  template:\n    spec:\n      restartPolicy: Never\n      \
             containers: [{{name: c, image: busybox, command: [\"true\"]}}]\n"
        ),
    );
    env.repo.commit("a hook in another namespace").await;
    env.create_app("hooked", "app", automated(true, false)).await;

    let sa = format!("system:serviceaccount:{}:capstan-deployer", env.ns);
    let app = env
        .wait_app("hooked", "the hook failed as Forbidden for the ServiceAccount", |a| {
            let r = reported(a);
            r.contains("forbidden") && r.contains(&sa) && r.contains("\"jobs\"")
        })
        .await;
    let said = reported(&app);
    assert!(
        said.contains("cannot create") || said.contains("cannot patch"),
        "names the verb: {said}"
    );
    assert!(said.contains(&other), "names the namespace: {said}");
    assert!(
        condition(&app, "SyncError").is_some()
            || matches!(text(&app, "/status/operationState/phase"), "Failed" | "Error"),
        "a clear failure is reported: {}",
        summarize_app(&app)
    );
    kubectl_absent(&env, &["get", "job", "sneak", "-n", &other]).await;
    kubectl_absent(&env, &["get", "configmap", "after-hook", "-n", &env.ns]).await;
}

/// Creates the Application `name` of `path` with the cascade finalizer and waits until it is Synced and
/// Healthy; returns the `capstan.dev/app-instance` label its objects carry (read from `object`).
async fn synced_with_cascade(env: &AppEnv, name: &str, path: &str, object: &str) -> String {
    let mut app = application(&env.ns, name, &env.repo.url(), path, &env.ns, automated(false, false));
    app["metadata"]["finalizers"] = json!(["capstan.dev/resources"]);
    env.apply(&[app]).await;
    env.wait_synced_healthy(name).await;
    let obj = env.must_get("ConfigMap", object).await;
    text(&obj, "/metadata/labels/capstan.dev~1app-instance").to_string()
}

/// Waits until an event about Application `name` has `reason`; returns its note.
async fn wait_event(env: &AppEnv, name: &str, reason: &str) -> String {
    let client = env.client().await;
    env.eventually(&format!("an event {reason} about {name}"), APP_TIMEOUT, || async {
        let events = events_about(&client, &env.ns, "Application", name).await;
        events
            .iter()
            .find(|(_, r, _)| r == reason)
            .map(|(_, _, note)| note.clone())
            .ok_or_else(|| format!("{events:?}"))
    })
    .await
}

/// Cascade deletion never deletes what the Application did not create. Another team plants, in its own
/// namespace, an object carrying Capstan's marks forged to name the tenant's Application (as Git content
/// could carry them); a bystander in the tenant's namespace carries a copied label only. Deleting the
/// Application with the cascade finalizer deletes its own object; the forged one is deleted (if at all)
/// as the tenant's ServiceAccount, which the API server refuses, so it stays and the failure is reported;
/// the bystander is not considered tracked and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cascade_deletion_leaves_objects_the_application_never_created() {
    let env = team("forged", OperatorOptions::default()).await;
    let other = env.cluster.with_namespace("other").await;
    env.repo.write("app/cm.yaml", &configmap("mine", None));
    env.repo.commit("one configmap").await;
    let instance = synced_with_cascade(&env, "owner", "app", "mine").await;

    let forged = |name: &str, ns: &str, tracking: String| {
        json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": ns,
                         "labels": {"capstan.dev/app-instance": instance},
                         "annotations": {"capstan.dev/tracking-id": tracking}},
            "data": {"owner": "someone else"},
        })
    };
    env.apply(&[
        forged(
            "planted",
            &other,
            format!("{}/owner:/ConfigMap:{other}/planted", env.ns),
        ),
        forged(
            "bystander",
            &env.ns,
            format!("{}/someone-else:/ConfigMap:{}/bystander", env.ns, env.ns),
        ),
    ])
    .await;
    env.wait_app("owner", "the forged object is seen as the Application's", |a| {
        a.pointer("/status/resources")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|r| text(r, "/name") == "planted"))
    })
    .await;

    env.cluster
        .kubectl_ok(&["delete", "capp", "owner", "-n", &env.ns, "--wait=false"])
        .await;
    env.wait_object("ConfigMap", "mine", "is deleted with its Application", |o| o.is_none())
        .await;
    let sa = format!("system:serviceaccount:{}:capstan-deployer", env.ns);
    let failed = env
        .wait_app("owner", "the refused deletion is reported", |a| {
            condition(a, "DeletionError").is_some_and(|c| text(c, "/message").contains(&sa))
        })
        .await;
    assert!(
        text(condition(&failed, "DeletionError").unwrap_or(&Value::Null), "/message").contains("planted"),
        "the condition names the object: {}",
        summarize_app(&failed)
    );
    env.cluster
        .kubectl_ok(&["get", "configmap", "planted", "-n", &other])
        .await;
    env.cluster
        .kubectl_ok(&["get", "configmap", "bystander", "-n", &env.ns])
        .await;
}

/// The team's ServiceAccount is deleted before its Application is deleted with the cascade finalizer:
/// nothing is deleted (never with the operator's rights), the finalizer is released (the Application
/// goes away) and a `ServiceAccountGone` event lists what was left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gone_service_account_releases_the_application_and_leaves_its_objects() {
    let env = team("sagone", OperatorOptions::default()).await;
    env.repo.write("app/cm.yaml", &configmap("kept", None));
    env.repo.commit("one configmap").await;
    synced_with_cascade(&env, "leaving", "app", "kept").await;

    env.cluster
        .kubectl_ok(&["delete", "serviceaccount", "capstan-deployer", "-n", &env.ns])
        .await;
    env.cluster
        .kubectl_ok(&["delete", "capp", "leaving", "-n", &env.ns, "--wait=false"])
        .await;
    env.wait_app_gone("leaving").await;
    env.must_get("ConfigMap", "kept").await;
    let note = wait_event(&env, "leaving", "ServiceAccountGone").await;
    assert!(
        note.contains(&format!("ConfigMap/{}/kept", env.ns)) && note.contains("capstan-deployer"),
        "the event names the ServiceAccount and what is left: {note}"
    );
}

/// The PolicySet of docs/multi-tenancy.md (step 3), read from the guide itself, for namespace `ns`.
fn guide_policy_set(ns: &str) -> String {
    let guide = std::fs::read_to_string(workspace_root().join("docs/multi-tenancy.md")).expect("the guide");
    let step = &guide[guide.find("## 3. A PolicySet").expect("step 3 of the guide")..];
    let start = step.find("```yaml\n").expect("a YAML block in step 3") + "```yaml\n".len();
    let block = &step[start..];
    let yaml = &block[..block.find("```").expect("the end of the block")];
    assert!(yaml.contains("namespace: team-a"), "the example is for team-a:\n{yaml}");
    yaml.replace("namespace: team-a", &format!("namespace: {ns}"))
}

/// The team PolicySet of the guide, applied as written: an Application with a LoadBalancer Service and an
/// image from another registry is `PolicyDenied` with both messages and nothing is applied; one that
/// complies (ClusterIP, the company's registry) syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_team_policy_set_of_the_guide_denies() {
    let options = OperatorOptions {
        controllers: "application,cluster,repository,policyset".into(),
        ..OperatorOptions::default()
    };
    let env = team("teampolicy", options).await;
    env.cluster.apply(&guide_policy_set(&env.ns), &[]).await;
    env.eventually("the guide's PolicySet compiles (Ready)", APP_TIMEOUT, || async {
        match env.get("PolicySet", "team-rules").await {
            Some(p) if condition_true(&p, "Ready") => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    let workload = |service_type: &str, image: &str| {
        format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: web}}\nspec:\n  type: {service_type}\n  selector: {{app: web}}\n  \
             ports: [{{port: 80}}]\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: web}}\nspec:\n  \
             replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    \
             spec:\n      containers: [{{name: web, image: {image}}}]\n"
        )
    };
    env.repo.write(
        "public/web.yaml",
        &workload("LoadBalancer", "docker.io/library/nginx:1.27"),
    );
    env.repo.write(
        "internal/web.yaml",
        &workload("ClusterIP", "registry.example.com/web:1.0"),
    );
    env.repo.commit("two ways to ship web").await;
    env.create_app("public", "public", automated(true, false)).await;

    let app = env
        .wait_app("public", "PolicyDenied", |a| condition(a, "PolicyDenied").is_some())
        .await;
    let denied = condition(&app, "PolicyDenied").cloned().unwrap_or_default();
    let message = text(&denied, "/message");
    for expected in [
        "[no-load-balancers] Service web: type LoadBalancer is not allowed",
        "[registry] Deployment web: image docker.io/library/nginx:1.27 is not from registry.example.com",
    ] {
        assert!(message.contains(expected), "{expected:?} in {denied}");
    }
    kubectl_absent(&env, &["get", "service", "web", "-n", &env.ns]).await;
    kubectl_absent(&env, &["get", "deployment", "web", "-n", &env.ns]).await;

    env.apply(&[application(
        &env.ns,
        "internal",
        &env.repo.url(),
        "internal",
        &env.ns,
        automated(true, false),
    )])
    .await;
    // Same names in the same namespace: the compliant Application owns them once the denied one is gone.
    env.cluster
        .kubectl_ok(&["delete", "capp", "public", "-n", &env.ns])
        .await;
    env.wait_synced_healthy("internal").await;
    env.must_get("Service", "web").await;
}

/// A chart as a tenant could write it: every value it is given ends up in a ConfigMap of the team's
/// namespace, so anything a flag injection read from the operator's disk would be deployed for the team.
const LEAKY_CHART: &[(&str, &str)] = &[
    ("chart/Chart.yaml", "apiVersion: v2\nname: leaky\nversion: 0.1.0\n"),
    ("chart/values.yaml", "greeting: none\n"),
    ("chart/files/motd.txt", "hello from the repository"),
    (
        "chart/templates/cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-values\ndata:\n  values: {{ toJson .Values | quote }}\n",
    ),
];

/// A Helm source for the chart above with `helm` merged in.
fn leaky(helm: Value) -> Value {
    let mut spec = automated(true, false);
    spec["source"] = json!({"helm": helm});
    spec
}

/// The `*-values` ConfigMaps in the team's namespace (what the leaky chart deploys).
async fn deployed_values(env: &AppEnv) -> Vec<String> {
    let client = env.client().await;
    list_names(&client, &env.ns, "ConfigMap")
        .await
        .into_iter()
        .filter(|n| n.ends_with("-values"))
        .collect()
}

/// What a team with edit rights in its own namespace only may put in its specs cannot reach the operator's
/// files: each injection of the review is refused with a condition that names the field or the rule, an
/// event says so, and nothing is rendered or applied.
/// - Helm: a release name that is a flag (`--set-file=leak=/etc/hostname`, `--values=/etc/passwd`), a file
///   parameter name holding `,` and `=` (a second `--set-file` entry), a parameter name starting with `-`.
///   A well-formed Helm Application of the same chart renders and syncs (the refusals are not the chart's).
/// - `file://` URLs naming the repository on the operator's disk: an Application, a Repository, and Git
///   generators of ApplicationSets, literal and templated.
/// - A commit whose checkout is past `--max-checkout-bytes` (8 MiB of zeros against 4 MiB): refused before
///   anything is written, and once the commit is fixed the same cache serves the Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_teams_spec_cannot_reach_the_operators_files() {
    let options = OperatorOptions {
        controllers: "application,applicationset,cluster,repository".into(),
        extra_args: vec!["--max-checkout-bytes=4194304".into()],
        ..OperatorOptions::default()
    };
    let env = team("inputs", options).await;
    for (path, content) in LEAKY_CHART {
        env.repo.write(path, content);
    }
    env.repo.write("app/cm.yaml", &configmap("from-local", None));
    env.repo.commit("a chart that shows its values, and a configmap").await;

    helm_injections_are_refused(&env).await;
    local_urls_are_refused(&env).await;
    oversized_checkouts_are_refused(&env).await;
}

async fn helm_injections_are_refused(env: &AppEnv) {
    env.create_app(
        "helm-ok",
        "chart",
        leaky(
            json!({"releaseName": "web", "parameters": [{"name": "greeting", "value": "hello, team"}],
                     "fileParameters": [{"name": "motd", "path": "files/motd.txt"}]}),
        ),
    )
    .await;
    let injections = [
        (
            "inject-release",
            json!({"releaseName": "--set-file=leak=/etc/hostname"}),
            "helm.releaseName",
        ),
        (
            "inject-values",
            json!({"releaseName": "--values=/etc/passwd"}),
            "helm.releaseName",
        ),
        (
            "inject-file-param",
            json!({"releaseName": "fp", "fileParameters": [{"name": "leak=/etc/hostname,motd", "path": "files/motd.txt"}]}),
            "helm.fileParameters[0].name",
        ),
        (
            "inject-param",
            json!({"releaseName": "p", "parameters": [{"name": "--set-file", "value": "leak=/etc/hostname"}]}),
            "helm.parameters[0].name",
        ),
    ];
    for (name, helm, _) in &injections {
        env.create_app(name, "chart", leaky(helm.clone())).await;
    }
    env.wait_synced_healthy("helm-ok").await;
    let values = env.must_get("ConfigMap", "web-values").await;
    let shown = text(&values, "/data/values");
    assert!(
        shown.contains("hello, team") && shown.contains("hello from the repository"),
        "parameters and file parameters reach the chart: {shown}"
    );
    for (name, _, field) in &injections {
        let refused = wait_condition(env, name, "ComparisonError", "InvalidSpec").await;
        assert!(text(&refused, "/message").starts_with(field), "{name}: {refused}");
        let app = env.app(name).await;
        assert!(
            app.pointer("/status/resources")
                .and_then(Value::as_array)
                .is_none_or(Vec::is_empty),
            "{name}: nothing rendered: {}",
            summarize_app(&app)
        );
    }
    let note = wait_event(env, "inject-release", "InvalidSpec").await;
    assert!(note.contains("helm.releaseName"), "{note}");
    assert_eq!(
        deployed_values(env).await,
        ["web-values"],
        "only the well-formed release deployed"
    );
}

async fn local_urls_are_refused(env: &AppEnv) {
    let local = env.repo.file_url();
    env.apply(&[application(
        &env.ns,
        "local-file",
        &local,
        "app",
        &env.ns,
        automated(true, false),
    )])
    .await;
    env.apply(&[json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Repository",
                       "metadata": {"name": "local-repo", "namespace": env.ns}, "spec": {"url": local}})])
        .await;
    let template = json!({
        "metadata": {"name": "gen-{{path.basename}}"},
        "spec": {"project": "default", "source": {"repoURL": env.repo.url(), "targetRevision": "HEAD", "path": "{{path}}"},
                 "destination": {"server": IN_CLUSTER, "namespace": env.ns}},
    });
    let directories = |url: &str| json!({"git": {"repoURL": url, "revision": "HEAD", "directories": [{"path": "*"}]}});
    let set = |name: &str, generator: Value| {
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "ApplicationSet",
               "metadata": {"name": name, "namespace": env.ns},
               "spec": {"generators": [generator], "template": template}})
    };
    env.apply(&[
        set("literal-file", directories(&local)),
        set(
            "templated-file",
            json!({"matrix": {"generators": [{"list": {"elements": [{"url": local}]}}, directories("{{url}}")]}}),
        ),
    ])
    .await;

    let refused = wait_condition(env, "local-file", "ComparisonError", "TransportNotAllowed").await;
    assert!(
        text(&refused, "/message").contains("only network transports"),
        "{refused}"
    );
    let note = wait_event(env, "local-file", "TransportNotAllowed").await;
    assert!(note.contains("file://"), "{note}");
    kubectl_absent(env, &["get", "configmap", "from-local", "-n", &env.ns]).await;

    let client = env.client().await;
    env.eventually("the Repository is refused by the URL policy", APP_TIMEOUT, || async {
        let repo = get_object(&client, &env.ns, "Repository", "local-repo")
            .await
            .unwrap_or_default();
        match condition(&repo, "Ready") {
            Some(c) if text(c, "/reason") == "TransportNotAllowed" && text(c, "/status") == "False" => Ok(()),
            _ => Err(repo["status"].to_string()),
        }
    })
    .await;
    for name in ["literal-file", "templated-file"] {
        env.eventually(
            &format!("ApplicationSet {name} reports the refused URL"),
            APP_TIMEOUT,
            || async {
                let set = get_object(&client, &env.ns, "ApplicationSet", name)
                    .await
                    .unwrap_or_default();
                match condition(&set, "ErrorOccurred") {
                    Some(c)
                        if condition_true(&set, "ErrorOccurred")
                            && text(c, "/message").contains("only network transports") =>
                    {
                        Ok(())
                    }
                    _ => Err(set["status"].to_string()),
                }
            },
        )
        .await;
    }
    let generated: Vec<String> = list_names(&client, &env.ns, "Application")
        .await
        .into_iter()
        .filter(|n| n.starts_with("gen-"))
        .collect();
    assert!(
        generated.is_empty(),
        "no Application generated from a local repository: {generated:?}"
    );
}

async fn oversized_checkouts_are_refused(env: &AppEnv) {
    env.repo.write("big/zeros.bin", &"\0".repeat(8 << 20));
    env.repo.write("big/cm.yaml", &configmap("big-cm", None));
    env.repo.commit("8 MiB of zeros (a few kilobytes in a pack)").await;
    env.create_app("big", "big", automated(true, false)).await;
    let refused = wait_condition(env, "big", "ComparisonError", "CheckoutTooLarge").await;
    assert!(text(&refused, "/message").contains("--max-checkout-bytes"), "{refused}");
    kubectl_absent(env, &["get", "configmap", "big-cm", "-n", &env.ns]).await;

    env.repo.remove("big/zeros.bin");
    env.repo.commit("without the zeros").await;
    env.refresh("big", "normal").await;
    env.wait_synced_healthy("big").await;
    env.must_get("ConfigMap", "big-cm").await;
}
