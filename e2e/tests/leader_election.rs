//! Leader election end to end: two `capstan run --leader-elect` processes against one devcluster.
//!
//! Who wrote what comes from devcluster's request log: every capstan process sends
//! `User-Agent: capstan/<version> (<identity>)`, so the writes of each holder can be told apart and
//! their order checked against the moment its term ended.

use std::time::Duration;

use capstan_e2e::capstan::{operation_phase, text, AppEnv, Operator, OperatorOptions, Recorder, OPERATOR_NAMESPACE};
use capstan_e2e::election::{
    assert_each_created_once, describe, fenced_write, job_complete, leader_gauge, start_slow_sync, with_flags,
    FAST_LEASE,
};
use capstan_e2e::{wait_for, wait_until, POLL, TIMEOUT};
use devcluster::RequestRecord;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, PostParams};

/// The default lease duration: a standby must lead within this plus 5 s of the leader's death.
const LEASE: Duration = Duration::from_secs(15);

fn elected(extra: &[&str]) -> OperatorOptions {
    with_flags(&[&["--leader-elect"], extra].concat())
}

fn is_lease_get(r: &RequestRecord) -> bool {
    r.user_agent.starts_with("capstan/") && r.method == "GET" && r.path.ends_with("/leases/capstan-controller")
}

async fn leases(env: &AppEnv) -> Api<Lease> {
    Api::namespaced(env.client().await, OPERATOR_NAMESPACE)
}

/// SIGKILL of the leader while a slow PreSync hook runs: the standby leads within the lease
/// duration + 5 s, resumes the same operation, creates the hook Job once, and the two holders'
/// writes never interleave (one holder per term).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standby_takes_over_a_sync_when_the_leader_is_killed() {
    let mut env = AppEnv::start_with("leader", elected(&[])).await;
    let mut second = Operator::start(env.cluster.kubeconfig_path(), elected(&[])).await;
    let first_leads = wait_for("exactly one replica leads", TIMEOUT, POLL, || async {
        match (leader_gauge(&env.operator).await, leader_gauge(&second).await) {
            (Some(1), Some(0)) => Some(true),
            (Some(0), Some(1)) => Some(false),
            _ => None,
        }
    })
    .await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap", "Deployment"]).await;
    start_slow_sync(&env, None).await;
    let started_at = text(&env.app("slow").await, "/status/operationState/startedAt").to_owned();
    assert!(!started_at.is_empty(), "the operation has started");

    let survivor = if first_leads {
        env.operator.kill().await;
        &second
    } else {
        second.kill().await;
        &env.operator
    };
    wait_until("the standby leads", LEASE + Duration::from_secs(5), POLL, || async {
        leader_gauge(survivor).await == Some(1)
    })
    .await;
    env.wait_resumed("slow", &started_at).await;
    assert_each_created_once(&rec);

    // One holder per term: the killed leader's writes all come before the survivor's first.
    let log = env.cluster.requests();
    let writes: Vec<&RequestRecord> = log.iter().filter(|r| fenced_write(r)).collect();
    let mut holders: Vec<&str> = writes.iter().map(|r| r.user_agent.as_str()).collect();
    holders.dedup();
    assert_eq!(
        holders.len(),
        2,
        "writes from exactly two holders, one term after the other:\n{}",
        describe(&writes)
    );
    drop(second);
}

/// A leader whose Lease is taken from it (as when it cannot reach the API server in time) stops
/// writing at once, in the middle of a sync: no write after its term ends, and the sync waits. Once
/// it holds the Lease again it resumes the same operation and finishes it without repeating the hook.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_that_loses_its_lease_writes_nothing_more() {
    let fast = FAST_LEASE;
    let env = AppEnv::start_with("lostlease", elected(&fast)).await;
    wait_until("the only replica leads", TIMEOUT, POLL, || async {
        leader_gauge(&env.operator).await == Some(1)
    })
    .await;
    let rec = Recorder::start(&env.client().await, &env.ns, &["Job", "ConfigMap", "Deployment"]).await;
    start_slow_sync(&env, None).await;

    // Someone else takes the Lease for an hour.
    let leases = leases(&env).await;
    let mut lease = leases.get("capstan-controller").await.expect("the Lease exists");
    let spec = lease.spec.as_mut().expect("a held Lease has a spec");
    spec.holder_identity = Some("intruder".into());
    spec.lease_duration_seconds = Some(3600);
    spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    leases
        .replace("capstan-controller", &PostParams::default(), &lease)
        .await
        .expect("the Lease is taken over");
    wait_until("the replica stands by", TIMEOUT, POLL, || async {
        leader_gauge(&env.operator).await == Some(0)
    })
    .await;
    let term_end = env.cluster.requests().len();

    // The hook completes on its own; a leader would now apply wave 0. Give the fenced replica
    // six more Lease rounds after that to prove it does not.
    env.wait_object("Job", "slow-presync", "completes", |j| j.is_some_and(job_complete))
        .await;
    let hook_done = env.cluster.requests().len();
    wait_until(
        "six more Lease rounds after the hook completed",
        TIMEOUT,
        POLL,
        || async {
            env.cluster.requests()[hook_done..]
                .iter()
                .filter(|r| is_lease_get(r))
                .count()
                >= 6
        },
    )
    .await;
    let log = env.cluster.requests();
    let late: Vec<&RequestRecord> = log[term_end..].iter().filter(|r| fenced_write(r)).collect();
    assert!(late.is_empty(), "writes after the term ended:\n{}", describe(&late));
    assert!(
        env.get("ConfigMap", "settings").await.is_none(),
        "wave 0 applied without the Lease"
    );
    assert_eq!(operation_phase(&env.app("slow").await), "Running");

    // The Lease comes back: the replica takes it, resumes and finishes the same operation.
    leases
        .delete("capstan-controller", &DeleteParams::default())
        .await
        .expect("the Lease is deleted");
    env.wait_app("slow", "the sync operation Succeeded", |a| {
        operation_phase(a) == "Succeeded"
    })
    .await;
    assert_each_created_once(&rec);
}

/// `--leader-elect` under an identity that may not use the Lease: a clear error at start naming what
/// is missing, and a non-zero exit (not a replica that silently never leads).
#[tokio::test]
async fn leader_elect_without_lease_rbac_fails_at_start() {
    let cluster = capstan_e2e::TestCluster::start();
    capstan_e2e::capstan::install_crds(cluster.kubectl_runner()).await;
    cluster
        .kubectl_ok(&["create", "serviceaccount", "no-lease", "-n", OPERATOR_NAMESPACE])
        .await;
    let token = cluster.create_token(OPERATOR_NAMESPACE, "no-lease");
    let kubeconfig = cluster.dir().join("no-lease.kubeconfig");
    std::fs::write(&kubeconfig, cluster.dev().kubeconfig_for_token("no-lease", &token)).expect("kubeconfig");
    let port = capstan_e2e::capstan::free_port();
    let out = capstan_e2e::within(
        "capstan run --leader-elect to exit",
        TIMEOUT,
        tokio::process::Command::new(capstan_e2e::process::workspace_binary("capstan"))
            .args(["run", "--leader-elect", "--namespace", OPERATOR_NAMESPACE])
            .args(["--metrics-addr", &format!("127.0.0.1:{port}")])
            .env("KUBECONFIG", &kubeconfig)
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("capstan runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "exit {:?}\n{stderr}", out.status);
    assert!(
        stderr.contains("leader election needs get on leases.coordination.k8s.io \"capstan-controller\""),
        "{stderr}"
    );
}
