//! Two rules of the repository that no compiler checks:
//! - it stands on its own: no file points at a document outside it (a clone has nothing next to it), so
//!   the why of the code lives in `docs/architecture.md` and `docs/user-guide.md`;
//! - the pure layers do not reach up (docs/architecture.md, "Crates, modules and which may depend on
//!   which"): `api`, `engine` and the single-concern modules never name the controllers or anything above.

use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace root")
        .to_path_buf()
}

/// Files git tracks, plus new ones it does not ignore (so a file is checked before its first commit).
fn repository_files() -> Vec<PathBuf> {
    let root = workspace_root();
    let out = Command::new("git")
        .args(["ls-files", "-z", "--cached", "--others", "--exclude-standard"])
        .current_dir(&root)
        .output()
        .expect("git runs (the tests run in a git checkout)");
    assert!(
        out.status.success(),
        "git ls-files: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
        .filter(|p| p.is_file())
        .collect()
}

/// Ways of pointing outside the repository: the design notes that sat next to it while it was written,
/// by path or by section number. Spelled in two halves so this file does not match itself.
const OUTSIDE: [[&str; 2]; 9] = [
    ["../", "shared"],
    ["/work/", "shared"],
    ["shared/", "DESIGN"],
    ["shared/", "reference"],
    ["DESIGN", ".md"],
    ["DESIGN", " §"],
    ["-anchors", ".md"],
    ["test-apiserver", "-spec"],
    ["spec ", "§"],
];

#[test]
fn no_file_points_outside_the_repository() {
    let needles: Vec<String> = OUTSIDE.iter().map(|[a, b]| format!("{a}{b}")).collect();
    let mut found = Vec::new();
    let files = repository_files();
    assert!(files.len() > 100, "only {} files listed", files.len());
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            if let Some(needle) = needles.iter().find(|needle| line.contains(needle.as_str())) {
                let rel = path.strip_prefix(workspace_root()).unwrap_or(&path);
                found.push(format!("{}:{}: {needle:?} in {:?}", rel.display(), n + 1, line.trim()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "cite docs/architecture.md or docs/user-guide.md (or say the why in place) instead of:\n{}",
        found.join("\n")
    );
}

/// `operator/src/<module>` and the crate modules it may name besides itself.
const LAYERS: [(&str, &[&str]); 8] = [
    ("api", &[]),
    ("engine", &["api", "text"]),
    ("source", &["api", "text"]),
    ("render", &["api", "engine", "text"]),
    ("policy", &["api", "engine", "text"]),
    ("cluster", &["api", "engine", "text"]),
    ("appset", &["api", "engine", "render", "text"]),
    ("text.rs", &[]),
];

/// The crate modules a Rust source names through `crate::` paths (grouped imports included).
fn crate_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find("crate::") {
        rest = &rest[at + "crate::".len()..];
        let group = rest.strip_prefix('{').map(|g| &g[..g.find('}').unwrap_or(g.len())]);
        let paths: Vec<&str> = match group {
            Some(g) => g.split(',').collect(),
            None => vec![rest],
        };
        for path in paths {
            let name: String = path
                .trim()
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                names.push(name);
            }
        }
    }
    names
}

fn rust_files(path: &Path) -> Vec<PathBuf> {
    if path.is_file() {
        return vec![path.to_path_buf()];
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).expect("read_dir").flatten() {
        let p = entry.path();
        if p.is_dir() {
            files.extend(rust_files(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            files.push(p);
        }
    }
    files
}

#[test]
fn pure_layers_do_not_reach_up() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for (layer, allowed) in LAYERS {
        let own = layer.trim_end_matches(".rs");
        for file in rust_files(&src.join(layer)) {
            let text = std::fs::read_to_string(&file).expect("read");
            for name in crate_modules(&text) {
                if name != own && !allowed.contains(&name.as_str()) {
                    let rel = file.strip_prefix(&src).unwrap_or(&file);
                    found.push(format!(
                        "{}: crate::{name} (a {layer} file may use {allowed:?})",
                        rel.display()
                    ));
                }
            }
        }
    }
    assert!(found.is_empty(), "a pure layer reaches up:\n{}", found.join("\n"));
    // The check sees what it must: the controllers do name the layers below them.
    let controllers = std::fs::read_to_string(src.join("controllers/application/pipeline.rs")).expect("read");
    assert!(crate_modules(&controllers).iter().any(|m| m == "engine"));
}
