//! Helpers of the leader election and sharding suites: several `capstan run` processes against one
//! devcluster, told apart in devcluster's request log by their `User-Agent`
//! (`capstan/<version> (<identity>)`).

use devcluster::RequestRecord;
use serde_json::Value;

use crate::capstan::{
    application, automated, get_object, text, AppEnv, Operator, OperatorOptions, Recorder, APP_TIMEOUT,
};

/// Lease timing short enough that a kill or a lost Lease is noticed within seconds (4 s / 3 s / 0.5 s).
pub const FAST_LEASE: [&str; 6] = [
    "--leader-elect-lease-duration",
    "4s",
    "--leader-elect-renew-deadline",
    "3s",
    "--leader-elect-retry-period",
    "500ms",
];

/// Options of a `capstan run` with `flags` added (`--leader-elect`, `--shard-count`, timing...).
pub fn with_flags(flags: &[&str]) -> OperatorOptions {
    OperatorOptions {
        reconcile_interval: "30s".into(),
        extra_args: flags.iter().map(|f| f.to_string()).collect(),
        ..OperatorOptions::default()
    }
}

/// The value of gauge `name` (no labels) of a running operator (`None` when it does not answer).
pub async fn gauge(op: &Operator, name: &str) -> Option<i64> {
    let (status, body) = op.http_get("/metrics").await?;
    (status == 200).then_some(())?;
    let prefix = format!("{name} ");
    body.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

/// `capstan_leader` of a running operator.
pub async fn leader_gauge(op: &Operator) -> Option<i64> {
    gauge(op, "capstan_leader").await
}

/// A write by a capstan process that the election fences (Leases and access reviews excluded).
pub fn fenced_write(r: &RequestRecord) -> bool {
    r.user_agent.starts_with("capstan/")
        && !matches!(r.method.as_str(), "GET" | "HEAD" | "OPTIONS")
        && !r.path.starts_with("/apis/coordination.k8s.io/")
        && !r.path.starts_with("/apis/authorization.k8s.io/")
}

/// One line per request, for assertion messages.
pub fn describe(records: &[&RequestRecord]) -> String {
    records
        .iter()
        .map(|r| format!("{} {} {} [{}]", r.status, r.method, r.path, r.user_agent))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether a Job has completed.
pub fn job_complete(job: &Value) -> bool {
    job.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| text(c, "/type") == "Complete" && text(c, "/status") == "True")
        })
}

/// Commits the `leader-presync` fixture (a slow PreSync hook `slow-presync`, then two waves) under
/// `app`, creates Application `slow` (to the operator's own cluster, or to the Cluster named
/// `cluster`), and waits until the hook runs (exists, not complete): the sync is under way.
pub async fn start_slow_sync(env: &AppEnv, cluster: Option<&str>) {
    env.repo.copy_fixture("leader-presync", "app");
    env.repo.commit("a slow PreSync hook, two waves").await;
    let mut app = application(&env.ns, "slow", &env.repo.url(), "app", &env.ns, automated(true, false));
    if let Some(name) = cluster {
        app["spec"]["destination"] = serde_json::json!({"name": name, "namespace": env.ns});
    }
    env.apply(&[app]).await;
    let (client, ns) = (env.client().await, env.ns.clone());
    env.eventually("the PreSync hook runs", APP_TIMEOUT, || {
        let (client, ns) = (client.clone(), ns.clone());
        async move {
            match get_object(&client, &ns, "Job", "slow-presync").await {
                Some(j) if !job_complete(&j) => Ok(()),
                Some(_) => Err("the hook already completed: too late".into()),
                None => Err("no hook Job yet".into()),
            }
        }
    })
    .await;
}

/// Every object of the `leader-presync` fixture, the hook Job included, was created exactly once.
pub fn assert_each_created_once(rec: &Recorder) {
    for (kind, name) in [
        ("Job", "slow-presync"),
        ("ConfigMap", "settings"),
        ("Deployment", "web"),
        ("ConfigMap", "after-web"),
    ] {
        assert_eq!(
            rec.uids(kind, name).len(),
            1,
            "{kind} {name} created once\n{}",
            rec.trace()
        );
    }
}
