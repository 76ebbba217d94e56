//! Schema helpers shared by the custom resource types: free-form values, metav1 condition
//! lists, durations, and the generator settings kube-derive uses for CRD schemas.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::JSONSchemaProps;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use schemars::{generate::SchemaSettings, json_schema, JsonSchema, Schema, SchemaGenerator};

/// A Go-style duration such as `60s`, `1m30s`, `500ms` or `2h`.
pub const DURATION_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$";

/// A Go-style duration, or a bare number of seconds (Argo CD's retry backoff accepts both).
pub const DURATION_OR_SECONDS_PATTERN: &str = r"^(([0-9]+(\.[0-9]+)?(ms|s|m|h))+|[0-9]+)$";

/// Schema of a free-form JSON object whose fields the apiserver must keep as they are.
pub fn free_form_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Schema of a list of free-form JSON objects.
pub fn free_form_object_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// Schema of a list of metav1 Conditions, merged by `type` under server-side apply
/// (`+listType=map`, `+listMapKey=type`, as in Kubernetes' own APIs).
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let items = generator.subschema_for::<Condition>();
    json_schema!({
        "type": "array",
        "items": items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Schema of an optional duration string (`pollInterval`, `maxDuration`, ...).
pub fn duration(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "maxLength": 32,
        "pattern": DURATION_PATTERN,
    })
}

/// Schema of an optional duration string that may also be a bare number of seconds.
pub fn duration_or_seconds(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "string",
        "maxLength": 32,
        "pattern": DURATION_OR_SECONDS_PATTERN,
    })
}

/// The settings kube-derive uses for CRD schemas: OpenAPI v3, everything inlined, and the
/// rewrites that keep the schema structural.
fn crd_schema_settings() -> SchemaSettings {
    SchemaSettings::openapi3()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
        })
        .with_transform(schemars::transform::AddNullable::default())
        .with_transform(kube::core::schema::StructuralSchemaRewriter)
        .with_transform(kube::core::schema::OptionalEnum)
        .with_transform(kube::core::schema::OptionalIntOrString)
}

/// The CRD schema of `T`, generated exactly as `#[derive(CustomResource)]` does; for types whose
/// CRD is assembled by hand.
pub fn crd_schema_for<T: JsonSchema>() -> JSONSchemaProps {
    let schema = crd_schema_settings().into_generator().into_root_schema_for::<T>();
    serde_json::from_value(schema.to_value()).expect("schemars output is a valid JSONSchemaProps")
}
