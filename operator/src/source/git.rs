//! [`GitSource`] implemented with git2 (libgit2).
//!
//! # Deadlines
//! libgit2 has no per-operation timeout. Three layers bound every call:
//! 1. libgit2's global connect and I/O timeouts (`git2::opts`), applied to TCP, TLS and libssh2,
//!    so a server that accepts and then says nothing fails after `io_timeout`;
//! 2. the transfer-progress, sideband and credential callbacks return "abort" once the operation's
//!    total deadline has passed, so a server that trickles bytes is cut off;
//! 3. an async watchdog returns `Timeout` to the caller at the deadline (plus a short grace) even if
//!    libgit2 is stuck where no callback runs; the blocking thread then ends at layer 1 and only then
//!    releases the per-URL lock it owns.
//!
//! # HTTP(S)
//! `http://` and `https://` go through [`super::http`], a smart-HTTP transport over rustls that
//! presents client certificates, honours the Repository's proxy and sends bearer tokens; each
//! network call below runs inside that module's per-thread scope (see [`Session`]).

use std::cell::Cell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use git2::{
    AutotagOption, CertificateCheckStatus, Cred, CredentialType, Direction, FetchOptions, FetchPrune, RemoteCallbacks,
    RemoteUpdateFlags,
};

pub use super::bounds::CheckoutLimits;
use super::cache::{io_err, open_or_init_bare, Cache};
use super::diff::{changed_paths_blocking, memo_key, DiffMemo};
use super::http::{self, HttpFailure, HttpLimits, HttpSettings};
use super::known_hosts::{self, HostKeyCheck, KnownHost};
use super::url::{strip_userinfo_and_query, RepoUrl, Transport};
use super::{
    verify, BoxFuture, ChangedPaths, Commit, Credentials, FetchOutcome, GitSource, RemoteRef, Revision, SourceError,
    VerifiedSignature,
};

/// Ref in the bare cache that records the remote's `HEAD` at the last fetch.
const REMOTE_HEAD_REF: &str = "refs/capstan/remote-head";
/// Refspecs of a mirror fetch: every branch and tag, so one fetch serves every Application.
const MIRROR_REFSPECS: [&str; 2] = ["+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*"];
/// libgit2's "deepen to full history" depth (`GIT_FETCH_DEPTH_UNSHALLOW`).
const DEPTH_UNSHALLOW: i32 = i32::MAX;
/// Longest libgit2 message we keep (status messages stay small).
const MAX_MESSAGE: usize = 400;

/// Tunables; defaults follow Argo CD (15 s git request timeout) with a total bound per operation.
#[derive(Debug, Clone)]
pub struct GitConfig {
    /// TCP connect timeout (process-wide in libgit2: the first `Git2Source` created sets it).
    pub connect_timeout: Duration,
    /// Timeout of any single network read or write (process-wide, as above).
    pub io_timeout: Duration,
    /// Bound on a whole operation, including the wait for the per-URL lock.
    pub total_timeout: Duration,
    /// Abort a fetch that receives more than this many bytes.
    pub max_fetch_bytes: usize,
    /// Fetch with depth 1 when the transport allows and the revision is a ref.
    pub shallow: bool,
    /// known_hosts used when the credentials carry none.
    pub default_known_hosts: Option<String>,
    /// Bounds on an exported tree, checked before anything is written.
    pub checkout: CheckoutLimits,
}

impl Default for GitConfig {
    fn default() -> Self {
        GitConfig {
            connect_timeout: Duration::from_secs(10),
            io_timeout: Duration::from_secs(15),
            total_timeout: Duration::from_secs(90),
            max_fetch_bytes: 2 << 30,
            shallow: true,
            default_known_hosts: None,
            checkout: CheckoutLimits::default(),
        }
    }
}

/// libgit2-backed [`GitSource`] with a shared on-disk cache.
#[derive(Debug, Clone)]
pub struct Git2Source {
    cache: Arc<Cache>,
    config: Arc<GitConfig>,
    diffs: Arc<DiffMemo>,
    /// One lock per checkout directory being written: the reconciles that need a commit's checkout at the
    /// same moment (all the Applications a commit wakes) wait for one checkout instead of each writing its
    /// own copy of the whole tree.
    checkouts: Arc<std::sync::Mutex<HashMap<PathBuf, Arc<tokio::sync::Mutex<()>>>>>,
    /// Checkouts written so far (not found on disk), for tests of the lock above.
    written: Arc<std::sync::atomic::AtomicUsize>,
}

static GLOBAL_TIMEOUTS: OnceLock<(Duration, Duration)> = OnceLock::new();

/// Installs libgit2's process-wide connect and I/O timeouts once.
fn install_global_timeouts(config: &GitConfig) {
    GLOBAL_TIMEOUTS.get_or_init(|| {
        let ms = |d: Duration| i32::try_from(d.as_millis()).unwrap_or(i32::MAX).max(1);
        // SAFETY: these write a C global int read by libgit2 when it opens a stream. This runs
        // once per process (OnceLock), normally while the operator starts, before any git work;
        // a concurrent reader would see either the old or the new int, both valid timeouts.
        unsafe {
            let _ = git2::opts::set_server_connect_timeout_in_milliseconds(ms(config.connect_timeout));
            let _ = git2::opts::set_server_timeout_in_milliseconds(ms(config.io_timeout));
        }
        (config.connect_timeout, config.io_timeout)
    });
}

impl Git2Source {
    /// A source caching under `root` (see [`Cache`] for the layout).
    pub fn new(root: impl Into<PathBuf>, config: GitConfig) -> Self {
        install_global_timeouts(&config);
        http::register();
        Git2Source {
            cache: Arc::new(Cache::new(root)),
            config: Arc::new(config),
            diffs: Arc::default(),
            checkouts: Arc::default(),
            written: Arc::default(),
        }
    }

    /// The cache, for callers that need paths (and tests).
    pub fn cache(&self) -> &Cache {
        &self.cache
    }

    /// Runs `f` on a blocking thread under the total deadline; the watchdog answers `Timeout` if
    /// libgit2 does not return in time.
    async fn run_blocking<T, F>(&self, url: &RepoUrl, deadline: Instant, f: F) -> Result<T, SourceError>
    where
        T: Send + 'static,
        F: FnOnce() -> Result<T, SourceError> + Send + 'static,
    {
        let grace = Duration::from_millis(500);
        let wait = deadline.saturating_duration_since(Instant::now()) + grace;
        match tokio::time::timeout(wait, tokio::task::spawn_blocking(f)).await {
            Ok(Ok(result)) => result,
            Ok(Err(_)) => Err(SourceError::Internal(format!("git task for {url} failed"))),
            Err(_) => Err(timeout_error(url, &self.config)),
        }
    }

    /// How many checkouts this source wrote (a checkout found on disk is not counted).
    pub fn checkouts_written(&self) -> usize {
        self.written.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The lock of checkout directory `dir` (made on first use).
    fn checkout_lock(&self, dir: &Path) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.checkouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        Arc::clone(locks.entry(dir.to_path_buf()).or_default())
    }

    /// Drops the lock of `dir` from the map once nobody else holds or waits for it.
    fn release_checkout_lock(&self, dir: &Path, lock: &Arc<tokio::sync::Mutex<()>>) {
        let mut locks = self.checkouts.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // Two references: the map's and the caller's.
        if Arc::strong_count(lock) <= 2 {
            locks.remove(dir);
        }
    }

    fn deadline(&self) -> Instant {
        Instant::now() + self.config.total_timeout
    }
}

fn timeout_error(url: &RepoUrl, config: &GitConfig) -> SourceError {
    SourceError::Timeout(format!(
        "{url}: no result within {}s",
        config.total_timeout.as_secs_f32()
    ))
}

impl GitSource for Git2Source {
    fn ls_remote<'a>(
        &'a self,
        url: &'a RepoUrl,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<RemoteRef>, SourceError>> {
        Box::pin(async move {
            let deadline = self.deadline();
            let (u, c, cfg) = (url.clone(), creds.clone(), self.config.clone());
            self.run_blocking(url, deadline, move || ls_remote_blocking(&u, &c, &cfg, deadline))
                .await
        })
    }

    fn fetch<'a>(
        &'a self,
        url: &'a RepoUrl,
        creds: &'a Credentials,
        revision: &'a Revision,
    ) -> BoxFuture<'a, Result<FetchOutcome, SourceError>> {
        Box::pin(async move {
            let requested = Instant::now();
            let deadline = self.deadline();
            let tokio_deadline = tokio::time::Instant::now() + self.config.total_timeout;
            let guard = self.cache.acquire(url, tokio_deadline).await?;
            let (u, c, r, cfg) = (url.clone(), creds.clone(), revision.clone(), self.config.clone());
            let repo_dir = self.cache.repo_dir(url);
            self.run_blocking(url, deadline, move || {
                let mut guard = guard;
                let served = guard.last_fetch.is_some_and(|t| t >= requested);
                let job = FetchJob {
                    repo_dir: &repo_dir,
                    url: &u,
                    creds: &c,
                    revision: &r,
                    config: &cfg,
                    deadline,
                };
                let outcome = job.run(served)?;
                if !outcome.coalesced {
                    guard.last_fetch = Some(Instant::now());
                }
                Ok(outcome)
            })
            .await
        })
    }

    fn resolve<'a>(&'a self, url: &'a RepoUrl, revision: &'a Revision) -> BoxFuture<'a, Result<Commit, SourceError>> {
        Box::pin(async move {
            let (u, r) = (url.clone(), revision.clone());
            let repo_dir = self.cache.repo_dir(url);
            self.run_blocking(url, self.deadline(), move || resolve_blocking(&repo_dir, &u, &r))
                .await
        })
    }

    fn checkout<'a>(&'a self, url: &'a RepoUrl, commit: &'a Commit) -> BoxFuture<'a, Result<PathBuf, SourceError>> {
        Box::pin(async move {
            let repo_dir = self.cache.repo_dir(url);
            let dir = self.cache.checkout_dir(url, commit);
            let deadline = self.deadline();
            let lock = self.checkout_lock(&dir);
            let wait = deadline.saturating_duration_since(Instant::now());
            let Ok(_held) = tokio::time::timeout(wait, lock.lock()).await else {
                return Err(timeout_error(url, &self.config));
            };
            let (c, done, written) = (commit.clone(), dir.clone(), Arc::clone(&self.written));
            let limits = self.config.checkout;
            let result = self
                .run_blocking(url, deadline, move || {
                    if dir.is_dir() {
                        return Ok(dir);
                    }
                    written.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    checkout_blocking(&repo_dir, &dir, &c, limits)
                })
                .await;
            self.release_checkout_lock(&done, &lock);
            result
        })
    }

    fn changed_paths<'a>(
        &'a self,
        url: &'a RepoUrl,
        from: &'a Commit,
        to: &'a Commit,
        max: usize,
    ) -> BoxFuture<'a, Result<ChangedPaths, SourceError>> {
        Box::pin(async move {
            let repo_dir = self.cache.repo_dir(url);
            let key = memo_key(&repo_dir, from, to, max);
            if let Some(known) = self.diffs.get(&key) {
                return Ok(known);
            }
            let (f, t) = (from.clone(), to.clone());
            let changed = self
                .run_blocking(url, self.deadline(), move || {
                    changed_paths_blocking(&repo_dir, &f, &t, max)
                })
                .await?;
            self.diffs.put(key, changed.clone());
            Ok(changed)
        })
    }

    fn verify_commit<'a>(
        &'a self,
        url: &'a RepoUrl,
        commit: &'a Commit,
        armored_keys: &'a [String],
    ) -> BoxFuture<'a, Result<VerifiedSignature, SourceError>> {
        Box::pin(async move {
            let repo_dir = self.cache.repo_dir(url);
            let (c, keys) = (commit.clone(), armored_keys.to_vec());
            self.run_blocking(url, self.deadline(), move || verify_blocking(&repo_dir, &c, &keys))
                .await
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Network operations

/// What the callbacks observed; turns libgit2's generic errors into precise categories.
#[derive(Default)]
struct Observed {
    timed_out: Cell<bool>,
    too_large: Cell<bool>,
    host_key: Cell<Option<HostKeyCheck>>,
    auth_rejected: Cell<bool>,
    no_credentials: Cell<bool>,
}

/// Everything a network operation needs, borrowed by the callbacks.
pub(super) struct Session<'a> {
    url: &'a RepoUrl,
    creds: &'a Credentials,
    known_hosts: Vec<KnownHost>,
    deadline: Instant,
    max_bytes: usize,
    observed: Observed,
    /// HTTP(S) only: the transport's settings, installed for this thread while the session lives.
    http: Option<(Arc<HttpSettings>, http::Scope)>,
}

impl<'a> Session<'a> {
    pub(super) fn new(
        url: &'a RepoUrl,
        creds: &'a Credentials,
        config: &GitConfig,
        deadline: Instant,
    ) -> Result<Self, SourceError> {
        check_supported(creds)?;
        let http = match url.transport() {
            Transport::Https | Transport::Http => Some(http_scope(url, creds, config, deadline)?),
            _ => None,
        };
        let kh = creds
            .known_hosts
            .as_deref()
            .or(config.default_known_hosts.as_deref())
            .unwrap_or("");
        Ok(Session {
            url,
            creds,
            known_hosts: known_hosts::parse(kh),
            deadline,
            max_bytes: config.max_fetch_bytes,
            observed: Observed::default(),
            http,
        })
    }

    /// Lets this session push over HTTP(S) (bootstrap's writer only; fetches stay read-only).
    pub(super) fn allow_push(&self) {
        if let Some((settings, _)) = &self.http {
            settings.allow_push();
        }
    }

    fn past_deadline(&self) -> bool {
        let late = Instant::now() >= self.deadline;
        if late {
            self.observed.timed_out.set(true);
        }
        late
    }

    /// Callbacks enforcing the deadline, size bound, credentials, host keys and certificates.
    pub(super) fn callbacks(&self) -> RemoteCallbacks<'_> {
        let mut cb = RemoteCallbacks::new();
        let mut tried = CredentialType::empty();
        cb.credentials(move |_url, user_from_url, allowed| self.credential(&mut tried, user_from_url, allowed));
        cb.certificate_check(move |cert, host| self.check_certificate(cert, host));
        cb.transfer_progress(move |p| {
            if p.received_bytes() > self.max_bytes {
                self.observed.too_large.set(true);
                return false;
            }
            !self.past_deadline()
        });
        cb.sideband_progress(move |_| !self.past_deadline());
        cb
    }

    /// Hands out each kind of credential at most once: libgit2 asks again after a rejection, and
    /// answering again would loop until the deadline.
    fn credential(
        &self,
        tried: &mut CredentialType,
        user_from_url: Option<&str>,
        allowed: CredentialType,
    ) -> Result<Cred, git2::Error> {
        if self.past_deadline() {
            return Err(git2::Error::from_str("deadline passed"));
        }
        let user = user_from_url.or(self.creds.username.as_deref()).unwrap_or("git");
        let fresh = |kind: CredentialType, tried: &mut CredentialType| {
            let ok = allowed.contains(kind) && !tried.contains(kind);
            if ok {
                tried.insert(kind);
            }
            ok
        };
        let key = self.creds.ssh_private_key.as_deref();
        if key.is_some() && fresh(CredentialType::SSH_KEY, tried) {
            let key = key.unwrap_or_default();
            return Cred::ssh_key_from_memory(user, None, key, self.creds.ssh_passphrase.as_deref());
        }
        if let Some(pw) = self.creds.password.as_deref() {
            if fresh(CredentialType::USER_PASS_PLAINTEXT, tried) {
                return Cred::userpass_plaintext(self.creds.username.as_deref().unwrap_or(user), pw);
            }
        }
        if fresh(CredentialType::USERNAME, tried) {
            return Cred::username(user);
        }
        // A bearer token travels as a header, so a 401 that leads here means it was rejected.
        if tried.is_empty() && self.creds.bearer_token.is_none() {
            self.observed.no_credentials.set(true);
        } else {
            self.observed.auth_rejected.set(true);
        }
        Err(git2::Error::new(
            git2::ErrorCode::Auth,
            git2::ErrorClass::Callback,
            "credentials rejected",
        ))
    }

    fn check_certificate(
        &self,
        cert: &git2::cert::Cert<'_>,
        _host: &str,
    ) -> Result<CertificateCheckStatus, git2::Error> {
        if let Some(hostkey) = cert.as_hostkey() {
            let port = self.url.port().unwrap_or(22);
            let verdict = match hostkey.hostkey() {
                Some(blob) => known_hosts::check(&self.known_hosts, self.url.host(), port, blob),
                None => HostKeyCheck::Unknown,
            };
            if verdict == HostKeyCheck::Trusted {
                return Ok(CertificateCheckStatus::CertificateOk);
            }
            self.observed.host_key.set(Some(verdict));
            return Err(git2::Error::new(
                git2::ErrorCode::Certificate,
                git2::ErrorClass::Ssh,
                "host key not trusted",
            ));
        }
        // HTTPS certificates are checked by rustls in `http`; nothing else presents one.
        Ok(CertificateCheckStatus::CertificatePassthrough)
    }

    /// Fetch options with callbacks and depth.
    fn fetch_options(&self, depth: i32) -> FetchOptions<'_> {
        let mut fo = FetchOptions::new();
        fo.remote_callbacks(self.callbacks());
        fo.download_tags(AutotagOption::None);
        fo.prune(FetchPrune::On);
        fo.depth(depth);
        fo
    }

    /// Turns a libgit2 error into a categorized, sanitized error.
    pub(super) fn map_error(&self, e: &git2::Error) -> SourceError {
        let msg = self.clean(e.message());
        let url = self.url;
        let obs = &self.observed;
        if obs.timed_out.get() || e.code() == git2::ErrorCode::Timeout {
            return SourceError::Timeout(format!("{url}: {msg}"));
        }
        if let Some(failure) = self.http.as_ref().and_then(|(h, _)| h.failure()) {
            return self.map_http_failure(failure);
        }
        if obs.too_large.get() {
            return SourceError::InvalidInput(format!("{url}: fetch exceeds {} bytes", self.max_bytes));
        }
        if let Some(v) = obs.host_key.get() {
            let why = match v {
                HostKeyCheck::Mismatch => "the presented host key differs from known_hosts",
                HostKeyCheck::Revoked => "the presented host key is revoked",
                _ if self.known_hosts.is_empty() => "no known_hosts configured",
                _ => "host not in known_hosts",
            };
            return SourceError::HostKeyUnknown(format!("{url}: {why}"));
        }
        if obs.no_credentials.get() {
            return SourceError::AuthenticationFailed(format!(
                "{url}: server requires credentials of a kind not configured"
            ));
        }
        if obs.auth_rejected.get() {
            return SourceError::AuthenticationFailed(format!("{url}: credentials rejected"));
        }
        match classify(e, format!("{url}: {msg}")) {
            SourceError::AuthenticationFailed(m) if self.creds.bearer_token.is_some() => {
                SourceError::AuthenticationFailed(format!("bearer token rejected: {m}"))
            }
            other => other,
        }
    }

    /// The HTTP transport's own verdict, sanitised like any libgit2 message.
    fn map_http_failure(&self, failure: HttpFailure) -> SourceError {
        let url = self.url;
        match failure {
            HttpFailure::Unauthorized {
                credentials_sent: false,
                status,
            } => SourceError::AuthenticationFailed(format!(
                "{url}: server requires credentials (HTTP {status}) and none are configured"
            )),
            HttpFailure::Unauthorized { status, .. } if self.creds.bearer_token.is_some() => {
                SourceError::AuthenticationFailed(format!("{url}: bearer token rejected (HTTP {status})"))
            }
            HttpFailure::Unauthorized { status, .. } => {
                SourceError::AuthenticationFailed(format!("{url}: credentials rejected (HTTP {status})"))
            }
            HttpFailure::NotFound(m) => SourceError::NotFound(self.clean(&m)),
            HttpFailure::Tls(m) => SourceError::TlsError(self.clean(&m)),
            HttpFailure::Timeout(m) => SourceError::Timeout(self.clean(&m)),
            HttpFailure::TooLarge(_) => {
                SourceError::InvalidInput(format!("{url}: fetch exceeds {} bytes", self.max_bytes))
            }
            HttpFailure::Other(m) => SourceError::Internal(self.clean(&m)),
        }
    }

    fn clean(&self, text: &str) -> String {
        crate::text::truncate(&strip_userinfo_and_query(&self.creds.scrub(text)), MAX_MESSAGE)
    }
}

/// Categorises by libgit2 code, class and message (libgit2 reports HTTP 401/404 only in text).
fn classify(e: &git2::Error, msg: String) -> SourceError {
    let lower = e.message().to_ascii_lowercase();
    let has = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if e.code() == git2::ErrorCode::Auth || has(&["401", "403", "authentication", "unauthorized", "permission denied"])
    {
        return SourceError::AuthenticationFailed(msg);
    }
    if has(&["timed out", "timeout"]) {
        return SourceError::Timeout(msg);
    }
    if e.code() == git2::ErrorCode::Certificate
        || e.class() == git2::ErrorClass::Ssl
        || has(&["certificate", "ssl", "tls"])
    {
        return SourceError::TlsError(msg);
    }
    let not_found = [
        "404",
        "not found",
        "does not appear to be a git repository",
        "not exported",
        "could not find repository",
        "no such file",
        "failed to resolve path",
        "repository not found",
        "no such repository",
    ];
    if e.code() == git2::ErrorCode::NotFound || has(&not_found) {
        return SourceError::NotFound(msg);
    }
    if has(&["unexpected eof", "early eof", "connection reset", "failed to connect"]) {
        return SourceError::Internal(format!("{msg} (server closed the connection)"));
    }
    SourceError::Internal(msg)
}

/// Settings that cannot be used are refused up front with a clear message.
fn check_supported(creds: &Credentials) -> Result<(), SourceError> {
    if let Some(token) = creds.bearer_token.as_deref() {
        if token.chars().any(|c| c.is_control()) {
            return Err(SourceError::InvalidInput(
                "bearerToken contains control characters".into(),
            ));
        }
    }
    Ok(())
}

/// Builds the HTTP transport's settings for one operation and installs them on this thread.
fn http_scope(
    url: &RepoUrl,
    creds: &Credentials,
    config: &GitConfig,
    deadline: Instant,
) -> Result<(Arc<HttpSettings>, http::Scope), SourceError> {
    let limits = HttpLimits {
        connect_timeout: config.connect_timeout,
        io_timeout: config.io_timeout,
        deadline,
        max_response_bytes: u64::try_from(config.max_fetch_bytes).unwrap_or(u64::MAX),
    };
    let settings = HttpSettings::new(creds, creds.proxy.as_deref(), limits).map_err(|f| match f {
        HttpFailure::Tls(m) => SourceError::TlsError(format!("{url}: {m}")),
        other => SourceError::InvalidInput(format!("{url}: {}", creds.scrub(&other.message()))),
    })?;
    let settings = Arc::new(settings);
    let scope = http::Scope::enter(settings.clone());
    Ok((settings, scope))
}

/// Lists refs with a detached remote: no repository, no objects.
fn ls_remote_blocking(
    url: &RepoUrl,
    creds: &Credentials,
    config: &GitConfig,
    deadline: Instant,
) -> Result<Vec<RemoteRef>, SourceError> {
    let session = Session::new(url, creds, config, deadline)?;
    let wrap = |e: git2::Error| session.map_error(&e);
    let mut remote = git2::Remote::create_detached(url.as_git_url()).map_err(wrap)?;
    let conn = remote
        .connect_auth(Direction::Fetch, Some(session.callbacks()), None)
        .map_err(wrap)?;
    Ok(remote_refs(conn.list().map_err(wrap)?))
}

fn remote_refs(heads: &[git2::RemoteHead<'_>]) -> Vec<RemoteRef> {
    heads
        .iter()
        .map(|h| RemoteRef {
            name: h.name().to_string(),
            sha: h.oid().to_string(),
            symref_target: h.symref_target().map(str::to_string),
        })
        .collect()
}

/// One fetch into the bare cache.
struct FetchJob<'a> {
    repo_dir: &'a Path,
    url: &'a RepoUrl,
    creds: &'a Credentials,
    revision: &'a Revision,
    config: &'a GitConfig,
    deadline: Instant,
}

impl FetchJob<'_> {
    /// Fetches unless the revision is already there: a full SHA present in the cache (commits are
    /// immutable), or any revision when a fetch finished while we waited for the lock.
    fn run(&self, served_by_concurrent_fetch: bool) -> Result<FetchOutcome, SourceError> {
        let repo = open_or_init_bare(self.repo_dir)?;
        let present = resolve_in(&repo, self.url, self.revision).is_ok();
        if present && (served_by_concurrent_fetch || self.revision.is_full_sha()) {
            return Ok(FetchOutcome {
                coalesced: true,
                shallow: repo.is_shallow(),
            });
        }
        let want_shallow = self.config.shallow
            && self.url.transport().supports_shallow()
            && !self.revision.is_full_sha()
            && !self.revision.could_be_short_sha();
        let depth = match (want_shallow, repo.is_shallow()) {
            (true, _) => 1,
            (false, true) => DEPTH_UNSHALLOW,
            (false, false) => 0,
        };
        match self.fetch_once(&repo, depth) {
            Err(SourceError::Internal(msg)) if depth != 0 && msg.to_ascii_lowercase().contains("shallow") => {
                tracing::debug!(url = %self.url, "shallow fetch unsupported, fetching full history");
                self.fetch_once(&repo, 0)?;
            }
            other => other?,
        }
        resolve_in(&repo, self.url, self.revision)?;
        Ok(FetchOutcome {
            coalesced: false,
            shallow: repo.is_shallow(),
        })
    }

    /// download → list (for HEAD) → update tips → prune → record HEAD → disconnect.
    fn fetch_once(&self, repo: &git2::Repository, depth: i32) -> Result<(), SourceError> {
        let session = Session::new(self.url, self.creds, self.config, self.deadline)?;
        let wrap = |e: git2::Error| session.map_error(&e);
        let mut remote = repo.remote_anonymous(self.url.as_git_url()).map_err(wrap)?;
        let mut fo = session.fetch_options(depth);
        remote.download(&MIRROR_REFSPECS, Some(&mut fo)).map_err(wrap)?;
        let head = remote
            .list()
            .map_err(wrap)?
            .iter()
            .find(|h| h.name() == "HEAD")
            .map(|h| h.oid());
        remote
            .update_tips(
                None,
                RemoteUpdateFlags::empty(),
                AutotagOption::None,
                Some("capstan fetch"),
            )
            .map_err(wrap)?;
        remote.prune(None).map_err(wrap)?;
        let _ = remote.disconnect();
        record_remote_head(repo, head)
    }
}

/// Remembers the remote's HEAD commit so `HEAD` resolves without another round trip.
fn record_remote_head(repo: &git2::Repository, head: Option<git2::Oid>) -> Result<(), SourceError> {
    let internal = |e: git2::Error| SourceError::Internal(format!("recording HEAD: {}", e.message()));
    match head {
        Some(oid) if repo.find_commit(oid).is_ok() => {
            repo.reference(REMOTE_HEAD_REF, oid, true, "remote HEAD")
                .map_err(internal)?;
        }
        _ => {
            if let Ok(mut r) = repo.find_reference(REMOTE_HEAD_REF) {
                r.delete().map_err(internal)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Local operations

fn open_cache(repo_dir: &Path, url: &RepoUrl) -> Result<git2::Repository, SourceError> {
    git2::Repository::open_bare(repo_dir).map_err(|_| SourceError::NotFound(format!("{url} has not been fetched yet")))
}

fn resolve_blocking(repo_dir: &Path, url: &RepoUrl, revision: &Revision) -> Result<Commit, SourceError> {
    let repo = open_cache(repo_dir, url)?;
    resolve_in(&repo, url, revision)
}

/// Revision → commit: `HEAD`, full SHA, branch, tag (annotated tags peeled), then short SHA.
fn resolve_in(repo: &git2::Repository, url: &RepoUrl, revision: &Revision) -> Result<Commit, SourceError> {
    let not_found = || SourceError::NotFound(format!("revision {} not found in {url}", revision.as_str()));
    let to_commit = |c: git2::Commit<'_>| Commit::parse(&c.id().to_string());
    if revision.is_full_sha() {
        let oid = git2::Oid::from_str(revision.as_str()).map_err(|_| not_found())?;
        return repo.find_commit(oid).map_err(|_| not_found()).and_then(to_commit);
    }
    let names = if revision.is_head() {
        vec![REMOTE_HEAD_REF.to_string()]
    } else {
        revision.candidate_refs()
    };
    for name in names {
        if let Ok(reference) = repo.find_reference(&name) {
            let commit = reference.peel_to_commit().map_err(|_| not_found())?;
            return to_commit(commit);
        }
    }
    if revision.could_be_short_sha() {
        return match repo.find_commit_by_prefix(revision.as_str()) {
            Ok(c) => to_commit(c),
            Err(e) if e.code() == git2::ErrorCode::Ambiguous => Err(SourceError::InvalidInput(format!(
                "short SHA {} is ambiguous in {url}",
                revision.as_str()
            ))),
            Err(_) => Err(not_found()),
        };
    }
    Err(not_found())
}

/// Exports the commit's tree to `dir` through a temporary sibling and an atomic rename, so a
/// directory that exists is always complete and can be shared by every reader.
fn checkout_blocking(
    repo_dir: &Path,
    dir: &Path,
    commit: &Commit,
    limits: CheckoutLimits,
) -> Result<PathBuf, SourceError> {
    if dir.is_dir() {
        return Ok(dir.to_path_buf());
    }
    let repo = git2::Repository::open_bare(repo_dir)
        .map_err(|_| SourceError::NotFound("repository has not been fetched yet".into()))?;
    let oid = git2::Oid::from_str(commit.sha()).map_err(|_| SourceError::InvalidInput("bad commit id".into()))?;
    let tree = repo
        .find_commit(oid)
        .and_then(|c| c.tree())
        .map_err(|_| SourceError::NotFound(format!("commit {commit} is not in the cache")))?;
    super::bounds::check_tree(&repo, &tree, commit, limits)?;
    let parent = dir
        .parent()
        .ok_or_else(|| SourceError::Internal("checkout path has no parent".into()))?;
    std::fs::create_dir_all(parent).map_err(|e| io_err("creating checkout directory", &e))?;
    let tmp = parent.join(format!(
        ".tmp-{}-{}-{:?}",
        commit.sha(),
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let mut opts = git2::build::CheckoutBuilder::new();
    opts.target_dir(&tmp).force().disable_filters(true);
    let result = repo
        .checkout_tree(tree.as_object(), Some(&mut opts))
        .map_err(|e| SourceError::Internal(format!("checkout of {commit} failed: {}", e.message())));
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&tmp, dir) {
        let _ = std::fs::remove_dir_all(&tmp);
        if !dir.is_dir() {
            return Err(io_err("publishing checkout", &e));
        }
    }
    Ok(dir.to_path_buf())
}

fn verify_blocking(
    repo_dir: &Path,
    commit: &Commit,
    armored_keys: &[String],
) -> Result<VerifiedSignature, SourceError> {
    let keys = verify::parse_public_keys(armored_keys)?;
    let repo = git2::Repository::open_bare(repo_dir)
        .map_err(|_| SourceError::NotFound("repository has not been fetched yet".into()))?;
    let oid = git2::Oid::from_str(commit.sha()).map_err(|_| SourceError::InvalidInput("bad commit id".into()))?;
    repo.find_commit(oid)
        .map_err(|_| SourceError::NotFound(format!("commit {commit} is not in the cache")))?;
    let (signature, signed) = match repo.extract_signature(&oid, None) {
        Ok(pair) => pair,
        Err(e) if e.code() == git2::ErrorCode::NotFound => {
            return Err(SourceError::VerificationFailed(format!(
                "commit {commit} is not signed"
            )));
        }
        Err(e) => {
            return Err(SourceError::VerificationFailed(format!(
                "commit {commit}: {}",
                e.message()
            )))
        }
    };
    verify::verify_detached(&signature, &signed, &keys).map_err(|e| match e {
        SourceError::VerificationFailed(m) => SourceError::VerificationFailed(format!("commit {commit}: {m}")),
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_uses_codes_and_text() {
        let e = git2::Error::new(
            git2::ErrorCode::GenericError,
            git2::ErrorClass::Http,
            "unexpected http status code: 404",
        );
        assert_eq!(classify(&e, String::new()).category(), "NotFound");
        let e = git2::Error::new(git2::ErrorCode::Auth, git2::ErrorClass::Http, "x");
        assert_eq!(classify(&e, String::new()).category(), "AuthenticationFailed");
        let e = git2::Error::new(
            git2::ErrorCode::GenericError,
            git2::ErrorClass::Net,
            "failed to resolve address: timed out",
        );
        assert_eq!(classify(&e, String::new()).category(), "Timeout");
    }
}
