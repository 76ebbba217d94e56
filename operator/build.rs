//! Embeds the installation manifests (`config/` without the samples) into the binary,
//! so `capstan bootstrap` and `capstan bootstrap --export` render exactly what `config/default`
//! builds, without kustomize, Helm or the source tree at run time. Any change under those
//! directories rebuilds the table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn collect(root: &Path, dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for path in paths {
        let rel = path
            .strip_prefix(root)
            .expect("below the root")
            .to_string_lossy()
            .replace('\\', "/");
        if path.is_dir() {
            if rel != "config/samples" {
                collect(root, &path, out);
            }
        } else if rel.ends_with(".yaml") || rel.ends_with(".yml") {
            out.push((rel, path));
        }
    }
}

fn main() {
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("cargo sets it")).join("..");
    let mut files = Vec::new();
    let config = root.join("config");
    println!("cargo:rerun-if-changed={}", config.display());
    collect(&root, &config, &mut files);
    let mut table = String::from(
        "/// Installation manifests by path relative to the workspace root.\npub const FILES: &[(&str, &str)] = &[\n",
    );
    for (rel, path) in files {
        let abs = path.canonicalize().expect("an existing file");
        writeln!(table, "    ({rel:?}, include_str!({:?})),", abs.display().to_string()).expect("writes to a String");
    }
    table.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").expect("cargo sets it")).join("embedded_manifests.rs");
    fs::write(out, table).expect("OUT_DIR is writable");
}
