//! The diff engine: is a live object in sync with its desired (rendered) object?
//!
//! Capstan applies with server-side apply (field manager `capstan`), so the comparison is the one SSA
//! implies: **desired-subset** — every field of the normalized desired object must be equal
//! in live, fields only in live (server defaults, other managers' fields) are ignored — **plus** the fields
//! the live `managedFields` entry of `capstan` (operation `Apply`) owns but Git no longer has, which the
//! next apply removes. Normalization and ignore rules follow Argo CD's diff normalizers and `ignoreDifferences`.
//!
//! The result carries a *predicted live* object (live with desired applied and removed fields dropped,
//! Argo CD's `PredictedLive`) next to the normalized live object, so `unified_diff` of the two shows exactly
//! what a sync would change; both are masked for Secrets.
//!
//! Pure: no I/O, never panics on any object, recursion bounded by [`normalize::MAX_DEPTH`].

pub mod ignore;
pub mod managed;
pub mod mask;
pub mod normalize;
pub mod quantity;

use std::borrow::Borrow;
use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::api::application::{ResourceIgnoreDifferences, SyncStatusCode};
use crate::api::labels;
use crate::engine::object::{self, ObjectKey};

use managed::{locate, remove_all, FieldSet, Locator, PathElement};
use normalize::{absent_equivalent, equivalent_at, normalize, Ctx, MAX_DEPTH};

/// The field manager Capstan applies with.
pub use crate::api::labels::FIELD_MANAGER;

/// The most paths reported by one diff (the rest are summarized by `modified`).
const MAX_PATHS: usize = 1000;

/// What to compare with.
#[derive(Clone, Debug, PartialEq)]
pub struct DiffOptions {
    /// The Application's `spec.ignoreDifferences` (plus any system-wide rules); rules not matching the
    /// object are skipped.
    pub ignore_differences: Vec<ResourceIgnoreDifferences>,
    /// The SSA field manager whose `Apply` entry tells which fields Capstan owns (`"capstan"`).
    pub field_manager: String,
    /// Annotations masked on Secrets in addition to `last-applied-configuration` (Argo CD's
    /// `resource.sensitive.mask.annotations`).
    pub sensitive_annotations: Vec<String>,
}

impl Default for DiffOptions {
    fn default() -> Self {
        DiffOptions {
            ignore_differences: Vec::new(),
            field_manager: FIELD_MANAGER.to_string(),
            sensitive_annotations: Vec::new(),
        }
    }
}

impl DiffOptions {
    /// Options with the Application's ignore rules and Capstan's field manager.
    pub fn with_ignore_differences(rules: &[ResourceIgnoreDifferences]) -> Self {
        DiffOptions {
            ignore_differences: rules.to_vec(),
            ..Default::default()
        }
    }
}

/// The comparison of one resource. No field carries a Secret value: objects are masked and `paths` are
/// JSON pointers (keys only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DiffResult {
    /// Out of sync: contents differ, or the object is missing or extraneous.
    pub modified: bool,
    /// Live exists and desired does not (a pruning sync deletes it).
    pub requires_pruning: bool,
    /// Desired exists and live does not.
    pub missing: bool,
    /// JSON pointers (RFC 6901, into the live/predicted object) of the fields that differ; never values.
    pub paths: Vec<String>,
    /// The predicted live object: normalized live with desired applied and Capstan-owned fields removed
    /// from Git dropped (the normalized desired object when live is missing). Masked for Secrets.
    pub normalized_desired: Option<Value>,
    /// The normalized live object (ignored fields removed). Masked for Secrets.
    pub normalized_live: Option<Value>,
    /// Problems with the ignore rules (an unsupported jq expression, ignored); never values.
    pub warnings: Vec<String>,
}

impl DiffResult {
    /// `Synced` or `OutOfSync` (Unknown is the caller's, for comparison errors).
    pub fn sync_status(&self) -> SyncStatusCode {
        if self.modified {
            SyncStatusCode::OutOfSync
        } else {
            SyncStatusCode::Synced
        }
    }

    /// A YAML unified diff from normalized live to predicted live (masked).
    pub fn unified_diff(&self) -> String {
        unified_diff(self.normalized_live.as_ref(), self.normalized_desired.as_ref())
    }
}

/// Compares `desired` (as it will be applied: the caller adds Capstan's tracking annotation and
/// app-instance label first if it wants them compared — absent from desired they are ignored, like every
/// live-only field) with `live` (as read from the cluster, `managedFields` included).
pub fn diff(desired: Option<&Value>, live: Option<&Value>, opts: &DiffOptions) -> DiffResult {
    let mut result = match (desired, live) {
        (None, None) => return DiffResult::default(),
        (Some(d), None) => missing(d, opts),
        (None, Some(l)) => extraneous(l, opts),
        (Some(d), Some(l)) => compare(d, l, opts),
    };
    let mut pair = [result.normalized_desired.as_mut(), result.normalized_live.as_mut()];
    mask::hide_secret_data(&mut pair, &opts.sensitive_annotations);
    result
}

/// Desired without live: `missing`, out of sync.
fn missing(desired: &Value, opts: &DiffOptions) -> DiffResult {
    let mut d = normalize(desired);
    let mut warnings = Vec::new();
    for rule in matching_rules(&d, opts) {
        apply_path_rules(&mut d, rule, &mut warnings);
    }
    DiffResult {
        modified: true,
        missing: true,
        normalized_desired: Some(d),
        warnings,
        ..Default::default()
    }
}

/// Live without desired: `requiresPruning`, out of sync.
fn extraneous(live: &Value, opts: &DiffOptions) -> DiffResult {
    let mut l = normalize(live);
    let mut warnings = Vec::new();
    for rule in matching_rules(&l, opts) {
        apply_path_rules(&mut l, rule, &mut warnings);
    }
    DiffResult {
        modified: true,
        requires_pruning: true,
        normalized_live: Some(l),
        warnings,
        ..Default::default()
    }
}

/// Both sides present: normalize, drop ignored fields, predict live after apply, compare.
fn compare(desired: &Value, live: &Value, opts: &DiffOptions) -> DiffResult {
    let rules = matching_rules(desired, opts);
    let manager = opts.field_manager.as_str();
    let is_ours = |m: &str, op: &str| m == manager && op == "Apply";
    let ours = without_tracking_fields(managed::owned_by(live, is_ours));
    let others = managed::owned_by(live, |m, op| !is_ours(m, op));
    let trusted = managed::owned_by(live, |m, _| {
        rules.iter().any(|r| r.managed_fields_managers.iter().any(|t| t == m))
    });

    let mut d = normalize(desired);
    let mut l = normalize(live);
    let mut warnings = Vec::new();
    for rule in &rules {
        apply_path_rules(&mut d, rule, &mut warnings);
        let mut ignored = Vec::new();
        apply_path_rules(&mut l, rule, &mut ignored);
    }
    managed::remove_owned(&mut d, &trusted, 0);
    managed::remove_owned(&mut l, &trusted, 0);

    let mut predicted = overlay(&d, &l, Ctx::default(), 0);
    prune_removed(&ours, Some(&d), &mut predicted, Some(&others), 0);

    let mut paths = Vec::new();
    diff_paths(&l, &predicted, &mut String::new(), &mut paths, 0);
    DiffResult {
        modified: predicted != l,
        paths,
        normalized_desired: Some(predicted),
        normalized_live: Some(l),
        warnings,
        ..Default::default()
    }
}

/// The ignore rules that select `obj`.
fn matching_rules<'a>(obj: &Value, opts: &'a DiffOptions) -> Vec<&'a ResourceIgnoreDifferences> {
    let key = ObjectKey::of(obj);
    opts.ignore_differences
        .iter()
        .filter(|r| ignore::rule_matches(r, &key))
        .collect()
}

/// Removes a rule's `jsonPointers` and `jqPathExpressions` from `obj`, collecting unsupported expressions.
fn apply_path_rules(obj: &mut Value, rule: &ResourceIgnoreDifferences, warnings: &mut Vec<String>) {
    for pointer in &rule.json_pointers {
        ignore::remove_pointer(obj, pointer);
    }
    for expr in &rule.jq_path_expressions {
        if let Err(w) = ignore::remove_jq(obj, expr) {
            warnings.push(w);
        }
    }
}

/// Capstan's own set without the fields the applier always writes (tracking annotation, app-instance
/// label) and the server's (`status`): they are never "removed from Git".
fn without_tracking_fields(mut set: FieldSet) -> FieldSet {
    set.children.remove(&PathElement::Field("status".into()));
    if let Some(meta) = set.children.get_mut(&PathElement::Field("metadata".into())) {
        let drop = [
            ("labels", labels::APP_INSTANCE_LABEL),
            ("annotations", labels::TRACKING_ID_ANNOTATION),
            ("annotations", normalize::LAST_APPLIED),
        ];
        for (map, key) in drop {
            if let Some(m) = meta.children.get_mut(&PathElement::Field(map.into())) {
                m.children.remove(&PathElement::Field(key.into()));
            }
        }
    }
    set
}

/// Live with desired applied, desired-subset style: desired values replace live values unless
/// equivalent (then live's spelling is kept), fields only in live stay, desired fields equivalent to
/// absent are not added. Equal to `l` exactly when live is in sync with desired.
fn overlay(d: &Value, l: &Value, ctx: Ctx<'_>, depth: usize) -> Value {
    if depth > MAX_DEPTH {
        return if d == l { l.clone() } else { d.clone() };
    }
    if l.is_null() && absent_equivalent(ctx, d, depth) {
        return l.clone();
    }
    match (d, l) {
        (Value::Null, _) => l.clone(),
        (Value::Object(dm), Value::Object(lm)) => overlay_map(dm, lm, ctx, depth),
        (Value::Array(da), Value::Array(la)) => overlay_list(da, la, ctx, depth),
        (Value::Object(_) | Value::Array(_), _) => d.clone(),
        (_, Value::Object(_) | Value::Array(_)) => d.clone(),
        _ if equivalent_at(ctx, d, l) => l.clone(),
        _ => d.clone(),
    }
}

/// Maps: live's fields (overlaid where desired has them), then desired-only fields not equivalent to
/// absent. Built in one pass, so the whole overlay is linear in the objects' size.
fn overlay_map(dm: &Map<String, Value>, lm: &Map<String, Value>, ctx: Ctx<'_>, depth: usize) -> Value {
    let mut out = Map::new();
    for (k, lv) in lm {
        let v = match dm.get(k) {
            Some(dv) => overlay(dv, lv, ctx.child(k), depth + 1),
            None => lv.clone(),
        };
        out.insert(k.clone(), v);
    }
    for (k, dv) in dm {
        if !lm.contains_key(k) && !absent_equivalent(ctx.child(k), dv, depth + 1) {
            out.insert(k.clone(), dv.clone());
        }
    }
    Value::Object(out)
}

/// Lists: list-maps (see [`list_keys`]) item by item by key, extra live items kept, new items appended;
/// other lists item by index when lengths match (so defaulted fields inside items, like a port's
/// `protocol: TCP`, are kept), replaced whole otherwise.
fn overlay_list(da: &[Value], la: &[Value], ctx: Ctx<'_>, depth: usize) -> Value {
    if let Some(keys) = list_keys(ctx.key, da) {
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, item) in la.iter().enumerate() {
            if let Some(k) = item_key(item, &keys) {
                index.entry(k).or_insert(i);
            }
        }
        let mut matched: Vec<Option<&Value>> = vec![None; la.len()];
        let mut added = Vec::new();
        for item in da {
            match item_key(item, &keys).and_then(|k| index.get(&k)) {
                Some(&i) => matched[i] = Some(item),
                None => added.push(item.clone()),
            }
        }
        let kept = la.iter().zip(matched).map(|(l, d)| match d {
            Some(d) => overlay(d, l, ctx.item(), depth + 1),
            None => l.clone(),
        });
        return Value::Array(kept.chain(added).collect());
    }
    if da.len() == la.len() {
        let items = da.iter().zip(la).map(|(d, l)| overlay(d, l, ctx.item(), depth + 1));
        return Value::Array(items.collect());
    }
    Value::Array(da.to_vec())
}

/// Key fields of a list-map, with the default of fields the server fills in (`protocol: TCP`). Known
/// Kubernetes merge keys by field name (containers/volumes/env by `name`, ports by port and protocol,
/// volumeMounts by `mountPath`, ...), else `name` when every item has a string one. `None` (compare by
/// index) unless every desired item is a map with the key fields and the keys are unique.
fn list_keys(field: Option<&str>, items: &[Value]) -> Option<Vec<(&'static str, Option<Value>)>> {
    let all_have = |k: &str| items.iter().all(|i| i.get(k).is_some_and(|v| !v.is_null()));
    let tcp = || Some(Value::String("TCP".into()));
    let keys = match field.unwrap_or_default() {
        "ports" if all_have("containerPort") => vec![("containerPort", None), ("protocol", tcp())],
        "ports" if all_have("port") => vec![("port", None), ("protocol", tcp())],
        "volumeMounts" => vec![("mountPath", None)],
        "volumeDevices" => vec![("devicePath", None)],
        "hostAliases" => vec![("ip", None)],
        "topologySpreadConstraints" => vec![("topologyKey", None), ("whenUnsatisfiable", None)],
        "conditions" => vec![("type", None)],
        _ if items.iter().all(|i| i.get("name").is_some_and(Value::is_string)) => vec![("name", None)],
        _ => return None,
    };
    let mut seen = std::collections::HashSet::new();
    for item in items {
        let k = item_key(item, &keys)?;
        if !seen.insert(k) {
            return None;
        }
    }
    (!items.is_empty()).then_some(keys)
}

/// The key of a list-map item as text (numbers and numeric strings alike), `None` when a key field
/// without default is missing.
fn item_key(item: &Value, keys: &[(&'static str, Option<Value>)]) -> Option<String> {
    item.as_object()?;
    let mut text = String::new();
    for (field, default) in keys {
        let v = item.get(*field).filter(|v| !v.is_null()).or(default.as_ref())?;
        text.push_str(&key_text(v));
        text.push('\u{0}');
    }
    Some(text)
}

fn key_text(v: &Value) -> String {
    let as_number = match v {
        Value::Number(n) => n.as_f64(),
        Value::String(s) if !s.trim().is_empty() => s.trim().parse::<f64>().ok().filter(|f| f.is_finite()),
        _ => None,
    };
    match as_number {
        Some(f) if f.fract() == 0.0 && f.abs() < 1e15 => format!("n:{}", f as i64),
        Some(f) => format!("n:{f}"),
        None => format!("j:{v}"),
    }
}

/// Drops from `predicted` the fields Capstan owns (`set`) that desired no longer has and no other manager
/// owns — what the next server-side apply removes. Leaves go; list items Capstan created go whole; maps
/// are descended so fields of other managers and server defaults stay.
fn prune_removed(
    set: &FieldSet,
    desired: Option<&Value>,
    predicted: &mut Value,
    others: Option<&FieldSet>,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        return;
    }
    let mut remove: Vec<Locator> = Vec::new();
    for (elem, child) in &set.children {
        let other = others.and_then(|o| o.child(elem));
        let d_sub = desired
            .and_then(|d| locate(d, elem).first().and_then(|loc| loc.get(d)))
            .filter(|v| !v.is_null());
        for loc in locate(predicted, elem) {
            if d_sub.is_some() && child.is_leaf() {
                continue;
            }
            if d_sub.is_none() && other.is_none() && (child.is_leaf() || !matches!(elem, PathElement::Field(_))) {
                remove.push(loc);
                continue;
            }
            if let Some(sub) = loc.get_mut(predicted) {
                prune_removed(child, d_sub, sub, other, depth + 1);
                let emptied = sub.as_object().is_some_and(|m| m.is_empty());
                if d_sub.is_none() && other.is_none() && emptied {
                    remove.push(loc);
                }
            }
        }
    }
    remove_all(predicted, &remove);
}

/// JSON pointers where `a` and `b` differ (maps by key, same-length lists by index, anything else whole).
fn diff_paths(a: &Value, b: &Value, ptr: &mut String, out: &mut Vec<String>, depth: usize) {
    if a == b || out.len() >= MAX_PATHS {
        return;
    }
    if depth > MAX_DEPTH {
        out.push(ptr.clone());
        return;
    }
    let len = ptr.len();
    match (a, b) {
        (Value::Object(am), Value::Object(bm)) => {
            let mut keys: Vec<&String> = am.keys().chain(bm.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                ptr.push('/');
                ptr.push_str(&Locator::Key(k.clone()).token());
                diff_paths(
                    am.get(k).unwrap_or(&Value::Null),
                    bm.get(k).unwrap_or(&Value::Null),
                    ptr,
                    out,
                    depth + 1,
                );
                ptr.truncate(len);
            }
        }
        (Value::Array(aa), Value::Array(ba)) if aa.len() == ba.len() => {
            for (i, (x, y)) in aa.iter().zip(ba).enumerate() {
                ptr.push('/');
                ptr.push_str(&i.to_string());
                diff_paths(x, y, ptr, out, depth + 1);
                ptr.truncate(len);
            }
        }
        _ => out.push(ptr.clone()),
    }
}

/// A YAML unified diff (`--- live` / `+++ desired`) of two objects, masked again here (idempotently) so
/// no caller can print an unmasked Secret through it. Empty when equal.
pub fn unified_diff(live: Option<&Value>, desired: Option<&Value>) -> String {
    let mut l = live.cloned();
    let mut d = desired.cloned();
    mask::hide_secret_data(&mut [d.as_mut(), l.as_mut()], &[]);
    let text_l = to_yaml(l.as_ref());
    let text_d = to_yaml(d.as_ref());
    if text_l == text_d {
        return String::new();
    }
    similar::TextDiff::from_lines(&text_l, &text_d)
        .unified_diff()
        .context_radius(3)
        .header("live", "desired")
        .to_string()
}

fn to_yaml(v: Option<&Value>) -> String {
    match v {
        None => String::new(),
        Some(v) => serde_saphyr::to_string(v).unwrap_or_else(|_| serde_json::to_string_pretty(v).unwrap_or_default()),
    }
}

/// A resource's contribution to the Application's sync status (Argo CD `controller/state.go`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ResourceSync {
    /// `None` for hooks and `Skip` resources: they have no sync status.
    pub status: Option<SyncStatusCode>,
    /// The resource is a hook.
    pub hook: bool,
    /// Live exists, desired does not.
    pub requires_pruning: bool,
    /// Extraneous and annotated `compare-options: IgnoreExtraneous`: reported, not counted.
    pub ignore_extraneous: bool,
}

impl ResourceSync {
    /// The sync contribution of a compared resource.
    pub fn of(desired: Option<&Value>, live: Option<&Value>, result: &DiffResult) -> ResourceSync {
        let Some(obj) = desired.or(live) else {
            return ResourceSync::default();
        };
        let hook = object::is_hook(obj);
        let status = if hook || object::is_skipped(obj) {
            None
        } else {
            Some(result.sync_status())
        };
        let ignore_extraneous = result.requires_pruning
            && object::option(&object::compare_options(obj), "IgnoreExtraneous") == Some("true");
        ResourceSync {
            status,
            hook,
            requires_pruning: result.requires_pruning,
            ignore_extraneous,
        }
    }

    /// Whether this resource makes the Application OutOfSync.
    pub fn counts_out_of_sync(&self) -> bool {
        self.status == Some(SyncStatusCode::OutOfSync) && !self.ignore_extraneous
    }
}

/// The Application's sync status: OutOfSync if any non-hook, non-IgnoreExtraneous resource is out of sync
/// (modified, missing or requiring pruning), Synced otherwise. `Unknown` (comparison error) is the
/// caller's to decide.
pub fn app_sync_status<R: Borrow<ResourceSync>>(resources: impl IntoIterator<Item = R>) -> SyncStatusCode {
    if resources.into_iter().any(|r| r.borrow().counts_out_of_sync()) {
        SyncStatusCode::OutOfSync
    } else {
        SyncStatusCode::Synced
    }
}

#[cfg(test)]
mod tests;
