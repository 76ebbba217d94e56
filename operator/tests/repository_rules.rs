//! Three rules of the repository that no compiler checks:
//! - it stands on its own: no file points at a document outside it (a clone has nothing next to it), so
//!   the why of the code lives in `docs/architecture.md` and `docs/user-guide.md`;
//! - the pure layers do not reach up (docs/architecture.md, "Crates, modules and which may depend on
//!   which"): `api`, `engine` and the single-concern modules never name the controllers or anything above;
//! - functions stay short enough to read step by step: none in `operator/src` over
//!   [`MAX_FUNCTION_LINES`] lines, plain lists excepted.

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
const LAYERS: [(&str, &[&str]); 10] = [
    ("api", &["glob"]),
    ("engine", &["api", "glob", "text"]),
    ("source", &["api", "glob", "text"]),
    ("render", &["api", "engine", "glob", "text"]),
    ("policy", &["api", "engine", "glob", "text"]),
    ("cluster", &["api", "engine", "glob", "text"]),
    ("appset", &["api", "engine", "render", "glob", "text"]),
    (
        "bootstrap",
        &["api", "engine", "source", "render", "cluster", "glob", "text"],
    ),
    ("text.rs", &[]),
    ("glob.rs", &[]),
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

/// The longest a function may be, from its `fn` line to its closing brace (doc comments and attributes
/// not counted): reconcile, decision and planning functions are read step by step, and a step that
/// needs more is a function of its own.
const MAX_FUNCTION_LINES: usize = 80;

/// Functions allowed to be longer, by file (under `operator/src`) and name: plain lists with nothing
/// to decide.
const LONG_LISTS: [(&str, &str); 1] = [("metrics.rs", "register")];

/// Where the comment, string or character literal starting at `i` ends (`i` when none starts there).
fn literal_end(c: &[char], i: usize) -> usize {
    let at = |k: usize| c.get(k).copied();
    let after = |from: usize, pat: &[char]| {
        (from..c.len())
            .find(|&k| c[k..].starts_with(pat))
            .map_or(c.len(), |k| k + pat.len())
    };
    if c[i..].starts_with(&['/', '/']) {
        return (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len());
    }
    if c[i..].starts_with(&['/', '*']) {
        let (mut depth, mut k) = (0usize, i);
        while k < c.len() {
            if c[k..].starts_with(&['/', '*']) {
                depth += 1;
                k += 2;
            } else if c[k..].starts_with(&['*', '/']) {
                depth -= 1;
                k += 2;
                if depth == 0 {
                    return k;
                }
            } else {
                k += 1;
            }
        }
        return c.len();
    }
    let in_identifier = i > 0 && (c[i - 1].is_alphanumeric() || c[i - 1] == '_');
    let raw = if at(i) == Some('b') { i + 1 } else { i };
    if !in_identifier && at(raw) == Some('r') {
        let quote = (raw + 1..c.len()).find(|&k| c[k] != '#').unwrap_or(c.len());
        if at(quote) == Some('"') {
            let mut end = vec!['"'];
            end.extend(std::iter::repeat_n('#', quote - raw - 1));
            return after(quote + 1, &end);
        }
    }
    match c[i] {
        '"' => {
            let mut k = i + 1;
            while k < c.len() && c[k] != '"' {
                k += if c[k] == '\\' { 2 } else { 1 };
            }
            (k + 1).min(c.len())
        }
        '\'' if at(i + 1) == Some('\\') => (i + 3..c.len().min(i + 14))
            .find(|&k| c[k] == '\'')
            .map_or(i, |k| k + 1),
        '\'' if at(i + 2) == Some('\'') => i + 3,
        _ => i,
    }
}

/// `text` with comments and literals blanked (newlines kept), so that braces in them do not count.
fn blank_literals(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let end = literal_end(&chars, i);
        if end > i {
            out.extend(chars[i..end].iter().map(|c| if *c == '\n' { '\n' } else { ' ' }));
            i = end;
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The name of the function a (blanked, trimmed) line declares.
fn declared_fn(line: &str) -> Option<String> {
    let mut rest = line;
    for qualifier in ["pub(crate) ", "pub(super) ", "pub ", "const ", "async ", "unsafe "] {
        rest = rest.strip_prefix(qualifier).unwrap_or(rest);
    }
    let name: String = rest
        .strip_prefix("fn ")?
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The index of the line where the block opened on or after line `start` closes; `None` when a `;`
/// ends the item first (a declaration without a body).
fn block_end(lines: &[&str], start: usize) -> Option<usize> {
    let (mut braces, mut nesting) = (0i32, 0i32);
    for (n, line) in lines.iter().enumerate().skip(start) {
        for c in line.chars() {
            match c {
                '{' => braces += 1,
                '}' if braces == 1 => return Some(n),
                '}' => braces -= 1,
                '(' | '[' => nesting += 1,
                ')' | ']' => nesting -= 1,
                ';' if braces == 0 && nesting == 0 => return None,
                _ => {}
            }
        }
    }
    None
}

/// Every function of a Rust source outside `#[cfg(test)]` modules: name, first line (from 1) and
/// length in lines, from its `fn` line to its closing brace.
fn function_lengths(text: &str) -> Vec<(String, usize, usize)> {
    let blanked = blank_literals(text);
    let lines: Vec<&str> = blanked.lines().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].trim_start();
        let test_module = line.starts_with("#[cfg(test)]")
            && lines.get(i + 1).is_some_and(|next| {
                let next = next.trim_start();
                (next.starts_with("mod ") || next.starts_with("pub mod ")) && next.contains('{')
            });
        if test_module {
            i = block_end(&lines, i + 1).map_or(lines.len(), |end| end + 1);
            continue;
        }
        if let Some(name) = declared_fn(line) {
            if let Some(end) = block_end(&lines, i) {
                found.push((name, i + 1, end - i + 1));
            }
        }
        i += 1;
    }
    found
}

/// Test code: files of tests and test helpers.
fn is_test_file(rel: &Path) -> bool {
    rel.components().any(|c| c.as_os_str() == "tests")
        || rel
            .file_name()
            .is_some_and(|f| ["tests.rs", "sim_tests.rs", "testsupport.rs"].iter().any(|t| f == *t))
}

#[test]
fn no_function_is_longer_than_the_limit() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut all = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(&src).unwrap_or(&file).to_path_buf();
        if is_test_file(&rel) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read");
        for (name, line, len) in function_lengths(&text) {
            all.push((len, rel.display().to_string(), line, name));
        }
    }
    all.sort_by(|a, b| b.cmp(a));
    // The longest, for whoever wants the figures (`--no-capture`).
    for (len, rel, line, name) in all.iter().take(10) {
        println!("{len:4} lines  {rel}:{line} {name}");
    }
    let long: Vec<String> = all
        .iter()
        .filter(|(len, rel, _, name)| *len > MAX_FUNCTION_LINES && !LONG_LISTS.contains(&(rel.as_str(), name.as_str())))
        .map(|(len, rel, line, name)| format!("{rel}:{line} {name}: {len} lines"))
        .collect();
    assert!(
        long.is_empty(),
        "functions over {MAX_FUNCTION_LINES} lines (make each step a function of its own):\n{}",
        long.join("\n")
    );
    // The measure sees what it must: the excepted metric list is longer than the limit.
    assert!(
        all.iter()
            .any(|(len, rel, _, name)| rel == "metrics.rs" && name == "register" && *len > MAX_FUNCTION_LINES),
        "metrics.rs register not measured over the limit: {:?}",
        all.iter()
            .find(|(_, rel, _, name)| rel == "metrics.rs" && name == "register")
    );
}

#[test]
fn function_lengths_skip_literals_comments_and_test_modules() {
    let probe = "pub(crate) async fn a() {\n    let s = \"}}\"; // }\n    let c = '}';\n    let r = r#\"}\"#;\n    let e = '\\'';\n}\n\
                 trait T {\n    fn declared(&self) -> [u8; 2];\n}\n\
                 #[cfg(test)]\nmod tests {\n    fn b() {\n    }\n}\n\
                 fn c<'a>(x: &'a str) -> &'a str {\n    /* } */ x\n}\n";
    assert_eq!(
        function_lengths(probe),
        [("a".to_string(), 1, 6), ("c".to_string(), 15, 3)]
    );
}
