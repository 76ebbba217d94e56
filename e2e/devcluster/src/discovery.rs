//! Discovery documents: the legacy per-path documents and the aggregated v2/v2beta1 lists, all
//! derived from the registry on each request so CRD changes show up at once.

use std::net::SocketAddr;

use serde_json::{json, Value};

use crate::registry::{Registry, ResourceInfo};

/// `/api` (legacy `APIVersions`).
pub fn api_versions(addr: &SocketAddr) -> Value {
    json!({"kind": "APIVersions", "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr.to_string()}]})
}

fn group_entry(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    let preferred = vs.first().cloned().unwrap_or(json!({}));
    json!({"name": group, "versions": vs, "preferredVersion": preferred})
}

/// `/apis` (legacy `APIGroupList`).
pub fn api_group_list(reg: &Registry) -> Value {
    let groups: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| group_entry(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/{group}` (`APIGroup`), `None` for an unknown group.
pub fn api_group(reg: &Registry, group: &str) -> Option<Value> {
    let groups = reg.groups();
    let (_, vs) = groups.iter().find(|(g, _)| g == group && !g.is_empty())?;
    let mut v = group_entry(group, vs);
    v["kind"] = json!("APIGroup");
    v["apiVersion"] = json!("v1");
    Some(v)
}

/// core/v1 ServiceAccounts, which have the `token` subresource (the TokenRequest API).
fn is_service_accounts(ri: &ResourceInfo) -> bool {
    ri.group.is_empty() && ri.plural == "serviceaccounts"
}

fn legacy_resources(ri: &ResourceInfo) -> Vec<Value> {
    let mut main = json!({"name": ri.plural, "singularName": ri.singular, "namespaced": ri.namespaced,
        "kind": ri.kind, "verbs": ri.verbs()});
    if !ri.short_names.is_empty() {
        main["shortNames"] = json!(ri.short_names);
    }
    if !ri.categories.is_empty() {
        main["categories"] = json!(ri.categories);
    }
    let mut out = vec![main];
    let sub_verbs = json!(["get", "patch", "update"]);
    if ri.status {
        out.push(
            json!({"name": format!("{}/status", ri.plural), "singularName": "", "namespaced": ri.namespaced,
            "kind": ri.kind, "verbs": sub_verbs}),
        );
    }
    if ri.scale.is_some() {
        out.push(
            json!({"name": format!("{}/scale", ri.plural), "singularName": "", "namespaced": ri.namespaced,
            "group": "autoscaling", "version": "v1", "kind": "Scale", "verbs": sub_verbs}),
        );
    }
    if is_service_accounts(ri) {
        out.push(
            json!({"name": "serviceaccounts/token", "singularName": "", "namespaced": true,
            "group": "authentication.k8s.io", "version": "v1", "kind": "TokenRequest", "verbs": ["create"]}),
        );
    }
    if ri.key.as_ref() == crate::store::NAMESPACES {
        out.push(
            json!({"name": "namespaces/finalize", "singularName": "", "namespaced": false, "kind": "Namespace",
            "verbs": ["update"]}),
        );
    }
    out
}

/// `/api/v1` and `/apis/{g}/{v}` (`APIResourceList`), `None` when not served.
pub fn resource_list(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let infos = reg.resources(group, version);
    if infos.is_empty() {
        return None;
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = infos.iter().flat_map(|r| legacy_resources(r)).collect();
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

fn aggregated_resource(ri: &ResourceInfo) -> Value {
    let kind = json!({"group": ri.group, "version": ri.version, "kind": ri.kind});
    let mut r = json!({"resource": ri.plural, "singularResource": ri.singular,
        "scope": if ri.namespaced { "Namespaced" } else { "Cluster" },
        "responseKind": kind, "verbs": ri.verbs()});
    if !ri.short_names.is_empty() {
        r["shortNames"] = json!(ri.short_names);
    }
    if !ri.categories.is_empty() {
        r["categories"] = json!(ri.categories);
    }
    let mut subs = Vec::new();
    if ri.status {
        subs.push(json!({"subresource": "status", "responseKind": kind, "verbs": ["get", "patch", "update"]}));
    }
    if ri.scale.is_some() {
        subs.push(
            json!({"subresource": "scale", "responseKind": {"group": "autoscaling", "version": "v1", "kind": "Scale"},
            "verbs": ["get", "patch", "update"]}),
        );
    }
    if is_service_accounts(ri) {
        subs.push(
            json!({"subresource": "token", "responseKind": {"group": "authentication.k8s.io", "version": "v1",
            "kind": "TokenRequest"}, "verbs": ["create"]}),
        );
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// Aggregated discovery (`APIGroupDiscoveryList`); `core` selects `/api`, else `/apis`.
pub fn aggregated(reg: &Registry, core: bool, api_version: &str) -> Value {
    let items: Vec<Value> = reg
        .groups()
        .iter()
        .filter(|(g, _)| g.is_empty() == core)
        .map(|(g, vs)| {
            let versions: Vec<Value> = vs
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = reg.resources(g, v).iter().map(|r| aggregated_resource(r)).collect();
                    json!({"version": v, "freshness": "Current", "resources": resources})
                })
                .collect();
            json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": versions})
        })
        .collect();
    json!({"kind": "APIGroupDiscoveryList", "apiVersion": format!("apidiscovery.k8s.io/{api_version}"), "metadata": {}, "items": items})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_subresource_is_autoscaling_v1() {
        let reg = Registry::new();
        let list = resource_list(&reg, "apps", "v1").unwrap();
        let scale = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert_eq!(scale["kind"], "Scale");
        assert!(resource_list(&reg, "nope", "v1").is_none());
    }

    #[test]
    fn aggregated_core_has_one_item() {
        let reg = Registry::new();
        let core = aggregated(&reg, true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert_eq!(core["items"][0]["metadata"]["name"], "");
        let apis = aggregated(&reg, false, "v2beta1");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        assert!(apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["metadata"]["name"] == "apps"));
    }
}
