//! Cluster controller: probes each Cluster's API server (`GET /version` with its credentials) and
//! reports `Ready`, `serverVersion`, `lastProbeTime` and `managedApplications` (how many Applications
//! target it). The connection it probes through is the one Applications use ([`ClusterClients`]), so
//! rotated credentials take effect for both.
//!
//! Pipeline: connect (client: Cluster + Secret) → probe (`/version`) → count Applications (store) →
//! ONE status patch (none when only timestamps would change) → requeue after the reconcile interval.
//! Triggers: Cluster spec changes and Application changes (the count).
//!
//! [`ClusterClients`]: crate::cluster::ClusterClients

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{predicates, watcher, WatchStreamExt};
use kube::{Resource, ResourceExt};

use super::error::{Error, KubeStep};
use super::status::{announce_ready_flip, mark_not_ready, mark_ready, write_status};
use super::{run_controller, Context, Shutdown};
use crate::api::cluster::ClusterStatus;
use crate::api::{Application, Cluster};
use crate::cluster::probe;

/// The controller's name in `--controllers`, metrics and logs.
pub const CONTROLLER: &str = "cluster";
/// Probe interval ceiling (the reconcile interval when shorter).
const PROBE_INTERVAL: Duration = Duration::from_secs(60);

/// Runs the Cluster controller until `shutdown` fires.
pub async fn run(ctx: Arc<Context>, shutdown: Shutdown) -> anyhow::Result<()> {
    let (reader, writer) = reflector::store();
    let clusters = ctx
        .watch::<Cluster>(watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(predicates::generation, Default::default());
    let (app_reader, app_writer) = reflector::store();
    // Only destinations are counted here: the cached Applications need no status either.
    let apps = ctx
        .watch::<Application>(watcher::Config::default())
        .default_backoff()
        .modify(|app: &mut Application| {
            crate::controllers::slim_cached(app);
            app.status = None;
        })
        .reflect(app_writer)
        .touched_objects();
    // NB: not a plain `wait_until_ready` in a task: kube-runtime wakes only one waiter.
    crate::controllers::mark_ready_when_synced(Arc::clone(&ctx), CONTROLLER, reader.clone());
    let (mapper_store, operator_ns) = (reader.clone(), ctx.namespace().to_string());
    let apps_store = app_reader.clone();
    let queue = ctx.queue(CONTROLLER);
    let controller = Controller::for_stream(queue.count(clusters), reader)
        .watches_stream(
            apps,
            queue.mapper(move |app: Application| clusters_of(&mapper_store.state(), &app, &operator_ns)),
        )
        .graceful_shutdown_on(shutdown.wait());
    run_controller(controller, CONTROLLER, ctx, move |cluster, ctx| {
        let apps = apps_store.state();
        async move { reconcile(&cluster, &ctx, &apps).await }
    })
    .await;
    Ok(())
}

/// Whether Application `app` targets Cluster `cluster` (by `server` or `name`, honouring the
/// namespace rule: a Cluster in the operator namespace serves everyone, others their own namespace).
pub fn targets(app: &Application, cluster: &Cluster, operator_ns: &str) -> bool {
    let (cns, ans) = (
        cluster.namespace().unwrap_or_default(),
        app.namespace().unwrap_or_default(),
    );
    if cns != ans && cns != operator_ns {
        return false;
    }
    let d = &app.spec.destination;
    let same = |a: &str, b: &str| a.trim_end_matches('/') == b.trim_end_matches('/');
    d.server.as_deref().is_some_and(|s| same(s, &cluster.spec.server)) || d.name.as_deref() == Some(&cluster.name_any())
}

fn clusters_of(all: &[Arc<Cluster>], app: &Application, operator_ns: &str) -> Vec<ObjectRef<Cluster>> {
    all.iter()
        .filter(|c| targets(app, c, operator_ns))
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The status after a probe (pure): `Ok(version)` or `Err((reason, message))`.
pub fn next_status(
    old: Option<&ClusterStatus>,
    probe: Result<String, (&str, String)>,
    managed: i64,
    generation: Option<i64>,
    now: &Time,
) -> ClusterStatus {
    let mut status = old.cloned().unwrap_or_default();
    status.observed_generation = generation;
    status.managed_applications = Some(managed);
    status.last_probe_time = Some(now.clone());
    match probe {
        Ok(version) => {
            mark_ready(
                &mut status.conditions,
                &format!("API server reachable ({version})"),
                generation,
                now,
            );
            status.server_version = Some(version);
        }
        Err((reason, message)) => {
            let stalled = reason == "InvalidConfig";
            mark_not_ready(&mut status.conditions, (reason, &message), stalled, generation, now);
        }
    }
    status
}

async fn reconcile(cluster: &Cluster, ctx: &Context, apps: &[Arc<Application>]) -> Result<Action, Error> {
    let ns = cluster
        .namespace()
        .ok_or_else(|| Error::InvalidSpec("a Cluster must be namespaced".into()))?;
    let clients = ctx
        .clusters()
        .ok_or_else(|| Error::Internal("no cluster clients configured".into()))?;
    let outcome = match clients.connect(cluster).await {
        Ok(handle) => probe(handle.client()).await.map(|v| v.git_version),
        Err(e) => Err(e),
    };
    let managed = apps.iter().filter(|a| targets(a, cluster, ctx.namespace())).count() as i64;
    let probe_result = outcome.clone().map_err(|e| (e.category(), e.to_string()));
    let now = super::status::now();
    let old = cluster.status.as_ref();
    let new = next_status(old, probe_result, managed, cluster.metadata.generation, &now);
    let api: Api<Cluster> = Api::namespaced(ctx.client.clone(), &ns);
    write_status(&api, cluster, old, &new)
        .await
        .map_err(KubeStep::StatusWrite.err())?;
    let conditions = (old.map(|s| s.conditions.as_slice()), new.conditions.as_slice());
    let reasons = ("ClusterReady", "ClusterUnreachable");
    announce_ready_flip(ctx, &cluster.object_ref(&()), conditions, reasons, "Probe").await;
    let every = ctx
        .settings
        .reconcile_interval
        .min(PROBE_INTERVAL)
        .max(Duration::from_secs(5));
    Ok(Action::requeue(every))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::application::{ApplicationDestination, ApplicationSpec};
    use crate::api::conditions::{CONDITION_READY, CONDITION_STALLED};
    use crate::api::ClusterSpec;
    use crate::controllers::status::find_condition;
    use k8s_openapi::jiff::Timestamp;
    use kube::api::ObjectMeta;

    fn cluster(ns: &str, name: &str, server: &str) -> Cluster {
        let mut c = Cluster::new(
            name,
            ClusterSpec {
                server: server.into(),
                ..ClusterSpec::default()
            },
        );
        c.metadata.namespace = Some(ns.into());
        c
    }

    fn app(ns: &str, server: Option<&str>, name: Option<&str>) -> Application {
        let mut a = Application::new(
            "a",
            ApplicationSpec {
                destination: ApplicationDestination {
                    server: server.map(Into::into),
                    name: name.map(Into::into),
                    namespace: None,
                    service_account_name: None,
                },
                ..ApplicationSpec::default()
            },
        );
        a.metadata = ObjectMeta {
            namespace: Some(ns.into()),
            ..a.metadata
        };
        a
    }

    #[test]
    fn applications_count_by_server_or_name_and_namespace_rule() {
        let shared = cluster("capstan-system", "prod", "https://prod:6443");
        let private = cluster("team", "dev", "https://dev:6443/");
        assert!(targets(
            &app("team", Some("https://prod:6443/"), None),
            &shared,
            "capstan-system"
        ));
        assert!(targets(&app("other", None, Some("prod")), &shared, "capstan-system"));
        assert!(targets(
            &app("team", Some("https://dev:6443"), None),
            &private,
            "capstan-system"
        ));
        assert!(!targets(
            &app("other", Some("https://dev:6443"), None),
            &private,
            "capstan-system"
        ));
        assert!(!targets(
            &app("team", Some("https://kubernetes.default.svc"), None),
            &shared,
            "capstan-system"
        ));
    }

    #[test]
    fn probe_results_become_status() {
        let now = Time(Timestamp::from_second(100).unwrap());
        let ok = next_status(None, Ok("v1.33.1".into()), 3, Some(1), &now);
        assert_eq!(ok.server_version.as_deref(), Some("v1.33.1"));
        assert_eq!(ok.managed_applications, Some(3));
        assert_eq!(find_condition(&ok.conditions, CONDITION_READY).unwrap().status, "True");
        let later = Time(Timestamp::from_second(200).unwrap());
        let down = next_status(Some(&ok), Err(("Unreachable", "refused".into())), 3, Some(1), &later);
        let ready = find_condition(&down.conditions, CONDITION_READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Unreachable"));
        assert_eq!(
            down.server_version.as_deref(),
            Some("v1.33.1"),
            "last known version kept"
        );
        let bad = next_status(
            None,
            Err(("InvalidConfig", "exec plugin refused".into())),
            0,
            Some(1),
            &now,
        );
        assert!(find_condition(&bad.conditions, CONDITION_STALLED).is_some());
    }
}
