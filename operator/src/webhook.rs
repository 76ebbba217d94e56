//! Git push webhooks: `POST /api/webhook` on `--webhook-addr`.
//!
//! A verified push triggers an immediate `ls-remote` of ONLY the Repositories whose URL matches
//! one of the payload's repository URLs ([`url_key`]: https, ssh and scp-like forms match), and is
//! answered `202 Accepted` with `{"matched": <count>}`. Refreshes are coalesced per Repository by
//! the [`RevisionNotifier`], so a burst of pushes cannot cause an `ls-remote` storm.
//!
//! | Provider | Detected by | Authentication (key in Secret `capstan-webhook`) |
//! |---|---|---|
//! | Gitea   | `X-Gitea-Event: push` | `X-Gitea-Signature: <hex HMAC-SHA256 of the body>` (`gitea`) |
//! | GitLab  | `X-Gitlab-Event: Push Hook` / `Tag Push Hook` | `X-Gitlab-Token: <token>` (`gitlab`) |
//! | GitHub  | `X-GitHub-Event: push` | `X-Hub-Signature-256: sha256=<hex HMAC-SHA256>` (`github`) |
//! | generic | none of the above; `Content-Type: application/json` | `Authorization: Bearer <token>` or `X-Capstan-Token` (`generic`) |
//!
//! The Secret `capstan-webhook` lives in the operator namespace. **A provider whose key is missing
//! (or empty) is disabled**: its requests are answered `403` (unlike Argo CD, which accepts
//! unauthenticated refreshes when no secret is set). A wrong or missing signature/token is `401`.
//! Comparisons are constant-time (`hmac`'s `verify_slice`; `subtle` for tokens). Trailing newlines
//! of Secret values are ignored.
//!
//! Inputs are bounded and hostile-safe (GHSA-jmvp-698c-4x3w, GHSA-f9gq-prrc-hrhc): bodies above
//! `--webhook-max-body` (default 1 MiB) are `413` (checked on `Content-Length` and while reading),
//! a body must arrive within [`BODY_TIMEOUT`], and malformed or wrong-typed JSON is `400` — payloads
//! are parsed with serde into typed structs, so there is no unchecked access that could panic.
//! Authentication happens before the body is parsed. Other event types (`ping`, issues, ...) are
//! answered `202` with `{"matched": 0}` after authentication.

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Api, Client};
use serde::Deserialize;
use serde_json::json;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::controllers::notifier::{url_key, RevisionNotifier};
use crate::controllers::Shutdown;
use crate::metrics::Metrics;

/// Name of the Secret (in the operator namespace) holding the webhook secrets.
pub const SECRET_NAME: &str = "capstan-webhook";
/// The route.
pub const PATH: &str = "/api/webhook";
/// Default body limit.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;
/// How long a client may take to send the body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The sender of a webhook.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// GitHub (`X-GitHub-Event`).
    GitHub,
    /// GitLab (`X-Gitlab-Event`).
    GitLab,
    /// Gitea (`X-Gitea-Event`).
    Gitea,
    /// Anything else: `{"repoURL": ..., "ref": ...}`.
    Generic,
}

impl Provider {
    /// The key of this provider's secret in Secret `capstan-webhook`, and its metrics label.
    pub fn key(self) -> &'static str {
        match self {
            Provider::GitHub => "github",
            Provider::GitLab => "gitlab",
            Provider::Gitea => "gitea",
            Provider::Generic => "generic",
        }
    }

    /// Which provider sent a request (Gitea also sends GitHub's headers, so it is checked first).
    pub fn detect(headers: &HeaderMap) -> Provider {
        if headers.contains_key("x-gitea-event") {
            Provider::Gitea
        } else if headers.contains_key("x-gitlab-event") {
            Provider::GitLab
        } else if headers.contains_key("x-github-event") {
            Provider::GitHub
        } else {
            Provider::Generic
        }
    }
}

/// Where the webhook secrets come from.
pub trait WebhookSecrets: Send + Sync {
    /// The configured secret of `provider`, if any (empty counts as none).
    fn secret(&self, provider: Provider) -> Option<Vec<u8>>;
}

/// What a verified push asks for: refresh the Repositories with these [`url_key`]s.
pub trait RefreshTarget: Send + Sync {
    /// Requests the refresh and returns how many Repositories matched.
    fn refresh(&self, url_keys: &[String]) -> usize;
}

impl RefreshTarget for RevisionNotifier {
    fn refresh(&self, url_keys: &[String]) -> usize {
        self.request_refresh_keys(url_keys)
    }
}

/// Secrets read from a reflector store that holds only Secret `capstan-webhook`.
#[derive(Clone)]
pub struct StoreSecrets {
    store: Store<Secret>,
    namespace: String,
}

impl WebhookSecrets for StoreSecrets {
    fn secret(&self, provider: Provider) -> Option<Vec<u8>> {
        let secret = self.store.get(&ObjectRef::new(SECRET_NAME).within(&self.namespace))?;
        let value = secret.data.as_ref()?.get(provider.key())?.0.clone();
        let trimmed = trim_newlines(&value);
        (!trimmed.is_empty()).then(|| trimmed.to_vec())
    }
}

fn trim_newlines(v: &[u8]) -> &[u8] {
    let end = v.iter().rposition(|b| !matches!(b, b'\n' | b'\r')).map_or(0, |i| i + 1);
    &v[..end]
}

/// Watches only Secret `capstan-webhook` in `namespace` (field selector): returns the secrets
/// view and the future that keeps it current (spawn it).
pub fn watch_secret(
    client: Client,
    namespace: &str,
) -> (StoreSecrets, impl std::future::Future<Output = ()> + Send + 'static) {
    use futures::StreamExt;
    let (reader, writer) = reflector::store();
    let api: Api<Secret> = Api::namespaced(client, namespace);
    let config = watcher::Config::default().fields(&format!("metadata.name={SECRET_NAME}"));
    let stream = watcher(api, config).default_backoff().reflect(writer).applied_objects();
    let run = async move {
        stream
            .for_each(|event| async move {
                if let Err(e) = event {
                    tracing::warn!("watching Secret {SECRET_NAME}: {e}");
                }
            })
            .await;
    };
    (
        StoreSecrets {
            store: reader,
            namespace: namespace.to_string(),
        },
        run,
    )
}

/// Shared state of the webhook handler.
#[derive(Clone)]
pub struct WebhookState {
    /// Secrets per provider.
    pub secrets: Arc<dyn WebhookSecrets>,
    /// Where verified pushes go.
    pub target: Arc<dyn RefreshTarget>,
    /// Request counter (optional in tests).
    pub metrics: Option<Metrics>,
    /// Body limit in bytes.
    pub max_body: usize,
}

/// The webhook router (`POST /api/webhook`).
pub fn router(state: WebhookState) -> Router {
    Router::new().route(PATH, post(handle)).with_state(state)
}

/// Serves the webhook on `listener` until `shutdown` fires.
pub async fn serve(listener: tokio::net::TcpListener, state: WebhookState, shutdown: Shutdown) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown.wait())
        .await
}

async fn handle(State(state): State<WebhookState>, request: Request<Body>) -> Response {
    let (parts, body) = request.into_parts();
    let provider = Provider::detect(&parts.headers);
    let (status, body) = match process(&state, provider, &parts.headers, body).await {
        Ok(matched) => (StatusCode::ACCEPTED, json!({ "matched": matched })),
        Err((status, message)) => (status, json!({ "error": message })),
    };
    if let Some(metrics) = &state.metrics {
        metrics
            .webhook_requests
            .with_label_values(&[provider.key(), status.as_str()])
            .inc();
    }
    tracing::debug!(provider = provider.key(), status = status.as_u16(), "webhook request");
    (status, [(header::CONTENT_TYPE, "application/json")], body.to_string()).into_response()
}

type Rejection = (StatusCode, String);

async fn process(
    state: &WebhookState,
    provider: Provider,
    headers: &HeaderMap,
    body: Body,
) -> Result<usize, Rejection> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > state.max_body as u64) {
        return Err(too_large(state.max_body));
    }
    if provider == Provider::Generic && !is_json(headers) {
        return Err((
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "generic webhooks need Content-Type: application/json".into(),
        ));
    }
    let Some(secret) = state.secrets.secret(provider) else {
        return Err((
            StatusCode::FORBIDDEN,
            format!(
                "{} webhooks are disabled: no '{}' key in Secret {SECRET_NAME}",
                provider.key(),
                provider.key()
            ),
        ));
    };
    let body = read_body(body, state.max_body).await?;
    authenticate(provider, headers, &body, &secret)?;
    if !is_push(provider, headers) {
        return Ok(0);
    }
    let push = parse_push(provider, &body).map_err(|e| (StatusCode::BAD_REQUEST, e))?;
    let mut keys: Vec<String> = push.urls.iter().filter_map(|u| url_key(u)).collect();
    keys.sort();
    keys.dedup();
    if keys.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            "the payload names no usable repository URL".into(),
        ));
    }
    let matched = state.target.refresh(&keys);
    tracing::info!(
        provider = provider.key(),
        ref_ = push.ref_.as_deref().unwrap_or_default(),
        matched,
        "push webhook: refreshing matching repositories"
    );
    Ok(matched)
}

fn too_large(max: usize) -> Rejection {
    (
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than {max} bytes"),
    )
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"))
}

async fn read_body(body: Body, max: usize) -> Result<Bytes, Rejection> {
    let collected = tokio::time::timeout(BODY_TIMEOUT, Limited::new(body, max).collect()).await;
    match collected {
        Err(_) => Err((StatusCode::REQUEST_TIMEOUT, "request body not received in time".into())),
        Ok(Err(e)) if e.is::<LengthLimitError>() => Err(too_large(max)),
        Ok(Err(_)) => Err((StatusCode::BAD_REQUEST, "cannot read the request body".into())),
        Ok(Ok(collected)) => Ok(collected.to_bytes()),
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// Verifies the request's signature or token against `secret` in constant time.
pub fn authenticate(provider: Provider, headers: &HeaderMap, body: &[u8], secret: &[u8]) -> Result<(), Rejection> {
    let unauthorized = |why: &str| Err((StatusCode::UNAUTHORIZED, why.to_string()));
    match provider {
        Provider::GitHub => match header_str(headers, "x-hub-signature-256").and_then(|s| s.strip_prefix("sha256=")) {
            Some(sig) if verify_hmac(secret, body, sig) => Ok(()),
            Some(_) => unauthorized("signature mismatch"),
            None => unauthorized("missing X-Hub-Signature-256"),
        },
        Provider::Gitea => match header_str(headers, "x-gitea-signature") {
            Some(sig) if verify_hmac(secret, body, sig) => Ok(()),
            Some(_) => unauthorized("signature mismatch"),
            None => unauthorized("missing X-Gitea-Signature"),
        },
        Provider::GitLab => match header_str(headers, "x-gitlab-token") {
            Some(token) if tokens_equal(token.as_bytes(), secret) => Ok(()),
            Some(_) => unauthorized("token mismatch"),
            None => unauthorized("missing X-Gitlab-Token"),
        },
        Provider::Generic => {
            let token = header_str(headers, "authorization")
                .and_then(|v| v.strip_prefix("Bearer "))
                .or_else(|| header_str(headers, "x-capstan-token"));
            match token {
                Some(token) if tokens_equal(token.trim().as_bytes(), secret) => Ok(()),
                Some(_) => unauthorized("token mismatch"),
                None => unauthorized("missing Authorization: Bearer or X-Capstan-Token"),
            }
        }
    }
}

/// HMAC-SHA256 of `body` with `secret` equals the hex `signature` (constant-time comparison).
pub fn verify_hmac(secret: &[u8], body: &[u8], signature: &str) -> bool {
    let Ok(expected) = hex::decode(signature) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(secret) else {
        return false;
    };
    mac.update(body);
    mac.verify_slice(&expected).is_ok()
}

/// Constant-time token comparison; hashing first hides the secret's length too.
pub fn tokens_equal(given: &[u8], secret: &[u8]) -> bool {
    let (a, b) = (Sha256::digest(given), Sha256::digest(secret));
    bool::from(a.as_slice().ct_eq(b.as_slice()))
}

fn is_push(provider: Provider, headers: &HeaderMap) -> bool {
    match provider {
        Provider::GitHub => header_str(headers, "x-github-event") == Some("push"),
        Provider::Gitea => header_str(headers, "x-gitea-event") == Some("push"),
        Provider::GitLab => matches!(
            header_str(headers, "x-gitlab-event"),
            Some("Push Hook" | "Tag Push Hook")
        ),
        Provider::Generic => true,
    }
}

/// What a push payload says: the repository's URLs and the pushed ref.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Push {
    /// Every URL the payload gives for the repository.
    pub urls: Vec<String>,
    /// The pushed ref (`refs/heads/main`), when given.
    pub ref_: Option<String>,
}

#[derive(Deserialize)]
struct GitHubPayload {
    #[serde(rename = "ref")]
    ref_: Option<String>,
    repository: GitHubRepository,
}

#[derive(Deserialize)]
struct GitHubRepository {
    clone_url: Option<String>,
    html_url: Option<String>,
    ssh_url: Option<String>,
    git_url: Option<String>,
}

#[derive(Deserialize)]
struct GitLabPayload {
    #[serde(rename = "ref")]
    ref_: Option<String>,
    project: GitLabProject,
}

#[derive(Deserialize)]
struct GitLabProject {
    git_http_url: Option<String>,
    git_ssh_url: Option<String>,
    web_url: Option<String>,
}

#[derive(Deserialize)]
struct GiteaPayload {
    #[serde(rename = "ref")]
    ref_: Option<String>,
    repository: GiteaRepository,
}

#[derive(Deserialize)]
struct GiteaRepository {
    clone_url: Option<String>,
    ssh_url: Option<String>,
    html_url: Option<String>,
}

#[derive(Deserialize)]
struct GenericPayload {
    #[serde(rename = "repoURL")]
    repo_url: String,
    #[serde(rename = "ref")]
    ref_: Option<String>,
}

/// Parses a push payload of `provider`. Malformed JSON and wrong types are errors (→ 400), never
/// panics. The error text describes the problem without echoing the body.
pub fn parse_push(provider: Provider, body: &[u8]) -> Result<Push, String> {
    let bad = |e: serde_json::Error| format!("malformed {} push payload: {e}", provider.key());
    let collect = |urls: [Option<String>; 4]| urls.into_iter().flatten().filter(|u| !u.is_empty()).collect();
    let push = match provider {
        Provider::GitHub => {
            let p: GitHubPayload = serde_json::from_slice(body).map_err(bad)?;
            let r = p.repository;
            Push {
                urls: collect([r.clone_url, r.html_url, r.ssh_url, r.git_url]),
                ref_: p.ref_,
            }
        }
        Provider::GitLab => {
            let p: GitLabPayload = serde_json::from_slice(body).map_err(bad)?;
            let r = p.project;
            Push {
                urls: collect([r.git_http_url, r.git_ssh_url, r.web_url, None]),
                ref_: p.ref_,
            }
        }
        Provider::Gitea => {
            let p: GiteaPayload = serde_json::from_slice(body).map_err(bad)?;
            let r = p.repository;
            Push {
                urls: collect([r.clone_url, r.ssh_url, r.html_url, None]),
                ref_: p.ref_,
            }
        }
        Provider::Generic => {
            let p: GenericPayload = serde_json::from_slice(body).map_err(bad)?;
            Push {
                urls: collect([Some(p.repo_url), None, None, None]),
                ref_: p.ref_,
            }
        }
    };
    Ok(push)
}

#[cfg(test)]
mod tests;
