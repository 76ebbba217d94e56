//! Rego evaluation for PolicySets (docs/user-guide.md, PolicySets), on regorus: compiling a set's modules,
//! evaluating them against an input with a time bound, and a cache of compiled sets.
//!
//! A policy is a Rego v1 module with `deny contains msg if ...` and/or `warn contains msg if ...`
//! rules (Harness-style). Each module lives in its own engine, so two policies may use the same
//! package. Every bound is enforced here: module size, input size, evaluation time, and how many
//! messages (and how long each) a policy may return.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use regorus::utils::limits::ExecutionTimerConfig;
use regorus::{Engine, Value as RegoValue};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::text::truncate;

/// Largest accepted module source.
pub const MAX_MODULE_BYTES: usize = 64 * 1024;
/// Largest accepted input document (serialized JSON).
pub const MAX_INPUT_BYTES: usize = 1024 * 1024;
/// Wall-clock bound of one evaluation of one policy.
pub const EVAL_TIME_LIMIT: Duration = Duration::from_millis(250);
/// Messages kept per policy and rule.
pub const MAX_MESSAGES: usize = 20;
/// Bytes kept per message (so at most this many characters), cut by [`crate::text::truncate`].
pub const MAX_MESSAGE_CHARS: usize = 512;
/// Compiled sets kept in the cache.
const CACHE_ENTRIES: usize = 256;

/// What went wrong, with a stable category.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    /// The module does not parse or does not compile.
    #[error("policy {policy}: does not compile: {message}")]
    Compile { policy: String, message: String },
    /// Evaluation failed (a builtin error, a conflict between rule values, ...).
    #[error("policy {policy}: evaluation failed: {message}")]
    Eval { policy: String, message: String },
    /// Evaluation ran past [`EVAL_TIME_LIMIT`].
    #[error("policy {policy}: evaluation exceeded {limit_ms} ms", limit_ms = EVAL_TIME_LIMIT.as_millis())]
    Timeout { policy: String },
    /// The input is larger than [`MAX_INPUT_BYTES`].
    #[error("the policy input is {bytes} bytes, more than the {max} allowed", max = MAX_INPUT_BYTES)]
    InputTooLarge { bytes: usize },
}

impl PolicyError {
    /// Stable category (for conditions and logs).
    pub fn category(&self) -> &'static str {
        match self {
            PolicyError::Compile { .. } => "PolicyCompileError",
            PolicyError::Eval { .. } => "PolicyEvaluationError",
            PolicyError::Timeout { .. } => "PolicyTimeout",
            PolicyError::InputTooLarge { .. } => "PolicyInputTooLarge",
        }
    }
}

/// One compiled policy.
#[derive(Clone)]
struct Compiled {
    name: String,
    package: String,
    engine: Engine,
}

/// A set of compiled policies.
#[derive(Clone)]
pub struct CompiledSet {
    policies: Vec<Compiled>,
}

/// The messages a set produced for one input, each prefixed with its policy's name.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Verdict {
    /// `deny` messages.
    pub deny: Vec<String>,
    /// `warn` messages.
    pub warn: Vec<String>,
}

impl Verdict {
    /// Adds `other`'s messages.
    pub fn extend(&mut self, other: Verdict) {
        self.deny.extend(other.deny);
        self.warn.extend(other.warn);
    }
}

/// Compiles `(name, source)` modules; every failure is reported, not only the first.
pub fn compile(policies: &[(String, String)]) -> Result<CompiledSet, Vec<PolicyError>> {
    let mut compiled = Vec::new();
    let mut errors = Vec::new();
    for (name, source) in policies {
        match compile_one(name, source) {
            Ok(c) => compiled.push(c),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(CompiledSet { policies: compiled })
    } else {
        Err(errors)
    }
}

fn compile_one(name: &str, source: &str) -> Result<Compiled, PolicyError> {
    let fail = |message: String| PolicyError::Compile {
        policy: name.to_string(),
        message,
    };
    if source.len() > MAX_MODULE_BYTES {
        return Err(fail(format!("{} bytes, more than {MAX_MODULE_BYTES}", source.len())));
    }
    let mut engine = Engine::new();
    engine.set_rego_v0(false);
    engine.set_execution_timer_config(ExecutionTimerConfig {
        limit: EVAL_TIME_LIMIT,
        check_interval: NonZeroU32::new(64).unwrap_or(NonZeroU32::MIN),
    });
    let package = engine
        .add_policy(format!("{name}.rego"), source.to_string())
        .map_err(|e| fail(first_lines(&e.to_string())))?;
    let mut compiled = Compiled {
        name: name.to_string(),
        package,
        engine,
    };
    // A first evaluation with an empty input runs the semantic checks (unknown functions,
    // recursion, ...) that parsing alone does not.
    compiled.rule(&RegoValue::new_object(), "deny").map_err(|e| match e {
        PolicyError::Eval { message, .. } => fail(message),
        other => other,
    })?;
    Ok(compiled)
}

impl Compiled {
    /// The messages of rule `rule` (`deny` or `warn`) for `input`; an undefined rule has none.
    fn rule(&mut self, input: &RegoValue, rule: &str) -> Result<Vec<String>, PolicyError> {
        self.engine.set_input(input.clone());
        let query = format!("{}.{rule}", self.package);
        let results = self.engine.eval_query(query, false).map_err(|e| {
            let message = first_lines(&e.to_string());
            if message.to_ascii_lowercase().contains("time limit") || message.contains("exceeded") {
                PolicyError::Timeout {
                    policy: self.name.clone(),
                }
            } else {
                PolicyError::Eval {
                    policy: self.name.clone(),
                    message,
                }
            }
        })?;
        let Some(value) = results
            .result
            .first()
            .and_then(|r| r.expressions.first())
            .map(|e| e.value.clone())
        else {
            return Ok(Vec::new());
        };
        Ok(messages(&self.name, &value))
    }
}

/// The messages in a rule's value: the members of a set (or array), or the value itself.
fn messages(policy: &str, value: &RegoValue) -> Vec<String> {
    let items: Vec<RegoValue> = match value {
        RegoValue::Set(s) => s.iter().cloned().collect(),
        RegoValue::Array(a) => a.iter().cloned().collect(),
        RegoValue::Undefined | RegoValue::Null => Vec::new(),
        RegoValue::Bool(false) => Vec::new(),
        other => vec![other.clone()],
    };
    items
        .iter()
        .take(MAX_MESSAGES)
        .map(|m| {
            let text = match m {
                RegoValue::String(s) => s.to_string(),
                other => other.to_json_str().unwrap_or_else(|_| format!("{other:?}")),
            };
            truncate(&format!("[{policy}] {text}"), MAX_MESSAGE_CHARS)
        })
        .collect()
}

impl CompiledSet {
    /// How many policies the set holds.
    pub fn len(&self) -> usize {
        self.policies.len()
    }

    /// Whether the set holds no policy.
    pub fn is_empty(&self) -> bool {
        self.policies.is_empty()
    }

    /// Evaluates every policy's `deny` and `warn` rules against `input`. CPU-bound and time-bounded:
    /// call it from a blocking context for large inputs.
    pub fn evaluate(&self, input: &Value) -> Result<Verdict, PolicyError> {
        let json = serde_json::to_string(input).unwrap_or_default();
        if json.len() > MAX_INPUT_BYTES {
            return Err(PolicyError::InputTooLarge { bytes: json.len() });
        }
        let input = RegoValue::from_json_str(&json).map_err(|e| PolicyError::Eval {
            policy: String::new(),
            message: e.to_string(),
        })?;
        let mut verdict = Verdict::default();
        for policy in &self.policies {
            let mut p = policy.clone();
            verdict.deny.extend(p.rule(&input, "deny")?);
            verdict.warn.extend(p.rule(&input, "warn")?);
        }
        Ok(verdict)
    }
}

/// A compiled set, or every reason it does not compile; shared.
pub type Compilation = Arc<Result<CompiledSet, Vec<PolicyError>>>;

/// Compiled sets by the hash of their sources: compiling is done once per distinct set of modules,
/// whoever asks (the PolicySet controller for its status, the Application controller to enforce).
#[derive(Default)]
pub struct Cache {
    entries: Mutex<HashMap<[u8; 32], Compilation>>,
}

impl Cache {
    /// The compiled set for `policies`, compiled now if not cached.
    pub fn get(&self, policies: &[(String, String)]) -> Compilation {
        let key = hash(policies);
        if let Some(hit) = self.entries().get(&key) {
            return Arc::clone(hit);
        }
        let compiled = Arc::new(compile(policies));
        let mut entries = self.entries();
        if entries.len() >= CACHE_ENTRIES {
            entries.clear();
        }
        entries.insert(key, Arc::clone(&compiled));
        compiled
    }

    /// The entries, taken back from a poisoned lock: each entry is an immutable `Arc` inserted whole, so
    /// a panic elsewhere cannot leave the map half-written.
    fn entries(&self) -> std::sync::MutexGuard<'_, HashMap<[u8; 32], Compilation>> {
        self.entries.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn hash(policies: &[(String, String)]) -> [u8; 32] {
    let mut h = Sha256::new();
    for (name, source) in policies {
        for part in [name, source] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    h.finalize().into()
}

fn first_lines(s: &str) -> String {
    truncate(&s.lines().take(6).collect::<Vec<_>>().join("\n"), MAX_MESSAGE_CHARS)
}

#[cfg(test)]
mod tests;
