//! Pure: the dirty set — which objects must be sent, keyed by uid, with no payload (the payload is
//! built from the cache at send time, so ten changes of one object during an outage cost one item).
//! A delete leaves a tombstone that supersedes a pending upsert. The set holds at most one entry per
//! uid, so it is bounded by the objects that exist plus the deletions not yet sent; past `cap` it
//! stops growing and says "snapshot needed" instead of dropping anything.

use std::collections::HashMap;
use std::time::Instant;

use super::project::{Kind, ObjRef};

/// One pending object.
#[derive(Clone, Debug, PartialEq)]
pub struct Dirty {
    /// The kind (for metrics and digest answers).
    pub kind: Kind,
    /// When it first became dirty since it was last sent (backlog age).
    pub since: Instant,
    /// When it last changed (end-to-end latency is measured from here).
    pub changed: Instant,
    /// `Some` for a delete: the object's last known reference.
    pub tombstone: Option<ObjRef>,
}

/// The dirty set.
#[derive(Debug)]
pub struct DirtySet {
    entries: HashMap<String, Dirty>,
    cap: usize,
    overflowed: bool,
    coalesced: u64,
}

/// Default bound on the number of entries.
pub const DEFAULT_CAP: usize = 100_000;

impl DirtySet {
    /// An empty set holding at most `cap` entries.
    pub fn new(cap: usize) -> Self {
        DirtySet {
            entries: HashMap::new(),
            cap: cap.max(1),
            overflowed: false,
            coalesced: 0,
        }
    }

    /// `uid` changed (or exists and must be sent).
    pub fn upsert(&mut self, uid: &str, kind: Kind, now: Instant) {
        if let Some(entry) = self.entries.get_mut(uid) {
            self.coalesced += 1;
            entry.changed = now;
            return;
        }
        self.insert(
            uid,
            Dirty {
                kind,
                since: now,
                changed: now,
                tombstone: None,
            },
        );
    }

    /// `uid` is gone: a tombstone replaces any pending upsert.
    pub fn delete(&mut self, obj_ref: ObjRef, kind: Kind, now: Instant) {
        let uid = obj_ref.uid.clone();
        if let Some(entry) = self.entries.get_mut(&uid) {
            self.coalesced += 1;
            entry.changed = now;
            entry.tombstone = Some(obj_ref);
            return;
        }
        self.insert(
            &uid,
            Dirty {
                kind,
                since: now,
                changed: now,
                tombstone: Some(obj_ref),
            },
        );
    }

    fn insert(&mut self, uid: &str, entry: Dirty) {
        if self.entries.len() >= self.cap {
            self.overflowed = true;
            return;
        }
        self.entries.insert(uid.to_string(), entry);
    }

    /// Removes and returns `uid`'s entry.
    pub fn take(&mut self, uid: &str) -> Option<Dirty> {
        self.entries.remove(uid)
    }

    /// Puts an entry back (a retryable item, an item of a failed batch that is rebuilt); a newer
    /// entry for the same uid wins.
    pub fn restore(&mut self, uid: &str, entry: Dirty) {
        if !self.entries.contains_key(uid) {
            self.insert(uid, entry);
        }
    }

    /// The uids to send next: oldest first, at most `n`.
    pub fn oldest(&self, n: usize) -> Vec<String> {
        let mut all: Vec<(&String, &Dirty)> = self.entries.iter().collect();
        all.sort_by(|a, b| a.1.since.cmp(&b.1.since).then_with(|| a.0.cmp(b.0)));
        all.into_iter().take(n).map(|(uid, _)| uid.clone()).collect()
    }

    /// Pending entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Pending entries per kind.
    pub fn per_kind(&self) -> HashMap<Kind, usize> {
        let mut out = HashMap::new();
        for entry in self.entries.values() {
            *out.entry(entry.kind).or_insert(0) += 1;
        }
        out
    }

    /// When the oldest pending entry became dirty.
    pub fn oldest_since(&self) -> Option<Instant> {
        self.entries.values().map(|e| e.since).min()
    }

    /// Changes folded into an entry that was already pending (and reset the counter).
    pub fn take_coalesced(&mut self) -> u64 {
        std::mem::take(&mut self.coalesced)
    }

    /// Whether the cap was hit since the last [`clear`](Self::clear): a full snapshot is needed.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    /// Empties the set (a snapshot is about to send everything).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.overflowed = false;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn r(uid: &str) -> ObjRef {
        ObjRef {
            api_version: "capstan.dev/v1alpha1".into(),
            kind: "Application".into(),
            namespace: "ns".into(),
            name: uid.into(),
            uid: uid.into(),
        }
    }

    #[test]
    fn changes_coalesce_per_uid_and_tombstones_supersede() {
        let t0 = Instant::now();
        let mut set = DirtySet::new(10);
        for i in 0..10 {
            set.upsert("a", Kind::Application, t0 + Duration::from_millis(i));
        }
        set.upsert("b", Kind::Repository, t0 + Duration::from_millis(20));
        assert_eq!(set.len(), 2);
        assert_eq!(set.take_coalesced(), 9);
        assert_eq!(set.oldest_since(), Some(t0));
        set.delete(r("a"), Kind::Application, t0 + Duration::from_millis(30));
        let a = set.take("a").unwrap();
        assert_eq!(a.tombstone, Some(r("a")));
        assert_eq!(a.since, t0, "backlog age counts from the first change");
        assert_eq!(set.per_kind().get(&Kind::Repository), Some(&1));
    }

    #[test]
    fn oldest_first_and_restore_keeps_the_newer_entry() {
        let t0 = Instant::now();
        let mut set = DirtySet::new(10);
        set.upsert("late", Kind::Application, t0 + Duration::from_secs(2));
        set.upsert("early", Kind::Application, t0);
        assert_eq!(set.oldest(1), vec!["early".to_string()]);
        let early = set.take("early").unwrap();
        set.delete(r("early"), Kind::Application, t0 + Duration::from_secs(3));
        set.restore("early", early);
        assert!(set.take("early").unwrap().tombstone.is_some());
    }

    #[test]
    fn the_cap_never_drops_and_says_snapshot_needed() {
        let t0 = Instant::now();
        let mut set = DirtySet::new(2);
        set.upsert("a", Kind::Application, t0);
        set.upsert("b", Kind::Application, t0);
        assert!(!set.overflowed());
        set.upsert("c", Kind::Application, t0);
        assert!(set.overflowed());
        assert_eq!(set.len(), 2);
        set.upsert("a", Kind::Application, t0);
        assert_eq!(set.len(), 2, "a known uid is coalesced, not added");
        set.clear();
        assert!(!set.overflowed() && set.is_empty());
    }
}
