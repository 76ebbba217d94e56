//! Git sources: list refs, fetch into a shared bare cache, resolve revisions, export checkouts and
//! verify commit signatures.
//!
//! The [`GitSource`] trait is what controllers use; [`git::Git2Source`] implements it with libgit2, which
//! speaks git://, ssh:// and file:// itself and `http(s)://` through [`http`] (our smart-HTTP transport over
//! rustls: client certificates, proxy, bearer tokens).
//! libgit2 is blocking, so every call runs on `spawn_blocking` under a total deadline, and the
//! per-URL lock is held by the blocking work itself, never longer than that deadline plus libgit2's
//! own I/O timeout. Pure parts (URL rules, credential templates, known_hosts, revision parsing,
//! signature checks) live in their own modules and are tested without I/O.

pub mod bounds;
pub mod cache;
pub mod credentials;
pub mod diff;
pub mod git;
pub mod http;
pub mod known_hosts;
pub mod url;
pub mod verify;
pub mod write;

#[cfg(test)]
mod tests;
#[cfg(any(test, feature = "testsupport"))]
pub mod testsupport;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;

pub use credentials::{CredentialTemplate, Credentials};
pub use url::{RepoUrl, UrlPolicy};

/// A boxed, sendable future; keeps [`GitSource`] object-safe (`Arc<dyn GitSource>`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Errors of the source layer. `category()` is the Repository `Ready=False` reason.
///
/// Every message is built from sanitized parts: never a credential, never URL userinfo or a query.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// The server rejected the credentials (or none were given and it wanted some).
    #[error("authentication failed: {0}")]
    AuthenticationFailed(String),
    /// The SSH host key is not in known_hosts (or does not match it).
    #[error("SSH host key not trusted: {0}")]
    HostKeyUnknown(String),
    /// Repository or revision does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// Connect, I/O or total deadline passed.
    #[error("timed out: {0}")]
    Timeout(String),
    /// TLS handshake or certificate verification failed, or an unsupported TLS setting was asked for.
    #[error("TLS error: {0}")]
    TlsError(String),
    /// The commit is not signed by a trusted key.
    #[error("signature verification failed: {0}")]
    VerificationFailed(String),
    /// A URL, revision or setting was refused before any I/O.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The URL's transport is not allowed for the namespace asking ([`url::UrlPolicy`]).
    #[error("not allowed: {0}")]
    TransportNotAllowed(String),
    /// A checkout would exceed the operator's bound on its bytes or files; nothing was written.
    #[error("checkout too large: {0}")]
    CheckoutTooLarge(String),
    /// Anything else (I/O on the cache, unexpected libgit2 errors).
    #[error("internal error: {0}")]
    Internal(String),
}

impl SourceError {
    /// Stable reason string for conditions, events and metrics labels.
    pub fn category(&self) -> &'static str {
        match self {
            SourceError::AuthenticationFailed(_) => "AuthenticationFailed",
            SourceError::HostKeyUnknown(_) => "HostKeyUnknown",
            SourceError::NotFound(_) => "NotFound",
            SourceError::Timeout(_) => "Timeout",
            SourceError::TlsError(_) => "TLSError",
            SourceError::VerificationFailed(_) => "VerificationFailed",
            SourceError::InvalidInput(_) => "InvalidInput",
            SourceError::TransportNotAllowed(_) => "TransportNotAllowed",
            SourceError::CheckoutTooLarge(_) => "CheckoutTooLarge",
            SourceError::Internal(_) => "Internal",
        }
    }

    /// Whether retrying later can help (network and server trouble) as opposed to a fix in the spec.
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Timeout(_) | SourceError::Internal(_))
    }
}

/// Upper bound on revision length; git refs are far shorter in practice.
const MAX_REVISION_LEN: usize = 255;

/// A validated `targetRevision`: `HEAD` (or empty), a branch, a tag, a full ref, or a (short) SHA.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Revision(String);

impl Revision {
    /// Validates a revision. Refuses option-looking strings, control characters and names git
    /// would refuse as ref names, so a revision can never be taken for something else.
    pub fn parse(input: &str) -> Result<Self, SourceError> {
        let s = input;
        if s.is_empty() || s == "HEAD" {
            return Ok(Revision("HEAD".into()));
        }
        let bad = |why: &str| Err(SourceError::InvalidInput(format!("revision {why}")));
        if s.len() > MAX_REVISION_LEN {
            return bad("is too long");
        }
        if s.starts_with('-') {
            return bad("must not start with '-'");
        }
        if s.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return bad("must not contain control characters or whitespace");
        }
        let forbidden = ["..", "@{", "//", "\\", "~", "^", ":", "?", "*", "["];
        if forbidden.iter().any(|f| s.contains(f)) || s.ends_with('/') || s.ends_with(".lock") || s.ends_with('.') {
            return bad("is not a valid git ref name");
        }
        if s.split('/').any(|seg| seg.starts_with('.') || seg.starts_with('-')) {
            return bad("has a path segment starting with '.' or '-'");
        }
        Ok(Revision(s.to_string()))
    }

    /// The revision as given (after validation).
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// `HEAD`: the remote's default branch.
    pub fn is_head(&self) -> bool {
        self.0 == "HEAD"
    }

    /// A full 40-hex SHA-1 commit id.
    pub fn is_full_sha(&self) -> bool {
        self.0.len() == 40 && is_hex(&self.0)
    }

    /// Something that could be an abbreviated commit id (4..40 hex digits).
    pub fn could_be_short_sha(&self) -> bool {
        (4..40).contains(&self.0.len()) && is_hex(&self.0)
    }

    /// Ref names to try, most specific first (Argo CD resolves branch before tag).
    pub fn candidate_refs(&self) -> Vec<String> {
        if self.is_head() {
            return vec!["HEAD".into()];
        }
        if self.0.starts_with("refs/") {
            return vec![self.0.clone()];
        }
        vec![format!("refs/heads/{}", self.0), format!("refs/tags/{}", self.0)]
    }
}

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A commit id: 40 lower-case hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Commit(String);

impl Commit {
    /// Validates a full SHA-1 commit id.
    pub fn parse(sha: &str) -> Result<Self, SourceError> {
        if sha.len() == 40 && is_hex(sha) {
            Ok(Commit(sha.to_ascii_lowercase()))
        } else {
            Err(SourceError::InvalidInput("commit id must be 40 hex digits".into()))
        }
    }

    /// The hex id.
    pub fn sha(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Commit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// One advertised ref from `ls-remote`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteRef {
    /// Full ref name (`HEAD`, `refs/heads/main`, `refs/tags/v1^{}` for peeled tags).
    pub name: String,
    /// The object the ref points at.
    pub sha: String,
    /// For `HEAD`: the branch it points at, when the server says so.
    pub symref_target: Option<String>,
}

/// What a fetch did; `coalesced` means another caller's fetch, finished while we waited for the
/// per-URL lock, already covered this request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchOutcome {
    /// True when no network round trip was made because a concurrent fetch served us.
    pub coalesced: bool,
    /// True when the fetch was shallow (depth 1).
    pub shallow: bool,
}

/// The paths a commit range changed (see [`GitSource::changed_paths`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangedPaths {
    /// Repository-relative file paths (`/`-separated, no leading `/`), sorted, deduplicated.
    Paths(Vec<String>),
    /// More differences than the caller's bound: treat as "everything changed".
    TooMany,
}

/// The key that made a signature valid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// Hex fingerprint of the signing (sub)key.
    pub fingerprint: String,
}

/// Git operations a controller needs. All methods are cancellation-safe and time-bounded.
pub trait GitSource: Send + Sync {
    /// Lists the remote's refs without downloading objects (cheap polling).
    fn ls_remote<'a>(
        &'a self,
        url: &'a RepoUrl,
        creds: &'a Credentials,
    ) -> BoxFuture<'a, Result<Vec<RemoteRef>, SourceError>>;

    /// Makes sure `revision` is present in the shared bare cache, fetching if needed.
    fn fetch<'a>(
        &'a self,
        url: &'a RepoUrl,
        creds: &'a Credentials,
        revision: &'a Revision,
    ) -> BoxFuture<'a, Result<FetchOutcome, SourceError>>;

    /// Resolves a revision to a commit using the cache (call `fetch` first).
    fn resolve<'a>(&'a self, url: &'a RepoUrl, revision: &'a Revision) -> BoxFuture<'a, Result<Commit, SourceError>>;

    /// Exports the commit's tree into a per-commit directory (reused; treat as read-only).
    fn checkout<'a>(&'a self, url: &'a RepoUrl, commit: &'a Commit) -> BoxFuture<'a, Result<PathBuf, SourceError>>;

    /// The repository paths that differ between the trees of `from` and `to` (both must be in the
    /// cache; no network). Added, deleted, modified and both sides of a rename are listed; more than
    /// `max` differences answer [`ChangedPaths::TooMany`] so a huge commit costs a bounded walk.
    fn changed_paths<'a>(
        &'a self,
        url: &'a RepoUrl,
        from: &'a Commit,
        to: &'a Commit,
        max: usize,
    ) -> BoxFuture<'a, Result<ChangedPaths, SourceError>>;

    /// Checks that the commit carries a valid OpenPGP signature by one of `armored_keys`.
    fn verify_commit<'a>(
        &'a self,
        url: &'a RepoUrl,
        commit: &'a Commit,
        armored_keys: &'a [String],
    ) -> BoxFuture<'a, Result<VerifiedSignature, SourceError>>;
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn revision_rules() {
        assert!(Revision::parse("").unwrap().is_head());
        assert!(Revision::parse("HEAD").unwrap().is_head());
        assert!(Revision::parse("0123456789abcdef0123456789abcdef01234567")
            .unwrap()
            .is_full_sha());
        assert!(Revision::parse("abc1234").unwrap().could_be_short_sha());
        assert_eq!(
            Revision::parse("main").unwrap().candidate_refs(),
            vec!["refs/heads/main".to_string(), "refs/tags/main".to_string()]
        );
        for bad in [
            "--upload-pack=x",
            "-x",
            "a..b",
            "a\nb",
            "a b",
            "x^{}",
            "a:b",
            "refs/heads/.x",
            "a/-b",
            "x.lock",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn categories_are_stable() {
        assert_eq!(SourceError::TlsError(String::new()).category(), "TLSError");
        assert_eq!(SourceError::HostKeyUnknown(String::new()).category(), "HostKeyUnknown");
    }
}
