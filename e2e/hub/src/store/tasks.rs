//! The task queue: `POST /api/tasks` enqueues, the agent's long poll claims, a task without a result is
//! delivered again once the re-delivery delay has passed, and the first result of a task is kept (a repeated
//! result is counted, not applied again).

use rusqlite::{params, OptionalExtension, Transaction};
use serde_json::{json, Value};

use super::{now_ms, rfc3339, StoreResult};
use crate::wire::{NewTask, TaskResult};

/// At most this many tasks per long-poll answer.
pub const MAX_TASKS_PER_POLL: i64 = 100;

/// Enqueues a task and returns its id (`t-<n>`).
pub fn enqueue(tx: &Transaction<'_>, task: &NewTask) -> StoreResult<String> {
    let seq: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM tasks", [], |r| r.get(0))?;
    let id = format!("t-{seq}");
    tx.execute(
        "INSERT INTO tasks (seq, id, agent_id, type, namespace, name, args, state, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'queued', ?8)",
        params![
            seq,
            id,
            task.agent_id,
            task.kind,
            task.target.namespace,
            task.target.name,
            Value::Object(task.args.clone()).to_string(),
            now_ms()
        ],
    )?;
    Ok(id)
}

/// Claims the agent's deliverable tasks (never delivered, or delivered `redeliver_ms` ago without a result), as
/// the long poll answers them, and the instant the next delivered task becomes deliverable again.
pub fn claim(tx: &Transaction<'_>, agent: &str, redeliver_ms: i64) -> StoreResult<(Vec<Value>, Option<i64>)> {
    super::ingest::ensure_agent(tx, agent)?;
    let now = now_ms();
    let due = now - redeliver_ms;
    let mut stmt = tx.prepare(
        "SELECT id, type, namespace, name, args FROM tasks
         WHERE agent_id = ?1 AND result_ms IS NULL AND (delivered_ms IS NULL OR delivered_ms <= ?2)
         ORDER BY seq LIMIT ?3",
    )?;
    let tasks: Vec<Value> = stmt
        .query_map(params![agent, due, MAX_TASKS_PER_POLL], |r| {
            let args: String = r.get(4)?;
            Ok(json!({
                "id": r.get::<_, String>(0)?,
                "type": r.get::<_, String>(1)?,
                "target": {"namespace": r.get::<_, String>(2)?, "name": r.get::<_, String>(3)?},
                "args": serde_json::from_str::<Value>(&args).unwrap_or_else(|_| json!({})),
            }))
        })?
        .collect::<Result<_, _>>()?;
    drop(stmt);
    for task in &tasks {
        tx.execute(
            "UPDATE tasks SET state = 'delivered', delivered_ms = ?2, deliveries = deliveries + 1 WHERE id = ?1",
            params![task["id"].as_str(), now],
        )?;
    }
    let next: Option<i64> = tx.query_row(
        "SELECT MIN(delivered_ms) FROM tasks WHERE agent_id = ?1 AND result_ms IS NULL AND delivered_ms IS NOT NULL",
        params![agent],
        |r| r.get(0),
    )?;
    Ok((tasks, next.map(|d| d + redeliver_ms)))
}

/// What posting a result did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResultOutcome {
    Recorded,
    /// The task already had a result: kept, this one counted.
    Repeated,
    /// No such task for this agent.
    Unknown,
}

pub fn record_result(tx: &Transaction<'_>, agent: &str, id: &str, result: &TaskResult) -> StoreResult<ResultOutcome> {
    let existing: Option<Option<i64>> = tx
        .query_row(
            "SELECT result_ms FROM tasks WHERE id = ?1 AND agent_id = ?2",
            params![id, agent],
            |r| r.get(0),
        )
        .optional()?;
    let outcome = match existing {
        None => return Ok(ResultOutcome::Unknown),
        Some(Some(_)) => ResultOutcome::Repeated,
        Some(None) => {
            tx.execute(
                "UPDATE tasks SET state = ?2, result_message = ?3, result_ms = ?4 WHERE id = ?1",
                params![id, result.state.as_str(), result.message, now_ms()],
            )?;
            ResultOutcome::Recorded
        }
    };
    tx.execute("UPDATE tasks SET results = results + 1 WHERE id = ?1", params![id])?;
    Ok(outcome)
}

const TASK_COLUMNS: &str =
    "id, agent_id, type, namespace, name, args, state, created_ms, delivered_ms, deliveries, result_message, result_ms, results";

fn task_json(r: &rusqlite::Row<'_>) -> rusqlite::Result<Value> {
    let args: String = r.get(5)?;
    let ms = |i| r.get::<_, Option<i64>>(i).map(|v| v.map(rfc3339));
    Ok(json!({
        "id": r.get::<_, String>(0)?,
        "agentId": r.get::<_, String>(1)?,
        "type": r.get::<_, String>(2)?,
        "target": {"namespace": r.get::<_, String>(3)?, "name": r.get::<_, String>(4)?},
        "args": serde_json::from_str::<Value>(&args).unwrap_or_else(|_| json!({})),
        "state": r.get::<_, String>(6)?,
        "createdAt": ms(7)?,
        "deliveredAt": ms(8)?,
        "deliveries": r.get::<_, i64>(9)?,
        "message": r.get::<_, Option<String>>(10)?,
        "resultAt": ms(11)?,
        "results": r.get::<_, i64>(12)?,
    }))
}

/// One task as `GET /api/tasks/{id}` shows it.
pub fn task(conn: &rusqlite::Connection, id: &str) -> StoreResult<Option<Value>> {
    let sql = format!("SELECT {TASK_COLUMNS} FROM tasks WHERE id = ?1");
    Ok(conn.query_row(&sql, params![id], task_json).optional()?)
}

/// Every task (of one agent), newest first, at most 1,000.
pub fn tasks(conn: &rusqlite::Connection, agent: Option<&str>) -> StoreResult<Vec<Value>> {
    let sql =
        format!("SELECT {TASK_COLUMNS} FROM tasks WHERE ?1 IS NULL OR agent_id = ?1 ORDER BY seq DESC LIMIT 1000");
    let mut stmt = conn.prepare(&sql)?;
    let rows = stmt.query_map(params![agent], task_json)?;
    Ok(rows.collect::<Result<_, _>>()?)
}
