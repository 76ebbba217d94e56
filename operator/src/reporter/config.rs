//! Pure: the reporter's settings (ConfigMap and Secret `capstan-reporter`) and its checkpoint
//! (ConfigMap `capstan-reporter-checkpoint`), parsed from and rendered to `data` maps.

use std::collections::BTreeMap;

use super::policy::glob_match;

/// Name of the settings ConfigMap and of the credentials Secret.
pub const SETTINGS_NAME: &str = "capstan-reporter";
/// Name of the checkpoint ConfigMap.
pub const CHECKPOINT_NAME: &str = "capstan-reporter-checkpoint";
/// Name of the Lease.
pub const LEASE_NAME: &str = "capstan-reporter";

/// ConfigMap `capstan-reporter`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Base URL (`https://…`; `http://` only to a loopback address).
    pub url: String,
    /// `agentId`.
    pub agent_id: String,
    /// `clusterName` (default: the agent id).
    pub cluster_name: String,
    /// Proxy URL.
    pub proxy: Option<String>,
    /// Skip TLS verification (loud).
    pub insecure_skip_tls_verify: bool,
    /// `tasks.namespaces` globs (empty: every task is rejected).
    pub task_namespaces: Vec<String>,
}

/// Secret `capstan-reporter`. `Debug` never shows a value.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Credentials {
    /// Bearer token.
    pub token: String,
    /// HMAC key.
    pub hmac_key: Option<Vec<u8>>,
    /// CA bundle (PEM).
    pub ca_crt: Option<String>,
    /// Client certificate (PEM).
    pub tls_crt: Option<String>,
    /// Client key (PEM).
    pub tls_key: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("token", &"<redacted>")
            .field("hmac_key", &self.hmac_key.as_ref().map(|_| "<redacted>"))
            .field("ca_crt", &self.ca_crt.is_some())
            .field("tls_crt", &self.tls_crt.is_some())
            .finish()
    }
}

/// Why the settings cannot be used (never quotes a credential).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required key is missing.
    #[error("{0} is missing")]
    Missing(&'static str),
    /// A value is invalid.
    #[error("{0}")]
    Invalid(String),
}

fn get<'a>(data: &'a BTreeMap<String, String>, key: &str) -> Option<&'a str> {
    data.get(key).map(|s| s.trim()).filter(|s| !s.is_empty())
}

impl Settings {
    /// Parses ConfigMap `capstan-reporter`'s `data`.
    pub fn parse(data: &BTreeMap<String, String>) -> Result<Settings, ConfigError> {
        let url = get(data, "url").ok_or(ConfigError::Missing("ConfigMap capstan-reporter key url"))?;
        let url = validate_url(url)?;
        let agent_id = get(data, "agentId").ok_or(ConfigError::Missing("ConfigMap capstan-reporter key agentId"))?;
        if agent_id.len() > 253 || !agent_id.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)) {
            return Err(ConfigError::Invalid(
                "agentId must be 1-253 characters of letters, digits, '-', '_' or '.'".into(),
            ));
        }
        let proxy = get(data, "proxy").map(str::to_string);
        if let Some(p) = &proxy {
            crate::source::http::validate_proxy(p).map_err(ConfigError::Invalid)?;
        }
        let insecure = match get(data, "insecureSkipTLSVerify") {
            None | Some("false") => false,
            Some("true") => true,
            Some(_) => {
                return Err(ConfigError::Invalid(
                    "insecureSkipTLSVerify must be true or false".into(),
                ))
            }
        };
        let task_namespaces = get(data, "tasks.namespaces")
            .unwrap_or_default()
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .collect();
        Ok(Settings {
            url,
            agent_id: agent_id.to_string(),
            cluster_name: get(data, "clusterName").unwrap_or(agent_id).to_string(),
            proxy,
            insecure_skip_tls_verify: insecure,
            task_namespaces,
        })
    }

    /// Whether a task for an Application in `namespace` may be carried out.
    pub fn task_allowed(&self, namespace: &str) -> bool {
        self.task_namespaces.iter().any(|g| glob_match(g, namespace))
    }

    /// `{url}/v1/agents/{agentId}`.
    pub fn base(&self) -> String {
        format!("{}/v1/agents/{}", self.url.trim_end_matches('/'), self.agent_id)
    }
}

/// `https://` anywhere; `http://` only to a loopback host (local tests and demos), since the token
/// would otherwise cross the network in clear. No userinfo, query or fragment.
fn validate_url(url: &str) -> Result<String, ConfigError> {
    let invalid = |why: &str| ConfigError::Invalid(format!("url: {why}"));
    let lower = url.to_ascii_lowercase();
    let (scheme, rest) = lower.split_once("://").ok_or_else(|| invalid("not an absolute URL"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') || url.contains('?') || url.contains('#') {
        return Err(invalid(
            "must be scheme://host[:port][/path] without credentials, query or fragment",
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid("holds whitespace"));
    }
    let host = host_of(authority);
    match scheme {
        "https" => Ok(url.to_string()),
        "http" if is_loopback(&host) => Ok(url.to_string()),
        "http" => Err(invalid("plain http is accepted only for a loopback host; use https")),
        _ => Err(invalid("must be https")),
    }
}

/// The host of an authority (`host[:port]`, `[v6]:port`).
pub fn host_of(authority: &str) -> String {
    if let Some(rest) = authority.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    authority.rsplit_once(':').map_or(authority, |(h, _)| h).to_string()
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Credentials {
    /// Parses Secret `capstan-reporter`'s decoded `data`.
    pub fn parse(data: &BTreeMap<String, Vec<u8>>) -> Result<Credentials, ConfigError> {
        let text = |key: &str| -> Result<Option<String>, ConfigError> {
            data.get(key)
                .map(|v| {
                    String::from_utf8(v.clone())
                        .map(|s| s.trim().to_string())
                        .map_err(|_| ConfigError::Invalid(format!("Secret capstan-reporter key {key} is not UTF-8")))
                })
                .transpose()
                .map(|v| v.filter(|s| !s.is_empty()))
        };
        let token = text("token")?.ok_or(ConfigError::Missing("Secret capstan-reporter key token"))?;
        if token.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(ConfigError::Invalid(
                "the token holds whitespace or control characters".into(),
            ));
        }
        Ok(Credentials {
            token,
            hmac_key: data.get("hmacKey").filter(|k| !k.is_empty()).cloned(),
            ca_crt: text("ca.crt")?,
            tls_crt: text("tls.crt")?,
            tls_key: text("tls.key")?,
        })
    }
}

/// ConfigMap `capstan-reporter-checkpoint`: small and fixed-size.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Checkpoint {
    /// The last term's epoch.
    pub epoch: u64,
    /// The next seq of that term.
    pub next_seq: u64,
    /// The highest acknowledged seq.
    pub last_ack_seq: u64,
    /// When the last batch was acknowledged.
    pub last_ack_at: Option<String>,
    /// The last snapshot sent.
    pub last_snapshot_id: Option<String>,
    /// When a snapshot last completed (none: the next term sends a full snapshot).
    pub last_snapshot_complete_at: Option<String>,
}

impl Checkpoint {
    /// Reads the `data` map (unknown or bad values read as unset).
    pub fn parse(data: &BTreeMap<String, String>) -> Checkpoint {
        let num = |k: &str| get(data, k).and_then(|v| v.parse().ok()).unwrap_or(0);
        let text = |k: &str| get(data, k).map(str::to_string);
        Checkpoint {
            epoch: num("epoch"),
            next_seq: num("nextSeq"),
            last_ack_seq: num("lastAckSeq"),
            last_ack_at: text("lastAckAt"),
            last_snapshot_id: text("lastSnapshotId"),
            last_snapshot_complete_at: text("lastSnapshotCompleteAt"),
        }
    }

    /// The `data` map.
    pub fn render(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        out.insert("epoch".into(), self.epoch.to_string());
        out.insert("nextSeq".into(), self.next_seq.to_string());
        out.insert("lastAckSeq".into(), self.last_ack_seq.to_string());
        let mut opt = |k: &str, v: &Option<String>| {
            out.insert(k.into(), v.clone().unwrap_or_default());
        };
        opt("lastAckAt", &self.last_ack_at);
        opt("lastSnapshotId", &self.last_snapshot_id);
        opt("lastSnapshotCompleteAt", &self.last_snapshot_complete_at);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn settings_parse_and_refuse() {
        let s = Settings::parse(&map(&[
            ("url", "https://saas.example/x/"),
            ("agentId", "prod-eu-1"),
            ("tasks.namespaces", "team-*, ops"),
        ]))
        .unwrap();
        assert_eq!(s.base(), "https://saas.example/x/v1/agents/prod-eu-1");
        assert_eq!(s.cluster_name, "prod-eu-1");
        assert!(s.task_allowed("team-a") && s.task_allowed("ops") && !s.task_allowed("kube-system"));
        assert!(Settings::parse(&map(&[("url", "http://127.0.0.1:8080"), ("agentId", "a")])).is_ok());
        for (url, agent, want) in [
            ("", "a", "url is missing"),
            ("http://saas.example", "a", "loopback"),
            ("https://user:pw@saas.example", "a", "without credentials"),
            ("https://saas.example?token=x", "a", "without credentials"),
            ("ftp://saas.example", "a", "https"),
            ("https://saas.example", "a/b", "agentId"),
        ] {
            let err = Settings::parse(&map(&[("url", url), ("agentId", agent)]))
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{url} {agent}: {err}");
            assert!(!err.contains("pw"), "{err}");
        }
        let none = Settings::parse(&map(&[("url", "https://s"), ("agentId", "a")])).unwrap();
        assert!(
            !none.task_allowed("default"),
            "no tasks.namespaces: every task is rejected"
        );
        let bad = Settings::parse(&map(&[
            ("url", "https://s"),
            ("agentId", "a"),
            ("insecureSkipTLSVerify", "yes"),
        ]));
        assert!(bad.is_err());
    }

    #[test]
    fn credentials_parse_and_never_show() {
        let data: BTreeMap<String, Vec<u8>> = [("token", "s3cr3t\n"), ("hmacKey", "k")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        let c = Credentials::parse(&data).unwrap();
        assert_eq!(c.token, "s3cr3t");
        assert_eq!(c.hmac_key.as_deref(), Some(&b"k"[..]));
        assert!(!format!("{c:?}").contains("s3cr3t"));
        assert!(Credentials::parse(&BTreeMap::new()).is_err());
        let spaced: BTreeMap<String, Vec<u8>> = [("token".to_string(), b"a b".to_vec())].into();
        assert!(!Credentials::parse(&spaced).unwrap_err().to_string().contains("a b"));
    }

    #[test]
    fn checkpoint_round_trips_and_tolerates_garbage() {
        let cp = Checkpoint {
            epoch: 4,
            next_seq: 17,
            last_ack_seq: 16,
            last_ack_at: Some("2026-11-26T10:04:05.123Z".into()),
            last_snapshot_id: Some("s1-1".into()),
            last_snapshot_complete_at: Some("2026-11-26T10:00:00.000Z".into()),
        };
        assert_eq!(Checkpoint::parse(&cp.render()), cp);
        assert_eq!(Checkpoint::parse(&map(&[("epoch", "x")])), Checkpoint::default());
        assert_eq!(
            Checkpoint::parse(&Checkpoint::default().render()),
            Checkpoint::default()
        );
    }
}
