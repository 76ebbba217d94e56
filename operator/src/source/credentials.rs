//! Repository credentials, their redaction, and credential templates (pure, no I/O).
//!
//! Argo CD leaked credentials by formatting whole repository structs into errors
//! (GHSA-mv6w-j4xc-qpfw). Here `Debug` never prints a secret, there is no `Display`, and
//! [`Credentials::scrub`] removes any secret value from free text as a last line of defence.

use std::collections::BTreeMap;
use std::fmt;

use super::url::{strip_userinfo_and_query, RepoUrl};

/// Credentials from a Repository's Secret. Field names follow the Secret keys.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    /// HTTP basic username (or SSH user when the URL has none).
    pub username: Option<String>,
    /// HTTP basic password or token.
    pub password: Option<String>,
    /// Sent as `Authorization: Bearer <token>` over HTTP(S).
    pub bearer_token: Option<String>,
    /// OpenSSH or PEM private key.
    pub ssh_private_key: Option<String>,
    /// Passphrase of `ssh_private_key`.
    pub ssh_passphrase: Option<String>,
    /// OpenSSH known_hosts content; SSH connections are refused for hosts not listed here.
    pub known_hosts: Option<String>,
    /// PEM CA bundle that the HTTPS server certificate must chain to.
    pub ca_cert: Option<String>,
    /// PEM client certificate (chain) presented to HTTPS servers that ask for one.
    pub tls_client_cert: Option<String>,
    /// PEM private key of `tls_client_cert`.
    pub tls_client_key: Option<String>,
    /// Accept any server certificate (the Repository's `insecureSkipTLSVerify`).
    pub insecure_skip_tls_verify: bool,
    /// HTTP(S) proxy for HTTP(S) remotes (the Repository's `proxy`; not from the Secret).
    pub proxy: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = |v: &Option<String>| if v.is_some() { "<redacted>" } else { "<none>" };
        f.debug_struct("Credentials")
            .field("username", &self.username)
            .field("password", &shown(&self.password))
            .field("bearer_token", &shown(&self.bearer_token))
            .field("ssh_private_key", &shown(&self.ssh_private_key))
            .field("ssh_passphrase", &shown(&self.ssh_passphrase))
            .field("known_hosts", &self.known_hosts.as_ref().map(|k| k.lines().count()))
            .field("ca_cert", &self.ca_cert.is_some())
            .field("tls_client_cert", &self.tls_client_cert.is_some())
            .field("tls_client_key", &shown(&self.tls_client_key))
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .field("proxy", &self.proxy.as_deref().map(strip_userinfo_and_query))
            .finish()
    }
}

impl Credentials {
    /// Builds credentials from Secret data (keys as in the Repository docs; unknown keys ignored).
    /// `insecureSkipTLSVerify` comes from the Repository spec, not the Secret.
    pub fn from_secret_data(data: &BTreeMap<String, Vec<u8>>, insecure_skip_tls_verify: bool) -> Self {
        let get = |k: &str| {
            data.get(k)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .filter(|v| !v.is_empty())
        };
        Credentials {
            username: get("username"),
            password: get("password"),
            bearer_token: get("bearerToken"),
            ssh_private_key: get("sshPrivateKey"),
            ssh_passphrase: get("sshPassphrase"),
            known_hosts: get("knownHosts"),
            ca_cert: get("caCert"),
            tls_client_cert: get("tlsClientCert"),
            tls_client_key: get("tlsClientKey"),
            insecure_skip_tls_verify,
            proxy: None,
        }
    }

    /// Every secret value, for scrubbing.
    fn secrets(&self) -> impl Iterator<Item = &str> {
        [
            &self.password,
            &self.bearer_token,
            &self.ssh_private_key,
            &self.ssh_passphrase,
            &self.tls_client_key,
        ]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .filter(|s| s.len() >= 4)
    }

    /// Replaces any secret value (and each line of a multi-line key) in `text` with `<redacted>`.
    pub fn scrub(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self.secrets() {
            out = out.replace(secret, "<redacted>");
            for line in secret.lines().map(str::trim).filter(|l| l.len() >= 16) {
                out = out.replace(line, "<redacted>");
            }
        }
        out
    }
}

/// A Repository with `credentialTemplate: true`: its URL is a prefix for other repository URLs.
#[derive(Clone, Debug)]
pub struct CredentialTemplate {
    /// The prefix URL.
    pub url: RepoUrl,
    /// The credentials it supplies.
    pub credentials: Credentials,
}

/// Whether `template` is a prefix of `repo` on host and path-segment boundaries.
///
/// Scheme, host and port must be equal; the template's path segments must equal the first
/// segments of the repository path. So `https://git.example.com` covers
/// `https://git.example.com/org/repo` but not `https://git.example.com.evil.io/…`, and
/// `https://git.example.com/org` does not cover `https://git.example.com/org-evil/r`.
/// (Argo CD uses a plain string prefix here, so a look-alike host received the credentials.)
pub fn template_matches(template: &RepoUrl, repo: &RepoUrl) -> bool {
    if template.transport() != repo.transport() || template.host() != repo.host() || template.port() != repo.port() {
        return false;
    }
    let t = template.segments();
    let r = repo.segments();
    t.len() <= r.len() && t.iter().zip(&r).all(|(a, b)| a == b)
}

/// Picks the matching template with the most path segments (longest match wins); the first
/// listed wins a tie so the result is deterministic.
pub fn best_template<'a>(templates: &'a [CredentialTemplate], repo: &RepoUrl) -> Option<&'a CredentialTemplate> {
    let mut best: Option<(&CredentialTemplate, usize)> = None;
    for t in templates.iter().filter(|t| template_matches(&t.url, repo)) {
        let len = t.url.segments().len();
        if best.is_none_or(|(_, l)| len > l) {
            best = Some((t, len));
        }
    }
    best.map(|(t, _)| t)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(s: &str) -> RepoUrl {
        RepoUrl::parse(s).unwrap()
    }

    #[test]
    fn template_boundaries() {
        let t = u("https://git.example.com");
        assert!(template_matches(&t, &u("https://git.example.com/org/repo")));
        assert!(template_matches(&t, &u("https://GIT.example.com:443/org/repo.git")));
        assert!(!template_matches(&t, &u("https://git.example.com.evil.io/org/repo")));
        assert!(!template_matches(&t, &u("https://git.example.com-evil/org/repo")));
        assert!(!template_matches(&t, &u("http://git.example.com/org/repo")));
        assert!(!template_matches(&t, &u("https://git.example.com:8443/org/repo")));
        let t = u("https://git.example.com/org");
        assert!(template_matches(&t, &u("https://git.example.com/org/r")));
        assert!(!template_matches(&t, &u("https://git.example.com/org-evil/r")));
        assert!(!template_matches(&t, &u("https://git.example.com/orgx")));
        let t = u("https://git.example.com/org/");
        assert!(template_matches(&t, &u("https://git.example.com/org/r")));
        let t = u("git@github.com:org");
        assert!(template_matches(&t, &u("git@github.com:org/repo.git")));
        assert!(!template_matches(&t, &u("git@github.com:org2/repo.git")));
    }

    #[test]
    fn longest_match_wins() {
        let cred = |p: &str| Credentials {
            password: Some(p.into()),
            ..Default::default()
        };
        let templates = vec![
            CredentialTemplate {
                url: u("https://git.example.com"),
                credentials: cred("host"),
            },
            CredentialTemplate {
                url: u("https://git.example.com/org/team"),
                credentials: cred("team"),
            },
            CredentialTemplate {
                url: u("https://git.example.com/org"),
                credentials: cred("org"),
            },
        ];
        let pick = |s: &str| best_template(&templates, &u(s)).map(|t| t.credentials.password.clone().unwrap());
        assert_eq!(pick("https://git.example.com/org/team/r").as_deref(), Some("team"));
        assert_eq!(pick("https://git.example.com/org/r").as_deref(), Some("org"));
        assert_eq!(pick("https://git.example.com/other/r").as_deref(), Some("host"));
        assert_eq!(pick("https://git.example.com.evil.io/org/r"), None);
    }

    #[test]
    fn debug_and_scrub_redact() {
        let c = Credentials {
            username: Some("alice".into()),
            password: Some("CANARY-pw".into()),
            bearer_token: Some("CANARY-token".into()),
            ssh_private_key: Some("-----BEGIN KEY-----\nCANARYCANARYCANARYKEYLINE\n-----END KEY-----".into()),
            ..Default::default()
        };
        let dbg = format!("{c:?}");
        assert!(!dbg.contains("CANARY"), "{dbg}");
        assert!(dbg.contains("alice"));
        let s = c.scrub("x CANARY-pw y CANARY-token z CANARYCANARYCANARYKEYLINE");
        assert!(!s.contains("CANARY"), "{s}");
    }
}
