//! The receiver rules of docs/reporter-protocol.md as pure functions over what the hub holds. The store
//! ([`crate::store`]) reads the inputs inside a transaction, calls these, and writes the outcome in the same
//! transaction, so every decision here is made on committed state and tested without a database.

use std::collections::{BTreeSet, HashMap, HashSet};

/// The order of two items of one agent: `(epoch, seq)`, compared lexicographically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key {
    pub epoch: u64,
    pub seq: u64,
}

impl Key {
    pub fn new(epoch: u64, seq: u64) -> Self {
        Self { epoch, seq }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "({}, {})", self.epoch, self.seq)
    }
}

/// Store an item only if it is newer than what is held for its uid; an equal or older one is a no-op
/// (a retried batch, or an item overtaken by a newer one).
pub fn should_store(held: Option<Key>, incoming: Key) -> bool {
    held.is_none_or(|h| incoming > h)
}

/// A request whose epoch is below the highest one seen from the agent comes from a deposed term:
/// `Err(current)` is answered `409 {"error": "stale_epoch", "currentEpoch": current}`.
pub fn check_epoch(highest_seen: u64, incoming: u64) -> Result<(), u64> {
    if incoming < highest_seen {
        Err(highest_seen)
    } else {
        Ok(())
    }
}

/// What the hub holds for one uid, as far as the digest cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldHash {
    pub content_hash: Option<String>,
    pub deleted: bool,
}

/// The uids a digest chunk needs: those listed whose hash the hub does not hold (or holds as deleted, or holds
/// differently), and, on the final chunk, every live uid the hub holds that no chunk of the digest listed.
/// `listed` is every uid listed by this digest so far, this chunk included.
pub fn digest_need(
    chunk: &[(String, String)],
    held: &HashMap<String, HeldHash>,
    final_chunk: bool,
    listed: &HashSet<String>,
) -> Vec<String> {
    let mut need: BTreeSet<String> = chunk
        .iter()
        .filter(|(uid, hash)| match held.get(uid) {
            Some(h) => h.deleted || h.content_hash.as_deref() != Some(hash.as_str()),
            None => true,
        })
        .map(|(uid, _)| uid.clone())
        .collect();
    if final_chunk {
        need.extend(
            held.iter()
                .filter(|(uid, h)| !h.deleted && !listed.contains(*uid))
                .map(|(uid, _)| uid.clone()),
        );
    }
    need.into_iter().collect()
}

/// A live object the hub holds, as deletion by absence sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveObject {
    pub uid: String,
    pub key: Key,
}

/// What a snapshot's final part does to the objects it did not list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Absence {
    /// Fewer (or more) distinct uids arrived than `totalObjects` says: nothing is deleted.
    Incomplete { received: u64, total: u64 },
    /// These uids are deleted.
    Delete(Vec<String>),
    /// More than half of the agent's objects (and more than 20) would go without `confirmedEmpty`: nothing is
    /// deleted.
    Refused { would_delete: usize, live: usize },
}

/// The mass-delete guard: more than this many objects...
pub const MASS_DELETE_MIN: usize = 20;

/// Decides deletion by absence for a snapshot's final part.
///
/// `start` is the oldest `(epoch, seq)` among the snapshot's items: an object written at or after it (by a delta
/// sent while the snapshot was in progress) is newer than the snapshot and stays, listed or not. Without items
/// (an empty snapshot) every live object is a candidate.
pub fn absence(
    total: u64,
    received: &HashSet<String>,
    confirmed_empty: bool,
    start: Option<Key>,
    live: &[LiveObject],
) -> Absence {
    let got = received.len() as u64;
    if got != total {
        return Absence::Incomplete { received: got, total };
    }
    let gone: Vec<String> = live
        .iter()
        .filter(|o| !received.contains(&o.uid) && start.is_none_or(|s| o.key < s))
        .map(|o| o.uid.clone())
        .collect();
    if !confirmed_empty && gone.len() > MASS_DELETE_MIN && gone.len() * 2 > live.len() {
        return Absence::Refused {
            would_delete: gone.len(),
            live: live.len(),
        };
    }
    Absence::Delete(gone)
}

/// An agent's state, from its heartbeats (docs/reporter-protocol.md "POST /heartbeat").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentState {
    Connected,
    Lagging,
    Lost,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Connected => "connected",
            AgentState::Lagging => "lagging",
            AgentState::Lost => "lost",
        }
    }
}

/// A heartbeat older than this (or none) means lost.
pub const LOST_AFTER_SECONDS: f64 = 90.0;
/// A backlog at least this old means lagging.
pub const LAGGING_AFTER_SECONDS: f64 = 60.0;

/// `heartbeat_age`: seconds since the last heartbeat arrived (None: never); `oldest_dirty`: its
/// `oldestDirtyAgeSeconds` (None: no backlog).
pub fn agent_state(heartbeat_age: Option<f64>, oldest_dirty: Option<f64>) -> AgentState {
    match heartbeat_age {
        Some(age) if age < LOST_AFTER_SECONDS => {
            if oldest_dirty.unwrap_or(0.0) < LAGGING_AFTER_SECONDS {
                AgentState::Connected
            } else {
                AgentState::Lagging
            }
        }
        _ => AgentState::Lost,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_newer_items_are_stored() {
        assert!(should_store(None, Key::new(1, 1)));
        assert!(should_store(Some(Key::new(1, 5)), Key::new(1, 6)));
        assert!(
            should_store(Some(Key::new(1, 500)), Key::new(2, 1)),
            "a new term wins over any seq"
        );
        assert!(
            !should_store(Some(Key::new(1, 5)), Key::new(1, 5)),
            "a duplicate is a no-op"
        );
        assert!(
            !should_store(Some(Key::new(2, 1)), Key::new(1, 900)),
            "an older term never overwrites"
        );
    }

    #[test]
    fn a_lower_epoch_is_fenced() {
        assert_eq!(check_epoch(0, 1), Ok(()));
        assert_eq!(check_epoch(3, 3), Ok(()));
        assert_eq!(check_epoch(3, 4), Ok(()));
        assert_eq!(check_epoch(3, 2), Err(3));
    }

    fn held(entries: &[(&str, &str, bool)]) -> HashMap<String, HeldHash> {
        entries
            .iter()
            .map(|(uid, hash, deleted)| {
                (
                    uid.to_string(),
                    HeldHash {
                        content_hash: Some(hash.to_string()),
                        deleted: *deleted,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn digest_needs_changed_missing_and_unlisted_uids() {
        let held = held(&[
            ("a", "h1", false),
            ("b", "h2", false),
            ("c", "h3", true),
            ("z", "h9", false),
        ]);
        let chunk = vec![
            ("a".to_string(), "h1".to_string()),
            ("b".to_string(), "other".to_string()),
            ("c".to_string(), "h3".to_string()),
            ("new".to_string(), "h4".to_string()),
        ];
        let mut listed: HashSet<String> = chunk.iter().map(|(u, _)| u.clone()).collect();
        assert_eq!(digest_need(&chunk, &held, false, &listed), ["b", "c", "new"]);
        // On the final chunk the held-but-never-listed uid `z` is needed too (the sender deletes it).
        assert_eq!(digest_need(&chunk, &held, true, &listed), ["b", "c", "new", "z"]);
        // Listed in an earlier chunk: not needed again.
        listed.insert("z".into());
        assert_eq!(digest_need(&[], &held, true, &listed), Vec::<String>::new());
    }

    fn live(n: usize) -> Vec<LiveObject> {
        (0..n)
            .map(|i| LiveObject {
                uid: format!("u{i}"),
                key: Key::new(1, i as u64 + 1),
            })
            .collect()
    }

    #[test]
    fn absence_deletes_only_after_a_complete_snapshot() {
        let objects = live(4);
        let received: HashSet<String> = ["u0", "u1", "u2"].iter().map(|s| s.to_string()).collect();
        assert_eq!(
            absence(4, &received, false, Some(Key::new(2, 1)), &objects),
            Absence::Incomplete { received: 3, total: 4 }
        );
        assert_eq!(
            absence(3, &received, false, Some(Key::new(2, 1)), &objects),
            Absence::Delete(vec!["u3".into()])
        );
    }

    #[test]
    fn objects_written_during_the_snapshot_survive() {
        let objects = live(4);
        let received: HashSet<String> = ["u0"].iter().map(|s| s.to_string()).collect();
        // The snapshot's first item was (1, 3): u2 and u3 were written by deltas after it started.
        assert_eq!(
            absence(1, &received, false, Some(Key::new(1, 3)), &objects),
            Absence::Delete(vec!["u1".into()])
        );
    }

    #[test]
    fn mass_deletion_is_refused_without_confirmed_empty() {
        let objects = live(30);
        let received: HashSet<String> = (0..9).map(|i| format!("u{i}")).collect();
        let start = Some(Key::new(2, 1));
        assert_eq!(
            absence(9, &received, false, start, &objects),
            Absence::Refused {
                would_delete: 21,
                live: 30
            }
        );
        match absence(9, &received, true, start, &objects) {
            Absence::Delete(uids) => assert_eq!(uids.len(), 21),
            other => panic!("confirmedEmpty allows it: {other:?}"),
        }
        // 21 of 40 is more than half and more than 20: refused; 20 of 30 is not more than 20: allowed.
        let received: HashSet<String> = (0..19).map(|i| format!("u{i}")).collect();
        assert!(matches!(
            absence(19, &received, false, start, &live(40)),
            Absence::Refused { .. }
        ));
        let received: HashSet<String> = (0..10).map(|i| format!("u{i}")).collect();
        assert!(matches!(absence(10, &received, false, start, &objects), Absence::Delete(v) if v.len() == 20));
        // An empty cluster, confirmed: everything goes.
        assert!(matches!(absence(0, &HashSet::new(), true, None, &objects), Absence::Delete(v) if v.len() == 30));
        assert!(matches!(
            absence(0, &HashSet::new(), false, None, &objects),
            Absence::Refused { .. }
        ));
    }

    #[test]
    fn agent_state_from_heartbeat_age_and_backlog() {
        assert_eq!(agent_state(Some(5.0), Some(1.2)), AgentState::Connected);
        assert_eq!(agent_state(Some(5.0), None), AgentState::Connected);
        assert_eq!(agent_state(Some(89.9), Some(60.0)), AgentState::Lagging);
        assert_eq!(agent_state(Some(90.0), Some(0.0)), AgentState::Lost);
        assert_eq!(agent_state(None, None), AgentState::Lost);
    }
}
