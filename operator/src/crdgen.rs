//! Rendering the CRDs as YAML: one multi-document stream (`capstan crd`) or one file per CRD
//! (`capstan crd --out-dir DIR`, which `make crds` runs on `crds/`).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// Suffix of every generated file; files in the output directory with it that no CRD produces
/// any more are removed.
pub const FILE_SUFFIX: &str = ".capstan.dev.yaml";

/// The file name of a CRD: `<plural>.capstan.dev.yaml`.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}.{}.yaml", crd.spec.names.plural, crd.spec.group)
}

/// One CRD as a YAML document.
pub fn to_yaml(crd: &CustomResourceDefinition) -> anyhow::Result<String> {
    serde_saphyr::to_string(crd).with_context(|| format!("serialising CRD {}", file_name(crd)))
}

/// Every CRD as a multi-document YAML stream, `---` separated, in a stable order.
pub fn stream(crds: &[CustomResourceDefinition]) -> anyhow::Result<String> {
    let documents = crds.iter().map(to_yaml).collect::<anyhow::Result<Vec<_>>>()?;
    Ok(documents.join("---\n"))
}

/// Every CRD as `(file name, YAML)`, in a stable order.
pub fn files(crds: &[CustomResourceDefinition]) -> anyhow::Result<Vec<(String, String)>> {
    crds.iter().map(|crd| Ok((file_name(crd), to_yaml(crd)?))).collect()
}

/// Writes every CRD to `dir/<plural>.capstan.dev.yaml`, creating `dir` if needed and removing
/// generated files no CRD produces any more. Returns the paths written.
pub fn write_dir(dir: &Path, crds: &[CustomResourceDefinition]) -> anyhow::Result<Vec<PathBuf>> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files = files(crds)?;
    remove_stale(dir, &files)?;
    files
        .into_iter()
        .map(|(name, yaml)| {
            let path = dir.join(name);
            fs::write(&path, yaml).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

fn remove_stale(dir: &Path, files: &[(String, String)]) -> anyhow::Result<()> {
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(FILE_SUFFIX) && !files.iter().any(|(wanted, _)| *wanted == name) {
            let path = entry.path();
            fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_parses_back_to_the_same_crds() {
        for crd in crate::crds() {
            let yaml = to_yaml(&crd).expect("serialises");
            let parsed: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("parses");
            assert_eq!(parsed, crd, "{}", file_name(&crd));
        }
    }

    #[test]
    fn stream_is_the_files_joined_by_document_markers() {
        let crds = crate::crds();
        let files = files(&crds).expect("renders");
        let joined = files
            .iter()
            .map(|(_, yaml)| yaml.as_str())
            .collect::<Vec<_>>()
            .join("---\n");
        assert_eq!(stream(&crds).expect("renders"), joined);
        let names: Vec<&str> = files.iter().map(|(name, _)| name.as_str()).collect();
        assert_eq!(
            names,
            [
                "applications.capstan.dev.yaml",
                "applicationsets.capstan.dev.yaml",
                "clusters.capstan.dev.yaml",
                "policysets.capstan.dev.yaml",
                "repositories.capstan.dev.yaml",
            ]
        );
    }

    #[test]
    fn rendering_is_deterministic() {
        assert_eq!(stream(&crate::crds()).ok(), stream(&crate::crds()).ok());
    }

    #[test]
    fn write_dir_removes_generated_files_no_crd_produces() {
        let dir = tempfile::tempdir().expect("tempdir");
        let stale = dir.path().join("gone.capstan.dev.yaml");
        let unrelated = dir.path().join("kustomization.yaml");
        fs::write(&stale, "old").expect("write");
        fs::write(&unrelated, "resources: []").expect("write");
        let written = write_dir(dir.path(), &crate::crds()).expect("writes");
        assert_eq!(written.len(), 5);
        assert!(!stale.exists());
        assert!(unrelated.exists());
    }
}
