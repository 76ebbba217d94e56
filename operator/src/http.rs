//! The operator's own HTTP endpoints on `--metrics-addr`: `/metrics` (Prometheus text exposition
//! of Capstan's private registry), `/healthz` (always 200 while the process serves) and `/readyz`
//! (200 once every started controller has synced its caches, 503 before).

use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use prometheus::Registry;

use crate::controllers::context::Readiness;
use crate::controllers::Shutdown;

/// What the endpoints read.
#[derive(Clone)]
pub struct HttpState {
    /// The registry `/metrics` encodes.
    pub registry: Registry,
    /// Controllers' readiness for `/readyz` (the one in the shared context).
    pub readiness: Arc<Readiness>,
}

/// The router: `/metrics`, `/healthz`, `/readyz`.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Serves the router on `listener` until `shutdown` fires.
pub async fn serve(listener: tokio::net::TcpListener, state: HttpState, shutdown: Shutdown) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.wait())
        .await
}

async fn metrics(State(state): State<HttpState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        crate::metrics::encode(&state.registry),
    )
        .into_response()
}

async fn readyz(State(state): State<HttpState>) -> Response {
    match state.readiness.check() {
        Ok(()) => (StatusCode::OK, "ready\n".to_string()).into_response(),
        Err(pending) => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for caches: {}\n", pending.join(", ")),
        )
            .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use axum::http::Request;
    use http_body_util::BodyExt;
    use tower::ServiceExt;

    use super::*;
    use crate::metrics::Metrics;

    async fn get_path(state: HttpState, path: &str) -> (StatusCode, String) {
        let resp = router(state)
            .oneshot(Request::builder().uri(path).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = resp.status();
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        (status, String::from_utf8_lossy(&body).into_owned())
    }

    #[tokio::test]
    async fn endpoints() {
        let registry = Registry::new();
        let metrics = Metrics::register(&registry).unwrap();
        metrics.observe_reconcile("repository", "success", None);
        let readiness = Arc::new(Readiness::default());
        readiness.register("repository");
        let state = HttpState {
            registry,
            readiness: Arc::clone(&readiness),
        };
        assert_eq!(get_path(state.clone(), "/healthz").await.0, StatusCode::OK);
        let (status, body) = get_path(state.clone(), "/readyz").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        assert!(body.contains("repository"));
        readiness.mark_ready("repository");
        assert_eq!(get_path(state.clone(), "/readyz").await.0, StatusCode::OK);
        let (status, body) = get_path(state.clone(), "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(body.contains(r#"capstan_reconcile_total{controller="repository",result="success"} 1"#));
        assert_eq!(get_path(state, "/nope").await.0, StatusCode::NOT_FOUND);
    }
}
