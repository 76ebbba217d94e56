//! The matrix generator: the cartesian product of exactly two children, as Argo CD's
//! `MatrixGenerator`.
//!
//! The second child is generated once per parameter set of the first, with its spec templated
//! by that set first (so it can read e.g. the first child's `path.basename`). Combining: with
//! Go templates the two sets are deep-merged and the first child wins on conflicts; with
//! fasttemplate a key present in both with different values is an error, as in Argo CD.

use serde_json::Value;

use super::{generate as generate_child, Ctx, Spec};
use crate::appset::error::AppSetError;
use crate::appset::params::{go_string, ParamSet};

/// The product of the two children's parameter sets.
pub(crate) fn generate<S: Spec>(children: &[S], ctx: &Ctx<'_>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    let [first, second] = children else {
        return Err(AppSetError::InvalidSpec(format!(
            "{path} needs exactly two generators, found {}",
            children.len()
        )));
    };
    let first_sets = generate_child(first, ctx, &format!("{path}.generators[0]"), None)?;
    let mut out = Vec::new();
    for a in &first_sets {
        let second_sets = generate_child(second, ctx, &format!("{path}.generators[1]"), Some(a))?;
        for b in second_sets {
            let combined = if ctx.renderer.is_go() {
                let mut merged = b;
                deep_merge_override(&mut merged, a);
                merged
            } else {
                combine_flat(a, &b).map_err(|e| AppSetError::generator(path, e))?
            };
            out.push(combined);
            ctx.check_count(out.len(), path)?;
        }
    }
    Ok(out)
}

/// `mergo.Merge(dst, src, mergo.WithOverride)` on parameter maps: nested objects merge
/// recursively, any other value from `src` replaces the one in `dst`.
pub(crate) fn deep_merge_override(dst: &mut ParamSet, src: &ParamSet) {
    merge_recursive(dst, src, 0);
}

/// Depth-bounded recursion: parameter values are depth-checked when parsed, and past the bound
/// a value replaces rather than merges.
fn merge_recursive(dst: &mut ParamSet, src: &ParamSet, depth: usize) {
    for (key, value) in src {
        match (dst.get_mut(key), value) {
            (Some(Value::Object(d)), Value::Object(s)) if depth < 128 => merge_recursive(d, s, depth + 1),
            _ => {
                dst.insert(key.clone(), value.clone());
            }
        }
    }
}

/// Argo CD's `CombineStringMaps`: values as `%v` strings, conflicting duplicates refused.
fn combine_flat(a: &ParamSet, b: &ParamSet) -> Result<ParamSet, String> {
    let mut out: ParamSet = a
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(as_string(v))))
        .collect();
    for (k, v) in b {
        let v = as_string(v);
        match out.get(k) {
            Some(Value::String(current)) if *current != v => {
                return Err(format!(
                    "found duplicate key {k} with different value, a: {current} ,b: {v}"
                ));
            }
            _ => {
                out.insert(k.clone(), Value::String(v));
            }
        }
    }
    Ok(out)
}

fn as_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => go_string(other),
    }
}
