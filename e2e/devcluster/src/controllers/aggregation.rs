//! ClusterRole aggregation: a ClusterRole with an `aggregationRule` gets, as its `rules`, the rules of every
//! other ClusterRole its selectors match (in name order, without duplicates), kept up to date as those roles
//! come and go. This is how `admin`, `edit` and `view` grow when a CRD's ClusterRole carries an
//! `aggregate-to-*` label, exactly as kube-controller-manager's clusterrole-aggregation controller does.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use crate::auth::rbac::RBAC_GROUP;
use crate::auth::rules::Rule;
use crate::registry::res_key;
use crate::server::ops::Sub;
use crate::server::Shared;
use crate::store::{Event, ObjRef};

const MANAGER: &str = "clusterrole-aggregation-controller";

pub async fn run(sh: Arc<Shared>, mut rx: UnboundedReceiver<Arc<Event>>) {
    let key = res_key(RBAC_GROUP, "clusterroles");
    sync_all(&sh);
    while let Some(ev) = rx.recv().await {
        if ev.obj.res == key {
            sync_all(&sh);
        }
    }
}

/// Whether a `metav1.LabelSelector` (JSON) matches `labels`. A null selector matches nothing, `{}` all.
pub fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let Some(sel) = sel.as_object() else { return false };
    let label = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let exact = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.iter().all(|(k, v)| label(k).is_some() && label(k) == v.as_str()));
    let exprs = sel.get("matchExpressions").and_then(Value::as_array);
    exact
        && exprs.is_none_or(|es| {
            es.iter().all(|e| {
                let key = e.get("key").and_then(Value::as_str).unwrap_or("");
                let values: Vec<&str> = e
                    .get("values")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                match (e.get("operator").and_then(Value::as_str), label(key)) {
                    (Some("In"), Some(v)) => values.contains(&v),
                    (Some("NotIn"), v) => v.is_none_or(|v| !values.contains(&v)),
                    (Some("Exists"), v) => v.is_some(),
                    (Some("DoesNotExist"), v) => v.is_none(),
                    _ => false,
                }
            })
        })
}

/// The rules an aggregated ClusterRole should have, given every ClusterRole.
pub fn aggregate(role: &Value, all: &[Arc<Value>]) -> Vec<Value> {
    let name = role.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
    let mut sorted: Vec<&Arc<Value>> = all.iter().collect();
    sorted.sort_by_key(|r| {
        r.pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    });
    let selectors = role
        .pointer("/aggregationRule/clusterRoleSelectors")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let mut seen: Vec<Rule> = Vec::new();
    let mut out = Vec::new();
    for sel in &selectors {
        for other in &sorted {
            let other_name = other.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
            let labels = other.pointer("/metadata/labels").and_then(Value::as_object);
            if other_name == name || !selector_matches(sel, labels) {
                continue;
            }
            for rule in other.get("rules").and_then(Value::as_array).into_iter().flatten() {
                let parsed = Rule::from_json(rule);
                if !seen.contains(&parsed) {
                    seen.push(parsed);
                    out.push(rule.clone());
                }
            }
        }
    }
    out
}

fn sync_all(sh: &Shared) {
    let key = res_key(RBAC_GROUP, "clusterroles");
    let (_, all) = sh.store.list(&key, None);
    for role in all
        .iter()
        .filter(|r| r.get("aggregationRule").is_some_and(|a| !a.is_null()))
    {
        let rules = aggregate(role, &all);
        let current: Vec<Rule> = Rule::list_from(role);
        if current == rules.iter().map(Rule::from_json).collect::<Vec<_>>() {
            continue;
        }
        let r = ObjRef {
            res: key.clone(),
            ns: String::new(),
            name: role
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        };
        super::edit(sh, &r, Sub::Main, MANAGER, |obj| {
            obj["rules"] = Value::Array(rules.clone());
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cr(name: &str, labels: Value, rules: Value) -> Arc<Value> {
        Arc::new(json!({"metadata": {"name": name, "labels": labels}, "rules": rules}))
    }

    #[test]
    fn aggregation_collects_matching_roles_in_name_order_without_duplicates() {
        let view = json!({"metadata": {"name": "view"},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]}});
        let a = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let b = json!({"apiGroups": ["x.io"], "resources": ["things"], "verbs": ["list"]});
        let all = vec![
            cr("z-role", json!({"agg": "true"}), json!([a.clone()])),
            cr("a-role", json!({"agg": "true"}), json!([b.clone(), a.clone()])),
            cr("other", json!({"agg": "false"}), json!([{"verbs": ["*"]}])),
            Arc::new(view.clone()),
        ];
        assert_eq!(aggregate(&view, &all), vec![b, a]);
    }

    #[test]
    fn label_selectors() {
        let labels = json!({"a": "1", "b": "2"});
        let l = labels.as_object();
        assert!(selector_matches(&json!({}), l));
        assert!(!selector_matches(&Value::Null, l));
        assert!(selector_matches(&json!({"matchLabels": {"a": "1"}}), l));
        assert!(!selector_matches(&json!({"matchLabels": {"a": "2"}}), l));
        let expr = |op: &str, vals: Value| json!({"matchExpressions": [{"key": "b", "operator": op, "values": vals}]});
        assert!(selector_matches(&expr("In", json!(["2", "3"])), l));
        assert!(!selector_matches(&expr("NotIn", json!(["2"])), l));
        assert!(selector_matches(&expr("Exists", json!([])), l));
        assert!(!selector_matches(&expr("DoesNotExist", json!([])), l));
        assert!(selector_matches(&expr("DoesNotExist", json!([])), None));
    }
}
