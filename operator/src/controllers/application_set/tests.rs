//! Controller-level tests: `reconcile` driven directly against an in-process devcluster, with a
//! local bare Git repository served over `git://` by `git daemon` (`controllers::testsupport`). The Application
//! controller does not run here: where a test needs Application status (RollingSync), it writes
//! it through the status subresource, as the Application controller would.

use std::sync::Arc;

use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use prometheus::Registry;
use serde_json::{json, Value};

use super::{reconcile, State};
use crate::api::application_set::{ApplicationSet, RolloutStatus};
use crate::api::{Application, Cluster};
use crate::controllers::status::{find_condition, is_condition};
use crate::controllers::testsupport::{self, NS};
use crate::controllers::{Context, Settings};

/// The shared environment plus this controller's context and state.
struct Env {
    base: testsupport::Env,
    ctx: Arc<Context>,
    state: Arc<State>,
}

impl std::ops::Deref for Env {
    type Target = testsupport::Env;
    fn deref(&self) -> &testsupport::Env {
        &self.base
    }
}

async fn env() -> Env {
    let base = testsupport::Env::start().await;
    let ctx = base.context(Settings::default());
    let (state, _rx) = State::new();
    Env { base, ctx, state }
}

fn template(name: &str, path: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "project": "default",
            "source": {"repoURL": "https://git.example/manifests", "path": path, "targetRevision": "HEAD"},
            "destination": {"server": "https://kubernetes.default.svc", "namespace": "default"}
        }
    })
}

async fn create_set(env: &Env, name: &str, spec: Value) -> ApplicationSet {
    let set: ApplicationSet = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "ApplicationSet",
        "metadata": {"name": name, "namespace": NS},
        "spec": spec,
    }))
    .expect("set");
    Api::<ApplicationSet>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &set)
        .await
        .expect("create set")
}

/// Reconciles the set as it is on the server now; returns the result and the set afterwards.
async fn reconcile_set(env: &Env, name: &str) -> (Result<kube::runtime::controller::Action, String>, ApplicationSet) {
    let api: Api<ApplicationSet> = Api::namespaced(env.client.clone(), NS);
    let set = api.get(name).await.expect("get set");
    let result = reconcile(Arc::new(set), Arc::clone(&env.ctx), Arc::clone(&env.state))
        .await
        .map_err(|e| e.to_string());
    (result, api.get(name).await.expect("get set"))
}

async fn patch_set(env: &Env, name: &str, patch: Value) {
    Api::<ApplicationSet>::namespaced(env.client.clone(), NS)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("patch set");
}

async fn refresh(env: &Env, name: &str) {
    patch_set(
        env,
        name,
        json!({"metadata": {"annotations": {"argocd.argoproj.io/application-set-refresh": "true"}}}),
    )
    .await;
}

async fn app_names(env: &Env) -> Vec<String> {
    let mut names: Vec<String> = Api::<Application>::namespaced(env.client.clone(), NS)
        .list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .filter(|a| a.metadata.deletion_timestamp.is_none())
        .map(ResourceExt::name_any)
        .collect();
    names.sort();
    names
}

fn git_dirs_spec(url: &str) -> Value {
    json!({
        "generators": [{"git": {"repoURL": url, "revision": "HEAD", "directories": [{"path": "apps/*"}]}}],
        "template": template("{{path.basename}}", "{{path}}"),
    })
}

fn condition(set: &ApplicationSet, type_: &str) -> String {
    let c = find_condition(&set.status.as_ref().expect("status").conditions, type_).expect(type_);
    format!("{}/{}: {}", c.status, c.reason, c.message)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn git_directories_follow_git_under_each_policy_and_survive_an_unreachable_repo() {
    let env = env().await;
    env.commit(&[
        ("apps/a/cm.yaml", "x"),
        ("apps/b/cm.yaml", "x"),
        ("other/c/cm.yaml", "x"),
    ]);
    let set = create_set(&env, "dirs", git_dirs_spec(&env.url)).await;
    let (result, after) = reconcile_set(&env, "dirs").await;
    result.expect("reconcile");
    assert_eq!(app_names(&env).await, vec!["a", "b"]);
    let status = after.status.as_ref().expect("status");
    assert_eq!(status.resources_count, Some(2));
    assert!(
        is_condition(&status.conditions, "ResourcesUpToDate", "True"),
        "{status:?}"
    );
    assert!(is_condition(&status.conditions, "Ready", "True"));
    assert_eq!(status.observed_generation, after.metadata.generation);
    // Ownership and finalizer.
    let a = Api::<Application>::namespaced(env.client.clone(), NS)
        .get("a")
        .await
        .unwrap();
    let owner = &a.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, set.uid().unwrap());
    assert_eq!((owner.controller, owner.block_owner_deletion), (Some(true), Some(true)));
    assert_eq!(
        a.metadata.finalizers.as_deref(),
        Some(&["capstan.dev/resources".to_owned()][..])
    );
    assert_eq!(a.spec.source.path.as_deref(), Some("apps/a"));
    let managers: Vec<String> = a
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(managers.contains(&"capstan-applicationset".to_owned()), "{managers:?}");

    // A new directory: refreshed by annotation (which is removed once handled).
    env.commit(&[
        ("apps/a/cm.yaml", "x"),
        ("apps/b/cm.yaml", "x"),
        ("apps/c/cm.yaml", "x"),
    ]);
    refresh(&env, "dirs").await;
    let (result, after) = reconcile_set(&env, "dirs").await;
    result.expect("reconcile");
    assert_eq!(app_names(&env).await, vec!["a", "b", "c"]);
    assert!(after
        .metadata
        .annotations
        .as_ref()
        .is_none_or(|a| !a.contains_key("argocd.argoproj.io/application-set-refresh")));

    // A reconcile with nothing new writes no status (one-patch rule: none when unchanged).
    let rv = after.metadata.resource_version.clone();
    let (_, again) = reconcile_set(&env, "dirs").await;
    assert_eq!(again.metadata.resource_version, rv);

    // The repository becomes unreachable: an error, never "zero Applications".
    let repo_path = env.repo_path();
    let moved = env.tmp.path().join("moved.git");
    std::fs::rename(&repo_path, &moved).unwrap();
    refresh(&env, "dirs").await;
    let (result, after) = reconcile_set(&env, "dirs").await;
    assert!(result.is_err());
    assert!(
        condition(&after, "ErrorOccurred").starts_with("True/GitError"),
        "{}",
        condition(&after, "ErrorOccurred")
    );
    assert!(condition(&after, "Ready").starts_with("False"));
    assert_eq!(app_names(&env).await, vec!["a", "b", "c"], "nothing deleted");
    assert_eq!(after.status.as_ref().unwrap().resources_count, Some(3));
    std::fs::rename(&moved, &repo_path).unwrap();

    // create-only: a removed directory keeps its Application.
    patch_set(
        &env,
        "dirs",
        json!({"spec": {"syncPolicy": {"applicationsSync": "create-only"}}}),
    )
    .await;
    env.commit(&[("apps/a/cm.yaml", "x"), ("apps/c/cm.yaml", "x")]);
    refresh(&env, "dirs").await;
    let (result, after) = reconcile_set(&env, "dirs").await;
    result.expect("reconcile");
    assert!(condition(&after, "ErrorOccurred").starts_with("False"));
    assert_eq!(app_names(&env).await, vec!["a", "b", "c"], "create-only never deletes");

    // create-delete (and the default, sync): it goes.
    patch_set(
        &env,
        "dirs",
        json!({"spec": {"syncPolicy": {"applicationsSync": "create-delete"}}}),
    )
    .await;
    let (result, after) = reconcile_set(&env, "dirs").await;
    result.expect("reconcile");
    assert_eq!(app_names(&env).await, vec!["a", "c"]);
    assert_eq!(after.status.as_ref().unwrap().resources_count, Some(2));
    let text = crate::metrics::encode(&{
        let r = Registry::new();
        let _ = r.register(Box::new(env.ctx.metrics.appset_owned_applications.clone()));
        r
    });
    assert!(
        text.contains(r#"capstan_appset_owned_applications{name="dirs",namespace="apps"} 2"#),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn template_errors_and_foreign_namespaces_write_nothing() {
    let env = env().await;
    env.commit(&[("apps/a/cm.yaml", "x")]);
    // Duplicate names: error, nothing applied.
    create_set(
        &env,
        "dup",
        json!({
            "generators": [{"list": {"elements": [{"n": "x"}, {"n": "x"}, {"n": "y"}]}}],
            "template": template("app-{{n}}", "p"),
        }),
    )
    .await;
    let (result, after) = reconcile_set(&env, "dup").await;
    assert!(result.is_err());
    assert!(
        condition(&after, "ErrorOccurred").contains("ApplicationValidationError"),
        "{}",
        condition(&after, "ErrorOccurred")
    );
    // Another namespace: refused as a whole.
    let mut tpl = template("ns-{{n}}", "p");
    tpl["metadata"]["namespace"] = json!("{{ns}}");
    create_set(
        &env,
        "elsewhere",
        json!({
            "generators": [{"list": {"elements": [{"n": "a", "ns": "apps"}, {"n": "b", "ns": "kube-system"}]}}],
            "template": tpl,
        }),
    )
    .await;
    let (result, after) = reconcile_set(&env, "elsewhere").await;
    assert!(result.is_err());
    assert!(condition(&after, "ErrorOccurred").contains("kube-system"));
    assert!(
        app_names(&env).await.is_empty(),
        "nothing applied: {:?}",
        app_names(&env).await
    );
}

async fn create_cluster(env: &Env, name: &str, env_label: &str) {
    let cluster: Cluster = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": NS, "labels": {"env": env_label}},
        "spec": {"server": format!("https://{name}.example:6443")},
    }))
    .unwrap();
    Api::<Cluster>::namespaced(env.client.clone(), NS)
        .create(&PostParams::default(), &cluster)
        .await
        .expect("cluster");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_generator_and_matrix_with_git_directories() {
    let env = env().await;
    env.commit(&[("apps/web/cm.yaml", "x"), ("apps/db/cm.yaml", "x")]);
    create_cluster(&env, "east", "staging").await;
    create_cluster(&env, "west", "staging").await;
    create_cluster(&env, "lab", "dev").await;
    let mut tpl = template("{{name}}-guestbook", "guestbook");
    tpl["spec"]["destination"] = json!({"server": "{{server}}", "namespace": "guestbook"});
    create_set(
        &env,
        "clusters",
        json!({
            "generators": [{"clusters": {"selector": {"matchLabels": {"env": "staging"}}}}],
            "template": tpl,
        }),
    )
    .await;
    let (result, _) = reconcile_set(&env, "clusters").await;
    result.expect("reconcile");
    assert_eq!(app_names(&env).await, vec!["east-guestbook", "west-guestbook"]);
    let east = Api::<Application>::namespaced(env.client.clone(), NS)
        .get("east-guestbook")
        .await
        .unwrap();
    assert_eq!(
        east.spec.destination.server.as_deref(),
        Some("https://east.example:6443")
    );

    let mut tpl = template("{{path.basename}}-{{name}}", "{{path}}");
    tpl["spec"]["destination"] = json!({"server": "{{server}}", "namespace": "{{path.basename}}"});
    create_set(
        &env,
        "matrix",
        json!({
            "generators": [{"matrix": {"generators": [
                {"clusters": {"selector": {"matchLabels": {"env": "staging"}}}},
                {"git": {"repoURL": env.url, "revision": "HEAD", "directories": [{"path": "apps/*"}]}}
            ]}}],
            "template": tpl,
        }),
    )
    .await;
    let (result, after) = reconcile_set(&env, "matrix").await;
    result.expect("reconcile");
    assert_eq!(
        app_names(&env).await,
        vec![
            "db-east",
            "db-west",
            "east-guestbook",
            "web-east",
            "web-west",
            "west-guestbook"
        ]
    );
    assert_eq!(after.status.unwrap().resources_count, Some(4));
}

async fn set_app_status(env: &Env, name: &str, status: Value) {
    Api::<Application>::namespaced(env.client.clone(), NS)
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(&json!({ "status": status })),
        )
        .await
        .expect("status");
}

/// What the Application controller does when it picks up `operation`: clears it and starts an
/// operationState.
async fn pick_up(env: &Env, name: &str, health: &str, sync: &str, phase: &str) {
    let apps: Api<Application> = Api::namespaced(env.client.clone(), NS);
    apps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"operation": null})),
    )
    .await
    .expect("clear operation");
    let started = k8s_openapi::jiff::Timestamp::now().to_string();
    set_app_status(
        env,
        name,
        json!({
            "sync": {"status": sync},
            "health": {"status": health},
            "operationState": {"operation": {"sync": {}}, "phase": phase, "startedAt": started},
        }),
    )
    .await;
}

async fn has_operation(env: &Env, name: &str) -> bool {
    Api::<Application>::namespaced(env.client.clone(), NS)
        .get(name)
        .await
        .unwrap()
        .operation
        .is_some_and(|o| o.sync.is_some())
}

fn rollout_status(set: &ApplicationSet, app: &str) -> RolloutStatus {
    set.status
        .as_ref()
        .unwrap()
        .application_status
        .iter()
        .find(|s| s.application == app)
        .unwrap_or_else(|| panic!("no applicationStatus for {app}"))
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rolling_sync_goes_step_by_step_and_a_progressing_step_holds_the_next() {
    let env = env().await;
    let mut tpl = template("app-{{env}}", "{{env}}");
    tpl["metadata"]["labels"] = json!({"env": "{{env}}"});
    tpl["spec"]["syncPolicy"] = json!({"automated": {"prune": true, "selfHeal": true}});
    create_set(
        &env,
        "rollout",
        json!({
            "generators": [{"list": {"elements": [{"env": "dev"}, {"env": "qa"}, {"env": "prod"}]}}],
            "template": tpl,
            "strategy": {"type": "RollingSync", "rollingSync": {"steps": [
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]},
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["qa"]}], "maxUpdate": "50%"},
                {"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod"]}], "maxUpdate": 1}
            ]}}
        }),
    )
    .await;
    let (result, after) = reconcile_set(&env, "rollout").await;
    result.expect("reconcile");
    assert_eq!(app_names(&env).await, vec!["app-dev", "app-prod", "app-qa"]);
    let dev = Api::<Application>::namespaced(env.client.clone(), NS)
        .get("app-dev")
        .await
        .unwrap();
    assert!(
        dev.spec.sync_policy.as_ref().is_none_or(|p| p.automated.is_none()),
        "RollingSync turns automated sync off"
    );
    assert!(
        condition(&after, "RolloutProgressing").starts_with("True"),
        "{} {:?}",
        condition(&after, "RolloutProgressing"),
        after.status
    );
    for app in ["app-dev", "app-qa", "app-prod"] {
        set_app_status(
            &env,
            app,
            json!({"sync": {"status": "OutOfSync"}, "health": {"status": "Healthy"}}),
        )
        .await;
    }
    // Step 1: dev is synced (operation set), the others wait.
    let (_, after) = reconcile_set(&env, "rollout").await;
    assert_eq!(rollout_status(&after, "app-dev"), RolloutStatus::Pending);
    assert!(has_operation(&env, "app-dev").await);
    assert!(!has_operation(&env, "app-qa").await && !has_operation(&env, "app-prod").await);
    assert_eq!(rollout_status(&after, "app-qa"), RolloutStatus::Waiting);
    let op = Api::<Application>::namespaced(env.client.clone(), NS)
        .get("app-dev")
        .await
        .unwrap()
        .operation
        .unwrap();
    assert!(op.sync.unwrap().prune, "prune from the template's automated policy");
    assert_eq!(
        op.initiated_by.unwrap().username.as_deref(),
        Some("applicationset-controller")
    );

    // The Application controller picks it up: Progressing.
    pick_up(&env, "app-dev", "Progressing", "Synced", "Running").await;
    let (_, after) = reconcile_set(&env, "rollout").await;
    assert_eq!(rollout_status(&after, "app-dev"), RolloutStatus::Progressing);
    assert!(!has_operation(&env, "app-qa").await);

    // Healthy: step 2 starts.
    pick_up(&env, "app-dev", "Healthy", "Synced", "Succeeded").await;
    let (_, after) = reconcile_set(&env, "rollout").await;
    assert_eq!(rollout_status(&after, "app-dev"), RolloutStatus::Healthy);
    assert_eq!(rollout_status(&after, "app-qa"), RolloutStatus::Pending);
    assert!(has_operation(&env, "app-qa").await);
    let qa_step = after
        .status
        .as_ref()
        .unwrap()
        .application_status
        .iter()
        .find(|s| s.application == "app-qa")
        .unwrap()
        .clone();
    assert_eq!(qa_step.step.as_deref(), Some("2"));
    assert!(qa_step.last_transition_time.is_some() && qa_step.message.is_some());

    // qa syncs but stays Progressing (its Deployment never becomes available): prod never starts.
    pick_up(&env, "app-qa", "Progressing", "Synced", "Succeeded").await;
    for _ in 0..3 {
        let (_, after) = reconcile_set(&env, "rollout").await;
        assert_eq!(rollout_status(&after, "app-qa"), RolloutStatus::Progressing);
        assert_eq!(rollout_status(&after, "app-prod"), RolloutStatus::Waiting);
        assert!(condition(&after, "RolloutProgressing").starts_with("True"));
    }
    assert!(!has_operation(&env, "app-prod").await);

    // qa becomes Healthy: prod goes.
    pick_up(&env, "app-qa", "Healthy", "Synced", "Succeeded").await;
    let (_, after) = reconcile_set(&env, "rollout").await;
    assert_eq!(rollout_status(&after, "app-prod"), RolloutStatus::Pending);
    assert!(has_operation(&env, "app-prod").await);
    pick_up(&env, "app-prod", "Healthy", "Synced", "Succeeded").await;
    let (_, after) = reconcile_set(&env, "rollout").await;
    assert_eq!(rollout_status(&after, "app-prod"), RolloutStatus::Healthy);
    assert!(condition(&after, "RolloutProgressing").starts_with("False/ApplicationSetRolloutComplete"));
}

#[test]
fn the_slimmed_cache_keeps_what_planning_and_the_rollout_read() {
    let full: Application = serde_json::from_value(json!({
        "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
        "metadata": {"name": "a-dev", "namespace": NS, "labels": {"env": "dev"}},
        "spec": {"project": "default", "source": {"repoURL": "https://example.com/r.git", "path": "a"},
                 "destination": {"server": "https://kubernetes.default.svc", "namespace": "dev"}},
        "status": {
            "sync": {"status": "Synced", "revision": "abc"}, "health": {"status": "Healthy"},
            "resources": [{"kind": "ConfigMap", "name": "x", "version": "v1"}],
            "history": [{"id": 1, "revision": "abc"}],
            "operationState": {"phase": "Running", "startedAt": "2026-11-26T10:00:00Z", "message": "applying",
                "operation": {"sync": {"revision": "abc"}},
                "syncResult": {"revision": "abc", "resources": [{"kind": "ConfigMap", "name": "x", "version": "v1"}]}}
        }
    }))
    .unwrap();
    let mut slim = full.clone();
    super::slim_generated(&mut slim);
    let status = slim.status.as_ref().unwrap();
    assert!(status.resources.is_empty() && status.history.is_empty());
    assert!(status.operation_state.as_ref().unwrap().sync_result.is_none());
    assert_eq!(slim.spec, full.spec);
    assert_eq!(slim.metadata.labels, full.metadata.labels);
    assert_eq!(
        super::rollout::RolloutApp::of(&slim),
        super::rollout::RolloutApp::of(&full),
        "the rollout's view is unchanged"
    );
}
