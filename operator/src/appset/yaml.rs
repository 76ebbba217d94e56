//! YAML as Argo CD's ApplicationSet controller reads it (`sigs.k8s.io/yaml`: YAML 1.1 scalars,
//! duplicate keys last-wins, merge keys), bounded in size and depth because the input comes
//! from Git files, `elementsYaml` and rendered `templatePatch`es.

use serde_json::Value;
use serde_saphyr::{DuplicateKeyPolicy, MergeKeyPolicy, Options};

use super::error::truncate;

/// Deepest nesting accepted in any parsed document or parameter value.
pub const MAX_DEPTH: usize = 64;

/// Parses one YAML (or JSON) document; an empty input is `null`.
pub fn parse(input: &str, max_bytes: usize) -> Result<Value, String> {
    if input.len() > max_bytes {
        return Err(format!(
            "document of {} bytes exceeds the limit of {max_bytes} bytes",
            input.len()
        ));
    }
    let docs: Vec<Value> = serde_saphyr::from_multiple_with_options(input, options(max_bytes))
        .map_err(|e| truncate(&e.without_snippet().to_string(), 300))?;
    let mut docs: Vec<Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    let doc = match docs.len() {
        0 => Value::Null,
        1 => docs.remove(0),
        n => return Err(format!("expected one YAML document, found {n}")),
    };
    check_depth(&doc, MAX_DEPTH)?;
    Ok(doc)
}

/// The Kubernetes YAML profile with a budget scaled to the input bound.
fn options(max_bytes: usize) -> Options {
    let mut options = Options::default();
    options.legacy_octal_numbers = true;
    options.strict_booleans = false;
    options.duplicate_keys = DuplicateKeyPolicy::LastWins;
    options.merge_keys = MergeKeyPolicy::Merge;
    options.with_snippet = false;
    options.alias_limits.max_total_replayed_events = 100_000;
    let scaled = max_bytes.saturating_add(1024);
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    budget.flow_nesting_limit = MAX_DEPTH;
    budget.max_documents = 16;
    budget.max_nodes = scaled;
    budget.max_events = scaled.saturating_mul(2);
    budget.max_total_scalar_bytes = scaled;
    budget.max_reader_input_bytes = Some(scaled);
    options.budget = Some(budget);
    options
}

/// Verifies nesting depth without recursion.
pub fn check_depth(value: &Value, max_depth: usize) -> Result<(), String> {
    let mut stack: Vec<(&Value, usize)> = vec![(value, 0)];
    while let Some((v, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match v {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        if depth + 1 > max_depth {
            return Err(format!("nesting exceeds the maximum depth of {max_depth}"));
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    Ok(())
}

/// Serializes a value as YAML the way `sigs.k8s.io/yaml.Marshal` does for the `toYaml`
/// template function: block style, keys sorted, no document marker, trailing newline trimmed
/// by the caller.
pub fn to_yaml(value: &Value) -> Result<String, String> {
    serde_saphyr::to_string(value).map_err(|e| truncate(&e.to_string(), 300))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn parses_yaml_1_1_scalars() {
        assert_eq!(
            parse("a: yes\nb: 0644\nc: '1'\n", 1024).unwrap(),
            json!({"a": true, "b": 420, "c": "1"})
        );
    }

    #[test]
    fn empty_input_is_null_and_size_is_bounded() {
        assert_eq!(parse("", 10).unwrap(), Value::Null);
        assert!(parse("a: 1234567890", 4).is_err());
    }

    #[test]
    fn deep_nesting_is_refused() {
        let flow = format!("{}{}", "[".repeat(200), "]".repeat(200));
        assert!(parse(&flow, 10_000).is_err());
    }
}
