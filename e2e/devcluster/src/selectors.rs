//! Label selectors (full grammar) and field selectors.
//!
//! Both parsers mirror k8s.io/apimachinery (`labels.Parse`, `fields.ParseSelector`) closely enough that
//! every selector kubectl or kube-rs sends parses the same way, and a malformed one is refused with a message
//! the server turns into a 400 instead of silently matching everything.

use serde_json::{Map, Value};

/// Longest label value and name segment (`validation.LabelValueMaxLength`, `DNS1123LabelMaxLength`).
const MAX_NAME_LEN: usize = 63;
/// Longest label key prefix (`DNS1123SubdomainMaxLength`).
const MAX_PREFIX_LEN: usize = 253;

/// The operator of one label requirement.
#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    Equals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

/// One `key op values` term of a label selector.
#[derive(Debug, Clone, PartialEq)]
struct LabelRequirement {
    key: String,
    op: LabelOp,
    values: Vec<String>,
}

impl LabelRequirement {
    /// Evaluate against a label map; `!=`, `notin` and `!k` match when the label is absent, like the real server.
    fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        let value = labels.and_then(|l| l.get(&self.key)).map(label_value_string);
        match (&self.op, value) {
            (LabelOp::Exists, v) => v.is_some(),
            (LabelOp::DoesNotExist, v) => v.is_none(),
            (LabelOp::Equals | LabelOp::In, Some(v)) => self.values.contains(&v),
            (LabelOp::Equals | LabelOp::In, None) => false,
            (LabelOp::NotEquals | LabelOp::NotIn, Some(v)) => !self.values.contains(&v),
            (LabelOp::NotEquals | LabelOp::NotIn, None) => true,
            (LabelOp::GreaterThan | LabelOp::LessThan, Some(v)) => self.compare_integer(&v),
            (LabelOp::GreaterThan | LabelOp::LessThan, None) => false,
        }
    }

    /// `gt`/`lt` compare integers; a label that is not an integer never matches (as upstream).
    fn compare_integer(&self, label: &str) -> bool {
        let (Ok(have), Some(Ok(want))) = (label.parse::<i64>(), self.values.first().map(|v| v.parse::<i64>())) else {
            return false;
        };
        if self.op == LabelOp::GreaterThan {
            have > want
        } else {
            have < want
        }
    }
}

/// Labels are strings, but a hand-written object could carry a number; compare its JSON text then.
fn label_value_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LabelSelector {
    requirements: Vec<LabelRequirement>,
}

impl LabelSelector {
    /// Parse `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k`, `!k`, comma-joined (already URL-decoded).
    pub fn parse(s: &str) -> Result<Self, String> {
        let tokens = lex_label_selector(s);
        let requirements = LabelParser { tokens, pos: 0 }.parse_all()?;
        Ok(LabelSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// All requirements must hold (the comma is AND).
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        self.requirements.iter().all(|r| r.matches(labels))
    }
}

/// Tokens of the label-selector language (apimachinery `labels/selector.go` lexer).
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Not,
    Eq,
    DoubleEq,
    NotEq,
    Gt,
    Lt,
    In,
    NotIn,
    Comma,
    Open,
    Close,
}

/// Characters that end an identifier.
fn is_label_special(c: char) -> bool {
    c.is_whitespace() || matches!(c, '!' | '=' | ',' | '(' | ')' | '<' | '>')
}

fn lex_label_selector(s: &str) -> Vec<Tok> {
    let chars: Vec<char> = s.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        let (tok, width) = match (c, next) {
            (c, _) if c.is_whitespace() => {
                i += 1;
                continue;
            }
            ('!', Some('=')) => (Tok::NotEq, 2),
            ('!', _) => (Tok::Not, 1),
            ('=', Some('=')) => (Tok::DoubleEq, 2),
            ('=', _) => (Tok::Eq, 1),
            ('>', _) => (Tok::Gt, 1),
            ('<', _) => (Tok::Lt, 1),
            (',', _) => (Tok::Comma, 1),
            ('(', _) => (Tok::Open, 1),
            (')', _) => (Tok::Close, 1),
            _ => {
                let start = i;
                while i < chars.len() && !is_label_special(chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                out.push(match word.as_str() {
                    "in" => Tok::In,
                    "notin" => Tok::NotIn,
                    _ => Tok::Ident(word),
                });
                continue;
            }
        };
        out.push(tok);
        i += width;
    }
    out
}

/// Recursive-descent parser over the token list.
struct LabelParser {
    tokens: Vec<Tok>,
    pos: usize,
}

impl LabelParser {
    fn peek(&self) -> Option<&Tok> {
        self.tokens.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.tokens.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn parse_all(mut self) -> Result<Vec<LabelRequirement>, String> {
        let mut reqs = Vec::new();
        if self.tokens.is_empty() {
            return Ok(reqs);
        }
        loop {
            reqs.push(self.parse_requirement()?);
            match self.next() {
                None => return Ok(reqs),
                Some(Tok::Comma) => {}
                Some(t) => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        describe(Some(&t))
                    ))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<LabelRequirement, String> {
        match self.next() {
            Some(Tok::Not) => {
                let key = self.parse_key()?;
                Ok(LabelRequirement {
                    key,
                    op: LabelOp::DoesNotExist,
                    values: Vec::new(),
                })
            }
            Some(Tok::Ident(key)) => {
                validate_label_key(&key)?;
                self.parse_operator_and_values(key)
            }
            t => Err(format!("found '{}', expected: !, identifier", describe(t.as_ref()))),
        }
    }

    fn parse_key(&mut self) -> Result<String, String> {
        match self.next() {
            Some(Tok::Ident(key)) => {
                validate_label_key(&key)?;
                Ok(key)
            }
            t => Err(format!(
                "found '{}', expected: identifier after '!'",
                describe(t.as_ref())
            )),
        }
    }

    fn parse_operator_and_values(&mut self, key: String) -> Result<LabelRequirement, String> {
        let op = match self.peek() {
            None | Some(Tok::Comma) => {
                return Ok(LabelRequirement {
                    key,
                    op: LabelOp::Exists,
                    values: Vec::new(),
                })
            }
            Some(Tok::Eq | Tok::DoubleEq) => LabelOp::Equals,
            Some(Tok::NotEq) => LabelOp::NotEquals,
            Some(Tok::In) => LabelOp::In,
            Some(Tok::NotIn) => LabelOp::NotIn,
            Some(Tok::Gt) => LabelOp::GreaterThan,
            Some(Tok::Lt) => LabelOp::LessThan,
            t => {
                return Err(format!(
                    "found '{}', expected: '=', '!=', '==', 'in', 'notin'",
                    describe(t)
                ))
            }
        };
        self.pos += 1;
        let values = match op {
            LabelOp::In | LabelOp::NotIn => self.parse_value_set()?,
            _ => vec![self.parse_exact_value()?],
        };
        if matches!(op, LabelOp::GreaterThan | LabelOp::LessThan) && values[0].parse::<i64>().is_err() {
            return Err(format!(
                "for 'Gt', 'Lt' operators, the value must be an integer: '{}'",
                values[0]
            ));
        }
        Ok(LabelRequirement { key, op, values })
    }

    /// The value after `=`/`!=`; an empty value (`k=` followed by `,` or the end) is allowed.
    fn parse_exact_value(&mut self) -> Result<String, String> {
        let value = match self.peek() {
            None | Some(Tok::Comma) => String::new(),
            Some(Tok::Ident(v)) => v.clone(),
            // In value position the keywords are plain words (`k=in` is legal upstream).
            Some(Tok::In) => "in".to_string(),
            Some(Tok::NotIn) => "notin".to_string(),
            t => return Err(format!("found '{}', expected: identifier", describe(t))),
        };
        if !value.is_empty() {
            self.pos += 1;
        }
        validate_label_value(&value)?;
        Ok(value)
    }

    /// `( v1, v2, ... )`; empty members are kept as `""`, an empty set is refused.
    fn parse_value_set(&mut self) -> Result<Vec<String>, String> {
        match self.next() {
            Some(Tok::Open) => {}
            t => return Err(format!("found '{}', expected: '('", describe(t.as_ref()))),
        }
        let mut values = Vec::new();
        let mut current: Option<String> = None;
        loop {
            match self.next() {
                Some(Tok::Ident(v)) if current.is_none() => current = Some(v),
                Some(Tok::In) if current.is_none() => current = Some("in".into()),
                Some(Tok::NotIn) if current.is_none() => current = Some("notin".into()),
                Some(Tok::Comma) => values.push(current.take().unwrap_or_default()),
                Some(Tok::Close) => {
                    let saw_comma = !values.is_empty();
                    if let Some(v) = current.take() {
                        values.push(v);
                    } else if saw_comma {
                        values.push(String::new());
                    }
                    break;
                }
                t => {
                    return Err(format!(
                        "found '{}', expected: ',', ')' or identifier",
                        describe(t.as_ref())
                    ))
                }
            }
        }
        if values.is_empty() {
            return Err("for 'in', 'notin' operators, values set can't be empty".to_string());
        }
        for v in &values {
            validate_label_value(v)?;
        }
        Ok(values)
    }
}

fn describe(t: Option<&Tok>) -> String {
    match t {
        None => String::new(),
        Some(Tok::Ident(s)) => s.clone(),
        Some(Tok::Not) => "!".into(),
        Some(Tok::Eq) => "=".into(),
        Some(Tok::DoubleEq) => "==".into(),
        Some(Tok::NotEq) => "!=".into(),
        Some(Tok::Gt) => ">".into(),
        Some(Tok::Lt) => "<".into(),
        Some(Tok::In) => "in".into(),
        Some(Tok::NotIn) => "notin".into(),
        Some(Tok::Comma) => ",".into(),
        Some(Tok::Open) => "(".into(),
        Some(Tok::Close) => ")".into(),
    }
}

/// `[prefix/]name`: prefix a DNS-1123 subdomain, name a qualified-name segment (`validation.IsQualifiedName`).
fn validate_label_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let ok =
            !p.is_empty() && p.len() <= MAX_PREFIX_LEN && p.split('.').all(|l| !l.is_empty() && is_dns_label_part(l));
        if !ok {
            return Err(format!(
                "invalid label key \"{key}\": prefix part must be a lowercase RFC 1123 subdomain"
            ));
        }
    }
    if name.is_empty() || !is_qualified_segment(name) {
        return Err(format!(
            "invalid label key \"{key}\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ));
    }
    Ok(())
}

fn validate_label_value(v: &str) -> Result<(), String> {
    if v.is_empty() || is_qualified_segment(v) {
        Ok(())
    } else {
        Err(format!(
            "invalid label value: \"{v}\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
        ))
    }
}

/// `[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?`, at most 63 characters.
fn is_qualified_segment(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= MAX_NAME_LEN
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// One dot-separated part of a DNS-1123 subdomain: `[a-z0-9]([-a-z0-9]*[a-z0-9])?`.
fn is_dns_label_part(s: &str) -> bool {
    let b = s.as_bytes();
    let alnum = |c: &u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    b.len() <= MAX_NAME_LEN
        && b.first().is_some_and(alnum)
        && b.last().is_some_and(alnum)
        && b.iter().all(|c| alnum(c) || *c == b'-')
}

// ---------------------------------------------------------------------------------------------------------------
// Field selectors
// ---------------------------------------------------------------------------------------------------------------

/// One `field=value` / `field!=value` term.
#[derive(Debug, Clone, PartialEq)]
struct FieldRequirement {
    field: String,
    value: String,
    negate: bool,
}

/// A parsed field selector: `metadata.name`, `metadata.namespace` on every kind, plus the per-kind fields
/// kube-apiserver supports, with `=`, `==`, `!=`, comma-joined.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Parse like `fields.ParseSelector`: terms split on unescaped commas, empty terms skipped, values may
    /// escape `\,` `\=` `\\`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut requirements = Vec::new();
        for term in split_unescaped(s, ',') {
            if term.trim().is_empty() {
                continue;
            }
            requirements.push(parse_field_term(&term)?);
        }
        Ok(FieldSelector { requirements })
    }

    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// `Err("field label not supported: <label>")` when a requirement names a field the resource `group`/`kind`
    /// does not support. Keyed by group too: a custom resource named like a built-in kind only gets
    /// `metadata.name`/`metadata.namespace`, and core/v1 and events.k8s.io/v1 Events accept different labels.
    pub fn check_supported(&self, group: &str, kind: &str) -> Result<(), String> {
        match self
            .requirements
            .iter()
            .find(|r| !field_supported(group, kind, &r.field))
        {
            Some(r) => Err(format!("field label not supported: {}", r.field)),
            None => Ok(()),
        }
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.requirements
            .iter()
            .all(|r| (field_value(obj, &r.field) == r.value) != r.negate)
    }
}

/// Split on `sep` where it is not preceded by a backslash; escapes stay in place for the term parser.
fn split_unescaped(s: &str, sep: char) -> Vec<String> {
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            current.push(c);
            if let Some(n) = chars.next() {
                current.push(n);
            }
        } else if c == sep {
            parts.push(std::mem::take(&mut current));
        } else {
            current.push(c);
        }
    }
    parts.push(current);
    parts
}

/// `lhs op rhs` at the first unescaped operator; at one position `!=` and `==` win over `=`.
fn parse_field_term(term: &str) -> Result<FieldRequirement, String> {
    let bytes = term.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => {
                i += 2;
                continue;
            }
            b'!' if bytes.get(i + 1) == Some(&b'=') => return field_requirement(term, i, 2, true),
            b'=' if bytes.get(i + 1) == Some(&b'=') => return field_requirement(term, i, 2, false),
            b'=' => return field_requirement(term, i, 1, false),
            _ => {}
        }
        i += 1;
    }
    Err(format!("invalid selector: '{term}'; can't understand '{term}'"))
}

fn field_requirement(term: &str, at: usize, width: usize, negate: bool) -> Result<FieldRequirement, String> {
    // `at` and `at + width` sit on ASCII operator bytes, so both are char boundaries.
    let field = term[..at].trim().to_string();
    if field.is_empty() {
        return Err(format!("invalid selector: '{term}'; field name is empty"));
    }
    let value = unescape_field_value(&term[at + width..])?;
    Ok(FieldRequirement { field, value, negate })
}

fn unescape_field_value(v: &str) -> Result<String, String> {
    let mut out = String::with_capacity(v.len());
    let mut chars = v.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some(e @ ('\\' | ',' | '=' | '!')) => out.push(e),
            Some(e) => {
                return Err(format!(
                    "invalid field selector value: unrecognized escape sequence \\{e}"
                ))
            }
            None => return Err("invalid field selector value: trailing backslash".to_string()),
        }
    }
    Ok(out)
}

/// The field labels each built-in resource's registry strategy accepts (`GetAttrs`/`AddFieldLabelConversionFunc`).
fn kind_fields(group: &str, kind: &str) -> &'static [&'static str] {
    match (group, kind) {
        ("", "Event") => &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
        // events.k8s.io/v1 labels are converted to the core ones (`regarding.*` → `involvedObject.*`,
        // `reportingController` → `reportingComponent`); `field_value` does the mapping.
        ("events.k8s.io", "Event") => &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "regarding.apiVersion",
            "regarding.resourceVersion",
            "regarding.fieldPath",
            "reason",
            "reportingController",
            "type",
        ],
        ("", "Pod") => &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.podIPs",
            "status.nominatedNodeName",
        ],
        ("", "Secret") => &["type"],
        ("", "Namespace") => &["status.phase"],
        ("", "Node") => &["spec.unschedulable"],
        ("batch", "Job") => &["status.successful"],
        ("apps", "ReplicaSet") | ("", "ReplicationController") => &["status.replicas"],
        ("certificates.k8s.io", "CertificateSigningRequest") => &["spec.signerName"],
        _ => &[],
    }
}

fn field_supported(group: &str, kind: &str, field: &str) -> bool {
    matches!(field, "metadata.name" | "metadata.namespace") || kind_fields(group, kind).contains(&field)
}

/// The string the real server compares a field label against, with the Go zero value when absent.
fn field_value(obj: &Value, field: &str) -> String {
    let is_events_v1 = obj["apiVersion"]
        .as_str()
        .is_some_and(|v| v.starts_with("events.k8s.io/"));
    match field {
        "source" => string_at(obj, "source.component"),
        "status.successful" => number_or_zero(obj, "status.succeeded"),
        "status.replicas" => number_or_zero(obj, "status.replicas"),
        "spec.hostNetwork" | "spec.unschedulable" => bool_or_false(obj, field),
        "status.podIPs" => string_at(obj, "status.podIP"),
        "reportingController" if !is_events_v1 => string_at(obj, "reportingComponent"),
        "reportingComponent" if is_events_v1 => string_at(obj, "reportingController"),
        f if f.starts_with("regarding.") && !is_events_v1 => {
            string_at(obj, &f.replacen("regarding.", "involvedObject.", 1))
        }
        f if f.starts_with("involvedObject.") && is_events_v1 => {
            string_at(obj, &f.replacen("involvedObject.", "regarding.", 1))
        }
        f => string_at(obj, f),
    }
}

fn lookup<'a>(obj: &'a Value, dotted: &str) -> Option<&'a Value> {
    dotted.split('.').try_fold(obj, |v, k| v.get(k))
}

fn string_at(obj: &Value, dotted: &str) -> String {
    match lookup(obj, dotted) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    }
}

fn number_or_zero(obj: &Value, dotted: &str) -> String {
    lookup(obj, dotted).and_then(Value::as_i64).unwrap_or(0).to_string()
}

fn bool_or_false(obj: &Value, dotted: &str) -> String {
    lookup(obj, dotted)
        .and_then(Value::as_bool)
        .unwrap_or(false)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    fn sel_matches(sel: &str, l: Value) -> bool {
        LabelSelector::parse(sel).expect("parse").matches(Some(&labels(l)))
    }

    #[test]
    fn empty_selector_matches_everything() {
        for s in ["", "   "] {
            let sel = LabelSelector::parse(s).unwrap();
            assert!(sel.is_empty());
            assert!(sel.matches(None));
        }
    }

    #[test]
    fn equality_forms() {
        let l = json!({"app": "x", "tier": "fe"});
        assert!(sel_matches("app=x", l.clone()));
        assert!(sel_matches("app==x", l.clone()));
        assert!(sel_matches(" app = x , tier != y ", l.clone()));
        assert!(!sel_matches("app=x,tier!=fe", l.clone()));
        assert!(!sel_matches("app=y", l.clone()));
        // kubectl's observed `app%3Dx%2Ctier%21%3Dy`, decoded.
        assert!(sel_matches("app=x,tier!=y", l));
    }

    #[test]
    fn negative_operators_match_absent_labels() {
        assert!(sel_matches("tier!=y", json!({})));
        assert!(sel_matches("tier notin (a,b)", json!({})));
        assert!(sel_matches("!tier", json!({})));
        assert!(LabelSelector::parse("tier!=y").unwrap().matches(None));
        assert!(!LabelSelector::parse("tier=y").unwrap().matches(None));
    }

    #[test]
    fn set_and_existence_operators() {
        let l = json!({"env": "prod", "app.kubernetes.io/name": "web"});
        assert!(sel_matches("env in (prod, staging)", l.clone()));
        assert!(!sel_matches("env notin (prod)", l.clone()));
        assert!(sel_matches("env notin (dev),app.kubernetes.io/name", l.clone()));
        assert!(!sel_matches("!env", l.clone()));
        assert!(sel_matches("app.kubernetes.io/name in (web)", l.clone()));
        assert!(!sel_matches("missing", l));
    }

    #[test]
    fn empty_values() {
        assert!(sel_matches("a=", json!({"a": ""})));
        assert!(sel_matches("a=,b", json!({"a": "", "b": "1"})));
        assert!(sel_matches("a in (x,)", json!({"a": ""})));
        assert!(sel_matches("a=in", json!({"a": "in"})));
    }

    #[test]
    fn integer_comparisons() {
        assert!(sel_matches("n>3", json!({"n": "5"})));
        assert!(!sel_matches("n<3", json!({"n": "5"})));
        assert!(!sel_matches("n>3", json!({"n": "x"})));
        assert!(LabelSelector::parse("n>x").is_err());
    }

    #[test]
    fn malformed_selectors_are_errors() {
        for bad in [
            "=x",
            "a=b,",
            ",a",
            "a in b",
            "a in (b",
            "a in ()",
            "a b",
            "!",
            "a==b==c",
            "a=b c",
            "-bad=x",
            "a=-bad",
            "UPPER.example.com/x=y",
            "a=(x)",
            "a notin",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "expected error for {bad:?}");
        }
    }

    #[test]
    fn field_selector_metadata() {
        let obj = json!({"metadata": {"name": "web", "namespace": "default"}});
        let s = FieldSelector::parse("metadata.name=web,metadata.namespace==default").unwrap();
        assert!(s.check_supported("demo.example.com", "App").is_ok());
        assert!(s.matches(&obj));
        assert!(!FieldSelector::parse("metadata.name!=web").unwrap().matches(&obj));
        assert!(FieldSelector::parse("metadata.namespace!=kube-system")
            .unwrap()
            .matches(&obj));
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert!(FieldSelector::parse("metadata.name=web,").unwrap().matches(&obj));
    }

    #[test]
    fn field_selector_cluster_scoped_namespace_is_empty() {
        let obj = json!({"metadata": {"name": "n1"}});
        assert!(FieldSelector::parse("metadata.namespace=").unwrap().matches(&obj));
    }

    #[test]
    fn field_selector_unsupported_label() {
        let s = FieldSelector::parse("spec.nodeName=n1").unwrap();
        assert_eq!(
            s.check_supported("", "ConfigMap"),
            Err("field label not supported: spec.nodeName".to_string())
        );
        assert!(s.check_supported("", "Pod").is_ok());
        assert!(
            s.check_supported("example.com", "Pod").is_err(),
            "a custom resource named Pod gets no Pod field labels"
        );
    }

    #[test]
    fn field_selector_event_fields() {
        let ev = json!({
            "apiVersion": "v1", "kind": "Event", "metadata": {"name": "e", "namespace": "default"},
            "involvedObject": {"kind": "App", "name": "web", "namespace": "default", "uid": "u1"},
            "reason": "Synced", "type": "Normal", "source": {"component": "capstan"},
        });
        let s = FieldSelector::parse(
            "involvedObject.name=web,involvedObject.namespace=default,involvedObject.kind=App,involvedObject.uid=u1",
        )
        .unwrap();
        assert!(s.check_supported("", "Event").is_ok());
        assert!(s.check_supported("events.k8s.io", "Event").is_err());
        assert!(s.matches(&ev));
        assert!(FieldSelector::parse("source=capstan,type=Normal,reason=Synced")
            .unwrap()
            .matches(&ev));
        assert!(!FieldSelector::parse("type=Warning").unwrap().matches(&ev));
        let regarding = FieldSelector::parse("regarding.name=web,reportingController=").unwrap();
        assert!(regarding.check_supported("events.k8s.io", "Event").is_ok());
        assert!(regarding.check_supported("", "Event").is_err());
        assert!(
            regarding.matches(&ev),
            "events.k8s.io labels match the core/v1 storage shape"
        );
    }

    #[test]
    fn field_selector_kind_specific_values() {
        let pod = json!({"metadata": {"name": "p"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}});
        assert!(FieldSelector::parse("spec.nodeName=n1,status.phase!=Failed")
            .unwrap()
            .matches(&pod));
        assert!(FieldSelector::parse("spec.hostNetwork=false").unwrap().matches(&pod));
        let job = json!({"metadata": {"name": "j"}, "status": {}});
        assert!(FieldSelector::parse("status.successful=0").unwrap().matches(&job));
        let secret = json!({"metadata": {"name": "s"}, "type": "Opaque"});
        assert!(FieldSelector::parse("type=Opaque").unwrap().matches(&secret));
    }

    #[test]
    fn field_selector_escapes_and_errors() {
        let obj = json!({"metadata": {"name": "a,b"}});
        assert!(FieldSelector::parse(r"metadata.name=a\,b").unwrap().matches(&obj));
        assert!(FieldSelector::parse("metadata.name").is_err());
        assert!(FieldSelector::parse("=x").is_err());
        assert!(FieldSelector::parse(r"metadata.name=a\q").is_err());
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,64}") {
            let _ = LabelSelector::parse(&s).map(|l| l.matches(None));
            let _ = FieldSelector::parse(&s).map(|f| (f.check_supported("", "Pod"), f.matches(&json!({}))));
        }

        #[test]
        fn selector_alphabet_never_panics(s in "[a-z!=,() <>/.in\\\\-]{0,40}") {
            let _ = LabelSelector::parse(&s);
            let _ = FieldSelector::parse(&s);
        }
    }
}
