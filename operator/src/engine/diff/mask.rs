//! Secret masking for every output of the diff (normalized objects, unified diffs), mirroring
//! gitops-engine's `diff.HideSecretData`: each `data`/`stringData` value and each sensitive annotation
//! (always `kubectl.kubernetes.io/last-applied-configuration`, which carries the whole Secret) is replaced
//! by `++++++++`; the same value on both sides gets the same mask and a different value a longer one, so
//! a diff still shows *that* a value changed without showing any value. Anchors: GHSA-47g2 (invalid
//! `stringData` values), GHSA-3v3m (server-side diff and sensitive annotations), CVE-2021-23135, CVE-2018-21034.

use std::collections::BTreeSet;

use serde_json::Value;

use super::normalize::{is_secret, LAST_APPLIED};

/// The first mask; later distinct values of the same key get `++++` more.
pub const MASK: &str = "++++++++";

/// Masks Secret values in place in every object of `objs` (a desired/live pair, either may be absent), if
/// any of them is a core Secret. Non-Secrets are left untouched. Masks are assigned per key across the
/// pair, so equal values share a mask. A `data`/`stringData` that is not a map (an invalid Secret) is
/// replaced whole. `sensitive_annotations` are masked in addition to the last-applied annotation.
pub fn hide_secret_data(objs: &mut [Option<&mut Value>], sensitive_annotations: &[String]) {
    if !objs.iter().flatten().any(|o| is_secret(o)) {
        return;
    }
    for field in ["data", "stringData"] {
        mask_keys(objs, &[field], |_| true);
    }
    mask_keys(objs, &["metadata", "annotations"], |k| {
        k == LAST_APPLIED || sensitive_annotations.iter().any(|s| s == k)
    });
}

/// A masked copy of one object (for outputs that show a single object, such as a manifest listing).
pub fn masked(obj: &Value, sensitive_annotations: &[String]) -> Value {
    let mut copy = obj.clone();
    hide_secret_data(&mut [Some(&mut copy)], sensitive_annotations);
    copy
}

fn field_mut<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    path.iter().try_fold(obj, |v, k| v.get_mut(*k))
}

/// Masks the values of the keys of the maps at `path` selected by `pick`.
fn mask_keys(objs: &mut [Option<&mut Value>], path: &[&str], pick: impl Fn(&str) -> bool) {
    let mut keys = BTreeSet::new();
    for obj in objs.iter_mut().flatten() {
        match field_mut(obj, path) {
            Some(Value::Object(m)) => keys.extend(m.keys().filter(|k| pick(k)).cloned()),
            Some(Value::Null) | None => {}
            // An invalid Secret (`data: "..."`, `stringData: [..]`): nothing of it may survive.
            Some(other) => *other = Value::String(MASK.to_string()),
        }
    }
    for key in keys {
        mask_key(objs, path, &key);
    }
}

/// Replaces the value of `key` on every side, equal values with equal masks (`HideSecretData`).
fn mask_key(objs: &mut [Option<&mut Value>], path: &[&str], key: &str) {
    let mut seen: Vec<(Value, String)> = Vec::new();
    let mut next = MASK.to_string();
    for obj in objs.iter_mut().flatten() {
        let Some(Value::Object(m)) = field_mut(obj, path) else {
            continue;
        };
        let Some(v) = m.get_mut(key) else {
            continue;
        };
        let mask = match seen.iter().find(|(value, _)| value == v) {
            Some((_, mask)) => mask.clone(),
            None => {
                let mask = next.clone();
                seen.push((v.clone(), mask.clone()));
                next.push_str("++++");
                mask
            }
        };
        *v = Value::String(mask);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equal_values_share_a_mask_and_different_values_do_not() {
        let mut a =
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"same": "eA==", "changed": "eQ==", "new": "eg=="}});
        let mut b =
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"same": "eA==", "changed": "dw==", "old": "dg=="}});
        hide_secret_data(&mut [Some(&mut a), Some(&mut b)], &[]);
        assert_eq!(a["data"]["same"], b["data"]["same"]);
        assert_ne!(a["data"]["changed"], b["data"]["changed"]);
        assert_eq!(a["data"]["changed"], json!(MASK));
        assert_eq!(b["data"]["changed"], json!("++++++++++++"));
        assert_eq!(a["data"]["new"], json!(MASK));
        assert_eq!(b["data"]["old"], json!(MASK));
    }

    #[test]
    fn invalid_secrets_and_annotations_are_masked() {
        let mut s = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"annotations": {LAST_APPLIED: "{\"data\":{\"k\":\"CANARY\"}}", "token": "CANARY", "team": "a"}},
            "data": "CANARY", "stringData": {"k": 5, "b": false, "l": ["CANARY"]}});
        hide_secret_data(&mut [Some(&mut s), None], &["token".to_string()]);
        let text = s.to_string();
        assert!(
            !text.contains("CANARY") && !text.contains(":5") && !text.contains("false"),
            "{text}"
        );
        assert_eq!(s["metadata"]["annotations"]["team"], json!("a"));
    }

    #[test]
    fn non_secrets_are_untouched() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"}});
        assert_eq!(masked(&cm, &[]), cm);
        let cr = json!({"apiVersion": "example.com/v1", "kind": "Secret", "data": {"k": "v"}});
        assert_eq!(masked(&cr, &[]), cr);
    }
}
