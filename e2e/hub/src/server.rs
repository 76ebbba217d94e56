//! The listener: plain TCP or TLS (rustls with the ring provider), one hyper HTTP/1.1 connection per task,
//! and the routing of each request to the agent endpoints ([`crate::agent`]), the operator surface
//! ([`crate::ops`]) or the page ([`crate::page`]).

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use anyhow::Context as _;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use crate::faults::{Endpoint, Faults};
use crate::http::{Abort, Body, ConnCtl};
use crate::store::{self, Store};

/// How the hub runs (the `capstan-hub` flags).
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub db: PathBuf,
    /// PEM certificate chain and private key: serve HTTPS.
    pub tls: Option<(PathBuf, PathBuf)>,
    pub tokens: Vec<String>,
    pub hmac_key: Option<Vec<u8>>,
    /// A task without a result is delivered again after this long (the protocol says 5 minutes).
    pub task_redelivery: Duration,
    /// The request log keeps this many requests.
    pub request_log_limit: u64,
}

/// What every handler shares.
pub struct Hub {
    pub store: Store,
    pub tokens: RwLock<BTreeSet<String>>,
    pub hmac_key: Option<Vec<u8>>,
    pub faults: Mutex<Faults>,
    /// Woken on every enqueued task, so long polls answer at once.
    pub tasks_changed: tokio::sync::Notify,
    pub task_redelivery: Duration,
    /// Long polls waiting now, by agent.
    pub polls: Mutex<HashMap<String, usize>>,
}

impl Hub {
    /// Counts a long poll of `agent` as waiting until the guard drops.
    pub fn polling(&self, agent: &str) -> PollGuard<'_> {
        *self
            .polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(agent.to_owned())
            .or_default() += 1;
        PollGuard {
            hub: self,
            agent: agent.to_owned(),
        }
    }

    /// How many long polls of `agent` are waiting.
    pub fn polls_of(&self, agent: &str) -> usize {
        self.polls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(agent)
            .copied()
            .unwrap_or(0)
    }

    pub fn token_accepted(&self, token: Option<&str>) -> bool {
        let tokens = self.tokens.read().unwrap_or_else(|p| p.into_inner());
        token.is_some_and(|t| tokens.contains(t))
    }
}

/// A waiting long poll; see [`Hub::polling`].
pub struct PollGuard<'a> {
    hub: &'a Hub,
    agent: String,
}

impl Drop for PollGuard<'_> {
    fn drop(&mut self) {
        let mut polls = self.hub.polls.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = polls.get_mut(&self.agent) {
            *n = n.saturating_sub(1);
        }
    }
}

/// Serves until `shutdown` completes; `ready` is called with the base URL once connections are accepted.
pub async fn serve(config: Config, shutdown: impl Future<Output = ()>, ready: impl FnOnce(&str)) -> anyhow::Result<()> {
    let store = Store::open(&config.db).with_context(|| format!("opening {}", config.db.display()))?;
    let flags = config.tokens.clone();
    let tokens = store.call(move |conn| store::load_tokens(conn, &flags)).await?;
    let tls = match &config.tls {
        Some((cert, key)) => Some(tls_acceptor(cert, key)?),
        None => None,
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("binding {}", config.listen))?;
    let addr = listener.local_addr()?;
    let hub = Arc::new(Hub {
        store,
        tokens: RwLock::new(tokens),
        hmac_key: config.hmac_key.clone(),
        faults: Mutex::new(Faults::default()),
        tasks_changed: tokio::sync::Notify::new(),
        task_redelivery: config.task_redelivery,
        polls: Mutex::new(HashMap::new()),
    });
    let pruner = tokio::spawn(prune_request_log(hub.store.clone(), config.request_log_limit));
    ready(&format!("{}://{addr}", if tls.is_some() { "https" } else { "http" }));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    tokio::spawn(connection(Arc::clone(&hub), tls.clone(), stream));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    pruner.abort();
    Ok(())
}

async fn prune_request_log(store: Store, limit: u64) {
    let mut every = tokio::time::interval(Duration::from_secs(60));
    loop {
        every.tick().await;
        if let Err(e) = store.call(move |conn| store::prune_requests(conn, limit)).await {
            tracing::warn!("pruning the request log failed: {e}");
        }
    }
}

fn tls_acceptor(cert: &Path, key: &Path) -> anyhow::Result<TlsAcceptor> {
    use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("reading the certificate {}", cert.display()))?;
    let key = PrivateKeyDer::from_pem_file(key).with_context(|| format!("reading the key {}", key.display()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .context("the certificate and key do not make a TLS configuration")?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(TlsAcceptor::from(Arc::new(config)))
}

async fn connection(hub: Arc<Hub>, tls: Option<TlsAcceptor>, stream: tokio::net::TcpStream) {
    let _ = stream.set_nodelay(true);
    let ctl = Arc::new(ConnCtl::new(&stream));
    let service = service_fn(move |req| route(Arc::clone(&hub), Arc::clone(&ctl), req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(Duration::from_secs(30));
    let served = match tls {
        Some(acceptor) => match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
            Ok(Ok(tls_stream)) => builder.serve_connection(TokioIo::new(tls_stream), service).await,
            Ok(Err(e)) => return tracing::debug!("TLS handshake failed: {e}"),
            Err(_) => return tracing::debug!("TLS handshake timed out"),
        },
        None => builder.serve_connection(TokioIo::new(stream), service).await,
    };
    if let Err(e) = served {
        tracing::debug!("connection ended: {e}");
    }
}

/// An agent endpoint: `/v1/agents/{agentId}/{reports|digest|heartbeat|tasks|tasks/{id}/result}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRoute {
    pub agent: String,
    pub endpoint: Endpoint,
    pub task_id: Option<String>,
}

/// Parses an agent endpoint path; `None` for anything else.
pub fn agent_route(path: &str) -> Option<AgentRoute> {
    let rest = path.strip_prefix("/v1/agents/")?;
    let segments: Vec<&str> = rest.split('/').collect();
    let (agent, tail) = segments.split_first()?;
    if !valid_agent_id(agent) {
        return None;
    }
    let (endpoint, task_id) = match tail {
        ["reports"] => (Endpoint::Reports, None),
        ["digest"] => (Endpoint::Digest, None),
        ["heartbeat"] => (Endpoint::Heartbeat, None),
        ["tasks"] => (Endpoint::Tasks, None),
        ["tasks", id, "result"] if !id.is_empty() => (Endpoint::Result, Some(id.to_string())),
        _ => return None,
    };
    Some(AgentRoute {
        agent: agent.to_string(),
        endpoint,
        task_id,
    })
}

/// Agent ids are what a ConfigMap value and a URL path segment both carry without escaping.
pub fn valid_agent_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 128 && id.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

async fn route(hub: Arc<Hub>, ctl: Arc<ConnCtl>, req: Request<Incoming>) -> Result<Response<Body>, Abort> {
    let path = req.uri().path().to_owned();
    if let Some(route) = agent_route(&path) {
        return crate::agent::handle(&hub, &ctl, req, route).await;
    }
    if path == "/" || path == "/healthz" || path.starts_with("/api/") || path.starts_with("/_hub/") {
        return Ok(crate::ops::handle(&hub, req).await);
    }
    Ok(crate::agent::unknown(&hub, req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_routes() {
        let r = agent_route("/v1/agents/prod-eu-1/tasks/t-3/result").unwrap();
        assert_eq!(
            (r.agent.as_str(), r.endpoint, r.task_id.as_deref()),
            ("prod-eu-1", Endpoint::Result, Some("t-3"))
        );
        assert_eq!(agent_route("/v1/agents/a/reports").unwrap().endpoint, Endpoint::Reports);
        assert!(agent_route("/v1/agents/a/reports/x").is_none());
        assert!(agent_route("/v1/agents//reports").is_none());
        assert!(agent_route("/v1/agents/a%2Fb/reports").is_none());
        assert!(agent_route("/v2/agents/a/reports").is_none());
    }
}
