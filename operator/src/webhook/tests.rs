//! Webhook parsing, authentication and the handler's answers, with trimmed real push payloads
//! (GitHub, GitLab and Gitea documentation samples).

use std::collections::HashMap;
use std::sync::Mutex;

use axum::http::HeaderValue;
use proptest::prelude::*;
use tower::ServiceExt;

use super::*;

const GITHUB: &str = include_str!("testdata/github-push.json");
const GITLAB: &str = include_str!("testdata/gitlab-push.json");
const GITEA: &str = include_str!("testdata/gitea-push.json");

struct FakeSecrets(HashMap<&'static str, Vec<u8>>);

impl WebhookSecrets for FakeSecrets {
    fn secret(&self, provider: Provider) -> Option<Vec<u8>> {
        self.0.get(provider.key()).cloned()
    }
}

#[derive(Default)]
struct FakeTarget {
    calls: Mutex<Vec<Vec<String>>>,
    known: Vec<String>,
}

impl RefreshTarget for FakeTarget {
    fn refresh(&self, url_keys: &[String]) -> usize {
        self.calls.lock().unwrap().push(url_keys.to_vec());
        self.known.iter().filter(|k| url_keys.contains(k)).count()
    }
}

fn hmac_hex(secret: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
    mac.update(body);
    hex::encode(mac.finalize().into_bytes())
}

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

fn keys(push: &Push) -> Vec<String> {
    let mut k: Vec<String> = push.urls.iter().filter_map(|u| url_key(u)).collect();
    k.sort();
    k.dedup();
    k
}

#[test]
fn providers_are_detected_from_headers() {
    assert_eq!(
        Provider::detect(&headers(&[("x-github-event", "push")])),
        Provider::GitHub
    );
    assert_eq!(
        Provider::detect(&headers(&[("x-gitlab-event", "Push Hook")])),
        Provider::GitLab
    );
    // Gitea sends GitHub's header as well; its own wins.
    assert_eq!(
        Provider::detect(&headers(&[("x-github-event", "push"), ("x-gitea-event", "push")])),
        Provider::Gitea
    );
    assert_eq!(Provider::detect(&HeaderMap::new()), Provider::Generic);
}

#[test]
fn sample_payloads_parse_to_one_repository_key() {
    let gh = parse_push(Provider::GitHub, GITHUB.as_bytes()).unwrap();
    assert_eq!(gh.ref_.as_deref(), Some("refs/heads/main"));
    assert_eq!(gh.urls.len(), 4);
    assert_eq!(keys(&gh), vec!["github.com/octocat/hello-world"]);

    let gl = parse_push(Provider::GitLab, GITLAB.as_bytes()).unwrap();
    assert_eq!(gl.ref_.as_deref(), Some("refs/heads/master"));
    assert_eq!(keys(&gl), vec!["example.com/mike/diaspora"]);

    let gt = parse_push(Provider::Gitea, GITEA.as_bytes()).unwrap();
    assert_eq!(gt.ref_.as_deref(), Some("refs/heads/develop"));
    assert_eq!(
        keys(&gt),
        vec!["localhost:2222/gitea/webhooks", "localhost:3000/gitea/webhooks"]
    );

    let generic = parse_push(
        Provider::Generic,
        br#"{"repoURL": "git@github.com:Octocat/Hello-World.git", "ref": "refs/heads/main"}"#,
    )
    .unwrap();
    assert_eq!(keys(&generic), keys(&gh));
}

#[test]
fn wrong_types_and_garbage_are_errors_not_panics() {
    let cases: [(Provider, &str); 14] = [
        (Provider::GitHub, r#"{"repository": {"clone_url": ["x"]}}"#),
        (Provider::GitHub, r#"{"repository": "boom"}"#),
        (Provider::GitHub, r#"{"repository": null}"#),
        (Provider::GitHub, r#"{"ref": 5, "repository": {}}"#),
        (Provider::GitHub, r#"[]"#),
        (Provider::GitHub, r#"{"repository": {"html_url": {"href": []}}}"#),
        (Provider::GitLab, r#"{"project": {"git_http_url": 1}}"#),
        (Provider::GitLab, r#"{"project": []}"#),
        (Provider::Gitea, r#"{"repository": {"ssh_url": true}}"#),
        (Provider::Gitea, "\u{0}\u{1}"),
        (Provider::Generic, r#"{"repoURL": ["x"]}"#),
        (Provider::Generic, r#"{"ref": "refs/heads/main"}"#),
        (Provider::Generic, "not json"),
        (Provider::Generic, r#"{"repoURL": "x", "ref": {}}"#),
    ];
    for (provider, body) in cases {
        let err = parse_push(provider, body.as_bytes()).unwrap_err();
        assert!(err.starts_with("malformed"), "{provider:?} {body}: {err}");
    }
}

#[test]
fn hmac_and_token_verification() {
    let body = GITHUB.as_bytes();
    let secret = b"s3cret";
    let good = hmac_hex(secret, body);
    let ok = |p, h: HeaderMap| authenticate(p, &h, body, secret).is_ok();
    // GitHub: right, wrong, wrong secret, not hex, missing prefix, missing.
    assert!(ok(
        Provider::GitHub,
        headers(&[("x-hub-signature-256", &format!("sha256={good}"))])
    ));
    let flipped = format!("sha256={}{}", &good[..63], if good.ends_with('0') { "1" } else { "0" });
    assert!(!ok(Provider::GitHub, headers(&[("x-hub-signature-256", &flipped)])));
    let other = hmac_hex(b"other", body);
    assert!(!ok(
        Provider::GitHub,
        headers(&[("x-hub-signature-256", &format!("sha256={other}"))])
    ));
    assert!(!ok(Provider::GitHub, headers(&[("x-hub-signature-256", "sha256=zz")])));
    assert!(!ok(Provider::GitHub, headers(&[("x-hub-signature-256", &good)])));
    assert!(!ok(Provider::GitHub, HeaderMap::new()));
    // GitHub's legacy SHA-1 header alone is not accepted.
    assert!(!ok(Provider::GitHub, headers(&[("x-hub-signature", "sha1=00")])));
    // Gitea: bare hex.
    assert!(ok(Provider::Gitea, headers(&[("x-gitea-signature", &good)])));
    assert!(!ok(Provider::Gitea, headers(&[("x-gitea-signature", &other)])));
    assert!(!ok(Provider::Gitea, HeaderMap::new()));
    // GitLab: token.
    assert!(ok(Provider::GitLab, headers(&[("x-gitlab-token", "s3cret")])));
    assert!(!ok(Provider::GitLab, headers(&[("x-gitlab-token", "s3cret2")])));
    assert!(!ok(Provider::GitLab, headers(&[("x-gitlab-token", "")])));
    assert!(!ok(Provider::GitLab, HeaderMap::new()));
    // Generic: bearer or X-Capstan-Token.
    assert!(ok(Provider::Generic, headers(&[("authorization", "Bearer s3cret")])));
    assert!(ok(Provider::Generic, headers(&[("x-capstan-token", "s3cret")])));
    assert!(!ok(Provider::Generic, headers(&[("authorization", "Basic s3cret")])));
    assert!(!ok(Provider::Generic, headers(&[("authorization", "Bearer nope")])));
    assert!(!ok(Provider::Generic, HeaderMap::new()));
    assert!(tokens_equal(b"abc", b"abc"));
    assert!(!tokens_equal(b"abc", b"abcd"));
    assert_eq!(trim_newlines(b"tok\r\n"), b"tok");
    assert_eq!(trim_newlines(b"\n"), b"");
}

fn state(target: Arc<FakeTarget>, configured: &[(&'static str, &str)]) -> WebhookState {
    WebhookState {
        secrets: Arc::new(FakeSecrets(
            configured.iter().map(|(k, v)| (*k, v.as_bytes().to_vec())).collect(),
        )),
        target,
        metrics: None,
        max_body: DEFAULT_MAX_BODY,
    }
}

async fn send(state: WebhookState, hdrs: &[(&'static str, &str)], body: Vec<u8>) -> (StatusCode, serde_json::Value) {
    let mut req = Request::builder().method("POST").uri(PATH);
    for (k, v) in hdrs {
        req = req.header(*k, *v);
    }
    let resp = router(state)
        .oneshot(req.body(Body::from(body)).unwrap())
        .await
        .unwrap();
    let status = resp.status();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
    )
}

#[tokio::test]
async fn handler_answers() {
    let target = Arc::new(FakeTarget {
        known: vec!["github.com/octocat/hello-world".into()],
        ..FakeTarget::default()
    });
    let st = state(Arc::clone(&target), &[("github", "s3cret"), ("generic", "tok")]);
    let sig = format!("sha256={}", hmac_hex(b"s3cret", GITHUB.as_bytes()));
    let gh = [("x-github-event", "push"), ("x-hub-signature-256", sig.as_str())];

    let (status, body) = send(st.clone(), &gh, GITHUB.into()).await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body["matched"], 1);
    assert_eq!(target.calls.lock().unwrap().len(), 1);

    // Wrong signature: 401, no refresh.
    let bad = [("x-github-event", "push"), ("x-hub-signature-256", "sha256=00")];
    assert_eq!(send(st.clone(), &bad, GITHUB.into()).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(target.calls.lock().unwrap().len(), 1);

    // Other events after authentication: accepted, nothing refreshed.
    let ping_sig = format!("sha256={}", hmac_hex(b"s3cret", b"{}"));
    let ping = [("x-github-event", "ping"), ("x-hub-signature-256", ping_sig.as_str())];
    let (status, body) = send(st.clone(), &ping, b"{}".to_vec()).await;
    assert_eq!((status, body["matched"].as_u64()), (StatusCode::ACCEPTED, Some(0)));
    assert_eq!(target.calls.lock().unwrap().len(), 1);

    // Providers without a secret are disabled.
    let gl = [("x-gitlab-event", "Push Hook"), ("x-gitlab-token", "anything")];
    assert_eq!(send(st.clone(), &gl, GITLAB.into()).await.0, StatusCode::FORBIDDEN);

    // Too large: by Content-Length, and by reading.
    let big = vec![b' '; 2 * 1024 * 1024];
    assert_eq!(
        send(st.clone(), &gh, big.clone()).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    let stream = futures::stream::iter(
        big.chunks(64 * 1024)
            .map(|c| Ok::<_, std::io::Error>(Bytes::copy_from_slice(c)))
            .collect::<Vec<_>>(),
    );
    let req = Request::builder()
        .method("POST")
        .uri(PATH)
        .header("x-github-event", "push")
        .header("x-hub-signature-256", sig.as_str())
        .body(Body::from_stream(stream))
        .unwrap();
    let resp = router(st.clone()).oneshot(req).await.unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);

    // Garbage with a valid signature: 400.
    let garbage = b"\x00\xffnot json".to_vec();
    let gsig = format!("sha256={}", hmac_hex(b"s3cret", &garbage));
    let (status, body) = send(
        st.clone(),
        &[("x-github-event", "push"), ("x-hub-signature-256", gsig.as_str())],
        garbage,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body["error"].as_str().unwrap().starts_with("malformed github"));

    // Generic: needs JSON content type, then a token.
    let generic = br#"{"repoURL": "https://github.com/octocat/Hello-World", "ref": "refs/heads/main"}"#.to_vec();
    assert_eq!(
        send(st.clone(), &[("authorization", "Bearer tok")], generic.clone())
            .await
            .0,
        StatusCode::UNSUPPORTED_MEDIA_TYPE
    );
    let json_ct = ("content-type", "application/json; charset=utf-8");
    let (status, body) = send(st.clone(), &[json_ct, ("authorization", "Bearer tok")], generic.clone()).await;
    assert_eq!((status, body["matched"].as_u64()), (StatusCode::ACCEPTED, Some(1)));
    assert_eq!(
        send(st.clone(), &[json_ct, ("x-capstan-token", "nope")], generic)
            .await
            .0,
        StatusCode::UNAUTHORIZED
    );
    // A URL that does not parse: 400.
    let unusable = br#"{"repoURL": "not a url"}"#.to_vec();
    assert_eq!(
        send(st.clone(), &[json_ct, ("x-capstan-token", "tok")], unusable)
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    // Only POST on the one route.
    let resp = router(st.clone())
        .oneshot(Request::builder().method("GET").uri(PATH).body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
        for provider in [Provider::GitHub, Provider::GitLab, Provider::Gitea, Provider::Generic] {
            let _ = parse_push(provider, &body);
        }
    }

    #[test]
    fn random_json_shapes_are_accepted_or_400(value in arb_json()) {
        let body = serde_json::to_vec(&serde_json::json!({ "ref": value.clone(), "repository": { "clone_url": value.clone() }, "project": { "git_http_url": value.clone() }, "repoURL": value })).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let status = rt.block_on(async {
            let st = state(Arc::new(FakeTarget::default()), &[("github", "k")]);
            let sig = format!("sha256={}", hmac_hex(b"k", &body));
            send(st, &[("x-github-event", "push"), ("x-hub-signature-256", sig.as_str())], body.clone()).await.0
        });
        prop_assert!(status == StatusCode::ACCEPTED || status == StatusCode::BAD_REQUEST, "{status}");
    }
}

fn arb_json() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        "[a-z:/@.]{0,24}".prop_map(serde_json::Value::from),
        Just(serde_json::Value::from("https://github.com/o/r.git")),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::from),
            proptest::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}
