//! Sharding: which shard reconciles which destination cluster, and when a replica may start writing
//! for a cluster it was just given (docs/architecture.md, "Sharding").
//!
//! - [`assign`]: bounded-load consistent hashing. Every live shard has [`VIRTUAL_NODES`] points on a
//!   64-bit ring; each cluster key goes to the first shard clockwise from its hash that is below the
//!   load bound ([`LoadBound`], 1.25 × the average by default), nearest keys first.
//!   A shard that leaves gives its clusters to the others (spread by the ring, none over the bound);
//!   a shard that joins takes about its share; the rest stay put.
//! - [`Handoff`]: a replica computes the assignment from what it observes (the shard Leases and the
//!   Cluster objects), and two replicas may observe a change at slightly different moments. Losing a
//!   cluster therefore takes effect at once, while a cluster taken from a shard that is still live
//!   takes effect only after a settle time (one lease duration): by then its previous owner has seen
//!   the same change and stopped. A cluster of a shard that is gone (its Lease expired or released)
//!   is taken at once: that holder has stopped writing before its Lease could expire.
//!
//! Everything here is a pure function of its inputs (no clock, no I/O).

use std::collections::{BTreeMap, BTreeSet};

/// Points of each shard on the ring: enough that 10 shards split 100 clusters within the bound
/// with few moves beyond the leaving shard's own clusters, few enough to build the ring in well
/// under a millisecond.
pub const VIRTUAL_NODES: u32 = 160;

/// The largest `--shard-count` (a bound on the Leases each replica reads every retry period).
pub const MAX_SHARDS: u32 = 64;

/// The load bound as a fraction `num / den` of the average (default 5/4 = 1.25).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadBound {
    pub num: u64,
    pub den: u64,
}

impl Default for LoadBound {
    fn default() -> Self {
        LoadBound { num: 5, den: 4 }
    }
}

impl LoadBound {
    /// Most clusters one of `shards` shards may hold out of `keys`: `⌊bound × average⌋`, but never
    /// below `⌈average⌉` (which every assignment needs), so max/avg stays within the bound whenever
    /// any assignment can.
    pub fn capacity(self, keys: usize, shards: usize) -> usize {
        if shards == 0 {
            return 0;
        }
        let (k, n) = (keys as u64, shards as u64);
        let floor_bound = (k * self.num) / (n * self.den.max(1));
        floor_bound.max(k.div_ceil(n)) as usize
    }
}

/// FNV-1a with a SplitMix64 finish: stable across processes, platforms and releases (the standard
/// library's hasher is none of these), and well spread for near-identical names.
pub fn stable_hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

fn ring(shards: &BTreeSet<u32>) -> Vec<(u64, u32)> {
    let mut points: Vec<(u64, u32)> = shards
        .iter()
        .flat_map(|s| (0..VIRTUAL_NODES).map(move |v| (stable_hash(format!("shard-{s}#{v}").as_bytes()), *s)))
        .collect();
    points.sort_unstable();
    points
}

/// A key's walk clockwise round the ring: the shards it has proposed to so far.
struct Walk<'a> {
    key: &'a str,
    hash: u64,
    /// Ring index where the walk starts (the first point at or after the key's hash).
    start: usize,
    /// Points passed so far.
    cursor: usize,
    tried: Vec<u32>,
}

impl Walk<'_> {
    /// The next shard on the walk not proposed to yet, with its clockwise distance from the key.
    fn next(&mut self, points: &[(u64, u32)]) -> Option<(u64, u32)> {
        while self.cursor < points.len() {
            let (at, shard) = points[(self.start + self.cursor) % points.len()];
            self.cursor += 1;
            if !self.tried.contains(&shard) {
                self.tried.push(shard);
                return Some((at.wrapping_sub(self.hash), shard));
            }
        }
        None
    }
}

/// The shard of every key: bounded-load consistent hashing over `shards` (the live shard ids).
/// Deterministic: the same shards and keys give the same answer in every replica, whatever their
/// order. No shards, no assignment.
///
/// Placed in rounds: in each round every key not placed yet proposes to the next shard clockwise
/// on its walk, and the proposals are taken nearest first until the shard is full. A key thus
/// loses its place only to keys nearer to the same shard, which keeps the clusters that move when a
/// shard leaves or joins to the few the load bound must move.
pub fn assign<S: AsRef<str>>(shards: &BTreeSet<u32>, keys: &[S], bound: LoadBound) -> BTreeMap<String, u32> {
    let points = ring(shards);
    let mut unique: Vec<&str> = keys.iter().map(AsRef::as_ref).collect();
    unique.sort_unstable();
    unique.dedup();
    if points.is_empty() {
        return BTreeMap::new();
    }
    let cap = bound.capacity(unique.len(), shards.len());
    let mut load: BTreeMap<u32, usize> = shards.iter().map(|s| (*s, 0)).collect();
    let mut pending: Vec<Walk> = unique
        .into_iter()
        .map(|key| {
            let hash = stable_hash(key.as_bytes());
            let start = points.partition_point(|(p, _)| *p < hash);
            Walk {
                key,
                hash,
                start,
                cursor: 0,
                tried: Vec::new(),
            }
        })
        .collect();
    let mut out = BTreeMap::new();
    // Some shard is always below `cap` (cap × shards ≥ keys), so every key is placed within one
    // round per shard.
    while !pending.is_empty() {
        let mut proposals: Vec<(u64, usize, u32)> = Vec::with_capacity(pending.len());
        for (i, walk) in pending.iter_mut().enumerate() {
            if let Some((distance, shard)) = walk.next(&points) {
                proposals.push((distance, i, shard));
            }
        }
        if proposals.is_empty() {
            break;
        }
        proposals.sort_unstable_by(|a, b| (a.0, pending[a.1].key).cmp(&(b.0, pending[b.1].key)));
        let mut placed = vec![false; pending.len()];
        for (_, i, shard) in proposals {
            let slot = load.entry(shard).or_default();
            if *slot < cap {
                *slot += 1;
                placed[i] = true;
                out.insert(pending[i].key.to_string(), shard);
            }
        }
        let mut index = 0;
        pending.retain(|_| {
            index += 1;
            !placed[index - 1]
        });
    }
    out
}

/// How many keys changed shard between two assignments (keys present in both).
pub fn moves(before: &BTreeMap<String, u32>, after: &BTreeMap<String, u32>) -> usize {
    before
        .iter()
        .filter(|(k, s)| after.get(*k).is_some_and(|t| t != *s))
        .count()
}

/// max/avg of the keys per shard over `shards` (a shard with none counts); 0 without keys.
pub fn skew(assignment: &BTreeMap<String, u32>, shards: &BTreeSet<u32>) -> f64 {
    if assignment.is_empty() || shards.is_empty() {
        return 0.0;
    }
    let mut load: BTreeMap<u32, usize> = shards.iter().map(|s| (*s, 0)).collect();
    for s in assignment.values() {
        *load.entry(*s).or_default() += 1;
    }
    let max = load.values().copied().max().unwrap_or(0) as f64;
    max / (assignment.len() as f64 / shards.len() as f64)
}

/// One replica's view after an observation: the clusters it may write for now, and those it was
/// given but waits for (with the time, in ms, it was given them).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Handoff {
    /// The assignment this view was computed from (empty before the first).
    pub assignment: BTreeMap<String, u32>,
    /// Clusters this replica reconciles and writes for.
    pub effective: BTreeSet<String>,
    /// Clusters assigned to a shard this replica holds, not yet effective: key → since (ms).
    pub pending: BTreeMap<String, u64>,
}

/// What one replica observed at `now_ms`.
#[derive(Clone, Debug)]
pub struct Observation<'a> {
    /// Shards whose Lease is held (by anyone) and not expired.
    pub live: &'a BTreeSet<u32>,
    /// The shards this replica holds (a subset of `live`).
    pub mine: &'a BTreeSet<u32>,
    /// Every cluster key.
    pub keys: &'a [String],
    pub now_ms: u64,
    /// How long a cluster taken from a live shard waits (one lease duration).
    pub settle_ms: u64,
}

impl Handoff {
    /// The next view: clusters no longer assigned to one of `mine` are dropped at once; newly
    /// assigned ones become effective at once when their previous shard is gone, else after the
    /// settle time.
    pub fn observe(&self, seen: &Observation<'_>, bound: LoadBound) -> Handoff {
        let assignment = assign(seen.live, seen.keys, bound);
        let mut next = Handoff {
            assignment,
            ..Handoff::default()
        };
        for (key, shard) in &next.assignment {
            if !seen.mine.contains(shard) {
                continue;
            }
            if self.effective.contains(key) {
                next.effective.insert(key.clone());
                continue;
            }
            let previous_gone = self.assignment.get(key).is_some_and(|p| !seen.live.contains(p));
            let since = self.pending.get(key).copied().unwrap_or(seen.now_ms);
            if previous_gone || seen.now_ms.saturating_sub(since) >= seen.settle_ms {
                next.effective.insert(key.clone());
            } else {
                next.pending.insert(key.clone(), since);
            }
        }
        next
    }
}

/// Name of shard `i`'s Lease.
pub fn lease_name(i: u32) -> String {
    format!("capstan-controller-shard-{i}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shards(ids: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        ids.into_iter().collect()
    }

    fn keys(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("capstan-system/cluster-{i}")).collect()
    }

    fn max_load(a: &BTreeMap<String, u32>) -> usize {
        let mut load: BTreeMap<u32, usize> = BTreeMap::new();
        for s in a.values() {
            *load.entry(*s).or_default() += 1;
        }
        load.values().copied().max().unwrap_or(0)
    }

    #[test]
    fn capacity_keeps_the_bound_when_it_can() {
        let b = LoadBound::default();
        assert_eq!(b.capacity(100, 10), 12);
        assert_eq!(b.capacity(100, 9), 13);
        assert_eq!(b.capacity(3, 3), 1);
        assert_eq!(b.capacity(4, 3), 2, "never below the ceiling of the average");
        assert_eq!(b.capacity(5, 0), 0);
    }

    #[test]
    fn the_same_inputs_give_the_same_assignment_in_any_order() {
        let k = keys(50);
        let mut reversed = k.clone();
        reversed.reverse();
        let a = assign(&shards(0..5), &k, LoadBound::default());
        assert_eq!(a, assign(&shards([4, 3, 2, 1, 0]), &reversed, LoadBound::default()));
        assert_eq!(a.len(), 50);
        assert!(a.values().all(|s| *s < 5));
        // Pinned: a change of hash or ring would move clusters between releases during an upgrade.
        assert_eq!(stable_hash(b"in-cluster"), stable_hash(b"in-cluster"));
        assert_ne!(stable_hash(b"cluster-1"), stable_hash(b"cluster-2"));
    }

    #[test]
    fn no_shard_goes_over_the_bound() {
        for n_keys in [0, 1, 7, 30, 100, 257] {
            for n_shards in 1..=12u32 {
                let live = shards(0..n_shards);
                let a = assign(&live, &keys(n_keys), LoadBound::default());
                let cap = LoadBound::default().capacity(n_keys, n_shards as usize);
                assert!(max_load(&a) <= cap, "{n_keys} keys on {n_shards} shards");
                assert_eq!(a.len(), n_keys);
            }
        }
    }

    #[test]
    fn removing_or_adding_a_shard_moves_few_clusters() {
        let k = keys(100);
        for gone in 0..10u32 {
            let ten = assign(&shards(0..10), &k, LoadBound::default());
            let nine_live = shards((0..10).filter(|s| *s != gone));
            let nine = assign(&nine_live, &k, LoadBound::default());
            let owned_by_gone = ten.values().filter(|s| **s == gone).count();
            let moved = moves(&ten, &nine);
            assert!(moved >= owned_by_gone, "every cluster of the gone shard moves");
            assert!(moved <= 15, "shard {gone} gone: {moved} moves");
            assert!(skew(&nine, &nine_live) <= 1.25);
            // Back to ten: the joining shard takes about its share, little else moves.
            let back = moves(&nine, &ten);
            assert!(back <= 15, "shard {gone} back: {back} moves");
        }
    }

    #[test]
    fn no_shards_no_assignment() {
        assert!(assign(&BTreeSet::new(), &keys(3), LoadBound::default()).is_empty());
        assert_eq!(skew(&BTreeMap::new(), &shards(0..3)), 0.0);
    }

    fn observe(prev: &Handoff, live: &BTreeSet<u32>, mine: &BTreeSet<u32>, k: &[String], now_ms: u64) -> Handoff {
        let seen = Observation {
            live,
            mine,
            keys: k,
            now_ms,
            settle_ms: 15_000,
        };
        prev.observe(&seen, LoadBound::default())
    }

    #[test]
    fn a_cluster_from_a_live_shard_waits_the_settle_time_one_from_a_gone_shard_does_not() {
        let k = keys(30);
        let (all, mine) = (shards(0..3), shards([0]));
        // A first view waits: whoever held these clusters before may still be writing.
        let first = observe(&Handoff::default(), &all, &mine, &k, 1_000);
        assert!(first.effective.is_empty());
        assert!(!first.pending.is_empty());
        let settled = observe(&first, &all, &mine, &k, 16_000);
        assert_eq!(settled.pending.len(), 0);
        let own: BTreeSet<String> = settled
            .assignment
            .iter()
            .filter(|(_, s)| **s == 0)
            .map(|(k, _)| k.clone())
            .collect();
        assert_eq!(settled.effective, own);
        // Shard 2 dies: its clusters come over at once; clusters from live shard 1 (load cascade) wait.
        let two_left = shards([0, 1]);
        let after = observe(&settled, &two_left, &mine, &k, 17_000);
        for key in after.pending.keys() {
            assert_eq!(settled.assignment[key], 1, "{key} came from a live shard");
        }
        for key in after.effective.difference(&settled.effective) {
            assert_eq!(settled.assignment[key], 2, "{key} came from the gone shard");
        }
        assert!(after.effective.len() > settled.effective.len());
        // Shard 0 is lost: everything goes at once.
        let lost = observe(&after, &two_left, &BTreeSet::new(), &k, 17_500);
        assert!(lost.effective.is_empty() && lost.pending.is_empty());
    }

    #[test]
    fn a_joining_shard_takes_its_share_only_after_the_settle_time() {
        let k = keys(30);
        let before = observe(&Handoff::default(), &shards([0, 1]), &shards([0, 1]), &k, 0);
        let before = observe(&before, &shards([0, 1]), &shards([0, 1]), &k, 20_000);
        assert_eq!(before.effective.len(), 30);
        // Shard 2 joins (another replica): we drop its share at once.
        let now = observe(&before, &shards(0..3), &shards([0, 1]), &k, 21_000);
        assert!(now.effective.len() < 30);
        assert!(now.pending.is_empty());
        // The joining replica, on its side, waits.
        let joiner = observe(&Handoff::default(), &shards(0..3), &shards([2]), &k, 21_000);
        assert!(joiner.effective.is_empty());
        assert_eq!(joiner.pending.len(), 30 - now.effective.len());
    }

    #[test]
    fn lease_names() {
        assert_eq!(lease_name(0), "capstan-controller-shard-0");
    }
}
