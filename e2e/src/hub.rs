//! `capstan-hub`, the reference receiver of the reporter protocol, as a child process for end-to-end tests.
//!
//! - [`Hub`]: the binary on a loopback port with a database in a temporary directory (and, with
//!   [`HubOptions::tls`], a certificate from a throw-away CA), ready once it prints its ready line; its
//!   operator surface ([`Hub::faults`], [`Hub::verify`], [`Hub::enqueue_task`], [`Hub::objects`],
//!   [`Hub::search`], ...); stop (SIGTERM), kill (SIGKILL) and restart on the same port and database;
//! - [`AgentClient`]: requests to the agent endpoints as a reporter sends them (gzip, bearer token, HMAC,
//!   `Idempotency-Key`), for tests of the hub itself;
//! - [`application`], [`batch`], [`heartbeat`]: protocol bodies for those tests.
//!
//! Every request has a deadline; the hub's output is kept for failure messages ([`Hub::output`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use capstan::source::testsupport::{test_pki, TestPki};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use tokio::process::Command;

use crate::process::{workspace_binary, BackgroundProcess};

/// Upper bound for one request to the hub (a long poll waits at most 60 s).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(90);

/// How the hub is started.
#[derive(Debug, Clone)]
pub struct HubOptions {
    /// `--token` values; the first is the one [`Hub::agent`] clients use.
    pub tokens: Vec<String>,
    pub hmac_key: Option<String>,
    /// Serve HTTPS with a certificate for 127.0.0.1 signed by a fresh CA ([`Hub::ca_pem`]).
    pub tls: bool,
    /// `--task-redelivery` (default: the protocol's 5 minutes).
    pub task_redelivery: Option<Duration>,
}

impl Default for HubOptions {
    fn default() -> Self {
        Self {
            tokens: vec!["hub-test-token".into()],
            hmac_key: None,
            tls: false,
            task_redelivery: None,
        }
    }
}

/// A running `capstan-hub`.
pub struct Hub {
    process: Option<BackgroundProcess>,
    url: String,
    /// Output of earlier runs (before a restart).
    earlier_output: String,
    options: HubOptions,
    pki: Option<TestPki>,
    http: ureq::Agent,
    dir: tempfile::TempDir,
}

impl Hub {
    /// Starts the hub on a free loopback port with a new database.
    pub async fn start(options: HubOptions) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("capstan-hub-")
            .tempdir()
            .expect("a temporary directory");
        let pki = options.tls.then(|| test_pki("capstan-hub test CA"));
        let http = http_agent(pki.as_ref().map(|p| p.ca_pem.as_str()));
        let mut hub = Self {
            process: None,
            url: String::new(),
            earlier_output: String::new(),
            options,
            pki,
            http,
            dir,
        };
        hub.launch("127.0.0.1:0".into()).await;
        hub
    }

    async fn launch(&mut self, listen: String) {
        let mut cmd = Command::new(workspace_binary("capstan-hub"));
        cmd.arg("--listen").arg(&listen).arg("--db").arg(self.db_path());
        for token in &self.options.tokens {
            cmd.arg("--token").arg(token);
        }
        if let Some(key) = &self.options.hmac_key {
            cmd.arg("--hmac-key").arg(key);
        }
        if let Some(pki) = &self.pki {
            cmd.arg("--tls-cert").arg(&pki.cert).arg("--tls-key").arg(&pki.key);
        }
        if let Some(after) = self.options.task_redelivery {
            cmd.arg("--task-redelivery").arg(after.as_secs().max(1).to_string());
        }
        let mut process = BackgroundProcess::spawn("capstan-hub", cmd);
        let ready = process
            .wait_for_line(crate::TIMEOUT, |l| l.starts_with("capstan-hub ready: "))
            .await;
        self.url = ready.trim_start_matches("capstan-hub ready: ").trim().to_owned();
        self.process = Some(process);
    }

    /// The base URL (`http://127.0.0.1:PORT` or `https://...`); agents live under `{url}/v1/agents/{id}`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token agents authenticate with (the first `--token`).
    pub fn token(&self) -> &str {
        self.options.tokens.first().map(String::as_str).unwrap_or("")
    }

    pub fn hmac_key(&self) -> Option<&str> {
        self.options.hmac_key.as_deref()
    }

    /// The CA that signed the hub's certificate (with [`HubOptions::tls`]).
    pub fn ca_pem(&self) -> Option<&str> {
        self.pki.as_ref().map(|p| p.ca_pem.as_str())
    }

    pub fn db_path(&self) -> PathBuf {
        self.dir.path().join("hub.db")
    }

    /// The process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.process.as_ref().map(BackgroundProcess::pid)
    }

    /// Everything the hub printed, across restarts.
    pub fn output(&self) -> String {
        let now = self.process.as_ref().map(BackgroundProcess::output).unwrap_or_default();
        format!("{}{now}", self.earlier_output)
    }

    fn port(&self) -> String {
        self.url.rsplit(':').next().unwrap_or_default().to_owned()
    }

    /// SIGTERM, waiting for the exit.
    pub async fn stop(&mut self) {
        if let Some(p) = self.process.take() {
            self.earlier_output.push_str(&p.output());
            let status = p.terminate(crate::TIMEOUT).await;
            assert!(
                status.success(),
                "capstan-hub exited with {status} after SIGTERM:\n{}",
                self.output()
            );
        }
    }

    /// SIGKILL (a crash), waiting for the exit.
    pub async fn kill(&mut self) {
        if let Some(p) = self.process.take() {
            self.earlier_output.push_str(&p.output());
            p.kill(crate::TIMEOUT).await;
        }
    }

    /// Starts the hub again on the same port and database (after [`Hub::stop`] or [`Hub::kill`]).
    pub async fn restart(&mut self) {
        assert!(self.process.is_none(), "stop or kill the hub before restarting it");
        let listen = format!("127.0.0.1:{}", self.port());
        self.launch(listen).await;
    }

    /// A client for agent `agent` with the hub's token (and HMAC key).
    pub fn agent(&self, agent: &str) -> AgentClient {
        AgentClient {
            url: format!("{}/v1/agents/{agent}", self.url),
            agent: agent.to_owned(),
            token: self.token().to_owned(),
            hmac_key: self.options.hmac_key.clone(),
            gzip: true,
            http: self.http.clone(),
        }
    }

    /// `GET {url}{path}` on the operator surface; panics unless the hub answers.
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let reply = send(&self.http, "GET", format!("{}{path}", self.url), Vec::new(), Vec::new()).await;
        let reply = reply.unwrap_or_else(|e| panic!("GET {path} failed: {e}\n{}", self.output()));
        (reply.status, reply.body)
    }

    /// `POST {url}{path}` with a JSON body on the operator surface.
    pub async fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let headers = vec![("content-type".into(), "application/json".into())];
        let reply = send(
            &self.http,
            "POST",
            format!("{}{path}", self.url),
            headers,
            body.to_string().into_bytes(),
        )
        .await;
        let reply = reply.unwrap_or_else(|e| panic!("POST {path} failed: {e}\n{}", self.output()));
        (reply.status, reply.body)
    }

    async fn ok(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        let (status, value) = match (method, body) {
            ("POST", Some(b)) => self.post(path, b).await,
            ("DELETE", _) => {
                let reply = send(
                    &self.http,
                    "DELETE",
                    format!("{}{path}", self.url),
                    Vec::new(),
                    Vec::new(),
                )
                .await;
                let reply = reply.unwrap_or_else(|e| panic!("DELETE {path} failed: {e}"));
                (reply.status, reply.body)
            }
            _ => self.get(path).await,
        };
        assert_eq!(status, 200, "{method} {path} answered {status}: {value}");
        value
    }

    /// `POST /_hub/faults` (see e2e/hub/README.md); returns the hub's answer.
    pub async fn faults(&self, fault: Value) -> Value {
        self.ok("POST", "/_hub/faults", Some(&fault)).await
    }

    /// Clears every pending fault.
    pub async fn clear_faults(&self) {
        self.ok("DELETE", "/_hub/faults", None).await;
    }

    /// `GET /_hub/verify`.
    pub async fn verify(&self) -> Verify {
        let v = self.ok("GET", "/_hub/verify", None).await;
        Verify {
            ok: v["ok"].as_bool().unwrap_or(false),
            violations: v["violations"].as_array().cloned().unwrap_or_default(),
        }
    }

    /// Enqueues a task and returns its id.
    pub async fn enqueue_task(&self, agent: &str, kind: &str, namespace: &str, name: &str, args: Value) -> String {
        let body =
            json!({"agentId": agent, "type": kind, "target": {"namespace": namespace, "name": name}, "args": args});
        let v = self.ok("POST", "/api/tasks", Some(&body)).await;
        v["id"].as_str().expect("the task id").to_owned()
    }

    /// `GET /api/tasks/{id}`: state, deliveries, result.
    pub async fn task(&self, id: &str) -> Value {
        self.ok("GET", &format!("/api/tasks/{id}"), None).await
    }

    pub async fn agents(&self) -> Vec<Value> {
        self.ok("GET", "/api/agents", None)
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// One agent of `GET /api/agents`.
    pub async fn agent_view(&self, agent: &str) -> Option<Value> {
        self.agents().await.into_iter().find(|a| a["agentId"] == agent)
    }

    /// The live objects the hub holds for `agent`.
    pub async fn objects(&self, agent: &str) -> Vec<Value> {
        self.ok("GET", &format!("/api/agents/{agent}/objects"), None)
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// The request log of one agent (with bodies).
    pub async fn requests(&self, agent: &str) -> Vec<Value> {
        let path = format!("/_hub/requests?agent={agent}&bodies=true&limit=10000");
        self.ok("GET", &path, None)
            .await
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// Where `needle` occurs in anything the hub received (path, headers, decompressed bodies).
    pub async fn search(&self, needle: &str) -> Vec<Value> {
        let v = self.ok("POST", "/_hub/search", Some(&json!({"needle": needle}))).await;
        assert_eq!(
            v["complete"], true,
            "the request log was pruned: the search cannot prove absence"
        );
        v["matches"].as_array().cloned().unwrap_or_default()
    }

    /// Adds and removes accepted tokens.
    pub async fn tokens(&self, add: &[&str], remove: &[&str]) {
        self.ok("POST", "/_hub/tokens", Some(&json!({"add": add, "remove": remove})))
            .await;
    }
}

/// The answer of `GET /_hub/verify`.
#[derive(Debug, Clone)]
pub struct Verify {
    pub ok: bool,
    pub violations: Vec<Value>,
}

impl Verify {
    /// The `kind` of every violation.
    pub fn kinds(&self) -> Vec<String> {
        self.violations
            .iter()
            .filter_map(|v| v["kind"].as_str().map(str::to_owned))
            .collect()
    }
}

fn http_agent(ca_pem: Option<&str>) -> ureq::Agent {
    use ureq::tls::{PemItem, RootCerts, TlsConfig};
    let mut tls = TlsConfig::builder();
    if let Some(pem) = ca_pem {
        let certs: Vec<_> = ureq::tls::parse_pem(pem.as_bytes())
            .filter_map(|item| match item {
                Ok(PemItem::Certificate(c)) => Some(c),
                _ => None,
            })
            .collect();
        tls = tls.root_certs(RootCerts::new_with_certs(&certs));
    }
    let config = ureq::Agent::config_builder()
        .tls_config(tls.build())
        .http_status_as_error(false)
        .max_redirects(0)
        .timeout_global(Some(REQUEST_TIMEOUT))
        .build();
    ureq::Agent::new_with_config(config)
}

/// An answer of the hub.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// Header names lower-cased.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Value::String` when it is not JSON).
    pub body: Value,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// One request; `Err` when no answer came (a reset or closed connection, a timeout).
async fn send(
    http: &ureq::Agent,
    method: &'static str,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
) -> Result<Reply, String> {
    let http = http.clone();
    tokio::task::spawn_blocking(move || {
        let mut builder = ureq::http::Request::builder().method(method).uri(&url);
        for (k, v) in &headers {
            builder = builder.header(k, v);
        }
        let request = builder.body(body).map_err(|e| e.to_string())?;
        let mut response = http.run(request).map_err(|e| e.to_string())?;
        let raw = response
            .body_mut()
            .read_to_vec()
            .map_err(|e| format!("reading the answer: {e}"))?;
        let headers = response
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_owned(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let body = serde_json::from_slice(&raw).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&raw).into()));
        Ok(Reply {
            status: response.status().as_u16(),
            headers,
            body,
        })
    })
    .await
    .map_err(|e| format!("the request task failed: {e}"))?
}

/// Talks to the agent endpoints as a reporter does.
#[derive(Clone)]
pub struct AgentClient {
    url: String,
    pub agent: String,
    pub token: String,
    pub hmac_key: Option<String>,
    /// Compress bodies (the protocol's default); off to send plain JSON.
    pub gzip: bool,
    http: ureq::Agent,
}

impl AgentClient {
    /// Sends `body` (JSON, gzip unless [`AgentClient::gzip`] is off) to `{agent url}{path}` with the bearer
    /// token, the signature when there is an HMAC key, and `extra` headers.
    pub async fn send(
        &self,
        method: &'static str,
        path: &str,
        body: Option<Vec<u8>>,
        extra: &[(&str, &str)],
    ) -> Result<Reply, String> {
        let mut headers = vec![
            ("authorization".to_owned(), format!("Bearer {}", self.token)),
            ("user-agent".to_owned(), "capstan-reporter/test".to_owned()),
        ];
        let sent = match body {
            Some(json) => {
                headers.push(("content-type".into(), "application/json".into()));
                if self.gzip {
                    headers.push(("content-encoding".into(), "gzip".into()));
                    gzip(&json)
                } else {
                    json
                }
            }
            None => Vec::new(),
        };
        if let Some(key) = &self.hmac_key {
            headers.push(("x-capstan-signature".into(), signature(key.as_bytes(), &sent)));
        }
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        send(&self.http, method, format!("{}{path}", self.url), headers, sent).await
    }

    /// `POST /reports` with `Idempotency-Key: <batchId>`.
    pub async fn report(&self, batch: &Value) -> Result<Reply, String> {
        let key = batch["batchId"].as_str().unwrap_or_default().to_owned();
        self.send(
            "POST",
            "/reports",
            Some(batch.to_string().into_bytes()),
            &[("idempotency-key", &key)],
        )
        .await
    }

    pub async fn digest(&self, chunk: &Value) -> Result<Reply, String> {
        self.send("POST", "/digest", Some(chunk.to_string().into_bytes()), &[])
            .await
    }

    pub async fn heartbeat(&self, body: &Value) -> Result<Reply, String> {
        self.send("POST", "/heartbeat", Some(body.to_string().into_bytes()), &[])
            .await
    }

    /// `GET /tasks?wait=<seconds>`.
    pub async fn tasks(&self, wait: u64) -> Result<Reply, String> {
        self.send("GET", &format!("/tasks?wait={wait}"), None, &[]).await
    }

    pub async fn result(&self, task: &str, body: &Value) -> Result<Reply, String> {
        self.send(
            "POST",
            &format!("/tasks/{task}/result"),
            Some(body.to_string().into_bytes()),
            &[],
        )
        .await
    }
}

/// gzip, as a reporter compresses bodies.
pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}

/// `sha256=<hex>` of the body bytes as sent.
pub fn signature(key: &[u8], body: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// A content hash in the protocol's form, derived from `seed`.
pub fn content_hash(seed: &str) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(Sha256::digest(seed.as_bytes())))
}

/// An Application `upsert` item (`health`, `sync` in its summary), or a `delete` when `health` is `None`.
pub fn application(seq: u64, namespace: &str, name: &str, health: Option<&str>, sync: &str) -> Value {
    let uid = format!("uid-{namespace}-{name}");
    let r = json!({"apiVersion": "capstan.dev/v1alpha1", "kind": "Application", "namespace": namespace, "name": name, "uid": uid});
    match health {
        Some(health) => json!({
            "op": "upsert", "seq": seq, "ref": r, "resourceVersion": seq.to_string(), "generation": 1,
            "contentHash": content_hash(&format!("{uid}/{health}/{sync}")), "observedAt": "2026-11-26T10:04:04.900Z",
            "summary": {"sync": sync, "health": health, "revision": "1a2b3c", "operationPhase": "Succeeded"},
            "status": {"health": {"status": health}, "sync": {"status": sync}}, "truncated": false,
        }),
        None => json!({
            "op": "delete", "seq": seq, "ref": r, "resourceVersion": seq.to_string(), "generation": 1,
            "contentHash": null, "observedAt": "2026-11-26T10:04:04.900Z", "summary": null, "status": null,
            "truncated": false,
        }),
    }
}

/// A batch envelope; `snapshot` is the snapshot object of a snapshot batch (`None`: a delta).
pub fn batch(agent: &str, epoch: u64, batch_id: &str, snapshot: Option<Value>, items: Vec<Value>) -> Value {
    json!({
        "schemaVersion": "capstan.reporter/v1", "agentId": agent, "clusterName": format!("{agent}-cluster"),
        "reporterVersion": "0.1.0", "instance": format!("{agent}-reporter-0"), "epoch": epoch, "batchId": batch_id,
        "sentAt": "2026-11-26T10:04:05.123Z", "mode": if snapshot.is_some() { "snapshot" } else { "delta" },
        "snapshot": snapshot, "items": items,
    })
}

/// A heartbeat body for `epoch` with a backlog as old as `oldest_dirty` seconds.
pub fn heartbeat(epoch: u64, oldest_dirty: f64) -> Value {
    json!({
        "instance": "reporter-0", "leader": true, "epoch": epoch, "reporterVersion": "0.1.0",
        "kubernetesVersion": "v1.32.0", "counts": {"Application": 1}, "dirty": if oldest_dirty > 0.0 { 3 } else { 0 },
        "oldestDirtyAgeSeconds": oldest_dirty, "lastAckAt": null, "lastError": null, "auth": "ok",
    })
}
