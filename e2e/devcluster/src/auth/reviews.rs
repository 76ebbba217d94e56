//! The create-only review APIs: SelfSubjectAccessReview and SelfSubjectRulesReview (`kubectl auth can-i`,
//! `--list`), SubjectAccessReview and LocalSubjectAccessReview (asking for someone else),
//! SelfSubjectReview (`kubectl auth whoami`) and TokenReview. Nothing is stored; the answer is the request
//! with `status` filled in.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::ResourceInfo;
use crate::server::Shared;

use super::rules::{Attributes, Rule};
use super::{authn, jwt, Identity, UserInfo};

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// The attributes a review's `spec` asks about.
fn spec_attributes(spec: &Value) -> ApiResult<Attributes> {
    if let Some(r) = spec.get("resourceAttributes").filter(|v| v.is_object()) {
        let mut a = Attributes::resource(
            s(r, "verb"),
            s(r, "group"),
            s(r, "resource"),
            s(r, "subresource"),
            s(r, "namespace"),
            s(r, "name"),
        );
        a.api_version = s(r, "version").to_string();
        return Ok(a);
    }
    if let Some(n) = spec.get("nonResourceAttributes").filter(|v| v.is_object()) {
        return Ok(Attributes::non_resource(s(n, "verb"), s(n, "path")));
    }
    Err(ApiError::invalid(
        "SelfSubjectAccessReview",
        "authorization.k8s.io",
        "",
        vec![Cause::new(
            "FieldValueRequired",
            "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified",
            "spec.resourceAttributes",
        )],
    ))
}

fn answer(mut obj: Value, status: Value) -> Value {
    obj["status"] = status;
    if !obj["metadata"].is_object() {
        obj["metadata"] = json!({});
    }
    obj["metadata"]["creationTimestamp"] = Value::Null;
    obj
}

fn access_status(sh: &Shared, user: &UserInfo, a: &Attributes) -> Value {
    let d = sh.auth.authorizer.authorize(&sh.store, user, a);
    let mut st = json!({"allowed": d.allowed});
    if !d.reason.is_empty() {
        st["reason"] = json!(d.reason);
    }
    st
}

/// The user a SubjectAccessReview names (`spec.user`, `groups`, `uid`, `extra`).
fn subject_user(kind: &str, spec: &Value) -> ApiResult<UserInfo> {
    let user = UserInfo {
        name: s(spec, "user").to_string(),
        uid: s(spec, "uid").to_string(),
        groups: spec
            .get("groups")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default(),
        extra: serde_json::from_value::<BTreeMap<String, Vec<String>>>(spec.get("extra").cloned().unwrap_or(json!({})))
            .unwrap_or_default(),
    };
    if user.name.is_empty() && user.groups.is_empty() {
        return Err(ApiError::invalid(
            kind,
            "authorization.k8s.io",
            "",
            vec![Cause::new(
                "FieldValueInvalid",
                "Invalid value: \"\": at least one of user or group must be specified",
                "spec.user",
            )],
        ));
    }
    Ok(user)
}

fn rules_status(sh: &Shared, user: &UserInfo, ns: &str) -> Value {
    let (rules, errors) = sh.auth.authorizer.effective_rules(&sh.store, user, ns);
    let resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.resources.is_empty())
        .map(|r| {
            Rule {
                non_resource_urls: Vec::new(),
                ..r.clone()
            }
            .to_json()
        })
        .collect();
    let non_resource: Vec<Value> = rules
        .iter()
        .filter(|r| !r.non_resource_urls.is_empty())
        .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
        .collect();
    let mut st = json!({"resourceRules": resource, "nonResourceRules": non_resource, "incomplete": false});
    if !errors.is_empty() {
        st["evaluationError"] = json!(errors.join(", "));
    }
    st
}

/// POST of a create-only review resource.
pub fn create(sh: &Shared, id: &Identity, ri: &ResourceInfo, ns: Option<&str>, obj: Value) -> ApiResult<Value> {
    let spec = obj.get("spec").cloned().unwrap_or(json!({}));
    let status = match ri.plural.as_str() {
        "selfsubjectaccessreviews" => access_status(sh, &id.user, &spec_attributes(&spec)?),
        "subjectaccessreviews" => {
            let user = subject_user(&ri.kind, &spec)?;
            access_status(sh, &user, &spec_attributes(&spec)?)
        }
        "localsubjectaccessreviews" => {
            let ns = ns.unwrap_or("");
            let a = spec_attributes(&spec)?;
            if !a.resource_request || a.namespace != ns {
                return Err(ApiError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {ns}"
                )));
            }
            access_status(sh, &subject_user(&ri.kind, &spec)?, &a)
        }
        "selfsubjectrulesreviews" => {
            let ns = s(&spec, "namespace");
            if ns.is_empty() {
                return Err(ApiError::bad_request("no namespace on request"));
            }
            rules_status(sh, &id.user, ns)
        }
        "selfsubjectreviews" => json!({"userInfo": id.user.to_json()}),
        "tokenreviews" => token_review(sh, &spec),
        other => {
            return Err(ApiError::method_not_allowed(format!(
                "create is not supported for {other}"
            )))
        }
    };
    Ok(answer(obj, status))
}

fn token_review(sh: &Shared, spec: &Value) -> Value {
    let token = s(spec, "token");
    let wanted: Vec<&str> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let audiences: Vec<&str> = if wanted.is_empty() { vec![jwt::ISSUER] } else { wanted };
    // Audience-restricted reviews only accept bound tokens for one of the asked audiences.
    let user = if audiences == [jwt::ISSUER] {
        authn::token_user(sh, token)
    } else {
        sh.auth
            .signer
            .verify(token)
            .filter(|c| c.get("iss").and_then(Value::as_str) == Some(jwt::ISSUER))
            .and_then(|c| authn::bound_user(sh, &c, &audiences))
    };
    match user {
        Some(u) => json!({"authenticated": true, "user": u.to_json(), "audiences": audiences}),
        None => {
            json!({"authenticated": false, "error": "[invalid bearer token, service account token has been invalidated]"})
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_attributes_read_either_form() {
        let a = spec_attributes(&json!({"resourceAttributes": {"verb": "list", "resource": "pods", "namespace": "x"}}))
            .unwrap();
        assert!(a.resource_request);
        assert_eq!(
            (a.verb.as_str(), a.resource.as_str(), a.namespace.as_str()),
            ("list", "pods", "x")
        );
        let n = spec_attributes(&json!({"nonResourceAttributes": {"verb": "get", "path": "/healthz"}})).unwrap();
        assert_eq!((n.resource_request, n.path.as_str()), (false, "/healthz"));
        assert_eq!(spec_attributes(&json!({})).unwrap_err().code, 422);
    }

    #[test]
    fn subject_access_reviews_need_a_user_or_group() {
        assert!(subject_user("SubjectAccessReview", &json!({"groups": ["g"]})).is_ok());
        let e = subject_user("SubjectAccessReview", &json!({})).unwrap_err();
        assert!(
            e.message.contains("at least one of user or group must be specified"),
            "{}",
            e.message
        );
    }
}
