//! Git's smart HTTP protocol for libgit2, spoken over ureq and rustls.
//!
//! libgit2's own HTTP transport (OpenSSL) cannot present a TLS client certificate, cannot take a
//! proxy per repository, and waits on Nagle's algorithm for about 85 ms per request. This module
//! registers a replacement for `http://` and `https://` with [`register`]; libgit2 keeps the git
//! protocol (negotiation, packs) and asks us only to carry requests:
//! `GET <url>/info/refs?service=git-upload-pack`, then one `POST <url>/git-upload-pack` per
//! negotiation round (stateless RPC). Pushes (`capstan bootstrap` only) are the same two requests
//! for `git-receive-pack`, and only an operation that asked for them with
//! [`HttpSettings::allow_push`] may make them: the operator's fetches can never write.
//!
//! # How an operation's settings reach the transport
//! libgit2 builds the transport on the thread that calls `connect`/`download`, so the operation
//! installs its [`HttpSettings`] in a thread-local with [`Scope`] for as long as it talks to the
//! remote. A transport built outside a scope refuses to run rather than guess credentials.
//!
//! # Failures
//! libgit2 only carries text back through its error, so the transport also records a categorised
//! [`HttpFailure`] in the settings; the caller reads it with [`HttpSettings::failure`] and never
//! has to parse a message. Messages carry the sanitised URL only, never a header or a secret.

use std::cell::RefCell;
use std::io::{self, Read, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, Instant};

use git2::transport::{Service, SmartSubtransport, SmartSubtransportStream, Transport};
use ureq::config::RedirectAuthHeaders;
use ureq::tls::{Certificate, ClientCert, PemItem, PrivateKey, RootCerts, TlsConfig};
use ureq::ResponseExt;

use super::url::strip_userinfo_and_query;
use super::Credentials;

/// Largest negotiation request we buffer (wants and haves of one round; git sends far less).
const MAX_REQUEST_BYTES: usize = 16 << 20;
/// Largest pack a push sends (bootstrap's commit is a few hundred kilobytes).
const MAX_PUSH_BYTES: usize = 64 << 20;
/// Redirects followed on the first request (git's `http.followRedirects=initial`).
const MAX_REDIRECTS: u32 = 5;
const USER_AGENT: &str = concat!("git/2.0 (capstan/", env!("CARGO_PKG_VERSION"), ")");

/// A categorised transport failure (the caller maps it to its own error type).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpFailure {
    /// 401 or 403. `credentials_sent` tells "rejected" from "none configured".
    Unauthorized { status: u16, credentials_sent: bool },
    /// 404 or 410.
    NotFound(String),
    /// TLS handshake, certificate verification or a bad TLS setting.
    Tls(String),
    /// A connect, read or total deadline passed.
    Timeout(String),
    /// The response exceeded the byte bound.
    TooLarge(u64),
    /// Anything else: connection refused, unexpected status, not a smart HTTP server.
    Other(String),
}

impl HttpFailure {
    /// A one-line description (sanitised URL only).
    pub fn message(&self) -> String {
        match self {
            HttpFailure::Unauthorized { status, .. } => format!("HTTP {status}: authentication required"),
            HttpFailure::NotFound(m) | HttpFailure::Tls(m) | HttpFailure::Timeout(m) | HttpFailure::Other(m) => {
                m.clone()
            }
            HttpFailure::TooLarge(n) => format!("response exceeds {n} bytes"),
        }
    }
}

/// Everything one git operation needs to talk HTTP: the TLS, proxy and timeout configuration, the
/// `Authorization` header, the deadline, and the slot where the first failure is recorded.
pub struct HttpSettings {
    agent: ureq::Agent,
    /// Names the proxy in connection errors (userinfo stripped).
    proxy: Option<String>,
    authorization: Option<String>,
    deadline: Instant,
    max_response_bytes: u64,
    failure: Mutex<Option<HttpFailure>>,
    push: AtomicBool,
}

impl std::fmt::Debug for HttpSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpSettings")
            .field("authorization", &self.authorization.as_ref().map(|_| "<redacted>"))
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

/// Connection bounds of [`HttpSettings::new`].
#[derive(Debug, Clone, Copy)]
pub struct HttpLimits {
    /// TCP (and proxy) connect timeout.
    pub connect_timeout: Duration,
    /// Bound on waiting for any single read (a server that accepts and then says nothing).
    pub io_timeout: Duration,
    /// End of the whole operation.
    pub deadline: Instant,
    /// Largest response body accepted.
    pub max_response_bytes: u64,
}

impl HttpSettings {
    /// Builds the settings of one operation. Fails with [`HttpFailure::Tls`] when the CA bundle or
    /// the client certificate is unusable, or [`HttpFailure::Other`] for a bad proxy URL; no
    /// message contains key material.
    pub fn new(creds: &Credentials, proxy: Option<&str>, limits: HttpLimits) -> Result<Self, HttpFailure> {
        if let Some(p) = proxy {
            validate_proxy(p).map_err(HttpFailure::Other)?;
        }
        let shown_proxy = proxy.map(strip_userinfo_and_query);
        let proxy = proxy
            .map(|p| {
                ureq::Proxy::new(p).map_err(|_| {
                    HttpFailure::Other(format!(
                        "proxy {} is not a valid proxy URL",
                        strip_userinfo_and_query(p)
                    ))
                })
            })
            .transpose()?;
        let config = ureq::Agent::config_builder()
            .tls_config(tls_config(creds)?)
            .proxy(proxy)
            .http_status_as_error(false)
            .max_redirects(MAX_REDIRECTS)
            .redirect_auth_headers(RedirectAuthHeaders::SameHost)
            .user_agent(USER_AGENT)
            .timeout_connect(Some(limits.connect_timeout))
            .timeout_recv_response(Some(limits.io_timeout))
            .timeout_per_read(Some(limits.io_timeout))
            .no_delay(true)
            .build();
        Ok(HttpSettings {
            agent: ureq::Agent::new_with_config(config),
            proxy: shown_proxy,
            authorization: authorization(creds),
            deadline: limits.deadline,
            max_response_bytes: limits.max_response_bytes,
            failure: Mutex::new(None),
            push: AtomicBool::new(false),
        })
    }

    /// Lets this operation push (`git-receive-pack`); without it the transport refuses to.
    pub fn allow_push(&self) {
        self.push.store(true, Ordering::Relaxed);
    }

    /// The first failure the transport met, if any.
    pub fn failure(&self) -> Option<HttpFailure> {
        self.failure.lock().map(|f| f.clone()).unwrap_or(None)
    }

    /// Records `failure` (the first one wins: later errors are usually its consequences) and
    /// returns it as the I/O error handed to libgit2.
    fn fail(&self, failure: HttpFailure) -> io::Error {
        let message = failure.message();
        if let Ok(mut slot) = self.failure.lock() {
            slot.get_or_insert(failure);
        }
        io::Error::other(message)
    }

    fn remaining(&self) -> Option<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        (!left.is_zero()).then_some(left)
    }
}

/// Accepts `http://` or `https://` proxy URLs (with optional userinfo and port) and nothing a shell, a
/// header or a URL parser could read differently (GHSA-j6cw-g6p4-7hch: a proxy value reaching a shell).
/// The message never repeats the value, which may hold a password.
pub fn validate_proxy(proxy: &str) -> Result<(), String> {
    const MAX: usize = 2048;
    if proxy.len() > MAX {
        return Err(format!("proxy is longer than {MAX} bytes"));
    }
    let odd = |c: char| c.is_control() || c.is_whitespace() || ";$`|&<>'\"\\(){}#".contains(c);
    if proxy.chars().any(odd) {
        return Err("proxy holds characters a proxy URL cannot (whitespace, control or shell characters)".into());
    }
    let lower = proxy.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("http://").or_else(|| lower.strip_prefix("https://")) else {
        return Err("proxy must be an http:// or https:// URL (SOCKS proxies are not supported)".into());
    };
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if host.is_empty() || host.starts_with(':') || !(path.is_empty()) || proxy.contains('?') {
        return Err("proxy must be scheme://[user:password@]host[:port] with no path or query".into());
    }
    Ok(())
}

/// Server trust: the Repository's CA bundle alone when given (Argo CD's per-repository CA),
/// none with `insecureSkipTLSVerify`, else the platform's trust store. Plus the client certificate.
pub(crate) fn tls_config(creds: &Credentials) -> Result<TlsConfig, HttpFailure> {
    let mut tls = TlsConfig::builder().client_cert(client_cert(creds)?);
    if creds.insecure_skip_tls_verify {
        tls = tls.disable_verification(true);
    } else if let Some(ca) = creds.ca_cert.as_deref() {
        let certs = pem_certificates(ca, "caCert")?;
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    } else {
        tls = tls.root_certs(RootCerts::PlatformVerifier);
    }
    Ok(tls.build())
}

fn client_cert(creds: &Credentials) -> Result<Option<ClientCert>, HttpFailure> {
    let (cert, key) = match (creds.tls_client_cert.as_deref(), creds.tls_client_key.as_deref()) {
        (None, None) => return Ok(None),
        (Some(c), Some(k)) => (c, k),
        _ => {
            return Err(HttpFailure::Tls(
                "tlsClientCert and tlsClientKey must be set together".into(),
            ))
        }
    };
    let chain = pem_certificates(cert, "tlsClientCert")?;
    // The parser's own error could quote the input; say only what is wrong.
    let key_pem = key;
    let key = PrivateKey::from_pem(key.as_bytes())
        .map_err(|_| HttpFailure::Tls("tlsClientKey is not a PEM private key (PKCS#1, PKCS#8 or SEC1)".into()))?;
    check_key_matches(&chain, key_pem)?;
    Ok(Some(ClientCert::new_with_certs(&chain, key)))
}

/// rustls refuses a key that does not match the certificate or that it cannot sign with; ureq
/// would panic on that refusal, so it is asked here first, the same way ureq asks.
fn check_key_matches(chain: &[Certificate<'static>], key_pem: &str) -> Result<(), HttpFailure> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs = chain.iter().map(|c| CertificateDer::from(c.der().to_vec())).collect();
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|_| HttpFailure::Tls("tlsClientKey has an unsupported key format".into()))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| HttpFailure::Tls(format!("TLS setup failed: {e}")))?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_client_auth_cert(certs, key)
        .map(|_| ())
        .map_err(|e| HttpFailure::Tls(format!("tlsClientKey does not fit tlsClientCert: {e}")))
}

fn pem_certificates(pem: &str, field: &str) -> Result<Vec<Certificate<'static>>, HttpFailure> {
    let certs: Vec<_> = ureq::tls::parse_pem(pem.as_bytes())
        .filter_map(|item| match item {
            Ok(PemItem::Certificate(c)) => Some(c),
            _ => None,
        })
        .collect();
    if certs.is_empty() {
        return Err(HttpFailure::Tls(format!("{field} holds no PEM certificate")));
    }
    Ok(certs)
}

/// `Bearer <token>` wins over basic auth; basic is sent up front (one round trip fewer than
/// waiting for the 401 challenge, and the same exposure).
fn authorization(creds: &Credentials) -> Option<String> {
    use base64::Engine as _;
    if let Some(token) = creds.bearer_token.as_deref() {
        return Some(format!("Bearer {token}"));
    }
    let password = creds.password.as_deref()?;
    let user = creds.username.as_deref().unwrap_or("git");
    Some(format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    ))
}

// ---------------------------------------------------------------------------------------------
// Per-thread scope

thread_local! {
    static CURRENT: RefCell<Option<Arc<HttpSettings>>> = const { RefCell::new(None) };
}

/// Installs settings for the libgit2 calls made on this thread until dropped.
#[must_use = "the settings apply only while the scope lives"]
pub struct Scope {
    previous: Option<Arc<HttpSettings>>,
}

impl Scope {
    /// Makes `settings` the current thread's HTTP settings.
    pub fn enter(settings: Arc<HttpSettings>) -> Scope {
        let previous = CURRENT.with(|c| c.replace(Some(settings)));
        Scope { previous }
    }
}

impl Drop for Scope {
    fn drop(&mut self) {
        let previous = self.previous.take();
        CURRENT.with(|c| *c.borrow_mut() = previous);
    }
}

/// Registers the transport for `http://` and `https://`, once per process.
pub fn register() {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        for prefix in ["http", "https"] {
            // SAFETY: `register` mutates libgit2's global transport table. `Once` makes this run a
            // single time, and `Git2Source::new` calls it before any git operation starts.
            if let Err(e) = unsafe { git2::transport::register(prefix, factory) } {
                tracing::error!(prefix, error = %e.message(), "registering the git HTTP transport failed");
            }
        }
    });
}

fn factory(remote: &git2::Remote<'_>) -> Result<Transport, git2::Error> {
    let settings = CURRENT
        .with(|c| c.borrow().clone())
        .ok_or_else(|| git2::Error::from_str("git over HTTP is only available inside a capstan git operation"))?;
    Transport::smart(
        remote,
        true,
        HttpSubtransport {
            settings,
            redirected_base: Arc::new(Mutex::new(None)),
        },
    )
}

/// One connection to one remote. Requests after the first go where the first was redirected,
/// as git does (`http.followRedirects=initial`).
struct HttpSubtransport {
    settings: Arc<HttpSettings>,
    redirected_base: Arc<Mutex<Option<String>>>,
}

impl SmartSubtransport for HttpSubtransport {
    fn action(&self, url: &str, action: Service) -> Result<Box<dyn SmartSubtransportStream>, git2::Error> {
        let requested = url.trim_end_matches('/').to_string();
        let base = self
            .redirected_base
            .lock()
            .ok()
            .and_then(|b| b.clone())
            .unwrap_or_else(|| requested.clone());
        let service = match action {
            Service::UploadPackLs | Service::UploadPack => GitService::UploadPack,
            Service::ReceivePackLs | Service::ReceivePack => GitService::ReceivePack,
        };
        if service == GitService::ReceivePack && !self.settings.push.load(Ordering::Relaxed) {
            return Err(git2::Error::from_str(
                "this git operation only reads: receive-pack (push) is refused",
            ));
        }
        let name = service.name();
        let request = match action {
            Service::UploadPackLs | Service::ReceivePackLs => Request::AdvertiseRefs {
                service,
                url: format!("{base}/info/refs?service={name}"),
                requested_base: requested,
                redirected_base: self.redirected_base.clone(),
            },
            Service::UploadPack | Service::ReceivePack => Request::Rpc {
                service,
                url: format!("{base}/{name}"),
                body: Vec::new(),
            },
        };
        Ok(Box::new(HttpStream {
            settings: self.settings.clone(),
            request: Some(request),
            response: None,
        }))
    }

    fn close(&self) -> Result<(), git2::Error> {
        Ok(())
    }
}

/// The two git services smart HTTP carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GitService {
    /// Fetch.
    UploadPack,
    /// Push.
    ReceivePack,
}

impl GitService {
    fn name(self) -> &'static str {
        match self {
            GitService::UploadPack => "git-upload-pack",
            GitService::ReceivePack => "git-receive-pack",
        }
    }

    /// The most a request body may hold: a negotiation round, or a whole pack for a push.
    fn max_request_bytes(self) -> usize {
        match self {
            GitService::UploadPack => MAX_REQUEST_BYTES,
            GitService::ReceivePack => MAX_PUSH_BYTES,
        }
    }
}

/// A request not sent yet: libgit2 writes the body, then reads, and the first read sends it.
enum Request {
    AdvertiseRefs {
        service: GitService,
        url: String,
        requested_base: String,
        redirected_base: Arc<Mutex<Option<String>>>,
    },
    Rpc {
        service: GitService,
        url: String,
        body: Vec<u8>,
    },
}

struct HttpStream {
    settings: Arc<HttpSettings>,
    request: Option<Request>,
    response: Option<ureq::BodyReader<'static>>,
}

impl Write for HttpStream {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        match &mut self.request {
            Some(Request::Rpc { service, body, .. }) => {
                let max = service.max_request_bytes();
                if body.len() + data.len() > max {
                    return Err(self.settings.fail(HttpFailure::Other(format!(
                        "{} request exceeds {max} bytes",
                        service.name()
                    ))));
                }
                body.extend_from_slice(data);
                Ok(data.len())
            }
            _ => Err(io::Error::other("git HTTP stream: write after the request was sent")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for HttpStream {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(request) = self.request.take() {
            self.response = Some(self.send(request)?);
        }
        let Some(reader) = self.response.as_mut() else {
            return Ok(0);
        };
        reader.read(buf).map_err(|e| {
            let failure = classify_io(&e, self.settings.max_response_bytes);
            self.settings.fail(failure)
        })
    }
}

impl HttpStream {
    fn send(&self, request: Request) -> io::Result<ureq::BodyReader<'static>> {
        let settings = &self.settings;
        let Some(left) = settings.remaining() else {
            return Err(settings.fail(HttpFailure::Timeout("operation deadline passed".into())));
        };
        let (url, expected_type, result) = match &request {
            Request::AdvertiseRefs { service, url, .. } => {
                let mut req = settings.agent.get(url);
                if let Some(auth) = &settings.authorization {
                    req = req.header("Authorization", auth);
                }
                let result = req.config().timeout_global(Some(left)).build().call();
                (url, format!("application/x-{}-advertisement", service.name()), result)
            }
            Request::Rpc { service, url, body } => {
                let name = service.name();
                let mut req = settings
                    .agent
                    .post(url)
                    .header("Content-Type", format!("application/x-{name}-request"))
                    .header("Accept", format!("application/x-{name}-result"));
                if let Some(auth) = &settings.authorization {
                    req = req.header("Authorization", auth);
                }
                // POSTs are never redirected: only the first request may be (see above).
                let result = req
                    .config()
                    .timeout_global(Some(left))
                    .max_redirects(0)
                    .build()
                    .send(&body[..]);
                (url, format!("application/x-{name}-result"), result)
            }
        };
        let shown = match &settings.proxy {
            Some(proxy) => format!("{} (via proxy {proxy})", strip_userinfo_and_query(url)),
            None => strip_userinfo_and_query(url),
        };
        let response = result.map_err(|e| settings.fail(classify_ureq(&e, &shown, settings.max_response_bytes)))?;
        let status = response.status().as_u16();
        if let Some(failure) = status_failure(status, &shown, settings.authorization.is_some()) {
            return Err(settings.fail(failure));
        }
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !content_type.starts_with(&expected_type) {
            return Err(settings.fail(HttpFailure::Other(format!(
                "{shown}: not a smart git HTTP server (content-type {:?}, expected {expected_type})",
                content_type.chars().take(80).collect::<String>()
            ))));
        }
        if let Request::AdvertiseRefs {
            requested_base,
            redirected_base,
            ..
        } = &request
        {
            remember_redirect(requested_base, &response.get_uri().to_string(), redirected_base);
        }
        Ok(response
            .into_body()
            .into_with_config()
            .limit(settings.max_response_bytes)
            .reader())
    }
}

/// Records the base URL the advertisement came from when a redirect moved it.
fn remember_redirect(requested_base: &str, final_url: &str, slot: &Mutex<Option<String>>) {
    let Some(base) = final_url.split('?').next().and_then(|u| u.strip_suffix("/info/refs")) else {
        return;
    };
    if base != requested_base {
        if let Ok(mut s) = slot.lock() {
            *s = Some(base.to_string());
        }
    }
}

/// The failure an HTTP status means for git, if it is not a success.
fn status_failure(status: u16, shown_url: &str, credentials_sent: bool) -> Option<HttpFailure> {
    match status {
        200..=299 => None,
        401 | 403 => Some(HttpFailure::Unauthorized {
            status,
            credentials_sent,
        }),
        404 | 410 => Some(HttpFailure::NotFound(format!(
            "{shown_url}: HTTP {status}: repository not found"
        ))),
        _ => Some(HttpFailure::Other(format!(
            "{shown_url}: unexpected HTTP status {status}"
        ))),
    }
}

/// Categorises a ureq error; TLS problems hide inside I/O errors as a rustls error.
fn classify_ureq(e: &ureq::Error, shown_url: &str, max_bytes: u64) -> HttpFailure {
    let at = |m: String| {
        if shown_url.is_empty() {
            m
        } else {
            format!("{shown_url}: {m}")
        }
    };
    match e {
        ureq::Error::Timeout(t) => HttpFailure::Timeout(at(format!("{t} timed out"))),
        ureq::Error::Rustls(r) => HttpFailure::Tls(at(format!("TLS: {r}"))),
        ureq::Error::Tls(r) => HttpFailure::Tls(at(format!("TLS: {r}"))),
        ureq::Error::BodyExceedsLimit(_) => HttpFailure::TooLarge(max_bytes),
        ureq::Error::Io(io) => match classify_io(io, max_bytes) {
            HttpFailure::Other(m) => HttpFailure::Other(at(m)),
            HttpFailure::Tls(m) => HttpFailure::Tls(at(m)),
            HttpFailure::Timeout(m) => HttpFailure::Timeout(at(m)),
            other => other,
        },
        ureq::Error::HostNotFound => HttpFailure::Other(at("host not found".into())),
        ureq::Error::ConnectionFailed => HttpFailure::Other(at("failed to connect".into())),
        ureq::Error::TooManyRedirects | ureq::Error::RedirectFailed => {
            HttpFailure::Other(at("too many or invalid redirects".into()))
        }
        ureq::Error::InvalidProxyUrl | ureq::Error::ConnectProxyFailed(_) => {
            HttpFailure::Other(at(format!("proxy failed: {e}")))
        }
        other => HttpFailure::Other(at(other.to_string())),
    }
}

/// Categorises an I/O error from a connection or a body read.
fn classify_io(e: &io::Error, max_bytes: u64) -> HttpFailure {
    if let Some(inner) = e.get_ref() {
        if let Some(u) = inner.downcast_ref::<ureq::Error>() {
            return classify_ureq(u, "", max_bytes);
        }
        if let Some(r) = inner.downcast_ref::<rustls::Error>() {
            return HttpFailure::Tls(format!("TLS: {r}"));
        }
    }
    match e.kind() {
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock => HttpFailure::Timeout(format!("read: {e}")),
        io::ErrorKind::ConnectionRefused => HttpFailure::Other("connection refused".into()),
        io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted => {
            HttpFailure::Other(format!("server closed the connection ({e})"))
        }
        _ => HttpFailure::Other(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_plain_http_urls() {
        for ok in [
            "http://proxy:3128",
            "https://u:p@proxy.example",
            "HTTP://10.0.0.1:8080/",
        ] {
            assert_eq!(validate_proxy(ok), Ok(()), "{ok}");
        }
        for bad in [
            "socks5://127.0.0.1:1080;touch /dev/shm/pwned",
            "socks5://127.0.0.1:1080",
            "http://proxy:3128/$(id)",
            "http://proxy`id`:1",
            "http://proxy:1\nHost: evil",
            "http://proxy:1/path",
            "http://proxy:1?x=y",
            "http://",
            "proxy:3128",
        ] {
            let err = validate_proxy(bad).unwrap_err();
            assert!(
                !err.contains("proxy:") && !err.contains("127.0.0.1"),
                "echoes the value: {err}"
            );
        }
    }

    #[test]
    fn authorization_prefers_bearer_and_defaults_the_user() {
        let basic = Credentials {
            password: Some("pw".into()),
            ..Default::default()
        };
        // base64("git:pw")
        assert_eq!(authorization(&basic).as_deref(), Some("Basic Z2l0OnB3"));
        let bearer = Credentials {
            bearer_token: Some("tok".into()),
            ..basic
        };
        assert_eq!(authorization(&bearer).as_deref(), Some("Bearer tok"));
        assert_eq!(authorization(&Credentials::default()), None);
    }

    #[test]
    fn statuses_map_to_categories() {
        assert_eq!(status_failure(200, "u", true), None);
        assert_eq!(
            status_failure(403, "u", false),
            Some(HttpFailure::Unauthorized {
                status: 403,
                credentials_sent: false
            })
        );
        assert!(matches!(status_failure(404, "u", true), Some(HttpFailure::NotFound(_))));
        assert!(matches!(status_failure(500, "u", true), Some(HttpFailure::Other(m)) if m.contains("500")));
    }

    #[test]
    fn redirect_base_is_remembered_only_when_it_moved() {
        let slot = Mutex::new(None);
        remember_redirect(
            "http://h/r.git",
            "http://h/r.git/info/refs?service=git-upload-pack",
            &slot,
        );
        assert_eq!(*slot.lock().unwrap(), None);
        remember_redirect(
            "http://h/old/r.git",
            "http://h/r.git/info/refs?service=git-upload-pack",
            &slot,
        );
        assert_eq!(slot.lock().unwrap().as_deref(), Some("http://h/r.git"));
    }

    #[test]
    fn unusable_tls_settings_are_refused_without_echoing_them() {
        let limits = HttpLimits {
            connect_timeout: Duration::from_secs(1),
            io_timeout: Duration::from_secs(1),
            deadline: Instant::now(),
            max_response_bytes: 1,
        };
        let secret = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7";
        let cases = [
            (
                Credentials {
                    tls_client_cert: Some("x".into()),
                    ..Default::default()
                },
                "together",
            ),
            (
                Credentials {
                    tls_client_cert: Some("not pem".into()),
                    tls_client_key: Some(secret.into()),
                    ..Default::default()
                },
                "tlsClientCert holds no PEM certificate",
            ),
            (
                Credentials {
                    ca_cert: Some(secret.into()),
                    ..Default::default()
                },
                "caCert holds no PEM certificate",
            ),
        ];
        for (creds, expected) in cases {
            match HttpSettings::new(&creds, None, limits) {
                Err(HttpFailure::Tls(m)) => {
                    assert!(m.contains(expected), "{m}");
                    assert!(!m.contains(secret), "{m}");
                }
                other => panic!("expected a TLS failure, got {other:?}"),
            }
        }
        let proxy = HttpSettings::new(&Credentials::default(), Some("::nonsense"), limits).unwrap_err();
        assert!(matches!(proxy, HttpFailure::Other(m) if m.contains("proxy")));
    }
}
