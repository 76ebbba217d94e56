//! Health of kinds without a dedicated check (custom resources above all), from the standard conditions
//! the way kstatus reads them (`cli-utils` `checkGenericProperties`, plus the `Ready` condition Flux,
//! cert-manager, Crossplane and Capstan's own CRs set). Argo CD leaves such kinds without health unless a
//! Lua check is configured; Capstan reads the conventions most controllers follow instead.

use serde_json::Value;

use super::{conditions, health, int, Condition};
use crate::api::application::{HealthStatusCode, ResourceHealth};

/// Words in a `Ready=False` reason or message that mean the controller is still working, not stuck
/// (compared case-insensitively as substrings: `Progressing`, `DependencyNotReady`, cert-manager's
/// "Issuing certificate as Secret does not exist", …) — unless a word of [`FAILURE_WORDS`] is there too
/// (`UpdateFailed`).
const PROGRESS_WORDS: [&str; 15] = [
    "progress",
    "pending",
    "creating",
    "provisioning",
    "reconciling",
    "waiting",
    "initializing",
    "updating",
    "issuing",
    "installing",
    "upgrading",
    "starting",
    "deploying",
    "scaling",
    "dependencynotready",
];

/// Words in a reason that mean failure, whatever else it says.
const FAILURE_WORDS: [&str; 4] = ["fail", "error", "invalid", "denied"];

/// In order:
/// - `status.observedGeneration < metadata.generation` → Progressing (the controller has not seen the
///   spec yet);
/// - `Reconciling=True` → Progressing;
/// - `Stalled=True` → Degraded;
/// - `Ready=True` → Healthy; `Ready=Unknown` → Progressing; `Ready=False` → Progressing when its reason
///   or message says work is under way, else Degraded;
/// - no condition among these → `None` (no health check, counts as success).
pub(super) fn assess(obj: &Value) -> Option<ResourceHealth> {
    if let (Some(generation), Some(observed)) =
        (int(obj, "/metadata/generation"), int(obj, "/status/observedGeneration"))
    {
        if observed < generation {
            return Some(health(
                HealthStatusCode::Progressing,
                format!("Waiting for the controller to observe generation {generation} (observed {observed})"),
            ));
        }
    }
    let conds = conditions(obj);
    let find = |t: &str| conds.iter().find(|c| c.type_ == t);
    let say = |reason: &str, message: &str| match (reason, message) {
        ("", m) => m.to_string(),
        (r, "") => r.to_string(),
        (r, m) => format!("{r}: {m}"),
    };
    if let Some(c) = find("Reconciling").filter(|c| c.is_true()) {
        return Some(health(HealthStatusCode::Progressing, say(c.reason, c.message)));
    }
    if let Some(c) = find("Stalled").filter(|c| c.is_true()) {
        return Some(health(HealthStatusCode::Degraded, say(c.reason, c.message)));
    }
    let ready = find("Ready")?;
    let status = if ready.is_true() {
        HealthStatusCode::Healthy
    } else if ready.is_false() && !suggests_progress(ready) {
        HealthStatusCode::Degraded
    } else {
        HealthStatusCode::Progressing
    };
    let message = if status == HealthStatusCode::Healthy {
        ready.message.to_string()
    } else {
        say(ready.reason, ready.message)
    };
    Some(health(status, message))
}

/// Whether a `Ready=False` condition's reason or message says the controller is still at work.
fn suggests_progress(ready: &Condition<'_>) -> bool {
    let text = format!("{} {}", ready.reason, ready.message).to_ascii_lowercase();
    PROGRESS_WORDS.iter().any(|w| text.contains(w)) && !FAILURE_WORDS.iter().any(|w| text.contains(w))
}
