//! Label selectors: the post-generation `selector` of every generator, and the cluster
//! generator's Cluster selector.
//!
//! Argo CD matches a generator's `selector` against the parameter set flattened to dotted keys
//! with `%v` values, using a copy of `LabelSelectorAsSelector` that does not validate label
//! values (so URLs and paths can be matched). Operators: `In`, `NotIn`, `Exists`,
//! `DoesNotExist`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

use crate::appset::error::AppSetError;
use crate::appset::params::{flatten, ParamSet};

/// Keeps the parameter sets `selector` matches; no selector keeps all.
pub fn filter(selector: Option<&LabelSelector>, sets: Vec<ParamSet>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    let Some(selector) = selector else { return Ok(sets) };
    validate(selector).map_err(|e| AppSetError::InvalidSelector(format!("{path}.selector: {e}")))?;
    Ok(sets
        .into_iter()
        .filter(|set| matches(selector, &flatten(set)))
        .collect())
}

/// Whether a selector has no requirement at all (it then selects everything).
pub fn is_empty(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(BTreeMap::is_empty)
        && selector.match_expressions.as_ref().is_none_or(Vec::is_empty)
}

/// Checks operators and value counts as `LabelSelectorAsSelector` does.
pub fn validate(selector: &LabelSelector) -> Result<(), String> {
    for req in selector.match_expressions.iter().flatten() {
        let values = req.values.as_deref().unwrap_or_default();
        match req.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(format!(
                    "{}: values must be non-empty for operator {}",
                    req.key, req.operator
                ));
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(format!(
                    "{}: values must be empty for operator {}",
                    req.key, req.operator
                ));
            }
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            other => return Err(format!("{}: {other:?} is not a valid label selector operator", req.key)),
        }
    }
    Ok(())
}

/// Whether `labels` satisfy every requirement (call [`validate`] first).
pub fn matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let labels_ok = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    labels_ok
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|req| requirement_matches(req, labels))
}

fn requirement_matches(req: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let value = labels.get(&req.key);
    let listed = |v: &String| req.values.iter().flatten().any(|x| x == v);
    match req.operator.as_str() {
        "In" => value.is_some_and(listed),
        "NotIn" => !value.is_some_and(listed),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.to_owned(),
            operator: op.to_owned(),
            values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
        }
    }

    #[test]
    fn match_labels_and_expressions() {
        let sel = LabelSelector {
            match_labels: Some(labels(&[("env", "prod")])),
            match_expressions: Some(vec![expr("tier", "NotIn", &["db"]), expr("region", "Exists", &[])]),
        };
        assert!(matches(&sel, &labels(&[("env", "prod"), ("region", "eu")])));
        assert!(!matches(
            &sel,
            &labels(&[("env", "prod"), ("region", "eu"), ("tier", "db")])
        ));
        assert!(!matches(&sel, &labels(&[("env", "prod")])));
    }

    #[test]
    fn invalid_operators_are_refused() {
        let sel = LabelSelector {
            match_expressions: Some(vec![expr("a", "Gt", &["1"])]),
            ..Default::default()
        };
        assert!(validate(&sel).is_err());
        let sel = LabelSelector {
            match_expressions: Some(vec![expr("a", "In", &[])]),
            ..Default::default()
        };
        assert!(validate(&sel).is_err());
    }
}
