//! Leader election on a Lease: one holder among the replicas, reusable for any Lease (the
//! controllers' `capstan-controller`, the reporter's `capstan-reporter`, a shard's).
//!
//! A plain Lease loop with client-go's timing: get, then create or replace with the read
//! `resourceVersion`, so two replicas never both win a term. The holder renews every `retry`; a
//! standby looks every `retry` and takes over a Lease not renewed for `duration`. A holder that has
//! not renewed for `renew_deadline` stops leading on its own, before anyone else can take the Lease
//! (the deadline is shorter than the duration), so two terms never overlap. "Stops leading" is
//! immediate: the [`WriteFence`] shared with every Kubernetes client closes at that moment, so a
//! sync in flight cannot write one more object (see docs/user-guide.md, "High availability").

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use super::Shutdown;
use crate::cluster::requests::WriteFence;

/// The controllers' Lease.
pub const CONTROLLER_LEASE: &str = "capstan-controller";

/// Timing and identity of one election.
#[derive(Clone, Debug)]
pub struct LeaseSettings {
    /// Lease name.
    pub name: String,
    /// Lease namespace (the operator namespace).
    pub namespace: String,
    /// This replica's `holderIdentity` (see [`identity`]).
    pub identity: String,
    /// How long a Lease holds without renewal (`--leader-elect-lease-duration`, 15 s).
    pub duration: Duration,
    /// A holder that could not renew for this long stops leading (`--leader-elect-renew-deadline`,
    /// 10 s); shorter than `duration` so the old term ends before a new one can start.
    pub renew_deadline: Duration,
    /// How often the holder renews and a standby looks (`--leader-elect-retry-period`, 2 s).
    pub retry: Duration,
}

impl LeaseSettings {
    /// The default timing (15 s / 10 s / 2 s) for Lease `name`.
    pub fn new(name: &str, namespace: &str, identity: String) -> Self {
        LeaseSettings {
            name: name.to_string(),
            namespace: namespace.to_string(),
            identity,
            duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry: Duration::from_secs(2),
        }
    }

    /// Refuses timing under which two terms could overlap or a holder could never renew in time.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry.is_zero() || self.renew_deadline <= self.retry {
            return Err("the renew deadline must be longer than the retry period".into());
        }
        if self.duration <= self.renew_deadline {
            return Err("the lease duration must be longer than the renew deadline".into());
        }
        Ok(())
    }
}

/// `POD_NAME` (or the hostname, or `fallback`) plus a random suffix: two processes on one host, or
/// a restarted pod with the same name, never share an identity.
pub fn identity(fallback: &str) -> String {
    let host = std::env::var("POD_NAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| fallback.into());
    format!("{host}-{:04x}", super::random_u64() & 0xffff)
}

/// What to do with the Lease as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    /// Nobody holds it (or the holder let it expire): take it, a new term.
    Acquire,
    /// We hold it: renew.
    Renew,
    /// Someone else holds it.
    Standby,
}

/// Decides from the Lease's holder and renew time (`default_duration` when the Lease names none).
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp, default_duration: Duration) -> LeaseAction {
    let Some(spec) = spec else { return LeaseAction::Acquire };
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    match holder {
        None => LeaseAction::Acquire,
        Some(h) if h == me => LeaseAction::Renew,
        Some(_) => {
            let duration_ms = spec
                .lease_duration_seconds
                .map_or(default_duration.as_millis() as i64, |s| i64::from(s) * 1000);
            let renewed_ms = spec.renew_time.as_ref().map(|t| t.0.as_millisecond()).unwrap_or(0);
            if renewed_ms + duration_ms < now.as_millisecond() {
                LeaseAction::Acquire
            } else {
                LeaseAction::Standby
            }
        }
    }
}

/// Why an election cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// RBAC does not allow a verb the election needs.
    #[error(
        "leader election needs {verb} on leases.coordination.k8s.io {name:?} in namespace {namespace:?}, \
         and the API server answers that this identity may not; grant it (the chart's Role does) or run \
         without --leader-elect"
    )]
    Forbidden {
        verb: &'static str,
        namespace: String,
        name: String,
    },
    /// The access check itself failed.
    #[error("checking access to Lease {name:?}: {source}")]
    Check { name: String, source: kube::Error },
}

/// Checks, before the first term, that this identity may get, create and update the Lease, so a
/// missing Role is a clear error at start rather than a replica that silently never leads.
pub async fn check_access(client: &Client, settings: &LeaseSettings) -> Result<(), LeaderError> {
    let reviews: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    for verb in ["get", "create", "update"] {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    group: Some("coordination.k8s.io".into()),
                    resource: Some("leases".into()),
                    verb: Some(verb.into()),
                    namespace: Some(settings.namespace.clone()),
                    // `create` cannot be restricted by name in RBAC: ask without one.
                    name: (verb != "create").then(|| settings.name.clone()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(|source| LeaderError::Check {
                name: settings.name.clone(),
                source,
            })?;
        if !answer.status.is_some_and(|s| s.allowed) {
            return Err(LeaderError::Forbidden {
                verb,
                namespace: settings.namespace.clone(),
                name: settings.name.clone(),
            });
        }
    }
    Ok(())
}

/// Keeps `leading` (and `fence`, when given) up to date until `shutdown`; releases the Lease when
/// it stops leading on purpose (`step_down` fires, or shutdown). A standby that was told to step down
/// waits one lease duration before it competes again.
pub async fn run(
    client: Client,
    settings: LeaseSettings,
    leading: watch::Sender<bool>,
    fence: Option<WriteFence>,
    step_down: Option<watch::Receiver<u64>>,
    shutdown: Shutdown,
) {
    let name = settings.name.clone();
    let identity = settings.identity.clone();
    let publish = move |views: &[LeaseView]| {
        let is_leader = views.first().is_some_and(|v| v.held);
        if let Some(f) = &fence {
            // Open only until the renew deadline: if the next round hangs, the fence closes on time.
            f.open_until(views.first().and_then(|v| v.until));
        }
        if leading.send_if_modified(|l| std::mem::replace(l, is_leader) != is_leader) {
            tracing::info!(lease = name, identity, "leading: {is_leader}");
        }
    };
    run_set(client, vec![settings], 1, publish, step_down, shutdown).await;
}

/// One Lease of a set as this replica last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseView {
    /// The Lease's name.
    pub name: String,
    /// This replica holds it (renewed within the renew deadline): it may act for it.
    pub held: bool,
    /// Someone (this replica included) holds it and it had not expired when last read.
    pub live: bool,
    /// While held: the end of this replica's term (last renewal asked + renew deadline). Whoever acts
    /// for the Lease checks it at the moment it acts, so a Lease loop stuck in a request cannot leave
    /// the replica acting past its term.
    pub until: Option<Instant>,
}

/// A Lease of a set and this replica's term on it.
struct Slot {
    settings: LeaseSettings,
    /// When the last successful acquire or renew was asked (`None`: not held).
    last_renew: Option<Instant>,
    live: bool,
}

impl Slot {
    fn held(&self) -> bool {
        self.last_renew
            .is_some_and(|t| t.elapsed() < self.settings.renew_deadline)
    }

    fn view(&self) -> LeaseView {
        LeaseView {
            name: self.settings.name.clone(),
            held: self.held(),
            live: self.live || self.held(),
            until: self
                .last_renew
                .filter(|_| self.held())
                .map(|t| t + self.settings.renew_deadline),
        }
    }
}

/// Competes for the Leases of `leases` (same namespace, identity and timing; shards use one per
/// shard), holding at most `max_held` of them, until `shutdown`: every round renews those held,
/// reads the others (a free or expired one is taken while fewer than `max_held` are held) and
/// hands every Lease's view to `publish` — at the latest when a held Lease reaches its renew
/// deadline, so that a replica whose renewals hang stops acting in time. On `step_down` every held
/// Lease is released and the replica stays out for one lease duration; on shutdown held Leases
/// are released.
pub async fn run_set(
    client: Client,
    leases: Vec<LeaseSettings>,
    max_held: usize,
    mut publish: impl FnMut(&[LeaseView]) + Send,
    mut step_down: Option<watch::Receiver<u64>>,
    shutdown: Shutdown,
) {
    let Some(first) = leases.first().cloned() else { return };
    let api: Api<Lease> = Api::namespaced(client, &first.namespace);
    let mut slots: Vec<Slot> = leases
        .into_iter()
        .map(|settings| Slot {
            settings,
            last_renew: None,
            live: false,
        })
        .collect();
    let mut pause_until: Option<Instant> = None;
    loop {
        if pause_until.is_none_or(|p| Instant::now() >= p) {
            campaign(&api, &mut slots, max_held).await;
        }
        publish(&slots.iter().map(Slot::view).collect::<Vec<_>>());
        let wait = slots
            .iter()
            .map(|s| next_wait(&s.settings, s.last_renew))
            .min()
            .unwrap_or(first.retry);
        let stepped = async {
            match step_down.as_mut() {
                Some(rx) => rx.changed().await.is_ok(),
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(wait) => {}
            changed = stepped => {
                if !changed { break; }
                tracing::warn!(lease = first.name, "stepping down");
                // Stop acting first, then let go: no write may follow the release.
                for slot in slots.iter_mut() {
                    slot.last_renew = None;
                }
                publish(&slots.iter().map(Slot::view).collect::<Vec<_>>());
                for slot in &slots {
                    release(&api, &slot.settings).await;
                }
                pause_until = Some(Instant::now() + first.duration);
            }
        }
    }
    let held: Vec<usize> = (0..slots.len()).filter(|i| slots[*i].held()).collect();
    for s in &mut slots {
        s.last_renew = None;
    }
    publish(&slots.iter().map(Slot::view).collect::<Vec<_>>());
    for i in held {
        release(&api, &slots[i].settings).await;
    }
}

/// One round over the set: renew what is held (first, so its renewal never waits behind reads of
/// the others), take what is free while under `max_held`, give back what is over it, and note
/// which Leases someone else holds. Every round is bounded by [`request_timeout`].
async fn campaign(api: &Api<Lease>, slots: &mut [Slot], max_held: usize) {
    let mut holding = slots.iter().filter(|s| s.held()).count();
    let mut order: Vec<usize> = (0..slots.len()).collect();
    order.sort_by_key(|i| !slots[*i].held());
    for i in order {
        let slot = &mut slots[i];
        let was_held = slot.held();
        // A held Lease is kept while the count is within `max_held`; the excess is released.
        let may_take = if was_held {
            holding <= max_held
        } else {
            holding < max_held
        };
        // The term is counted from before the request: the server's renewTime is later.
        let asked = Instant::now();
        let limit = request_timeout(&slot.settings);
        let outcome = match tokio::time::timeout(limit, round(api, &slot.settings, may_take)).await {
            Ok(outcome) => outcome.map_err(|e| e.to_string()),
            Err(_) => Err(format!("no answer within {limit:?}")),
        };
        match outcome {
            Ok(seen) => {
                slot.live = seen.live;
                slot.last_renew = seen.held.then_some(asked);
                if seen.held && !was_held {
                    holding += 1;
                } else if !seen.held && was_held {
                    holding -= 1;
                }
            }
            Err(e) => tracing::warn!(lease = slot.settings.name, "lease request failed: {e}"),
        }
    }
}

/// The longest one Lease's round (a get, then a create or replace) may take: half the renew
/// deadline, so a hung request still leaves time to retry before the term ends.
fn request_timeout(settings: &LeaseSettings) -> Duration {
    (settings.renew_deadline / 2).max(Duration::from_millis(100))
}

/// Sleep until the next round, but never past the renew deadline: a leader whose renewals hang
/// must still notice, at the deadline, that it no longer leads.
fn next_wait(settings: &LeaseSettings, last_renew: Option<Instant>) -> Duration {
    match last_renew {
        Some(t) => settings
            .retry
            .min(settings.renew_deadline.saturating_sub(t.elapsed()))
            .max(Duration::from_millis(10)),
        None => settings.retry,
    }
}

/// A Lease after one round.
struct Seen {
    /// This replica holds it.
    held: bool,
    /// Someone holds it (not expired).
    live: bool,
}

/// One get, then (when the Lease is ours or free and `may_take`) create or replace.
async fn round(api: &Api<Lease>, settings: &LeaseSettings, may_take: bool) -> Result<Seen, kube::Error> {
    let me = settings.identity.as_str();
    let lost = Seen {
        held: false,
        live: true,
    };
    let Some(current) = api.get_opt(&settings.name).await? else {
        if !may_take {
            return Ok(Seen {
                held: false,
                live: false,
            });
        }
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(settings.name.clone()),
                ..Default::default()
            },
            spec: Some(held_spec(settings, None, 0)),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Seen { held: true, live: true }),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(lost),
            Err(e) => Err(e),
        };
    };
    let action = decide(current.spec.as_ref(), me, Timestamp::now(), settings.duration);
    let not_ours = Seen {
        held: false,
        live: false,
    };
    match action {
        LeaseAction::Standby => return Ok(lost),
        LeaseAction::Acquire if !may_take => return Ok(not_ours),
        LeaseAction::Renew if !may_take => {
            // Ours by the Lease but over our share (our own renewals lapsed and we took another
            // meanwhile): give it back rather than starve another replica.
            return match give_back(api, settings, current).await {
                Ok(()) => Ok(not_ours),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(lost),
                Err(e) => Err(e),
            };
        }
        _ => {}
    }
    let old = current.spec.clone().unwrap_or_default();
    let transitions = old.lease_transitions.unwrap_or(0) + i32::from(action == LeaseAction::Acquire);
    let acquired = (action == LeaseAction::Renew).then_some(old.acquire_time).flatten();
    let mut next = current;
    next.spec = Some(held_spec(settings, acquired, transitions));
    match api.replace(&settings.name, &PostParams::default(), &next).await {
        Ok(_) => Ok(Seen { held: true, live: true }),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(lost),
        Err(e) => Err(e),
    }
}

fn held_spec(settings: &LeaseSettings, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(settings.identity.clone()),
        lease_duration_seconds: Some(settings.duration.as_secs().max(1) as i32),
        acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Gives the Lease up (holder cleared) so a standby takes over at once.
async fn release(api: &Api<Lease>, settings: &LeaseSettings) {
    let Ok(Some(lease)) = api.get_opt(&settings.name).await else {
        return;
    };
    let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.as_deref());
    if holder != Some(settings.identity.as_str()) {
        return;
    }
    if let Err(e) = give_back(api, settings, lease).await {
        tracing::warn!(lease = settings.name, "releasing the lease failed: {e}");
    }
}

/// Clears the holder of `lease` as read (its `resourceVersion` guards against a newer term).
async fn give_back(api: &Api<Lease>, settings: &LeaseSettings, mut lease: Lease) -> Result<(), kube::Error> {
    if let Some(spec) = lease.spec.as_mut() {
        spec.holder_identity = None;
    }
    api.replace(&settings.name, &PostParams::default(), &lease)
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_ms_ago: i64) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                Timestamp::from_millisecond(now.as_millisecond() - renewed_ms_ago).unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn lease_decisions() {
        let now = Timestamp::now();
        let d = Duration::from_secs(15);
        assert_eq!(decide(None, "me", now, d), LeaseAction::Acquire);
        assert_eq!(decide(Some(&spec(None, 1000)), "me", now, d), LeaseAction::Acquire);
        assert_eq!(
            decide(Some(&spec(Some("me"), 100_000)), "me", now, d),
            LeaseAction::Renew
        );
        assert_eq!(
            decide(Some(&spec(Some("other"), 3000)), "me", now, d),
            LeaseAction::Standby
        );
        assert_eq!(
            decide(Some(&spec(Some("other"), 14_500)), "me", now, d),
            LeaseAction::Standby
        );
        assert_eq!(
            decide(Some(&spec(Some("other"), 15_500)), "me", now, d),
            LeaseAction::Acquire
        );
    }

    #[test]
    fn timing_that_could_overlap_terms_is_refused() {
        let ok = LeaseSettings::new("l", "ns", "me".into());
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.renew_deadline = Duration::from_secs(15);
        assert!(bad.validate().unwrap_err().contains("lease duration"));
        let mut bad = ok.clone();
        bad.retry = Duration::from_secs(10);
        assert!(bad.validate().unwrap_err().contains("retry"));
    }

    #[test]
    fn identities_differ_per_process_start() {
        let (a, b) = (identity("x"), identity("x"));
        assert!(a.len() > 5 && b.len() > 5);
        // 1 in 65,536 chance of a clash per pair; three draws make a false failure negligible.
        assert!(a != b || identity("x") != a);
    }

    async fn dev_client(dev: &devcluster::DevCluster) -> Client {
        let kc = kube::config::Kubeconfig::from_yaml(&dev.kubeconfig_yaml()).expect("kubeconfig");
        let config = kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("config");
        Client::try_from(config).expect("client")
    }

    fn slots(n: u32, held: bool) -> Vec<Slot> {
        (0..n)
            .map(|i| Slot {
                settings: LeaseSettings::new(&format!("shard-{i}"), "default", "me".into()),
                last_renew: held.then(Instant::now),
                live: held,
            })
            .collect()
    }

    async fn create_held_by_me(api: &Api<Lease>, settings: &LeaseSettings) {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(settings.name.clone()),
                ..Default::default()
            },
            spec: Some(held_spec(settings, None, 0)),
        };
        api.create(&PostParams::default(), &lease).await.expect("create Lease");
    }

    async fn holder(api: &Api<Lease>, name: &str) -> Option<String> {
        api.get(name)
            .await
            .expect("get Lease")
            .spec
            .and_then(|s| s.holder_identity)
    }

    #[tokio::test]
    async fn a_replica_never_holds_more_than_its_share_of_a_set() {
        let dev = devcluster::start(devcluster::Config::default()).expect("devcluster");
        let api: Api<Lease> = Api::namespaced(dev_client(&dev).await, "default");
        // Our renewals lapsed (a stall): Lease 1 still names us, but our own clock says the term is
        // over, and Lease 0 is free.
        let mut lapsed = slots(2, false);
        create_held_by_me(&api, &lapsed[1].settings).await;
        campaign(&api, &mut lapsed, 1).await;
        assert!(lapsed[0].held(), "the free Lease is taken");
        assert!(!lapsed[1].held(), "the lapsed one is not renewed on top of it");
        assert_eq!(
            holder(&api, "shard-1").await,
            None,
            "but given back for another replica"
        );
        campaign(&api, &mut lapsed, 1).await;
        assert_eq!(lapsed.iter().filter(|s| s.held()).count(), 1);
        assert_eq!(holder(&api, "shard-1").await, None);

        // Two held (however it came to be), one allowed: one is released, the other renewed.
        let mut extra: Vec<Slot> = slots(2, true)
            .into_iter()
            .map(|mut s| {
                s.settings.name = format!("extra-{}", s.settings.name);
                s
            })
            .collect();
        for slot in &extra {
            create_held_by_me(&api, &slot.settings).await;
        }
        campaign(&api, &mut extra, 1).await;
        assert_eq!(extra.iter().filter(|s| s.held()).count(), 1);
        let holders = [holder(&api, "extra-shard-0").await, holder(&api, "extra-shard-1").await];
        assert_eq!(holders.iter().flatten().count(), 1, "{holders:?}");
    }

    #[tokio::test]
    async fn a_lease_request_that_never_answers_does_not_stall_the_round() {
        // A server that accepts connections and never answers (a hung API server or network path).
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let silent = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let client = Client::try_from(kube::Config::new(url.parse().expect("url"))).expect("client");
        let api: Api<Lease> = Api::namespaced(client, "default");
        let mut set = slots(2, true);
        for slot in &mut set {
            slot.settings.renew_deadline = Duration::from_millis(400);
        }
        let before: Vec<Option<Instant>> = set.iter().map(|s| s.last_renew).collect();
        let bounded = tokio::time::timeout(Duration::from_secs(60), campaign(&api, &mut set, 2)).await;
        assert!(bounded.is_ok(), "the round returned although no request was answered");
        let after: Vec<Option<Instant>> = set.iter().map(|s| s.last_renew).collect();
        assert_eq!(before, after, "nothing renewed");
        silent.abort();
    }
}
