//! The reporter under test: a devcluster with Capstan's CRDs, a `capstan-hub`, the reporter
//! (`capstan run --controllers reporter`, as the chart's `capstan-reporter` ServiceAccount with the chart's
//! RBAC) configured through ConfigMap and Secret `capstan-reporter`,
//! and helpers to create Applications and write their status directly (no operator runs, so the test
//! decides every status the reporter sees).

use std::time::Duration;

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::Client;
use serde_json::{json, Value};

use crate::capstan::{install_crds, resource, Operator, OperatorOptions, OPERATOR_NAMESPACE};
use crate::chart::{kubeconfig_for, Identity};
use crate::hub::{Hub, HubOptions};
use crate::wait::wait_for;
use crate::TestCluster;

/// Upper bound for a change to reach the hub (flush, a retry or two, a loaded machine).
pub const HUB_TIMEOUT: Duration = Duration::from_secs(90);

/// How a [`ReporterEnv`] starts.
#[derive(Clone, Debug, Default)]
pub struct ReporterOptions {
    /// The hub's options.
    pub hub: HubOptions,
    /// `tasks.namespaces` of the reporter ConfigMap.
    pub tasks_namespaces: Option<String>,
    /// Replicas of the reporter (leader election picks one sender).
    pub replicas: usize,
}

/// One devcluster, one hub, one namespace and the reporter(s).
pub struct ReporterEnv {
    /// The reporters (declared first: they stop before the cluster).
    pub reporters: Vec<Operator>,
    pub hub: Hub,
    pub cluster: TestCluster,
    /// The test's namespace.
    pub ns: String,
    /// The agent id.
    pub agent: String,
}

impl ReporterEnv {
    /// Starts everything and waits until the reporter is ready (caches synced).
    pub async fn start(prefix: &str, options: ReporterOptions) -> Self {
        let cluster = TestCluster::start();
        install_crds(cluster.kubectl_runner()).await;
        let ns = cluster.with_namespace(prefix).await;
        let hub = Hub::start(options.hub.clone()).await;
        let agent = format!("{prefix}-agent");
        let mut env = Self {
            reporters: Vec::new(),
            hub,
            cluster,
            ns,
            agent,
        };
        env.configure(env.hub.token(), options.tasks_namespaces.as_deref())
            .await;
        let identity = if options.tasks_namespaces.is_some() {
            Identity::ReporterWithTasks
        } else {
            Identity::Reporter
        };
        let kubeconfig = kubeconfig_for(&env.cluster, identity).await;
        for _ in 0..options.replicas.max(1) {
            env.reporters
                .push(Operator::start(&kubeconfig, reporter_options()).await);
        }
        env
    }

    /// Writes ConfigMap and Secret `capstan-reporter` (the token may change: a rotation).
    pub async fn configure(&self, token: &str, tasks_namespaces: Option<&str>) {
        let mut data = json!({"url": self.hub.url(), "agentId": self.agent, "clusterName": "e2e"});
        if let Some(globs) = tasks_namespaces {
            data["tasks.namespaces"] = json!(globs);
        }
        let mut secret = json!({"token": token});
        if let Some(key) = self.hub.hmac_key() {
            secret["hmacKey"] = json!(key);
        }
        let objects = vec![
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE}, "data": data}),
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
                   "stringData": secret}),
        ];
        self.cluster
            .kubectl_ok_stdin(&["apply", "-f", "-"], &crate::fixtures::to_yaml(&objects))
            .await;
    }

    /// A kube client.
    pub async fn client(&self) -> Client {
        self.cluster.client().await
    }

    /// The reporter (the first one).
    pub fn reporter(&mut self) -> &mut Operator {
        &mut self.reporters[0]
    }

    /// Creates Application `name` in the test namespace with `health` as its status.
    pub async fn create_app(&self, name: &str, health: &str) {
        create_app(&self.client().await, &self.ns, name, health).await;
    }

    /// Writes `status.health.status` (and a synced revision) of Application `name`.
    pub async fn set_health(&self, name: &str, health: &str) {
        set_status(&self.client().await, &self.ns, name, &app_status(health)).await;
    }

    /// Waits until the hub holds Application `name` of the test namespace with `health`.
    pub async fn wait_hub_health(&self, name: &str, health: &str) -> Value {
        let what = format!("the hub to hold {}/{name} as {health}", self.ns);
        wait_for(&what, HUB_TIMEOUT, Duration::from_millis(250), || async {
            self.hub_object("Application", name)
                .await
                .filter(|o| o["summary"]["health"] == health)
        })
        .await
    }

    /// The hub's live object `kind`/`name` of the test namespace.
    pub async fn hub_object(&self, kind: &str, name: &str) -> Option<Value> {
        self.hub
            .objects(&self.agent)
            .await
            .into_iter()
            .find(|o| o["kind"] == kind && o["name"] == name && o["namespace"] == self.ns.as_str())
    }

    /// The hub's request log of the agent, one endpoint (`reports`, `digest`, `heartbeat`, `tasks`).
    pub async fn requests_to(&self, endpoint: &str) -> Vec<Value> {
        self.hub
            .requests(&self.agent)
            .await
            .into_iter()
            .filter(|r| r["endpoint"] == endpoint)
            .collect()
    }
}

/// `capstan run --controllers reporter`.
pub fn reporter_options() -> OperatorOptions {
    OperatorOptions {
        controllers: "reporter".into(),
        ..OperatorOptions::default()
    }
}

/// A status with `health`, Synced at a fixed revision.
pub fn app_status(health: &str) -> Value {
    json!({"sync": {"status": "Synced", "revision": "0123456789abcdef0123456789abcdef01234567"},
           "health": {"status": health}})
}

/// Creates an Application (a valid spec; nothing syncs it) and writes its status.
pub async fn create_app(client: &Client, ns: &str, name: &str, health: &str) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("Application"));
    let app = json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example/apps.git", "path": name, "targetRevision": "main"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": ns}
        }
    });
    let params = PatchParams::apply("e2e").force();
    api.patch(name, &params, &Patch::Apply(&app))
        .await
        .expect("create the Application");
    set_status(client, ns, name, &app_status(health)).await;
}

/// Merges `status` into Application `name`'s status.
pub async fn set_status(client: &Client, ns: &str, name: &str, status: &Value) {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource("Application"));
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&json!({"status": status})))
        .await
        .unwrap_or_else(|e| panic!("patch the status of {ns}/{name}: {e}"));
}

/// Resident set size of process `pid` in KiB (`VmRSS` of /proc).
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// The value of a metric line `name{labels} value` (labels as written, or none), summed over matches.
pub fn metric(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.rsplit_once(' '))
        .filter(|(series, _)| *series == name_and_labels || series.starts_with(&format!("{name_and_labels}{{")))
        .filter_map(|(_, v)| v.parse::<f64>().ok())
        .sum()
}
