//! Which paths a commit range changed, read from the bare cache (no network).
//!
//! A monorepo push wakes every Application tracking the branch; each one asks whether the push
//! touched anything it reads. They all ask about the same `(from, to)` pair, so the answer is
//! remembered (a few pairs, most recent first) and the tree walk runs once per push, not once per
//! Application. Only trees are compared, never history: a shallow cache that still holds both
//! commits answers as well as a full one.

use std::collections::{BTreeSet, VecDeque};
use std::path::Path;
use std::sync::Mutex;

use super::{ChangedPaths, Commit, SourceError};

/// How many `(repository, from, to, max)` answers are remembered.
const MEMO_ENTRIES: usize = 32;

type MemoKey = (String, String, String, usize);

/// Remembered answers, most recent at the front.
#[derive(Debug, Default)]
pub struct DiffMemo(Mutex<VecDeque<(MemoKey, ChangedPaths)>>);

impl DiffMemo {
    /// The remembered answer for `key`, if any.
    pub fn get(&self, key: &MemoKey) -> Option<ChangedPaths> {
        let memo = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        memo.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone())
    }

    /// Remembers `value` for `key`, forgetting the oldest answer beyond the bound.
    pub fn put(&self, key: MemoKey, value: ChangedPaths) {
        let mut memo = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        memo.retain(|(k, _)| k != &key);
        memo.push_front((key, value));
        memo.truncate(MEMO_ENTRIES);
    }
}

/// The memo key of a question about `repo_dir`.
pub fn memo_key(repo_dir: &Path, from: &Commit, to: &Commit, max: usize) -> MemoKey {
    (
        repo_dir.to_string_lossy().into_owned(),
        from.sha().to_string(),
        to.sha().to_string(),
        max,
    )
}

/// Compares the trees of `from` and `to` in the bare repository at `repo_dir`.
pub fn changed_paths_blocking(
    repo_dir: &Path,
    from: &Commit,
    to: &Commit,
    max: usize,
) -> Result<ChangedPaths, SourceError> {
    let repo = git2::Repository::open_bare(repo_dir)
        .map_err(|_| SourceError::NotFound("repository has not been fetched yet".into()))?;
    let tree_of = |commit: &Commit| {
        git2::Oid::from_str(commit.sha())
            .and_then(|oid| repo.find_commit(oid))
            .and_then(|c| c.tree())
            .map_err(|_| SourceError::NotFound(format!("commit {commit} is not in the cache")))
    };
    let (old, new) = (tree_of(from)?, tree_of(to)?);
    let diff = repo
        .diff_tree_to_tree(Some(&old), Some(&new), None)
        .map_err(|e| SourceError::Internal(format!("comparing {from} with {to}: {}", e.message())))?;
    // A rename lists both sides; `max` bounds the delta count before any path is collected.
    if diff.deltas().len() > max {
        return Ok(ChangedPaths::TooMany);
    }
    let mut paths = BTreeSet::new();
    for delta in diff.deltas() {
        for file in [delta.old_file(), delta.new_file()] {
            if let Some(path) = file.path() {
                paths.insert(path.to_string_lossy().replace('\\', "/"));
            }
        }
    }
    if paths.len() > max {
        return Ok(ChangedPaths::TooMany);
    }
    Ok(ChangedPaths::Paths(paths.into_iter().collect()))
}
