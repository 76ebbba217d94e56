//! Diff scenarios from fixtures (`operator/testdata/diff/`) and inline objects.

use base64::Engine as _;
use serde_json::{json, Value};

use super::*;

fn fixture(text: &str) -> Value {
    serde_saphyr::from_str(text).expect("fixture parses")
}

fn desired_deployment() -> Value {
    fixture(include_str!("../../../testdata/diff/deployment-desired.yaml"))
}

fn live_deployment() -> Value {
    fixture(include_str!("../../../testdata/diff/deployment-live.yaml"))
}

fn run(desired: &Value, live: &Value) -> DiffResult {
    diff(Some(desired), Some(live), &DiffOptions::default())
}

fn rule(kind: &str) -> ResourceIgnoreDifferences {
    ResourceIgnoreDifferences {
        group: Some("apps".into()),
        kind: kind.into(),
        ..Default::default()
    }
}

/// Adds a managedFields entry to `live`.
fn with_manager(mut live: Value, manager: &str, operation: &str, fields: Value) -> Value {
    let entry = json!({"manager": manager, "operation": operation, "fieldsType": "FieldsV1", "fieldsV1": fields});
    if let Some(Value::Array(mf)) = live.pointer_mut("/metadata/managedFields") {
        mf.push(entry);
    }
    live
}

#[test]
fn defaulted_live_deployment_is_synced() {
    let r = run(&desired_deployment(), &live_deployment());
    assert!(!r.modified, "paths: {:?}\n{}", r.paths, r.unified_diff());
    assert!(r.paths.is_empty());
    assert_eq!(r.sync_status(), SyncStatusCode::Synced);
    assert_eq!(r.unified_diff(), "");
    let live = r.normalized_live.unwrap();
    assert!(live.get("status").is_none() && live.pointer("/metadata/managedFields").is_none());
}

#[test]
fn image_change_is_out_of_sync_with_its_path() {
    let mut d = desired_deployment();
    d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28");
    let r = run(&d, &live_deployment());
    assert!(r.modified);
    assert_eq!(r.paths, vec!["/spec/template/spec/containers/0/image"]);
    let text = r.unified_diff();
    assert!(text.starts_with("--- live\n+++ desired\n"), "{text}");
    let changed: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++"))
        .collect();
    assert_eq!(changed.len(), 2, "{text}");
    assert!(
        changed[0].starts_with('-') && changed[0].ends_with("image: nginx:1.27"),
        "{text}"
    );
    assert!(
        changed[1].starts_with('+') && changed[1].ends_with("image: nginx:1.28"),
        "{text}"
    );
}

#[test]
fn replica_drift_and_live_edits_of_git_fields_are_out_of_sync() {
    let mut l = live_deployment();
    l["spec"]["replicas"] = json!(5);
    let r = run(&desired_deployment(), &l);
    assert_eq!(r.paths, vec!["/spec/replicas"]);
    // Same drift ignored by a jsonPointers rule.
    let mut opts = DiffOptions::default();
    opts.ignore_differences.push(ResourceIgnoreDifferences {
        json_pointers: vec!["/spec/replicas".into()],
        ..rule("Deployment")
    });
    assert!(!diff(Some(&desired_deployment()), Some(&l), &opts).modified);
    // A rule for another kind or name does not apply.
    let mut other = opts.clone();
    other.ignore_differences[0].name = Some("api".into());
    assert!(diff(Some(&desired_deployment()), Some(&l), &other).modified);
}

#[test]
fn quantity_and_int_string_equivalences() {
    let cases = [
        (
            "/spec/template/spec/containers/0/resources/limits/cpu",
            json!("1"),
            json!(1),
        ),
        (
            "/spec/template/spec/containers/0/resources/limits/memory",
            json!("1Gi"),
            json!("1073741824"),
        ),
        (
            "/spec/template/spec/containers/0/resources/requests/cpu",
            json!("500m"),
            json!(0.5),
        ),
        (
            "/spec/template/spec/containers/0/ports/0/containerPort",
            json!(80),
            json!("80"),
        ),
        (
            "/spec/template/spec/volumes/0/emptyDir/sizeLimit",
            json!("1Gi"),
            json!("1024Mi"),
        ),
    ];
    for (ptr, live_value, desired_value) in cases {
        let mut d = desired_deployment();
        let mut l = live_deployment();
        *d.pointer_mut(ptr).unwrap() = desired_value.clone();
        *l.pointer_mut(ptr).unwrap() = live_value.clone();
        let r = run(&d, &l);
        assert!(!r.modified, "{ptr}: {desired_value} vs {live_value}: {:?}", r.paths);
    }
    // Real changes stay visible.
    let mut d = desired_deployment();
    d["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"] = json!("2");
    assert_eq!(
        run(&d, &live_deployment()).paths,
        vec!["/spec/template/spec/containers/0/resources/limits/cpu"]
    );
    // Quantity spellings are not folded outside quantity positions.
    let cm = |v: &str| json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": v}});
    assert!(run(&cm("1000m"), &cm("1")).modified);
}

#[test]
fn int_or_string_strategy_and_probe_ports() {
    let mut d = desired_deployment();
    d["spec"]["strategy"] = json!({"rollingUpdate": {"maxSurge": 1, "maxUnavailable": "0"}});
    let mut l = live_deployment();
    l["spec"]["strategy"]["rollingUpdate"] = json!({"maxSurge": "1", "maxUnavailable": 0});
    assert!(!run(&d, &l).modified);
    l["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("25%");
    assert_eq!(run(&d, &l).paths, vec!["/spec/strategy/rollingUpdate/maxSurge"]);
}

#[test]
fn empty_and_zero_values_in_git_equal_absent_live_fields() {
    let mut d = desired_deployment();
    let c = &mut d["spec"]["template"]["spec"]["containers"][0];
    c["args"] = json!([]);
    c["securityContext"] = json!({});
    c["stdin"] = json!(false);
    c["workingDir"] = json!("");
    c["lifecycle"] = Value::Null;
    d["spec"]["template"]["spec"]["hostNetwork"] = json!(false);
    d["spec"]["template"]["metadata"]["annotations"] = json!({});
    assert!(!run(&d, &live_deployment()).modified);
    // But an empty list in Git against a populated live list is a change.
    let mut l = live_deployment();
    l["spec"]["template"]["spec"]["containers"][0]["args"] = json!(["--debug"]);
    assert!(run(&d, &l).modified);
}

#[test]
fn list_maps_compare_by_key_and_tolerate_injected_items() {
    let mut l = live_deployment();
    let containers = l["spec"]["template"]["spec"]["containers"].as_array_mut().unwrap();
    containers.insert(0, json!({"name": "istio-proxy", "image": "istio/proxyv2"}));
    let env = l["spec"]["template"]["spec"]["containers"][1]["env"]
        .as_array_mut()
        .unwrap();
    env.push(json!({"name": "INJECTED", "value": "1"}));
    assert!(!run(&desired_deployment(), &l).modified);
    // A new env var in Git is detected on the right container.
    let mut d = desired_deployment();
    d["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "NEW", "value": "x"}));
    let r = run(&d, &l);
    assert_eq!(r.paths, vec!["/spec/template/spec/containers/1/env"]);
}

#[test]
fn atomic_lists_compare_whole_with_defaulted_item_fields() {
    let svc = |ports: Value| {
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "spec": {"selector": {"app": "web"}, "ports": ports, "args": ["a", "b"]}})
    };
    let d = svc(json!([{"port": 80, "targetPort": "8080"}]));
    let l = svc(json!([{"port": 80, "targetPort": 8080, "protocol": "TCP"}]));
    assert!(!run(&d, &l).modified);
    let mut l2 = l.clone();
    l2["spec"]["args"] = json!(["b", "a"]);
    assert_eq!(run(&d, &l2).paths, vec!["/spec/args/0", "/spec/args/1"]);
    let mut l3 = l.clone();
    l3["spec"]["args"] = json!(["a"]);
    assert_eq!(run(&d, &l3).paths, vec!["/spec/args"]);
}

#[test]
fn field_removed_from_git_but_owned_by_capstan_is_out_of_sync() {
    // Live still has an env var and a label that Git dropped; `capstan` owns them.
    let mut l = live_deployment();
    l["metadata"]["labels"]["team"] = json!("payments");
    l["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "OLD", "value": "1"}));
    l["spec"]["paused"] = json!(true);
    let owned = with_manager(
        l.clone(),
        "capstan",
        "Apply",
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:paused": {},
            "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:env": {"k:{\"name\":\"OLD\"}": {".": {}, "f:name": {}, "f:value": {}}}}}}}}}),
    );
    let r = run(&desired_deployment(), &owned);
    assert!(r.modified);
    assert_eq!(
        r.paths,
        vec![
            "/metadata/labels/team",
            "/spec/paused",
            "/spec/template/spec/containers/0/env"
        ]
    );
    // The same fields owned by `kubectl-edit` are someone else's: Synced.
    let edited = with_manager(
        l,
        "kubectl-edit",
        "Update",
        json!({"f:metadata": {"f:labels": {"f:team": {}}}, "f:spec": {"f:paused": {},
            "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:env": {"k:{\"name\":\"OLD\"}": {".": {}, "f:name": {}, "f:value": {}}}}}}}}}),
    );
    assert!(!run(&desired_deployment(), &edited).modified);
}

#[test]
fn co_owned_fields_survive_capstan_dropping_them() {
    let mut l = live_deployment();
    l["spec"]["paused"] = json!(true);
    let f = json!({"f:spec": {"f:paused": {}}});
    let l = with_manager(l, "capstan", "Apply", f.clone());
    let l = with_manager(l, "kubectl-edit", "Update", f);
    assert!(!run(&desired_deployment(), &l).modified);
}

#[test]
fn tracking_metadata_is_compared_only_when_desired_has_it() {
    let mut d = desired_deployment();
    d["metadata"]["labels"]
        .as_object_mut()
        .unwrap()
        .remove(labels::APP_INSTANCE_LABEL);
    d["metadata"].as_object_mut().unwrap().remove("annotations");
    assert!(!run(&d, &live_deployment()).modified);
    let mut l = live_deployment();
    l["metadata"]["annotations"][labels::TRACKING_ID_ANNOTATION] = json!("other/app:apps/Deployment:shop/web");
    assert_eq!(
        run(&desired_deployment(), &l).paths,
        vec!["/metadata/annotations/capstan.dev~1tracking-id"]
    );
}

#[test]
fn managed_fields_managers_are_ignored() {
    let mut l = live_deployment();
    l["spec"]["replicas"] = json!(7);
    l["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = json!("750m");
    let l = with_manager(l, "hpa", "Update", json!({"f:spec": {"f:replicas": {}}}));
    let l = with_manager(
        l,
        "kube-controller-manager",
        "Update",
        json!({"f:spec": {"f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:resources": {"f:requests": {"f:cpu": {}}}}}}}}}),
    );
    let d = desired_deployment();
    let r = run(&d, &l);
    assert_eq!(
        r.paths,
        vec![
            "/spec/replicas",
            "/spec/template/spec/containers/0/resources/requests/cpu"
        ]
    );
    let opts = DiffOptions::with_ignore_differences(&[ResourceIgnoreDifferences {
        managed_fields_managers: vec!["kube-controller-manager".into(), "hpa".into()],
        ..rule("Deployment")
    }]);
    let r = diff(Some(&d), Some(&l), &opts);
    assert!(!r.modified, "{:?}", r.paths);
}

#[test]
fn jq_path_expressions_and_unsupported_warnings() {
    let mut l = live_deployment();
    l["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:patched");
    let d = desired_deployment();
    let opts = DiffOptions::with_ignore_differences(&[ResourceIgnoreDifferences {
        jq_path_expressions: vec![
            ".spec.template.spec.containers[] | select(.name == \"web\") | .image".into(),
            "def f: f; f".into(),
        ],
        ..rule("*")
    }]);
    let r = diff(Some(&d), Some(&l), &opts);
    assert!(!r.modified, "{:?}", r.paths);
    assert_eq!(r.warnings.len(), 1);
    assert!(r.warnings[0].contains("unsupported"));
}

#[test]
fn missing_and_requires_pruning() {
    let d = desired_deployment();
    let r = diff(Some(&d), None, &DiffOptions::default());
    assert!(r.missing && r.modified && !r.requires_pruning);
    assert!(r.normalized_live.is_none() && r.normalized_desired.is_some());
    let l = live_deployment();
    let r = diff(None, Some(&l), &DiffOptions::default());
    assert!(r.requires_pruning && r.modified && !r.missing);
    assert!(r.unified_diff().starts_with("--- live\n+++ desired\n"));
    assert_eq!(diff(None, None, &DiffOptions::default()), DiffResult::default());
}

#[test]
fn app_sync_status_rules() {
    let synced = run(&desired_deployment(), &live_deployment());
    let extra_live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra",
        "annotations": {"argocd.argoproj.io/compare-options": "IgnoreExtraneous"}}});
    let extra = diff(None, Some(&extra_live), &DiffOptions::default());
    let extra_sync = ResourceSync::of(None, Some(&extra_live), &extra);
    assert!(extra_sync.ignore_extraneous && extra_sync.requires_pruning);
    assert_eq!(extra_sync.status, Some(SyncStatusCode::OutOfSync));
    let ok = ResourceSync::of(Some(&desired_deployment()), Some(&live_deployment()), &synced);
    assert_eq!(app_sync_status([ok, extra_sync]), SyncStatusCode::Synced);

    // Without the annotation, an extraneous resource makes the app OutOfSync.
    let plain_live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "extra"}});
    let plain = ResourceSync::of(
        None,
        Some(&plain_live),
        &diff(None, Some(&plain_live), &DiffOptions::default()),
    );
    assert_eq!(app_sync_status([&ok, &plain]), SyncStatusCode::OutOfSync);

    // Hooks never count, modified or missing.
    let hook = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate",
        "annotations": {"argocd.argoproj.io/hook": "PreSync"}}, "spec": {"x": 1}});
    let hook_result = diff(Some(&hook), None, &DiffOptions::default());
    let hook_sync = ResourceSync::of(Some(&hook), None, &hook_result);
    assert!(hook_sync.hook && hook_sync.status.is_none());
    assert_eq!(app_sync_status(vec![ok, hook_sync]), SyncStatusCode::Synced);

    // Missing resource → OutOfSync; IgnoreExtraneous does not excuse a missing one.
    let mut annotated = desired_deployment();
    annotated["metadata"]["annotations"]["capstan.dev/compare-options"] = json!("IgnoreExtraneous");
    let missing = ResourceSync::of(
        Some(&annotated),
        None,
        &diff(Some(&annotated), None, &DiffOptions::default()),
    );
    assert_eq!(app_sync_status([ok, missing]), SyncStatusCode::OutOfSync);
    assert_eq!(app_sync_status(Vec::<ResourceSync>::new()), SyncStatusCode::Synced);
}

const CANARY: &str = "SECRETVAL";

/// Every string that must never appear in any output.
fn forbidden() -> Vec<String> {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let mut v = vec![CANARY.to_string(), b64(CANARY), b64("SECRETVAL-old")];
    v.push(b64(CANARY).trim_end_matches('=').to_string());
    v
}

fn assert_no_canary(r: &DiffResult) {
    let mut outputs = vec![
        format!("{:?}", r),
        r.unified_diff(),
        unified_diff(r.normalized_live.as_ref(), r.normalized_desired.as_ref()),
    ];
    outputs.extend(r.paths.iter().cloned());
    outputs.extend(r.warnings.iter().cloned());
    for o in [&r.normalized_desired, &r.normalized_live].into_iter().flatten() {
        outputs.push(o.to_string());
    }
    for text in outputs {
        for f in forbidden() {
            assert!(!text.contains(&f), "leaked {f:?} in:\n{text}");
        }
    }
}

#[test]
fn secrets_are_masked_in_every_output() {
    let d = fixture(include_str!("../../../testdata/diff/secret-invalid-desired.yaml"));
    let l = fixture(include_str!("../../../testdata/diff/secret-live.yaml"));
    let opts = DiffOptions {
        sensitive_annotations: vec!["token".into()],
        ..Default::default()
    };
    let r = diff(Some(&d), Some(&l), &opts);
    assert!(r.modified);
    assert_no_canary(&r);
    // Changed values are still visible as a change, through masks of different lengths.
    assert!(r.paths.contains(&"/data/password".to_string()), "{:?}", r.paths);
    let nd = r.normalized_desired.as_ref().unwrap();
    let nl = r.normalized_live.as_ref().unwrap();
    assert_ne!(nd["data"]["password"], nl["data"]["password"]);
    assert!(nd["data"]["password"].as_str().unwrap().chars().all(|c| c == '+'));
    assert!(nd.get("stringData").is_none());
    assert!(r.unified_diff().contains("++++"));
    // Missing and extraneous Secrets are masked too.
    assert_no_canary(&diff(Some(&d), None, &opts));
    assert_no_canary(&diff(None, Some(&l), &opts));
    // The raw helper masks objects it is handed directly (data, stringData, last-applied; it does not know
    // the configured sensitive annotations, so they are left out of this part).
    let (mut d, mut l) = (d, l);
    for o in [&mut d, &mut l] {
        o["metadata"]["annotations"].as_object_mut().unwrap().remove("token");
    }
    let text = unified_diff(Some(&l), Some(&d));
    for f in forbidden() {
        assert!(!text.contains(&f), "{text}");
    }
}

#[test]
fn secret_string_data_equals_live_data() {
    let d = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "stringData": {"user": "admin"}});
    let l = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "type": "Opaque",
        "data": {"user": base64::engine::general_purpose::STANDARD.encode("admin")}});
    let r = run(&d, &l);
    assert!(!r.modified, "{:?}", r.paths);
    assert_eq!(r.normalized_live.unwrap()["data"]["user"], json!(mask::MASK));
}

#[test]
fn hostile_objects_never_panic() {
    let mut deep = json!(1);
    for _ in 0..120 {
        deep = json!({"a": [deep]});
    }
    let weird = [
        json!(null),
        json!(42),
        json!("x"),
        json!([1, 2]),
        json!({"metadata": "x", "spec": [], "status": 1}),
        json!({"apiVersion": "v1", "kind": "Secret", "data": [1], "stringData": "x", "metadata": {"annotations": 3}}),
        json!({"metadata": {"managedFields": [{"manager": "capstan", "operation": "Apply", "fieldsV1": {"f:spec": {"k:{bad": {}, "i:x": {}, "v:[": {}}}}]}, "spec": {}}),
        deep,
    ];
    let opts = DiffOptions::with_ignore_differences(&[ResourceIgnoreDifferences {
        group: Some("*".into()),
        kind: "*".into(),
        json_pointers: vec!["/a/0".into(), "".into(), "/".into()],
        jq_path_expressions: vec![".a[] | .a".into()],
        managed_fields_managers: vec!["capstan".into()],
        ..Default::default()
    }]);
    for a in &weird {
        for b in &weird {
            let r = diff(Some(a), Some(b), &opts);
            let _ = r.unified_diff();
            let _ = diff(Some(a), None, &opts);
            let _ = diff(None, Some(b), &opts);
        }
    }
}
