//! Tenancy rules that belong to the spec: which namespaces may use a shared Repository or Cluster
//! (`spec.sourceNamespaces`), and what a ServiceAccount name in `spec.destination.serviceAccountName` may be.
//!
//! # `sourceNamespaces` patterns
//! A pattern is matched against the whole namespace name of the Application (or ApplicationSet) that
//! wants to use the object:
//! - `*` matches any run of characters, the empty run included (`team-*` matches `team-a` and `team-`);
//! - `?` matches exactly one character;
//! - every other character matches itself. There is no negation: a pattern may only hold what a
//!   namespace name holds (`a-z`, `0-9`, `-`) plus `*` and `?`, so `!team-a` is refused when the object is
//!   written (an allow-list with exceptions is easy to get wrong; list what is allowed instead).
//!
//! An empty list allows only the object's own namespace; `"*"` allows every namespace. The list only
//! widens use for objects in the operator namespace: a Repository or Cluster in any other namespace serves
//! that namespace alone, whatever it lists, so a tenant cannot offer its credentials to another team nor
//! take someone else's.

/// Longest pattern accepted (a namespace name is at most 63 characters; `*` may stand for several).
pub const MAX_PATTERN_LEN: usize = 253;
/// Most patterns in one `sourceNamespaces` list.
pub const MAX_PATTERNS: usize = 100;
/// The CRD's pattern for one `sourceNamespaces` entry (see the module doc).
pub const PATTERN_REGEX: &str = r"^[a-z0-9*?-]+$";

/// Whether `pattern` matches the whole namespace name `name` (module doc): the code base's one glob
/// matcher with only `*` and `?`, neither of which ever matches `/`.
pub fn glob_match(pattern: &str, name: &str) -> bool {
    crate::glob::glob_match(pattern, name, crate::glob::Options::NAMES)
}

/// Whether an object in `object_namespace` with `source_namespaces` may serve an Application (or
/// ApplicationSet) in `user_namespace`; see the module doc.
pub fn source_namespace_allowed(
    source_namespaces: &[String],
    object_namespace: &str,
    operator_namespace: &str,
    user_namespace: &str,
) -> bool {
    if object_namespace == user_namespace {
        return true;
    }
    object_namespace == operator_namespace && source_namespaces.iter().any(|p| glob_match(p, user_namespace))
}

/// Checks a `spec.destination.serviceAccountName`: a ServiceAccount name in the Application's namespace,
/// which must be a DNS-1123 label (lower-case alphanumerics and `-`, starting and ending alphanumeric, at
/// most 63 characters). Kubernetes itself allows subdomains for ServiceAccounts, but a name with `:` or
/// `/` could smuggle another namespace into the impersonated user name, and a label is what every real
/// ServiceAccount uses; the CRD has the same rule.
pub fn validate_service_account_name(name: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("serviceAccountName {name:?} is not a valid name: {why}"));
    if name.is_empty() {
        return bad("it is empty");
    }
    if name.len() > 63 {
        return bad("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return bad("only lower-case letters, digits and '-' are allowed (a DNS-1123 label)");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return bad("it must start and end with a letter or digit");
    }
    Ok(())
}

/// The CRD's pattern for `serviceAccountName` (same rule as [`validate_service_account_name`]).
pub const SERVICE_ACCOUNT_NAME_REGEX: &str = super::names::DNS1123_LABEL_REGEX;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_literals_stars_and_question_marks() {
        assert!(glob_match("team-a", "team-a"));
        assert!(!glob_match("team-a", "team-ab"));
        assert!(!glob_match("team-a", "team-"));
        assert!(glob_match("team-*", "team-a"));
        assert!(glob_match("team-*", "team-"));
        assert!(!glob_match("team-*", "teamx"));
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "kube-system"));
        assert!(glob_match("*-prod", "shop-prod"));
        assert!(!glob_match("*-prod", "shop-prod-2"));
        assert!(glob_match("t?am-*-x", "team-blue-x"));
        assert!(!glob_match("t?am", "tam"));
        assert!(glob_match("a*b*c", "aXXbYYbc"));
        assert!(!glob_match("a*b*c", "aXXbYYb"));
        assert!(glob_match("**a**", "a"));
        assert!(!glob_match("", "a"));
    }

    #[test]
    fn glob_has_no_negation_or_character_classes() {
        assert!(!glob_match("!team-a", "team-b"));
        assert!(!glob_match("!team-a", "team-a"));
        assert!(!glob_match("team-[ab]", "team-a"));
        assert!(glob_match("team-[ab]", "team-[ab]"));
        let re = regex::Regex::new(PATTERN_REGEX).unwrap();
        assert!(re.is_match("team-*"));
        assert!(!re.is_match("!team-a"));
        assert!(!re.is_match("team-[ab]"));
    }

    #[test]
    fn glob_worst_case_is_bounded_and_a_star_stays_out_of_paths() {
        let pattern = "*a".repeat(50);
        let name = "a".repeat(63) + "b";
        assert!(!glob_match(&pattern, &name));
        assert!(!glob_match("team-*", "team-x/../capstan-system"));
    }

    #[test]
    fn source_namespaces_only_widen_the_operator_namespace() {
        let list = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let op = "capstan-system";
        assert!(source_namespace_allowed(&[], "team-a", op, "team-a"));
        assert!(source_namespace_allowed(&[], op, op, op));
        assert!(!source_namespace_allowed(&[], op, op, "team-a"));
        assert!(source_namespace_allowed(&list(&["team-*"]), op, op, "team-a"));
        assert!(!source_namespace_allowed(&list(&["team-*"]), op, op, "shop"));
        assert!(source_namespace_allowed(&list(&["*"]), op, op, "anything"));
        // Elsewhere the list widens nothing.
        assert!(!source_namespace_allowed(&list(&["*"]), "team-a", op, "team-b"));
    }

    #[test]
    fn service_account_names() {
        for good in ["capstan-deployer", "a", "deployer1", &"a".repeat(63)] {
            assert_eq!(validate_service_account_name(good), Ok(()), "{good}");
        }
        for bad in [
            "",
            "-lead",
            "trail-",
            "Upper",
            "team-b:admin",
            "system:serviceaccount:kube-system:default",
            "a/b",
            "a.b",
            "a b",
            &"a".repeat(64),
        ] {
            assert!(validate_service_account_name(bad).is_err(), "{bad}");
        }
        let re = regex::Regex::new(SERVICE_ACCOUNT_NAME_REGEX).unwrap();
        assert!(re.is_match("capstan-deployer"));
        assert!(!re.is_match("a:b") && !re.is_match("-a") && !re.is_match("a-"));
    }
}
