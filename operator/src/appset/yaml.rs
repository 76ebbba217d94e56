//! YAML as Argo CD's ApplicationSet controller reads it (`sigs.k8s.io/yaml`: YAML 1.1 scalars,
//! duplicate keys last-wins, merge keys), bounded in size and depth because the input comes
//! from Git files, `elementsYaml` and rendered `templatePatch`es.

use serde_json::Value;

use crate::render::yaml::{parse_one, YamlLimits};
use crate::text::truncate;

/// Deepest nesting accepted in any parsed document or parameter value.
pub const MAX_DEPTH: usize = 64;

/// Parses one YAML (or JSON) document through the shared Kubernetes YAML profile (`render::yaml`);
/// an empty input is `null`.
pub fn parse(input: &str, max_bytes: usize) -> Result<Value, String> {
    let limits = YamlLimits {
        max_depth: MAX_DEPTH,
        max_bytes,
    };
    parse_one(input, &limits).map_err(|e| e.to_string())
}

/// Verifies nesting depth without recursion.
pub fn check_depth(value: &Value, max_depth: usize) -> Result<(), String> {
    crate::render::yaml::check_depth(value, max_depth).map_err(|e| e.to_string())
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
