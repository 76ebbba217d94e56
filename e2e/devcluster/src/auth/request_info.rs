//! Request decomposition exactly as kube-apiserver's `RequestInfoFactory` does it, because RBAC rules are
//! written against its output: the verb comes from the HTTP method (`get` becomes `list` or `watch` without a
//! name, `delete` becomes `deletecollection`), a `/watch/` path prefix is the `watch` verb, a
//! `metadata.name=` field selector names the object of a list or watch, and `/namespaces/{ns}` sets the
//! namespace even for the Namespace object itself. Paths outside `/api` and `/apis` are non-resource requests
//! whose verb is the lower-cased method.

use crate::server::query::Query;

use super::rules::Attributes;

/// `verb` and parts of one request.
pub fn request_attributes(method: &str, path: &str, query: &Query) -> Attributes {
    let method_verb = method.to_ascii_lowercase();
    let parts: Vec<&str> = path.trim_matches('/').split('/').filter(|s| !s.is_empty()).collect();
    let non_resource = || Attributes::non_resource(&method_verb, path);
    if parts.len() < 3 || !matches!(parts[0], "api" | "apis") {
        return non_resource();
    }
    let mut rest = &parts[1..];
    let mut a = Attributes {
        resource_request: true,
        ..Default::default()
    };
    if parts[0] == "apis" {
        if rest.len() < 3 {
            return non_resource();
        }
        a.api_group = rest[0].to_string();
        rest = &rest[1..];
    }
    a.api_version = rest[0].to_string();
    rest = &rest[1..];
    if matches!(rest[0], "watch" | "proxy") {
        if rest.len() < 2 {
            // kube answers this with an error; nothing can be authorized from it.
            return non_resource();
        }
        a.verb = rest[0].to_string();
        rest = &rest[1..];
    } else {
        a.verb = match method {
            "POST" => "create",
            "GET" | "HEAD" => "get",
            "PUT" => "update",
            "PATCH" => "patch",
            "DELETE" => "delete",
            _ => "",
        }
        .to_string();
    }
    if rest[0] == "namespaces" && rest.len() > 1 {
        a.namespace = rest[1].to_string();
        if rest.len() > 2 && !matches!(rest[2], "status" | "finalize") {
            rest = &rest[2..];
        }
    }
    if rest.len() >= 3 && a.verb != "proxy" {
        a.subresource = rest[2].to_string();
    }
    if rest.len() >= 2 {
        a.name = rest[1].to_string();
    }
    a.resource = rest[0].to_string();
    if a.name.is_empty() && a.verb == "get" {
        a.verb = if query.flag("watch").unwrap_or(false) {
            "watch"
        } else {
            "list"
        }
        .to_string();
        if let Some(name) = exact_name(query.get("fieldSelector").unwrap_or("")) {
            a.name = name;
        }
    }
    if a.name.is_empty() && a.verb == "delete" {
        a.verb = "deletecollection".into();
    }
    a
}

/// The name a field selector requires exactly (`metadata.name=x` or `==x`, alone), if it is a valid path
/// segment (`RequiresExactMatch` + `IsValidPathSegmentName`).
fn exact_name(selector: &str) -> Option<String> {
    let selector = selector.trim();
    if selector.is_empty() || selector.contains(',') {
        return None;
    }
    let (key, value) = selector
        .split_once("==")
        .or_else(|| selector.split_once('='))
        .filter(|(k, _)| !k.ends_with('!'))?;
    let value = value.trim();
    let valid = !value.is_empty() && value != "." && value != ".." && !value.contains(['/', '%']);
    (key.trim() == "metadata.name" && valid).then(|| value.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(method: &str, url: &str) -> Attributes {
        let (path, q) = url.split_once('?').unwrap_or((url, ""));
        request_attributes(method, path, &Query::parse(q))
    }

    fn summary(a: &Attributes) -> String {
        format!(
            "{} {}/{} {} {} ns={} name={}",
            a.verb, a.api_group, a.api_version, a.resource, a.subresource, a.namespace, a.name
        )
    }

    #[test]
    fn verbs_from_methods_names_and_query() {
        let cases = [
            (
                "GET",
                "/api/v1/namespaces/x/configmaps",
                "list /v1 configmaps  ns=x name=",
            ),
            (
                "GET",
                "/api/v1/namespaces/x/configmaps?watch=1",
                "watch /v1 configmaps  ns=x name=",
            ),
            (
                "GET",
                "/api/v1/namespaces/x/configmaps/a",
                "get /v1 configmaps  ns=x name=a",
            ),
            (
                "HEAD",
                "/api/v1/namespaces/x/configmaps/a",
                "get /v1 configmaps  ns=x name=a",
            ),
            (
                "POST",
                "/api/v1/namespaces/x/configmaps",
                "create /v1 configmaps  ns=x name=",
            ),
            (
                "PUT",
                "/api/v1/namespaces/x/configmaps/a",
                "update /v1 configmaps  ns=x name=a",
            ),
            (
                "PATCH",
                "/api/v1/namespaces/x/configmaps/a",
                "patch /v1 configmaps  ns=x name=a",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/x/configmaps/a",
                "delete /v1 configmaps  ns=x name=a",
            ),
            (
                "DELETE",
                "/api/v1/namespaces/x/configmaps",
                "deletecollection /v1 configmaps  ns=x name=",
            ),
            (
                "GET",
                "/apis/apps/v1/deployments",
                "list apps/v1 deployments  ns= name=",
            ),
            (
                "GET",
                "/apis/apps/v1/watch/namespaces/x/deployments",
                "watch apps/v1 deployments  ns=x name=",
            ),
            (
                "GET",
                "/apis/apps/v1/namespaces/x/deployments/d/scale",
                "get apps/v1 deployments scale ns=x name=d",
            ),
            (
                "PUT",
                "/apis/capstan.dev/v1alpha1/namespaces/x/applications/a/status",
                "update capstan.dev/v1alpha1 applications status ns=x name=a",
            ),
            (
                "POST",
                "/api/v1/namespaces/x/serviceaccounts/sa/token",
                "create /v1 serviceaccounts token ns=x name=sa",
            ),
        ];
        for (m, url, want) in cases {
            assert_eq!(summary(&info(m, url)), want, "{m} {url}");
        }
    }

    #[test]
    fn namespaces_are_their_own_namespace() {
        for (m, url, want) in [
            ("GET", "/api/v1/namespaces/x", "get /v1 namespaces  ns=x name=x"),
            ("GET", "/api/v1/namespaces", "list /v1 namespaces  ns= name="),
            (
                "PUT",
                "/api/v1/namespaces/x/finalize",
                "update /v1 namespaces finalize ns=x name=x",
            ),
            (
                "GET",
                "/api/v1/namespaces/x/status",
                "get /v1 namespaces status ns=x name=x",
            ),
        ] {
            assert_eq!(summary(&info(m, url)), want, "{m} {url}");
        }
    }

    #[test]
    fn a_name_field_selector_names_the_object_of_a_list_or_watch() {
        let a = info(
            "GET",
            "/api/v1/namespaces/x/configmaps?fieldSelector=metadata.name%3Dcfg&watch=true",
        );
        assert_eq!(summary(&a), "watch /v1 configmaps  ns=x name=cfg");
        let a = info(
            "GET",
            "/api/v1/namespaces/x/configmaps?fieldSelector=metadata.name%3D%3Dcfg",
        );
        assert_eq!(a.name, "cfg");
        for sel in [
            "metadata.name!%3Dcfg",
            "metadata.name%3Da,metadata.namespace%3Dx",
            "spec.x%3Da",
        ] {
            let a = info("GET", &format!("/api/v1/namespaces/x/configmaps?fieldSelector={sel}"));
            assert_eq!(a.name, "", "{sel}");
        }
        // The /watch/ prefix decides the verb before the selector is looked at: no name.
        let a = info(
            "GET",
            "/api/v1/watch/namespaces/x/configmaps?fieldSelector=metadata.name%3Dcfg",
        );
        assert_eq!((a.verb.as_str(), a.name.as_str()), ("watch", ""));
    }

    #[test]
    fn other_paths_are_non_resource_requests() {
        for (m, p, verb) in [
            ("GET", "/healthz", "get"),
            ("GET", "/version", "get"),
            ("GET", "/api", "get"),
            ("GET", "/api/v1", "get"),
            ("GET", "/apis/apps", "get"),
            ("GET", "/apis/apps/v1", "get"),
            ("GET", "/openapi/v3/apis/apps/v1", "get"),
            ("POST", "/_devcluster/compact", "post"),
        ] {
            let a = info(m, p);
            assert!(!a.resource_request, "{p}");
            assert_eq!((a.verb.as_str(), a.path.as_str()), (verb, p));
        }
    }
}
