//! The one glob matcher of the code base: namespace patterns (`sourceNamespaces`, the reporter's
//! `tasks.namespaces`), known_hosts host patterns, directory `include`/`exclude`, Helm value-file globs,
//! `manifest-generate-paths` and the ApplicationSet Git generator's paths all match through it.
//!
//! One matcher so one rule holds everywhere: **a wildcard never matches `/` unless the caller asks for it
//! by name** ([`Options::separator`] `None`). A namespace pattern `team-*` must not accept
//! `team-x/../capstan-system`, which an API path would take for another namespace. The callers that follow
//! Argo CD where a `*` does cross `/` (directory include/exclude compiled by gobwas/glob without
//! separators, Git generator file paths matched as `git ls-files` pathspecs) say so with a named preset.
//!
//! Syntax beyond `*` and `?` is opt-in per caller ([`Options`]): `[abc]`, `[a-z]`, `[!a]`/`[^a]` classes,
//! `\x` escapes and nestable `{a,b}` alternation. A malformed pattern (an unclosed class, a trailing `\`)
//! is an error, as in Go's `path.Match`.
//!
//! Matching simulates the pattern as a set of positions, one step per character of the text, so the worst
//! case is O(pattern × text) whatever the pattern: no backtracking, no recursion. Patterns are bounded in
//! length and in the number of alternatives braces may expand to.
//!
//! A leaf module (no dependencies inside the crate): `api` and every pure layer may use it.

use std::fmt;

/// Longest pattern accepted.
pub const MAX_PATTERN_LEN: usize = 4096;
/// Most alternatives a pattern's `{a,b}` groups may expand to.
pub const MAX_ALTERNATIVES: usize = 256;

/// What a pattern may say, and whether its wildcards may cross a separator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Options {
    /// The character no wildcard (`*`, `?`, a class) ever matches: `Some('/')` by default. `None` lets
    /// wildcards match anything, as Argo CD's directory globs and `git ls-files` pathspecs do.
    pub separator: Option<char>,
    /// `[...]` classes (else `[` is an ordinary character).
    pub classes: bool,
    /// `\x` matches `x` literally (else `\` is an ordinary character).
    pub escapes: bool,
    /// `{a,b}` alternation, nestable (else braces are ordinary characters).
    pub braces: bool,
}

impl Options {
    /// Names and host patterns: `*` any run, `?` one character, everything else literal; no wildcard
    /// matches `/`. Namespace patterns, the reporter's `tasks.namespaces`, known_hosts hosts.
    pub const NAMES: Options = Options {
        separator: Some('/'),
        classes: false,
        escapes: false,
        braces: false,
    };
    /// Go's `path.Match`: `*`, `?`, classes and escapes, wildcards stop at `/` (the Git generator's
    /// directories).
    pub const PATH: Options = Options {
        separator: Some('/'),
        classes: true,
        escapes: true,
        braces: false,
    };
    /// [`Options::PATH`] plus `{a,b}` (Helm value-file globs, expanded one path segment at a time).
    pub const PATH_WITH_BRACES: Options = Options {
        braces: true,
        ..Options::PATH
    };
    /// Argo CD's directory `include`/`exclude` (gobwas/glob compiled without separators): `*` and `?`
    /// cross `/`, classes, escapes and `{a,b}`.
    pub const ARGO_DIRECTORY: Options = Options {
        separator: None,
        classes: true,
        escapes: true,
        braces: true,
    };
    /// `git ls-files -- <pattern>` (fnmatch without `FNM_PATHNAME`): `*` and `?` cross `/`, classes and
    /// escapes, no braces (the Git generator's files, Argo CD's default).
    pub const GIT_PATHSPEC: Options = Options {
        separator: None,
        classes: true,
        escapes: true,
        braces: false,
    };
}

impl Default for Options {
    fn default() -> Self {
        Options::NAMES
    }
}

/// Why a pattern was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GlobError {
    /// Longer than [`MAX_PATTERN_LEN`] bytes.
    TooLong,
    /// Its braces expand to more than [`MAX_ALTERNATIVES`] alternatives.
    TooManyAlternatives,
    /// An unclosed `[` class or a trailing `\`.
    Malformed,
}

impl GlobError {
    /// Stable name of the error.
    pub fn category(&self) -> &'static str {
        match self {
            GlobError::TooLong => "TooLong",
            GlobError::TooManyAlternatives => "TooManyAlternatives",
            GlobError::Malformed => "Malformed",
        }
    }
}

impl fmt::Display for GlobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GlobError::TooLong => write!(f, "glob pattern longer than {MAX_PATTERN_LEN} bytes"),
            GlobError::TooManyAlternatives => {
                write!(f, "glob pattern expands to more than {MAX_ALTERNATIVES} alternatives")
            }
            GlobError::Malformed => f.write_str("syntax error in glob pattern (unclosed '[' or trailing '\\')"),
        }
    }
}

impl std::error::Error for GlobError {}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

/// A compiled pattern: one token list per `{a,b}` alternative.
#[derive(Clone, Debug)]
pub struct Glob {
    alternatives: Vec<Vec<Token>>,
    separator: Option<char>,
}

impl Glob {
    /// Compiles `pattern` under `options`.
    pub fn new(pattern: &str, options: Options) -> Result<Glob, GlobError> {
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(GlobError::TooLong);
        }
        let chars: Vec<char> = pattern.chars().collect();
        let expanded = if options.braces {
            expand_braces(&chars, options.escapes)?
        } else {
            vec![chars]
        };
        let alternatives = expanded
            .iter()
            .map(|alt| tokenize(alt, options))
            .collect::<Result<_, _>>()?;
        Ok(Glob {
            alternatives,
            separator: options.separator,
        })
    }

    /// Whether the whole of `text` matches one alternative.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        self.alternatives
            .iter()
            .any(|tokens| simulate(tokens, &text, self.separator))
    }
}

/// Whether `pattern` matches the whole of `text` under `options`; a malformed pattern matches nothing.
pub fn glob_match(pattern: &str, text: &str, options: Options) -> bool {
    Glob::new(pattern, options).is_ok_and(|g| g.matches(text))
}

/// Expands `{a,b}` groups, outermost first, into plain alternatives (bounded).
fn expand_braces(chars: &[char], escapes: bool) -> Result<Vec<Vec<char>>, GlobError> {
    let mut out = Vec::new();
    let mut work = vec![chars.to_vec()];
    while let Some(pattern) = work.pop() {
        match find_group(&pattern, escapes) {
            None => out.push(pattern),
            Some((open, close, commas)) => {
                let bounds: Vec<usize> = std::iter::once(open).chain(commas).chain([close]).collect();
                for pair in bounds.windows(2) {
                    let mut alt = pattern[..open].to_vec();
                    alt.extend_from_slice(&pattern[pair[0] + 1..pair[1]]);
                    alt.extend_from_slice(&pattern[close + 1..]);
                    work.push(alt);
                }
            }
        }
        if out.len() + work.len() > MAX_ALTERNATIVES {
            return Err(GlobError::TooManyAlternatives);
        }
    }
    out.reverse();
    Ok(out)
}

/// The first top-level brace group: (open index, close index, its top-level commas). An unclosed `{` is
/// an ordinary character.
fn find_group(chars: &[char], escapes: bool) -> Option<(usize, usize, Vec<usize>)> {
    let open = (0..chars.len()).find(|&i| chars[i] == '{' && !escaped(chars, i, escapes))?;
    let (mut depth, mut commas) = (0usize, Vec::new());
    for j in open..chars.len() {
        if escaped(chars, j, escapes) {
            continue;
        }
        match chars[j] {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some((open, j, commas));
                }
            }
            ',' if depth == 1 => commas.push(j),
            _ => {}
        }
    }
    None
}

/// Whether the character at `i` is preceded by an odd run of backslashes (and escapes are on).
fn escaped(chars: &[char], i: usize, escapes: bool) -> bool {
    escapes && chars[..i].iter().rev().take_while(|c| **c == '\\').count() % 2 == 1
}

fn tokenize(chars: &[char], options: Options) -> Result<Vec<Token>, GlobError> {
    let mut tokens = Vec::with_capacity(chars.len());
    let mut i = 0;
    while i < chars.len() {
        let token = match chars[i] {
            '\\' if options.escapes => {
                i += 1;
                Token::Literal(*chars.get(i).ok_or(GlobError::Malformed)?)
            }
            '*' if tokens.last() == Some(&Token::Star) => {
                i += 1;
                continue;
            }
            '*' => Token::Star,
            '?' => Token::AnyChar,
            '[' if options.classes => {
                let (token, end) = parse_class(chars, i, options.escapes)?;
                i = end;
                token
            }
            c => Token::Literal(c),
        };
        tokens.push(token);
        i += 1;
    }
    Ok(tokens)
}

/// The class opening at `start`; returns it and the index of its closing `]`. A `]` right after `[`
/// (or `[!`) is a member, as in Go and fnmatch.
fn parse_class(chars: &[char], start: usize, escapes: bool) -> Result<(Token, usize), GlobError> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let member = |i: usize| -> Result<(char, usize), GlobError> {
        match chars.get(i) {
            Some('\\') if escapes => chars.get(i + 1).map(|c| (*c, i + 2)).ok_or(GlobError::Malformed),
            Some(c) => Ok((*c, i + 1)),
            None => Err(GlobError::Malformed),
        }
    };
    loop {
        if chars.get(i) == Some(&']') && !ranges.is_empty() {
            return Ok((Token::Class { negated, ranges }, i));
        }
        let (lo, after) = member(i)?;
        i = after;
        let hi = if chars.get(i) == Some(&'-') && chars.get(i + 1).is_some_and(|c| *c != ']') {
            let (hi, after) = member(i + 1)?;
            i = after;
            hi
        } else {
            lo
        };
        ranges.push((lo, hi));
    }
}

/// One step of the simulation: whether `token` consumes `c`.
fn consumes(token: &Token, c: char, separator: Option<char>) -> bool {
    if separator == Some(c) && !matches!(token, Token::Literal(_)) {
        return false;
    }
    match token {
        Token::Literal(l) => *l == c,
        Token::AnyChar | Token::Star => true,
        Token::Class { negated, ranges } => ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&c)) != *negated,
    }
}

/// Marks every position reachable from a live one without consuming: a `*` may match nothing.
fn close_over_stars(tokens: &[Token], live: &mut [bool]) {
    for i in 0..tokens.len() {
        if live[i] && tokens[i] == Token::Star {
            live[i + 1] = true;
        }
    }
}

/// Runs the pattern over `text` as a set of live positions (position `tokens.len()` = matched so far):
/// O(tokens × text) steps, whatever the pattern.
fn simulate(tokens: &[Token], text: &[char], separator: Option<char>) -> bool {
    let mut live = vec![false; tokens.len() + 1];
    let mut next = live.clone();
    live[0] = true;
    close_over_stars(tokens, &mut live);
    for &c in text {
        next.iter_mut().for_each(|n| *n = false);
        for (i, token) in tokens.iter().enumerate() {
            if live[i] && consumes(token, c, separator) {
                // A star stays where it is after consuming; anything else moves on.
                next[if *token == Token::Star { i } else { i + 1 }] = true;
            }
        }
        close_over_stars(tokens, &mut next);
        if !next.contains(&true) {
            return false;
        }
        std::mem::swap(&mut live, &mut next);
    }
    live[tokens.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pattern: &str, text: &str, options: Options) -> bool {
        Glob::new(pattern, options).unwrap().matches(text)
    }

    #[test]
    fn a_star_never_crosses_a_slash_by_default() {
        assert!(!glob_match("team-*", "team-x/../capstan-system", Options::default()));
        assert!(!glob_match("team-?", "team-/", Options::default()));
        assert!(!glob_match("*", "a/b", Options::NAMES));
        assert!(!glob_match("apps/*", "apps/a/b", Options::PATH));
        assert!(!glob_match("apps/[a-z/]x", "apps//x", Options::PATH));
        // A literal slash still matches a slash.
        assert!(glob_match("team-*/x", "team-a/x", Options::NAMES));
    }

    #[test]
    fn names_have_only_star_and_question_mark() {
        let o = Options::NAMES;
        for (p, t, want) in [
            ("team-a", "team-a", true),
            ("team-a", "team-ab", false),
            ("team-*", "team-a", true),
            ("team-*", "team-", true),
            ("team-*", "teamx", false),
            ("*", "", true),
            ("*", "kube-system", true),
            ("*-prod", "shop-prod", true),
            ("*-prod", "shop-prod-2", false),
            ("t?am-*-x", "team-blue-x", true),
            ("t?am", "tam", false),
            ("a*b*c", "aXXbYYbc", true),
            ("a*b*c", "aXXbYYb", false),
            ("**a**", "a", true),
            ("", "a", false),
            ("", "", true),
            // No negation, classes, escapes or braces: they are literal characters.
            ("!team-a", "team-b", false),
            ("team-[ab]", "team-a", false),
            ("team-[ab]", "team-[ab]", true),
            ("a\\*", "a\\xyz", true),
            ("{a,b}", "{a,b}", true),
            // known_hosts writes non-default ports as `[host]:port`.
            ("[10.0.0.*]:2222", "[10.0.0.7]:2222", true),
            ("[10.0.0.*]:2222", "[10.0.0.7]:22", false),
        ] {
            assert_eq!(m(p, t, o), want, "{p:?} on {t:?}");
        }
    }

    #[test]
    fn go_path_match() {
        let o = Options::PATH;
        assert!(m("apps/*", "apps/guestbook", o));
        assert!(!m("apps/*", "apps/guestbook/base", o));
        assert!(m("apps/[a-c]?", "apps/b1", o));
        assert!(!m("apps/[^a-c]?", "apps/b1", o));
        assert!(m("apps/[!a-c]?", "apps/d1", o));
        assert!(m("a\\*b", "a*b", o));
        assert!(!m("a\\*b", "axb", o));
        assert!(m("[]a]", "]", o));
        assert!(m("[\\]]", "]", o));
        assert!(m("*/*/c", "a/b/c", o));
        assert!(!m("*/c", "a/b/c", o));
        for bad in ["apps/[", "a\\", "[a-", "[\\"] {
            assert_eq!(Glob::new(bad, o).unwrap_err(), GlobError::Malformed, "{bad:?}");
        }
        assert!(
            !glob_match("apps/[", "apps/[", o),
            "a malformed pattern matches nothing"
        );
    }

    #[test]
    fn argo_directory_globs_cross_slashes_by_name() {
        let o = Options::ARGO_DIRECTORY;
        assert!(m("*.yaml", "a.yaml", o));
        assert!(m("*.yaml", "sub/dir/a.yaml", o));
        assert!(!m("*.yaml", "a.yml", o));
        assert!(m("**/*.yaml", "sub/a.yaml", o));
        assert!(m("sub/*", "sub/x/y.json", o));
        assert!(m("{config,secrets}.yaml", "secrets.yaml", o));
        assert!(!m("{config,secrets}.yaml", "other.yaml", o));
        assert!(m("*.{yaml,json}", "x.json", o));
        assert!(m("{a,b{c,d}}x", "bdx", o));
        assert!(m("file[0-9].yaml", "file3.yaml", o));
        assert!(!m("file[!0-9].yaml", "file3.yaml", o));
        assert!(m("\\{a,b}", "{a,b}", o), "an escaped brace opens no group");
        assert!(m("a?c", "a/c", o));
    }

    #[test]
    fn git_pathspecs_cross_slashes_without_braces() {
        let o = Options::GIT_PATHSPEC;
        assert!(m("some-path/*.yaml", "some-path/deep/x.yaml", o));
        assert!(m("cluster-config/**/config.json", "cluster-config/a/b/config.json", o));
        assert!(!m("{a,b}", "a", o));
    }

    #[test]
    fn the_worst_case_is_bounded() {
        // Exponential for a backtracking matcher; one pass over the text here.
        let pattern = "*a".repeat(200) + "b";
        let text = "a".repeat(4000);
        assert!(!glob_match(&pattern, &text, Options::NAMES));
        assert!(!glob_match(&pattern, &text, Options::ARGO_DIRECTORY));
        assert_eq!(
            Glob::new(&"{a,b}".repeat(20), Options::ARGO_DIRECTORY).unwrap_err(),
            GlobError::TooManyAlternatives
        );
        assert_eq!(
            Glob::new(&"a".repeat(MAX_PATTERN_LEN + 1), Options::NAMES).unwrap_err(),
            GlobError::TooLong
        );
    }
}
