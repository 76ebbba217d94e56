//! Prune, self-heal and the safety rules end to end (DESIGN §5; reference/security-cases.md §2.1–§2.2,
//! §4 E.44): objects that left Git are deleted only with prune on; drift is reverted only with
//! selfHeal; an unreachable repository, a render failure or an empty render never deletes anything.

use capstan_e2e::capstan::{
    application, automated, condition, condition_true, health_status, resource_entry, sync_result_entry, sync_status,
    synced_healthy, text, AppEnv,
};
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
    env.apply(&[application(&env.ns, "app", &env.repo.url(), "app", &env.ns, spec)])
        .await;
    env.wait_synced_healthy("app").await;
    (env, sha)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn automated_prune_deletes_what_left_git() {
    let env = AppEnv::start("prune").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.apply(&[application(
        &env.ns,
        "app",
        &env.repo.url(),
        "app",
        &env.ns,
        automated(true, false),
    )])
    .await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_prune_a_removed_object_stays_and_requires_pruning() {
    let env = AppEnv::start("noprune").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.apply(&[application(
        &env.ns,
        "app",
        &env.repo.url(),
        "app",
        &env.ns,
        automated(false, false),
    )])
    .await;
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

/// The repository goes away: ComparisonError, sync Unknown, nothing deleted; it recovers when back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_repository_never_prunes() {
    let (mut env, _) = synced_app("unreachable", automated(true, true)).await;
    let deploy_uid = uid(&env.must_get("Deployment", "guestbook-ui").await);
    let cm_uid = uid(&env.must_get("ConfigMap", "settings").await);

    let t0 = std::time::Instant::now();
    env.repo.stop_daemon().await;
    env.refresh("app", "hard").await;
    let app = env
        .wait_app("app", "ComparisonError with sync status Unknown", |a| {
            condition_true(a, "ComparisonError") && sync_status(a) == "Unknown"
        })
        .await;
    let message = condition(&app, "ComparisonError")
        .map(|c| text(c, "/message"))
        .unwrap_or_default();
    assert!(!message.is_empty(), "the error says what failed");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    assert_eq!(uid(&env.must_get("ConfigMap", "settings").await), cm_uid);
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));

    eprintln!("T comparison error after {:?}", t0.elapsed());
    env.repo.start_daemon().await;
    env.refresh("app", "hard").await;
    let app = env
        .wait_app("app", "recovered: Synced, no ComparisonError", |a| {
            synced_healthy(a) && !condition_true(a, "ComparisonError")
        })
        .await;
    eprintln!("T recovered after {:?}", t0.elapsed());
    assert_eq!(health_status(&app), "Healthy");
    assert_eq!(uid(&env.must_get("Deployment", "guestbook-ui").await), deploy_uid);
    assert!(deletes_in(&env, &env.ns).is_empty(), "{:?}", deletes_in(&env, &env.ns));
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
/// object (reference/security-cases.md §2.2, §4 A.17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copied_tracking_marks_are_neither_adopted_nor_pruned() {
    let env = AppEnv::start("copiedlabel").await;
    env.repo.copy_fixture("prune", "app");
    env.repo.commit("two configmaps").await;
    env.apply(&[application(
        &env.ns,
        "app",
        &env.repo.url(),
        "app",
        &env.ns,
        automated(true, false),
    )])
    .await;
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
