//! Minimal OpenAPI v3 (spec §4): an index plus one document per group version whose PATCH operations declare
//! the `fieldValidation` query parameter and `x-kubernetes-group-version-kind`. That is all kubectl needs to
//! skip client-side validation; no schemas are served. Documents are cached per registry generation and their
//! hash changes whenever their content does (§4.4).

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::registry::{Registry, ResourceInfo};
use crate::server::Shared;

/// The index and documents for one registry generation.
pub struct Cache {
    pub generation: u64,
    pub index: Value,
    /// Key `api/v1` or `apis/{g}/{v}` → (document, hash).
    pub docs: HashMap<String, (Value, String)>,
}

/// The current cache, rebuilt when the registry changed.
pub fn cache(sh: &Shared) -> Arc<Cache> {
    let reg = sh.registry.read();
    let mut slot = sh.openapi.lock();
    if let Some(c) = slot.as_ref() {
        if c.generation == reg.generation {
            return c.clone();
        }
    }
    let c = Arc::new(build(&reg));
    *slot = Some(c.clone());
    c
}

fn op_id(ri: &ResourceInfo) -> String {
    let group: String = ri
        .group
        .split('.')
        .next()
        .unwrap_or("core")
        .split('-')
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
                .unwrap_or_default()
        })
        .collect();
    let group = if group.is_empty() { "Core".to_string() } else { group };
    let version = {
        let mut c = ri.version.chars();
        c.next()
            .map(|f| f.to_uppercase().collect::<String>() + c.as_str())
            .unwrap_or_default()
    };
    let scope = if ri.namespaced { "Namespaced" } else { "" };
    format!("patch{group}{version}{scope}{}", ri.kind)
}

fn patch_op(ri: &ResourceInfo) -> Value {
    let param = |n: &str, t: &str| json!({"name": n, "in": "query", "schema": {"type": t}});
    json!({"patch": {
        "operationId": op_id(ri),
        "parameters": [param("dryRun", "string"), param("fieldManager", "string"), param("fieldValidation", "string"), param("force", "boolean")],
        "requestBody": {"content": {"application/json-patch+json": {}, "application/merge-patch+json": {},
            "application/strategic-merge-patch+json": {}, "application/apply-patch+yaml": {}}},
        "responses": {"200": {"description": "OK"}},
        "x-kubernetes-action": "patch",
        "x-kubernetes-group-version-kind": {"group": ri.group, "version": ri.version, "kind": ri.kind}}})
}

fn document(reg: &Registry, group: &str, version: &str) -> Value {
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let mut paths = Map::new();
    for ri in reg.resources(group, version) {
        if ri.create_only {
            continue;
        }
        let path = if ri.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", ri.plural)
        } else {
            format!("{prefix}/{}/{{name}}", ri.plural)
        };
        paths.insert(path, patch_op(&ri));
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths, "components": {"schemas": {}}})
}

fn hash_of(doc: &Value) -> String {
    let mut h = DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

fn build(reg: &Registry) -> Cache {
    let mut docs = HashMap::new();
    let mut index = Map::new();
    for (group, versions) in reg.groups() {
        for v in versions {
            let key = if group.is_empty() {
                format!("api/{v}")
            } else {
                format!("apis/{group}/{v}")
            };
            let doc = document(reg, &group, &v);
            let hash = hash_of(&doc);
            index.insert(
                key.clone(),
                json!({"serverRelativeURL": format!("/openapi/v3/{key}?hash={hash}")}),
            );
            docs.insert(key, (doc, hash));
        }
    }
    Cache {
        generation: reg.generation,
        index: json!({"paths": index}),
        docs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_patch_declares_field_validation() {
        let reg = Registry::new();
        let c = build(&reg);
        let (doc, _) = &c.docs["api/v1"];
        let op = &doc["paths"]["/api/v1/namespaces/{name}"]["patch"];
        assert_eq!(op["x-kubernetes-group-version-kind"]["kind"], "Namespace");
        assert!(op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        assert!(c.index["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .contains("hash="));
        assert_eq!(
            op_id(&reg.find("", "v1", "configmaps").unwrap()),
            "patchCoreV1NamespacedConfigMap"
        );
    }
}
