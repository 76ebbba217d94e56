//! Helm applications: `helm template`, invoked the way Argo CD invokes it.
//!
//! Precedence (Argo CD `helm.md`): parameters > valuesObject > values > valueFiles > the chart's
//! `values.yaml`. Value files are passed first with `--values`, in order; then `values` (or, when
//! set, `valuesObject`, which *replaces* `values` as in Argo CD's `ValuesYAML()`) as one more
//! `--values` file; parameters become `--set` / `--set-string`, which Helm applies after all
//! files. CRDs from `crds/` are included unless `skipCrds`.
//!
//! Every value file and file parameter is confined to the checkout: a leading `/` means the
//! checkout root (as in Argo CD), URLs are refused, and the chart's own files were vetted by the
//! repository-wide symlink check before this runs.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::argv::{self, TemplateArgs};
use super::paths::{self, AbsolutePaths};
use super::process::{self, PrivateDir};
use super::{AppLocation, HelmOptions, RenderError, RenderRequest};
use crate::glob::{Glob, Options};

/// The YAML for `--values <inline file>`: `valuesObject` if set, else `values`. Pure.
pub fn inline_values(options: &HelmOptions) -> Option<String> {
    match &options.values_object {
        Some(object) if !object.is_null() => Some(object.to_string()),
        _ if !options.values.trim().is_empty() => Some(options.values.clone()),
        _ => None,
    }
}

/// Whether a value-file entry is a URL (`https://…`, `file:///…`): remote fetches are off.
fn is_url(raw: &str) -> bool {
    raw.split_once("://").is_some_and(|(scheme, _)| {
        !scheme.is_empty() && scheme.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
    })
}

fn has_glob_meta(raw: &str) -> bool {
    raw.contains(['*', '?', '[', '{'])
}

/// Resolves `helm.valueFiles` inside the checkout (relative to the chart; `/x` = checkout root).
pub fn resolve_value_files(
    location: &AppLocation,
    options: &HelmOptions,
    limits: &super::Limits,
) -> Result<Vec<PathBuf>, RenderError> {
    let mut out = Vec::new();
    for raw in &options.value_files {
        if is_url(raw) {
            return Err(RenderError::RemoteBaseForbidden(format!(
                "value file {raw:?} is a URL; remote value files are not allowed"
            )));
        }
        let resolved = if has_glob_meta(raw) {
            glob_value_files(location, raw, limits)?
        } else {
            match paths::resolve(&location.root, &location.app_rel, raw, AbsolutePaths::RootRelative) {
                Ok(path) => vec![path],
                Err(RenderError::NotFound(_)) if options.ignore_missing_value_files => vec![],
                Err(e) => return Err(e.context("helm.valueFiles")),
            }
        };
        if resolved.is_empty() && !options.ignore_missing_value_files {
            return Err(RenderError::NotFound(format!(
                "helm.valueFiles: {raw:?} matched no file in the repository"
            )));
        }
        for path in resolved {
            check_regular_file(&path, raw, limits)?;
            out.push(path);
        }
    }
    Ok(out)
}

/// Expands a value-file glob in lexical order. Like Go's `filepath.Glob`, `*` stays within one
/// path segment; the walk is confined and bounded.
fn glob_value_files(location: &AppLocation, raw: &str, limits: &super::Limits) -> Result<Vec<PathBuf>, RenderError> {
    let pattern_rel = paths::join_lexically(&location.app_rel, raw, AbsolutePaths::RootRelative)?;
    let pattern = pattern_rel.to_string_lossy().into_owned();
    let segments: Vec<&str> = pattern.split('/').collect();
    let fixed: Vec<&str> = segments.iter().take_while(|s| !has_glob_meta(s)).copied().collect();
    let base = location.root.join(fixed.join("/"));
    let glob = Glob::new(&pattern, Options::PATH_WITH_BRACES)
        .map_err(|e| RenderError::InvalidSpec(format!("helm.valueFiles {raw:?}: {e}")))?;
    let mut matches = Vec::new();
    let mut stack = vec![(base, fixed.len())];
    let mut seen = 0usize;
    while let Some((dir, depth)) = stack.pop() {
        let Ok(entries) = paths::read_dir_sorted(&dir) else {
            continue;
        };
        for entry in entries {
            seen += 1;
            if seen > limits.max_files {
                return Err(RenderError::LimitExceeded(format!(
                    "helm.valueFiles {raw:?} matches too many paths"
                )));
            }
            let rel = paths::relative_to(&location.root, &entry)
                .to_string_lossy()
                .into_owned();
            if depth + 1 == segments.len() {
                if glob.matches(&rel) {
                    matches.push(paths::resolve(
                        &location.root,
                        Path::new(""),
                        &rel,
                        AbsolutePaths::Reject,
                    )?);
                }
            } else if entry.is_dir() && !paths::is_skipped_dir(&entry) {
                stack.push((entry, depth + 1));
            }
        }
    }
    matches.sort();
    Ok(matches)
}

fn check_regular_file(path: &Path, raw: &str, limits: &super::Limits) -> Result<(), RenderError> {
    let meta = std::fs::metadata(path).map_err(|e| RenderError::Io(format!("cannot stat {raw:?}: {}", e.kind())))?;
    if !meta.is_file() {
        return Err(RenderError::InvalidSpec(format!("{raw:?} is not a file")));
    }
    if meta.len() > limits.max_file_bytes {
        return Err(RenderError::LimitExceeded(format!(
            "{raw:?} exceeds the limit of {} bytes",
            limits.max_file_bytes
        )));
    }
    Ok(())
}

/// Resolves `helm.fileParameters` inside the checkout.
pub fn resolve_file_parameters(
    location: &AppLocation,
    options: &HelmOptions,
    limits: &super::Limits,
) -> Result<Vec<(String, PathBuf)>, RenderError> {
    let mut out = Vec::new();
    for p in &options.file_parameters {
        if is_url(&p.path) {
            return Err(RenderError::RemoteBaseForbidden(format!(
                "file parameter {:?} is a URL",
                p.name
            )));
        }
        let path = paths::resolve(&location.root, &location.app_rel, &p.path, AbsolutePaths::RootRelative)
            .map_err(|e| e.context(&format!("helm.fileParameters {:?}", p.name)))?;
        check_regular_file(&path, &p.path, limits)?;
        out.push((p.name.clone(), path));
    }
    Ok(out)
}

/// Renders a Helm application.
pub async fn render(req: &RenderRequest, location: &AppLocation) -> Result<Vec<Value>, RenderError> {
    let options = req.source.helm.clone().unwrap_or_default();
    // The user's fields first: a refused name must not cost a file read.
    argv::check_helm(&options, &req.app_name, &req.destination_namespace)?;
    let private = PrivateDir::new()?;
    let (value_files, file_parameters) = {
        let (location, options, limits) = (location.clone(), options.clone(), req.limits.clone());
        super::blocking(move || {
            Ok((
                resolve_value_files(&location, &options, &limits)?,
                resolve_file_parameters(&location, &options, &limits)?,
            ))
        })
        .await?
    };
    let inline_values_file = match inline_values(&options) {
        Some(text) => {
            let path = private.work().join("capstan-values.yaml");
            std::fs::write(&path, text).map_err(|e| RenderError::Io(format!("cannot write values: {}", e.kind())))?;
            Some(path)
        }
        None => None,
    };
    let args = TemplateArgs {
        release_name: argv::release_name(&options, &req.app_name),
        namespace: argv::helm_namespace(&options, &req.destination_namespace),
        chart_dir: location.app_dir.clone(),
        value_files,
        inline_values_file,
        file_parameters,
    };
    let argv = argv::helm_template(&options, &args, &req.app_name, &req.destination_namespace)?;
    let command = (req.binaries.helm.clone(), argv);
    process::render_objects("helm template", command, &private, &location.root, req).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testutil::*;
    use crate::render::{ErrorCategory, HelmFileParameter, HelmParameter, Renderer, SourceOptions, Tool};
    use serde_json::json;
    use std::os::unix::fs::symlink;

    const CHART: &[(&str, &str)] = &[
        ("chart/Chart.yaml", "apiVersion: v2\nname: demo\nversion: 0.1.0\n"),
        ("chart/values.yaml", "a: chart\nb: chart\nc: chart\nd: chart\nmode: 0644\nreplicas: 1\n"),
        (
            "chart/templates/cm.yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\n  namespace: {{ .Release.Namespace }}\ndata:\n  a: {{ .Values.a | quote }}\n  b: {{ .Values.b | quote }}\n  c: {{ .Values.c | quote }}\n  d: {{ .Values.d | quote }}\n  mode: {{ .Values.mode | quote }}\n  replicas: {{ .Values.replicas | toJson | quote }}\n",
        ),
        ("chart/templates/NOTES.txt", "Thanks for installing {{ .Release.Name }}\n"),
        ("chart/templates/empty.yaml", "{{- if .Values.never }}\nkind: Nope\n{{- end }}\n"),
        ("chart/crds/crd.yaml", "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: widgets.example.com\n"),
        ("chart/env/prod.yaml", "a: file\nb: file\nc: file\n"),
        ("chart/env/extra.yaml", "a: file2\n"),
        ("chart/files/motd.txt", "hello from a file"),
    ];

    fn helm_request(root: &Path, options: HelmOptions) -> RenderRequest {
        let mut req = request(
            root,
            "chart",
            SourceOptions {
                helm: Some(options),
                ..Default::default()
            },
        );
        req.binaries.helm = helm_script();
        req
    }

    fn data(objects: &[Value]) -> Value {
        objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap()["data"].clone()
    }

    #[test]
    fn inline_values_prefers_values_object() {
        let mut o = HelmOptions {
            values: "a: 1\n".into(),
            ..Default::default()
        };
        assert_eq!(inline_values(&o).unwrap(), "a: 1\n");
        o.values_object = Some(json!({"b": 2}));
        assert_eq!(inline_values(&o).unwrap(), r#"{"b":2}"#);
        assert!(is_url("https://x/y.yaml") && is_url("file:///etc/passwd") && !is_url("values.yaml"));
    }

    #[tokio::test]
    async fn precedence_crds_and_release_settings() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), CHART);
        let options = HelmOptions {
            release_name: "rel".into(),
            value_files: vec!["env/prod.yaml".into()],
            values: "b: values\nc: values\n".into(),
            values_object: Some(json!({"c": "object", "d": "object"})),
            parameters: vec![
                HelmParameter {
                    name: "d".into(),
                    value: "param".into(),
                    force_string: false,
                },
                HelmParameter {
                    name: "replicas".into(),
                    value: "3".into(),
                    force_string: true,
                },
            ],
            ..Default::default()
        };
        let out = Renderer::new()
            .render(&helm_request(tmp.path(), options))
            .await
            .unwrap();
        assert_eq!(out.tool, Tool::Helm);
        assert!(out.tool_version.starts_with('v'), "{}", out.tool_version);
        // CRDs come first with --include-crds.
        assert_eq!(out.objects[0]["kind"], "CustomResourceDefinition");
        assert_eq!(out.objects.len(), 2, "NOTES.txt and empty templates produce nothing");
        let cm = out.objects.iter().find(|o| o["kind"] == "ConfigMap").unwrap();
        assert_eq!(cm["metadata"]["name"], "rel-cm");
        assert_eq!(cm["metadata"]["namespace"], "team-a");
        // valuesObject replaces values (Argo CD), so b falls back to the value file.
        assert_eq!(
            cm["data"],
            json!({"a": "file", "b": "file", "c": "object", "d": "param", "mode": "420", "replicas": "\"3\""})
        );
    }

    #[tokio::test]
    async fn values_override_value_files_and_skip_crds() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), CHART);
        let options = HelmOptions {
            value_files: vec![
                "env/prod.yaml".into(),
                "env/extra.yaml".into(),
                "/chart/missing.yaml".into(),
            ],
            ignore_missing_value_files: true,
            values: "c: values\n".into(),
            parameters: vec![HelmParameter {
                name: "replicas".into(),
                value: "3".into(),
                force_string: false,
            }],
            skip_crds: true,
            namespace: "other".into(),
            ..Default::default()
        };
        let out = Renderer::new()
            .render(&helm_request(tmp.path(), options))
            .await
            .unwrap();
        assert_eq!(out.objects.len(), 1);
        assert_eq!(out.objects[0]["metadata"]["name"], "demo-cm");
        assert_eq!(out.objects[0]["metadata"]["namespace"], "other");
        let d = data(&out.objects);
        assert_eq!(
            (d["a"].as_str(), d["b"].as_str(), d["c"].as_str()),
            (Some("file2"), Some("file"), Some("values"))
        );
        assert_eq!(d["replicas"], "3");
    }

    #[tokio::test]
    async fn value_file_globs_and_file_parameters() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), CHART);
        write_files(tmp.path(), &[("chart/templates/motd.yaml", "apiVersion: v1\nkind: Secret\nmetadata: {name: motd}\nstringData:\n  motd: {{ .Values.motd | quote }}\n")]);
        let options = HelmOptions {
            value_files: vec!["env/*.yaml".into()],
            file_parameters: vec![HelmFileParameter {
                name: "motd".into(),
                path: "files/motd.txt".into(),
            }],
            ..Default::default()
        };
        let out = Renderer::new()
            .render(&helm_request(tmp.path(), options))
            .await
            .unwrap();
        // Lexical order: extra.yaml then prod.yaml, so prod's `a` wins.
        assert_eq!(data(&out.objects)["a"], "file");
        let secret = out.objects.iter().find(|o| o["kind"] == "Secret").unwrap();
        assert_eq!(secret["stringData"]["motd"], "hello from a file");
    }

    async fn expect_escape(tmp: &Path, value_file: &str) -> RenderError {
        let options = HelmOptions {
            value_files: vec![value_file.into()],
            ..Default::default()
        };
        Renderer::new().render(&helm_request(tmp, options)).await.unwrap_err()
    }

    #[tokio::test]
    async fn value_files_outside_the_checkout_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        write_files(&root, CHART);
        write_files(
            tmp.path(),
            &[
                ("outside/values.yaml", "a: OUTSIDE-SECRET\n"),
                ("repo2/values.yaml", "a: SIBLING-SECRET\n"),
            ],
        );
        for raw in ["../../outside/values.yaml", "../../repo2/values.yaml"] {
            let err = expect_escape(&root, raw).await;
            assert_eq!(err.category(), ErrorCategory::PathEscape, "{raw}: {err}");
            assert!(!err.to_string().contains("SECRET"));
        }
        // A leading slash is the checkout root (Argo CD), never the server's root.
        let err = expect_escape(&root, "/etc/passwd").await;
        assert_eq!(err.category(), ErrorCategory::NotFound, "{err}");
        assert!(!err.to_string().contains("root:"));
        let err = expect_escape(&root, "file:///etc/passwd").await;
        assert_eq!(err.category(), ErrorCategory::RemoteBaseForbidden);
        // Symlinked value file pointing outside: the checkout is refused as a whole.
        symlink(
            tmp.path().join("outside/values.yaml"),
            root.join("chart/env/linked.yaml"),
        )
        .unwrap();
        let err = expect_escape(&root, "env/linked.yaml").await;
        assert_eq!(err.category(), ErrorCategory::PathEscape, "{err}");
        assert!(!err.to_string().contains("SECRET"));
    }

    #[tokio::test]
    async fn chart_values_symlink_outside_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("repo");
        write_files(&root, CHART);
        write_files(tmp.path(), &[("srv/values.yaml", "a: OUTSIDE-SECRET\n")]);
        std::fs::remove_file(root.join("chart/values.yaml")).unwrap();
        symlink(tmp.path().join("srv/values.yaml"), root.join("chart/values.yaml")).unwrap();
        let err = Renderer::new()
            .render(&helm_request(&root, HelmOptions::default()))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::PathEscape);
        assert!(!err.to_string().contains("SECRET"));
    }

    #[tokio::test]
    async fn template_errors_are_tool_failures_without_server_paths() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), CHART);
        write_files(
            tmp.path(),
            &[("chart/templates/bad.yaml", "{{ fail \"chart says no\" }}\n")],
        );
        let err = Renderer::new()
            .render(&helm_request(tmp.path(), HelmOptions::default()))
            .await
            .unwrap_err();
        assert_eq!(err.category(), ErrorCategory::ToolFailed);
        assert!(err.to_string().contains("chart says no"), "{err}");
        assert!(!err.to_string().contains(tmp.path().to_str().unwrap()), "{err}");
    }

    #[tokio::test]
    async fn output_limit_applies_to_helm() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(tmp.path(), CHART);
        let mut req = helm_request(tmp.path(), HelmOptions::default());
        req.limits.max_total_bytes = 100;
        let err = Renderer::new().render(&req).await.unwrap_err();
        assert_eq!(err.category(), ErrorCategory::LimitExceeded);
    }
}
