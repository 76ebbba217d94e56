//! When each Repository polls (pure): at its own fixed phase of the poll interval.
//!
//! Requeueing every Repository `pollInterval` after its last poll keeps whatever bunching the start
//! produced: an operator that starts with 200 Repositories would poll all 200 in the same second,
//! every interval, forever. Instead each Repository owns a slot: its rank among the Repositories
//! sharing its interval, spaced evenly over the interval (200 Repositories over 60 s poll every
//! 300 ms, one at a time). Slots are on the wall clock, so they survive restarts and replicas agree
//! on them; a Repository added or removed shifts the others' slots by at most one spacing.
//!
//! After a restart a Repository whose status is settled (ready, for the current spec) waits for its
//! slot instead of polling at once ([`poll_now`]), so a restart is no herd either. The age of the last
//! listing is deliberately not consulted: a no-op poll writes no status (only a timestamp would
//! change), so `lastFetchedAt` records the last listing that changed something, not the last poll,
//! and would call every quiet Repository stale. Waiting for the slot bounds the first poll after a
//! restart to 1¼ intervals, the same bound a commit pushed just after a poll already has.

use std::time::Duration;

/// Never requeue closer than this fraction of the interval after a poll (a poll triggered by a
/// webhook just before the slot would otherwise be followed by another one right away).
const MIN_GAP_DIVISOR: u32 = 4;

/// The offset of a Repository's slot within its interval: `rank` of `total` Repositories sharing
/// the interval, spaced evenly. Pure.
pub fn slot_phase(rank: usize, total: usize, interval: Duration) -> Duration {
    let total = total.max(1) as u128;
    let rank = (rank as u128).min(total - 1);
    let ms = interval.as_millis().max(1);
    Duration::from_millis(u64::try_from(ms * rank / total).unwrap_or(u64::MAX))
}

/// The rank of `key` among `keys` (the keys of every Repository sharing its interval, `key`
/// included or not): how many sort before it. Pure.
pub fn rank<'a>(key: &str, keys: impl IntoIterator<Item = &'a str>) -> (usize, usize) {
    let (mut before, mut total, mut present) = (0usize, 0usize, false);
    for k in keys {
        total += 1;
        match k.cmp(key) {
            std::cmp::Ordering::Less => before += 1,
            std::cmp::Ordering::Equal => present = true,
            std::cmp::Ordering::Greater => {}
        }
    }
    (before, total + usize::from(!present))
}

/// The delay from `now_ms` (milliseconds since the Unix epoch) to the next slot at `phase` of
/// `interval`, at least a quarter interval away. Pure.
pub fn until_slot(phase: Duration, interval: Duration, now_ms: u128) -> Duration {
    let ms = interval.as_millis().max(1);
    let position = now_ms % ms;
    let phase = phase.as_millis() % ms;
    let mut wait = (phase + ms - position) % ms;
    if wait < ms / u128::from(MIN_GAP_DIVISOR) {
        wait += ms;
    }
    Duration::from_millis(u64::try_from(wait).unwrap_or(u64::MAX))
}

/// Whether a Repository should poll on this reconcile. It waits for its slot only on its first
/// reconcile since the process started, when its status already lists revisions for the current
/// spec (`observed` generation equals `generation`, `ready`) and no refresh was asked for. Pure.
pub fn poll_now(first: bool, forced: bool, fresh: Freshness) -> bool {
    let settled = fresh.ready && fresh.observed_generation.is_some() && fresh.observed_generation == fresh.generation;
    !(first && !forced && settled)
}

/// What the status says about the last poll, for [`poll_now`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Freshness {
    /// `Ready` is `True`.
    pub ready: bool,
    /// `status.observedGeneration`.
    pub observed_generation: Option<i64>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    /// When each of `keys` polls next, in ms since the epoch, starting at `now_ms`.
    fn next_polls(keys: &[String], now_ms: u128) -> Vec<u128> {
        keys.iter()
            .map(|k| {
                let (rank, total) = rank(k, keys.iter().map(String::as_str));
                now_ms + until_slot(slot_phase(rank, total, MINUTE), MINUTE, now_ms).as_millis()
            })
            .collect()
    }

    #[test]
    fn two_hundred_repositories_spread_over_a_minute() {
        let keys: Vec<String> = (0..200).map(|i| format!("team-{}/repo-{i}", i % 7)).collect();
        // Whatever the start time, every 1-second bucket of the next interval holds at most
        // ceil(200 / 60) = 4 polls, and every Repository polls exactly once in it.
        for start in [0u128, 1_234_567, 1_764_000_000_123] {
            let polls = next_polls(&keys, start);
            let mut buckets = std::collections::BTreeMap::<u128, usize>::new();
            for at in &polls {
                *buckets.entry(at / 1000).or_default() += 1;
            }
            let busiest = buckets.values().max().copied().unwrap_or_default();
            assert!(busiest <= 4, "start {start}: busiest second has {busiest} polls");
            let span = polls.iter().max().unwrap() - polls.iter().min().unwrap();
            assert!(span < MINUTE.as_millis(), "start {start}: span {span}");
        }
    }

    #[test]
    fn slots_are_deterministic_and_survive_a_restart() {
        let keys: Vec<String> = (0..50).map(|i| format!("ns/r{i}")).collect();
        let before = next_polls(&keys, 10_000);
        assert_eq!(before, next_polls(&keys, 10_000));
        // Polled at its slot, a Repository's next poll is one interval later: the phase holds.
        for at in before {
            assert_eq!(next_polls(&keys, at).iter().filter(|&&n| n == at + 60_000).count(), 1);
        }
    }

    #[test]
    fn ranks_and_phases() {
        assert_eq!(rank("b", ["a", "c"]), (1, 3));
        assert_eq!(rank("b", ["a", "b", "c"]), (1, 3));
        assert_eq!(slot_phase(0, 1, MINUTE), Duration::ZERO);
        assert_eq!(slot_phase(1, 4, MINUTE), Duration::from_secs(15));
        assert_eq!(slot_phase(9, 4, MINUTE), Duration::from_secs(45), "rank clamped");
        // A poll right before the slot waits for the following one (at least a quarter interval).
        assert_eq!(
            until_slot(Duration::from_secs(10), MINUTE, 9_000),
            Duration::from_secs(61)
        );
        assert_eq!(
            until_slot(Duration::from_secs(10), MINUTE, 11_000),
            Duration::from_secs(59)
        );
    }

    #[test]
    fn a_restart_waits_for_the_slot_only_when_nothing_changed() {
        let fresh = Freshness {
            ready: true,
            observed_generation: Some(2),
            generation: Some(2),
        };
        assert!(!poll_now(true, false, fresh), "settled: wait for the slot");
        assert!(poll_now(false, false, fresh), "a slot's own reconcile polls");
        assert!(poll_now(true, true, fresh), "a refresh polls");
        let changed = Freshness {
            generation: Some(3),
            ..fresh
        };
        assert!(poll_now(true, false, changed), "a changed spec polls");
        let failing = Freshness { ready: false, ..fresh };
        assert!(poll_now(true, false, failing), "a failing one retries at once");
        assert!(poll_now(true, false, Freshness::default()), "never listed: poll");
    }
}
