//! Who is asking: client certificates, bearer tokens (admin, bound and legacy ServiceAccount tokens),
//! anonymous requests, and impersonation headers.

use std::collections::BTreeMap;

use axum::http::HeaderMap;
use base64::Engine;
use percent_encoding::percent_decode_str;
use serde_json::Value;

use crate::error::ApiError;
use crate::registry::res_key;
use crate::server::Shared;

use super::jwt::{self, check_times_and_audience};
use super::rules::Attributes;
use super::{
    forbidden, service_account_groups, unauthorized, Identity, NoCredentials, UserInfo, ADMIN_USER, ANONYMOUS,
    CREDENTIAL_ID, SYSTEM_AUTHENTICATED, SYSTEM_MASTERS, SYSTEM_UNAUTHENTICATED, UNSECURED,
};

const IMPERSONATE_USER: &str = "impersonate-user";
const IMPERSONATE_GROUP: &str = "impersonate-group";
const IMPERSONATE_UID: &str = "impersonate-uid";
const IMPERSONATE_EXTRA: &str = "impersonate-extra-";
/// Bound on impersonation requests in one request (groups and extras).
const MAX_IMPERSONATION: usize = 64;

/// The user of the kubeconfig's admin token.
pub fn admin_user() -> UserInfo {
    UserInfo {
        name: ADMIN_USER.to_string(),
        groups: vec![SYSTEM_MASTERS.to_string(), SYSTEM_AUTHENTICATED.to_string()],
        ..Default::default()
    }
}

fn anonymous() -> UserInfo {
    UserInfo {
        name: ANONYMOUS.to_string(),
        groups: vec![SYSTEM_UNAUTHENTICATED.to_string()],
        ..Default::default()
    }
}

/// `Some(token)` for `Authorization: Bearer <token>`; `Some("")` for a bearer header without a token.
fn bearer(headers: &HeaderMap) -> Option<String> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ').unwrap_or((v, ""));
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim().to_string())
}

/// Authenticate a request: client certificate first, then a bearer token, else [`NoCredentials`].
pub fn authenticate(sh: &Shared, headers: &HeaderMap, cert_user: Option<&UserInfo>) -> Result<UserInfo, ApiError> {
    if let Some(u) = cert_user {
        return Ok(u.clone());
    }
    match bearer(headers) {
        Some(token) => token_user(sh, &token).ok_or_else(unauthorized),
        None => match sh.auth.no_credentials {
            NoCredentials::Anonymous => Ok(anonymous()),
            NoCredentials::Unauthorized => Err(unauthorized()),
            NoCredentials::Superuser => Ok(UserInfo {
                name: UNSECURED.to_string(),
                groups: vec![SYSTEM_MASTERS.to_string(), SYSTEM_AUTHENTICATED.to_string()],
                ..Default::default()
            }),
        },
    }
}

/// Constant-time comparison: token checks must not leak how much of a guess was right.
fn same_secret(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The user a bearer token authenticates, if it is valid now.
pub fn token_user(sh: &Shared, token: &str) -> Option<UserInfo> {
    if token.is_empty() {
        return None;
    }
    if same_secret(token, sh.auth.admin_token()) {
        return Some(admin_user());
    }
    let claims = sh.auth.verified_claims(token)?;
    match claims.get("iss").and_then(Value::as_str)? {
        jwt::LEGACY_ISSUER => legacy_user(sh, &claims, token),
        jwt::ISSUER => bound_user(sh, &claims, &[jwt::ISSUER]),
        _ => None,
    }
}

fn claim<'a>(v: &'a Value, path: &str) -> Option<&'a str> {
    v.pointer(path).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// A live (existing, not being deleted) object of a core/v1 resource with the expected uid.
fn live_object(sh: &Shared, plural: &str, ns: &str, name: &str, uid: &str) -> Option<std::sync::Arc<Value>> {
    let obj = sh.store.get(&res_key("", plural), ns, name)?;
    let ok = obj.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
        && obj.pointer("/metadata/deletionTimestamp").is_none();
    ok.then_some(obj)
}

fn legacy_user(sh: &Shared, c: &Value, token: &str) -> Option<UserInfo> {
    let ns = claim(c, "/kubernetes.io~1serviceaccount~1namespace")?;
    let sa = claim(c, "/kubernetes.io~1serviceaccount~1service-account.name")?;
    let uid = claim(c, "/kubernetes.io~1serviceaccount~1service-account.uid")?;
    let secret = claim(c, "/kubernetes.io~1serviceaccount~1secret.name")?;
    live_object(sh, "serviceaccounts", ns, sa, uid)?;
    let stored = sh.store.get(&res_key("", "secrets"), ns, secret)?;
    let data = stored.pointer("/data/token").and_then(Value::as_str)?;
    let data = base64::engine::general_purpose::STANDARD.decode(data).ok()?;
    if !same_secret(std::str::from_utf8(&data).ok()?, token) {
        return None;
    }
    Some(UserInfo::service_account(ns, sa, uid))
}

/// A bound token: signature checked by the caller; times, audience, the ServiceAccount and the bound
/// object checked here.
pub fn bound_user(sh: &Shared, c: &Value, audiences: &[&str]) -> Option<UserInfo> {
    check_times_and_audience(c, audiences, chrono::Utc::now().timestamp()).ok()?;
    let ns = claim(c, "/kubernetes.io/namespace")?;
    let sa = claim(c, "/kubernetes.io/serviceaccount/name")?;
    let uid = claim(c, "/kubernetes.io/serviceaccount/uid")?;
    live_object(sh, "serviceaccounts", ns, sa, uid)?;
    let mut user = UserInfo::service_account(ns, sa, uid);
    for (kind, plural) in [("secret", "secrets"), ("pod", "pods")] {
        if c.pointer(&format!("/kubernetes.io/{kind}")).is_some() {
            let name = claim(c, &format!("/kubernetes.io/{kind}/name"))?;
            let obj_uid = claim(c, &format!("/kubernetes.io/{kind}/uid"))?;
            live_object(sh, plural, ns, name, obj_uid)?;
            if kind == "pod" {
                let extra = &mut user.extra;
                extra.insert("authentication.kubernetes.io/pod-name".into(), vec![name.to_string()]);
                extra.insert("authentication.kubernetes.io/pod-uid".into(), vec![obj_uid.to_string()]);
            }
        }
    }
    if let Some(jti) = claim(c, "/jti") {
        user.extra.insert(CREDENTIAL_ID.into(), vec![format!("JTI={jti}")]);
    }
    Some(user)
}

/// One identity requested by impersonation headers.
enum Requested {
    User(String),
    ServiceAccount(String, String),
    Group(String),
    Extra(String, String),
    Uid(String),
}

impl Requested {
    /// The `impersonate` check for it.
    fn attributes(&self) -> Attributes {
        let imp = |group: &str, resource: &str, sub: &str, ns: &str, name: &str| {
            Attributes::resource("impersonate", group, resource, sub, ns, name)
        };
        match self {
            Requested::User(n) => imp("", "users", "", "", n),
            Requested::ServiceAccount(ns, n) => imp("", "serviceaccounts", "", ns, n),
            Requested::Group(n) => imp("", "groups", "", "", n),
            Requested::Extra(k, v) => imp("authentication.k8s.io", "userextras", k, "", v),
            Requested::Uid(u) => imp("authentication.k8s.io", "uids", "", "", u),
        }
    }
}

fn header_values<'a>(h: &'a HeaderMap, name: &str) -> impl Iterator<Item = &'a str> {
    h.get_all(name).iter().filter_map(|v| v.to_str().ok())
}

/// `system:serviceaccount:<ns>:<name>` split, as `serviceaccount.SplitUsername` does.
fn split_sa_username(u: &str) -> Option<(String, String)> {
    let rest = u.strip_prefix("system:serviceaccount:")?;
    let (ns, name) = rest.split_once(':')?;
    (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then(|| (ns.to_string(), name.to_string()))
}

fn requested(h: &HeaderMap) -> Result<Vec<Requested>, ApiError> {
    let mut out = Vec::new();
    let user = h.get(IMPERSONATE_USER).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !user.is_empty() {
        out.push(match split_sa_username(user) {
            Some((ns, n)) => Requested::ServiceAccount(ns, n),
            None => Requested::User(user.to_string()),
        });
    }
    out.extend(header_values(h, IMPERSONATE_GROUP).map(|g| Requested::Group(g.to_string())));
    for (name, value) in h.iter() {
        if let Some(key) = name.as_str().strip_prefix(IMPERSONATE_EXTRA) {
            let key = percent_decode_str(key).decode_utf8_lossy().to_ascii_lowercase();
            if let Ok(v) = value.to_str() {
                out.push(Requested::Extra(key, v.to_string()));
            }
        }
    }
    let uid = h.get(IMPERSONATE_UID).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !uid.is_empty() {
        out.push(Requested::Uid(uid.to_string()));
    }
    if out.len() > MAX_IMPERSONATION {
        return Err(ApiError::bad_request("too many impersonation headers"));
    }
    if !out.is_empty() && user.is_empty() {
        return Err(ApiError::internal(
            "Internal error occurred: requested impersonation of groups, extras or a uid without impersonating a user",
        ));
    }
    Ok(out)
}

/// Apply impersonation headers: each requested identity must be allowed by the `impersonate` verb; the
/// request then runs as the requested user (`WithImpersonation`).
pub fn impersonate(sh: &Shared, h: &HeaderMap, user: UserInfo) -> Result<Identity, (Identity, ApiError)> {
    let real = Identity::plain(user);
    let reqs = match requested(h) {
        Ok(r) if r.is_empty() => return Ok(real),
        Ok(r) => r,
        Err(e) => return Err((real, e)),
    };
    let groups_given = h.get(IMPERSONATE_GROUP).is_some();
    let mut name = String::new();
    let mut uid = String::new();
    let mut groups: Vec<String> = Vec::new();
    let mut extra: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in &reqs {
        let attrs = r.attributes();
        let d = sh.auth.authorizer.authorize(&sh.store, &real.user, &attrs);
        if !d.allowed {
            let e = forbidden(&real.user.name, &attrs, &d.reason);
            return Err((real, e));
        }
        match r {
            Requested::User(n) => name = n.clone(),
            Requested::ServiceAccount(ns, n) => {
                name = format!("system:serviceaccount:{ns}:{n}");
                if !groups_given {
                    groups = service_account_groups(ns);
                }
            }
            Requested::Group(g) => groups.push(g.clone()),
            Requested::Extra(k, v) => extra.entry(k.clone()).or_default().push(v.clone()),
            Requested::Uid(u) => uid = u.clone(),
        }
    }
    let (marker, skip) = if name == ANONYMOUS {
        (SYSTEM_UNAUTHENTICATED, [SYSTEM_UNAUTHENTICATED, SYSTEM_UNAUTHENTICATED])
    } else {
        (SYSTEM_AUTHENTICATED, [SYSTEM_AUTHENTICATED, SYSTEM_UNAUTHENTICATED])
    };
    if !groups.iter().any(|g| skip.contains(&g.as_str())) {
        groups.push(marker.to_string());
    }
    Ok(Identity {
        authenticated: real.authenticated,
        user: std::sync::Arc::new(UserInfo {
            name,
            uid,
            groups,
            extra,
        }),
        impersonating: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(bearer(&h), None);
        h.insert("authorization", HeaderValue::from_static("Bearer abc "));
        assert_eq!(bearer(&h).as_deref(), Some("abc"));
        h.insert("authorization", HeaderValue::from_static("bearer"));
        assert_eq!(bearer(&h).as_deref(), Some(""));
        h.insert("authorization", HeaderValue::from_static("Basic dXNlcjpwYXNz"));
        assert_eq!(bearer(&h), None);
    }

    #[test]
    fn impersonation_requests_from_headers() {
        let mut h = HeaderMap::new();
        h.insert(
            IMPERSONATE_USER,
            HeaderValue::from_static("system:serviceaccount:ns:bot"),
        );
        h.append(IMPERSONATE_GROUP, HeaderValue::from_static("a"));
        h.append(IMPERSONATE_GROUP, HeaderValue::from_static("b"));
        h.insert("impersonate-extra-scopes%2Fx", HeaderValue::from_static("v"));
        h.insert(IMPERSONATE_UID, HeaderValue::from_static("u-1"));
        let attrs: Vec<String> = requested(&h)
            .unwrap()
            .iter()
            .map(|r| {
                let a = r.attributes();
                format!(
                    "{}/{}/{} ns={} name={}",
                    a.api_group, a.resource, a.subresource, a.namespace, a.name
                )
            })
            .collect();
        assert_eq!(
            attrs,
            vec![
                "/serviceaccounts/ ns=ns name=bot",
                "/groups/ ns= name=a",
                "/groups/ ns= name=b",
                "authentication.k8s.io/userextras/scopes/x ns= name=v",
                "authentication.k8s.io/uids/ ns= name=u-1",
            ]
        );
        let mut only_group = HeaderMap::new();
        only_group.insert(IMPERSONATE_GROUP, HeaderValue::from_static("a"));
        assert_eq!(requested(&only_group).err().map(|e| e.code), Some(500));
    }

    #[test]
    fn secrets_compare_in_full() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
