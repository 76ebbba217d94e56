//! devcluster: a Kubernetes-API-compatible control plane for Capstan's development and tests.
//! See `/work/shared/reference/test-apiserver-spec.md` (the specification) and DESIGN.md §3.
//!
//! [`start`] runs the server on its own OS thread with its own multi-thread tokio runtime, so it works from a
//! plain `#[test]` as well as from inside any async runtime. The returned [`DevCluster`] handle exposes the
//! URL, a kubeconfig, and the test-harness hooks of spec §21; dropping it shuts the server down.

// `ApiError` is a full Status (message, details, causes); errors are the cold path and every module returns
// `ApiResult`, so boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod admin;
pub mod controllers;
pub mod crdschema;
pub mod defaults;
pub mod discovery;
pub mod error;
pub mod events;
pub mod openapi;
pub mod patch;
pub mod protobuf;
pub mod registry;
pub mod schema;
pub mod selectors;
pub mod server;
pub mod sim;
pub mod ssa;
pub mod store;
pub mod table;
pub mod validation;

use std::net::SocketAddr;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;

pub use admin::{Fault, RequestRecord};

use server::Shared;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (default `127.0.0.1:0`, an ephemeral port).
    pub listen: SocketAddr,
    /// `minor` reported by `/version` (default "32", see spec §2.2).
    pub minor_version: String,
    /// Interval between watch bookmarks (default 60 s).
    pub bookmark_interval: Duration,
    /// Retained watch events (default 10000).
    pub history_limit: usize,
    /// Keep every object in this etcd (`http://host:port`) instead of in memory (default: memory).
    pub etcd: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            minor_version: "32".into(),
            bookmark_interval: Duration::from_secs(60),
            history_limit: 10_000,
            etcd: None,
        }
    }
}

/// A running devcluster.
pub struct DevCluster {
    url: String,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

/// Start a devcluster; returns once it accepts connections.
pub fn start(config: Config) -> anyhow::Result<DevCluster> {
    let listener = std::net::TcpListener::bind(config.listen).with_context(|| format!("binding {}", config.listen))?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let store = match &config.etcd {
        Some(url) => store::Store::etcd(url, config.history_limit)?,
        None => store::Store::new(rv_seed(), config.history_limit),
    };
    let shared = Arc::new(Shared::with_store(
        addr,
        config.minor_version,
        config.bookmark_interval,
        store,
    ));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sh = shared.clone();
    let thread = std::thread::Builder::new()
        .name("devcluster".into())
        .spawn(move || run_server(sh, listener, ready_tx, stop_rx))
        .context("spawning the devcluster thread")?;
    ready_rx.recv().context("devcluster thread exited during startup")??;
    Ok(DevCluster {
        url: format!("http://{addr}"),
        shared,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

/// The first in-memory resourceVersion: wall-clock microseconds, so a restarted in-memory devcluster never
/// hands out an RV a client still holds from before (spec §5.5).
fn rv_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

fn run_server(
    sh: Arc<Shared>,
    listener: std::net::TcpListener,
    ready: std::sync::mpsc::Sender<anyhow::Result<()>>,
    stop: tokio::sync::oneshot::Receiver<()>,
) {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("devcluster-worker")
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            let _ = ready.send(Err(e.into()));
            return;
        }
    };
    rt.block_on(async move {
        let listener = match tokio::net::TcpListener::from_std(listener) {
            Ok(l) => l,
            Err(e) => {
                let _ = ready.send(Err(e.into()));
                return;
            }
        };
        controllers::start(&sh);
        let app = axum::Router::new().fallback(server::handle).with_state(sh.clone());
        let (fired_tx, fired_rx) = tokio::sync::oneshot::channel::<()>();
        let sh2 = sh.clone();
        let signal = async move {
            let _ = stop.await;
            sh2.signals.shutdown.send_replace(true);
            let _ = fired_tx.send(());
        };
        // Small writes (watch events) must not wait for Nagle.
        let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
            let _ = tcp.set_nodelay(true);
        });
        let serve = axum::serve(listener, app).with_graceful_shutdown(signal);
        let _ = ready.send(Ok(()));
        tokio::select! {
            r = serve => {
                if let Err(e) = r {
                    tracing::error!(error = %e, "devcluster server failed");
                }
            }
            _ = async {
                let _ = fired_rx.await;
                tokio::time::sleep(Duration::from_secs(2)).await;
            } => {}
        }
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

impl DevCluster {
    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// A kubeconfig for this server: plain http, dummy token, namespace `default` (spec §21).
    pub fn kubeconfig_yaml(&self) -> String {
        kubeconfig_yaml(&self.url)
    }

    pub fn write_kubeconfig(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// Drop the watch history: open watches get ERROR 410 and close; later watches from old RVs get the
    /// in-stream 410.
    pub fn compact(&self) {
        admin::compact(&self.shared);
    }

    /// Abort every open watch connection.
    pub fn drop_watches(&self) {
        admin::drop_watches(&self.shared);
    }

    /// Answer the next matching requests with an error status.
    pub fn inject_faults(&self, f: Fault) {
        self.shared.admin.add_fault(f);
    }

    /// Delay every (non-admin) request.
    pub fn set_latency(&self, d: Duration) {
        self.shared.admin.set_latency(d);
    }

    /// Hold (true) or release (false) watch event delivery.
    pub fn pause_events(&self, paused: bool) {
        admin::pause_events(&self.shared, paused);
    }

    pub fn request_log(&self) -> Vec<RequestRecord> {
        self.shared.admin.requests()
    }

    pub fn clear_request_log(&self) {
        self.shared.admin.clear_requests();
    }

    /// Stop the server and join its thread.
    pub fn shutdown(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for DevCluster {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// The kubeconfig text for a server URL.
pub fn kubeconfig_yaml(url: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: devcluster
  cluster:
    server: {url}
contexts:
- name: devcluster
  context:
    cluster: devcluster
    user: devcluster
    namespace: default
current-context: devcluster
users:
- name: devcluster
  user:
    token: devcluster-dummy-token
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn http(url: &str, method: &str, path: &str, body: &str) -> (u16, String) {
        let addr = url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).unwrap();
        let code = out.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
        (code, out)
    }

    #[test]
    fn start_serve_hooks_and_shutdown() {
        let dc = start(Config::default()).unwrap();
        let url = dc.url();
        let (code, body) = http(&url, "GET", "/version", "");
        assert_eq!(code, 200);
        assert!(body.contains("\"minor\":\"32\""));
        let (code, _) = http(
            &url,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            r#"{"metadata":{"name":"a"}}"#,
        );
        assert_eq!(code, 201);
        dc.inject_faults(Fault {
            status: 429,
            count: 1,
            ..Default::default()
        });
        let (code, body) = http(&url, "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 429);
        assert!(body.to_ascii_lowercase().contains("retry-after: 1"));
        let (code, _) = http(&url, "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 200);
        let log = dc.request_log();
        assert_eq!(log.len(), 4);
        assert_eq!(log[2].status, 429);
        dc.clear_request_log();
        assert!(dc.request_log().is_empty());
        assert!(dc.kubeconfig_yaml().contains(&url));
        dc.compact();
        dc.pause_events(true);
        dc.pause_events(false);
        dc.shutdown();
        assert!(std::net::TcpStream::connect(url.trim_start_matches("http://")).is_err());
    }
}
