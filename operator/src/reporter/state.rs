//! Pure: the reporter's memory and its sending plan.
//!
//! - [`Cache`]: the current projection of every watched object by uid (the watch cache the payloads are
//!   built from at send time) and the [`DirtySet`]. Memory is O(objects).
//! - [`Term`]: one leadership term — its `epoch`, the `seq` counter, the phase (snapshot, digest, delta),
//!   the batches split off a refused batch, and the batch size (halved on 413).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use super::dirty::{Dirty, DirtySet};
use super::project::{json_len, Kind, ObjRef, Projected};
use super::wire::{DigestEntry, Item, ItemResult, SnapshotPart};

/// Items per batch.
pub const MAX_BATCH_ITEMS: usize = 200;
/// Uncompressed JSON bytes of a batch's items.
pub const MAX_BATCH_BYTES: usize = 1024 * 1024;
/// Entries per digest chunk.
pub const MAX_DIGEST_ENTRIES: usize = 1000;

/// The watch cache and the dirty set.
#[derive(Debug)]
pub struct Cache {
    objects: HashMap<String, Projected>,
    /// Pending objects.
    pub dirty: DirtySet,
}

impl Cache {
    /// An empty cache whose dirty set holds at most `dirty_cap` entries.
    pub fn new(dirty_cap: usize) -> Self {
        Cache {
            objects: HashMap::new(),
            dirty: DirtySet::new(dirty_cap),
        }
    }

    /// Records the current state of an object; it becomes dirty only if its hash changed.
    pub fn apply(&mut self, p: Projected, now: Instant) -> bool {
        let uid = p.obj_ref.uid.clone();
        let changed = self
            .objects
            .get(&uid)
            .is_none_or(|old| old.content_hash != p.content_hash);
        if changed {
            self.dirty.upsert(&uid, p.kind, now);
        }
        self.objects.insert(uid, p);
        changed
    }

    /// Forgets an object and leaves a tombstone. An Event leaves none: events are history, not state,
    /// and a receiver keeps or expires them on its own.
    pub fn remove(&mut self, uid: &str, now: Instant) {
        match self.objects.remove(uid) {
            Some(old) if old.kind == Kind::Event => {
                self.dirty.take(uid);
            }
            Some(old) => self.dirty.delete(old.obj_ref, old.kind, now),
            None => {}
        }
    }

    /// The cached projection of `uid`.
    pub fn get(&self, uid: &str) -> Option<&Projected> {
        self.objects.get(uid)
    }

    /// Every cached uid of `kind`.
    pub fn uids_of(&self, kind: Kind) -> Vec<String> {
        self.objects
            .values()
            .filter(|p| p.kind == kind)
            .map(|p| p.obj_ref.uid.clone())
            .collect()
    }

    /// Every cached uid, sorted (a stable snapshot and digest order).
    pub fn uids(&self) -> Vec<String> {
        let mut all: Vec<String> = self.objects.keys().cloned().collect();
        all.sort();
        all
    }

    /// Objects per kind.
    pub fn counts(&self) -> HashMap<Kind, usize> {
        let mut out = HashMap::new();
        for p in self.objects.values() {
            *out.entry(p.kind).or_insert(0) += 1;
        }
        out
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.objects.len()
    }

    /// Whether nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.objects.is_empty()
    }
}

/// What a term is sending.
#[derive(Debug, Clone, PartialEq)]
pub enum Phase {
    /// A full snapshot (first registration, `resync: "full"`, dirty-set overflow).
    Snapshot {
        /// Snapshot id.
        id: String,
        /// Next part number.
        next_part: u32,
        /// Uids not sent yet.
        remaining: VecDeque<String>,
        /// Distinct uids sent so far.
        sent: u64,
    },
    /// A digest round (a start with a completed snapshot, a new term, `resync: "digest"`).
    Digest {
        /// Round id.
        id: String,
        /// Next chunk number.
        next_part: u32,
        /// Uids not listed yet.
        remaining: VecDeque<String>,
    },
    /// Deltas from the dirty set.
    Delta,
}

/// One batch of `POST /reports`; kept as is while it is retried.
#[derive(Debug, Clone)]
pub struct Batch {
    /// `batchId` (the `Idempotency-Key`).
    pub id: String,
    /// The snapshot part, for a snapshot batch.
    pub snapshot: Option<SnapshotPart>,
    /// The items.
    pub items: Vec<Item>,
    /// The dirty entry of each item (to put a retryable item back, and for latency).
    pub entries: Vec<(String, Dirty)>,
}

/// A digest chunk ready to send.
#[derive(Debug, Clone)]
pub struct DigestChunk {
    /// `digestId`.
    pub id: String,
    /// Chunk number.
    pub part: u32,
    /// Last chunk of the round.
    pub final_: bool,
    /// The entries.
    pub items: Vec<DigestEntry>,
}

/// What an acknowledged batch did.
#[derive(Debug, Default, PartialEq)]
pub struct AckOutcome {
    /// `(kind, op, code)` of items the receiver refused for good.
    pub dropped: Vec<(String, &'static str, String)>,
    /// Items put back to be sent again.
    pub retried: usize,
    /// `(kind, op)` of stored items, with the instant their change was seen.
    pub stored: Vec<(String, &'static str, Instant)>,
    /// The snapshot id, if this was a snapshot's final part.
    pub snapshot_completed: Option<String>,
}

/// One leadership term.
#[derive(Debug)]
pub struct Term {
    /// The epoch.
    pub epoch: u64,
    next_seq: u64,
    /// What is being sent.
    pub phase: Phase,
    /// Batches split off a refused batch, sent before anything new.
    pub pending: VecDeque<Batch>,
    /// Items per batch (halved on 413, never below 1).
    pub max_items: usize,
    counter: u64,
}

impl Term {
    /// A new term starting with `phase`.
    pub fn new(epoch: u64, phase: Phase) -> Self {
        Term {
            epoch,
            next_seq: 1,
            phase,
            pending: VecDeque::new(),
            max_items: MAX_BATCH_ITEMS,
            counter: 0,
        }
    }

    /// The next `seq` to hand out.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }

    fn fresh_id(&mut self, first_seq: u64) -> String {
        self.counter += 1;
        format!("{}-{}-{:x}", self.epoch, first_seq, self.counter)
    }

    /// The phase that sends everything.
    pub fn snapshot(&mut self, cache: &mut Cache) -> Phase {
        cache.dirty.clear();
        self.counter += 1;
        Phase::Snapshot {
            id: format!("s{}-{}", self.epoch, self.counter),
            next_part: 1,
            remaining: cache.uids().into(),
            sent: 0,
        }
    }

    /// The phase that asks the receiver what it lacks.
    pub fn digest(&mut self, cache: &Cache) -> Phase {
        self.counter += 1;
        Phase::Digest {
            id: format!("{}-{}", self.epoch, self.counter),
            next_part: 1,
            remaining: cache.uids().into(),
        }
    }

    /// The next digest chunk, when digesting.
    pub fn next_digest_chunk(&mut self, cache: &Cache) -> Option<DigestChunk> {
        let Phase::Digest {
            id,
            next_part,
            remaining,
        } = &mut self.phase
        else {
            return None;
        };
        let take = remaining.len().min(MAX_DIGEST_ENTRIES);
        let items = remaining
            .drain(..take)
            .filter_map(|uid| cache.get(&uid))
            .map(|p| DigestEntry {
                uid: p.obj_ref.uid.clone(),
                kind: p.kind.as_str(),
                content_hash: p.content_hash.clone(),
            })
            .collect();
        let chunk = DigestChunk {
            id: id.clone(),
            part: *next_part,
            final_: remaining.is_empty(),
            items,
        };
        *next_part += 1;
        Some(chunk)
    }

    /// Marks what a digest chunk's answer needs: an upsert for a uid the cache holds, a delete for
    /// one it does not. After the final chunk the term sends deltas.
    pub fn digest_answered(&mut self, cache: &mut Cache, chunk: &DigestChunk, need: &[String], now: Instant) {
        for uid in need {
            match cache.get(uid) {
                Some(p) => {
                    let kind = p.kind;
                    cache.dirty.take(uid);
                    cache.dirty.upsert(uid, kind, now);
                }
                None => {
                    let unknown = ObjRef {
                        api_version: String::new(),
                        kind: String::new(),
                        namespace: String::new(),
                        name: String::new(),
                        uid: uid.clone(),
                    };
                    cache.dirty.restore(
                        uid,
                        Dirty {
                            kind: Kind::Application,
                            since: now,
                            changed: now,
                            tombstone: Some(unknown),
                        },
                    );
                }
            }
        }
        if chunk.final_ {
            self.phase = Phase::Delta;
        }
    }

    /// The next batch to send: a split-off batch, else a snapshot part, else deltas. `None` when there
    /// is nothing to send (or the term is digesting).
    pub fn next_batch(&mut self, cache: &mut Cache, now: Instant, observed_at: &str) -> Option<Batch> {
        if let Some(b) = self.pending.pop_front() {
            return Some(b);
        }
        match &self.phase {
            Phase::Snapshot { .. } => Some(self.snapshot_part(cache, now, observed_at)),
            Phase::Digest { .. } => None,
            Phase::Delta => self.delta(cache, now, observed_at),
        }
    }

    fn snapshot_part(&mut self, cache: &mut Cache, now: Instant, observed_at: &str) -> Batch {
        let (mut items, mut entries, mut bytes) = (Vec::new(), Vec::new(), 0usize);
        let first_seq = self.next_seq;
        let max_items = self.max_items;
        let Phase::Snapshot {
            id,
            next_part,
            remaining,
            sent,
        } = &mut self.phase
        else {
            unreachable!("snapshot_part outside a snapshot")
        };
        while items.len() < max_items {
            let Some(uid) = remaining.front().cloned() else { break };
            let Some(p) = cache.get(&uid) else {
                remaining.pop_front();
                continue;
            };
            let item = Item::state(p, self.next_seq, observed_at);
            let size = json_len(&item.status) + 512;
            if !items.is_empty() && bytes + size > MAX_BATCH_BYTES {
                break;
            }
            remaining.pop_front();
            let kind = p.kind;
            // Sent now with its current state: a pending delta for it would only repeat it.
            let since = cache.dirty.take(&uid).map_or(now, |d| d.changed);
            bytes += size;
            self.next_seq += 1;
            items.push(item);
            entries.push((
                uid,
                Dirty {
                    kind,
                    since,
                    changed: since,
                    tombstone: None,
                },
            ));
        }
        *sent += items.len() as u64;
        let final_ = remaining.is_empty();
        let part = SnapshotPart {
            id: id.clone(),
            part: *next_part,
            final_,
            total_objects: final_.then_some(*sent),
            confirmed_empty: final_ && *sent == 0,
        };
        *next_part += 1;
        let id = self.fresh_id(first_seq);
        Batch {
            id,
            snapshot: Some(part),
            items,
            entries,
        }
    }

    fn delta(&mut self, cache: &mut Cache, now: Instant, observed_at: &str) -> Option<Batch> {
        let (mut items, mut entries, mut bytes) = (Vec::new(), Vec::new(), 0usize);
        let first_seq = self.next_seq;
        for uid in cache.dirty.oldest(self.max_items) {
            let Some(entry) = cache.dirty.take(&uid) else { continue };
            let item = match (&entry.tombstone, cache.get(&uid)) {
                (Some(tomb), _) => Item::delete(tomb.clone(), self.next_seq, observed_at),
                (None, Some(p)) => Item::state(p, self.next_seq, observed_at),
                (None, None) => continue,
            };
            let size = json_len(&item.status) + 512;
            if !items.is_empty() && bytes + size > MAX_BATCH_BYTES {
                cache.dirty.restore(&uid, entry);
                break;
            }
            bytes += size;
            self.next_seq += 1;
            items.push(item);
            entries.push((uid, entry));
        }
        let _ = now;
        if items.is_empty() {
            return None;
        }
        let id = self.fresh_id(first_seq);
        Some(Batch {
            id,
            snapshot: None,
            items,
            entries,
        })
    }

    /// 400/422: the batch's halves go first (new batch ids, same seqs). A single item is dropped and
    /// returned as `(kind, op)`.
    pub fn split(&mut self, batch: Batch) -> Option<(String, &'static str)> {
        if batch.items.len() <= 1 {
            return batch.items.first().map(|i| (i.obj_ref.kind.clone(), i.op));
        }
        let (first, second) = self.halves(batch);
        self.pending.push_front(second);
        self.pending.push_front(first);
        None
    }

    /// 413: halves the batch size for the rest of the term and sends this batch as two.
    pub fn halve(&mut self, batch: Batch) {
        self.max_items = (self.max_items / 2).max(1);
        if batch.items.len() <= 1 {
            self.pending.push_front(batch);
            return;
        }
        let (first, second) = self.halves(batch);
        self.pending.push_front(second);
        self.pending.push_front(first);
    }

    fn halves(&mut self, mut batch: Batch) -> (Batch, Batch) {
        let mid = batch.items.len() / 2;
        let items2 = batch.items.split_off(mid);
        let entries2 = batch.entries.split_off(mid);
        let snapshot2 = batch.snapshot.clone().map(|s| SnapshotPart {
            part: self.bump_part().unwrap_or(s.part),
            ..s
        });
        let snapshot1 = batch.snapshot.map(|s| SnapshotPart {
            final_: false,
            total_objects: None,
            confirmed_empty: false,
            ..s
        });
        let first = Batch {
            id: self.fresh_id(batch.items.first().map_or(0, |i| i.seq)),
            snapshot: snapshot1,
            items: batch.items,
            entries: batch.entries,
        };
        let second = Batch {
            id: self.fresh_id(items2.first().map_or(0, |i| i.seq)),
            snapshot: snapshot2,
            items: items2,
            entries: entries2,
        };
        (first, second)
    }

    /// A part number for a split snapshot part (later parts are not built yet).
    fn bump_part(&mut self) -> Option<u32> {
        match &mut self.phase {
            Phase::Snapshot { next_part, .. } => {
                let p = *next_part;
                *next_part += 1;
                Some(p)
            }
            _ => None,
        }
    }

    /// A 2xx for `batch`: non-retryable refusals are dropped, retryable ones put back dirty (they go
    /// again with a new seq), a snapshot's final part completes it.
    pub fn acked(&mut self, cache: &mut Cache, batch: Batch, results: &[ItemResult]) -> AckOutcome {
        let mut outcome = AckOutcome::default();
        let refused: HashMap<usize, &ItemResult> = results.iter().map(|r| (r.i, r)).collect();
        for (i, (item, (uid, entry))) in batch.items.iter().zip(batch.entries).enumerate() {
            match refused.get(&i) {
                Some(r) if r.retryable => {
                    cache.dirty.restore(&uid, entry);
                    outcome.retried += 1;
                }
                Some(r) => outcome
                    .dropped
                    .push((item.obj_ref.kind.clone(), item.op, r.code.clone())),
                None => outcome.stored.push((item.obj_ref.kind.clone(), item.op, entry.changed)),
            }
        }
        if let Some(part) = batch.snapshot.filter(|s| s.final_) {
            if matches!(&self.phase, Phase::Snapshot { remaining, .. } if remaining.is_empty())
                && self.pending.is_empty()
            {
                self.phase = Phase::Delta;
            }
            outcome.snapshot_completed = Some(part.id);
        }
        outcome
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
