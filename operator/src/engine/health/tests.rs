//! Table-driven fixture tests for [`assess`] (`testdata/health/<kind>-<state>.yaml`, in the manner of
//! gitops-engine's `pkg/health/testdata`), a no-panic sweep over mistyped fields, and the aggregation rules.

use std::path::PathBuf;

use serde_json::{json, Value};

use super::*;
use crate::api::application::HealthStatusCode::{self, *};

fn fixture(name: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("testdata/health")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_saphyr::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()))
}

/// (fixture, expected status — `None` for no health check, expected message substring — `""` for any).
const CASES: &[(&str, Option<HealthStatusCode>, &str)] = &[
    ("deployment-healthy.yaml", Some(Healthy), ""),
    (
        "deployment-progressing.yaml",
        Some(Progressing),
        "Waiting for rollout to finish: 1 of 3 updated replicas are available...",
    ),
    (
        "deployment-old-replicas.yaml",
        Some(Progressing),
        "Waiting for rollout to finish: 2 old replicas are pending termination...",
    ),
    (
        "deployment-degraded.yaml",
        Some(Degraded),
        r#"Deployment "web" exceeded its progress deadline"#,
    ),
    ("deployment-paused.yaml", Some(Suspended), "Deployment is paused"),
    (
        "deployment-generation-behind.yaml",
        Some(Progressing),
        "observed deployment generation less than desired generation",
    ),
    (
        "deployment-new.yaml",
        Some(Progressing),
        "observed deployment generation less than desired",
    ),
    (
        "statefulset-healthy.yaml",
        Some(Healthy),
        "partitioned roll out complete: 3 new pods have been updated",
    ),
    (
        "statefulset-partition.yaml",
        Some(Progressing),
        "Waiting for partitioned roll out to finish: 1 out of 2 new pods have been updated...",
    ),
    (
        "statefulset-not-ready.yaml",
        Some(Progressing),
        "Waiting for 2 pods to be ready...",
    ),
    (
        "statefulset-ondelete.yaml",
        Some(Healthy),
        "statefulset has 3 ready pods",
    ),
    (
        "statefulset-revision-rolling.yaml",
        Some(Progressing),
        "waiting for statefulset rolling update to complete 1 pods at revision etcd-84f7c6d9b5...",
    ),
    ("daemonset-healthy.yaml", Some(Healthy), ""),
    (
        "daemonset-progressing.yaml",
        Some(Progressing),
        r#"Waiting for daemon set "fluent-bit" rollout to finish: 1 out of 3 new pods have been updated..."#,
    ),
    (
        "daemonset-ondelete.yaml",
        Some(Healthy),
        "daemon set 1 out of 3 new pods have been updated",
    ),
    ("replicaset-healthy.yaml", Some(Healthy), ""),
    (
        "replicaset-degraded.yaml",
        Some(Degraded),
        "exceeded quota: compute-resources",
    ),
    (
        "replicaset-progressing.yaml",
        Some(Progressing),
        "Waiting for rollout to finish: 2 out of 3 new replicas are available...",
    ),
    ("svc-clusterip.yaml", Some(Healthy), ""),
    ("svc-lb-pending.yaml", Some(Progressing), ""),
    ("svc-lb-ready.yaml", Some(Healthy), ""),
    ("ingress-no-lb.yaml", Some(Progressing), ""),
    ("ingress-healthy.yaml", Some(Healthy), ""),
    ("pvc-bound.yaml", Some(Healthy), ""),
    (
        "pvc-pending-provisioning.yaml",
        Some(Progressing),
        "Provisioning volume",
    ),
    (
        "pvc-pending-wait-for-consumer.yaml",
        Some(Healthy),
        "Waiting for consumer",
    ),
    ("pvc-lost.yaml", Some(Degraded), ""),
    ("job-running.yaml", Some(Progressing), ""),
    (
        "job-succeeded.yaml",
        Some(Healthy),
        "Reached expected number of succeeded pods",
    ),
    (
        "job-failed.yaml",
        Some(Degraded),
        "Job has reached the specified backoff limit",
    ),
    ("job-suspended.yaml", Some(Suspended), "Job suspended"),
    ("job-resumed.yaml", Some(Progressing), ""),
    ("pod-running.yaml", Some(Healthy), ""),
    (
        "pod-crashloop.yaml",
        Some(Degraded),
        "back-off 40s restarting failed container=main",
    ),
    (
        "pod-image-pull-backoff.yaml",
        Some(Degraded),
        r#"Back-off pulling image "nginx:does-not-exist""#,
    ),
    ("pod-oomkilled.yaml", Some(Degraded), "OOMKilled"),
    (
        "pod-failed-init-exit-code.yaml",
        Some(Degraded),
        r#"container "wait-for-db" failed with exit code 1"#,
    ),
    (
        "pod-evicted.yaml",
        Some(Degraded),
        "The node was low on resource: memory",
    ),
    ("pod-pending.yaml", Some(Progressing), ""),
    ("pod-running-restart-never.yaml", Some(Progressing), ""),
    (
        "pod-running-restart-never-ignore-restart-policy.yaml",
        Some(Healthy),
        "",
    ),
    (
        "pod-running-restart-never-hook-ignore-restart-policy.yaml",
        Some(Progressing),
        "",
    ),
    ("pod-running-not-ready.yaml", Some(Degraded), "OOMKilled"),
    ("pod-running-starting.yaml", Some(Progressing), ""),
    ("pod-succeeded.yaml", Some(Healthy), ""),
    ("pod-deletion.yaml", Some(Progressing), "Pending deletion"),
    ("pod-deletion-hook-finalizer.yaml", Some(Healthy), ""),
    ("apiservice-available.yaml", Some(Healthy), "Passed: all checks passed"),
    (
        "apiservice-unavailable.yaml",
        Some(Progressing),
        "FailedDiscoveryCheck: failing or missing response from https://10.96.15.92:443",
    ),
    ("apiservice-new.yaml", Some(Progressing), "Waiting to be processed"),
    (
        "hpa-v2-healthy.yaml",
        Some(Healthy),
        "recommended size matches current size",
    ),
    (
        "hpa-v2-degraded.yaml",
        Some(Degraded),
        "unable to get the target's current scale",
    ),
    (
        "hpa-v2-degraded-metric.yaml",
        Some(Degraded),
        "failed to get memory utilization",
    ),
    ("hpa-v2-progressing.yaml", Some(Progressing), "Waiting to Autoscale"),
    (
        "hpa-v1-healthy.yaml",
        Some(Healthy),
        "recommended size matches current size",
    ),
    (
        "hpa-v1-degraded-object-metric.yaml",
        Some(Degraded),
        "unable to get metric tomcat_sessions",
    ),
    (
        "hpa-v1-progressing-no-annotation.yaml",
        Some(Progressing),
        "Waiting to Autoscale",
    ),
    (
        "hpa-v1-bad-annotation.yaml",
        Some(Unknown),
        "failed to convert conditions annotation",
    ),
    ("crd-established.yaml", Some(Healthy), "CRD is established"),
    (
        "crd-names-not-accepted.yaml",
        Some(Degraded),
        r#"CRD names have not been accepted: "cert" is already in use"#,
    ),
    (
        "crd-not-established.yaml",
        Some(Progressing),
        "CRD is not established yet",
    ),
    ("application-healthy.yaml", Some(Healthy), ""),
    (
        "application-outofsync.yaml",
        Some(Progressing),
        "Waiting for the Application to be Synced",
    ),
    (
        "application-missing-outofsync.yaml",
        Some(Progressing),
        "Waiting for the Application to be Synced",
    ),
    (
        "application-sync-running.yaml",
        Some(Progressing),
        "Waiting for the sync operation to finish: waiting for completion of hook batch/Job/db-migrate",
    ),
    (
        "application-degraded.yaml",
        Some(Degraded),
        r#"Deployment "web" exceeded its progress deadline"#,
    ),
    (
        "application-sync-failed.yaml",
        Some(Degraded),
        "OutOfSync and the last sync failed: one or more objects",
    ),
    (
        "application-no-status.yaml",
        Some(Progressing),
        "Waiting for the Application to be reconciled",
    ),
    ("application-suspended.yaml", Some(Suspended), "CronJob batch/nightly"),
    ("workflow-failed.yaml", Some(Degraded), "Error (exit code 3)"),
    ("cr-ready-true.yaml", Some(Healthy), "Certificate is up to date"),
    (
        "cr-ready-false-issuing.yaml",
        Some(Progressing),
        "Issuing certificate as Secret does not exist",
    ),
    (
        "cr-ready-false.yaml",
        Some(Degraded),
        "SecretSyncedError: could not get secret data from provider",
    ),
    (
        "cr-stalled.yaml",
        Some(Degraded),
        "ArtifactFailed: kustomization path not found",
    ),
    ("cr-reconciling.yaml", Some(Progressing), "Running 'install' action"),
    (
        "cr-generation-behind.yaml",
        Some(Progressing),
        "observe generation 3 (observed 2)",
    ),
    ("cr-no-conditions.yaml", None, ""),
    ("configmap.yaml", None, ""),
    ("configmap-deleting.yaml", Some(Progressing), "Pending deletion"),
];

#[test]
fn fixtures() {
    let mut failures = Vec::new();
    for (file, status, message) in CASES {
        let got = assess(&fixture(file));
        let ok = match (&got, status) {
            (None, None) => true,
            (Some(h), Some(s)) => h.status == *s && h.message.as_deref().unwrap_or_default().contains(message),
            _ => false,
        };
        if !ok {
            failures.push(format!(
                "{file}: expected {status:?} containing {message:?}, got {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} fixture(s) failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn every_fixture_is_in_the_table() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/health");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .expect("testdata/health")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|f| f.ends_with(".yaml"))
        .collect();
    files.sort();
    let listed: Vec<&str> = CASES.iter().map(|(f, _, _)| *f).collect();
    let unlisted: Vec<&String> = files.iter().filter(|f| !listed.contains(&f.as_str())).collect();
    assert!(unlisted.is_empty(), "fixtures without an expectation: {unlisted:?}");
}

/// Every JSON pointer to a node under `v` (objects and arrays included).
fn pointers(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        Value::Array(a) => {
            for (i, child) in a.iter().enumerate() {
                let p = format!("{at}/{i}");
                out.push(p.clone());
                pointers(child, p, out);
            }
        }
        _ => {}
    }
}

/// No object makes `assess` panic: every node of every fixture replaced, one at a time, by values of the
/// wrong type and extreme numbers.
#[test]
fn never_panics_on_mistyped_fields() {
    let replacements = [
        Value::Null,
        json!("x"),
        json!(""),
        json!(true),
        json!(-1),
        json!(i64::MIN),
        json!(i64::MAX),
        json!(u64::MAX),
        json!(1e300),
        json!(-0.5),
        json!([]),
        json!([1, "a", null]),
        json!({}),
    ];
    let mut assessed = 0usize;
    for (file, _, _) in CASES {
        let base = fixture(file);
        let mut ptrs = Vec::new();
        pointers(&base, String::new(), &mut ptrs);
        for p in &ptrs {
            for r in &replacements {
                let mut obj = base.clone();
                if let Some(slot) = obj.pointer_mut(p) {
                    *slot = r.clone();
                }
                let _ = assess(&obj);
                assessed += 1;
            }
        }
    }
    for odd in [
        Value::Null,
        json!([]),
        json!("Deployment"),
        json!({"kind": 3, "apiVersion": ["apps/v1"]}),
    ] {
        assert_eq!(assess(&odd), None);
    }
    assert!(assessed > 10_000, "only {assessed} variants assessed");
}

#[test]
fn severity_follows_argo_order() {
    let order = [Healthy, Suspended, Progressing, Missing, Degraded, Unknown];
    for (i, a) in order.iter().enumerate() {
        assert_eq!(severity(*a) as usize, i);
        for b in &order[i + 1..] {
            assert!(is_worse(*a, *b), "{b:?} is worse than {a:?}");
            assert!(!is_worse(*b, *a));
        }
        assert!(!is_worse(*a, *a));
    }
}

// ---- aggregation ----

fn child(kind: &str, name: &str, status: HealthStatusCode, message: &str) -> ChildHealth {
    let group = match kind {
        "Deployment" | "StatefulSet" => "apps",
        "Job" => "batch",
        "Application" => "capstan.dev",
        _ => "",
    };
    ChildHealth {
        key: ObjectKey::new(group, kind, "shop", name),
        live: true,
        health: Some(ResourceHealth {
            status,
            message: (!message.is_empty()).then(|| message.to_string()),
        }),
        ..ChildHealth::default()
    }
}

fn missing(kind: &str, name: &str) -> ChildHealth {
    ChildHealth {
        key: ObjectKey::new("", kind, "shop", name),
        ..ChildHealth::default()
    }
}

#[test]
fn empty_app_is_healthy() {
    let h = aggregate([]);
    assert_eq!(h.status, Healthy);
    assert_eq!(h.message, None);
}

#[test]
fn worst_child_wins_and_is_named() {
    let h = aggregate([
        child("Deployment", "web", Healthy, ""),
        child("Pod", "web-1", Progressing, "ContainerCreating"),
        child(
            "Deployment",
            "api",
            Degraded,
            r#"Deployment "api" exceeded its progress deadline"#,
        ),
        child("Service", "web", Healthy, ""),
    ]);
    assert_eq!(h.status, Degraded);
    assert_eq!(
        h.message.as_deref(),
        Some(r#"Caused by Deployment shop/api (Deployment "api" exceeded its progress deadline)"#)
    );
}

#[test]
fn message_names_at_most_three() {
    let h = aggregate((0..5).map(|i| child("Pod", &format!("p{i}"), Progressing, "")));
    assert_eq!(h.status, Progressing);
    assert_eq!(
        h.message.as_deref(),
        Some("Caused by Pod shop/p0, Pod shop/p1, Pod shop/p2 and 2 more")
    );
}

#[test]
fn long_messages_are_cut() {
    let long = "é".repeat(500);
    let h = aggregate([child("Pod", "p", Degraded, &long)]);
    let m = h.message.expect("message");
    assert!(m.chars().count() < 200, "{m}");
    assert!(m.ends_with("…)"));
}

#[test]
fn missing_children_do_not_lower_health() {
    let h = aggregate([child("Deployment", "web", Healthy, ""), missing("ConfigMap", "gone")]);
    assert_eq!(h.status, Healthy);
    assert_eq!(h.message, None);
}

#[test]
fn all_missing_is_missing() {
    let h = aggregate([missing("ConfigMap", "a"), missing("Service", "b")]);
    assert_eq!(h.status, Missing);
    assert_eq!(
        h.message.as_deref(),
        Some("Caused by ConfigMap shop/a (missing), Service shop/b (missing)")
    );
}

#[test]
fn ignored_live_child_prevents_missing() {
    // An ignored child is left out of the health but still counts as live, so the app is not Missing.
    let mut ignored = child("Deployment", "web", Degraded, "x");
    ignored.ignore_health = true;
    let h = aggregate([ignored, missing("Service", "b")]);
    assert_eq!(h.status, Healthy);
}

#[test]
fn hooks_skip_and_self_are_left_out() {
    let mut hook = child("Job", "migrate", Degraded, "failed");
    hook.is_hook = true;
    let mut skipped = child("Deployment", "legacy", Degraded, "");
    skipped.skipped = true;
    let mut myself = child("Application", "shop", Degraded, "");
    myself.is_self = true;
    let h = aggregate([hook, skipped, myself, child("Deployment", "web", Healthy, "")]);
    assert_eq!(h.status, Healthy);

    // Hooks alone: the app expects nothing, so it is not Missing either.
    let mut only_hook = missing("Job", "migrate");
    only_hook.is_hook = true;
    assert_eq!(aggregate([only_hook]).status, Healthy);
}

#[test]
fn ignore_healthcheck_counts_as_live_but_not_health() {
    let mut ignored = child("Ingress", "web", Progressing, "");
    ignored.ignore_health = true;
    let h = aggregate([ignored]);
    assert_eq!(h.status, Healthy);
}

#[test]
fn child_application_missing_or_unknown_does_not_lower() {
    let h = aggregate([
        child("Application", "redis", Missing, ""),
        child("Application", "kafka", Unknown, ""),
        child("Deployment", "web", Healthy, ""),
    ]);
    assert_eq!(h.status, Healthy);
    // ...but other kinds that are Unknown do.
    let h = aggregate([child("Pod", "p", Unknown, ""), child("Application", "a", Degraded, "")]);
    assert_eq!(h.status, Unknown);
}

#[test]
fn suspended_job_aggregates_as_healthy() {
    let h = aggregate([child("Job", "report", Suspended, "Job suspended")]);
    assert_eq!(h.status, Healthy);
    let h = aggregate([child("Deployment", "web", Suspended, "Deployment is paused")]);
    assert_eq!(h.status, Suspended);
}

#[test]
fn kinds_without_health_count_as_success() {
    let mut cm = child("ConfigMap", "c", Healthy, "");
    cm.health = None;
    let h = aggregate([cm]);
    assert_eq!(h.status, Healthy);
}

#[test]
fn observe_reads_annotations_like_argo() {
    let app = ObjectKey::new("capstan.dev", "Application", "capstan", "shop");
    let ingress = fixture("ingress-no-lb.yaml");
    let mut ignored = ingress.clone();
    ignored["metadata"]["annotations"] = json!({"argocd.argoproj.io/ignore-healthcheck": "true"});
    let c = ChildHealth::observe(&app, Some(&ingress), Some(&ignored));
    assert!(c.ignore_health && c.live && !c.is_hook && !c.is_self);
    assert_eq!(
        c.key,
        ObjectKey::new("networking.k8s.io", "Ingress", "guestbook", "guestbook")
    );
    assert_eq!(c.health.as_ref().map(|h| h.status), Some(Progressing));
    assert_eq!(aggregate([c]).status, Healthy);

    let mut capstan_ignored = ingress.clone();
    capstan_ignored["metadata"]["annotations"] = json!({"capstan.dev/ignore-healthcheck": "true"});
    assert!(ChildHealth::observe(&app, None, Some(&capstan_ignored)).ignore_health);

    let hook = fixture("job-running.yaml");
    let c = ChildHealth::observe(&app, Some(&hook), Some(&hook));
    assert!(c.is_hook);

    let mut skip = fixture("configmap.yaml");
    skip["metadata"]["annotations"] = json!({"capstan.dev/hook": "Skip"});
    let c = ChildHealth::observe(&app, Some(&skip), None);
    assert!(c.skipped && !c.live && c.health.is_none());

    let me = json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "shop", "namespace": "capstan"}, "status": {"health": {"status": "Degraded"}}});
    let c = ChildHealth::observe(&app, Some(&me), Some(&me));
    assert!(c.is_self);
    assert_eq!(
        aggregate([c, ChildHealth::observe(&app, None, Some(&hook))]).status,
        Healthy
    );
}

#[test]
fn app_of_apps_waits_for_children_to_sync() {
    // A parent whose child was just created (Missing, OutOfSync) is Progressing, so its next wave waits.
    let parent = ObjectKey::new("argoproj.io", "Application", "argocd", "root");
    let child_app = fixture("application-missing-outofsync.yaml");
    let c = ChildHealth::observe(&parent, Some(&child_app), Some(&child_app));
    let h = aggregate([c]);
    assert_eq!(h.status, Progressing);
    assert!(
        h.message
            .as_deref()
            .unwrap_or_default()
            .contains("Application argocd/redis"),
        "{h:?}"
    );
}
