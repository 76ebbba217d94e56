//! RBAC escalation prevention, as kube-apiserver's RBAC storage does it: nobody can grant permissions they
//! do not hold. Creating or updating a Role/ClusterRole needs every rule it grants (or the `escalate` verb
//! on it); a ClusterRole with an `aggregationRule` needs cluster-admin-level rights. Creating or updating a
//! binding needs the `bind` verb on the referenced role, or every permission of that role. `system:masters`
//! is exempt, and so are updates that only touch garbage-collection fields (owner references, finalizers).

use std::sync::Arc;

use serde_json::Value;

use crate::error::{ApiError, ApiResult};
use crate::server::ops::Admit;
use crate::server::Shared;

use super::rbac::RBAC_GROUP;
use super::rules::{compact, compact_string, covers, go_quoted_list, Attributes, Rule};
use super::{forbidden_for, UserInfo};

/// The admission hook for writes of `plural` in `ns` by `user`, if `plural` is an RBAC resource.
pub fn admit_hook(sh: &Arc<Shared>, user: &Arc<UserInfo>, plural: &str, group: &str, ns: &str) -> Option<Admit> {
    let kind = match (group, plural) {
        (RBAC_GROUP, "roles" | "clusterroles" | "rolebindings" | "clusterrolebindings") => plural.to_string(),
        _ => return None,
    };
    let (sh, user, ns) = (sh.clone(), user.clone(), ns.to_string());
    Some(Admit(Arc::new(move |old, new| check(&sh, &user, &kind, &ns, old, new))))
}

/// Everything but the metadata fields garbage collection may change, for `IsOnlyMutatingGCFields`.
fn without_gc_fields(v: &Value) -> Value {
    let mut v = v.clone();
    if let Some(m) = v.get_mut("metadata").and_then(Value::as_object_mut) {
        for k in ["ownerReferences", "finalizers", "managedFields", "resourceVersion"] {
            m.remove(k);
        }
    }
    v
}

fn name_of(v: &Value) -> &str {
    v.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("")
}

fn allowed(sh: &Shared, user: &UserInfo, verb: &str, resource: &str, ns: &str, name: &str) -> bool {
    let a = Attributes::resource(verb, RBAC_GROUP, resource, "", ns, name);
    sh.auth.authorizer.authorize(&sh.store, user, &a).allowed
}

/// The escalation check of one write.
pub fn check(sh: &Shared, user: &UserInfo, plural: &str, ns: &str, old: Option<&Value>, new: &Value) -> ApiResult<()> {
    if user.is_master() {
        return Ok(());
    }
    if old.is_some_and(|o| without_gc_fields(o) == without_gc_fields(new)) {
        return Ok(());
    }
    let name = name_of(new);
    match plural {
        "roles" | "clusterroles" => {
            if allowed(sh, user, "escalate", plural, ns, name) {
                return Ok(());
            }
            no_escalation(sh, user, ns, &Rule::list_from(new))
                .map_err(|m| forbidden_for(plural, RBAC_GROUP, name, &m))?;
            let aggregation = new.get("aggregationRule").filter(|a| !a.is_null());
            let aggregation_changed =
                aggregation.is_some() && old.and_then(|o| o.get("aggregationRule")) != aggregation;
            if plural == "clusterroles" && aggregation_changed {
                let full = [Rule::new(&["*"], &["*"], &["*"]), Rule::urls(&["*"], &["*"])];
                no_escalation(sh, user, ns, &full).map_err(|_| {
                    forbidden_for(
                        plural,
                        RBAC_GROUP,
                        name,
                        "must have cluster-admin privileges to use the aggregationRule",
                    )
                })?;
            }
            Ok(())
        }
        _ => {
            let kind = new.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or("");
            let role = new.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or("");
            let role_resource = if kind == "Role" { "roles" } else { "clusterroles" };
            if allowed(sh, user, "bind", role_resource, ns, role) {
                return Ok(());
            }
            let rules = sh
                .auth
                .authorizer
                .role_ref_rules(&sh.store, kind, role, ns)
                .map_err(|_| ApiError::not_found(role_resource, RBAC_GROUP, role))?;
            no_escalation(sh, user, ns, &rules).map_err(|m| forbidden_for(plural, RBAC_GROUP, name, &m))
        }
    }
}

/// `ConfirmNoEscalation`: `Err(message)` listing what `user` lacks in `ns` to grant `rules`.
fn no_escalation(sh: &Shared, user: &UserInfo, ns: &str, rules: &[Rule]) -> Result<(), String> {
    let (owned, errors) = sh.auth.authorizer.effective_rules(&sh.store, user, ns);
    let (ok, missing) = covers(&owned, rules);
    if ok {
        return Ok(());
    }
    let mut lines: Vec<String> = compact(&missing).iter().map(compact_string).collect();
    lines.sort();
    lines.dedup();
    let mut msg = format!(
        "user {:?} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        user.name,
        go_quoted_list(&user.groups),
        lines.join("\n")
    );
    if !errors.is_empty() {
        msg.push_str(&format!("; resolution errors: [{}]", errors.join(", ")));
    }
    Err(msg)
}
