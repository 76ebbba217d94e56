//! ApplicationSet generation: generators × template → Applications. Pure: no I/O.
//!
//! [`generate`] mirrors Argo CD's `GenerateApplications`: for each top-level generator, its
//! `template` is merged over `spec.template` (generator fields win, Argo CD's
//! `mergeGeneratorTemplate`), its parameter sets are generated ([`generators`]) and each set
//! renders one Application ([`template`]): every string templated, then `templatePatch`
//! rendered and merged over it, then the resources finalizer added unless the template names
//! finalizers or `preserveResourcesOnDeletion` is set.
//!
//! Generation is all or nothing: the first error fails the whole set (the controller turns it
//! into a condition and leaves existing Applications alone), duplicate names are an error rather
//! than two specs fighting over one object, and the number of Applications is bounded.
//!
//! Inputs are what the controller has already read: the Cluster objects visible to the set and
//! the Git trees ([`GitTrees`]) of the repositories its Git generators name
//! ([`referenced_repositories`] lists the literal ones). The generated Applications have no
//! namespace unless the template sets one, and no ownerReference: the controller adds both.

pub mod error;
pub mod generators;
pub mod params;
pub mod template;
pub mod yaml;

#[cfg(test)]
mod tests;

use std::collections::HashSet;

use serde_json::{json, Value};

use crate::api::application::Application;
use crate::api::application_set::ApplicationSetSpec;
use crate::api::cluster::Cluster;
use crate::api::labels::RESOURCES_FINALIZER;
use crate::api::API_VERSION;
pub use error::AppSetError;
pub use generators::git::{referenced_repositories, GitTree, GitTrees, MemoryRepos, MemoryTree, NoGit};
use generators::Ctx;
pub use params::ParamSet;
use template::go::GoOptions;
use template::Renderer;

/// Bounds on one generation; every one is an error when exceeded, never a truncation.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most Applications one set may generate.
    pub max_applications: usize,
    /// Most parameter sets any single generator (matrix products included) may produce.
    pub max_param_sets: usize,
    /// Most files one Git files generator may read.
    pub max_files: usize,
    /// Largest file (and `elementsYaml`) read, in bytes.
    pub max_file_bytes: usize,
    /// Most steps (nodes, commands, loop iterations) one Go template execution may take.
    pub template_max_steps: usize,
    /// Most bytes one template string may render to.
    pub template_max_output: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_applications: 10_000,
            max_param_sets: 100_000,
            max_files: 10_000,
            max_file_bytes: 1 << 20,
            template_max_steps: 100_000,
            template_max_output: 1 << 20,
        }
    }
}

/// What generation reads besides the spec.
pub struct Inputs<'a> {
    /// Cluster objects the set may target (the controller passes those of the set's namespace
    /// and of the operator namespace).
    pub clusters: &'a [Cluster],
    /// Git trees for the Git generators.
    pub git: &'a dyn GitTrees,
    /// Bounds.
    pub limits: Limits,
}

/// One generated Application, ready for the controller to create or update.
#[derive(Clone, Debug, PartialEq)]
pub struct GeneratedApp {
    /// `metadata.name`.
    pub name: String,
    /// The Application (no namespace unless the template sets one; no ownerReference).
    pub application: Application,
}

/// Generates every Application of the set, or fails as a whole.
pub fn generate(spec: &ApplicationSetSpec, inputs: &Inputs<'_>) -> Result<Vec<GeneratedApp>, AppSetError> {
    if spec.template_patch.is_some() && !spec.go_template {
        return Err(AppSetError::InvalidSpec(
            "templatePatch requires goTemplate: true".to_owned(),
        ));
    }
    let go_options = GoOptions {
        max_steps: inputs.limits.template_max_steps,
        max_output: inputs.limits.template_max_output,
        ..GoOptions::default()
    };
    let renderer = Renderer::new(spec.go_template, &spec.go_template_options, go_options)?;
    let ctx = Ctx {
        renderer: &renderer,
        inputs,
    };
    let base = serde_json::to_value(&spec.template).map_err(|e| AppSetError::InvalidSpec(e.to_string()))?;
    let preserve = spec
        .sync_policy
        .as_ref()
        .is_some_and(|p| p.preserve_resources_on_deletion);
    let mut apps = Vec::new();
    let mut names = HashSet::new();
    for (i, generator) in spec.generators.iter().enumerate() {
        let path = format!("generators[{i}]");
        let template = merge_template(generator_template(generator), &base);
        let sets = generators::generate(generator, &ctx, &path, None)?;
        for params in sets {
            let app = render_application(&template, &params, spec.template_patch.as_deref(), &renderer, preserve)?;
            if !names.insert(app.name.clone()) {
                return Err(AppSetError::DuplicateName(app.name));
            }
            apps.push(app);
            if apps.len() > inputs.limits.max_applications {
                return Err(AppSetError::LimitExceeded(format!(
                    "the set generates more than {} Applications",
                    inputs.limits.max_applications
                )));
            }
        }
    }
    Ok(apps)
}

/// The `template` of a top-level generator, whichever kind it is.
fn generator_template(g: &crate::api::application_set::ApplicationSetGenerator) -> Option<&Value> {
    g.list
        .as_ref()
        .and_then(|x| x.template.as_ref())
        .or_else(|| g.clusters.as_ref().and_then(|x| x.template.as_ref()))
        .or_else(|| g.git.as_ref().and_then(|x| x.template.as_ref()))
        .or_else(|| g.matrix.as_ref().and_then(|x| x.template.as_ref()))
        .or_else(|| g.merge.as_ref().and_then(|x| x.template.as_ref()))
}

/// Argo CD's `mergo.Merge(generatorTemplate, specTemplate)`: the generator's non-empty fields
/// win, empty ones (`""`, `false`, `0`, null, empty lists) are filled from the spec's template,
/// objects merge key by key.
pub fn merge_template(overlay: Option<&Value>, base: &Value) -> Value {
    match overlay {
        None => base.clone(),
        Some(overlay) => fill(overlay, base, 0),
    }
}

fn fill(overlay: &Value, base: &Value, depth: usize) -> Value {
    match (overlay, base) {
        (Value::Object(o), Value::Object(b)) if depth < 64 => {
            let mut out = b.clone();
            for (k, v) in o {
                let merged = match b.get(k) {
                    Some(bv) => fill(v, bv, depth + 1),
                    None => v.clone(),
                };
                out.insert(k.clone(), merged);
            }
            out.into()
        }
        (o, b) if is_empty_value(o) => b.clone(),
        (o, _) => o.clone(),
    }
}

fn is_empty_value(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(m) => m.is_empty(),
    }
}

/// Renders one Application from the merged template and one parameter set.
fn render_application(
    template: &Value,
    params: &ParamSet,
    patch: Option<&str>,
    renderer: &Renderer,
    preserve_resources: bool,
) -> Result<GeneratedApp, AppSetError> {
    // Argo CD leaves the template untouched for an empty parameter set.
    let rendered = if params.is_empty() {
        template.clone()
    } else {
        renderer.render_value(template, params)?
    };
    let mut app = json!({
        "apiVersion": API_VERSION,
        "kind": "Application",
        "metadata": rendered.get("metadata").cloned().unwrap_or_else(|| json!({})),
        "spec": rendered.get("spec").cloned().unwrap_or_else(|| json!({})),
    });
    if let Some(patch) = patch {
        let text = renderer.render_str(patch, params)?;
        apply_template_patch(&mut app, &text)?;
    }
    let mut application: Application = serde_json::from_value(app)
        .map_err(|e| AppSetError::InvalidApplication(crate::text::truncate(&e.to_string(), error::MAX_MESSAGE)))?;
    if application.metadata.finalizers.as_ref().is_none_or(Vec::is_empty) && !preserve_resources {
        application.metadata.finalizers = Some(vec![RESOURCES_FINALIZER.to_owned()]);
    }
    let name = application.metadata.name.clone().unwrap_or_default();
    validate_name(&name)?;
    Ok(GeneratedApp { name, application })
}

/// Applies a rendered `templatePatch`: a YAML/JSON object is merged over the Application (a
/// JSON merge patch, which is what Argo CD's strategic merge patch does to Application fields:
/// objects merge, lists are replaced, null deletes); a list is an RFC 6902 JSON patch.
fn apply_template_patch(app: &mut Value, text: &str) -> Result<(), AppSetError> {
    let patch_error = |e: String| AppSetError::TemplatePatch(crate::text::truncate(&e, error::MAX_MESSAGE));
    let patch = yaml::parse(text, 1 << 20).map_err(patch_error)?;
    match patch {
        Value::Null => Ok(()),
        Value::Object(_) => {
            json_patch::merge(app, &patch);
            Ok(())
        }
        Value::Array(_) => {
            let ops: json_patch::Patch = serde_json::from_value(patch).map_err(|e| patch_error(e.to_string()))?;
            json_patch::patch(app, &ops).map_err(|e| patch_error(e.to_string()))
        }
        _ => Err(patch_error(
            "templatePatch must render to an object or a list of JSON patch operations".to_owned(),
        )),
    }
}

/// A generated name must be a DNS-1123 subdomain, as the API server will require.
fn validate_name(name: &str) -> Result<(), AppSetError> {
    if !crate::api::names::is_dns1123_subdomain(name) {
        return Err(AppSetError::InvalidApplication(format!(
            "name {:?} is not a valid DNS-1123 subdomain",
            crate::text::truncate(name, 100)
        )));
    }
    Ok(())
}
