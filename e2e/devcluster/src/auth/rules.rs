//! RBAC policy rules as kube-apiserver's RBAC authorizer evaluates them: matching a request against a rule
//! (`*` wildcards, `*/subresource`, `resourceNames`, non-resource URL prefixes), and the escalation helpers
//! (`Covers`, rule breakdown, compaction and the compact text form used in "attempting to grant RBAC
//! permissions not currently held" messages). Pure functions over plain data, unit-tested here.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// One `PolicyRule`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Rule {
    pub verbs: Vec<String>,
    pub api_groups: Vec<String>,
    pub resources: Vec<String>,
    pub resource_names: Vec<String>,
    pub non_resource_urls: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

impl Rule {
    /// A rule from its JSON form (`rbac.authorization.k8s.io/v1` `PolicyRule`).
    pub fn from_json(v: &Value) -> Rule {
        Rule {
            verbs: strings(v, "verbs"),
            api_groups: strings(v, "apiGroups"),
            resources: strings(v, "resources"),
            resource_names: strings(v, "resourceNames"),
            non_resource_urls: strings(v, "nonResourceURLs"),
        }
    }

    /// The rules of a Role or ClusterRole object.
    pub fn list_from(obj: &Value) -> Vec<Rule> {
        obj.get("rules")
            .and_then(Value::as_array)
            .map(|a| a.iter().map(Rule::from_json).collect())
            .unwrap_or_default()
    }

    /// The JSON form, with empty lists omitted as the API server serializes them.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        for (k, v) in [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !v.is_empty() || k == "verbs" {
                m.insert(k.into(), json!(v));
            }
        }
        Value::Object(m)
    }

    pub fn new(verbs: &[&str], groups: &[&str], resources: &[&str]) -> Rule {
        let own = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: own(verbs),
            api_groups: own(groups),
            resources: own(resources),
            ..Default::default()
        }
    }

    pub fn urls(verbs: &[&str], urls: &[&str]) -> Rule {
        let own = |s: &[&str]| s.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: own(verbs),
            non_resource_urls: own(urls),
            ..Default::default()
        }
    }
}

/// What a request asks to do, as the authorizer sees it (`authorizer.Attributes`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attributes {
    pub verb: String,
    pub resource_request: bool,
    pub namespace: String,
    pub api_group: String,
    pub api_version: String,
    pub resource: String,
    pub subresource: String,
    pub name: String,
    /// The URL path of a non-resource request.
    pub path: String,
}

impl Attributes {
    pub fn resource(verb: &str, group: &str, resource: &str, subresource: &str, ns: &str, name: &str) -> Self {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            namespace: ns.into(),
            api_group: group.into(),
            api_version: "*".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    pub fn non_resource(verb: &str, path: &str) -> Self {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Default::default()
        }
    }
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], items: &[String]) -> bool {
    items.iter().all(|i| has(set, i))
}

pub fn verb_matches(rule: &Rule, verb: &str) -> bool {
    rule.verbs.iter().any(|v| v == "*" || v == verb)
}

pub fn api_group_matches(rule: &Rule, group: &str) -> bool {
    rule.api_groups.iter().any(|g| g == "*" || g == group)
}

/// `resource` or `resource/subresource`; a rule `*/sub` matches any resource's `sub`.
pub fn resource_matches(rule: &Rule, combined: &str, subresource: &str) -> bool {
    rule.resources.iter().any(|r| {
        r == "*"
            || r == combined
            || (!subresource.is_empty()
                && r.len() == subresource.len() + 2
                && r.starts_with("*/")
                && r.ends_with(subresource))
    })
}

pub fn resource_name_matches(rule: &Rule, name: &str) -> bool {
    rule.resource_names.is_empty() || has(&rule.resource_names, name)
}

/// `*` matches every path, `/apis/*` every path under `/apis/`.
pub fn non_resource_url_matches(rule: &Rule, path: &str) -> bool {
    rule.non_resource_urls
        .iter()
        .any(|u| u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
}

/// Whether `rule` allows the request (`RuleAllows`).
pub fn rule_allows(a: &Attributes, rule: &Rule) -> bool {
    if a.resource_request {
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        verb_matches(rule, &a.verb)
            && api_group_matches(rule, &a.api_group)
            && resource_matches(rule, &combined, &a.subresource)
            && resource_name_matches(rule, &a.name)
    } else {
        verb_matches(rule, &a.verb) && non_resource_url_matches(rule, &a.path)
    }
}

// ------------------------------------------------------------------------------------------------------------
// Escalation checks

/// One rule per (group, resource, verb[, name]) and per (URL, verb) (`BreakdownRule`).
pub fn breakdown(rule: &Rule) -> Vec<Rule> {
    let mut out = Vec::new();
    for g in &rule.api_groups {
        for r in &rule.resources {
            for v in &rule.verbs {
                let base = Rule::new(&[v], &[g], &[r]);
                if rule.resource_names.is_empty() {
                    out.push(base);
                } else {
                    for n in &rule.resource_names {
                        out.push(Rule {
                            resource_names: vec![n.clone()],
                            ..base.clone()
                        });
                    }
                }
            }
        }
    }
    for u in &rule.non_resource_urls {
        for v in &rule.verbs {
            out.push(Rule::urls(&[v], &[u]));
        }
    }
    out
}

fn resource_covers_all(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, "*") || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn non_resource_url_covers(owner: &str, sub: &str) -> bool {
    owner == sub || (owner.ends_with('*') && sub.starts_with(owner.trim_end_matches('*')))
}

/// Whether `owner` grants everything `sub` (one broken-down rule) does (`ruleCovers`).
pub fn rule_covers(owner: &Rule, sub: &Rule) -> bool {
    let verbs = has(&owner.verbs, "*") || has_all(&owner.verbs, &sub.verbs);
    let groups = has(&owner.api_groups, "*") || has_all(&owner.api_groups, &sub.api_groups);
    let resources = resource_covers_all(&owner.resources, &sub.resources);
    let urls = sub
        .non_resource_urls
        .iter()
        .all(|p| owner.non_resource_urls.iter().any(|o| non_resource_url_covers(o, p)));
    let names = if sub.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &sub.resource_names)
    };
    verbs && groups && resources && names && urls
}

/// Whether `owner` covers every rule of `wanted`, and the broken-down rules it misses (`Covers`).
pub fn covers(owner: &[Rule], wanted: &[Rule]) -> (bool, Vec<Rule>) {
    let missing: Vec<Rule> = wanted
        .iter()
        .flat_map(breakdown)
        .filter(|sub| !owner.iter().any(|o| rule_covers(o, sub)))
        .collect();
    (missing.is_empty(), missing)
}

/// Merge simple rules (one group, one resource, at most one name, no URLs) that differ only in verbs
/// (`CompactRules`).
pub fn compact(rules: &[Rule]) -> Vec<Rule> {
    let mut out = Vec::new();
    let mut simple: BTreeMap<(String, String, Option<String>), Rule> = BTreeMap::new();
    for r in rules {
        let is_simple = r.resource_names.len() <= 1
            && r.non_resource_urls.is_empty()
            && r.api_groups.len() == 1
            && r.resources.len() == 1;
        if !is_simple {
            out.push(r.clone());
            continue;
        }
        let key = (
            r.api_groups[0].clone(),
            r.resources[0].clone(),
            r.resource_names.first().cloned(),
        );
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(r.verbs.iter().cloned()),
            None => {
                simple.insert(key, r.clone());
            }
        }
    }
    out.extend(simple.into_values());
    out
}

/// Go's `%q` of a string slice: `["a" "b"]`.
pub fn go_quoted_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

/// Go's `%q` of a string (the characters RBAC names use need no escapes beyond `"` and `\`).
pub fn go_quote(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// `rbacv1helpers.CompactString`: `{APIGroups:[""], Resources:["pods"], Verbs:["get"]}`.
pub fn compact_string(r: &Rule) -> String {
    let mut parts = Vec::new();
    for (label, v) in [
        ("APIGroups", &r.api_groups),
        ("Resources", &r.resources),
        ("NonResourceURLs", &r.non_resource_urls),
        ("ResourceNames", &r.resource_names),
        ("Verbs", &r.verbs),
    ] {
        if !v.is_empty() {
            parts.push(format!("{label}:{}", go_quoted_list(v)));
        }
    }
    format!("{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes::resource(verb, group, resource, sub, "ns", name)
    }

    #[test]
    fn verbs_groups_and_resources_match_exactly_or_by_wildcard() {
        let r = Rule::new(&["get", "list"], &[""], &["configmaps"]);
        assert!(rule_allows(&res("get", "", "configmaps", "", ""), &r));
        assert!(rule_allows(&res("list", "", "configmaps", "", ""), &r));
        assert!(
            !rule_allows(&res("watch", "", "configmaps", "", ""), &r),
            "list does not grant watch"
        );
        assert!(!rule_allows(&res("get", "apps", "configmaps", "", ""), &r));
        assert!(!rule_allows(&res("get", "", "secrets", "", ""), &r));
        assert!(
            !rule_allows(&res("get", "", "configmaps", "status", ""), &r),
            "a subresource is separate"
        );
        let star = Rule::new(&["*"], &["*"], &["*"]);
        assert!(rule_allows(
            &res("deletecollection", "x.io", "things", "status", "n"),
            &star
        ));
    }

    #[test]
    fn subresources_need_their_own_or_a_star_rule() {
        let status = Rule::new(&["update"], &["capstan.dev"], &["applications/status"]);
        assert!(rule_allows(
            &res("update", "capstan.dev", "applications", "status", "a"),
            &status
        ));
        assert!(!rule_allows(
            &res("update", "capstan.dev", "applications", "", "a"),
            &status
        ));
        let any_status = Rule::new(&["get"], &["apps"], &["*/status"]);
        assert!(rule_allows(
            &res("get", "apps", "deployments", "status", ""),
            &any_status
        ));
        assert!(!rule_allows(
            &res("get", "apps", "deployments", "scale", ""),
            &any_status
        ));
        assert!(!rule_allows(&res("get", "apps", "deployments", "", ""), &any_status));
    }

    #[test]
    fn resource_names_restrict_to_named_requests() {
        let r = Rule {
            resource_names: vec!["cfg".into()],
            ..Rule::new(&["get", "list"], &[""], &["configmaps"])
        };
        assert!(rule_allows(&res("get", "", "configmaps", "", "cfg"), &r));
        assert!(!rule_allows(&res("get", "", "configmaps", "", "other"), &r));
        assert!(
            !rule_allows(&res("list", "", "configmaps", "", ""), &r),
            "an unnamed list is not covered"
        );
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix_star() {
        let r = Rule::urls(&["get"], &["/healthz", "/apis/*"]);
        assert!(rule_allows(&Attributes::non_resource("get", "/healthz"), &r));
        assert!(!rule_allows(&Attributes::non_resource("get", "/healthz/etcd"), &r));
        assert!(rule_allows(&Attributes::non_resource("get", "/apis/apps/v1"), &r));
        assert!(!rule_allows(&Attributes::non_resource("get", "/apis"), &r));
        assert!(!rule_allows(&Attributes::non_resource("post", "/healthz"), &r));
        assert!(
            !rule_allows(&res("get", "", "healthz", "", ""), &r),
            "URL rules never grant resources"
        );
    }

    #[test]
    fn covers_breaks_rules_down_and_reports_what_is_missing() {
        let owner = vec![
            Rule::new(&["get", "list"], &[""], &["configmaps", "pods/*"]),
            Rule::new(&["*"], &["apps"], &["*/scale"]),
            Rule::urls(&["get"], &["/api/*"]),
        ];
        assert!(covers(&owner, &[Rule::new(&["get"], &[""], &["configmaps"])]).0);
        assert!(covers(&owner, &[Rule::new(&["update"], &["apps"], &["deployments/scale"])]).0);
        assert!(covers(&owner, &[Rule::urls(&["get"], &["/api/v1"])]).0);
        let (ok, missing) = covers(&owner, &[Rule::new(&["get", "delete"], &["", "apps"], &["configmaps"])]);
        assert!(!ok);
        assert_eq!(
            compact(&missing).iter().map(compact_string).collect::<Vec<_>>(),
            vec![
                r#"{APIGroups:[""], Resources:["configmaps"], Verbs:["delete"]}"#,
                r#"{APIGroups:["apps"], Resources:["configmaps"], Verbs:["get" "delete"]}"#,
            ]
        );
        let named = Rule {
            resource_names: vec!["a".into()],
            ..Rule::new(&["get"], &[""], &["secrets"])
        };
        assert!(
            !covers(
                std::slice::from_ref(&named),
                &[Rule::new(&["get"], &[""], &["secrets"])]
            )
            .0
        );
        assert!(covers(&[Rule::new(&["get"], &[""], &["secrets"])], &[named]).0);
    }

    #[test]
    fn json_round_trip_omits_empty_lists() {
        let v = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let r = Rule::from_json(&v);
        assert_eq!(r.to_json(), v);
        assert_eq!(Rule::list_from(&json!({"rules": [v]})).len(), 1);
    }
}
