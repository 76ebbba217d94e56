//! PolicySets end to end (docs/user-guide.md, PolicySets): Rego that gates syncs. A `Deny` set blocks automated
//! and manual syncs with `PolicyDenied` until Git complies; a set that does not compile is reported on
//! the PolicySet and blocks (fail closed) while it is `Deny`; a `Warn` set never blocks and says what it
//! found in `PolicyWarning`.

use capstan_e2e::capstan::{automated, condition, events_about, text, AppEnv, OperatorOptions};
use serde_json::{json, Value};

/// ConfigMaps must carry a `team` label; a `legacy` one earns a warning.
const TEAM_LABEL: &str = r#"
package capstan.labels

deny contains msg if {
    input.resource.kind == "ConfigMap"
    not input.resource.metadata.labels.team
    msg := sprintf("ConfigMap %s has no team label", [input.resource.metadata.name])
}

warn contains msg if {
    input.resource.metadata.name == "legacy"
    msg := "legacy is deprecated"
}
"#;

async fn env(prefix: &str) -> AppEnv {
    let options = OperatorOptions {
        controllers: "application,cluster,repository,policyset".into(),
        ..OperatorOptions::default()
    };
    AppEnv::start_with(prefix, options).await
}

fn policy_set(ns: &str, enforcement: &str, rego: &str) -> Value {
    json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "PolicySet",
        "metadata": {"name": "labels", "namespace": ns},
        "spec": {"enforcement": enforcement, "targets": ["Resource"], "policies": [{"name": "team-label", "rego": rego}]},
    })
}

fn config_map(name: &str, team: Option<&str>) -> String {
    let labels = team.map(|t| format!("  labels:\n    team: {t}\n")).unwrap_or_default();
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n{labels}data:\n  k: v\n")
}

fn condition_message(app: &Value, type_: &str) -> String {
    condition(app, type_)
        .map(|c| text(c, "/message").to_string())
        .unwrap_or_default()
}

/// Waits for an Event about `kind`/`name` in the test namespace that satisfies `pred(type, reason, note)`.
async fn wait_event(env: &AppEnv, kind: &str, name: &str, pred: impl Fn(&str, &str, &str) -> bool) {
    let client = env.client().await;
    let what = format!("an Event about {kind}/{name}");
    env.eventually(&what, capstan_e2e::capstan::APP_TIMEOUT, || {
        let (client, pred) = (client.clone(), &pred);
        async move {
            let events = events_about(&client, &env.ns, kind, name).await;
            if events.iter().any(|(t, reason, note)| pred(t, reason, note)) {
                Ok(())
            } else {
                Err(format!("{events:?}"))
            }
        }
    })
    .await
}

async fn wait_policy_set(env: &AppEnv, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    env.eventually(
        &format!("PolicySet labels: {what}"),
        capstan_e2e::capstan::APP_TIMEOUT,
        || {
            let pred = &pred;
            async move {
                match env.get("PolicySet", "labels").await {
                    Some(p) if pred(&p) => Ok(p),
                    other => Err(format!("{other:?}")),
                }
            }
        },
    )
    .await
}

/// Commits ConfigMap `cm` (with a `team` label when given), creates the automated Application `app` for
/// it, and waits until `PolicyDenied` says `denial`; the ConfigMap was not applied.
async fn commit_and_expect_denial(env: &AppEnv, app: &str, cm: &str, team: Option<&str>, denial: &str) {
    env.repo.write(&format!("app/{cm}.yaml"), &config_map(cm, team));
    env.repo.commit(&format!("ConfigMap {cm}")).await;
    let spec = automated(true, false);
    env.create_app(app, "app", spec).await;
    let seen = env
        .wait_app(app, "PolicyDenied says why", |a| {
            condition_message(a, "PolicyDenied").contains(denial)
        })
        .await;
    assert!(
        env.get("ConfigMap", cm).await.is_none(),
        "applied despite the denial: {seen}"
    );
}

/// A `Deny` set blocks the automated sync and a manual one, and lets the sync through once Git
/// complies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deny_policy_blocks_syncs_until_git_complies() {
    let env = env("policydeny").await;
    env.apply(&[policy_set(&env.ns, "Deny", TEAM_LABEL)]).await;
    let set = wait_policy_set(&env, "Ready", |p| {
        condition(p, "Ready").is_some_and(|c| text(c, "/status") == "True")
    })
    .await;
    assert_eq!(set.pointer("/status/compiledPolicies"), Some(&json!(1)), "{set}");

    commit_and_expect_denial(
        &env,
        "gated",
        "settings",
        None,
        "[team-label] ConfigMap settings has no team label",
    )
    .await;
    let app = env.app("gated").await;
    let ready = condition(&app, "Ready").map(|c| text(c, "/status").to_string());
    assert_eq!(
        ready.as_deref(),
        Some("False"),
        "a denied Application is not Ready: {app}"
    );
    // A manual sync is refused as well: its request removed, a Warning event says why.
    env.sync("gated", json!({"prune": true})).await;
    wait_event(&env, "Application", "gated", |t, reason, note| {
        t == "Warning" && reason == "SyncDenied" && note.contains("no team label")
    })
    .await;
    env.wait_app("gated", "the refused request is removed", |a| {
        a.get("operation").is_none()
    })
    .await;
    assert!(
        env.get("ConfigMap", "settings").await.is_none(),
        "applied by the manual sync"
    );

    env.repo
        .write("app/settings.yaml", &config_map("settings", Some("payments")));
    env.repo.commit("add the team label").await;
    env.refresh("gated", "normal").await;
    let app = env.wait_synced_healthy("gated").await;
    assert!(condition(&app, "PolicyDenied").is_none(), "{app}");
    let cm = env.must_get("ConfigMap", "settings").await;
    assert_eq!(text(&cm, "/metadata/labels/team"), "payments");
}

/// A `Deny` set that does not compile blocks (fail closed) and says why on the PolicySet; turned into a
/// valid `Warn` set it lets the sync through and its warnings show on the Application.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_deny_policy_fails_closed_and_a_warn_policy_never_blocks() {
    let env = env("policywarn").await;
    env.apply(&[policy_set(
        &env.ns,
        "Deny",
        "package capstan.labels\n\ndeny contains msg if {\n",
    )])
    .await;
    let set = wait_policy_set(&env, "not Ready (CompileFailed)", |p| {
        condition(p, "Ready").is_some_and(|c| text(c, "/status") == "False" && text(c, "/reason") == "CompileFailed")
    })
    .await;
    assert!(text(&set, "/status/message").contains("team-label"), "{set}");

    commit_and_expect_denial(&env, "warned", "legacy", Some("core"), "does not compile").await;

    env.apply(&[policy_set(&env.ns, "Warn", TEAM_LABEL)]).await;
    let app = env.wait_synced_healthy("warned").await;
    assert!(condition(&app, "PolicyDenied").is_none(), "{app}");
    assert!(
        condition_message(&app, "PolicyWarning").contains("[team-label] legacy is deprecated"),
        "{app}"
    );
    env.must_get("ConfigMap", "legacy").await;
}

/// A `DryRun` set never blocks and reports what it found as an Event on the PolicySet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dry_run_policy_reports_on_the_policy_set_and_never_blocks() {
    let env = env("policydryrun").await;
    env.apply(&[policy_set(&env.ns, "DryRun", TEAM_LABEL)]).await;
    env.repo.write("app/settings.yaml", &config_map("settings", None));
    env.repo.commit("a ConfigMap without a team").await;
    let spec = automated(true, false);
    env.create_app("trial", "app", spec).await;
    let app = env.wait_synced_healthy("trial").await;
    assert!(condition(&app, "PolicyDenied").is_none(), "{app}");
    assert!(condition(&app, "PolicyWarning").is_none(), "{app}");
    wait_event(&env, "PolicySet", "labels", |_, reason, note| {
        reason == "PolicyDryRun" && note.contains("trial") && note.contains("settings has no team label")
    })
    .await;
}

/// Fail closed at start-up: while the operator cannot list PolicySets (here: their CRD is missing) no
/// sync starts, the Application says what it waits for, and the sync goes ahead once they can be listed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_sync_starts_until_policy_sets_can_be_listed() {
    // Without the PolicySet controller, whose cache (rightly) never syncs without the CRD and would
    // keep /readyz at 503: the Application controller's own PolicySet watch is what is tested.
    let mut env = AppEnv::start("policylisted").await;
    env.operator.kill().await;
    env.cluster
        .kubectl_ok(&["delete", "crd", "policysets.capstan.dev", "--wait=true"])
        .await;
    env.operator.restart().await;
    env.repo.write("app/settings.yaml", &config_map("settings", None));
    env.repo.commit("a ConfigMap").await;
    let spec = automated(true, false);
    env.create_app("waiting", "app", spec).await;
    let app = env
        .wait_app("waiting", "waits for the PolicySets", |a| {
            condition_message(a, "Ready").contains("waiting for the PolicySets to be listed")
        })
        .await;
    assert!(
        env.get("ConfigMap", "settings").await.is_none(),
        "synced without the PolicySets: {app}"
    );

    capstan_e2e::capstan::install_crds(env.cluster.kubectl_runner()).await;
    env.wait_synced_healthy("waiting").await;
    env.must_get("ConfigMap", "settings").await;
}
