//! SaaS tasks end to end: the hub enqueues, the reporter long-polls and carries each task out through the
//! Kubernetes API as a user would, and the operator (with a PolicySet) decides. A task for a namespace not in
//! `tasks.namespaces`, or whose target is not a namespace and an object name, is rejected; a sync denied by
//! a PolicySet fails with the policy's message; a task delivered again while it runs is carried out once.

use std::time::Duration;

use capstan_e2e::capstan::{application, AppEnv, OperatorOptions, APP_TIMEOUT};
use capstan_e2e::capstan::{Operator, OPERATOR_NAMESPACE};
use capstan_e2e::chart;
use capstan_e2e::hub::{Hub, HubOptions};
use capstan_e2e::reporter::reporter_options;
use capstan_e2e::wait::wait_for;
use serde_json::{json, Value};

const TEAM_LABEL: &str = r#"
package capstan.labels

deny contains msg if {
    input.resource.kind == "ConfigMap"
    not input.resource.metadata.labels.team
    msg := sprintf("ConfigMap %s has no team label", [input.resource.metadata.name])
}
"#;

fn config_map(name: &str, team: Option<&str>, wave: &str) -> String {
    let labels = team.map(|t| format!("  labels:\n    team: {t}\n")).unwrap_or_default();
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  annotations:\n    argocd.argoproj.io/sync-wave: \"{wave}\"\n{labels}data:\n  k: v\n"
    )
}

async fn wait_task(hub: &Hub, id: &str) -> Value {
    wait_for(
        &format!("task {id} to get a result"),
        APP_TIMEOUT,
        Duration::from_millis(250),
        || async {
            let task = hub.task(id).await;
            matches!(task["state"].as_str(), Some("succeeded" | "failed" | "rejected")).then_some(task)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_rejected_denied_or_carried_out_once() {
    let env = AppEnv::start_with(
        "rep-tasks",
        OperatorOptions {
            controllers: "application,cluster,repository,policyset".into(),
            sync_wave_delay: Some("3s".into()),
            ..OperatorOptions::default()
        },
    )
    .await;
    let hub = Hub::start(HubOptions {
        task_redelivery: Some(Duration::from_secs(1)),
        ..HubOptions::default()
    })
    .await;
    let agent = "tasks-agent";
    let settings = vec![
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
               "data": {"url": hub.url(), "agentId": agent, "tasks.namespaces": format!("{}*", env.ns)}}),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "capstan-reporter", "namespace": OPERATOR_NAMESPACE},
               "stringData": {"token": hub.token()}}),
        json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "PolicySet", "metadata": {"name": "labels", "namespace": env.ns},
               "spec": {"enforcement": "Deny", "targets": ["Resource"], "policies": [{"name": "team-label", "rego": TEAM_LABEL}]}}),
    ];
    env.apply(&settings).await;
    let kubeconfig = chart::kubeconfig_for(&env.cluster, chart::Identity::ReporterWithTasks).await;
    let reporter = Operator::start(&kubeconfig, reporter_options()).await;

    env.repo
        .write("good/a.yaml", &config_map("good-a", Some("payments"), "0"));
    env.repo
        .write("good/b.yaml", &config_map("good-b", Some("payments"), "1"));
    env.repo.write("bad/c.yaml", &config_map("bad-c", None, "0"));
    env.repo.commit("two apps").await;
    env.apply(&[
        application(&env.ns, "good", &env.repo.url(), "good", &env.ns, json!({})),
        application(&env.ns, "bad", &env.repo.url(), "bad", &env.ns, json!({})),
    ])
    .await;
    env.wait_app("bad", "PolicyDenied", |a| {
        capstan_e2e::capstan::condition(a, "PolicyDenied").is_some()
    })
    .await;

    let elsewhere = hub
        .enqueue_task(agent, "refresh", "kube-system", "good", json!({"hard": true}))
        .await;
    let denied = hub
        .enqueue_task(agent, "sync", &env.ns, "bad", json!({"prune": true}))
        .await;
    let good = hub.enqueue_task(agent, "sync", &env.ns, "good", json!({})).await;
    // Matches the `<ns>*` glob as text, but is no namespace name: an API path would take it for the
    // operator namespace.
    let climbing = format!("{}/../{OPERATOR_NAMESPACE}", env.ns);
    let traversal = hub.enqueue_task(agent, "refresh", &climbing, "good", json!({})).await;
    let odd_name = hub
        .enqueue_task(agent, "refresh", &env.ns, "good/status", json!({}))
        .await;

    let rejected = wait_task(&hub, &elsewhere).await;
    assert_eq!(rejected["state"], "rejected", "{rejected}");
    assert!(
        rejected["message"].as_str().unwrap().contains("tasks.namespaces"),
        "{rejected}"
    );
    for (id, field) in [(&traversal, "target.namespace"), (&odd_name, "target.name")] {
        let refused = wait_task(&hub, id).await;
        assert_eq!(refused["state"], "rejected", "{refused}");
        assert!(refused["message"].as_str().unwrap().contains(field), "{refused}");
    }

    let failed = wait_task(&hub, &denied).await;
    assert_eq!(failed["state"], "failed", "{failed}");
    assert!(
        failed["message"].as_str().unwrap().contains("no team label"),
        "{failed}"
    );
    assert!(env.get("ConfigMap", "bad-c").await.is_none(), "a denied sync applied");

    let done = wait_task(&hub, &good).await;
    assert_eq!(done["state"], "succeeded", "{done}");
    assert!(
        done["deliveries"].as_u64().unwrap_or(0) >= 2,
        "the task was delivered again while running: {done}"
    );
    let app = env.wait_synced_healthy("good").await;
    let history = app["status"]["history"].as_array().cloned().unwrap_or_default();
    assert_eq!(history.len(), 1, "carried out once: {history:?}");
    let info = &app["status"]["operationState"]["operation"]["info"];
    assert!(
        info.to_string().contains(&good),
        "operation.info records the task id: {info}"
    );
    let metrics = reporter.metrics().await;
    assert!(
        metrics.contains("capstan_reporter_tasks_total{state=\"succeeded\",type=\"sync\"} 1"),
        "{metrics}"
    );
}
