//! A bounded implementation of Go's `text/template`, the syntax of `goTemplate: true`.
//!
//! Supported, with Go's semantics: text and actions with `{{-`/`-}}` trimming and `{{/* */}}`
//! comments; `.`, `.a.b` field chains, `$`, `$x.a`, `(pipeline).a`; literals (strings with Go
//! escapes, raw strings, chars, ints, floats, `true`, `false`, `nil`); pipelines with `|`;
//! variables (`$x := ...`, `$x = ...`, `range $i, $v := ...`); `if`/`else if`/`else`/`end`,
//! `range` over lists, maps (sorted keys) and integers with `else`, `break`, `continue`;
//! `with`/`else with`/`else`. Functions are checked at parse time (`function "x" not defined`)
//! and listed in [`super::funcs`]. Not supported: `define`, `template`, `block` (Argo CD
//! templates are single strings).
//!
//! `missingkey` follows Go: `default`/`invalid` print `<no value>`, `zero` yields nil, `error`
//! fails with `map has no entry for key "x"`.
//!
//! Templates come from users and parameters from Git, so everything is bounded: template size,
//! parse nesting, executed steps (range iterations included) and output bytes. Nothing here
//! recurses on data, only on the (depth-bounded) template tree.

use serde_json::Value;

use super::funcs;
use crate::appset::params::go_string;

/// What a missing map key evaluates to (`goTemplateOptions: ["missingkey=..."]`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MissingKey {
    /// `missingkey=default` / `missingkey=invalid`: an invalid value, printed `<no value>`.
    #[default]
    Default,
    /// `missingkey=zero`: the map's zero value, nil for parameters.
    Zero,
    /// `missingkey=error`: execution stops with an error.
    Error,
}

/// Execution options and bounds.
#[derive(Clone, Copy, Debug)]
pub struct GoOptions {
    /// Behaviour on a missing map key.
    pub missing_key: MissingKey,
    /// Most nodes, commands and loop iterations one execution may run.
    pub max_steps: usize,
    /// Most bytes one execution may write.
    pub max_output: usize,
}

impl Default for GoOptions {
    fn default() -> Self {
        GoOptions {
            missing_key: MissingKey::Default,
            max_steps: 100_000,
            max_output: 1 << 20,
        }
    }
}

impl GoOptions {
    /// Applies Argo CD's `goTemplateOptions`; Go panics on unknown options, Capstan refuses them.
    pub fn with_options(mut self, options: &[String]) -> Result<Self, String> {
        for option in options {
            self.missing_key = match option.as_str() {
                "missingkey=default" | "missingkey=invalid" => MissingKey::Default,
                "missingkey=zero" => MissingKey::Zero,
                "missingkey=error" => MissingKey::Error,
                other => return Err(format!("unrecognized goTemplateOptions entry {other:?}")),
            };
        }
        Ok(self)
    }
}

/// Longest template source accepted.
const MAX_SOURCE: usize = 256 * 1024;
/// Deepest nesting of control structures and parentheses.
const MAX_NESTING: usize = 100;

/// A parsed template.
#[derive(Clone, Debug)]
pub struct Template {
    nodes: Vec<Node>,
}

impl Template {
    /// Parses `source`. Errors name the problem the way Go does where practical.
    pub fn parse(source: &str) -> Result<Template, String> {
        if source.len() > MAX_SOURCE {
            return Err(format!(
                "template of {} bytes exceeds the limit of {MAX_SOURCE} bytes",
                source.len()
            ));
        }
        let items = split_items(source)?;
        let mut parser = Parser {
            items,
            pos: 0,
            depth: 0,
        };
        let (nodes, end) = parser.parse_list()?;
        match end {
            ListEnd::Eof => Ok(Template { nodes }),
            ListEnd::End => Err("unexpected {{end}}".to_owned()),
            ListEnd::Else(_) => Err("unexpected {{else}}".to_owned()),
        }
    }

    /// Executes the template with `data` as `.` and `$`.
    pub fn execute(&self, data: &Value, options: &GoOptions) -> Result<String, String> {
        let root: Val = Some(data.clone());
        let mut exec = Exec {
            options,
            root: &root,
            vars: Vec::new(),
            steps: 0,
            out: String::new(),
        };
        match exec.walk_list(&self.nodes, &root)? {
            Flow::Normal => Ok(exec.out),
            Flow::Break | Flow::Continue => Err("{{break}} or {{continue}} outside {{range}}".to_owned()),
        }
    }
}

/// Parses and executes in one go.
pub fn render(source: &str, data: &Value, options: &GoOptions) -> Result<String, String> {
    Template::parse(source)?.execute(data, options)
}

// ---------------------------------------------------------------------------------------------
// Lexing

/// A literal number: Go keeps integer and float constants apart.
#[derive(Clone, Debug, PartialEq)]
enum Num {
    Int(i64),
    Float(f64),
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Space,
    Dot,
    Field(String),
    Var(String),
    Ident(String),
    Str(String),
    Num(Num),
    Bool(bool),
    Nil,
    Pipe,
    LParen,
    RParen,
    Declare,
    Assign,
    Comma,
}

/// Text between actions, or one action's tokens.
#[derive(Clone, Debug)]
enum Item {
    Text(String),
    Action(Vec<Tok>),
}

/// Splits the source into text and action items, applying trim markers and dropping comments.
fn split_items(src: &str) -> Result<Vec<Item>, String> {
    let mut items = Vec::new();
    let mut rest = src;
    let mut trim_next = false;
    while let Some(start) = rest.find("{{") {
        let mut text = &rest[..start];
        if trim_next {
            text = text.trim_start_matches(is_space);
        }
        let mut body = &rest[start + 2..];
        if body.starts_with('-') && body[1..].starts_with(is_space) {
            text = text.trim_end_matches(is_space);
            body = &body[1..];
        }
        if !text.is_empty() {
            items.push(Item::Text(text.to_owned()));
        }
        let (tokens, after, trim_right) = lex_action(body)?;
        if let Some(tokens) = tokens {
            items.push(Item::Action(tokens));
        }
        trim_next = trim_right;
        rest = after;
    }
    let text = if trim_next {
        rest.trim_start_matches(is_space)
    } else {
        rest
    };
    if !text.is_empty() {
        items.push(Item::Text(text.to_owned()));
    }
    Ok(items)
}

fn is_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\r' | '\n')
}

/// Recognizes the end of an action at `s`: `}}` or a right trim marker ` -}}` (the space
/// already consumed). Returns (bytes to skip, trims).
fn action_end(s: &str, after_space: bool) -> Option<(usize, bool)> {
    if s.starts_with("}}") {
        return Some((2, false));
    }
    if after_space && s.starts_with("-}}") {
        return Some((3, true));
    }
    None
}

/// Lexes one action body; `None` tokens for a comment. Returns the remaining source after
/// `}}` and whether the action trims the text after it.
fn lex_action(body: &str) -> Result<(Option<Vec<Tok>>, &str, bool), String> {
    let trimmed = body.trim_start_matches(is_space);
    if trimmed.starts_with("/*") && (trimmed.len() == body.len() || body.starts_with(is_space)) {
        let close = trimmed.find("*/").ok_or("unclosed comment")?;
        let after = &trimmed[close + 2..];
        let after_trim = after.trim_start_matches(is_space);
        let spaced = after_trim.len() != after.len();
        return match action_end(after_trim, spaced) {
            Some((n, trim)) => Ok((None, &after_trim[n..], trim)),
            None => Err("comment ends before closing delimiter".to_owned()),
        };
    }
    let mut lexer = Lexer {
        src: body,
        pos: 0,
        tokens: Vec::new(),
    };
    let (consumed, trim) = lexer.run()?;
    Ok((Some(lexer.tokens), &body[consumed..], trim))
}

struct Lexer<'a> {
    src: &'a str,
    pos: usize,
    tokens: Vec<Tok>,
}

impl Lexer<'_> {
    fn rest(&self) -> &str {
        &self.src[self.pos..]
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    /// Lexes tokens until the action's end; returns bytes consumed (delimiter included).
    fn run(&mut self) -> Result<(usize, bool), String> {
        loop {
            let after_space = matches!(self.tokens.last(), Some(Tok::Space));
            if let Some((n, trim)) = action_end(self.rest(), after_space) {
                if trim {
                    self.tokens.pop();
                }
                return Ok((self.pos + n, trim));
            }
            let c = self.peek().ok_or("unclosed action")?;
            self.lex_one(c)?;
        }
    }

    fn lex_one(&mut self, c: char) -> Result<(), String> {
        match c {
            _ if is_space(c) => {
                let len = self.rest().len() - self.rest().trim_start_matches(is_space).len();
                self.pos += len;
                self.tokens.push(Tok::Space);
            }
            '|' => self.single(Tok::Pipe),
            '(' => self.single(Tok::LParen),
            ')' => self.single(Tok::RParen),
            ',' => self.single(Tok::Comma),
            '=' => self.single(Tok::Assign),
            ':' => {
                if !self.rest().starts_with(":=") {
                    return Err("expected :=".to_owned());
                }
                self.pos += 2;
                self.tokens.push(Tok::Declare);
            }
            '"' => {
                let s = self.lex_quoted()?;
                self.tokens.push(Tok::Str(s));
            }
            '`' => {
                let end = self.rest()[1..].find('`').ok_or("unterminated raw quoted string")?;
                let s = self.rest()[1..1 + end].to_owned();
                self.pos += end + 2;
                self.tokens.push(Tok::Str(s));
            }
            '\'' => {
                let n = self.lex_char()?;
                self.tokens.push(Tok::Num(Num::Int(n)));
            }
            '.' => self.lex_dot()?,
            '$' => {
                self.pos += 1;
                let name = self.take_ident();
                self.tokens.push(Tok::Var(format!("${name}")));
            }
            '+' | '-' | '0'..='9' => self.lex_number()?,
            _ if c.is_alphabetic() || c == '_' => {
                let word = self.take_ident();
                self.tokens.push(match word.as_str() {
                    "true" => Tok::Bool(true),
                    "false" => Tok::Bool(false),
                    "nil" => Tok::Nil,
                    _ => Tok::Ident(word),
                });
            }
            other => return Err(format!("unexpected {other:?} in action")),
        }
        Ok(())
    }

    fn single(&mut self, tok: Tok) {
        self.pos += 1;
        self.tokens.push(tok);
    }

    fn take_ident(&mut self) -> String {
        let len: usize = self
            .rest()
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .map(char::len_utf8)
            .sum();
        let word = self.rest()[..len].to_owned();
        self.pos += len;
        word
    }

    fn lex_dot(&mut self) -> Result<(), String> {
        match self.rest()[1..].chars().next() {
            Some(c) if c.is_alphabetic() || c == '_' => {
                self.pos += 1;
                let name = self.take_ident();
                self.tokens.push(Tok::Field(name));
                Ok(())
            }
            // `.5` is a number.
            Some(c) if c.is_ascii_digit() => self.lex_number(),
            _ => {
                self.single(Tok::Dot);
                Ok(())
            }
        }
    }

    fn lex_number(&mut self) -> Result<(), String> {
        let rest = self.rest();
        let len = rest
            .char_indices()
            .take_while(|(i, c)| {
                c.is_ascii_alphanumeric()
                    || *c == '.'
                    || *c == '_'
                    || (*i == 0 && (*c == '+' || *c == '-'))
                    || ((*c == '+' || *c == '-') && matches!(rest[..*i].chars().last(), Some('e' | 'E' | 'p' | 'P')))
            })
            .map(|(_, c)| c.len_utf8())
            .sum::<usize>();
        let text = &rest[..len];
        let num = parse_number(text).ok_or_else(|| format!("bad number syntax: {text:?}"))?;
        self.pos += len;
        self.tokens.push(Tok::Num(num));
        Ok(())
    }

    fn lex_quoted(&mut self) -> Result<String, String> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                '"' => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\n' => break,
                '\\' => {
                    let (_, e) = chars.next().ok_or("unterminated quoted string")?;
                    unescape(e, &mut chars, &mut out)?;
                }
                c => out.push(c),
            }
        }
        Err("unterminated quoted string".to_owned())
    }

    fn lex_char(&mut self) -> Result<i64, String> {
        let mut chars = self.rest().char_indices().skip(1);
        let mut out = String::new();
        match chars.next() {
            Some((_, '\\')) => {
                let (_, e) = chars.next().ok_or("unterminated character constant")?;
                unescape(e, &mut chars, &mut out)?;
            }
            Some((_, c)) => out.push(c),
            None => return Err("unterminated character constant".to_owned()),
        }
        match chars.next() {
            Some((i, '\'')) => {
                self.pos += i + 1;
                Ok(out.chars().next().map(|c| c as i64).unwrap_or(0))
            }
            _ => Err("unterminated character constant".to_owned()),
        }
    }
}

/// Decodes one Go escape sequence (the backslash already consumed).
fn unescape(e: char, chars: &mut impl Iterator<Item = (usize, char)>, out: &mut String) -> Result<(), String> {
    let simple = match e {
        'n' => Some('\n'),
        't' => Some('\t'),
        'r' => Some('\r'),
        'a' => Some('\u{7}'),
        'b' => Some('\u{8}'),
        'f' => Some('\u{c}'),
        'v' => Some('\u{b}'),
        '\\' => Some('\\'),
        '"' => Some('"'),
        '\'' => Some('\''),
        _ => None,
    };
    if let Some(c) = simple {
        out.push(c);
        return Ok(());
    }
    let (digits, radix) = match e {
        'x' => (2, 16),
        'u' => (4, 16),
        'U' => (8, 16),
        '0'..='7' => (2, 8),
        _ => return Err(format!("unknown escape sequence \\{e}")),
    };
    let mut text = if radix == 8 { e.to_string() } else { String::new() };
    for _ in 0..digits {
        text.push(chars.next().ok_or("short escape sequence")?.1);
    }
    let code = u32::from_str_radix(&text, radix).map_err(|_| format!("bad escape sequence {text:?}"))?;
    out.push(char::from_u32(code).ok_or("escape sequence is an invalid character")?);
    Ok(())
}

/// Go number syntax: decimal, `0x`/`0o`/`0b` integers, `_` separators, floats with exponents.
fn parse_number(text: &str) -> Option<Num> {
    let clean = text.replace('_', "");
    let (neg, body) = match clean.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, clean.strip_prefix('+').unwrap_or(&clean)),
    };
    let lower = body.to_ascii_lowercase();
    let radix = [("0x", 16), ("0o", 8), ("0b", 2)]
        .into_iter()
        .find(|(p, _)| lower.starts_with(p));
    let int = match radix {
        Some((p, r)) => i64::from_str_radix(&lower[p.len()..], r).ok(),
        None if lower.len() > 1 && lower.starts_with('0') && lower.chars().all(|c| c.is_ascii_digit()) => {
            i64::from_str_radix(&lower[1..], 8).ok()
        }
        None => lower.parse::<i64>().ok(),
    };
    if let Some(i) = int {
        return Some(Num::Int(if neg { -i } else { i }));
    }
    if radix.is_some() || lower.is_empty() || !lower.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let f: f64 = lower.parse().ok()?;
    Some(Num::Float(if neg { -f } else { f }))
}

// ---------------------------------------------------------------------------------------------
// Parsing

#[derive(Clone, Debug)]
enum Node {
    Text(String),
    Action(Pipe),
    If(Pipe, Vec<Node>, Vec<Node>),
    Range(Pipe, Vec<Node>, Vec<Node>),
    With(Pipe, Vec<Node>, Vec<Node>),
    Break,
    Continue,
}

#[derive(Clone, Debug, Default)]
struct Pipe {
    decl: Vec<String>,
    is_assign: bool,
    cmds: Vec<Cmd>,
}

#[derive(Clone, Debug)]
struct Cmd {
    args: Vec<Arg>,
}

#[derive(Clone, Debug)]
enum Arg {
    Dot,
    Nil,
    Bool(bool),
    Num(Num),
    Str(String),
    Field(Vec<String>),
    Var(String, Vec<String>),
    Func(String),
    Chain(Box<Pipe>, Vec<String>),
}

/// How a list of nodes ended.
enum ListEnd {
    Eof,
    End,
    /// `{{else}}` (empty) or `{{else if ...}}` / `{{else with ...}}` (the tokens after `else`).
    Else(Vec<Tok>),
}

struct Parser {
    items: Vec<Item>,
    pos: usize,
    depth: usize,
}

impl Parser {
    fn parse_list(&mut self) -> Result<(Vec<Node>, ListEnd), String> {
        let mut nodes = Vec::new();
        while self.pos < self.items.len() {
            let item = self.items[self.pos].clone();
            self.pos += 1;
            match item {
                Item::Text(t) => nodes.push(Node::Text(t)),
                Item::Action(tokens) => {
                    let tokens = strip_spaces_at_ends(tokens);
                    match self.parse_action(tokens)? {
                        Parsed::Node(n) => nodes.push(n),
                        Parsed::End(end) => return Ok((nodes, end)),
                    }
                }
            }
        }
        Ok((nodes, ListEnd::Eof))
    }

    fn parse_action(&mut self, tokens: Vec<Tok>) -> Result<Parsed, String> {
        let keyword = match tokens.first() {
            Some(Tok::Ident(k)) => k.clone(),
            _ => return Ok(Parsed::Node(Node::Action(parse_pipe(&tokens, self.depth)?))),
        };
        let rest = strip_spaces_at_ends(tokens[1..].to_vec());
        match keyword.as_str() {
            "end" => no_args("end", &rest).map(|_| Parsed::End(ListEnd::End)),
            "else" => Ok(Parsed::End(ListEnd::Else(rest))),
            "if" | "range" | "with" => self.parse_control(&keyword, &rest).map(Parsed::Node),
            "break" => no_args("break", &rest).map(|_| Parsed::Node(Node::Break)),
            "continue" => no_args("continue", &rest).map(|_| Parsed::Node(Node::Continue)),
            "define" | "template" | "block" => Err(format!("{{{{{keyword}}}}} is not supported")),
            _ => Ok(Parsed::Node(Node::Action(parse_pipe(&tokens, self.depth)?))),
        }
    }

    /// Parses `if`/`range`/`with` up to its `{{end}}`; `{{else if}}` chains share that end.
    fn parse_control(&mut self, keyword: &str, tokens: &[Tok]) -> Result<Node, String> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(format!("control structures nested deeper than {MAX_NESTING}"));
        }
        if tokens.is_empty() {
            return Err(format!("missing value for {keyword}"));
        }
        let pipe = parse_pipe(tokens, self.depth)?;
        let (list, end) = self.parse_list()?;
        let else_list = match end {
            ListEnd::Eof => return Err(format!("unexpected EOF: missing {{{{end}}}} for {keyword}")),
            ListEnd::End => Vec::new(),
            ListEnd::Else(rest) => self.parse_else(keyword, rest)?,
        };
        self.depth -= 1;
        Ok(match keyword {
            "if" => Node::If(pipe, list, else_list),
            "range" => Node::Range(pipe, list, else_list),
            _ => Node::With(pipe, list, else_list),
        })
    }

    fn parse_else(&mut self, keyword: &str, rest: Vec<Tok>) -> Result<Vec<Node>, String> {
        match rest.first() {
            None => {
                let (list, end) = self.parse_list()?;
                match end {
                    ListEnd::End => Ok(list),
                    ListEnd::Eof => Err(format!("unexpected EOF: missing {{{{end}}}} for {keyword}")),
                    ListEnd::Else(_) => Err("expected {{end}} after {{else}}".to_owned()),
                }
            }
            Some(Tok::Ident(k)) if (k == "if" || k == "with") => {
                let k = k.clone();
                let tail = strip_spaces_at_ends(rest[1..].to_vec());
                Ok(vec![self.parse_control(&k, &tail)?])
            }
            _ => Err("unexpected tokens after else".to_owned()),
        }
    }
}

enum Parsed {
    Node(Node),
    End(ListEnd),
}

fn no_args(keyword: &str, rest: &[Tok]) -> Result<(), String> {
    if rest.is_empty() {
        Ok(())
    } else {
        Err(format!("unexpected tokens in {{{{{keyword}}}}}"))
    }
}

fn strip_spaces_at_ends(mut tokens: Vec<Tok>) -> Vec<Tok> {
    while tokens.last() == Some(&Tok::Space) {
        tokens.pop();
    }
    let lead = tokens.iter().take_while(|t| **t == Tok::Space).count();
    tokens.drain(..lead);
    tokens
}

/// Parses a pipeline: optional `$a[, $b] :=`/`$a =` declaration, then commands split on `|`.
fn parse_pipe(tokens: &[Tok], depth: usize) -> Result<Pipe, String> {
    if depth > MAX_NESTING {
        return Err(format!("pipelines nested deeper than {MAX_NESTING}"));
    }
    let tokens = strip_spaces_at_ends(tokens.to_vec());
    let mut pipe = Pipe::default();
    let mut rest: &[Tok] = &tokens;
    if let Some((decl, is_assign, after)) = split_declaration(rest) {
        pipe.decl = decl;
        pipe.is_assign = is_assign;
        rest = after;
    }
    for part in split_top_level(rest, &Tok::Pipe)? {
        let part = strip_spaces_at_ends(part.to_vec());
        if part.is_empty() {
            return Err("missing command in pipeline".to_owned());
        }
        pipe.cmds.push(parse_cmd(&part, depth)?);
    }
    if pipe.cmds.is_empty() {
        return Err("missing value for command".to_owned());
    }
    Ok(pipe)
}

/// Recognizes `$x :=`, `$x =` and `$i, $v :=` at the start of a pipeline.
fn split_declaration(tokens: &[Tok]) -> Option<(Vec<String>, bool, &[Tok])> {
    let significant: Vec<(usize, &Tok)> = tokens.iter().enumerate().filter(|(_, t)| **t != Tok::Space).collect();
    match significant.as_slice() {
        [(_, Tok::Var(a)), (i, op @ (Tok::Declare | Tok::Assign)), ..] => {
            Some((vec![a.clone()], **op == Tok::Assign, &tokens[i + 1..]))
        }
        [(_, Tok::Var(a)), (_, Tok::Comma), (_, Tok::Var(b)), (i, op @ (Tok::Declare | Tok::Assign)), ..] => {
            Some((vec![a.clone(), b.clone()], **op == Tok::Assign, &tokens[i + 1..]))
        }
        _ => None,
    }
}

/// Splits on `sep` outside parentheses.
fn split_top_level<'t>(tokens: &'t [Tok], sep: &Tok) -> Result<Vec<&'t [Tok]>, String> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in tokens.iter().enumerate() {
        match t {
            Tok::LParen => depth += 1,
            Tok::RParen => depth = depth.checked_sub(1).ok_or("unexpected right paren")?,
            t if t == sep && depth == 0 => {
                parts.push(&tokens[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    if depth != 0 {
        return Err("unclosed left paren".to_owned());
    }
    parts.push(&tokens[start..]);
    Ok(parts)
}

/// Parses one command: operands separated by spaces.
fn parse_cmd(tokens: &[Tok], depth: usize) -> Result<Cmd, String> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        if tokens[i] == Tok::Space {
            i += 1;
            continue;
        }
        let (arg, next) = parse_operand(tokens, i, depth)?;
        if next < tokens.len() && tokens[next] != Tok::Space {
            return Err(format!("unexpected {:?} in operand", tokens[next]));
        }
        args.push(arg);
        i = next;
    }
    if let Some(first) = args.first() {
        if args.len() > 1 && !matches!(first, Arg::Func(_)) {
            return Err("can't give argument to non-function".to_owned());
        }
    }
    Ok(Cmd { args })
}

/// Parses a term and any field chain glued to it; returns the operand and the next index.
fn parse_operand(tokens: &[Tok], i: usize, depth: usize) -> Result<(Arg, usize), String> {
    let (arg, mut next) = match &tokens[i] {
        Tok::LParen => {
            let close = matching_paren(tokens, i)?;
            let inner = parse_pipe(&tokens[i + 1..close], depth + 1)?;
            (Arg::Chain(Box::new(inner), Vec::new()), close + 1)
        }
        Tok::Dot => (Arg::Dot, i + 1),
        Tok::Nil => (Arg::Nil, i + 1),
        Tok::Bool(b) => (Arg::Bool(*b), i + 1),
        Tok::Num(n) => (Arg::Num(n.clone()), i + 1),
        Tok::Str(s) => (Arg::Str(s.clone()), i + 1),
        Tok::Field(f) => (Arg::Field(vec![f.clone()]), i + 1),
        Tok::Var(v) => (Arg::Var(v.clone(), Vec::new()), i + 1),
        Tok::Ident(name) => {
            if !funcs::exists(name) {
                return Err(format!("function {name:?} not defined"));
            }
            (Arg::Func(name.clone()), i + 1)
        }
        other => return Err(format!("unexpected {other:?} in command")),
    };
    let mut fields = Vec::new();
    while let Some(Tok::Field(f)) = tokens.get(next) {
        fields.push(f.clone());
        next += 1;
    }
    let arg = match (arg, fields.is_empty()) {
        (arg, true) => arg,
        (Arg::Field(mut first), false) => {
            first.extend(fields);
            Arg::Field(first)
        }
        (Arg::Var(v, _), false) => Arg::Var(v, fields),
        (Arg::Chain(p, _), false) => Arg::Chain(p, fields),
        (Arg::Dot, false) => return Err("unexpected . after term \".\"".to_owned()),
        (_, false) => return Err("unexpected field access on a literal or function".to_owned()),
    };
    Ok((arg, next))
}

fn matching_paren(tokens: &[Tok], open: usize) -> Result<usize, String> {
    let mut depth = 0usize;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        match t {
            Tok::LParen => depth += 1,
            Tok::RParen => {
                depth -= 1;
                if depth == 0 {
                    return Ok(i);
                }
            }
            _ => {}
        }
    }
    Err("unclosed left paren".to_owned())
}

// ---------------------------------------------------------------------------------------------
// Execution

/// A value during execution: `None` is Go's invalid value (a missing key), printed `<no value>`.
pub(crate) type Val = Option<Value>;

enum Flow {
    Normal,
    Break,
    Continue,
}

struct Exec<'a> {
    options: &'a GoOptions,
    root: &'a Val,
    vars: Vec<(String, Val)>,
    steps: usize,
    out: String,
}

impl Exec<'_> {
    fn step(&mut self) -> Result<(), String> {
        self.steps += 1;
        if self.steps > self.options.max_steps {
            return Err(format!("template execution exceeded {} steps", self.options.max_steps));
        }
        Ok(())
    }

    fn write(&mut self, s: &str) -> Result<(), String> {
        if self.out.len() + s.len() > self.options.max_output {
            return Err(format!("template output exceeds {} bytes", self.options.max_output));
        }
        self.out.push_str(s);
        Ok(())
    }

    fn walk_list(&mut self, nodes: &[Node], dot: &Val) -> Result<Flow, String> {
        let mark = self.vars.len();
        let result = self.walk_nodes(nodes, dot);
        self.vars.truncate(mark);
        result
    }

    fn walk_nodes(&mut self, nodes: &[Node], dot: &Val) -> Result<Flow, String> {
        for node in nodes {
            self.step()?;
            match self.walk(node, dot)? {
                Flow::Normal => {}
                flow => return Ok(flow),
            }
        }
        Ok(Flow::Normal)
    }

    fn walk(&mut self, node: &Node, dot: &Val) -> Result<Flow, String> {
        match node {
            Node::Text(t) => self.write(t)?,
            Node::Action(pipe) => {
                let value = self.eval_pipe(pipe, dot)?;
                if pipe.decl.is_empty() {
                    let text = print_value(&value);
                    self.write(&text)?;
                }
            }
            Node::If(pipe, list, else_list) => {
                let mark = self.vars.len();
                let cond = self.eval_pipe(pipe, dot)?;
                let branch = if truth(&cond) { list } else { else_list };
                let flow = self.walk_list(branch, dot);
                self.vars.truncate(mark);
                return flow;
            }
            Node::With(pipe, list, else_list) => {
                let mark = self.vars.len();
                let value = self.eval_pipe(pipe, dot)?;
                let flow = if truth(&value) {
                    self.walk_list(list, &value)
                } else {
                    self.walk_list(else_list, dot)
                };
                self.vars.truncate(mark);
                return flow;
            }
            Node::Range(pipe, list, else_list) => return self.walk_range(pipe, list, else_list, dot),
            Node::Break => return Ok(Flow::Break),
            Node::Continue => return Ok(Flow::Continue),
        }
        Ok(Flow::Normal)
    }

    fn walk_range(&mut self, pipe: &Pipe, list: &[Node], else_list: &[Node], dot: &Val) -> Result<Flow, String> {
        let mark = self.vars.len();
        // The declared variables are bound per iteration, not to the whole value.
        let plain = Pipe {
            decl: Vec::new(),
            is_assign: false,
            cmds: pipe.cmds.clone(),
        };
        let value = self.eval_pipe(&plain, dot)?;
        self.charge(&value)?;
        let entries = range_entries(&value)?;
        if entries.is_empty() {
            self.vars.truncate(mark);
            return self.walk_list(else_list, dot);
        }
        for (key, elem) in entries {
            self.step()?;
            let iter_mark = self.vars.len();
            match pipe.decl.as_slice() {
                [v] => self.bind(v, Some(elem.clone()), pipe.is_assign)?,
                [k, v] => {
                    self.bind(k, Some(key), pipe.is_assign)?;
                    self.bind(v, Some(elem.clone()), pipe.is_assign)?;
                }
                _ => {}
            }
            let flow = self.walk_list(list, &Some(elem))?;
            self.vars.truncate(iter_mark);
            if let Flow::Break = flow {
                break;
            }
        }
        self.vars.truncate(mark);
        Ok(Flow::Normal)
    }

    fn bind(&mut self, name: &str, value: Val, is_assign: bool) -> Result<(), String> {
        if is_assign {
            let slot = self
                .vars
                .iter_mut()
                .rev()
                .find(|(n, _)| n == name)
                .ok_or(format!("undefined variable: {name}"))?;
            slot.1 = value;
        } else {
            self.vars.push((name.to_owned(), value));
        }
        Ok(())
    }

    fn eval_pipe(&mut self, pipe: &Pipe, dot: &Val) -> Result<Val, String> {
        let mut value: Option<Val> = None;
        for cmd in &pipe.cmds {
            self.step()?;
            value = Some(self.eval_cmd(cmd, dot, value)?);
        }
        let value = value.unwrap_or(None);
        for name in &pipe.decl {
            self.bind(name, value.clone(), pipe.is_assign)?;
        }
        Ok(value)
    }

    fn eval_cmd(&mut self, cmd: &Cmd, dot: &Val, last: Option<Val>) -> Result<Val, String> {
        let first = cmd.args.first().ok_or("empty command")?;
        if let Arg::Func(name) = first {
            return self.call(name, &cmd.args[1..], dot, last);
        }
        if last.is_some() {
            return Err("can't give argument to non-function".to_owned());
        }
        self.eval_arg(first, dot)
    }

    fn call(&mut self, name: &str, args: &[Arg], dot: &Val, last: Option<Val>) -> Result<Val, String> {
        // `and`/`or` evaluate lazily and return the deciding operand, as Go does.
        if name == "and" || name == "or" {
            return self.call_logic(name == "and", args, dot, last);
        }
        let mut values = Vec::with_capacity(args.len() + 1);
        for arg in args {
            values.push(self.eval_arg(arg, dot)?);
        }
        if let Some(last) = last {
            values.push(last);
        }
        let result = funcs::call(name, values, self.options).map_err(|e| format!("error calling {name}: {e}"))?;
        self.charge(&result)?;
        Ok(result)
    }

    fn call_logic(&mut self, is_and: bool, args: &[Arg], dot: &Val, last: Option<Val>) -> Result<Val, String> {
        let total = args.len() + usize::from(last.is_some());
        if total == 0 {
            return Err(format!(
                "wrong number of args for {}: want at least 1 got 0",
                if is_and { "and" } else { "or" }
            ));
        }
        let mut current: Val = None;
        for arg in args {
            current = self.eval_arg(arg, dot)?;
            if truth(&current) != is_and {
                return Ok(current);
            }
        }
        if let Some(last) = last {
            current = last;
        }
        Ok(current)
    }

    fn eval_arg(&mut self, arg: &Arg, dot: &Val) -> Result<Val, String> {
        let value = match arg {
            Arg::Nil => return Ok(Some(Value::Null)),
            Arg::Bool(b) => return Ok(Some(Value::Bool(*b))),
            Arg::Num(Num::Int(i)) => return Ok(Some(Value::from(*i))),
            Arg::Num(Num::Float(f)) => {
                return Ok(Some(
                    serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
                ));
            }
            Arg::Str(s) => return Ok(Some(Value::String(s.clone()))),
            Arg::Func(name) => return self.call(name, &[], dot, None),
            Arg::Dot => dot.clone(),
            Arg::Field(names) => self.select_chain(dot, names)?,
            Arg::Var(name, names) => {
                let base = self.var_ref(name)?;
                self.select_chain(base, names)?
            }
            Arg::Chain(pipe, names) => {
                let mark = self.vars.len();
                let value = self.eval_pipe(pipe, dot)?;
                self.vars.truncate(mark);
                self.select_chain(&value, names)?
            }
        };
        self.charge(&value)?;
        Ok(value)
    }

    /// Charges steps for copying a value, so loops that copy large parameters stay bounded.
    fn charge(&mut self, value: &Val) -> Result<(), String> {
        if let Some(v) = value {
            self.steps += approx_nodes(v, COPY_COST_CAP) / 8;
        }
        self.step()
    }

    fn var_ref(&self, name: &str) -> Result<&Val, String> {
        if name == "$" {
            return Ok(self.root);
        }
        self.vars
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v)
            .ok_or_else(|| format!("undefined variable: {name}"))
    }

    /// Follows `.a.b` from `base` by reference and copies only the selected value.
    fn select_chain(&self, base: &Val, names: &[String]) -> Result<Val, String> {
        let mut current = base.as_ref();
        for name in names {
            current = self.select(current, name)?;
        }
        Ok(current.cloned())
    }

    /// `.name` on one value, with Go's errors and `missingkey` handling.
    fn select<'v>(&self, receiver: Option<&'v Value>, name: &str) -> Result<Option<&'v Value>, String> {
        match receiver {
            None if self.options.missing_key == MissingKey::Error => {
                Err(format!("nil data; no entry for key {name:?}"))
            }
            None => Ok(None),
            Some(Value::Object(map)) => match map.get(name) {
                Some(v) => Ok(Some(v)),
                None => match self.options.missing_key {
                    MissingKey::Default => Ok(None),
                    MissingKey::Zero => Ok(Some(&NULL)),
                    MissingKey::Error => Err(format!("map has no entry for key {name:?}")),
                },
            },
            Some(Value::Null) => Err(format!("nil pointer evaluating interface {{}}.{name}")),
            Some(other) => Err(format!("can't evaluate field {name} in type {}", go_type(other))),
        }
    }
}

static NULL: Value = Value::Null;

/// Most nodes counted when charging for a copy (a copy then costs at most `COPY_COST_CAP / 8`
/// steps, so a default budget allows a handful of copies of the largest values).
const COPY_COST_CAP: usize = 80_000;

/// Counts the nodes of `value` (string bytes / 64 included), stopping at `cap`.
fn approx_nodes(value: &Value, cap: usize) -> usize {
    let mut count = 0usize;
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        count += 1;
        match v {
            Value::String(s) => count += s.len() / 64,
            Value::Array(items) => stack.extend(items.iter()),
            Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
        if count >= cap {
            return cap;
        }
    }
    count
}

/// What `range` iterates: list elements with their index, map values with their (sorted) key,
/// or `0..n` for an integer.
fn range_entries(value: &Val) -> Result<Vec<(Value, Value)>, String> {
    match value {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(items)) => Ok(items
            .iter()
            .enumerate()
            .map(|(i, v)| (Value::from(i), v.clone()))
            .collect()),
        Some(Value::Object(map)) => Ok(map.iter().map(|(k, v)| (Value::String(k.clone()), v.clone())).collect()),
        Some(Value::Number(n)) if n.is_i64() => {
            let count = n.as_i64().unwrap_or(0).clamp(0, 1_000_000);
            Ok((0..count).map(|i| (Value::from(i), Value::from(i))).collect())
        }
        Some(other) => Err(format!(
            "range can't iterate over {}",
            print_value(&Some(other.clone()))
        )),
    }
}

/// Go's truth: false, 0, nil, the empty string, list and map are false.
pub(crate) fn truth(value: &Val) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(m)) => !m.is_empty(),
    }
}

/// How an action prints its value: `<no value>` for invalid and nil values, `%v` otherwise.
pub(crate) fn print_value(value: &Val) -> String {
    match value {
        None | Some(Value::Null) => "<no value>".to_owned(),
        Some(v) => go_string(v),
    }
}

/// Go's type name of a decoded JSON value, for error messages.
pub(crate) fn go_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "interface {}",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}
