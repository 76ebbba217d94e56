use serde_json::{json, Value};

use super::*;

/// A document shaped like kube-apiserver's `/openapi/v3/apis/apps/v1` (trimmed): a kind root with the GVK
/// extension, `allOf`-wrapped references, int-or-string, a quantity, a map list and an enum.
fn apps_doc() -> Value {
    json!({"openapi": "3.0.0", "paths": {}, "components": {"schemas": {
        "io.k8s.api.apps.v1.Deployment": {
            "description": "Deployment enables declarative updates for Pods and ReplicaSets.",
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}], "default": {}},
                "spec": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.apps.v1.DeploymentSpec"}], "default": {}}
            },
            "x-kubernetes-group-version-kind": [{"group": "apps", "kind": "Deployment", "version": "v1"}]
        },
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
            "type": "object",
            "properties": {
                "name": {"type": "string"}, "namespace": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string", "default": ""}},
                "creationTimestamp": {"type": "string", "format": "date-time"}
            }
        },
        "io.k8s.api.apps.v1.DeploymentSpec": {
            "type": "object",
            "required": ["selector", "template"],
            "properties": {
                "replicas": {"type": "integer", "format": "int32", "minimum": 0},
                "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "strategy": {"type": "object", "properties": {
                    "type": {"type": "string", "enum": ["Recreate", "RollingUpdate"]},
                    "maxSurge": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}]}
                }},
                "template": {"type": "object", "properties": {
                    "containers": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.Container"}]},
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
                }}
            }
        },
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
        "io.k8s.apimachinery.pkg.api.resource.Quantity": {"oneOf": [{"type": "string"}, {"type": "number"}]},
        "io.k8s.api.core.v1.Container": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "cpu": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.api.resource.Quantity"},
                "args": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "atomic"}
            }
        }
    }}})
}

fn deployment(spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"},
        "creationTimestamp": null}, "spec": spec})
}

fn valid_spec() -> Value {
    json!({"replicas": 2, "selector": {"matchLabels": {"app": "web"}, "anything": [1]},
        "strategy": {"type": "RollingUpdate", "maxSurge": "25%"},
        "template": {"containers": [{"name": "a", "cpu": "500m", "args": ["x"]}, {"name": "b", "cpu": 1}]}})
}

fn errors(v: Verdict) -> Vec<String> {
    match v {
        Verdict::Invalid(e) => e.iter().map(ToString::to_string).collect(),
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn doc() -> SchemaDoc {
    SchemaDoc::from_document(apps_doc(), "apps", "v1")
}

#[test]
fn a_valid_object_passes_with_int_or_string_quantities_and_preserved_fields() {
    assert_eq!(doc().validate(&deployment(valid_spec()), false), Verdict::Valid);
    let mut spec = valid_spec();
    spec["strategy"]["maxSurge"] = json!(1);
    assert_eq!(doc().validate(&deployment(spec), false), Verdict::Valid);
}

#[test]
fn unknown_fields_are_named_by_path() {
    let mut spec = valid_spec();
    spec["template"]["containers"][1]["imagePullPolice"] = json!("Always");
    spec["oops"] = json!(1);
    let mut obj = deployment(spec);
    obj["metadata"]["lables"] = json!({});
    let errs = errors(doc().validate(&obj, false));
    assert!(
        errs.contains(&".metadata.lables: field not declared in schema".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.oops: field not declared in schema".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.template.containers[1].imagePullPolice: field not declared in schema".to_string()),
        "{errs:?}"
    );
}

#[test]
fn wrong_types_are_refused() {
    let mut spec = valid_spec();
    spec["replicas"] = json!("two");
    spec["strategy"]["maxSurge"] = json!(true);
    spec["template"]["containers"][0]["cpu"] = json!([1]);
    let mut obj = deployment(spec);
    obj["metadata"]["labels"]["tier"] = json!(3);
    let errs = errors(doc().validate(&obj, false));
    assert!(
        errs.contains(&".spec.replicas: expected integer, got string".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.strategy.maxSurge: expected integer or string, got boolean".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.template.containers[0].cpu: expected string or number, got array".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".metadata.labels.tier: expected string, got integer".to_string()),
        "{errs:?}"
    );
}

#[test]
fn required_fields_enums_bounds_and_map_keys() {
    let mut spec = valid_spec();
    spec.as_object_mut().unwrap().remove("selector");
    spec["strategy"]["type"] = json!("BlueGreen");
    spec["replicas"] = json!(-1);
    spec["template"]["containers"] = json!([{"name": "a"}, {"name": "a"}, {"cpu": "1"}]);
    let errs = errors(doc().validate(&deployment(spec), false));
    assert!(errs.contains(&".spec.selector: Required value".to_string()), "{errs:?}");
    assert!(
        errs.contains(
            &r#".spec.strategy.type: Unsupported value: "BlueGreen": supported values: "Recreate", "RollingUpdate""#
                .to_string()
        ),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.replicas: Invalid value: must be greater than or equal to 0".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.template.containers[2].name: Required value".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&r#".spec.template.containers: duplicate entries for key [name="a"]"#.to_string()),
        "{errs:?}"
    );
}

#[test]
fn redacted_messages_do_not_quote_values() {
    let mut spec = valid_spec();
    spec["strategy"]["type"] = json!("s3cr3t");
    let errs = errors(doc().validate(&deployment(spec), true));
    assert!(errs.iter().all(|e| !e.contains("s3cr3t")), "{errs:?}");
}

#[test]
fn rules_not_evaluated_here_leave_the_object_to_the_server() {
    let mut obj = deployment(valid_spec());
    obj["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    assert!(matches!(doc().validate(&obj, false), Verdict::Unchecked(why) if why.contains("date-time")));
    // A violation found elsewhere still makes the object invalid.
    obj["spec"]["oops"] = json!(1);
    assert!(matches!(doc().validate(&obj, false), Verdict::Invalid(_)));
    let unknown_kind = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "x"}});
    assert!(matches!(doc().validate(&unknown_kind, false), Verdict::Unchecked(_)));
}

/// A custom resource's structural schema, as kube-apiserver publishes it from the CRD.
#[test]
fn crd_structural_schemas() {
    let doc = json!({"components": {"schemas": {"com.example.v1.Widget": {
        "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "example.com", "kind": "Widget", "version": "v1"}],
        "properties": {
            "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
            "spec": {"type": "object", "required": ["size"], "properties": {
                "size": {"type": "integer", "maximum": 10},
                "mode": {"type": "string", "enum": ["fast", "slow"]},
                "name": {"type": "string", "maxLength": 5},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                "tags": {"type": "object", "additionalProperties": {"type": "integer"}},
                "checked": {"type": "string", "pattern": "^[a-z]+$"},
                "embedded": {"type": "object", "x-kubernetes-embedded-resource": true,
                    "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}
            }}
        }
    }}}});
    let doc = SchemaDoc::from_document(doc, "example.com", "v1");
    let widget = |spec: Value| json!({"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}, "spec": spec});
    let ok = widget(
        json!({"size": 3, "mode": "fast", "free": {"x": {"y": 1}}, "tags": {"a": 1},
        "embedded": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "spec": {"z": 1}}}),
    );
    assert_eq!(doc.validate(&ok, false), Verdict::Valid);
    let bad = widget(json!({"size": 11, "mode": "medium", "name": "toolong", "tags": {"a": "1"}, "extra": true}));
    let errs = errors(doc.validate(&bad, false));
    assert!(
        errs.contains(&".spec.size: Invalid value: must be less than or equal to 10".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.iter().any(|e| e.starts_with(".spec.mode: Unsupported value")),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.name: Too long: must have at most 5 length".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.tags.a: expected integer, got string".to_string()),
        "{errs:?}"
    );
    assert!(
        errs.contains(&".spec.extra: field not declared in schema".to_string()),
        "{errs:?}"
    );
    let missing = widget(json!({"mode": "fast"}));
    assert_eq!(errors(doc.validate(&missing, false)), [".spec.size: Required value"]);
    let pattern = widget(json!({"size": 1, "checked": "abc"}));
    assert!(matches!(doc.validate(&pattern, false), Verdict::Unchecked(why) if why.contains("pattern")));
}

#[test]
fn documents_are_trimmed_of_descriptions_but_keep_fields_named_description() {
    let doc = json!({"components": {"schemas": {"a.v1.Thing": {
        "description": "long text", "type": "object",
        "x-kubernetes-group-version-kind": [{"group": "a", "kind": "Thing", "version": "v1"}],
        "properties": {"description": {"type": "string", "description": "a field"}}
    }}}});
    let doc = SchemaDoc::from_document(doc, "a", "v1");
    let thing = json!({"kind": "Thing", "description": "hello"});
    assert_eq!(doc.validate(&thing, false), Verdict::Valid);
    assert!(matches!(
        doc.validate(&json!({"kind": "Thing", "description": 1}), false),
        Verdict::Invalid(_)
    ));
    assert!(!Value::Object(doc.schemas.clone()).to_string().contains("long text"));
}

/// A CustomResourceDefinition against `apiextensions.k8s.io/v1` as kube-apiserver publishes it: `default`,
/// `enum` and `example` of a schema are `JSON`, and `items`/`additionalProperties` the `JSONSchemaPropsOr*`
/// types, each published with a description and no `type`: any JSON value is valid there.
#[test]
fn crd_schemas_accept_any_value_where_the_server_publishes_no_type() {
    let r = |n: &str| json!({"$ref": format!("#/components/schemas/io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.{n}")});
    let doc = json!({"components": {"schemas": {
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition": {
            "type": "object",
            "x-kubernetes-group-version-kind": [{"group": "apiextensions.k8s.io", "kind": "CustomResourceDefinition", "version": "v1"}],
            "properties": {"spec": {"type": "object", "properties": {"schema": r("JSONSchemaProps")}}}
        },
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON": {
            "description": "JSON represents any valid JSON value."
        },
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray": {
            "description": "JSONSchemaPropsOrArray represents a value that can either be a JSONSchemaProps or an array."
        },
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": {
            "description": "JSONSchemaPropsOrBool represents JSONSchemaProps or a boolean value."
        },
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaProps": {
            "type": "object",
            "properties": {
                "type": {"type": "string"},
                "default": r("JSON"),
                "example": r("JSON"),
                "enum": {"type": "array", "items": {"allOf": [r("JSON")], "default": {}}},
                "items": r("JSONSchemaPropsOrArray"),
                "additionalProperties": r("JSONSchemaPropsOrBool"),
                "properties": {"type": "object", "additionalProperties": {"allOf": [r("JSONSchemaProps")], "default": {}}}
            }
        }
    }}});
    let doc = SchemaDoc::from_document(doc, "apiextensions.k8s.io", "v1");
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.example.com"}, "spec": {"schema": {"type": "object", "properties": {
        "mode": {"type": "string", "enum": ["fast", "slow", 3, {"x": 1}], "default": "fast", "example": "slow"},
        "size": {"type": "integer", "default": 3, "example": 4},
        "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
        "opts": {"type": "object", "additionalProperties": true, "default": {"k": [1, "v"]}},
        "pick": {"type": "array", "items": [{"type": "string"}]},
        "map": {"type": "object", "additionalProperties": {"type": "string"}}
    }}}});
    assert_eq!(doc.validate(&crd, false), Verdict::Valid);
    let mut bad = crd.clone();
    bad["spec"]["schema"]["properties"]["mode"]["type"] = json!(1);
    assert_eq!(
        errors(doc.validate(&bad, false)),
        [".spec.schema.properties.mode.type: expected string, got integer"]
    );
}
