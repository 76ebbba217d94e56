//! Counting every request a Kubernetes client makes, by verb and response code
//! (`capstan_kube_requests_total{verb,code}`): a tower layer for kube's `ClientBuilder`, used for the
//! operator's own client and for every cluster handle (applies, watches and discovery included).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use axum::http::{Method, Request, Response};
use prometheus::IntCounterVec;
use tower::{Layer, Service};

/// A tower layer counting Kubernetes API requests by verb and response code.
#[derive(Clone, Debug)]
pub struct KubeRequestLayer {
    counter: IntCounterVec,
}

impl KubeRequestLayer {
    /// Counts into `counter` (labels `verb`, `code`).
    pub fn new(counter: IntCounterVec) -> Self {
        KubeRequestLayer { counter }
    }
}

impl<S> Layer<S> for KubeRequestLayer {
    type Service = KubeRequestService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        KubeRequestService {
            inner,
            counter: self.counter.clone(),
        }
    }
}

/// The service of [`KubeRequestLayer`].
#[derive(Clone, Debug)]
pub struct KubeRequestService<S> {
    inner: S,
    counter: IntCounterVec,
}

type BoxedFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S, B, RB> Service<Request<B>> for KubeRequestService<S>
where
    S: Service<Request<B>, Response = Response<RB>>,
    S::Future: Send + 'static,
    S::Error: 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxedFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let verb = kube_verb(req.method(), req.uri().path(), req.uri().query().unwrap_or_default());
        let counter = self.counter.clone();
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
