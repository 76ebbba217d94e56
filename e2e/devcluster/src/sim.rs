//! Simulated built-in controllers, as pure functions: given a workload object and the
//! dependents it owns, what its status should be and which dependents should exist. The control loop that
//! calls these and writes the results lives in `controllers/workloads.rs`.
//! Behaviour can be steered per object with annotations (see the constants).
//!
//! Design notes (why it looks the way it does):
//! - **Deterministic and idempotent.** The loop calls `simulate` after every change of the object or its
//!   children, so the same inputs must give the same outputs or the loop never settles. Times written into a
//!   status are therefore derived from times already recorded there (condition `lastTransitionTime`s are
//!   kept while a condition's status does not change), and fresh `now`-based stamps appear only on a real
//!   transition.
//! - **Delays are anchored in the status.** "First observed" instants are recorded where a real controller
//!   would put a time anyway: a Deployment's `Progressing.lastUpdateTime`, a Pod's `startTime`; Services and
//!   PVCs (no status times) count from `creationTimestamp`. Times are RFC 3339 to the second like the real
//!   API, so a fresh anchor is rounded *up* to the next second to never shorten a delay.
//! - **Deployments are decided by their own annotations**, so `kubectl rollout status` and Argo CD's health
//!   rules reach the intended state without waiting for the Pod cascade; ReplicaSets, StatefulSets,
//!   DaemonSets and Jobs derive their counters from their live Pods, which inherit the behaviour annotations.
//! - Children are complete, already-defaulted objects, so an update of an unchanged child is a no-op write.

use std::time::Duration;

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{json, Map, Value};

/// `ready` (default), `fail` (Degraded: e.g. Deployment ProgressDeadlineExceeded, Job Failed, Pod
/// CrashLoopBackOff), `progressing` (never becomes ready).
pub const ANN_BEHAVIOR: &str = "devcluster.capstan.dev/behavior";
/// A Go-style duration (`500ms`, `3s`, `1m`): become ready/complete (or fail) only this long after the
/// current generation was first observed.
pub const ANN_DELAY: &str = "devcluster.capstan.dev/delay";

/// `"true"`: the Pod's containers ignore SIGTERM, so a graceful deletion lasts its whole grace period (the
/// kubelet then kills them). Without it containers stop as soon as they get SIGTERM, as a well-behaved
/// process does, and the Pod goes away at once, long before its grace period ends.
pub const ANN_IGNORE_SIGTERM: &str = "devcluster.capstan.dev/ignore-sigterm";

/// The simulated kubelet's part of a graceful Pod deletion: how long until the Pod's containers have stopped,
/// after which the kubelet deletes the Pod for good (with a zero grace period). `None` when no graceful
/// deletion is under way (`deletionGracePeriodSeconds` absent or 0).
pub fn pod_shutdown_remaining(pod: &Value, now: DateTime<Utc>) -> Option<Duration> {
    let grace = pod
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)?;
    if grace <= 0 {
        return None;
    }
    if annotation(pod, ANN_IGNORE_SIGTERM) != Some("true") {
        return Some(Duration::ZERO);
    }
    // deletionTimestamp is when the grace period ends.
    let deadline = parse_time(&pod["metadata"]["deletionTimestamp"])?;
    Some((deadline - now).to_std().unwrap_or(Duration::ZERO))
}

/// What the simulation wants for one object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The complete new `status`, or `None` to leave it alone.
    pub status: Option<Value>,
    /// The dependents that should exist (full objects with ownerReferences to the owner, controller=true).
    /// Existing dependents not listed here are deleted by the caller; listed ones are created or updated.
    pub children: Vec<Value>,
    /// Call again after this long (delays in progress).
    pub requeue_after: Option<Duration>,
}

/// Whether `kind` in `api_version` is simulated (Deployment, ReplicaSet, StatefulSet, DaemonSet, Job, Pod,
/// PersistentVolumeClaim, Service).
pub fn is_simulated(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet")
            | ("batch/v1", "Job")
            | ("v1", "Pod" | "PersistentVolumeClaim" | "Service")
    )
}

/// Simulate one object. `children` are the live objects whose controller ownerReference points at it.
///
/// An object being deleted keeps its status and its children exactly as they are: the garbage collector
/// owns that phase (including orphaning), and re-asserting ownerReferences would fight it.
pub fn simulate(obj: &Value, children: &[Value], now: DateTime<Utc>) -> Outcome {
    if obj.pointer("/metadata/deletionTimestamp").is_some_and(|v| !v.is_null()) {
        return Outcome {
            status: None,
            children: children.to_vec(),
            requeue_after: None,
        };
    }
    let ctx = Ctx::new(obj, now);
    match (text(obj, "/apiVersion"), text(obj, "/kind")) {
        ("apps/v1", "Deployment") => deployment(&ctx, children),
        ("apps/v1", "ReplicaSet") => replica_set(&ctx, children),
        ("apps/v1", "StatefulSet") => stateful_set(&ctx, children),
        ("apps/v1", "DaemonSet") => daemon_set(&ctx, children),
        ("batch/v1", "Job") => job(&ctx, children),
        ("v1", "Pod") => pod(&ctx),
        ("v1", "PersistentVolumeClaim") => pvc(&ctx),
        ("v1", "Service") => service(&ctx),
        _ => Outcome::default(),
    }
}

// ---------------------------------------------------------------------------------------------------------
// Shared context, behaviour and timing.

const NODE_NAME: &str = "devcluster";
const HOST_IP: &str = "172.18.0.2";
const ANN_REVISION: &str = "deployment.kubernetes.io/revision";
const LABEL_TEMPLATE_HASH: &str = "pod-template-hash";
/// The alphabet the API server uses for generated names (no vowels, no confusable digits).
const NAME_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
/// A guard against absurd replica counts: the simulation would otherwise try to store that many Pods.
const MAX_PODS: i64 = 1000;
/// Delays longer than this are clamped, which keeps all time arithmetic in range.
const MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);
static NULL: Value = Value::Null;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Behavior {
    Ready,
    Fail,
    Progressing,
}

/// Where an object stands once behaviour and delay are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Delay running, or `progressing` behaviour.
    Waiting,
    Ready,
    Failed,
}

/// The fields of the simulated object every simulator needs, read once and tolerantly.
struct Ctx<'a> {
    obj: &'a Value,
    api_version: &'a str,
    kind: &'a str,
    name: &'a str,
    namespace: &'a str,
    uid: &'a str,
    generation: i64,
    spec: &'a Value,
    status: &'a Value,
    behavior: Behavior,
    delay: Duration,
    now: DateTime<Utc>,
}

impl<'a> Ctx<'a> {
    fn new(obj: &'a Value, now: DateTime<Utc>) -> Self {
        Ctx {
            obj,
            api_version: text(obj, "/apiVersion"),
            kind: text(obj, "/kind"),
            name: text(obj, "/metadata/name"),
            namespace: text(obj, "/metadata/namespace"),
            uid: text(obj, "/metadata/uid"),
            // Objects without a generation are treated as generation 1: writing observedGeneration 0 would
            // look "never observed" to kubectl's StatefulSet check.
            generation: obj.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(1),
            spec: obj.get("spec").unwrap_or(&NULL),
            status: obj.get("status").filter(|s| s.is_object()).unwrap_or(&NULL),
            behavior: behavior_of(obj),
            delay: annotation(obj, ANN_DELAY)
                .and_then(parse_go_duration)
                .unwrap_or(Duration::ZERO),
            now,
        }
    }

    fn observed_current_generation(&self) -> bool {
        self.status.get("observedGeneration").and_then(Value::as_i64) == Some(self.generation)
    }
}

fn behavior_of(obj: &Value) -> Behavior {
    match annotation(obj, ANN_BEHAVIOR)
        .map(|s| s.trim().to_ascii_lowercase())
        .as_deref()
    {
        Some("fail" | "failed" | "failing" | "degraded") => Behavior::Fail,
        Some("progressing" | "never" | "pending") => Behavior::Progressing,
        _ => Behavior::Ready,
    }
}

/// When the current state started (`start`) and when the delay ends (`due`).
struct Timer {
    start: DateTime<Utc>,
    due: DateTime<Utc>,
}

impl Timer {
    /// `recorded` is the anchor found in the current status; without one the state starts now, rounded up
    /// to a whole second when a delay runs (the anchor is stored at second precision and must not make the
    /// delay shorter).
    fn new(recorded: Option<DateTime<Utc>>, delay: Duration, now: DateTime<Utc>) -> Self {
        let start = recorded.unwrap_or_else(|| if delay.is_zero() { floor_sec(now) } else { ceil_sec(now) });
        Timer {
            start,
            due: add(start, delay),
        }
    }

    fn settled(&self, now: DateTime<Utc>) -> bool {
        now >= self.due
    }

    /// The instant of the current state: when the delay ended, or when waiting began.
    fn at(&self, now: DateTime<Utc>) -> DateTime<Utc> {
        if self.settled(now) {
            self.due
        } else {
            self.start
        }
    }

    fn remaining(&self, now: DateTime<Utc>) -> Option<Duration> {
        (self.due - now).to_std().ok().filter(|d| !d.is_zero())
    }
}

fn phase_of(behavior: Behavior, timer: &Timer, now: DateTime<Utc>) -> Phase {
    match behavior {
        Behavior::Progressing => Phase::Waiting,
        _ if !timer.settled(now) => Phase::Waiting,
        Behavior::Ready => Phase::Ready,
        Behavior::Fail => Phase::Failed,
    }
}

/// Requeue only while a delay is pending; `progressing` never changes by itself.
fn requeue(behavior: Behavior, timer: &Timer, now: DateTime<Utc>) -> Option<Duration> {
    if behavior == Behavior::Progressing {
        None
    } else {
        timer.remaining(now)
    }
}

/// Parse a Go `time.Duration` string (`300ms`, `1.5s`, `1h2m3s`, `0`). Negative or malformed → `None`.
fn parse_go_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let mut rest = s.strip_prefix('+').unwrap_or(s);
    if rest == "0" {
        return Some(Duration::ZERO);
    }
    if rest.is_empty() {
        return None;
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let (nanos, tail) = duration_component(rest)?;
        total = total.checked_add(nanos)?;
        rest = tail;
    }
    let capped = u64::try_from(total).unwrap_or(u64::MAX);
    Some(Duration::from_nanos(capped).min(MAX_DELAY))
}

/// One `<number>[.<fraction>]<unit>` component: its length in nanoseconds and the unparsed rest.
fn duration_component(s: &str) -> Option<(u128, &str)> {
    let digits = |t: &str| t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (int_part, rest) = s.split_at(digits(s));
    let (frac_part, rest) = match rest.strip_prefix('.') {
        Some(r) => r.split_at(digits(r)),
        None => ("", rest),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let unit_len = rest
        .find(|c: char| c.is_ascii_digit() || c == '.')
        .unwrap_or(rest.len());
    let (unit, rest) = rest.split_at(unit_len);
    let scale: u128 = match unit {
        "ns" => 1,
        "us" | "µs" | "μs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        "m" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        _ => return None,
    };
    let int: u128 = if int_part.is_empty() { 0 } else { int_part.parse().ok()? };
    let frac_digits = &frac_part[..frac_part.len().min(18)];
    let frac: u128 = if frac_digits.is_empty() {
        0
    } else {
        let value: u128 = frac_digits.parse().ok()?;
        value * scale / 10u128.pow(u32::try_from(frac_digits.len()).ok()?)
    };
    Some((int.checked_mul(scale)?.checked_add(frac)?, rest))
}

fn floor_sec(t: DateTime<Utc>) -> DateTime<Utc> {
    DateTime::from_timestamp(t.timestamp(), 0).unwrap_or(t)
}

fn ceil_sec(t: DateTime<Utc>) -> DateTime<Utc> {
    if t.timestamp_subsec_nanos() == 0 {
        t
    } else {
        DateTime::from_timestamp(t.timestamp().saturating_add(1), 0).unwrap_or(t)
    }
}

fn to_chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d.min(MAX_DELAY)).unwrap_or(chrono::Duration::zero())
}

fn add(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_add_signed(to_chrono(d)).unwrap_or(t)
}

fn sub(t: DateTime<Utc>, d: Duration) -> DateTime<Utc> {
    t.checked_sub_signed(to_chrono(d)).unwrap_or(t)
}

/// RFC 3339 at second precision, as `metav1.Time` serialises.
fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse_time(v: &Value) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(v.as_str()?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

// ---------------------------------------------------------------------------------------------------------
// Tolerant JSON access.

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

fn map_at(v: &Value, pointer: &str) -> Map<String, Value> {
    v.pointer(pointer)
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default()
}

/// `spec.replicas` with the API default of 1, clamped to a sane non-negative range.
fn replicas_of(spec: &Value) -> i64 {
    match spec.get("replicas") {
        None | Some(Value::Null) => 1,
        Some(v) => v.as_i64().unwrap_or(1).clamp(0, i64::from(i32::MAX)),
    }
}

fn int_at(v: &Value, pointer: &str) -> i64 {
    v.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn is_kind(v: &Value, kind: &str) -> bool {
    text(v, "/kind") == kind
}

fn find_child<'a>(children: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    children
        .iter()
        .find(|c| is_kind(c, kind) && text(c, "/metadata/name") == name)
}

fn find_condition<'a>(status: &'a Value, kind: &str) -> Option<&'a Value> {
    status
        .get("conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))
}

fn condition_true(status: &Value, kind: &str) -> bool {
    find_condition(status, kind)
        .and_then(|c| c.get("status"))
        .and_then(Value::as_str)
        == Some("True")
}

fn pod_ready(pod: &Value) -> bool {
    condition_true(pod.get("status").unwrap_or(&NULL), "Ready")
}

fn owned_by_kind(obj: &Value, kind: &str) -> bool {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|refs| refs.iter().any(|r| r.get("kind").and_then(Value::as_str) == Some(kind)))
}

/// Insert a counter only when non-zero, mirroring the `omitempty` int32 fields of the real status types.
fn put_nonzero(m: &mut Map<String, Value>, key: &str, n: i64) {
    if n != 0 {
        m.insert(key.to_string(), json!(n));
    }
}

// ---------------------------------------------------------------------------------------------------------
// Conditions.

/// A condition to write. Times are filled in from the previous condition of the same type, so an unchanged
/// condition is byte-identical to the one already stored.
struct Cond<'a> {
    kind: &'a str,
    status: &'a str,
    reason: &'a str,
    message: String,
}

#[derive(Clone, Copy)]
enum CondStyle {
    /// Deployment: lastUpdateTime + lastTransitionTime.
    Deployment,
    /// Job: lastProbeTime + lastTransitionTime.
    Job,
    /// Pod: lastProbeTime null + lastTransitionTime, reason/message only when set.
    Pod,
}

fn condition(prev_status: &Value, c: &Cond, style: CondStyle, at: DateTime<Utc>) -> Value {
    let prev = find_condition(prev_status, c.kind);
    let prev_str = |key: &str| prev.and_then(|p| p.get(key)).and_then(Value::as_str);
    let same_status = prev_str("status") == Some(c.status);
    let same_all = same_status
        && prev_str("reason").unwrap_or_default() == c.reason
        && prev_str("message").unwrap_or_default() == c.message;
    let keep = |key: &str, unchanged: bool| match prev_str(key) {
        Some(t) if unchanged => t.to_string(),
        _ => ts(at),
    };
    let mut m = Map::new();
    m.insert("type".into(), json!(c.kind));
    m.insert("status".into(), json!(c.status));
    m.insert(
        "lastTransitionTime".into(),
        json!(keep("lastTransitionTime", same_status)),
    );
    match style {
        CondStyle::Deployment => {
            m.insert("lastUpdateTime".into(), json!(keep("lastUpdateTime", same_all)));
        }
        CondStyle::Job => {
            m.insert("lastProbeTime".into(), json!(keep("lastProbeTime", same_all)));
        }
        CondStyle::Pod => {
            m.insert("lastProbeTime".into(), Value::Null);
        }
    }
    if !c.reason.is_empty() {
        m.insert("reason".into(), json!(c.reason));
    }
    if !c.message.is_empty() {
        m.insert("message".into(), json!(c.message));
    }
    Value::Object(m)
}

// ---------------------------------------------------------------------------------------------------------
// Hashing and names.

/// FNV-1a with a final avalanche step: stable across runs and platforms, unlike std's seeded hasher.
fn hash(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h ^= h >> 33;
    h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
    h ^= h >> 33;
    h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    h ^ (h >> 33)
}

fn encode(mut h: u64, len: usize) -> String {
    let base = NAME_ALPHABET.len() as u64;
    (0..len)
        .map(|_| {
            let c = NAME_ALPHABET[(h % base) as usize];
            h /= base;
            char::from(c)
        })
        .collect()
}

/// JSON with sorted keys, so a template hashes the same whatever order its fields were stored in.
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(&String, &Value)> = m.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            out.push('{');
            for (i, (k, v)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(v, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// The 10-character `pod-template-hash` of a pod template.
fn template_hash(template: &Value) -> String {
    let mut s = String::new();
    canonical(template, &mut s);
    encode(hash(s.as_bytes()), 10)
}

/// A stable 5-character generated-name suffix for the `index`-th pod of `owner`.
fn pod_suffix(owner: &str, index: i64) -> String {
    encode(hash(format!("{owner}/{index}").as_bytes()), 5)
}

fn hex64(seed: &str) -> String {
    (0..4u8)
        .map(|i| format!("{:016x}", hash(format!("{seed}#{i}").as_bytes())))
        .collect()
}

// ---------------------------------------------------------------------------------------------------------
// Building children.

fn owner_ref(ctx: &Ctx) -> Value {
    json!({"apiVersion": ctx.api_version, "kind": ctx.kind, "name": ctx.name, "uid": ctx.uid,
        "controller": true, "blockOwnerDeletion": true})
}

/// Only the simulation annotations flow from an owner to its Pods.
fn sim_annotations(obj: &Value) -> Map<String, Value> {
    let mut m = Map::new();
    for key in [ANN_BEHAVIOR, ANN_DELAY, ANN_IGNORE_SIGTERM] {
        if let Some(v) = annotation(obj, key) {
            m.insert(key.to_string(), json!(v));
        }
    }
    m
}

fn new_child(
    ctx: &Ctx,
    kind_api: (&str, &str),
    name: &str,
    meta: (Map<String, Value>, Map<String, Value>),
    spec: Value,
) -> Value {
    let (labels, annotations) = meta;
    let mut m = Map::new();
    m.insert("name".into(), json!(name));
    if !ctx.namespace.is_empty() {
        m.insert("namespace".into(), json!(ctx.namespace));
    }
    if !labels.is_empty() {
        m.insert("labels".into(), Value::Object(labels));
    }
    if !annotations.is_empty() {
        m.insert("annotations".into(), Value::Object(annotations));
    }
    m.insert("ownerReferences".into(), json!([owner_ref(ctx)]));
    let mut child = json!({"apiVersion": kind_api.1, "kind": kind_api.0, "metadata": m, "spec": spec});
    crate::defaults::apply_defaults(&mut child);
    child
}

/// A Pod from `template` (owner annotations win over the template's, so behaviour flows down).
fn pod_from_template(ctx: &Ctx, template: &Value, name: &str, extra_labels: &[(&str, String)]) -> Value {
    let mut labels = map_at(template, "/metadata/labels");
    for (k, v) in extra_labels {
        labels.insert((*k).to_string(), json!(v));
    }
    let mut annotations = map_at(template, "/metadata/annotations");
    annotations.extend(sim_annotations(ctx.obj));
    let mut spec = map_at(template, "/spec");
    spec.insert("nodeName".into(), json!(NODE_NAME));
    new_child(ctx, ("Pod", "v1"), name, (labels, annotations), Value::Object(spec))
}

/// A live child reduced to what the simulation manages, with `spec.replicas` overridden; used to keep old
/// ReplicaSets without touching their template.
fn keep_with_replicas(live: &Value, replicas: i64) -> Value {
    let mut meta = Map::new();
    for key in ["name", "namespace", "labels", "annotations", "ownerReferences"] {
        if let Some(v) = live.pointer(&format!("/metadata/{key}")) {
            meta.insert(key.into(), v.clone());
        }
    }
    let mut spec = map_at(live, "/spec");
    spec.insert("replicas".into(), json!(replicas));
    json!({"apiVersion": text(live, "/apiVersion"), "kind": text(live, "/kind"), "metadata": meta, "spec": spec})
}

// ---------------------------------------------------------------------------------------------------------
// Deployment.

/// Counters of a Deployment status.
#[derive(Default)]
struct Counts {
    replicas: i64,
    updated: i64,
    ready: i64,
    available: i64,
    unavailable: i64,
}

fn revision(rs: &Value) -> i64 {
    rs.pointer("/metadata/annotations")
        .and_then(|a| a.get(ANN_REVISION))
        .and_then(Value::as_str)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// `intstr` value against `total`: plain ints as is, percentages rounded down (unavailable) or up (surge).
fn int_or_percent(v: Option<&Value>, total: i64, round_up: bool) -> i64 {
    let from_percent = |p: i64| {
        let x = total.saturating_mul(p);
        if round_up {
            x.saturating_add(99) / 100
        } else {
            x / 100
        }
    };
    match v {
        None | Some(Value::Null) => from_percent(25),
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0),
        Some(Value::String(s)) => match s.trim().strip_suffix('%') {
            Some(p) => p.trim().parse().map(from_percent).unwrap_or(0),
            None => s.trim().parse().unwrap_or(0),
        },
        Some(_) => 0,
    }
    .max(0)
}

/// (maxSurge, maxUnavailable) resolved against `desired`; Recreate allows neither.
fn rollout_bounds(spec: &Value, desired: i64) -> (i64, i64) {
    if spec.pointer("/strategy/type").and_then(Value::as_str) == Some("Recreate") {
        return (0, 0);
    }
    let ru = spec.pointer("/strategy/rollingUpdate");
    let surge = int_or_percent(ru.and_then(|r| r.get("maxSurge")), desired, true);
    let unavailable = int_or_percent(ru.and_then(|r| r.get("maxUnavailable")), desired, false);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

/// The instant the current generation's rollout started, recovered from `Progressing.lastUpdateTime`: while
/// waiting it is that time, once settled it is that time minus the delay (see `deployment_progressing`).
fn deployment_start(ctx: &Ctx, delay: Duration) -> Option<DateTime<Utc>> {
    if !ctx.observed_current_generation() {
        return None;
    }
    let progressing = find_condition(ctx.status, "Progressing")?;
    let t = parse_time(progressing.get("lastUpdateTime")?)?;
    match progressing.get("reason").and_then(Value::as_str) {
        Some("ReplicaSetUpdated") => Some(t),
        Some("NewReplicaSetAvailable" | "ProgressDeadlineExceeded") => Some(sub(t, delay)),
        _ => None,
    }
}

fn deployment(ctx: &Ctx, children: &[Value]) -> Outcome {
    let desired = replicas_of(ctx.spec);
    let template = ctx
        .spec
        .get("template")
        .filter(|t| t.is_object())
        .cloned()
        .unwrap_or_else(|| json!({}));
    let hash = template_hash(&template);
    let new_name = format!("{}-{}", ctx.name, hash);
    let mut sets: Vec<&Value> = children.iter().filter(|c| is_kind(c, "ReplicaSet")).collect();
    sets.sort_by_key(|r| (revision(r), text(r, "/metadata/name").to_string()));
    let live_new = sets.iter().copied().find(|r| text(r, "/metadata/name") == new_name);
    let olds: Vec<&Value> = sets
        .iter()
        .copied()
        .filter(|r| text(r, "/metadata/name") != new_name)
        .collect();
    if ctx.spec.get("paused").and_then(Value::as_bool) == Some(true) {
        return paused_deployment(ctx, desired, live_new, &olds);
    }
    // Scaling to zero needs no Pod to become ready, so it completes at once whatever the annotations say.
    let (behavior, delay) = if desired == 0 {
        (Behavior::Ready, Duration::ZERO)
    } else {
        (ctx.behavior, ctx.delay)
    };
    let timer = Timer::new(deployment_start(ctx, delay), delay, ctx.now);
    let phase = phase_of(behavior, &timer, ctx.now);

    let max_rev = sets.iter().map(|r| revision(r)).max().unwrap_or(0);
    let rev = match live_new {
        Some(r) if max_rev > 0 && revision(r) == max_rev => max_rev,
        _ => max_rev + 1,
    };
    let new_rs = new_replica_set(ctx, &template, &hash, &new_name, desired, rev);
    let (old_children, old_replicas, old_ready, old_available) = old_replica_sets(ctx, &olds, phase);
    let counts = match phase {
        Phase::Ready => Counts {
            replicas: desired,
            updated: desired,
            ready: desired,
            available: desired,
            unavailable: 0,
        },
        _ => Counts {
            replicas: desired + old_replicas,
            updated: desired,
            ready: old_ready,
            available: old_available,
            unavailable: (desired + old_replicas - old_available).max(0),
        },
    };
    let mut kids = vec![new_rs];
    kids.extend(old_children);
    let progressing = deployment_progressing(ctx, phase, &new_name, &timer);
    Outcome {
        status: Some(deployment_status(ctx, desired, &counts, progressing, timer.at(ctx.now))),
        children: kids,
        requeue_after: requeue(behavior, &timer, ctx.now),
    }
}

/// Old ReplicaSets: scaled to 0 once the new one is complete, otherwise left serving (as during a real
/// stuck rollout); zero-replica ones beyond `revisionHistoryLimit` are dropped, oldest first.
/// Returns the children and the old replicas / ready / available totals.
fn old_replica_sets(ctx: &Ctx, olds: &[&Value], phase: Phase) -> (Vec<Value>, i64, i64, i64) {
    let limit = ctx
        .spec
        .get("revisionHistoryLimit")
        .and_then(Value::as_i64)
        .unwrap_or(10)
        .max(0);
    let target = |r: &Value| {
        if phase == Phase::Ready {
            0
        } else {
            replicas_of(r.get("spec").unwrap_or(&NULL))
        }
    };
    let zeros = olds.iter().filter(|r| target(r) == 0).count();
    let mut to_drop = zeros.saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
    let (mut kids, mut replicas, mut ready, mut available) = (Vec::new(), 0, 0, 0);
    for r in olds {
        let n = target(r);
        if n == 0 && to_drop > 0 {
            to_drop -= 1;
            continue;
        }
        replicas += n;
        ready += int_at(r, "/status/readyReplicas").clamp(0, n);
        available += int_at(r, "/status/availableReplicas").clamp(0, n);
        kids.push(keep_with_replicas(r, n));
    }
    (kids, replicas, ready, available)
}

fn new_replica_set(ctx: &Ctx, template: &Value, hash: &str, name: &str, replicas: i64, rev: i64) -> Value {
    let mut tpl = template.as_object().cloned().unwrap_or_default();
    let mut tpl_meta = map_at(template, "/metadata");
    let mut labels = map_at(template, "/metadata/labels");
    labels.insert(LABEL_TEMPLATE_HASH.into(), json!(hash));
    tpl_meta.insert("labels".into(), Value::Object(labels.clone()));
    tpl.insert("metadata".into(), Value::Object(tpl_meta));
    let mut selector = ctx
        .spec
        .get("selector")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut match_labels = selector
        .get("matchLabels")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    match_labels.insert(LABEL_TEMPLATE_HASH.into(), json!(hash));
    selector.insert("matchLabels".into(), Value::Object(match_labels));
    let (surge, _) = rollout_bounds(ctx.spec, replicas);
    // Like the real controller, copy the Deployment's annotations (which carries the behaviour down) except
    // kubectl's bookkeeping and the deployment.kubernetes.io ones, which are set per ReplicaSet.
    let mut annotations: Map<String, Value> = map_at(ctx.obj, "/metadata/annotations")
        .into_iter()
        .filter(|(k, _)| {
            k != "kubectl.kubernetes.io/last-applied-configuration" && !k.starts_with("deployment.kubernetes.io/")
        })
        .collect();
    annotations.insert(ANN_REVISION.into(), json!(rev.to_string()));
    annotations.insert(
        "deployment.kubernetes.io/desired-replicas".into(),
        json!(replicas.to_string()),
    );
    annotations.insert(
        "deployment.kubernetes.io/max-replicas".into(),
        json!((replicas + surge).to_string()),
    );
    let mut spec = Map::new();
    spec.insert("replicas".into(), json!(replicas));
    spec.insert("selector".into(), Value::Object(selector));
    spec.insert("template".into(), Value::Object(tpl));
    if let Some(m) = ctx.spec.get("minReadySeconds").filter(|v| v.is_i64()) {
        spec.insert("minReadySeconds".into(), m.clone());
    }
    new_child(
        ctx,
        ("ReplicaSet", "apps/v1"),
        name,
        (labels, annotations),
        Value::Object(spec),
    )
}

/// The Progressing condition. Its lastUpdateTime doubles as the delay anchor: the rollout start while
/// waiting, the settle instant (start + delay) afterwards — both reproducible from the status itself.
fn deployment_progressing(ctx: &Ctx, phase: Phase, new_name: &str, timer: &Timer) -> Value {
    let (status, reason, message) = match phase {
        Phase::Waiting => (
            "True",
            "ReplicaSetUpdated",
            format!("ReplicaSet \"{new_name}\" is progressing."),
        ),
        Phase::Ready => (
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
        ),
        Phase::Failed => (
            "False",
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{new_name}\" has timed out progressing."),
        ),
    };
    let at = timer.at(ctx.now);
    let mut cond = condition(
        ctx.status,
        &Cond {
            kind: "Progressing",
            status,
            reason,
            message,
        },
        CondStyle::Deployment,
        at,
    );
    if let Some(m) = cond.as_object_mut() {
        m.insert("lastUpdateTime".into(), json!(ts(at)));
    }
    cond
}

fn available_condition(ctx: &Ctx, desired: i64, available: i64, at: DateTime<Utc>) -> Value {
    let (_, max_unavailable) = rollout_bounds(ctx.spec, desired);
    let ok = available >= desired - max_unavailable;
    let cond = if ok {
        Cond {
            kind: "Available",
            status: "True",
            reason: "MinimumReplicasAvailable",
            message: "Deployment has minimum availability.".into(),
        }
    } else {
        Cond {
            kind: "Available",
            status: "False",
            reason: "MinimumReplicasUnavailable",
            message: "Deployment does not have minimum availability.".into(),
        }
    };
    condition(ctx.status, &cond, CondStyle::Deployment, at)
}

fn deployment_status(ctx: &Ctx, desired: i64, c: &Counts, progressing: Value, at: DateTime<Utc>) -> Value {
    let mut st = Map::new();
    st.insert("observedGeneration".into(), json!(ctx.generation));
    put_nonzero(&mut st, "replicas", c.replicas);
    put_nonzero(&mut st, "updatedReplicas", c.updated);
    put_nonzero(&mut st, "readyReplicas", c.ready);
    put_nonzero(&mut st, "availableReplicas", c.available);
    put_nonzero(&mut st, "unavailableReplicas", c.unavailable);
    if let Some(cc) = ctx.status.get("collisionCount") {
        st.insert("collisionCount".into(), cc.clone());
    }
    let available = available_condition(ctx, desired, c.available, at);
    st.insert("conditions".into(), json!([available, progressing]));
    Value::Object(st)
}

/// A paused Deployment rolls nothing out: no new ReplicaSet is created, the matching one (if any) is
/// scaled, and Progressing turns Unknown/DeploymentPaused (Argo CD reports Suspended from `spec.paused`).
fn paused_deployment(ctx: &Ctx, desired: i64, live_new: Option<&Value>, olds: &[&Value]) -> Outcome {
    let mut kids = Vec::new();
    let mut c = Counts::default();
    let all = live_new
        .into_iter()
        .map(|r| (r, desired))
        .chain(olds.iter().map(|r| (*r, replicas_of(r.get("spec").unwrap_or(&NULL)))));
    for (r, n) in all {
        c.replicas += n;
        c.ready += int_at(r, "/status/readyReplicas").clamp(0, n);
        c.available += int_at(r, "/status/availableReplicas").clamp(0, n);
        kids.push(keep_with_replicas(r, n));
    }
    c.updated = if live_new.is_some() { desired } else { 0 };
    c.unavailable = (c.replicas - c.available).max(0);
    let at = floor_sec(ctx.now);
    let cond = Cond {
        kind: "Progressing",
        status: "Unknown",
        reason: "DeploymentPaused",
        message: "Deployment is paused".into(),
    };
    let progressing = condition(ctx.status, &cond, CondStyle::Deployment, at);
    Outcome {
        status: Some(deployment_status(ctx, desired, &c, progressing, at)),
        children: kids,
        requeue_after: None,
    }
}

// ---------------------------------------------------------------------------------------------------------
// ReplicaSet, StatefulSet, DaemonSet: counters derived from the live Pods.

/// Live Pods among `names`, and how many of them are Ready.
fn live_pod_counts(children: &[Value], names: &[String]) -> (i64, i64) {
    let live: Vec<&Value> = names.iter().filter_map(|n| find_child(children, "Pod", n)).collect();
    let ready = live.iter().filter(|p| pod_ready(p)).count();
    (live.len() as i64, ready as i64)
}

fn replica_set(ctx: &Ctx, children: &[Value]) -> Outcome {
    let desired = replicas_of(ctx.spec).min(MAX_PODS);
    let template = ctx.spec.get("template").unwrap_or(&NULL);
    let names: Vec<String> = (0..desired)
        .map(|i| format!("{}-{}", ctx.name, pod_suffix(ctx.name, i)))
        .collect();
    let pods: Vec<Value> = names.iter().map(|n| pod_from_template(ctx, template, n, &[])).collect();
    let (live, ready) = live_pod_counts(children, &names);
    let mut st = Map::new();
    st.insert("replicas".into(), json!(live));
    put_nonzero(&mut st, "fullyLabeledReplicas", live);
    put_nonzero(&mut st, "readyReplicas", ready);
    put_nonzero(&mut st, "availableReplicas", ready);
    st.insert("observedGeneration".into(), json!(ctx.generation));
    Outcome {
        status: Some(Value::Object(st)),
        children: pods,
        requeue_after: None,
    }
}

/// Pods `<sts>-0..N-1`; with OrderedReady each Pod waits for its predecessor to be Ready.
fn stateful_set(ctx: &Ctx, children: &[Value]) -> Outcome {
    let desired = replicas_of(ctx.spec).min(MAX_PODS);
    let template = ctx.spec.get("template").unwrap_or(&NULL);
    let revision = format!("{}-{}", ctx.name, template_hash(template));
    let ordered = ctx.spec.get("podManagementPolicy").and_then(Value::as_str) != Some("Parallel");
    let service = text(ctx.spec, "/serviceName");
    let mut pods = Vec::new();
    let mut names = Vec::new();
    for i in 0..desired {
        let name = format!("{}-{i}", ctx.name);
        let labels = [
            ("controller-revision-hash", revision.clone()),
            ("statefulset.kubernetes.io/pod-name", name.clone()),
            ("apps.kubernetes.io/pod-index", i.to_string()),
        ];
        let mut pod = pod_from_template(ctx, template, &name, &labels);
        if let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) {
            spec.insert("hostname".into(), json!(name));
            if !service.is_empty() {
                spec.insert("subdomain".into(), json!(service));
            }
        }
        pods.push(pod);
        let ready = find_child(children, "Pod", &name).is_some_and(pod_ready);
        names.push(name);
        if ordered && !ready {
            break;
        }
    }
    let (live, ready) = live_pod_counts(children, &names);
    let mut st = Map::new();
    st.insert("observedGeneration".into(), json!(ctx.generation));
    st.insert("replicas".into(), json!(live));
    put_nonzero(&mut st, "readyReplicas", ready);
    put_nonzero(&mut st, "currentReplicas", live);
    put_nonzero(&mut st, "updatedReplicas", live);
    st.insert("availableReplicas".into(), json!(ready));
    st.insert("currentRevision".into(), json!(revision));
    st.insert("updateRevision".into(), json!(revision));
    st.insert("collisionCount".into(), json!(0));
    Outcome {
        status: Some(Value::Object(st)),
        children: pods,
        requeue_after: None,
    }
}

/// The cluster has one node, so a DaemonSet runs exactly one Pod.
fn daemon_set(ctx: &Ctx, children: &[Value]) -> Outcome {
    let template = ctx.spec.get("template").unwrap_or(&NULL);
    let name = format!("{}-{}", ctx.name, pod_suffix(ctx.name, 0));
    let labels = [
        ("controller-revision-hash", template_hash(template)),
        ("pod-template-generation", ctx.generation.to_string()),
    ];
    let pod = pod_from_template(ctx, template, &name, &labels);
    let (live, ready) = live_pod_counts(children, std::slice::from_ref(&name));
    let mut st = Map::new();
    st.insert("currentNumberScheduled".into(), json!(live));
    st.insert("desiredNumberScheduled".into(), json!(1));
    st.insert("numberMisscheduled".into(), json!(0));
    st.insert("numberReady".into(), json!(ready));
    st.insert("observedGeneration".into(), json!(ctx.generation));
    put_nonzero(&mut st, "updatedNumberScheduled", live);
    put_nonzero(&mut st, "numberAvailable", ready);
    put_nonzero(&mut st, "numberUnavailable", 1 - ready);
    Outcome {
        status: Some(Value::Object(st)),
        children: vec![pod],
        requeue_after: None,
    }
}

// ---------------------------------------------------------------------------------------------------------
// Job: one Pod; the Job's outcome follows the Pod's phase (the Pod carries behaviour and delay).

fn job(ctx: &Ctx, children: &[Value]) -> Outcome {
    let template = ctx.spec.get("template").unwrap_or(&NULL);
    let name = format!("{}-{}", ctx.name, pod_suffix(ctx.name, 0));
    let labels = [
        ("batch.kubernetes.io/controller-uid", ctx.uid.to_string()),
        ("batch.kubernetes.io/job-name", ctx.name.to_string()),
        ("controller-uid", ctx.uid.to_string()),
        ("job-name", ctx.name.to_string()),
    ];
    let pod = pod_from_template(ctx, template, &name, &labels);
    let live = find_child(children, "Pod", &name);
    if condition_true(ctx.status, "Complete") || condition_true(ctx.status, "Failed") {
        // Finished Jobs are final: keep the Pod if it still exists, never start another one.
        return Outcome {
            status: None,
            children: live.map(|_| pod).into_iter().collect(),
            requeue_after: None,
        };
    }
    if ctx.spec.get("suspend").and_then(Value::as_bool) == Some(true) {
        return suspended_job(ctx);
    }
    Outcome {
        status: Some(running_job_status(ctx, live)),
        children: vec![pod],
        requeue_after: None,
    }
}

fn job_base_status(ctx: &Ctx) -> Map<String, Value> {
    let mut st = Map::new();
    st.insert("ready".into(), json!(0));
    st.insert("terminating".into(), json!(0));
    st.insert("uncountedTerminatedPods".into(), json!({}));
    if let Some(start) = ctx
        .status
        .get("startTime")
        .filter(|_| find_condition(ctx.status, "Suspended").is_none_or(|c| c["status"] != "True"))
    {
        st.insert("startTime".into(), start.clone());
    }
    st
}

fn suspended_job(ctx: &Ctx) -> Outcome {
    let mut st = job_base_status(ctx);
    st.remove("startTime");
    let cond = Cond {
        kind: "Suspended",
        status: "True",
        reason: "JobSuspended",
        message: "Job suspended".into(),
    };
    st.insert(
        "conditions".into(),
        json!([condition(ctx.status, &cond, CondStyle::Job, floor_sec(ctx.now))]),
    );
    Outcome {
        status: Some(Value::Object(st)),
        children: Vec::new(),
        requeue_after: None,
    }
}

fn running_job_status(ctx: &Ctx, live: Option<&Value>) -> Value {
    let now = floor_sec(ctx.now);
    let mut st = job_base_status(ctx);
    st.entry("startTime").or_insert_with(|| json!(ts(now)));
    let mut conditions = Vec::new();
    if find_condition(ctx.status, "Suspended").is_some() {
        let c = Cond {
            kind: "Suspended",
            status: "False",
            reason: "JobResumed",
            message: "Job resumed".into(),
        };
        conditions.push(condition(ctx.status, &c, CondStyle::Job, now));
    }
    let phase = live.map(|p| text(p, "/status/phase")).unwrap_or_default();
    let finished_at = live.and_then(pod_finished_at).unwrap_or(now);
    match phase {
        "Succeeded" => {
            let completions = ctx.spec.get("completions").and_then(Value::as_i64).unwrap_or(1).max(1);
            st.insert("succeeded".into(), json!(completions));
            st.insert("completionTime".into(), json!(ts(finished_at)));
            let message = "Reached expected number of succeeded pods".to_string();
            for kind in ["SuccessCriteriaMet", "Complete"] {
                let c = Cond {
                    kind,
                    status: "True",
                    reason: "CompletionsReached",
                    message: message.clone(),
                };
                conditions.push(condition(ctx.status, &c, CondStyle::Job, finished_at));
            }
        }
        "Failed" => {
            st.insert("failed".into(), json!(1));
            let message = "Job has reached the specified backoff limit".to_string();
            for kind in ["FailureTarget", "Failed"] {
                let c = Cond {
                    kind,
                    status: "True",
                    reason: "BackoffLimitExceeded",
                    message: message.clone(),
                };
                conditions.push(condition(ctx.status, &c, CondStyle::Job, finished_at));
            }
        }
        _ => {
            st.insert("active".into(), json!(1));
            st.insert("ready".into(), json!(i64::from(live.is_some_and(pod_ready))));
        }
    }
    if !conditions.is_empty() {
        st.insert("conditions".into(), Value::Array(conditions));
    }
    Value::Object(st)
}

fn pod_finished_at(pod: &Value) -> Option<DateTime<Utc>> {
    pod.pointer("/status/containerStatuses/0/state/terminated/finishedAt")
        .and_then(parse_time)
}

// ---------------------------------------------------------------------------------------------------------
// Pod.

/// What the Pod's containers are doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PodState {
    /// Pending, containers being created (a delay in progress).
    Creating,
    Running {
        ready: bool,
    },
    CrashLoop,
    Succeeded,
    Failed,
}

fn pod_state(behavior: Behavior, phase: Phase, run_to_completion: bool) -> PodState {
    match (phase, run_to_completion) {
        (Phase::Waiting, true) => PodState::Running { ready: true },
        (Phase::Waiting, false) if behavior == Behavior::Progressing => PodState::Running { ready: false },
        (Phase::Waiting, false) => PodState::Creating,
        (Phase::Ready, true) => PodState::Succeeded,
        (Phase::Ready, false) => PodState::Running { ready: true },
        (Phase::Failed, true) => PodState::Failed,
        (Phase::Failed, false) => PodState::CrashLoop,
    }
}

fn pod(ctx: &Ctx) -> Outcome {
    let restart = text(ctx.spec, "/restartPolicy");
    let run_to_completion = matches!(restart, "Never" | "OnFailure") || owned_by_kind(ctx.obj, "Job");
    let recorded = ctx.status.get("startTime").and_then(parse_time);
    let timer = Timer::new(recorded, ctx.delay, ctx.now);
    let state = pod_state(ctx.behavior, phase_of(ctx.behavior, &timer, ctx.now), run_to_completion);
    let at = timer.at(ctx.now);
    let containers = container_names(ctx.spec, "containers");
    let mut st = Map::new();
    let phase = match state {
        PodState::Creating => "Pending",
        PodState::Running { .. } | PodState::CrashLoop => "Running",
        PodState::Succeeded => "Succeeded",
        PodState::Failed => "Failed",
    };
    st.insert("phase".into(), json!(phase));
    st.insert(
        "conditions".into(),
        Value::Array(pod_conditions(ctx, state, &containers, &timer)),
    );
    st.insert("hostIP".into(), json!(HOST_IP));
    st.insert("hostIPs".into(), json!([{"ip": HOST_IP}]));
    if state != PodState::Creating {
        let ip = pod_ip(ctx);
        st.insert("podIP".into(), json!(ip));
        st.insert("podIPs".into(), json!([{"ip": ip}]));
    }
    st.insert("startTime".into(), json!(ts(timer.start)));
    st.insert("qosClass".into(), json!(qos_class(ctx.spec)));
    let statuses = containers
        .iter()
        .map(|(n, image)| container_status(ctx, n, image, state, &timer, at))
        .collect();
    st.insert("containerStatuses".into(), Value::Array(statuses));
    let inits = container_names(ctx.spec, "initContainers");
    if !inits.is_empty() {
        let done = inits
            .iter()
            .map(|(n, image)| init_status(ctx, n, image, state, &timer))
            .collect();
        st.insert("initContainerStatuses".into(), Value::Array(done));
    }
    Outcome {
        status: Some(Value::Object(st)),
        children: Vec::new(),
        requeue_after: requeue(ctx.behavior, &timer, ctx.now),
    }
}

fn container_names(spec: &Value, key: &str) -> Vec<(String, String)> {
    spec.get(key)
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .map(|c| (text(c, "/name").to_string(), text(c, "/image").to_string()))
                .collect()
        })
        .unwrap_or_default()
}

fn pod_conditions(ctx: &Ctx, state: PodState, containers: &[(String, String)], timer: &Timer) -> Vec<Value> {
    let at = timer.at(ctx.now);
    let unready = format!(
        "containers with unready status: [{}]",
        containers.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(" ")
    );
    let (ready, reason, message) = match state {
        PodState::Running { ready: true } => ("True", "", String::new()),
        PodState::Succeeded | PodState::Failed => ("False", "PodCompleted", String::new()),
        _ => ("False", "ContainersNotReady", unready),
    };
    let sandbox = if state == PodState::Creating { "False" } else { "True" };
    let terminal = matches!(state, PodState::Succeeded | PodState::Failed);
    let init_reason = if terminal { "PodCompleted" } else { "" };
    let conds = [
        Cond {
            kind: "PodReadyToStartContainers",
            status: if terminal { "False" } else { sandbox },
            reason: "",
            message: String::new(),
        },
        Cond {
            kind: "Initialized",
            status: "True",
            reason: init_reason,
            message: String::new(),
        },
        Cond {
            kind: "Ready",
            status: ready,
            reason,
            message: message.clone(),
        },
        Cond {
            kind: "ContainersReady",
            status: ready,
            reason,
            message,
        },
        Cond {
            kind: "PodScheduled",
            status: "True",
            reason: "",
            message: String::new(),
        },
    ];
    conds
        .iter()
        .map(|c| {
            let when = if matches!(c.kind, "PodScheduled" | "Initialized") && c.status == "True" {
                timer.start
            } else {
                at
            };
            condition(ctx.status, c, CondStyle::Pod, when)
        })
        .collect()
}

fn container_status(ctx: &Ctx, name: &str, image: &str, state: PodState, timer: &Timer, at: DateTime<Utc>) -> Value {
    let id = format!(
        "containerd://{}",
        hex64(&format!("{}/{}/{name}", ctx.namespace, ctx.name))
    );
    let image_id = format!("{}@sha256:{}", image.split('@').next().unwrap_or(image), hex64(image));
    let terminated = |code: i64, reason: &str| {
        json!({"terminated": {"exitCode": code, "reason": reason, "startedAt": ts(timer.start),
            "finishedAt": ts(at), "containerID": id}})
    };
    let (state_v, last, ready, started, restarts) = match state {
        PodState::Creating => (
            json!({"waiting": {"reason": "ContainerCreating"}}),
            json!({}),
            false,
            false,
            0,
        ),
        PodState::Running { ready } => (json!({"running": {"startedAt": ts(at)}}), json!({}), ready, true, 0),
        PodState::CrashLoop => {
            let msg = format!(
                "back-off 10s restarting failed container={name} pod={}_{}({})",
                ctx.name, ctx.namespace, ctx.uid
            );
            (
                json!({"waiting": {"reason": "CrashLoopBackOff", "message": msg}}),
                terminated(1, "Error"),
                false,
                false,
                1,
            )
        }
        PodState::Succeeded => (terminated(0, "Completed"), json!({}), false, false, 0),
        PodState::Failed => (terminated(1, "Error"), json!({}), false, false, 0),
    };
    let mut m = json!({"name": name, "image": image, "imageID": "", "ready": ready, "started": started,
        "restartCount": restarts, "state": state_v, "lastState": last});
    if state != PodState::Creating {
        m["imageID"] = json!(image_id);
        m["containerID"] = json!(id);
    }
    m
}

fn init_status(ctx: &Ctx, name: &str, image: &str, state: PodState, timer: &Timer) -> Value {
    if state == PodState::Creating {
        return json!({"name": name, "image": image, "imageID": "", "ready": false, "started": false,
            "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}, "lastState": {}});
    }
    let id = format!(
        "containerd://{}",
        hex64(&format!("{}/{}/init/{name}", ctx.namespace, ctx.name))
    );
    json!({"name": name, "image": image, "imageID": format!("{image}@sha256:{}", hex64(image)), "containerID": id,
        "ready": true, "started": false, "restartCount": 0, "lastState": {},
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": ts(timer.start),
            "finishedAt": ts(timer.start), "containerID": id}}})
}

/// 10.244.x.y, stable per namespace/name (never .0 or .255).
fn pod_ip(ctx: &Ctx) -> String {
    let h = hash(format!("{}/{}", ctx.namespace, ctx.name).as_bytes());
    format!("10.244.{}.{}", h % 256, 1 + (h >> 8) % 254)
}

/// Guaranteed when every container's requests equal its cpu+memory limits, BestEffort with no resources
/// at all, Burstable otherwise.
fn qos_class(spec: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|k| spec.get(*k).and_then(Value::as_array))
        .flatten()
        .collect();
    let res = |c: &Value, k: &str| {
        c.pointer(&format!("/resources/{k}"))
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    if containers
        .iter()
        .all(|c| res(c, "requests").is_empty() && res(c, "limits").is_empty())
    {
        return "BestEffort";
    }
    let guaranteed = containers.iter().all(|c| {
        let (req, lim) = (res(c, "requests"), res(c, "limits"));
        ["cpu", "memory"]
            .iter()
            .all(|r| lim.contains_key(*r) && req.get(*r).is_none_or(|v| Some(v) == lim.get(*r)))
    });
    if guaranteed {
        "Guaranteed"
    } else {
        "Burstable"
    }
}

// ---------------------------------------------------------------------------------------------------------
// Service and PersistentVolumeClaim: delays count from creationTimestamp (they carry no status times).

fn creation_timer(ctx: &Ctx) -> Timer {
    let created = ctx.obj.pointer("/metadata/creationTimestamp").and_then(parse_time);
    // Without a creation time there is no stable anchor, so a delay could never elapse: ignore it.
    let delay = if created.is_some() { ctx.delay } else { Duration::ZERO };
    Timer::new(created, delay, ctx.now)
}

fn service(ctx: &Ctx) -> Outcome {
    let mut st = ctx.status.as_object().cloned().unwrap_or_default();
    let mut requeue_after = None;
    let mut lb = json!({});
    if text(ctx.spec, "/type") == "LoadBalancer" {
        let timer = creation_timer(ctx);
        if phase_of(ctx.behavior, &timer, ctx.now) == Phase::Ready {
            let h = hash(format!("{}/{}", ctx.namespace, ctx.name).as_bytes());
            lb = json!({"ingress": [{"ip": format!("127.0.0.{}", 2 + h % 253), "ipMode": "VIP"}]});
        }
        requeue_after = requeue(ctx.behavior, &timer, ctx.now);
    }
    st.insert("loadBalancer".into(), lb);
    Outcome {
        status: Some(Value::Object(st)),
        children: Vec::new(),
        requeue_after,
    }
}

fn pvc(ctx: &Ctx) -> Outcome {
    let timer = creation_timer(ctx);
    let status = match phase_of(ctx.behavior, &timer, ctx.now) {
        Phase::Waiting => json!({"phase": "Pending"}),
        Phase::Failed => json!({"phase": "Lost"}),
        Phase::Ready => {
            let mut st = Map::new();
            st.insert("phase".into(), json!("Bound"));
            if let Some(modes) = ctx.spec.get("accessModes").filter(|m| m.is_array()) {
                st.insert("accessModes".into(), modes.clone());
            }
            if let Some(size) = ctx.spec.pointer("/resources/requests/storage").filter(|s| !s.is_null()) {
                st.insert("capacity".into(), json!({"storage": size}));
            }
            Value::Object(st)
        }
    };
    Outcome {
        status: Some(status),
        children: Vec::new(),
        requeue_after: requeue(ctx.behavior, &timer, ctx.now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2025, 3, 1, 12, 0, 0).single().unwrap_or_default()
    }

    fn secs(s: f64) -> chrono::Duration {
        chrono::Duration::milliseconds((s * 1000.0) as i64)
    }

    fn ptr<'a>(v: &'a Value, p: &str) -> &'a Value {
        v.pointer(p).unwrap_or(&NULL)
    }

    /// A miniature of the control loop: simulate every simulated object, write changed statuses, upsert
    /// returned children, delete unlisted ones, until nothing changes.
    struct World {
        objs: Vec<Value>,
    }

    fn uid_of(v: &Value) -> String {
        text(v, "/metadata/uid").to_string()
    }

    fn controller_uid(v: &Value) -> Option<String> {
        v.pointer("/metadata/ownerReferences")?
            .as_array()?
            .iter()
            .find(|r| r["controller"] == json!(true))
            .map(|r| text(r, "/uid").to_string())
    }

    impl World {
        fn new(objs: Vec<Value>, now: DateTime<Utc>) -> Self {
            let mut w = World { objs: Vec::new() };
            for o in objs {
                w.create(o, now);
            }
            w
        }

        fn create(&mut self, mut o: Value, now: DateTime<Utc>) {
            crate::defaults::apply_defaults(&mut o);
            let uid = format!("uid-{}-{}", text(&o, "/kind"), text(&o, "/metadata/name"));
            let meta = o["metadata"].as_object_mut().expect("metadata");
            meta.insert("uid".into(), json!(uid));
            meta.insert("creationTimestamp".into(), json!(ts(floor_sec(now))));
            meta.entry("generation").or_insert(json!(1));
            self.objs.push(o);
        }

        fn index(&self, kind: &str, name: &str) -> Option<usize> {
            self.objs
                .iter()
                .position(|o| is_kind(o, kind) && text(o, "/metadata/name") == name)
        }

        fn get(&self, kind: &str, name: &str) -> &Value {
            self.index(kind, name).map(|i| &self.objs[i]).expect("object exists")
        }

        fn all(&self, kind: &str) -> Vec<&Value> {
            self.objs.iter().filter(|o| is_kind(o, kind)).collect()
        }

        /// Replace the spec (bumping generation) and/or annotations of an object, like a client update.
        fn edit(&mut self, kind: &str, name: &str, f: impl FnOnce(&mut Value)) {
            let i = self.index(kind, name).expect("object exists");
            let before = self.objs[i]["spec"].clone();
            f(&mut self.objs[i]);
            crate::defaults::apply_defaults(&mut self.objs[i]);
            if self.objs[i]["spec"] != before {
                let g = int_at(&self.objs[i], "/metadata/generation") + 1;
                self.objs[i]["metadata"]["generation"] = json!(g);
            }
        }

        fn upsert(&mut self, child: Value, now: DateTime<Utc>) -> bool {
            let Some(i) = self.index(text(&child, "/kind"), text(&child, "/metadata/name")) else {
                self.create(child, now);
                return true;
            };
            let live = &mut self.objs[i];
            let mut changed = false;
            for key in ["labels", "annotations", "ownerReferences"] {
                let want = child["metadata"].get(key).cloned().unwrap_or(Value::Null);
                if live["metadata"].get(key).cloned().unwrap_or(Value::Null) != want {
                    live["metadata"][key] = want;
                    changed = true;
                }
            }
            if live["spec"] != child["spec"] {
                live["spec"] = child["spec"].clone();
                let g = int_at(live, "/metadata/generation") + 1;
                live["metadata"]["generation"] = json!(g);
                changed = true;
            }
            changed
        }

        fn step(&mut self, now: DateTime<Utc>) -> bool {
            let mut changed = false;
            let uids: Vec<String> = self.objs.iter().map(uid_of).collect();
            for uid in uids {
                let Some(i) = self.objs.iter().position(|o| uid_of(o) == uid) else {
                    continue;
                };
                let obj = self.objs[i].clone();
                if !is_simulated(text(&obj, "/apiVersion"), text(&obj, "/kind")) {
                    continue;
                }
                let children: Vec<Value> = self
                    .objs
                    .iter()
                    .filter(|o| controller_uid(o).as_deref() == Some(&uid))
                    .cloned()
                    .collect();
                let out = simulate(&obj, &children, now);
                if let Some(st) = out.status {
                    if obj.get("status") != Some(&st) {
                        self.objs[i]["status"] = st;
                        changed = true;
                    }
                }
                let wanted: Vec<(String, String)> = out
                    .children
                    .iter()
                    .map(|c| (text(c, "/kind").to_string(), text(c, "/metadata/name").to_string()))
                    .collect();
                for c in out.children {
                    changed |= self.upsert(c, now);
                }
                let before = self.objs.len();
                self.objs.retain(|o| {
                    controller_uid(o).as_deref() != Some(&uid)
                        || wanted.contains(&(text(o, "/kind").to_string(), text(o, "/metadata/name").to_string()))
                });
                changed |= self.objs.len() != before;
            }
            changed
        }

        fn settle(&mut self, now: DateTime<Utc>) {
            for _ in 0..30 {
                if !self.step(now) {
                    return;
                }
            }
            panic!("the loop did not settle: {:#?}", self.objs);
        }
    }

    // Health rules as Argo CD / kubectl apply them, to check the statuses.

    fn argo_deployment(d: &Value) -> &'static str {
        if d.pointer("/spec/paused") == Some(&json!(true)) {
            return "Suspended";
        }
        if int_at(d, "/metadata/generation") > int_at(d, "/status/observedGeneration") {
            return "Progressing";
        }
        let st = &d["status"];
        if find_condition(st, "Progressing").is_some_and(|c| c["reason"] == "ProgressDeadlineExceeded") {
            return "Degraded";
        }
        let (spec, updated) = (replicas_of(&d["spec"]), int_at(st, "/updatedReplicas"));
        if spec > updated || int_at(st, "/replicas") > updated || int_at(st, "/availableReplicas") < updated {
            return "Progressing";
        }
        "Healthy"
    }

    fn kubectl_rollout_done(d: &Value) -> bool {
        let st = &d["status"];
        int_at(d, "/metadata/generation") <= int_at(st, "/observedGeneration")
            && int_at(st, "/updatedReplicas") >= replicas_of(&d["spec"])
            && int_at(st, "/replicas") <= int_at(st, "/updatedReplicas")
            && int_at(st, "/availableReplicas") >= int_at(st, "/updatedReplicas")
    }

    fn argo_job(j: &Value) -> &'static str {
        let st = &j["status"];
        if condition_true(st, "Failed") {
            "Degraded"
        } else if condition_true(st, "Complete") {
            "Healthy"
        } else if condition_true(st, "Suspended") {
            "Suspended"
        } else {
            "Progressing"
        }
    }

    fn argo_pod(p: &Value) -> &'static str {
        let st = &p["status"];
        let waiting_bad = st["containerStatuses"].as_array().is_some_and(|cs| {
            cs.iter().any(|c| {
                let r = text(c, "/state/waiting/reason");
                r.starts_with("Err") || r.ends_with("Error") || r.ends_with("BackOff")
            })
        });
        let always = text(p, "/spec/restartPolicy") == "Always";
        if always && waiting_bad {
            return "Degraded";
        }
        match text(st, "/phase") {
            "Pending" => "Progressing",
            "Succeeded" => "Healthy",
            "Failed" => "Degraded",
            "Running" if always && condition_true(st, "Ready") => "Healthy",
            "Running" if always && st.pointer("/containerStatuses/0/lastState/terminated").is_some() => "Degraded",
            _ => "Progressing",
        }
    }

    fn deployment_obj(name: &str, replicas: i64, annotations: Value) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                "template": {"metadata": {"labels": {"app": name}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}})
    }

    fn job_obj(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}]}}}})
    }

    #[test]
    fn simulated_kinds() {
        let cases = [
            ("apps/v1", "Deployment", true),
            ("apps/v1", "ReplicaSet", true),
            ("apps/v1", "StatefulSet", true),
            ("apps/v1", "DaemonSet", true),
            ("batch/v1", "Job", true),
            ("v1", "Pod", true),
            ("v1", "PersistentVolumeClaim", true),
            ("v1", "Service", true),
            ("v1", "ConfigMap", false),
            ("batch/v1", "CronJob", false),
            ("extensions/v1beta1", "Deployment", false),
            ("capstan.dev/v1", "Pod", false),
        ];
        for (api, kind, want) in cases {
            assert_eq!(is_simulated(api, kind), want, "{api} {kind}");
        }
    }

    #[test]
    fn go_durations() {
        let cases = [
            ("500ms", Some(Duration::from_millis(500))),
            ("3s", Some(Duration::from_secs(3))),
            ("1m30s", Some(Duration::from_secs(90))),
            ("1.5s", Some(Duration::from_millis(1500))),
            ("2h", Some(Duration::from_secs(7200))),
            ("10us", Some(Duration::from_micros(10))),
            ("10µs", Some(Duration::from_micros(10))),
            ("0", Some(Duration::ZERO)),
            (" 4s ", Some(Duration::from_secs(4))),
            ("100000h", Some(MAX_DELAY)),
            ("-3s", None),
            ("3", None),
            ("s", None),
            ("3x", None),
            ("", None),
            (".s", None),
            ("99999999999999999999999999999999999999999h", None),
        ];
        for (input, want) in cases {
            assert_eq!(parse_go_duration(input), want, "{input:?}");
        }
    }

    #[test]
    fn deployment_becomes_ready_with_replicaset_and_pods() {
        let mut w = World::new(vec![deployment_obj("web", 3, json!({}))], t0());
        w.settle(t0());
        let d = w.get("Deployment", "web");
        assert_eq!(argo_deployment(d), "Healthy");
        assert!(kubectl_rollout_done(d));
        let st = &d["status"];
        for key in ["replicas", "updatedReplicas", "readyReplicas", "availableReplicas"] {
            assert_eq!(st[key], json!(3), "{key}");
        }
        assert_eq!(st["observedGeneration"], json!(1));
        assert!(st.get("unavailableReplicas").is_none());
        assert_eq!(ptr(st, "/conditions/0/type"), &json!("Available"));
        assert_eq!(ptr(st, "/conditions/0/status"), &json!("True"));
        assert_eq!(ptr(st, "/conditions/0/reason"), &json!("MinimumReplicasAvailable"));
        assert_eq!(ptr(st, "/conditions/1/reason"), &json!("NewReplicaSetAvailable"));
        let sets = w.all("ReplicaSet");
        assert_eq!(sets.len(), 1);
        let rs = sets[0];
        let hash = text(rs, "/metadata/labels/pod-template-hash");
        assert_eq!(hash.len(), 10);
        assert_eq!(text(rs, "/metadata/name"), format!("web-{hash}"));
        assert_eq!(
            ptr(rs, "/metadata/annotations/deployment.kubernetes.io~1revision"),
            &json!("1")
        );
        assert_eq!(ptr(rs, "/spec/selector/matchLabels/pod-template-hash"), &json!(hash));
        assert_eq!(
            ptr(rs, "/spec/template/metadata/labels/pod-template-hash"),
            &json!(hash)
        );
        assert_eq!(
            ptr(rs, "/metadata/ownerReferences/0"),
            &json!({"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "uid-Deployment-web",
                "controller": true, "blockOwnerDeletion": true})
        );
        assert_eq!(ptr(rs, "/status/readyReplicas"), &json!(3));
        assert_eq!(ptr(rs, "/status/fullyLabeledReplicas"), &json!(3));
        let pods = w.all("Pod");
        assert_eq!(pods.len(), 3);
        for p in pods {
            assert_eq!(argo_pod(p), "Healthy");
            assert!(text(p, "/metadata/name").starts_with(&format!("web-{hash}-")));
            assert_eq!(text(p, "/spec/nodeName"), NODE_NAME);
            assert!(text(p, "/status/podIP").starts_with("10.244."));
        }
        // Later calls change nothing.
        assert!(!w.step(t0() + secs(3600.0)));
    }

    #[test]
    fn deployment_with_delay_progresses_then_becomes_ready() {
        let mut w = World::new(
            vec![deployment_obj("slow", 2, json!({ANN_DELAY: "3s"}))],
            t0() + secs(0.4),
        );
        w.settle(t0() + secs(0.4));
        let d = w.get("Deployment", "slow").clone();
        assert_eq!(argo_deployment(&d), "Progressing");
        assert!(!kubectl_rollout_done(&d));
        assert_eq!(ptr(&d, "/status/conditions/0/status"), &json!("False"));
        assert_eq!(ptr(&d, "/status/conditions/1/reason"), &json!("ReplicaSetUpdated"));
        // The anchor is rounded up to the next second, so the delay never shrinks.
        let out = simulate(&d, &[], t0() + secs(0.4));
        assert_eq!(out.requeue_after, Some(Duration::from_millis(3600)));
        w.settle(t0() + secs(2.9));
        assert_eq!(argo_deployment(w.get("Deployment", "slow")), "Progressing");
        w.settle(t0() + secs(4.0));
        let d = w.get("Deployment", "slow");
        assert_eq!(argo_deployment(d), "Healthy");
        assert!(kubectl_rollout_done(d));
        assert_eq!(
            ptr(d, "/status/conditions/1/lastUpdateTime"),
            &json!("2025-03-01T12:00:04Z")
        );
        assert_eq!(
            ptr(d, "/status/conditions/0/lastTransitionTime"),
            &json!("2025-03-01T12:00:04Z")
        );
        // Progressing never flipped, so its transition time is the rollout start.
        assert_eq!(
            ptr(d, "/status/conditions/1/lastTransitionTime"),
            &json!("2025-03-01T12:00:01Z")
        );
        assert!(w.all("Pod").iter().all(|p| argo_pod(p) == "Healthy"));
        assert!(!w.step(t0() + secs(100.0)));
    }

    #[test]
    fn deployment_failing_reports_progress_deadline_exceeded() {
        let mut w = World::new(vec![deployment_obj("bad", 2, json!({ANN_BEHAVIOR: "fail"}))], t0());
        w.settle(t0());
        let d = w.get("Deployment", "bad");
        assert_eq!(argo_deployment(d), "Degraded");
        assert_eq!(ptr(d, "/status/conditions/1/status"), &json!("False"));
        assert_eq!(ptr(d, "/status/conditions/0/status"), &json!("False"));
        assert!(d["status"].get("availableReplicas").is_none());
        assert_eq!(ptr(d, "/status/unavailableReplicas"), &json!(2));
        let pods = w.all("Pod");
        assert_eq!(pods.len(), 2);
        for p in pods {
            assert_eq!(argo_pod(p), "Degraded");
            assert_eq!(
                ptr(p, "/status/containerStatuses/0/state/waiting/reason"),
                &json!("CrashLoopBackOff")
            );
            assert!(int_at(p, "/status/containerStatuses/0/restartCount") > 0);
        }
        assert!(!w.step(t0() + secs(60.0)));
    }

    #[test]
    fn deployment_progressing_forever_and_fail_after_delay() {
        let cases = [
            (json!({ANN_BEHAVIOR: "progressing"}), 1000.0, "Progressing", None),
            (
                json!({ANN_BEHAVIOR: "fail", ANN_DELAY: "5s"}),
                2.0,
                "Progressing",
                Some(3),
            ),
            (json!({ANN_BEHAVIOR: "fail", ANN_DELAY: "5s"}), 5.0, "Degraded", None),
        ];
        for (annotations, after, want, requeue_secs) in cases {
            let mut w = World::new(vec![deployment_obj("d", 1, annotations.clone())], t0());
            w.settle(t0());
            w.settle(t0() + secs(after));
            let d = w.get("Deployment", "d");
            assert_eq!(argo_deployment(d), want, "{annotations} after {after}s");
            let out = simulate(d, &[], t0() + secs(after));
            assert_eq!(
                out.requeue_after,
                requeue_secs.map(Duration::from_secs),
                "{annotations}"
            );
        }
    }

    #[test]
    fn paused_deployment_creates_nothing() {
        let mut obj = deployment_obj("p", 2, json!({}));
        obj["spec"]["paused"] = json!(true);
        let mut w = World::new(vec![obj], t0());
        w.settle(t0());
        let d = w.get("Deployment", "p");
        assert!(w.all("ReplicaSet").is_empty());
        assert_eq!(argo_deployment(d), "Suspended");
        assert_eq!(ptr(d, "/status/observedGeneration"), &json!(1));
        assert_eq!(ptr(d, "/status/conditions/1/status"), &json!("Unknown"));
        assert_eq!(ptr(d, "/status/conditions/1/reason"), &json!("DeploymentPaused"));
        // Resuming rolls out.
        w.edit("Deployment", "p", |d| d["spec"]["paused"] = json!(false));
        w.settle(t0() + secs(10.0));
        assert_eq!(argo_deployment(w.get("Deployment", "p")), "Healthy");
        assert_eq!(w.all("Pod").len(), 2);
    }

    #[test]
    fn paused_after_rollout_keeps_replicasets_and_scales() {
        let mut w = World::new(vec![deployment_obj("p", 2, json!({}))], t0());
        w.settle(t0());
        w.edit("Deployment", "p", |d| {
            d["spec"]["paused"] = json!(true);
            d["spec"]["replicas"] = json!(3);
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:2");
        });
        w.settle(t0() + secs(5.0));
        let sets = w.all("ReplicaSet");
        assert_eq!(sets.len(), 1, "no new ReplicaSet while paused");
        assert_eq!(
            ptr(sets[0], "/spec/replicas"),
            &json!(2),
            "the old template is not the paused one's"
        );
        assert_eq!(w.all("Pod").len(), 2);
    }

    #[test]
    fn zero_replicas_is_ready_at_once_whatever_the_behaviour() {
        for annotations in [json!({}), json!({ANN_BEHAVIOR: "fail"}), json!({ANN_DELAY: "1h"})] {
            let mut w = World::new(vec![deployment_obj("z", 0, annotations.clone())], t0());
            w.settle(t0());
            let d = w.get("Deployment", "z");
            assert_eq!(argo_deployment(d), "Healthy", "{annotations}");
            assert!(kubectl_rollout_done(d));
            assert!(d["status"].get("replicas").is_none());
            assert!(w.all("Pod").is_empty());
            assert_eq!(w.all("ReplicaSet").len(), 1);
            assert_eq!(simulate(d, &[], t0()).requeue_after, None);
        }
    }

    #[test]
    fn template_change_rolls_out_a_second_replicaset() {
        let mut w = World::new(vec![deployment_obj("web", 2, json!({}))], t0());
        w.settle(t0());
        let first = text(w.all("ReplicaSet")[0], "/metadata/name").to_string();
        w.edit("Deployment", "web", |d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.28")
        });
        assert_eq!(argo_deployment(w.get("Deployment", "web")), "Progressing");
        w.settle(t0() + secs(30.0));
        let d = w.get("Deployment", "web");
        assert_eq!(argo_deployment(d), "Healthy");
        assert_eq!(ptr(d, "/status/observedGeneration"), &json!(2));
        let sets = w.all("ReplicaSet");
        assert_eq!(sets.len(), 2);
        let old = sets
            .iter()
            .find(|r| text(r, "/metadata/name") == first)
            .expect("old kept for history");
        let new = sets.iter().find(|r| text(r, "/metadata/name") != first).expect("new");
        assert_eq!(ptr(old, "/spec/replicas"), &json!(0));
        assert_eq!(ptr(new, "/spec/replicas"), &json!(2));
        assert_eq!(
            ptr(new, "/metadata/annotations/deployment.kubernetes.io~1revision"),
            &json!("2")
        );
        let new_name = text(new, "/metadata/name").to_string();
        let pods = w.all("Pod");
        assert_eq!(pods.len(), 2);
        assert!(pods.iter().all(|p| text(p, "/metadata/name").starts_with(&new_name)));
        assert!(pods.iter().all(|p| text(p, "/spec/containers/0/image") == "nginx:1.28"));
        // Rolling back reuses the first ReplicaSet with the next revision.
        w.edit("Deployment", "web", |d| {
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:1.27")
        });
        w.settle(t0() + secs(60.0));
        let back = w.get("ReplicaSet", &first);
        assert_eq!(ptr(back, "/spec/replicas"), &json!(2));
        assert_eq!(
            ptr(back, "/metadata/annotations/deployment.kubernetes.io~1revision"),
            &json!("3")
        );
        assert_eq!(argo_deployment(w.get("Deployment", "web")), "Healthy");
    }

    #[test]
    fn failed_update_keeps_old_pods_serving() {
        let mut w = World::new(vec![deployment_obj("web", 2, json!({}))], t0());
        w.settle(t0());
        w.edit("Deployment", "web", |d| {
            d["metadata"]["annotations"] = json!({ANN_BEHAVIOR: "fail"});
            d["spec"]["template"]["spec"]["containers"][0]["image"] = json!("nginx:broken");
        });
        w.settle(t0() + secs(10.0));
        let d = w.get("Deployment", "web");
        assert_eq!(argo_deployment(d), "Degraded");
        assert!(!kubectl_rollout_done(d));
        assert_eq!(ptr(d, "/status/availableReplicas"), &json!(2));
        assert_eq!(ptr(d, "/status/replicas"), &json!(4));
        assert_eq!(
            ptr(d, "/status/conditions/0/status"),
            &json!("True"),
            "old pods keep it available"
        );
        let healthy = w.all("Pod").iter().filter(|p| argo_pod(p) == "Healthy").count();
        assert_eq!(healthy, 2);
    }

    #[test]
    fn revision_history_limit_prunes_old_replicasets() {
        let mut obj = deployment_obj("h", 1, json!({}));
        obj["spec"]["revisionHistoryLimit"] = json!(1);
        let mut w = World::new(vec![obj], t0());
        w.settle(t0());
        for (i, image) in ["a:1", "a:2", "a:3"].iter().enumerate() {
            w.edit("Deployment", "h", |d| {
                d["spec"]["template"]["spec"]["containers"][0]["image"] = json!(image)
            });
            w.settle(t0() + secs(i as f64 + 1.0));
        }
        assert_eq!(w.all("ReplicaSet").len(), 2);
        assert_eq!(argo_deployment(w.get("Deployment", "h")), "Healthy");
    }

    #[test]
    fn behaviour_change_without_generation_change_applies() {
        let mut w = World::new(vec![deployment_obj("web", 1, json!({}))], t0());
        w.settle(t0());
        w.edit("Deployment", "web", |d| {
            d["metadata"]["annotations"] = json!({ANN_BEHAVIOR: "fail"})
        });
        w.settle(t0() + secs(5.0));
        assert_eq!(argo_deployment(w.get("Deployment", "web")), "Degraded");
        assert!(w.all("Pod").iter().all(|p| argo_pod(p) == "Degraded"));
        w.edit("Deployment", "web", |d| d["metadata"]["annotations"] = json!({}));
        w.settle(t0() + secs(10.0));
        assert_eq!(argo_deployment(w.get("Deployment", "web")), "Healthy");
    }

    #[test]
    fn jobs() {
        struct Case {
            annotations: Value,
            suspend: bool,
            at: f64,
            health: &'static str,
            conditions: &'static [&'static str],
        }
        let cases = [
            Case {
                annotations: json!({}),
                suspend: false,
                at: 0.0,
                health: "Healthy",
                conditions: &["SuccessCriteriaMet", "Complete"],
            },
            Case {
                annotations: json!({ANN_BEHAVIOR: "fail"}),
                suspend: false,
                at: 0.0,
                health: "Degraded",
                conditions: &["FailureTarget", "Failed"],
            },
            Case {
                annotations: json!({ANN_DELAY: "10s"}),
                suspend: false,
                at: 5.0,
                health: "Progressing",
                conditions: &[],
            },
            Case {
                annotations: json!({ANN_DELAY: "10s"}),
                suspend: false,
                at: 11.0,
                health: "Healthy",
                conditions: &["SuccessCriteriaMet", "Complete"],
            },
            Case {
                annotations: json!({ANN_BEHAVIOR: "progressing"}),
                suspend: false,
                at: 999.0,
                health: "Progressing",
                conditions: &[],
            },
            Case {
                annotations: json!({}),
                suspend: true,
                at: 0.0,
                health: "Suspended",
                conditions: &["Suspended"],
            },
        ];
        for c in cases {
            let mut obj = job_obj("j", c.annotations.clone());
            obj["spec"]["suspend"] = json!(c.suspend);
            let mut w = World::new(vec![obj], t0());
            w.settle(t0());
            w.settle(t0() + secs(c.at));
            let j = w.get("Job", "j");
            let label = format!("{} suspend={} at={}", c.annotations, c.suspend, c.at);
            assert_eq!(argo_job(j), c.health, "{label}: {j:#}");
            let types: Vec<&str> = j["status"]["conditions"]
                .as_array()
                .map(|cs| cs.iter().map(|c| text(c, "/type")).collect())
                .unwrap_or_default();
            assert_eq!(types, c.conditions, "{label}");
            match c.health {
                "Healthy" => {
                    assert_eq!(ptr(j, "/status/succeeded"), &json!(1));
                    assert!(j["status"]["completionTime"].is_string());
                    assert!(j["status"]["startTime"].is_string());
                }
                "Degraded" => assert_eq!(ptr(j, "/status/failed"), &json!(1)),
                "Progressing" => assert_eq!(ptr(j, "/status/active"), &json!(1), "{label}"),
                _ => assert!(w.all("Pod").is_empty()),
            }
            if c.health != "Suspended" {
                let pods = w.all("Pod");
                assert_eq!(pods.len(), 1);
                assert_eq!(ptr(pods[0], "/metadata/labels/job-name"), &json!("j"));
                assert_eq!(
                    ptr(pods[0], "/metadata/labels/batch.kubernetes.io~1controller-uid"),
                    &json!("uid-Job-j")
                );
            }
            assert!(!w.step(t0() + secs(c.at)), "{label} settles");
        }
    }

    #[test]
    fn resumed_job_runs() {
        let mut obj = job_obj("j", json!({}));
        obj["spec"]["suspend"] = json!(true);
        let mut w = World::new(vec![obj], t0());
        w.settle(t0());
        w.edit("Job", "j", |j| j["spec"]["suspend"] = json!(false));
        w.settle(t0() + secs(5.0));
        let j = w.get("Job", "j");
        assert_eq!(argo_job(j), "Healthy");
        assert_eq!(
            ptr(find_condition(&j["status"], "Suspended").unwrap_or(&NULL), "/reason"),
            &json!("JobResumed")
        );
        assert_eq!(ptr(j, "/status/startTime"), &json!("2025-03-01T12:00:05Z"));
    }

    fn pod_obj(restart: &str, owner: Option<&str>, annotations: Value) -> Value {
        let mut p = json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations,
                "creationTimestamp": ts(t0())},
            "spec": {"restartPolicy": restart,
                "containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}]}});
        if let Some(kind) = owner {
            p["metadata"]["ownerReferences"] =
                json!([{"apiVersion": "batch/v1", "kind": kind, "name": "o", "uid": "x", "controller": true}]);
        }
        p
    }

    #[test]
    fn pod_phases() {
        let cases = [
            ("Always", None, json!({}), 0.0, "Running", true, ""),
            (
                "Always",
                None,
                json!({ANN_DELAY: "2s"}),
                0.0,
                "Pending",
                false,
                "ContainerCreating",
            ),
            ("Always", None, json!({ANN_DELAY: "2s"}), 2.0, "Running", true, ""),
            (
                "Always",
                None,
                json!({ANN_BEHAVIOR: "fail"}),
                0.0,
                "Running",
                false,
                "CrashLoopBackOff",
            ),
            (
                "Always",
                None,
                json!({ANN_BEHAVIOR: "progressing"}),
                0.0,
                "Running",
                false,
                "",
            ),
            ("Never", None, json!({}), 0.0, "Succeeded", false, ""),
            (
                "OnFailure",
                None,
                json!({ANN_BEHAVIOR: "fail"}),
                0.0,
                "Failed",
                false,
                "",
            ),
            ("Always", Some("Job"), json!({}), 0.0, "Succeeded", false, ""),
            ("Never", None, json!({ANN_DELAY: "2s"}), 1.0, "Running", true, ""),
            (
                "Never",
                None,
                json!({ANN_BEHAVIOR: "progressing"}),
                99.0,
                "Running",
                true,
                "",
            ),
        ];
        for (restart, owner, annotations, at, phase, ready, waiting) in cases {
            let label = format!("{restart} {owner:?} {annotations} at {at}");
            let mut p = pod_obj(restart, owner, annotations.clone());
            p["status"] = simulate(&p, &[], t0()).status.unwrap_or_default();
            let out = simulate(&p, &[], t0() + secs(at));
            let st = out.status.unwrap_or_default();
            assert_eq!(st["phase"], json!(phase), "{label}");
            assert_eq!(condition_true(&st, "Ready"), ready, "{label}");
            assert_eq!(
                text(&st, "/containerStatuses/1/state/waiting/reason"),
                waiting,
                "{label}"
            );
            assert_eq!(st["containerStatuses"].as_array().map(Vec::len), Some(2));
            assert_eq!(st["startTime"], json!(ts(t0())), "{label}");
            assert_eq!(st["qosClass"], json!("BestEffort"));
            if phase != "Pending" {
                assert_eq!(st["podIP"], json!(pod_ip(&Ctx::new(&p, t0()))));
            }
        }
    }

    #[test]
    fn qos_classes() {
        let r = |req: Value, lim: Value| json!({"containers": [{"resources": {"requests": req, "limits": lim}}]});
        let cases = [
            (json!({"containers": [{}]}), "BestEffort"),
            (r(json!({"cpu": "1"}), json!({})), "Burstable"),
            (r(json!({}), json!({"cpu": "1", "memory": "1Gi"})), "Guaranteed"),
            (
                r(json!({"cpu": "500m"}), json!({"cpu": "1", "memory": "1Gi"})),
                "Burstable",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(qos_class(&spec), want, "{spec}");
        }
    }

    fn service_obj(ty: &str, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": "ns", "annotations": annotations, "creationTimestamp": ts(t0())},
            "spec": {"type": ty, "ports": [{"port": 80}]}})
    }

    #[test]
    fn services() {
        let cases = [
            ("ClusterIP", json!({}), 0.0, false, None),
            ("LoadBalancer", json!({}), 0.0, true, None),
            ("LoadBalancer", json!({ANN_DELAY: "5s"}), 1.0, false, Some(4)),
            ("LoadBalancer", json!({ANN_DELAY: "5s"}), 5.0, true, None),
            ("LoadBalancer", json!({ANN_BEHAVIOR: "progressing"}), 100.0, false, None),
        ];
        for (ty, annotations, at, has_ip, requeue_secs) in cases {
            let out = simulate(&service_obj(ty, annotations.clone()), &[], t0() + secs(at));
            let st = out.status.unwrap_or_default();
            let ip = text(&st, "/loadBalancer/ingress/0/ip");
            assert_eq!(ip.starts_with("127.0.0."), has_ip, "{ty} {annotations} at {at}: {st}");
            if !has_ip {
                assert_eq!(st["loadBalancer"], json!({}));
            }
            assert_eq!(out.requeue_after, requeue_secs.map(Duration::from_secs));
        }
    }

    #[test]
    fn persistent_volume_claims() {
        let pvc = |annotations: Value| {
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "ns", "annotations": annotations,
                    "creationTimestamp": ts(t0())},
                "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}})
        };
        let cases = [
            (
                json!({}),
                0.0,
                json!({"phase": "Bound", "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "1Gi"}}),
            ),
            (json!({ANN_BEHAVIOR: "fail"}), 0.0, json!({"phase": "Lost"})),
            (json!({ANN_BEHAVIOR: "progressing"}), 50.0, json!({"phase": "Pending"})),
            (json!({ANN_DELAY: "2s"}), 1.0, json!({"phase": "Pending"})),
        ];
        for (annotations, at, want) in cases {
            let out = simulate(&pvc(annotations.clone()), &[], t0() + secs(at));
            assert_eq!(out.status, Some(want), "{annotations}");
        }
    }

    #[test]
    fn stateful_set_orders_pods() {
        let sts = |annotations: Value| {
            json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "default", "annotations": annotations},
                "spec": {"replicas": 3, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                    "template": {"metadata": {"labels": {"app": "db"}},
                        "spec": {"containers": [{"name": "db", "image": "pg:16"}]}}}})
        };
        let mut w = World::new(vec![sts(json!({}))], t0());
        w.settle(t0());
        let s = w.get("StatefulSet", "db");
        let st = &s["status"];
        assert_eq!(st["readyReplicas"], json!(3));
        assert_eq!(st["availableReplicas"], json!(3));
        assert_eq!(st["currentReplicas"], json!(3));
        assert_eq!(st["updatedReplicas"], json!(3));
        assert_eq!(st["currentRevision"], st["updateRevision"]);
        assert_eq!(st["observedGeneration"], json!(1));
        let p = w.get("Pod", "db-2");
        assert_eq!(ptr(p, "/spec/hostname"), &json!("db-2"));
        assert_eq!(ptr(p, "/spec/subdomain"), &json!("db"));
        assert_eq!(ptr(p, "/metadata/labels/apps.kubernetes.io~1pod-index"), &json!("2"));

        let mut w = World::new(vec![sts(json!({ANN_BEHAVIOR: "fail"}))], t0());
        w.settle(t0());
        assert_eq!(w.all("Pod").len(), 1, "OrderedReady waits for db-0");
        assert!(w.get("StatefulSet", "db")["status"].get("readyReplicas").is_none());
    }

    #[test]
    fn daemon_set_runs_one_pod() {
        let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
            "metadata": {"name": "agent", "namespace": "kube-system"},
            "spec": {"selector": {"matchLabels": {"app": "agent"}},
                "template": {"metadata": {"labels": {"app": "agent"}},
                    "spec": {"containers": [{"name": "a", "image": "agent:1"}]}}}});
        let mut w = World::new(vec![ds], t0());
        w.settle(t0());
        let st = &w.get("DaemonSet", "agent")["status"];
        for key in [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
        ] {
            assert_eq!(st[key], json!(1), "{key}");
        }
        assert!(st.get("numberUnavailable").is_none());
        assert_eq!(w.all("Pod").len(), 1);
    }

    /// Simulating again with the first result written back gives the identical outcome: the loop settles.
    #[test]
    fn simulate_is_idempotent() {
        let mut fixtures = vec![
            deployment_obj("a", 2, json!({})),
            deployment_obj("b", 2, json!({ANN_DELAY: "1m30s"})),
            deployment_obj("c", 2, json!({ANN_BEHAVIOR: "fail"})),
            deployment_obj("d", 0, json!({})),
            job_obj("j", json!({})),
            pod_obj("Always", None, json!({ANN_BEHAVIOR: "fail"})),
            pod_obj("Never", Some("Job"), json!({ANN_DELAY: "3s"})),
            service_obj("LoadBalancer", json!({ANN_DELAY: "3s"})),
        ];
        let mut paused = deployment_obj("p", 1, json!({}));
        paused["spec"]["paused"] = json!(true);
        fixtures.push(paused);
        for now in [t0(), t0() + secs(0.25)] {
            for f in &fixtures {
                let mut obj = f.clone();
                obj["metadata"]["generation"] = json!(1);
                let first = simulate(&obj, &[], now);
                obj["status"] = first.status.clone().unwrap_or_default();
                let second = simulate(&obj, &first.children, now);
                let third = simulate(&obj, &first.children, now);
                assert_eq!(second, third, "{f}");
                obj["status"] = second.status.clone().unwrap_or_default();
                assert_eq!(simulate(&obj, &first.children, now), second, "{f}");
                if first.children.is_empty() {
                    assert_eq!(first, second, "{f}");
                }
            }
        }
    }

    #[test]
    fn children_are_complete_objects() {
        let d = deployment_obj("web", 1, json!({ANN_BEHAVIOR: "progressing"}));
        let out = simulate(&d, &[], t0());
        let rs = &out.children[0];
        for p in [
            "/apiVersion",
            "/kind",
            "/metadata/name",
            "/metadata/namespace",
            "/metadata/labels",
            "/spec/template/spec",
        ] {
            assert!(rs.pointer(p).is_some(), "{p}");
        }
        assert_eq!(
            ptr(rs, "/metadata/annotations/devcluster.capstan.dev~1behavior"),
            &json!("progressing")
        );
        let pods = simulate(rs, &[], t0()).children;
        assert_eq!(pods.len(), 1);
        assert_eq!(
            ptr(&pods[0], "/metadata/annotations/devcluster.capstan.dev~1behavior"),
            &json!("progressing")
        );
        assert_eq!(ptr(&pods[0], "/spec/restartPolicy"), &json!("Always"));
        assert_eq!(ptr(&pods[0], "/metadata/ownerReferences/0/kind"), &json!("ReplicaSet"));
        // Pod names are stable and distinct.
        let rs3 = {
            let mut r = rs.clone();
            r["spec"]["replicas"] = json!(3);
            r
        };
        let names: Vec<String> = simulate(&rs3, &[], t0())
            .children
            .iter()
            .map(|p| text(p, "/metadata/name").to_string())
            .collect();
        let again: Vec<String> = simulate(&rs3, &[], t0())
            .children
            .iter()
            .map(|p| text(p, "/metadata/name").to_string())
            .collect();
        assert_eq!(names, again);
        assert_eq!(
            names[..1],
            simulate(rs, &[], t0())
                .children
                .iter()
                .map(|p| text(p, "/metadata/name").to_string())
                .collect::<Vec<_>>()[..]
        );
        let mut dedup = names.clone();
        dedup.dedup();
        assert_eq!(dedup.len(), 3);
    }

    #[test]
    fn deleting_objects_are_left_alone() {
        let mut d = deployment_obj("web", 1, json!({}));
        d["metadata"]["deletionTimestamp"] = json!(ts(t0()));
        let kids = vec![json!({"kind": "ReplicaSet", "metadata": {"name": "x"}})];
        assert_eq!(
            simulate(&d, &kids, t0()),
            Outcome {
                status: None,
                children: kids,
                requeue_after: None
            }
        );
    }

    #[test]
    fn malformed_objects_do_not_panic() {
        let kinds = [
            ("apps/v1", "Deployment"),
            ("apps/v1", "ReplicaSet"),
            ("apps/v1", "StatefulSet"),
            ("apps/v1", "DaemonSet"),
            ("batch/v1", "Job"),
            ("v1", "Pod"),
            ("v1", "PersistentVolumeClaim"),
            ("v1", "Service"),
        ];
        let bodies = [
            json!({}),
            json!({"metadata": 5, "spec": "x", "status": [1]}),
            json!({"metadata": {"name": 3, "annotations": {ANN_DELAY: "-1s", ANN_BEHAVIOR: 7}, "generation": "2"},
                "spec": {"replicas": "3", "template": 4, "selector": [],
                    "strategy": {"rollingUpdate": {"maxSurge": "x%"}},
                    "containers": "c", "paused": "yes", "suspend": 1, "type": 9, "revisionHistoryLimit": -5},
                "status": {"conditions": "no", "observedGeneration": "1", "startTime": 5}}),
            json!({"metadata": {"name": "n", "annotations": {ANN_DELAY: "100000h"}, "creationTimestamp": "garbage"},
                "spec": {"replicas": 99999999999i64,
                    "template": {"metadata": {"labels": "l"}, "spec": {"containers": [1, null]}}},
                "status": {"conditions": [1,
                    {"type": "Progressing", "reason": "ReplicaSetUpdated", "lastUpdateTime": "bad"}]}}),
        ];
        let garbage_children = [
            json!(null),
            json!({"kind": "ReplicaSet"}),
            json!({"kind": "Pod", "metadata": {"name": 1}}),
        ];
        for (api, kind) in kinds {
            for body in &bodies {
                let mut obj = body.clone();
                if let Some(m) = obj.as_object_mut() {
                    m.insert("apiVersion".into(), json!(api));
                    m.insert("kind".into(), json!(kind));
                }
                let out = simulate(&obj, &garbage_children, t0());
                assert!(out.children.len() <= MAX_PODS as usize);
            }
        }
        assert_eq!(simulate(&json!(null), &[], t0()), Outcome::default());
        assert_eq!(simulate(&json!([1]), &[], t0()), Outcome::default());
    }
}
