//! Authentication, impersonation and authorization, in kube-apiserver's order and with its answers.
//!
//! Every request goes through [`check`] before it reaches a handler:
//! 1. **Authentication** ([`authn`]): a client certificate signed by the cluster CA (CN = user, O = groups),
//!    else a bearer token: the admin token of the kubeconfig, or a ServiceAccount token (bound tokens from
//!    the TokenRequest API, legacy tokens from token Secrets), verified on every request including that the
//!    ServiceAccount (and the object the token is bound to) still exists. A presented but invalid credential
//!    is `401 Unauthorized`; no credential at all is the anonymous user `system:anonymous` in
//!    `system:unauthenticated` (unless anonymous authentication is off, then it is a 401 too). On the plain
//!    HTTP port (`--insecure-http`) a request without credentials is `system:unsecured` in `system:masters`,
//!    as on kube-apiserver's former insecure port: client-go never sends a bearer token over plain HTTP,
//!    so kubectl could not authenticate there at all.
//! 2. **Impersonation** (`Impersonate-User`, `-Group`, `-Uid`, `-Extra-*`): each requested identity needs
//!    the `impersonate` verb on users/groups/serviceaccounts/uids/userextras; the request then runs as that
//!    identity ([`authn::impersonate`]).
//! 3. **Authorization** ([`rbac`]): RBAC decides on the request's attributes ([`request_info`]); a refusal
//!    is `403 Forbidden` with kube's message (`User "x" cannot list resource "configmaps" in API group ""
//!    in the namespace "y"`).
//!
//! Writes of Roles, ClusterRoles and bindings are also checked for escalation ([`escalation`]), the default
//! policy (cluster-admin, admin/edit/view aggregated from `system:aggregate-to-*`, discovery and public-info
//! roles and their bindings) is created at start ([`bootstrap`]), and the review APIs (`auth can-i`,
//! `auth whoami`, TokenReview) and the TokenRequest API live in [`reviews`] and [`tokens`].
//!
//! Key material (CA, serving certificate, token signing key, admin token) is in [`pki`]; the JWT format in
//! [`jwt`]; the rule semantics in [`rules`].

pub mod authn;
pub mod bootstrap;
pub mod escalation;
pub mod jwt;
pub mod pki;
pub mod rbac;
pub mod request_info;
pub mod reviews;
pub mod rules;
pub mod tokens;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::HeaderMap;
use serde_json::{json, Value};

use crate::error::{qualified, ApiError};
use crate::server::Shared;

pub use rules::Attributes;

pub const SYSTEM_MASTERS: &str = "system:masters";
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";
pub const SYSTEM_UNAUTHENTICATED: &str = "system:unauthenticated";
pub const ANONYMOUS: &str = "system:anonymous";
/// The user of credential-less requests on the plain HTTP port.
pub const UNSECURED: &str = "system:unsecured";
pub const SERVICE_ACCOUNTS_GROUP: &str = "system:serviceaccounts";
/// The `extra` key kube-apiserver fills with an identifier of the credential used.
pub const CREDENTIAL_ID: &str = "authentication.kubernetes.io/credential-id";
/// The user of the admin token in the kubeconfig.
pub const ADMIN_USER: &str = "admin";

/// An authenticated identity (`user.Info`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    /// The user kube-apiserver gives a ServiceAccount token of `ns/name`.
    pub fn service_account(ns: &str, name: &str, uid: &str) -> UserInfo {
        UserInfo {
            name: format!("system:serviceaccount:{ns}:{name}"),
            uid: uid.to_string(),
            groups: service_account_groups(ns),
            extra: BTreeMap::new(),
        }
    }

    /// `user.Info` as JSON (`userInfo` of SelfSubjectReview and TokenReview).
    pub fn to_json(&self) -> Value {
        let mut v = json!({"username": self.name, "groups": self.groups});
        if !self.uid.is_empty() {
            v["uid"] = json!(self.uid);
        }
        if !self.extra.is_empty() {
            v["extra"] = json!(self.extra);
        }
        v
    }

    pub fn is_master(&self) -> bool {
        self.groups.iter().any(|g| g == SYSTEM_MASTERS)
    }
}

/// `system:serviceaccounts`, `system:serviceaccounts:<ns>`, `system:authenticated`.
pub fn service_account_groups(ns: &str) -> Vec<String> {
    vec![
        SERVICE_ACCOUNTS_GROUP.to_string(),
        format!("{SERVICE_ACCOUNTS_GROUP}:{ns}"),
        SYSTEM_AUTHENTICATED.to_string(),
    ]
}

/// Who a request is from: the authenticated user, and who it acts as (the same unless impersonating).
#[derive(Debug, Clone)]
pub struct Identity {
    pub authenticated: Arc<UserInfo>,
    pub user: Arc<UserInfo>,
    pub impersonating: bool,
}

impl Identity {
    pub fn plain(user: UserInfo) -> Identity {
        let user = Arc::new(user);
        Identity {
            authenticated: user.clone(),
            user,
            impersonating: false,
        }
    }
}

/// Authentication settings and state shared by all requests.
pub struct AuthState {
    pub pki: pki::Pki,
    pub signer: jwt::Signer,
    pub authorizer: rbac::Authorizer,
    /// Who a request without credentials is.
    pub no_credentials: NoCredentials,
    /// Claims of tokens whose signature was verified, so a token's ECDSA verification runs once, not
    /// on every request; expiry, audience and the ServiceAccount are still checked every time.
    pub verified: parking_lot::Mutex<std::collections::HashMap<String, Arc<Value>>>,
}

/// Bound on remembered verified tokens; the memory is simply cleared when full.
const VERIFIED_LIMIT: usize = 10_000;

/// How requests without credentials are treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoCredentials {
    /// `system:anonymous` in `system:unauthenticated` (kube-apiserver's default `--anonymous-auth=true`).
    Anonymous,
    /// 401 (`--anonymous-auth=false`).
    Unauthorized,
    /// `system:unsecured` in `system:masters` (the plain HTTP port).
    Superuser,
}

impl AuthState {
    pub fn admin_token(&self) -> &str {
        &self.pki.admin_token
    }

    /// The claims of a token signed by this cluster's key (memoized).
    pub fn verified_claims(&self, token: &str) -> Option<Arc<Value>> {
        if let Some(c) = self.verified.lock().get(token) {
            return Some(c.clone());
        }
        let claims = Arc::new(self.signer.verify(token)?);
        let mut memo = self.verified.lock();
        if memo.len() >= VERIFIED_LIMIT {
            memo.clear();
        }
        memo.insert(token.to_string(), claims.clone());
        Some(claims)
    }
}

/// `401 Unauthorized`, kube-apiserver's exact body.
pub fn unauthorized() -> ApiError {
    ApiError::new(401, "Unauthorized", "Unauthorized")
}

/// `403 Forbidden` for a refused request (`responsewriters.Forbidden`).
pub fn forbidden(user: &str, a: &Attributes, reason: &str) -> ApiError {
    let what = if !a.resource_request {
        format!("User {user:?} cannot {} path {:?}", a.verb, a.path)
    } else {
        let resource = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let scope = if a.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace {:?}", a.namespace)
        };
        format!(
            "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}",
            a.verb, a.api_group
        )
    };
    let err = if reason.is_empty() {
        what
    } else {
        format!("{what}: {reason}")
    };
    forbidden_for(&a.resource, &a.api_group, &a.name, &err)
}

/// `apierrors.NewForbidden(groupResource, name, err)`.
pub fn forbidden_for(resource: &str, group: &str, name: &str, err: &str) -> ApiError {
    let message = if resource.is_empty() && group.is_empty() {
        format!("forbidden: {err}")
    } else if name.is_empty() {
        format!("{} is forbidden: {err}", qualified(resource, group))
    } else {
        format!("{} {name:?} is forbidden: {err}", qualified(resource, group))
    };
    let mut e = ApiError::forbidden(message);
    e.kind = Some(resource.to_string());
    e.group = Some(group.to_string());
    if !name.is_empty() {
        e.name = Some(name.to_string());
    }
    e
}

/// Authenticate, impersonate and authorize one request; the identity it runs as, or the error to answer.
pub fn check(
    sh: &Shared,
    headers: &HeaderMap,
    cert_user: Option<&UserInfo>,
    attrs: &Attributes,
) -> Result<Identity, (Option<Identity>, ApiError)> {
    let user = authn::authenticate(sh, headers, cert_user).map_err(|e| (None, e))?;
    let id = authn::impersonate(sh, headers, user).map_err(|(id, e)| (Some(id), e))?;
    let d = sh.auth.authorizer.authorize(&sh.store, &id.user, attrs);
    if d.allowed {
        Ok(id)
    } else {
        let e = forbidden(&id.user.name, attrs, &d.reason);
        Err((Some(id), e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_messages_are_kube_apiservers() {
        let sa = "system:serviceaccount:ns:sa";
        let a = Attributes::resource("list", "", "configmaps", "", "x", "");
        let e = forbidden(sa, &a, "");
        assert_eq!(
            e.message,
            r#"configmaps is forbidden: User "system:serviceaccount:ns:sa" cannot list resource "configmaps" in API group "" in the namespace "x""#
        );
        assert_eq!(
            e.to_status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": e.message, "reason": "Forbidden", "details": {"kind": "configmaps"}, "code": 403})
        );
        let a = Attributes::resource("get", "apps", "deployments", "scale", "", "web");
        assert_eq!(
            forbidden("bob", &a, "RBAC: role.rbac.authorization.k8s.io \"r\" not found").message,
            r#"deployments.apps "web" is forbidden: User "bob" cannot get resource "deployments/scale" in API group "apps" at the cluster scope: RBAC: role.rbac.authorization.k8s.io "r" not found"#
        );
        let a = Attributes::non_resource("get", "/metrics");
        let e = forbidden(ANONYMOUS, &a, "");
        assert_eq!(
            e.message,
            r#"forbidden: User "system:anonymous" cannot get path "/metrics""#
        );
        assert_eq!(e.to_status()["details"], json!({}));
    }

    #[test]
    fn unauthorized_is_the_bare_status() {
        assert_eq!(
            unauthorized().to_status(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
}
