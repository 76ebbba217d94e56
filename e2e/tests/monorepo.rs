//! Monorepo fan-out end to end (docs/user-guide.md, "Monorepos"): one repository, several
//! Applications each on its own path. A commit touching one path re-renders and syncs that
//! Application only; the others keep their render (`capstan_render_total{result="rendered"}` does
//! not move for them) while their `status.sync.revision` moves to the new commit, as Argo CD's does.
//! A kustomize base shared by two Applications re-renders both, with no annotation needed, and
//! Argo CD's `manifest-generate-paths` annotation is honoured.

use capstan_e2e::capstan::{application, automated, synced_healthy, text, AppEnv};
use serde_json::{json, Value};

/// Plain-directory Applications `a1`..`a4` at `apps/<name>`.
const DIRECTORY_APPS: [&str; 4] = ["a1", "a2", "a3", "a4"];
/// Kustomize Applications at `overlays/<name>`, both built on `base/shared`.
const KUSTOMIZE_APPS: [&str; 2] = ["k1", "k2"];
/// A plain-directory Application at `apps/ann` that also reads `config/` through the annotation.
const ANNOTATED_APP: &str = "ann";

fn config_map(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  value: \"{value}\"\n")
}

/// The repository's files: every Application at `value`.
fn write_tree(env: &AppEnv) {
    for app in DIRECTORY_APPS.iter().chain([&ANNOTATED_APP]) {
        env.repo
            .write(&format!("apps/{app}/cm.yaml"), &config_map(&format!("cm-{app}"), "1"));
    }
    env.repo
        .write("base/shared/kustomization.yaml", "resources:\n- cm.yaml\n");
    env.repo.write("base/shared/cm.yaml", &config_map("shared", "1"));
    for app in KUSTOMIZE_APPS {
        env.repo.write(
            &format!("overlays/{app}/kustomization.yaml"),
            &format!("namePrefix: {app}-\nresources:\n- ../../base/shared\n"),
        );
    }
    env.repo
        .write("config/README", "read by the annotated Application only\n");
}

fn all_apps() -> Vec<&'static str> {
    DIRECTORY_APPS
        .iter()
        .chain(KUSTOMIZE_APPS.iter())
        .chain([&ANNOTATED_APP])
        .copied()
        .collect()
}

/// `capstan_render_total{result}` as the operator exports it now (0 when absent).
async fn renders(env: &AppEnv, result: &str) -> u64 {
    let metrics = env.operator.metrics().await;
    let series = format!("capstan_render_total{{result=\"{result}\"}} ");
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

/// Waits until every Application is Synced and Healthy at `revision`.
async fn all_at(env: &AppEnv, revision: &str) {
    for app in all_apps() {
        env.wait_app(app, &format!("Synced and Healthy at {revision}"), |a| {
            synced_healthy(a) && text(a, "/status/sync/revision") == revision
        })
        .await;
    }
}

/// Waits until ConfigMap `name` holds `value`.
async fn config_value(env: &AppEnv, name: &str, value: &str) {
    env.wait_object("ConfigMap", name, &format!("holds {value}"), |o: Option<&Value>| {
        o.is_some_and(|o| text(o, "/data/value") == value)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_re_renders_only_the_applications_whose_paths_it_touched() {
    let env = AppEnv::start("monorepo").await;
    write_tree(&env);
    let first = env.repo.commit("seven applications").await;
    // A Repository polled every second wakes the Applications tracking the branch on each commit.
    env.apply(&[json!({
        "apiVersion": "capstan.dev/v1alpha1",
        "kind": "Repository",
        "metadata": {"name": "mono", "namespace": env.ns},
        "spec": {"url": env.repo.url(), "pollInterval": "1s"},
    })])
    .await;
    for app in DIRECTORY_APPS {
        env.create_app(app, &format!("apps/{app}"), automated(true, false))
            .await;
    }
    for app in KUSTOMIZE_APPS {
        env.create_app(app, &format!("overlays/{app}"), automated(true, false))
            .await;
    }
    let mut annotated = application(
        &env.ns,
        ANNOTATED_APP,
        &env.repo.url(),
        "apps/ann",
        &env.ns,
        automated(true, false),
    );
    annotated["metadata"]["annotations"] = json!({"argocd.argoproj.io/manifest-generate-paths": ".;/config"});
    env.apply(&[annotated]).await;
    all_at(&env, &first).await;
    let rendered = renders(&env, "rendered").await;
    let unchanged = renders(&env, "unchanged").await;

    // One path changes: only its Application renders; all move to the new commit.
    env.repo.write("apps/a1/cm.yaml", &config_map("cm-a1", "2"));
    let second = env.repo.commit("change a1 only").await;
    config_value(&env, "cm-a1", "2").await;
    all_at(&env, &second).await;
    assert_eq!(renders(&env, "rendered").await, rendered + 1, "only a1 rendered");
    assert_eq!(renders(&env, "unchanged").await, unchanged + 6, "six reused renders");

    // The shared kustomize base changes: both overlays render (found without any annotation).
    env.repo.write("base/shared/cm.yaml", &config_map("shared", "3"));
    let third = env.repo.commit("change the shared base").await;
    config_value(&env, "k1-shared", "3").await;
    config_value(&env, "k2-shared", "3").await;
    all_at(&env, &third).await;
    assert_eq!(renders(&env, "rendered").await, rendered + 3, "k1 and k2 rendered");

    // A path only the annotation names: the annotated Application renders, nobody else.
    env.repo.write("config/README", "changed\n");
    let fourth = env.repo.commit("change config/").await;
    all_at(&env, &fourth).await;
    assert_eq!(renders(&env, "rendered").await, rendered + 4, "ann rendered");
    assert_eq!(config_value_now(&env, "cm-a2").await, "1", "a2 untouched");
}

async fn config_value_now(env: &AppEnv, name: &str) -> String {
    let cm = env.must_get("ConfigMap", name).await;
    text(&cm, "/data/value").to_string()
}
