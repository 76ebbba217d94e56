//! The Git generator: parameter sets from the directories or files of a repository at a
//! revision, as Argo CD's `GitGenerator`.
//!
//! Git is read through [`GitTrees`]/[`GitTree`] so this module stays pure: the controller plugs
//! in the real source layer, tests use [`MemoryRepos`].
//!
//! Directories: every directory of the tree except hidden ones (any segment starting with `.`,
//! as Argo CD's repo-server skips them), matched with Go's `path.Match` (`*` stops at `/`); a
//! directory matching any `exclude: true` item is dropped even if another item includes it.
//! Parameters: `path`, `path.basename`, `path.basenameNormalized`, `path[n]` (flat) or
//! `.path.path`, `.path.basename`, `.path.basenameNormalized`, `.path.segments` (Go templates);
//! `pathParamPrefix` puts them under `<prefix>.path`.
//!
//! Files: tracked files matched as `git ls-files -- <pattern>` does, Argo CD's default globbing
//! (`*` and `?` also match `/`; a pattern without wildcards matches that file or everything
//! under that directory). Each file is YAML or JSON: an object gives one set, a list of objects
//! one set per item. Keys are flattened (`a.b.c`, `%v` values) for fasttemplate or kept nested
//! for Go templates, plus `path` (the file's directory), `path.basename`, `path.filename`,
//! `path.basenameNormalized`, `path.filenameNormalized`, `path[n]` / `.path.segments`.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::{append_values, Ctx};
use crate::api::application_set::GitGenerator;
use crate::appset::error::AppSetError;
use crate::appset::params::{flatten, normalize_numbers, sanitize_name, ParamSet};
use crate::appset::template::funcs::{path_base, path_dir};
use crate::appset::yaml;
use crate::glob::{glob_match, Glob, Options};
use crate::text::truncate;

/// One repository tree at one resolved revision. Paths are relative to the repository root,
/// `/`-separated, without a leading `/`.
pub trait GitTree {
    /// Every directory of the tree (not the root itself).
    fn directories(&self) -> Result<Vec<String>, String>;
    /// Every file (blob) of the tree.
    fn files(&self) -> Result<Vec<String>, String>;
    /// A file's bytes; an error when it is larger than `max_bytes` (without reading it all).
    fn read_file(&self, path: &str, max_bytes: usize) -> Result<Vec<u8>, String>;
}

/// Resolves a generator's `repoURL` and `revision` (`HEAD` when unset) to a tree.
pub trait GitTrees {
    /// The tree, or why it is not available (unknown repository, unresolved revision, ...).
    fn tree(&self, repo_url: &str, revision: &str) -> Result<&dyn GitTree, String>;
}

/// No repositories: every Git generator fails. For sets without Git generators.
pub struct NoGit;

impl GitTrees for NoGit {
    fn tree(&self, repo_url: &str, _revision: &str) -> Result<&dyn GitTree, String> {
        Err(format!("repository {repo_url} is not available"))
    }
}

/// An in-memory tree: files and their contents; directories are every file's ancestors.
#[derive(Clone, Debug, Default)]
pub struct MemoryTree {
    files: BTreeMap<String, Vec<u8>>,
    extra_dirs: BTreeSet<String>,
}

impl MemoryTree {
    /// A tree from `(path, contents)` pairs.
    pub fn new<P: Into<String>, C: Into<Vec<u8>>>(files: impl IntoIterator<Item = (P, C)>) -> Self {
        MemoryTree {
            files: files.into_iter().map(|(p, c)| (p.into(), c.into())).collect(),
            ..Default::default()
        }
    }

    /// Adds an (empty) directory.
    pub fn with_dir(mut self, dir: &str) -> Self {
        self.extra_dirs.insert(dir.to_owned());
        self
    }
}

impl GitTree for MemoryTree {
    fn directories(&self) -> Result<Vec<String>, String> {
        let mut dirs = self.extra_dirs.clone();
        for path in self.files.keys().chain(self.extra_dirs.iter()) {
            let mut current = path.as_str();
            while let Some(i) = current.rfind('/') {
                current = &current[..i];
                dirs.insert(current.to_owned());
            }
        }
        Ok(dirs.into_iter().collect())
    }

    fn files(&self) -> Result<Vec<String>, String> {
        Ok(self.files.keys().cloned().collect())
    }

    fn read_file(&self, path: &str, max_bytes: usize) -> Result<Vec<u8>, String> {
        let bytes = self.files.get(path).ok_or_else(|| format!("{path}: no such file"))?;
        if bytes.len() > max_bytes {
            return Err(format!(
                "{path} is {} bytes, over the limit of {max_bytes}",
                bytes.len()
            ));
        }
        Ok(bytes.clone())
    }
}

/// In-memory repositories keyed by (repoURL, revision).
#[derive(Clone, Debug, Default)]
pub struct MemoryRepos {
    trees: BTreeMap<(String, String), MemoryTree>,
}

impl MemoryRepos {
    /// Adds a tree for `repo_url` at `revision`.
    pub fn with(mut self, repo_url: &str, revision: &str, tree: MemoryTree) -> Self {
        self.trees.insert((repo_url.to_owned(), revision.to_owned()), tree);
        self
    }
}

impl GitTrees for MemoryRepos {
    fn tree(&self, repo_url: &str, revision: &str) -> Result<&dyn GitTree, String> {
        self.trees
            .get(&(repo_url.to_owned(), revision.to_owned()))
            .map(|t| t as &dyn GitTree)
            .ok_or_else(|| format!("repository {repo_url} at revision {revision} is not available"))
    }
}

/// The revision a generator reads: `revision`, or `HEAD` when unset or empty.
pub fn revision_of(gen: &GitGenerator) -> &str {
    gen.revision.as_deref().filter(|r| !r.is_empty()).unwrap_or("HEAD")
}

/// Directory or file parameter sets (directories win when both are set, as in Argo CD).
pub(crate) fn generate(gen: &GitGenerator, ctx: &Ctx<'_>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    if gen.directories.is_empty() && gen.files.is_empty() {
        return Err(AppSetError::InvalidSpec(format!("{path} needs directories or files")));
    }
    let revision = revision_of(gen);
    let tree = ctx
        .inputs
        .git
        .tree(&gen.repo_url, revision)
        .map_err(|e| git_error(gen, revision, &e))?;
    let scan = Scan {
        gen,
        tree,
        ctx,
        path,
        prefix: gen.path_param_prefix.as_deref().filter(|p| !p.is_empty()),
    };
    let mut sets = if gen.directories.is_empty() {
        file_sets(&scan)?
    } else {
        directory_sets(&scan)?
    };
    for set in &mut sets {
        append_values(&gen.values, set, ctx)?;
    }
    Ok(sets)
}

fn git_error(gen: &GitGenerator, revision: &str, error: &str) -> AppSetError {
    AppSetError::Git(truncate(&format!("{} at {revision}: {error}", gen.repo_url), 512))
}

/// One Git generator reading its tree: the generator, the tree at its revision, the generation context,
/// the generator's position (for errors) and its `pathParamPrefix`.
struct Scan<'a> {
    gen: &'a GitGenerator,
    tree: &'a dyn GitTree,
    ctx: &'a Ctx<'a>,
    path: &'a str,
    prefix: Option<&'a str>,
}

impl Scan<'_> {
    /// A failure to read the tree.
    fn tree_error(&self, error: String) -> AppSetError {
        git_error(self.gen, revision_of(self.gen), &error)
    }
}

// ---------------------------------------------------------------------------------------------
// Directories

fn directory_sets(scan: &Scan<'_>) -> Result<Vec<ParamSet>, AppSetError> {
    let Scan {
        gen, ctx, path, prefix, ..
    } = *scan;
    let mut dirs: Vec<String> = scan
        .tree
        .directories()
        .map_err(|e| scan.tree_error(e))?
        .into_iter()
        .filter(|d| !is_hidden(d))
        .collect();
    // The repo-server walks the tree depth first in lexical order of each level.
    dirs.sort_by(|a, b| a.split('/').cmp(b.split('/')));
    let mut sets = Vec::new();
    for dir in dirs {
        let mut included = false;
        let mut excluded = false;
        for item in &gen.directories {
            // Argo CD logs and skips a malformed pattern.
            if path_match(&item.path, &dir).unwrap_or(false) {
                if item.exclude {
                    excluded = true;
                } else {
                    included = true;
                }
            }
        }
        if included && !excluded {
            sets.push(path_params(&dir, None, prefix, ctx.renderer.is_go()));
            ctx.check_count(sets.len(), path)?;
        }
    }
    Ok(sets)
}

fn is_hidden(path: &str) -> bool {
    path.split('/').any(|seg| seg.starts_with('.'))
}

/// The path parameters of a directory (`file` = None) or of a file in directory `dir`.
fn path_params(dir: &str, file: Option<&str>, prefix: Option<&str>, go: bool) -> ParamSet {
    let basename = path_base(dir).to_owned();
    let mut fields: Vec<(&str, Value)> = vec![
        ("path", Value::String(dir.to_owned())),
        ("basename", Value::String(basename.clone())),
        ("basenameNormalized", Value::String(sanitize_name(&basename))),
    ];
    if let Some(file) = file {
        let filename = path_base(file).to_owned();
        fields.push(("filenameNormalized", Value::String(sanitize_name(&filename))));
        fields.push(("filename", Value::String(filename)));
    }
    let mut params = ParamSet::new();
    if go {
        let mut path_obj: Map<String, Value> = fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let segments = dir.split('/').map(|s| Value::String(s.to_owned())).collect();
        path_obj.insert("segments".to_owned(), Value::Array(segments));
        match prefix {
            Some(p) => {
                let mut wrapper = Map::new();
                wrapper.insert("path".to_owned(), Value::Object(path_obj));
                params.insert(p.to_owned(), Value::Object(wrapper));
            }
            None => {
                params.insert("path".to_owned(), Value::Object(path_obj));
            }
        }
        return params;
    }
    let name = prefix.map_or_else(|| "path".to_owned(), |p| format!("{p}.path"));
    for (k, v) in fields {
        let key = if k == "path" {
            name.clone()
        } else {
            format!("{name}.{k}")
        };
        params.insert(key, v);
    }
    for (i, seg) in dir.split('/').enumerate().filter(|(_, s)| !s.is_empty()) {
        params.insert(format!("{name}[{i}]"), Value::String(seg.to_owned()));
    }
    params
}

// ---------------------------------------------------------------------------------------------
// Files

fn file_sets(scan: &Scan<'_>) -> Result<Vec<ParamSet>, AppSetError> {
    let Scan {
        gen,
        tree,
        ctx,
        path,
        prefix,
    } = *scan;
    let all = tree.files().map_err(|e| scan.tree_error(e))?;
    let mut selected: BTreeSet<&str> = BTreeSet::new();
    for item in gen.files.iter().filter(|i| !i.exclude) {
        selected.extend(all.iter().map(String::as_str).filter(|f| pathspec_match(&item.path, f)));
    }
    for item in gen.files.iter().filter(|i| i.exclude) {
        selected.retain(|f| !pathspec_match(&item.path, f));
    }
    let limits = &ctx.inputs.limits;
    if selected.len() > limits.max_files {
        return Err(AppSetError::LimitExceeded(format!(
            "{path} matched {} files, over the limit of {}",
            selected.len(),
            limits.max_files
        )));
    }
    let mut sets = Vec::new();
    for file in selected {
        let bytes = tree
            .read_file(file, limits.max_file_bytes)
            .map_err(|e| scan.tree_error(e))?;
        let objects = parse_file(&bytes, limits.max_file_bytes)
            .map_err(|e| AppSetError::generator(path, format!("unable to process file '{file}': {e}")))?;
        for object in objects {
            sets.push(file_params(object, file, prefix, ctx.renderer.is_go()));
            ctx.check_count(sets.len(), path)?;
        }
    }
    Ok(sets)
}

/// A file is one object (an empty file is an empty object) or a list of objects.
fn parse_file(bytes: &[u8], max_bytes: usize) -> Result<Vec<ParamSet>, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "file is not UTF-8".to_owned())?;
    let mut value = yaml::parse(text, max_bytes)?;
    normalize_numbers(&mut value);
    match value {
        Value::Null => Ok(vec![ParamSet::new()]),
        Value::Object(map) => Ok(vec![map]),
        Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                Value::Object(map) => Ok(map),
                Value::Null => Ok(ParamSet::new()),
                _ => Err("a list item is not an object".to_owned()),
            })
            .collect(),
        _ => Err("the file is neither an object nor a list of objects".to_owned()),
    }
}

fn file_params(object: ParamSet, file: &str, prefix: Option<&str>, go: bool) -> ParamSet {
    let dir = path_dir(file);
    let mut params = if go {
        object
    } else {
        flatten(&object)
            .into_iter()
            .map(|(k, v)| (k, Value::String(v)))
            .collect()
    };
    params.extend(path_params(&dir, Some(file), prefix, go));
    params
}

// ---------------------------------------------------------------------------------------------
// Pattern matching

/// Go's `path.Match`: `*` matches any run of non-`/` characters, `?` one non-`/` character,
/// `[...]` a class (`^` negates), `\` escapes. A malformed pattern is an error.
pub fn path_match(pattern: &str, name: &str) -> Result<bool, String> {
    Glob::new(pattern, Options::PATH)
        .map(|g| g.matches(name))
        .map_err(|e| e.to_string())
}

/// `git ls-files -- <pattern>` matching (no pathspec magic): a pattern without wildcards names
/// a file or a directory prefix; otherwise `fnmatch` without `FNM_PATHNAME`, so `*` and `?`
/// also match `/` (the shared matcher's named [`Options::GIT_PATHSPEC`], Argo CD's default).
pub fn pathspec_match(pattern: &str, name: &str) -> bool {
    let pattern = pattern.strip_prefix("./").unwrap_or(pattern);
    if !pattern.contains(['*', '?', '[', '\\']) {
        let dir = pattern.trim_end_matches('/');
        return name == dir || name.starts_with(&format!("{dir}/"));
    }
    glob_match(pattern, name, Options::GIT_PATHSPEC)
}

/// The `(repoURL, revision)` pairs a set's Git generators name literally (templated ones, inside
/// a matrix, are left out), so a controller can fetch them before generating.
pub fn referenced_repositories(spec: &crate::api::application_set::ApplicationSetSpec) -> Vec<(String, String)> {
    let mut out = BTreeSet::new();
    let value = serde_json::to_value(&spec.generators).unwrap_or(Value::Null);
    let mut stack = vec![&value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::Object(git)) = map.get("git") {
                    let url = git.get("repoURL").and_then(Value::as_str).unwrap_or_default();
                    let rev = git
                        .get("revision")
                        .and_then(Value::as_str)
                        .filter(|r| !r.is_empty())
                        .unwrap_or("HEAD");
                    if !url.contains("{{") && !rev.contains("{{") {
                        out.insert((url.to_owned(), rev.to_owned()));
                    }
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items.iter()),
            _ => {}
        }
    }
    out.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_match_is_go_path_match() {
        assert!(path_match("apps/*", "apps/guestbook").unwrap());
        assert!(!path_match("apps/*", "apps/guestbook/base").unwrap());
        assert!(path_match("apps/[a-c]?", "apps/b1").unwrap());
        assert!(!path_match("apps/[^a-c]?", "apps/b1").unwrap());
        assert!(path_match("a\\*b", "a*b").unwrap());
        assert!(path_match("apps/[", "apps/x").is_err());
    }

    #[test]
    fn pathspec_match_is_git_ls_files() {
        assert!(pathspec_match(
            "cluster-config/**/config.json",
            "cluster-config/engineering/dev/config.json"
        ));
        assert!(pathspec_match("some-path/*.yaml", "some-path/deep/x.yaml"));
        assert!(!pathspec_match(
            "cluster-config/**/config.json",
            "cluster-config/config.json"
        ));
        assert!(pathspec_match("apps/config.json", "apps/config.json"));
        assert!(pathspec_match("apps", "apps/a/config.json"));
        assert!(!pathspec_match("apps", "apps2/config.json"));
    }

    #[test]
    fn hidden_directories_are_skipped() {
        assert!(is_hidden(".github/workflows"));
        assert!(is_hidden("apps/.cache"));
        assert!(!is_hidden("apps/guestbook"));
    }
}
