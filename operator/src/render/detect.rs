//! Tool detection, as Argo CD does it (`tool_detection.md`, `util/app/discovery`).
//!
//! An explicit, non-empty `helm` / `kustomize` / `directory` block wins; more than one is an
//! error. Otherwise the files in the application directory decide: a kustomization file means
//! Kustomize, a `Chart.yaml` means Helm, anything else is a plain directory. When both are present
//! Argo CD's discovery walk records the kustomization last, so Kustomize wins; so it does here.

use std::path::Path;

use super::kustomize::KUSTOMIZATION_FILES;
use super::{RenderError, SourceOptions, Tool};

/// The tool named by the source's explicit options, if exactly one block is non-empty.
///
/// Pure. An empty block (`helm: {}`) does not count, as in Argo CD's `ExplicitType`.
pub fn explicit_tool(source: &SourceOptions) -> Result<Option<Tool>, RenderError> {
    let mut named = Vec::new();
    if source.helm.as_ref().is_some_and(|h| *h != Default::default()) {
        named.push(Tool::Helm);
    }
    if source.kustomize.as_ref().is_some_and(|k| *k != Default::default()) {
        named.push(Tool::Kustomize);
    }
    if source.directory.as_ref().is_some_and(|d| *d != Default::default()) {
        named.push(Tool::Directory);
    }
    match named.as_slice() {
        [] => Ok(None),
        [tool] => Ok(Some(*tool)),
        many => Err(RenderError::InvalidSpec(format!(
            "multiple application sources defined: {}",
            many.iter().map(|t| t.as_str()).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// The tool implied by the names of the files directly in the application directory. Pure.
pub fn tool_from_file_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Tool {
    let mut tool = Tool::Directory;
    for name in names {
        if KUSTOMIZATION_FILES.contains(&name) {
            return Tool::Kustomize;
        }
        // Argo CD matches with `strings.HasSuffix(base, "Chart.yaml")`.
        if name.ends_with("Chart.yaml") {
            tool = Tool::Helm;
        }
    }
    tool
}

/// Detects the tool for the (already confined) application directory.
pub fn detect(source: &SourceOptions, app_dir: &Path) -> Result<Tool, RenderError> {
    if let Some(tool) = explicit_tool(source)? {
        return Ok(tool);
    }
    let entries = std::fs::read_dir(app_dir)
        .map_err(|e| RenderError::Io(format!("cannot list application directory: {}", e.kind())))?;
    let mut names = Vec::new();
    for entry in entries.flatten() {
        let is_file = entry.file_type().map(|t| !t.is_dir()).unwrap_or(false);
        if let (true, Some(name)) = (is_file, entry.file_name().to_str()) {
            names.push(name.to_string());
        }
    }
    Ok(tool_from_file_names(names.iter().map(String::as_str)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::testutil::write_files;
    use crate::render::{DirectoryOptions, HelmOptions, KustomizeOptions};

    #[test]
    fn file_names_decide() {
        assert_eq!(tool_from_file_names(["a.yaml"]), Tool::Directory);
        assert_eq!(tool_from_file_names(["Chart.yaml", "values.yaml"]), Tool::Helm);
        assert_eq!(tool_from_file_names(["kustomization.yaml"]), Tool::Kustomize);
        assert_eq!(tool_from_file_names(["kustomization.yml"]), Tool::Kustomize);
        assert_eq!(tool_from_file_names(["Kustomization"]), Tool::Kustomize);
        assert_eq!(
            tool_from_file_names(["Chart.yaml", "kustomization.yaml"]),
            Tool::Kustomize
        );
        assert_eq!(tool_from_file_names(["chart.yaml"]), Tool::Directory);
    }

    #[test]
    fn explicit_options_win() {
        let helm = SourceOptions {
            helm: Some(HelmOptions {
                release_name: "x".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(explicit_tool(&helm).unwrap(), Some(Tool::Helm));
        let empty = SourceOptions {
            helm: Some(HelmOptions::default()),
            ..Default::default()
        };
        assert_eq!(explicit_tool(&empty).unwrap(), None);
        let both = SourceOptions {
            helm: Some(HelmOptions {
                release_name: "x".into(),
                ..Default::default()
            }),
            kustomize: Some(KustomizeOptions {
                name_prefix: "p-".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            explicit_tool(&both).unwrap_err().category(),
            crate::render::ErrorCategory::InvalidSpec
        );
    }

    #[test]
    fn detect_on_disk() {
        let tmp = tempfile::tempdir().unwrap();
        write_files(
            tmp.path(),
            &[
                ("chart/Chart.yaml", "name: c\n"),
                ("k/kustomization.yaml", ""),
                ("d/x.yaml", ""),
            ],
        );
        let none = SourceOptions::default();
        assert_eq!(detect(&none, &tmp.path().join("chart")).unwrap(), Tool::Helm);
        assert_eq!(detect(&none, &tmp.path().join("k")).unwrap(), Tool::Kustomize);
        assert_eq!(detect(&none, &tmp.path().join("d")).unwrap(), Tool::Directory);
        let dir = SourceOptions {
            directory: Some(DirectoryOptions {
                recurse: true,
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(detect(&dir, &tmp.path().join("chart")).unwrap(), Tool::Directory);
    }
}
