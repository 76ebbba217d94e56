//! Path confinement: everything read from a repository stays inside its checkout.
//!
//! Argo CD's path advisories (GHSA-63qx, GHSA-6gcg, GHSA-q4w5, …) all come from joining a
//! repository-controlled string onto a directory and trusting the result. Here every such string
//! is first checked lexically (no NUL, no absolute path, no `..` that climbs above the root), then
//! resolved on disk with every symlink expanded, and the resolved path is compared with the
//! canonical root *component by component* — a string prefix test would accept `/w/repo2` as
//! being inside `/w/repo`.
//!
//! Error messages name only the repository-relative spelling the user wrote, never absolute server
//! paths and never the bytes of any file.

use std::fs;
use std::io::{ErrorKind, Read};
use std::path::{Component, Path, PathBuf};

use super::RenderError;

/// Directory names never walked: Git metadata is not repository content.
pub const SKIPPED_DIRS: &[&str] = &[".git"];

/// Canonicalizes the checkout root; all later checks compare against this form.
pub fn canonical_root(root: &Path) -> Result<PathBuf, RenderError> {
    fs::canonicalize(root)
        .map_err(|e| RenderError::NotFound(format!("repository checkout is not accessible: {}", e.kind())))
}

/// How a leading `/` in a repository-supplied path is treated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AbsolutePaths {
    /// Refuse it (application paths, kustomize inputs).
    Reject,
    /// Read it relative to the checkout root, as Argo CD does for Helm value files.
    RootRelative,
}

/// Lexically joins `raw` onto `base` (both relative to the root) and normalizes the result.
///
/// Pure: touches no file. Fails on NUL bytes, on absolute paths (unless root-relative is allowed)
/// and on any `..` that would climb above the root.
pub fn join_lexically(base: &Path, raw: &str, absolute: AbsolutePaths) -> Result<PathBuf, RenderError> {
    if raw.contains('\0') {
        return Err(RenderError::InvalidPath(format!(
            "path {:?} contains a NUL byte",
            raw.replace('\0', "\\0")
        )));
    }
    let raw_path = Path::new(raw);
    let mut parts: Vec<&std::ffi::OsStr> = Vec::new();
    if raw_path.has_root() {
        if absolute == AbsolutePaths::Reject {
            return Err(RenderError::PathEscape(format!(
                "path {raw:?} is absolute; only paths inside the repository are allowed"
            )));
        }
    } else {
        for component in base.components() {
            match component {
                Component::Normal(part) => parts.push(part),
                Component::CurDir => {}
                _ => return Err(RenderError::PathEscape(format!("base path {:?} is not relative", base))),
            }
        }
    }
    for component in raw_path.components() {
        match component {
            Component::Normal(part) => parts.push(part),
            Component::CurDir | Component::RootDir => {}
            Component::ParentDir => {
                if parts.pop().is_none() {
                    return Err(RenderError::PathEscape(format!(
                        "path {raw:?} resolves outside the repository root"
                    )));
                }
            }
            Component::Prefix(_) => {
                return Err(RenderError::PathEscape(format!(
                    "path {raw:?} is not a repository path"
                )));
            }
        }
    }
    Ok(parts.iter().collect())
}

/// Resolves `raw` (relative to the repository directory `base`) to a canonical path inside `root`.
///
/// `root` must be canonical. The target must exist; symlinks anywhere on the way are expanded and
/// the final location must stay inside `root`.
pub fn resolve(root: &Path, base: &Path, raw: &str, absolute: AbsolutePaths) -> Result<PathBuf, RenderError> {
    let relative = join_lexically(base, raw, absolute)?;
    let joined = root.join(&relative);
    let canonical = fs::canonicalize(&joined).map_err(|e| resolve_error(raw, &e))?;
    ensure_inside(root, &canonical, raw)?;
    Ok(canonical)
}

/// Checks that the canonical `path` lies inside the canonical `root` (component-wise).
pub fn ensure_inside(root: &Path, path: &Path, shown_as: &str) -> Result<(), RenderError> {
    if path.starts_with(root) {
        Ok(())
    } else {
        Err(RenderError::PathEscape(format!(
            "path {shown_as:?} resolves outside the repository root"
        )))
    }
}

/// Returns `path` relative to `root` for messages and cache keys ("." for the root itself).
pub fn relative_to(root: &Path, path: &Path) -> PathBuf {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => PathBuf::from("."),
        Ok(rel) => rel.to_path_buf(),
        Err(_) => PathBuf::from("<outside>"),
    }
}

fn resolve_error(raw: &str, err: &std::io::Error) -> RenderError {
    if is_symlink_loop(err) {
        return RenderError::InvalidPath(format!("path {raw:?} contains a symlink loop"));
    }
    match err.kind() {
        ErrorKind::NotFound => RenderError::NotFound(format!("path {raw:?} does not exist in the repository")),
        kind => RenderError::Io(format!("path {raw:?} cannot be resolved: {kind}")),
    }
}

fn is_symlink_loop(err: &std::io::Error) -> bool {
    err.raw_os_error() == Some(libc::ELOOP)
}

/// Rejects the whole checkout when any symlink in it points outside it or loops.
///
/// This mirrors Argo CD's `CheckOutOfBoundsSymlinks`: it runs before anything is rendered, so a
/// file that escapes can never be read by Capstan *or* by Helm/Kustomize, whichever file they
/// decide to open. Dangling symlinks are ignored (nothing can be read through them). Symlinked
/// directories are not followed; their target is checked like any other.
pub fn check_symlinks(root: &Path, max_entries: usize) -> Result<(), RenderError> {
    let mut pending = vec![root.to_path_buf()];
    let mut seen = 0usize;
    while let Some(dir) = pending.pop() {
        for entry in read_dir_sorted(&dir)? {
            seen += 1;
            if seen > max_entries {
                return Err(RenderError::LimitExceeded(format!(
                    "repository has more than {max_entries} files and directories"
                )));
            }
            let meta =
                fs::symlink_metadata(&entry).map_err(|e| RenderError::Io(format!("cannot stat: {}", e.kind())))?;
            let rel = relative_to(root, &entry);
            if meta.file_type().is_symlink() {
                check_one_symlink(root, &entry, &rel)?;
            } else if meta.is_dir() && !is_skipped_dir(&entry) {
                pending.push(entry);
            }
        }
    }
    Ok(())
}

fn check_one_symlink(root: &Path, link: &Path, rel: &Path) -> Result<(), RenderError> {
    match fs::canonicalize(link) {
        Ok(target) if target.starts_with(root) => Ok(()),
        Ok(_) => Err(RenderError::PathEscape(format!(
            "repository contains an out-of-bounds symlink at {:?}",
            rel.display().to_string()
        ))),
        Err(e) if is_symlink_loop(&e) => Err(RenderError::InvalidPath(format!(
            "repository contains a symlink loop at {:?}",
            rel.display().to_string()
        ))),
        Err(e) if e.kind() == ErrorKind::NotFound => Ok(()),
        Err(e) => Err(RenderError::Io(format!(
            "cannot resolve symlink {:?}: {}",
            rel.display().to_string(),
            e.kind()
        ))),
    }
}

/// True for directories that are never repository content (`.git`).
pub fn is_skipped_dir(path: &Path) -> bool {
    path.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| SKIPPED_DIRS.contains(&n))
}

/// Lists a directory in lexical order (the order Argo CD's `filepath.Walk` uses).
pub fn read_dir_sorted(dir: &Path) -> Result<Vec<PathBuf>, RenderError> {
    let entries = fs::read_dir(dir).map_err(|e| RenderError::Io(format!("cannot list directory: {}", e.kind())))?;
    let mut paths = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| RenderError::Io(format!("cannot list directory: {}", e.kind())))?;
        paths.push(entry.path());
    }
    paths.sort();
    Ok(paths)
}

/// Reads a (canonical, confined) file, refusing files larger than `max_bytes`.
///
/// The bound is enforced while reading, not only from metadata, so a file that grows after the
/// size check still cannot exceed it.
pub fn read_bounded(path: &Path, max_bytes: u64, shown_as: &str) -> Result<Vec<u8>, RenderError> {
    let file = fs::File::open(path).map_err(|e| RenderError::Io(format!("cannot open {shown_as:?}: {}", e.kind())))?;
    let mut buf = Vec::new();
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| RenderError::Io(format!("cannot read {shown_as:?}: {}", e.kind())))?;
    if buf.len() as u64 > max_bytes {
        return Err(RenderError::LimitExceeded(format!(
            "file {shown_as:?} exceeds the limit of {max_bytes} bytes"
        )));
    }
    Ok(buf)
}

/// Reads a confined file as UTF-8 text.
pub fn read_text(path: &Path, max_bytes: u64, shown_as: &str) -> Result<String, RenderError> {
    let bytes = read_bounded(path, max_bytes, shown_as)?;
    String::from_utf8(bytes).map_err(|_| RenderError::InvalidYaml(format!("file {shown_as:?} is not valid UTF-8")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::ErrorCategory;
    use std::os::unix::fs::symlink;

    fn setup() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        fs::create_dir_all(root.join("app/sub")).unwrap();
        fs::write(root.join("app/a.yaml"), "a: 1\n").unwrap();
        let root = fs::canonicalize(&root).unwrap();
        (tmp, root)
    }

    #[test]
    fn lexical_join_rules() {
        let base = Path::new("app");
        assert_eq!(
            join_lexically(base, "sub/../a.yaml", AbsolutePaths::Reject).unwrap(),
            PathBuf::from("app/a.yaml")
        );
        assert_eq!(
            join_lexically(base, "../other", AbsolutePaths::Reject).unwrap(),
            PathBuf::from("other")
        );
        assert_eq!(
            join_lexically(base, "../../x", AbsolutePaths::Reject)
                .unwrap_err()
                .category(),
            ErrorCategory::PathEscape
        );
        assert_eq!(
            join_lexically(base, "/etc/passwd", AbsolutePaths::Reject)
                .unwrap_err()
                .category(),
            ErrorCategory::PathEscape
        );
        assert_eq!(
            join_lexically(base, "/etc/passwd", AbsolutePaths::RootRelative).unwrap(),
            PathBuf::from("etc/passwd")
        );
        assert_eq!(
            join_lexically(base, "a\0b", AbsolutePaths::Reject)
                .unwrap_err()
                .category(),
            ErrorCategory::InvalidPath
        );
    }

    #[test]
    fn sibling_prefix_is_outside() {
        let (tmp, root) = setup();
        let sibling = tmp.path().join("repo2");
        fs::create_dir_all(&sibling).unwrap();
        fs::write(sibling.join("values.yaml"), "secret: SIBLING\n").unwrap();
        // Lexically: climbing above the root is refused.
        let err = resolve(&root, Path::new(""), "../repo2/values.yaml", AbsolutePaths::Reject).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        // Through a symlink: the canonical path /…/repo2 must not count as inside /…/repo.
        symlink(fs::canonicalize(&sibling).unwrap(), root.join("app/link")).unwrap();
        let err = resolve(&root, Path::new("app"), "link/values.yaml", AbsolutePaths::Reject).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        assert!(!err.to_string().contains("SIBLING"));
        assert_eq!(
            check_symlinks(&root, 1000).unwrap_err().category(),
            ErrorCategory::PathEscape
        );
    }

    #[test]
    fn resolve_inside_and_missing() {
        let (_tmp, root) = setup();
        assert_eq!(
            resolve(&root, Path::new("app"), "a.yaml", AbsolutePaths::Reject).unwrap(),
            root.join("app/a.yaml")
        );
        let err = resolve(&root, Path::new("app"), "nope.yaml", AbsolutePaths::Reject).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::NotFound);
        assert!(
            !err.to_string().contains(root.to_str().unwrap()),
            "no absolute server path in errors"
        );
    }

    #[test]
    fn symlink_loops_and_dangling_links() {
        let (_tmp, root) = setup();
        symlink("loop-b", root.join("app/loop-a")).unwrap();
        symlink("loop-a", root.join("app/loop-b")).unwrap();
        let err = resolve(&root, Path::new("app"), "loop-a", AbsolutePaths::Reject).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::InvalidPath);
        assert_eq!(
            check_symlinks(&root, 1000).unwrap_err().category(),
            ErrorCategory::InvalidPath
        );
        fs::remove_file(root.join("app/loop-a")).unwrap();
        fs::remove_file(root.join("app/loop-b")).unwrap();
        symlink("missing", root.join("app/dangling")).unwrap();
        assert!(check_symlinks(&root, 1000).is_ok());
    }

    #[test]
    fn in_bounds_symlink_chains_are_fine() {
        let (_tmp, root) = setup();
        let mut prev = "a.yaml".to_string();
        for i in 0..11 {
            let name = format!("chain{i}");
            symlink(&prev, root.join("app").join(&name)).unwrap();
            prev = name;
        }
        assert!(check_symlinks(&root, 1000).is_ok());
        assert_eq!(
            resolve(&root, Path::new("app"), &prev, AbsolutePaths::Reject).unwrap(),
            root.join("app/a.yaml")
        );
    }

    #[test]
    fn absolute_symlink_to_etc_passwd_is_rejected() {
        let (_tmp, root) = setup();
        symlink("/etc/passwd", root.join("app/passwd.yaml")).unwrap();
        let err = check_symlinks(&root, 1000).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        assert!(!err.to_string().contains("root:"));
    }

    #[test]
    fn bounded_reads() {
        let (_tmp, root) = setup();
        assert!(read_bounded(&root.join("app/a.yaml"), 5, "a.yaml").is_ok());
        assert_eq!(
            read_bounded(&root.join("app/a.yaml"), 4, "a.yaml")
                .unwrap_err()
                .category(),
            ErrorCategory::LimitExceeded
        );
    }

    #[test]
    fn walk_is_bounded() {
        let (_tmp, root) = setup();
        for i in 0..20 {
            fs::write(root.join(format!("f{i}")), "").unwrap();
        }
        assert_eq!(
            check_symlinks(&root, 10).unwrap_err().category(),
            ErrorCategory::LimitExceeded
        );
    }
}
