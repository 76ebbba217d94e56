//! Leader election on Lease `capstan-reporter`: one sender among the replicas. A plain Lease loop
//! (get, then create or replace with the read `resourceVersion`, so two replicas never both win):
//! the holder renews every [`RENEW`]; a standby takes an expired Lease over; a leader that cannot
//! renew stops sending before its Lease can expire (after two thirds of the duration). Each term's
//! epoch comes from the checkpoint, not from here.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;

use super::config::LEASE_NAME;
use crate::controllers::Shutdown;

/// How long a Lease holds without renewal.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);
/// How often the leader renews.
pub const RENEW: Duration = Duration::from_secs(5);
/// How often a standby looks.
pub const RETRY: Duration = Duration::from_secs(2);

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

/// Decides from the Lease's holder and renew time.
pub fn decide(spec: Option<&LeaseSpec>, me: &str, now: Timestamp) -> LeaseAction {
    let Some(spec) = spec else { return LeaseAction::Acquire };
    let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty());
    match holder {
        None => LeaseAction::Acquire,
        Some(h) if h == me => LeaseAction::Renew,
        Some(_) => {
            let duration = spec
                .lease_duration_seconds
                .map_or(LEASE_DURATION.as_secs() as i64, i64::from);
            let renewed = spec.renew_time.as_ref().map(|t| t.0.as_second()).unwrap_or(0);
            if renewed + duration < now.as_second() {
                LeaseAction::Acquire
            } else {
                LeaseAction::Standby
            }
        }
    }
}

/// Keeps `leading` up to date until `shutdown`; releases the Lease when it stops leading on
/// purpose (`step_down` fires, or shutdown).
pub async fn run(
    client: Client,
    namespace: String,
    me: String,
    leading: watch::Sender<bool>,
    mut step_down: watch::Receiver<u64>,
    shutdown: Shutdown,
) {
    let api: Api<Lease> = Api::namespaced(client, &namespace);
    let mut last_renew: Option<Instant> = None;
    let mut pause_until: Option<Instant> = None;
    loop {
        let now = Instant::now();
        if pause_until.is_none_or(|p| now >= p) {
            match round(&api, &me).await {
                Ok(true) => last_renew = Some(Instant::now()),
                Ok(false) => last_renew = None,
                Err(e) => tracing::warn!(lease = LEASE_NAME, "lease request failed: {e}"),
            }
        }
        // A leader that could not renew stops before anyone can take over.
        let is_leader = last_renew.is_some_and(|t| t.elapsed() < LEASE_DURATION * 2 / 3);
        leading.send_if_modified(|l| std::mem::replace(l, is_leader) != is_leader);
        let wait = if is_leader { RENEW } else { RETRY };
        tokio::select! {
            _ = shutdown.wait() => break,
            _ = tokio::time::sleep(wait) => {}
            changed = step_down.changed() => {
                if changed.is_err() { break; }
                tracing::warn!("stepping down: a newer term exists at the receiver");
                leading.send_replace(false);
                release(&api, &me).await;
                last_renew = None;
                pause_until = Some(Instant::now() + LEASE_DURATION);
            }
        }
    }
    if *leading.borrow() {
        leading.send_replace(false);
        release(&api, &me).await;
    }
}

/// One get + create/replace. `Ok(true)` when we hold the Lease afterwards.
async fn round(api: &Api<Lease>, me: &str) -> Result<bool, kube::Error> {
    let current = match api.get_opt(LEASE_NAME).await? {
        Some(l) => l,
        None => {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(LEASE_NAME.into()),
                    ..Default::default()
                },
                spec: Some(held_spec(me, None, 0)),
            };
            return match api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        }
    };
    let now = Timestamp::now();
    let action = decide(current.spec.as_ref(), me, now);
    if action == LeaseAction::Standby {
        return Ok(false);
    }
    let old = current.spec.clone().unwrap_or_default();
    let transitions = old.lease_transitions.unwrap_or(0) + i32::from(action == LeaseAction::Acquire);
    let acquired = if action == LeaseAction::Renew {
        old.acquire_time.clone()
    } else {
        None
    };
    let mut next = current;
    next.spec = Some(held_spec(me, acquired, transitions));
    match api.replace(LEASE_NAME, &PostParams::default(), &next).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

fn held_spec(me: &str, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
    let now = MicroTime(Timestamp::now());
    LeaseSpec {
        holder_identity: Some(me.to_string()),
        lease_duration_seconds: Some(LEASE_DURATION.as_secs() as i32),
        acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
        renew_time: Some(now),
        lease_transitions: Some(transitions),
        ..Default::default()
    }
}

/// Gives the Lease up (holder cleared) so a standby takes over at once.
async fn release(api: &Api<Lease>, me: &str) {
    let Ok(Some(mut lease)) = api.get_opt(LEASE_NAME).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else { return };
    if spec.holder_identity.as_deref() != Some(me) {
        return;
    }
    spec.holder_identity = None;
    if let Err(e) = api.replace(LEASE_NAME, &PostParams::default(), &lease).await {
        tracing::warn!(lease = LEASE_NAME, "releasing the lease failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(holder: Option<&str>, renewed_secs_ago: i64) -> LeaseSpec {
        let now = Timestamp::now();
        LeaseSpec {
            holder_identity: holder.map(str::to_string),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(
                Timestamp::from_second(now.as_second() - renewed_secs_ago).unwrap(),
            )),
            ..Default::default()
        }
    }

    #[test]
    fn lease_decisions() {
        let now = Timestamp::now();
        assert_eq!(decide(None, "me", now), LeaseAction::Acquire);
        assert_eq!(decide(Some(&spec(None, 1)), "me", now), LeaseAction::Acquire);
        assert_eq!(decide(Some(&spec(Some("me"), 100)), "me", now), LeaseAction::Renew);
        assert_eq!(decide(Some(&spec(Some("other"), 3)), "me", now), LeaseAction::Standby);
        assert_eq!(decide(Some(&spec(Some("other"), 30)), "me", now), LeaseAction::Acquire);
    }
}
