//! Capstan's own Helm chart in the tests: rendered with the real Helm engine (`e2e/tools/helm template`), its
//! ServiceAccounts and RBAC applied to a devcluster, and kubeconfigs whose user is one of those ServiceAccounts
//! (a token from `kubectl create token`, HTTPS with the cluster's CA). The operator and the reporter run with
//! exactly the rights the chart grants them, so a rule missing from the chart fails a test.
//!
//! Applications of the operator namespace are applied with the operator's own identity; the chart grants "what
//! Applications may deploy" in a role of its own (`rbac.deploy.rules`, everything by default). The tests narrow it
//! to the kinds their fixtures deploy ([`E2E_DEPLOY_RULES`]), so the controller's own ClusterRole is what they
//! prove. Applications of a test namespace write as its `capstan-deployer` ServiceAccount, which the operator
//! impersonates with the chart's `impersonate` rule (the tenancy tests prove that rule).
//!
//! A rendering costs a Python start; each set of values is rendered once per test process.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
};

use serde_json::{json, Value};
use tokio::process::Command;

use crate::capstan::{workspace_root, OPERATOR_NAMESPACE};
use crate::fixtures::to_yaml;
use crate::wait::within;
use crate::{Kubectl, TestCluster, TIMEOUT};

/// The release name tests render the chart with: the operator's ServiceAccount is `capstan`, the reporter's
/// `capstan-reporter`.
pub const RELEASE: &str = "capstan";

/// The kinds the e2e fixtures' Applications deploy, as `rbac.deploy.rules`: what a platform team would
/// narrow the deploy role to. Applications of Applications (app of apps) need nothing more: the controller's
/// own role already covers Applications. RBAC objects are only read (the live cache watches what tenant
/// Applications deploy): the tenancy tests' Roles, RoleBindings and ClusterRoleBindings are written as the
/// tenant's ServiceAccount, so the operator's own rights could not have written them.
/// CRDs are there because the self-protection fixtures deploy them (a self-managing installation carries
/// its own CRDs).
pub const E2E_DEPLOY_RULES: &str = r#"[
  {"apiGroups": [""], "resources": ["configmaps", "secrets", "services", "serviceaccounts", "pods", "namespaces"], "verbs": ["*"]},
  {"apiGroups": ["apps"], "resources": ["deployments", "replicasets"], "verbs": ["*"]},
  {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["*"]},
  {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings", "clusterrolebindings"], "verbs": ["get", "list", "watch"]},
  {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["*"]}
]"#;

/// Which of the chart's ServiceAccounts a process runs as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Identity {
    /// `capstan`: the controllers (ClusterRole `capstan` + the deploy role).
    Operator,
    /// `capstan-reporter`, without write access to Applications (`reporter.tasks.namespaces` empty).
    Reporter,
    /// `capstan-reporter` with `reporter.tasks.namespaces` set: SaaS tasks may patch Applications.
    ReporterWithTasks,
}

impl Identity {
    /// The ServiceAccount's name.
    pub fn service_account(self) -> String {
        match self {
            Self::Operator => RELEASE.to_owned(),
            Self::Reporter | Self::ReporterWithTasks => format!("{RELEASE}-reporter"),
        }
    }

    /// The `--set`/`--set-json` flags this identity's rendering needs.
    fn values(self) -> Vec<String> {
        let mut values = vec![
            "--set".to_owned(),
            "reporter.enabled=true".to_owned(),
            "--set-json".to_owned(),
            format!("rbac.deploy.rules={}", E2E_DEPLOY_RULES.replace('\n', "")),
        ];
        if self == Self::ReporterWithTasks {
            values.extend(["--set".to_owned(), "reporter.tasks.namespaces=*".to_owned()]);
        }
        values
    }
}

/// `helm template capstan charts/capstan -n capstan-system <args>`, parsed into objects; cached per `args`.
pub async fn render(args: &[String]) -> Arc<Vec<Value>> {
    static CACHE: Mutex<BTreeMap<Vec<String>, Arc<Vec<Value>>>> = Mutex::new(BTreeMap::new());
    if let Some(hit) = CACHE.lock().expect("the render cache").get(args) {
        return Arc::clone(hit);
    }
    let root = workspace_root();
    let mut cmd = Command::new(root.join("e2e/tools/helm"));
    cmd.args(["template", RELEASE])
        .arg(root.join("charts/capstan"))
        .args(["--namespace", OPERATOR_NAMESPACE])
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = within("helm template", TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|e| panic!("helm template cannot run: {e}"));
    assert!(
        out.status.success(),
        "helm template {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let objects: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .split("\n---")
        .filter_map(|doc| serde_saphyr::from_str::<Value>(doc).ok())
        .filter(Value::is_object)
        .collect();
    let objects = Arc::new(objects);
    CACHE
        .lock()
        .expect("the render cache")
        .insert(args.to_vec(), Arc::clone(&objects));
    objects
}

/// The object `kind`/`name` of a rendering.
pub fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

/// Applies the chart's ServiceAccounts and RBAC for `identity` to `cluster` (as admin), mints a token for its
/// ServiceAccount with `kubectl create token` and writes a kubeconfig (the cluster's CA, that token); returns its
/// path.
pub async fn kubeconfig_for(cluster: &TestCluster, identity: Identity) -> PathBuf {
    kubeconfig_with(cluster.kubectl_runner(), identity, cluster.dir()).await
}

/// As [`kubeconfig_for`] for any devcluster `admin` (a kubectl with an admin kubeconfig) talks to, a process
/// too: the kubeconfig is the admin's with the user's credentials replaced by the token, written to `dir`.
pub async fn kubeconfig_with(admin: &Kubectl, identity: Identity, dir: &Path) -> PathBuf {
    let token = token_with(admin, identity).await;
    let account = identity.service_account();
    let text = std::fs::read_to_string(admin.kubeconfig()).expect("the admin kubeconfig can be read");
    let mut config: Value = serde_saphyr::from_str(&text).expect("the admin kubeconfig parses");
    for user in config["users"].as_array_mut().into_iter().flatten() {
        user["user"] = json!({"token": token});
    }
    let path = dir.join(format!("{account}.kubeconfig"));
    std::fs::write(&path, config.to_string()).expect("the kubeconfig can be written");
    path
}

/// Applies the chart's ServiceAccounts and RBAC for `identity` to `cluster` (as admin; the release namespace
/// must exist) and returns a token of its ServiceAccount from `kubectl create token`.
pub async fn token_for(cluster: &TestCluster, identity: Identity) -> String {
    token_with(cluster.kubectl_runner(), identity).await
}

/// [`token_for`] through an admin kubectl.
pub async fn token_with(admin: &Kubectl, identity: Identity) -> String {
    let objects = render(&identity.values()).await;
    let rbac: Vec<Value> = objects
        .iter()
        .filter(|o| {
            matches!(
                o["kind"].as_str(),
                Some("ServiceAccount" | "ClusterRole" | "ClusterRoleBinding" | "Role" | "RoleBinding")
            )
        })
        .cloned()
        .collect();
    admin.ok_with_stdin(&["apply", "-f", "-"], &to_yaml(&rbac)).await;
    let account = identity.service_account();
    // Long enough for the longest test or bench; the operator does not refresh a token from a kubeconfig.
    let token = admin
        .ok(&["create", "token", &account, "-n", OPERATOR_NAMESPACE, "--duration=6h"])
        .await;
    token.trim().to_owned()
}
