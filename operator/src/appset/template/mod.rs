//! Rendering Application templates with one parameter set.
//!
//! Like Argo CD's `Render.RenderTemplateParams`, every string of the template is templated on
//! its own, map keys included (so labels and annotations can carry parameters in their names),
//! with fasttemplate ([`fast`]) or, with `goTemplate: true`, Go's `text/template` ([`go`]).
//! Non-string fields pass through untouched; `templatePatch` exists for those.

pub mod fast;
pub mod funcs;
pub mod go;

#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use serde_json::{Map, Value};

use super::error::{AppSetError, MAX_MESSAGE};
use super::params::ParamSet;
use crate::text::truncate;
use go::{GoOptions, Template};

/// Deepest template value walked (the template is a Kubernetes object; this only bounds
/// recursion on hostile input).
const MAX_TEMPLATE_DEPTH: usize = 64;

/// Parsed Go templates kept per renderer (one ApplicationSet generation).
const MAX_CACHED_TEMPLATES: usize = 4096;

/// Renders strings and template trees with the set's syntax.
pub struct Renderer {
    go: Option<GoOptions>,
    cache: RefCell<HashMap<String, Rc<Template>>>,
}

impl Renderer {
    /// A fasttemplate renderer, or a Go-template one with `goTemplateOptions` applied.
    pub fn new(go_template: bool, go_options: &[String], base: GoOptions) -> Result<Renderer, AppSetError> {
        let go = if go_template {
            Some(base.with_options(go_options).map_err(AppSetError::InvalidSpec)?)
        } else {
            None
        };
        Ok(Renderer {
            go,
            cache: RefCell::new(HashMap::new()),
        })
    }

    /// Whether this renderer uses Go templates (and so nested parameters).
    pub fn is_go(&self) -> bool {
        self.go.is_some()
    }

    /// Renders one string.
    pub fn render_str(&self, template: &str, params: &ParamSet) -> Result<String, AppSetError> {
        match &self.go {
            None => fast::render(template, params).map_err(|e| template_error(template, &e)),
            Some(options) => {
                let data = Value::Object(params.clone());
                self.render_go(template, &data, options)
            }
        }
    }

    /// Renders every string and every map key in `value`.
    pub fn render_value(&self, value: &Value, params: &ParamSet) -> Result<Value, AppSetError> {
        let data = self.go.as_ref().map(|_| Value::Object(params.clone()));
        self.walk(value, params, data.as_ref(), 0)
    }

    fn walk(&self, value: &Value, params: &ParamSet, data: Option<&Value>, depth: usize) -> Result<Value, AppSetError> {
        if depth > MAX_TEMPLATE_DEPTH {
            return Err(AppSetError::Template(format!(
                "template nested deeper than {MAX_TEMPLATE_DEPTH}"
            )));
        }
        Ok(match value {
            Value::String(s) => Value::String(self.render_one(s, params, data)?),
            Value::Array(items) => Value::Array(
                items
                    .iter()
                    .map(|v| self.walk(v, params, data, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => {
                let mut out = Map::new();
                for (k, v) in map {
                    out.insert(
                        self.render_one(k, params, data)?,
                        self.walk(v, params, data, depth + 1)?,
                    );
                }
                Value::Object(out)
            }
            other => other.clone(),
        })
    }

    fn render_one(&self, s: &str, params: &ParamSet, data: Option<&Value>) -> Result<String, AppSetError> {
        match (&self.go, data) {
            (Some(options), Some(data)) => self.render_go(s, data, options),
            _ => fast::render(s, params).map_err(|e| template_error(s, &e)),
        }
    }

    fn render_go(&self, s: &str, data: &Value, options: &GoOptions) -> Result<String, AppSetError> {
        // Text without an action renders to itself; skip parsing it.
        if !s.contains("{{") {
            return Ok(s.to_owned());
        }
        let template = self.parsed(s)?;
        template
            .execute(data, options)
            .map_err(|e| template_error(s, &format!("failed to execute go template: {e}")))
    }

    fn parsed(&self, s: &str) -> Result<Rc<Template>, AppSetError> {
        if let Some(t) = self.cache.borrow().get(s) {
            return Ok(Rc::clone(t));
        }
        let template =
            Rc::new(Template::parse(s).map_err(|e| template_error(s, &format!("failed to parse template: {e}")))?);
        let mut cache = self.cache.borrow_mut();
        if cache.len() < MAX_CACHED_TEMPLATES {
            cache.insert(s.to_owned(), Rc::clone(&template));
        }
        Ok(template)
    }
}

fn template_error(template: &str, error: &str) -> AppSetError {
    AppSetError::Template(truncate(
        &format!("{error} (in {:?})", truncate(template, 200)),
        MAX_MESSAGE,
    ))
}
