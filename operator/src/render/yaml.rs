//! The shared Kubernetes YAML profile.
//!
//! Kubernetes (and so Argo CD) reads YAML through `sigs.k8s.io/yaml`, i.e. go-yaml with YAML 1.1
//! scalar rules: `0644` is octal (420), `yes`/`on`/`off`/`no` are booleans, `<<` merge keys expand,
//! and a repeated key keeps its last value. Every YAML byte Capstan reads from a repository or a
//! tool goes through [`parse_stream`] so that all renderers agree on these rules and on the
//! resource budget that keeps hostile input (alias bombs, 100 000-deep nesting, document storms)
//! from exhausting memory, CPU or the stack.

use serde_json::Value;
use serde_saphyr::{DuplicateKeyPolicy, MergeKeyPolicy, Options};

/// Alias replay cap. Kubernetes manifests rarely use aliases at all; this stops a billion-laughs
/// payload long before it can allocate a meaningful amount of memory.
const MAX_REPLAYED_ALIAS_EVENTS: usize = 200_000;

/// Flow collections (`[...]`, `{...}`) are nested on the parser's stack; keep them shallow.
const MAX_FLOW_NESTING: usize = 255;

/// Bounds for one YAML stream.
#[derive(Clone, Copy, Debug)]
pub struct YamlLimits {
    /// Maximum nesting of sequences and mappings.
    pub max_depth: usize,
    /// Maximum input size in bytes.
    pub max_bytes: usize,
}

/// Why a stream was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum YamlError {
    /// The input broke a resource bound (size, depth, aliases, events).
    Limit(String),
    /// The input is not YAML, or not of the expected shape.
    Syntax(String),
}

impl std::fmt::Display for YamlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            YamlError::Limit(m) | YamlError::Syntax(m) => f.write_str(m),
        }
    }
}

/// The serde-saphyr options of the Kubernetes profile.
///
/// The budget is raised well above serde-saphyr's defaults (1 024 documents, 250 000 nodes,
/// 1 000 000 events), which a legitimate 10 MiB stream of manifests can exceed; the real bound on
/// those counts is the input size, checked before parsing.
pub fn kubernetes_options(limits: &YamlLimits) -> Options {
    let mut options = Options::default();
    options.legacy_octal_numbers = true;
    options.strict_booleans = false;
    options.duplicate_keys = DuplicateKeyPolicy::LastWins;
    options.merge_keys = MergeKeyPolicy::Merge;
    // Snippets would copy source lines into error messages, which end up in status conditions.
    options.with_snippet = false;
    options.alias_limits.max_total_replayed_events = MAX_REPLAYED_ALIAS_EVENTS;
    let mut budget = serde_saphyr::Budget::default();
    let scaled = limits.max_bytes.saturating_add(1024);
    budget.max_depth = limits.max_depth;
    budget.flow_nesting_limit = limits.max_depth.min(MAX_FLOW_NESTING);
    budget.max_documents = scaled;
    budget.max_nodes = scaled;
    budget.max_events = scaled.saturating_mul(2);
    budget.max_total_scalar_bytes = scaled;
    budget.max_reader_input_bytes = Some(scaled);
    options.budget = Some(budget);
    options
}

/// Parses a multi-document YAML stream into JSON values.
///
/// Empty and null documents are skipped (as `kubectl` does). Every value is checked against
/// `max_depth` again after parsing, because JSON-in-YAML and alias expansion can both nest.
pub fn parse_stream(input: &str, limits: &YamlLimits) -> Result<Vec<Value>, YamlError> {
    if input.len() > limits.max_bytes {
        return Err(YamlError::Limit(format!(
            "YAML stream of {} bytes exceeds the limit of {} bytes",
            input.len(),
            limits.max_bytes
        )));
    }
    let docs: Vec<Value> =
        serde_saphyr::from_multiple_with_options(input, kubernetes_options(limits)).map_err(classify)?;
    for doc in &docs {
        check_depth(doc, limits.max_depth)?;
    }
    Ok(docs.into_iter().filter(|d| !d.is_null()).collect())
}

/// Parses a single YAML document (a values file, a kustomization); an empty input is `null`.
pub fn parse_one(input: &str, limits: &YamlLimits) -> Result<Value, YamlError> {
    let mut docs = parse_stream(input, limits)?;
    match docs.len() {
        0 => Ok(Value::Null),
        1 => Ok(docs.remove(0)),
        n => Err(YamlError::Syntax(format!("expected one YAML document, found {n}"))),
    }
}

/// Maps a serde-saphyr error onto limit-vs-syntax, keeping only its (snippet-free) message.
fn classify(err: serde_saphyr::Error) -> YamlError {
    let inner = err.without_snippet();
    let message = crate::text::truncate(&inner.to_string(), 300);
    let is_limit = matches!(
        inner,
        serde_saphyr::Error::Budget { .. }
            | serde_saphyr::Error::AliasReplayCounterOverflow { .. }
            | serde_saphyr::Error::AliasReplayLimitExceeded { .. }
            | serde_saphyr::Error::AliasExpansionLimitExceeded { .. }
            | serde_saphyr::Error::AliasReplayStackDepthExceeded { .. }
    ) || ["limit exceeded", "budget", "nesting", "depth"]
        .iter()
        .any(|m| message.contains(m));
    if is_limit {
        YamlError::Limit(format!("YAML exceeds a parser limit: {message}"))
    } else {
        YamlError::Syntax(format!("invalid YAML: {message}"))
    }
}

/// Verifies nesting depth without recursion (so a deep value cannot overflow the stack here).
pub fn check_depth(value: &Value, max_depth: usize) -> Result<(), YamlError> {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth + 1 > max_depth {
            return Err(YamlError::Limit(format!(
                "document nesting exceeds the maximum depth of {max_depth}"
            )));
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn limits() -> YamlLimits {
        YamlLimits {
            max_depth: 64,
            max_bytes: 10 << 20,
        }
    }

    #[test]
    fn legacy_octal_becomes_decimal() {
        let docs = parse_stream("mode: 0644\nhex: 0x1F\nplain: 644\nstr: '0644'\n", &limits()).unwrap();
        assert_eq!(docs, vec![json!({"mode": 420, "hex": 31, "plain": 644, "str": "0644"})]);
    }

    #[test]
    fn yaml_1_1_booleans() {
        let docs = parse_stream("a: yes\nb: on\nc: off\nd: no\ne: true\nf: 'yes'\n", &limits()).unwrap();
        assert_eq!(
            docs,
            vec![json!({"a": true, "b": true, "c": false, "d": false, "e": true, "f": "yes"})]
        );
    }

    #[test]
    fn non_string_keys_do_not_fail() {
        let docs = parse_stream("on: push\n0644: x\n1: y\n", &limits()).unwrap();
        assert_eq!(docs[0].as_object().map(|m| m.len()), Some(3));
    }

    #[test]
    fn merge_keys_and_duplicate_keys_last_wins() {
        let input = "base: &b {x: 1, y: 2}\nobj:\n  <<: *b\n  y: 3\ndup: 1\ndup: 2\n";
        let docs = parse_stream(input, &limits()).unwrap();
        assert_eq!(docs[0]["obj"], json!({"x": 1, "y": 3}));
        assert_eq!(docs[0]["dup"], json!(2));
    }

    #[test]
    fn multi_document_skips_empty_documents() {
        let input = "---\n---\na: 1\n---\n# only a comment\n---\nb: 2\n...\n---\n~\n";
        let docs = parse_stream(input, &limits()).unwrap();
        assert_eq!(docs, vec![json!({"a": 1}), json!({"b": 2})]);
    }

    #[test]
    fn large_streams_exceed_the_default_document_budget() {
        let input: String = (0..3000)
            .map(|i| format!("---\nkind: ConfigMap\nname: c{i}\n"))
            .collect();
        assert_eq!(parse_stream(&input, &limits()).unwrap().len(), 3000);
    }

    #[test]
    fn deep_nesting_is_a_clean_error() {
        let block: String = (0..10_000).map(|i| format!("{}- \n", "  ".repeat(i))).collect();
        assert!(matches!(parse_stream(&block, &limits()), Err(YamlError::Limit(_))));
        let flow = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(parse_stream(&flow, &limits()), Err(YamlError::Limit(_))));
        let mapping: String = (0..10_000).map(|i| format!("{}k:\n", "  ".repeat(i))).collect();
        assert!(matches!(parse_stream(&mapping, &limits()), Err(YamlError::Limit(_))));
    }

    #[test]
    fn billion_laughs_is_refused() {
        let mut input =
            String::from("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
        let names = ["b", "c", "d", "e", "f", "g", "h", "i"];
        let mut prev = "a";
        for n in names {
            input.push_str(&format!(
                "{n}: &{n} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"
            ));
            prev = n;
        }
        assert!(matches!(parse_stream(&input, &limits()), Err(YamlError::Limit(_))));
    }

    #[test]
    fn oversized_input_is_refused_before_parsing() {
        let small = YamlLimits {
            max_depth: 64,
            max_bytes: 10,
        };
        assert!(matches!(
            parse_stream("a: 1234567890\n", &small),
            Err(YamlError::Limit(_))
        ));
    }

    #[test]
    fn syntax_errors_are_classified() {
        assert!(matches!(
            parse_stream("a: [1, 2\n", &limits()),
            Err(YamlError::Syntax(_))
        ));
    }

    #[test]
    fn check_depth_counts_levels() {
        assert!(check_depth(&json!({"a": {"b": 1}}), 2).is_ok());
        assert!(check_depth(&json!({"a": {"b": {"c": 1}}}), 2).is_err());
    }
}
