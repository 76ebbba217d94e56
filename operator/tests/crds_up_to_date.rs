//! `crds/`, `config/crd/` and the Helm chart's `charts/capstan/crds/` must be exactly what `capstan crd --out-dir` (i.e. `make crds`)
//! writes.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

const STALE: &str = "crds/ is stale: run `make crds`";

fn yaml_files(dir: &Path) -> BTreeMap<String, String> {
    let entries = fs::read_dir(dir).unwrap_or_else(|e| panic!("{STALE} (reading {}: {e})", dir.display()));
    entries
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| {
            let name = path.file_name().expect("file name").to_string_lossy().into_owned();
            let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (name, text)
        })
        .collect()
}

#[test]
fn crds_dir_is_up_to_date() {
    let committed_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../crds");
    let fresh_dir = tempfile::tempdir().expect("tempdir");
    let output = Command::new(env!("CARGO_BIN_EXE_capstan"))
        .args(["crd", "--out-dir"])
        .arg(fresh_dir.path())
        .output()
        .expect("runs capstan crd");
    assert!(
        output.status.success(),
        "capstan crd failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    let fresh = yaml_files(fresh_dir.path());
    let chart_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../charts/capstan/crds");
    assert_eq!(
        yaml_files(&chart_dir),
        fresh,
        "charts/capstan/crds is stale: run `make crds`"
    );
    let config_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/crd");
    let mut kustomize_base = yaml_files(&config_dir);
    kustomize_base.remove("kustomization.yaml");
    assert_eq!(kustomize_base, fresh, "config/crd is stale: run `make crds`");
    let committed = yaml_files(&committed_dir);
    let missing: Vec<&String> = fresh.keys().filter(|name| !committed.contains_key(*name)).collect();
    let extra: Vec<&String> = committed.keys().filter(|name| !fresh.contains_key(*name)).collect();
    let differing: Vec<&String> = fresh
        .iter()
        .filter(|(name, text)| committed.get(*name).is_some_and(|old| old != *text))
        .map(|(name, _)| name)
        .collect();
    assert!(
        missing.is_empty() && extra.is_empty() && differing.is_empty(),
        "{STALE}\n  missing: {missing:?}\n  extra: {extra:?}\n  differing: {differing:?}"
    );
}
