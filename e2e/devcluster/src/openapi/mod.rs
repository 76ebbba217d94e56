//! OpenAPI. `/openapi/v3` is an index plus one document per group version; `/openapi/v2` one
//! Swagger 2.0 document for everything, in JSON or protobuf ([`v2`]).
//!
//! Each v3 document has the PATCH operation of every resource, declaring the `fieldValidation` query parameter
//! and `x-kubernetes-group-version-kind` (all kubectl needs to skip client-side validation), and under
//! `components.schemas` the schema of every kind with what it references: k8s-openapi's definitions for the
//! built-in kinds ([`builtin`]), the CRD's `openAPIV3Schema` for custom resources. The schemas carry the
//! `x-kubernetes-group-version-kind` extension that `kubectl explain`, kubectl's validators and client-side
//! apply look kinds up by. Documents are cached per registry generation and their hash changes whenever their
//! content does; the documents of built-in group versions never change and are built once per process.

pub mod builtin;
pub mod v2;

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use serde_json::{json, Map, Value};

use crate::registry::{Registry, ResourceInfo};
use crate::server::Shared;

use builtin::{builtins, REF_PREFIX};

/// The index and documents for one registry generation.
pub struct Cache {
    pub generation: u64,
    pub index: Value,
    /// Key `api/v1` or `apis/{g}/{v}` → (document, hash).
    pub docs: HashMap<String, Doc>,
    /// `/openapi/v2` as (JSON, protobuf), built on its first request.
    v2: OnceLock<(Value, Vec<u8>)>,
}

/// One group version's document and its hash.
pub type Doc = (Arc<Value>, String);

impl Cache {
    /// The v2 document, as JSON and as the gnostic protobuf message.
    pub fn v2(&self) -> &(Value, Vec<u8>) {
        self.v2.get_or_init(|| {
            let mut keys: Vec<&String> = self.docs.keys().collect();
            keys.sort();
            let doc = v2::document(keys.into_iter().map(|k| self.docs[k].0.as_ref()));
            let pb = v2::encode(&doc);
            (doc, pb)
        })
    }
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

/// The PATCH operation of a resource. Custom resources take no strategic merge patch, and say so: kubectl's
/// client-side apply picks the patch type it computes from this list.
fn patch_op(ri: &ResourceInfo) -> Value {
    let param = |n: &str, t: &str| json!({"name": n, "in": "query", "schema": {"type": t}});
    let mut content = json!({"application/json-patch+json": {}, "application/merge-patch+json": {},
        "application/apply-patch+yaml": {}});
    if !ri.is_custom() {
        content["application/strategic-merge-patch+json"] = json!({});
    }
    json!({"patch": {
        "operationId": op_id(ri),
        "parameters": [param("dryRun", "string"), param("fieldManager", "string"), param("fieldValidation", "string"), param("force", "boolean")],
        "requestBody": {"content": content},
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
    let mut schemas = Map::new();
    for ri in reg.resources(group, version) {
        schemas.extend(kind_schemas(&ri));
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
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "v1.32.0"}, "paths": paths,
        "components": {"schemas": schemas}})
}

/// The schema of one kind with every definition it references.
fn kind_schemas(ri: &ResourceInfo) -> Map<String, Value> {
    let b = builtins();
    let mut out = Map::new();
    let root = match &ri.custom {
        Some(_) => {
            let (name, schema) = crd_schema(ri);
            out.insert(name, schema);
            builtin::object_meta()
        }
        None => match b.kinds.get(&(ri.api_version(), ri.kind.clone())) {
            Some(name) => name.clone(),
            None => return out,
        },
    };
    for name in builtin::closure(&b.definitions, [root]) {
        out.insert(name.to_string(), b.definitions[name].clone());
    }
    out
}

/// A custom resource's schema as kube-apiserver publishes it: named `<reversed group>.<version>.<Kind>`,
/// `metadata` a reference to ObjectMeta, and the GVK extension.
fn crd_schema(ri: &ResourceInfo) -> (String, Value) {
    let reversed: Vec<&str> = ri.group.split('.').rev().collect();
    let name = format!("{}.{}.{}", reversed.join("."), ri.version, ri.kind);
    let mut schema = ri
        .custom
        .as_ref()
        .and_then(|c| c.schema.as_ref())
        .map(|s| s.root().clone())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    builtin::mark_kind(&mut schema, &ri.group, &ri.version, &ri.kind);
    let props = schema
        .as_object_mut()
        .map(|o| o.entry("properties").or_insert_with(|| json!({})));
    if let Some(Value::Object(props)) = props {
        props.insert(
            "metadata".into(),
            json!({"allOf": [{"$ref": format!("{REF_PREFIX}{}", builtin::object_meta())}],
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
        );
        for (field, what) in [("apiVersion", "APIVersion"), ("kind", "Kind")] {
            props.entry(field).or_insert_with(|| json!({"type": "string", "description": format!(
                "{what} of this representation of an object. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md")}));
        }
    }
    (name, schema)
}

fn hash_of(doc: &Value) -> String {
    let mut h = DefaultHasher::new();
    doc.to_string().hash(&mut h);
    format!("{:016X}", h.finish())
}

/// The documents of the built-in group versions, built once per process.
fn builtin_docs() -> &'static HashMap<String, Doc> {
    static CELL: OnceLock<HashMap<String, Doc>> = OnceLock::new();
    CELL.get_or_init(|| {
        let reg = Registry::new();
        let mut docs = HashMap::new();
        for (group, versions) in reg.groups() {
            for v in versions {
                let doc = document(&reg, &group, &v);
                let hash = hash_of(&doc);
                docs.insert(doc_key(&group, &v), (Arc::new(doc), hash));
            }
        }
        docs
    })
}

fn doc_key(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn build(reg: &Registry) -> Cache {
    let mut docs = HashMap::new();
    let mut index = Map::new();
    for (group, versions) in reg.groups() {
        for v in versions {
            let key = doc_key(&group, &v);
            let custom = reg.resources(&group, &v).iter().any(|r| r.is_custom());
            let (doc, hash) = match builtin_docs().get(&key) {
                Some(d) if !custom => d.clone(),
                _ => {
                    let doc = document(reg, &group, &v);
                    let hash = hash_of(&doc);
                    (Arc::new(doc), hash)
                }
            };
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
        v2: OnceLock::new(),
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
        assert_eq!(
            doc["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"]["x-kubernetes-group-version-kind"][0]["kind"],
            "ConfigMap"
        );
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
