//! Pure: the JSON bodies of `capstan.reporter/v1` (docs/reporter-protocol.md), requests and answers.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::project::{ObjRef, Projected};

/// `schemaVersion` of every batch.
pub const SCHEMA_VERSION: &str = "capstan.reporter/v1";
/// `reporterVersion`.
pub const REPORTER_VERSION: &str = env!("CARGO_PKG_VERSION");

/// `snapshot` of a snapshot batch.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotPart {
    /// Snapshot id (the same in every part).
    pub id: String,
    /// Part number, from 1.
    pub part: u32,
    /// Whether this is the last part.
    #[serde(rename = "final")]
    pub final_: bool,
    /// Distinct uids sent in the whole snapshot (on the final part only).
    pub total_objects: Option<u64>,
    /// The reporter holds no object at all (lets the receiver delete everything it holds).
    pub confirmed_empty: bool,
}

/// One item of a batch.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Item {
    /// `upsert`, `delete` or `event`.
    pub op: &'static str,
    /// Position in the epoch's order.
    pub seq: u64,
    /// Which object.
    #[serde(rename = "ref")]
    pub obj_ref: ObjRef,
    /// `metadata.resourceVersion` (null for a delete).
    pub resource_version: Option<String>,
    /// `metadata.generation`.
    pub generation: Option<i64>,
    /// Null for a delete.
    pub content_hash: Option<String>,
    /// When the reporter saw this state (RFC 3339, milliseconds).
    pub observed_at: String,
    /// Null for a delete.
    pub summary: Value,
    /// Null for a delete.
    pub status: Value,
    /// Whether the projection was cut to fit.
    pub truncated: bool,
}

impl Item {
    /// The item carrying `p`'s current state.
    pub fn state(p: &Projected, seq: u64, observed_at: &str) -> Item {
        let op = if p.kind == super::project::Kind::Event {
            "event"
        } else {
            "upsert"
        };
        Item {
            op,
            seq,
            obj_ref: p.obj_ref.clone(),
            resource_version: Some(p.resource_version.clone()),
            generation: p.generation,
            content_hash: Some(p.content_hash.clone()),
            observed_at: observed_at.to_string(),
            summary: p.summary.clone(),
            status: p.status.clone(),
            truncated: p.truncated,
        }
    }

    /// A tombstone.
    pub fn delete(obj_ref: ObjRef, seq: u64, observed_at: &str) -> Item {
        Item {
            op: "delete",
            seq,
            obj_ref,
            resource_version: None,
            generation: None,
            content_hash: None,
            observed_at: observed_at.to_string(),
            summary: Value::Null,
            status: Value::Null,
            truncated: false,
        }
    }
}

/// Who is sending (constant for a process, `epoch` per term).
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Sender {
    /// `agentId`.
    pub agent_id: String,
    /// `clusterName`.
    pub cluster_name: String,
    /// This process (pod name plus a random suffix).
    pub instance: String,
}

/// `POST /reports`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportBody<'a> {
    /// [`SCHEMA_VERSION`].
    pub schema_version: &'static str,
    /// `agentId`.
    pub agent_id: &'a str,
    /// `clusterName`.
    pub cluster_name: &'a str,
    /// [`REPORTER_VERSION`].
    pub reporter_version: &'static str,
    /// `instance`.
    pub instance: &'a str,
    /// The term.
    pub epoch: u64,
    /// Stable across retries of the same batch.
    pub batch_id: &'a str,
    /// Now.
    pub sent_at: String,
    /// `delta` or `snapshot`.
    pub mode: &'static str,
    /// The snapshot part, for a snapshot batch.
    pub snapshot: Option<&'a SnapshotPart>,
    /// The items.
    pub items: &'a [Item],
}

/// A digest entry.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DigestEntry {
    /// The object.
    pub uid: String,
    /// Its kind.
    pub kind: &'static str,
    /// Its current hash.
    pub content_hash: String,
}

/// `POST /digest`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DigestBody<'a> {
    /// The term.
    pub epoch: u64,
    /// The round.
    pub digest_id: &'a str,
    /// Chunk number, from 1.
    pub part: u32,
    /// Whether this is the last chunk.
    #[serde(rename = "final")]
    pub final_: bool,
    /// At most 1,000 entries.
    pub items: &'a [DigestEntry],
}

/// `POST /heartbeat`.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct HeartbeatBody {
    /// `instance`.
    pub instance: String,
    /// Always true (standbys do not send).
    pub leader: bool,
    /// The term.
    pub epoch: u64,
    /// [`REPORTER_VERSION`].
    pub reporter_version: &'static str,
    /// The API server's `gitVersion`.
    pub kubernetes_version: String,
    /// Objects per Capstan kind.
    pub counts: serde_json::Map<String, Value>,
    /// Pending objects.
    pub dirty: usize,
    /// Age of the oldest pending change.
    pub oldest_dirty_age_seconds: f64,
    /// Last acknowledged batch.
    pub last_ack_at: Option<String>,
    /// The last failure, in one line (no credentials).
    pub last_error: Option<String>,
    /// `ok` or `failed`.
    pub auth: &'static str,
}

/// `results[]` of a report answer.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct ItemResult {
    /// Index in `items`.
    pub i: usize,
    /// Short reason.
    #[serde(default)]
    pub code: String,
    /// Whether sending it again can succeed.
    #[serde(default)]
    pub retryable: bool,
}

/// The answer of `POST /reports` (`results` and `resync` are optional).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportAnswer {
    /// Highest seq of the batch.
    #[serde(default)]
    pub ack_seq: Option<u64>,
    /// Items not stored.
    #[serde(default)]
    pub results: Vec<ItemResult>,
    /// `digest` or `full`.
    #[serde(default)]
    pub resync: Option<String>,
}

/// The answer of `POST /digest`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct DigestAnswer {
    /// Uids the receiver needs.
    #[serde(default)]
    pub need: Vec<String>,
    /// `digest` or `full`.
    #[serde(default)]
    pub resync: Option<String>,
}

/// Any other answer (heartbeat, task result): only `resync` matters.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct PlainAnswer {
    /// `digest` or `full`.
    #[serde(default)]
    pub resync: Option<String>,
}

/// A task target.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct TaskTarget {
    /// The Application's namespace.
    pub namespace: String,
    /// The Application's name.
    pub name: String,
}

/// One task of `GET /tasks`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct Task {
    /// Unique id (idempotency key).
    pub id: String,
    /// `sync`, `refresh`, `rollback`, `terminate`.
    #[serde(rename = "type")]
    pub type_: String,
    /// The Application.
    pub target: TaskTarget,
    /// Per type.
    #[serde(default)]
    pub args: Value,
}

/// The answer of `GET /tasks`.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct TasksAnswer {
    /// Tasks ready now.
    #[serde(default)]
    pub tasks: Vec<Task>,
    /// `digest` or `full`.
    #[serde(default)]
    pub resync: Option<String>,
}

/// `POST /tasks/{id}/result`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskResult {
    /// `succeeded`, `failed` or `rejected`.
    pub state: &'static str,
    /// What happened.
    pub message: String,
}

/// Now, as RFC 3339 UTC with milliseconds.
pub fn now_rfc3339() -> String {
    format!("{:.3}", k8s_openapi::jiff::Timestamp::now())
}
