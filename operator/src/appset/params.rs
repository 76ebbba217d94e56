//! Parameter sets: what generators produce and templates consume.
//!
//! A parameter set is a JSON object. With `goTemplate: true` it is nested (`.path.basename`
//! reads `{"path": {"basename": ...}}`); with fasttemplate it is flat, every key a dotted name
//! (`path.basename`) and every value a string, as Argo CD's generators emit them.
//!
//! Numbers follow Go: Argo CD decodes parameters through `encoding/json` into `interface{}`, so
//! every number from a list element, a Git file or `elementsYaml` is a float64 and prints with
//! `%v` (`1e+06` for a million). [`normalize_numbers`] and [`go_string`] reproduce that.

use std::collections::BTreeMap;

use serde_json::{Map, Number, Value};

/// One parameter set.
pub type ParamSet = Map<String, Value>;

/// Flattens a parameter set to dotted keys with `%v` string values, as Argo CD does with
/// `github.com/jeremywohl/flatten` (`DotStyle`) before matching a generator's `selector`.
///
/// Nested objects join keys with `.`, arrays use the index (`list.0`); empty objects and arrays
/// produce no key. Iterative, so a deep value cannot overflow the stack.
pub fn flatten(params: &ParamSet) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack: Vec<(String, &Value)> = params.iter().rev().map(|(k, v)| (k.clone(), v)).collect();
    while let Some((key, value)) = stack.pop() {
        match value {
            Value::Object(map) => {
                stack.extend(map.iter().rev().map(|(k, v)| (format!("{key}.{k}"), v)));
            }
            Value::Array(items) => {
                stack.extend(items.iter().enumerate().rev().map(|(i, v)| (format!("{key}.{i}"), v)));
            }
            leaf => {
                out.insert(key, go_string(leaf));
            }
        }
    }
    out
}

/// Flattens a parameter set into string parameters for fasttemplate (`a.b.c` keys).
pub fn flatten_to_params(params: &ParamSet) -> ParamSet {
    flatten(params)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// Go's `fmt.Sprint("%v", v)` of a decoded JSON value: `<nil>`, `true`, `1e+06`, `[a b]`,
/// `map[a:1 b:2]` (keys sorted, as Go prints maps).
pub fn go_string(value: &Value) -> String {
    let mut out = String::new();
    write_go(&mut out, value, 0);
    out
}

/// Depth beyond which nested values print as `...` (values are depth-checked on input; this
/// only keeps printing itself bounded).
const MAX_PRINT_DEPTH: usize = 128;

fn write_go(out: &mut String, value: &Value, depth: usize) {
    if depth > MAX_PRINT_DEPTH {
        out.push_str("...");
        return;
    }
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => out.push_str(&go_number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_go(out, item, depth + 1);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push_str("map[");
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_go(out, v, depth + 1);
            }
            out.push(']');
        }
    }
}

/// `%v` of a number: integers as decimal, floats as Go's shortest `%g`.
pub fn go_number(n: &Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    format_go_float(n.as_f64().unwrap_or(0.0))
}

/// Converts every integer in `value` to a float, as Go's `encoding/json` does when it decodes
/// into `interface{}`; so `3` prints `3` and `1000000` prints `1e+06`, exactly as in Argo CD.
pub fn normalize_numbers(value: &mut Value) {
    let mut stack: Vec<&mut Value> = vec![value];
    while let Some(v) = stack.pop() {
        match v {
            Value::Number(n) if !n.is_f64() => {
                if let Some(f) = n.as_f64().and_then(Number::from_f64) {
                    *n = f;
                }
            }
            Value::Array(items) => stack.extend(items.iter_mut()),
            Value::Object(map) => stack.extend(map.values_mut()),
            _ => {}
        }
    }
}

/// The shortest decimal digits of `f` (no sign) and its decimal point position, i.e.
/// `f = 0.d1d2d3... × 10^dp`. Uses Rust's shortest round-trip formatting, which is the same
/// digit string Go's `strconv` produces with precision -1.
fn shortest_digits(f: f64) -> (String, i32) {
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let digits = digits.trim_end_matches('0');
    if digits.is_empty() {
        return ("0".to_owned(), 1);
    }
    (digits.to_owned(), exp + 1)
}

/// Go's `strconv.FormatFloat(f, 'g', -1, 64)`, which `%v` uses: exponent form when the decimal
/// exponent is below -4 or at least 6 (the shortest-precision rule), fixed form otherwise.
pub fn format_go_float(f: f64) -> String {
    if let Some(special) = special_float(f) {
        return special.to_owned();
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_owned();
    }
    let (digits, dp) = shortest_digits(f);
    let exp = dp - 1;
    let sign = if f < 0.0 { "-" } else { "" };
    if !(-4..6).contains(&exp) {
        format!("{sign}{}", exponent_form(&digits, exp))
    } else {
        format!("{sign}{}", fixed_form(&digits, dp))
    }
}

/// Go's `encoding/json` float encoding: fixed form unless the magnitude is below 1e-6 or at
/// least 1e21, exponent form then (`1e-7`, `1e+21`).
pub fn format_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".to_owned();
    }
    if f == 0.0 {
        return "0".to_owned();
    }
    let (digits, dp) = shortest_digits(f);
    let sign = if f < 0.0 { "-" } else { "" };
    let abs = f.abs();
    if !(1e-6..1e21).contains(&abs) {
        let e = exponent_form(&digits, dp - 1);
        // Go trims `e-07` to `e-7` in JSON.
        let e = e.replace("e-0", "e-").replace("e+0", "e+");
        return format!("{sign}{e}");
    }
    format!("{sign}{}", fixed_form(&digits, dp))
}

fn special_float(f: f64) -> Option<&'static str> {
    if f.is_nan() {
        Some("NaN")
    } else if f.is_infinite() {
        Some(if f > 0.0 { "+Inf" } else { "-Inf" })
    } else {
        None
    }
}

/// `d.ddde±XX` with at least two exponent digits, as Go prints.
fn exponent_form(digits: &str, exp: i32) -> String {
    let (first, rest) = digits.split_at(1);
    let mantissa = if rest.is_empty() {
        first.to_owned()
    } else {
        format!("{first}.{rest}")
    };
    let sign = if exp < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exp.unsigned_abs())
}

/// Fixed notation of `0.digits × 10^dp` with no trailing zeros after the point.
fn fixed_form(digits: &str, dp: i32) -> String {
    let n = digits.len() as i32;
    if dp <= 0 {
        format!("0.{}{}", "0".repeat(dp.unsigned_abs() as usize), digits)
    } else if dp >= n {
        format!("{}{}", digits, "0".repeat((dp - n) as usize))
    } else {
        let (int, frac) = digits.split_at(dp as usize);
        format!("{int}.{frac}")
    }
}

/// Argo CD's `SanitizeName` (the `normalize` function and the `*Normalized` parameters):
/// lowercase, every character outside `[-a-z0-9.]` becomes `-`, at most 253 bytes, and no
/// leading or trailing `-` or `.`.
pub fn sanitize_name(name: &str) -> String {
    let lowered: String = name
        .to_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let cut = if lowered.len() > 253 {
        &lowered[..253]
    } else {
        lowered.as_str()
    };
    cut.trim_matches(|c| c == '-' || c == '.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_float_formatting_matches_percent_v() {
        let cases = [
            (3.0, "3"),
            (8080.0, "8080"),
            (100000.0, "100000"),
            (1_000_000.0, "1e+06"),
            (123_456_789.0, "1.23456789e+08"),
            (0.5, "0.5"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.25, "-2.25"),
        ];
        for (f, want) in cases {
            assert_eq!(format_go_float(f), want, "{f}");
        }
    }

    #[test]
    fn json_float_formatting_matches_encoding_json() {
        assert_eq!(format_json_float(3.0), "3");
        assert_eq!(format_json_float(1_000_000.0), "1000000");
        assert_eq!(format_json_float(1e21), "1e+21");
        assert_eq!(format_json_float(1e-7), "1e-7");
        assert_eq!(format_json_float(0.25), "0.25");
    }

    #[test]
    fn flatten_uses_dots_and_indexes() {
        let mut v = json!({"a": {"b": "c", "n": 1_000_000, "l": ["x", true]}, "z": null, "e": {}});
        normalize_numbers(&mut v);
        let flat = flatten(v.as_object().unwrap());
        let want: BTreeMap<String, String> = [
            ("a.b", "c"),
            ("a.n", "1e+06"),
            ("a.l.0", "x"),
            ("a.l.1", "true"),
            ("z", "<nil>"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(flat, want);
    }

    #[test]
    fn go_string_prints_maps_and_slices_like_go() {
        assert_eq!(go_string(&json!({"b": 2, "a": ["x", "y"]})), "map[a:[x y] b:2]");
    }

    #[test]
    fn sanitize_name_mirrors_argo() {
        assert_eq!(sanitize_name("My_Cluster.EU-1"), "my-cluster.eu-1");
        assert_eq!(sanitize_name("-.a b.-"), "a-b");
        assert_eq!(sanitize_name(&"x".repeat(300)).len(), 253);
    }
}
