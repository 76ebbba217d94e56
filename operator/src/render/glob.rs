//! Glob matching with Argo CD's semantics for `directory.include` / `directory.exclude`.
//!
//! Argo CD compiles these patterns with `gobwas/glob` and *no* separator, so `*` also matches `/`
//! (`*.yaml` matches `sub/x.yaml`). Supported: `*`, `**`, `?`, `[abc]`, `[a-z]`, `[!a]`/`[^a]`,
//! `{a,b}` alternation (nestable) and `\` escapes. Matching is iterative with bounded work, so a
//! hostile pattern cannot blow the stack or run for long.

/// A compiled pattern: one token list per `{a,b}` alternative.
#[derive(Clone, Debug)]
pub struct Glob {
    alternatives: Vec<Vec<Token>>,
}

#[derive(Clone, Debug, PartialEq)]
enum Token {
    Literal(char),
    AnyChar,
    Star,
    Class { negated: bool, ranges: Vec<(char, char)> },
}

/// Upper bound on the number of alternatives a pattern may expand to.
const MAX_ALTERNATIVES: usize = 256;
/// Upper bound on pattern length.
const MAX_PATTERN_LEN: usize = 4096;

impl Glob {
    /// Compiles a pattern; fails on patterns that are too long or expand to too many alternatives.
    pub fn new(pattern: &str) -> Result<Glob, String> {
        if pattern.len() > MAX_PATTERN_LEN {
            return Err(format!("glob pattern longer than {MAX_PATTERN_LEN} bytes"));
        }
        let chars: Vec<char> = pattern.chars().collect();
        let expanded = expand_braces(&chars)?;
        Ok(Glob {
            alternatives: expanded.iter().map(|alt| tokenize(alt)).collect(),
        })
    }

    /// True when `text` matches any alternative.
    pub fn matches(&self, text: &str) -> bool {
        let text: Vec<char> = text.chars().collect();
        self.alternatives.iter().any(|tokens| match_tokens(tokens, &text))
    }
}

/// Expands the first top-level `{...}` group, recursively, into plain alternatives.
fn expand_braces(chars: &[char]) -> Result<Vec<Vec<char>>, String> {
    let mut out = Vec::new();
    let mut work = vec![chars.to_vec()];
    while let Some(pattern) = work.pop() {
        match find_group(&pattern) {
            None => out.push(pattern),
            Some((open, close, commas)) => {
                let mut bounds = vec![open];
                bounds.extend(commas);
                bounds.push(close);
                for pair in bounds.windows(2) {
                    let mut alt = pattern[..open].to_vec();
                    alt.extend_from_slice(&pattern[pair[0] + 1..pair[1]]);
                    alt.extend_from_slice(&pattern[close + 1..]);
                    work.push(alt);
                }
            }
        }
        if out.len() + work.len() > MAX_ALTERNATIVES {
            return Err(format!(
                "glob pattern expands to more than {MAX_ALTERNATIVES} alternatives"
            ));
        }
    }
    out.reverse();
    Ok(out)
}

/// Finds the first top-level brace group: (open index, close index, top-level comma indices).
fn find_group(chars: &[char]) -> Option<(usize, usize, Vec<usize>)> {
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => {
                let mut depth = 0usize;
                let mut commas = Vec::new();
                let mut j = i;
                while j < chars.len() {
                    match chars[j] {
                        '\\' => j += 1,
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                return Some((i, j, commas));
                            }
                        }
                        ',' if depth == 1 => commas.push(j),
                        _ => {}
                    }
                    j += 1;
                }
                return None;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

fn tokenize(chars: &[char]) -> Vec<Token> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' if i + 1 < chars.len() => {
                tokens.push(Token::Literal(chars[i + 1]));
                i += 1;
            }
            '*' => {
                if tokens.last() != Some(&Token::Star) {
                    tokens.push(Token::Star);
                }
            }
            '?' => tokens.push(Token::AnyChar),
            '[' => match parse_class(chars, i) {
                Some((token, end)) => {
                    tokens.push(token);
                    i = end;
                }
                None => tokens.push(Token::Literal('[')),
            },
            _ => tokens.push(Token::Literal(c)),
        }
        i += 1;
    }
    tokens
}

/// Parses `[...]` starting at `start`; returns the token and the index of the closing `]`.
fn parse_class(chars: &[char], start: usize) -> Option<(Token, usize)> {
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some('!') | Some('^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let mut first = true;
    while i < chars.len() {
        let c = chars[i];
        if c == ']' && !first {
            return Some((Token::Class { negated, ranges }, i));
        }
        first = false;
        let lo = if c == '\\' && i + 1 < chars.len() {
            i += 1;
            chars[i]
        } else {
            c
        };
        if chars.get(i + 1) == Some(&'-') && chars.get(i + 2).is_some_and(|&h| h != ']') {
            ranges.push((lo, chars[i + 2]));
            i += 3;
        } else {
            ranges.push((lo, lo));
            i += 1;
        }
    }
    None
}

fn token_matches(token: &Token, c: char) -> bool {
    match token {
        Token::Literal(l) => *l == c,
        Token::AnyChar => true,
        Token::Star => true,
        Token::Class { negated, ranges } => ranges.iter().any(|(lo, hi)| *lo <= c && c <= *hi) != *negated,
    }
}

/// Classic single-star backtracking matcher: O(len(tokens) × len(text)) worst case.
fn match_tokens(tokens: &[Token], text: &[char]) -> bool {
    let (mut t, mut s) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while s < text.len() {
        if t < tokens.len() && tokens[t] == Token::Star {
            star = Some((t, s));
            t += 1;
        } else if t < tokens.len() && token_matches(&tokens[t], text[s]) {
            t += 1;
            s += 1;
        } else if let Some((star_t, star_s)) = star {
            t = star_t + 1;
            s = star_s + 1;
            star = Some((star_t, star_s + 1));
        } else {
            return false;
        }
    }
    tokens[t..].iter().all(|tok| *tok == Token::Star)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).unwrap().matches(t)
    }

    #[test]
    fn star_crosses_separators_like_argo() {
        assert!(m("*.yaml", "a.yaml"));
        assert!(m("*.yaml", "sub/dir/a.yaml"));
        assert!(!m("*.yaml", "a.yml"));
        assert!(m("**/*.yaml", "sub/a.yaml"));
        assert!(m("sub/*", "sub/x/y.json"));
    }

    #[test]
    fn alternation_and_classes() {
        assert!(m("{config,secrets}.yaml", "config.yaml"));
        assert!(m("{config,secrets}.yaml", "secrets.yaml"));
        assert!(!m("{config,secrets}.yaml", "other.yaml"));
        assert!(m("*.{yaml,json}", "x.json"));
        assert!(m("{a,b{c,d}}x", "bdx"));
        assert!(m("file[0-9].yaml", "file3.yaml"));
        assert!(!m("file[!0-9].yaml", "file3.yaml"));
        assert!(m("a?c", "abc"));
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
    }

    #[test]
    fn pathological_patterns_are_bounded() {
        assert!(Glob::new(&"{a,b}".repeat(20)).is_err());
        let p = "*a".repeat(50);
        assert!(!m(&p, &"a".repeat(49)));
    }
}
