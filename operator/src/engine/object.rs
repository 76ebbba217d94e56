//! Object identity and the per-resource annotations that drive sync, read the same way whether a manifest
//! carries Capstan's (`capstan.dev/...`) or Argo CD's (`argocd.argoproj.io/...`) keys, with Helm hook
//! annotations mapped as Argo CD maps them. Objects are plain `serde_json::Value`s: rendered manifests and
//! live objects of any kind, CRs included, without a typed model.
//!
//! Pure: no I/O. Shared by `diff`, `plan`, `health` and `status`.

use std::collections::BTreeSet;
use std::fmt;

use serde_json::Value;

use crate::api::application::HookType;
use crate::api::labels;

/// Identity of an object inside one destination cluster: group, kind, namespace, name (Argo CD's
/// `ResourceKey`). `namespace` is empty for cluster-scoped objects. The version is deliberately not part of
/// the key: `apps/v1` and `apps/v1beta2` Deployments are the same object.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    pub group: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    pub fn new(group: &str, kind: &str, namespace: &str, name: &str) -> Self {
        ObjectKey {
            group: group.into(),
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The key of `obj`, from its apiVersion, kind, metadata.namespace and metadata.name.
    pub fn of(obj: &Value) -> ObjectKey {
        let (group, _) = group_version(obj);
        ObjectKey::new(&group, kind(obj), namespace(obj), name(obj))
    }
}

impl fmt::Display for ObjectKey {
    /// `<group>/<kind>:<namespace>/<name>`, the resource part of a tracking id.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}:{}/{}", self.group, self.kind, self.namespace, self.name)
    }
}

/// `(group, version)` of `obj`'s apiVersion (`"apps/v1"` → `("apps", "v1")`, `"v1"` → `("", "v1")`).
pub fn group_version(obj: &Value) -> (String, String) {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version.to_string()),
    }
}

/// `metadata.<field>`. Not `Value::pointer`, which allocates a `String` per path segment: these accessors run
/// several times per object in every comparison and sync of every Application.
pub fn metadata_field<'a>(obj: &'a Value, field: &str) -> Option<&'a Value> {
    obj.get("metadata").and_then(|m| m.get(field))
}

pub fn kind(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or_default()
}

pub fn name(obj: &Value) -> &str {
    metadata_field(obj, "name").and_then(Value::as_str).unwrap_or_default()
}

pub fn namespace(obj: &Value) -> &str {
    metadata_field(obj, "namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `metadata.generateName`, for hooks that let the server pick their name.
pub fn generate_name(obj: &Value) -> Option<&str> {
    metadata_field(obj, "generateName")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
}

/// The value of an annotation.
pub fn annotation<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    metadata_field(obj, "annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The value of a label.
pub fn label<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    metadata_field(obj, "labels")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// The first of `keys` (Capstan's key first, then Argo CD's) that is set.
pub fn annotation_any<'a>(obj: &'a Value, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| annotation(obj, k))
}

/// Sync wave: `capstan.dev/sync-wave` / `argocd.argoproj.io/sync-wave`, else `helm.sh/hook-weight` for Helm
/// hooks, else 0. An unparsable value counts as 0, as in Argo CD.
pub fn sync_wave(obj: &Value) -> i64 {
    let raw = annotation_any(obj, &labels::SYNC_WAVE_ANNOTATIONS).or_else(|| {
        if is_helm_hook(obj) {
            annotation(obj, HELM_HOOK_WEIGHT)
        } else {
            None
        }
    });
    raw.and_then(|w| w.trim().parse().ok()).unwrap_or(0)
}

/// Helm's hook annotation, mapped onto Argo CD hooks.
pub const HELM_HOOK: &str = "helm.sh/hook";
/// Helm's hook weight, used as the sync wave of Helm hooks.
pub const HELM_HOOK_WEIGHT: &str = "helm.sh/hook-weight";
/// Helm's hook delete policy, mapped onto Argo CD's.
pub const HELM_HOOK_DELETE_POLICY: &str = "helm.sh/hook-delete-policy";

fn is_helm_hook(obj: &Value) -> bool {
    !helm_hook_types(obj).is_empty()
}

/// Hook types from `helm.sh/hook`: pre-install/pre-upgrade → PreSync, post-install/post-upgrade → PostSync,
/// pre-delete → PreDelete, post-delete → PostDelete. `crd-install` and the rest are not hooks (Argo CD).
fn helm_hook_types(obj: &Value) -> BTreeSet<HookTypeOrd> {
    let Some(raw) = annotation(obj, HELM_HOOK) else {
        return BTreeSet::new();
    };
    raw.split(',')
        .filter_map(|h| match h.trim() {
            "pre-install" | "pre-upgrade" => Some(HookType::PreSync),
            "post-install" | "post-upgrade" => Some(HookType::PostSync),
            "pre-delete" => Some(HookType::PreDelete),
            "post-delete" => Some(HookType::PostDelete),
            _ => None,
        })
        .map(HookTypeOrd)
        .collect()
}

/// `HookType` with a total order, so hook sets are deterministic.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct HookTypeOrd(HookType);

impl HookTypeOrd {
    fn rank(self) -> u8 {
        match self.0 {
            HookType::PreSync => 0,
            HookType::Sync => 1,
            HookType::PostSync => 2,
            HookType::SyncFail => 3,
            HookType::PreDelete => 4,
            HookType::PostDelete => 5,
            HookType::Skip => 6,
        }
    }
}

impl PartialOrd for HookTypeOrd {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for HookTypeOrd {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.rank().cmp(&other.rank())
    }
}

fn parse_hook_type(s: &str) -> Option<HookType> {
    match s.trim() {
        "PreSync" => Some(HookType::PreSync),
        "Sync" => Some(HookType::Sync),
        "PostSync" => Some(HookType::PostSync),
        "SyncFail" => Some(HookType::SyncFail),
        "PreDelete" => Some(HookType::PreDelete),
        "PostDelete" => Some(HookType::PostDelete),
        "Skip" => Some(HookType::Skip),
        _ => None,
    }
}

/// The hook types of `obj`, in phase order; empty for an ordinary resource. The Capstan/Argo CD annotation
/// wins over `helm.sh/hook` when both are present (Argo CD behaviour).
pub fn hook_types(obj: &Value) -> Vec<HookType> {
    if let Some(raw) = annotation_any(obj, &labels::HOOK_ANNOTATIONS) {
        let set: BTreeSet<HookTypeOrd> = raw.split(',').filter_map(parse_hook_type).map(HookTypeOrd).collect();
        return set.into_iter().map(|h| h.0).collect();
    }
    helm_hook_types(obj).into_iter().map(|h| h.0).collect()
}

/// Whether `obj` is a hook (any hook type other than `Skip`).
pub fn is_hook(obj: &Value) -> bool {
    hook_types(obj).iter().any(|h| *h != HookType::Skip)
}

/// Whether `obj` is marked `Skip`: never applied.
pub fn is_skipped(obj: &Value) -> bool {
    hook_types(obj).contains(&HookType::Skip)
}

/// Hook delete policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HookDeletePolicy {
    /// Delete the previous instance before creating the hook again (the default).
    BeforeHookCreation,
    /// Delete the hook once it succeeded.
    HookSucceeded,
    /// Delete the hook once it failed.
    HookFailed,
}

/// The delete policies of a hook; `[BeforeHookCreation]` when none is given (Argo CD's default).
pub fn hook_delete_policies(obj: &Value) -> Vec<HookDeletePolicy> {
    let capstan = annotation_any(obj, &labels::HOOK_DELETE_POLICY_ANNOTATIONS).map(|raw| {
        raw.split(',')
            .filter_map(|p| match p.trim() {
                "BeforeHookCreation" => Some(HookDeletePolicy::BeforeHookCreation),
                "HookSucceeded" => Some(HookDeletePolicy::HookSucceeded),
                "HookFailed" => Some(HookDeletePolicy::HookFailed),
                _ => None,
            })
            .collect::<BTreeSet<_>>()
    });
    let helm = || {
        annotation(obj, HELM_HOOK_DELETE_POLICY).map(|raw| {
            raw.split(',')
                .filter_map(|p| match p.trim() {
                    "before-hook-creation" => Some(HookDeletePolicy::BeforeHookCreation),
                    "hook-succeeded" => Some(HookDeletePolicy::HookSucceeded),
                    "hook-failed" => Some(HookDeletePolicy::HookFailed),
                    _ => None,
                })
                .collect::<BTreeSet<_>>()
        })
    };
    match capstan.or_else(helm) {
        Some(set) if !set.is_empty() => set.into_iter().collect(),
        _ => vec![HookDeletePolicy::BeforeHookCreation],
    }
}

/// Parsed `key=value` options from a comma-separated option list (sync-options, compare-options), in order.
/// Bare words (`IgnoreExtraneous`) get the value `"true"`.
pub fn parse_options(raw: &str) -> Vec<(String, String)> {
    raw.split(',')
        .map(str::trim)
        .filter(|o| !o.is_empty())
        .map(|o| match o.split_once('=') {
            Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
            None => (o.to_string(), "true".to_string()),
        })
        .collect()
}

/// Per-resource sync options from the annotation (`Prune=false,Replace=true,...`).
pub fn sync_options(obj: &Value) -> Vec<(String, String)> {
    annotation_any(obj, &labels::SYNC_OPTIONS_ANNOTATIONS)
        .map(parse_options)
        .unwrap_or_default()
}

/// Per-resource compare options from the annotation (`IgnoreExtraneous`, ...).
pub fn compare_options(obj: &Value) -> Vec<(String, String)> {
    annotation_any(obj, &labels::COMPARE_OPTIONS_ANNOTATIONS)
        .map(parse_options)
        .unwrap_or_default()
}

/// The value of option `key` in `options` (last one wins), case-sensitive key as Argo CD.
pub fn option<'a>(options: &'a [(String, String)], key: &str) -> Option<&'a str> {
    options.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// The tracking id Capstan writes on every object it applies:
/// `<app-namespace>/<app-name>:<group>/<kind>:<namespace>/<name>`.
pub fn tracking_id(app_namespace: &str, app_name: &str, key: &ObjectKey) -> String {
    format!("{app_namespace}/{app_name}:{key}")
}

/// The tracking id on a live object, if any.
pub fn tracking_id_of(obj: &Value) -> Option<&str> {
    annotation(obj, labels::TRACKING_ID_ANNOTATION)
}

/// Whether the live object's tracking annotation names exactly this Application and this object (a copied
/// annotation on another object does not match, so it is never adopted or pruned).
pub fn is_tracked_by(obj: &Value, app_namespace: &str, app_name: &str) -> bool {
    tracking_id_of(obj) == Some(tracking_id(app_namespace, app_name, &ObjectKey::of(obj)).as_str())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn key_and_tracking_id() {
        let d =
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "namespace": "shop"}});
        let key = ObjectKey::of(&d);
        assert_eq!(key.to_string(), "apps/Deployment:shop/web");
        assert_eq!(
            tracking_id("argocd", "guestbook", &key),
            "argocd/guestbook:apps/Deployment:shop/web"
        );
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        assert_eq!(ObjectKey::of(&cm).to_string(), "/ConfigMap:/c");
    }

    #[test]
    fn argo_and_capstan_annotations_are_equivalent() {
        let argo = json!({"metadata": {"annotations": {"argocd.argoproj.io/sync-wave": "-2", "argocd.argoproj.io/hook": "PreSync,PostSync"}}});
        let capstan = json!({"metadata": {"annotations": {"capstan.dev/sync-wave": "-2", "capstan.dev/hook": "PostSync,PreSync"}}});
        for o in [&argo, &capstan] {
            assert_eq!(sync_wave(o), -2);
            assert_eq!(hook_types(o), vec![HookType::PreSync, HookType::PostSync]);
            assert_eq!(hook_delete_policies(o), vec![HookDeletePolicy::BeforeHookCreation]);
        }
    }

    #[test]
    fn helm_hooks_map_like_argo_cd() {
        let h = json!({"metadata": {"annotations": {"helm.sh/hook": "pre-install,pre-upgrade", "helm.sh/hook-weight": "5", "helm.sh/hook-delete-policy": "hook-succeeded"}}});
        assert_eq!(hook_types(&h), vec![HookType::PreSync]);
        assert_eq!(sync_wave(&h), 5);
        assert_eq!(hook_delete_policies(&h), vec![HookDeletePolicy::HookSucceeded]);
        let crd_install =
            json!({"metadata": {"annotations": {"helm.sh/hook": "crd-install", "helm.sh/hook-weight": "5"}}});
        assert!(!is_hook(&crd_install));
        assert_eq!(sync_wave(&crd_install), 0);
    }

    #[test]
    fn options_parse() {
        let o = json!({"metadata": {"annotations": {"argocd.argoproj.io/sync-options": "Prune=false, Replace=true,ServerSideApply=true"}}});
        let opts = sync_options(&o);
        assert_eq!(option(&opts, "Prune"), Some("false"));
        assert_eq!(option(&opts, "Replace"), Some("true"));
        let c = json!({"metadata": {"annotations": {"capstan.dev/compare-options": "IgnoreExtraneous"}}});
        assert_eq!(option(&compare_options(&c), "IgnoreExtraneous"), Some("true"));
    }

    #[test]
    fn copied_tracking_annotation_does_not_match_another_object() {
        let o = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "copy", "namespace": "a",
            "annotations": {"capstan.dev/tracking-id": "ns/app:/ConfigMap:a/original"}}});
        assert!(!is_tracked_by(&o, "ns", "app"));
        let own = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "original", "namespace": "a",
            "annotations": {"capstan.dev/tracking-id": "ns/app:/ConfigMap:a/original"}}});
        assert!(is_tracked_by(&own, "ns", "app"));
    }
}
