//! The `devcluster` binary, as `make demo` and the operator's end-to-end tests run it: it announces
//! its URL, writes a kubeconfig that kubectl and kube-rs accept, and stops cleanly on SIGTERM.

use capstan_e2e::{process::DevClusterProcess, TIMEOUT};
use k8s_openapi::api::core::v1::Namespace;
use kube::{
    config::{KubeConfigOptions, Kubeconfig},
    Api, Client,
};

#[tokio::test]
async fn devcluster_binary_announces_its_url_serves_clients_and_stops_on_sigterm() {
    let dc = DevClusterProcess::start().await;
    assert!(dc.url.starts_with("https://127.0.0.1:"), "{}", dc.url);

    let out = dc.kubectl.ok(&["get", "namespace", "default", "-o", "name"]).await;
    assert_eq!(out.trim(), "namespace/default");

    let kubeconfig = Kubeconfig::read_from(dc.kubectl.kubeconfig()).expect("the written kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("kube-rs accepts it");
    assert_eq!(
        config.cluster_url.to_string().trim_end_matches('/'),
        dc.url.trim_end_matches('/')
    );
    let client = Client::try_from(config).expect("a client");
    let system = Api::<Namespace>::all(client)
        .get("kube-system")
        .await
        .expect("kube-system exists");
    assert_eq!(system.status.and_then(|s| s.phase).as_deref(), Some("Active"));

    let status = dc.process.terminate(TIMEOUT).await;
    assert!(status.success(), "devcluster exits 0 on SIGTERM, got {status}");
}
