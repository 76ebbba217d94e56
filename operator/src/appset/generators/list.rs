//! The list generator: parameter sets written inline (`elements`) or as a YAML string
//! (`elementsYaml`), as Argo CD's `ListGenerator`.

use serde_json::Value;

use super::Ctx;
use crate::api::application_set::ListGenerator;
use crate::appset::error::AppSetError;
use crate::appset::params::{normalize_numbers, ParamSet};
use crate::appset::yaml;

/// `elements` then `elementsYaml`, in order.
///
/// With fasttemplate Argo CD requires element values to be strings, except `values`, an object
/// of strings that becomes `values.<key>`; anything else is an error. With Go templates the
/// element is the parameter set as written. `elementsYaml` items are taken as they are.
pub(crate) fn generate(list: &ListGenerator, ctx: &Ctx<'_>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    let mut sets = Vec::with_capacity(list.elements.len());
    for (i, element) in list.elements.iter().enumerate() {
        let Value::Object(map) = element else {
            return Err(AppSetError::generator(path, format!("elements[{i}] is not an object")));
        };
        let set = if ctx.renderer.is_go() {
            let mut v = Value::Object(map.clone());
            normalize_numbers(&mut v);
            into_map(v)
        } else {
            flat_element(map).map_err(|e| AppSetError::generator(path, format!("elements[{i}]: {e}")))?
        };
        sets.push(set);
    }
    if let Some(text) = list.elements_yaml.as_deref().filter(|t| !t.trim().is_empty()) {
        sets.extend(yaml_elements(text, ctx).map_err(|e| AppSetError::generator(path, format!("elementsYaml: {e}")))?);
    }
    ctx.check_count(sets.len(), path)?;
    Ok(sets)
}

fn flat_element(map: &serde_json::Map<String, Value>) -> Result<ParamSet, String> {
    let mut params = ParamSet::new();
    for (key, value) in map {
        match (key.as_str(), value) {
            ("values", Value::Object(values)) => {
                for (k, v) in values {
                    let Value::String(s) = v else {
                        return Err(format!("values.{k} is not a string"));
                    };
                    params.insert(format!("values.{k}"), Value::String(s.clone()));
                }
            }
            ("values", _) => return Err("values is not an object".to_owned()),
            (_, Value::String(s)) => {
                params.insert(key.clone(), Value::String(s.clone()));
            }
            _ => return Err(format!("{key} is not a string (use goTemplate for other types)")),
        }
    }
    Ok(params)
}

fn yaml_elements(text: &str, ctx: &Ctx<'_>) -> Result<Vec<ParamSet>, String> {
    let mut parsed = yaml::parse(text, ctx.inputs.limits.max_file_bytes)?;
    normalize_numbers(&mut parsed);
    match parsed {
        Value::Null => Ok(Vec::new()),
        Value::Array(items) => items
            .into_iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::Object(m) => Ok(m),
                _ => Err(format!("item {i} is not an object")),
            })
            .collect(),
        _ => Err("not a list of objects".to_owned()),
    }
}

fn into_map(v: Value) -> ParamSet {
    match v {
        Value::Object(m) => m,
        _ => ParamSet::new(),
    }
}
