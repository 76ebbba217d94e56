//! Health of live objects, assessed per kind as Argo CD does (gitops-engine `pkg/health`), and the
//! aggregation of an Application's children into the Application's health (Argo CD
//! `controller/health.go`).
//!
//! [`assess`] looks at one live object and answers with its health, or `None` when Capstan has no health
//! check for the kind (a ConfigMap, a Secret, a CR without conditions): as in Argo CD, no check counts as
//! success. Each kind has one small function in its own module, citing the Argo rule it implements.
//! Objects are plain `serde_json::Value`s and every field may be missing or mistyped: a missing number
//! counts as zero and a mistyped one as missing, as Kubernetes' defaulting would, and nothing here panics.
//!
//! [`aggregate`] folds the children's health into the Application's: the worst child wins, in Argo's order
//! Healthy < Suspended < Progressing < Missing < Degraded < Unknown ([`severity`], [`is_worse`]).
//!
//! Pure: no I/O.

mod apiservice;
mod application;
mod crd;
mod daemonset;
mod deployment;
mod generic;
mod hpa;
mod ingress;
mod job;
mod pod;
mod pvc;
mod replicaset;
mod service;
mod statefulset;
mod workflow;

#[cfg(test)]
mod tests;

use serde_json::Value;

use crate::api::application::{HealthStatus, HealthStatusCode, ResourceHealth};
use crate::engine::object::{self, ObjectKey};
use crate::text::truncate;

/// Finalizers that keep a hook alive until its result is recorded. A hook being deleted while it carries
/// one is still assessed normally, so its outcome is not masked by "Pending deletion" (gitops-engine
/// `hook.HasHookFinalizer`). Capstan's first, then Argo CD's.
pub const HOOK_FINALIZERS: [&str; 2] = ["capstan.dev/hook-finalizer", "argocd.argoproj.io/hook-finalizer"];

/// Annotation excluding a resource from its Application's health (`"true"`). Capstan's first, then
/// Argo CD's (`common.AnnotationIgnoreHealthCheck`).
pub const IGNORE_HEALTHCHECK_ANNOTATIONS: [&str; 2] = [
    "capstan.dev/ignore-healthcheck",
    "argocd.argoproj.io/ignore-healthcheck",
];

/// Health of the live object `live`, or `None` when there is no health check for its kind (counts as
/// success, Argo CD semantics).
///
/// An object being deleted is Progressing "Pending deletion", whatever its kind, unless it carries a hook
/// finalizer (gitops-engine `GetResourceHealth`). Otherwise the check is chosen by API group and kind
/// (gitops-engine `GetHealthCheckFunc`, plus the CRD, Application and generic-condition checks Argo CD
/// keeps in Lua); the version does not matter.
pub fn assess(live: &Value) -> Option<ResourceHealth> {
    if is_pending_deletion(live) {
        return Some(health(HealthStatusCode::Progressing, "Pending deletion"));
    }
    let (group, version) = object::group_version(live);
    let check: fn(&Value) -> ResourceHealth = match (group.as_str(), object::kind(live)) {
        ("apps" | "extensions", "Deployment") => deployment::assess,
        ("apps", "StatefulSet") => statefulset::assess,
        ("apps" | "extensions", "DaemonSet") => daemonset::assess,
        ("apps" | "extensions", "ReplicaSet") => replicaset::assess,
        ("", "Service") => service::assess,
        ("networking.k8s.io" | "extensions", "Ingress") => ingress::assess,
        ("", "PersistentVolumeClaim") => pvc::assess,
        ("", "Pod") => pod::assess,
        ("batch", "Job") => job::assess,
        ("apiregistration.k8s.io", "APIService") => apiservice::assess,
        ("autoscaling", "HorizontalPodAutoscaler") if version == "v1" => hpa::assess_v1,
        ("autoscaling", "HorizontalPodAutoscaler") => hpa::assess_v2,
        ("apiextensions.k8s.io", "CustomResourceDefinition") => crd::assess,
        ("capstan.dev" | "argoproj.io", "Application") => application::assess,
        ("argoproj.io", "Workflow") => workflow::assess,
        _ => return generic::assess(live),
    };
    Some(check(live))
}

/// Whether `obj` is being deleted (`metadata.deletionTimestamp` set) and is not a hook held by a hook
/// finalizer.
fn is_pending_deletion(obj: &Value) -> bool {
    let deleting = object::metadata_field(obj, "deletionTimestamp").is_some_and(|t| !t.is_null());
    let hook_finalizer = object::metadata_field(obj, "finalizers")
        .and_then(Value::as_array)
        .is_some_and(|fs| {
            fs.iter()
                .filter_map(Value::as_str)
                .any(|f| HOOK_FINALIZERS.contains(&f))
        });
    deleting && !hook_finalizer
}

/// Position of `code` in Argo CD's `healthOrder`, from most to least healthy: Healthy 0, Suspended 1,
/// Progressing 2, Missing 3, Degraded 4, Unknown 5.
pub fn severity(code: HealthStatusCode) -> u8 {
    match code {
        HealthStatusCode::Healthy => 0,
        HealthStatusCode::Suspended => 1,
        HealthStatusCode::Progressing => 2,
        HealthStatusCode::Missing => 3,
        HealthStatusCode::Degraded => 4,
        HealthStatusCode::Unknown => 5,
    }
}

/// Whether `new` is a worse health than `current` (gitops-engine `health.IsWorse`).
pub fn is_worse(current: HealthStatusCode, new: HealthStatusCode) -> bool {
    severity(new) > severity(current)
}

/// One managed resource as the Application's health aggregation sees it: Argo CD's `managedResource`
/// reduced to what `setApplicationHealth` reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ChildHealth {
    /// Identity of the resource (its kind and group decide the Job and Application special cases).
    pub key: ObjectKey,
    /// The live object is a hook (hooks never count towards the Application's health).
    pub is_hook: bool,
    /// The desired object is marked `Skip` (never applied, never counted).
    pub skipped: bool,
    /// The live object carries `ignore-healthcheck: "true"`: it counts as present but its health is not
    /// aggregated.
    pub ignore_health: bool,
    /// The resource is the Application itself (an app that manages itself does not affect its own health).
    pub is_self: bool,
    /// The resource exists in the cluster.
    pub live: bool,
    /// Its health from [`assess`]; `None` for kinds without a health check.
    pub health: Option<ResourceHealth>,
}

impl ChildHealth {
    /// Observe one resource of the Application `app` from its desired and live objects (either may be
    /// absent), the way Argo CD's `setApplicationHealth` reads a `managedResource`: `Skip` from the desired
    /// object; hook, ignore-healthcheck and health from the live one.
    pub fn observe(app: &ObjectKey, desired: Option<&Value>, live: Option<&Value>) -> ChildHealth {
        let key = live.or(desired).map(ObjectKey::of).unwrap_or_default();
        ChildHealth {
            is_hook: live.is_some_and(object::is_hook),
            skipped: desired.is_some_and(object::is_skipped),
            ignore_health: live.is_some_and(ignores_health_check),
            is_self: live.is_some() && key == *app,
            live: live.is_some(),
            health: live.and_then(assess),
            key,
        }
    }
}

/// Whether `obj` carries `capstan.dev/ignore-healthcheck` or `argocd.argoproj.io/ignore-healthcheck` set
/// to `"true"`.
pub fn ignores_health_check(obj: &Value) -> bool {
    IGNORE_HEALTHCHECK_ANNOTATIONS
        .iter()
        .any(|k| object::annotation(obj, k) == Some("true"))
}

/// How many resources the aggregated message names before "and N more".
const CAUSES_SHOWN: usize = 3;
/// Longest per-resource message quoted in the aggregated message, in bytes.
const CAUSE_MESSAGE_MAX: usize = 160;

/// The health of an Application from its children's, as Argo CD's `setApplicationHealth`:
///
/// - hooks, `Skip` resources and the Application itself are left out;
/// - a resource with `ignore-healthcheck: "true"` counts as present but its health is left out;
/// - a missing child (no live object) does not lower the health (OutOfSync already says so), nor does a
///   child Application that is Missing or Unknown, nor a kind without a health check;
/// - a suspended Job counts as Healthy (gitops-engine `AggregateAs`);
/// - otherwise the worst child wins, Healthy < Suspended < Progressing < Missing < Degraded < Unknown;
/// - an Application that expects resources but has none live is Missing.
///
/// Anything but Healthy gets a message naming the resources that cause it: "Caused by <up to 3 resources>
/// and N more". `last_transition_time` is left to the caller, which knows the previous status.
pub fn aggregate(children: impl IntoIterator<Item = ChildHealth>) -> HealthStatus {
    let mut status = HealthStatusCode::Healthy;
    let mut contains_resources = false;
    let mut contains_live = false;
    let mut assessed: Vec<(ObjectKey, HealthStatusCode, Option<String>)> = Vec::new();
    let mut missing: Vec<ObjectKey> = Vec::new();

    for child in children {
        if child.skipped || child.is_hook {
            continue;
        }
        contains_resources = true;
        contains_live |= child.live;
        if child.ignore_health {
            continue;
        }
        if !child.live {
            missing.push(child.key);
            continue;
        }
        if child.is_self {
            continue;
        }
        let Some(h) = child.health else { continue };
        let code = aggregate_as(&child.key, h.status);
        if is_application(&child.key) && matches!(code, HealthStatusCode::Missing | HealthStatusCode::Unknown) {
            continue;
        }
        if is_worse(status, code) {
            status = code;
        }
        assessed.push((child.key, code, h.message));
    }

    if contains_resources && !contains_live && is_worse(status, HealthStatusCode::Missing) {
        let causes: Vec<String> = missing.iter().map(|k| format!("{} (missing)", describe(k))).collect();
        return HealthStatus {
            status: HealthStatusCode::Missing,
            message: caused_by(&causes),
            last_transition_time: None,
        };
    }
    let causes: Vec<String> = if status == HealthStatusCode::Healthy {
        Vec::new()
    } else {
        assessed
            .iter()
            .filter(|(_, code, _)| *code == status)
            .map(
                |(key, _, message)| match message.as_deref().map(str::trim).filter(|m| !m.is_empty()) {
                    Some(m) => format!("{} ({})", describe(key), truncate(m, CAUSE_MESSAGE_MAX)),
                    None => describe(key),
                },
            )
            .collect()
    };
    HealthStatus {
        status,
        message: caused_by(&causes),
        last_transition_time: None,
    }
}

/// The status a child contributes to its Application: a suspended Job counts as Healthy (gitops-engine
/// `health_job.go` sets `AggregateAs: Healthy`, so suspending a Job does not make the app Suspended).
fn aggregate_as(key: &ObjectKey, code: HealthStatusCode) -> HealthStatusCode {
    if key.group == "batch" && key.kind == "Job" && code == HealthStatusCode::Suspended {
        HealthStatusCode::Healthy
    } else {
        code
    }
}

/// Whether `key` is a Capstan or Argo CD Application.
fn is_application(key: &ObjectKey) -> bool {
    key.kind == "Application" && matches!(key.group.as_str(), "capstan.dev" | "argoproj.io")
}

/// `Deployment shop/web`, or `Namespace shop` for a cluster-scoped object.
fn describe(key: &ObjectKey) -> String {
    if key.namespace.is_empty() {
        format!("{} {}", key.kind, key.name)
    } else {
        format!("{} {}/{}", key.kind, key.namespace, key.name)
    }
}

/// "Caused by A, B, C and N more", or `None` with no causes.
fn caused_by(causes: &[String]) -> Option<String> {
    if causes.is_empty() {
        return None;
    }
    let shown = causes[..causes.len().min(CAUSES_SHOWN)].join(", ");
    let more = causes.len().saturating_sub(CAUSES_SHOWN);
    Some(if more > 0 {
        format!("Caused by {shown} and {more} more")
    } else {
        format!("Caused by {shown}")
    })
}

// ---- helpers shared by the per-kind checks ----

/// A health with a message; an empty message is no message (Argo CD's `""`).
fn health(status: HealthStatusCode, message: impl Into<String>) -> ResourceHealth {
    let message = message.into();
    ResourceHealth {
        status,
        message: (!message.is_empty()).then_some(message),
    }
}

/// An integer field at JSON pointer `ptr`; `None` when missing or not an integer.
fn int(obj: &Value, ptr: &str) -> Option<i64> {
    let v = obj.pointer(ptr)?;
    v.as_i64()
        .or_else(|| v.as_u64().map(|u| i64::try_from(u).unwrap_or(i64::MAX)))
        .or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && f.is_finite())
                .map(|f| f as i64)
        })
}

/// An integer field, zero when missing (Go's zero value after conversion).
fn int_or_zero(obj: &Value, ptr: &str) -> i64 {
    int(obj, ptr).unwrap_or(0)
}

/// Progressing while the workload's controller has not seen its latest spec (`metadata.generation >
/// status.observedGeneration`), with kubectl's `rollout status` message naming the `what` (`deployment`).
fn spec_not_observed(obj: &Value, what: &str) -> Option<ResourceHealth> {
    let generation = int_or_zero(obj, "/metadata/generation");
    let observed = int_or_zero(obj, "/status/observedGeneration");
    (generation > observed).then(|| {
        health(
            HealthStatusCode::Progressing,
            format!("Waiting for rollout to finish: observed {what} generation less than desired generation"),
        )
    })
}

/// A string field at `ptr`, `""` when missing or not a string.
fn str_at<'a>(obj: &'a Value, ptr: &str) -> &'a str {
    obj.pointer(ptr).and_then(Value::as_str).unwrap_or_default()
}

/// A boolean field at `ptr`, false when missing or not a boolean.
fn bool_at(obj: &Value, ptr: &str) -> bool {
    obj.pointer(ptr).and_then(Value::as_bool).unwrap_or(false)
}

/// Whether the array at `ptr` exists and is not empty.
fn non_empty_array(obj: &Value, ptr: &str) -> bool {
    obj.pointer(ptr)
        .and_then(Value::as_array)
        .is_some_and(|a| !a.is_empty())
}

/// A status condition, with missing fields as `""`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Condition<'a> {
    type_: &'a str,
    status: &'a str,
    reason: &'a str,
    message: &'a str,
}

impl<'a> Condition<'a> {
    fn from_value(v: &'a Value) -> Option<Condition<'a>> {
        let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
        v.is_object().then(|| Condition {
            type_: field("type"),
            status: field("status"),
            reason: field("reason"),
            message: field("message"),
        })
    }

    fn is_true(&self) -> bool {
        self.status == "True"
    }

    fn is_false(&self) -> bool {
        self.status == "False"
    }
}

/// The conditions of a condition list (entries that are not objects are skipped).
fn conditions_of(list: &Value) -> Vec<Condition<'_>> {
    list.as_array()
        .map(|a| a.iter().filter_map(Condition::from_value).collect())
        .unwrap_or_default()
}

/// `status.conditions` of `obj`.
fn conditions(obj: &Value) -> Vec<Condition<'_>> {
    obj.pointer("/status/conditions").map(conditions_of).unwrap_or_default()
}

/// The first condition of type `type_` in `status.conditions`.
fn condition<'a>(obj: &'a Value, type_: &str) -> Option<Condition<'a>> {
    conditions(obj).into_iter().find(|c| c.type_ == type_)
}
