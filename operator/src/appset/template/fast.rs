//! fasttemplate substitution, Argo CD's default template syntax (`goTemplate` unset).
//!
//! Mirrors `Render.Replace` with `valyala/fasttemplate`: a string is templated only if some
//! line contains `{{...}}` (Argo's `.*{{.*}}.*` check); each `{{tag}}` is looked up with its
//! surrounding whitespace trimmed, and replaced only when the parameter exists and is a string;
//! unknown tags stay as they were written. A `{{` without a closing `}}` is an error.

use serde_json::Value;

use crate::appset::params::ParamSet;

/// Substitutes `{{param}}` tags in `template`.
pub fn render(template: &str, params: &ParamSet) -> Result<String, String> {
    if !looks_templated(template) {
        return Ok(template.to_owned());
    }
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after
            .find("}}")
            .ok_or_else(|| format!("cannot find end tag=\"}}}}\" in the template={template:?}"))?;
        let tag = &after[..end];
        match lookup(params, tag) {
            Some(value) => out.push_str(value),
            None => {
                out.push_str("{{");
                out.push_str(tag);
                out.push_str("}}");
            }
        }
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

fn lookup<'p>(params: &'p ParamSet, tag: &str) -> Option<&'p str> {
    let key = tag.trim();
    if key.is_empty() {
        return None;
    }
    match params.get(key) {
        Some(Value::String(s)) => Some(s),
        _ => None,
    }
}

/// Go's `.*{{.*}}.*`: `.` does not match a newline, so the tag must open and close on one line.
fn looks_templated(s: &str) -> bool {
    s.lines()
        .any(|line| line.find("{{").is_some_and(|i| line[i + 2..].contains("}}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params() -> ParamSet {
        json!({"cluster": "dev", "url": "https://1.2.3.4", "path.basename": "app", "n": 3})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn substitutes_known_string_params_with_optional_spaces() {
        assert_eq!(render("{{cluster}}-{{ path.basename }}", &params()).unwrap(), "dev-app");
    }

    #[test]
    fn unknown_and_non_string_params_are_left_as_is() {
        assert_eq!(
            render("{{missing}}/{{n}}/{{ }}", &params()).unwrap(),
            "{{missing}}/{{n}}/{{ }}"
        );
    }

    #[test]
    fn unclosed_tag_is_an_error_only_when_the_string_is_templated() {
        assert!(render("{{cluster}} {{oops", &params()).is_err());
        assert_eq!(render("{{oops", &params()).unwrap(), "{{oops");
        assert_eq!(render("{{a\n}}", &params()).unwrap(), "{{a\n}}");
    }
}
