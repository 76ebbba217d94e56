//! OpenSSH `known_hosts` parsing and host-key matching (pure, no I/O).
//!
//! SSH host keys are checked strictly against the known_hosts content of the Repository's Secret
//! (or the operator default): trusting on first use would let anyone who can spoof DNS or the
//! network path serve manifests. Supported: plain and comma-separated host patterns, `[host]:port`,
//! `*`/`?` wildcards, `!` negation, hashed `|1|salt|hash` entries and `@revoked`.
//! `@cert-authority` lines are ignored (host certificates are not supported).

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use hmac::{Hmac, Mac};
use sha1::Sha1;

use crate::glob::{glob_match, Options};

/// Upper bound on the known_hosts content we parse.
const MAX_KNOWN_HOSTS_BYTES: usize = 1 << 20;

/// One usable known_hosts line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownHost {
    patterns: String,
    revoked: bool,
    /// Key type name, e.g. `ssh-ed25519`.
    pub key_type: String,
    /// The public key blob (SSH wire format), base64-decoded.
    pub key: Vec<u8>,
}

/// Result of checking a presented host key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKeyCheck {
    /// A listed key for this host equals the presented key.
    Trusted,
    /// The host is listed, but with other keys (possible man in the middle).
    Mismatch,
    /// The presented key is marked `@revoked`.
    Revoked,
    /// The host is not listed at all.
    Unknown,
}

/// Parses known_hosts content, skipping comments, blank, malformed and `@cert-authority` lines.
pub fn parse(content: &str) -> Vec<KnownHost> {
    let content = if content.len() > MAX_KNOWN_HOSTS_BYTES {
        ""
    } else {
        content
    };
    content.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<KnownHost> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let mut fields = line.split_whitespace();
    let mut first = fields.next()?;
    let mut revoked = false;
    if first.starts_with('@') {
        match first {
            "@revoked" => revoked = true,
            _ => return None,
        }
        first = fields.next()?;
    }
    let key_type = fields.next()?.to_string();
    let key = B64.decode(fields.next()?).ok()?;
    Some(KnownHost {
        patterns: first.to_string(),
        revoked,
        key_type,
        key,
    })
}

/// The name OpenSSH looks up: `host` for port 22, `[host]:port` otherwise.
pub fn lookup_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

impl KnownHost {
    /// Whether this line's host patterns select `name` (as built by [`lookup_name`]).
    pub fn matches_host(&self, name: &str) -> bool {
        if let Some(hashed) = self.patterns.strip_prefix("|1|") {
            return hashed_matches(hashed, name);
        }
        let mut matched = false;
        for pat in self.patterns.split(',') {
            if let Some(neg) = pat.strip_prefix('!') {
                if wildcard_match(&neg.to_ascii_lowercase(), name) {
                    return false;
                }
            } else if wildcard_match(&pat.to_ascii_lowercase(), name) {
                matched = true;
            }
        }
        matched
    }
}

/// Checks `presented` (SSH wire-format key blob) for `host`:`port` against `entries`.
pub fn check(entries: &[KnownHost], host: &str, port: u16, presented: &[u8]) -> HostKeyCheck {
    let name = lookup_name(&host.to_ascii_lowercase(), port);
    let for_host: Vec<&KnownHost> = entries.iter().filter(|e| e.matches_host(&name)).collect();
    if for_host.iter().any(|e| e.revoked && e.key == presented) {
        return HostKeyCheck::Revoked;
    }
    if for_host.iter().any(|e| !e.revoked && e.key == presented) {
        return HostKeyCheck::Trusted;
    }
    if for_host.iter().any(|e| !e.revoked) {
        HostKeyCheck::Mismatch
    } else {
        HostKeyCheck::Unknown
    }
}

/// `|1|base64(salt)|base64(HMAC-SHA1(salt, name))`.
fn hashed_matches(hashed: &str, name: &str) -> bool {
    let Some((salt, hash)) = hashed.split_once('|') else {
        return false;
    };
    let (Ok(salt), Ok(hash)) = (B64.decode(salt), B64.decode(hash)) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha1>::new_from_slice(&salt) else {
        return false;
    };
    mac.update(name.as_bytes());
    mac.verify_slice(&hash).is_ok()
}

/// OpenSSH host patterns: `*` any run, `?` one character, the rest literal (brackets included, so
/// `[host]:port` names match) — the code base's one glob matcher with [`Options::NAMES`].
fn wildcard_match(pattern: &str, text: &str) -> bool {
    glob_match(pattern, text, Options::NAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY_A: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";
    const KEY_B: &str = "AAAAC3NzaC1lZDI1NTE5AAAAIBBBBnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl";

    fn key(b: &str) -> Vec<u8> {
        B64.decode(b).unwrap()
    }

    #[test]
    fn plain_port_and_wildcards() {
        let kh = parse(&format!(
            "# comment\n\ngithub.com,140.82.112.3 ssh-ed25519 {KEY_A}\n[127.0.0.1]:2222 ssh-ed25519 {KEY_B} c\n*.corp.example,!bad.corp.example ssh-ed25519 {KEY_A}\ngarbage\n"
        ));
        assert_eq!(kh.len(), 3);
        assert_eq!(check(&kh, "GitHub.com", 22, &key(KEY_A)), HostKeyCheck::Trusted);
        assert_eq!(check(&kh, "github.com", 22, &key(KEY_B)), HostKeyCheck::Mismatch);
        assert_eq!(check(&kh, "github.com", 2222, &key(KEY_A)), HostKeyCheck::Unknown);
        assert_eq!(check(&kh, "127.0.0.1", 2222, &key(KEY_B)), HostKeyCheck::Trusted);
        assert_eq!(check(&kh, "127.0.0.1", 22, &key(KEY_B)), HostKeyCheck::Unknown);
        assert_eq!(check(&kh, "git.corp.example", 22, &key(KEY_A)), HostKeyCheck::Trusted);
        assert_eq!(check(&kh, "bad.corp.example", 22, &key(KEY_A)), HostKeyCheck::Unknown);
        assert_eq!(check(&kh, "github.com.evil", 22, &key(KEY_A)), HostKeyCheck::Unknown);
    }

    #[test]
    fn hashed_entries() {
        // Built like `ssh-keygen -H`: HMAC-SHA1 keyed by the salt over the lookup name.
        let salt = b"0123456789abcdefghij";
        let mut mac = Hmac::<Sha1>::new_from_slice(salt).unwrap();
        mac.update(b"[git.example.com]:2222");
        let hash = mac.finalize().into_bytes();
        let line = format!("|1|{}|{} ssh-ed25519 {KEY_A}", B64.encode(salt), B64.encode(hash));
        let kh = parse(&line);
        assert_eq!(check(&kh, "git.example.com", 2222, &key(KEY_A)), HostKeyCheck::Trusted);
        assert_eq!(check(&kh, "git.example.com", 22, &key(KEY_A)), HostKeyCheck::Unknown);
    }

    #[test]
    fn revoked_wins() {
        let kh = parse(&format!(
            "h ssh-ed25519 {KEY_A}\n@revoked h ssh-ed25519 {KEY_A}\n@cert-authority * ssh-ed25519 {KEY_B}"
        ));
        assert_eq!(check(&kh, "h", 22, &key(KEY_A)), HostKeyCheck::Revoked);
        assert_eq!(check(&kh, "other", 22, &key(KEY_B)), HostKeyCheck::Unknown);
    }

    #[test]
    fn host_patterns_match_bracketed_ports_literally() {
        assert!(wildcard_match("a*b*c", "axxbyyc"));
        assert!(!wildcard_match("a*b*c", "axxbyy"));
        assert!(wildcard_match("[*.example.com]:2222", "[git.example.com]:2222"));
        assert!(!wildcard_match("[*.example.com]:2222", "[git.example.com]:22"));
    }
}
