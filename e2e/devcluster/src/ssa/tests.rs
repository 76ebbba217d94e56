//! Golden tests: request sequences observed with kubectl and kube-rs and the
//! documented examples, checked down to the exact managedFields and conflict causes.

use serde_json::{json, Value};

use super::*;
use crate::schema::{Builtin, FieldSchema, ListType, Opaque};

const T0: &str = "2026-11-22T01:00:00Z";
const T1: &str = "2026-11-22T01:01:00Z";
const T2: &str = "2026-11-22T01:02:00Z";
const T3: &str = "2026-11-22T01:03:00Z";

fn ssa(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: &dyn FieldSchema,
    now: &str,
) -> ApiResult<Value> {
    let api_version = applied["apiVersion"].as_str().unwrap_or("v1");
    apply(ApplyRequest {
        live,
        applied,
        manager,
        force,
        subresource: None,
        api_version,
        schema,
        now,
    })
}

fn cm_schema() -> Builtin {
    Builtin::new("ConfigMap")
}

fn cm(data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}, "data": data})
}

fn managed(obj: &Value) -> &Vec<Value> {
    obj["metadata"]["managedFields"].as_array().expect("managedFields")
}

fn entry<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    managed(obj)
        .iter()
        .find(|e| e["manager"] == manager)
        .unwrap_or_else(|| panic!("no entry for {manager}"))
}

fn fields<'a>(obj: &'a Value, manager: &str) -> &'a Value {
    &entry(obj, manager)["fieldsV1"]
}

/// What the HTTP layer does around `record_update` for a create.
fn create(obj: Value, manager: &str, schema: &dyn FieldSchema, now: &str) -> Value {
    let mut obj = obj;
    let api_version = obj["apiVersion"].as_str().unwrap_or("v1").to_string();
    record_update(None, &mut obj, manager, None, &api_version, schema, now).unwrap();
    obj
}

fn update(old: &Value, new: Value, manager: &str, schema: &dyn FieldSchema, now: &str) -> Value {
    let mut new = new;
    let api_version = new["apiVersion"].as_str().unwrap_or("v1").to_string();
    record_update(Some(old), &mut new, manager, None, &api_version, schema, now).unwrap();
    new
}

#[test]
fn configmap_server_side_apply_creates_one_apply_entry() {
    let out = ssa(
        None,
        &cm(json!({"a": "1", "b": "2"})),
        "kubectl",
        false,
        &cm_schema(),
        T0,
    )
    .unwrap();
    assert_eq!(
        out,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default",
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T0,
                "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {"f:a": {}, "f:b": {}}}}]},
            "data": {"a": "1", "b": "2"}})
    );
}

#[test]
fn conflict_with_client_side_apply_then_force() {
    let s = cm_schema();
    let mut csa = cm(json!({"a": "1"}));
    csa["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"});
    let live = create(csa, "kubectl-client-side-apply", &s, T0);
    assert_eq!(
        fields(&live, "kubectl-client-side-apply"),
        &json!({"f:data": {".": {}, "f:a": {}},
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}})
    );

    let err = ssa(Some(&live), &cm(json!({"a": "2"})), "kubectl", false, &s, T1).unwrap_err();
    assert_eq!(err.code, 409);
    assert_eq!(err.reason, "Conflict");
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"kubectl-client-side-apply\" using v1: .data.a"
    );
    assert_eq!(
        err.causes,
        vec![crate::error::Cause::new(
            "FieldManagerConflict",
            "conflict with \"kubectl-client-side-apply\" using v1",
            ".data.a"
        )]
    );

    let out = ssa(Some(&live), &cm(json!({"a": "2"})), "kubectl", true, &s, T1).unwrap();
    assert_eq!(out["data"], json!({"a": "2"}));
    assert_eq!(fields(&out, "kubectl"), &json!({"f:data": {"f:a": {}}}));
    // The Update entry lost the field and keeps its own time; the Apply entry sorts first.
    let csa_entry = entry(&out, "kubectl-client-side-apply");
    assert_eq!(csa_entry["time"], T0);
    assert_eq!(
        csa_entry["fieldsV1"],
        json!({"f:data": {}, "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}})
    );
    assert_eq!(managed(&out)[0]["manager"], "kubectl");
}

#[test]
fn conflicts_between_appliers_are_listed_per_field() {
    let s = Builtin::new("Deployment");
    let dep = |replicas: i64, image: &str| {
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {"replicas": replicas, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    };
    let live = ssa(None, &dep(1, "nginx:1"), "probe-ssa", false, &s, T0).unwrap();
    let err = ssa(Some(&live), &dep(2, "nginx:2"), "other-mgr", false, &s, T1).unwrap_err();
    assert_eq!(
        err.message,
        "Apply failed with 2 conflicts: conflict with \"probe-ssa\": .spec.replicas; \
         conflict with \"probe-ssa\": .spec.template.spec.containers[name=\"c\"].image"
    );
    let fields: Vec<&str> = err.causes.iter().map(|c| c.field.as_str()).collect();
    assert_eq!(
        fields,
        [".spec.replicas", ".spec.template.spec.containers[name=\"c\"].image"]
    );
    assert!(err
        .causes
        .iter()
        .all(|c| c.message == "conflict with \"probe-ssa\"" && c.reason == "FieldManagerConflict"));
}

#[test]
fn equal_values_are_shared_not_conflicts() {
    let s = cm_schema();
    let live = ssa(None, &cm(json!({"a": "1", "b": "2"})), "one", false, &s, T0).unwrap();
    let out = ssa(Some(&live), &cm(json!({"a": "1"})), "two", false, &s, T1).unwrap();
    assert_eq!(fields(&out, "one"), &json!({"f:data": {"f:a": {}, "f:b": {}}}));
    assert_eq!(fields(&out, "two"), &json!({"f:data": {"f:a": {}}}));
    // "one" stops applying a: it stays, because "two" still owns it; b goes.
    let mut nothing = cm(json!({}));
    nothing.as_object_mut().unwrap().remove("data");
    let out = ssa(Some(&out), &nothing, "one", false, &s, T2).unwrap();
    assert_eq!(out["data"], json!({"a": "1"}));
    assert!(
        managed(&out).iter().all(|e| e["manager"] != "one"),
        "empty entries are dropped"
    );
}

#[test]
fn omitted_fields_are_removed() {
    let s = cm_schema();
    let mut first = cm(json!({"a": "1", "b": "2"}));
    first["metadata"]["labels"] = json!({"app": "x", "tier": "fe"});
    let live = ssa(None, &first, "kubectl", false, &s, T0).unwrap();
    let mut second = cm(json!({"a": "1"}));
    second["metadata"]["labels"] = json!({"app": "x"});
    let out = ssa(Some(&live), &second, "kubectl", false, &s, T1).unwrap();
    assert_eq!(out["data"], json!({"a": "1"}));
    assert_eq!(out["metadata"]["labels"], json!({"app": "x"}));
    assert_eq!(
        fields(&out, "kubectl"),
        &json!({"f:data": {"f:a": {}}, "f:metadata": {"f:labels": {"f:app": {}}}})
    );
    assert_eq!(entry(&out, "kubectl")["time"], T1);
    // Dropping every label removes the emptied map too; fields owned by an Update manager survive.
    let live = update(
        &out,
        {
            let mut o = out.clone();
            o["data"]["c"] = json!("3");
            o
        },
        "kubectl-edit",
        &s,
        T2,
    );
    let out = ssa(Some(&live), &cm(json!({})), "kubectl", false, &s, T3).unwrap();
    assert_eq!(out["data"], json!({"c": "3"}));
    assert!(out["metadata"].get("labels").is_none());
}

fn deployment(containers: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "dep"}},
            "template": {"metadata": {"labels": {"app": "dep"}}, "spec": {"containers": containers}}}})
}

#[test]
fn spec_11_3_example_is_serialized_exactly() {
    let s = Builtin::new("Deployment");
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "dep"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "nginx:1"}]}}}});
    let out = ssa(None, &applied, "kubectl", false, &s, T0).unwrap();
    let text = serde_json::to_string(fields(&out, "kubectl")).unwrap();
    assert_eq!(
        text,
        r#"{"f:spec":{"f:template":{"f:spec":{"f:containers":{"k:{\"name\":\"c\"}":{".":{},"f:image":{},"f:name":{}}}}}}}"#
    );
}

#[test]
fn containers_merge_by_name_between_managers() {
    let s = Builtin::new("Deployment");
    let live = ssa(
        None,
        &deployment(json!([{"name": "app", "image": "app:1"}])),
        "team-a",
        false,
        &s,
        T0,
    )
    .unwrap();
    assert_eq!(
        fields(&live, "team-a"),
        &json!({"f:spec": {"f:selector": {}, "f:template": {"f:metadata": {"f:labels": {"f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"app\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}})
    );
    let sidecar = deployment(json!([{"name": "proxy", "image": "envoy:1"}]));
    let out = ssa(Some(&live), &sidecar, "team-b", false, &s, T1).unwrap();
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["app", "proxy"]);
    // team-b touching team-a's image conflicts at the image only.
    let both = deployment(json!([{"name": "proxy", "image": "envoy:1"}, {"name": "app", "image": "app:2"}]));
    let err = ssa(Some(&out), &both, "team-b", false, &s, T2).unwrap_err();
    assert_eq!(err.causes.len(), 1);
    assert_eq!(
        err.causes[0].field,
        ".spec.template.spec.containers[name=\"app\"].image"
    );
    // team-a dropping its container leaves it while team-b still owns parts of it after a forced takeover.
    let out = ssa(Some(&out), &both, "team-b", true, &s, T2).unwrap();
    assert_eq!(
        fields(&out, "team-a")["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"app\"}"],
        json!({".": {}, "f:name": {}})
    );
    let out = ssa(Some(&out), &deployment(json!([])), "team-a", false, &s, T3).unwrap();
    // The forced apply moved the shared items into team-b's order; app survives because team-b owns its image.
    let containers = &out["spec"]["template"]["spec"]["containers"];
    assert_eq!(
        containers,
        &json!([{"name": "proxy", "image": "envoy:1"}, {"name": "app", "image": "app:2"}])
    );
}

#[test]
fn new_items_follow_the_appliers_order_and_live_only_items_stay() {
    let s = Builtin::new("Deployment");
    let live = ssa(
        None,
        &deployment(json!([{"name": "a"}, {"name": "b"}])),
        "m1",
        false,
        &s,
        T0,
    )
    .unwrap();
    let live = ssa(Some(&live), &deployment(json!([{"name": "x"}])), "m2", false, &s, T1).unwrap();
    let out = ssa(
        Some(&live),
        &deployment(json!([{"name": "a"}, {"name": "n"}, {"name": "b"}])),
        "m1",
        false,
        &s,
        T2,
    )
    .unwrap();
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["a", "n", "b", "x"]);
    // Removing a dropped item by key.
    let out = ssa(Some(&out), &deployment(json!([{"name": "b"}])), "m1", false, &s, T3).unwrap();
    let names: Vec<&str> = out["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b", "x"]);
}

#[test]
fn container_ports_are_keyed_by_port_and_defaulted_protocol() {
    let s = Builtin::new("Deployment");
    let c = |ports: Value| deployment(json!([{"name": "c", "image": "i", "ports": ports}]));
    let live = ssa(None, &c(json!([{"containerPort": 80}])), "m1", false, &s, T0).unwrap();
    let ports = &fields(&live, "m1")["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"c\"}"]["f:ports"];
    assert_eq!(
        ports,
        &json!({"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {".": {}, "f:containerPort": {}}})
    );
    // An explicit TCP names the same item; UDP is another one.
    let out = ssa(
        Some(&live),
        &c(json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}, {"containerPort": 80, "protocol": "UDP"}])),
        "m1",
        false,
        &s,
        T1,
    )
    .unwrap();
    let items = out["spec"]["template"]["spec"]["containers"][0]["ports"]
        .as_array()
        .unwrap();
    assert_eq!(items.len(), 2);
    assert_eq!(
        items[0],
        json!({"containerPort": 80, "protocol": "TCP", "name": "http"})
    );
}

#[test]
fn service_ports_are_keyed_by_port_and_protocol() {
    let s = Builtin::new("Service");
    let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
        "spec": {"ports": [{"port": 80, "targetPort": 8080}]}});
    let out = ssa(None, &svc, "m", false, &s, T0).unwrap();
    assert!(fields(&out, "m")["f:spec"]["f:ports"]
        .get("k:{\"port\":80,\"protocol\":\"TCP\"}")
        .is_some());
}

#[test]
fn finalizers_are_a_set() {
    let s = cm_schema();
    let with = |fins: Value| {
        let mut o = cm(json!({}));
        o["metadata"]["finalizers"] = fins;
        o.as_object_mut().unwrap().remove("data");
        o
    };
    let live = ssa(None, &with(json!(["x"])), "m1", false, &s, T0).unwrap();
    assert_eq!(
        fields(&live, "m1"),
        &json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}}}})
    );
    let live = ssa(Some(&live), &with(json!(["y", "x"])), "m2", false, &s, T1).unwrap();
    assert_eq!(live["metadata"]["finalizers"], json!(["y", "x"]));
    assert_eq!(
        fields(&live, "m2"),
        &json!({"f:metadata": {"f:finalizers": {"v:\"x\"": {}, "v:\"y\"": {}}}})
    );
    // m2 drops both: x is still m1's, y goes.
    let out = ssa(Some(&live), &with(json!([])), "m2", false, &s, T2).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["x"]));
    assert_eq!(
        fieldset::render_path(&["f:metadata".into(), "f:finalizers".into(), "v:\"x\"".into()]),
        ".metadata.finalizers[=\"x\"]"
    );
}

#[test]
fn custom_resource_lists_are_atomic() {
    let s = Opaque;
    let app = |items: Value| {
        json!({"apiVersion": "demo.example.com/v1", "kind": "App", "metadata": {"name": "web"},
            "spec": {"replicas": 2, "items": items}})
    };
    let live = ssa(None, &app(json!([{"name": "a"}, {"name": "b"}])), "m1", false, &s, T0).unwrap();
    assert_eq!(
        fields(&live, "m1"),
        &json!({"f:spec": {"f:items": {}, "f:replicas": {}}})
    );
    let err = ssa(Some(&live), &app(json!([{"name": "c"}])), "m2", false, &s, T1).unwrap_err();
    assert_eq!(
        err.message,
        "Apply failed with 1 conflict: conflict with \"m1\": .spec.items"
    );
    let out = ssa(Some(&live), &app(json!([{"name": "c"}])), "m2", true, &s, T1).unwrap();
    assert_eq!(out["spec"]["items"], json!([{"name": "c"}]));
    assert_eq!(fields(&out, "m1"), &json!({"f:spec": {"f:replicas": {}}}));
    assert_eq!(entry(&out, "m1")["time"], T0);
}

#[test]
fn crd_list_map_keys_are_honoured() {
    struct Keyed;
    impl FieldSchema for Keyed {
        fn list_type(&self, path: &[&str]) -> ListType {
            if path == ["spec", "items"] {
                ListType::Map {
                    keys: vec!["name".into()],
                }
            } else {
                ListType::Atomic
            }
        }
        fn smp_list(&self, _: &[&str]) -> crate::schema::SmpList {
            crate::schema::SmpList::Replace
        }
        fn map_is_atomic(&self, _: &[&str]) -> bool {
            false
        }
    }
    let app = |items: Value| json!({"apiVersion": "demo.example.com/v1", "kind": "App", "metadata": {"name": "w"}, "spec": {"items": items}});
    let live = ssa(None, &app(json!([{"name": "a", "v": 1}])), "m1", false, &Keyed, T0).unwrap();
    let out = ssa(
        Some(&live),
        &app(json!([{"name": "b", "v": 2}])),
        "m2",
        false,
        &Keyed,
        T1,
    )
    .unwrap();
    assert_eq!(
        out["spec"]["items"],
        json!([{"name": "a", "v": 1}, {"name": "b", "v": 2}])
    );
}

#[test]
fn atomic_selector_is_one_unit() {
    let s = Builtin::new("Deployment");
    let live = ssa(None, &deployment(json!([{"name": "c"}])), "m1", false, &s, T0).unwrap();
    let mut other = deployment(json!([{"name": "c"}]));
    other["spec"]["selector"] = json!({"matchLabels": {"app": "dep", "x": "y"}});
    let err = ssa(Some(&live), &other, "m2", false, &s, T1).unwrap_err();
    assert_eq!(err.causes[0].field, ".spec.selector");
}

#[test]
fn status_subresource_entries() {
    let s = Opaque;
    let app = json!({"apiVersion": "demo.example.com/v1", "kind": "App", "metadata": {"name": "web"}, "spec": {"replicas": 2}});
    let live = ssa(None, &app, "probe-ssa", false, &s, T0).unwrap();
    let mut with_status = live.clone();
    with_status["status"] = json!({"phase": "Ready"});
    let status_apply = json!({"apiVersion": "demo.example.com/v1", "kind": "App", "metadata": {"name": "web"},
        "status": {"phase": "Ready", "observedGeneration": 1}});
    let req = |live| ApplyRequest {
        live,
        applied: &status_apply,
        manager: "probe-ctrl",
        force: true,
        subresource: Some("status"),
        api_version: "demo.example.com/v1",
        schema: &s,
        now: T1,
    };
    let out = apply(req(Some(&live))).unwrap();
    assert_eq!(
        entry(&out, "probe-ctrl"),
        &json!({"manager": "probe-ctrl", "operation": "Apply", "apiVersion": "demo.example.com/v1", "time": T1,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:observedGeneration": {}, "f:phase": {}}},
            "subresource": "status"})
    );
    // The same apply again is a no-op.
    let again = apply(req(Some(&out))).unwrap();
    assert_eq!(
        serde_json::to_string(&again).unwrap(),
        serde_json::to_string(&out).unwrap()
    );
    // A merge-patch status write records an Update entry for the status subresource and takes the field.
    let mut patched = out.clone();
    patched["status"]["phase"] = json!("Degraded");
    record_update(
        Some(&out),
        &mut patched,
        "kubectl-patch",
        Some("status"),
        "demo.example.com/v1",
        &s,
        T2,
    )
    .unwrap();
    let e = entry(&patched, "kubectl-patch");
    assert_eq!(e["subresource"], "status");
    assert_eq!(e["operation"], "Update");
    assert_eq!(
        fields(&patched, "probe-ctrl"),
        &json!({"f:status": {"f:observedGeneration": {}}})
    );
    // Main-resource applies never conflict with status entries.
    let mut main = app.clone();
    main["spec"]["replicas"] = json!(3);
    assert!(ssa(Some(&patched), &main, "probe-ssa", false, &s, T3).is_ok());
}

#[test]
fn csa_to_ssa_migration_sequence() {
    // client-side apply, forced server-side apply, kubectl-last-applied apply,
    // JSON patch replacing managedFields (with a resourceVersion precondition the HTTP layer checks), forced apply.
    let s = cm_schema();
    let last_applied =
        r#"{"apiVersion":"v1","data":{"a":"1"},"kind":"ConfigMap","metadata":{"name":"cfg","namespace":"default"}}"#;
    let mut csa = cm(json!({"a": "1"}));
    csa["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
    let live = create(csa, "kubectl-client-side-apply", &s, T0);

    let step1 = ssa(Some(&live), &cm(json!({"a": "1"})), "kubectl", true, &s, T1).unwrap();
    let mut annot =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "default"}});
    annot["metadata"]["annotations"] = json!({"kubectl.kubernetes.io/last-applied-configuration": last_applied});
    let step2 = ssa(Some(&step1), &annot, "kubectl-last-applied", false, &s, T1).unwrap();
    assert_eq!(managed(&step2).len(), 3);

    // kubectl csaupgrade: the CSA entry's fields move into the kubectl Apply entry, written directly.
    let migrated = json!([{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": T2, "fieldsType": "FieldsV1",
        "fieldsV1": {"f:data": {".": {}, "f:a": {}},
            "f:metadata": {"f:annotations": {".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {}}}}},
        entry(&step2, "kubectl-last-applied").clone()]);
    let mut step3 = step2.clone();
    step3["metadata"]["managedFields"] = migrated.clone();
    record_update(Some(&step2), &mut step3, "kubectl", None, "v1", &s, T2).unwrap();
    assert_eq!(
        step3["metadata"]["managedFields"], migrated,
        "client-written entries are stored verbatim"
    );

    let step4 = ssa(Some(&step3), &cm(json!({"a": "1"})), "kubectl", true, &s, T3).unwrap();
    assert_eq!(step4["data"], json!({"a": "1"}));
    assert_eq!(
        step4["metadata"]["annotations"], step3["metadata"]["annotations"],
        "still owned by kubectl-last-applied"
    );
    assert_eq!(fields(&step4, "kubectl"), &json!({"f:data": {"f:a": {}}}));
    assert!(managed(&step4)
        .iter()
        .all(|e| e["manager"] != "kubectl-client-side-apply"));
}

#[test]
fn no_op_apply_returns_live_unchanged() {
    let s = Builtin::new("Deployment");
    let applied = deployment(json!([{"name": "c", "image": "nginx:1", "ports": [{"containerPort": 80}]}]));
    let live = ssa(None, &applied, "kubectl", false, &s, T0).unwrap();
    let again = ssa(Some(&live), &applied, "kubectl", false, &s, T1).unwrap();
    assert_eq!(serde_json::to_vec(&again).unwrap(), serde_json::to_vec(&live).unwrap());
    // A different value with the same field set keeps the entry's time.
    let changed = deployment(json!([{"name": "c", "image": "nginx:2", "ports": [{"containerPort": 80}]}]));
    let out = ssa(Some(&live), &changed, "kubectl", false, &s, T1).unwrap();
    assert_eq!(entry(&out, "kubectl")["time"], T0);
    assert_ne!(out, live);
}

#[test]
fn update_moves_ownership_and_forgets_removed_fields() {
    let s = cm_schema();
    let live = ssa(None, &cm(json!({"a": "1", "b": "2"})), "kubectl", false, &s, T0).unwrap();
    let mut edited = live.clone();
    edited["data"] = json!({"a": "changed", "c": "3"});
    let out = update(&live, edited, "kubectl-edit", &s, T1);
    assert_eq!(fields(&out, "kubectl-edit"), &json!({"f:data": {"f:a": {}, "f:c": {}}}));
    assert!(
        managed(&out).iter().all(|e| e["manager"] != "kubectl"),
        "a moved away, b no longer exists"
    );
    // A no-op update records nothing.
    let same = update(&out, out.clone(), "kubectl-edit", &s, T2);
    assert_eq!(same, out);
}

#[test]
fn create_records_all_fields_without_struct_dots() {
    let s = Builtin::new("Deployment");
    let out = create(
        deployment(json!([{"name": "c", "image": "i"}])),
        "kubectl-create",
        &s,
        T0,
    );
    assert_eq!(
        entry(&out, "kubectl-create"),
        &json!({"manager": "kubectl-create", "operation": "Update", "apiVersion": "apps/v1", "time": T0,
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:selector": {}, "f:template": {
                "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                "f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {".": {}, "f:image": {}, "f:name": {}}}}}}}})
    );
}

#[test]
fn client_written_managed_fields() {
    let s = cm_schema();
    let live = ssa(None, &cm(json!({"a": "1"})), "kubectl", false, &s, T0).unwrap();
    // `[]` means unchanged.
    let mut new = live.clone();
    new["metadata"]["managedFields"] = json!([]);
    record_update(Some(&live), &mut new, "x", None, "v1", &s, T1).unwrap();
    assert_eq!(new, live);
    // `[{}]` clears.
    let mut new = live.clone();
    new["metadata"]["managedFields"] = json!([{}]);
    record_update(Some(&live), &mut new, "x", None, "v1", &s, T1).unwrap();
    assert!(new["metadata"].get("managedFields").is_none());
    // Malformed entries: 422.
    let mut new = live.clone();
    new["metadata"]["managedFields"] =
        json!([{"manager": "m", "operation": "Patch", "fieldsType": "FieldsV1", "fieldsV1": {}}]);
    let err = record_update(Some(&live), &mut new, "x", None, "v1", &s, T1).unwrap_err();
    assert_eq!(err.code, 422);
    assert_eq!(err.message, "ConfigMap \"cfg\" is invalid: metadata.managedFields[0].operation: Invalid value: \"Patch\": must be `Apply` or `Update`");
    let mut new = live.clone();
    new["metadata"]["managedFields"] =
        json!([{"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"bogus": {}}}]);
    assert_eq!(
        record_update(Some(&live), &mut new, "x", None, "v1", &s, T1)
            .unwrap_err()
            .code,
        422
    );
}

#[test]
fn several_update_entries_per_manager_by_version() {
    let s = Opaque;
    let obj =
        |v: &str, x: i64| json!({"apiVersion": v, "kind": "App", "metadata": {"name": "w"}, "spec": {"x": x, "y": 1}});
    let live = create(obj("demo.example.com/v1", 1), "ctl", &s, T0);
    let mut new = obj("demo.example.com/v2", 2);
    new["metadata"]["managedFields"] = live["metadata"]["managedFields"].clone();
    record_update(Some(&live), &mut new, "ctl", None, "demo.example.com/v2", &s, T1).unwrap();
    let versions: Vec<&str> = managed(&new)
        .iter()
        .map(|e| e["apiVersion"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["demo.example.com/v1", "demo.example.com/v2"]);
}

#[test]
fn rejects_unkeyable_items_and_deep_nesting() {
    let s = Builtin::new("Deployment");
    let err = ssa(
        None,
        &deployment(json!([{"name": "c"}, {"name": "c"}])),
        "m",
        false,
        &s,
        T0,
    )
    .unwrap_err();
    assert_eq!(err.code, 422);
    assert!(
        err.message.contains("duplicate entries for key [name=\"c\"]"),
        "{}",
        err.message
    );
    let mut deep = json!("x");
    for _ in 0..150 {
        deep = json!({"a": deep});
    }
    let obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": deep});
    assert_eq!(ssa(None, &obj, "m", false, &Opaque, T0).unwrap_err().code, 422);
}

#[test]
fn nulls_in_applied_config_do_not_delete() {
    let s = cm_schema();
    let live = ssa(None, &cm(json!({"a": "1"})), "one", false, &s, T0).unwrap();
    let out = ssa(Some(&live), &cm(json!({"a": null, "b": "2"})), "two", false, &s, T1).unwrap();
    assert_eq!(out["data"], json!({"a": "1", "b": "2"}));
    assert_eq!(fields(&out, "two"), &json!({"f:data": {"f:b": {}}}));
}

#[test]
fn untracked_fields_come_from_live() {
    let s = cm_schema();
    let mut live = ssa(None, &cm(json!({"a": "1"})), "m", false, &s, T0).unwrap();
    live["metadata"]["uid"] = json!("u-1");
    live["metadata"]["resourceVersion"] = json!("7");
    let mut applied = cm(json!({"a": "1"}));
    applied["metadata"]["uid"] = json!("other");
    applied["metadata"]["resourceVersion"] = json!("1");
    let out = ssa(Some(&live), &applied, "m", false, &s, T1).unwrap();
    assert_eq!(out, live);
}
