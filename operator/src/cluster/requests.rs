//! Counting every request a Kubernetes client makes, by verb and response code
//! (`capstan_kube_requests_total{verb,code}`): a tower layer for kube's `ClientBuilder`, used for the
//! operator's own client and for every cluster handle (applies, watches and discovery included).
//! The same layer carries the [`WriteFence`]: while it is closed (a replica that does not hold the
//! leader Lease), every write fails before it leaves the process.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use axum::http::{Method, Request, Response};
use prometheus::IntCounterVec;
use tower::{Layer, Service};

/// Whether this process may write to Kubernetes: open unless leader election says otherwise.
/// Shared by every client the process builds, so closing it stops all writes at once, including
/// those of a reconcile already under way. Lease writes (the election itself) and access reviews
/// (questions, not writes) pass regardless. The election opens it only until the end of its term
/// ([`open_until`](Self::open_until)), so it closes on time even if the Lease loop hangs.
#[derive(Clone, Debug)]
pub struct WriteFence(Arc<Mutex<Opening>>);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Opening {
    Open,
    Closed,
    Until(Instant),
}

impl Default for WriteFence {
    fn default() -> Self {
        WriteFence(Arc::new(Mutex::new(Opening::Open)))
    }
}

impl WriteFence {
    /// A fence that lets writes through until [`set_open`](Self::set_open)`(false)`.
    pub fn open() -> Self {
        WriteFence::default()
    }

    /// A fence that refuses writes until opened (a replica that has not won the election yet).
    pub fn closed() -> Self {
        WriteFence(Arc::new(Mutex::new(Opening::Closed)))
    }

    fn set(&self, opening: Opening) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = opening;
    }

    /// Opens or closes the fence.
    pub fn set_open(&self, open: bool) {
        self.set(if open { Opening::Open } else { Opening::Closed });
    }

    /// Opens the fence until `until` (closed from then on), or closes it (`None`).
    pub fn open_until(&self, until: Option<Instant>) {
        self.set(until.map_or(Opening::Closed, Opening::Until));
    }

    /// Whether writes pass.
    pub fn is_open(&self) -> bool {
        match *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Opening::Open => true,
            Opening::Closed => false,
            Opening::Until(t) => Instant::now() < t,
        }
    }
}

/// Whether a request is a write a fence or gate governs: Lease writes (the election itself) and
/// access reviews (questions, not writes) never are.
fn fenced_write(method: &Method, path: &str) -> bool {
    let write = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let exempt = path.starts_with("/apis/coordination.k8s.io/") || path.starts_with("/apis/authorization.k8s.io/");
    write && !exempt
}

/// Whose writes a client makes, for a [`WriteGate`]: the operator's own (Repositories, Clusters,
/// ApplicationSets...: the [`WriteFence`] alone decides), the Application controller's on the
/// operator's cluster (Application status, finalizers, events), or any write into one destination
/// cluster (`in-cluster` or the Cluster's `namespace/name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WriteScope {
    Operator,
    Applications,
    Cluster(String),
}

/// Decides, per write, for clients whose scope is not [`WriteScope::Operator`]: with sharding, a
/// write passes only while this replica holds the shard its Application or cluster belongs to.
pub trait WriteGate: Send + Sync + std::fmt::Debug {
    /// Whether a write on `path` by a client of `scope` may pass now.
    fn allows(&self, scope: &WriteScope, path: &str) -> bool;
}

/// The error of a write held back by a closed [`WriteFence`] or a [`WriteGate`].
#[derive(Debug, thiserror::Error)]
#[error("not the leader: writes are fenced off until this replica holds the Lease they belong to (the leader's or the shard's)")]
pub struct NotLeader;

/// A tower layer counting Kubernetes API requests by verb and response code, and holding back
/// writes while its [`WriteFence`] is closed.
#[derive(Clone, Debug)]
pub struct KubeRequestLayer {
    counter: IntCounterVec,
    fence: WriteFence,
    gate: Option<Arc<dyn WriteGate>>,
    scope: WriteScope,
}

impl KubeRequestLayer {
    /// Counts into `counter` (labels `verb`, `code`); writes always pass.
    pub fn new(counter: IntCounterVec) -> Self {
        KubeRequestLayer {
            counter,
            fence: WriteFence::open(),
            gate: None,
            scope: WriteScope::Operator,
        }
    }

    /// The same layer, holding writes back while `fence` is closed.
    pub fn with_fence(mut self, fence: WriteFence) -> Self {
        self.fence = fence;
        self
    }

    /// The same layer, asking `gate` about the writes of every scope but the operator's.
    pub fn with_gate(mut self, gate: Arc<dyn WriteGate>) -> Self {
        self.gate = Some(gate);
        self
    }

    /// The same layer for clients of `scope`.
    pub fn scoped(&self, scope: WriteScope) -> Self {
        KubeRequestLayer { scope, ..self.clone() }
    }

    /// Whether a request with `method` on `path` is held back.
    fn holds(&self, method: &Method, path: &str) -> bool {
        if !fenced_write(method, path) {
            return false;
        }
        match &self.gate {
            Some(gate) if self.scope != WriteScope::Operator => !gate.allows(&self.scope, path),
            _ => !self.fence.is_open(),
        }
    }
}

impl<S> Layer<S> for KubeRequestLayer {
    type Service = KubeRequestService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        KubeRequestService {
            inner,
            layer: self.clone(),
        }
    }
}

/// The service of [`KubeRequestLayer`].
#[derive(Clone, Debug)]
pub struct KubeRequestService<S> {
    inner: S,
    layer: KubeRequestLayer,
}

type BoxedFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<Request<B>> for KubeRequestService<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: From<NotLeader> + Send + 'static,
    RB: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxedFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let verb = kube_verb(req.method(), req.uri().path(), req.uri().query().unwrap_or_default());
        let counter = self.layer.counter.clone();
        if self.layer.holds(req.method(), req.uri().path()) {
            counter.with_label_values(&[verb, "fenced"]).inc();
            return Box::pin(std::future::ready(Err(NotLeader.into())));
        }
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(resp) => resp.status().as_u16().to_string(),
                Err(_) => "error".to_string(),
            };
            counter.with_label_values(&[verb, &code]).inc();
            result
        })
    }
}

/// The Kubernetes verb of a request (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`,
/// `deletecollection`), from its method and whether the path names one object or a collection.
pub fn kube_verb(method: &Method, path: &str, query: &str) -> &'static str {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest: &[&str] = match segments.first() {
        Some(&"api") => segments.get(2..).unwrap_or_default(),
        Some(&"apis") => segments.get(3..).unwrap_or_default(),
        _ => &[],
    };
    let rest = match rest {
        ["namespaces", _, tail @ ..] if !tail.is_empty() => tail,
        other => other,
    };
    let named = rest.len() >= 2;
    let watch = query.split('&').any(|kv| kv == "watch=true" || kv == "watch=1");
    match *method {
        Method::GET if watch => "watch",
        Method::GET if named || rest.is_empty() => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_fence_holds_writes_but_not_reads_leases_or_reviews() {
        let closed = WriteFence::closed();
        let counter = IntCounterVec::new(prometheus::Opts::new("t", "t"), &["verb", "code"]).unwrap();
        let fence = KubeRequestLayer::new(counter).with_fence(closed.clone());
        let cm = "/api/v1/namespaces/ns/configmaps/c";
        assert!(fence.holds(&Method::PATCH, cm));
        assert!(fence.holds(&Method::POST, "/apis/batch/v1/namespaces/ns/jobs"));
        assert!(fence.holds(&Method::DELETE, cm));
        assert!(!fence.holds(&Method::GET, cm));
        assert!(!fence.holds(&Method::PUT, "/apis/coordination.k8s.io/v1/namespaces/ns/leases/l"));
        assert!(!fence.holds(&Method::POST, "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"));
        closed.set_open(true);
        assert!(!fence.holds(&Method::PATCH, cm));
    }

    #[test]
    fn a_fence_opened_until_the_end_of_a_term_closes_at_that_moment_by_itself() {
        let fence = WriteFence::closed();
        let now = Instant::now();
        fence.open_until(Some(now + std::time::Duration::from_secs(3600)));
        assert!(fence.is_open());
        // The term ended and nobody said so (the Lease loop hangs in a request): closed anyway.
        fence.open_until(now.checked_sub(std::time::Duration::from_millis(1)));
        assert!(!fence.is_open());
        fence.open_until(None);
        assert!(!fence.is_open());
    }

    #[derive(Debug)]
    struct OnlyCluster(&'static str);

    impl WriteGate for OnlyCluster {
        fn allows(&self, scope: &WriteScope, _path: &str) -> bool {
            *scope == WriteScope::Cluster(self.0.into())
        }
    }

    #[test]
    fn a_gate_decides_for_scoped_clients_and_the_fence_for_the_operators() {
        let counter = IntCounterVec::new(prometheus::Opts::new("t", "t"), &["verb", "code"]).unwrap();
        let fence = WriteFence::closed();
        let layer = KubeRequestLayer::new(counter)
            .with_fence(fence.clone())
            .with_gate(Arc::new(OnlyCluster("ns/a")));
        let cm = "/api/v1/namespaces/ns/configmaps/c";
        assert!(!layer
            .scoped(WriteScope::Cluster("ns/a".into()))
            .holds(&Method::PATCH, cm));
        assert!(layer
            .scoped(WriteScope::Cluster("ns/b".into()))
            .holds(&Method::PATCH, cm));
        assert!(layer.scoped(WriteScope::Applications).holds(&Method::PATCH, cm));
        assert!(!layer.scoped(WriteScope::Cluster("ns/b".into())).holds(&Method::GET, cm));
        assert!(
            layer.holds(&Method::PATCH, cm),
            "the operator's writes follow the fence"
        );
        fence.set_open(true);
        assert!(!layer.holds(&Method::PATCH, cm));
        assert!(layer
            .scoped(WriteScope::Cluster("ns/b".into()))
            .holds(&Method::PATCH, cm));
    }

    #[test]
    fn verbs_from_requests() {
        let v = |m: Method, p: &str, q: &str| kube_verb(&m, p, q);
        assert_eq!(v(Method::GET, "/api/v1/namespaces/ns/secrets/s", ""), "get");
        assert_eq!(v(Method::GET, "/api/v1/namespaces/ns/secrets", ""), "list");
        assert_eq!(v(Method::GET, "/api/v1/secrets", "limit=500"), "list");
        assert_eq!(v(Method::GET, "/api/v1/namespaces/ns", ""), "get");
        assert_eq!(v(Method::GET, "/api/v1/namespaces", ""), "list");
        assert_eq!(
            v(
                Method::GET,
                "/apis/capstan.dev/v1alpha1/repositories",
                "watch=true&timeoutSeconds=290"
            ),
            "watch"
        );
        assert_eq!(
            v(
                Method::PATCH,
                "/apis/capstan.dev/v1alpha1/namespaces/ns/repositories/r/status",
                ""
            ),
            "patch"
        );
        assert_eq!(
            v(Method::POST, "/apis/events.k8s.io/v1/namespaces/ns/events", ""),
            "create"
        );
        assert_eq!(v(Method::PUT, "/api/v1/namespaces/ns/configmaps/c", ""), "update");
        assert_eq!(v(Method::DELETE, "/api/v1/namespaces/ns/configmaps/c", ""), "delete");
        assert_eq!(
            v(Method::DELETE, "/api/v1/namespaces/ns/configmaps", ""),
            "deletecollection"
        );
        assert_eq!(v(Method::GET, "/version", ""), "get");
    }
}
