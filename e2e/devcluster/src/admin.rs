//! Test-harness hooks, reachable over HTTP under `/_devcluster/` and as methods on the Rust handle:
//! request log (with each request's user, groups and impersonated identity), fault injection (429/5xx/409
//! with Retry-After), latency, compaction, dropping watches and pausing event delivery. Admin requests
//! themselves are neither logged nor subject to faults, and need a `system:masters` user.
//!
//! HTTP surface:
//! - `GET /_devcluster/requests` (JSON array), `DELETE /_devcluster/requests`
//! - `POST /_devcluster/compact`, `POST /_devcluster/drop-watches`
//! - `POST /_devcluster/faults` body `{"status":503,"count":2,"retryAfterSeconds":1,"method":"GET","pathPrefix":"/api"}`,
//!   `DELETE /_devcluster/faults`
//! - `POST /_devcluster/latency?ms=200`
//! - `POST /_devcluster/pause`, `POST /_devcluster/resume`

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Response};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::error::ApiError;
use crate::server::{error_response, json_response, query::Query, Shared};

/// Answer the next `count` matching requests with `status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    pub status: u16,
    pub count: usize,
    #[serde(default = "one")]
    pub retry_after_seconds: u64,
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub path_prefix: Option<String>,
}

fn one() -> u64 {
    1
}

impl Default for Fault {
    fn default() -> Self {
        Fault {
            status: 503,
            count: 1,
            retry_after_seconds: 1,
            method: None,
            path_prefix: None,
        }
    }
}

/// One logged request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    pub method: String,
    pub path: String,
    pub query: String,
    pub accept: String,
    pub content_type: String,
    pub user_agent: String,
    pub status: u16,
    /// The authenticated user (empty if authentication failed).
    #[serde(default)]
    pub user: String,
    #[serde(default)]
    pub groups: Vec<String>,
    /// Who the request acted as, when it carried impersonation headers that were allowed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub impersonated_user: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub impersonated_groups: Vec<String>,
}

const LOG_LIMIT: usize = 200_000;

/// Mutable admin state.
#[derive(Default)]
pub struct AdminState {
    faults: Mutex<Vec<Fault>>,
    latency: Mutex<Duration>,
    log: Mutex<Vec<RequestRecord>>,
}

impl AdminState {
    pub fn latency(&self) -> Duration {
        *self.latency.lock()
    }

    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    pub fn add_fault(&self, f: Fault) {
        if f.count > 0 {
            self.faults.lock().push(f);
        }
    }

    pub fn clear_faults(&self) {
        self.faults.lock().clear();
    }

    /// Consume one use of the first fault matching this request.
    pub fn take_fault(&self, method: &str, path: &str) -> Option<Fault> {
        let mut faults = self.faults.lock();
        let idx = faults.iter().position(|f| {
            f.method.as_deref().is_none_or(|m| m.eq_ignore_ascii_case(method))
                && f.path_prefix.as_deref().is_none_or(|p| path.starts_with(p))
        })?;
        let f = faults[idx].clone();
        faults[idx].count -= 1;
        if faults[idx].count == 0 {
            faults.remove(idx);
        }
        Some(f)
    }

    pub fn record(&self, r: RequestRecord) {
        let mut log = self.log.lock();
        if log.len() >= LOG_LIMIT {
            log.drain(..LOG_LIMIT / 2);
        }
        log.push(r);
    }

    pub fn requests(&self) -> Vec<RequestRecord> {
        self.log.lock().clone()
    }

    pub fn clear_requests(&self) {
        self.log.lock().clear();
    }
}

/// The injected error response.
pub fn fault_response(f: &Fault) -> Response<Body> {
    let retry = f.retry_after_seconds;
    let mut e = match f.status {
        429 => ApiError::too_many_requests(retry),
        503 => ApiError::service_unavailable(retry),
        504 => ApiError::timeout("injected fault: the server was unable to return a response in the time allotted"),
        409 => ApiError::conflict_msg("injected fault: Operation cannot be fulfilled: the object has been modified; please apply your changes to the latest version and try again"),
        500 => ApiError::internal("injected fault: internal error"),
        code => ApiError::new(code, "InternalError", format!("injected fault {code}")),
    };
    if f.status >= 429 {
        e.retry_after_seconds = Some(retry);
    }
    error_response(&e)
}

/// Drop all history and make open watches fail with 410.
pub fn compact(sh: &Shared) {
    sh.store.compact();
    sh.pages.lock().clear();
    sh.signals.compact.send_modify(|n| *n += 1);
}

pub fn drop_watches(sh: &Shared) {
    sh.signals.drop_watches.send_modify(|n| *n += 1);
}

pub fn pause_events(sh: &Shared, paused: bool) {
    sh.signals.paused.send_replace(paused);
}

/// `/_devcluster/...` requests.
pub async fn handle(sh: &Shared, method: &Method, path: &str, query: &str, body: Body) -> Response<Body> {
    let q = Query::parse(query);
    let op = path.trim_start_matches("/_devcluster").trim_matches('/');
    let ok = || json_response(200, &json!({"ok": true}));
    match (method.as_str(), op) {
        ("GET", "requests") => json_response(200, &serde_json::to_value(sh.admin.requests()).unwrap_or_default()),
        ("DELETE", "requests") => {
            sh.admin.clear_requests();
            ok()
        }
        ("POST", "compact") => {
            compact(sh);
            ok()
        }
        ("POST", "drop-watches") => {
            drop_watches(sh);
            ok()
        }
        ("POST", "pause") => {
            pause_events(sh, true);
            ok()
        }
        ("POST", "resume") => {
            pause_events(sh, false);
            ok()
        }
        ("POST", "latency") => {
            let ms = q.uint("ms").ok().flatten().unwrap_or(0);
            sh.admin.set_latency(Duration::from_millis(ms));
            ok()
        }
        ("DELETE", "faults") => {
            sh.admin.clear_faults();
            ok()
        }
        ("POST", "faults") => {
            let bytes = axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
            match serde_json::from_slice::<Fault>(&bytes) {
                Ok(f) => {
                    sh.admin.add_fault(f);
                    ok()
                }
                Err(e) => error_response(&ApiError::bad_request(format!("invalid fault: {e}"))),
            }
        }
        _ => error_response(&ApiError::no_such_path()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_are_consumed_and_filtered() {
        let a = AdminState::default();
        a.add_fault(Fault {
            status: 503,
            count: 2,
            method: Some("GET".into()),
            path_prefix: Some("/api".into()),
            ..Default::default()
        });
        assert!(a.take_fault("POST", "/api/v1").is_none());
        assert!(a.take_fault("GET", "/apis").is_some());
        assert!(a.take_fault("GET", "/api/v1").is_some());
        assert!(a.take_fault("GET", "/api/v1").is_none());
    }
}
