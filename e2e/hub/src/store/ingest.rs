//! The agent endpoints' transactions: epoch fencing, batches (the `(epoch, seq)` apply rule, tombstones,
//! snapshot bookkeeping and deletion by absence), digests and heartbeats. Each function runs inside the
//! request's transaction, after [`super::begin_request`], so its journal rows name the request.

use std::collections::{HashMap, HashSet};

use rusqlite::{params, OptionalExtension, Transaction};
use serde_json::{json, Value};

use super::{now_ms, StoreResult};
use crate::rules::{self, Absence, HeldHash, Key, LiveObject};
use crate::wire::{Batch, Digest, Heartbeat, Item, Op, SnapshotInfo};

/// Creates the agent's row on first contact.
pub fn ensure_agent(tx: &Transaction<'_>, agent: &str) -> StoreResult<()> {
    let now = now_ms();
    tx.execute(
        "INSERT INTO agents (agent_id, first_seen_ms, last_seen_ms) VALUES (?1, ?2, ?2)
         ON CONFLICT (agent_id) DO UPDATE SET last_seen_ms = excluded.last_seen_ms",
        params![agent, now],
    )?;
    Ok(())
}

/// Fences a request by its epoch: `Ok(Err(current))` for a deposed term, else raises the agent's highest epoch.
pub fn fence(tx: &Transaction<'_>, agent: &str, epoch: u64) -> StoreResult<Result<(), u64>> {
    ensure_agent(tx, agent)?;
    let highest: i64 = tx.query_row(
        "SELECT max_epoch FROM agents WHERE agent_id = ?1",
        params![agent],
        |r| r.get(0),
    )?;
    if let Err(current) = rules::check_epoch(highest as u64, epoch) {
        return Ok(Err(current));
    }
    tx.execute(
        "UPDATE agents SET max_epoch = ?2 WHERE agent_id = ?1",
        params![agent, epoch as i64],
    )?;
    Ok(Ok(()))
}

/// Items the `rejectItems` fault keeps out of a batch.
#[derive(Debug, Clone, Default)]
pub struct Rejection {
    pub items: Vec<usize>,
    pub code: String,
    pub retryable: bool,
}

/// What a processed batch answers (besides `resync`), and what the log notes about it.
#[derive(Debug, Clone, Default)]
pub struct BatchOutcome {
    pub ack_seq: u64,
    pub results: Vec<Value>,
    pub notes: Vec<String>,
}

/// Stores a batch (already fenced): every valid item by the apply rule, then the snapshot bookkeeping.
pub fn apply_batch(
    tx: &Transaction<'_>,
    request_id: i64,
    agent: &str,
    batch: &Batch,
    reject: Option<&Rejection>,
) -> StoreResult<BatchOutcome> {
    tx.execute(
        "UPDATE agents SET cluster_name = ?2, instance = ?3, reporter_version = ?4 WHERE agent_id = ?1",
        params![agent, batch.cluster_name, batch.instance, batch.reporter_version],
    )?;
    note_batch_id(tx, request_id, agent, &batch.batch_id)?;
    let mut out = BatchOutcome::default();
    let mut sent_uids = Vec::new();
    let mut start: Option<Key> = None;
    for (i, raw) in batch.items.iter().enumerate() {
        out.ack_seq = out.ack_seq.max(raw.get("seq").and_then(Value::as_u64).unwrap_or(0));
        if let Some(uid) = raw.pointer("/ref/uid").and_then(Value::as_str) {
            sent_uids.push(uid.to_owned());
        }
        let item = match crate::wire::parse_item(raw) {
            Ok(item) => item,
            Err(problem) => {
                out.results
                    .push(json!({"i": i, "code": problem.code, "retryable": problem.retryable}));
                out.notes
                    .push(format!("item {i} not stored ({}): {}", problem.code, problem.message));
                continue;
            }
        };
        let key = Key::new(batch.epoch, item.seq);
        let outcome = match reject.filter(|r| r.items.contains(&i)) {
            Some(r) => {
                out.results
                    .push(json!({"i": i, "code": r.code, "retryable": r.retryable}));
                "rejected"
            }
            None if item.op == Op::Event => store_event(tx, agent, &item, key)?,
            None => store_object(tx, agent, &item, key)?,
        };
        start = Some(start.map_or(key, |s| s.min(key)));
        tx.execute(
            "INSERT INTO journal (request_id, agent_id, uid, op, epoch, seq, outcome) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![request_id, agent, item.object.uid, item.op.as_str(), key.epoch as i64, key.seq as i64, outcome],
        )?;
    }
    if let Some(snapshot) = &batch.snapshot {
        let note = snapshot_part(tx, request_id, agent, batch.epoch, snapshot, &sent_uids, start)?;
        out.notes.push(note);
    }
    Ok(out)
}

fn note_batch_id(tx: &Transaction<'_>, request_id: i64, agent: &str, batch_id: &str) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO batches (agent_id, batch_id, first_request, seen) VALUES (?1, ?2, ?3, 1)
         ON CONFLICT (agent_id, batch_id) DO UPDATE SET seen = seen + 1",
        params![agent, batch_id, request_id],
    )?;
    Ok(())
}

fn held_key(tx: &Transaction<'_>, table: &str, agent: &str, uid: &str) -> StoreResult<Option<Key>> {
    let sql = format!("SELECT epoch, seq FROM {table} WHERE agent_id = ?1 AND uid = ?2");
    Ok(tx
        .query_row(&sql, params![agent, uid], |r| {
            Ok(Key::new(r.get::<_, i64>(0)? as u64, r.get::<_, i64>(1)? as u64))
        })
        .optional()?)
}

/// An upsert or a delete (a tombstone row, so an older upsert arriving later cannot bring the object back).
fn store_object(tx: &Transaction<'_>, agent: &str, item: &Item, key: Key) -> StoreResult<&'static str> {
    if !rules::should_store(held_key(tx, "objects", agent, &item.object.uid)?, key) {
        return Ok("stale");
    }
    let r = &item.object;
    if item.deletes_by_uid() {
        // Only the uid is known to the sender: keep the identity held here, mark it deleted.
        let changed = tx.execute(
            "UPDATE objects SET epoch = ?3, seq = ?4, deleted = 1, deleted_by = 'delete', content_hash = NULL,
               summary = NULL, status = NULL, observed_at = ?5, updated_ms = ?6 WHERE agent_id = ?1 AND uid = ?2",
            params![
                agent,
                r.uid,
                key.epoch as i64,
                key.seq as i64,
                item.observed_at,
                now_ms()
            ],
        )?;
        return Ok(if changed == 0 { "stale" } else { "applied" });
    }
    let deleted = item.op == Op::Delete;
    tx.execute(
        "INSERT OR REPLACE INTO objects (agent_id, uid, api_version, kind, namespace, name, epoch, seq, deleted,
           deleted_by, content_hash, resource_version, generation, observed_at, summary, status, truncated, updated_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)",
        params![
            agent,
            r.uid,
            r.api_version,
            r.kind,
            r.namespace,
            r.name,
            key.epoch as i64,
            key.seq as i64,
            deleted,
            deleted.then_some("delete"),
            item.content_hash,
            item.resource_version,
            item.generation,
            item.observed_at,
            item.summary.as_ref().map(|s| Value::Object(s.clone()).to_string()),
            item.status.as_ref().filter(|s| !s.is_null()).map(Value::to_string),
            item.truncated,
            now_ms()
        ],
    )?;
    Ok("applied")
}

/// Events kept per agent (the newest by `(epoch, seq)`).
const MAX_EVENTS: i64 = 1000;

fn store_event(tx: &Transaction<'_>, agent: &str, item: &Item, key: Key) -> StoreResult<&'static str> {
    if !rules::should_store(held_key(tx, "events", agent, &item.object.uid)?, key) {
        return Ok("stale");
    }
    tx.execute(
        "INSERT OR REPLACE INTO events (agent_id, uid, namespace, name, epoch, seq, content_hash, observed_at, status,
           updated_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
        params![
            agent,
            item.object.uid,
            item.object.namespace,
            item.object.name,
            key.epoch as i64,
            key.seq as i64,
            item.content_hash,
            item.observed_at,
            item.status.as_ref().map(Value::to_string),
            now_ms()
        ],
    )?;
    tx.execute(
        "DELETE FROM events WHERE agent_id = ?1 AND uid NOT IN
           (SELECT uid FROM events WHERE agent_id = ?1 ORDER BY epoch DESC, seq DESC LIMIT ?2)",
        params![agent, MAX_EVENTS],
    )?;
    Ok("applied")
}

/// Records a snapshot part; on the final part, deletes by absence when the rules allow. Returns a log note.
fn snapshot_part(
    tx: &Transaction<'_>,
    request_id: i64,
    agent: &str,
    epoch: u64,
    s: &SnapshotInfo,
    sent_uids: &[String],
    start: Option<Key>,
) -> StoreResult<String> {
    tx.execute(
        "INSERT INTO snapshots (agent_id, snapshot_id, epoch, outcome, started_ms) VALUES (?1, ?2, ?3, 'in progress', ?4)
         ON CONFLICT (agent_id, snapshot_id) DO NOTHING",
        params![agent, s.id, epoch as i64, now_ms()],
    )?;
    for uid in sent_uids {
        tx.execute(
            "INSERT OR IGNORE INTO snapshot_uids (agent_id, snapshot_id, uid) VALUES (?1, ?2, ?3)",
            params![agent, s.id, uid],
        )?;
    }
    if let Some(k) = start {
        tx.execute(
            "UPDATE snapshots SET start_epoch = ?3, start_seq = ?4 WHERE agent_id = ?1 AND snapshot_id = ?2
               AND (start_epoch IS NULL OR start_epoch > ?3 OR (start_epoch = ?3 AND start_seq > ?4))",
            params![agent, s.id, k.epoch as i64, k.seq as i64],
        )?;
    }
    tx.execute(
        "UPDATE snapshots SET parts = parts + 1, max_part = MAX(max_part, ?3) WHERE agent_id = ?1 AND snapshot_id = ?2",
        params![agent, s.id, s.part as i64],
    )?;
    if s.part == 1 {
        // A new snapshot is what a pending resync (full or digest) asked for.
        tx.execute("UPDATE agents SET resync = NULL WHERE agent_id = ?1", params![agent])?;
    }
    if !s.is_final {
        return Ok(format!("snapshot {} part {}", s.id, s.part));
    }
    let completed: Option<i64> = tx.query_row(
        "SELECT completed_ms FROM snapshots WHERE agent_id = ?1 AND snapshot_id = ?2",
        params![agent, s.id],
        |r| r.get(0),
    )?;
    if completed.is_some() {
        return Ok(format!("snapshot {} final part repeated: nothing more to do", s.id));
    }
    finish_snapshot(tx, request_id, agent, s)
}

fn finish_snapshot(tx: &Transaction<'_>, request_id: i64, agent: &str, s: &SnapshotInfo) -> StoreResult<String> {
    let received: HashSet<String> = strings(
        tx,
        "SELECT uid FROM snapshot_uids WHERE agent_id = ?1 AND snapshot_id = ?2",
        params![agent, s.id],
    )?
    .into_iter()
    .collect();
    let start: Option<Key> = tx.query_row(
        "SELECT start_epoch, start_seq FROM snapshots WHERE agent_id = ?1 AND snapshot_id = ?2",
        params![agent, s.id],
        |r| {
            let (e, q): (Option<i64>, Option<i64>) = (r.get(0)?, r.get(1)?);
            Ok(e.zip(q).map(|(e, q)| Key::new(e as u64, q as u64)))
        },
    )?;
    let live = live_objects(tx, agent)?;
    let total = s.total_objects.unwrap_or(0);
    let (outcome, deleted) = match rules::absence(total, &received, s.confirmed_empty, start, &live) {
        Absence::Incomplete { received, total } => {
            // Ask for a new snapshot: this one cannot prove what is gone.
            tx.execute("UPDATE agents SET resync = 'full' WHERE agent_id = ?1", params![agent])?;
            (
                format!("incomplete: {received} of {total} uids arrived; nothing deleted, full resync asked"),
                0,
            )
        }
        Absence::Refused { would_delete, live } => (
            format!(
                "refused: it would delete {would_delete} of {live} objects without confirmedEmpty; nothing deleted"
            ),
            0,
        ),
        Absence::Delete(uids) => {
            for uid in &uids {
                delete_by_absence(tx, request_id, agent, uid, s, received.len() as u64)?;
            }
            (
                format!("complete: {} uids, {} deleted by absence", received.len(), uids.len()),
                uids.len(),
            )
        }
    };
    tx.execute(
        "UPDATE snapshots SET total = ?3, confirmed_empty = ?4, outcome = ?5, deleted = ?6, completed_ms = ?7
         WHERE agent_id = ?1 AND snapshot_id = ?2",
        params![
            agent,
            s.id,
            total as i64,
            s.confirmed_empty,
            outcome,
            deleted as i64,
            now_ms()
        ],
    )?;
    let summary = json!({"id": s.id, "outcome": outcome, "at": super::rfc3339(now_ms())}).to_string();
    tx.execute(
        "UPDATE agents SET last_snapshot = ?2 WHERE agent_id = ?1",
        params![agent, summary],
    )?;
    // Only the latest snapshot's uids are worth keeping (a repeated final part needs none).
    tx.execute(
        "DELETE FROM snapshot_uids WHERE agent_id = ?1 AND snapshot_id <> ?2",
        params![agent, s.id],
    )?;
    Ok(format!("snapshot {} final: {outcome}", s.id))
}

fn delete_by_absence(
    tx: &Transaction<'_>,
    request_id: i64,
    agent: &str,
    uid: &str,
    s: &SnapshotInfo,
    received: u64,
) -> StoreResult<()> {
    tx.execute(
        "UPDATE objects SET deleted = 1, deleted_by = ?3, summary = NULL, status = NULL, content_hash = NULL,
           updated_ms = ?4 WHERE agent_id = ?1 AND uid = ?2",
        params![agent, uid, format!("snapshot {}", s.id), now_ms()],
    )?;
    tx.execute(
        "INSERT INTO deletions (request_id, agent_id, uid, snapshot_id, final, received, total)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        params![
            request_id,
            agent,
            uid,
            s.id,
            s.is_final,
            received as i64,
            s.total_objects.unwrap_or(0) as i64
        ],
    )?;
    Ok(())
}

fn live_objects(tx: &Transaction<'_>, agent: &str) -> StoreResult<Vec<LiveObject>> {
    let mut stmt = tx.prepare("SELECT uid, epoch, seq FROM objects WHERE agent_id = ?1 AND deleted = 0")?;
    let rows = stmt.query_map(params![agent], |r| {
        Ok(LiveObject {
            uid: r.get(0)?,
            key: Key::new(r.get::<_, i64>(1)? as u64, r.get::<_, i64>(2)? as u64),
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn strings(tx: &Transaction<'_>, sql: &str, p: impl rusqlite::Params) -> StoreResult<Vec<String>> {
    let mut stmt = tx.prepare(sql)?;
    let rows = stmt.query_map(p, |r| r.get(0))?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Answers a digest chunk (already fenced) with the uids the hub needs.
pub fn apply_digest(tx: &Transaction<'_>, agent: &str, d: &Digest) -> StoreResult<Vec<String>> {
    for entry in &d.items {
        tx.execute(
            "INSERT OR IGNORE INTO digest_uids (agent_id, digest_id, uid) VALUES (?1, ?2, ?3)",
            params![agent, d.digest_id, entry.uid],
        )?;
    }
    let mut held: HashMap<String, HeldHash> = HashMap::new();
    let held_hash = |r: &rusqlite::Row<'_>| -> rusqlite::Result<(String, HeldHash)> {
        Ok((
            r.get(0)?,
            HeldHash {
                content_hash: r.get(1)?,
                deleted: r.get(2)?,
            },
        ))
    };
    if d.is_final {
        let mut stmt = tx.prepare("SELECT uid, content_hash, deleted FROM objects WHERE agent_id = ?1")?;
        for row in stmt.query_map(params![agent], held_hash)? {
            let (uid, h) = row?;
            held.insert(uid, h);
        }
    }
    let unknown: Vec<&str> = d
        .items
        .iter()
        .map(|e| e.uid.as_str())
        .filter(|uid| !held.contains_key(*uid))
        .collect();
    for uid in unknown {
        let found = tx
            .query_row(
                "SELECT uid, content_hash, deleted FROM objects WHERE agent_id = ?1 AND uid = ?2
                 UNION ALL SELECT uid, content_hash, 0 FROM events WHERE agent_id = ?1 AND uid = ?2 LIMIT 1",
                params![agent, uid],
                held_hash,
            )
            .optional()?;
        if let Some((uid, h)) = found {
            held.insert(uid, h);
        }
    }
    let chunk: Vec<(String, String)> = d
        .items
        .iter()
        .map(|e| (e.uid.clone(), e.content_hash.clone()))
        .collect();
    let listed: HashSet<String> = if d.is_final {
        strings(
            tx,
            "SELECT uid FROM digest_uids WHERE agent_id = ?1 AND digest_id = ?2",
            params![agent, d.digest_id],
        )?
        .into_iter()
        .collect()
    } else {
        HashSet::new()
    };
    let need = rules::digest_need(&chunk, &held, d.is_final, &listed);
    if d.is_final {
        tx.execute("DELETE FROM digest_uids WHERE agent_id = ?1", params![agent])?;
        tx.execute(
            "UPDATE agents SET resync = NULL WHERE agent_id = ?1 AND resync = 'digest'",
            params![agent],
        )?;
    }
    Ok(need)
}

/// Stores a heartbeat (already fenced) with the time it arrived.
pub fn apply_heartbeat(tx: &Transaction<'_>, agent: &str, hb: &Heartbeat, raw: &Value) -> StoreResult<()> {
    tx.execute(
        "UPDATE agents SET heartbeat_ms = ?2, heartbeat = ?3, instance = ?4, reporter_version = ?5 WHERE agent_id = ?1",
        params![agent, now_ms(), raw.to_string(), hb.instance, hb.reporter_version],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{begin_request, RequestRecord, Store};
    use crate::wire::{parse_batch, SCHEMA_VERSION};

    fn item(op: &str, seq: u64, uid: &str) -> Value {
        let deleted = op == "delete";
        json!({"op": op, "seq": seq,
               "ref": {"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "namespace": "n", "name": uid, "uid": uid},
               "resourceVersion": "1", "generation": 1,
               "contentHash": if deleted { Value::Null } else { json!(format!("sha256:{}", "0".repeat(64))) },
               "observedAt": "2026-11-26T10:04:04.900Z", "summary": if deleted { Value::Null } else { json!({"health": "Healthy"}) },
               "status": if deleted { Value::Null } else { json!({}) }, "truncated": false})
    }

    fn batch(epoch: u64, snapshot: Option<Value>, items: Vec<Value>) -> Batch {
        let body = json!({"schemaVersion": SCHEMA_VERSION, "agentId": "a", "clusterName": "c", "reporterVersion": "0",
                          "instance": "i", "epoch": epoch, "batchId": "b", "sentAt": "2026-11-26T10:04:05.123Z",
                          "mode": if snapshot.is_some() { "snapshot" } else { "delta" }, "snapshot": snapshot, "items": items});
        parse_batch("a", body.to_string().as_bytes()).unwrap()
    }

    fn run(conn: &mut rusqlite::Connection, b: &Batch) -> BatchOutcome {
        let tx = conn.transaction().unwrap();
        let id = begin_request(&tx, &RequestRecord::default()).unwrap();
        assert_eq!(fence(&tx, "a", b.epoch).unwrap(), Ok(()));
        let out = apply_batch(&tx, id, "a", b, None).unwrap();
        tx.commit().unwrap();
        out
    }

    fn live(conn: &rusqlite::Connection) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT uid FROM objects WHERE deleted = 0 ORDER BY uid")
            .unwrap();
        stmt.query_map([], |r| r.get(0)).unwrap().map(Result::unwrap).collect()
    }

    fn store() -> (tempfile::TempDir, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        drop(Store::open(&dir.path().join("hub.db")).unwrap());
        let conn = rusqlite::Connection::open(dir.path().join("hub.db")).unwrap();
        (dir, conn)
    }

    #[test]
    fn tombstones_keep_older_upserts_out() {
        let (_dir, mut conn) = store();
        run(
            &mut conn,
            &batch(1, None, vec![item("upsert", 1, "x"), item("delete", 2, "x")]),
        );
        let out = run(&mut conn, &batch(1, None, vec![item("upsert", 1, "x")]));
        assert!(out.results.is_empty(), "an older item is a no-op, not an error");
        assert!(live(&conn).is_empty());
    }

    #[test]
    fn a_complete_snapshot_deletes_the_unlisted_and_a_repeated_final_part_does_nothing_more() {
        let (_dir, mut conn) = store();
        run(
            &mut conn,
            &batch(1, None, vec![item("upsert", 1, "x"), item("upsert", 2, "y")]),
        );
        let snap = |total| json!({"id": "s1", "part": 1, "final": true, "totalObjects": total});
        let out = run(&mut conn, &batch(2, Some(snap(2)), vec![item("upsert", 1, "x")]));
        assert!(out.notes[0].contains("incomplete"), "{:?}", out.notes);
        assert_eq!(live(&conn), ["x", "y"]);
        let snap2 = json!({"id": "s2", "part": 1, "final": true, "totalObjects": 1});
        let out = run(&mut conn, &batch(2, Some(snap2.clone()), vec![item("upsert", 2, "x")]));
        assert!(out.notes[0].contains("1 deleted"), "{:?}", out.notes);
        assert_eq!(live(&conn), ["x"]);
        run(&mut conn, &batch(2, None, vec![item("upsert", 3, "z")]));
        let out = run(&mut conn, &batch(2, Some(snap2), vec![item("upsert", 2, "x")]));
        assert!(out.notes[0].contains("repeated"), "{:?}", out.notes);
        assert_eq!(live(&conn), ["x", "z"]);
    }
}
