//! The bound on a checkout: a commit's tree is measured in the cache before a byte of it is written.
//!
//! A fetch is capped by the bytes received, but Git compresses: a pack of a few kilobytes can hold a tree
//! whose files add up to gigabytes (one blob of zeros, or one blob named from many paths). Every checkout is
//! exported to the operator's disk, so without a bound a commit could fill the cache volume. The tree is
//! walked first, iteratively, reading each blob's size from its object header (no blob is inflated), and
//! the walk stops at the first entry past the bound: nothing is written then, and the cache stays as it
//! was.

use git2::{ObjectType, Oid, Repository, Tree};

use super::{Commit, SourceError};
use crate::text::short_sha;

/// Bounds on one exported tree (`--max-checkout-bytes`, `--max-checkout-files`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckoutLimits {
    /// The sum of the sizes of every file and symlink.
    pub max_bytes: u64,
    /// Files, symlinks and directories, counted per path.
    pub max_files: u64,
}

impl Default for CheckoutLimits {
    fn default() -> Self {
        CheckoutLimits {
            max_bytes: 1 << 30,
            max_files: 100_000,
        }
    }
}

/// What a tree holds, counted up to the first bound passed.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TreeSize {
    pub bytes: u64,
    pub files: u64,
}

/// Measures `tree` of `commit` against `limits`; the error says which bound and names its flag.
pub fn check_tree(
    repo: &Repository,
    tree: &Tree<'_>,
    commit: &Commit,
    limits: CheckoutLimits,
) -> Result<TreeSize, SourceError> {
    let odb = repo
        .odb()
        .map_err(|e| SourceError::Internal(format!("opening the object database: {}", e.message())))?;
    let mut size = TreeSize::default();
    let mut pending: Vec<Oid> = vec![tree.id()];
    while let Some(id) = pending.pop() {
        let tree = repo
            .find_tree(id)
            .map_err(|_| SourceError::NotFound(format!("a tree of commit {commit} is not in the cache")))?;
        for entry in tree.iter() {
            size.files += 1;
            match entry.kind() {
                Some(ObjectType::Tree) => pending.push(entry.id()),
                Some(ObjectType::Blob) => {
                    let (bytes, _) = odb
                        .read_header(entry.id())
                        .map_err(|_| SourceError::NotFound(format!("a file of commit {commit} is not in the cache")))?;
                    size.bytes = size.bytes.saturating_add(bytes as u64);
                }
                // A submodule (gitlink) is exported as an empty directory at most.
                _ => {}
            }
            exceeded(size, limits, commit)?;
        }
    }
    Ok(size)
}

fn exceeded(size: TreeSize, limits: CheckoutLimits, commit: &Commit) -> Result<(), SourceError> {
    let too_large = |what: String, flag: &str| {
        Err(SourceError::CheckoutTooLarge(format!(
            "commit {} holds more than {what} (the operator's {flag}); nothing was checked out",
            short_sha(commit.sha())
        )))
    };
    if size.files > limits.max_files {
        return too_large(
            format!("{} files and directories", limits.max_files),
            "--max-checkout-files",
        );
    }
    if size.bytes > limits.max_bytes {
        return too_large(format!("{} bytes", limits.max_bytes), "--max-checkout-bytes");
    }
    Ok(())
}
