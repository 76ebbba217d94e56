//! On-disk cache layout and per-URL locks.
//!
//! ```text
//! <root>/repos/<sha256(normalized url)>.git        one bare repository per URL, shared
//! <root>/checkouts/<sha256(normalized url)>/<sha>/ one exported tree per commit, reused
//! ```
//! Directory names are hashes so nothing from a URL ever becomes a path component. One lock per
//! URL serialises fetches; it is a tokio mutex acquired with a deadline and then moved into the
//! blocking task, so it is released exactly when libgit2 stops touching the repository.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use sha2::{Digest, Sha256};

use super::url::RepoUrl;
use super::{Commit, SourceError};

/// Per-URL state guarded by the URL's lock.
#[derive(Debug, Default)]
pub struct UrlState {
    /// When the last successful network fetch finished; lets waiters skip a redundant fetch.
    pub last_fetch: Option<Instant>,
}

/// Cache paths and the lock registry.
#[derive(Debug)]
pub struct Cache {
    root: PathBuf,
    locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<UrlState>>>>,
}

impl Cache {
    /// A cache rooted at `root` (created on first use).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Cache {
            root: root.into(),
            locks: Mutex::new(HashMap::new()),
        }
    }

    /// The cache root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Hex SHA-256 of the normalized URL.
    pub fn url_key(url: &RepoUrl) -> String {
        hex::encode(Sha256::digest(url.normalized().as_bytes()))
    }

    /// Path of the bare repository for `url`.
    pub fn repo_dir(&self, url: &RepoUrl) -> PathBuf {
        self.root.join("repos").join(format!("{}.git", Self::url_key(url)))
    }

    /// Path of the exported tree of `commit`.
    pub fn checkout_dir(&self, url: &RepoUrl, commit: &Commit) -> PathBuf {
        self.root.join("checkouts").join(Self::url_key(url)).join(commit.sha())
    }

    /// The lock for `url` (created on first use; entries live as long as the cache).
    pub fn lock_for(&self, url: &RepoUrl) -> Arc<tokio::sync::Mutex<UrlState>> {
        let mut map = match self.locks.lock() {
            Ok(m) => m,
            Err(poisoned) => poisoned.into_inner(),
        };
        map.entry(Self::url_key(url)).or_default().clone()
    }

    /// Acquires the URL lock, waiting at most until `deadline`.
    pub async fn acquire(
        &self,
        url: &RepoUrl,
        deadline: tokio::time::Instant,
    ) -> Result<tokio::sync::OwnedMutexGuard<UrlState>, SourceError> {
        let lock = self.lock_for(url);
        tokio::time::timeout_at(deadline, lock.lock_owned())
            .await
            .map_err(|_| SourceError::Timeout(format!("waiting for another operation on {url}")))
    }
}

/// Opens the bare repository at `dir`, creating it if missing.
pub fn open_or_init_bare(dir: &Path) -> Result<git2::Repository, SourceError> {
    match git2::Repository::open_bare(dir) {
        Ok(repo) => Ok(repo),
        Err(_) => {
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_err("creating cache directory", &e))?;
            }
            git2::Repository::init_bare(dir)
                .map_err(|e| SourceError::Internal(format!("initialising cache: {}", e.message())))
        }
    }
}

/// An `Internal` error for a failed filesystem operation (paths are hashes, safe to show).
pub fn io_err(what: &str, e: &std::io::Error) -> SourceError {
    SourceError::Internal(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_uses_hashes_of_normalized_urls() {
        let cache = Cache::new("/c");
        let a = RepoUrl::parse("https://Host/org/repo.git").unwrap();
        let b = RepoUrl::parse("https://host:443/org/repo/").unwrap();
        assert_eq!(cache.repo_dir(&a), cache.repo_dir(&b));
        let dir = cache.repo_dir(&a);
        let name = dir.file_name().unwrap().to_str().unwrap();
        assert_eq!(name.len(), 64 + 4);
        let c = Commit::parse(&"a".repeat(40)).unwrap();
        assert!(cache.checkout_dir(&a, &c).starts_with("/c/checkouts"));
        assert!(Arc::ptr_eq(&cache.lock_for(&a), &cache.lock_for(&b)));
    }
}
