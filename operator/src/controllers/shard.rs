//! Sharding of the Application controller (`capstan run --shard-count N`; docs/architecture.md,
//! "Sharding", and docs/user-guide.md, "High availability").
//!
//! Each replica competes for the shard Leases `capstan-controller-shard-<i>` (one at most) through
//! the same Lease loop as leader election ([`super::leader::run_set`]), watches the Cluster
//! objects, and recomputes after every Lease round and every Cluster change which destination
//! clusters it reconciles: [`crate::engine::shard`] assigns cluster keys (`in-cluster`, or a
//! Cluster's `namespace/name`) to the live shards, and its [`Handoff`] decides when a cluster just
//! given to this replica may be written to.
//!
//! [`Shards`] is also the [`WriteGate`] of the sharded clients: a write into a destination cluster
//! passes only while that cluster is this replica's, and a write of an Application (status,
//! finalizers, operation) only while the Application's cluster is. Applications whose destination
//! names no known Cluster belong to the shard of `in-cluster` (their error is reported once).
//! Repositories, Clusters, PolicySets and ApplicationSets are not sharded: the holder of the
//! leader Lease `capstan-controller` reconciles them.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{reflector, watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc::UnboundedSender;

use super::leader::{self, LeaseSettings, LeaseView};
use super::Shutdown;
use crate::api::application::ApplicationDestination;
use crate::api::{Application, Cluster};
use crate::cluster::requests::{WriteGate, WriteScope};
use crate::cluster::scope::{self, WatchScope};
use crate::cluster::{destination_target, same_server, search_namespaces, DestinationTarget, IN_CLUSTER_NAME};
use crate::engine::shard::{self, Handoff, LoadBound, Observation};
use crate::metrics::Metrics;

/// A Cluster object as the assignment needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct KnownCluster {
    namespace: String,
    name: String,
    server: String,
}

/// An Application's destination as last admitted, and its cluster key under the current Clusters.
#[derive(Debug)]
struct Binding {
    namespace: String,
    destination: ApplicationDestination,
    key: String,
}

#[derive(Debug, Default)]
struct State {
    handoff: Handoff,
    live: BTreeSet<u32>,
    mine: BTreeSet<u32>,
    /// The end of this replica's term on each shard it holds (see [`LeaseView::until`]).
    until: HashMap<u32, Instant>,
    clusters: Vec<KnownCluster>,
    /// The Cluster watch finished a first list (until then no cluster is assigned or admitted).
    synced: bool,
    /// Every Application admitted so far (`namespace/name` → its destination and cluster key).
    bindings: HashMap<String, Binding>,
    /// Applications refused at their last admission (`namespace/name`): woken when their cluster
    /// becomes writable here, instead of every replica re-checking every Application periodically.
    waiting: HashSet<String>,
    /// Where woken Applications go (the Application controller's trigger), once it runs.
    wake: Option<UnboundedSender<ObjectRef<Application>>>,
}

/// This replica's shards and the clusters (hence Applications) it may write for.
#[derive(Debug)]
pub struct Shards {
    count: u32,
    operator_namespace: String,
    /// How long a cluster taken from a live shard waits before it is written to.
    settle: Duration,
    started: Instant,
    state: Mutex<State>,
    /// The Application controller's store, once it runs: the write gate decides on an
    /// Application's current destination, not on the one it had when its reconcile started.
    apps: OnceLock<Store<Application>>,
}

impl Shards {
    /// `count` shards (1..=[`shard::MAX_SHARDS`]); `settle` is the lease duration.
    pub fn new(count: u32, operator_namespace: &str, settle: Duration) -> Self {
        Shards {
            count,
            operator_namespace: operator_namespace.to_string(),
            settle,
            started: Instant::now(),
            state: Mutex::default(),
            apps: OnceLock::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        super::lock(&self.state)
    }

    /// The number of shards.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The Lease loop's view of the shard Leases (in shard order).
    pub fn observe_leases(&self, views: &[LeaseView]) {
        let mut state = self.lock();
        let ids = |f: fn(&LeaseView) -> bool| -> BTreeSet<u32> {
            (0..self.count)
                .zip(views)
                .filter(|(_, v)| f(v))
                .map(|(i, _)| i)
                .collect()
        };
        state.live = ids(|v| v.live);
        state.mine = ids(|v| v.held);
        state.until = (0..self.count)
            .zip(views)
            .filter_map(|(i, v)| Some((i, v.until?)))
            .collect();
        self.recompute(&mut state);
    }

    /// The Cluster objects, after every change of the watch.
    fn observe_clusters(&self, clusters: Vec<KnownCluster>) {
        let mut state = self.lock();
        if !state.synced || state.clusters != clusters {
            state.synced = true;
            state.clusters = clusters;
            // A Cluster added or removed changes where destinations resolve (an unknown name that
            // went with `in-cluster` now names a Cluster): re-key before deciding whom to wake.
            let keys: Vec<(String, String)> = state
                .bindings
                .iter()
                .map(|(id, b)| (id.clone(), self.key_of(&state, &b.namespace, &b.destination)))
                .collect();
            for (id, key) in keys {
                if let Some(b) = state.bindings.get_mut(&id) {
                    b.key = key;
                }
            }
            self.recompute(&mut state);
        }
    }

    fn recompute(&self, state: &mut State) {
        let keys: Vec<String> = std::iter::once(IN_CLUSTER_NAME.to_string())
            .chain(state.clusters.iter().map(|c| format!("{}/{}", c.namespace, c.name)))
            .filter(|_| state.synced)
            .collect();
        let seen = Observation {
            live: &state.live,
            mine: &state.mine,
            keys: &keys,
            now_ms: self.started.elapsed().as_millis() as u64,
            settle_ms: self.settle.as_millis() as u64,
        };
        let next = state.handoff.observe(&seen, LoadBound::default());
        if next.effective != state.handoff.effective || next.pending.len() != state.handoff.pending.len() {
            tracing::info!(
                shards = ?state.mine,
                live = ?state.live,
                known = keys.len(),
                clusters = ?next.effective,
                waiting = next.pending.len(),
                "shard ownership changed"
            );
        }
        let lost: BTreeSet<String> = state.handoff.effective.difference(&next.effective).cloned().collect();
        state.handoff = next;
        wake(state, &lost);
    }

    /// Sends to `trigger` every Application to reconcile because its cluster changed hands here
    /// (see [`wake`]).
    pub fn wake_into(&self, trigger: UnboundedSender<ObjectRef<Application>>) {
        self.lock().wake = Some(trigger);
    }

    /// The cluster key of a destination, by the rules the destination resolver follows
    /// ([`ClusterClients::resolve`](crate::cluster::ClusterClients::resolve)) applied to the watched
    /// Clusters. A destination that cannot resolve (invalid, unknown, or a server several Clusters
    /// of one namespace share) belongs to `in-cluster`, whose owner reports its error.
    fn key_of(&self, state: &State, app_namespace: &str, destination: &ApplicationDestination) -> String {
        let namespaces = search_namespaces(app_namespace, &self.operator_namespace);
        let in_ns = |ns: &str, matching: &dyn Fn(&KnownCluster) -> bool| -> Vec<&KnownCluster> {
            state
                .clusters
                .iter()
                .filter(|c| c.namespace == ns && matching(c))
                .collect()
        };
        let found = match destination_target(destination) {
            Ok(DestinationTarget::Server(server)) => namespaces
                .into_iter()
                .map(|ns| in_ns(ns, &|c| same_server(&c.server, server)))
                .find(|matches| !matches.is_empty())
                .and_then(|matches| (matches.len() == 1).then(|| matches[0])),
            Ok(DestinationTarget::Name(name)) => namespaces
                .into_iter()
                .find_map(|ns| in_ns(ns, &|c| c.name == name).first().copied()),
            Ok(DestinationTarget::InCluster) | Err(_) => None,
        };
        found.map_or_else(
            || IN_CLUSTER_NAME.to_string(),
            |c| format!("{}/{}", c.namespace, c.name),
        )
    }

    /// Whether this replica reconciles `app` now; remembers the Application's cluster for the
    /// write gate.
    pub fn admit(&self, app: &Application) -> bool {
        let mut state = self.lock();
        let namespace = app.namespace().unwrap_or_default();
        let id = format!("{namespace}/{}", app.name_any());
        let key = self.key_of(&state, &namespace, &app.spec.destination);
        let admitted = writable(&state, &key);
        if admitted {
            state.waiting.remove(&id);
        } else {
            state.waiting.insert(id.clone());
        }
        let destination = app.spec.destination.clone();
        state.bindings.insert(
            id,
            Binding {
                namespace,
                destination,
                key,
            },
        );
        admitted
    }

    /// Decides Application writes on `store`'s Applications (the Application controller's).
    pub fn follow_applications(&self, store: Store<Application>) {
        let _ = self.apps.set(store);
    }

    /// Whether this replica may write for Application `namespace/name`: by its destination as the
    /// store has it now (as last admitted when the store does not know it). A reconcile still under
    /// way after the destination was edited to another replica's cluster thus writes no more of
    /// its status, while that replica reconciles the new spec.
    pub fn owns_application(&self, namespace: &str, name: &str) -> bool {
        // Read the store before taking our lock (never both locks at once).
        let current = self
            .apps
            .get()
            .and_then(|s| s.get(&ObjectRef::new(name).within(namespace)));
        let state = self.lock();
        let key = match current {
            Some(app) => Some(self.key_of(&state, namespace, &app.spec.destination)),
            None => state
                .bindings
                .get(&format!("{namespace}/{name}"))
                .map(|b| b.key.clone()),
        };
        key.is_some_and(|key| writable(&state, &key))
    }

    /// Forgets a deleted Application.
    pub fn forget(&self, namespace: &str, name: &str) {
        let mut state = self.lock();
        let id = format!("{namespace}/{name}");
        state.bindings.remove(&id);
        state.waiting.remove(&id);
    }

    /// The clusters this replica writes for now.
    pub fn effective(&self) -> BTreeSet<String> {
        self.lock().handoff.effective.clone()
    }

    /// The shards this replica holds.
    pub fn held(&self) -> BTreeSet<u32> {
        self.lock().mine.clone()
    }
}

/// Wakes the Applications refused earlier whose cluster is writable here now (they start at once,
/// not at a periodic re-check), and those whose cluster this replica just `lost` (their next
/// reconcile is refused, and lets go of what this replica remembered of them).
fn wake(state: &mut State, lost: &BTreeSet<String>) {
    let Some(trigger) = state.wake.clone() else { return };
    let arrived: Vec<String> = state
        .waiting
        .iter()
        .filter(|id| state.bindings.get(*id).is_some_and(|b| writable(state, &b.key)))
        .cloned()
        .collect();
    let left = state
        .bindings
        .iter()
        .filter(|(id, b)| lost.contains(&b.key) && !state.waiting.contains(*id))
        .map(|(id, _)| id.clone());
    let woken: Vec<String> = arrived.iter().cloned().chain(left).collect();
    for id in &arrived {
        state.waiting.remove(id);
    }
    for id in woken {
        if let Some((ns, name)) = id.split_once('/') {
            let _ = trigger.send(ObjectRef::new(name).within(ns));
        }
    }
}

/// Whether cluster `key` is this replica's now: effective, and the term on its shard not over. The
/// time is checked here, at the write, rather than only after each Lease round: a round that hangs
/// in a request must not keep the gate open past the renew deadline, after which the Lease may
/// expire and a peer take the cluster at once.
fn writable(state: &State, key: &str) -> bool {
    state.handoff.effective.contains(key)
        && state
            .handoff
            .assignment
            .get(key)
            .and_then(|shard| state.until.get(shard))
            .is_some_and(|until| Instant::now() < *until)
}

/// `namespace/name` of the Application a request path is about, when it is one
/// (`/apis/capstan.dev/<version>/namespaces/<ns>/applications/<name>[/<subresource>]`).
fn application_of(path: &str) -> Option<(&str, &str)> {
    let rest = path.strip_prefix("/apis/capstan.dev/")?;
    let mut parts = rest.split('/');
    let (_version, ns_word, ns, plural, name) = (
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
        parts.next()?,
    );
    (ns_word == "namespaces" && plural == "applications" && !name.is_empty()).then_some((ns, name))
}

impl WriteGate for Shards {
    fn allows(&self, scope: &WriteScope, path: &str) -> bool {
        match scope {
            WriteScope::Cluster(key) => writable(&self.lock(), key),
            WriteScope::Applications => match application_of(path) {
                Some((ns, name)) => self.owns_application(ns, name),
                // Events (checked per Application before they are sent) and nothing else.
                None => {
                    let state = self.lock();
                    state.handoff.effective.iter().any(|key| writable(&state, key))
                }
            },
            WriteScope::Operator => true,
        }
    }
}

/// The shard Leases' settings: `template`'s namespace, identity and timing, one name per shard.
pub fn leases(template: &LeaseSettings, count: u32) -> Vec<LeaseSettings> {
    (0..count)
        .map(|i| LeaseSettings {
            name: shard::lease_name(i),
            ..template.clone()
        })
        .collect()
}

/// Runs the shard Lease loop and the Cluster watch until `shutdown`, keeping `shards` current and
/// the gauges `capstan_shards_held` and `capstan_shard_clusters` with it (after every Lease round).
pub async fn run(
    client: Client,
    shards: Arc<Shards>,
    template: LeaseSettings,
    watch_scope: WatchScope,
    metrics: Metrics,
    shutdown: Shutdown,
) {
    let watch = tokio::spawn(watch_clusters(client.clone(), watch_scope, Arc::clone(&shards)));
    let observer = Arc::clone(&shards);
    let publish = move |views: &[LeaseView]| {
        observer.observe_leases(views);
        metrics.shards_held.set(views.iter().filter(|v| v.held).count() as i64);
        metrics.shard_clusters.set(observer.effective().len() as i64);
    };
    let leases = leases(&template, shards.count);
    leader::run_set(client, leases, 1, publish, None, shutdown).await;
    watch.abort();
}

/// Feeds the Cluster objects (where this installation watches, `--watch-namespaces`) to `shards`
/// once the first list is complete and after every change since.
async fn watch_clusters(client: Client, watch_scope: WatchScope, shards: Arc<Shards>) {
    let (reader, writer) = reflector::store::<Cluster>();
    let stream = scope::watch::<Cluster>(&client, &watch_scope, watcher::Config::default())
        .default_backoff()
        // Every event, `InitDone` included: the store shows a (re)list only once it is complete.
        .reflect(writer);
    let mut stream = std::pin::pin!(stream);
    let mut synced = false;
    while let Some(event) = stream.next().await {
        // Never `touched_objects()`: it drops `InitDone`, after which alone the store holds a list.
        synced |= matches!(event, Ok(watcher::Event::InitDone));
        if !synced {
            continue;
        }
        let mut clusters: Vec<KnownCluster> = reader
            .state()
            .iter()
            .map(|c| KnownCluster {
                namespace: c.namespace().unwrap_or_default(),
                name: c.name_any(),
                server: c.spec.server.clone(),
            })
            .collect();
        clusters.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        shards.observe_clusters(clusters);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cluster(ns: &str, name: &str, server: &str) -> KnownCluster {
        KnownCluster {
            namespace: ns.into(),
            name: name.into(),
            server: server.into(),
        }
    }

    fn dest(server: Option<&str>, name: Option<&str>) -> ApplicationDestination {
        ApplicationDestination {
            server: server.map(Into::into),
            name: name.map(Into::into),
            ..Default::default()
        }
    }

    fn view(name: u32, held: bool, live: bool) -> LeaseView {
        LeaseView {
            name: shard::lease_name(name),
            held,
            live,
            until: held.then(|| Instant::now() + Duration::from_secs(3600)),
        }
    }

    #[test]
    fn destinations_map_to_cluster_keys_as_they_resolve() {
        let shards = Shards::new(3, "capstan-system", Duration::ZERO);
        let mut state = State {
            clusters: vec![
                cluster("capstan-system", "east", "https://east:6443"),
                cluster("team", "east", "https://team-east:6443/"),
            ],
            ..State::default()
        };
        let key = |d| shards.key_of(&state, "team", &d);
        assert_eq!(key(dest(Some("https://kubernetes.default.svc/"), None)), "in-cluster");
        assert_eq!(key(dest(None, Some("in-cluster"))), "in-cluster");
        assert_eq!(
            key(dest(None, Some("east"))),
            "team/east",
            "the Application's namespace first"
        );
        assert_eq!(key(dest(Some("https://east:6443"), None)), "capstan-system/east");
        assert_eq!(key(dest(Some("https://team-east:6443"), None)), "team/east");
        assert_eq!(
            key(dest(None, Some("nowhere"))),
            "in-cluster",
            "unknown: the in-cluster shard"
        );
        state.clusters.clear();
        assert_eq!(shards.key_of(&state, "team", &dest(None, Some("east"))), "in-cluster");
    }

    #[test]
    fn a_destination_the_resolver_refuses_belongs_to_in_cluster() {
        let shards = Shards::new(3, "capstan-system", Duration::ZERO);
        // Four names for one API server (as several Clusters may be).
        let state = State {
            clusters: ["east", "west"]
                .iter()
                .map(|n| cluster("capstan-system", n, "https://shared:6443"))
                .collect(),
            ..State::default()
        };
        let key = |d| shards.key_of(&state, "team", &d);
        assert_eq!(
            key(dest(None, Some("west"))),
            "capstan-system/west",
            "by name: that one"
        );
        assert_eq!(
            key(dest(Some("https://shared:6443"), None)),
            "in-cluster",
            "by a server two Clusters share: ambiguous, an error"
        );
        assert_eq!(
            key(dest(Some("https://shared:6443"), Some("west"))),
            "in-cluster",
            "both server and name: an error, not the server's Cluster"
        );
        assert_eq!(key(dest(None, None)), "in-cluster");
    }

    #[test]
    fn the_gate_closes_at_the_end_of_the_term_without_another_lease_round() {
        let shards = Shards::new(1, "capstan-system", Duration::ZERO);
        shards.observe_clusters(Vec::new());
        let cm = "/api/v1/namespaces/ns/configmaps/x";
        let in_cluster = WriteScope::Cluster("in-cluster".into());
        shards.observe_leases(&[view(0, true, true)]);
        assert!(shards.allows(&in_cluster, cm));
        // The last round still said "held", but its term has ended since (the next round hangs).
        let mut ended = view(0, true, true);
        ended.until = Instant::now().checked_sub(Duration::from_millis(1));
        shards.observe_leases(&[ended]);
        assert!(!shards.allows(&in_cluster, cm));
        assert!(!shards.allows(&WriteScope::Applications, "/api/v1/namespaces/ns/events"));
    }

    #[test]
    fn the_gate_follows_the_shards_held() {
        let shards = Shards::new(2, "capstan-system", Duration::ZERO);
        shards.observe_clusters(vec![
            cluster("capstan-system", "a", "https://a"),
            cluster("capstan-system", "b", "https://b"),
            cluster("capstan-system", "c", "https://c"),
        ]);
        let cm = "/api/v1/namespaces/ns/configmaps/x";
        // Nothing held: nothing passes.
        shards.observe_leases(&[view(0, false, false), view(1, false, false)]);
        assert!(!shards.allows(&WriteScope::Cluster("in-cluster".into()), cm));
        // Both shards held (settle 0): every cluster passes, the operator scope is not ours to decide.
        shards.observe_leases(&[view(0, true, true), view(1, true, true)]);
        assert_eq!(shards.effective().len(), 4);
        assert!(shards.allows(&WriteScope::Cluster("capstan-system/b".into()), cm));
        assert!(shards.allows(&WriteScope::Operator, cm));
        // Shard 1 goes to another replica: only shard 0's clusters still pass.
        shards.observe_leases(&[view(0, true, true), view(1, false, true)]);
        let mine = shards.effective();
        assert!(!mine.is_empty() && mine.len() < 4);
        for key in ["in-cluster", "capstan-system/a", "capstan-system/b", "capstan-system/c"] {
            assert_eq!(
                shards.allows(&WriteScope::Cluster(key.into()), cm),
                mine.contains(key),
                "{key}"
            );
        }
    }

    #[test]
    fn application_writes_follow_the_applications_cluster() {
        let shards = Shards::new(1, "capstan-system", Duration::ZERO);
        shards.observe_leases(&[view(0, true, true)]);
        assert!(shards.effective().is_empty(), "nothing before the first Cluster list");
        shards.observe_clusters(Vec::new());
        let status = "/apis/capstan.dev/v1alpha1/namespaces/team/applications/web/status";
        assert_eq!(application_of(status), Some(("team", "web")));
        assert_eq!(
            application_of("/apis/capstan.dev/v1alpha1/namespaces/team/applications"),
            None
        );
        assert_eq!(application_of("/api/v1/namespaces/team/configmaps/web"), None);
        assert!(!shards.allows(&WriteScope::Applications, status), "not admitted yet");
        let app: Application = serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": "web", "namespace": "team"},
            "spec": {"destination": {"name": "in-cluster"}, "source": {"repoURL": "https://g/r", "path": "."}}
        }))
        .unwrap();
        assert!(shards.admit(&app));
        assert!(shards.allows(&WriteScope::Applications, status));
        shards.observe_leases(&[view(0, false, false)]);
        assert!(!shards.allows(&WriteScope::Applications, status));
        assert!(!shards.admit(&app));
    }

    fn app(ns: &str, name: &str, cluster: &str) -> Application {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "capstan.dev/v1alpha1", "kind": "Application",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"destination": {"name": cluster}, "source": {"repoURL": "https://g/r", "path": "."}}
        }))
        .unwrap()
    }

    /// Two shards, Clusters `a`..`f` in the operator namespace.
    fn six_clusters_two_shards() -> (Shards, [&'static str; 6]) {
        let shards = Shards::new(2, "capstan-system", Duration::ZERO);
        let names = ["a", "b", "c", "d", "e", "f"];
        shards.observe_clusters(
            names
                .iter()
                .map(|n| cluster("capstan-system", n, &format!("https://{n}")))
                .collect(),
        );
        (shards, names)
    }

    #[test]
    fn applications_are_woken_when_their_cluster_changes_hands_not_polled() {
        let (shards, names) = six_clusters_two_shards();
        let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
        shards.wake_into(tx);
        // We hold shard 0; another replica holds shard 1.
        shards.observe_leases(&[view(0, true, true), view(1, false, true)]);
        let apps: Vec<Application> = names.iter().map(|n| app("capstan-system", n, n)).collect();
        let (ours, theirs): (Vec<&Application>, Vec<&Application>) = apps.iter().partition(|a| shards.admit(a));
        assert!(!ours.is_empty() && !theirs.is_empty(), "both shards have clusters");
        assert!(woken.try_recv().is_err(), "nothing to wake yet");
        // The other replica dies: shard 1's clusters come over at once, and exactly its refused
        // Applications are woken (no periodic re-check of the others).
        shards.observe_leases(&[view(0, true, true), view(1, false, false)]);
        let mut arrived = Vec::new();
        while let Ok(r) = woken.try_recv() {
            arrived.push(r.name);
        }
        arrived.sort();
        let mut expected: Vec<String> = theirs.iter().map(|a| a.name_any()).collect();
        expected.sort();
        assert_eq!(arrived, expected);
        assert!(theirs.iter().all(|a| shards.admit(a)));
        // Then we lose shard 0 (another replica took it back): every Application is woken, to be
        // refused and let go of.
        shards.observe_leases(&[view(0, false, true), view(1, false, true)]);
        let mut left = 0;
        while woken.try_recv().is_ok() {
            left += 1;
        }
        assert_eq!(left, names.len());
        assert!(apps.iter().all(|a| !shards.admit(a)));
        // A refused Application is not woken again while nothing changes.
        shards.observe_leases(&[view(0, false, true), view(1, false, true)]);
        assert!(woken.try_recv().is_err());
    }

    #[test]
    fn application_writes_follow_the_destination_as_it_is_now() {
        let (shards, names) = six_clusters_two_shards();
        shards.observe_leases(&[view(0, true, true), view(1, false, true)]);
        let (mine, theirs) = {
            let (ours, other): (Vec<&str>, Vec<&str>) = names
                .iter()
                .partition(|n| shards.effective().contains(&format!("capstan-system/{n}")));
            (ours[0], other[0])
        };
        let (reader, mut writer) = reflector::store::<Application>();
        shards.follow_applications(reader);
        let web = app("capstan-system", "web", mine);
        writer.apply_watcher_event(&watcher::Event::Apply(web.clone()));
        assert!(shards.admit(&web));
        let status = "/apis/capstan.dev/v1alpha1/namespaces/capstan-system/applications/web/status";
        assert!(shards.allows(&WriteScope::Applications, status));
        // The destination is edited to the other replica's cluster while our reconcile runs.
        writer.apply_watcher_event(&watcher::Event::Apply(app("capstan-system", "web", theirs)));
        assert!(!shards.allows(&WriteScope::Applications, status));
    }

    #[test]
    fn an_application_waiting_on_an_unknown_cluster_is_woken_when_that_cluster_appears_here() {
        let live: BTreeSet<u32> = [0, 1].into();
        let shard_of = |keys: &[&str], key: &str| shard::assign(&live, keys, LoadBound::default())[key];
        // A name whose Cluster lands on the shard that does not have `in-cluster`.
        let theirs = shard_of(&["in-cluster"], "in-cluster");
        let name = (0..100)
            .map(|i| format!("late-{i}"))
            .find(|n| {
                let key = format!("capstan-system/{n}");
                shard_of(&["in-cluster", key.as_str()], &key) != theirs
            })
            .expect("some name lands on the other shard");
        let shards = Shards::new(2, "capstan-system", Duration::ZERO);
        let (tx, mut woken) = tokio::sync::mpsc::unbounded_channel();
        shards.wake_into(tx);
        shards.observe_clusters(Vec::new());
        let mut views = [view(0, false, true), view(1, false, true)];
        views[1 - theirs as usize] = view(1 - theirs, true, true);
        shards.observe_leases(&views);
        // Its Cluster does not exist yet: it goes with `in-cluster`, the other replica's.
        let late = app("capstan-system", "late", &name);
        assert!(!shards.admit(&late));
        assert!(woken.try_recv().is_err());
        // The Cluster appears, on our shard: the Application is woken and admitted.
        shards.observe_clusters(vec![cluster("capstan-system", &name, "https://late")]);
        assert_eq!(woken.try_recv().map(|r| r.name).ok().as_deref(), Some("late"));
        assert!(shards.admit(&late));
    }
}
