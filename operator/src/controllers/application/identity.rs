//! Whose rights an Application's writes use.
//!
//! Every write an Application causes — applies (dry runs included), prunes, hooks, the namespace of
//! `CreateNamespace=true`, cascade deletion and deletion hooks — goes through one *writer* handle. For an
//! Application outside the operator namespace that is the destination's connection impersonating a
//! ServiceAccount of the Application's namespace: `spec.destination.serviceAccountName`, else the
//! operator's `--default-service-account`. The cluster's RBAC then decides what the Application may do,
//! as it would for a `kubectl --as` of that ServiceAccount: no list of allowed kinds or namespaces is kept
//! here. An Application in the operator namespace belongs to the platform team and writes with the
//! operator's own rights unless it names a ServiceAccount.
//!
//! Reads for diff and health (the live cache, discovery) stay the operator's. There is no fallback: a
//! missing ServiceAccount stops the sync with `ServiceAccountNotFound`, and a Forbidden answer fails the
//! resource with the API server's message, which names the verb, the resource and the ServiceAccount.

use std::sync::Arc;

use kube::core::GroupVersionKind;
use kube::ResourceExt;

use super::status::Problem;
use crate::api::tenancy::validate_service_account_name;
use crate::api::Application;
use crate::cluster::{ops, ClusterHandle};
use crate::controllers::Context;

/// Reason of the condition when the ServiceAccount to impersonate does not exist.
pub const REASON_SA_NOT_FOUND: &str = "ServiceAccountNotFound";
/// Reason of the condition when `serviceAccountName` is not a valid name.
pub const REASON_INVALID_SA: &str = "InvalidServiceAccountName";

/// The identity of an Application's writes (see the module doc).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Identity {
    /// The operator's own rights (operator-namespace Applications that name no ServiceAccount).
    Operator,
    /// ServiceAccount `name` in namespace `namespace`, impersonated.
    ServiceAccount { namespace: String, name: String },
}

/// Decides the identity (pure): `sa` is `spec.destination.serviceAccountName`.
pub fn identity(
    app_namespace: &str,
    operator_namespace: &str,
    sa: Option<&str>,
    default_sa: &str,
) -> Result<Identity, Problem> {
    let name = match sa {
        Some(name) => name,
        None if app_namespace == operator_namespace => return Ok(Identity::Operator),
        None => default_sa,
    };
    validate_service_account_name(name).map_err(|m| Problem::invalid_spec(REASON_INVALID_SA, m))?;
    Ok(Identity::ServiceAccount {
        namespace: app_namespace.to_string(),
        name: name.to_string(),
    })
}

/// The identity of `app`'s writes under the operator's settings.
pub fn of_app(ctx: &Context, app: &Application) -> Result<Identity, Problem> {
    identity(
        &app.namespace().unwrap_or_default(),
        ctx.namespace(),
        app.spec.destination.service_account_name.as_deref(),
        &ctx.settings.default_service_account,
    )
}

/// The handle `app`'s writes go through on `cluster` (the destination's connection): `cluster` itself for
/// the operator's identity, else its impersonating handle, once the ServiceAccount was found on that
/// cluster (read with the operator's rights).
pub async fn writer(
    ctx: &Context,
    app: &Application,
    cluster: &Arc<ClusterHandle>,
) -> Result<Arc<ClusterHandle>, Problem> {
    let Identity::ServiceAccount { namespace, name } = of_app(ctx, app)? else {
        return Ok(cluster.clone());
    };
    let gvk = GroupVersionKind::gvk("", "v1", "ServiceAccount");
    let found = ops::get(cluster, &gvk, &namespace, &name).await.map_err(|e| {
        let kind = Problem::from_cluster(&e).kind;
        Problem::of_kind(
            kind,
            e.category(),
            format!("looking up the ServiceAccount to sync as: {e}"),
        )
    })?;
    if found.is_none() {
        return Err(Problem::new(
            REASON_SA_NOT_FOUND,
            format!(
                "ServiceAccount {namespace}/{name} not found on cluster {}: this Application's writes are made \
                 as that ServiceAccount; create it (and bind it the roles it needs) or set \
                 spec.destination.serviceAccountName",
                cluster.name()
            ),
        ));
    }
    cluster
        .impersonating(&namespace, &name)
        .map_err(|e| Problem::from_cluster(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::application::status::ProblemKind;

    const OP: &str = "capstan-system";

    fn sa(ns: &str, name: &str) -> Identity {
        Identity::ServiceAccount {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    #[test]
    fn tenants_default_to_the_default_service_account() {
        assert_eq!(
            identity("team-a", OP, None, "capstan-deployer"),
            Ok(sa("team-a", "capstan-deployer"))
        );
        assert_eq!(
            identity("team-a", OP, Some("web"), "capstan-deployer"),
            Ok(sa("team-a", "web"))
        );
    }

    #[test]
    fn the_operator_namespace_uses_the_operators_rights_unless_it_names_one() {
        assert_eq!(identity(OP, OP, None, "capstan-deployer"), Ok(Identity::Operator));
        assert_eq!(
            identity(OP, OP, Some("platform"), "capstan-deployer"),
            Ok(sa(OP, "platform"))
        );
    }

    #[test]
    fn bad_names_are_refused_never_widened() {
        for bad in [
            "team-b:admin",
            "system:serviceaccount:kube-system:default",
            "../x",
            "",
            " a",
            "A",
        ] {
            let refused = identity("team-a", OP, Some(bad), "capstan-deployer").unwrap_err();
            assert_eq!(refused.reason, REASON_INVALID_SA, "{bad:?}");
        }
        assert!(identity("team-a", OP, None, "bad:name").is_err());
    }

    /// The `serviceAccountName` schema of the generated Application CRD: (`minLength`, `maxLength`, the
    /// regular expression of its CEL rule).
    fn crd_rule() -> (usize, usize, String) {
        let crd = crate::api::crds()
            .into_iter()
            .find(|c| c.spec.names.kind == "Application")
            .expect("the Application CRD");
        let schema = serde_json::to_value(&crd.spec.versions[0].schema).expect("serialises");
        let node = &schema["openAPIV3Schema"]["properties"]["spec"]["properties"]["destination"]["properties"]
            ["serviceAccountName"];
        let rule = node["x-kubernetes-validations"][0]["rule"]
            .as_str()
            .expect("a CEL rule");
        assert_eq!(
            rule,
            format!("self.matches('{}')", crate::api::tenancy::SERVICE_ACCOUNT_NAME_REGEX),
            "the CRD's rule is the controller's pattern"
        );
        let regex = rule
            .strip_prefix("self.matches('")
            .and_then(|r| r.strip_suffix("')"))
            .expect("a matches() rule");
        let len = |k: &str| node[k].as_u64().expect("a length bound") as usize;
        (len("minLength"), len("maxLength"), regex.to_string())
    }

    /// The CEL rule cannot run on devcluster (no CEL), so the generated CRD's rule text is checked here and
    /// evaluated (its regular expression and length bounds) against the controller's own check on a table of
    /// names: both accept or both refuse (the controller with `InvalidSpec` / `InvalidServiceAccountName`).
    /// DNS-1123 *subdomains* with dots are refused by both on purpose: a label is what a ServiceAccount uses.
    #[test]
    fn the_crd_rule_and_the_controller_agree() {
        let (min, max, regex) = crd_rule();
        let re = regex::Regex::new(&regex).expect("the CRD's regex compiles");
        let crd_accepts = |name: &str| (min..=max).contains(&name.len()) && re.is_match(name);
        let long_ok = "a".repeat(63);
        let too_long = "a".repeat(64);
        let table: &[(&str, bool)] = &[
            ("a", true),
            ("capstan-deployer", true),
            ("0deployer9", true),
            ("a-b-c", true),
            (&long_ok, true),
            ("", false),
            (&too_long, false),
            ("Deployer", false),
            ("-deployer", false),
            ("deployer-", false),
            ("web.deployer", false),
            ("a..b", false),
            ("team-b:admin", false),
            ("system:serviceaccount:kube-system:default", false),
            ("a/b", false),
            ("a_b", false),
            (" a", false),
            ("déployeur", false),
        ];
        for (name, valid) in table {
            assert_eq!(crd_accepts(name), *valid, "CRD on {name:?}");
            match identity("team-a", OP, Some(name), "capstan-deployer") {
                Ok(found) => {
                    assert!(*valid, "controller accepted {name:?}");
                    assert_eq!(found, sa("team-a", name));
                }
                Err(p) => {
                    assert!(!*valid, "controller refused {name:?}: {}", p.message);
                    assert_eq!(
                        (p.reason, p.kind),
                        (REASON_INVALID_SA, ProblemKind::InvalidSpec),
                        "{name:?}"
                    );
                }
            }
        }
    }
}
