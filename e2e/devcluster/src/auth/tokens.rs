//! The TokenRequest API (`POST .../serviceaccounts/<name>/token`, what `kubectl create token` calls) and the
//! legacy token Secrets (`kubernetes.io/service-account-token`), whose `token`, `ca.crt` and `namespace` the
//! token controller fills in.

use serde_json::{json, Value};

use crate::error::{ApiError, ApiResult, Cause};
use crate::registry::res_key;
use crate::server::Shared;

use super::jwt::{self, BoundObject, BoundToken};

/// Default lifetime of a requested token (`kubectl create token` without `--duration`).
pub const DEFAULT_EXPIRATION_SECS: i64 = 3600;
const MIN_EXPIRATION_SECS: i64 = 600;
const MAX_EXPIRATION_SECS: i64 = 1 << 32;

pub const TOKEN_SECRET_TYPE: &str = "kubernetes.io/service-account-token";
pub const SA_NAME_ANNOTATION: &str = "kubernetes.io/service-account.name";
pub const SA_UID_ANNOTATION: &str = "kubernetes.io/service-account.uid";

fn invalid(name: &str, field: &str, msg: String) -> ApiError {
    ApiError::invalid(
        "TokenRequest",
        "authentication.k8s.io",
        name,
        vec![Cause::new("FieldValueInvalid", msg, field)],
    )
}

fn uid_of(v: &Value) -> &str {
    v.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or("")
}

/// The object a TokenRequest asks to bind to, checked to exist with the given uid.
fn bound_object(sh: &Shared, ns: &str, sa: &str, r: &Value) -> ApiResult<BoundObject> {
    let kind = r.get("kind").and_then(Value::as_str).unwrap_or("");
    let name = r.get("name").and_then(Value::as_str).unwrap_or("");
    let plural = match kind {
        "Pod" => "pods",
        "Secret" => "secrets",
        other => {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for object of kind {other:?}: only Pod and Secret are supported"
            )))
        }
    };
    let obj = sh
        .store
        .get(&res_key("", plural), ns, name)
        .ok_or_else(|| ApiError::not_found(plural, "", name))?;
    let want = r.get("uid").and_then(Value::as_str).unwrap_or("");
    if !want.is_empty() && want != uid_of(&obj) {
        return Err(ApiError::conflict_msg(format!(
            "the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"
        )));
    }
    let _ = sa;
    Ok(BoundObject {
        kind: kind.to_string(),
        name: name.to_string(),
        uid: uid_of(&obj).to_string(),
    })
}

/// Serve a TokenRequest for ServiceAccount `ns/name`: the request object with `spec` defaulted and
/// `status.token`/`status.expirationTimestamp` filled.
pub fn token_request(sh: &Shared, ns: &str, name: &str, mut req: Value) -> ApiResult<Value> {
    if req
        .get("kind")
        .and_then(Value::as_str)
        .is_some_and(|k| k != "TokenRequest")
    {
        return Err(ApiError::bad_request("the body must be a TokenRequest"));
    }
    let sa = sh
        .store
        .get(&res_key("", "serviceaccounts"), ns, name)
        .ok_or_else(|| ApiError::not_found("serviceaccounts", "", name))?;
    let spec = req.get("spec").cloned().unwrap_or_else(|| json!({}));
    let exp = match spec.get("expirationSeconds") {
        None | Some(Value::Null) => DEFAULT_EXPIRATION_SECS,
        Some(v) => v
            .as_i64()
            .ok_or_else(|| invalid(name, "spec.expirationSeconds", "must be an integer".into()))?,
    };
    if exp < MIN_EXPIRATION_SECS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            format!("Invalid value: {exp}: may not specify a duration less than 10 minutes"),
        ));
    }
    if exp > MAX_EXPIRATION_SECS {
        return Err(invalid(
            name,
            "spec.expirationSeconds",
            format!("Invalid value: {exp}: may not specify a duration larger than 2^32 seconds"),
        ));
    }
    let mut audiences: Vec<String> = spec
        .get("audiences")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default();
    if audiences.is_empty() {
        audiences.push(jwt::ISSUER.to_string());
    }
    let bound = match spec.get("boundObjectRef").filter(|v| v.is_object()) {
        Some(r) => Some(bound_object(sh, ns, name, r)?),
        None => None,
    };
    let now = chrono::Utc::now();
    let t = BoundToken {
        namespace: ns,
        service_account: name,
        sa_uid: uid_of(&sa),
        audiences: &audiences,
        expiration_seconds: exp,
        bound,
    };
    let token = sh.auth.signer.sign(&jwt::bound_claims(&t, now.timestamp()));
    let expires = now + chrono::Duration::seconds(exp);
    req["apiVersion"] = json!("authentication.k8s.io/v1");
    req["kind"] = json!("TokenRequest");
    req["metadata"] = json!({"name": name, "namespace": ns, "creationTimestamp": null});
    req["spec"]["audiences"] = json!(audiences);
    req["spec"]["expirationSeconds"] = json!(exp);
    req["spec"]["boundObjectRef"] = spec.get("boundObjectRef").cloned().unwrap_or(Value::Null);
    req["status"] = json!({"token": token,
        "expirationTimestamp": expires.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)});
    Ok(req)
}

/// What the token controller must do with a Secret.
#[derive(Debug, PartialEq, Eq)]
pub enum SecretAction {
    Nothing,
    /// Fill in `token`, `ca.crt`, `namespace` and the uid annotation for this ServiceAccount uid.
    Fill(String),
    /// The ServiceAccount is gone (or was recreated): the Secret goes too, as kube's token controller does.
    Delete,
}

/// Decide for one Secret, given the ServiceAccount it names (if it exists).
pub fn secret_action(secret: &Value, sa: Option<&Value>) -> SecretAction {
    if secret.get("type").and_then(Value::as_str) != Some(TOKEN_SECRET_TYPE)
        || secret.pointer("/metadata/deletionTimestamp").is_some()
    {
        return SecretAction::Nothing;
    }
    let ann = |k: &str| {
        secret
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let Some(sa) = sa else {
        return SecretAction::Delete;
    };
    let uid = uid_of(sa);
    let wanted_uid = ann(SA_UID_ANNOTATION);
    if !wanted_uid.is_empty() && wanted_uid != uid {
        return SecretAction::Delete;
    }
    let filled = secret.pointer("/data/token").is_some()
        && secret.pointer("/data/ca.crt").is_some()
        && secret.pointer("/data/namespace").is_some();
    if filled && wanted_uid == uid {
        SecretAction::Nothing
    } else {
        SecretAction::Fill(uid.to_string())
    }
}

/// Fill a token Secret in place (`data` values base64, as stored). Returns whether anything changed.
pub fn fill_secret(sh: &Shared, secret: &mut Value, sa_uid: &str) -> bool {
    use base64::Engine;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let s = |p: &str| secret.pointer(p).and_then(Value::as_str).unwrap_or("").to_string();
    let (ns, name) = (s("/metadata/namespace"), s("/metadata/name"));
    let sa = s("/metadata/annotations/kubernetes.io~1service-account.name");
    if !secret["metadata"]["annotations"].is_object() {
        secret["metadata"]["annotations"] = json!({});
    }
    secret["metadata"]["annotations"][SA_UID_ANNOTATION] = json!(sa_uid);
    if !secret["data"].is_object() {
        secret["data"] = json!({});
    }
    let data = &mut secret["data"];
    if data.get("token").is_none() {
        let token = sh.auth.signer.sign(&jwt::legacy_claims(&ns, &sa, sa_uid, &name));
        data["token"] = json!(b64(&token));
    }
    data["ca.crt"] = json!(b64(sh.auth.pki.ca_pem()));
    data["namespace"] = json!(b64(&ns));
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(extra: Value) -> Value {
        let mut s = json!({"type": TOKEN_SECRET_TYPE, "metadata": {"name": "t", "namespace": "ns",
            "annotations": {SA_NAME_ANNOTATION: "bot"}}});
        if let (Some(o), Some(e)) = (s.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                o.insert(k.clone(), v.clone());
            }
        }
        s
    }

    #[test]
    fn token_secrets_are_filled_once_and_deleted_with_their_account() {
        let sa = json!({"metadata": {"name": "bot", "uid": "u1"}});
        assert_eq!(
            secret_action(&secret(json!({})), Some(&sa)),
            SecretAction::Fill("u1".into())
        );
        assert_eq!(secret_action(&secret(json!({})), None), SecretAction::Delete);
        let mut filled = secret(json!({"data": {"token": "x", "ca.crt": "y", "namespace": "z"}}));
        filled["metadata"]["annotations"][SA_UID_ANNOTATION] = json!("u1");
        assert_eq!(secret_action(&filled, Some(&sa)), SecretAction::Nothing);
        let recreated = json!({"metadata": {"name": "bot", "uid": "u2"}});
        assert_eq!(secret_action(&filled, Some(&recreated)), SecretAction::Delete);
        let opaque = json!({"type": "Opaque", "metadata": {"name": "t"}});
        assert_eq!(secret_action(&opaque, None), SecretAction::Nothing);
    }
}
