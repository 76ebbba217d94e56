//! `GET /_hub/verify`: invariants over everything the hub received, as a pure function over its journals.
//!
//! The journals (the request log, the item journal and the absence-deletion journal) survive "forget
//! everything", so the checks see a sender's whole history across a simulated SaaS restart. Checks:
//!
//! - `out_of_order`: an item arrived with a lower `(epoch, seq)` than one already received for its uid, and is
//!   not a retry of an item received before (a retry repeats the same `(epoch, seq)`);
//! - `resurrected_delete`: an upsert arrived with a lower `(epoch, seq)` than a delete of the same uid;
//! - `seq_reused`: two different uids arrived with the same `(epoch, seq)` (seq rises strictly, item by item);
//! - `retry_after`: a request started before the deadline of a `Retry-After` the hub gave that agent;
//! - `after_auth_failure`: a request with the same token started within 5 minutes after a 401/403;
//! - `deleted_from_incomplete_snapshot`: an object was deleted by absence for a snapshot that was not final or
//!   whose distinct uid count did not match `totalObjects`.
//!
//! A request that started less than [`GRACE_MS`] after the answer that closed the gate counts as already in
//! flight (a heartbeat sent by another lane while the answer was on its way), not as a violation.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use crate::rules::Key;

/// Requests starting within this many milliseconds of a gating answer were in flight already.
pub const GRACE_MS: i64 = 250;
/// After a 401/403, the same token may be tried again after this long.
pub const AUTH_RETRY_MS: i64 = 5 * 60 * 1000;

/// One request of the log, as the checks see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestFact {
    pub id: i64,
    pub agent: String,
    pub started_ms: i64,
    pub answered_ms: i64,
    pub code: u16,
    /// Set when the answer carried `Retry-After`: the instant it names.
    pub retry_deadline_ms: Option<i64>,
    /// A fingerprint of the bearer token the request carried.
    pub token: String,
}

/// One item of a processed batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemFact {
    pub request_id: i64,
    pub agent: String,
    pub uid: String,
    pub op: String,
    pub key: Key,
}

/// One deletion by absence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletionFact {
    pub request_id: i64,
    pub agent: String,
    pub uid: String,
    pub snapshot_id: String,
    pub is_final: bool,
    pub received: u64,
    pub total: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Violation {
    pub kind: &'static str,
    pub agent: String,
    pub request_id: i64,
    pub message: String,
}

/// Every violation, in the order of the requests that caused them.
pub fn verify(requests: &[RequestFact], items: &[ItemFact], deletions: &[DeletionFact]) -> Vec<Violation> {
    let mut out = gate_violations(requests);
    out.extend(item_violations(items));
    out.extend(
        deletions
            .iter()
            .filter(|d| !d.is_final || d.received != d.total)
            .map(|d| Violation {
                kind: "deleted_from_incomplete_snapshot",
                agent: d.agent.clone(),
                request_id: d.request_id,
                message: format!(
                    "{} was deleted by absence for snapshot {} (final: {}, {} of {} uids received)",
                    d.uid, d.snapshot_id, d.is_final, d.received, d.total
                ),
            }),
    );
    out.sort_by_key(|v| v.request_id);
    out
}

/// A gate closed by an answer: `Retry-After` until `until`, or an auth failure for `token`.
struct Gate {
    request_id: i64,
    answered_ms: i64,
    until_ms: i64,
    token: Option<String>,
    code: u16,
}

fn gate_violations(requests: &[RequestFact]) -> Vec<Violation> {
    let mut gates: HashMap<&str, Vec<Gate>> = HashMap::new();
    let mut out = Vec::new();
    let mut ordered: Vec<&RequestFact> = requests.iter().collect();
    ordered.sort_by_key(|r| r.id);
    for r in ordered {
        let open = gates.entry(r.agent.as_str()).or_default();
        open.retain(|g| g.until_ms > r.started_ms);
        for g in open.iter().filter(|g| r.started_ms > g.answered_ms + GRACE_MS) {
            match &g.token {
                None => out.push(Violation {
                    kind: "retry_after",
                    agent: r.agent.clone(),
                    request_id: r.id,
                    message: format!(
                        "request {} started {} ms before the Retry-After deadline of request {} ({})",
                        r.id,
                        g.until_ms - r.started_ms,
                        g.request_id,
                        g.code
                    ),
                }),
                Some(token) if *token == r.token => out.push(Violation {
                    kind: "after_auth_failure",
                    agent: r.agent.clone(),
                    request_id: r.id,
                    message: format!(
                        "request {} tried the token refused by request {} ({}) again after {} ms, before it changed",
                        r.id,
                        g.request_id,
                        g.code,
                        r.started_ms - g.answered_ms
                    ),
                }),
                Some(_) => {}
            }
        }
        if let Some(until) = r.retry_deadline_ms {
            open.push(Gate {
                request_id: r.id,
                answered_ms: r.answered_ms,
                until_ms: until,
                token: None,
                code: r.code,
            });
        }
        if r.code == 401 || r.code == 403 {
            open.push(Gate {
                request_id: r.id,
                answered_ms: r.answered_ms,
                until_ms: r.answered_ms + AUTH_RETRY_MS,
                token: Some(r.token.clone()),
                code: r.code,
            });
        }
    }
    out
}

#[derive(Default)]
struct UidHistory {
    newest: Option<(Key, String)>,
    newest_delete: Option<Key>,
    seen: HashSet<Key>,
}

fn item_violations(items: &[ItemFact]) -> Vec<Violation> {
    let mut history: HashMap<(&str, &str), UidHistory> = HashMap::new();
    let mut owners: HashMap<(&str, Key), &str> = HashMap::new();
    let mut out = Vec::new();
    for item in items {
        let violation = |kind, message| Violation {
            kind,
            agent: item.agent.clone(),
            request_id: item.request_id,
            message,
        };
        if let Some(other) = owners.insert((item.agent.as_str(), item.key), item.uid.as_str()) {
            if other != item.uid {
                out.push(violation(
                    "seq_reused",
                    format!("{} and {} both arrived with {}", other, item.uid, item.key),
                ));
            }
        }
        let h = history.entry((item.agent.as_str(), item.uid.as_str())).or_default();
        let retry = h.seen.contains(&item.key);
        match (&h.newest, h.newest_delete) {
            (_, Some(deleted)) if item.op == "upsert" && item.key < deleted && !retry => out.push(violation(
                "resurrected_delete",
                format!(
                    "an upsert of {} at {} arrived after its delete at {}",
                    item.uid, item.key, deleted
                ),
            )),
            (Some((newest, op)), _) if item.key < *newest && !retry => out.push(violation(
                "out_of_order",
                format!(
                    "{} {} at {} arrived after its {op} at {}",
                    item.op, item.uid, item.key, newest
                ),
            )),
            _ => {}
        }
        h.seen.insert(item.key);
        if h.newest.as_ref().is_none_or(|(k, _)| item.key > *k) {
            h.newest = Some((item.key, item.op.clone()));
        }
        if item.op == "delete" && h.newest_delete.is_none_or(|k| item.key > k) {
            h.newest_delete = Some(item.key);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(id: i64, started: i64, code: u16, deadline: Option<i64>, token: &str) -> RequestFact {
        RequestFact {
            id,
            agent: "a".into(),
            started_ms: started,
            answered_ms: started + 5,
            code,
            retry_deadline_ms: deadline,
            token: token.into(),
        }
    }

    fn kinds(v: &[Violation]) -> Vec<&'static str> {
        v.iter().map(|v| v.kind).collect()
    }

    #[test]
    fn a_request_before_retry_after_fires() {
        let ok = [
            req(1, 0, 503, Some(5_005), "t"),
            req(2, 100, 200, None, "t"),
            req(3, 5_010, 200, None, "t"),
        ];
        assert!(verify(&ok, &[], &[]).is_empty(), "in flight, then after the deadline");
        let bad = [req(1, 0, 429, Some(5_005), "t"), req(2, 1_000, 200, None, "t")];
        let v = verify(&bad, &[], &[]);
        assert_eq!(kinds(&v), ["retry_after"]);
        assert_eq!(v[0].request_id, 2);
        // Another agent is not gated.
        let mut other = req(2, 1_000, 200, None, "t");
        other.agent = "b".into();
        assert!(verify(&[req(1, 0, 503, Some(5_005), "t"), other], &[], &[]).is_empty());
    }

    #[test]
    fn the_same_token_after_a_401_fires_until_it_changes_or_five_minutes_pass() {
        let bad = [req(1, 0, 401, None, "old"), req(2, 2_000, 401, None, "old")];
        assert_eq!(kinds(&verify(&bad, &[], &[])), ["after_auth_failure"]);
        let rotated = [req(1, 0, 401, None, "old"), req(2, 2_000, 200, None, "new")];
        assert!(verify(&rotated, &[], &[]).is_empty());
        let patient = [
            req(1, 0, 403, None, "old"),
            req(2, AUTH_RETRY_MS + 10, 200, None, "old"),
        ];
        assert!(verify(&patient, &[], &[]).is_empty());
    }

    fn item(request_id: i64, uid: &str, op: &str, epoch: u64, seq: u64) -> ItemFact {
        ItemFact {
            request_id,
            agent: "a".into(),
            uid: uid.into(),
            op: op.into(),
            key: Key::new(epoch, seq),
        }
    }

    #[test]
    fn item_order_checks_fire_on_bad_sequences() {
        let good = [
            item(1, "x", "upsert", 1, 1),
            item(2, "x", "upsert", 1, 2),
            item(3, "x", "upsert", 1, 2),
        ];
        assert!(verify(&[], &good, &[]).is_empty(), "a retried item repeats its key");
        let reordered = [item(1, "x", "upsert", 1, 5), item(2, "x", "upsert", 1, 4)];
        assert_eq!(kinds(&verify(&[], &reordered, &[])), ["out_of_order"]);
        let resurrected = [item(1, "x", "delete", 2, 1), item(2, "x", "upsert", 1, 9)];
        assert_eq!(kinds(&verify(&[], &resurrected, &[])), ["resurrected_delete"]);
        let reused = [item(1, "x", "upsert", 1, 1), item(1, "y", "upsert", 1, 1)];
        assert_eq!(kinds(&verify(&[], &reused, &[])), ["seq_reused"]);
        let new_term = [item(1, "x", "upsert", 1, 9), item(2, "x", "upsert", 2, 1)];
        assert!(verify(&[], &new_term, &[]).is_empty());
    }

    #[test]
    fn a_deletion_from_an_incomplete_snapshot_fires() {
        let d = |is_final, received| DeletionFact {
            request_id: 7,
            agent: "a".into(),
            uid: "x".into(),
            snapshot_id: "s".into(),
            is_final,
            received,
            total: 3,
        };
        assert!(verify(&[], &[], &[d(true, 3)]).is_empty());
        assert_eq!(
            kinds(&verify(&[], &[], &[d(true, 2)])),
            ["deleted_from_incomplete_snapshot"]
        );
        assert_eq!(
            kinds(&verify(&[], &[], &[d(false, 3)])),
            ["deleted_from_incomplete_snapshot"]
        );
    }
}
