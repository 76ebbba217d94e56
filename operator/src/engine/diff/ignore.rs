//! `spec.ignoreDifferences`: which rules apply to an object, and removal of the ignored fields from both
//! sides before comparison, as Argo CD's `ignoreDifferences` does (`jsonPointers`,
//! `jqPathExpressions`, `managedFieldsManagers`; group/kind wildcards `*`, exact name/namespace).
//!
//! jq: only a small path subset is evaluated (`.a.b`, `."a.b"`, `.["a"]`, `.a[]`, `.a[0]`,
//! `| select(.k == "v")`/`!=`), in time linear in the object size; anything else is reported back as a
//! warning and ignored. No user expression is ever run by a general evaluator (GHSA-9m6p, CVE-2024-32476).

use serde_json::Value;

use crate::api::application::ResourceIgnoreDifferences;
use crate::engine::object::ObjectKey;

use super::managed::{remove_all, Locator};
use super::normalize::MAX_DEPTH;

/// Longest jq expression accepted.
const MAX_JQ_LEN: usize = 1024;
/// Most steps in one jq expression.
const MAX_JQ_STEPS: usize = 64;
/// Most paths one jq expression may select (bounds time and memory on huge lists).
const MAX_JQ_PATHS: usize = 10_000;

/// Whether `rule` selects the object `key`: group and kind equal or `*`, name and namespace equal when set
/// (Argo CD `IgnoreDifferences` matching).
pub fn rule_matches(rule: &ResourceIgnoreDifferences, key: &ObjectKey) -> bool {
    let group = rule.group.as_deref().unwrap_or_default();
    let group_ok = group == "*" || group == key.group;
    let kind_ok = rule.kind == "*" || rule.kind == key.kind;
    let name_ok = rule.name.as_deref().is_none_or(|n| n.is_empty() || n == key.name);
    let ns_ok = rule
        .namespace
        .as_deref()
        .is_none_or(|n| n.is_empty() || n == key.namespace);
    group_ok && kind_ok && name_ok && ns_ok
}

/// Removes the value at an RFC 6901 pointer (`~1` = `/`, `~0` = `~`), if present. The empty pointer
/// (the whole document) is not removable and is ignored.
pub fn remove_pointer(obj: &mut Value, pointer: &str) {
    let Some(rest) = pointer.strip_prefix('/') else {
        return;
    };
    let tokens: Vec<String> = rest.split('/').map(unescape).collect();
    let Some((last, parents)) = tokens.split_last() else {
        return;
    };
    let mut cur = obj;
    for t in parents {
        let next = match cur {
            Value::Object(m) => m.get_mut(t),
            Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get_mut(i)),
            _ => None,
        };
        let Some(next) = next else {
            return;
        };
        cur = next;
    }
    match cur {
        Value::Object(m) => {
            m.remove(last);
        }
        Value::Array(a) => {
            if let Some(i) = last.parse::<usize>().ok().filter(|i| *i < a.len()) {
                a.remove(i);
            }
        }
        _ => {}
    }
}

fn unescape(token: &str) -> String {
    token.replace("~1", "/").replace("~0", "~")
}

/// One step of the supported jq subset.
#[derive(Clone, Debug, PartialEq)]
enum Step {
    /// `.name`, `."name"`, `.["name"]`.
    Field(String),
    /// `[n]` (negative counts from the end, as jq).
    Index(i64),
    /// `[]`: every element of a list (or value of a map).
    Each,
    /// `select(<relative path> == literal)` (or `!=`).
    Select {
        path: Vec<Step>,
        equal: bool,
        literal: Value,
    },
}

/// Parses a jq path expression of the supported subset; `None` when unsupported.
fn parse_jq(expr: &str) -> Option<Vec<Step>> {
    if expr.len() > MAX_JQ_LEN {
        return None;
    }
    let mut p = JqParser {
        s: expr.as_bytes(),
        i: 0,
    };
    let steps = p.pipeline()?;
    p.ws();
    (p.i == p.s.len() && !steps.is_empty() && steps.len() <= MAX_JQ_STEPS).then_some(steps)
}

struct JqParser<'a> {
    s: &'a [u8],
    i: usize,
}

impl JqParser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn eat(&mut self, token: &str) -> bool {
        self.ws();
        if self.s[self.i..].starts_with(token.as_bytes()) {
            self.i += token.len();
            true
        } else {
            false
        }
    }

    /// `path ( '|' (path | select) )*`
    fn pipeline(&mut self) -> Option<Vec<Step>> {
        let mut steps = self.path()?;
        while self.eat("|") {
            if self.eat("select(") {
                steps.push(self.select()?);
            } else {
                steps.extend(self.path()?);
            }
            if steps.len() > MAX_JQ_STEPS {
                return None;
            }
        }
        Some(steps)
    }

    /// `.` alone, or a sequence of `.name`, `."name"`, `.["name"]`, `[n]`, `[]`.
    fn path(&mut self) -> Option<Vec<Step>> {
        self.ws();
        if self.s.get(self.i) != Some(&b'.') {
            return None;
        }
        let mut steps = Vec::new();
        let mut identity = false;
        loop {
            match self.s.get(self.i) {
                Some(b'.') => {
                    self.i += 1;
                    match self.s.get(self.i) {
                        Some(b'"') => steps.push(Step::Field(self.string()?)),
                        Some(b'[') => steps.push(self.bracket()?),
                        Some(c) if c.is_ascii_alphabetic() || *c == b'_' => steps.push(Step::Field(self.ident())),
                        // `.` alone (identity); `..` (recursion) and `.a.` are not supported.
                        Some(b'.') => return None,
                        _ if steps.is_empty() && !identity => identity = true,
                        _ => return None,
                    }
                }
                Some(b'[') if !identity => steps.push(self.bracket()?),
                _ => return Some(steps),
            }
            if steps.len() > MAX_JQ_STEPS {
                return None;
            }
        }
    }

    fn ident(&mut self) -> String {
        let start = self.i;
        while self
            .s
            .get(self.i)
            .is_some_and(|c| c.is_ascii_alphanumeric() || *c == b'_')
        {
            self.i += 1;
        }
        String::from_utf8_lossy(&self.s[start..self.i]).into_owned()
    }

    /// A JSON string literal at the cursor.
    fn string(&mut self) -> Option<String> {
        let v = self.literal()?;
        v.as_str().map(str::to_string)
    }

    /// A JSON scalar literal (string, number, true/false/null) at the cursor, delimited by hand (a
    /// string up to its closing quote, anything else up to a delimiter) and decoded by serde_json.
    fn literal(&mut self) -> Option<Value> {
        self.ws();
        let start = self.i;
        if self.s.get(self.i) == Some(&b'"') {
            self.i += 1;
            loop {
                match self.s.get(self.i)? {
                    b'\\' => self.i += 2,
                    b'"' => break,
                    _ => self.i += 1,
                }
            }
            self.i += 1;
        } else {
            while self
                .s
                .get(self.i)
                .is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'+' | b'-'))
            {
                self.i += 1;
            }
        }
        let text = std::str::from_utf8(self.s.get(start..self.i)?).ok()?;
        match serde_json::from_str::<Value>(text).ok()? {
            Value::Object(_) | Value::Array(_) => None,
            v => Some(v),
        }
    }

    /// `[]`, `[n]`, `["name"]` (cursor on `[`).
    fn bracket(&mut self) -> Option<Step> {
        self.i += 1;
        if self.eat("]") {
            return Some(Step::Each);
        }
        let step = match self.literal()? {
            Value::String(s) => Step::Field(s),
            Value::Number(n) => Step::Index(n.as_i64()?),
            _ => return None,
        };
        self.eat("]").then_some(step)
    }

    /// `select(` already consumed: `path (==|!=) literal )`.
    fn select(&mut self) -> Option<Step> {
        let path = self.path()?;
        if path.iter().any(|s| matches!(s, Step::Each | Step::Select { .. })) {
            return None;
        }
        let equal = if self.eat("==") {
            true
        } else if self.eat("!=") {
            false
        } else {
            return None;
        };
        let literal = self.literal()?;
        self.eat(")").then_some(Step::Select { path, equal, literal })
    }
}

/// The positions selected by `steps` in `obj`, as locator paths (at most `MAX_JQ_PATHS`).
fn eval_jq(obj: &Value, steps: &[Step]) -> Vec<Vec<Locator>> {
    let mut paths: Vec<Vec<Locator>> = vec![Vec::new()];
    for step in steps {
        let mut next = Vec::new();
        for path in paths {
            let Some(v) = resolve(obj, &path) else {
                continue;
            };
            for loc in apply_step(v, step) {
                if next.len() >= MAX_JQ_PATHS {
                    break;
                }
                let mut p = path.clone();
                if let Some(loc) = loc {
                    p.push(loc);
                }
                next.push(p);
            }
        }
        paths = next;
    }
    paths
}

/// Locations produced by one step from `v` (`None`: the value itself, for `select`).
fn apply_step(v: &Value, step: &Step) -> Vec<Option<Locator>> {
    match (step, v) {
        (Step::Field(k), Value::Object(m)) if m.contains_key(k) => vec![Some(Locator::Key(k.clone()))],
        (Step::Index(i), Value::Array(a)) => {
            let idx = if *i < 0 {
                i64::try_from(a.len()).unwrap_or(0) + i
            } else {
                *i
            };
            usize::try_from(idx)
                .ok()
                .filter(|i| *i < a.len())
                .map(|i| vec![Some(Locator::Index(i))])
                .unwrap_or_default()
        }
        (Step::Each, Value::Array(a)) => (0..a.len()).map(|i| Some(Locator::Index(i))).collect(),
        (Step::Each, Value::Object(m)) => m.keys().map(|k| Some(Locator::Key(k.clone()))).collect(),
        (Step::Select { path, equal, literal }, _) => {
            let found = select_value(v, path);
            let hit = found.is_some_and(|f| f == literal) == *equal;
            if hit {
                vec![None]
            } else {
                Vec::new()
            }
        }
        _ => Vec::new(),
    }
}

fn select_value<'a>(v: &'a Value, path: &[Step]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, step| match (step, cur) {
        (Step::Field(k), Value::Object(m)) => m.get(k),
        (Step::Index(i), Value::Array(a)) => usize::try_from(*i).ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

fn resolve<'a>(obj: &'a Value, path: &[Locator]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |v, loc| loc.get(v))
}

/// Removes every path selected by a supported jq expression; `Err` (with the reason) when the expression
/// is outside the supported subset, in which case nothing is removed.
pub fn remove_jq(obj: &mut Value, expr: &str) -> Result<(), String> {
    let steps = parse_jq(expr).ok_or_else(|| format!("unsupported jqPathExpression {expr:?} (ignored)"))?;
    let mut paths = eval_jq(obj, &steps);
    paths.retain(|p| !p.is_empty() && p.len() <= MAX_DEPTH);
    remove_paths(obj, paths);
    Ok(())
}

/// Removes locator paths, deepest and highest index first so earlier removals never shift later ones.
fn remove_paths(obj: &mut Value, mut paths: Vec<Vec<Locator>>) {
    paths.sort_by(|a, b| cmp_paths(b, a));
    paths.dedup();
    for path in paths {
        let Some((last, parents)) = path.split_last() else {
            continue;
        };
        let parent = parents.iter().try_fold(&mut *obj, |v, loc| loc.get_mut(v));
        if let Some(parent) = parent {
            remove_all(parent, std::slice::from_ref(last));
        }
    }
}

fn cmp_paths(a: &[Locator], b: &[Locator]) -> std::cmp::Ordering {
    for (x, y) in a.iter().zip(b) {
        let o = match (x, y) {
            (Locator::Index(i), Locator::Index(j)) => i.cmp(j),
            (Locator::Key(i), Locator::Key(j)) => i.cmp(j),
            (Locator::Index(_), Locator::Key(_)) => std::cmp::Ordering::Less,
            (Locator::Key(_), Locator::Index(_)) => std::cmp::Ordering::Greater,
        };
        if o != std::cmp::Ordering::Equal {
            return o;
        }
    }
    a.len().cmp(&b.len())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn rule(group: Option<&str>, kind: &str, name: Option<&str>) -> ResourceIgnoreDifferences {
        ResourceIgnoreDifferences {
            group: group.map(Into::into),
            kind: kind.into(),
            name: name.map(Into::into),
            ..Default::default()
        }
    }

    #[test]
    fn rule_matching() {
        let key = ObjectKey::new("apps", "Deployment", "shop", "web");
        assert!(rule_matches(&rule(Some("apps"), "Deployment", None), &key));
        assert!(rule_matches(&rule(Some("*"), "*", Some("web")), &key));
        assert!(!rule_matches(&rule(None, "Deployment", None), &key));
        assert!(!rule_matches(&rule(Some("apps"), "Deployment", Some("api")), &key));
        let cm = ObjectKey::new("", "ConfigMap", "shop", "c");
        assert!(rule_matches(&rule(None, "ConfigMap", Some("")), &cm));
    }

    #[test]
    fn json_pointers() {
        let mut o = json!({"spec": {"replicas": 3, "a/b": 1, "t~x": 2, "l": [1, 2, 3]}});
        for p in [
            "/spec/replicas",
            "/spec/a~1b",
            "/spec/t~0x",
            "/spec/l/1",
            "/nope/x",
            "",
            "/spec/l/9",
            "/spec/l/x",
        ] {
            remove_pointer(&mut o, p);
        }
        assert_eq!(o, json!({"spec": {"l": [1, 3]}}));
    }

    #[test]
    fn jq_subset() {
        let base = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]},
            {"name": "sidecar", "image": "s"}
        ]}}, "meta.x": {"y": 1}}});
        let cases = [
            (
                ".spec.template.spec.containers[] | select(.name == \"sidecar\")",
                json!([{"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]}]),
            ),
            (
                ".spec.template.spec.containers[].image",
                json!([{"name": "app", "env": [{"name": "X", "value": "1"}]}, {"name": "sidecar"}]),
            ),
            (
                ".spec.template.spec.containers[0].env",
                json!([{"name": "app", "image": "a"}, {"name": "sidecar", "image": "s"}]),
            ),
            (
                ".spec.template.spec.containers[] | select(.name != \"app\") | .image",
                json!([{"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]}, {"name": "sidecar"}]),
            ),
            (
                ".spec.template.spec.containers[-1]",
                json!([{"name": "app", "image": "a", "env": [{"name": "X", "value": "1"}]}]),
            ),
            (".spec.template.spec[\"containers\"][]", json!([])),
        ];
        for (expr, want) in cases {
            let mut o = base.clone();
            remove_jq(&mut o, expr).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(o["spec"]["template"]["spec"]["containers"], want, "{expr}");
        }
        let mut o = base.clone();
        remove_jq(&mut o, ".spec.\"meta.x\".y").unwrap();
        assert_eq!(o["spec"]["meta.x"], json!({}));
    }

    #[test]
    fn unsupported_jq_is_reported_not_run() {
        for expr in [
            "def f: f; f",
            "[.[]?]",
            ".a | .. ",
            "reduce range(0;1e9) as $i (0; .+1)",
            ".a |",
            "",
            ".a[] | select(.b[] == 1)",
            &".a".repeat(600),
        ] {
            let mut o = json!({"a": [1]});
            assert!(remove_jq(&mut o, expr).is_err(), "{expr}");
            assert_eq!(o, json!({"a": [1]}));
        }
    }

    #[test]
    fn jq_is_bounded_on_huge_lists() {
        let items: Vec<Value> = (0..50_000).map(|i| json!({"name": i.to_string()})).collect();
        let mut o = json!({"a": items});
        remove_jq(&mut o, ".a[] | select(.name != \"x\")").unwrap();
        assert_eq!(o["a"].as_array().map(Vec::len), Some(40_000));
    }
}
