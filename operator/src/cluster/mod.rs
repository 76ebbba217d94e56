//! The only I/O against managed clusters: a client per destination, discovery, server-side apply, dry-run,
//! replace, create, delete, get, the live state cache of managed objects and the Cluster probe.
//!
//! No sync decisions live here: what to apply, prune or wait for is planned in `engine`; this module only
//! carries it out and reports typed results. Layout:
//! - [`clients`]: destination (`server` or `name`) → [`ClusterHandle`] (clients, discovery, live cache); the
//!   operator's own cluster needs no Cluster object, remote ones come from a Cluster + Secret (kubeconfig
//!   without exec/auth-provider/file references, or bearer token + CA); the `namespaces` allow-list.
//! - [`discovery`]: GVK → `ApiResource` + scope, cached, refreshed on a miss under a rate limit.
//! - [`openapi`]: the cluster's `/openapi/v3` schemas, cached, for client-side validation before a sync.
//! - [`ops`]: apply / replace / create / delete / get, every call under a deadline, errors categorized and
//!   scrubbed of Secret values.
//! - [`live`]: label-selected watches (`capstan.dev/app-instance`) per GVK in use, indexed by owning
//!   Application, with a synced flag per watch (no "missing" decision before `InitDone`) and change
//!   notifications.
//! - [`probe`]: `GET /version` for the Cluster controller.
//! - [`scope`]: which namespaces this installation watches (`--watch-namespaces`), and the one watch
//!   helper every controller and the live cache open their watches with.
//!
//! Errors never carry credentials: messages are built from our own words plus API `Status` messages, and
//! for Secrets the API's message is withheld altogether (it can echo data values).

pub mod clients;
pub mod discovery;
pub mod live;
pub mod openapi;
pub mod ops;
pub mod probe;
pub mod requests;
pub mod scope;

#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::text::truncate;

pub use clients::{
    destination_target, namespace_allowed, same_server, search_namespaces, ClusterClients, ClusterHandle,
    ClusterTimeouts, DestinationTarget, ResolvedDestination,
};
pub use discovery::{DiscoveryCache, ResolvedKind};
pub use live::{app_instance_id, LiveCache, WatchStatus};
pub use ops::{ApplyOptions, DeleteOptions, DeleteOutcome, Propagation, ReplaceOutcome};
pub use probe::{probe, ServerVersion};
pub use scope::WatchScope;

/// Field manager of every write Capstan makes; the live cache keeps only this manager's `managedFields`.
pub use crate::api::labels::FIELD_MANAGER;

/// The destination URL of the operator's own cluster.
pub const IN_CLUSTER_SERVER: &str = "https://kubernetes.default.svc";
/// The destination name of the operator's own cluster.
pub const IN_CLUSTER_NAME: &str = "in-cluster";

/// Longest API message kept in an error; API messages can be long (whole validation reports).
pub(crate) const MAX_MESSAGE_LEN: usize = 1024;

/// Errors of the cluster layer. `category()` is a stable reason for conditions, events and metric labels.
///
/// Messages never contain credentials or Secret values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The API server could not be reached (connect refused, DNS, TLS handshake, connection reset).
    #[error("cluster unreachable: {0}")]
    Unreachable(String),
    /// The TLS handshake failed: the server's certificate is not signed by the CA we trust (`caCert`), has
    /// expired or names another host. Never retried without verification: fix `caCert` or the server.
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// A deadline passed (connect, read, or the whole call).
    #[error("timed out: {0}")]
    Timeout(String),
    /// 401: the credentials were rejected.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// 403: the credentials lack the permission.
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// 404, or a referenced Cluster/Secret does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// 409: conflict, already exists, or a failed precondition (uid, resourceVersion).
    #[error("conflict: {0}")]
    Conflict(String),
    /// 400/422: the object was rejected as invalid.
    #[error("invalid: {0}")]
    Invalid(String),
    /// 429: throttled by the API server.
    #[error("throttled: {0}")]
    Throttled(String),
    /// 5xx other than a timeout.
    #[error("server error: {0}")]
    ServerError(String),
    /// The cluster does not serve this group/version/kind (yet: a CRD may be on its way).
    #[error("unknown kind: {0}")]
    UnknownKind(String),
    /// Discovery itself failed (not merely a missing kind).
    #[error("discovery failed: {0}")]
    DiscoveryFailed(String),
    /// A Cluster, its Secret or kubeconfig was refused or is malformed (exec plugin, file reference, ...).
    #[error("invalid cluster configuration: {0}")]
    InvalidConfig(String),
    /// The destination namespace is outside the Cluster's `spec.namespaces`.
    #[error("namespace not allowed: {0}")]
    NamespaceNotAllowed(String),
    /// A shared Cluster in the operator namespace that does not list the Application's namespace in
    /// `spec.sourceNamespaces`. The message names the Cluster as the Application named it, nothing more.
    #[error("not permitted: {0}")]
    NotPermitted(String),
    /// Anything else (unexpected response shapes).
    #[error("internal error: {0}")]
    Internal(String),
}

impl ClusterError {
    /// Stable reason string for conditions, events and metric labels.
    pub fn category(&self) -> &'static str {
        match self {
            ClusterError::Unreachable(_) => "Unreachable",
            ClusterError::Tls(_) => "TLSHandshakeFailed",
            ClusterError::Timeout(_) => "Timeout",
            ClusterError::Unauthorized(_) => "Unauthorized",
            ClusterError::Forbidden(_) => "Forbidden",
            ClusterError::NotFound(_) => "NotFound",
            ClusterError::Conflict(_) => "Conflict",
            ClusterError::Invalid(_) => "Invalid",
            ClusterError::Throttled(_) => "Throttled",
            ClusterError::ServerError(_) => "ServerError",
            ClusterError::UnknownKind(_) => "UnknownKind",
            ClusterError::DiscoveryFailed(_) => "DiscoveryFailed",
            ClusterError::InvalidConfig(_) => "InvalidConfig",
            ClusterError::NamespaceNotAllowed(_) => "NamespaceNotAllowed",
            ClusterError::NotPermitted(_) => "NotPermitted",
            ClusterError::Internal(_) => "Internal",
        }
    }

    /// Whether retrying later, unchanged, can help (network and server trouble, conflicts, a kind that may
    /// appear) as opposed to needing a fix in Git or in the Cluster/Secret.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            ClusterError::Unreachable(_)
                | ClusterError::Timeout(_)
                | ClusterError::Conflict(_)
                | ClusterError::Throttled(_)
                | ClusterError::ServerError(_)
                | ClusterError::UnknownKind(_)
                | ClusterError::DiscoveryFailed(_)
                | ClusterError::Internal(_)
        )
    }

    /// Maps a kube error. `context` says what was being done ("apply apps/Deployment shop/web"); when
    /// `redact` is set (Secrets), the API's own message is replaced by its reason and code, because
    /// validation messages can quote the offending data value.
    pub fn from_kube(err: kube::Error, context: &str, redact: bool) -> ClusterError {
        match err {
            kube::Error::Api(status) => from_status(&status, context, redact),
            kube::Error::Discovery(e) => from_discovery(e, context),
            kube::Error::Auth(_) => ClusterError::Unauthorized(format!("{context}: client authentication failed")),
            kube::Error::HyperError(e) => transport(&e, context),
            kube::Error::Service(e) => transport(e.as_ref(), context),
            kube::Error::SerdeError(_) => ClusterError::Internal(format!("{context}: unexpected response body")),
            kube::Error::RustlsTls(_) | kube::Error::TlsRequired => {
                ClusterError::InvalidConfig(format!("{context}: TLS setup failed (check caCert)"))
            }
            other => ClusterError::Internal(format!("{context}: {}", truncate(&other.to_string(), MAX_MESSAGE_LEN))),
        }
    }
}

/// Maps an API `Status` by code (the reason only refines it).
fn from_status(status: &kube::core::Status, context: &str, redact: bool) -> ClusterError {
    let detail = if redact {
        format!(
            "{context}: {} ({}); message withheld for a Secret",
            status.reason, status.code
        )
    } else {
        format!("{context}: {}", truncate(&status.message, MAX_MESSAGE_LEN))
    };
    match status.code {
        401 => ClusterError::Unauthorized(detail),
        403 => ClusterError::Forbidden(detail),
        404 => ClusterError::NotFound(detail),
        409 => ClusterError::Conflict(detail),
        400 | 422 => ClusterError::Invalid(detail),
        429 => ClusterError::Throttled(detail),
        408 | 504 => ClusterError::Timeout(detail),
        _ if status.reason == "Timeout" => ClusterError::Timeout(detail),
        _ => ClusterError::ServerError(detail),
    }
}

fn from_discovery(err: kube::error::DiscoveryError, context: &str) -> ClusterError {
    use kube::error::DiscoveryError as D;
    match err {
        D::MissingKind(_) | D::MissingApiGroup(_) | D::MissingResource(_) | D::EmptyApiGroup(_) => {
            ClusterError::UnknownKind(format!("{context}: {err}"))
        }
        D::InvalidGroupVersion(_) => ClusterError::Invalid(format!("{context}: {err}")),
    }
}

/// Transport failures: a rustls error anywhere in the source chain is `Tls` (an unknown CA must read as a
/// TLS problem, not as an unreachable server), a timeout is a `Timeout`, the rest `Unreachable`. The text is
/// the innermost source, which names the failure (refused, reset, unknown issuer) and not the request.
fn transport(err: &(dyn std::error::Error + 'static), context: &str) -> ClusterError {
    let mut innermost: &(dyn std::error::Error + 'static) = err;
    let mut timed_out = false;
    let mut tls: Option<String> = None;
    let mut cur = Some(err);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            timed_out |= io.kind() == std::io::ErrorKind::TimedOut;
        }
        if let Some(inner) = rustls_error(e) {
            tls.get_or_insert_with(|| inner.to_string());
        }
        timed_out |= e.to_string().contains("timed out");
        innermost = e;
        cur = e.source();
    }
    if let Some(why) = tls {
        return ClusterError::Tls(format!("{context}: {}", truncate(&why, MAX_MESSAGE_LEN)));
    }
    let detail = format!("{context}: {}", truncate(&innermost.to_string(), MAX_MESSAGE_LEN));
    if timed_out {
        ClusterError::Timeout(detail)
    } else {
        ClusterError::Unreachable(detail)
    }
}

/// The rustls error `e` is or wraps. An io::Error's `source()` skips the error it wraps, and tokio-rustls puts
/// the rustls error there (sometimes inside another io::Error), so the wrapped errors are unpacked here.
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let inner: &(dyn std::error::Error + 'static) = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    rustls_error(inner)
}

/// Runs `fut` under `limit`, turning expiry into [`ClusterError::Timeout`]: every call to a cluster is bounded
/// as a whole, on top of the client's connect/read timeouts.
pub(crate) async fn with_deadline<T>(
    limit: Duration,
    context: &str,
    fut: impl std::future::Future<Output = Result<T, ClusterError>>,
) -> Result<T, ClusterError> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(ClusterError::Timeout(format!(
            "{context}: no answer within {}s",
            limit.as_secs()
        ))),
    }
}
