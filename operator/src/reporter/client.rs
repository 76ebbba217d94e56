//! I/O: one HTTP request of the protocol, blocking (ureq over rustls; call it from
//! `spawn_blocking`).
//!
//! Why ureq: the crate already carries it (with rustls and the ring provider) for git over HTTP, and it
//! does everything the reporter needs — per-request timeouts, a proxy, a CA bundle, a client
//! certificate, a bound on the answer's size, redirects off — without a second HTTP stack. The reporter
//! sends one request at a time per lane, so a blocking call on the blocking pool costs nothing.
//!
//! Every body is gzip-compressed JSON, signed with HMAC-SHA256 when an `hmacKey` is set. Redirects are
//! followed by hand and only on the same scheme, host and port, so the token never reaches another
//! host. Answers are read up to 1 MiB. Errors carry the URL path at most, never a header.

use std::io::Write as _;
use std::time::{Duration, Instant};

use flate2::write::GzEncoder;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::config::{host_of, Credentials, Settings};

/// Largest answer read.
pub const MAX_ANSWER_BYTES: u64 = 1024 * 1024;
/// Connect timeout.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout of every request but the task long poll.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Same-host redirects followed.
const MAX_REDIRECTS: usize = 3;
const USER_AGENT: &str = concat!("capstan-reporter/", env!("CARGO_PKG_VERSION"));

/// An HTTP answer.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Status code.
    pub status: u16,
    /// `Retry-After`, if any.
    pub retry_after: Option<String>,
    /// The body (at most [`MAX_ANSWER_BYTES`]).
    pub body: Vec<u8>,
    /// How long the request took.
    pub elapsed: Duration,
}

/// A request that got no usable answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TransportError {
    /// Connect or request timeout.
    #[error("timeout: {0}")]
    Timeout(String),
    /// The receiver redirected to another host (not followed).
    #[error("redirect to another host ({0}) refused; the token is only sent to the configured host")]
    CrossHostRedirect(String),
    /// The answer is larger than [`MAX_ANSWER_BYTES`].
    #[error("answer larger than {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
    /// TLS setup or verification.
    #[error("TLS: {0}")]
    Tls(String),
    /// Anything else (refused, reset, DNS).
    #[error("{0}")]
    Other(String),
}

impl TransportError {
    /// The `retries_total{reason}` label.
    pub fn reason(&self) -> &'static str {
        match self {
            TransportError::Timeout(_) => "timeout",
            TransportError::CrossHostRedirect(_) => "redirect",
            TransportError::TooLarge => "too_large",
            TransportError::Tls(_) => "tls",
            TransportError::Other(_) => "connection",
        }
    }
}

/// The HTTP side of one configuration (rebuilt when the ConfigMap or Secret changes).
pub struct Client {
    agent: ureq::Agent,
    base: String,
    origin: String,
    authorization: String,
    hmac_key: Option<Vec<u8>>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("base", &self.base)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Builds the client; fails on an unusable CA bundle, client certificate or proxy (the message
    /// holds no key material).
    pub fn new(settings: &Settings, creds: &Credentials) -> Result<Client, String> {
        let tls_creds = crate::source::Credentials {
            ca_cert: creds.ca_crt.clone(),
            tls_client_cert: creds.tls_crt.clone(),
            tls_client_key: creds.tls_key.clone(),
            insecure_skip_tls_verify: settings.insecure_skip_tls_verify,
            ..Default::default()
        };
        let tls = crate::source::http::tls_config(&tls_creds).map_err(|e| e.message())?;
        let proxy = settings
            .proxy
            .as_deref()
            .map(ureq::Proxy::new)
            .transpose()
            .map_err(|_| "proxy is not a valid proxy URL".to_string())?;
        let config = ureq::Agent::config_builder()
            .tls_config(tls)
            .proxy(proxy)
            .http_status_as_error(false)
            .max_redirects(0)
            .user_agent(USER_AGENT)
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_global(Some(REQUEST_TIMEOUT))
            .no_delay(true)
            .build();
        Ok(Client {
            agent: ureq::Agent::new_with_config(config),
            base: settings.base(),
            origin: origin(&settings.url),
            authorization: format!("Bearer {}", creds.token),
            hmac_key: creds.hmac_key.clone(),
        })
    }

    /// `POST {base}{path}` with `json` gzip-compressed (and signed).
    pub fn post(&self, path: &str, json: &[u8], idempotency_key: Option<&str>) -> Result<Answer, TransportError> {
        let body = gzip(json);
        self.send("POST", path, Some(&body), idempotency_key, REQUEST_TIMEOUT)
    }

    /// `GET {base}{path}` with a request timeout of `timeout`.
    pub fn get(&self, path: &str, timeout: Duration) -> Result<Answer, TransportError> {
        self.send("GET", path, None, None, timeout)
    }

    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        idempotency_key: Option<&str>,
        timeout: Duration,
    ) -> Result<Answer, TransportError> {
        let started = Instant::now();
        let signature = self.hmac_key.as_deref().map(|k| sign(k, body.unwrap_or_default()));
        let mut url = format!("{}{}", self.base, path);
        for _ in 0..=MAX_REDIRECTS {
            let mut builder = http_request(method, &url)
                .header("Authorization", &self.authorization)
                .header("Accept", "application/json");
            if body.is_some() {
                builder = builder
                    .header("Content-Type", "application/json")
                    .header("Content-Encoding", "gzip");
            }
            if let Some(sig) = &signature {
                builder = builder.header("X-Capstan-Signature", sig);
            }
            if let Some(key) = idempotency_key {
                builder = builder.header("Idempotency-Key", key);
            }
            let mut response = match body {
                Some(bytes) => self.run(builder.body(bytes), timeout)?,
                None => self.run(builder.body(()), timeout)?,
            };
            let status = response.status().as_u16();
            if (300..400).contains(&status) {
                let location = header(&response, "location").unwrap_or_default();
                let next = resolve(&url, &location);
                if origin(&next) != self.origin {
                    return Err(TransportError::CrossHostRedirect(shown_host(&next)));
                }
                url = next;
                continue;
            }
            let retry_after = header(&response, "retry-after");
            let body = response
                .body_mut()
                .with_config()
                .limit(MAX_ANSWER_BYTES)
                .read_to_vec()
                .map_err(map_error)?;
            return Ok(Answer {
                status,
                retry_after,
                body,
                elapsed: started.elapsed(),
            });
        }
        Err(TransportError::Other(format!("more than {MAX_REDIRECTS} redirects")))
    }
}

impl Client {
    fn run<S: ureq::AsSendBody>(
        &self,
        request: Result<ureq::http::Request<S>, ureq::http::Error>,
        timeout: Duration,
    ) -> Result<ureq::http::Response<ureq::Body>, TransportError> {
        let request = request.map_err(|_| TransportError::Other("cannot build the request".into()))?;
        let request = self
            .agent
            .configure_request(request)
            .timeout_global(Some(timeout))
            .build();
        self.agent.run(request).map_err(map_error)
    }
}

fn http_request(method: &str, url: &str) -> ureq::http::request::Builder {
    ureq::http::Request::builder().method(method).uri(url)
}

fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(|v| v.chars().take(256).collect())
}

fn map_error(e: ureq::Error) -> TransportError {
    match e {
        ureq::Error::Timeout(t) => TransportError::Timeout(t.to_string()),
        ureq::Error::BodyExceedsLimit(_) => TransportError::TooLarge,
        ureq::Error::Tls(t) => TransportError::Tls(t.to_string()),
        ureq::Error::Rustls(t) => TransportError::Tls(t.to_string()),
        ureq::Error::ConnectionFailed => TransportError::Other("connection refused or failed".into()),
        ureq::Error::HostNotFound => TransportError::Other("host not found".into()),
        ureq::Error::Io(io) => TransportError::Other(format!("I/O: {}", io.kind())),
        other => TransportError::Other(crate::source::url::strip_userinfo_and_query(&other.to_string())),
    }
}

/// `scheme://host:port` of a URL, lowercase, with the default port made explicit.
pub fn origin(url: &str) -> String {
    let lower = url.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").unwrap_or(("", &lower));
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = host_of(authority);
    let port = authority
        .strip_prefix('[')
        .and_then(|r| r.split_once("]:").map(|(_, p)| p))
        .or_else(|| {
            (!authority.starts_with('['))
                .then(|| authority.rsplit_once(':').map(|(_, p)| p))
                .flatten()
        })
        .map(str::to_string)
        .unwrap_or_else(|| if scheme == "https" { "443" } else { "80" }.to_string());
    format!("{scheme}://{host}:{port}")
}

fn shown_host(url: &str) -> String {
    let o = origin(url);
    o.split_once("://").map_or(o.clone(), |(_, h)| h.to_string())
}

/// Resolves a `Location` against the request URL (absolute, or an absolute path).
fn resolve(current: &str, location: &str) -> String {
    if location.contains("://") {
        return location.to_string();
    }
    let o = origin(current);
    let (scheme, _) = o.split_once("://").unwrap_or(("https", ""));
    let lower = current.to_ascii_lowercase();
    let rest = lower.split_once("://").map_or("", |(_, r)| r);
    let authority = rest.split('/').next().unwrap_or_default();
    if let Some(path) = location.strip_prefix('/') {
        return format!("{scheme}://{authority}/{path}");
    }
    format!("{}/{}", current.rsplit_once('/').map_or(current, |(b, _)| b), location)
}

/// gzip of `json`.
pub fn gzip(json: &[u8]) -> Vec<u8> {
    let mut enc = GzEncoder::new(Vec::with_capacity(json.len() / 4 + 64), flate2::Compression::fast());
    enc.write_all(json).expect("writing to a Vec cannot fail");
    enc.finish().expect("writing to a Vec cannot fail")
}

/// `sha256=<hex>` HMAC of `body` with `key`.
pub fn sign(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod receiver_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn origins_and_redirect_targets() {
        assert_eq!(origin("https://Saas.example/v1/x"), "https://saas.example:443");
        assert_eq!(origin("http://127.0.0.1:8080/v1"), "http://127.0.0.1:8080");
        assert_eq!(origin("http://[::1]:9/v1"), "http://::1:9");
        assert_ne!(origin("http://127.0.0.1:8080/"), origin("http://127.0.0.2:8080/"));
        assert_ne!(origin("http://h:1/"), origin("https://h:1/"));
        assert_eq!(resolve("http://h:1/a/b", "/c"), "http://h:1/c");
        assert_eq!(resolve("http://h:1/a/b", "c"), "http://h:1/a/c");
        assert_eq!(resolve("http://h:1/a/b", "http://o:2/x"), "http://o:2/x");
    }

    #[test]
    fn signature_is_hmac_sha256_of_the_sent_bytes() {
        // RFC 4231 test case 2.
        assert_eq!(
            sign(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        let zipped = gzip(br#"{"a":1}"#);
        let mut out = String::new();
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&zipped[..]), &mut out).unwrap();
        assert_eq!(out, r#"{"a":1}"#);
    }
}
