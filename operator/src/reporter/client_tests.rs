//! The client against small axum receivers on loopback: what goes on the wire (gzip, HMAC, bearer,
//! idempotency key), redirects (same host followed, another host refused without sending anything
//! there), and bounded answers.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;

use super::*;

type Seen = Arc<Mutex<Vec<(String, HeaderMap, Vec<u8>)>>>;

async fn serve(ip: &str, router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind(format!("{ip}:0")).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

fn recording(seen: &Seen) -> Router {
    let seen = Arc::clone(seen);
    Router::new().fallback(move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
        let seen = Arc::clone(&seen);
        async move {
            seen.lock().unwrap().push((uri.to_string(), headers, body.to_vec()));
            (
                StatusCode::OK,
                [("content-type", "application/json")],
                r#"{"resync":null}"#,
            )
        }
    })
}

fn client(addr: SocketAddr, hmac: Option<&str>) -> Arc<Client> {
    let settings = Settings::parse(&BTreeMap::from([
        ("url".to_string(), format!("http://{addr}/saas")),
        ("agentId".to_string(), "agent-1".to_string()),
    ]))
    .unwrap();
    let mut data = BTreeMap::from([("token".to_string(), b"tok-123".to_vec())]);
    if let Some(k) = hmac {
        data.insert("hmacKey".into(), k.as_bytes().to_vec());
    }
    Arc::new(Client::new(&settings, &Credentials::parse(&data).unwrap()).unwrap())
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::task::spawn_blocking(f).await.unwrap()
}

#[tokio::test]
async fn a_post_is_gzip_json_signed_and_authorized() {
    let seen: Seen = Arc::default();
    let addr = serve("127.0.0.1", recording(&seen)).await;
    let c = client(addr, Some("hmac-key"));
    let answer = blocking(move || c.post("/reports", br#"{"epoch":1}"#, Some("1-1-a")))
        .await
        .unwrap();
    assert_eq!(answer.status, 200);
    assert_eq!(answer.body, br#"{"resync":null}"#);
    let (uri, headers, body) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(uri, "/saas/v1/agents/agent-1/reports");
    let h = |n: &str| headers.get(n).unwrap().to_str().unwrap().to_string();
    assert_eq!(h("authorization"), "Bearer tok-123");
    assert_eq!(h("content-encoding"), "gzip");
    assert_eq!(h("content-type"), "application/json");
    assert_eq!(h("idempotency-key"), "1-1-a");
    assert!(h("user-agent").starts_with("capstan-reporter/"));
    assert_eq!(
        h("x-capstan-signature"),
        sign(b"hmac-key", &body),
        "signed over the compressed bytes"
    );
    let mut json = String::new();
    flate2::read::GzDecoder::new(&body[..])
        .read_to_string(&mut json)
        .unwrap();
    assert_eq!(json, r#"{"epoch":1}"#);
}

#[tokio::test]
async fn a_get_without_body_signs_the_empty_string() {
    let seen: Seen = Arc::default();
    let addr = serve("127.0.0.1", recording(&seen)).await;
    let c = client(addr, Some("k"));
    blocking(move || c.get("/tasks?wait=30", REQUEST_TIMEOUT))
        .await
        .unwrap();
    let (uri, headers, _) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(uri, "/saas/v1/agents/agent-1/tasks?wait=30");
    assert_eq!(
        headers.get("x-capstan-signature").unwrap().to_str().unwrap(),
        sign(b"k", b"")
    );
    assert!(headers.get("content-encoding").is_none());
}

#[tokio::test]
async fn a_redirect_to_another_host_is_refused_and_that_host_gets_nothing() {
    let elsewhere: Seen = Arc::default();
    let other = serve("127.0.0.2", recording(&elsewhere)).await;
    let target = format!("http://{other}/steal");
    let redirecting = Router::new().fallback(move || {
        let target = target.clone();
        async move { (StatusCode::TEMPORARY_REDIRECT, [("location", target)]).into_response() }
    });
    let addr = serve("127.0.0.1", redirecting).await;
    let c = client(addr, None);
    let err = blocking(move || c.post("/reports", b"{}", None)).await.unwrap_err();
    assert_eq!(err, TransportError::CrossHostRedirect(other.to_string()));
    assert!(err.to_string().contains("refused"), "{err}");
    assert!(elsewhere.lock().unwrap().is_empty(), "nothing may reach the other host");
}

#[tokio::test]
async fn a_same_host_redirect_is_followed_with_the_token() {
    let seen: Seen = Arc::default();
    let record = recording(&seen);
    let router = Router::new()
        .route(
            "/saas/v1/agents/agent-1/heartbeat",
            post(|| async { (StatusCode::PERMANENT_REDIRECT, [("location", "/moved")]).into_response() }),
        )
        .merge(record);
    let addr = serve("127.0.0.1", router).await;
    let c = client(addr, None);
    let answer = blocking(move || c.post("/heartbeat", b"{}", None)).await.unwrap();
    assert_eq!(answer.status, 200);
    let (uri, headers, body) = seen.lock().unwrap().pop().unwrap();
    assert_eq!(uri, "/moved");
    assert_eq!(headers.get("authorization").unwrap(), "Bearer tok-123");
    assert!(!body.is_empty(), "the body is sent again on 308");
}

#[tokio::test]
async fn a_huge_answer_is_cut_off() {
    let router = Router::new().fallback(get(|| async { "x".repeat(10 << 20) }).post(|| async { "x".repeat(10 << 20) }));
    let addr = serve("127.0.0.1", router).await;
    let c = client(addr, None);
    let err = blocking(move || c.post("/reports", b"{}", None)).await.unwrap_err();
    assert_eq!(err, TransportError::TooLarge);
}

#[tokio::test]
async fn a_refused_connection_is_an_error_not_a_panic() {
    let port = crate::source::testsupport::free_port();
    let c = client(SocketAddr::from(([127, 0, 0, 1], port)), None);
    let err = blocking(move || c.post("/reports", b"{}", None)).await.unwrap_err();
    assert_eq!(err.reason(), "connection", "{err}");
}
