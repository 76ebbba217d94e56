//! Functions available to `goTemplate: true` templates.
//!
//! Argo CD gives Go templates Go's builtins plus Sprig (minus `env`, `expandenv`,
//! `getHostByName`) plus its own `normalize`, `slugify`, `toYaml`, `fromYaml`, `fromYamlArray`.
//! Capstan implements the subset ApplicationSet templates rely on; calling any other function is
//! a parse error (`function "x" not defined`), never a silently wrong Application.
//!
//! Supported (user docs list these):
//!
//! - Go builtins: `and`, `or`, `not`, `len`, `index`, `slice`, `eq`, `ne`, `lt`, `le`, `gt`,
//!   `ge`, `print`, `printf`, `println`, `urlquery`.
//! - Strings: `lower`, `upper`, `title`, `trim`, `trimAll`, `trimPrefix`, `trimSuffix`, `trunc`,
//!   `substr`, `replace`, `contains`, `hasPrefix`, `hasSuffix`, `repeat` (bounded), `nospace`,
//!   `cat`, `quote`, `squote`, `indent`, `nindent`, `split`, `splitList`, `join`, `toString`,
//!   `b64enc`, `b64dec`.
//! - Defaults and logic: `default`, `empty`, `coalesce`, `ternary`, `required`, `fail`.
//! - Numbers: `add`, `add1`, `sub`, `mul`, `div`, `mod`, `max`, `min`, `int`, `int64`, `atoi`,
//!   `float64`.
//! - Lists and dicts: `list`, `first`, `last`, `rest`, `initial`, `append`, `concat`, `has`,
//!   `uniq`, `sortAlpha`, `dict`, `get`, `set`, `unset`, `hasKey`, `keys`, `values`, `merge`.
//! - Encoding: `toJson`, `toRawJson`, `toPrettyJson`, `fromJson`, `toYaml`, `fromYaml`,
//!   `fromYamlArray`.
//! - Paths: `base`, `dir`, `ext`, `clean`.
//! - Argo CD: `normalize` (DNS-1123-ish name), `slugify` (`slugify [maxLen [smartTruncate]] s`).
//!
//! Not supported: time (`now`, `date`: generation must be deterministic), randomness, crypto
//! hashes, regular expressions, semver, `tpl`.

use base64::Engine as _;
use serde_json::{Map, Value};

use super::go::{go_type, truth, GoOptions, Val};
use crate::appset::params::{format_go_float, format_json_float, go_string, sanitize_name};
use crate::appset::yaml;

const FUNCTIONS: &[&str] = &[
    "and",
    "or",
    "not",
    "len",
    "index",
    "slice",
    "eq",
    "ne",
    "lt",
    "le",
    "gt",
    "ge",
    "print",
    "printf",
    "println",
    "urlquery",
    "lower",
    "upper",
    "title",
    "trim",
    "trimAll",
    "trimPrefix",
    "trimSuffix",
    "trunc",
    "substr",
    "replace",
    "contains",
    "hasPrefix",
    "hasSuffix",
    "repeat",
    "nospace",
    "cat",
    "quote",
    "squote",
    "indent",
    "nindent",
    "split",
    "splitList",
    "join",
    "toString",
    "b64enc",
    "b64dec",
    "default",
    "empty",
    "coalesce",
    "ternary",
    "required",
    "fail",
    "add",
    "add1",
    "sub",
    "mul",
    "div",
    "mod",
    "max",
    "min",
    "int",
    "int64",
    "atoi",
    "float64",
    "list",
    "first",
    "last",
    "rest",
    "initial",
    "append",
    "concat",
    "has",
    "uniq",
    "sortAlpha",
    "dict",
    "get",
    "set",
    "unset",
    "hasKey",
    "keys",
    "values",
    "merge",
    "toJson",
    "toRawJson",
    "toPrettyJson",
    "fromJson",
    "toYaml",
    "fromYaml",
    "fromYamlArray",
    "base",
    "dir",
    "ext",
    "clean",
    "normalize",
    "slugify",
];

/// Whether `name` is a known function (checked when a template is parsed, as Go does).
pub fn exists(name: &str) -> bool {
    FUNCTIONS.contains(&name)
}

type R = Result<Val, String>;

/// Calls function `name` with evaluated arguments (a pipeline's value is the last one).
pub fn call(name: &str, args: Vec<Val>, options: &GoOptions) -> R {
    match name {
        "not" => Ok(some(Value::Bool(!truth(one(&args)?)))),
        "len" => length(one(&args)?),
        "index" => index(&args),
        "slice" => slice(&args),
        "eq" | "ne" => equality(name == "eq", &args),
        "lt" | "le" | "gt" | "ge" => ordering(name, &args),
        "print" => Ok(some_str(sprint(&args))),
        "println" => Ok(some_str(format!(
            "{}\n",
            args.iter().map(fmt_v).collect::<Vec<_>>().join(" ")
        ))),
        "printf" => printf(&args, options),
        "urlquery" => Ok(some_str(query_escape(&sprint(&args)))),
        _ => call_sprig(name, &args, options),
    }
}

fn call_sprig(name: &str, args: &[Val], options: &GoOptions) -> R {
    match name {
        "lower" => string_fn(args, |s| s.to_lowercase()),
        "upper" => string_fn(args, |s| s.to_uppercase()),
        "title" => string_fn(args, title),
        "trim" => string_fn(args, |s| s.trim().to_owned()),
        "nospace" => string_fn(args, |s| s.chars().filter(|c| !c.is_whitespace()).collect()),
        "normalize" => string_fn(args, sanitize_name),
        "b64enc" => string_fn(args, |s| base64::engine::general_purpose::STANDARD.encode(s)),
        "b64dec" => string_fn(args, b64dec),
        "trimAll" => two_strings(args, |cut, s| s.trim_matches(|c| cut.contains(c)).to_owned()),
        "trimPrefix" => two_strings(args, |p, s| s.strip_prefix(p).unwrap_or(s).to_owned()),
        "trimSuffix" => two_strings(args, |p, s| s.strip_suffix(p).unwrap_or(s).to_owned()),
        "contains" => two_strings_bool(args, |sub, s| s.contains(sub)),
        "hasPrefix" => two_strings_bool(args, |p, s| s.starts_with(p)),
        "hasSuffix" => two_strings_bool(args, |p, s| s.ends_with(p)),
        "replace" => replace(args, options),
        "trunc" => trunc(args),
        "substr" => substr(args),
        "repeat" => repeat(args, options),
        "indent" | "nindent" => indent(name == "nindent", args, options),
        "cat" => Ok(some_str(
            args.iter()
                .filter(|a| !is_nil(a))
                .map(strval)
                .collect::<Vec<_>>()
                .join(" "),
        )),
        "quote" => Ok(some_str(
            args.iter()
                .filter(|a| !is_nil(a))
                .map(|a| go_quote(&strval(a)))
                .collect::<Vec<_>>()
                .join(" "),
        )),
        "squote" => Ok(some_str(
            args.iter()
                .filter(|a| !is_nil(a))
                .map(|a| format!("'{}'", strval(a)))
                .collect::<Vec<_>>()
                .join(" "),
        )),
        "split" | "splitList" => split(name == "split", args),
        "join" => join(args, options),
        "toString" => Ok(some_str(strval(one(args)?))),
        _ => call_logic_and_numbers(name, args),
    }
}

fn call_logic_and_numbers(name: &str, args: &[Val]) -> R {
    match name {
        "default" => default(args),
        "empty" => Ok(some(Value::Bool(!truth(one(args)?)))),
        "coalesce" => Ok(args.iter().find(|a| truth(a)).cloned().unwrap_or(Some(Value::Null))),
        "ternary" => ternary(args),
        "required" => required(args),
        "fail" => Err(string_arg(one(args)?)?),
        "add" => Ok(int(args.iter().map(to_i64).fold(0i64, i64::wrapping_add))),
        "add1" => Ok(int(to_i64(one(args)?).wrapping_add(1))),
        "mul" => Ok(int(args.iter().map(to_i64).fold(1i64, i64::wrapping_mul))),
        "sub" => binary_int(args, |a, b| Ok(a.wrapping_sub(b))),
        "div" => binary_int(args, |a, b| {
            a.checked_div(b).ok_or_else(|| "integer divide by zero".to_owned())
        }),
        "mod" => binary_int(args, |a, b| {
            a.checked_rem(b).ok_or_else(|| "integer divide by zero".to_owned())
        }),
        "max" => extreme(args, true),
        "min" => extreme(args, false),
        "int" | "int64" => Ok(int(to_i64(one(args)?))),
        "atoi" => Ok(int(string_arg(one(args)?)?.trim().parse::<i64>().unwrap_or(0))),
        "float64" => Ok(float(to_f64(one(args)?))),
        _ => call_collections(name, args),
    }
}

fn call_collections(name: &str, args: &[Val]) -> R {
    match name {
        "list" => Ok(some(Value::Array(args.iter().map(to_value).collect()))),
        "first" => Ok(list_arg(one(args)?)?.first().cloned().map_or(Some(Value::Null), Some)),
        "last" => Ok(list_arg(one(args)?)?.last().cloned().map_or(Some(Value::Null), Some)),
        "rest" => Ok(some(Value::Array(
            list_arg(one(args)?)?.iter().skip(1).cloned().collect(),
        ))),
        "initial" => {
            let l = list_arg(one(args)?)?;
            Ok(some(Value::Array(l[..l.len().saturating_sub(1)].to_vec())))
        }
        "append" => append(args),
        "concat" => concat(args),
        "has" => has(args),
        "uniq" => uniq(args),
        "sortAlpha" => sort_alpha(args),
        "dict" => Ok(some(Value::Object(dict(args)))),
        "get" => get(args),
        "set" | "unset" => set_unset(name == "set", args),
        "hasKey" => has_key(args),
        "keys" => keys(args),
        "values" => Ok(some(Value::Array(map_arg(one(args)?)?.values().cloned().collect()))),
        "merge" => merge(args),
        _ => call_encoding(name, args),
    }
}

fn call_encoding(name: &str, args: &[Val]) -> R {
    match name {
        "toJson" => Ok(some_str(to_go_json(&to_value(one(args)?), true, None))),
        "toRawJson" => Ok(some_str(to_go_json(&to_value(one(args)?), false, None))),
        "toPrettyJson" => Ok(some_str(to_go_json(&to_value(one(args)?), true, Some(0)))),
        "fromJson" => Ok(some(
            serde_json::from_str(&string_arg(one(args)?)?).unwrap_or(Value::Object(Map::new())),
        )),
        "toYaml" => to_yaml(one(args)?),
        "fromYaml" => from_yaml(one(args)?, false),
        "fromYamlArray" => from_yaml(one(args)?, true),
        "base" => string_fn(args, |s| path_base(s).to_owned()),
        "dir" => string_fn(args, path_dir),
        "ext" => string_fn(args, path_ext),
        "clean" => string_fn(args, path_clean),
        "slugify" => slugify(args),
        other => Err(format!("function {other:?} not defined")),
    }
}

// ---------------------------------------------------------------------------------------------
// Argument helpers

fn some(v: Value) -> Val {
    Some(v)
}

fn some_str(s: String) -> Val {
    Some(Value::String(s))
}

fn int(i: i64) -> Val {
    Some(Value::from(i))
}

fn float(f: f64) -> Val {
    Some(serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number))
}

fn is_nil(v: &Val) -> bool {
    matches!(v, None | Some(Value::Null))
}

fn to_value(v: &Val) -> Value {
    v.clone().unwrap_or(Value::Null)
}

fn one(args: &[Val]) -> Result<&Val, String> {
    match args {
        [a] => Ok(a),
        _ => Err(format!("wrong number of args: want 1 got {}", args.len())),
    }
}

fn two(args: &[Val]) -> Result<(&Val, &Val), String> {
    match args {
        [a, b] => Ok((a, b)),
        _ => Err(format!("wrong number of args: want 2 got {}", args.len())),
    }
}

/// A typed `string` parameter: Go refuses anything but a string here.
fn string_arg(v: &Val) -> Result<String, String> {
    match v {
        Some(Value::String(s)) => Ok(s.clone()),
        None => Err("invalid value; expected string".to_owned()),
        Some(other) => Err(format!("wrong type for value; expected string; got {}", go_type(other))),
    }
}

/// A typed `int` parameter (template integer constants; floats with an integral value pass).
fn int_arg(v: &Val) -> Result<i64, String> {
    match v {
        Some(Value::Number(n)) if n.is_i64() => Ok(n.as_i64().unwrap_or(0)),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Ok(f as i64),
            _ => Err("wrong type for value; expected int; got float64".to_owned()),
        },
        Some(other) => Err(format!("wrong type for value; expected int; got {}", go_type(other))),
        None => Err("invalid value; expected int".to_owned()),
    }
}

fn list_arg(v: &Val) -> Result<Vec<Value>, String> {
    match v {
        Some(Value::Array(items)) => Ok(items.clone()),
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(other) => Err(format!("cannot find first on type {}", go_type(other))),
    }
}

fn map_arg(v: &Val) -> Result<Map<String, Value>, String> {
    match v {
        Some(Value::Object(m)) => Ok(m.clone()),
        Some(other) => Err(format!(
            "wrong type for value; expected map[string]interface {{}}; got {}",
            go_type(other)
        )),
        None => Err("invalid value; expected map[string]interface {}".to_owned()),
    }
}

/// Sprig's `strval`: strings as they are, everything else `%v`, nil as `<nil>`.
fn strval(v: &Val) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        None => "<nil>".to_owned(),
        Some(other) => go_string(other),
    }
}

/// `%v` of one operand for `print`/`println`.
fn fmt_v(v: &Val) -> String {
    match v {
        None => "<nil>".to_owned(),
        Some(v) => go_string(v),
    }
}

/// Sprig's `toInt64` (via `cast`): numbers truncate, numeric strings parse, bools are 0/1.
fn to_i64(v: &Val) -> i64 {
    match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or_else(|| n.as_f64().unwrap_or(0.0) as i64),
        Some(Value::String(s)) => parse_go_int(s.trim()).unwrap_or(0),
        Some(Value::Bool(b)) => i64::from(*b),
        _ => 0,
    }
}

fn parse_go_int(s: &str) -> Option<i64> {
    let (neg, body) = s.strip_prefix('-').map_or((false, s), |b| (true, b));
    let v = if let Some(h) = body.strip_prefix("0x").or_else(|| body.strip_prefix("0X")) {
        i64::from_str_radix(h, 16).ok()?
    } else {
        body.parse::<i64>().ok()?
    };
    Some(if neg { -v } else { v })
}

fn to_f64(v: &Val) -> f64 {
    match v {
        Some(Value::Number(n)) => n.as_f64().unwrap_or(0.0),
        Some(Value::String(s)) => s.trim().parse().unwrap_or(0.0),
        Some(Value::Bool(b)) => f64::from(u8::from(*b)),
        _ => 0.0,
    }
}

fn string_fn(args: &[Val], f: impl Fn(&str) -> String) -> R {
    Ok(some_str(f(&string_arg(one(args)?)?)))
}

fn two_strings(args: &[Val], f: impl Fn(&str, &str) -> String) -> R {
    let (a, b) = two(args)?;
    Ok(some_str(f(&string_arg(a)?, &string_arg(b)?)))
}

fn two_strings_bool(args: &[Val], f: impl Fn(&str, &str) -> bool) -> R {
    let (a, b) = two(args)?;
    Ok(some(Value::Bool(f(&string_arg(a)?, &string_arg(b)?))))
}

fn binary_int(args: &[Val], f: impl Fn(i64, i64) -> Result<i64, String>) -> R {
    let (a, b) = two(args)?;
    Ok(int(f(to_i64(a), to_i64(b))?))
}

// ---------------------------------------------------------------------------------------------
// Go builtins

fn length(v: &Val) -> R {
    let n = match v {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(m)) => m.len(),
        Some(other) => return Err(format!("len of type {}", go_type(other))),
        None => return Err("len of nil pointer".to_owned()),
    };
    Ok(int(n as i64))
}

/// Go's `index`: a missing map key yields the zero value (nil), even with `missingkey=error`.
fn index(args: &[Val]) -> R {
    let (first, keys) = args
        .split_first()
        .ok_or("wrong number of args for index: want at least 1 got 0")?;
    let mut current = first.clone();
    for key in keys {
        current = match (current, key) {
            (None | Some(Value::Null), _) => return Err("index of untyped nil".to_owned()),
            (Some(Value::Object(mut m)), Some(Value::String(k))) => Some(m.remove(k).unwrap_or(Value::Null)),
            (Some(Value::Array(a)), k) => {
                let i = int_arg(k)?;
                let item = usize::try_from(i).ok().and_then(|i| a.get(i).cloned());
                Some(item.ok_or_else(|| format!("index out of range: {i}"))?)
            }
            (Some(Value::String(s)), k) => {
                let i = int_arg(k)?;
                let byte = usize::try_from(i).ok().and_then(|i| s.as_bytes().get(i).copied());
                Some(Value::from(byte.ok_or_else(|| format!("index out of range: {i}"))?))
            }
            (Some(other), _) => return Err(format!("can't index item of type {}", go_type(&other))),
        };
    }
    Ok(current)
}

fn slice(args: &[Val]) -> R {
    let (first, bounds) = args.split_first().ok_or("wrong number of args for slice")?;
    let bounds: Vec<i64> = bounds.iter().map(int_arg).collect::<Result<_, _>>()?;
    let len = match first {
        Some(Value::String(s)) => s.len(),
        Some(Value::Array(a)) => a.len(),
        _ => return Err("can't slice item".to_owned()),
    };
    let lo = bounds.first().copied().unwrap_or(0);
    let hi = bounds.get(1).copied().unwrap_or(len as i64);
    if lo < 0 || hi < lo || hi as usize > len || bounds.len() > 2 {
        return Err(format!("slice index out of range: {lo}:{hi}"));
    }
    let (lo, hi) = (lo as usize, hi as usize);
    match first {
        Some(Value::String(s)) => s
            .get(lo..hi)
            .map(|t| some_str(t.to_owned()))
            .ok_or_else(|| "slice splits a character".to_owned()),
        Some(Value::Array(a)) => Ok(some(Value::Array(a[lo..hi].to_vec()))),
        _ => Err("can't slice item".to_owned()),
    }
}

/// `eq a b c`: whether `a` equals any of the others. Numbers compare by value (Go would
/// refuse int against float; Capstan is lenient there).
fn equality(is_eq: bool, args: &[Val]) -> R {
    let (first, rest) = args.split_first().ok_or("missing argument for comparison")?;
    if rest.is_empty() {
        return Err("missing argument for comparison".to_owned());
    }
    if !is_eq && rest.len() != 1 {
        return Err("wrong number of args for ne: want 2".to_owned());
    }
    let equal = rest.iter().any(|other| values_equal(first, other));
    Ok(some(Value::Bool(equal == is_eq)))
}

fn values_equal(a: &Val, b: &Val) -> bool {
    match (a.as_ref().unwrap_or(&Value::Null), b.as_ref().unwrap_or(&Value::Null)) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (x, y) => x == y,
    }
}

fn ordering(name: &str, args: &[Val]) -> R {
    let (a, b) = two(args)?;
    let ord = match (a, b) {
        (Some(Value::Number(x)), Some(Value::Number(y))) => x.as_f64().partial_cmp(&y.as_f64()),
        (Some(Value::String(x)), Some(Value::String(y))) => Some(x.cmp(y)),
        _ => return Err("incompatible types for comparison".to_owned()),
    };
    let ord = ord.ok_or("invalid comparison")?;
    let result = match name {
        "lt" => ord.is_lt(),
        "le" => ord.is_le(),
        "gt" => ord.is_gt(),
        _ => ord.is_ge(),
    };
    Ok(some(Value::Bool(result)))
}

/// Go's `fmt.Sprint`: spaces between operands when neither is a string.
fn sprint(args: &[Val]) -> String {
    let mut out = String::new();
    for (i, arg) in args.iter().enumerate() {
        let is_string = matches!(arg, Some(Value::String(_)));
        if i > 0 && !is_string && !matches!(args[i - 1], Some(Value::String(_))) {
            out.push(' ');
        }
        out.push_str(&fmt_v(arg));
    }
    out
}

fn query_escape(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => out.push(b as char),
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// printf

fn printf(args: &[Val], options: &GoOptions) -> R {
    let (format, rest) = args
        .split_first()
        .ok_or("wrong number of args for printf: want at least 1 got 0")?;
    Ok(some_str(sprintf(&string_arg(format)?, rest, options.max_output)?))
}

/// Refuses a result that would exceed the output bound, before building it.
fn check_size(size: usize, options: &GoOptions) -> Result<(), String> {
    if size > options.max_output {
        return Err(format!(
            "result of {size} bytes exceeds the limit of {} bytes",
            options.max_output
        ));
    }
    Ok(())
}

#[derive(Default)]
struct Spec {
    minus: bool,
    plus: bool,
    zero: bool,
    space: bool,
    sharp: bool,
    width: Option<usize>,
    precision: Option<usize>,
}

/// Go's `fmt.Sprintf` for the verbs templates use: `%v %s %d %q %t %f %F %e %g %x %X %o %b %c
/// %%`, with flags `-+ 0#`, width and precision; Go's `%!verb(type=value)`, `%!v(MISSING)`
/// and `%!(EXTRA ...)` markers for mismatches.
pub(crate) fn sprintf(format: &str, args: &[Val], max_output: usize) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = format.chars().peekable();
    let mut next_arg = 0;
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let mut spec = Spec::default();
        while let Some(&f) = chars.peek() {
            match f {
                '-' => spec.minus = true,
                '+' => spec.plus = true,
                '0' => spec.zero = true,
                ' ' => spec.space = true,
                '#' => spec.sharp = true,
                _ => break,
            }
            chars.next();
        }
        spec.width = take_number(&mut chars);
        if chars.peek() == Some(&'.') {
            chars.next();
            spec.precision = Some(take_number(&mut chars).unwrap_or(0));
        }
        let Some(verb) = chars.next() else {
            out.push_str("%!(NOVERB)");
            break;
        };
        if verb == '%' {
            out.push('%');
            continue;
        }
        let Some(arg) = args.get(next_arg) else {
            out.push_str(&format!("%!{verb}(MISSING)"));
            continue;
        };
        next_arg += 1;
        let body = format_verb(verb, &spec, arg);
        out.push_str(&pad(body, &spec, verb, arg));
        if out.len() > max_output {
            return Err(format!("printf output exceeds {max_output} bytes"));
        }
    }
    if next_arg < args.len() {
        let extra: Vec<String> = args[next_arg..]
            .iter()
            .map(|a| format!("{}={}", type_name(a), fmt_v(a)))
            .collect();
        out.push_str(&format!("%!(EXTRA {})", extra.join(", ")));
    }
    Ok(out)
}

fn take_number(chars: &mut std::iter::Peekable<std::str::Chars<'_>>) -> Option<usize> {
    let mut n: Option<usize> = None;
    while let Some(d) = chars.peek().and_then(|c| c.to_digit(10)) {
        n = Some(n.unwrap_or(0).saturating_mul(10).saturating_add(d as usize).min(10_000));
        chars.next();
    }
    n
}

fn type_name(v: &Val) -> &'static str {
    v.as_ref().map_or("<nil>", go_type)
}

fn bad_verb(verb: char, arg: &Val) -> String {
    match arg {
        None | Some(Value::Null) => format!("%!{verb}(<nil>)"),
        Some(v) => format!("%!{verb}({}={})", go_type(v), go_string(v)),
    }
}

fn format_verb(verb: char, spec: &Spec, arg: &Val) -> String {
    match (verb, arg) {
        ('v', _) => fmt_v(arg),
        ('s', Some(Value::String(s))) => truncate_chars(s, spec.precision),
        ('s', Some(v @ (Value::Array(_) | Value::Object(_)))) => go_string(v),
        ('q', Some(Value::String(s))) => go_quote(s),
        ('t', Some(Value::Bool(b))) => b.to_string(),
        ('d' | 'x' | 'X' | 'o' | 'b' | 'c' | 'q', Some(Value::Number(n))) if !n.is_f64() => {
            format_int(verb, spec, n.as_i64().unwrap_or(0))
        }
        ('x' | 'X', Some(Value::String(s))) => {
            let hex: String = s.bytes().map(|b| format!("{b:02x}")).collect();
            if verb == 'X' {
                hex.to_uppercase()
            } else {
                hex
            }
        }
        ('f' | 'F' | 'e' | 'E' | 'g' | 'G', Some(Value::Number(n))) if n.is_f64() => {
            format_float(verb, spec, n.as_f64().unwrap_or(0.0))
        }
        _ => bad_verb(verb, arg),
    }
}

fn format_int(verb: char, spec: &Spec, i: i64) -> String {
    let sign = if i < 0 {
        "-"
    } else if spec.plus {
        "+"
    } else {
        ""
    };
    let abs = i.unsigned_abs();
    let digits = match verb {
        'x' => format!("{}{abs:x}", if spec.sharp { "0x" } else { "" }),
        'X' => format!("{}{abs:X}", if spec.sharp { "0X" } else { "" }),
        'o' => format!("{}{abs:o}", if spec.sharp { "0" } else { "" }),
        'b' => format!("{abs:b}"),
        'c' => return char::from_u32(abs as u32).map(String::from).unwrap_or_default(),
        'q' => return char::from_u32(abs as u32).map(|c| format!("{c:?}")).unwrap_or_default(),
        _ => abs.to_string(),
    };
    format!("{sign}{digits}")
}

fn format_float(verb: char, spec: &Spec, f: f64) -> String {
    let sign = if spec.plus && f >= 0.0 { "+" } else { "" };
    let body = match verb {
        'f' | 'F' => format!("{f:.*}", spec.precision.unwrap_or(6)),
        'e' | 'E' => {
            let s = go_exponent(&format!("{f:.*e}", spec.precision.unwrap_or(6)));
            if verb == 'E' {
                s.to_uppercase()
            } else {
                s
            }
        }
        _ => match spec.precision {
            None => format_go_float(f),
            Some(p) => {
                let s = go_exponent(&format!("{f:.*e}", p.saturating_sub(1)));
                let exp: i32 = s.rsplit('e').next().and_then(|e| e.parse().ok()).unwrap_or(0);
                if exp < -4 || exp >= p.max(1) as i32 {
                    s
                } else {
                    let decimals = (p.max(1) as i32 - 1 - exp).max(0) as usize;
                    let fixed = format!("{f:.decimals$}");
                    if fixed.contains('.') {
                        fixed.trim_end_matches('0').trim_end_matches('.').to_owned()
                    } else {
                        fixed
                    }
                }
            }
        },
    };
    format!("{sign}{body}")
}

/// Rust's `1.5e3` exponent into Go's `1.5e+03`.
fn go_exponent(rust: &str) -> String {
    match rust.split_once('e') {
        Some((m, e)) => {
            let n: i32 = e.parse().unwrap_or(0);
            format!("{m}e{}{:02}", if n < 0 { '-' } else { '+' }, n.unsigned_abs())
        }
        None => rust.to_owned(),
    }
}

fn pad(body: String, spec: &Spec, verb: char, arg: &Val) -> String {
    let Some(width) = spec.width else { return body };
    let len = body.chars().count();
    if len >= width {
        return body;
    }
    let fill = width - len;
    let numeric = matches!(arg, Some(Value::Number(_))) && !matches!(verb, 's' | 'q' | 'c' | 'v');
    if spec.minus {
        format!("{body}{}", " ".repeat(fill))
    } else if spec.zero && numeric {
        let (sign, digits) = match body.strip_prefix(['-', '+']) {
            Some(d) => (&body[..1], d),
            None => ("", body.as_str()),
        };
        format!("{sign}{}{digits}", "0".repeat(fill))
    } else {
        format!("{}{body}", " ".repeat(fill))
    }
}

fn truncate_chars(s: &str, precision: Option<usize>) -> String {
    match precision {
        Some(p) => s.chars().take(p).collect(),
        None => s.to_owned(),
    }
}

/// The escapes Go's `strconv.Quote` and `encoding/json` share: the quote, the backslash, newline, tab and
/// carriage return.
fn shared_escape(c: char) -> Option<&'static str> {
    match c {
        '"' => Some("\\\""),
        '\\' => Some("\\\\"),
        '\n' => Some("\\n"),
        '\t' => Some("\\t"),
        '\r' => Some("\\r"),
        _ => None,
    }
}

/// Writes `s` in double quotes: the escapes Go's `strconv.Quote` and `encoding/json` share, and `escape`
/// (which pushes the character, escaped or not) for every other character.
fn write_quoted(out: &mut String, s: &str, escape: impl Fn(&mut String, char)) {
    out.push('"');
    for c in s.chars() {
        match shared_escape(c) {
            Some(escaped) => out.push_str(escaped),
            None => escape(out, c),
        }
    }
    out.push('"');
}

/// Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    write_quoted(&mut out, s, |out, c| match c {
        '\u{7}' => out.push_str("\\a"),
        '\u{8}' => out.push_str("\\b"),
        '\u{c}' => out.push_str("\\f"),
        '\u{b}' => out.push_str("\\v"),
        c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
        c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    });
    out
}

// ---------------------------------------------------------------------------------------------
// Sprig strings

fn title(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut prev_letter = false;
    for c in s.chars() {
        let is_letter = c.is_alphanumeric() || c == '_' || c == '\'';
        if is_letter && !prev_letter {
            out.extend(c.to_uppercase());
        } else {
            out.push(c);
        }
        prev_letter = is_letter;
    }
    out
}

/// Sprig's `b64dec` returns the decoder's error text instead of failing.
fn b64dec(s: &str) -> String {
    match base64::engine::general_purpose::STANDARD.decode(s) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => e.to_string(),
    }
}

fn replace(args: &[Val], options: &GoOptions) -> R {
    match args {
        [old, new, s] => {
            let (old, new, s) = (string_arg(old)?, string_arg(new)?, string_arg(s)?);
            let count = if old.is_empty() {
                s.chars().count() + 1
            } else {
                s.matches(old.as_str()).count()
            };
            check_size(s.len().saturating_add(count.saturating_mul(new.len())), options)?;
            Ok(some_str(s.replace(&old, &new)))
        }
        _ => Err(format!("wrong number of args for replace: want 3 got {}", args.len())),
    }
}

/// Largest char boundary at or below `i`.
fn floor_boundary(s: &str, mut i: usize) -> usize {
    i = i.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// `trunc n s`: the first `n` bytes, or with a negative `n` the last `-n`.
fn trunc(args: &[Val]) -> R {
    let (n, s) = two(args)?;
    let (n, s) = (int_arg(n)?, string_arg(s)?);
    let out = if n < 0 {
        let keep = n.unsigned_abs() as usize;
        let start = s.len().saturating_sub(keep);
        let mut start = start;
        while !s.is_char_boundary(start) {
            start += 1;
        }
        s[start..].to_owned()
    } else {
        s[..floor_boundary(&s, n as usize)].to_owned()
    };
    Ok(some_str(out))
}

fn substr(args: &[Val]) -> R {
    match args {
        [start, end, s] => {
            let s = string_arg(s)?;
            let (start, end) = (int_arg(start)?, int_arg(end)?);
            let start = floor_boundary(&s, start.max(0) as usize);
            let end = if end < 0 || end as usize > s.len() {
                s.len()
            } else {
                floor_boundary(&s, end as usize)
            };
            Ok(some_str(if start > end {
                String::new()
            } else {
                s[start..end].to_owned()
            }))
        }
        _ => Err(format!("wrong number of args for substr: want 3 got {}", args.len())),
    }
}

fn repeat(args: &[Val], options: &GoOptions) -> R {
    let (n, s) = two(args)?;
    let (n, s) = (int_arg(n)?.max(0) as usize, string_arg(s)?);
    if s.len().saturating_mul(n) > options.max_output {
        return Err(format!("repeat output exceeds {} bytes", options.max_output));
    }
    Ok(some_str(s.repeat(n)))
}

fn indent(newline: bool, args: &[Val], options: &GoOptions) -> R {
    let (n, s) = two(args)?;
    let pad = " ".repeat(int_arg(n)?.clamp(0, 1024) as usize);
    let text = string_arg(s)?;
    let lines = text.matches('\n').count() + 1;
    check_size(text.len().saturating_add(lines.saturating_mul(pad.len() + 1)), options)?;
    let body = format!("{pad}{}", text.replace('\n', &format!("\n{pad}")));
    Ok(some_str(if newline { format!("\n{body}") } else { body }))
}

/// `split` yields Sprig's `{_0: .., _1: ..}` map; `splitList` a list. Go's `strings.Split`
/// with an empty separator splits into characters.
fn split(as_map: bool, args: &[Val]) -> R {
    let (sep, s) = two(args)?;
    let (sep, s) = (string_arg(sep)?, string_arg(s)?);
    let parts: Vec<String> = if sep.is_empty() {
        s.chars().map(String::from).collect()
    } else {
        s.split(sep.as_str()).map(str::to_owned).collect()
    };
    if as_map {
        let map = parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("_{i}"), Value::String(p)))
            .collect();
        Ok(some(Value::Object(map)))
    } else {
        Ok(some(Value::Array(parts.into_iter().map(Value::String).collect())))
    }
}

fn join(args: &[Val], options: &GoOptions) -> R {
    let (sep, list) = two(args)?;
    let sep = string_arg(sep)?;
    if let Some(Value::Array(items)) = list {
        check_size(items.len().saturating_mul(sep.len()), options)?;
    }
    let parts: Vec<String> = match list {
        Some(Value::Array(items)) => items
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| strval(&Some(v.clone())))
            .collect(),
        other => vec![strval(other)],
    };
    Ok(some_str(parts.join(&sep)))
}

// ---------------------------------------------------------------------------------------------
// Sprig logic and numbers

fn default(args: &[Val]) -> R {
    match args {
        [d] => Ok(d.clone()),
        [d, given, ..] => Ok(if truth(given) { given.clone() } else { d.clone() }),
        [] => Err("wrong number of args for default: want at least 1 got 0".to_owned()),
    }
}

fn ternary(args: &[Val]) -> R {
    match args {
        [yes, no, Some(Value::Bool(cond))] => Ok(if *cond { yes.clone() } else { no.clone() }),
        [_, _, other] => Err(format!("wrong type for value; expected bool; got {}", type_name(other))),
        _ => Err(format!("wrong number of args for ternary: want 3 got {}", args.len())),
    }
}

fn required(args: &[Val]) -> R {
    let (message, value) = two(args)?;
    match value {
        None | Some(Value::Null) => Err(string_arg(message)?),
        Some(Value::String(s)) if s.is_empty() => Err(string_arg(message)?),
        _ => Ok(value.clone()),
    }
}

fn extreme(args: &[Val], want_max: bool) -> R {
    let values = args.iter().map(to_i64);
    let best = if want_max { values.max() } else { values.min() };
    Ok(int(best.ok_or("wrong number of args: want at least 1 got 0")?))
}

// ---------------------------------------------------------------------------------------------
// Sprig lists and dicts

fn append(args: &[Val]) -> R {
    let (list, item) = two(args)?;
    let mut l = list_arg(list)?;
    l.push(to_value(item));
    Ok(some(Value::Array(l)))
}

fn concat(args: &[Val]) -> R {
    let mut out = Vec::new();
    for a in args {
        out.extend(list_arg(a)?);
    }
    Ok(some(Value::Array(out)))
}

fn has(args: &[Val]) -> R {
    let (needle, haystack) = two(args)?;
    let found = list_arg(haystack)?
        .iter()
        .any(|v| values_equal(&Some(v.clone()), needle));
    Ok(some(Value::Bool(found)))
}

fn uniq(args: &[Val]) -> R {
    let mut out: Vec<Value> = Vec::new();
    for v in list_arg(one(args)?)? {
        if !out.contains(&v) {
            out.push(v);
        }
    }
    Ok(some(Value::Array(out)))
}

fn sort_alpha(args: &[Val]) -> R {
    let mut items: Vec<String> = list_arg(one(args)?)?.iter().map(|v| strval(&Some(v.clone()))).collect();
    items.sort();
    Ok(some(Value::Array(items.into_iter().map(Value::String).collect())))
}

fn dict(args: &[Val]) -> Map<String, Value> {
    let mut map = Map::new();
    for pair in args.chunks(2) {
        let key = strval(&pair[0]);
        let value = pair.get(1).map_or(Value::String(String::new()), to_value);
        map.insert(key, value);
    }
    map
}

/// Sprig's `get`: the value, or `""` when the key is missing.
fn get(args: &[Val]) -> R {
    let (map, key) = two(args)?;
    let map = map_arg(map)?;
    Ok(some(
        map.get(&string_arg(key)?)
            .cloned()
            .unwrap_or(Value::String(String::new())),
    ))
}

fn set_unset(is_set: bool, args: &[Val]) -> R {
    let (map, key, value) = match args {
        [m, k, v] if is_set => (m, k, Some(v)),
        [m, k] if !is_set => (m, k, None),
        _ => return Err("wrong number of args".to_owned()),
    };
    let mut map = map_arg(map)?;
    let key = string_arg(key)?;
    match value {
        Some(v) => map.insert(key, to_value(v)),
        None => map.remove(&key),
    };
    Ok(some(Value::Object(map)))
}

fn has_key(args: &[Val]) -> R {
    let (map, key) = two(args)?;
    Ok(some(Value::Bool(map_arg(map)?.contains_key(&string_arg(key)?))))
}

/// Keys of one or more maps, sorted (Go's order is random; sorted is one of its orders).
fn keys(args: &[Val]) -> R {
    let mut out: Vec<String> = Vec::new();
    for a in args {
        out.extend(map_arg(a)?.keys().cloned());
    }
    out.sort();
    Ok(some(Value::Array(out.into_iter().map(Value::String).collect())))
}

/// Sprig's `merge dst src...`: keys missing in `dst` are filled from the sources, deeply.
fn merge(args: &[Val]) -> R {
    let (dst, srcs) = args.split_first().ok_or("wrong number of args for merge")?;
    let mut out = map_arg(dst)?;
    for src in srcs {
        fill_missing(&mut out, &map_arg(src)?);
    }
    Ok(some(Value::Object(out)))
}

fn fill_missing(dst: &mut Map<String, Value>, src: &Map<String, Value>) {
    for (k, v) in src {
        match (dst.get_mut(k), v) {
            (Some(Value::Object(d)), Value::Object(s)) => fill_missing(d, s),
            (Some(_), _) => {}
            (None, v) => {
                dst.insert(k.clone(), v.clone());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Encodings

/// Go's `encoding/json` output: sorted keys, floats as Go prints them, and (for `toJson`) `<`,
/// `>`, `&` escaped as `\u003c` etc. `indent` = Some(level) for `MarshalIndent(v, "", "  ")`.
pub(crate) fn to_go_json(value: &Value, escape_html: bool, indent: Option<usize>) -> String {
    let mut out = String::new();
    write_json(&mut out, value, escape_html, indent);
    out
}

fn write_json(out: &mut String, value: &Value, escape_html: bool, indent: Option<usize>) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) if n.is_f64() => out.push_str(&format_json_float(n.as_f64().unwrap_or(0.0))),
        Value::Number(n) => out.push_str(&n.to_string()),
        Value::String(s) => write_json_string(out, s, escape_html),
        Value::Array(items) if items.is_empty() => out.push_str("[]"),
        Value::Object(map) if map.is_empty() => out.push_str("{}"),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                separator(out, i, indent);
                write_json(out, item, escape_html, indent.map(|l| l + 1));
            }
            close(out, indent, ']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                separator(out, i, indent);
                write_json_string(out, k, escape_html);
                out.push_str(if indent.is_some() { ": " } else { ":" });
                write_json(out, v, escape_html, indent.map(|l| l + 1));
            }
            close(out, indent, '}');
        }
    }
}

fn separator(out: &mut String, i: usize, indent: Option<usize>) {
    if i > 0 {
        out.push(',');
    }
    if let Some(level) = indent {
        out.push('\n');
        out.push_str(&"  ".repeat(level + 1));
    }
}

fn close(out: &mut String, indent: Option<usize>, bracket: char) {
    if let Some(level) = indent {
        out.push('\n');
        out.push_str(&"  ".repeat(level));
    }
    out.push(bracket);
}

fn write_json_string(out: &mut String, s: &str, escape_html: bool) {
    write_quoted(out, s, |out, c| match c {
        '<' | '>' | '&' if escape_html => out.push_str(&format!("\\u{:04x}", c as u32)),
        '\u{2028}' | '\u{2029}' => out.push_str(&format!("\\u{:04x}", c as u32)),
        c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
        c => out.push(c),
    });
}

/// `toYaml`: `sigs.k8s.io/yaml` output without the trailing newline; integral floats print as
/// integers, as they do after Go's JSON round trip.
fn to_yaml(v: &Val) -> R {
    let mut value = to_value(v);
    integral_floats_to_ints(&mut value);
    let text = yaml::to_yaml(&value)?;
    Ok(some_str(text.trim_end_matches('\n').to_owned()))
}

fn integral_floats_to_ints(value: &mut Value) {
    let mut stack = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) => {
                if let Some(f) = n
                    .as_f64()
                    .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15)
                {
                    *n = serde_json::Number::from(f as i64);
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
}

fn from_yaml(v: &Val, as_array: bool) -> R {
    let text = string_arg(v)?;
    let mut parsed = yaml::parse(&text, 1 << 20)?;
    crate::appset::params::normalize_numbers(&mut parsed);
    match (parsed, as_array) {
        (Value::Null, false) => Ok(some(Value::Object(Map::new()))),
        (Value::Null, true) => Ok(some(Value::Array(Vec::new()))),
        (v @ Value::Object(_), false) | (v @ Value::Array(_), true) => Ok(some(v)),
        (other, _) => Err(format!("cannot unmarshal {} into the expected type", go_type(&other))),
    }
}

// ---------------------------------------------------------------------------------------------
// Paths (Go's `path` package)

/// Go's `path.Clean`.
pub(crate) fn path_clean(p: &str) -> String {
    if p.is_empty() {
        return ".".to_owned();
    }
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for seg in p.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|l| *l != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            s => parts.push(s),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

/// Go's `path.Base`.
pub(crate) fn path_base(p: &str) -> &str {
    if p.is_empty() {
        return ".";
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

/// Go's `path.Dir`.
pub(crate) fn path_dir(p: &str) -> String {
    let dir = match p.rfind('/') {
        Some(i) => &p[..=i],
        None => "",
    };
    path_clean(dir)
}

fn path_ext(p: &str) -> String {
    let base_start = p.rfind('/').map_or(0, |i| i + 1);
    match p[base_start..].rfind('.') {
        Some(i) => p[base_start + i..].to_owned(),
        None => String::new(),
    }
}

// ---------------------------------------------------------------------------------------------
// slugify

/// Argo CD's `slugify [maxSize=50 [smartTruncate=true]] name`: `normalize`, then
/// `gosimple/slug`: characters outside `[a-zA-Z0-9-_]` become `-`, runs of `-` collapse, `-`
/// and `_` are trimmed, and the result is cut to `maxSize` (at the last `-` when smart).
fn slugify(args: &[Val]) -> R {
    let (name, options) = args.split_last().ok_or("wrong number of args for slugify")?;
    let max = match options.first() {
        Some(v) => int_arg(v)?,
        None => 50,
    };
    let smart = match options.get(1) {
        Some(Some(Value::Bool(b))) => *b,
        Some(other) => return Err(format!("wrong type for value; expected bool; got {}", type_name(other))),
        None => true,
    };
    let sanitized = sanitize_name(&string_arg(name)?);
    let mut slug = String::new();
    for c in sanitized.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' };
        if !(c == '-' && slug.ends_with('-')) {
            slug.push(c);
        }
    }
    let slug = slug.trim_matches(|c| c == '-' || c == '_').to_owned();
    Ok(some_str(truncate_slug(slug, max, smart)))
}

fn truncate_slug(slug: String, max: i64, smart: bool) -> String {
    let Ok(max) = usize::try_from(max) else { return slug };
    if max == 0 || slug.len() <= max {
        return slug;
    }
    if smart {
        if let Some(i) = slug[..=max].rfind('-') {
            return slug[..i].to_owned();
        }
    }
    slug[..max].to_owned()
}
