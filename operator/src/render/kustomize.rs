//! Kustomize applications: `kubectl kustomize DIR` or `kustomize build DIR`.
//!
//! Argo CD applies the Application's kustomize options by running `kustomize edit set
//! nameprefix|namesuffix|image|replicas|namespace`, `edit add label|annotation|component` and by
//! appending `patches`, all on the kustomization file, then builds. `kubectl kustomize` has no
//! `edit`, so the same edits are made here directly on the parsed kustomization (same field
//! semantics: `namePrefix` replaced, images merged by name, labels refused when already present
//! unless forced), written into a private copy of the relevant part of the checkout.
//!
//! Before anything runs, every kustomization reachable from the application (through
//! `resources`, `bases`, `components`, generator/transformer directories) is read and vetted:
//! every referenced path must exist inside the checkout, so a remote base can never be fetched
//! (kustomize only goes remote when a local path does not exist) and `../../outside` or
//! `/var/run/secrets/...` never reach the tool; `helmCharts`/`helmGlobals` and KRM functions
//! (exec/container/starlark) or other non-builtin plugins are refused. The build then runs with
//! `--load-restrictor LoadRestrictionsRootOnly` and without `--enable-alpha-plugins`,
//! `--enable-exec` or `--enable-helm`.

use std::collections::{HashSet, VecDeque};
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use super::paths::{self, AbsolutePaths};
use super::process::{self, PrivateDir};
use super::{yaml, AppLocation, KustomizeOptions, KustomizeReplica, Limits, RenderError, RenderRequest};

/// File names kustomize recognizes, in its lookup order.
pub const KUSTOMIZATION_FILES: [&str; 3] = ["kustomization.yaml", "kustomization.yml", "Kustomization"];

/// Upper bound on kustomizations visited from one application (cycles are cut by a visited set).
const MAX_KUSTOMIZATIONS: usize = 1000;

/// Annotations that declare a KRM function (exec, container or starlark).
const FUNCTION_ANNOTATIONS: [&str; 2] = ["config.kubernetes.io/function", "config.k8s.io/function"];

/// Fields that make kustomize inflate Helm charts (and honour a repository-supplied Helm home).
const HELM_FIELDS: [&str; 3] = ["helmCharts", "helmGlobals", "helmChartInflationGenerator"];

// ---------------------------------------------------------------------------------------------
// Argo-style edits (pure)
// ---------------------------------------------------------------------------------------------

/// Variables Argo CD substitutes into labels/annotations/images (`$ARGOCD_APP_NAME`, …).
#[derive(Clone, Debug, Default)]
pub struct BuildEnv(pub Vec<(String, String)>);

impl BuildEnv {
    /// Argo CD's build environment for `req`.
    pub fn for_request(req: &RenderRequest) -> BuildEnv {
        let short = |n: usize| req.revision.chars().take(n).collect::<String>();
        BuildEnv(vec![
            ("ARGOCD_APP_NAME".into(), req.app_name.clone()),
            ("ARGOCD_APP_NAMESPACE".into(), req.destination_namespace.clone()),
            ("ARGOCD_APP_REVISION".into(), req.revision.clone()),
            ("ARGOCD_APP_REVISION_SHORT".into(), short(crate::text::SHORT_SHA_LEN)),
            ("ARGOCD_APP_REVISION_SHORT_8".into(), short(8)),
            ("ARGOCD_APP_SOURCE_REPO_URL".into(), req.repo_url.clone()),
            ("ARGOCD_APP_SOURCE_PATH".into(), req.app_path.clone()),
            ("ARGOCD_APP_SOURCE_TARGET_REVISION".into(), req.revision.clone()),
        ])
    }

    fn get(&self, name: &str) -> &str {
        self.0.iter().find(|(k, _)| k == name).map_or("", |(_, v)| v.as_str())
    }
}

/// Go's `os.Expand` with Argo CD's mapping: `$VAR`/`${VAR}` replaced (unknown → empty), `$$` → `$`.
pub fn envsubst(input: &str, env: &BuildEnv) -> String {
    let chars: Vec<char> = input.chars().collect();
    let mut out = String::with_capacity(input.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '$' || i + 1 == chars.len() {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let next = chars[i + 1];
        if next == '{' {
            match chars[i + 2..].iter().position(|&c| c == '}') {
                Some(len) => {
                    let name: String = chars[i + 2..i + 2 + len].iter().collect();
                    out.push_str(lookup(&name, env));
                    i += len + 3;
                }
                None => {
                    out.push('$');
                    i += 1;
                }
            }
        } else if "*#$@!?-".contains(next) || next.is_ascii_digit() {
            out.push_str(lookup(&next.to_string(), env));
            i += 2;
        } else if next.is_ascii_alphanumeric() || next == '_' {
            let len = chars[i + 1..]
                .iter()
                .take_while(|c| c.is_ascii_alphanumeric() || **c == '_')
                .count();
            let name: String = chars[i + 1..i + 1 + len].iter().collect();
            out.push_str(lookup(&name, env));
            i += len + 1;
        } else {
            out.push('$');
            i += 1;
        }
    }
    out
}

fn lookup<'a>(name: &str, env: &'a BuildEnv) -> &'a str {
    if name == "$" {
        "$"
    } else {
        env.get(name)
    }
}

/// True when the options ask for any change to the kustomization.
pub fn has_edits(o: &KustomizeOptions) -> bool {
    !(o.name_prefix.is_empty()
        && o.name_suffix.is_empty()
        && o.images.is_empty()
        && o.common_labels.is_empty()
        && o.common_annotations.is_empty()
        && o.namespace.is_empty()
        && o.replicas.is_empty()
        && o.components.is_empty()
        && o.patches.is_empty())
}

/// Parses an image argument like `kustomize edit set image`:
/// `old=new[:tag|@digest]`, `name:tag`, `name@digest`.
pub fn parse_image(arg: &str) -> Result<Map<String, Value>, RenderError> {
    let invalid = || RenderError::InvalidSpec(format!("kustomize image {arg:?} is not [old=]new[:tag|@digest]"));
    let (old, rest) = match arg.split('=').collect::<Vec<_>>().as_slice() {
        [old, rest] => (Some(*old), *rest),
        _ => (None, arg),
    };
    let (image, tag, digest) = if let Some((image, digest)) = rest.split_once('@') {
        (image, None, Some(digest))
    } else if let Some((image, tag)) = rest.rsplit_once(':').filter(|(_, t)| is_tag(t)) {
        (image, Some(tag), None)
    } else if old.is_some() && !rest.is_empty() {
        (rest, None, None)
    } else {
        return Err(invalid());
    };
    let mut entry = Map::new();
    match old {
        Some(old) if !old.is_empty() => {
            entry.insert("name".into(), old.into());
            entry.insert("newName".into(), image.into());
        }
        Some(_) => return Err(invalid()),
        None => {
            entry.insert("name".into(), image.into());
        }
    }
    if let Some(tag) = tag {
        entry.insert("newTag".into(), tag.into());
    }
    if let Some(digest) = digest {
        entry.insert("digest".into(), digest.into());
    }
    Ok(entry)
}

/// Kustomize's tag pattern: `[a-zA-Z0-9._-]*` or `*`.
fn is_tag(tag: &str) -> bool {
    tag == "*" || tag.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
}

/// Merges an image override into `images` by name; `*` keeps the existing value.
fn set_image(images: &mut Vec<Value>, new: Map<String, Value>) {
    let name = new.get("name").cloned();
    let Some(existing) = images
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|m| m.get("name") == name.as_ref())
    else {
        images.push(Value::Object(new));
        return;
    };
    if let Some(new_name) = new.get("newName").filter(|v| v.as_str() != Some("*")) {
        existing.insert("newName".into(), new_name.clone());
    }
    if let Some(tag) = new.get("newTag").filter(|v| v.as_str() != Some("*")) {
        existing.insert("newTag".into(), tag.clone());
        existing.remove("digest");
    }
    if let Some(digest) = new.get("digest") {
        existing.insert("digest".into(), digest.clone());
        existing.remove("newTag");
    }
}

fn array_field<'a>(doc: &'a mut Map<String, Value>, field: &str) -> Result<&'a mut Vec<Value>, RenderError> {
    let slot = doc.entry(field.to_string()).or_insert_with(|| Value::Array(vec![]));
    if slot.is_null() {
        *slot = Value::Array(vec![]);
    }
    slot.as_array_mut()
        .ok_or_else(|| RenderError::InvalidYaml(format!("kustomization field {field} is not a list")))
}

fn object_field<'a>(doc: &'a mut Map<String, Value>, field: &str) -> Result<&'a mut Map<String, Value>, RenderError> {
    let slot = doc
        .entry(field.to_string())
        .or_insert_with(|| Value::Object(Map::new()));
    if slot.is_null() {
        *slot = Value::Object(Map::new());
    }
    slot.as_object_mut()
        .ok_or_else(|| RenderError::InvalidYaml(format!("kustomization field {field} is not a mapping")))
}

/// `kustomize edit add label|annotation`: refuse existing keys unless forced.
fn add_pairs<'a>(
    target: &mut Map<String, Value>,
    pairs: impl IntoIterator<Item = (&'a String, String)>,
    force: bool,
    what: &str,
) -> Result<(), RenderError> {
    for (key, value) in pairs {
        if target.contains_key(key) && !force {
            return Err(RenderError::InvalidSpec(format!(
                "{what} {key} already in kustomization file"
            )));
        }
        target.insert(key.clone(), Value::String(value));
    }
    Ok(())
}

/// Applies the Application's kustomize options to a kustomization document, as Argo CD's
/// sequence of `kustomize edit` commands would. `components` are the (already confined and
/// existence-checked) components to add. Pure.
pub fn apply_edits(
    doc: &mut Map<String, Value>,
    o: &KustomizeOptions,
    env: &BuildEnv,
    components: &[String],
) -> Result<(), RenderError> {
    if !o.name_prefix.is_empty() {
        doc.insert("namePrefix".into(), o.name_prefix.clone().into());
    }
    if !o.name_suffix.is_empty() {
        doc.insert("nameSuffix".into(), o.name_suffix.clone().into());
    }
    for image in &o.images {
        let parsed = parse_image(&envsubst(image, env))?;
        set_image(array_field(doc, "images")?, parsed);
    }
    for replica in &o.replicas {
        set_replicas(array_field(doc, "replicas")?, replica);
    }
    add_common_metadata(doc, o, env)?;
    if !o.namespace.is_empty() {
        doc.insert("namespace".into(), o.namespace.clone().into());
    }
    for patch in &o.patches {
        let value =
            serde_json::to_value(patch).map_err(|e| RenderError::InvalidSpec(format!("kustomize patch: {e}")))?;
        array_field(doc, "patches")?.push(value);
    }
    let list = array_field(doc, "components")?;
    for component in components {
        let value = Value::String(component.clone());
        if !list.contains(&value) {
            list.push(value);
        }
    }
    if list.is_empty() {
        doc.remove("components");
    }
    Ok(())
}

/// `edit set replicas`: the entry for the replica's name, added or updated.
fn set_replicas(list: &mut Vec<Value>, replica: &KustomizeReplica) {
    let name = Value::String(replica.name.clone());
    match list
        .iter_mut()
        .filter_map(Value::as_object_mut)
        .find(|m| m.get("name") == Some(&name))
    {
        Some(existing) => {
            existing.insert("count".into(), replica.count.into());
        }
        None => list.push(serde_json::json!({"name": replica.name, "count": replica.count})),
    }
}

/// `edit add label` and `edit add annotation` for the common labels and annotations.
fn add_common_metadata(doc: &mut Map<String, Value>, o: &KustomizeOptions, env: &BuildEnv) -> Result<(), RenderError> {
    if !o.common_labels.is_empty() {
        let pairs = o.common_labels.iter().map(|(k, v)| (k, envsubst(v, env)));
        if o.label_without_selector {
            add_pairs(
                label_entry(doc, o.label_include_templates)?,
                pairs,
                o.force_common_labels,
                "label",
            )?;
        } else {
            add_pairs(
                object_field(doc, "commonLabels")?,
                pairs,
                o.force_common_labels,
                "label",
            )?;
        }
    }
    if !o.common_annotations.is_empty() {
        let subst = |v: &String| {
            if o.common_annotations_envsubst {
                envsubst(v, env)
            } else {
                v.clone()
            }
        };
        let pairs = o.common_annotations.iter().map(|(k, v)| (k, subst(v)));
        add_pairs(
            object_field(doc, "commonAnnotations")?,
            pairs,
            o.force_common_annotations,
            "annotation",
        )?;
    }
    Ok(())
}

/// The `labels` entry `edit add label --without-selector` writes into.
fn label_entry(doc: &mut Map<String, Value>, include_templates: bool) -> Result<&mut Map<String, Value>, RenderError> {
    let labels = array_field(doc, "labels")?;
    let matches = |m: &Map<String, Value>| {
        m.get("includeSelectors").and_then(Value::as_bool) != Some(true)
            && m.get("includeTemplates").and_then(Value::as_bool).unwrap_or(false) == include_templates
    };
    let index = match labels.iter().position(|l| l.as_object().is_some_and(matches)) {
        Some(i) => i,
        None => {
            let mut entry = serde_json::json!({"pairs": {}});
            if include_templates {
                entry["includeTemplates"] = Value::Bool(true);
            }
            labels.push(entry);
            labels.len() - 1
        }
    };
    let entry = labels[index]
        .as_object_mut()
        .ok_or_else(|| RenderError::InvalidYaml("labels entry is not a mapping".into()))?;
    object_field(entry, "pairs")
}

// ---------------------------------------------------------------------------------------------
// Vetting kustomizations (pure parts)
// ---------------------------------------------------------------------------------------------

/// What a kustomization field points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RefKind {
    /// `resources`/`bases`: a file or a kustomization directory.
    Resource,
    /// `components`: a kustomization directory.
    Component,
    /// A file read by kustomize (patches, generator inputs, crds, openapi, …).
    File,
    /// A generator/transformer/validator configuration (file or kustomization directory).
    PluginConfig,
}

/// One path-like reference made by a kustomization.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reference {
    pub field: String,
    pub raw: String,
    pub kind: RefKind,
}

/// Lists the references a kustomization makes and refuses Helm inflation and inline KRM
/// functions. Pure.
pub fn references(doc: &Map<String, Value>) -> Result<Vec<Reference>, RenderError> {
    if let Some(field) = HELM_FIELDS.iter().find(|f| doc.contains_key(**f)) {
        return Err(RenderError::PluginForbidden(format!(
            "kustomize {field} is not allowed: Helm inflation is disabled"
        )));
    }
    let mut refs = Vec::new();
    let mut push = |field: &str, raw: &str, kind: RefKind| {
        refs.push(Reference {
            field: field.to_string(),
            raw: raw.to_string(),
            kind,
        });
    };
    for (field, kind) in [
        ("resources", RefKind::Resource),
        ("bases", RefKind::Resource),
        ("components", RefKind::Component),
        ("crds", RefKind::File),
        ("configurations", RefKind::File),
        ("patchesStrategicMerge", RefKind::File),
    ] {
        for raw in strings(doc.get(field)) {
            if !raw.contains('\n') {
                push(field, raw, kind);
            }
        }
    }
    for field in ["patches", "patchesJson6902", "replacements"] {
        for entry in items(doc.get(field)) {
            if let Some(path) = entry.get("path").and_then(Value::as_str) {
                push(field, path, RefKind::File);
            }
        }
    }
    if let Some(path) = doc.get("openapi").and_then(|o| o.get("path")).and_then(Value::as_str) {
        push("openapi", path, RefKind::File);
    }
    for field in ["configMapGenerator", "secretGenerator"] {
        for entry in items(doc.get(field)) {
            for raw in strings(entry.get("files")) {
                push(field, raw.split_once('=').map_or(raw, |(_, path)| path), RefKind::File);
            }
            for raw in strings(entry.get("envs")).chain(entry.get("env").and_then(Value::as_str)) {
                push(field, raw, RefKind::File);
            }
        }
    }
    for field in ["generators", "transformers", "validators"] {
        for raw in strings(doc.get(field)) {
            if raw.contains('\n') {
                check_plugin_stream(raw, field)?;
            } else {
                push(field, raw, RefKind::PluginConfig);
            }
        }
    }
    Ok(refs)
}

fn strings(value: Option<&Value>) -> impl Iterator<Item = &str> {
    value
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

fn items(value: Option<&Value>) -> impl Iterator<Item = &Value> {
    value.and_then(Value::as_array).into_iter().flatten()
}

/// Refuses KRM functions and non-builtin plugins in a generator/transformer configuration. Pure.
pub fn check_plugin_config(doc: &Value, shown_as: &str) -> Result<(), RenderError> {
    let annotations = doc
        .get("metadata")
        .and_then(|m| m.get("annotations"))
        .and_then(Value::as_object);
    if annotations.is_some_and(|a| FUNCTION_ANNOTATIONS.iter().any(|k| a.contains_key(*k))) {
        return Err(RenderError::PluginForbidden(format!(
            "{shown_as}: KRM functions (exec, container, starlark) are disabled"
        )));
    }
    let api_version = doc.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if api_version != "builtin" {
        let kind = doc.get("kind").and_then(Value::as_str).unwrap_or("?");
        return Err(RenderError::PluginForbidden(format!(
            "{shown_as}: plugin {api_version}/{kind} is not builtin; kustomize plugins are disabled"
        )));
    }
    Ok(())
}

fn check_plugin_stream(text: &str, shown_as: &str) -> Result<(), RenderError> {
    let limits = yaml::YamlLimits {
        max_depth: 64,
        max_bytes: 1 << 20,
    };
    for doc in yaml::parse_stream(text, &limits).map_err(|e| RenderError::from(e).context(shown_as))? {
        if is_kustomization_doc(&doc) {
            continue;
        }
        check_plugin_config(&doc, shown_as)?;
    }
    Ok(())
}

fn is_kustomization_doc(doc: &Value) -> bool {
    doc.get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k == "Kustomization" || k == "Component")
        && doc
            .get("apiVersion")
            .and_then(Value::as_str)
            .is_some_and(|a| a.starts_with("kustomize.config.k8s.io/"))
}

/// Whether a reference names a remote location (URL, scp-like Git address, go-getter syntax,
/// query parameters such as `?ref=`). Pure and deliberately broad.
pub fn looks_remote(raw: &str) -> bool {
    raw.contains("://")
        || raw.contains('?')
        || raw.starts_with("git@")
        || raw.starts_with("git::")
        || raw.starts_with("gh:")
        || raw.starts_with("ssh:")
        || raw.contains("//")
}

/// Whether a missing path's first segment looks like a host (`github.com/org/repo`).
fn host_like(raw: &str) -> bool {
    raw.split('/')
        .next()
        .is_some_and(|first| first.contains('.') && !first.starts_with('.'))
}

fn has_glob_meta(raw: &str) -> bool {
    raw.contains(['*', '?', '['])
}

// ---------------------------------------------------------------------------------------------
// Vetting kustomizations (I/O)
// ---------------------------------------------------------------------------------------------

/// The kustomization file of a directory, in kustomize's lookup order.
pub fn find_kustomization(dir: &Path) -> Option<PathBuf> {
    KUSTOMIZATION_FILES
        .iter()
        .map(|name| dir.join(name))
        .find(|p| p.is_file())
}

/// Result of vetting: every repository-relative directory the build may read.
#[derive(Debug, Default)]
pub struct Scan {
    pub touched: Vec<PathBuf>,
}

/// Resolves one reference made by the kustomization in `dir_rel`; `None` for glob patterns
/// (only lexically confined: kustomize's root-only load restrictor bounds them further).
fn check_reference(root: &Path, dir_rel: &Path, r: &Reference) -> Result<Option<PathBuf>, RenderError> {
    if looks_remote(&r.raw) {
        return Err(RenderError::RemoteBaseForbidden(format!(
            "{} entry {:?} is a remote reference; remote bases are disabled",
            r.field, r.raw
        )));
    }
    if r.kind == RefKind::File && has_glob_meta(&r.raw) {
        paths::join_lexically(dir_rel, &r.raw, AbsolutePaths::Reject)?;
        return Ok(None);
    }
    match paths::resolve(root, dir_rel, &r.raw, AbsolutePaths::Reject) {
        Ok(path) => Ok(Some(path)),
        Err(RenderError::NotFound(_)) if host_like(&r.raw) => Err(RenderError::RemoteBaseForbidden(format!(
            "{} entry {:?} does not exist locally; remote bases are disabled",
            r.field, r.raw
        ))),
        Err(e) => Err(e),
    }
}

/// Reads and parses one kustomization file into a mapping.
fn read_kustomization(path: &Path, shown_as: &str, limits: &Limits) -> Result<Map<String, Value>, RenderError> {
    let text = paths::read_text(path, limits.max_file_bytes, shown_as)?;
    match yaml::parse_one(&text, &limits.yaml())? {
        Value::Object(map) => Ok(map),
        Value::Null => Ok(Map::new()),
        _ => Err(RenderError::InvalidYaml(format!("{shown_as} is not a mapping"))),
    }
}

fn check_plugin_file(path: &Path, shown_as: &str, limits: &Limits) -> Result<(), RenderError> {
    let text = paths::read_text(path, limits.max_file_bytes, shown_as)?;
    check_plugin_stream(&text, shown_as)
}

/// Walks every kustomization reachable from the application (plus `extra` component
/// directories) and vets all of their references.
pub fn scan(location: &AppLocation, extra: &[PathBuf], limits: &Limits) -> Result<Scan, RenderError> {
    let root = &location.root;
    let mut queue: VecDeque<(PathBuf, bool)> = VecDeque::from([(location.app_rel.clone(), false)]);
    queue.extend(extra.iter().map(|p| (p.clone(), false)));
    let mut visited: HashSet<(PathBuf, bool)> = HashSet::new();
    let mut scan = Scan::default();
    while let Some((dir_rel, plugin_context)) = queue.pop_front() {
        if !visited.insert((dir_rel.clone(), plugin_context)) {
            continue;
        }
        if visited.len() > MAX_KUSTOMIZATIONS {
            return Err(RenderError::LimitExceeded(format!(
                "more than {MAX_KUSTOMIZATIONS} kustomizations reachable"
            )));
        }
        scan.touched.push(dir_rel.clone());
        let Some(file) = find_kustomization(&root.join(&dir_rel)) else {
            continue;
        };
        let shown = paths::relative_to(root, &file).display().to_string();
        let doc = read_kustomization(&file, &shown, limits)?;
        for r in references(&doc).map_err(|e| e.context(&shown))? {
            let Some(target) = check_reference(root, &dir_rel, &r).map_err(|e| e.context(&shown))? else {
                continue;
            };
            let rel = paths::relative_to(root, &target);
            let is_dir = target.is_dir();
            scan.touched.push(if is_dir {
                rel.clone()
            } else {
                rel.parent().map(Path::to_path_buf).unwrap_or_default()
            });
            match (r.kind, is_dir) {
                (RefKind::Resource | RefKind::Component, true) => queue.push_back((rel, plugin_context)),
                (RefKind::PluginConfig, true) => queue.push_back((rel, true)),
                (RefKind::PluginConfig, false) => check_plugin_file(&target, &rel.display().to_string(), limits)?,
                (RefKind::Resource, false) if plugin_context => {
                    check_plugin_file(&target, &rel.display().to_string(), limits)?
                }
                _ => {}
            }
        }
    }
    Ok(scan)
}

/// The deepest directory containing all of `paths` (relative paths). Pure.
pub fn common_ancestor(paths: &[PathBuf]) -> PathBuf {
    let mut iter = paths.iter();
    let Some(first) = iter.next() else {
        return PathBuf::new();
    };
    let mut common: Vec<_> = first.components().collect();
    for path in iter {
        let shared = common
            .iter()
            .zip(path.components())
            .take_while(|(a, b)| *a == b)
            .count();
        common.truncate(shared);
    }
    common.iter().collect()
}

/// Copies `root/subtree` to `dest/subtree` (same relative layout, so `../base` still works).
/// Regular files are copied, symlinks recreated verbatim (all were vetted as in-bounds),
/// `.git` and special files skipped; file count and bytes are bounded.
pub fn copy_tree(root: &Path, subtree: &Path, dest: &Path, limits: &Limits) -> Result<(), RenderError> {
    let io = |e: std::io::Error| RenderError::Io(format!("cannot prepare the kustomize working copy: {}", e.kind()));
    let mut stack = vec![(root.join(subtree), dest.join(subtree))];
    let (mut files, mut bytes) = (0usize, 0u64);
    while let Some((src, dst)) = stack.pop() {
        fs::create_dir_all(&dst).map_err(io)?;
        for entry in paths::read_dir_sorted(&src)? {
            files += 1;
            if files > limits.max_files {
                return Err(RenderError::LimitExceeded(format!(
                    "kustomize working copy exceeds {} files",
                    limits.max_files
                )));
            }
            let Some(name) = entry.file_name() else { continue };
            let target = dst.join(name);
            let meta = fs::symlink_metadata(&entry).map_err(io)?;
            if meta.file_type().is_symlink() {
                std::os::unix::fs::symlink(fs::read_link(&entry).map_err(io)?, &target).map_err(io)?;
            } else if meta.is_dir() {
                if !paths::is_skipped_dir(&entry) {
                    stack.push((entry, target));
                }
            } else if meta.is_file() {
                bytes = bytes.saturating_add(meta.len());
                if bytes > limits.max_copy_bytes {
                    return Err(RenderError::LimitExceeded(format!(
                        "kustomize working copy exceeds {} bytes",
                        limits.max_copy_bytes
                    )));
                }
                fs::copy(&entry, &target).map_err(io)?;
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Rendering
// ---------------------------------------------------------------------------------------------

/// Everything prepared on disk for one build.
struct Prepared {
    /// Directory to build (the original, or its edited private copy).
    build_dir: PathBuf,
}

/// Confines `options.components` and `patches[].path`; returns the components to add and their
/// directories (to vet like any other reachable kustomization).
fn resolve_option_paths(
    location: &AppLocation,
    o: &KustomizeOptions,
) -> Result<(Vec<String>, Vec<PathBuf>), RenderError> {
    let (mut names, mut dirs) = (Vec::new(), Vec::new());
    for component in &o.components {
        if looks_remote(component) {
            return Err(RenderError::RemoteBaseForbidden(format!(
                "kustomize component {component:?} is remote"
            )));
        }
        match paths::resolve(&location.root, &location.app_rel, component, AbsolutePaths::Reject) {
            Ok(path) => {
                names.push(component.clone());
                dirs.push(paths::relative_to(&location.root, &path));
            }
            Err(RenderError::NotFound(_)) if o.ignore_missing_components => {}
            Err(e) => return Err(e.context("kustomize.components")),
        }
    }
    for patch in &o.patches {
        if let Some(path) = &patch.path {
            paths::resolve(&location.root, &location.app_rel, path, AbsolutePaths::Reject)
                .map_err(|e| e.context("kustomize.patches"))?;
        }
    }
    Ok((names, dirs))
}

/// The directories a build of this application reads (relative to the root): every kustomization
/// reachable from it and the Application's own components and patch files (see `reads`).
pub fn read_dirs(
    location: &AppLocation,
    options: &KustomizeOptions,
    limits: &Limits,
) -> Result<Vec<PathBuf>, RenderError> {
    let (_, component_dirs) = resolve_option_paths(location, options)?;
    let mut dirs = scan(location, &component_dirs, limits)?.touched;
    for path in options.patches.iter().filter_map(|p| p.path.as_deref()) {
        let file = paths::resolve(&location.root, &location.app_rel, path, AbsolutePaths::Reject)?;
        dirs.push(paths::relative_to(&location.root, &file));
    }
    Ok(dirs)
}

/// Vets the sources and, when options ask for edits, builds the edited private copy.
fn prepare(req: &RenderRequest, location: &AppLocation, work: &Path) -> Result<Prepared, RenderError> {
    let options = req.source.kustomize.clone().unwrap_or_default();
    let (components, component_dirs) = resolve_option_paths(location, &options)?;
    let scan = scan(location, &component_dirs, &req.limits)?;
    if !has_edits(&options) {
        return Ok(Prepared {
            build_dir: location.app_dir.clone(),
        });
    }
    let file = find_kustomization(&location.app_dir)
        .ok_or_else(|| RenderError::NotFound(format!("no kustomization file in {:?}", req.app_path)))?;
    let file_name = file.file_name().map(PathBuf::from).unwrap_or_default();
    let shown = paths::relative_to(&location.root, &file).display().to_string();
    let mut doc = read_kustomization(&file, &shown, &req.limits)?;
    apply_edits(&mut doc, &options, &BuildEnv::for_request(req), &components)?;
    copy_tree(&location.root, &common_ancestor(&scan.touched), work, &req.limits)?;
    let build_dir = work.join(&location.app_rel);
    let target = build_dir.join(file_name);
    // The copied entry may be a symlink; replace it rather than write through it.
    let _ = fs::remove_file(&target);
    let text = serde_json::to_string_pretty(&Value::Object(doc)).map_err(|e| RenderError::Io(e.to_string()))?;
    fs::write(&target, text)
        .map_err(|e| RenderError::Io(format!("cannot write the edited kustomization: {}", e.kind())))?;
    Ok(Prepared { build_dir })
}

/// Renders a Kustomize application.
pub async fn render(req: &RenderRequest, location: &AppLocation) -> Result<Vec<Value>, RenderError> {
    let private = PrivateDir::new()?;
    let prepared = {
        let (req, location, work) = (req.clone(), location.clone(), private.work());
        super::blocking(move || prepare(&req, &location, &work)).await?
    };
    let binary = &req.binaries.kustomize;
    let command = (
        binary.program.clone(),
        super::argv::kustomize_build(binary, &prepared.build_dir)?,
    );
    process::render_objects("kustomize build", command, &private, &location.root, req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testutil::*;
    use crate::render::{ErrorCategory, KustomizeReplica, Renderer, SourceOptions, Tool};
    use serde_json::json;
    use std::collections::BTreeMap;

    const BASE: &[(&str, &str)] = &[
        ("base/kustomization.yaml", "resources:\n- deploy.yaml\n- cm.yaml\n"),
        (
            "base/deploy.yaml",
            "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      containers:\n      - name: web\n        image: nginx:1.25\n",
        ),
        ("base/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\ndata:\n  mode: \"0644\"\n"),
        ("overlays/prod/kustomization.yaml", "resources:\n- ../../base\nnamePrefix: prod-\n"),
    ];

    fn kustomize_request(root: &Path, app: &str, options: Option<KustomizeOptions>) -> RenderRequest {
        request(
            root,
            app,
            SourceOptions {
                kustomize: options,
                ..Default::default()
            },
        )
    }

    async fn render_ok(req: &RenderRequest) -> Vec<Value> {
        let out = Renderer::new().render(req).await.unwrap();
        assert_eq!(out.tool, Tool::Kustomize);
        out.objects
    }

    fn find<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
        objects.iter().find(|o| o["kind"] == kind).unwrap()
    }

    #[tokio::test]
    async fn builds_overlays_with_kubectl_kustomize() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        let objects = render_ok(&kustomize_request(tmp.path(), "overlays/prod", None)).await;
        assert_eq!(names(&objects), ["prod-cfg", "prod-web"]);
    }

    #[tokio::test]
    async fn argo_options_are_applied_like_kustomize_edit() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        let options = KustomizeOptions {
            name_prefix: "argo-".into(),
            name_suffix: "-v1".into(),
            images: vec!["nginx=registry.example.com/nginx:1.27".into()],
            common_labels: BTreeMap::from([("team".into(), "$ARGOCD_APP_NAME".into())]),
            common_annotations: BTreeMap::from([("owner".into(), "${ARGOCD_APP_NAME}".into())]),
            namespace: "apps".into(),
            replicas: vec![KustomizeReplica {
                name: "web".into(),
                count: 3,
            }],
            ..Default::default()
        };
        let req = kustomize_request(tmp.path(), "overlays/prod", Some(options));
        let objects = render_ok(&req).await;
        // namePrefix replaces the overlay's own `prod-` (kustomize edit set nameprefix).
        assert_eq!(names(&objects), ["argo-cfg-v1", "argo-web-v1"]);
        let deploy = find(&objects, "Deployment");
        assert_eq!(deploy["metadata"]["namespace"], "apps");
        assert_eq!(deploy["metadata"]["labels"]["team"], "demo");
        assert_eq!(deploy["spec"]["selector"]["matchLabels"]["team"], "demo");
        // Annotations are not substituted without commonAnnotationsEnvsubst.
        assert_eq!(deploy["metadata"]["annotations"]["owner"], "${ARGOCD_APP_NAME}");
        assert_eq!(deploy["spec"]["replicas"], 3);
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["image"],
            "registry.example.com/nginx:1.27"
        );
        // The checkout itself is untouched.
        let original = fs::read_to_string(tmp.path().join("overlays/prod/kustomization.yaml")).unwrap();
        assert_eq!(original, "resources:\n- ../../base\nnamePrefix: prod-\n");
    }

    #[tokio::test]
    async fn existing_labels_need_force() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        write_files(
            tmp.path(),
            &[(
                "app/kustomization.yaml",
                "resources: [../base]\ncommonLabels: {team: x}\n",
            )],
        );
        let mut options = KustomizeOptions {
            common_labels: BTreeMap::from([("team".into(), "y".into())]),
            ..Default::default()
        };
        let err = Renderer::new()
            .render(&kustomize_request(tmp.path(), "app", Some(options.clone())))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::InvalidSpec);
        options.force_common_labels = true;
        let objects = render_ok(&kustomize_request(tmp.path(), "app", Some(options))).await;
        assert_eq!(find(&objects, "ConfigMap")["metadata"]["labels"]["team"], "y");
    }

    #[tokio::test]
    async fn components_and_patches_options() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        write_files(
            tmp.path(),
            &[
                ("app/kustomization.yaml", "resources: [../base]\n"),
                ("app/patch.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cfg}\ndata: {patched: \"yes\"}\n"),
                (
                    "components/extra/kustomization.yaml",
                    "apiVersion: kustomize.config.k8s.io/v1alpha1\nkind: Component\ncommonAnnotations: {component: extra}\n",
                ),
            ],
        );
        let options = KustomizeOptions {
            components: vec!["../components/extra".into(), "../components/missing".into()],
            ignore_missing_components: true,
            patches: vec![crate::render::KustomizePatch {
                path: Some("patch.yaml".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let objects = render_ok(&kustomize_request(tmp.path(), "app", Some(options))).await;
        let cm = find(&objects, "ConfigMap");
        assert_eq!(cm["data"]["patched"], "yes");
        assert_eq!(cm["metadata"]["annotations"]["component"], "extra");
    }

    #[tokio::test]
    async fn resource_outside_the_checkout_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        write_files(&root, &[("app/kustomization.yaml", "resources:\n- ../../outside\n")]);
        write_files(
            tmp.path(),
            &[
                ("outside/kustomization.yaml", "resources: [s.yaml]\n"),
                (
                    "outside/s.yaml",
                    "apiVersion: v1\nkind: Secret\nmetadata: {name: OUTSIDE-SECRET}\n",
                ),
            ],
        );
        let err = Renderer::new()
            .render(&kustomize_request(&root, "app", None))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape, "{err}");
        assert!(!err.to_string().contains("OUTSIDE-SECRET"));
    }

    #[tokio::test]
    async fn generators_reading_secrets_outside_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        for (i, generator) in [
            "configMapGenerator:\n- name: x\n  files: [/etc/passwd]\n",
            "secretGenerator:\n- name: x\n  envs: [../../../secret.env]\n",
            "configMapGenerator:\n- name: x\n  files: [token=/var/run/secrets/kubernetes.io/serviceaccount/token]\n",
        ]
        .iter()
        .enumerate()
        {
            let root = tmp.path().join(format!("repo{i}"));
            write_files(&root, &[("app/kustomization.yaml", generator)]);
            let err = Renderer::new()
                .render(&kustomize_request(&root, "app", None))
                .await
                .unwrap_err();
            assert_eq!(err.category(), ErrorCategory::PathEscape, "{generator}: {err}");
            assert!(!err.to_string().contains("root:"));
        }
    }

    #[tokio::test]
    async fn remote_bases_are_refused_before_any_subprocess() {
        let tmp = tempfile::tempdir().unwrap();
        let pwned = tmp.path().join("pwned");
        let remote = format!("https://github.com/x/y//z?ref=--upload-pack=touch {}", pwned.display());
        for (i, resource) in [
            remote.as_str(),
            "github.com/x/y/z",
            "git@github.com:x/y.git",
            "ssh://git@host/x",
        ]
        .iter()
        .enumerate()
        {
            let root = tmp.path().join(format!("repo{i}"));
            write_files(
                &root,
                &[("app/kustomization.yaml", &format!("resources:\n- {resource:?}\n"))],
            );
            let mut req = kustomize_request(&root, "app", None);
            // A tool that would leave a trace if it were ever run.
            req.binaries.kustomize = crate::render::KustomizeBinary::standalone("/bin/false");
            let err = Renderer::new()
                .render_with(&req, Tool::Kustomize, "x".into())
                .await
                .unwrap_err();
            assert_eq!(err.category(), ErrorCategory::RemoteBaseForbidden, "{resource}: {err}");
        }
        assert!(!pwned.exists());
    }

    #[tokio::test]
    async fn remote_base_in_a_nested_kustomization_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[
                ("app/kustomization.yaml", "resources: [../mid]\n"),
                ("mid/kustomization.yaml", "components: [../comp]\n"),
                (
                    "comp/kustomization.yaml",
                    "kind: Component\nresources: [\"https://example.com/x.yaml\"]\n",
                ),
            ],
        );
        let err = Renderer::new()
            .render(&kustomize_request(tmp.path(), "app", None))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::RemoteBaseForbidden, "{err}");
    }

    #[tokio::test]
    async fn exec_krm_functions_and_helm_charts_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let exec_fn = "apiVersion: example.com/v1\nkind: Evil\nmetadata:\n  name: e\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: ./evil.sh\n";
        let cases: [(&str, &[(&str, &str)]); 5] = [
            (
                "file",
                &[
                    ("app/kustomization.yaml", "generators: [fn.yaml]\n"),
                    ("app/fn.yaml", exec_fn),
                ],
            ),
            (
                "inline",
                &[(
                    "app/kustomization.yaml",
                    &*format!("transformers:\n- |\n{}", indent(exec_fn)),
                )],
            ),
            (
                "dir",
                &[
                    ("app/kustomization.yaml", "transformers: [../fns]\n"),
                    ("fns/kustomization.yaml", "resources: [fn.yaml]\n"),
                    ("fns/fn.yaml", exec_fn),
                ],
            ),
            (
                "helmCharts",
                &[(
                    "app/kustomization.yaml",
                    "helmCharts:\n- name: x\n  repo: https://charts.example.com\n",
                )],
            ),
            (
                "helmGlobals",
                &[("app/kustomization.yaml", "helmGlobals:\n  configHome: ./evil\n")],
            ),
        ];
        for (name, files) in cases {
            let root = tmp.path().join(name);
            write_files(&root, files);
            let err = Renderer::new()
                .render(&kustomize_request(&root, "app", None))
                .await
                .unwrap_err();
            assert_eq!(err.category(), ErrorCategory::PluginForbidden, "{name}: {err}");
        }
    }

    fn indent(s: &str) -> String {
        s.lines().map(|l| format!("  {l}\n")).collect()
    }

    #[tokio::test]
    async fn builtin_transformers_are_allowed() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        write_files(
            tmp.path(),
            &[
                ("app/kustomization.yaml", "resources: [../base]\ntransformers: [labels.yaml]\n"),
                (
                    "app/labels.yaml",
                    "apiVersion: builtin\nkind: LabelTransformer\nmetadata: {name: l}\nlabels: {via: transformer}\nfieldSpecs:\n- path: metadata/labels\n  create: true\n",
                ),
            ],
        );
        let objects = render_ok(&kustomize_request(tmp.path(), "app", None)).await;
        assert_eq!(find(&objects, "ConfigMap")["metadata"]["labels"]["via"], "transformer");
    }

    #[tokio::test]
    async fn cyclic_kustomizations_end_with_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[
                ("a/kustomization.yaml", "resources: [../b]\n"),
                ("b/kustomization.yaml", "resources: [../a]\n"),
            ],
        );
        let err = Renderer::new()
            .render(&kustomize_request(tmp.path(), "a", None))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::ToolFailed, "{err}");
    }

    #[tokio::test]
    async fn standalone_binary_timeout_kills_the_tool() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), BASE);
        let fake = tmp.path().join("fake-kustomize");
        fs::write(&fake, "#!/bin/sh\nsleep 30\n").unwrap();
        fs::set_permissions(&fake, fs::Permissions::from_mode(0o755)).unwrap();
        let mut req = kustomize_request(tmp.path(), "base", None);
        req.binaries.kustomize = crate::render::KustomizeBinary::standalone(&fake);
        req.limits.timeout = std::time::Duration::from_millis(300);
        let started = std::time::Instant::now();
        let err = Renderer::new()
            .render_with(&req, Tool::Kustomize, "fake".into())
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::Timeout);
        // The fake tool sleeps 30 s: anything well below that proves it was killed.
        assert!(started.elapsed() < std::time::Duration::from_secs(20));
    }

    #[test]
    fn image_arguments() {
        let p = |s: &str| Value::Object(parse_image(s).unwrap());
        assert_eq!(p("nginx:1.2"), json!({"name": "nginx", "newTag": "1.2"}));
        assert_eq!(p("nginx@sha256:abc"), json!({"name": "nginx", "digest": "sha256:abc"}));
        assert_eq!(
            p("nginx=my/nginx:2"),
            json!({"name": "nginx", "newName": "my/nginx", "newTag": "2"})
        );
        assert_eq!(p("nginx=my/nginx"), json!({"name": "nginx", "newName": "my/nginx"}));
        assert_eq!(
            p("localhost:5000/a=b:1"),
            json!({"name": "localhost:5000/a", "newName": "b", "newTag": "1"})
        );
        assert!(parse_image("nginx").is_err());
        let mut images = vec![json!({"name": "nginx", "digest": "sha256:x"})];
        set_image(&mut images, parse_image("nginx:3").unwrap());
        assert_eq!(images, vec![json!({"name": "nginx", "newTag": "3"})]);
    }

    #[test]
    fn envsubst_like_go_os_expand() {
        let env = BuildEnv(vec![("A".into(), "x".into())]);
        assert_eq!(envsubst("$A-${A}-$B-$$-${", &env), "x-x--$-${");
        assert_eq!(envsubst("cost $", &env), "cost $");
    }

    #[test]
    fn reference_listing_and_remote_detection() {
        let doc: Map<String, Value> = serde_json::from_value(json!({
            "resources": ["a.yaml", "../base"],
            "patches": [{"path": "p.yaml"}, {"patch": "inline"}],
            "configMapGenerator": [{"name": "c", "files": ["k=f.txt"], "envs": ["e.env"]}],
            "openapi": {"path": "schema.json"}
        }))
        .unwrap();
        let raws: Vec<String> = references(&doc).unwrap().into_iter().map(|r| r.raw).collect();
        assert_eq!(raws, ["a.yaml", "../base", "p.yaml", "schema.json", "f.txt", "e.env"]);
        assert!(looks_remote(
            "https://github.com/x/y//z?ref=--upload-pack=touch /tmp/pwned"
        ));
        assert!(looks_remote("git@github.com:x/y.git") && looks_remote("github.com/x/y//z"));
        assert!(!looks_remote("../base") && !looks_remote("deploy.yaml"));
    }

    #[test]
    fn common_ancestors() {
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(common_ancestor(&[p("overlays/prod"), p("base")]), p(""));
        assert_eq!(common_ancestor(&[p("apps/a/overlay"), p("apps/a/base")]), p("apps/a"));
    }
}
