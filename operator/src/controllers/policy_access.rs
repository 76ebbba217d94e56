//! PolicySets as the controllers see them: which ones apply to an Application, where their Rego
//! comes from (inline or a ConfigMap key), and the evaluation of an Application's rendered state
//! against them. Shared by the Application controller (enforcement) and the PolicySet controller
//! (status).
//!
//! Scope rules (a tenant cannot gate another tenant's Applications): a PolicySet applies to the
//! Applications of its own namespace; one in the operator namespace applies to every namespace, or
//! to `spec.namespaces` when set. `spec.selector` narrows by Application label; an invalid selector
//! selects everything in scope (fail closed).

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client, ResourceExt};
use serde_json::{json, Value};

use crate::api::policy_set::{Enforcement, PolicyTarget};
use crate::api::{Application, PolicySet};
use crate::appset::generators::selector;
use crate::policy::{self, CompiledSet, PolicyError, Verdict};

/// Whether `set` applies to `app`.
pub fn applies_to(set: &PolicySet, app: &Application, operator_ns: &str) -> bool {
    let set_ns = set.namespace().unwrap_or_default();
    let app_ns = app.namespace().unwrap_or_default();
    let in_scope = if set_ns == operator_ns {
        set.spec.namespaces.is_empty() || set.spec.namespaces.contains(&app_ns)
    } else {
        set_ns == app_ns
    };
    if !in_scope {
        return false;
    }
    match &set.spec.selector {
        None => true,
        Some(s) if selector::validate(s).is_err() => true,
        Some(s) => {
            let labels: BTreeMap<String, String> = app.labels().clone();
            selector::matches(s, &labels)
        }
    }
}

/// The `(name, source)` modules of `set`: inline, or read from a ConfigMap key in its namespace.
pub async fn sources(client: &Client, set: &PolicySet) -> Result<Vec<(String, String)>, String> {
    let ns = set.namespace().unwrap_or_default();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let mut out = Vec::with_capacity(set.spec.policies.len());
    for p in &set.spec.policies {
        let source = match (&p.rego, &p.config_map_ref) {
            (Some(rego), _) => rego.clone(),
            (None, Some(r)) => {
                let cm = config_maps
                    .get_opt(&r.name)
                    .await
                    .map_err(|e| format!("policy {}: reading ConfigMap {ns}/{}: {e}", p.name, r.name))?
                    .ok_or_else(|| format!("policy {}: ConfigMap {ns}/{} not found", p.name, r.name))?;
                cm.data
                    .and_then(|d| d.get(&r.key).cloned())
                    .ok_or_else(|| format!("policy {}: ConfigMap {ns}/{} has no key {:?}", p.name, r.name, r.key))?
            }
            (None, None) => return Err(format!("policy {}: neither rego nor configMapRef is set", p.name)),
        };
        out.push((p.name.clone(), source));
    }
    Ok(out)
}

/// What the PolicySets that apply to one Application said about its rendered state.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Findings {
    /// Denials of `Deny` sets (and failures of `Deny` sets: fail closed), `PolicyDenied`.
    pub denied: Vec<String>,
    /// Messages of `Warn` sets, and warnings of every set but `DryRun` ones.
    pub warned: Vec<String>,
    /// `(PolicySet ns/name, messages)` of `DryRun` sets: reported on the PolicySet only.
    pub dry_run: Vec<(String, Vec<String>)>,
}

/// One PolicySet, resolved and compiled (or why not), ready to evaluate.
pub struct Prepared {
    /// `namespace/name`.
    pub key: String,
    /// `spec.enforcement`.
    pub enforcement: Enforcement,
    /// `spec.targets`.
    pub targets: Vec<PolicyTarget>,
    /// The compiled set, or why there is none.
    pub compiled: Result<policy::Compilation, String>,
}

/// Resolves and compiles (through `cache`) every set that applies to `app`.
pub async fn prepare(
    client: &Client,
    cache: &policy::Cache,
    sets: &[Arc<PolicySet>],
    app: &Application,
    operator_ns: &str,
) -> Vec<Prepared> {
    let mut out = Vec::new();
    for set in sets.iter().filter(|s| applies_to(s, app, operator_ns)) {
        let compiled = sources(client, set).await.map(|srcs| cache.get(&srcs));
        out.push(Prepared {
            key: format!("{}/{}", set.namespace().unwrap_or_default(), set.name_any()),
            enforcement: set.spec.enforcement,
            targets: set.spec.targets.clone(),
            compiled,
        });
    }
    out
}

/// The Application part of the inputs: its identity and spec (never its status).
pub fn application_input(app: &Application) -> Value {
    json!({
        "metadata": {
            "name": app.name_any(),
            "namespace": app.namespace(),
            "labels": app.labels(),
            "annotations": app.annotations(),
        },
        "spec": app.spec,
    })
}

/// Evaluates `prepared` against the Application (`application_input`, the destination `cluster`
/// and the `repository` with its resolved commit) and each rendered object. Pure and CPU-bound.
pub fn evaluate(
    prepared: &[Prepared],
    application: &Value,
    cluster: &Value,
    repository: &Value,
    desired: &[Value],
) -> Findings {
    let mut findings = Findings::default();
    for p in prepared {
        let verdict = match &p.compiled {
            Err(e) => Err(format!("PolicySet {} cannot be used: {e}", p.key)),
            Ok(c) => match c.as_ref() {
                Err(errors) => Err(format!("PolicySet {} does not compile: {}", p.key, joined(errors))),
                Ok(set) => evaluate_set(set, &p.targets, application, cluster, repository, desired)
                    .map_err(|e| format!("PolicySet {}: {e}", p.key)),
            },
        };
        match (p.enforcement, verdict) {
            (Enforcement::Deny, Err(e)) => findings.denied.push(e),
            (Enforcement::Deny, Ok(v)) => {
                findings.denied.extend(v.deny);
                findings.warned.extend(v.warn);
            }
            (Enforcement::Warn, Err(e)) => findings.warned.push(e),
            (Enforcement::Warn, Ok(v)) => {
                findings.warned.extend(v.deny);
                findings.warned.extend(v.warn);
            }
            (Enforcement::DryRun, Err(e)) => findings.dry_run.push((p.key.clone(), vec![e])),
            (Enforcement::DryRun, Ok(v)) => {
                let messages: Vec<String> = v.deny.into_iter().chain(v.warn).collect();
                if !messages.is_empty() {
                    findings.dry_run.push((p.key.clone(), messages));
                }
            }
        }
    }
    findings
}

fn evaluate_set(
    set: &CompiledSet,
    targets: &[PolicyTarget],
    application: &Value,
    cluster: &Value,
    repository: &Value,
    desired: &[Value],
) -> Result<Verdict, PolicyError> {
    let mut verdict = Verdict::default();
    if targets.contains(&PolicyTarget::Application) {
        let input = json!({"application": application, "cluster": cluster, "repository": repository});
        verdict.extend(set.evaluate(&input)?);
    }
    if targets.contains(&PolicyTarget::Resource) {
        for obj in desired {
            verdict.extend(set.evaluate(&json!({"resource": obj, "application": application}))?);
        }
    }
    verdict.deny.dedup();
    verdict.warn.dedup();
    Ok(verdict)
}

fn joined(errors: &[PolicyError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::policy_set::{Policy, PolicySetSpec};

    fn set(ns: &str, namespaces: &[&str], enforcement: Enforcement) -> PolicySet {
        let mut s = PolicySet::new(
            "p",
            PolicySetSpec {
                policies: vec![Policy {
                    name: "labels".into(),
                    rego: Some(String::new()),
                    config_map_ref: None,
                }],
                enforcement,
                namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
                ..PolicySetSpec::default()
            },
        );
        s.metadata.namespace = Some(ns.into());
        s
    }

    fn app(ns: &str, labels: &[(&str, &str)]) -> Application {
        let mut a = Application::new("web", Default::default());
        a.metadata.namespace = Some(ns.into());
        a.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        a
    }

    #[test]
    fn a_tenant_set_gates_only_its_own_namespace() {
        let tenant = set("team-a", &["team-b"], Enforcement::Deny);
        assert!(applies_to(&tenant, &app("team-a", &[]), "capstan-system"));
        assert!(
            !applies_to(&tenant, &app("team-b", &[]), "capstan-system"),
            "spec.namespaces is ignored"
        );
        let global = set("capstan-system", &[], Enforcement::Deny);
        assert!(applies_to(&global, &app("team-b", &[]), "capstan-system"));
        let listed = set("capstan-system", &["team-a"], Enforcement::Deny);
        assert!(applies_to(&listed, &app("team-a", &[]), "capstan-system"));
        assert!(!applies_to(&listed, &app("team-b", &[]), "capstan-system"));
    }

    #[test]
    fn the_selector_narrows_and_an_invalid_one_fails_closed() {
        let mut s = set("team-a", &[], Enforcement::Deny);
        s.spec.selector = Some(serde_json::from_value(json!({"matchLabels": {"tier": "prod"}})).unwrap());
        assert!(applies_to(&s, &app("team-a", &[("tier", "prod")]), "capstan-system"));
        assert!(!applies_to(&s, &app("team-a", &[("tier", "dev")]), "capstan-system"));
        s.spec.selector =
            Some(serde_json::from_value(json!({"matchExpressions": [{"key": "tier", "operator": "Bogus"}]})).unwrap());
        assert!(applies_to(&s, &app("team-a", &[("tier", "dev")]), "capstan-system"));
    }

    fn prepared(enforcement: Enforcement, rego: &str) -> Prepared {
        Prepared {
            key: "ns/p".into(),
            enforcement,
            targets: vec![PolicyTarget::Application, PolicyTarget::Resource],
            compiled: Ok(Arc::new(policy::compile(&[(
                "no-latest".to_string(),
                rego.to_string(),
            )]))),
        }
    }

    const NO_LATEST: &str = r#"
package capstan.images

deny contains msg if {
    some c in input.resource.spec.template.spec.containers
    endswith(c.image, ":latest")
    msg := sprintf("%s uses a :latest image", [input.resource.metadata.name])
}

warn contains msg if {
    input.repository.url == "https://git.example.com/legacy.git"
    msg := "legacy repository"
}
"#;

    fn inputs() -> (Value, Value, Value, Vec<Value>) {
        let deploy = json!({"kind": "Deployment", "metadata": {"name": "api"},
            "spec": {"template": {"spec": {"containers": [{"image": "nginx:latest"}]}}}});
        (
            json!({"metadata": {"name": "web"}}),
            json!({"server": "https://kubernetes.default.svc"}),
            json!({"url": "https://git.example.com/legacy.git", "revision": "abc"}),
            vec![deploy],
        )
    }

    #[test]
    fn enforcement_decides_where_messages_go() {
        let (a, c, r, d) = inputs();
        let f = evaluate(&[prepared(Enforcement::Deny, NO_LATEST)], &a, &c, &r, &d);
        assert_eq!(f.denied, vec!["[no-latest] api uses a :latest image".to_string()]);
        assert_eq!(f.warned, vec!["[no-latest] legacy repository".to_string()]);
        let f = evaluate(&[prepared(Enforcement::Warn, NO_LATEST)], &a, &c, &r, &d);
        assert!(f.denied.is_empty());
        assert_eq!(f.warned.len(), 2);
        let f = evaluate(&[prepared(Enforcement::DryRun, NO_LATEST)], &a, &c, &r, &d);
        assert!(f.denied.is_empty() && f.warned.is_empty());
        assert_eq!(f.dry_run[0].1.len(), 2);
    }

    #[test]
    fn a_deny_set_that_does_not_compile_denies_everything() {
        let (a, c, r, d) = inputs();
        let f = evaluate(
            &[prepared(Enforcement::Deny, "package x\ndeny contains")],
            &a,
            &c,
            &r,
            &d,
        );
        assert_eq!(f.denied.len(), 1);
        assert!(
            f.denied[0].starts_with("PolicySet ns/p does not compile"),
            "{:?}",
            f.denied
        );
        let f = evaluate(
            &[prepared(Enforcement::Warn, "package x\ndeny contains")],
            &a,
            &c,
            &r,
            &d,
        );
        assert!(f.denied.is_empty(), "a Warn set never blocks");
    }
}
