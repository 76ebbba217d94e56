//! Sync ordering end to end, as Argo CD orders a sync (docs/architecture.md, the sync planner): phases,
//! waves and hooks with Argo CD's annotations, a wave that fails, app-of-apps waves, `dependsOn`, rollback,
//! and an operator killed in the middle of a multi-wave sync.
//!
//! Order is read from resourceVersions: devcluster's are global and increasing, and a [`Recorder`]
//! watching the namespace from before the Application exists sees every creation and every status
//! change, so "B was created after A became healthy" is a comparison of two numbers.

use capstan_e2e::capstan::{
    application, automated, condition, events_about, get_object, health_status, operation_phase, sync_result_entry,
    sync_status, synced_healthy, text, tracked_by, AppEnv, OperatorOptions, Recorder, APP_TIMEOUT,
};
use capstan_e2e::{POLL, TIMEOUT};
use serde_json::{json, Value};

fn list<'a>(v: &'a Value, ptr: &str) -> &'a [Value] {
    v.pointer(ptr).and_then(Value::as_array).map_or(&[], Vec::as_slice)
}

fn has_condition(obj: &Value, type_: &str, status: &str) -> bool {
    list(obj, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == type_ && text(c, "/status") == status)
}

/// A Job that ran to completion.
fn job_complete(job: &Value) -> bool {
    has_condition(job, "Complete", "True")
}

/// A Deployment whose rollout finished (Argo CD's Healthy).
fn deployment_available(d: &Value) -> bool {
    let want = d.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
    has_condition(d, "Available", "True")
        && d.pointer("/status/updatedReplicas").and_then(Value::as_i64) == Some(want)
        && d.pointer("/status/availableReplicas").and_then(Value::as_i64) == Some(want)
}

/// A Deployment past its progress deadline (Argo CD's Degraded).
fn deployment_degraded(d: &Value) -> bool {
    list(d, "/status/conditions")
        .iter()
        .any(|c| text(c, "/type") == "Progressing" && text(c, "/reason") == "ProgressDeadlineExceeded")
}

fn before(rec: &Recorder, what: &str, earlier: Option<u64>, later: Option<u64>) {
    match (earlier, later) {
        (Some(a), Some(b)) if a < b => {}
        _ => panic!(
            "expected {what} (resourceVersions {earlier:?} < {later:?})\n--- recorded ---\n{}",
            rec.trace()
        ),
    }
}

/// PreSync hook → wave 0 → wave 1 (healthy) → wave 2 → PostSync hook; HookSucceeded hooks are gone after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waves_and_hooks_run_in_argo_order_and_succeeded_hooks_are_deleted() {
    let env = AppEnv::start("waves").await;
    env.repo.copy_fixture("waves-hooks", "app");
    let sha = env.repo.commit("waves and hooks").await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap", "Deployment"]).await;

    env.create_app("waves", "app", automated(true, false)).await;
    let app = env
        .wait_app("waves", "the sync operation Succeeded", |a| {
            operation_phase(a) == "Succeeded"
        })
        .await;
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), sha);

    // PreSync finished before the Sync phase started.
    before(
        &rec,
        "the PreSync Job to complete before wave 0 is applied",
        rec.first_where("Job", "db-migrate", job_complete),
        rec.created("ConfigMap", "app-config"),
    );
    before(
        &rec,
        "wave 0 before wave 1",
        rec.created("ConfigMap", "app-config"),
        rec.created("Deployment", "backend"),
    );
    before(
        &rec,
        "wave 1 to be healthy before wave 2 is applied",
        rec.first_where("Deployment", "backend", deployment_available),
        rec.created("Deployment", "frontend"),
    );
    before(
        &rec,
        "the last wave to be healthy before the PostSync hook",
        rec.first_where("Deployment", "frontend", deployment_available),
        rec.created("Job", "smoke-test"),
    );

    // Each hook ran once, and HookSucceeded removed both (the deletion may land just after the
    // operation is reported Succeeded, and the recorder's watch sees it a moment after the API does).
    for hook in ["db-migrate", "smoke-test"] {
        assert_eq!(rec.uids("Job", hook).len(), 1, "{hook} created once\n{}", rec.trace());
        env.wait_object("Job", hook, "is deleted (HookSucceeded)", |o| o.is_none())
            .await;
    }
    let deleted_seen = || rec.of("Job", "smoke-test").iter().find(|s| s.deleted).map(|s| s.rv);
    capstan_e2e::wait_until(
        "the recorder to see the PostSync hook deleted",
        TIMEOUT,
        POLL,
        || async { deleted_seen().is_some() },
    )
    .await;
    before(
        &rec,
        "the PostSync hook to complete before the hook is deleted",
        rec.first_where("Job", "smoke-test", job_complete),
        deleted_seen(),
    );

    // The result records the hooks with their type and phase, and the resources with their phase.
    let app = env.wait_synced_healthy("waves").await;
    for (hook, hook_type) in [("db-migrate", "PreSync"), ("smoke-test", "PostSync")] {
        let entry =
            sync_result_entry(&app, "Job", hook).unwrap_or_else(|| env.fail(&format!("no syncResult for {hook}")));
        assert_eq!(text(entry, "/hookType"), hook_type, "{entry}");
        assert_eq!(text(entry, "/hookPhase"), "Succeeded", "{entry}");
    }
    let backend = sync_result_entry(&app, "Deployment", "backend").expect("a syncResult for backend");
    assert_eq!(text(backend, "/status"), "Synced", "{backend}");
    assert_eq!(text(backend, "/syncPhase"), "Sync", "{backend}");
    // Hooks are not part of the desired state: the app is Synced without them.
    assert_eq!(sync_status(&app), "Synced");
}

/// A Degraded Deployment in wave 1 fails the sync: SyncFail hooks run, wave 2 and PostSync never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_degraded_wave_fails_the_sync_and_runs_the_syncfail_hook() {
    let env = AppEnv::start("failwave").await;
    env.repo.copy_fixture("failing-wave", "app");
    env.repo.commit("failing wave").await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap", "Deployment"]).await;

    // A manual sync (no automated policy, so no automatic retries of the failed operation).
    env.create_app("failing", "app", json!({})).await;
    env.wait_app("failing", "compared (OutOfSync)", |a| sync_status(a) == "OutOfSync")
        .await;
    assert!(
        rec.all().is_empty(),
        "nothing is applied without a sync:\n{}",
        rec.trace()
    );
    env.sync("failing", json!({"syncStrategy": {"hook": {}}})).await;

    let app = env
        .wait_app("failing", "the sync operation Failed", |a| {
            operation_phase(a) == "Failed"
        })
        .await;
    assert!(
        !text(&app, "/status/operationState/message").is_empty(),
        "a failed operation says why"
    );

    assert!(env.get("ConfigMap", "first").await.is_some(), "wave 0 was applied");
    before(
        &rec,
        "the SyncFail hook to run after the Deployment became Degraded",
        rec.first_where("Deployment", "broken", deployment_degraded),
        rec.created("Job", "notify-failure"),
    );
    assert_eq!(rec.uids("Job", "notify-failure").len(), 1, "{}", rec.trace());
    // The hook has no delete policy (BeforeHookCreation): it stays, and it completes.
    env.wait_object("Job", "notify-failure", "completes", |j| j.is_some_and(job_complete))
        .await;

    // Later waves and the PostSync phase never ran.
    assert!(
        rec.of("ConfigMap", "after").is_empty(),
        "wave 2 was applied:\n{}",
        rec.trace()
    );
    assert!(rec.of("Job", "post-sync").is_empty(), "PostSync ran:\n{}", rec.trace());
    assert!(env.get("ConfigMap", "after").await.is_none());

    let app = env
        .wait_app("failing", "Degraded and OutOfSync", |a| {
            health_status(a) == "Degraded" && sync_status(a) == "OutOfSync"
        })
        .await;
    let syncfail = sync_result_entry(&app, "Job", "notify-failure");
    assert!(
        syncfail.is_some_and(|e| text(e, "/hookType") == "SyncFail"),
        "the SyncFail hook is in the result: {syncfail:?}"
    );
    // A manual sync is not retried: still exactly one SyncFail run.
    assert_eq!(rec.uids("Job", "notify-failure").len(), 1, "{}", rec.trace());
}

/// App of apps: child Applications with sync waves; the wave-1 child waits for the wave-0 child.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn app_of_apps_syncs_children_in_wave_order() {
    let env = AppEnv::start("appofapps").await;
    env.repo.copy_fixture("app-of-apps/children", "children");
    let url = env.repo.url();
    for (name, wave) in [("database", "0"), ("api", "1")] {
        let mut child = application(
            "placeholder",
            name,
            &url,
            &format!("children/{name}"),
            &env.ns,
            automated(true, false),
        );
        // As in Argo CD's app-of-apps repositories: no namespace; the parent's destination supplies it.
        child["metadata"] = json!({"name": name, "annotations": {"argocd.argoproj.io/sync-wave": wave}});
        env.repo
            .write(&format!("apps/{name}.yaml"), &capstan_e2e::fixtures::to_yaml(&[child]));
    }
    env.repo.commit("app of apps").await;
    let rec = Recorder::start(
        &env.client().await,
        &env.ns,
        &["Application", "Deployment", "ConfigMap"],
    )
    .await;

    env.apply(&[application(
        &env.ns,
        "root",
        &url,
        "apps",
        &env.ns,
        automated(true, false),
    )])
    .await;
    env.wait_synced_healthy("root").await;
    let database = env.wait_synced_healthy("database").await;
    env.wait_synced_healthy("api").await;

    before(
        &rec,
        "the wave-1 child to be created only after the wave-0 child is Synced and Healthy",
        rec.first_where("Application", "database", synced_healthy),
        rec.created("Application", "api"),
    );
    before(
        &rec,
        "the wave-0 child's Deployment to be available before the wave-1 child's objects exist",
        rec.first_where("Deployment", "database", deployment_available),
        rec.created("ConfigMap", "api-config"),
    );
    assert!(tracked_by(&database, &env.ns, "root"), "{}", database["metadata"]);
    assert_eq!(
        text(&database, "/metadata/annotations/capstan.dev~1tracking-id"),
        format!("{}/root:capstan.dev/Application:{}/database", env.ns, env.ns)
    );
    assert!(tracked_by(
        &env.must_get("Deployment", "database").await,
        &env.ns,
        "database"
    ));
    assert!(tracked_by(
        &env.must_get("ConfigMap", "api-config").await,
        &env.ns,
        "api"
    ));
}

/// `dependsOn`: B does not sync until A is Synced and Healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_holds_a_sync_until_the_dependency_is_synced_and_healthy() {
    let env = AppEnv::start("dependson").await;
    env.repo.copy_fixture("depends-on", "deps");
    env.repo.commit("depends on").await;
    let rec = Recorder::start(
        &env.client().await,
        &env.ns,
        &["Application", "Deployment", "ConfigMap"],
    )
    .await;
    let url = env.repo.url();

    let mut api = application(&env.ns, "api", &url, "deps/api", &env.ns, automated(true, false));
    api["spec"]["dependsOn"] = json!(["database"]);
    let database = application(
        &env.ns,
        "database",
        &url,
        "deps/database",
        &env.ns,
        automated(true, false),
    );
    // The dependent first, so nothing but dependsOn can explain the order.
    env.apply(&[api, database]).await;

    env.wait_synced_healthy("database").await;
    env.wait_synced_healthy("api").await;
    before(
        &rec,
        "api's objects to be applied only after database is Synced and Healthy",
        rec.first_where("Application", "database", synced_healthy),
        rec.created("ConfigMap", "api-config"),
    );
    before(
        &rec,
        "database's Deployment (delayed) to be available before api syncs",
        rec.first_where("Deployment", "database", deployment_available),
        rec.created("ConfigMap", "api-config"),
    );
    let waited = rec.of("Application", "api").iter().any(|s| {
        list(&s.object, "/status/conditions")
            .iter()
            .any(|c| text(c, "/reason") == "DependencyNotReady")
    });
    assert!(
        waited,
        "api never reported DependencyNotReady while database progressed\n{}",
        rec.trace()
    );
    let api = env.app("api").await;
    assert!(
        !list(&api, "/status/conditions")
            .iter()
            .any(|c| text(c, "/reason") == "DependencyNotReady"),
        "the waiting condition is cleared: {}",
        api["status"]["conditions"]
    );
}

/// A `dependsOn` cycle is reported on both Applications, neither syncs, and breaking it unblocks both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn depends_on_cycle_is_reported_and_never_deadlocks() {
    let env = AppEnv::start("depcycle").await;
    env.repo.copy_fixture("depends-on", "deps");
    env.repo.commit("depends on").await;
    let url = env.repo.url();
    let (ns_a, ns_b) = (
        env.cluster.with_namespace("cycle-a").await,
        env.cluster.with_namespace("cycle-b").await,
    );
    let mut a = application(&env.ns, "a", &url, "deps/api", &ns_a, automated(true, false));
    a["spec"]["dependsOn"] = json!(["b"]);
    let mut b = application(&env.ns, "b", &url, "deps/api", &ns_b, automated(true, false));
    b["spec"]["dependsOn"] = json!(["a"]);
    env.apply(&[a, b]).await;

    let cycle = |app: &Value| {
        list(app, "/status/conditions")
            .iter()
            .any(|c| text(c, "/reason") == "DependencyCycle")
    };
    env.wait_app("a", "reports the dependency cycle", cycle).await;
    env.wait_app("b", "reports the dependency cycle", cycle).await;
    let client = env.client().await;
    for ns in [&ns_a, &ns_b] {
        assert!(
            get_object(&client, ns, "ConfigMap", "api-config").await.is_none(),
            "an Application in a cycle synced into {ns}"
        );
    }

    env.patch_app("b", &json!({"spec": {"dependsOn": null}})).await;
    env.wait_synced_healthy("b").await;
    let a = env.wait_synced_healthy("a").await;
    assert!(
        !cycle(&a),
        "the cycle condition is cleared: {}",
        a["status"]["conditions"]
    );
}

/// Sync revision 1, then revision 2 by hand, then roll back to the first history entry; rollback is
/// refused while automated sync is on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_to_a_history_id_restores_the_old_revision_and_is_refused_while_automated() {
    let env = AppEnv::start("rollback").await;
    let version = |v: &str| {
        capstan_e2e::fixtures::to_yaml(&[json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "release"},
            "data": {"version": v},
        })])
    };
    env.repo.write("app/release.yaml", &version("1"));
    let rev1 = env.repo.commit("release 1").await;
    env.create_app("release", "app", json!({})).await;

    env.wait_app("release", "OutOfSync at revision 1", |a| {
        sync_status(a) == "OutOfSync" && text(a, "/status/sync/revision") == rev1
    })
    .await;
    env.sync("release", json!({})).await;
    let app = env
        .wait_app("release", "synced to revision 1", |a| {
            synced_healthy(a) && list(a, "/status/history").len() == 1
        })
        .await;
    let first_id = app["status"]["history"][0]["id"].as_i64().expect("history[0].id");
    assert_eq!(text(&app["status"]["history"][0], "/revision"), rev1);

    env.repo.write("app/release.yaml", &version("2"));
    let rev2 = env.repo.commit("release 2").await;
    env.refresh("release", "normal").await;
    env.wait_app("release", "OutOfSync at revision 2", |a| {
        sync_status(a) == "OutOfSync" && text(a, "/status/sync/revision") == rev2
    })
    .await;
    assert_eq!(
        text(&env.must_get("ConfigMap", "release").await, "/data/version"),
        "1",
        "no automated sync"
    );
    env.sync("release", json!({"revision": rev2})).await;
    let app = env
        .wait_app("release", "synced to revision 2", |a| {
            synced_healthy(a) && list(a, "/status/history").len() == 2
        })
        .await;
    assert_eq!(text(&app["status"]["history"][1], "/revision"), rev2);
    assert_eq!(text(&env.must_get("ConfigMap", "release").await, "/data/version"), "2");

    env.patch_app(
        "release",
        &json!({"operation": {"initiatedBy": {"username": "e2e"}, "rollback": {"id": first_id}}}),
    )
    .await;
    let app = env
        .wait_app("release", "the rollback Succeeded", |a| {
            // As in Argo CD, a rollback runs as a sync to the history entry's revision and source.
            operation_phase(a) == "Succeeded"
                && list(a, "/status/history").len() == 3
                && text(a, "/status/operationState/syncResult/revision") == rev1
        })
        .await;
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), rev1);
    assert_eq!(
        text(&app["status"]["history"][2], "/revision"),
        rev1,
        "the rollback is recorded"
    );
    assert_eq!(text(&env.must_get("ConfigMap", "release").await, "/data/version"), "1");
    // Live now matches revision 1 while Git says revision 2, as in Argo CD after a rollback.
    env.wait_app("release", "OutOfSync against revision 2", |a| {
        sync_status(a) == "OutOfSync" && text(a, "/status/sync/revision") == rev2
    })
    .await;

    // Automated sync on: it brings revision 2 back, and a rollback is refused.
    env.patch_app("release", &json!({"spec": {"syncPolicy": {"automated": {}}}}))
        .await;
    env.wait_app("release", "auto-synced to revision 2", |a| {
        synced_healthy(a) && text(a, "/status/sync/revision") == rev2
    })
    .await;
    assert_eq!(text(&env.must_get("ConfigMap", "release").await, "/data/version"), "2");
    let history_len = list(&env.app("release").await, "/status/history").len();
    let rec = Recorder::start(&env.client().await, &env.ns, &["Application"]).await;
    env.patch_app(
        "release",
        &json!({"operation": {"initiatedBy": {"username": "e2e"}, "rollback": {"id": first_id}}}),
    )
    .await;
    let refused = |a: &Value| {
        list(a, "/status/conditions")
            .iter()
            .any(|c| text(c, "/type") == "SyncError" && text(c, "/message").to_lowercase().contains("rollback"))
    };
    // The request is consumed, and the refusal is visible: a SyncError condition (Capstan clears it
    // with the next reconcile) and a Warning Event that stays.
    let client = env.client().await;
    let message = env
        .eventually("the rollback request is consumed and refused visibly", APP_TIMEOUT, || async {
            let app = env.app("release").await;
            let consumed = app.get("operation").is_none_or(Value::is_null);
            let condition_seen = rec
                .of("Application", "release")
                .iter()
                .find(|s| refused(&s.object))
                .and_then(|s| condition(&s.object, "SyncError").map(|c| text(c, "/message").to_owned()));
            let event = events_about(&client, &env.ns, "Application", "release")
                .await
                .into_iter()
                .find(|(type_, _, note)| type_ == "Warning" && note.to_lowercase().contains("rollback"));
            match (consumed, condition_seen, event) {
                (true, Some(condition), Some((_, _, note))) => Ok(format!("{condition} {note}").to_lowercase()),
                (consumed, condition, event) => Err(format!(
                    "operation consumed: {consumed}; SyncError condition seen: {condition:?}; Warning event: {event:?}\n{}",
                    capstan_e2e::capstan::summarize_app(&app)
                )),
            }
        })
        .await;
    assert!(message.contains("auto"), "the refusal names automated sync: {message}");
    assert_eq!(
        text(&env.must_get("ConfigMap", "release").await, "/data/version"),
        "2",
        "a refused rollback changes nothing"
    );
    let app = env.wait_synced_healthy("release").await;
    assert_eq!(
        list(&app, "/status/history").len(),
        history_len,
        "a refused rollback is not history"
    );
}

/// SIGKILL in the middle of wave 1 of a multi-wave sync: the restarted operator resumes the same
/// operation and completes it exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_killed_mid_sync_resumes_and_completes_exactly_once() {
    let options = OperatorOptions {
        reconcile_interval: "30s".into(),
        ..OperatorOptions::default()
    };
    let mut env = AppEnv::start_with("restart", options).await;
    env.repo.copy_fixture("restart-waves", "app");
    let sha = env.repo.commit("three waves").await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap", "Deployment"]).await;

    env.create_app("waves", "app", automated(true, false)).await;
    // Wave 1 is in progress: its slow Deployment exists and is not available yet.
    let client = env.client().await;
    let ns = env.ns.clone();
    env.eventually("wave 1 is in progress", APP_TIMEOUT, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            match get_object(&client, &ns, "Deployment", "wave1-slow").await {
                Some(d) if !deployment_available(&d) => Ok(()),
                Some(_) => Err("wave1-slow is already available: too late to interrupt wave 1".into()),
                None => Err("wave1-slow does not exist yet".into()),
            }
        }
    })
    .await;
    let before_kill = env.app("waves").await;
    assert_eq!(operation_phase(&before_kill), "Running", "{}", before_kill["status"]);
    let started_at = text(&before_kill, "/status/operationState/startedAt").to_owned();
    assert!(
        env.get("ConfigMap", "wave2").await.is_none(),
        "wave 2 applied while wave 1 progresses"
    );

    env.operator.kill().await;
    env.operator.restart().await;

    let app = env.wait_resumed("waves", &started_at).await;
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), sha);
    let history = list(&app, "/status/history");
    assert_eq!(history.len(), 1, "one sync recorded: {history:?}");

    // Exactly once: one object (one uid) per hook and resource, ever.
    for (kind, name) in [
        ("Job", "pre-hook"),
        ("Job", "wave1-hook"),
        ("Job", "post-hook"),
        ("ConfigMap", "wave0"),
        ("Deployment", "wave1-slow"),
        ("ConfigMap", "wave2"),
    ] {
        let uids = rec.uids(kind, name);
        assert_eq!(
            uids.len(),
            1,
            "{kind} {name} created {} times\n{}",
            uids.len(),
            rec.trace()
        );
        assert!(
            !rec.of(kind, name).iter().any(|s| s.deleted),
            "{kind} {name} was deleted\n{}",
            rec.trace()
        );
    }
    before(
        &rec,
        "wave 1 to be healthy before wave 2 (across the restart)",
        rec.first_where("Deployment", "wave1-slow", deployment_available),
        rec.created("ConfigMap", "wave2"),
    );
    before(
        &rec,
        "the wave-1 Sync hook to complete before wave 2",
        rec.first_where("Job", "wave1-hook", job_complete),
        rec.created("ConfigMap", "wave2"),
    );
    before(
        &rec,
        "wave 2 before the PostSync hook",
        rec.created("ConfigMap", "wave2"),
        rec.created("Job", "post-hook"),
    );
    env.wait_synced_healthy("waves").await;
    // Stable afterwards: a later reconcile does not run the hooks again.
    env.refresh("waves", "hard").await;
    env.wait_app("waves", "refreshed (annotation removed)", |a| {
        a.pointer("/metadata/annotations/capstan.dev~1refresh").is_none()
    })
    .await;
    for hook in ["pre-hook", "wave1-hook", "post-hook"] {
        assert_eq!(
            rec.uids("Job", hook).len(),
            1,
            "{hook} ran again after a refresh\n{}",
            rec.trace()
        );
    }
}

/// The stuck-hook Application: a PreSync Job that never completes, then a ConfigMap; automated, with
/// a retry policy that would retry a failed operation at once (no backoff).
async fn start_stuck_hook_app(env: &AppEnv, name: &str) -> Recorder {
    env.repo.copy_fixture("stuck-hook", "app");
    env.repo.commit("a hook that never completes").await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap"]).await;
    let mut spec = automated(false, false);
    spec["syncPolicy"]["retry"] = json!({"limit": 3, "backoff": {"duration": "0", "factor": 1}});
    env.create_app(name, "app", spec).await;
    env.wait_object("Job", "stuck-migration", "is created (PreSync)", |j| j.is_some())
        .await;
    env.wait_app(name, "the operation waits on the hook", |a| {
        operation_phase(a) == "Running"
    })
    .await;
    rec
}

/// After a terminated operation: the running hook was deleted, the Sync phase never ran, and the
/// operation is not retried (one Job ever) even though its retry policy would retry a failure.
async fn assert_terminated_and_not_retried(env: &AppEnv, rec: &Recorder, name: &str, message: &str) {
    let app = env
        .wait_app(name, "the operation Failed", |a| operation_phase(a) == "Failed")
        .await;
    assert_eq!(text(&app, "/status/operationState/message"), message, "{app}");
    env.wait_object(
        "Job",
        "stuck-migration",
        "is deleted (a running hook of a terminated sync)",
        |j| j.is_none(),
    )
    .await;
    // A whole reconcile after the termination: with no backoff, a retry would be due in it and would
    // create the hook again before the refresh annotation is removed.
    env.refresh_handled(name, "normal").await;
    assert!(env.get("Job", "stuck-migration").await.is_none(), "the hook ran again");
    assert_eq!(rec.uids("Job", "stuck-migration").len(), 1, "{}", rec.trace());
    assert!(rec.of("ConfigMap", "after-migration").is_empty(), "{}", rec.trace());
    let app = env.app(name).await;
    assert_eq!(operation_phase(&app), "Failed", "{app}");
    assert_eq!(text(&app, "/status/operationState/message"), message, "{app}");
    let hook = sync_result_entry(&app, "Job", "stuck-migration").expect("the hook is in the result");
    assert_eq!(text(hook, "/hookPhase"), "Failed", "{hook}");
}

/// `argocd app terminate-op` with plain kubectl: the status patch that sets the operation's phase to
/// `Terminating` stops a sync stuck on a hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_terminates_a_sync_stuck_on_a_hook_with_a_status_patch() {
    let env = AppEnv::start("terminate").await;
    let rec = start_stuck_hook_app(&env, "stuck").await;
    env.cluster
        .kubectl_ok(&[
            "patch",
            "-n",
            &env.ns,
            "capp",
            "stuck",
            "--subresource=status",
            "--type",
            "merge",
            "-p",
            r#"{"status":{"operationState":{"phase":"Terminating"}}}"#,
        ])
        .await;
    assert_terminated_and_not_retried(&env, &rec, "stuck", "Operation terminated").await;
}

/// `--sync-timeout`: a sync still running after the timeout is terminated the same way, and says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sync_timeout_terminates_a_sync_stuck_on_a_hook() {
    let options = OperatorOptions {
        extra_args: vec!["--sync-timeout".into(), "3s".into()],
        ..OperatorOptions::default()
    };
    let env = AppEnv::start_with("synctimeout", options).await;
    let rec = start_stuck_hook_app(&env, "stuck").await;
    assert_terminated_and_not_retried(
        &env,
        &rec,
        "stuck",
        "Operation terminated: the operation exceeded the sync timeout (3s)",
    )
    .await;
}

/// `syncPolicy.retry.refresh`: a sync that failed at one commit, with a long retry backoff, is retried
/// at once with the fixing commit instead of retrying the broken one after the backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_refresh_retries_a_failed_sync_with_the_new_commit_at_once() {
    let env = AppEnv::start("retryrefresh").await;
    // `spec` is not a ConfigMap field: strict field validation refuses the object.
    let broken = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\nspec: {}\ndata:\n  mode: broken\n";
    env.repo.write("app/settings.yaml", broken);
    let bad = env.repo.commit("a ConfigMap the server refuses").await;
    let mut spec = automated(false, false);
    spec["syncPolicy"]["retry"] = json!({"limit": 5, "backoff": {"duration": "10m"}, "refresh": true});
    env.create_app("retrying", "app", spec).await;
    let app = env
        .wait_app("retrying", "the sync at the broken commit Failed", |a| {
            operation_phase(a) == "Failed"
        })
        .await;
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), bad, "{app}");

    env.repo.write(
        "app/settings.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: fixed\n",
    );
    let good = env.repo.commit("fix the ConfigMap").await;
    env.refresh("retrying", "normal").await;
    // The wait is far shorter than the 10-minute backoff: the retry did not wait for it.
    let app = env
        .wait_app("retrying", "the retry Succeeded at the fixing commit", |a| {
            operation_phase(a) == "Succeeded"
        })
        .await;
    assert_eq!(text(&app, "/status/operationState/syncResult/revision"), good, "{app}");
    assert_eq!(
        app.pointer("/status/operationState/retryCount").and_then(Value::as_i64),
        Some(1),
        "{app}"
    );
    let cm = env.must_get("ConfigMap", "settings").await;
    assert_eq!(text(&cm, "/data/mode"), "fixed");
}

/// The resourceVersion at which the recorder saw `kind/name` deleted, once it has.
async fn seen_deleted(rec: &Recorder, kind: &str, name: &str) -> u64 {
    let deleted = || rec.of(kind, name).iter().find(|s| s.deleted).map(|s| s.rv);
    capstan_e2e::wait_until(
        &format!("the recorder to see {kind}/{name} deleted"),
        TIMEOUT,
        POLL,
        || async { deleted().is_some() },
    )
    .await;
    deleted().unwrap_or_default()
}

/// The delete-hooks Application with the resources finalizer, synced; its finalizers now hold it for
/// the PreDelete and PostDelete stages, and neither hook ran during the sync.
async fn start_delete_hooks_app(env: &AppEnv, name: &str, fixture_change: Option<(&str, &str)>) {
    env.repo.copy_fixture("delete-hooks", "app");
    if let Some((path, content)) = fixture_change {
        env.repo.write(path, content);
    }
    env.repo.commit("an application with deletion hooks").await;
    let mut app = application(&env.ns, name, &env.repo.url(), "app", &env.ns, automated(true, false));
    app["metadata"]["finalizers"] = json!(["capstan.dev/resources"]);
    env.apply(&[app]).await;
    let app = env
        .wait_app(name, "synced, and held for its deletion hooks", |a| {
            let finalizers = a
                .pointer("/metadata/finalizers")
                .map(Value::to_string)
                .unwrap_or_default();
            synced_healthy(a)
                && finalizers.contains("capstan.dev/pre-delete-hooks")
                && finalizers.contains("capstan.dev/post-delete-hooks")
        })
        .await;
    assert!(env.get("Job", "backup").await.is_none(), "PreDelete ran at sync: {app}");
    assert!(
        env.get("Job", "farewell").await.is_none(),
        "PostDelete ran at sync: {app}"
    );
}

/// Deleting an Application runs its PreDelete hooks to completion, then deletes its resources, then
/// runs its PostDelete hooks, deletes them, and lets the Application go (Argo CD's deletion hooks).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_runs_predelete_hooks_then_deletes_resources_then_runs_postdelete_hooks() {
    let env = AppEnv::start("deletehooks").await;
    start_delete_hooks_app(&env, "hooked", None).await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap"]).await;
    env.cluster
        .kubectl_ok(&["delete", "capp", "hooked", "-n", &env.ns, "--wait=false"])
        .await;
    env.wait_app_gone("hooked").await;

    let data_deleted = seen_deleted(&rec, "ConfigMap", "app-data").await;
    before(
        &rec,
        "the PreDelete hook to complete before the resources are deleted",
        rec.first_where("Job", "backup", job_complete),
        Some(data_deleted),
    );
    before(
        &rec,
        "the resources to be deleted before the PostDelete hook is created",
        Some(data_deleted),
        rec.created("Job", "farewell"),
    );
    let farewell_deleted = seen_deleted(&rec, "Job", "farewell").await;
    before(
        &rec,
        "the PostDelete hook to complete before it is deleted",
        rec.first_where("Job", "farewell", job_complete),
        Some(farewell_deleted),
    );
    seen_deleted(&rec, "Job", "backup").await;
    for hook in ["backup", "farewell"] {
        assert_eq!(rec.uids("Job", hook).len(), 1, "{hook} ran once\n{}", rec.trace());
    }
}

/// A failing PreDelete hook stops the deletion before anything is deleted, says so in `DeletionError`,
/// and the orphan annotation is the way out (resources left in place, no PostDelete hook).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_predelete_hook_stops_the_deletion_until_orphaned() {
    let env = AppEnv::start("predeletefail").await;
    let failing = "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: backup\n  annotations:\n    \
                   argocd.argoproj.io/hook: PreDelete\n    devcluster.capstan.dev/behavior: fail\nspec:\n  \
                   backoffLimit: 0\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n      \
                   - name: main\n        image: busybox:1.36\n";
    start_delete_hooks_app(&env, "hooked", Some(("app/predelete-backup.yaml", failing))).await;
    env.cluster
        .kubectl_ok(&["delete", "capp", "hooked", "-n", &env.ns, "--wait=false"])
        .await;
    let app = env
        .wait_app("hooked", "DeletionError names the failed hook", |a| {
            condition(a, "DeletionError")
                .is_some_and(|c| text(c, "/message").contains("PreDelete hook Job/backup failed"))
        })
        .await;
    assert!(
        env.get("ConfigMap", "app-data").await.is_some(),
        "deleted despite the failed hook: {app}"
    );

    env.cluster
        .kubectl_ok(&[
            "annotate",
            "capp",
            "hooked",
            "-n",
            &env.ns,
            "capstan.dev/deletion-policy=orphan",
        ])
        .await;
    env.wait_app_gone("hooked").await;
    assert!(
        env.get("ConfigMap", "app-data").await.is_some(),
        "orphaning deleted the resources"
    );
    assert!(
        env.get("Job", "farewell").await.is_none(),
        "PostDelete ran for an orphaned deletion"
    );
}

/// The status write that reports a sync `Succeeded` already reports its result (Synced, Healthy):
/// the comparison after the sync uses what the applies returned instead of waiting for the watch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_status_that_reports_a_successful_sync_already_says_synced() {
    let env = AppEnv::start("syncedatonce").await;
    for i in 0..5 {
        let cm = format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm-{i}\ndata:\n  n: \"{i}\"\n");
        env.repo.write(&format!("app/cm-{i}.yaml"), &cm);
    }
    let sha = env.repo.commit("five ConfigMaps").await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Application"]).await;
    let spec = automated(true, false);
    env.create_app("quick", "app", spec).await;
    env.wait_app("quick", "the sync Succeeded", |a| operation_phase(a) == "Succeeded")
        .await;
    let seen = rec.of("Application", "quick");
    let first = seen
        .iter()
        .find(|s| operation_phase(&s.object) == "Succeeded")
        .unwrap_or_else(|| panic!("the recorder saw no Succeeded status\n{}", rec.trace()));
    assert_eq!(sync_status(&first.object), "Synced", "{}", first.object);
    assert_eq!(health_status(&first.object), "Healthy", "{}", first.object);
    assert_eq!(text(&first.object, "/status/sync/revision"), sha);
}
