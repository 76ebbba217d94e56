//! The merge generator: children's parameter sets joined on `mergeKeys`, as Argo CD's
//! `MergeGenerator`.
//!
//! The first child is the base: only its sets are output. Each later child's set whose
//! merge-key values equal a base set's overrides that set's parameters (flat override with
//! fasttemplate, deep merge with Go templates). Within one child the merge-key values must be
//! unique. Merge keys are top-level parameter names (`server`, or `values.selector` with
//! fasttemplate's flat parameters); a missing key counts as null. Output keeps the base order
//! (Argo CD's is a map's random order).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::matrix::deep_merge_override;
use super::{generate as generate_child, Ctx, Spec};
use crate::appset::error::AppSetError;
use crate::appset::params::{go_string, ParamSet};

/// The base child's sets, each overridden by the matching sets of the later children.
pub(crate) fn generate<S: Spec>(
    children: &[S],
    merge_keys: &[String],
    ctx: &Ctx<'_>,
    path: &str,
) -> Result<Vec<ParamSet>, AppSetError> {
    if children.len() < 2 {
        return Err(AppSetError::InvalidSpec(format!(
            "{path} needs at least two generators, found {}",
            children.len()
        )));
    }
    if merge_keys.is_empty() {
        return Err(AppSetError::InvalidSpec(format!("{path} needs at least one merge key")));
    }
    let mut children_sets = Vec::with_capacity(children.len());
    for (i, child) in children.iter().enumerate() {
        children_sets.push(generate_child(child, ctx, &format!("{path}.generators[{i}]"), None)?);
    }
    let mut base = children_sets.remove(0);
    let base_index = index_by_keys(&base, merge_keys).map_err(|e| AppSetError::generator(path, e))?;
    for overrides in &children_sets {
        let index = index_by_keys(overrides, merge_keys).map_err(|e| AppSetError::generator(path, e))?;
        for (key, &base_pos) in &base_index {
            if let Some(&pos) = index.get(key) {
                merge_into(&mut base[base_pos], &overrides[pos], ctx.renderer.is_go());
            }
        }
    }
    Ok(base)
}

/// Maps each set's merge-key JSON (`{"key": value, ...}`, sorted as Go marshals maps) to its
/// position; duplicates are Argo CD's `ErrNonUniqueParamSets`.
fn index_by_keys(sets: &[ParamSet], merge_keys: &[String]) -> Result<HashMap<String, usize>, String> {
    let mut index = HashMap::with_capacity(sets.len());
    for (pos, set) in sets.iter().enumerate() {
        let key: Map<String, Value> = merge_keys
            .iter()
            .map(|k| (k.clone(), set.get(k).cloned().unwrap_or(Value::Null)))
            .collect();
        let key = Value::Object(key).to_string();
        if index.insert(key.clone(), pos).is_some() {
            return Err(format!(
                "the parameters from a generator were not unique by the given mergeKeys, Merge requires all param sets to be unique. Duplicate key was {key}"
            ));
        }
    }
    Ok(index)
}

fn merge_into(base: &mut ParamSet, overrides: &ParamSet, go: bool) {
    if go {
        deep_merge_override(base, overrides);
        return;
    }
    // Argo CD's CombineStringMapsAllowDuplicates: every value as a `%v` string, later wins.
    for value in base.values_mut() {
        if !value.is_string() {
            *value = Value::String(go_string(value));
        }
    }
    for (k, v) in overrides {
        let v = match v {
            Value::String(s) => s.clone(),
            other => go_string(other),
        };
        base.insert(k.clone(), Value::String(v));
    }
}
