//! The cluster's key material: a CA, the serving certificate it signs (SANs 127.0.0.1, ::1, localhost, the
//! `kubernetes.default.svc` names and the listen host), the ServiceAccount token signing key and the admin
//! token. Without a directory everything is generated at start; with `--tls-cert-dir` the files are created
//! on first use and reused after, so kubeconfigs and ServiceAccount tokens survive a restart. A reused
//! serving certificate is re-issued (by the same CA) when it does not name the current listen host.
//!
//! Client certificates signed by this CA authenticate their subject: CN is the user, each O a group.

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

const CA_CERT: &str = "ca.crt";
const CA_KEY: &str = "ca.key";
const SERVING_CERT: &str = "apiserver.crt";
const SERVING_KEY: &str = "apiserver.key";
const SA_KEY: &str = "sa.key";
const ADMIN_TOKEN: &str = "admin.token";

/// Names every serving certificate carries besides the listen host.
const FIXED_SANS: &[&str] = &[
    "127.0.0.1",
    "::1",
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// CA, serving certificate, token signing key and admin token.
pub struct Pki {
    ca_pem: String,
    ca_key: KeyPair,
    serving_pem: String,
    serving_key: KeyPair,
    /// PKCS#8 DER of the ServiceAccount token signing key (ECDSA P-256).
    pub sa_key_der: Vec<u8>,
    pub admin_token: String,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

/// Groups a client certificate can carry: rcgen keeps one value per attribute type, and the O attribute
/// can be written under two distinct types (the named one and its raw OID).
pub const MAX_CERT_GROUPS: usize = 2;

fn dn(cn: &str, orgs: &[String]) -> DistinguishedName {
    let mut d = DistinguishedName::new();
    d.push(DnType::CommonName, cn);
    let types = [DnType::OrganizationName, DnType::CustomDnType(vec![2, 5, 4, 10])];
    for (ty, o) in types.into_iter().zip(orgs) {
        d.push(ty, o.as_str());
    }
    d
}

/// A validity window starting an hour ago (clock skew) and lasting `days`.
fn validity(p: &mut CertificateParams, days: i64) {
    let now = time::OffsetDateTime::now_utc();
    p.not_before = now - time::Duration::hours(1);
    p.not_after = now + time::Duration::days(days);
}

fn new_ca() -> anyhow::Result<(String, KeyPair)> {
    let key = KeyPair::generate()?;
    let mut p = CertificateParams::default();
    p.distinguished_name = dn("devcluster-ca", &[]);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    validity(&mut p, 3650);
    Ok((p.self_signed(&key)?.pem(), key))
}

fn random_token() -> String {
    let bytes: [u8; 24] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Read `name` from `dir`, or create it with `make` and write it (mode 0600 for secrets).
fn load_or_create(
    dir: Option<&Path>,
    name: &str,
    make: impl FnOnce() -> anyhow::Result<String>,
) -> anyhow::Result<String> {
    let Some(dir) = dir else { return make() };
    let path = dir.join(name);
    if path.exists() {
        return std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()));
    }
    let text = make()?;
    write_private(&path, &text)?;
    Ok(text)
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

impl Pki {
    /// Load or create everything; `host` is the listen address's host, added to the serving certificate.
    pub fn load_or_create(dir: Option<&Path>, host: &str) -> anyhow::Result<Pki> {
        if let Some(d) = dir {
            std::fs::create_dir_all(d).with_context(|| format!("creating {}", d.display()))?;
        }
        let (ca_pem, ca_key) = match dir.filter(|d| d.join(CA_CERT).exists() && d.join(CA_KEY).exists()) {
            Some(d) => {
                let cert = std::fs::read_to_string(d.join(CA_CERT))?;
                let key = KeyPair::from_pem(&std::fs::read_to_string(d.join(CA_KEY))?)
                    .map_err(|e| anyhow!("{}: {e}", d.join(CA_KEY).display()))?;
                (cert, key)
            }
            None => {
                let (cert, key) = new_ca()?;
                if let Some(d) = dir {
                    write_private(&d.join(CA_CERT), &cert)?;
                    write_private(&d.join(CA_KEY), &key.serialize_pem())?;
                }
                (cert, key)
            }
        };
        let sa_key_pem = load_or_create(dir, SA_KEY, || Ok(KeyPair::generate()?.serialize_pem()))?;
        let sa_key = KeyPair::from_pem(&sa_key_pem).map_err(|e| anyhow!("{SA_KEY}: {e}"))?;
        let admin_token = load_or_create(dir, ADMIN_TOKEN, || Ok(random_token()))?
            .trim()
            .to_string();
        let mut pki = Pki {
            ca_pem,
            ca_key,
            serving_pem: String::new(),
            serving_key: KeyPair::generate()?,
            sa_key_der: sa_key.serialize_der(),
            admin_token,
        };
        pki.serving(dir, host)?;
        Ok(pki)
    }

    fn issuer(&self) -> anyhow::Result<Issuer<'static, &KeyPair>> {
        Issuer::from_ca_cert_pem(&self.ca_pem, &self.ca_key).map_err(|e| anyhow!("the CA certificate: {e}"))
    }

    /// Reuse the stored serving certificate if it names every wanted host, else issue a new one.
    fn serving(&mut self, dir: Option<&Path>, host: &str) -> anyhow::Result<()> {
        let mut sans: Vec<String> = FIXED_SANS.iter().map(|s| s.to_string()).collect();
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let unspecified = host.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified());
        if !host.is_empty() && !unspecified && !sans.iter().any(|s| s == host) {
            sans.push(host.to_string());
        }
        if let Some(d) = dir {
            if let (Ok(cert), Ok(key)) = (
                std::fs::read_to_string(d.join(SERVING_CERT)),
                std::fs::read_to_string(d.join(SERVING_KEY)),
            ) {
                if names_all(&cert, &sans) {
                    self.serving_pem = cert;
                    self.serving_key = KeyPair::from_pem(&key).map_err(|e| anyhow!("{SERVING_KEY}: {e}"))?;
                    return Ok(());
                }
            }
        }
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::new(sans)?;
        p.distinguished_name = dn("devcluster-apiserver", &[]);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        validity(&mut p, 365);
        let cert = p.signed_by(&key, &self.issuer()?)?.pem();
        if let Some(d) = dir {
            write_private(&d.join(SERVING_CERT), &cert)?;
            write_private(&d.join(SERVING_KEY), &key.serialize_pem())?;
        }
        self.serving_pem = cert;
        self.serving_key = key;
        Ok(())
    }

    /// The CA certificate (PEM), for kubeconfigs, `ca.crt` of token Secrets and clients.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate and key (PEM) for `user` in `groups` (at most [`MAX_CERT_GROUPS`]), valid for a
    /// day.
    pub fn issue_client_cert(&self, user: &str, groups: &[String]) -> anyhow::Result<(String, String)> {
        if groups.len() > MAX_CERT_GROUPS {
            anyhow::bail!(
                "client certificates carry at most {MAX_CERT_GROUPS} groups, not {}",
                groups.len()
            );
        }
        let key = KeyPair::generate()?;
        let mut p = CertificateParams::default();
        p.distinguished_name = dn(user, groups);
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
        p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        validity(&mut p, 1);
        let cert = p.signed_by(&key, &self.issuer()?)?.pem();
        Ok((cert, key.serialize_pem()))
    }

    /// The TLS server configuration: this serving certificate, HTTP/1.1 only, and client certificates
    /// verified against the CA when offered (optional, as on kube-apiserver).
    pub fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let ca_der = pem_der(&self.ca_pem)?;
        let mut roots = rustls::RootCertStore::empty();
        roots.add(ca_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .allow_unauthenticated()
            .build()?;
        let chain = vec![pem_der(&self.serving_pem)?, ca_der];
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.serving_key.serialize_der()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(chain, key)?;
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(cfg))
    }
}

fn pem_der(pem: &str) -> anyhow::Result<CertificateDer<'static>> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| anyhow!("PEM: {e}"))?;
    Ok(CertificateDer::from(p.contents))
}

/// Whether a PEM certificate's SANs include every name in `wanted`.
fn names_all(pem: &str, wanted: &[String]) -> bool {
    let Ok(der) = pem_der(pem) else { return false };
    let Ok((_, cert)) = x509_parser::parse_x509_certificate(&der) else {
        return false;
    };
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return false;
    };
    let have: Vec<String> = san
        .value
        .general_names
        .iter()
        .filter_map(|n| match n {
            x509_parser::extensions::GeneralName::DNSName(d) => Some(d.to_string()),
            x509_parser::extensions::GeneralName::IPAddress(b) => ip_from_bytes(b).map(|ip| ip.to_string()),
            _ => None,
        })
        .collect();
    let expired = cert.validity().time_to_expiration().is_none();
    !expired
        && wanted.iter().all(|w| {
            let norm = w
                .parse::<IpAddr>()
                .map(|ip| ip.to_string())
                .unwrap_or_else(|_| w.clone());
            have.contains(&norm)
        })
}

fn ip_from_bytes(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

/// The user a verified client certificate (DER) names: CN, the Os as groups, and the credential id
/// (`X509SHA256=<hex>`) kube-apiserver puts in `extra`.
pub fn client_cert_user(der: &[u8]) -> Option<super::UserInfo> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let subject = cert.subject();
    let name = subject.iter_common_name().next()?.as_str().ok()?.to_string();
    let mut groups: Vec<String> = subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect();
    groups.push(super::SYSTEM_AUTHENTICATED.to_string());
    let digest = ring::digest::digest(&ring::digest::SHA256, der);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    let mut user = super::UserInfo {
        name,
        groups,
        ..Default::default()
    };
    user.extra
        .insert(super::CREDENTIAL_ID.to_string(), vec![format!("X509SHA256={hex}")]);
    Some(user)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cert_dir_is_created_once_and_reused() {
        let dir = std::env::temp_dir().join(format!("devcluster-pki-{}", uuid::Uuid::new_v4()));
        let a = Pki::load_or_create(Some(&dir), "127.0.0.1").unwrap();
        let b = Pki::load_or_create(Some(&dir), "127.0.0.1").unwrap();
        assert_eq!(a.ca_pem(), b.ca_pem());
        assert_eq!(a.serving_pem, b.serving_pem, "the serving certificate is reused");
        assert_eq!(
            (a.sa_key_der.clone(), a.admin_token.clone()),
            (b.sa_key_der.clone(), b.admin_token.clone())
        );
        let c = Pki::load_or_create(Some(&dir), "10.1.2.3").unwrap();
        assert_eq!(a.ca_pem(), c.ca_pem());
        assert_ne!(
            a.serving_pem, c.serving_pem,
            "a new listen host gets a new serving certificate"
        );
        assert!(names_all(&c.serving_pem, &["10.1.2.3".into(), "localhost".into()]));
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.join(CA_KEY)).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
        let fresh = Pki::load_or_create(None, "0.0.0.0").unwrap();
        assert_ne!(fresh.ca_pem(), a.ca_pem());
        assert!(fresh.server_config().is_ok());
    }

    #[test]
    fn client_certs_name_user_and_groups() {
        let pki = Pki::load_or_create(None, "127.0.0.1").unwrap();
        let (cert, _key) = pki.issue_client_cert("jane", &["devs".into(), "ops".into()]).unwrap();
        let user = client_cert_user(&pem_der(&cert).unwrap()).unwrap();
        assert_eq!(user.name, "jane");
        assert_eq!(user.groups, vec!["devs", "ops", "system:authenticated"]);
        assert!(user.extra[super::super::CREDENTIAL_ID][0].starts_with("X509SHA256="));
        assert!(pki
            .issue_client_cert("x", &["a".into(), "b".into(), "c".into()])
            .is_err());
    }
}
