//! Status helpers shared by every controller: metav1 conditions that keep `lastTransitionTime`
//! while their status holds, time-insensitive status comparison, and the status writer that makes
//! at most ONE request per reconcile and none when nothing but timestamps would change
//! (as linkerd's `eq_time_insensitive` and Flux's deferred patch do; docs/architecture.md, "The status
//! writer").

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

use crate::api::conditions::{CONDITION_READY, CONDITION_STALLED, REASON_SUCCEEDED, STATUS_FALSE, STATUS_TRUE};
use crate::text::truncate;

/// Field manager of every write Capstan makes.
pub use crate::api::labels::FIELD_MANAGER;
/// Longest condition message / `lastError` kept in status (status stays small).
pub const MAX_MESSAGE_LEN: usize = 1024;

/// Status fields that hold timestamps; [`eq_ignoring_time`] ignores them wherever they appear.
pub const TIME_FIELDS: [&str; 7] = [
    "lastTransitionTime",
    "lastFetchedAt",
    "lastProbeTime",
    "lastHeartbeatTime",
    "lastUpdateTime",
    "reconciledAt",
    "observedAt",
];

/// The current time as a metav1 `Time`.
pub fn now() -> Time {
    Time(Timestamp::now())
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition `type_` is present with status `status`.
pub fn is_condition(conditions: &[Condition], type_: &str, status: &str) -> bool {
    find_condition(conditions, type_).is_some_and(|c| c.status == status)
}

/// `Ready=True` (reason `Succeeded`) with `message`, and no `Stalled`.
pub fn mark_ready(conditions: &mut Vec<Condition>, message: &str, generation: Option<i64>, now: &Time) {
    set_condition(
        conditions,
        CONDITION_READY,
        STATUS_TRUE,
        REASON_SUCCEEDED,
        message,
        generation,
        now,
    );
    remove_condition(conditions, CONDITION_STALLED);
}

/// `Ready=False` with `reason` and `message`; `Stalled` too when nothing but a spec change will help.
pub fn mark_not_ready(
    conditions: &mut Vec<Condition>,
    (reason, message): (&str, &str),
    stalled: bool,
    generation: Option<i64>,
    now: &Time,
) {
    set_condition(
        conditions,
        CONDITION_READY,
        STATUS_FALSE,
        reason,
        message,
        generation,
        now,
    );
    if stalled {
        set_condition(
            conditions,
            CONDITION_STALLED,
            STATUS_TRUE,
            reason,
            message,
            generation,
            now,
        );
    } else {
        remove_condition(conditions, CONDITION_STALLED);
    }
}

/// The new `Ready` condition when its status differs from the old one (the transition an Event
/// reports): `(is ready, message)`.
pub fn ready_flipped(old: Option<&[Condition]>, new: &[Condition]) -> Option<(bool, String)> {
    let was = old
        .and_then(|c| find_condition(c, CONDITION_READY))
        .map(|c| c.status.as_str());
    let is = find_condition(new, CONDITION_READY)?;
    (was != Some(is.status.as_str())).then(|| (is.status == STATUS_TRUE, is.message.clone()))
}

/// Publishes an Event about `obj` when its `Ready` condition flipped (see [`ready_flipped`]): reason
/// `became_ready` (Normal) or `stopped` (Warning), with the condition's message; `action` says what
/// the controller was doing.
pub async fn announce_ready_flip(
    ctx: &crate::controllers::Context,
    obj: &k8s_openapi::api::core::v1::ObjectReference,
    (old, new): (Option<&[Condition]>, &[Condition]),
    (became_ready, stopped): (&str, &str),
    action: &str,
) {
    if let Some((ready, message)) = ready_flipped(old, new) {
        let (kind, reason) = if ready {
            (kube::runtime::events::EventType::Normal, became_ready)
        } else {
            (kube::runtime::events::EventType::Warning, stopped)
        };
        ctx.publish_event(obj, kind, reason, action, &message).await;
    }
}

/// Sets condition `type_`. `lastTransitionTime` becomes `now` only when the status changes (or the
/// condition is new); reason, message and `observedGeneration` are always updated. The message is
/// truncated to [`MAX_MESSAGE_LEN`]. Conditions keep a stable order (insertion order).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    observed_generation: Option<i64>,
    now: &Time,
) {
    let message = truncate(message, MAX_MESSAGE_LEN);
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            if c.status != status {
                c.status = status.to_string();
                c.last_transition_time = now.clone();
            }
            c.reason = reason.to_string();
            c.message = message;
            c.observed_generation = observed_generation;
        }
        None => conditions.push(Condition {
            type_: type_.to_string(),
            status: status.to_string(),
            reason: reason.to_string(),
            message,
            observed_generation,
            last_transition_time: now.clone(),
        }),
    }
}

/// Removes condition `type_` if present.
pub fn remove_condition(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// Whether two statuses are equal once every [`TIME_FIELDS`] field is ignored.
pub fn eq_ignoring_time<S: Serialize>(a: &S, b: &S) -> bool {
    match (serde_json::to_value(a), serde_json::to_value(b)) {
        (Ok(mut a), Ok(mut b)) => {
            strip_time(&mut a);
            strip_time(&mut b);
            a == b
        }
        _ => false,
    }
}

fn strip_time(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for key in TIME_FIELDS {
                map.remove(key);
            }
            map.values_mut().for_each(strip_time);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_time),
        _ => {}
    }
}

/// Parameters of a non-apply patch (merge, JSON) sent as [`FIELD_MANAGER`], so `managedFields` names
/// Capstan for it too.
pub fn patch_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PatchParams::default()
    }
}

/// Writes `new` as the status of `obj` with ONE server-side apply (field manager
/// [`FIELD_MANAGER`], forced) of `/status`, unless it equals `old` ignoring timestamps, in which
/// case nothing is sent. Returns whether a request was made.
///
/// Server-side apply (rather than a merge patch of the whole status) removes fields Capstan set
/// before and no longer sets (a cleared `lastError`, a dropped condition) without a read, so a
/// stale cache cannot leave them behind.
pub async fn write_status<K, S>(api: &Api<K>, obj: &K, old: Option<&S>, new: &S) -> Result<bool, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    S: Serialize,
{
    if old.is_some_and(|old| eq_ignoring_time(old, new)) {
        return Ok(false);
    }
    let body = json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "metadata": { "name": obj.name_any() },
        "status": new,
    });
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch_status(&obj.name_any(), &params, &Patch::Apply(body)).await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::repository::{FetchedRevision, RepositoryStatus};

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_kept_while_status_holds() {
        let mut conds = Vec::new();
        set_condition(&mut conds, "Ready", "True", "Succeeded", "ok", Some(1), &at(100));
        assert_eq!(conds[0].last_transition_time, at(100));
        // Same status, new reason/message/generation: time kept.
        set_condition(&mut conds, "Ready", "True", "Succeeded", "still ok", Some(2), &at(200));
        assert_eq!(conds[0].last_transition_time, at(100));
        assert_eq!(conds[0].message, "still ok");
        assert_eq!(conds[0].observed_generation, Some(2));
        // Status flips: time moves.
        set_condition(&mut conds, "Ready", "False", "Timeout", "slow", Some(2), &at(300));
        assert_eq!(conds[0].last_transition_time, at(300));
        // Reason changes without a status change: time kept.
        set_condition(&mut conds, "Ready", "False", "NotFound", "gone", Some(2), &at(400));
        assert_eq!(conds[0].last_transition_time, at(300));
        assert_eq!(conds[0].reason, "NotFound");
        set_condition(&mut conds, "Stalled", "True", "InvalidSpec", "bad", Some(2), &at(500));
        assert_eq!(conds.len(), 2);
        assert!(is_condition(&conds, "Stalled", "True"));
        remove_condition(&mut conds, "Stalled");
        assert_eq!(conds.len(), 1);
        assert!(find_condition(&conds, "Stalled").is_none());
    }

    #[test]
    fn messages_truncated_on_char_boundary() {
        let long = "é".repeat(2000);
        let mut conds = Vec::new();
        set_condition(&mut conds, "Ready", "False", "X", &long, None, &at(1));
        assert!(conds[0].message.len() <= MAX_MESSAGE_LEN);
        assert!(conds[0].message.ends_with('…'));
        assert_eq!(truncate("short", 10), "short");
    }

    #[test]
    fn status_noop_detection_ignores_only_timestamps() {
        let status = |t: i64, sha: &str, err: Option<&str>| {
            let mut conditions = Vec::new();
            set_condition(&mut conditions, "Ready", "True", "Succeeded", "ok", Some(1), &at(t));
            RepositoryStatus {
                conditions,
                observed_generation: Some(1),
                last_fetched_revision: vec![FetchedRevision {
                    ref_: "HEAD".into(),
                    revision: sha.into(),
                }],
                last_error: err.map(str::to_string),
                last_fetched_at: Some(at(t)),
            }
        };
        assert!(eq_ignoring_time(&status(1, "a", None), &status(99, "a", None)));
        assert!(!eq_ignoring_time(&status(1, "a", None), &status(1, "b", None)));
        assert!(!eq_ignoring_time(&status(1, "a", None), &status(1, "a", Some("x"))));
        let mut other_gen = status(1, "a", None);
        other_gen.observed_generation = Some(2);
        assert!(!eq_ignoring_time(&status(1, "a", None), &other_gen));
    }
}
