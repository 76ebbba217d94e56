//! What a Kubernetes name may be: a DNS-1123 label (namespaces, ServiceAccounts) or a DNS-1123
//! subdomain (most objects, Helm release names). One definition, because a string that is not a name
//! must never reach an API path or a tool's command line where it could mean something else
//! (`team-x/../capstan-system`, `--set-file=…`).

/// The CRD pattern of a DNS-1123 label (same rule as [`is_dns1123_label`], without the length).
pub const DNS1123_LABEL_REGEX: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$";
/// The CRD pattern of a DNS-1123 subdomain (same rule as [`is_dns1123_subdomain`], without the length).
/// (`[.]` rather than `\.`: the pattern also sits in a CEL string, where `\.` is no valid escape.)
pub const DNS1123_SUBDOMAIN_REGEX: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
/// Longest DNS-1123 label.
pub const MAX_LABEL_LEN: usize = 63;
/// Longest DNS-1123 subdomain.
pub const MAX_SUBDOMAIN_LEN: usize = 253;

/// Lower-case alphanumerics and `-`, starting and ending alphanumeric, 1 to 63 characters.
pub fn is_dns1123_label(s: &str) -> bool {
    s.len() <= MAX_LABEL_LEN && label_chars(s)
}

/// Parts with a label's characters (of any length, as Kubernetes' own pattern has it) joined by `.`,
/// 1 to 253 characters in all.
pub fn is_dns1123_subdomain(s: &str) -> bool {
    s.len() <= MAX_SUBDOMAIN_LEN && s.split('.').all(label_chars)
}

/// Non-empty, lower-case alphanumerics and `-`, starting and ending alphanumeric.
fn label_chars(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_subdomains_agree_with_their_crd_patterns() {
        let label = regex::Regex::new(DNS1123_LABEL_REGEX).unwrap();
        let subdomain = regex::Regex::new(DNS1123_SUBDOMAIN_REGEX).unwrap();
        let table: &[(&str, bool, bool)] = &[
            ("a", true, true),
            ("team-a", true, true),
            ("0x9", true, true),
            ("web.team-a", false, true),
            ("a.b.c", false, true),
            ("", false, false),
            ("-a", false, false),
            ("a-", false, false),
            ("A", false, false),
            ("a..b", false, false),
            (".a", false, false),
            ("a.", false, false),
            ("a.-b", false, false),
            ("a_b", false, false),
            ("a b", false, false),
            ("a/b", false, false),
            ("team-x/../capstan-system", false, false),
            ("--set-file=leak=/etc/passwd", false, false),
            ("a:b", false, false),
            ("é", false, false),
        ];
        for (s, is_label, is_subdomain) in table {
            assert_eq!(is_dns1123_label(s), *is_label, "label {s:?}");
            assert_eq!(is_dns1123_subdomain(s), *is_subdomain, "subdomain {s:?}");
            assert_eq!(label.is_match(s), *is_label, "label pattern {s:?}");
            assert_eq!(subdomain.is_match(s), *is_subdomain, "subdomain pattern {s:?}");
        }
        assert!(is_dns1123_label(&"a".repeat(63)) && !is_dns1123_label(&"a".repeat(64)));
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(long.len(), 255);
        assert!(!is_dns1123_subdomain(&long) && is_dns1123_subdomain(&long[2..]));
        assert!(
            is_dns1123_subdomain(&"a".repeat(100)),
            "no bound per part, as the API server's pattern"
        );
    }
}
