//! The test as kubelet, for an operator that installs and upgrades itself (`capstan bootstrap`).
//!
//! There is no container runtime, so nothing would ever run the operator's Deployment. [`Kubelet`]
//! does what a kubelet does for its single pod, in a background task: it polls the *applied*
//! Deployment, and whenever the pod template changes it stops the running `capstan run` and starts
//! one with the new template's container args and env (`valueFrom` resolved), authenticated with a
//! fresh token of the template's ServiceAccount, as a pod would be. When the Deployment is deleted it
//! stops the process. Only what a pod has of its own is replaced (see [`OperatorOptions::as_pod`]):
//! the metrics address and the emptyDir cache directory. The image is not run (there is one binary,
//! this workspace's); the test reads the image from the Deployment instead.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use serde_json::Value;
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

use crate::capstan::{get_object, Operator, OperatorOptions, PodCommand};
use crate::TestCluster;

/// How often the kubelet looks at the Deployment.
const KUBELET_POLL: Duration = Duration::from_millis(300);

/// What the kubelet ran so far.
#[derive(Default)]
struct Pod {
    operator: Option<Operator>,
    /// The pod template the running process was started from.
    template: Option<Value>,
    /// The container args of every start, oldest first.
    starts: Vec<Vec<String>>,
    /// Output of the processes already stopped.
    past_logs: Vec<String>,
}

/// A kubelet for Deployment `namespace/name` (see the module doc).
pub struct Kubelet {
    pod: Arc<Mutex<Pod>>,
    task: JoinHandle<()>,
    _cache: tempfile::TempDir,
}

impl Kubelet {
    /// Starts watching Deployment `namespace/name` of `cluster`.
    pub async fn start(cluster: &TestCluster, namespace: &str, name: &str) -> Kubelet {
        let cache = tempfile::tempdir().expect("tempdir");
        let pod = Arc::new(Mutex::new(Pod::default()));
        let ctx = Context {
            client: cluster.client().await,
            namespace: namespace.to_string(),
            name: name.to_string(),
            // The token is filled in at each start (a fresh one, as a projected token would be).
            kubeconfig: cluster.dev().kubeconfig_for_token("pod", TOKEN_PLACEHOLDER),
            kubeconfig_path: cluster.dir().join(format!("kubelet-{name}.kubeconfig")),
            cache_dir: cache.path().to_path_buf(),
        };
        let task = tokio::spawn(run(ctx, Arc::clone(&pod)));
        Kubelet {
            pod,
            task,
            _cache: cache,
        }
    }

    /// The container args of every process started so far, oldest first.
    pub async fn starts(&self) -> Vec<Vec<String>> {
        self.pod.lock().await.starts.clone()
    }

    /// Whether a process runs now.
    pub async fn running(&self) -> bool {
        self.pod.lock().await.operator.is_some()
    }

    /// The output of every process so far (the last `n` lines of the running one).
    pub async fn logs(&self, n: usize) -> String {
        let pod = self.pod.lock().await;
        let mut out = pod.past_logs.join("\n");
        if let Some(op) = &pod.operator {
            out.push('\n');
            out.push_str(&op.log_tail(n));
        }
        out
    }

    /// Stops the kubelet and the process it runs.
    pub async fn stop(self) {
        self.task.abort();
        let _ = self.task.await;
        let mut pod = self.pod.lock().await;
        if let Some(mut op) = pod.operator.take() {
            op.kill().await;
        }
    }
}

const TOKEN_PLACEHOLDER: &str = "KUBELET-TOKEN-PLACEHOLDER";

struct Context {
    client: Client,
    namespace: String,
    name: String,
    kubeconfig: String,
    kubeconfig_path: PathBuf,
    cache_dir: PathBuf,
}

async fn run(ctx: Context, pod: Arc<Mutex<Pod>>) {
    loop {
        let deployment = get_object(&ctx.client, &ctx.namespace, "Deployment", &ctx.name).await;
        let template = deployment.as_ref().map(|d| d["spec"]["template"].clone());
        let mut p = pod.lock().await;
        if p.template != template {
            if let Some(mut old) = p.operator.take() {
                old.kill().await;
                let log = old.logs();
                p.past_logs.push(log);
            }
            p.template = None;
            if let Some(t) = template {
                let (command, account) = pod_command_of(&t, &ctx.namespace, &ctx.cache_dir);
                let token = service_account_token(&ctx.client, &ctx.namespace, &account).await;
                write_kubeconfig(&ctx.kubeconfig_path, &ctx.kubeconfig.replace(TOKEN_PLACEHOLDER, &token));
                p.starts.push(command.args.clone());
                let options = OperatorOptions {
                    as_pod: Some(command),
                    ..OperatorOptions::default()
                };
                p.operator = Some(Operator::start(&ctx.kubeconfig_path, options).await);
                p.template = Some(t);
            }
        }
        drop(p);
        tokio::time::sleep(KUBELET_POLL).await;
    }
}

fn write_kubeconfig(path: &Path, text: &str) {
    std::fs::write(path, text).expect("the pod's kubeconfig is written");
}

/// A token of ServiceAccount `namespace/name` from the TokenRequest API.
async fn service_account_token(client: &Client, namespace: &str, name: &str) -> String {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let api: kube::Api<ServiceAccount> = kube::Api::namespaced(client.clone(), namespace);
    let answer = api
        .create_token_request(name, &kube::api::PostParams::default(), &request)
        .await
        .expect("a ServiceAccount token");
    answer.status.expect("the token").token
}

/// What the kubelet runs for a pod `template`: its first container's args and env (`valueFrom`
/// resolved; the pod of Deployment `capstan` in `namespace`), and the ServiceAccount it runs as.
pub fn pod_command_of(template: &Value, namespace: &str, cache_dir: &Path) -> (PodCommand, String) {
    let pod = &template["spec"];
    let container = &pod["containers"][0];
    let args: Vec<String> = serde_json::from_value(container["args"].clone()).expect("args");
    let env = container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let name = e["name"].as_str().expect("env name").to_owned();
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.name") => "capstan-7d9f8-abcde".to_owned(),
                Some("metadata.namespace") => namespace.to_owned(),
                Some(other) => panic!("the test kubelet cannot resolve {other}"),
                None => e["value"].as_str().unwrap_or_default().to_owned(),
            };
            (name, value)
        })
        .collect();
    let account = pod["serviceAccountName"].as_str().expect("a ServiceAccount").to_owned();
    let command = PodCommand {
        args,
        env,
        cache_dir: cache_dir.to_path_buf(),
    };
    (command, account)
}
