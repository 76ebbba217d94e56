//! The controllers' error type and the ONE place where an error becomes a requeue decision.
//!
//! Every reconcile returns `Result<Action, Error>`. An error says what went wrong (a stable
//! [`Error::category`] for conditions, events and metrics labels) and what kind of wait fixes it
//! ([`ErrorKind`]); [`error_policy`] turns that into an [`Action`] with per-object exponential
//! backoff for transient failures (Flux source-controller's error kinds; Stackable's `category`).
//!
//! Messages are built from sanitized parts only: never a credential, never URL userinfo or query.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::Resource;

use super::context::Context;

/// What kind of wait fixes an error; decides the requeue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The spec is invalid: nothing helps until the object changes (`await_change`, `Stalled=True`).
    Stalled,
    /// A dependency or source is not ready (missing Secret, rejected credentials, unknown host key):
    /// look again after this long. Not counted as a reconcile failure.
    Waiting(Duration),
    /// Something that may work on the next try (API server, network timeout): exponential backoff.
    Transient,
}

/// The Kubernetes request a reconcile step made, named in [`Error::Kube`] so that a log line and the
/// `capstan_reconcile_errors_total{category}` label say where a reconcile failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KubeStep {
    /// Reading what a reconcile works from (Clusters, Repositories, Applications, Secrets).
    Read,
    /// The one status write of a reconcile.
    StatusWrite,
    /// The write-ahead status write of a sync step, made before the step changes the cluster.
    WriteAhead,
    /// Adding or removing finalizers.
    FinalizerPatch,
    /// Removing handled refresh annotations or a finished `operation`.
    MetadataPatch,
}

impl KubeStep {
    /// Stable PascalCase name (the error's category).
    pub fn as_str(self) -> &'static str {
        match self {
            KubeStep::Read => "Read",
            KubeStep::StatusWrite => "StatusWrite",
            KubeStep::WriteAhead => "WriteAhead",
            KubeStep::FinalizerPatch => "FinalizerPatch",
            KubeStep::MetadataPatch => "MetadataPatch",
        }
    }

    /// A closure for `map_err` that names this step: `api.get(..).await.map_err(KubeStep::Read.err())?`.
    pub fn err(self) -> impl Fn(kube::Error) -> Error {
        move |source| Error::Kube { step: self, source }
    }
}

impl std::fmt::Display for KubeStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of any controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed at `step`.
    #[error("Kubernetes API request failed ({step}): {source}")]
    Kube {
        /// Which request of the reconcile failed.
        step: KubeStep,
        /// The client's error.
        source: kube::Error,
    },
    /// The object's spec cannot work as written (bad duration, bad URL, ...).
    #[error("invalid spec: {0}")]
    InvalidSpec(String),
    /// Talking to a Git repository failed. `message` is sanitized (no credentials, no userinfo).
    #[error("{message}")]
    Git {
        /// The `SourceError` category (`AuthenticationFailed`, `Timeout`, ...).
        category: &'static str,
        /// Sanitized, truncated message.
        message: String,
        /// Whether retrying soon can help (timeouts, internal errors).
        transient: bool,
        /// When to look again otherwise (the Repository's poll interval).
        retry_after: Duration,
    },
    /// Something this object depends on is missing or not ready (a referenced Secret, ...).
    #[error("{message}")]
    Dependency {
        /// Stable reason (`NotFound`, `DependencyNotReady`, ...).
        category: &'static str,
        /// Sanitized message.
        message: String,
        /// When to look again (watches usually trigger earlier).
        retry_after: Duration,
    },
    /// A failure the object's status already reports in a condition (an Application whose source,
    /// render or destination failed; a cascade deletion that failed). Returned after the status write so
    /// the backoff, the logs and the metrics see it.
    #[error("{message}")]
    Reported {
        /// The condition's reason (`Timeout`, `AuthenticationFailed`, `InvalidYaml`, ...).
        category: &'static str,
        /// Sanitized message.
        message: String,
        /// How it is retried.
        retry: ErrorKind,
    },
    /// An unexpected internal failure.
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// Stable PascalCase name for metrics labels, event reasons and condition reasons.
    pub fn category(&self) -> &'static str {
        match self {
            Error::Kube { step, .. } => step.as_str(),
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::Git { category, .. } | Error::Dependency { category, .. } | Error::Reported { category, .. } => {
                category
            }
            Error::Internal(_) => "Internal",
        }
    }

    /// How this error is retried.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Kube { .. } | Error::Internal(_) => ErrorKind::Transient,
            Error::Reported { retry, .. } => *retry,
            Error::InvalidSpec(_) => ErrorKind::Stalled,
            Error::Git { transient: true, .. } => ErrorKind::Transient,
            Error::Git { retry_after, .. } | Error::Dependency { retry_after, .. } => ErrorKind::Waiting(*retry_after),
        }
    }
}

/// Exponential backoff for [`ErrorKind::Transient`]: `initial`, doubling per consecutive failure,
/// capped at `max`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BackoffPolicy {
    /// Delay after the first failure.
    pub initial: Duration,
    /// Upper bound.
    pub max: Duration,
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl BackoffPolicy {
    /// Delay after the `attempt`-th consecutive failure (1-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << exp).min(self.max)
    }
}

/// The requeue for an error of `kind` after `attempt` consecutive transient failures:
/// `None` means wait for a change of the object (`await_change`).
pub fn requeue_after(kind: ErrorKind, attempt: u32, policy: &BackoffPolicy) -> Option<Duration> {
    match kind {
        ErrorKind::Stalled => None,
        ErrorKind::Waiting(after) => Some(after),
        ErrorKind::Transient => Some(policy.delay(attempt.max(1))),
    }
}

/// Consecutive transient failures per object, for the backoff. Reset on success.
#[derive(Debug, Default)]
pub struct Backoffs {
    attempts: Mutex<HashMap<ObjectRef<DynamicObject>, u32>>,
}

impl Backoffs {
    /// Counts one more failure of `key` and returns the count.
    pub fn fail(&self, key: &ObjectRef<DynamicObject>) -> u32 {
        let mut map = self.attempts.lock().unwrap_or_else(|p| p.into_inner());
        let n = map.entry(key.clone()).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of `key`.
    pub fn reset(&self, key: &ObjectRef<DynamicObject>) {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// The key of an object in [`Backoffs`].
pub fn object_key<K: Resource<DynamicType = ()>>(obj: &K) -> ObjectRef<DynamicObject> {
    ObjectRef::from_obj(obj).erase()
}

/// The error policy of every controller: decides the requeue of a failed reconcile.
pub fn error_policy<K: Resource<DynamicType = ()>>(obj: Arc<K>, error: &Error, ctx: Arc<Context>) -> Action {
    let kind = error.kind();
    let attempt = match kind {
        ErrorKind::Transient => ctx.backoffs.fail(&object_key(obj.as_ref())),
        _ => {
            ctx.backoffs.reset(&object_key(obj.as_ref()));
            0
        }
    };
    match requeue_after(kind, attempt, &ctx.settings.backoff) {
        Some(after) => Action::requeue(after),
        None => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_categories() {
        let git = |category, transient| Error::Git {
            category,
            message: "m".into(),
            transient,
            retry_after: Duration::from_secs(60),
        };
        assert_eq!(git("Timeout", true).kind(), ErrorKind::Transient);
        assert_eq!(
            git("AuthenticationFailed", false).kind(),
            ErrorKind::Waiting(Duration::from_secs(60))
        );
        assert_eq!(git("AuthenticationFailed", false).category(), "AuthenticationFailed");
        assert_eq!(Error::InvalidSpec("x".into()).kind(), ErrorKind::Stalled);
        assert_eq!(Error::InvalidSpec("x".into()).category(), "InvalidSpec");
        assert_eq!(Error::Internal("x".into()).kind(), ErrorKind::Transient);
        let dep = Error::Dependency {
            category: "NotFound",
            message: "Secret s not found".into(),
            retry_after: Duration::from_secs(5),
        };
        assert_eq!(dep.kind(), ErrorKind::Waiting(Duration::from_secs(5)));
        assert_eq!(dep.category(), "NotFound");
    }

    #[test]
    fn requeue_decisions() {
        let p = BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        assert_eq!(requeue_after(ErrorKind::Stalled, 3, &p), None);
        assert_eq!(
            requeue_after(ErrorKind::Waiting(Duration::from_secs(7)), 9, &p),
            Some(Duration::from_secs(7))
        );
        let delays: Vec<u64> = (1..=9)
            .map(|a| requeue_after(ErrorKind::Transient, a, &p).unwrap().as_secs())
            .collect();
        assert_eq!(delays, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        // Huge attempt counts neither overflow nor exceed the cap.
        assert_eq!(p.delay(u32::MAX), Duration::from_secs(60));
        assert_eq!(requeue_after(ErrorKind::Transient, 0, &p), Some(Duration::from_secs(1)));
    }

    #[test]
    fn backoff_is_per_object_and_resets() {
        let b = Backoffs::default();
        let a = ObjectRef::<DynamicObject>::new_with("a", kube::api::ApiResource::erase::<crate::api::Repository>(&()))
            .within("ns");
        let other =
            ObjectRef::<DynamicObject>::new_with("b", kube::api::ApiResource::erase::<crate::api::Repository>(&()))
                .within("ns");
        assert_eq!(b.fail(&a), 1);
        assert_eq!(b.fail(&a), 2);
        assert_eq!(b.fail(&other), 1);
        b.reset(&a);
        assert_eq!(b.fail(&a), 1);
    }
}
