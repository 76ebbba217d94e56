//! devcluster: a Kubernetes-API-compatible control plane for Capstan's development and tests.
//! What it serves and how it fits into Capstan's tests: docs/architecture.md, "devcluster". It follows
//! kube-apiserver; where it deliberately differs, the module that differs says so.
//!
//! [`start`] runs the server on its own OS thread with its own multi-thread tokio runtime, so it works from a
//! plain `#[test]` as well as from inside any async runtime. The returned [`DevCluster`] handle exposes the
//! URL, the CA, an admin kubeconfig, ServiceAccount tokens and client certificates, and the test-harness
//! hooks; dropping it shuts the server down.
//!
//! Like a real cluster it serves HTTPS with a CA of its own and enforces authentication and RBAC
//! ([`auth`]); [`Config::insecure_http`] switches the transport to plain HTTP (authentication and RBAC
//! stay).

// `ApiError` is a full Status (message, details, causes); errors are the cold path and every module returns
// `ApiResult`, so boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod admin;
pub mod auth;
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
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use anyhow::Context;
use base64::Engine;
use serde_json::Value;

pub use admin::{Fault, RequestRecord};

use server::Shared;

/// Server settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where to listen (default `127.0.0.1:0`, an ephemeral port).
    pub listen: SocketAddr,
    /// `minor` reported by `/version` (default "32").
    pub minor_version: String,
    /// Interval between watch bookmarks (default 60 s).
    pub bookmark_interval: Duration,
    /// Retained watch events (default 10000).
    pub history_limit: usize,
    /// Keep every object in this etcd (`http://host:port`) instead of in memory (default: memory).
    pub etcd: Option<String>,
    /// Serve plain HTTP instead of HTTPS. Credentials still authenticate and RBAC applies to them, but a
    /// request without any is the superuser `system:unsecured`, as on kube-apiserver's former insecure
    /// port (client-go sends no bearer token over plain HTTP).
    pub insecure_http: bool,
    /// Keep the CA, serving certificate, token signing key and admin token here (created on first use,
    /// reused after), so kubeconfigs and ServiceAccount tokens survive a restart.
    pub tls_cert_dir: Option<PathBuf>,
    /// Serve requests without credentials as `system:anonymous` (kube-apiserver's default); when false
    /// they get 401.
    pub anonymous_auth: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            minor_version: "32".into(),
            bookmark_interval: Duration::from_secs(60),
            history_limit: 10_000,
            etcd: None,
            insecure_http: false,
            tls_cert_dir: None,
            anonymous_auth: true,
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
    let pki = auth::pki::Pki::load_or_create(config.tls_cert_dir.as_deref(), &config.listen.ip().to_string())
        .context("preparing the CA and certificates")?;
    let tls = if config.insecure_http {
        None
    } else {
        Some(pki.server_config()?)
    };
    let no_credentials = no_credentials(&config);
    let shared = Arc::new(Shared::with_store(
        addr,
        config.minor_version,
        config.bookmark_interval,
        store,
        pki,
        no_credentials,
    )?);
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<anyhow::Result<()>>();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let sh = shared.clone();
    let thread = std::thread::Builder::new()
        .name("devcluster".into())
        .spawn(move || run_server(sh, listener, tls, ready_tx, stop_rx))
        .context("spawning the devcluster thread")?;
    ready_rx.recv().context("devcluster thread exited during startup")??;
    let scheme = if config.insecure_http { "http" } else { "https" };
    Ok(DevCluster {
        url: format!("{scheme}://{addr}"),
        shared,
        stop: Some(stop_tx),
        thread: Some(thread),
    })
}

fn no_credentials(config: &Config) -> auth::NoCredentials {
    if config.insecure_http {
        auth::NoCredentials::Superuser
    } else if config.anonymous_auth {
        auth::NoCredentials::Anonymous
    } else {
        auth::NoCredentials::Unauthorized
    }
}

/// The first in-memory resourceVersion: wall-clock microseconds, so a restarted in-memory devcluster never
/// hands out an RV a client still holds from before.
fn rv_seed() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(1)
}

fn run_server(
    sh: Arc<Shared>,
    listener: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
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
        let listener =
            match tokio::net::TcpListener::from_std(listener).and_then(|l| server::listener::incoming(l, tls)) {
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
        let app = app.into_make_service_with_connect_info::<server::listener::Peer>();
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
    /// `https://127.0.0.1:PORT` (`http://` with [`Config::insecure_http`]).
    pub fn url(&self) -> String {
        self.url.clone()
    }

    /// The cluster CA certificate (PEM): what clients must trust.
    pub fn ca_pem(&self) -> String {
        self.shared.auth.pki.ca_pem().to_string()
    }

    /// The bearer token of the `admin` user (groups `system:masters`, `system:authenticated`).
    pub fn admin_token(&self) -> String {
        self.shared.auth.admin_token().to_string()
    }

    /// The admin kubeconfig: this URL, the CA, the admin token, namespace `default`.
    pub fn kubeconfig_yaml(&self) -> String {
        self.kubeconfig_for_token("admin", &self.admin_token())
    }

    pub fn write_kubeconfig(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.kubeconfig_yaml())
    }

    /// A kubeconfig for this cluster whose user `user_name` authenticates with `token`.
    pub fn kubeconfig_for_token(&self, user_name: &str, token: &str) -> String {
        kubeconfig_yaml(&self.url, &self.ca_pem(), user_name, &Credential::Token(token))
    }

    /// A kubeconfig whose user authenticates with a client certificate for `user` in `groups`.
    pub fn kubeconfig_for_client_cert(&self, user: &str, groups: &[&str]) -> anyhow::Result<String> {
        let (cert, key) = self.client_cert(user, groups)?;
        Ok(kubeconfig_yaml(
            &self.url,
            &self.ca_pem(),
            user,
            &Credential::ClientCert { cert: &cert, key: &key },
        ))
    }

    /// A client certificate and key (PEM) signed by the cluster CA: CN `user`, one O per group.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> anyhow::Result<(String, String)> {
        let groups: Vec<String> = groups.iter().map(|g| g.to_string()).collect();
        self.shared.auth.pki.issue_client_cert(user, &groups)
    }

    /// A token for ServiceAccount `namespace/name` from the TokenRequest API (the same code path as
    /// `kubectl create token`), valid for `expiration_seconds` (at least 600).
    pub fn create_token(&self, namespace: &str, name: &str, expiration_seconds: i64) -> anyhow::Result<String> {
        let req = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"expirationSeconds": expiration_seconds}});
        let out =
            auth::tokens::token_request(&self.shared, namespace, name, req).map_err(|e| anyhow::anyhow!("{e}"))?;
        out.pointer("/status/token")
            .and_then(Value::as_str)
            .map(str::to_string)
            .context("the TokenRequest answer has no token")
    }

    /// Sign arbitrary token claims with the cluster's ServiceAccount key, for negative tests (expired
    /// tokens, foreign audiences) that the TokenRequest API refuses to mint.
    pub fn sign_token(&self, claims: &Value) -> String {
        self.shared.auth.signer.sign(claims)
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

/// How a kubeconfig user authenticates.
pub enum Credential<'a> {
    Token(&'a str),
    /// PEM certificate and key.
    ClientCert {
        cert: &'a str,
        key: &'a str,
    },
}

/// A kubeconfig for `url` trusting `ca_pem` (ignored for `http://` URLs), with one user and namespace
/// `default`.
pub fn kubeconfig_yaml(url: &str, ca_pem: &str, user_name: &str, cred: &Credential<'_>) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let ca = if url.starts_with("https://") {
        format!("\n    certificate-authority-data: {}", b64(ca_pem))
    } else {
        String::new()
    };
    let user = match cred {
        Credential::Token(t) => format!("    token: {t}"),
        Credential::ClientCert { cert, key } => format!(
            "    client-certificate-data: {}\n    client-key-data: {}",
            b64(cert),
            b64(key)
        ),
    };
    let user_name = serde_json::to_string(user_name).unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: devcluster
  cluster:
    server: {url}{ca}
contexts:
- name: devcluster
  context:
    cluster: devcluster
    user: {user_name}
    namespace: default
current-context: devcluster
users:
- name: {user_name}
  user:
{user}
"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    fn http(url: &str, token: &str, method: &str, path: &str, body: &str) -> (u16, String) {
        let addr = url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let auth = if token.is_empty() {
            String::new()
        } else {
            format!("Authorization: Bearer {token}\r\n")
        };
        let req = format!(
            "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
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
        let dc = start(Config {
            insecure_http: true,
            ..Config::default()
        })
        .unwrap();
        let url = dc.url();
        assert!(url.starts_with("http://"), "{url}");
        let token = dc.admin_token();
        let (code, body) = http(&url, "", "GET", "/version", "");
        assert_eq!(code, 200, "/version is public");
        assert!(body.contains("\"minor\":\"32\""));
        let (code, _) = http(
            &url,
            &token,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            r#"{"metadata":{"name":"a"}}"#,
        );
        assert_eq!(code, 201);
        let (code, _) = http(&url, "", "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 200, "without credentials the plain HTTP port is the superuser");
        let (code, _) = http(&url, "wrong", "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 401);
        dc.inject_faults(Fault {
            status: 429,
            count: 1,
            ..Default::default()
        });
        let (code, body) = http(&url, &token, "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 429);
        assert!(body.to_ascii_lowercase().contains("retry-after: 1"));
        let (code, _) = http(&url, &token, "GET", "/api/v1/namespaces/default/configmaps/a", "");
        assert_eq!(code, 200);
        let (code, _) = http(&url, "", "GET", "/_devcluster/requests", "");
        assert_eq!(code, 200, "system:unsecured is in system:masters");
        let log = dc.request_log();
        assert_eq!(log.len(), 6);
        assert_eq!((log[1].user.as_str(), log[1].status), ("admin", 201));
        assert_eq!(log[2].user, "system:unsecured");
        assert_eq!((log[3].user.as_str(), log[3].status), ("", 401));
        assert_eq!(log[4].status, 429);
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
