//! Pod health: gitops-engine `health_pod.go`.

use serde_json::Value;

use super::{conditions, health, int_or_zero, str_at};
use crate::api::application::{HealthStatusCode, ResourceHealth};
use crate::engine::object;

/// Annotation (`"true"`) asking that a non-hook Pod with restart policy `Never`/`OnFailure` be judged like
/// an `Always` Pod. Capstan's first, then Argo CD's. Ignored on hooks, whose Pods must run to completion.
const IGNORE_RESTART_POLICY_ANNOTATIONS: [&str; 2] = [
    "capstan.dev/ignore-restart-policy",
    "argocd.argoproj.io/ignore-restart-policy",
];

/// Argo CD's rule:
/// - a long-running Pod (restart policy `Always`, the default, or ignore-restart-policy on a non-hook) with
///   a container waiting for a reason starting with `Err` or ending in `Error`/`BackOff`
///   (`CrashLoopBackOff`, `ImagePullBackOff`, `ErrImagePull`, `CreateContainerConfigError`, …) → Degraded
///   with the waiting messages. Not for run-to-completion Pods: a hook Pod must not fail on a transient
///   pull error;
/// - phase `Pending` → Progressing; `Succeeded` → Healthy;
/// - phase `Failed` → Degraded with `status.message`, else the first terminated container's message,
///   `OOMKilled`, or `container "x" failed with exit code N` (init containers first);
/// - phase `Running`: a long-running Pod is Healthy when `Ready=True`, Degraded when a container has
///   terminated before (it is restarting), else Progressing; a run-to-completion Pod is Progressing;
/// - anything else → Unknown.
pub(super) fn assess(obj: &Value) -> ResourceHealth {
    let long_running = is_long_running(obj);
    let pod_message = str_at(obj, "/status/message");
    let containers = statuses(obj, "/status/containerStatuses");

    if long_running {
        let waiting: Vec<&str> = containers
            .iter()
            .filter(|c| {
                let reason = str_at(c, "/state/waiting/reason");
                reason.starts_with("Err") || reason.ends_with("Error") || reason.ends_with("BackOff")
            })
            .map(|c| str_at(c, "/state/waiting/message"))
            .collect();
        if !waiting.is_empty() {
            return health(HealthStatusCode::Degraded, waiting.join(", "));
        }
    }

    match str_at(obj, "/status/phase") {
        "Pending" => health(HealthStatusCode::Progressing, pod_message),
        "Succeeded" => health(HealthStatusCode::Healthy, pod_message),
        "Failed" => {
            if !pod_message.is_empty() {
                return health(HealthStatusCode::Degraded, pod_message);
            }
            let init = statuses(obj, "/status/initContainerStatuses");
            let message = init
                .iter()
                .chain(&containers)
                .map(|c| failure_message(c, "/state/terminated"))
                .find(|m| !m.is_empty())
                .unwrap_or_default();
            health(HealthStatusCode::Degraded, message)
        }
        "Running" if long_running => {
            if is_ready(obj) {
                return health(HealthStatusCode::Healthy, pod_message);
            }
            let restarted = containers
                .iter()
                .find(|c| c.pointer("/lastState/terminated").is_some_and(Value::is_object));
            match restarted {
                // Argo CD reports `status.message` (usually empty); the last termination says why.
                Some(c) if pod_message.is_empty() => {
                    health(HealthStatusCode::Degraded, failure_message(c, "/lastState/terminated"))
                }
                Some(_) => health(HealthStatusCode::Degraded, pod_message),
                None => health(HealthStatusCode::Progressing, pod_message),
            }
        }
        "Running" => health(HealthStatusCode::Progressing, pod_message),
        _ => health(HealthStatusCode::Unknown, pod_message),
    }
}

/// Restart policy `Always` (the default), or a non-hook Pod annotated ignore-restart-policy.
fn is_long_running(obj: &Value) -> bool {
    let policy = match str_at(obj, "/spec/restartPolicy") {
        "" => "Always",
        p => p,
    };
    policy == "Always"
        || (!object::is_hook(obj) && object::annotation_any(obj, &IGNORE_RESTART_POLICY_ANNOTATIONS) == Some("true"))
}

/// kubectl's `podutils.IsPodReady`: condition `Ready=True`.
fn is_ready(obj: &Value) -> bool {
    conditions(obj).iter().any(|c| c.type_ == "Ready" && c.is_true())
}

fn statuses<'a>(obj: &'a Value, ptr: &str) -> Vec<&'a Value> {
    obj.pointer(ptr)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter(|c| c.is_object()).collect())
        .unwrap_or_default()
}

/// Why the container's termination at `ptr` (`/state/terminated` or `/lastState/terminated`) failed: its
/// message, `OOMKilled`, or its exit code; `""` when it did not terminate or exited 0.
fn failure_message(container: &Value, ptr: &str) -> String {
    let Some(terminated) = container.pointer(ptr).filter(|t| t.is_object()) else {
        return String::new();
    };
    let message = str_at(terminated, "/message");
    if !message.is_empty() {
        return message.to_string();
    }
    if str_at(terminated, "/reason") == "OOMKilled" {
        return "OOMKilled".to_string();
    }
    match int_or_zero(terminated, "/exitCode") {
        0 => String::new(),
        code => format!(
            "container {:?} failed with exit code {code}",
            str_at(container, "/name")
        ),
    }
}
