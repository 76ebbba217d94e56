//! The schemas of the built-in kinds, from k8s-openapi's JSON schemas (the Kubernetes OpenAPI definitions,
//! descriptions included), in OpenAPI v3 form under `#/components/schemas/<io.k8s...>`. They are built once per
//! process and shared by every devcluster in it.
//!
//! The free-form types of a CRD's schema (`JSON`: `default`, `enum`, `example`; `JSONSchemaPropsOrArray`,
//! `...OrBool`, `...OrStringArray`) are published as kube-apiserver publishes them: a description and no `type`
//! (any value), where k8s-openapi says `type: object` or a `oneOf` ([`any_value_definitions`]).
//!
//! Two things k8s-openapi leaves out are added back, because kubectl reads them:
//! - `x-kubernetes-group-version-kind` on every kind's schema (`kubectl explain`, the validators and client-side
//!   apply find a kind's schema by it);
//! - the list merge rules: `x-kubernetes-patch-merge-key`/`-strategy` and `x-kubernetes-list-type`/`-map-keys`,
//!   taken from the same table devcluster's strategic merge patch and server-side apply use
//!   ([`crate::schema::Builtin`]), so the patches kubectl computes from the schema are the ones the server
//!   merges.

use std::collections::{HashMap, HashSet};
use std::sync::OnceLock;

use k8s_openapi::api;
use k8s_openapi::schemars::generate::{SchemaGenerator, SchemaSettings};
use k8s_openapi::schemars::JsonSchema;
use serde_json::{json, Map, Value};

use crate::schema::{Builtin, FieldSchema, ListType, SmpList};

/// Where OpenAPI v3 keeps its definitions.
pub const REF_PREFIX: &str = "#/components/schemas/";

/// The definitions of every built-in kind and what they reference.
pub struct Builtins {
    pub definitions: Map<String, Value>,
    /// `(apiVersion, kind)` → definition name.
    pub kinds: HashMap<(String, String), String>,
}

/// The process-wide built-in definitions.
pub fn builtins() -> &'static Builtins {
    static CELL: OnceLock<Builtins> = OnceLock::new();
    CELL.get_or_init(build)
}

/// Registers `T` with the generator and returns its definition name.
fn add<T: JsonSchema>(gen: &mut SchemaGenerator) -> String {
    let _ = gen.subschema_for::<T>();
    T::schema_name().into_owned()
}

/// Every kind devcluster serves or may serve, as `(apiVersion, kind, definition)`.
fn kinds(gen: &mut SchemaGenerator) -> Vec<(&'static str, &'static str, String)> {
    use api::{apps::v1 as apps, authentication::v1 as authn, authorization::v1 as authz, batch::v1 as batch};
    use api::{core::v1 as core, networking::v1 as net, rbac::v1 as rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
    vec![
        ("v1", "Namespace", add::<core::Namespace>(gen)),
        ("v1", "ConfigMap", add::<core::ConfigMap>(gen)),
        ("v1", "Secret", add::<core::Secret>(gen)),
        ("v1", "Service", add::<core::Service>(gen)),
        ("v1", "ServiceAccount", add::<core::ServiceAccount>(gen)),
        ("v1", "Pod", add::<core::Pod>(gen)),
        ("v1", "Event", add::<core::Event>(gen)),
        ("v1", "Endpoints", add::<core::Endpoints>(gen)),
        ("v1", "PersistentVolumeClaim", add::<core::PersistentVolumeClaim>(gen)),
        ("v1", "LimitRange", add::<core::LimitRange>(gen)),
        ("v1", "ResourceQuota", add::<core::ResourceQuota>(gen)),
        ("apps/v1", "Deployment", add::<apps::Deployment>(gen)),
        ("apps/v1", "StatefulSet", add::<apps::StatefulSet>(gen)),
        ("apps/v1", "DaemonSet", add::<apps::DaemonSet>(gen)),
        ("apps/v1", "ReplicaSet", add::<apps::ReplicaSet>(gen)),
        ("batch/v1", "Job", add::<batch::Job>(gen)),
        ("batch/v1", "CronJob", add::<batch::CronJob>(gen)),
        (
            "autoscaling/v2",
            "HorizontalPodAutoscaler",
            add::<api::autoscaling::v2::HorizontalPodAutoscaler>(gen),
        ),
        ("events.k8s.io/v1", "Event", add::<api::events::v1::Event>(gen)),
        ("networking.k8s.io/v1", "Ingress", add::<net::Ingress>(gen)),
        ("networking.k8s.io/v1", "NetworkPolicy", add::<net::NetworkPolicy>(gen)),
        (
            "policy/v1",
            "PodDisruptionBudget",
            add::<api::policy::v1::PodDisruptionBudget>(gen),
        ),
        (
            "coordination.k8s.io/v1",
            "Lease",
            add::<api::coordination::v1::Lease>(gen),
        ),
        ("rbac.authorization.k8s.io/v1", "Role", add::<rbac::Role>(gen)),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRole",
            add::<rbac::ClusterRole>(gen),
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "RoleBinding",
            add::<rbac::RoleBinding>(gen),
        ),
        (
            "rbac.authorization.k8s.io/v1",
            "ClusterRoleBinding",
            add::<rbac::ClusterRoleBinding>(gen),
        ),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectAccessReview",
            add::<authz::SelfSubjectAccessReview>(gen),
        ),
        (
            "authorization.k8s.io/v1",
            "SelfSubjectRulesReview",
            add::<authz::SelfSubjectRulesReview>(gen),
        ),
        (
            "authorization.k8s.io/v1",
            "SubjectAccessReview",
            add::<authz::SubjectAccessReview>(gen),
        ),
        (
            "authorization.k8s.io/v1",
            "LocalSubjectAccessReview",
            add::<authz::LocalSubjectAccessReview>(gen),
        ),
        (
            "authentication.k8s.io/v1",
            "TokenRequest",
            add::<authn::TokenRequest>(gen),
        ),
        (
            "authentication.k8s.io/v1",
            "TokenReview",
            add::<authn::TokenReview>(gen),
        ),
        (
            "authentication.k8s.io/v1",
            "SelfSubjectReview",
            add::<authn::SelfSubjectReview>(gen),
        ),
        (
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            add::<apiext::CustomResourceDefinition>(gen),
        ),
    ]
}

/// The ObjectMeta definition name, which every custom resource's schema references too.
pub fn object_meta() -> String {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta::schema_name().into_owned()
}

fn build() -> Builtins {
    let mut gen = SchemaSettings::openapi3().into_generator();
    let roots = kinds(&mut gen);
    let _ = add::<k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>(&mut gen);
    let mut definitions: Map<String, Value> = gen.take_definitions(true).into_iter().collect();
    any_value_definitions(&mut definitions);
    let mut kinds = HashMap::new();
    let mut annotated = HashSet::new();
    for (api_version, kind, name) in roots {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        if let Some(def) = definitions.get_mut(&name) {
            mark_kind(def, group, version, kind);
        }
        annotate(
            &mut definitions,
            &name,
            &mut Vec::new(),
            &Builtin::new(kind),
            &mut annotated,
        );
        kinds.insert((api_version.to_string(), kind.to_string()), name);
    }
    Builtins { definitions, kinds }
}

/// The definitions kube-apiserver publishes without a `type` (a value of any JSON type is valid), where
/// k8s-openapi's schemas say `type: object` (`JSON`) or a `oneOf` of a `$ref` and a type: only the description
/// stays, so a client validating a CRD against what devcluster publishes accepts what the real server does.
fn any_value_definitions(defs: &mut Map<String, Value>) {
    const ANY: &[&str] = &[
        "JSON",
        "JSONSchemaPropsOrArray",
        "JSONSchemaPropsOrBool",
        "JSONSchemaPropsOrStringArray",
    ];
    for name in ANY {
        let key = format!("io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.{name}");
        if let Some(Value::Object(def)) = defs.get_mut(&key) {
            def.retain(|k, _| k == "description");
        }
    }
}

/// The GVK extension, and `metadata` not required: a Go object without metadata is valid to the real server.
pub fn mark_kind(def: &mut Value, group: &str, version: &str, kind: &str) {
    def["x-kubernetes-group-version-kind"] = json!([{"group": group, "kind": kind, "version": version}]);
    if let Some(required) = def.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != "metadata");
        if required.is_empty() {
            def.as_object_mut().map(|o| o.remove("required"));
        }
    }
}

/// The definition a property schema stands for: `{"$ref"}` or `{"allOf": [{"$ref"}]}`.
pub fn ref_name(schema: &Value) -> Option<&str> {
    let r = schema
        .get("$ref")
        .or_else(|| schema.pointer("/allOf/0/$ref"))
        .and_then(Value::as_str)?;
    r.strip_prefix(REF_PREFIX)
}

/// Walks a kind's definitions from its root, writing the merge rules of every list onto its property. Each
/// definition is visited once: the rules depend only on field names, so the first path reaching it decides.
fn annotate(
    defs: &mut Map<String, Value>,
    name: &str,
    path: &mut Vec<String>,
    rules: &Builtin,
    seen: &mut HashSet<String>,
) {
    if !seen.insert(name.to_string()) {
        return;
    }
    let Some(props) = defs
        .get(name)
        .and_then(|d| d.get("properties"))
        .and_then(Value::as_object)
        .cloned()
    else {
        return;
    };
    for (field, prop) in props {
        path.push(field.clone());
        if prop.get("type").and_then(Value::as_str) == Some("array") {
            let p: Vec<&str> = path.iter().map(String::as_str).collect();
            let ext = list_extensions(rules, &p);
            if let Some(target) = defs
                .get_mut(name)
                .and_then(|d| d.pointer_mut(&format!("/properties/{field}")))
            {
                if let Some(o) = target.as_object_mut() {
                    o.extend(ext);
                }
            }
        }
        let next = ref_name(&prop)
            .or_else(|| prop.get("items").and_then(ref_name))
            .map(str::to_string);
        if let Some(next) = next {
            annotate(defs, &next, path, rules, seen);
        }
        path.pop();
    }
}

fn list_extensions(rules: &Builtin, path: &[&str]) -> Map<String, Value> {
    let mut ext = Map::new();
    match rules.smp_list(path) {
        SmpList::MergeByKey(key) => {
            ext.insert("x-kubernetes-patch-merge-key".into(), json!(key));
            ext.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
        }
        SmpList::MergePrimitives => {
            ext.insert("x-kubernetes-patch-strategy".into(), json!("merge"));
        }
        SmpList::Replace => {}
    }
    match rules.list_type(path) {
        ListType::Map { keys } => {
            ext.insert("x-kubernetes-list-type".into(), json!("map"));
            ext.insert("x-kubernetes-list-map-keys".into(), json!(keys));
        }
        ListType::Set => {
            ext.insert("x-kubernetes-list-type".into(), json!("set"));
        }
        ListType::Atomic => {
            ext.insert("x-kubernetes-list-type".into(), json!("atomic"));
        }
    }
    ext
}

/// The names of `roots` and every definition they reference, transitively.
pub fn closure(defs: &Map<String, Value>, roots: impl IntoIterator<Item = String>) -> Vec<&str> {
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack: Vec<String> = roots.into_iter().collect();
    let mut out = Vec::new();
    while let Some(name) = stack.pop() {
        let Some((key, def)) = defs.get_key_value(&name) else {
            continue;
        };
        if !seen.insert(key.as_str()) {
            continue;
        }
        out.push(key.as_str());
        collect_refs(def, &mut stack);
    }
    out.sort_unstable();
    out
}

/// Every `$ref` target below `v`.
pub fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(o) => {
            if let Some(r) = o
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|r| r.strip_prefix(REF_PREFIX))
            {
                out.push(r.to_string());
            }
            o.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_carry_their_gvk_and_list_rules() {
        let b = builtins();
        let name = &b.kinds[&("apps/v1".to_string(), "Deployment".to_string())];
        let def = &b.definitions[name];
        assert_eq!(
            def["x-kubernetes-group-version-kind"],
            json!([{"group": "apps", "kind": "Deployment", "version": "v1"}])
        );
        assert!(def.get("required").is_none(), "{def}");
        let spec = &b.definitions["io.k8s.api.core.v1.PodSpec"]["properties"];
        assert_eq!(spec["containers"]["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(spec["containers"]["x-kubernetes-list-map-keys"], json!(["name"]));
        assert_eq!(spec["tolerations"]["x-kubernetes-list-type"], "atomic");
        let container = &b.definitions["io.k8s.api.core.v1.Container"]["properties"];
        assert_eq!(container["ports"]["x-kubernetes-patch-merge-key"], "containerPort");
        assert_eq!(container["env"]["x-kubernetes-patch-merge-key"], "name");
        let names = closure(&b.definitions, [name.clone()]);
        assert!(names.contains(&"io.k8s.api.core.v1.Container"), "{names:?}");
        assert!(names.contains(&"io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"));
        assert!(!names.contains(&"io.k8s.api.core.v1.Secret"));
    }

    #[test]
    fn free_form_crd_schema_fields_have_no_type() {
        let defs = &builtins().definitions;
        let prefix = "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1";
        for name in ["JSON", "JSONSchemaPropsOrArray", "JSONSchemaPropsOrBool"] {
            let def = defs[&format!("{prefix}.{name}")].as_object().expect("object");
            assert_eq!(def.keys().collect::<Vec<_>>(), ["description"], "{name}: {def:?}");
        }
        let props = &defs[&format!("{prefix}.JSONSchemaProps")]["properties"];
        assert!(
            props["default"].to_string().contains(&format!("{prefix}.JSON\"")),
            "{}",
            props["default"]
        );
    }
}
