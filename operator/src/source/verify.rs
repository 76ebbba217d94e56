//! OpenPGP verification of commit signatures with rPGP (pure, no I/O).
//!
//! A commit object carries its signature in the `gpgsig` header; libgit2's
//! `extract_signature` returns that armored signature and the exact bytes that were signed.
//! A signature counts only if it verifies against the primary key or a subkey whose binding
//! signature verifies, of one of the keys the Repository lists. Anything else (unsigned, unknown
//! key, bad signature, unparsable key) is `VerificationFailed`, so an unverifiable commit is
//! never deployed.

use pgp::composed::{Deserializable, DetachedSignature, SignedPublicKey};
use pgp::types::KeyDetails;

use super::{SourceError, VerifiedSignature};

/// Upper bound on an armored signature or key; real ones are a few KiB.
const MAX_ARMOR_BYTES: usize = 256 * 1024;

/// Parses armored public keys; each string may hold several keys. Unparsable input is an error
/// (a typo in the trusted key list must not silently shrink it).
pub fn parse_public_keys(armored: &[String]) -> Result<Vec<SignedPublicKey>, SourceError> {
    let mut keys = Vec::new();
    for (i, text) in armored.iter().enumerate() {
        if text.len() > MAX_ARMOR_BYTES {
            return Err(SourceError::VerificationFailed(format!(
                "trusted key #{i} is too large"
            )));
        }
        let parsed = SignedPublicKey::from_string_many(text).map_err(|_| {
            SourceError::VerificationFailed(format!("trusted key #{i} is not an armored OpenPGP public key"))
        })?;
        let mut count = 0;
        for key in parsed.0 {
            let key = key.map_err(|_| {
                SourceError::VerificationFailed(format!("trusted key #{i} is not an armored OpenPGP public key"))
            })?;
            keys.push(key);
            count += 1;
        }
        if count == 0 {
            return Err(SourceError::VerificationFailed(format!(
                "trusted key #{i} holds no key"
            )));
        }
    }
    if keys.is_empty() {
        return Err(SourceError::VerificationFailed("no trusted keys configured".into()));
    }
    Ok(keys)
}

/// Verifies `signature` (armored) over `signed_data` against `keys`.
pub fn verify_detached(
    signature: &[u8],
    signed_data: &[u8],
    keys: &[SignedPublicKey],
) -> Result<VerifiedSignature, SourceError> {
    if signature.len() > MAX_ARMOR_BYTES {
        return Err(SourceError::VerificationFailed("signature is too large".into()));
    }
    let text = std::str::from_utf8(signature)
        .map_err(|_| SourceError::VerificationFailed("signature is not armored text".into()))?;
    let (sig, _) = DetachedSignature::from_string(text).map_err(|_| {
        SourceError::VerificationFailed(
            "signature is not an OpenPGP signature (SSH/X.509 signatures are not supported)".into(),
        )
    })?;
    for key in keys {
        if key.verify_bindings().is_err() {
            continue;
        }
        if sig.verify(&key.primary_key, signed_data).is_ok() {
            return Ok(VerifiedSignature {
                fingerprint: hex::encode(key.primary_key.fingerprint().as_bytes()),
            });
        }
        for sub in &key.public_subkeys {
            if sub.verify_bindings(&key.primary_key).is_ok() && sig.verify(&sub.key, signed_data).is_ok() {
                return Ok(VerifiedSignature {
                    fingerprint: hex::encode(sub.key.fingerprint().as_bytes()),
                });
            }
        }
    }
    Err(SourceError::VerificationFailed(
        "commit is not signed by any trusted key".into(),
    ))
}
