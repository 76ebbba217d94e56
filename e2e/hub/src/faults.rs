//! Fault switches (`POST /_hub/faults`): what the next answers to the agent endpoints do instead of (or on
//! top of) the protocol. Faults live in memory only: a restarted hub starts healthy.
//!
//! A fault matches a request by its optional `agent` and `endpoint` filters and is consumed answer by answer
//! (`count`, default 1). `latency` without a `count` stays until the faults are cleared. `resync` and `forget`
//! are not queued: they act when posted (see [`crate::store::Store::forget`]).

use serde::{Deserialize, Serialize};

/// The agent endpoints, as the request log and the fault filters name them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Endpoint {
    Reports,
    Digest,
    Heartbeat,
    Tasks,
    Result,
}

impl Endpoint {
    pub fn as_str(self) -> &'static str {
        match self {
            Endpoint::Reports => "reports",
            Endpoint::Digest => "digest",
            Endpoint::Heartbeat => "heartbeat",
            Endpoint::Tasks => "tasks",
            Endpoint::Result => "result",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RetryAfterFormat {
    Seconds,
    HttpDate,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ConflictVariant {
    /// `{"error": "stale_epoch", "currentEpoch": N}` with N one above the agent's highest epoch.
    StaleEpoch,
    /// `{"error": "resync_required"}`: the sender runs a digest round.
    Resync,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Reset the connection before the request body is read: nothing is stored.
    Read,
    /// Store the request, then reset the connection halfway through the answer.
    Write,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResyncMode {
    Digest,
    Full,
}

impl ResyncMode {
    pub fn as_str(self) -> &'static str {
        match self {
            ResyncMode::Digest => "digest",
            ResyncMode::Full => "full",
        }
    }
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase", deny_unknown_fields)]
pub enum Action {
    /// Answer `status` without storing anything.
    #[serde(rename_all = "camelCase")]
    Status {
        status: u16,
        #[serde(default)]
        retry_after: Option<u64>,
        #[serde(default)]
        retry_after_format: Option<RetryAfterFormat>,
        #[serde(default)]
        variant: Option<ConflictVariant>,
    },
    /// Wait this long before answering.
    Latency { ms: u64 },
    /// Reset the connection (TCP RST).
    Reset { phase: Phase },
    /// Store the request, then close the connection without answering.
    CommitThenDrop,
    /// Store the batch except these item indexes, listed in `results` with `code` and `retryable`.
    #[serde(rename_all = "camelCase")]
    RejectItems {
        items: Vec<usize>,
        #[serde(default = "default_reject_code")]
        code: String,
        #[serde(default = "default_true")]
        retryable: bool,
    },
    /// The next answers to the agent (all agents without a filter) carry `resync`.
    Resync { mode: ResyncMode },
    /// Wipe the receiver state, as a SaaS that lost its database: the next answers carry `resync: "full"`.
    Forget,
}

fn default_reject_code() -> String {
    "unavailable".into()
}

fn default_true() -> bool {
    true
}

/// A posted fault.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Fault {
    #[serde(flatten)]
    pub action: Action,
    pub agent: Option<String>,
    pub endpoint: Option<Endpoint>,
    /// How many answers it affects; `None`: one (latency: until cleared).
    pub count: Option<u64>,
}

/// Status codes a `status` fault may answer.
pub const FAULT_STATUSES: [u16; 11] = [400, 401, 403, 409, 413, 422, 429, 500, 502, 503, 504];

impl Fault {
    /// Parses and checks a posted fault: the filters and `count`, then the action with no unknown field left.
    pub fn from_json(value: serde_json::Value) -> Result<Self, String> {
        let serde_json::Value::Object(mut fields) = value else {
            return Err("a fault is a JSON object".into());
        };
        let mut take = |name: &str| fields.remove(name).unwrap_or(serde_json::Value::Null);
        let agent = serde_json::from_value(take("agent")).map_err(|e| format!("agent: {e}"))?;
        let endpoint = serde_json::from_value(take("endpoint")).map_err(|e| format!("endpoint: {e}"))?;
        let count = serde_json::from_value(take("count")).map_err(|e| format!("count: {e}"))?;
        let action = serde_json::from_value(serde_json::Value::Object(fields)).map_err(|e| e.to_string())?;
        let fault = Fault {
            action,
            agent,
            endpoint,
            count,
        };
        fault.check()?;
        Ok(fault)
    }

    fn check(&self) -> Result<(), String> {
        match &self.action {
            Action::Status { status, .. } if !FAULT_STATUSES.contains(status) => {
                Err(format!("status must be one of {FAULT_STATUSES:?}"))
            }
            Action::Status {
                status,
                variant: Some(_),
                ..
            } if *status != 409 => Err("variant is only for status 409".into()),
            // The sender waits for Retry-After only on these; verify would hold it to a deadline it may ignore.
            Action::Status {
                status,
                retry_after: Some(_),
                ..
            } if *status != 429 && *status != 503 => Err("retryAfter is only for status 429 and 503".into()),
            Action::Latency { ms } if *ms > 120_000 => Err("latency is at most 120000 ms".into()),
            Action::Resync { .. } | Action::Forget if self.count.is_some() => {
                Err("resync and forget act once, when posted: no count".into())
            }
            _ if self.count == Some(0) => Err("count must be at least 1".into()),
            _ => Ok(()),
        }
    }

    fn matches(&self, agent: &str, endpoint: Endpoint) -> bool {
        self.agent.as_deref().is_none_or(|a| a == agent) && self.endpoint.is_none_or(|e| e == endpoint)
    }
}

/// The pending faults, in the order they were posted.
#[derive(Debug, Default)]
pub struct Faults {
    pending: Vec<Fault>,
}

/// What the next answer to one request does.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    pub latency_ms: u64,
    pub action: Option<Action>,
}

impl Faults {
    pub fn push(&mut self, fault: Fault) {
        self.pending.push(fault);
    }

    pub fn clear(&mut self) {
        self.pending.clear();
    }

    pub fn pending(&self) -> &[Fault] {
        &self.pending
    }

    /// Takes what applies to this request: the first matching latency and the first matching other fault,
    /// each consumed once.
    pub fn take(&mut self, agent: &str, endpoint: Endpoint) -> Decision {
        let mut decision = Decision::default();
        if let Some(i) = self.position(agent, endpoint, true) {
            if let Action::Latency { ms } = self.pending[i].action {
                decision.latency_ms = ms;
            }
            self.consume(i, true);
        }
        if let Some(i) = self.position(agent, endpoint, false) {
            decision.action = Some(self.pending[i].action.clone());
            self.consume(i, false);
        }
        decision
    }

    fn position(&self, agent: &str, endpoint: Endpoint, latency: bool) -> Option<usize> {
        self.pending
            .iter()
            .position(|f| matches!(f.action, Action::Latency { .. }) == latency && f.matches(agent, endpoint))
    }

    fn consume(&mut self, i: usize, latency: bool) {
        match self.pending[i].count {
            None if latency => {}
            None | Some(1) => {
                self.pending.remove(i);
            }
            Some(ref mut n) => *n -= 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fault(v: serde_json::Value) -> Fault {
        Fault::from_json(v).unwrap()
    }

    #[test]
    fn faults_are_consumed_in_order_and_filtered() {
        let mut faults = Faults::default();
        faults.push(fault(
            json!({"kind": "status", "status": 503, "retryAfter": 5, "count": 2, "endpoint": "reports"}),
        ));
        faults.push(fault(json!({"kind": "commitThenDrop", "agent": "b"})));
        faults.push(fault(json!({"kind": "latency", "ms": 10})));
        assert_eq!(
            faults.take("a", Endpoint::Heartbeat),
            Decision {
                latency_ms: 10,
                action: None
            }
        );
        let first = faults.take("a", Endpoint::Reports);
        assert!(matches!(
            first.action,
            Some(Action::Status {
                status: 503,
                retry_after: Some(5),
                ..
            })
        ));
        assert!(faults.take("a", Endpoint::Reports).action.is_some());
        assert_eq!(faults.take("a", Endpoint::Reports).action, None, "count 2 is used up");
        assert_eq!(faults.take("b", Endpoint::Digest).action, Some(Action::CommitThenDrop));
        assert_eq!(faults.pending().len(), 1, "the latency stays until cleared");
    }

    #[test]
    fn bad_faults_are_refused() {
        let parse = Fault::from_json;
        assert!(parse(json!({"kind": "status", "status": 418})).is_err());
        assert!(parse(json!({"kind": "status", "status": 500, "variant": "resync"})).is_err());
        assert!(parse(json!({"kind": "status", "status": 500, "retryAfter": 5})).is_err());
        assert!(parse(json!({"kind": "forget", "count": 2})).is_err());
        assert!(parse(json!({"kind": "explode"})).is_err());
        assert!(
            parse(json!({"kind": "status", "status": 503, "retryAfer": 5})).is_err(),
            "a typo is refused"
        );
        assert!(parse(json!({"kind": "reset", "phase": "write", "count": 1})).is_ok());
    }
}
