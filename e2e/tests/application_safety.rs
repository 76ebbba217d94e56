//! Prune, self-heal and the safety rules end to end (docs/architecture.md, "Safety rules"): objects that
//! left Git are deleted only with prune on; drift is reverted only with
//! selfHeal; an unreachable repository, a render failure or an empty render never deletes anything.

use capstan_e2e::capstan::{
    automated, condition, condition_true, health_status, resource_entry, sync_result_entry, sync_status,
    synced_healthy, text, AppEnv,
};
use std::time::Duration;

use serde_json::{json, Value};

fn list<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn uid(obj: &Value) -> String {
    text(obj, "/metadata/uid").to_owned()
}

/// Every DELETE the devcluster answered for an object in `ns`.
fn deletes_in(env: &AppEnv, ns: &str) -> Vec<String> {
    let marker = format!("/namespaces/{ns}/");
    env.cluster
        .requests()
        .into_iter()
        .filter(|r| r.method == "DELETE" && r.path.contains(&marker))
        .map(|r| format!("{} {} {}", r.status, r.method, r.path))
        .collect()
}

/// Commits the `selfheal` fixture (Deployment `guestbook-ui`, ConfigMap `settings`) at `app/`, creates
/// Application `app` with `spec`, and waits until it is Synced and Healthy.
async fn synced_app(prefix: &str, spec: Value) -> (AppEnv, String) {
    let env = AppEnv::start(prefix).await;
    env.repo.copy_fixture("selfheal", "app");
    let sha = env.repo.commit("deployment and settings").await;
    env.create_app("app", "app", spec).await;
    env.wait_synced_healthy("app").await;
    (env, sha)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automated_prune_deletes_what_left_git() {
    let env = AppEnv::start("prune").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.create_app("app", "app", automated(true, false)).await;
    env.wait_synced_healthy("app").await;
    let keep_uid = uid(&env.must_get("ConfigMap", "keep").await);
    env.must_get("ConfigMap", "extra").await;

    env.repo.remove("app/extra.yaml");
    let rev2 = env.repo.commit("drop extra").await;
    env.refresh("app", "normal").await;

    env.wait_object("ConfigMap", "extra", "is pruned", |o| o.is_none())
        .await;
    let app = env
        .wait_app("app", "Synced at the new revision", |a| {
            synced_healthy(a) && text(a, "/status/sync/revision") == rev2
        })
        .await;
    let pruned = sync_result_entry(&app, "ConfigMap", "extra");
    assert!(
        pruned.is_some_and(|r| text(r, "/status") == "Pruned"),
        "the result records the prune: {pruned:?}"
    );
    assert!(
        resource_entry(&app, "ConfigMap", "extra").is_none(),
        "a pruned object is no longer listed"
    );
    assert_eq!(
        uid(&env.must_get("ConfigMap", "keep").await),
        keep_uid,
        "the kept object was left alone"
    );
}

/// A ConfigMap manifest (no namespace) with `annotations`.
fn configmap_yaml(name: &str, annotations: Value) -> String {
    capstan_e2e::fixtures::to_yaml(&[json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "annotations": annotations},
        "data": {"name": name},
    })])
}

/// Pruning goes in reverse wave order (mirrored waves), and `Prune=false` keeps an object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_runs_in_reverse_wave_order_and_respects_prune_false() {
    let env = AppEnv::start("prunewaves").await;
    env.repo.write("app/keep.yaml", &configmap_yaml("keep", json!({})));
    for wave in 0..3 {
        let name = format!("wave{wave}");
        let annotations = json!({"argocd.argoproj.io/sync-wave": wave.to_string()});
        env.repo
            .write(&format!("app/{name}.yaml"), &configmap_yaml(&name, annotations));
    }
    env.repo.write(
        "app/precious.yaml",
        &configmap_yaml("precious", json!({"argocd.argoproj.io/sync-options": "Prune=false"})),
    );
    env.repo.commit("waves").await;
    env.create_app("app", "app", automated(true, false)).await;
    env.wait_synced_healthy("app").await;
    let rec = capstan_e2e::capstan::Recorder::start(&env.client().await, &env.ns, &["ConfigMap"]).await;

    for name in ["wave0", "wave1", "wave2", "precious"] {
        env.repo.remove(&format!("app/{name}.yaml"));
    }
    env.repo.commit("remove them").await;
    env.refresh("app", "normal").await;
    env.wait_object("ConfigMap", "wave0", "is pruned", |o| o.is_none())
        .await;
    let app = env
        .wait_app("app", "done pruning", |a| {
            !matches!(capstan_e2e::capstan::operation_phase(a), "Running" | "")
                && sync_result_entry(a, "ConfigMap", "wave0").is_some_and(|r| text(r, "/status") == "Pruned")
        })
        .await;

    let deleted = |name: &str| rec.of("ConfigMap", name).iter().find(|s| s.deleted).map(|s| s.rv);
    // The recorder's watch sees a deletion a moment after the API reports it.
    capstan_e2e::wait_until(
        "the recorder to see the three pruned ConfigMaps deleted",
        capstan_e2e::TIMEOUT,
        capstan_e2e::POLL,
        || async { ["wave0", "wave1", "wave2"].iter().all(|n| deleted(n).is_some()) },
    )
    .await;
    let (w0, w1, w2) = (deleted("wave0"), deleted("wave1"), deleted("wave2"));
    assert!(
        matches!((w0, w1, w2), (Some(a), Some(b), Some(c)) if c < b && b < a),
        "expected wave2, then wave1, then wave0 to be deleted\n{}",
        rec.trace()
    );
    // Prune=false: left in place, reported as not pruned.
    assert!(
        env.get("ConfigMap", "precious").await.is_some(),
        "Prune=false was ignored"
    );
    let precious = sync_result_entry(&app, "ConfigMap", "precious");
    assert!(
        precious.is_some_and(|r| text(r, "/status") == "PruneSkipped"),
        "the result says PruneSkipped: {precious:?}"
    );
    assert!(env.get("ConfigMap", "keep").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prune_a_removed_object_stays_and_requires_pruning() {
    let env = AppEnv::start("noprune").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.create_app("app", "app", automated(false, false)).await;
    env.wait_synced_healthy("app").await;
    let extra_uid = uid(&env.must_get("ConfigMap", "extra").await);

    env.repo.remove("app/extra.yaml");
    let rev2 = env.repo.commit("drop extra").await;
    // Argo CD's refresh annotation works as well as Capstan's.
    env.cluster
        .kubectl_ok(&[
            "annotate",
            "-n",
            &env.ns,
            "capp",
            "app",
            "argocd.argoproj.io/refresh=normal",
        ])
        .await;

    let app = env
        .wait_app("app", "OutOfSync with extra requiring pruning", |a| {
            sync_status(a) == "OutOfSync"
                && text(a, "/status/sync/revision") == rev2
                && resource_entry(a, "ConfigMap", "extra")
                    .is_some_and(|r| r.get("requiresPruning") == Some(&json!(true)))
        })
        .await;
    let keep = resource_entry(&app, "ConfigMap", "keep").expect("keep is listed");
    assert_eq!(text(keep, "/status"), "Synced", "{keep}");
    assert_eq!(
        uid(&env.must_get("ConfigMap", "extra").await),
        extra_uid,
        "extra was not deleted"
    );
    // Only pruning is needed and auto-prune is off: Argo CD does not sync at all.
    assert_eq!(
        list(&app, "/status/history").len(),
        1,
        "no automated sync for a prune-only change"
    );
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));

    // A manual sync with prune: true removes it.
    env.sync("app", json!({"prune": true})).await;
    env.wait_object("ConfigMap", "extra", "is pruned by the manual sync", |o| o.is_none())
        .await;
    env.wait_synced_healthy("app").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_heal_reverts_edits_and_recreates_deleted_objects() {
    let (env, _) = synced_app("selfheal", automated(true, true)).await;
    let ns = env.ns.clone();

    // `kubectl scale`/`edit`-like change of a field Git sets.
    env.cluster
        .kubectl_ok(&[
            "patch",
            "deployment",
            "guestbook-ui",
            "-n",
            &ns,
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ])
        .await;
    env.wait_object("Deployment", "guestbook-ui", "is back to 1 replica", |d| {
        d.is_some_and(|d| d.pointer("/spec/replicas") == Some(&json!(1)))
    })
    .await;

    // Only what drifted is re-applied (Argo CD's self-heal syncs the OutOfSync resources).
    env.cluster.dev().clear_request_log();
    env.cluster
        .kubectl_ok(&[
            "patch",
            "configmap",
            "settings",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"data":{"value":"tampered"}}"#,
        ])
        .await;
    env.wait_object("ConfigMap", "settings", "has Git's data again", |c| {
        c.is_some_and(|c| text(c, "/data/value") == "from-git")
    })
    .await;

    let deployment_path = format!("/apis/apps/v1/namespaces/{ns}/deployments/guestbook-ui");
    let deployment_writes: Vec<String> = env
        .cluster
        .requests()
        .into_iter()
        .filter(|r| matches!(r.method.as_str(), "PATCH" | "PUT" | "POST") && r.path == deployment_path)
        .map(|r| format!("{} {} {} (UA {})", r.status, r.method, r.path, r.user_agent))
        .collect();
    assert!(
        deployment_writes.is_empty(),
        "the in-sync Deployment was re-applied by the ConfigMap's self-heal: {deployment_writes:?}"
    );

    let old_uid = uid(&env.must_get("ConfigMap", "settings").await);
    env.cluster
        .kubectl_ok(&["delete", "configmap", "settings", "-n", &ns])
        .await;
    let recreated = env
        .wait_object("ConfigMap", "settings", "is re-created", |c| {
            c.is_some_and(|c| uid(c) != old_uid && text(c, "/data/value") == "from-git")
        })
        .await
        .expect("the ConfigMap exists");
    assert!(capstan_e2e::capstan::tracked_by(&recreated, &ns, "app"));
    env.wait_synced_healthy("app").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_self_heal_drift_is_reported_not_reverted() {
    let (env, _) = synced_app("noselfheal", automated(true, false)).await;
    env.cluster
        .kubectl_ok(&[
            "patch",
            "configmap",
            "settings",
            "-n",
            &env.ns,
            "--type",
            "merge",
            "-p",
            r#"{"data":{"value":"tampered"}}"#,
        ])
        .await;
    let app = env
        .wait_app("app", "OutOfSync because of the edit", |a| {
            sync_status(a) == "OutOfSync"
                && resource_entry(a, "ConfigMap", "settings").is_some_and(|r| text(r, "/status") == "OutOfSync")
        })
        .await;
    assert_eq!(list(&app, "/status/history").len(), 1, "no self-heal sync");
    // Another full comparison later, the edit is still there.
    env.refresh("app", "hard").await;
    env.wait_app("app", "refreshed, still OutOfSync", |a| {
        a.pointer("/metadata/annotations/capstan.dev~1refresh").is_none() && sync_status(a) == "OutOfSync"
    })
    .await;
    assert_eq!(
        text(&env.must_get("ConfigMap", "settings").await, "/data/value"),
        "tampered"
    );
}

/// `ignoreDifferences` on `/spec/replicas` (an autoscaler's field): scaling is not drift, even with
/// selfHeal, and the Application stays Synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ignore_differences_keeps_scaled_replicas_and_stays_synced() {
    let mut spec = automated(true, true);
    spec["ignoreDifferences"] = json!([{"group": "apps", "kind": "Deployment", "jsonPointers": ["/spec/replicas"]}]);
    let (env, _) = synced_app("ignorediff", spec).await;
    env.cluster
        .kubectl_ok(&["scale", "deployment", "guestbook-ui", "-n", &env.ns, "--replicas=3"])
        .await;
    // A full comparison after the change.
    env.refresh_handled("app", "hard").await;
    let app = env.wait_synced_healthy("app").await;
    let deploy = resource_entry(&app, "Deployment", "guestbook-ui").expect("the Deployment is listed");
    assert_eq!(text(deploy, "/status"), "Synced", "{deploy}");
    assert_eq!(
        list(&app, "/status/history").len(),
        1,
        "no self-heal sync for an ignored field"
    );
    assert_eq!(
        env.must_get("Deployment", "guestbook-ui")
            .await
            .pointer("/spec/replicas"),
        Some(&json!(3)),
        "the scaled replicas were kept"
    );
}

/// The repository goes away: ComparisonError, sync Unknown, nothing deleted; it recovers when back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_repository_never_prunes() {
    let (mut env, _) = synced_app("unreachable", automated(true, true)).await;
    let deploy_uid = uid(&env.must_get("Deployment", "guestbook-ui").await);
    let cm_uid = uid(&env.must_get("ConfigMap", "settings").await);

    env.repo.stop_daemon().await;
    // A user-requested refresh re-resolves the revision (Argo CD's CompareWithLatestForceResolve), so the
    // refresh itself must surface the failure, not only a later periodic reconcile.
    env.refresh_handled("app", "hard").await;
    let app = env
        .wait_app_within(
            &env.ns,
            "app",
            "ComparisonError with sync status Unknown right after the hard refresh",
            Duration::from_secs(15),
            |a| condition_true(a, "ComparisonError") && sync_status(a) == "Unknown",
        )
        .await;
    let message = condition(&app, "ComparisonError")
        .map(|c| text(c, "/message"))
        .unwrap_or_default();
    assert!(!message.is_empty(), "the error says what failed");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    assert_eq!(uid(&env.must_get("ConfigMap", "settings").await), cm_uid);
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));

    env.repo.start_daemon().await;
    env.refresh("app", "hard").await;
    let app = env
        .wait_app("app", "recovered: Synced, no ComparisonError", |a| {
            synced_healthy(a) && !condition_true(a, "ComparisonError")
        })
        .await;
    assert_eq!(health_status(&app), "Healthy");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));
}

/// The Application is pointed at a dead port: ComparisonError, sync Unknown, nothing deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_repository_url_never_prunes() {
    let (env, _) = synced_app("deadurl", automated(true, true)).await;
    let deploy_uid = uid(&env.must_get("Deployment", "guestbook-ui").await);
    let dead = format!("git://127.0.0.1:{}/gone.git", capstan_e2e::capstan::free_port());
    env.patch_app("app", &json!({"spec": {"source": {"repoURL": dead}}}))
        .await;
    let app = env
        .wait_app("app", "ComparisonError with sync status Unknown", |a| {
            condition_true(a, "ComparisonError") && sync_status(a) == "Unknown"
        })
        .await;
    assert_eq!(list(&app, "/status/history").len(), 1, "nothing was synced");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    env.must_get("ConfigMap", "settings").await;
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));

    env.patch_app("app", &json!({"spec": {"source": {"repoURL": env.repo.url()}}}))
        .await;
    env.wait_app("app", "recovered: Synced, no ComparisonError", |a| {
        synced_healthy(a) && !condition_true(a, "ComparisonError")
    })
    .await;
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
}

/// A commit with invalid YAML: ComparisonError, sync Unknown, nothing deleted, nothing synced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn render_failure_never_prunes() {
    let (env, _) = synced_app("invalidyaml", automated(true, true)).await;
    let deploy_uid = uid(&env.must_get("Deployment", "guestbook-ui").await);
    let cm_uid = uid(&env.must_get("ConfigMap", "settings").await);

    env.repo.write(
        "app/broken.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\ndata:\n  a: b\n",
    );
    env.repo.commit("broken yaml").await;
    env.refresh("app", "normal").await;
    let app = env
        .wait_app("app", "ComparisonError with sync status Unknown", |a| {
            condition_true(a, "ComparisonError") && sync_status(a) == "Unknown"
        })
        .await;
    assert_eq!(list(&app, "/status/history").len(), 1, "nothing was synced");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    assert_eq!(uid(&env.must_get("ConfigMap", "settings").await), cm_uid);
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));

    env.repo.remove("app/broken.yaml");
    let fixed = env.repo.commit("fix yaml").await;
    env.refresh("app", "normal").await;
    env.wait_app("app", "recovered at the fixed revision", |a| {
        synced_healthy(a) && !condition_true(a, "ComparisonError") && text(a, "/status/sync/revision") == fixed
    })
    .await;
    assert_eq!(uid(&env.must_get("ConfigMap", "settings").await), cm_uid);
}

/// A render with zero objects where the last sync had some: automated prune refuses without allowEmpty.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_render_does_not_prune_without_allow_empty() {
    let (env, _) = synced_app("empty", automated(true, true)).await;
    let deploy_uid = uid(&env.must_get("Deployment", "guestbook-ui").await);

    env.repo.remove("app/guestbook-ui-deployment.yaml");
    env.repo.remove("app/settings.yaml");
    env.repo.write("app/README.md", "Nothing to deploy here any more.\n");
    env.repo.commit("empty the directory").await;
    env.refresh("app", "normal").await;

    let app = env
        .wait_app("app", "a SyncError refusing to wipe out every resource", |a| {
            condition_true(a, "SyncError") && sync_status(a) == "OutOfSync"
        })
        .await;
    assert!(
        resource_entry(&app, "Deployment", "guestbook-ui")
            .is_some_and(|r| r.get("requiresPruning") == Some(&json!(true))),
        "{}",
        app["status"]["resources"]
    );
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    env.must_get("ConfigMap", "settings").await;
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));
}

/// Objects that copy the app-instance label (as other operators do) are not the Application's: they
/// are neither adopted nor pruned, even when they also copy a tracking annotation naming another
/// object (a copied label or annotation must not let one Application delete another's object).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copied_tracking_marks_are_neither_adopted_nor_pruned() {
    let env = AppEnv::start("copiedlabel").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.create_app("app", "app", automated(true, false)).await;
    env.wait_synced_healthy("app").await;
    let keep = env.must_get("ConfigMap", "keep").await;
    let instance = text(&keep, "/metadata/labels/capstan.dev~1app-instance").to_owned();
    let keep_tracking = text(&keep, "/metadata/annotations/capstan.dev~1tracking-id").to_owned();
    assert!(
        !instance.is_empty() && !keep_tracking.is_empty(),
        "{}",
        keep["metadata"]
    );

    let impostor = |name: &str, annotations: Value| {
        json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": env.ns,
                "labels": {"capstan.dev/app-instance": instance},
                "annotations": annotations,
            },
            "data": {"owner": "someone else"},
        })
    };
    env.apply(&[
        impostor("label-only", json!({})),
        impostor("copied-annotation", json!({"capstan.dev/tracking-id": keep_tracking})),
        impostor(
            "other-app",
            json!({"capstan.dev/tracking-id": format!("{}/other:/ConfigMap:{}/other-app", env.ns, env.ns)}),
        ),
    ])
    .await;

    // A pruning sync runs (extra leaves Git) while the impostors exist.
    env.repo.remove("app/extra.yaml");
    let rev2 = env.repo.commit("drop extra").await;
    env.refresh("app", "normal").await;
    env.wait_object("ConfigMap", "extra", "is pruned", |o| o.is_none())
        .await;
    let app = env
        .wait_app("app", "Synced at the new revision", |a| {
            synced_healthy(a) && text(a, "/status/sync/revision") == rev2
        })
        .await;
    for name in ["label-only", "copied-annotation", "other-app"] {
        assert!(env.get("ConfigMap", name).await.is_some(), "{name} was pruned");
        assert!(
            resource_entry(&app, "ConfigMap", name).is_none(),
            "{name} was adopted: {}",
            app["status"]["resources"]
        );
    }
}
