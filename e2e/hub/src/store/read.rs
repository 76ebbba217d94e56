//! Reads: the agents and their objects (for `/api/*` and the page), the request log and its search, and the
//! facts `GET /_hub/verify` checks.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};
use serde::Serialize;
use serde_json::{json, Value};

use super::{now_ms, rfc3339, StoreResult};
use crate::rules::{self, Key};
use crate::verify::{DeletionFact, ItemFact, RequestFact};

/// One agent as the API and the page show it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    pub agent_id: String,
    pub cluster_name: Option<String>,
    /// connected, lagging or lost.
    pub state: &'static str,
    pub epoch: i64,
    pub instance: Option<String>,
    pub reporter_version: Option<String>,
    pub first_seen_at: String,
    pub last_seen_at: String,
    pub last_heartbeat_at: Option<String>,
    pub heartbeat_age_seconds: Option<f64>,
    /// The last heartbeat's body.
    pub heartbeat: Option<Value>,
    pub resync: Option<String>,
    pub last_snapshot: Option<Value>,
    pub objects: i64,
    pub tombstones: i64,
    /// Requests received, by endpoint.
    pub requests: HashMap<String, i64>,
    /// Batches received more than once (the same batchId).
    pub repeated_batches: i64,
    /// Long polls waiting now (filled in by the server, which counts them).
    pub polling: usize,
}

impl AgentView {
    /// The last heartbeat's `oldestDirtyAgeSeconds`.
    pub fn oldest_dirty(&self) -> Option<f64> {
        self.heartbeat.as_ref()?.get("oldestDirtyAgeSeconds")?.as_f64()
    }
}

pub fn agents(conn: &Connection) -> StoreResult<Vec<AgentView>> {
    let now = now_ms();
    let mut stmt = conn.prepare(
        "SELECT a.agent_id, cluster_name, max_epoch, instance, reporter_version, first_seen_ms, last_seen_ms,
                heartbeat_ms, heartbeat, resync, last_snapshot,
                (SELECT COUNT(*) FROM objects o WHERE o.agent_id = a.agent_id AND deleted = 0),
                (SELECT COUNT(*) FROM objects o WHERE o.agent_id = a.agent_id AND deleted = 1),
                (SELECT COUNT(*) FROM batches b WHERE b.agent_id = a.agent_id AND seen > 1)
         FROM agents a ORDER BY a.agent_id",
    )?;
    let rows = stmt.query_map([], |r| {
        let heartbeat_ms: Option<i64> = r.get(7)?;
        let json_col = |i| {
            r.get::<_, Option<String>>(i)
                .map(|s| s.and_then(|s| serde_json::from_str(&s).ok()))
        };
        Ok(AgentView {
            agent_id: r.get(0)?,
            cluster_name: r.get(1)?,
            state: "lost",
            epoch: r.get(2)?,
            instance: r.get(3)?,
            reporter_version: r.get(4)?,
            first_seen_at: rfc3339(r.get(5)?),
            last_seen_at: rfc3339(r.get(6)?),
            last_heartbeat_at: heartbeat_ms.map(rfc3339),
            heartbeat_age_seconds: heartbeat_ms.map(|t| (now - t).max(0) as f64 / 1000.0),
            heartbeat: json_col(8)?,
            resync: r.get(9)?,
            last_snapshot: json_col(10)?,
            objects: r.get(11)?,
            tombstones: r.get(12)?,
            requests: HashMap::new(),
            repeated_batches: r.get(13)?,
            polling: 0,
        })
    })?;
    let mut agents: Vec<AgentView> = rows.collect::<Result<_, _>>()?;
    let mut counts = conn.prepare("SELECT endpoint, COUNT(*) FROM requests WHERE agent_id = ?1 GROUP BY endpoint")?;
    for a in &mut agents {
        a.state = rules::agent_state(a.heartbeat_age_seconds, a.oldest_dirty()).as_str();
        let rows = counts.query_map(params![a.agent_id], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
        })?;
        a.requests = rows.collect::<Result<_, _>>()?;
    }
    Ok(agents)
}

/// Filters of `GET /api/agents/{id}/objects`.
#[derive(Debug, Clone, Default)]
pub struct ObjectQuery {
    pub kind: Option<String>,
    pub include_deleted: bool,
}

pub fn objects(conn: &Connection, agent: &str, q: &ObjectQuery) -> StoreResult<Vec<Value>> {
    let mut stmt = conn.prepare(
        "SELECT uid, api_version, kind, namespace, name, epoch, seq, deleted, deleted_by, content_hash,
                resource_version, generation, observed_at, summary, status, truncated, updated_ms
         FROM objects WHERE agent_id = ?1 AND (?2 IS NULL OR kind = ?2) AND (?3 OR deleted = 0)
         ORDER BY kind, namespace, name",
    )?;
    let rows = stmt.query_map(params![agent, q.kind, q.include_deleted], |r| {
        let json_col = |i| {
            r.get::<_, Option<String>>(i)
                .map(|s| s.and_then(|s| serde_json::from_str::<Value>(&s).ok()))
        };
        Ok(json!({
            "uid": r.get::<_, String>(0)?,
            "apiVersion": r.get::<_, String>(1)?,
            "kind": r.get::<_, String>(2)?,
            "namespace": r.get::<_, String>(3)?,
            "name": r.get::<_, String>(4)?,
            "epoch": r.get::<_, i64>(5)?,
            "seq": r.get::<_, i64>(6)?,
            "deleted": r.get::<_, bool>(7)?,
            "deletedBy": r.get::<_, Option<String>>(8)?,
            "contentHash": r.get::<_, Option<String>>(9)?,
            "resourceVersion": r.get::<_, Option<String>>(10)?,
            "generation": r.get::<_, Option<i64>>(11)?,
            "observedAt": r.get::<_, Option<String>>(12)?,
            "summary": json_col(13)?,
            "status": json_col(14)?,
            "truncated": r.get::<_, bool>(15)?,
            "updatedAt": rfc3339(r.get(16)?),
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Events of one agent, newest first.
pub fn events(conn: &Connection, agent: &str) -> StoreResult<Vec<Value>> {
    let mut stmt = conn.prepare(
        "SELECT uid, namespace, name, epoch, seq, observed_at, status FROM events WHERE agent_id = ?1
         ORDER BY epoch DESC, seq DESC",
    )?;
    let rows = stmt.query_map(params![agent], |r| {
        let status: Option<String> = r.get(6)?;
        Ok(json!({
            "uid": r.get::<_, String>(0)?, "namespace": r.get::<_, String>(1)?, "name": r.get::<_, String>(2)?,
            "epoch": r.get::<_, i64>(3)?, "seq": r.get::<_, i64>(4)?, "observedAt": r.get::<_, Option<String>>(5)?,
            "status": status.and_then(|s| serde_json::from_str::<Value>(&s).ok()),
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Snapshots of one agent, oldest first.
pub fn snapshots(conn: &Connection, agent: &str) -> StoreResult<Vec<Value>> {
    let mut stmt = conn.prepare(
        "SELECT snapshot_id, epoch, parts, max_part, total, confirmed_empty, outcome, deleted, started_ms, completed_ms
         FROM snapshots WHERE agent_id = ?1 ORDER BY started_ms",
    )?;
    let rows = stmt.query_map(params![agent], |r| {
        Ok(json!({
            "id": r.get::<_, String>(0)?, "epoch": r.get::<_, i64>(1)?, "parts": r.get::<_, i64>(2)?,
            "lastPart": r.get::<_, i64>(3)?, "totalObjects": r.get::<_, Option<i64>>(4)?,
            "confirmedEmpty": r.get::<_, bool>(5)?, "outcome": r.get::<_, String>(6)?,
            "deleted": r.get::<_, i64>(7)?, "startedAt": rfc3339(r.get(8)?),
            "completedAt": r.get::<_, Option<i64>>(9)?.map(rfc3339),
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// One Application as the page shows it.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AppView {
    pub agent_id: String,
    pub namespace: String,
    pub name: String,
    pub sync: Option<String>,
    pub health: Option<String>,
    pub revision: Option<String>,
    pub operation: Option<String>,
    /// The newest task for it: "sync: succeeded".
    pub last_task: Option<String>,
    pub observed_at: Option<String>,
    pub truncated: bool,
}

/// Every live Application across agents (at most `limit`), with the newest task for each.
pub fn applications(conn: &Connection, limit: usize) -> StoreResult<Vec<AppView>> {
    let mut stmt = conn.prepare(
        "SELECT o.agent_id, o.namespace, o.name, o.summary, o.observed_at, o.truncated,
                (SELECT t.type || ': ' || t.state FROM tasks t WHERE t.agent_id = o.agent_id
                   AND t.namespace = o.namespace AND t.name = o.name ORDER BY t.seq DESC LIMIT 1)
         FROM objects o WHERE o.kind = 'Application' AND o.deleted = 0
         ORDER BY o.agent_id, o.namespace, o.name LIMIT ?1",
    )?;
    let rows = stmt.query_map(params![limit as i64], |r| {
        let summary: Value = r
            .get::<_, Option<String>>(3)?
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or(Value::Null);
        let field = |k: &str| summary.get(k).and_then(Value::as_str).map(str::to_owned);
        Ok(AppView {
            agent_id: r.get(0)?,
            namespace: r.get(1)?,
            name: r.get(2)?,
            sync: field("sync"),
            health: field("health"),
            revision: field("revision"),
            operation: field("operationPhase"),
            last_task: r.get(6)?,
            observed_at: r.get(4)?,
            truncated: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Filters of `GET /_hub/requests`.
#[derive(Debug, Clone, Default)]
pub struct RequestQuery {
    pub agent: Option<String>,
    pub endpoint: Option<String>,
    /// Only requests with a larger id.
    pub after: i64,
    pub bodies: bool,
    pub limit: i64,
}

pub fn requests(conn: &Connection, q: &RequestQuery) -> StoreResult<Vec<Value>> {
    let mut stmt = conn.prepare(
        "SELECT id, started_ms, answered_ms, agent_id, method, path, endpoint, code, note, headers, body, body_bytes,
                retry_deadline_ms
         FROM requests WHERE id > ?1 AND (?2 IS NULL OR agent_id = ?2) AND (?3 IS NULL OR endpoint = ?3)
         ORDER BY id LIMIT ?4",
    )?;
    let rows = stmt.query_map(params![q.after, q.agent, q.endpoint, q.limit], |r| {
        let headers: String = r.get(9)?;
        let body: Option<Vec<u8>> = r.get(10)?;
        let body = body
            .filter(|_| q.bodies)
            .map(|b| match serde_json::from_slice::<Value>(&b) {
                Ok(v) => v,
                Err(_) => Value::String(String::from_utf8_lossy(&b).into_owned()),
            });
        Ok(json!({
            "id": r.get::<_, i64>(0)?, "startedAt": rfc3339(r.get(1)?),
            "answeredAt": r.get::<_, Option<i64>>(2)?.map(rfc3339), "agent": r.get::<_, Option<String>>(3)?,
            "method": r.get::<_, String>(4)?, "path": r.get::<_, String>(5)?, "endpoint": r.get::<_, String>(6)?,
            "code": r.get::<_, Option<i64>>(7)?, "note": r.get::<_, Option<String>>(8)?,
            "headers": serde_json::from_str::<Value>(&headers).unwrap_or(Value::Null),
            "body": body, "bodyBytes": r.get::<_, i64>(11)?,
            "retryDeadline": r.get::<_, Option<i64>>(12)?.map(rfc3339),
        }))
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Characters of context shown either side of a match.
const CONTEXT: usize = 40;

/// Where `needle` occurs (byte for byte) in the logged requests: their path, headers or decompressed bodies.
pub fn search(conn: &Connection, needle: &str) -> StoreResult<Value> {
    let searched: i64 = conn.query_row("SELECT COUNT(*) FROM requests", [], |r| r.get(0))?;
    let first: Option<i64> = conn
        .query_row("SELECT MIN(id) FROM requests", [], |r| r.get(0))
        .optional()?
        .flatten();
    let mut stmt = conn.prepare(
        "SELECT id, started_ms, agent_id, endpoint, path, headers, body FROM requests
         WHERE instr(path, ?1) > 0 OR instr(headers, ?1) > 0 OR instr(body, CAST(?1 AS BLOB)) > 0 ORDER BY id",
    )?;
    let mut matches = Vec::new();
    let rows = stmt.query_map(params![needle], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, Option<String>>(2)?,
            r.get::<_, String>(3)?,
            r.get::<_, String>(4)?,
            r.get::<_, String>(5)?,
            r.get::<_, Option<Vec<u8>>>(6)?.unwrap_or_default(),
        ))
    })?;
    for row in rows {
        let (id, at, agent, endpoint, path, headers, body) = row?;
        for (place, text) in [
            ("path", path.into_bytes()),
            ("headers", headers.into_bytes()),
            ("body", body),
        ] {
            if let Some(context) = context_of(&text, needle.as_bytes()) {
                matches.push(
                    json!({"requestId": id, "at": rfc3339(at), "agent": agent, "endpoint": endpoint,
                                    "where": place, "context": context}),
                );
            }
        }
    }
    Ok(
        json!({"matches": matches, "requestsSearched": searched, "firstRequestId": first,
              "complete": first.is_none_or(|f| f <= 1)}),
    )
}

fn context_of(haystack: &[u8], needle: &[u8]) -> Option<String> {
    let at = haystack.windows(needle.len()).position(|w| w == needle)?;
    let from = at.saturating_sub(CONTEXT);
    let to = (at + needle.len() + CONTEXT).min(haystack.len());
    Some(String::from_utf8_lossy(&haystack[from..to]).into_owned())
}

/// Everything `verify` checks, from the journals.
pub fn verify_facts(conn: &Connection) -> StoreResult<(Vec<RequestFact>, Vec<ItemFact>, Vec<DeletionFact>)> {
    let mut stmt = conn.prepare(
        "SELECT id, agent_id, started_ms, COALESCE(answered_ms, started_ms), COALESCE(code, 0), retry_deadline_ms, token
         FROM requests WHERE agent_id IS NOT NULL ORDER BY id",
    )?;
    let requests = stmt
        .query_map([], |r| {
            Ok(RequestFact {
                id: r.get(0)?,
                agent: r.get(1)?,
                started_ms: r.get(2)?,
                answered_ms: r.get(3)?,
                code: r.get(4)?,
                retry_deadline_ms: r.get(5)?,
                token: r.get(6)?,
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut stmt = conn.prepare("SELECT request_id, agent_id, uid, op, epoch, seq FROM journal ORDER BY id")?;
    let items = stmt
        .query_map([], |r| {
            Ok(ItemFact {
                request_id: r.get(0)?,
                agent: r.get(1)?,
                uid: r.get(2)?,
                op: r.get(3)?,
                key: Key::new(r.get::<_, i64>(4)? as u64, r.get::<_, i64>(5)? as u64),
            })
        })?
        .collect::<Result<_, _>>()?;
    let mut stmt = conn
        .prepare("SELECT request_id, agent_id, uid, snapshot_id, final, received, total FROM deletions ORDER BY id")?;
    let deletions = stmt
        .query_map([], |r| {
            Ok(DeletionFact {
                request_id: r.get(0)?,
                agent: r.get(1)?,
                uid: r.get(2)?,
                snapshot_id: r.get(3)?,
                is_final: r.get(4)?,
                received: r.get::<_, i64>(5)? as u64,
                total: r.get::<_, i64>(6)? as u64,
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok((requests, items, deletions))
}
