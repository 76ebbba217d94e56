//! One devcluster per test, plus the files and clients that talk to it.

use std::{
    path::Path,
    sync::atomic::{AtomicUsize, Ordering},
};

use devcluster::{DevCluster, RequestRecord};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    Api, Client,
};
use tempfile::TempDir;
use tokio::sync::OnceCell;

use crate::etcd::EtcdServer;
use crate::kubectl::{Kubectl, KubectlOutput, KubectlWatch};
use crate::raw_http::Endpoint;

/// An in-process devcluster with a kubeconfig and a kubectl cache of its own.
///
/// Its objects live in memory, or in an etcd of its own when `CAPSTAN_E2E_ETCD=1` (see [`crate::etcd`]),
/// so the same tests run against both storage backends. Dropping it shuts the server down, then etcd, and
/// deletes the temporary directory.
pub struct TestCluster {
    // Declared first so the server stops before its storage and its kubeconfig disappear. `None` only
    // inside `restart`.
    dev: Option<DevCluster>,
    etcd: Option<EtcdServer>,
    config: devcluster::Config,
    dir: TempDir,
    kubectl: Kubectl,
    client: OnceCell<Client>,
}

impl TestCluster {
    /// Starts a devcluster with the default configuration (random loopback port, minor version 32).
    pub fn start() -> Self {
        Self::start_with(devcluster::Config::default())
    }

    /// Starts a devcluster with `config`, for tests that tune history or bookmarks. Without an `etcd` in
    /// `config`, `CAPSTAN_E2E_ETCD=1` gives it an etcd of its own.
    pub fn start_with(mut config: devcluster::Config) -> Self {
        let etcd = (config.etcd.is_none() && crate::etcd::requested()).then(EtcdServer::start);
        if let Some(e) = &etcd {
            config.etcd = Some(e.url());
        }
        let dir = tempfile::Builder::new()
            .prefix("capstan-e2e-")
            .tempdir()
            .expect("a temporary directory");
        // Keys and certificates on disk, so a restarted server (see `restart`) keeps the CA, the admin token
        // and the ServiceAccount token signing key its clients hold.
        if config.tls_cert_dir.is_none() {
            config.tls_cert_dir = Some(dir.path().join("pki"));
        }
        let dev = devcluster::start(config.clone()).expect("devcluster starts");
        let kubeconfig = dir.path().join("kubeconfig");
        dev.write_kubeconfig(&kubeconfig)
            .expect("the kubeconfig can be written");
        let kubectl = Kubectl::new(kubeconfig, dir.path().join("kubectl-cache"));
        Self {
            dev: Some(dev),
            etcd,
            config,
            dir,
            kubectl,
            client: OnceCell::new(),
        }
    }

    /// The server itself, for its test hooks (compaction, faults, latency).
    pub fn dev(&self) -> &DevCluster {
        self.dev.as_ref().expect("devcluster is running")
    }

    /// The etcd this cluster's devcluster keeps its objects in, when it has one of its own.
    pub fn etcd(&mut self) -> Option<&mut EtcdServer> {
        self.etcd.as_mut()
    }

    /// Stops devcluster and starts a new one with the same configuration on the same address, as a restarted
    /// API server: clients (kubectl, kube-rs) keep their kubeconfig. Only storage outside the process (etcd)
    /// survives.
    pub fn restart(&mut self) {
        let old = self.dev.take().expect("devcluster is running");
        let listen: std::net::SocketAddr = old
            .url()
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .parse()
            .expect("devcluster listens on an IP address");
        old.shutdown();
        let config = devcluster::Config {
            listen,
            ..self.config.clone()
        };
        self.dev = Some(devcluster::start(config).expect("devcluster restarts"));
    }

    pub fn url(&self) -> String {
        self.dev().url()
    }

    /// The server for raw requests, as the admin user.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            url: self.dev().url(),
            ca_pem: Some(self.dev().ca_pem()),
            token: Some(self.dev().admin_token()),
        }
    }

    pub fn kubeconfig_path(&self) -> &Path {
        self.kubectl.kubeconfig()
    }

    /// A scratch directory that lives as long as the cluster (manifests, logs of child processes).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// A kube-rs client configured from the same kubeconfig kubectl uses, so both clients see the
    /// server exactly as a user would configure them. Built once per test.
    pub async fn client(&self) -> Client {
        self.client
            .get_or_init(|| async { client_from_yaml(&self.dev().kubeconfig_yaml()).await })
            .await
            .clone()
    }

    /// A kube-rs client authenticating with `token` (HTTPS with the cluster CA, like the admin client).
    pub async fn client_with_token(&self, token: &str) -> Client {
        client_from_yaml(&self.dev().kubeconfig_for_token("token-user", token)).await
    }

    /// kubectl with its own kubeconfig whose user authenticates with `token`; `name` names the files.
    pub fn kubectl_with_token(&self, name: &str, token: &str) -> Kubectl {
        self.kubectl_with_kubeconfig(name, &self.dev().kubeconfig_for_token(name, token))
    }

    /// kubectl with its own kubeconfig (written under [`TestCluster::dir`] as `<name>.kubeconfig`).
    pub fn kubectl_with_kubeconfig(&self, name: &str, yaml: &str) -> Kubectl {
        let path = self.dir.path().join(format!("{name}.kubeconfig"));
        std::fs::write(&path, yaml).expect("the kubeconfig can be written");
        Kubectl::new(path, self.dir.path().join(format!("{name}-kubectl-cache")))
    }

    /// A token for ServiceAccount `namespace/name` from the TokenRequest API, valid for an hour.
    pub fn create_token(&self, namespace: &str, name: &str) -> String {
        self.dev()
            .create_token(namespace, name, 3600)
            .unwrap_or_else(|e| panic!("a token for {namespace}/{name}: {e}"))
    }

    /// Creates a namespace with a unique name starting with `prefix`, and returns its name.
    ///
    /// Each test gets its own devcluster already; a fresh namespace on top keeps tests honest about
    /// namespacing (nothing silently works only in `default`) and lets one test hold several.
    pub async fn with_namespace(&self, prefix: &str) -> String {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client().await)
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("namespace {name} cannot be created: {e}"));
        name
    }

    /// Every request the server has answered so far, oldest first.
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.dev().request_log()
    }

    /// kubectl bound to this cluster, for code that only needs the runner.
    pub fn kubectl_runner(&self) -> &Kubectl {
        &self.kubectl
    }

    /// Runs `kubectl <args>`; see [`Kubectl::run`].
    pub async fn kubectl(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl.run(args).await
    }

    /// Runs `kubectl <args>` with `stdin`; see [`Kubectl::run_with_stdin`].
    pub async fn kubectl_stdin(&self, args: &[&str], stdin: &str) -> KubectlOutput {
        self.kubectl.run_with_stdin(args, Some(stdin)).await
    }

    /// Runs `kubectl <args>`, asserts success, returns stdout.
    pub async fn kubectl_ok(&self, args: &[&str]) -> String {
        self.kubectl.ok(args).await
    }

    /// Runs `kubectl <args>` with `stdin`, asserts success, returns stdout.
    pub async fn kubectl_ok_stdin(&self, args: &[&str], stdin: &str) -> String {
        self.kubectl.ok_with_stdin(args, stdin).await
    }

    /// Runs `kubectl <args>` and asserts it failed.
    pub async fn kubectl_fails(&self, args: &[&str]) -> KubectlOutput {
        self.kubectl.fails(args).await
    }

    /// `kubectl apply -f -` of `manifest` plus `extra` flags; asserts success and returns stdout.
    pub async fn apply(&self, manifest: &str, extra: &[&str]) -> String {
        let mut args = vec!["apply", "-f", "-"];
        args.extend_from_slice(extra);
        self.kubectl.ok_with_stdin(&args, manifest).await
    }

    /// Starts `kubectl <args>` (typically `get -w`) and reads its output line by line.
    pub fn kubectl_watch(&self, args: &[&str]) -> KubectlWatch {
        self.kubectl.spawn_lines(args)
    }
}

/// A kube-rs client from kubeconfig text.
pub async fn client_from_yaml(yaml: &str) -> Client {
    let kubeconfig = Kubeconfig::from_yaml(yaml).expect("the kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts the kubeconfig");
    Client::try_from(config).expect("a kube-rs client")
}
