//! Multi-tenancy end to end, on devcluster with RBAC and impersonation enforced: a tenant Application
//! writes as a ServiceAccount of its namespace (docs/multi-tenancy.md), so the cluster's RBAC decides what
//! it may deploy. Each escape attempt fails with a clear condition and leaves the cluster untouched; the
//! allowed path syncs; every write made for a tenant carries the impersonation header of the right
//! ServiceAccount and no group header (counted in devcluster's request log).

use capstan_e2e::capstan::{application, automated, condition, summarize_app, text, AppEnv, OperatorOptions};
use devcluster::RequestRecord;
use serde_json::{json, Value};

/// The deploying ServiceAccount of a team: `capstan-deployer` with a Role on ConfigMaps, Roles and
/// RoleBindings of `ns` only (what a platform team grants a team; no cluster-wide right).
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

async fn kubectl_absent(env: &AppEnv, args: &[&str]) {
    let out = env.cluster.kubectl(args).await;
    assert!(
        out.code != Some(0) && out.stderr.contains("NotFound"),
        "kubectl {args:?} must find nothing: {out:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_writes_are_impersonated_and_escapes_fail() {
    let env = AppEnv::start_tenant("team", OperatorOptions::default()).await;
    let other = env.cluster.with_namespace("other").await;
    env.cluster.apply(&team_rbac(&env.ns), &[]).await;
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
    kubectl_absent(&env, &["get", "configmap", "settings", "-n", &env.ns]).await;
}
