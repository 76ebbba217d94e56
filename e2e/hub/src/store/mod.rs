//! Durable state in one SQLite file (WAL, `synchronous=FULL`): an agent endpoint answers 2xx only after the
//! transaction that stored its request committed, so a hub restarted on the same file has everything it ever
//! acknowledged.
//!
//! - [`ingest`]: the agent endpoints' transactions (batches, digests, heartbeats) built on [`crate::rules`];
//! - [`tasks`]: the task queue (enqueue, long-poll claims with re-delivery, idempotent results);
//! - [`read`]: the read APIs, the page's data, the request-log search and the facts `verify` checks.
//!
//! Tables: `agents`, `objects` (live objects and tombstones, one row per uid with its `(epoch, seq)`),
//! `events`, `snapshots` + `snapshot_uids`, `digest_uids`, `batches`, `tasks`, `tokens`, and the observer's
//! journals, which "forget everything" keeps: `requests` (every request: headers and decompressed body),
//! `journal` (every valid item of a processed batch) and `deletions` (every deletion by absence).
//!
//! One connection behind a mutex serialises the transactions; the async handlers reach it through
//! [`Store::call`] on tokio's blocking pool.

pub mod ingest;
pub mod read;
pub mod tasks;

use std::path::Path;
use std::sync::{Arc, Mutex};

use rusqlite::{params, Connection, OptionalExtension, Transaction};

/// A storage failure (the only error category of this module): the request is answered 500.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("storage: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("storage: {0}")]
    Other(String),
}

pub type StoreResult<T> = Result<T, StoreError>;

const SCHEMA: &str = r#"
CREATE TABLE IF NOT EXISTS agents (
  agent_id TEXT PRIMARY KEY, cluster_name TEXT, max_epoch INTEGER NOT NULL DEFAULT 0, instance TEXT,
  reporter_version TEXT, first_seen_ms INTEGER NOT NULL, last_seen_ms INTEGER NOT NULL, heartbeat_ms INTEGER,
  heartbeat TEXT, resync TEXT, last_snapshot TEXT);
CREATE TABLE IF NOT EXISTS objects (
  agent_id TEXT NOT NULL, uid TEXT NOT NULL, api_version TEXT NOT NULL, kind TEXT NOT NULL,
  namespace TEXT NOT NULL, name TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL,
  deleted INTEGER NOT NULL DEFAULT 0, deleted_by TEXT, content_hash TEXT, resource_version TEXT,
  generation INTEGER, observed_at TEXT, summary TEXT, status TEXT, truncated INTEGER NOT NULL DEFAULT 0,
  updated_ms INTEGER NOT NULL, PRIMARY KEY (agent_id, uid));
CREATE INDEX IF NOT EXISTS objects_kind ON objects (kind, deleted);
CREATE TABLE IF NOT EXISTS events (
  agent_id TEXT NOT NULL, uid TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,
  epoch INTEGER NOT NULL, seq INTEGER NOT NULL, content_hash TEXT, observed_at TEXT, status TEXT,
  updated_ms INTEGER NOT NULL, PRIMARY KEY (agent_id, uid));
CREATE TABLE IF NOT EXISTS snapshots (
  agent_id TEXT NOT NULL, snapshot_id TEXT NOT NULL, epoch INTEGER NOT NULL, start_epoch INTEGER,
  start_seq INTEGER, parts INTEGER NOT NULL DEFAULT 0, max_part INTEGER NOT NULL DEFAULT 0, total INTEGER,
  confirmed_empty INTEGER NOT NULL DEFAULT 0, outcome TEXT NOT NULL, deleted INTEGER NOT NULL DEFAULT 0,
  started_ms INTEGER NOT NULL, completed_ms INTEGER, PRIMARY KEY (agent_id, snapshot_id));
CREATE TABLE IF NOT EXISTS snapshot_uids (
  agent_id TEXT NOT NULL, snapshot_id TEXT NOT NULL, uid TEXT NOT NULL,
  PRIMARY KEY (agent_id, snapshot_id, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS digest_uids (
  agent_id TEXT NOT NULL, digest_id TEXT NOT NULL, uid TEXT NOT NULL,
  PRIMARY KEY (agent_id, digest_id, uid)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS batches (
  agent_id TEXT NOT NULL, batch_id TEXT NOT NULL, first_request INTEGER NOT NULL, seen INTEGER NOT NULL,
  PRIMARY KEY (agent_id, batch_id));
CREATE TABLE IF NOT EXISTS tasks (
  seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, agent_id TEXT NOT NULL, type TEXT NOT NULL,
  namespace TEXT NOT NULL, name TEXT NOT NULL, args TEXT NOT NULL, state TEXT NOT NULL,
  created_ms INTEGER NOT NULL, delivered_ms INTEGER, deliveries INTEGER NOT NULL DEFAULT 0,
  result_message TEXT, result_ms INTEGER, results INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS tasks_agent ON tasks (agent_id, state);
CREATE TABLE IF NOT EXISTS tokens (token TEXT PRIMARY KEY, accepted INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS requests (
  id INTEGER PRIMARY KEY AUTOINCREMENT, started_ms INTEGER NOT NULL, answered_ms INTEGER,
  agent_id TEXT, method TEXT NOT NULL, path TEXT NOT NULL, endpoint TEXT NOT NULL, code INTEGER,
  note TEXT, headers TEXT NOT NULL, body BLOB, body_bytes INTEGER NOT NULL, token TEXT NOT NULL,
  retry_deadline_ms INTEGER);
CREATE TABLE IF NOT EXISTS journal (
  id INTEGER PRIMARY KEY AUTOINCREMENT, request_id INTEGER NOT NULL, agent_id TEXT NOT NULL,
  uid TEXT NOT NULL, op TEXT NOT NULL, epoch INTEGER NOT NULL, seq INTEGER NOT NULL, outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS deletions (
  id INTEGER PRIMARY KEY AUTOINCREMENT, request_id INTEGER NOT NULL, agent_id TEXT NOT NULL,
  uid TEXT NOT NULL, snapshot_id TEXT NOT NULL, final INTEGER NOT NULL, received INTEGER NOT NULL,
  total INTEGER NOT NULL);
"#;

/// The database, shared by every handler.
#[derive(Clone)]
pub struct Store {
    conn: Arc<Mutex<Connection>>,
}

impl Store {
    /// Opens (or creates) the database file and its tables.
    pub fn open(path: &Path) -> StoreResult<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn: Arc::new(Mutex::new(conn)),
        })
    }

    /// Runs `f` on the connection on the blocking pool.
    pub async fn call<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> StoreResult<T> + Send + 'static,
    {
        let conn = Arc::clone(&self.conn);
        tokio::task::spawn_blocking(move || {
            let mut guard = conn.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut guard)
        })
        .await
        .map_err(|e| StoreError::Other(format!("the storage task failed: {e}")))?
    }

    /// Runs `f` in one transaction, committed when it returns `Ok`.
    pub async fn transaction<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Transaction<'_>) -> StoreResult<T> + Send + 'static,
    {
        self.call(move |conn| {
            let tx = conn.transaction()?;
            let out = f(&tx)?;
            tx.commit()?;
            Ok(out)
        })
        .await
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// An RFC 3339 UTC time with milliseconds, as the protocol writes times.
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .unwrap_or_default()
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

// ------------------------------------------------------------------------------------------------------------
// The request log

/// A request as it arrived, for the log.
#[derive(Debug, Clone, Default)]
pub struct RequestRecord {
    pub started_ms: i64,
    pub agent: Option<String>,
    pub method: String,
    pub path: String,
    pub endpoint: String,
    /// The request headers as a JSON object (name → list of values), verbatim.
    pub headers: String,
    /// The body, decompressed when it was gzip.
    pub body: Vec<u8>,
    /// The body's size as sent.
    pub body_bytes: usize,
    /// A fingerprint of the bearer token (`sha256:` + 16 hex digits), or "" without one.
    pub token: String,
}

/// How a request was answered, for the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnswerRecord {
    /// The status code; 0 when the connection was closed or reset instead of answering.
    pub code: u16,
    pub note: Option<String>,
    pub retry_deadline_ms: Option<i64>,
}

/// Inserts the request (answer still unknown) and returns its id, for journals written in the same transaction.
pub fn begin_request(tx: &Transaction<'_>, r: &RequestRecord) -> StoreResult<i64> {
    tx.execute(
        "INSERT INTO requests (started_ms, agent_id, method, path, endpoint, headers, body, body_bytes, token)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
        params![
            r.started_ms,
            r.agent,
            r.method,
            r.path,
            r.endpoint,
            r.headers,
            r.body,
            r.body_bytes as i64,
            r.token
        ],
    )?;
    Ok(tx.last_insert_rowid())
}

/// Records how request `id` was answered.
pub fn finish_request(tx: &Transaction<'_>, id: i64, a: &AnswerRecord) -> StoreResult<()> {
    tx.execute(
        "UPDATE requests SET answered_ms = ?2, code = ?3, note = ?4, retry_deadline_ms = ?5 WHERE id = ?1",
        params![id, now_ms(), a.code, a.note, a.retry_deadline_ms],
    )?;
    Ok(())
}

/// Logs a request answered without touching any other state.
pub fn log_request(tx: &Transaction<'_>, r: &RequestRecord, a: &AnswerRecord) -> StoreResult<i64> {
    let id = begin_request(tx, r)?;
    finish_request(tx, id, a)?;
    Ok(id)
}

/// Keeps the newest `limit` requests; returns how many were removed.
pub fn prune_requests(conn: &Connection, limit: u64) -> StoreResult<usize> {
    Ok(conn.execute(
        "DELETE FROM requests WHERE id <= (SELECT MAX(id) FROM requests) - ?1",
        params![limit as i64],
    )?)
}

// ------------------------------------------------------------------------------------------------------------
// Tokens and the operator's resets

/// The accepted tokens: the `--token` values with the run-time changes stored in the database applied.
pub fn load_tokens(conn: &Connection, flags: &[String]) -> StoreResult<std::collections::BTreeSet<String>> {
    let mut tokens: std::collections::BTreeSet<String> = flags.iter().cloned().collect();
    let mut stmt = conn.prepare("SELECT token, accepted FROM tokens")?;
    let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?)))?;
    for row in rows {
        let (token, accepted) = row?;
        if accepted {
            tokens.insert(token);
        } else {
            tokens.remove(&token);
        }
    }
    Ok(tokens)
}

/// Stores a run-time token change.
pub fn change_token(tx: &Transaction<'_>, token: &str, accepted: bool) -> StoreResult<()> {
    tx.execute(
        "INSERT INTO tokens (token, accepted) VALUES (?1, ?2)
         ON CONFLICT (token) DO UPDATE SET accepted = excluded.accepted",
        params![token, accepted],
    )?;
    Ok(())
}

/// Forgets the receiver state, as a SaaS restarted on an empty database: objects, events, snapshots, digests
/// and batches go, agents lose their epoch and heartbeat and are asked for a full snapshot. The task queue and
/// the journals stay. Returns how many objects were forgotten.
pub fn forget(tx: &Transaction<'_>) -> StoreResult<usize> {
    let objects = tx.execute("DELETE FROM objects", [])?;
    tx.execute_batch(
        "DELETE FROM events; DELETE FROM snapshots; DELETE FROM snapshot_uids; DELETE FROM digest_uids;
         DELETE FROM batches;
         UPDATE agents SET max_epoch = 0, heartbeat_ms = NULL, heartbeat = NULL, resync = 'full',
                           last_snapshot = NULL;",
    )?;
    Ok(objects)
}

/// Asks one agent (or every known agent) for a resync in its next answers.
pub fn request_resync(tx: &Transaction<'_>, agent: Option<&str>, mode: &str) -> StoreResult<usize> {
    let n = match agent {
        Some(a) => {
            ingest::ensure_agent(tx, a)?;
            tx.execute("UPDATE agents SET resync = ?2 WHERE agent_id = ?1", params![a, mode])?
        }
        None => tx.execute("UPDATE agents SET resync = ?1", params![mode])?,
    };
    Ok(n)
}

/// The resync an agent's answers carry now.
pub fn pending_resync(tx: &Transaction<'_>, agent: &str) -> StoreResult<Option<String>> {
    Ok(tx
        .query_row("SELECT resync FROM agents WHERE agent_id = ?1", params![agent], |r| {
            r.get(0)
        })
        .optional()?
        .flatten())
}
