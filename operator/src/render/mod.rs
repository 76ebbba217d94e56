//! Manifest rendering: turns one application directory of a checked-out repository into
//! Kubernetes objects, the way Argo CD's repo-server does (plain directory, Kustomize, Helm).
//!
//! Layout:
//! - [`detect`] picks the tool (explicit options win, then `Chart.yaml` / `kustomization.*`);
//! - [`directory`], [`kustomize`], [`helm`] render; Kustomize and Helm run as subprocesses
//!   through [`process`] (timeout, process-group kill, output cap, minimal environment);
//! - [`argv`] is the one place a tool's command line is built, with the rules that keep every field a
//!   user controls from becoming an option;
//! - [`paths`] confines every repository-supplied path to the checkout;
//! - [`yaml`] is the one Kubernetes YAML profile every renderer parses with;
//! - [`cache`] memoizes results under a SHA-256 of every render input.
//!
//! Option structs here mirror Argo CD's `ApplicationSource{Directory,Kustomize,Helm}` fields as
//! plain data so this module does not depend on the CRD types; the controller maps them.

pub mod argv;
pub mod cache;
pub mod detect;
pub mod directory;
pub mod helm;
pub mod kustomize;
pub mod paths;
pub mod process;
pub mod reads;
pub mod yaml;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use cache::{CacheKey, CachingRenderer, RenderCache};

/// The manifest generator used for an application.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Tool {
    Directory,
    Kustomize,
    Helm,
}

impl Tool {
    /// Stable name, as Argo CD spells the source type.
    pub fn as_str(self) -> &'static str {
        match self {
            Tool::Directory => "Directory",
            Tool::Kustomize => "Kustomize",
            Tool::Helm => "Helm",
        }
    }
}

/// Argo CD `spec.source.directory` (Jsonnet is not supported).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct DirectoryOptions {
    pub recurse: bool,
    pub include: String,
    pub exclude: String,
}

/// Argo CD `kustomize.replicas[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizeReplica {
    pub name: String,
    pub count: i64,
}

/// Argo CD `kustomize.patches[]` (copied verbatim into the kustomization's `patches`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizePatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub options: Option<BTreeMap<String, bool>>,
}

/// Argo CD `spec.source.kustomize`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KustomizeOptions {
    pub name_prefix: String,
    pub name_suffix: String,
    /// `[old=]new[:tag][@digest]`, as for `kustomize edit set image`.
    pub images: Vec<String>,
    pub common_labels: BTreeMap<String, String>,
    pub common_annotations: BTreeMap<String, String>,
    pub common_annotations_envsubst: bool,
    pub force_common_labels: bool,
    pub force_common_annotations: bool,
    pub label_without_selector: bool,
    pub label_include_templates: bool,
    pub namespace: String,
    pub replicas: Vec<KustomizeReplica>,
    pub components: Vec<String>,
    pub ignore_missing_components: bool,
    pub patches: Vec<KustomizePatch>,
}

/// Argo CD `helm.parameters[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmParameter {
    pub name: String,
    pub value: String,
    pub force_string: bool,
}

/// Argo CD `helm.fileParameters[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmFileParameter {
    pub name: String,
    pub path: String,
}

/// Argo CD `spec.source.helm`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct HelmOptions {
    pub release_name: String,
    pub value_files: Vec<String>,
    pub values: String,
    pub values_object: Option<Value>,
    pub parameters: Vec<HelmParameter>,
    pub file_parameters: Vec<HelmFileParameter>,
    pub skip_crds: bool,
    pub ignore_missing_value_files: bool,
    pub namespace: String,
    pub kube_version: String,
    pub api_versions: Vec<String>,
}

/// The tool-specific part of an application source. At most one block may be non-empty.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct SourceOptions {
    pub directory: Option<DirectoryOptions>,
    pub kustomize: Option<KustomizeOptions>,
    pub helm: Option<HelmOptions>,
}

/// Resource bounds for one render (safety rule: every input has a size bound, every call a timeout).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Limits {
    /// Combined size of manifest files read (directory) or of a tool's output.
    pub max_total_bytes: u64,
    /// Objects after `List` expansion.
    pub max_objects: usize,
    /// YAML/JSON nesting depth.
    pub max_depth: usize,
    /// Any single file read from the repository.
    pub max_file_bytes: u64,
    /// Files and directories walked in the checkout.
    pub max_files: usize,
    /// Bytes copied into the private working copy for Kustomize edits.
    pub max_copy_bytes: u64,
    /// Wall-clock bound on each subprocess.
    pub timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_total_bytes: 10 << 20,
            max_objects: 10_000,
            max_depth: 128,
            max_file_bytes: 10 << 20,
            max_files: 100_000,
            max_copy_bytes: 256 << 20,
            timeout: Duration::from_secs(90),
        }
    }
}

impl Limits {
    fn yaml(&self) -> yaml::YamlLimits {
        yaml::YamlLimits {
            max_depth: self.max_depth,
            max_bytes: usize::try_from(self.max_total_bytes).unwrap_or(usize::MAX),
        }
    }
}

/// How to run Kustomize: `kubectl kustomize DIR` (default) or `kustomize build DIR`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KustomizeBinary {
    pub program: PathBuf,
    /// Arguments before the directory (`["kustomize"]` or `["build"]`).
    pub args: Vec<String>,
    /// Arguments printing the version.
    pub version_args: Vec<String>,
}

impl Default for KustomizeBinary {
    fn default() -> Self {
        KustomizeBinary {
            program: PathBuf::from("kubectl"),
            args: vec!["kustomize".into()],
            version_args: vec!["version".into(), "--client".into()],
        }
    }
}

impl KustomizeBinary {
    /// The standalone `kustomize` binary at `program`.
    pub fn standalone(program: impl Into<PathBuf>) -> Self {
        KustomizeBinary {
            program: program.into(),
            args: vec!["build".into()],
            version_args: vec!["version".into()],
        }
    }
}

/// External tools and the `PATH` they run with.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Binaries {
    pub helm: PathBuf,
    pub kustomize: KustomizeBinary,
    /// `PATH` for subprocesses; `None` passes the operator's own `PATH` (and nothing else).
    pub path_env: Option<String>,
}

impl Default for Binaries {
    fn default() -> Self {
        Binaries {
            helm: PathBuf::from("helm"),
            kustomize: KustomizeBinary::default(),
            path_env: None,
        }
    }
}

/// Everything one render depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderRequest {
    /// The checkout of `repo_url` at `revision` (read only).
    pub checkout_root: PathBuf,
    /// `spec.source.path`, relative to the checkout root.
    pub app_path: String,
    pub repo_url: String,
    /// Resolved commit.
    pub revision: String,
    pub source: SourceOptions,
    /// Application name: the default Helm release name, `ARGOCD_APP_NAME`.
    pub app_name: String,
    /// Namespace the Application object lives in.
    pub app_namespace: String,
    /// Destination namespace: Helm's `--namespace` default, `ARGOCD_APP_NAMESPACE`.
    pub destination_namespace: String,
    pub limits: Limits,
    pub binaries: Binaries,
}

/// The result of a render.
#[derive(Clone, Debug, PartialEq)]
pub struct RenderOutput {
    pub objects: Vec<Value>,
    pub tool: Tool,
    pub tool_version: String,
    /// What the render read from the repository (decides whether a later commit needs a new one).
    pub reads: reads::ReadSet,
}

impl RenderOutput {
    /// Approximate memory footprint (serialized JSON size), used by the cache's byte budget.
    pub fn approx_bytes(&self) -> usize {
        struct Counter(usize);
        impl std::io::Write for Counter {
            fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
                self.0 += buf.len();
                Ok(buf.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let mut counter = Counter(0);
        for object in &self.objects {
            // Writing into a counter cannot fail; a failure would only undercount.
            let _ = serde_json::to_writer(&mut counter, object);
        }
        counter.0 + self.tool_version.len() + 64
    }
}

/// Stable error categories, for status conditions and metrics labels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCategory {
    PathEscape,
    InvalidPath,
    LimitExceeded,
    InvalidYaml,
    InvalidSpec,
    ToolFailed,
    Timeout,
    RemoteBaseForbidden,
    PluginForbidden,
    NotFound,
    Io,
}

impl ErrorCategory {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCategory::PathEscape => "PathEscape",
            ErrorCategory::InvalidPath => "InvalidPath",
            ErrorCategory::LimitExceeded => "LimitExceeded",
            ErrorCategory::InvalidYaml => "InvalidYaml",
            ErrorCategory::InvalidSpec => "InvalidSpec",
            ErrorCategory::ToolFailed => "ToolFailed",
            ErrorCategory::Timeout => "Timeout",
            ErrorCategory::RemoteBaseForbidden => "RemoteBaseForbidden",
            ErrorCategory::PluginForbidden => "PluginForbidden",
            ErrorCategory::NotFound => "NotFound",
            ErrorCategory::Io => "Io",
        }
    }
}

/// A render failure. Messages name repository-relative paths only; they never contain absolute
/// server paths, credentials or bytes of files outside the checkout.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// A path resolves outside the checkout (`..`, absolute path, escaping symlink).
    #[error("{0}")]
    PathEscape(String),
    /// A path is malformed (NUL byte) or loops.
    #[error("{0}")]
    InvalidPath(String),
    #[error("{0}")]
    LimitExceeded(String),
    #[error("{0}")]
    InvalidYaml(String),
    /// The application's options are contradictory or malformed.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{0}")]
    ToolFailed(String),
    #[error("{0}")]
    Timeout(String),
    #[error("{0}")]
    RemoteBaseForbidden(String),
    #[error("{0}")]
    PluginForbidden(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Io(String),
}

impl RenderError {
    pub fn category(&self) -> ErrorCategory {
        match self {
            RenderError::PathEscape(_) => ErrorCategory::PathEscape,
            RenderError::InvalidPath(_) => ErrorCategory::InvalidPath,
            RenderError::LimitExceeded(_) => ErrorCategory::LimitExceeded,
            RenderError::InvalidYaml(_) => ErrorCategory::InvalidYaml,
            RenderError::InvalidSpec(_) => ErrorCategory::InvalidSpec,
            RenderError::ToolFailed(_) => ErrorCategory::ToolFailed,
            RenderError::Timeout(_) => ErrorCategory::Timeout,
            RenderError::RemoteBaseForbidden(_) => ErrorCategory::RemoteBaseForbidden,
            RenderError::PluginForbidden(_) => ErrorCategory::PluginForbidden,
            RenderError::NotFound(_) => ErrorCategory::NotFound,
            RenderError::Io(_) => ErrorCategory::Io,
        }
    }

    /// Prefixes the message with context (e.g. the file it came from), keeping the category.
    pub fn context(self, prefix: &str) -> RenderError {
        let wrap = |m: String| format!("{prefix}: {m}");
        match self {
            RenderError::PathEscape(m) => RenderError::PathEscape(wrap(m)),
            RenderError::InvalidPath(m) => RenderError::InvalidPath(wrap(m)),
            RenderError::LimitExceeded(m) => RenderError::LimitExceeded(wrap(m)),
            RenderError::InvalidYaml(m) => RenderError::InvalidYaml(wrap(m)),
            RenderError::InvalidSpec(m) => RenderError::InvalidSpec(wrap(m)),
            RenderError::ToolFailed(m) => RenderError::ToolFailed(wrap(m)),
            RenderError::Timeout(m) => RenderError::Timeout(wrap(m)),
            RenderError::RemoteBaseForbidden(m) => RenderError::RemoteBaseForbidden(wrap(m)),
            RenderError::PluginForbidden(m) => RenderError::PluginForbidden(wrap(m)),
            RenderError::NotFound(m) => RenderError::NotFound(wrap(m)),
            RenderError::Io(m) => RenderError::Io(wrap(m)),
        }
    }
}

impl From<yaml::YamlError> for RenderError {
    fn from(e: yaml::YamlError) -> Self {
        match e {
            yaml::YamlError::Limit(m) => RenderError::LimitExceeded(m),
            yaml::YamlError::Syntax(m) => RenderError::InvalidYaml(m),
        }
    }
}

/// The resolved location of an application inside its checkout.
#[derive(Clone, Debug)]
pub struct AppLocation {
    /// Canonical checkout root.
    pub root: PathBuf,
    /// Application directory relative to `root` (lexically normalized, "" for the root).
    pub app_rel: PathBuf,
    /// Canonical application directory.
    pub app_dir: PathBuf,
}

/// Resolves and confines the application directory (no escape, must be a directory).
pub fn locate_app(req: &RenderRequest) -> Result<AppLocation, RenderError> {
    let root = paths::canonical_root(&req.checkout_root)?;
    let app_rel = paths::join_lexically(Path::new(""), &req.app_path, paths::AbsolutePaths::Reject)?;
    let app_dir = paths::resolve(&root, Path::new(""), &req.app_path, paths::AbsolutePaths::Reject)?;
    if !app_dir.is_dir() {
        return Err(RenderError::NotFound(format!(
            "application path {:?} is not a directory",
            req.app_path
        )));
    }
    Ok(AppLocation { root, app_rel, app_dir })
}

/// Turns parsed documents into objects: every document must be a Kubernetes object (mapping with
/// `apiVersion` and `kind`); `List` kinds are expanded into their items.
pub fn objects_from_documents(docs: Vec<Value>, source: &str, limits: &Limits) -> Result<Vec<Value>, RenderError> {
    let mut objects = Vec::with_capacity(docs.len());
    for doc in docs {
        if is_list(&doc) {
            let Value::Object(mut map) = doc else { continue };
            if let Some(Value::Array(items)) = map.remove("items") {
                for item in items {
                    objects.push(validate_object(item, source)?);
                    check_object_count(objects.len(), limits)?;
                }
            }
        } else {
            objects.push(validate_object(doc, source)?);
            check_object_count(objects.len(), limits)?;
        }
    }
    Ok(objects)
}

/// `kind: List` (or `FooList`) with an `items` array, as `kubectl` expands them.
fn is_list(doc: &Value) -> bool {
    let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("");
    kind.ends_with("List") && doc.get("items").is_some_and(Value::is_array)
}

fn validate_object(doc: Value, source: &str) -> Result<Value, RenderError> {
    let field = |name: &str| doc.get(name).and_then(Value::as_str).is_some_and(|s| !s.is_empty());
    if !doc.is_object() {
        return Err(RenderError::InvalidYaml(format!("{source}: document is not a mapping")));
    }
    if !field("apiVersion") || !field("kind") {
        return Err(RenderError::InvalidYaml(format!(
            "{source}: object is missing apiVersion or kind"
        )));
    }
    Ok(doc)
}

fn check_object_count(count: usize, limits: &Limits) -> Result<(), RenderError> {
    if count > limits.max_objects {
        return Err(RenderError::LimitExceeded(format!(
            "render produced more than {} objects",
            limits.max_objects
        )));
    }
    Ok(())
}

/// Runs blocking filesystem work off the async runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, RenderError> + Send + 'static,
) -> Result<T, RenderError> {
    tokio::task::spawn_blocking(f)
        .await
        .unwrap_or_else(|e| Err(RenderError::Io(format!("render task failed: {e}"))))
}

/// Renders applications; remembers tool versions (probing them costs a subprocess).
#[derive(Debug, Default)]
pub struct Renderer {
    versions: Mutex<HashMap<String, String>>,
}

impl Renderer {
    pub fn new() -> Self {
        Self::default()
    }

    /// Picks the tool for `req` (after confining its path).
    pub async fn detect(&self, req: &RenderRequest) -> Result<Tool, RenderError> {
        let req = req.clone();
        blocking(move || {
            let location = locate_app(&req)?;
            detect::detect(&req.source, &location.app_dir)
        })
        .await
    }

    /// The version string of `tool` as configured in `req`, probed once per binary.
    pub async fn tool_version(&self, tool: Tool, req: &RenderRequest) -> Result<String, RenderError> {
        let (memo_key, program, args) = match tool {
            Tool::Directory => return Ok(concat!("capstan-", env!("CARGO_PKG_VERSION")).to_string()),
            Tool::Helm => (
                format!("helm:{:?}", req.binaries.helm),
                req.binaries.helm.clone(),
                argv::helm_version(),
            ),
            Tool::Kustomize => {
                let k = &req.binaries.kustomize;
                (
                    format!("kustomize:{:?}:{:?}", k.program, k.version_args),
                    k.program.clone(),
                    k.version_args.clone(),
                )
            }
        };
        if let Some(v) = self.versions.lock().unwrap_or_else(|p| p.into_inner()).get(&memo_key) {
            return Ok(v.clone());
        }
        let version = process::probe_version(&program, &args, &req.binaries, &req.limits).await?;
        self.versions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(memo_key, version.clone());
        Ok(version)
    }

    /// Renders `req`, detecting the tool.
    pub async fn render(&self, req: &RenderRequest) -> Result<RenderOutput, RenderError> {
        let tool = self.detect(req).await?;
        let version = self.tool_version(tool, req).await?;
        self.render_with(req, tool, version).await
    }

    /// Renders `req` with an already detected tool and version.
    pub async fn render_with(
        &self,
        req: &RenderRequest,
        tool: Tool,
        tool_version: String,
    ) -> Result<RenderOutput, RenderError> {
        let owned = req.clone();
        let location = blocking(move || {
            let location = locate_app(&owned)?;
            // Argo CD's CheckOutOfBoundsSymlinks: refuse the whole checkout before any tool runs.
            paths::check_symlinks(&location.root, owned.limits.max_files)?;
            Ok(location)
        })
        .await?;
        let objects = match tool {
            Tool::Directory => {
                let (owned, location) = (req.clone(), location.clone());
                blocking(move || directory::render(&owned, &location)).await?
            }
            Tool::Kustomize => kustomize::render(req, &location).await?,
            Tool::Helm => helm::render(req, &location).await?,
        };
        let owned = req.clone();
        let reads = tokio::task::spawn_blocking(move || reads::detect(&owned, &location, tool))
            .await
            .unwrap_or_else(|e| reads::ReadSet::uncertain(format!("detecting the paths read failed: {e}")));
        Ok(RenderOutput {
            objects,
            tool,
            tool_version,
            reads,
        })
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Fixture helpers shared by the renderer tests.
    use super::*;
    use std::fs;

    /// Writes `files` (path, content) under `root`, creating directories.
    pub fn write_files(root: &Path, files: &[(&str, &str)]) {
        for (path, content) in files {
            let full = root.join(path);
            fs::create_dir_all(full.parent().unwrap()).unwrap();
            fs::write(full, content).unwrap();
        }
    }

    /// A request for `app_path` in `root` with default limits and binaries.
    pub fn request(root: &Path, app_path: &str, source: SourceOptions) -> RenderRequest {
        RenderRequest {
            checkout_root: root.to_path_buf(),
            app_path: app_path.to_string(),
            repo_url: "https://git.example.com/repo.git".into(),
            revision: "0123456789abcdef0123456789abcdef01234567".into(),
            source,
            app_name: "demo".into(),
            app_namespace: "capstan-system".into(),
            destination_namespace: "team-a".into(),
            limits: Limits::default(),
            binaries: Binaries::default(),
        }
    }

    /// `metadata.name` of each object.
    pub fn names(objects: &[Value]) -> Vec<String> {
        objects
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string())
            .collect()
    }

    /// The e2e `helm` stand-in script.
    pub fn helm_script() -> PathBuf {
        let in_workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../e2e/tools/helm");
        // When compiled from elsewhere via `#[path]`, `file!()` is absolute.
        let beside_sources = Path::new(file!()).ancestors().nth(4).map(|p| p.join("e2e/tools/helm"));
        [Some(in_workspace), beside_sources]
            .into_iter()
            .flatten()
            .find(|p| p.exists())
            .expect("e2e/tools/helm not found")
    }
}

#[cfg(test)]
mod tests {
    use super::testutil::*;
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_are_expanded_and_objects_validated() {
        let docs = vec![
            json!({"apiVersion": "v1", "kind": "List", "items": [
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}},
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}}]}),
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "c"}}),
        ];
        let objects = objects_from_documents(docs, "x.yaml", &Limits::default()).unwrap();
        assert_eq!(names(&objects), ["a", "b", "c"]);
        let err = objects_from_documents(vec![json!({"a": 1})], "x.yaml", &Limits::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::InvalidYaml);
        let err = objects_from_documents(vec![json!([1])], "x.yaml", &Limits::default()).unwrap_err();
        assert_eq!(err.category(), ErrorCategory::InvalidYaml);
    }

    #[test]
    fn object_count_is_bounded() {
        let limits = Limits {
            max_objects: 2,
            ..Limits::default()
        };
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap"});
        let docs = vec![obj.clone(), obj.clone(), obj];
        assert_eq!(
            objects_from_documents(docs, "x", &limits).unwrap_err().category(),
            ErrorCategory::LimitExceeded
        );
    }

    #[tokio::test]
    async fn app_path_escapes_are_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        write_files(
            &root,
            &[("app/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")],
        );
        write_files(
            tmp.path(),
            &[(
                "repo2/cm.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata: {name: SIBLING}\n",
            )],
        );
        let renderer = Renderer::new();
        for path in ["../repo2", "/etc", "app/../../repo2", "app\0x"] {
            let err = renderer
                .render(&request(&root, path, SourceOptions::default()))
                .await
                .unwrap_err();
            assert!(
                matches!(err.category(), ErrorCategory::PathEscape | ErrorCategory::InvalidPath),
                "{path}: {err}"
            );
            assert!(!err.to_string().contains("SIBLING"));
        }
        let out = renderer
            .render(&request(&root, "app", SourceOptions::default()))
            .await
            .unwrap();
        assert_eq!(names(&out.objects), ["a"]);
        assert_eq!(out.tool, Tool::Directory);
    }

    #[tokio::test]
    async fn symlinked_app_dir_outside_is_rejected() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        write_files(
            tmp.path(),
            &[(
                "outside/cm.yaml",
                "apiVersion: v1\nkind: Secret\nmetadata: {name: OUTSIDE}\n",
            )],
        );
        fs_create(&root);
        std::os::unix::fs::symlink(tmp.path().join("outside"), root.join("app")).unwrap();
        let err = Renderer::new()
            .render(&request(&root, "app", SourceOptions::default()))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        assert!(!err.to_string().contains("OUTSIDE"));
    }

    fn fs_create(p: &Path) {
        std::fs::create_dir_all(p).unwrap();
    }
}
