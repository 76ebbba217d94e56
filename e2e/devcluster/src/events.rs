//! One stored Event resource served in two shapes, as the real API server does: `events.k8s.io/v1` Events are
//! stored as core/v1 Events and converted on the way in and out (k8s.io/kubernetes
//! `pkg/apis/events/v1/conversion.go`). That is what makes an event published by kube-runtime's `Recorder`
//! (events.k8s.io) show up in `kubectl get events` and `kubectl describe` (core/v1).
//!
//! The conversion renames fields and never drops one, so a round trip is lossless:
//!
//! | core/v1 | events.k8s.io/v1 |
//! | --- | --- |
//! | `involvedObject` | `regarding` |
//! | `message` | `note` |
//! | `reportingComponent` | `reportingController` |
//! | `source` (`component`, `host`) | `deprecatedSource` |
//! | `firstTimestamp` | `deprecatedFirstTimestamp` |
//! | `lastTimestamp` | `deprecatedLastTimestamp` |
//! | `count` | `deprecatedCount` |
//!
//! `eventTime`, `series`, `action`, `reason`, `related`, `type` and `reportingInstance` have the same names in
//! both. As upstream, no value is synthesised: an events.k8s.io Event has no `firstTimestamp` in core/v1 (the
//! printers fall back to `eventTime` and `series`).

use serde_json::{Map, Value};

/// `apiVersion` of the events.k8s.io shape.
pub const EVENTS_V1: &str = "events.k8s.io/v1";

/// (core/v1 name, events.k8s.io/v1 name) of every renamed field.
const RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Whether an object is in the events.k8s.io/v1 shape.
pub fn is_events_v1(obj: &Value) -> bool {
    obj.get("apiVersion").and_then(Value::as_str) == Some(EVENTS_V1)
}

/// Move `from` to `to` in every renamed pair. A key already present under the target name wins over the moved
/// one (a client that sent both spellings gets the one that belongs to the shape it used).
fn rename(obj: &mut Map<String, Value>, to_v1: bool) {
    for (core, v1) in RENAMES {
        let (from, to) = if to_v1 { (*core, *v1) } else { (*v1, *core) };
        if let Some(v) = obj.remove(from) {
            obj.entry(to.to_string()).or_insert(v);
        }
    }
}

/// core/v1 → events.k8s.io/v1 (idempotent: an object already in that shape is returned unchanged).
pub fn to_events_v1(obj: &Value) -> Value {
    let mut out = obj.clone();
    if is_events_v1(obj) {
        return out;
    }
    if let Some(m) = out.as_object_mut() {
        rename(m, true);
        m.insert("apiVersion".into(), Value::String(EVENTS_V1.into()));
    }
    out
}

/// events.k8s.io/v1 → core/v1 (idempotent: an object already in core shape is returned unchanged).
pub fn to_core(mut obj: Value) -> Value {
    if !is_events_v1(&obj) {
        return obj;
    }
    if let Some(m) = obj.as_object_mut() {
        rename(m, false);
        m.insert("apiVersion".into(), Value::String("v1".into()));
    }
    obj
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn recorder_event() -> Value {
        json!({"apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": "noted.1", "namespace": "ns"},
            "eventTime": "2026-11-22T01:27:18.721491Z", "action": "Check", "reason": "SomethingHappened",
            "note": "a note for humans", "type": "Warning",
            "regarding": {"kind": "ConfigMap", "name": "noted", "namespace": "ns", "apiVersion": "v1"},
            "reportingController": "e2e-recorder", "reportingInstance": "e2e-recorder",
            "series": {"count": 2, "lastObservedTime": "2026-11-22T01:27:19.000000Z"}})
    }

    #[test]
    fn events_v1_becomes_core_and_back() {
        let core = to_core(recorder_event());
        assert_eq!(core["apiVersion"], "v1");
        assert_eq!(core["involvedObject"]["name"], "noted");
        assert_eq!(core["message"], "a note for humans");
        assert_eq!(core["reportingComponent"], "e2e-recorder");
        assert_eq!(core["series"]["count"], 2);
        assert!(core.get("regarding").is_none() && core.get("note").is_none());
        assert_eq!(to_events_v1(&core), recorder_event());
    }

    #[test]
    fn core_fields_map_to_deprecated_ones() {
        let core = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "e"},
            "involvedObject": {"kind": "Pod", "name": "p"}, "message": "m", "count": 3,
            "source": {"component": "kubelet", "host": "n1"},
            "firstTimestamp": "2026-11-22T01:00:00Z", "lastTimestamp": "2026-11-22T02:00:00Z"});
        let v1 = to_events_v1(&core);
        assert_eq!(v1["deprecatedSource"]["component"], "kubelet");
        assert_eq!(v1["deprecatedCount"], 3);
        assert_eq!(v1["deprecatedFirstTimestamp"], "2026-11-22T01:00:00Z");
        assert_eq!(v1["deprecatedLastTimestamp"], "2026-11-22T02:00:00Z");
        assert_eq!(v1["regarding"]["kind"], "Pod");
        assert_eq!(to_core(v1), core);
    }

    #[test]
    fn conversions_are_idempotent_and_tolerate_non_objects() {
        let v1 = recorder_event();
        assert_eq!(to_events_v1(&v1), v1);
        let core = to_core(v1);
        assert_eq!(to_core(core.clone()), core);
        assert_eq!(to_core(json!(5)), json!(5));
        assert_eq!(to_events_v1(&json!("x")), json!("x"));
    }
}
