//! Plain-directory applications (Argo CD `directory` source type).
//!
//! Semantics follow Argo CD's `findManifests`: `.yaml`, `.yml` and `.json` files of the
//! application directory, subdirectories only with `recurse: true`, files in lexical walk order,
//! `include`/`exclude` globs matched against the path relative to the application directory with
//! exclude winning, symlinked files followed only while they stay inside the checkout (symlinked
//! directories are not walked), and the combined size of all files bounded *before* any is read.

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::paths;
use super::{objects_from_documents, yaml, AppLocation, DirectoryOptions, Limits, RenderError, RenderRequest};
use crate::glob::{Glob, Options};

/// Which files of the application directory are manifests. Pure.
pub struct FileFilter {
    include: Option<Glob>,
    exclude: Option<Glob>,
}

impl FileFilter {
    /// Compiles `include`/`exclude`; an empty pattern means "not set".
    pub fn new(options: &DirectoryOptions) -> Result<FileFilter, RenderError> {
        let compile = |p: &str, what: &str| -> Result<Option<Glob>, RenderError> {
            if p.is_empty() {
                return Ok(None);
            }
            Glob::new(p, Options::ARGO_DIRECTORY)
                .map(Some)
                .map_err(|e| RenderError::InvalidSpec(format!("directory.{what}: {e}")))
        };
        Ok(FileFilter {
            include: compile(&options.include, "include")?,
            exclude: compile(&options.exclude, "exclude")?,
        })
    }

    /// True when the file at `rel` (relative to the app directory, `/`-separated) is rendered.
    pub fn accepts(&self, rel: &str) -> bool {
        let file_name = rel.rsplit('/').next().unwrap_or(rel);
        if !is_manifest_name(file_name) {
            return false;
        }
        if self.exclude.as_ref().is_some_and(|g| g.matches(rel)) {
            return false;
        }
        self.include.as_ref().is_none_or(|g| g.matches(rel))
    }
}

/// Argo CD's `manifestFile` regex minus Jsonnet: `^.*\.(yaml|yml|json)$`, case-sensitive.
pub fn is_manifest_name(name: &str) -> bool {
    [".yaml", ".yml", ".json"].iter().any(|ext| name.ends_with(ext))
}

/// A manifest file chosen for rendering.
#[derive(Debug, Clone)]
pub struct ManifestFile {
    /// Path relative to the application directory (for messages and include/exclude).
    pub rel: String,
    /// Canonical path to read (the symlink target for symlinked files).
    pub path: PathBuf,
}

/// Renders a directory application.
pub fn render(req: &RenderRequest, location: &AppLocation) -> Result<Vec<Value>, RenderError> {
    let options = req.source.directory.clone().unwrap_or_default();
    let filter = FileFilter::new(&options)?;
    let files = collect_files(location, options.recurse, &filter, &req.limits)?;
    let mut objects = Vec::new();
    for file in files {
        let parsed = parse_file(&file, &req.limits).map_err(|e| e.context(&file.rel))?;
        objects.extend(parsed);
        if objects.len() > req.limits.max_objects {
            return Err(RenderError::LimitExceeded(format!(
                "render produced more than {} objects",
                req.limits.max_objects
            )));
        }
    }
    Ok(objects)
}

/// Walks the application directory (depth-first, lexical, without recursion on the Rust stack)
/// and returns the manifest files, checking counts and the combined size first.
pub fn collect_files(
    location: &AppLocation,
    recurse: bool,
    filter: &FileFilter,
    limits: &Limits,
) -> Result<Vec<ManifestFile>, RenderError> {
    let mut stack: Vec<PathBuf> = paths::read_dir_sorted(&location.app_dir)?.into_iter().rev().collect();
    let (mut seen, mut total) = (0usize, 0u64);
    let mut files = Vec::new();
    while let Some(entry) = stack.pop() {
        seen += 1;
        if seen > limits.max_files {
            return Err(RenderError::LimitExceeded(format!(
                "directory has more than {} entries",
                limits.max_files
            )));
        }
        let rel = rel_string(&location.app_dir, &entry);
        let meta =
            fs::symlink_metadata(&entry).map_err(|e| RenderError::Io(format!("cannot stat {rel:?}: {}", e.kind())))?;
        if meta.is_dir() {
            if recurse && !paths::is_skipped_dir(&entry) {
                stack.extend(paths::read_dir_sorted(&entry)?.into_iter().rev());
            }
            continue;
        }
        if !filter.accepts(&rel) {
            continue;
        }
        let Some((path, size)) = real_file(location, &entry, &rel, meta)? else {
            continue;
        };
        if size > limits.max_file_bytes {
            return Err(RenderError::LimitExceeded(format!(
                "file {rel:?} is {size} bytes, over the limit of {} bytes",
                limits.max_file_bytes
            )));
        }
        total = total.saturating_add(size);
        if total > limits.max_total_bytes {
            return Err(RenderError::LimitExceeded(format!(
                "exceeded max combined manifest file size of {} bytes",
                limits.max_total_bytes
            )));
        }
        files.push(ManifestFile { rel, path });
    }
    Ok(files)
}

/// Resolves a walked entry to the regular file to read, or `None` to skip it (dangling symlink,
/// symlink to a directory, special file). Symlinks leaving the checkout are an error.
fn real_file(
    location: &AppLocation,
    entry: &Path,
    rel: &str,
    meta: fs::Metadata,
) -> Result<Option<(PathBuf, u64)>, RenderError> {
    if meta.file_type().is_symlink() {
        let target = match fs::canonicalize(entry) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(_) => return Err(RenderError::InvalidPath(format!("symlink {rel:?} cannot be resolved"))),
        };
        if !target.starts_with(&location.root) {
            return Err(RenderError::PathEscape(format!(
                "illegal filepath in symlink at {rel:?}"
            )));
        }
        let target_meta =
            fs::metadata(&target).map_err(|e| RenderError::Io(format!("cannot stat {rel:?}: {}", e.kind())))?;
        return Ok(target_meta.is_file().then_some((target, target_meta.len())));
    }
    Ok(meta.is_file().then(|| (entry.to_path_buf(), meta.len())))
}

fn rel_string(base: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(base).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy())
        .collect::<Vec<_>>()
        .join("/")
}

/// Parses one manifest file: JSON files hold one object (or a `List`), YAML files a stream.
pub fn parse_file(file: &ManifestFile, limits: &Limits) -> Result<Vec<Value>, RenderError> {
    let text = paths::read_text(&file.path, limits.max_file_bytes, &file.rel)?;
    let docs = if file.rel.ends_with(".json") {
        vec![parse_json(&text, limits)?]
    } else {
        yaml::parse_stream(&text, &limits.yaml())?
    };
    objects_from_documents(docs, &file.rel, limits)
}

/// serde_json stops at 128 levels of nesting by itself; the profile's depth applies on top.
fn parse_json(text: &str, limits: &Limits) -> Result<Value, RenderError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        let message = crate::text::truncate(&e.to_string(), 300);
        if message.contains("recursion limit") {
            RenderError::LimitExceeded(format!("JSON nesting too deep: {message}"))
        } else {
            RenderError::InvalidYaml(format!("invalid JSON: {message}"))
        }
    })?;
    yaml::check_depth(&value, limits.max_depth)?;
    Ok(value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testutil::*;
    use crate::render::{locate_app, ErrorCategory, SourceOptions};
    use std::os::unix::fs::symlink;

    fn cm(name: &str) -> String {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n")
    }

    fn render_dir(root: &Path, app: &str, options: DirectoryOptions) -> Result<Vec<Value>, RenderError> {
        render_with_limits(root, app, options, Limits::default())
    }

    fn render_with_limits(
        root: &Path,
        app: &str,
        options: DirectoryOptions,
        limits: Limits,
    ) -> Result<Vec<Value>, RenderError> {
        let mut req = request(
            root,
            app,
            SourceOptions {
                directory: Some(options),
                ..Default::default()
            },
        );
        req.limits = limits;
        let location = locate_app(&req)?;
        paths::check_symlinks(&location.root, req.limits.max_files)?;
        render(&req, &location)
    }

    fn fixture() -> tempfile::TempDir {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[
                ("app/a.yaml", &cm("a")),
                ("app/b.yml", &cm("b")),
                (
                    "app/c.json",
                    r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}"#,
                ),
                ("app/notes.txt", "not a manifest"),
                ("app/sub/d.yaml", &cm("d")),
                ("app/sub/deeper/e.yaml", &cm("e")),
                ("app/secrets.yaml", &cm("secrets")),
            ],
        );
        tmp
    }

    #[test]
    fn non_recursive_by_default() {
        let tmp = fixture();
        let objects = render_dir(tmp.path(), "app", DirectoryOptions::default()).unwrap();
        assert_eq!(names(&objects), ["a", "b", "c", "secrets"]);
    }

    #[test]
    fn recurse_walks_in_lexical_order() {
        let tmp = fixture();
        let objects = render_dir(
            tmp.path(),
            "app",
            DirectoryOptions {
                recurse: true,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(names(&objects), ["a", "b", "c", "secrets", "d", "e"]);
    }

    #[test]
    fn include_exclude_with_alternation_exclude_wins() {
        let tmp = fixture();
        let opts = DirectoryOptions {
            recurse: true,
            include: "{*.yaml,*.json}".into(),
            exclude: "{secrets.yaml,*/deeper/*}".into(),
        };
        assert_eq!(names(&render_dir(tmp.path(), "app", opts).unwrap()), ["a", "c", "d"]);
        let opts = DirectoryOptions {
            recurse: true,
            include: "sub/*".into(),
            exclude: "sub/*".into(),
        };
        assert!(render_dir(tmp.path(), "app", opts).unwrap().is_empty());
    }

    #[test]
    fn multi_document_lists_and_empty_documents() {
        let tmp = tempfile::tempdir().unwrap();
        let stream = format!(
            "---\n{}---\n---\n# comment only\n---\napiVersion: v1\nkind: List\nitems:\n- {}\n- {}\n",
            cm("one"),
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: two}}",
            "{apiVersion: v1, kind: ConfigMap, metadata: {name: three}}"
        );
        write_files(tmp.path(), &[("app/all.yaml", &stream), ("app/empty.yaml", "")]);
        assert_eq!(
            names(&render_dir(tmp.path(), "app", Default::default()).unwrap()),
            ["one", "two", "three"]
        );
    }

    #[test]
    fn profile_applies_to_directory_files() {
        let tmp = tempfile::tempdir().unwrap();
        let yaml = "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  volumes:\n  - name: v\n    secret: {secretName: s, defaultMode: 0644, optional: yes}\n";
        write_files(tmp.path(), &[("app/p.yaml", yaml)]);
        let objects = render_dir(tmp.path(), "app", Default::default()).unwrap();
        assert_eq!(objects[0]["spec"]["volumes"][0]["secret"]["defaultMode"], 420);
        assert_eq!(objects[0]["spec"]["volumes"][0]["secret"]["optional"], true);
    }

    #[test]
    fn non_objects_are_errors_naming_the_file() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), &[("app/values.yaml", "replicas: 3\n")]);
        let err = render_dir(tmp.path(), "app", Default::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::InvalidYaml);
        assert!(err.to_string().starts_with("values.yaml:"), "{err}");
    }

    #[test]
    fn symlink_to_etc_passwd_is_rejected_without_leaking() {
        let tmp = fixture();
        symlink("/etc/passwd", tmp.path().join("app/passwd.yaml")).unwrap();
        let err = render_dir(tmp.path(), "app", Default::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        let passwd = fs::read_to_string("/etc/passwd").unwrap_or_default();
        for line in passwd.lines().filter(|l| l.len() > 4) {
            assert!(!err.to_string().contains(line));
        }
        // The file-level check holds even if the repository-wide check were skipped.
        let req = request(tmp.path(), "app", SourceOptions::default());
        let location = locate_app(&req).unwrap();
        let filter = FileFilter::new(&DirectoryOptions::default()).unwrap();
        let err = collect_files(&location, false, &filter, &Limits::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
    }

    #[test]
    fn relative_escaping_symlink_is_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[("outside.yaml", &cm("OUTSIDE")), ("repo/app/a.yaml", &cm("a"))],
        );
        symlink("../../outside.yaml", tmp.path().join("repo/app/x.yaml")).unwrap();
        let err = render_dir(&tmp.path().join("repo"), "app", Default::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        assert!(!err.to_string().contains("OUTSIDE"));
    }

    #[test]
    fn in_repo_symlinks_are_followed_and_dangling_ignored() {
        let tmp = fixture();
        symlink("sub/d.yaml", tmp.path().join("app/link.yaml")).unwrap();
        symlink("missing.yaml", tmp.path().join("app/dangling.yaml")).unwrap();
        assert_eq!(
            names(&render_dir(tmp.path(), "app", Default::default()).unwrap()),
            ["a", "b", "c", "d", "secrets"]
        );
    }

    #[test]
    fn combined_size_and_file_size_limits() {
        let tmp = fixture();
        let limits = Limits {
            max_total_bytes: 100,
            ..Limits::default()
        };
        let err = render_with_limits(tmp.path(), "app", Default::default(), limits).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded);
        assert!(err.to_string().contains("combined"));
        let limits = Limits {
            max_file_bytes: 10,
            ..Limits::default()
        };
        let err = render_with_limits(tmp.path(), "app", Default::default(), limits).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded);
    }

    #[test]
    fn symlink_to_a_large_in_repo_file_counts_its_target_size() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[("big/huge.txt", &"x".repeat(4096)), ("app/a.yaml", &cm("a"))],
        );
        symlink("../big/huge.txt", tmp.path().join("app/huge.yaml")).unwrap();
        let limits = Limits {
            max_total_bytes: 1024,
            ..Limits::default()
        };
        let err = render_with_limits(tmp.path(), "app", Default::default(), limits).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded);
    }

    #[test]
    fn object_count_limit_across_files() {
        let tmp = fixture();
        let limits = Limits {
            max_objects: 3,
            ..Limits::default()
        };
        let err = render_with_limits(tmp.path(), "app", Default::default(), limits).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded);
    }

    #[test]
    fn deep_yaml_and_json_are_clean_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let deep_yaml: String = std::iter::once("apiVersion: v1\nkind: X\nspec:\n".to_string())
            .chain((1..10_000).map(|i| format!("{}- \n", "  ".repeat(i))))
            .collect();
        let deep_json = format!(
            "{{\"apiVersion\":\"v1\",\"kind\":\"X\",\"spec\":{}{}}}",
            "[".repeat(10_000),
            "]".repeat(10_000)
        );
        write_files(tmp.path(), &[("y/deep.yaml", &deep_yaml), ("j/deep.json", &deep_json)]);
        for app in ["y", "j"] {
            let err = render_dir(tmp.path(), app, Default::default()).unwrap_err();
            assert_eq!(err.category(), ErrorCategory::LimitExceeded, "{app}: {err}");
        }
    }

    #[test]
    fn alias_bomb_is_a_clean_error() {
        let tmp = tempfile::tempdir().unwrap();
        let mut bomb = String::from("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: lol}\nx:\n  a: &a [lol,lol,lol,lol,lol,lol,lol,lol,lol]\n");
        let mut prev = "a".to_string();
        for n in ["b", "c", "d", "e", "f", "g", "h", "i"] {
            bomb.push_str(&format!("  {n}: &{n} [{}]\n", vec![format!("*{prev}"); 9].join(",")));
            prev = n.to_string();
        }
        write_files(tmp.path(), &[("app/bomb.yaml", &bomb)]);
        let err = render_dir(tmp.path(), "app", Default::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded, "{err}");
    }

    #[test]
    fn manifest_names() {
        assert!(is_manifest_name("a.yaml") && is_manifest_name("a.yml") && is_manifest_name("a.json"));
        assert!(!is_manifest_name("a.yaml.bak") && !is_manifest_name("a.YAML") && !is_manifest_name("a.jsonnet"));
    }
}
