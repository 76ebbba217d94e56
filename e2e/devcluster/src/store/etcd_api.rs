//! A small client for etcd v3's JSON gateway (`/v3/kv/range`, `/v3/kv/txn`, `/v3/kv/compaction`,
//! `/v3/watch`), which every etcd since 3.4 serves on its client port.
//!
//! Why the gateway and not gRPC: the gRPC crates (tonic, prost, h2) and their code generation would be new to
//! the build, while hyper's HTTP/1.1 client is already in it; the gateway speaks the same API (keys and
//! values base64, 64-bit integers as decimal strings), and for devcluster's request sizes its cost is a
//! small part of a request. A watch is one long POST whose response streams one JSON message per line.

use std::time::Duration;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use bytes::{Buf, Bytes, BytesMut};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

/// Bound of one unary request (connect included). A healthy local etcd answers in milliseconds.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// Keys fetched per range request when reading a whole prefix.
const PAGE: u64 = 1000;
/// Largest watch message accepted (a batch of events); etcd's own request limit is 1.5 MiB per value.
const MAX_MESSAGE: usize = 256 << 20;

/// Why an etcd request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EtcdError {
    /// etcd cannot be reached or cannot serve (connection refused, timeout, no leader).
    Unavailable(String),
    /// The requested revision was compacted away.
    Compacted,
    /// The requested revision does not exist yet.
    FutureRevision,
    /// Any other refusal, with etcd's message.
    Failed(String),
}

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EtcdError::Unavailable(m) => write!(f, "etcd is unavailable: {m}"),
            EtcdError::Compacted => f.write_str("etcdserver: mvcc: required revision has been compacted"),
            EtcdError::FutureRevision => f.write_str("etcdserver: mvcc: required revision is a future revision"),
            EtcdError::Failed(m) => write!(f, "etcd refused the request: {m}"),
        }
    }
}

type Result<T> = std::result::Result<T, EtcdError>;

/// One stored key.
#[derive(Debug, Clone)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: u64,
}

/// A range answer: the store revision it was read at and the keys.
pub struct Range {
    pub revision: u64,
    pub kvs: Vec<Kv>,
}

/// A transaction condition.
pub enum Compare {
    /// The key does not exist.
    Absent(String),
    /// The key exists and was last modified at this revision.
    ModRevision(String, u64),
}

/// A transaction write.
pub enum Op {
    Put(String, Vec<u8>),
    Delete(String),
}

/// A transaction answer: the store revision after it, and whether the conditions held (and the writes ran).
pub struct Txn {
    pub revision: u64,
    pub succeeded: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a watch. For a delete, `kv.mod_revision` is the deletion's revision.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: EventKind,
    pub kv: Kv,
    pub prev: Option<Kv>,
}

/// One watch message.
pub enum WatchMessage {
    Created,
    Events(Vec<WatchEvent>),
    /// The watch ended; `compact_revision > 0` when its start revision was compacted.
    Canceled {
        compact_revision: u64,
        reason: String,
    },
    /// Any other message (progress notifications).
    Other,
}

/// The gateway client: a pool of HTTP/1.1 keep-alive connections to one etcd endpoint.
pub struct Api {
    http: HttpClient<HttpConnector, Full<Bytes>>,
    base: String,
}

fn b64(s: &[u8]) -> String {
    B64.encode(s)
}

fn num(v: &Value) -> u64 {
    match v {
        Value::String(s) => s.parse().unwrap_or(0),
        Value::Number(n) => n.as_u64().unwrap_or(0),
        _ => 0,
    }
}

fn unb64(v: &Value) -> Vec<u8> {
    v.as_str().and_then(|s| B64.decode(s).ok()).unwrap_or_default()
}

fn kv_of(v: &Value) -> Kv {
    Kv {
        key: String::from_utf8_lossy(&unb64(&v["key"])).into_owned(),
        value: unb64(&v["value"]),
        mod_revision: num(&v["mod_revision"]),
    }
}

fn revision_of(v: &Value) -> u64 {
    num(&v["header"]["revision"])
}

/// The end of the key range holding every key that starts with `prefix`.
pub fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// Map a gateway error body (`{"error": ..., "code": N}`, gRPC codes) to an [`EtcdError`].
fn error_of(status: u16, body: &[u8]) -> EtcdError {
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let message = v["message"]
        .as_str()
        .or_else(|| v["error"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {status}: {}", String::from_utf8_lossy(body).trim()));
    if message.contains("required revision has been compacted") {
        return EtcdError::Compacted;
    }
    if message.contains("required revision is a future revision") {
        return EtcdError::FutureRevision;
    }
    // gRPC Unavailable (14), DeadlineExceeded (4), or a gateway that cannot reach its own server.
    match (num(&v["code"]), status) {
        (14 | 4, _) | (_, 502..=504) => EtcdError::Unavailable(message),
        _ => EtcdError::Failed(message),
    }
}

impl Api {
    /// A client for `url` (`http://host:port`; TLS endpoints are not supported).
    pub fn new(url: &str) -> std::result::Result<Api, String> {
        let base = url.trim_end_matches('/').to_string();
        let rest = base
            .strip_prefix("http://")
            .ok_or_else(|| format!("--etcd {url:?}: only http:// endpoints are supported"))?;
        if rest.is_empty() || rest.contains('/') {
            return Err(format!("--etcd {url:?}: expected http://HOST:PORT"));
        }
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(REQUEST_TIMEOUT));
        let http = HttpClient::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Ok(Api { http, base })
    }

    pub fn url(&self) -> &str {
        &self.base
    }

    async fn send(&self, path: &str, body: &Value) -> Result<hyper::Response<Incoming>> {
        let req = hyper::Request::post(format!("{}{path}", self.base))
            .header(hyper::header::CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(serde_json::to_vec(body).unwrap_or_default())))
            .map_err(|e| EtcdError::Failed(e.to_string()))?;
        self.http
            .request(req)
            .await
            .map_err(|e| EtcdError::Unavailable(format!("{}{path}: {}", self.base, error_chain(&e))))
    }

    /// One unary call, bounded by [`REQUEST_TIMEOUT`].
    async fn call(&self, path: &str, body: Value) -> Result<Value> {
        let exchange = async {
            let resp = self.send(path, &body).await?;
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| EtcdError::Unavailable(format!("reading {path}: {e}")))?
                .to_bytes();
            if status != 200 {
                return Err(error_of(status, &bytes));
            }
            serde_json::from_slice(&bytes).map_err(|e| EtcdError::Failed(format!("{path}: invalid JSON: {e}")))
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| EtcdError::Unavailable(format!("{}{path}: no answer within {REQUEST_TIMEOUT:?}", self.base)))?
    }

    /// The store's current revision (a read of one key that need not exist).
    pub async fn current_revision(&self, probe_key: &str) -> Result<u64> {
        let v = self
            .call(
                "/v3/kv/range",
                json!({"key": b64(probe_key.as_bytes()), "count_only": true}),
            )
            .await?;
        Ok(revision_of(&v))
    }

    /// Whether the store still holds revision `rev` (not compacted).
    pub async fn check_revision(&self, probe_key: &str, rev: u64) -> Result<()> {
        self.call(
            "/v3/kv/range",
            json!({"key": b64(probe_key.as_bytes()), "count_only": true, "revision": rev.to_string()}),
        )
        .await
        .map(|_| ())
    }

    /// Every key under `prefix` at `revision` (0: the current one), in key order, read in pages.
    pub async fn range_prefix(&self, prefix: &str, revision: u64) -> Result<Range> {
        let end = b64(&prefix_end(prefix));
        let mut start = prefix.as_bytes().to_vec();
        let mut at = revision;
        let mut kvs = Vec::new();
        loop {
            let mut req = json!({"key": b64(&start), "range_end": end, "limit": PAGE.to_string()});
            if at > 0 {
                req["revision"] = json!(at.to_string());
            }
            let v = self.call("/v3/kv/range", req).await?;
            // Later pages read at the first page's revision: one consistent snapshot.
            at = revision_of(&v);
            let page: Vec<Kv> = v["kvs"]
                .as_array()
                .map(|a| a.iter().map(kv_of).collect())
                .unwrap_or_default();
            let more = v["more"].as_bool().unwrap_or(false);
            if let Some(last) = page.last() {
                start = last.key.as_bytes().to_vec();
                start.push(0);
            }
            kvs.extend(page);
            if !more {
                return Ok(Range { revision: at, kvs });
            }
        }
    }

    /// A transaction: if every comparison holds, run `success`.
    pub async fn txn(&self, compare: &[Compare], success: &[Op]) -> Result<Txn> {
        let compare: Vec<Value> = compare
            .iter()
            .map(|c| match c {
                Compare::Absent(k) => {
                    json!({"key": b64(k.as_bytes()), "target": "VERSION", "result": "EQUAL", "version": "0"})
                }
                Compare::ModRevision(k, r) => {
                    json!({"key": b64(k.as_bytes()), "target": "MOD", "result": "EQUAL", "mod_revision": r.to_string()})
                }
            })
            .collect();
        let success: Vec<Value> = success
            .iter()
            .map(|o| match o {
                Op::Put(k, v) => json!({"request_put": {"key": b64(k.as_bytes()), "value": b64(v)}}),
                Op::Delete(k) => json!({"request_delete_range": {"key": b64(k.as_bytes())}}),
            })
            .collect();
        let v = self
            .call("/v3/kv/txn", json!({"compare": compare, "success": success}))
            .await?;
        Ok(Txn {
            revision: revision_of(&v),
            succeeded: v["succeeded"].as_bool().unwrap_or(false),
        })
    }

    /// Delete every key under `prefix`.
    pub async fn delete_prefix(&self, prefix: &str) -> Result<u64> {
        let v = self
            .call(
                "/v3/kv/deleterange",
                json!({"key": b64(prefix.as_bytes()), "range_end": b64(&prefix_end(prefix))}),
            )
            .await?;
        Ok(revision_of(&v))
    }

    /// Compact the key-value history up to `revision`.
    pub async fn compact(&self, revision: u64) -> Result<()> {
        self.call("/v3/kv/compaction", json!({"revision": revision.to_string()}))
            .await
            .map(|_| ())
    }

    /// Watch every key from `start_revision` on; `prev_kv` asks for each change's previous value.
    pub async fn watch_all(&self, start_revision: u64, prev_kv: bool) -> Result<WatchStream> {
        let req = json!({"create_request": {
            "key": b64(&[0]),
            "range_end": b64(&[0]),
            "start_revision": start_revision.to_string(),
            "prev_kv": prev_kv,
        }});
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, self.send("/v3/watch", &req))
            .await
            .map_err(|_| {
                EtcdError::Unavailable(format!("{}/v3/watch: no answer within {REQUEST_TIMEOUT:?}", self.base))
            })??;
        if resp.status() != 200 {
            let status = resp.status().as_u16();
            let bytes = resp
                .into_body()
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            return Err(error_of(status, &bytes));
        }
        Ok(WatchStream {
            body: resp.into_body(),
            buf: BytesMut::new(),
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// The messages of one watch, one JSON document per line.
pub struct WatchStream {
    body: Incoming,
    buf: BytesMut,
}

impl WatchStream {
    /// The next message; `None` when etcd closed the stream.
    pub async fn next(&mut self) -> Result<Option<WatchMessage>> {
        loop {
            if let Some(pos) = self.buf.iter().position(|b| *b == b'\n') {
                let line = self.buf.split_to(pos + 1);
                let text = &line[..pos];
                if text.iter().all(u8::is_ascii_whitespace) {
                    continue;
                }
                return parse_message(text).map(Some);
            }
            if self.buf.len() > MAX_MESSAGE {
                return Err(EtcdError::Failed("watch message too large".into()));
            }
            match self.body.frame().await {
                None => {
                    // A final message without a trailing newline.
                    if self.buf.iter().any(|b| !b.is_ascii_whitespace()) {
                        let rest = self.buf.split();
                        return parse_message(&rest).map(Some);
                    }
                    return Ok(None);
                }
                Some(Err(e)) => return Err(EtcdError::Unavailable(format!("watch stream: {e}"))),
                Some(Ok(frame)) => {
                    if let Ok(mut data) = frame.into_data() {
                        while data.has_remaining() {
                            let chunk = data.chunk();
                            self.buf.extend_from_slice(chunk);
                            let n = chunk.len();
                            data.advance(n);
                        }
                    }
                }
            }
        }
    }
}

fn parse_message(text: &[u8]) -> Result<WatchMessage> {
    let v: Value =
        serde_json::from_slice(text).map_err(|e| EtcdError::Failed(format!("invalid watch message: {e}")))?;
    if let Some(err) = v.get("error") {
        let message = err["message"].as_str().unwrap_or("watch failed").to_string();
        return Err(EtcdError::Unavailable(message));
    }
    let r = &v["result"];
    if r["canceled"].as_bool() == Some(true) {
        return Ok(WatchMessage::Canceled {
            compact_revision: num(&r["compact_revision"]),
            reason: r["cancel_reason"].as_str().unwrap_or("").to_string(),
        });
    }
    if r["created"].as_bool() == Some(true) {
        return Ok(WatchMessage::Created);
    }
    let Some(events) = r["events"].as_array() else {
        return Ok(WatchMessage::Other);
    };
    let events = events
        .iter()
        .map(|e| WatchEvent {
            kind: if e["type"].as_str() == Some("DELETE") {
                EventKind::Delete
            } else {
                EventKind::Put
            },
            kv: kv_of(&e["kv"]),
            prev: e.get("prev_kv").map(kv_of),
        })
        .collect();
    Ok(WatchMessage::Events(events))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end("/registry/"), b"/registry0".to_vec());
        assert_eq!(prefix_end("a\u{7f}"), b"a\x80".to_vec());
    }

    #[test]
    fn gateway_errors() {
        let compacted = br#"{"error":"etcdserver: mvcc: required revision has been compacted","code":11}"#;
        assert_eq!(error_of(400, compacted), EtcdError::Compacted);
        let future = br#"{"message":"etcdserver: mvcc: required revision is a future revision","code":11}"#;
        assert_eq!(error_of(400, future), EtcdError::FutureRevision);
        assert!(matches!(
            error_of(503, br#"{"error":"etcdserver: no leader","code":14}"#),
            EtcdError::Unavailable(_)
        ));
        assert!(matches!(error_of(400, b"garbage"), EtcdError::Failed(_)));
    }

    #[test]
    fn watch_messages() {
        let created = br#"{"result":{"header":{"revision":"3"},"created":true}}"#;
        assert!(matches!(parse_message(created).unwrap(), WatchMessage::Created));
        let events = br#"{"result":{"header":{"revision":"4"},"events":[{"kv":{"key":"L2E=","mod_revision":"4","value":"eA=="}},{"type":"DELETE","kv":{"key":"L2I=","mod_revision":"4"},"prev_kv":{"key":"L2I=","mod_revision":"2","value":"eQ=="}}]}}"#;
        let WatchMessage::Events(evs) = parse_message(events).unwrap() else {
            panic!("events expected")
        };
        assert_eq!(evs[0].kind, EventKind::Put);
        assert_eq!(
            (evs[0].kv.key.as_str(), evs[0].kv.value.as_slice()),
            ("/a", b"x".as_slice())
        );
        assert_eq!(evs[1].kind, EventKind::Delete);
        assert_eq!(evs[1].kv.mod_revision, 4);
        assert_eq!(evs[1].prev.as_ref().map(|p| p.mod_revision), Some(2));
        let canceled = br#"{"result":{"header":{},"canceled":true,"compact_revision":"3"}}"#;
        assert!(matches!(
            parse_message(canceled).unwrap(),
            WatchMessage::Canceled {
                compact_revision: 3,
                ..
            }
        ));
        assert!(parse_message(b"{").is_err());
    }
}
