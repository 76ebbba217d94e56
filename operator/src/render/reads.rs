//! What an application reads from its repository, and whether a commit touched it.
//!
//! A monorepo push wakes every Application tracking the branch. Re-rendering all of them for a
//! change to one directory is what makes Argo CD lag minutes behind large monorepos, so each render
//! also records its [`ReadSet`]: the repository paths the render depended on, found by Capstan
//! itself — the application path, Helm value and file-parameter files, and every directory a
//! kustomization reaches through `resources`, `bases`, `components`, patches and generator inputs,
//! followed recursively. When the next commit changes none of those paths, the previous render is
//! still the right one and is reused; [`decide`] is that pure decision.
//!
//! Argo CD's `argocd.argoproj.io/manifest-generate-paths` annotation, when set, replaces the
//! detected set with the paths it lists (Argo CD's semantics: `;`-separated, relative to the
//! application path, `.` is the application path itself, a leading `/` is relative to the
//! repository root, glob patterns allowed).
//!
//! Correctness comes first: whenever the detection cannot be sure — a symlink leading out of the
//! paths read, too many paths, a kustomization that cannot be read — the set is marked uncertain
//! and every commit re-renders, as does a commit whose list of changes was too long to compute.

use std::path::Path;

use super::paths::{self, AbsolutePaths};
use super::{helm, kustomize, AppLocation, RenderError, RenderRequest, Tool};
use crate::glob::{Glob, Options};

/// More read paths than this and the set is uncertain (a bound on the per-commit matching work).
pub const MAX_READ_PATHS: usize = 512;

/// The repository paths one render read (`/`-separated, relative to the checkout root, `""` is the
/// whole repository), or why they are not known.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadSet {
    /// Files or directories (a directory covers everything below it); sorted, none inside another.
    pub paths: Vec<String>,
    /// Set when the detection could not be sure: every change then counts.
    pub uncertain: Option<String>,
}

impl ReadSet {
    /// A set nothing can be skipped for.
    pub fn uncertain(reason: impl Into<String>) -> ReadSet {
        ReadSet {
            paths: Vec::new(),
            uncertain: Some(reason.into()),
        }
    }

    /// A known set of `paths` (normalized: sorted, deduplicated, nested paths folded into their parent).
    pub fn certain(paths: impl IntoIterator<Item = String>) -> ReadSet {
        let mut all: Vec<String> = paths.into_iter().map(|p| normalize(&p)).collect();
        all.sort();
        all.dedup();
        let mut folded: Vec<String> = Vec::with_capacity(all.len());
        for path in all {
            if !folded.iter().any(|parent| covers(parent, &path)) {
                folded.push(path);
            }
        }
        if folded.len() > MAX_READ_PATHS {
            return ReadSet::uncertain(format!("the application reads more than {MAX_READ_PATHS} paths"));
        }
        ReadSet {
            paths: folded,
            uncertain: None,
        }
    }
}

/// `.`, `./a/`, `a//b` → ``, `a`, `a/b`. Pure.
fn normalize(path: &str) -> String {
    path.split('/')
        .filter(|part| !part.is_empty() && *part != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// Whether the read path `read` covers the repository file `file` (itself, or inside it). Pure.
fn covers(read: &str, file: &str) -> bool {
    read.is_empty() || file == read || file.strip_prefix(read).is_some_and(|rest| rest.starts_with('/'))
}

/// What a commit means for one application's last render.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing the application reads changed: the previous render stands.
    Unchanged,
    /// Render again, and why (for the debug log).
    Render(String),
}

/// Decides whether a commit that changed `changed` (`None`: unknown or too many) touched what an
/// application at `app_path` reads: the `manifest-generate-paths` annotation when set, otherwise
/// the detected `reads`. Pure.
pub fn decide(reads: &ReadSet, generate_paths: Option<&str>, app_path: &str, changed: Option<&[String]>) -> Verdict {
    let Some(changed) = changed else {
        return Verdict::Render("the commit's changes are unknown or too many".into());
    };
    let patterns = match generate_paths {
        Some(annotation) => match annotation_paths(annotation, app_path) {
            Ok(p) => p,
            Err(e) => return Verdict::Render(format!("manifest-generate-paths: {e}")),
        },
        None => match &reads.uncertain {
            Some(reason) => return Verdict::Render(reason.clone()),
            None => reads.paths.iter().map(|p| ReadPattern::Path(p.clone())).collect(),
        },
    };
    match changed.iter().find(|file| patterns.iter().any(|p| p.matches(file))) {
        Some(file) => Verdict::Render(format!("{file} changed")),
        None => Verdict::Unchanged,
    }
}

/// One entry of the annotation: a path (covering what is below it) or a glob pattern.
#[derive(Debug)]
enum ReadPattern {
    Path(String),
    Glob(Glob),
}

impl ReadPattern {
    fn matches(&self, file: &str) -> bool {
        match self {
            ReadPattern::Path(p) => covers(p, file),
            // The glob's `*` also crosses `/`: a broader match only ever renders more.
            ReadPattern::Glob(g) => g.matches(file),
        }
    }
}

/// Parses `manifest-generate-paths` as Argo CD does. An entry climbing above the repository root is
/// an error (the caller re-renders). Pure.
fn annotation_paths(annotation: &str, app_path: &str) -> Result<Vec<ReadPattern>, RenderError> {
    let app = paths::join_lexically(Path::new(""), app_path, AbsolutePaths::Reject)?;
    let mut out = Vec::new();
    for raw in annotation.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let joined = paths::join_lexically(&app, raw, AbsolutePaths::RootRelative)?;
        let path = normalize(&joined.to_string_lossy());
        if raw.contains(['*', '?', '[', '{']) {
            let glob =
                Glob::new(&path, Options::ARGO_DIRECTORY).map_err(|e| RenderError::InvalidPath(e.to_string()))?;
            out.push(ReadPattern::Glob(glob));
        } else {
            out.push(ReadPattern::Path(path));
        }
    }
    Ok(out)
}

/// Detects what rendering `req` with `tool` reads (blocking file-system work; never fails: what it
/// cannot establish makes the set uncertain).
pub fn detect(req: &RenderRequest, location: &AppLocation, tool: Tool) -> ReadSet {
    match detect_paths(req, location, tool) {
        Ok(found) => {
            let set = ReadSet::certain(found);
            match set.uncertain {
                Some(_) => set,
                None => match symlink_out_of(location, &set.paths, req.limits.max_files) {
                    Some(link) => ReadSet::uncertain(format!("{link} is a symlink out of the paths read")),
                    None => set,
                },
            }
        }
        Err(e) => ReadSet::uncertain(format!("the paths read could not be established: {e}")),
    }
}

fn detect_paths(req: &RenderRequest, location: &AppLocation, tool: Tool) -> Result<Vec<String>, RenderError> {
    let rel = |p: &Path| paths::relative_to(&location.root, p).to_string_lossy().into_owned();
    let mut found = vec![location.app_rel.to_string_lossy().into_owned()];
    match tool {
        Tool::Directory => {}
        Tool::Helm => {
            let options = req.source.helm.clone().unwrap_or_default();
            for file in helm::resolve_value_files(location, &options, &req.limits)? {
                found.push(rel(&file));
            }
            // Also the spelled paths: a missing file (`ignoreMissingValueFiles`) read once it is
            // added, and the directory a glob lists (a new match is a change inside it).
            for raw in &options.value_files {
                found.push(spelled(location, glob_free_prefix(raw), AbsolutePaths::RootRelative)?);
            }
            for (_, file) in helm::resolve_file_parameters(location, &options, &req.limits)? {
                found.push(rel(&file));
            }
        }
        Tool::Kustomize => {
            let options = req.source.kustomize.clone().unwrap_or_default();
            // A component missing today (`ignoreMissingComponents`) is read once it is added.
            for raw in &options.components {
                found.push(spelled(location, raw, AbsolutePaths::Reject)?);
            }
            for dir in kustomize::read_dirs(location, &options, &req.limits)? {
                found.push(dir.to_string_lossy().into_owned());
            }
        }
    }
    Ok(found)
}

/// `raw`, relative to the application path, as a repository path (lexically; it need not exist).
fn spelled(location: &AppLocation, raw: &str, absolute: AbsolutePaths) -> Result<String, RenderError> {
    let joined = paths::join_lexically(&location.app_rel, raw, absolute)?;
    Ok(joined.to_string_lossy().into_owned())
}

/// The segments of `raw` before its first glob segment (`env/*.yaml` → `env`). Pure.
fn glob_free_prefix(raw: &str) -> &str {
    match raw.find(['*', '?', '[', '{']) {
        Some(at) => raw[..at].rfind('/').map_or("", |slash| &raw[..slash]),
        None => raw,
    }
}

/// The first symlink under the read paths whose target lies outside all of them (the render reads
/// through it, so a change at the target would go unseen), bounded by `max_entries`.
fn symlink_out_of(location: &AppLocation, reads: &[String], max_entries: usize) -> Option<String> {
    let mut pending: Vec<_> = reads.iter().map(|r| location.root.join(r)).collect();
    let mut seen = 0usize;
    while let Some(path) = pending.pop() {
        seen += 1;
        if seen > max_entries {
            return Some("a read directory with too many entries".into());
        }
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.file_type().is_symlink() {
            let target = std::fs::canonicalize(&path).ok();
            let inside = target
                .as_deref()
                .and_then(|t| t.strip_prefix(&location.root).ok())
                .map(|t| normalize(&t.to_string_lossy()))
                .is_some_and(|t| reads.iter().any(|r| covers(r, &t)));
            if !inside {
                return Some(paths::relative_to(&location.root, &path).display().to_string());
            }
        } else if meta.is_dir() {
            let entries = paths::read_dir_sorted(&path).ok()?;
            pending.extend(entries.into_iter().filter(|e| {
                e.file_name()
                    .is_none_or(|n| !paths::SKIPPED_DIRS.contains(&n.to_string_lossy().as_ref()))
            }));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(paths: &[&str]) -> ReadSet {
        ReadSet::certain(paths.iter().map(|p| p.to_string()))
    }

    fn changed(files: &[&str]) -> Vec<String> {
        files.iter().map(|f| f.to_string()).collect()
    }

    #[test]
    fn read_sets_are_normalized() {
        assert_eq!(
            set(&["apps/a/", "./apps/a/sub", "base", "base/x.yaml"]).paths,
            ["apps/a", "base"]
        );
        assert_eq!(set(&[".", "apps/a"]).paths, [""]);
        assert!(ReadSet::certain((0..=MAX_READ_PATHS).map(|i| format!("p{i}")))
            .uncertain
            .is_some());
    }

    #[test]
    fn decision_table() {
        let reads = set(&["apps/a", "base/common", "values/prod.yaml"]);
        let unchanged = Verdict::Unchanged;
        let cases: &[(&str, Option<&str>, &[&str], bool)] = &[
            // (case, annotation, changed files, renders)
            ("own path", None, &["apps/a/deploy.yaml"], true),
            ("own path, nested", None, &["apps/a/x/y.yaml"], true),
            ("sibling with a shared prefix", None, &["apps/ab/deploy.yaml"], false),
            ("another app", None, &["apps/b/deploy.yaml"], false),
            ("a shared base", None, &["base/common/kustomization.yaml"], true),
            ("a value file", None, &["values/prod.yaml"], true),
            ("another value file", None, &["values/dev.yaml"], false),
            ("no change at all", None, &[], false),
            ("annotation `.` is the app path", Some("."), &["apps/a/x.yaml"], true),
            (
                "annotation replaces detection",
                Some("."),
                &["base/common/k.yaml"],
                false,
            ),
            (
                "annotation relative path",
                Some("../common"),
                &["apps/common/cm.yaml"],
                true,
            ),
            ("annotation absolute path", Some("/global;."), &["global/cm.yaml"], true),
            (
                "annotation absolute misses",
                Some("/global"),
                &["apps/a/cm.yaml"],
                false,
            ),
            ("annotation glob", Some("/env/*.yaml"), &["env/prod.yaml"], true),
            ("annotation empty entries", Some(" ; .;"), &["apps/a/cm.yaml"], true),
            ("annotation escaping the repository", Some("../../.."), &["x"], true),
        ];
        for (case, annotation, files, renders) in cases {
            let verdict = decide(&reads, *annotation, "apps/a", Some(&changed(files)));
            assert_eq!(verdict != unchanged, *renders, "{case}: {verdict:?}");
        }
    }

    fn detected(files: &[(&str, &str)], app: &str, tool: Tool, source: crate::render::SourceOptions) -> ReadSet {
        use crate::render::testutil::{request, write_files};
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), files);
        let req = request(tmp.path(), app, source);
        let location = crate::render::locate_app(&req).unwrap();
        detect(&req, &location, tool)
    }

    #[test]
    fn kustomize_bases_and_components_are_found_recursively() {
        let files = [
            (
                "overlays/prod/kustomization.yaml",
                "resources: [../../base/app]\ncomponents: [../../components/x]\n",
            ),
            ("base/app/kustomization.yaml", "resources: [../common, deploy.yaml]\n"),
            ("base/app/deploy.yaml", "kind: ConfigMap\n"),
            ("base/common/kustomization.yaml", "resources: [cm.yaml]\n"),
            ("base/common/cm.yaml", "kind: ConfigMap\n"),
            ("components/x/kustomization.yaml", "kind: Component\n"),
            ("unrelated/cm.yaml", "kind: ConfigMap\n"),
        ];
        let reads = detected(&files, "overlays/prod", Tool::Kustomize, Default::default());
        assert_eq!(reads.uncertain, None);
        assert_eq!(
            reads.paths,
            ["base/app", "base/common", "components/x", "overlays/prod"]
        );
    }

    #[test]
    fn helm_value_files_inside_the_repository_are_found() {
        let files = [
            ("charts/web/Chart.yaml", "apiVersion: v2\nname: web\nversion: 0.1.0\n"),
            ("envs/prod/values.yaml", "replicas: 2\n"),
        ];
        let source = crate::render::SourceOptions {
            helm: Some(crate::render::HelmOptions {
                value_files: vec!["../../envs/prod/values.yaml".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let reads = detected(&files, "charts/web", Tool::Helm, source);
        assert_eq!(reads.paths, ["charts/web", "envs/prod/values.yaml"]);
        // A missing file that may be ignored, and a glob's directory, count as read too.
        let source = crate::render::SourceOptions {
            helm: Some(crate::render::HelmOptions {
                value_files: vec!["/envs/prod/*.yaml".into(), "/envs/later.yaml".into()],
                ignore_missing_value_files: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        let reads = detected(&files, "charts/web", Tool::Helm, source);
        assert_eq!(reads.paths, ["charts/web", "envs/later.yaml", "envs/prod"]);
        assert_eq!(glob_free_prefix("a/b*/c"), "a");
        assert_eq!(glob_free_prefix("*.yaml"), "");
    }

    #[test]
    fn a_symlink_out_of_the_paths_read_makes_the_set_uncertain() {
        use crate::render::testutil::{request, write_files};
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[
                ("app/cm.yaml", "kind: ConfigMap\n"),
                ("other/x.yaml", "kind: ConfigMap\n"),
            ],
        );
        std::os::unix::fs::symlink("../other/x.yaml", tmp.path().join("app/x.yaml")).unwrap();
        let req = request(tmp.path(), "app", Default::default());
        let location = crate::render::locate_app(&req).unwrap();
        let reads = detect(&req, &location, Tool::Directory);
        assert!(
            reads.uncertain.as_deref().is_some_and(|r| r.contains("app/x.yaml")),
            "{reads:?}"
        );
        // Inside the paths read, a symlink is harmless.
        std::fs::remove_file(tmp.path().join("app/x.yaml")).unwrap();
        std::os::unix::fs::symlink("cm.yaml", tmp.path().join("app/y.yaml")).unwrap();
        assert_eq!(detect(&req, &location, Tool::Directory).paths, ["app"]);
    }

    #[test]
    fn uncertainty_always_renders() {
        let verdict = decide(&ReadSet::uncertain("remote"), None, "a", Some(&changed(&["b/x"])));
        assert_eq!(verdict, Verdict::Render("remote".into()));
        assert!(matches!(decide(&set(&["a"]), None, "a", None), Verdict::Render(_)));
        // The annotation is the user's declaration: it applies even when detection was unsure.
        let verdict = decide(&ReadSet::uncertain("remote"), Some("."), "a", Some(&changed(&["b/x"])));
        assert_eq!(verdict, Verdict::Unchanged);
    }
}
