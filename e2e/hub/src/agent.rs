//! The agent endpoints of docs/reporter-protocol.md. Every request goes through one pipeline:
//!
//! 1. the fault switches decide first (latency, a reset before reading, or a status answered instead);
//! 2. the body is read (at most 8 MiB as sent) and decoded (gzip, at most 32 MiB);
//! 3. the bearer token, then the HMAC signature (with `--hmac-key`) are checked: 401 when wrong;
//! 4. the body is validated strictly ([`crate::wire`]) and processed in one transaction that also writes the
//!    request log row and the journals; the answer is sent only after that transaction committed;
//! 5. "commit then drop" and "reset while writing" faults then close the connection instead of answering.
//!
//! Every request is logged, whatever its answer.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::header::{HeaderValue, RETRY_AFTER};
use hyper::http::request::Parts;
use hyper::{Method, Request, Response};
use rusqlite::Transaction;
use serde_json::{json, Value};

use crate::faults::{Action, ConflictVariant, Endpoint, Phase, RetryAfterFormat};
use crate::http::{self, Abort, Body, ConnCtl};
use crate::server::{AgentRoute, Hub};
use crate::store::{self, ingest, now_ms, tasks, AnswerRecord, RequestRecord, StoreResult};
use crate::wire::{self, WireError};

/// Longest long poll (`GET /tasks?wait=`): longer waits are cut to this.
pub const MAX_WAIT_SECONDS: u64 = 60;

/// An answer, before it becomes a response: what the log records and what the client gets.
#[derive(Debug, Clone)]
pub struct Answer {
    pub code: u16,
    pub body: Value,
    /// The `Retry-After` header and the instant it names.
    pub retry_after: Option<(String, i64)>,
    pub note: Option<String>,
    pub request_id: Option<i64>,
}

impl Answer {
    pub fn ok(body: Value) -> Self {
        Self {
            code: 200,
            body,
            retry_after: None,
            note: None,
            request_id: None,
        }
    }

    pub fn error(code: u16, message: impl Into<String>) -> Self {
        let message = message.into();
        let mut a = Self::ok(http::error_body(http::error_code(code), &message));
        a.code = code;
        a.note = Some(message);
        a
    }

    /// No answer: the connection was closed (logged with code 0 and why).
    fn closed(why: &str) -> Self {
        Self {
            code: 0,
            note: Some(why.to_owned()),
            ..Self::ok(Value::Null)
        }
    }

    fn wire(e: &WireError) -> Self {
        Self::error(e.status, e.message.clone())
    }

    fn stale_epoch(current: u64) -> Self {
        let mut a = Self::ok(json!({"error": "stale_epoch", "currentEpoch": current}));
        a.code = 409;
        a.note = Some(format!("stale epoch: the agent's current epoch is {current}"));
        a
    }

    fn with_note(mut self, note: impl Into<String>) -> Self {
        let note = note.into();
        self.note = (!note.is_empty()).then_some(note);
        self
    }

    fn record(&self) -> AnswerRecord {
        AnswerRecord {
            code: self.code,
            note: self.note.clone(),
            retry_deadline_ms: self.retry_after.as_ref().map(|r| r.1),
        }
    }

    fn response(&self) -> Response<Body> {
        let mut r = http::json_response(self.code, &self.body);
        if let Some(value) = self
            .retry_after
            .as_ref()
            .and_then(|(v, _)| HeaderValue::from_str(v).ok())
        {
            r.headers_mut().insert(RETRY_AFTER, value);
        }
        r
    }
}

fn record(parts: &Parts, agent: Option<&str>, endpoint: &str) -> RequestRecord {
    RequestRecord {
        started_ms: now_ms(),
        agent: agent.map(str::to_owned),
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map_or_else(|| parts.uri.path().to_owned(), |p| p.to_string()),
        endpoint: endpoint.to_owned(),
        headers: http::headers_json(&parts.headers),
        token: http::fingerprint(http::bearer(&parts.headers)),
        ..RequestRecord::default()
    }
}

/// Logs a request answered without other state changes.
async fn logged(hub: &Hub, rec: RequestRecord, mut answer: Answer) -> Answer {
    let a = answer.record();
    match hub.store.transaction(move |tx| store::log_request(tx, &rec, &a)).await {
        Ok(id) => answer.request_id = Some(id),
        Err(e) => tracing::error!("logging a request failed: {e}"),
    }
    answer
}

/// Processes a request in one transaction with its log row; a storage failure is answered 500 (and nothing
/// of the request is stored).
async fn processed<F>(hub: &Hub, rec: RequestRecord, f: F) -> Answer
where
    F: FnOnce(&Transaction<'_>, i64) -> StoreResult<Answer> + Send + 'static,
{
    let again = rec.clone();
    let result = hub
        .store
        .transaction(move |tx| {
            let id = store::begin_request(tx, &rec)?;
            let mut answer = f(tx, id)?;
            store::finish_request(tx, id, &answer.record())?;
            answer.request_id = Some(id);
            Ok(answer)
        })
        .await;
    match result {
        Ok(answer) => answer,
        Err(e) => {
            tracing::error!("storing a request failed: {e}");
            logged(
                hub,
                again,
                Answer::error(500, format!("the hub could not store the request: {e}")),
            )
            .await
        }
    }
}

/// Rewrites the log row of a request whose answer a fault replaced by a closed connection.
async fn relog(hub: &Hub, answer: &Answer, note: &str) {
    let Some(id) = answer.request_id else { return };
    let a = AnswerRecord {
        code: 0,
        note: Some(format!("{note} (the answer would have been {})", answer.code)),
        retry_deadline_ms: None,
    };
    if let Err(e) = hub.store.transaction(move |tx| store::finish_request(tx, id, &a)).await {
        tracing::error!("logging a fault failed: {e}");
    }
}

pub async fn handle(
    hub: &Arc<Hub>,
    ctl: &ConnCtl,
    req: Request<Incoming>,
    route: AgentRoute,
) -> Result<Response<Body>, Abort> {
    let (parts, body) = req.into_parts();
    let mut rec = record(&parts, Some(&route.agent), route.endpoint.as_str());
    let decision = hub
        .faults
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .take(&route.agent, route.endpoint);
    if decision.latency_ms > 0 {
        tokio::time::sleep(Duration::from_millis(decision.latency_ms)).await;
    }
    if matches!(decision.action, Some(Action::Reset { phase: Phase::Read })) {
        ctl.reset_on_close();
        logged(
            hub,
            rec,
            Answer::closed("fault: connection reset while reading the request"),
        )
        .await;
        return Err(Abort);
    }
    let expected = if route.endpoint == Endpoint::Tasks {
        Method::GET
    } else {
        Method::POST
    };
    if parts.method != expected {
        let answer = Answer::error(405, format!("{} takes {expected}", route.endpoint.as_str()));
        return Ok(logged(hub, rec, answer).await.response());
    }
    let raw = match http::read_body(body, &parts.headers, http::MAX_BODY).await {
        Ok(raw) => raw,
        Err(e) => return Ok(logged(hub, rec, Answer::wire(&e)).await.response()),
    };
    rec.body_bytes = raw.len();
    let decoded = http::decode_body(&raw, &parts.headers);
    rec.body = decoded.as_ref().unwrap_or(&raw).clone();
    let answer = match decision.action.clone() {
        Some(Action::Status {
            status,
            retry_after,
            retry_after_format,
            variant,
        }) => {
            let a = fault_status(hub, &route.agent, status, retry_after, retry_after_format, variant).await;
            logged(hub, rec, a).await
        }
        action => match admit(hub, &parts, &raw, decoded) {
            Err(a) => logged(hub, rec, a).await,
            Ok(body) => {
                let reject = match action {
                    Some(Action::RejectItems { items, code, retryable }) => {
                        Some(ingest::Rejection { items, code, retryable })
                    }
                    _ => None,
                };
                match dispatch(hub, ctl, &parts, route, body, rec, reject).await {
                    Some(a) => a,
                    None => return Err(Abort),
                }
            }
        },
    };
    deliver(hub, ctl, answer, decision.action.as_ref()).await
}

/// Sends the answer, or closes the connection instead when a fault says so (after the request was stored).
async fn deliver(hub: &Hub, ctl: &ConnCtl, answer: Answer, action: Option<&Action>) -> Result<Response<Body>, Abort> {
    match action {
        Some(Action::CommitThenDrop) => {
            relog(hub, &answer, "fault: committed, then closed without answering").await;
            Err(Abort)
        }
        Some(Action::Reset { phase: Phase::Write }) => {
            relog(hub, &answer, "fault: committed, then reset halfway through the answer").await;
            ctl.reset_on_close();
            Ok(http::half_answer(answer.response(), answer.body.to_string().into()))
        }
        _ => Ok(answer.response()),
    }
}

/// Token, signature, encoding and content type: the checks before a body is looked at.
fn admit(hub: &Hub, parts: &Parts, raw: &[u8], decoded: Result<Vec<u8>, WireError>) -> Result<Vec<u8>, Answer> {
    if !hub.token_accepted(http::bearer(&parts.headers)) {
        return Err(Answer::error(401, "the bearer token is missing or not accepted"));
    }
    if let Some(key) = &hub.hmac_key {
        if !http::signature_ok(key, raw, http::header(&parts.headers, "x-capstan-signature")) {
            return Err(Answer::error(
                401,
                "X-Capstan-Signature is missing or is not the HMAC-SHA256 of the body as sent",
            ));
        }
    }
    let body = decoded.map_err(|e| Answer::wire(&e))?;
    if parts.method == Method::POST {
        let content_type = http::header(&parts.headers, "content-type").unwrap_or("");
        if content_type.split(';').next().map(str::trim) != Some("application/json") {
            return Err(Answer::error(
                400,
                format!("Content-Type must be application/json, not {content_type:?}"),
            ));
        }
    }
    Ok(body)
}

async fn fault_status(
    hub: &Hub,
    agent: &str,
    status: u16,
    retry_after: Option<u64>,
    format: Option<RetryAfterFormat>,
    variant: Option<ConflictVariant>,
) -> Answer {
    let mut answer = Answer::error(status, "fault injected by /_hub/faults");
    if status == 409 {
        answer.body = match variant.unwrap_or(ConflictVariant::Resync) {
            ConflictVariant::StaleEpoch => {
                let agent = agent.to_owned();
                let current = hub
                    .store
                    .call(move |conn| {
                        let epoch: Option<i64> = rusqlite::OptionalExtension::optional(conn.query_row(
                            "SELECT max_epoch FROM agents WHERE agent_id = ?1",
                            [agent],
                            |r| r.get(0),
                        ))?;
                        Ok(epoch.unwrap_or(0) + 1)
                    })
                    .await
                    .unwrap_or(1);
                json!({"error": "stale_epoch", "currentEpoch": current})
            }
            ConflictVariant::Resync => json!({"error": "resync_required"}),
        };
    }
    if let Some(seconds) = retry_after {
        let deadline = now_ms() + seconds as i64 * 1000;
        answer.retry_after = Some(match format.unwrap_or(RetryAfterFormat::Seconds) {
            RetryAfterFormat::Seconds => (seconds.to_string(), deadline),
            RetryAfterFormat::HttpDate => {
                let at = chrono::DateTime::from_timestamp_millis(deadline).unwrap_or_default();
                (
                    at.format("%a, %d %b %Y %H:%M:%S GMT").to_string(),
                    deadline / 1000 * 1000,
                )
            }
        });
    }
    answer
}

/// Runs the endpoint; `None` when the client went away during a long poll (the connection is dropped).
async fn dispatch(
    hub: &Arc<Hub>,
    ctl: &ConnCtl,
    parts: &Parts,
    route: AgentRoute,
    body: Vec<u8>,
    rec: RequestRecord,
    reject: Option<ingest::Rejection>,
) -> Option<Answer> {
    let agent = route.agent;
    Some(match route.endpoint {
        Endpoint::Reports => reports(hub, parts, agent, body, rec, reject).await,
        Endpoint::Digest => digest(hub, agent, body, rec).await,
        Endpoint::Heartbeat => heartbeat(hub, agent, body, rec).await,
        Endpoint::Tasks => return poll(hub, ctl, parts, agent, rec).await,
        Endpoint::Result => result(hub, agent, route.task_id.unwrap_or_default(), body, rec).await,
    })
}

async fn reports(
    hub: &Hub,
    parts: &Parts,
    agent: String,
    body: Vec<u8>,
    rec: RequestRecord,
    reject: Option<ingest::Rejection>,
) -> Answer {
    let batch = match wire::parse_batch(&agent, &body) {
        Ok(batch) => batch,
        Err(e) => return logged(hub, rec, Answer::wire(&e)).await,
    };
    if http::header(&parts.headers, "idempotency-key") != Some(batch.batch_id.as_str()) {
        return logged(
            hub,
            rec,
            Answer::error(400, "the Idempotency-Key header must carry the batchId"),
        )
        .await;
    }
    processed(hub, rec, move |tx, id| {
        if let Err(current) = ingest::fence(tx, &agent, batch.epoch)? {
            return Ok(Answer::stale_epoch(current));
        }
        let out = ingest::apply_batch(tx, id, &agent, &batch, reject.as_ref())?;
        let resync = store::pending_resync(tx, &agent)?;
        let body = json!({"ackSeq": out.ack_seq, "results": out.results, "resync": resync});
        Ok(Answer::ok(body).with_note(out.notes.join("; ")))
    })
    .await
}

async fn digest(hub: &Hub, agent: String, body: Vec<u8>, rec: RequestRecord) -> Answer {
    let chunk = match wire::parse_digest(&body) {
        Ok(chunk) => chunk,
        Err(e) => return logged(hub, rec, Answer::wire(&e)).await,
    };
    processed(hub, rec, move |tx, _| {
        if let Err(current) = ingest::fence(tx, &agent, chunk.epoch)? {
            return Ok(Answer::stale_epoch(current));
        }
        let need = ingest::apply_digest(tx, &agent, &chunk)?;
        let note = format!("digest {} part {}: {} needed", chunk.digest_id, chunk.part, need.len());
        let resync = store::pending_resync(tx, &agent)?;
        Ok(Answer::ok(json!({"need": need, "resync": resync})).with_note(note))
    })
    .await
}

async fn heartbeat(hub: &Hub, agent: String, body: Vec<u8>, rec: RequestRecord) -> Answer {
    let hb = match wire::parse_heartbeat(&body) {
        Ok(hb) => hb,
        Err(e) => return logged(hub, rec, Answer::wire(&e)).await,
    };
    let raw: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    processed(hub, rec, move |tx, _| {
        if let Err(current) = ingest::fence(tx, &agent, hb.epoch)? {
            return Ok(Answer::stale_epoch(current));
        }
        ingest::apply_heartbeat(tx, &agent, &hb, &raw)?;
        Ok(Answer::ok(json!({"resync": store::pending_resync(tx, &agent)?})))
    })
    .await
}

/// Adds `resync` to an answer body when one is pending (the endpoints whose documented answer lacks it).
fn with_resync(mut body: Value, resync: Option<String>) -> Value {
    if let (Some(r), Value::Object(map)) = (resync, &mut body) {
        map.insert("resync".into(), Value::String(r));
    }
    body
}

async fn poll(hub: &Arc<Hub>, ctl: &ConnCtl, parts: &Parts, agent: String, rec: RequestRecord) -> Option<Answer> {
    let wait = match wait_seconds(parts.uri.query()) {
        Ok(w) => Duration::from_secs(w.min(MAX_WAIT_SECONDS)),
        Err(e) => return Some(logged(hub, rec, Answer::wire(&e)).await),
    };
    let tasks = match claim_within(hub, ctl, &agent, wait).await {
        Ok(Some(tasks)) => tasks,
        Ok(None) => {
            logged(hub, rec, Answer::closed("the client went away during the long poll")).await;
            return None;
        }
        Err(e) => {
            return Some(
                logged(
                    hub,
                    rec,
                    Answer::error(500, format!("the hub could not read its tasks: {e}")),
                )
                .await,
            )
        }
    };
    let note = format!("{} task(s) delivered", tasks.len());
    Some(
        processed(hub, rec, move |tx, _| {
            let body = with_resync(json!({"tasks": tasks}), store::pending_resync(tx, &agent)?);
            Ok(Answer::ok(body).with_note(note))
        })
        .await,
    )
}

/// `wait` from the query (0 without one).
fn wait_seconds(query: Option<&str>) -> Result<u64, WireError> {
    let Some(value) = query.unwrap_or("").split('&').find_map(|kv| kv.strip_prefix("wait=")) else {
        return Ok(0);
    };
    value
        .parse()
        .map_err(|_| WireError::bad_request(format!("wait must be a number of seconds, not {value:?}")))
}

/// Claims deliverable tasks as soon as there are some, or after `wait`; `None` when the client went away.
async fn claim_within(hub: &Arc<Hub>, ctl: &ConnCtl, agent: &str, wait: Duration) -> StoreResult<Option<Vec<Value>>> {
    let _waiting = hub.polling(agent);
    let deadline = tokio::time::Instant::now() + wait;
    let redeliver_ms = hub.task_redelivery.as_millis() as i64;
    loop {
        let notified = hub.tasks_changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if ctl.peer_gone() {
            return Ok(None);
        }
        let who = agent.to_owned();
        let (tasks, next_due) = hub
            .store
            .transaction(move |tx| tasks::claim(tx, &who, redeliver_ms))
            .await?;
        let now = tokio::time::Instant::now();
        if !tasks.is_empty() || now >= deadline {
            return Ok(Some(tasks));
        }
        // Wake for a new task, a re-delivery falling due, the deadline, or once a second to notice a client gone.
        let mut until = deadline.min(now + Duration::from_secs(1));
        if let Some(due) = next_due {
            until = until.min(now + Duration::from_millis((due - now_ms()).max(0) as u64));
        }
        tokio::select! {
            () = &mut notified => {}
            () = tokio::time::sleep_until(until) => {}
        }
    }
}

async fn result(hub: &Hub, agent: String, task_id: String, body: Vec<u8>, rec: RequestRecord) -> Answer {
    let result = match wire::parse_task_result(&body) {
        Ok(result) => result,
        Err(e) => return logged(hub, rec, Answer::wire(&e)).await,
    };
    processed(hub, rec, move |tx, _| {
        let note = match tasks::record_result(tx, &agent, &task_id, &result)? {
            tasks::ResultOutcome::Unknown => {
                return Ok(Answer::error(404, format!("agent {agent} has no task {task_id:?}")));
            }
            tasks::ResultOutcome::Recorded => format!("task {task_id} {}", result.state.as_str()),
            tasks::ResultOutcome::Repeated => format!("task {task_id}: repeated result, the first one is kept"),
        };
        Ok(Answer::ok(with_resync(json!({}), store::pending_resync(tx, &agent)?)).with_note(note))
    })
    .await
}

/// Any other path: logged (a misrouted request still counts for the search) and answered 404.
pub async fn unknown(hub: &Hub, req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let agent = parts
        .uri
        .path()
        .strip_prefix("/v1/agents/")
        .and_then(|r| r.split('/').next());
    let mut rec = record(&parts, agent.filter(|a| crate::server::valid_agent_id(a)), "unknown");
    if let Ok(raw) = http::read_body(body, &parts.headers, http::MAX_BODY).await {
        rec.body_bytes = raw.len();
        rec.body = http::decode_body(&raw, &parts.headers).unwrap_or(raw);
    }
    let message = format!("no such endpoint: {} {}", parts.method, parts.uri.path());
    logged(hub, rec, Answer::error(404, message)).await.response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_is_read_from_the_query() {
        assert_eq!(wait_seconds(None), Ok(0));
        assert_eq!(wait_seconds(Some("wait=30")), Ok(30));
        assert_eq!(wait_seconds(Some("x=1&wait=5")), Ok(5));
        assert_eq!(wait_seconds(Some("wait=soon")).unwrap_err().status, 400);
    }
}
