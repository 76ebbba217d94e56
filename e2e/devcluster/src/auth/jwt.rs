//! ServiceAccount tokens: ES256-signed JWTs with kube-apiserver's claims. Bound tokens (TokenRequest,
//! `kubectl create token`) carry issuer, audiences, expiry, a `jti` and the `kubernetes.io` claim naming the
//! ServiceAccount (and the Pod or Secret the token is bound to); legacy tokens (token Secrets) carry the
//! `kubernetes.io/serviceaccount/*` claims and no expiry. This module signs and checks signatures and
//! times; whether the ServiceAccount still exists is the authenticator's business.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{
    EcdsaKeyPair, KeyPair, UnparsedPublicKey, ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING,
};
use serde_json::{json, Value};

/// The issuer (and default API audience) of bound tokens, as a kubeadm cluster configures it.
pub const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
/// The issuer of legacy Secret-based tokens.
pub const LEGACY_ISSUER: &str = "kubernetes/serviceaccount";
/// Clock skew tolerated on `exp` and `nbf`, as kube-apiserver's JWT validation does.
pub const LEEWAY_SECS: i64 = 60;
/// Longest token accepted at all (real tokens are ~1 KiB).
const MAX_TOKEN: usize = 16 * 1024;

/// Signs and verifies tokens with one P-256 key.
pub struct Signer {
    key: EcdsaKeyPair,
    key_id: String,
    rng: SystemRandom,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("key_id", &self.key_id)
            .finish_non_exhaustive()
    }
}

fn b64(data: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(data)
}

impl Signer {
    /// A signer from a PKCS#8 ECDSA P-256 key.
    pub fn new(pkcs8: &[u8]) -> anyhow::Result<Signer> {
        let rng = SystemRandom::new();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8, &rng)
            .map_err(|e| anyhow::anyhow!("the token signing key: {e}"))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, key.public_key().as_ref());
        Ok(Signer {
            key_id: b64(digest.as_ref()),
            key,
            rng,
        })
    }

    /// A compact JWS of `claims`.
    pub fn sign(&self, claims: &Value) -> String {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let input = format!(
            "{}.{}",
            b64(header.to_string().as_bytes()),
            b64(claims.to_string().as_bytes())
        );
        // Signing with a valid key only fails if the system RNG does; there is no meaningful fallback.
        let sig = self
            .key
            .sign(&self.rng, input.as_bytes())
            .expect("ECDSA signing with a loaded key");
        format!("{input}.{}", b64(sig.as_ref()))
    }

    /// The claims of a token this key signed, or `None` (malformed, other algorithm, bad signature).
    pub fn verify(&self, token: &str) -> Option<Value> {
        if token.len() > MAX_TOKEN {
            return None;
        }
        let mut parts = token.split('.');
        let (h, c, s) = (parts.next()?, parts.next()?, parts.next()?);
        if parts.next().is_some() {
            return None;
        }
        let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(h).ok()?).ok()?;
        if header.get("alg")?.as_str()? != "ES256" {
            return None;
        }
        let sig = URL_SAFE_NO_PAD.decode(s).ok()?;
        let public = UnparsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, self.key.public_key().as_ref());
        public.verify(format!("{h}.{c}").as_bytes(), &sig).ok()?;
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(c).ok()?).ok()
    }
}

/// The object a bound token is tied to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BoundObject {
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// What a bound token is for.
#[derive(Debug, Clone)]
pub struct BoundToken<'a> {
    pub namespace: &'a str,
    pub service_account: &'a str,
    pub sa_uid: &'a str,
    pub audiences: &'a [String],
    pub expiration_seconds: i64,
    pub bound: Option<BoundObject>,
}

/// Claims of a bound (TokenRequest) token issued at `now` (Unix seconds).
pub fn bound_claims(t: &BoundToken<'_>, now: i64) -> Value {
    let mut k8s = json!({"namespace": t.namespace,
        "serviceaccount": {"name": t.service_account, "uid": t.sa_uid}});
    if let Some(b) = &t.bound {
        k8s[b.kind.to_ascii_lowercase()] = json!({"name": b.name, "uid": b.uid});
    }
    json!({
        "aud": t.audiences,
        "exp": now + t.expiration_seconds,
        "iat": now,
        "iss": ISSUER,
        "jti": uuid::Uuid::new_v4().to_string(),
        "kubernetes.io": k8s,
        "nbf": now,
        "sub": format!("system:serviceaccount:{}:{}", t.namespace, t.service_account),
    })
}

/// Claims of a legacy token kept in Secret `secret` of `ns`.
pub fn legacy_claims(ns: &str, sa: &str, sa_uid: &str, secret: &str) -> Value {
    json!({
        "iss": LEGACY_ISSUER,
        "kubernetes.io/serviceaccount/namespace": ns,
        "kubernetes.io/serviceaccount/secret.name": secret,
        "kubernetes.io/serviceaccount/service-account.name": sa,
        "kubernetes.io/serviceaccount/service-account.uid": sa_uid,
        "sub": format!("system:serviceaccount:{ns}:{sa}"),
    })
}

/// Why a bound token's claims are not acceptable now, if they are not.
pub fn check_times_and_audience(claims: &Value, audiences: &[&str], now: i64) -> Result<(), &'static str> {
    let exp = claims.get("exp").and_then(Value::as_i64).ok_or("no expiry")?;
    if now > exp + LEEWAY_SECS {
        return Err("token has expired");
    }
    if claims
        .get("nbf")
        .and_then(Value::as_i64)
        .is_some_and(|nbf| now + LEEWAY_SECS < nbf)
    {
        return Err("token is not valid yet");
    }
    let aud: Vec<&str> = match claims.get("aud") {
        Some(Value::String(s)) => vec![s.as_str()],
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    if !aud.iter().any(|a| audiences.contains(a)) {
        return Err("token audiences are invalid");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer() -> Signer {
        Signer::new(&rcgen::KeyPair::generate().unwrap().serialize_der()).unwrap()
    }

    #[test]
    fn signed_tokens_verify_and_tampering_is_caught() {
        let s = signer();
        let claims = legacy_claims("ns", "sa", "u1", "sa-token");
        let token = s.sign(&claims);
        assert_eq!(s.verify(&token), Some(claims));
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = b64(json!({"sub": "system:serviceaccount:kube-system:admin"})
            .to_string()
            .as_bytes());
        parts[1] = &forged;
        assert_eq!(s.verify(&parts.join(".")), None);
        assert_eq!(signer().verify(&token), None, "another key's signature is rejected");
        assert_eq!(s.verify("a.b"), None);
        let none_alg = format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(br#"{"sub":"x"}"#));
        assert_eq!(s.verify(&none_alg), None);
    }

    #[test]
    fn bound_claims_expire_and_name_their_audience() {
        let aud = vec!["api".to_string()];
        let t = BoundToken {
            namespace: "ns",
            service_account: "sa",
            sa_uid: "u1",
            audiences: &aud,
            expiration_seconds: 600,
            bound: Some(BoundObject {
                kind: "Secret".into(),
                name: "s".into(),
                uid: "u2".into(),
            }),
        };
        let c = bound_claims(&t, 1000);
        assert_eq!(c["sub"], "system:serviceaccount:ns:sa");
        assert_eq!(c["kubernetes.io"]["secret"]["uid"], "u2");
        assert!(check_times_and_audience(&c, &["api"], 1000).is_ok());
        assert!(check_times_and_audience(&c, &["api"], 1600 + LEEWAY_SECS).is_ok());
        assert_eq!(
            check_times_and_audience(&c, &["api"], 1601 + LEEWAY_SECS),
            Err("token has expired")
        );
        assert_eq!(
            check_times_and_audience(&c, &["other"], 1000),
            Err("token audiences are invalid")
        );
        assert_eq!(
            check_times_and_audience(&c, &["api"], 900),
            Err("token is not valid yet")
        );
    }
}
