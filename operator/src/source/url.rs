//! Repository URL validation, normalisation and sanitisation (pure, no I/O).
//!
//! Every URL that reaches libgit2 passes through [`RepoUrl::parse`] first. The checks exist because
//! a URL is attacker-controlled input (it comes from a CR): option-looking strings (`--upload-pack=…`)
//! and control characters have been used against git tooling, and `ext::`-style transports run
//! commands. Userinfo passwords and query strings are never echoed: [`RepoUrl::sanitized`] is the
//! only form that may appear in messages.

use std::fmt;

use super::SourceError;

/// Upper bound on a URL's length; real repository URLs are far shorter.
const MAX_URL_LEN: usize = 2048;

/// The transport a URL selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// `https://`
    Https,
    /// `http://` (plain; allowed because Argo CD allows it, e.g. for in-cluster Gitea).
    Http,
    /// `ssh://` or scp-like `user@host:path`.
    Ssh,
    /// `git://` (git daemon, unauthenticated).
    Git,
    /// `file://` (local use and tests).
    File,
}

impl Transport {
    fn scheme(self) -> &'static str {
        match self {
            Transport::Https => "https",
            Transport::Http => "http",
            Transport::Ssh => "ssh",
            Transport::Git => "git",
            Transport::File => "file",
        }
    }

    fn default_port(self) -> Option<u16> {
        match self {
            Transport::Https => Some(443),
            Transport::Http => Some(80),
            Transport::Ssh => Some(22),
            Transport::Git => Some(9418),
            Transport::File => None,
        }
    }

    /// Whether the transport reaches a server over the network (everything but `file://`).
    pub fn is_network(self) -> bool {
        !matches!(self, Transport::File)
    }

    /// Whether libgit2 can do a shallow fetch over this transport. The local (`file://`)
    /// transport copies objects directly and has no depth negotiation, so we never ask it to.
    pub fn supports_shallow(self) -> bool {
        !matches!(self, Transport::File)
    }
}

/// A validated repository URL.
///
/// Holds the string handed to libgit2 (`as_git_url`), the components used for credential-template
/// matching and cache keys, and never a password (URLs with a password are refused).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct RepoUrl {
    original: String,
    transport: Transport,
    username: Option<String>,
    host: String,
    port: Option<u16>,
    path: String,
}

impl fmt::Debug for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RepoUrl({})", self.sanitized())
    }
}

impl fmt::Display for RepoUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.sanitized())
    }
}

impl RepoUrl {
    /// Parses and validates a repository URL (`https`, `http`, `ssh`, scp-like, `git`, `file`).
    pub fn parse(input: &str) -> Result<Self, SourceError> {
        check_common(input)?;
        let parts = split(input)?;
        if parts.has_password {
            return Err(invalid(
                &parts,
                "must not embed a password; put credentials in the Secret",
            ));
        }
        if parts.has_query {
            return Err(invalid(&parts, "must not carry a query string or fragment"));
        }
        if parts.transport != Transport::File {
            check_host(&parts)?;
        }
        if parts.path.split('/').any(|seg| seg.starts_with('-')) {
            return Err(invalid(&parts, "path segments must not start with '-'"));
        }
        Ok(RepoUrl {
            original: input.to_string(),
            transport: parts.transport,
            username: parts.username,
            host: parts.host.to_ascii_lowercase(),
            port: parts.port.filter(|p| Some(*p) != parts.transport.default_port()),
            path: parts.path,
        })
    }

    /// The string given to libgit2 (the validated original, so scp-like paths keep their meaning).
    pub fn as_git_url(&self) -> &str {
        &self.original
    }

    /// The transport this URL selects.
    pub fn transport(&self) -> Transport {
        self.transport
    }

    /// The lower-cased host (empty for `file://`).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The TCP port, defaulted per transport.
    pub fn port(&self) -> Option<u16> {
        self.port.or(self.transport.default_port())
    }

    /// The username embedded in the URL (`git@host:…`), if any.
    pub fn username(&self) -> Option<&str> {
        self.username.as_deref()
    }

    /// Path segments without empty parts and without a trailing `.git`, for prefix matching.
    pub fn segments(&self) -> Vec<&str> {
        let mut segs: Vec<&str> = self.path.split('/').filter(|s| !s.is_empty()).collect();
        if let Some(last) = segs.last_mut() {
            if let Some(stripped) = last.strip_suffix(".git") {
                *last = stripped;
            }
        }
        segs
    }

    /// The identity of the repository: scheme, host, non-default port and path, without userinfo
    /// and without a trailing `/` or `.git`. Two spellings of one repository share one cache.
    pub fn normalized(&self) -> String {
        let mut out = format!("{}://{}", self.transport.scheme(), self.host);
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        for seg in self.segments() {
            out.push('/');
            out.push_str(seg);
        }
        out
    }

    /// The only form of the URL that may appear in messages: no userinfo, no query.
    pub fn sanitized(&self) -> String {
        let mut out = format!("{}://{}", self.transport.scheme(), self.host);
        if let Some(port) = self.port {
            out.push_str(&format!(":{port}"));
        }
        if !self.path.starts_with('/') {
            out.push('/');
        }
        out.push_str(&self.path);
        out
    }
}

/// Which transports a namespace may use. Outside the operator namespace only network transports
/// (`https`, `http`, `ssh` including scp-like `git@host:path`, `git`; `oci` once it is supported): a
/// `file://` URL would read whatever the operator can read on its own disk — its Git cache holds other
/// teams' and the platform's mirrored repositories — without any credential or Repository being involved,
/// so no `sourceNamespaces` rule could ever apply. In the operator namespace `file://` is possible when the
/// operator runs with `--allow-local-repositories` (tests, `make demo`, a bootstrap from a local
/// repository); never for tenants. Bare paths are refused by [`RepoUrl::parse`] already.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UrlPolicy {
    /// The operator namespace.
    pub operator_namespace: String,
    /// `--allow-local-repositories`: `file://` in the operator namespace.
    pub allow_local: bool,
}

impl UrlPolicy {
    /// Whether an object in `namespace` may use `url`; the error names the rule.
    pub fn check(&self, url: &RepoUrl, namespace: &str) -> Result<(), SourceError> {
        if url.transport().is_network() {
            return Ok(());
        }
        let refused = |rule: String| {
            Err(SourceError::TransportNotAllowed(format!(
                "repository URL {url}: {rule}"
            )))
        };
        if namespace != self.operator_namespace {
            return refused(format!(
                "outside the operator namespace {} only network transports (https, http, ssh, git, oci) may be \
                 used; file:// and local paths are refused",
                self.operator_namespace
            ));
        }
        if !self.allow_local {
            return refused(
                "file:// repositories are refused unless the operator runs with --allow-local-repositories".into(),
            );
        }
        Ok(())
    }
}

/// Components of a URL before validation.
struct Parts {
    transport: Transport,
    username: Option<String>,
    has_password: bool,
    has_query: bool,
    host: String,
    port: Option<u16>,
    path: String,
}

fn invalid(parts: &Parts, why: &str) -> SourceError {
    let shown = format!(
        "{}://{}/{}",
        parts.transport.scheme(),
        parts.host,
        parts.path.trim_start_matches('/')
    );
    SourceError::InvalidInput(format!("repository URL {} {why}", strip_userinfo_and_query(&shown)))
}

/// Checks that apply to any string before it is parsed: length, leading '-', control characters.
fn check_common(input: &str) -> Result<(), SourceError> {
    if input.is_empty() {
        return Err(SourceError::InvalidInput("repository URL is empty".into()));
    }
    if input.len() > MAX_URL_LEN {
        return Err(SourceError::InvalidInput("repository URL is too long".into()));
    }
    if input.starts_with('-') {
        return Err(SourceError::InvalidInput(
            "repository URL must not start with '-'".into(),
        ));
    }
    if input.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(SourceError::InvalidInput(
            "repository URL must not contain control characters or whitespace".into(),
        ));
    }
    Ok(())
}

fn check_host(parts: &Parts) -> Result<(), SourceError> {
    let host = parts.host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(invalid(parts, "has no host"));
    }
    if host.starts_with('-') {
        return Err(invalid(parts, "host must not start with '-'"));
    }
    let ok = host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'));
    if !ok {
        return Err(invalid(parts, "host contains unsupported characters"));
    }
    Ok(())
}

/// Splits a URL into components. scp-like `user@host:path` is recognised when there is no `://`.
fn split(input: &str) -> Result<Parts, SourceError> {
    let Some((scheme, rest)) = input.split_once("://") else {
        return split_scp(input);
    };
    let transport = match scheme.to_ascii_lowercase().as_str() {
        "https" => Transport::Https,
        "http" => Transport::Http,
        "ssh" | "git+ssh" | "ssh+git" => Transport::Ssh,
        "git" => Transport::Git,
        "file" => Transport::File,
        _ => {
            return Err(SourceError::InvalidInput(
                "repository URL has an unsupported scheme".into(),
            ))
        }
    };
    let has_query = rest.contains('?') || rest.contains('#');
    let rest = rest.split(['?', '#']).next().unwrap_or_default();
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hostport) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let (username, has_password) = match userinfo {
        Some(ui) => match ui.split_once(':') {
            Some((u, _)) => (Some(u.to_string()), true),
            None => (Some(ui.to_string()), false),
        },
        None => (None, false),
    };
    let (host, port) = split_host_port(hostport)?;
    Ok(Parts {
        transport,
        username,
        has_password,
        has_query,
        host,
        port,
        path: path.to_string(),
    })
}

fn split_host_port(hostport: &str) -> Result<(String, Option<u16>), SourceError> {
    let bad_port = || SourceError::InvalidInput("repository URL has an invalid port".into());
    if let Some(rest) = hostport.strip_prefix('[') {
        let (h, after) = rest.split_once(']').ok_or_else(bad_port)?;
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p.parse::<u16>().map_err(|_| bad_port())?),
            None if after.is_empty() => None,
            None => return Err(bad_port()),
        };
        return Ok((format!("[{h}]"), port));
    }
    match hostport.rsplit_once(':') {
        Some((h, p)) => Ok((h.to_string(), Some(p.parse::<u16>().map_err(|_| bad_port())?))),
        None => Ok((hostport.to_string(), None)),
    }
}

/// scp-like syntax: `[user@]host:path`. Anything else without a scheme is refused (local paths
/// must be spelled `file://` so that a bare word is never taken as a path or an option).
fn split_scp(input: &str) -> Result<Parts, SourceError> {
    let refuse = || {
        SourceError::InvalidInput("repository URL must be https://, ssh://, git://, file:// or user@host:path".into())
    };
    let (left, path) = input.split_once(':').ok_or_else(refuse)?;
    if left.contains('/') || path.is_empty() || path.starts_with(':') {
        return Err(refuse());
    }
    let (username, host) = match left.rsplit_once('@') {
        Some((u, h)) => (Some(u.to_string()), h.to_string()),
        None => (None, left.to_string()),
    };
    let has_query = path.contains('?') || path.contains('#');
    Ok(Parts {
        transport: Transport::Ssh,
        username,
        has_password: false,
        has_query,
        host,
        port: None,
        path: path.to_string(),
    })
}

/// Removes `user:pass@` and `?query`/`#fragment` from every URL-looking token in free text.
///
/// Used on every message that may quote a URL (libgit2 errors do), so that a credential that
/// slipped into a URL upstream still never reaches status, events or logs.
pub fn strip_userinfo_and_query(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("://") {
        let (before, after) = rest.split_at(i + 3);
        out.push_str(before);
        let end = after
            .find(|c: char| c.is_whitespace() || matches!(c, '\'' | '"' | '<' | '>'))
            .unwrap_or(after.len());
        let token = &after[..end];
        let authority_end = token.find('/').unwrap_or(token.len());
        let authority = &token[..authority_end];
        let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
        let path = &token[authority_end..];
        let path = path.split(['?', '#']).next().unwrap_or_default();
        out.push_str(host);
        out.push_str(path);
        rest = &after[end..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        let u = RepoUrl::parse("https://GitHub.com/Org/Repo.git").unwrap();
        assert_eq!(u.normalized(), "https://github.com/Org/Repo");
        assert_eq!(u.port(), Some(443));
        let u = RepoUrl::parse("git@github.com:org/repo.git").unwrap();
        assert_eq!(u.transport(), Transport::Ssh);
        assert_eq!(u.username(), Some("git"));
        assert_eq!(u.normalized(), "ssh://github.com/org/repo");
        let u = RepoUrl::parse("ssh://git@127.0.0.1:2222/srv/repo.git").unwrap();
        assert_eq!(u.port(), Some(2222));
        assert_eq!(u.normalized(), "ssh://127.0.0.1:2222/srv/repo");
        let u = RepoUrl::parse("file:///tmp/x/repo.git").unwrap();
        assert_eq!(u.normalized(), "file:///tmp/x/repo");
        assert_eq!(
            RepoUrl::parse("https://h.example/o/r/").unwrap().normalized(),
            RepoUrl::parse("https://h.example:443/o/r.git").unwrap().normalized()
        );
    }

    #[test]
    fn rejects_option_like_and_control_characters() {
        for bad in [
            "--upload-pack=touch /tmp/pwned",
            "-oProxyCommand=x",
            "ssh://-oProxyCommand=x/repo",
            "https://host/repo\n",
            "https://host/re\u{7}po",
            "https://host/ repo",
            "ext::sh -c touch% /tmp/pwned",
            "-host:path",
            "git@-oProxyCommand=x:repo",
            "https://host/-repo",
            "relative/path",
            "",
        ] {
            assert!(RepoUrl::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn local_repositories_only_in_the_operator_namespace_and_only_by_flag() {
        let policy = |allow_local| UrlPolicy {
            operator_namespace: "capstan-system".into(),
            allow_local,
        };
        let local = RepoUrl::parse("file:///var/cache/capstan/repos/abc.git").unwrap();
        for network in [
            "https://git.example.com/org/repo.git",
            "http://gitea.gitea.svc/org/repo.git",
            "ssh://git@git.example.com/org/repo.git",
            "git@git.example.com:org/repo.git",
            "git://127.0.0.1:9418/repo.git",
        ] {
            let url = RepoUrl::parse(network).unwrap();
            for allow in [false, true] {
                assert_eq!(policy(allow).check(&url, "team-a"), Ok(()), "{network}");
                assert_eq!(policy(allow).check(&url, "capstan-system"), Ok(()), "{network}");
            }
        }
        for allow in [false, true] {
            let err = policy(allow).check(&local, "team-a").unwrap_err();
            assert_eq!(err.category(), "TransportNotAllowed");
            assert!(err.to_string().contains("outside the operator namespace"), "{err}");
        }
        let err = policy(false).check(&local, "capstan-system").unwrap_err();
        assert!(err.to_string().contains("--allow-local-repositories"), "{err}");
        assert_eq!(policy(true).check(&local, "capstan-system"), Ok(()));
        // Bare paths never parse, whatever the namespace.
        for bare in ["/srv/git/repo.git", "./repo", "repo"] {
            assert!(RepoUrl::parse(bare).is_err(), "{bare}");
        }
    }

    #[test]
    fn refuses_password_and_query_without_echoing_them() {
        let err = RepoUrl::parse("https://user:CANARY-pw@host/r").unwrap_err();
        assert!(!err.to_string().contains("CANARY"), "{err}");
        let err = RepoUrl::parse("https://host/r?sig=CANARY").unwrap_err();
        assert!(!err.to_string().contains("CANARY"), "{err}");
    }

    #[test]
    fn strips_userinfo_and_query_from_text() {
        let s = strip_userinfo_and_query("failed 'https://u:CANARY@x.blob.core.windows.net/c/i.yaml?sig=CANARY' now");
        assert_eq!(s, "failed 'https://x.blob.core.windows.net/c/i.yaml' now");
    }
}
