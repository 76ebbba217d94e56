use serde_json::json;

use super::*;

const LABELS: &str = r#"
package capstan.labels

deny contains msg if {
    input.resource.kind == "Deployment"
    not input.resource.metadata.labels.team
    msg := sprintf("%s %s has no team label", [input.resource.kind, input.resource.metadata.name])
}

warn contains msg if {
    input.resource.metadata.name == "legacy"
    msg := "legacy is deprecated"
}
"#;

fn one(name: &str, source: &str) -> Vec<(String, String)> {
    vec![(name.to_string(), source.to_string())]
}

fn deployment(name: &str, team: Option<&str>) -> Value {
    let mut d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}});
    if let Some(t) = team {
        d["metadata"]["labels"] = json!({"team": t});
    }
    json!({"resource": d, "application": {"metadata": {"name": "web"}}})
}

#[test]
fn deny_and_warn_sets_carry_the_policy_name() {
    let set = compile(&one("labels", LABELS)).expect("compiles");
    assert_eq!(set.len(), 1);
    let v = set.evaluate(&deployment("api", None)).expect("evaluates");
    assert_eq!(v.deny, vec!["[labels] Deployment api has no team label".to_string()]);
    assert!(v.warn.is_empty());
    let v = set.evaluate(&deployment("legacy", Some("core"))).expect("evaluates");
    assert!(v.deny.is_empty());
    assert_eq!(v.warn, vec!["[labels] legacy is deprecated".to_string()]);
    let v = set.evaluate(&deployment("api", Some("core"))).expect("evaluates");
    assert_eq!(v, Verdict::default());
}

#[test]
fn two_policies_may_share_a_package_and_a_policy_may_define_only_warn() {
    let warn_only = "package capstan.labels\n\nwarn contains \"always\" if { true }\n";
    let set = compile(&[
        ("labels".to_string(), LABELS.to_string()),
        ("notice".to_string(), warn_only.to_string()),
    ])
    .expect("compiles");
    let v = set.evaluate(&deployment("api", Some("core"))).expect("evaluates");
    assert!(v.deny.is_empty(), "{v:?}");
    assert_eq!(v.warn, vec!["[notice] always".to_string()]);
}

#[test]
fn syntax_and_semantic_errors_name_every_failing_policy() {
    let errors = compile(&[
        ("broken".to_string(), "package x\ndeny contains msg if {".to_string()),
        ("good".to_string(), LABELS.to_string()),
        (
            "unknown-fn".to_string(),
            "package y\ndeny contains msg if { msg := no_such_function(1) }\n".to_string(),
        ),
        (
            "v0".to_string(),
            "package z\ndeny[msg] { msg := \"old\" }\n".to_string(),
        ),
    ])
    .err()
    .expect("does not compile");
    let names: Vec<&str> = errors
        .iter()
        .map(|e| match e {
            PolicyError::Compile { policy, .. } => policy.as_str(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, vec!["broken", "unknown-fn", "v0"]);
    assert!(errors.iter().all(|e| e.category() == "PolicyCompileError"));
}

#[test]
fn oversized_modules_and_inputs_are_refused() {
    let huge = format!("package big\n# {}\n", "x".repeat(MAX_MODULE_BYTES));
    assert!(compile(&one("big", &huge)).is_err());
    let set = compile(&one("labels", LABELS)).expect("compiles");
    let input = json!({"resource": {"blob": "y".repeat(MAX_INPUT_BYTES)}});
    assert!(matches!(set.evaluate(&input), Err(PolicyError::InputTooLarge { .. })));
}

#[test]
fn a_runaway_policy_is_stopped_by_the_time_limit() {
    // Nine million iterations for n = 3000: far beyond the time bound (an empty input, as at
    // compile time, leaves the rule undefined at once).
    let slow = r#"
package slow

deny contains msg if {
    some i in numbers.range(1, input.n)
    some j in numbers.range(1, input.n)
    i * j == -1
    msg := "never"
}
"#;
    let set = compile(&one("slow", slow)).expect("compiles");
    let outcome = set.evaluate(&json!({"n": 3000}));
    assert!(matches!(outcome, Err(PolicyError::Timeout { .. })), "{outcome:?}");
}

#[test]
fn messages_are_bounded_in_number_and_length() {
    let many = r#"
package many

long := concat("", [x | some _ in numbers.range(1, 600); x := "z"])

deny contains msg if {
    some i in numbers.range(1, 30)
    msg := sprintf("%d %s", [i, long])
}
"#;
    let set = compile(&one("many", many)).expect("compiles");
    let v = set.evaluate(&json!({})).expect("evaluates");
    assert_eq!(v.deny.len(), MAX_MESSAGES);
    assert!(v.deny.iter().all(|m| m.chars().count() <= MAX_MESSAGE_CHARS + 1));
}

#[test]
fn the_cache_compiles_each_distinct_set_once() {
    let cache = Cache::default();
    let a = cache.get(&one("labels", LABELS));
    let b = cache.get(&one("labels", LABELS));
    assert!(Arc::ptr_eq(&a, &b));
    let c = cache.get(&one("other", LABELS));
    assert!(!Arc::ptr_eq(&a, &c), "the policy name is part of the key");
}
