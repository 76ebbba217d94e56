//! What generation reads besides the spec: the Cluster objects a set may target, and the Git trees
//! of the repositories its Git generators name.
//!
//! Git trees come from the real source layer: credentials (the Repository with the same URL key
//! in the set's namespace or the operator namespace, else the best credential template), fetch,
//! resolve, checkout; then the checkout is scanned once ([`CheckoutTree::scan`]) with the render
//! layer's confinement rules: a checkout holding a symlink that leaves it (or loops) is refused as
//! a whole, `.git` is never listed, every read is bounded and re-confined.
//!
//! A tree that could not be loaded is kept as its error, so the generator that asks for it fails
//! with that error (and the controller keeps every existing Application). Templated `repoURL`s
//! (inside a matrix) are not known before generation: [`CheckoutTrees`] records what was asked for
//! and missing, and the controller loads those and generates again (bounded rounds).

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use kube::ResourceExt;

use crate::api::tenancy::source_namespace_allowed;
use crate::api::{Cluster, Repository};
use crate::appset::{GitTree, GitTrees};
use crate::controllers::git_access::{self, credentials, fetch, matching_repository};
use crate::controllers::notifier::url_key;
use crate::controllers::repository::sanitize;
use crate::controllers::Context;
use crate::render::paths::{self, AbsolutePaths};
use crate::source::{Commit, Revision, SourceError};

/// Most files and directories one checkout may hold for a Git generator.
pub const MAX_ENTRIES: usize = 100_000;

/// The Cluster objects a set in `namespace` may use: its own namespace's, and those of the operator
/// namespace whose `spec.sourceNamespaces` lists `namespace`.
pub fn clusters_for(all: &[Arc<Cluster>], namespace: &str, operator_ns: &str) -> Vec<Cluster> {
    let mut out: Vec<Cluster> = all
        .iter()
        .filter(|c| {
            let cluster_ns = c.namespace().unwrap_or_default();
            source_namespace_allowed(&c.spec.source_namespaces, &cluster_ns, operator_ns, namespace)
        })
        .map(|c| c.as_ref().clone())
        .collect();
    out.sort_by_key(|c| (c.namespace(), c.name_any()));
    out
}

/// One checkout, scanned: its directories and files (repository-relative, `/`-separated).
#[derive(Debug)]
pub struct CheckoutTree {
    root: PathBuf,
    dirs: Vec<String>,
    files: Vec<String>,
}

impl CheckoutTree {
    /// Scans `root`: refuses symlinks leaving it or looping, skips `.git`, lists symlinked files as
    /// files (as `git ls-files` does) and never follows symlinked directories. Blocking.
    pub fn scan(root: &Path, max_entries: usize) -> Result<CheckoutTree, String> {
        let root = paths::canonical_root(root).map_err(|e| e.to_string())?;
        paths::check_symlinks(&root, max_entries).map_err(|e| e.to_string())?;
        let (mut dirs, mut files) = (Vec::new(), Vec::new());
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            for entry in paths::read_dir_sorted(&dir).map_err(|e| e.to_string())? {
                if dirs.len() + files.len() > max_entries {
                    return Err(format!("repository has more than {max_entries} files and directories"));
                }
                let rel = rel_path(&root, &entry);
                let meta = fs::symlink_metadata(&entry).map_err(|e| format!("cannot stat {rel:?}: {}", e.kind()))?;
                if meta.is_dir() {
                    if !paths::is_skipped_dir(&entry) {
                        dirs.push(rel);
                        pending.push(entry);
                    }
                } else if meta.is_file()
                    || (meta.file_type().is_symlink() && fs::metadata(&entry).is_ok_and(|m| m.is_file()))
                {
                    files.push(rel);
                }
            }
        }
        dirs.sort();
        files.sort();
        Ok(CheckoutTree { root, dirs, files })
    }
}

fn rel_path(root: &Path, path: &Path) -> String {
    paths::relative_to(root, path)
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

impl GitTree for CheckoutTree {
    fn directories(&self) -> Result<Vec<String>, String> {
        Ok(self.dirs.clone())
    }

    fn files(&self) -> Result<Vec<String>, String> {
        Ok(self.files.clone())
    }

    fn read_file(&self, path: &str, max_bytes: usize) -> Result<Vec<u8>, String> {
        let joined = paths::join_lexically(Path::new(""), path, AbsolutePaths::Reject).map_err(|e| e.to_string())?;
        let full = self.root.join(joined);
        let canonical = fs::canonicalize(&full).map_err(|e| format!("{path}: {}", e.kind()))?;
        paths::ensure_inside(&self.root, &canonical, path).map_err(|e| e.to_string())?;
        paths::read_bounded(&canonical, max_bytes as u64, path).map_err(|e| e.to_string())
    }
}

/// The trees one generation may read, keyed by the generator's literal `(repoURL, revision)`.
#[derive(Debug, Default)]
pub struct CheckoutTrees {
    trees: HashMap<(String, String), Result<Arc<CheckoutTree>, String>>,
    misses: Mutex<BTreeSet<(String, String)>>,
}

impl CheckoutTrees {
    /// Adds a loaded tree (or why it could not be loaded).
    pub fn insert(&mut self, repo_url: &str, revision: &str, tree: Result<Arc<CheckoutTree>, String>) {
        self.trees.insert((repo_url.to_owned(), revision.to_owned()), tree);
    }

    /// Whether `(repo_url, revision)` was loaded (successfully or not).
    pub fn contains(&self, repo_url: &str, revision: &str) -> bool {
        self.trees.contains_key(&(repo_url.to_owned(), revision.to_owned()))
    }

    /// What generators asked for that was not loaded (templated repoURLs), and forgets it.
    pub fn take_misses(&self) -> BTreeSet<(String, String)> {
        std::mem::take(&mut *self.misses.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// How many trees are loaded.
    pub fn len(&self) -> usize {
        self.trees.len()
    }

    /// Whether no tree is loaded.
    pub fn is_empty(&self) -> bool {
        self.trees.is_empty()
    }
}

impl GitTrees for CheckoutTrees {
    fn tree(&self, repo_url: &str, revision: &str) -> Result<&dyn GitTree, String> {
        match self.trees.get(&(repo_url.to_owned(), revision.to_owned())) {
            Some(Ok(tree)) => Ok(tree.as_ref() as &dyn GitTree),
            Some(Err(e)) => Err(e.clone()),
            None => {
                self.misses
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((repo_url.to_owned(), revision.to_owned()));
                Err(format!("repository {repo_url} at {revision} was not loaded"))
            }
        }
    }
}

/// Resolutions and scanned trees remembered between reconciles (memory only, bounded).
#[derive(Debug, Default)]
pub struct TreeCache {
    resolved: Mutex<HashMap<(String, String), (String, Instant)>>,
    scanned: Mutex<HashMap<(String, String), Arc<CheckoutTree>>>,
}

/// Most scanned trees kept.
const MAX_CACHED_TREES: usize = 64;

impl TreeCache {
    fn resolved(&self, key: &(String, String), fresh_for: std::time::Duration) -> Option<String> {
        let map = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        map.get(key)
            .filter(|(_, at)| at.elapsed() < fresh_for)
            .map(|(c, _)| c.clone())
    }

    fn remember(&self, key: (String, String), commit: String) {
        let mut map = self.resolved.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() > 10_000 {
            map.clear();
        }
        map.insert(key, (commit, Instant::now()));
    }

    fn tree(&self, key: &(String, String)) -> Option<Arc<CheckoutTree>> {
        self.scanned.lock().unwrap_or_else(|p| p.into_inner()).get(key).cloned()
    }

    fn keep(&self, key: (String, String), tree: Arc<CheckoutTree>) {
        let mut map = self.scanned.lock().unwrap_or_else(|p| p.into_inner());
        if map.len() >= MAX_CACHED_TREES {
            map.clear();
        }
        map.insert(key, tree);
    }
}

/// How fresh a resolved revision must be.
#[derive(Clone, Copy, Debug)]
pub struct Freshness {
    /// Resolve again now (refresh requested, new commit announced).
    pub force: bool,
    /// How long a resolution made here stays good.
    pub fresh_for: std::time::Duration,
}

/// Loads the tree of `repo_url` at `revision` for a set in `namespace`: the commit the Repository
/// controller last listed (or one remembered for less than `fresh_for`) unless `force`, otherwise a
/// fetch and resolve; then checkout and scan. Errors are sanitized (no credentials, no userinfo).
pub async fn load_tree(
    ctx: &Context,
    cache: &TreeCache,
    repos: &[Arc<Repository>],
    namespace: &str,
    repo_url: &str,
    revision: &str,
    how: Freshness,
) -> Result<Arc<CheckoutTree>, String> {
    let Freshness { force, fresh_for } = how;
    let url = git_access::repo_url(ctx, repo_url, namespace).map_err(|e| format!("repoURL: {e}"))?;
    let rev = Revision::parse(revision).map_err(|e| format!("revision: {e}"))?;
    let repo = matching_repository(repos, repo_url, namespace, ctx.namespace()).map_err(|e| e.message)?;
    let creds = credentials(ctx, repos, repo.as_deref(), namespace, &url)
        .await
        .map_err(|e| e.message)?;
    let clean = |e: SourceError| sanitize(&creds, &e.to_string());
    let key = (
        url_key(repo_url).unwrap_or_else(|| repo_url.to_owned()),
        rev.as_str().to_owned(),
    );
    let known = if rev.is_full_sha() {
        Some(rev.as_str().to_ascii_lowercase())
    } else if force {
        None
    } else {
        listed_commit(repo.as_deref(), &rev).or_else(|| cache.resolved(&key, fresh_for))
    };
    let commit = match known {
        Some(sha) => Commit::parse(&sha).map_err(clean)?,
        None => {
            fetch(ctx, &url, &creds, &rev).await.map_err(clean)?;
            let commit = ctx.git.resolve(&url, &rev).await.map_err(clean)?;
            cache.remember(key, commit.sha().to_owned());
            commit
        }
    };
    let tree_key = (url.normalized(), commit.sha().to_owned());
    if let Some(tree) = cache.tree(&tree_key) {
        return Ok(tree);
    }
    let by_sha = Revision::parse(commit.sha()).map_err(clean)?;
    fetch(ctx, &url, &creds, &by_sha).await.map_err(clean)?;
    let checkout = ctx.git.checkout(&url, &commit).await.map_err(clean)?;
    let tree = tokio::task::spawn_blocking(move || CheckoutTree::scan(&checkout, MAX_ENTRIES))
        .await
        .map_err(|e| format!("scanning the checkout failed: {e}"))??;
    let tree = Arc::new(tree);
    cache.keep(tree_key, Arc::clone(&tree));
    Ok(tree)
}

fn listed_commit(repo: Option<&Repository>, rev: &Revision) -> Option<String> {
    repo.and_then(|r| r.status.as_ref())
        .and_then(|s| s.last_fetched_revision.iter().find(|f| f.ref_ == rev.as_str()))
        .map(|f| f.revision.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn scan_lists_dirs_and_files_and_skips_git() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join("apps/a")).unwrap();
        fs::create_dir_all(root.join("apps/b/c")).unwrap();
        fs::create_dir_all(root.join(".git/objects")).unwrap();
        fs::write(root.join("apps/a/config.json"), "{}").unwrap();
        fs::write(root.join("top.yaml"), "x: 1").unwrap();
        symlink("apps/a/config.json", root.join("link.json")).unwrap();
        let tree = CheckoutTree::scan(root, 1000).unwrap();
        assert_eq!(
            tree.directories().unwrap(),
            vec!["apps", "apps/a", "apps/b", "apps/b/c"]
        );
        assert_eq!(
            tree.files().unwrap(),
            vec!["apps/a/config.json", "link.json", "top.yaml"]
        );
        assert_eq!(tree.read_file("link.json", 10).unwrap(), b"{}");
        assert!(tree.read_file("top.yaml", 2).is_err(), "bounded");
        assert!(tree.read_file("../etc/passwd", 100).is_err());
        assert!(tree.read_file("/etc/passwd", 100).is_err());
    }

    #[test]
    fn escaping_symlink_refuses_the_whole_checkout() {
        let tmp = tempfile::tempdir().unwrap();
        fs::create_dir_all(tmp.path().join("repo/apps")).unwrap();
        symlink("/etc/passwd", tmp.path().join("repo/apps/passwd.json")).unwrap();
        let err = CheckoutTree::scan(&tmp.path().join("repo"), 1000).unwrap_err();
        assert!(err.contains("out-of-bounds symlink"), "{err}");
        assert!(
            !err.contains(tmp.path().to_str().unwrap()),
            "no absolute server path: {err}"
        );
    }

    #[test]
    fn scan_is_bounded() {
        let tmp = tempfile::tempdir().unwrap();
        for i in 0..20 {
            fs::write(tmp.path().join(format!("f{i}")), "").unwrap();
        }
        assert!(CheckoutTree::scan(tmp.path(), 5).is_err());
    }

    #[test]
    fn trees_record_misses_and_keep_errors() {
        let mut trees = CheckoutTrees::default();
        trees.insert("https://h/r", "HEAD", Err("unreachable".into()));
        assert_eq!(trees.tree("https://h/r", "HEAD").err().unwrap(), "unreachable");
        assert!(trees.tree("https://h/other", "main").is_err());
        let misses = trees.take_misses();
        assert_eq!(
            misses.into_iter().collect::<Vec<_>>(),
            vec![("https://h/other".to_owned(), "main".to_owned())]
        );
        assert!(trees.take_misses().is_empty());
    }
}
