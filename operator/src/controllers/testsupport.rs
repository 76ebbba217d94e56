//! One environment for the controller tests: an in-process devcluster serving Capstan's CRDs with the
//! namespaces `apps` and `capstan-system` (`apps` with an admin-bound `capstan-deployer`, the ServiceAccount
//! its Applications write as), a bare Git repository served over `git://` by `git daemon` on loopback
//! (commits made with `source::testsupport`; a network transport, since the URL policy refuses `file://`
//! outside the operator namespace), a [`Context`] wired to both, and builders for the specs tests write.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client};
use prometheus::Registry;

use crate::api::application::{SyncPolicy, SyncPolicyAutomated};
use crate::api::{Application, ApplicationSet};
use crate::cluster::ClusterClients;
use crate::controllers::{Context, Settings};
use crate::metrics::Metrics;
use crate::source::git::{Git2Source, GitConfig};
use crate::source::testsupport as ts;

/// The namespace the tests' objects live in.
pub const NS: &str = "apps";
/// The operator namespace.
pub const OPERATOR_NS: &str = "capstan-system";

/// A devcluster with the CRDs installed and a Git repository on `git://`.
pub struct Env {
    /// The API server (its request log shows what a reconcile wrote).
    pub dev: devcluster::DevCluster,
    /// `git daemon` serving the repository (stopped before its directory goes).
    _daemon: ts::Server,
    /// Holds the repository (`repo.git`) and the Git cache (`cache`).
    pub tmp: tempfile::TempDir,
    /// A client configuration for the devcluster.
    pub config: kube::Config,
    /// A client.
    pub client: Client,
    /// The bare repository (`main` is HEAD, no commit yet).
    pub repo: git2::Repository,
    /// Its `git://` URL.
    pub url: String,
}

impl Env {
    /// Starts the devcluster, installs every CRD, creates the namespaces, `apps`' deployer and an empty
    /// repository.
    /// Panics when the CRDs are not served within 10 s.
    pub async fn start() -> Env {
        let dev = devcluster::start(devcluster::Config::default()).expect("devcluster");
        let kubeconfig = Kubeconfig::from_yaml(&dev.kubeconfig_yaml()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .expect("config");
        let client = Client::try_from(config.clone()).expect("client");
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        for crd in crate::crds() {
            crds.create(&PostParams::default(), &crd).await.expect("crd");
        }
        for ns in [NS, OPERATOR_NS] {
            let obj = Namespace {
                metadata: ObjectMeta {
                    name: Some(ns.into()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            };
            Api::<Namespace>::all(client.clone())
                .create(&PostParams::default(), &obj)
                .await
                .expect("ns");
        }
        admin_deployer(&client).await;
        wait_for_crds(&client).await;
        let tmp = tempfile::tempdir().expect("tmp");
        let repo_path = tmp.path().join("repo.git");
        let repo = git2::Repository::init_bare(&repo_path).expect("init");
        repo.set_head("refs/heads/main").expect("head");
        let daemon = ts::git_daemon(tmp.path());
        Env {
            url: format!("git://127.0.0.1:{}/repo.git", daemon.port),
            _daemon: daemon,
            dev,
            tmp,
            config,
            client,
            repo,
        }
    }

    /// Commits exactly `files` (paths of any depth) on `main`; returns the commit.
    pub fn commit(&self, files: &[(&str, &str)]) -> String {
        let parent = self.repo.refname_to_id("refs/heads/main").ok();
        ts::commit(&self.repo, "refs/heads/main", parent.as_slice(), files, "c").to_string()
    }

    /// The repository's directory.
    pub fn repo_path(&self) -> std::path::PathBuf {
        self.tmp.path().join("repo.git")
    }

    /// A context with `settings`, a counting client, a Git source caching under the environment's directory,
    /// and cluster clients for the devcluster (the in-cluster destination).
    pub fn context(&self, settings: Settings) -> Arc<Context> {
        let metrics = Metrics::register(&Registry::new()).expect("metrics");
        let git = Git2Source::new(self.tmp.path().join("cache"), GitConfig::default());
        let clusters = ClusterClients::new(self.config.clone(), OPERATOR_NS).expect("clusters");
        // Built as `capstan run` builds it: every request counted, no hidden retries.
        let client = crate::controllers::context::counting_client(self.config.clone(), &metrics).expect("client");
        Arc::new(Context::new(client, settings, Arc::new(git), metrics).with_clusters(Arc::new(clusters)))
    }
}

/// ServiceAccount `capstan-deployer` in [`NS`], bound to `cluster-admin`: Applications of [`NS`] write as
/// it (`controllers::application::identity`), and tests about something else than tenancy deploy anything.
async fn admin_deployer(client: &Client) {
    let deployer = serde_json::json!({
        "apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": "capstan-deployer", "namespace": NS},
    });
    Api::<ServiceAccount>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &serde_json::from_value(deployer).expect("sa"))
        .await
        .expect("sa");
    let binding = serde_json::json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "apps-deployer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "capstan-deployer", "namespace": NS}],
    });
    Api::<ClusterRoleBinding>::all(client.clone())
        .create(&PostParams::default(), &serde_json::from_value(binding).expect("crb"))
        .await
        .expect("crb");
}

/// Waits until the Application and ApplicationSet kinds are served; panics after 10 s.
async fn wait_for_crds(client: &Client) {
    let apps: Api<Application> = Api::namespaced(client.clone(), NS);
    let sets: Api<ApplicationSet> = Api::namespaced(client.clone(), NS);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let served = apps.list(&Default::default()).await.is_ok() && sets.list(&Default::default()).await.is_ok();
        if served {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Application and ApplicationSet CRDs were never served");
}

/// A manual sync policy (no automated sync).
pub fn manual() -> SyncPolicy {
    SyncPolicy::default()
}

/// An automated sync policy without prune, selfHeal or allowEmpty; add them with [`SyncPolicyExt`].
pub fn auto() -> SyncPolicy {
    SyncPolicy {
        automated: Some(SyncPolicyAutomated::default()),
        ..SyncPolicy::default()
    }
}

/// Builder steps for a test's [`SyncPolicy`]: `auto().prune().self_heal()`.
pub trait SyncPolicyExt {
    /// `automated.prune: true`.
    fn prune(self) -> Self;
    /// `automated.selfHeal: true`.
    fn self_heal(self) -> Self;
    /// `automated.allowEmpty: true`.
    fn allow_empty(self) -> Self;
}

impl SyncPolicyExt for SyncPolicy {
    fn prune(mut self) -> Self {
        self.automated.get_or_insert_with(Default::default).prune = true;
        self
    }
    fn self_heal(mut self) -> Self {
        self.automated.get_or_insert_with(Default::default).self_heal = true;
        self
    }
    fn allow_empty(mut self) -> Self {
        self.automated.get_or_insert_with(Default::default).allow_empty = true;
        self
    }
}
