//! Generators: each turns its spec into parameter sets.
//!
//! The API has three generator types for the three nesting levels (top level, child of a
//! `matrix`/`merge`, child of a nested `matrix`/`merge`); [`Spec`] gives them one view so a
//! single [`generate`] serves every level, as Argo CD's `Transform` does.

pub mod clusters;
pub mod git;
pub mod list;
pub mod matrix;
pub mod merge;
pub mod selector;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::error::AppSetError;
use super::params::ParamSet;
use super::template::Renderer;
use super::Inputs;
use crate::api::application_set::{
    ApplicationSetGenerator, ClusterGenerator, GitGenerator, ListGenerator, NestedGenerator, TerminalGenerator,
};

/// What every generator needs: the set's renderer (fasttemplate or Go, which also decides flat
/// or nested parameters) and the inputs (Cluster objects, Git trees, limits).
pub(crate) struct Ctx<'a> {
    pub renderer: &'a Renderer,
    pub inputs: &'a Inputs<'a>,
}

impl Ctx<'_> {
    /// Fails once a generator's output passes the parameter-set bound.
    pub fn check_count(&self, count: usize, path: &str) -> Result<(), AppSetError> {
        let max = self.inputs.limits.max_param_sets;
        if count > max {
            return Err(AppSetError::LimitExceeded(format!(
                "{path} produced more than {max} parameter sets"
            )));
        }
        Ok(())
    }
}

/// A `matrix` or `merge` with its children (of the next nesting level).
pub(crate) enum Composite<'a> {
    Matrix(&'a [NestedGenerator]),
    Merge(&'a [NestedGenerator], &'a [String]),
    TerminalMatrix(&'a [TerminalGenerator]),
    TerminalMerge(&'a [TerminalGenerator], &'a [String]),
}

/// One view over the generator types of every nesting level.
pub(crate) trait Spec: Serialize + DeserializeOwned {
    fn list(&self) -> Option<&ListGenerator>;
    fn clusters(&self) -> Option<&ClusterGenerator>;
    fn git(&self) -> Option<&GitGenerator>;
    fn composite(&self) -> Vec<Composite<'_>>;
    fn selector(&self) -> Option<&LabelSelector>;
}

/// The accessors every generator type has in the same fields.
macro_rules! terminal_accessors {
    () => {
        fn list(&self) -> Option<&ListGenerator> {
            self.list.as_ref()
        }
        fn clusters(&self) -> Option<&ClusterGenerator> {
            self.clusters.as_ref()
        }
        fn git(&self) -> Option<&GitGenerator> {
            self.git.as_ref()
        }
        fn selector(&self) -> Option<&LabelSelector> {
            self.selector.as_ref()
        }
    };
}

impl Spec for ApplicationSetGenerator {
    terminal_accessors!();
    fn composite(&self) -> Vec<Composite<'_>> {
        let matrix = self.matrix.as_ref().map(|m| Composite::Matrix(&m.generators));
        let merge = self
            .merge
            .as_ref()
            .map(|m| Composite::Merge(&m.generators, &m.merge_keys));
        matrix.into_iter().chain(merge).collect()
    }
}

impl Spec for NestedGenerator {
    terminal_accessors!();
    fn composite(&self) -> Vec<Composite<'_>> {
        let matrix = self.matrix.as_ref().map(|m| Composite::TerminalMatrix(&m.generators));
        let merge = self
            .merge
            .as_ref()
            .map(|m| Composite::TerminalMerge(&m.generators, &m.merge_keys));
        matrix.into_iter().chain(merge).collect()
    }
}

impl Spec for TerminalGenerator {
    terminal_accessors!();
    fn composite(&self) -> Vec<Composite<'_>> {
        Vec::new()
    }
}

/// Generates the parameter sets of one generator, then keeps those its `selector` matches.
///
/// `outer` is the parameter set of a matrix's first child: the generator's spec is first
/// templated with it (Argo CD's `InterpolateGenerator`), so the second child can read e.g.
/// `{{path.basename}}` in its Git path. The selector is the one written in the spec, not an
/// interpolated one, as in Argo CD.
pub(crate) fn generate<S: Spec>(
    spec: &S,
    ctx: &Ctx<'_>,
    path: &str,
    outer: Option<&ParamSet>,
) -> Result<Vec<ParamSet>, AppSetError> {
    let sets = match outer.filter(|p| !p.is_empty()) {
        Some(params) => {
            let interpolated: S = interpolate(spec, params, ctx, path)?;
            generate_kind(&interpolated, ctx, path)?
        }
        None => generate_kind(spec, ctx, path)?,
    };
    ctx.check_count(sets.len(), path)?;
    selector::filter(spec.selector(), sets, path)
}

fn generate_kind<S: Spec>(spec: &S, ctx: &Ctx<'_>, path: &str) -> Result<Vec<ParamSet>, AppSetError> {
    let composite = spec.composite();
    let kinds = usize::from(spec.list().is_some())
        + usize::from(spec.clusters().is_some())
        + usize::from(spec.git().is_some())
        + composite.len();
    if kinds != 1 {
        return Err(AppSetError::InvalidSpec(format!(
            "{path} must set exactly one of list, clusters, git, matrix or merge (found {kinds})"
        )));
    }
    if let Some(list) = spec.list() {
        return list::generate(list, ctx, &format!("{path}.list"));
    }
    if let Some(clusters) = spec.clusters() {
        return clusters::generate(clusters, ctx, &format!("{path}.clusters"));
    }
    if let Some(git) = spec.git() {
        return git::generate(git, ctx, &format!("{path}.git"));
    }
    match composite.into_iter().next() {
        Some(Composite::Matrix(children)) => matrix::generate(children, ctx, &format!("{path}.matrix")),
        Some(Composite::TerminalMatrix(children)) => matrix::generate(children, ctx, &format!("{path}.matrix")),
        Some(Composite::Merge(children, keys)) => merge::generate(children, keys, ctx, &format!("{path}.merge")),
        Some(Composite::TerminalMerge(children, keys)) => {
            merge::generate(children, keys, ctx, &format!("{path}.merge"))
        }
        None => Err(AppSetError::InvalidSpec(format!("{path} sets no generator"))),
    }
}

/// Templates every string of a generator spec with `params`.
fn interpolate<S: Spec>(spec: &S, params: &ParamSet, ctx: &Ctx<'_>, path: &str) -> Result<S, AppSetError> {
    let value = serde_json::to_value(spec).map_err(|e| AppSetError::generator(path, e.to_string()))?;
    let rendered = ctx.renderer.render_value(&value, params)?;
    serde_json::from_value(rendered)
        .map_err(|e| AppSetError::generator(path, format!("interpolated generator is invalid: {e}")))
}

/// Appends a generator's `values` (Argo CD's `appendTemplatedValues`): each value is templated
/// with the set's own parameters (not with other values) and stored as `values.<key>` (flat)
/// or under a `values` object (Go templates).
pub(crate) fn append_values(
    values: &std::collections::BTreeMap<String, String>,
    params: &mut ParamSet,
    ctx: &Ctx<'_>,
) -> Result<(), AppSetError> {
    if values.is_empty() {
        return Ok(());
    }
    let mut rendered = serde_json::Map::new();
    for (key, value) in values {
        rendered.insert(
            key.clone(),
            serde_json::Value::String(ctx.renderer.render_str(value, params)?),
        );
    }
    if ctx.renderer.is_go() {
        params.insert("values".to_owned(), serde_json::Value::Object(rendered));
    } else {
        for (key, value) in rendered {
            params.insert(format!("values.{key}"), value);
        }
    }
    Ok(())
}
