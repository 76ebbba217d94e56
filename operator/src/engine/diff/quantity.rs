//! Kubernetes resource quantities (`resource.Quantity`): parsing to an exact canonical value so that
//! `1000m` == `1`, `1Gi` == `1024Mi`, `0.5` == `500m`, `1e3` == `1k`. Argo CD gets the same effect by
//! re-marshalling known types (`normalizers/knowntypes_normalizer.go`); the API server stores quantities in
//! canonical form, so Git's spelling and the live spelling often differ while meaning the same value.
//!
//! Exact arithmetic on `u128` with bounded input; anything that does not fit is "not a quantity" and the
//! caller falls back to plain equality.

use serde_json::Value;

/// The longest string considered for quantity parsing (Kubernetes quantities are short).
const MAX_LEN: usize = 64;
/// The largest decimal exponent accepted (`1e1000` is not a useful quantity).
const MAX_EXP: i32 = 1000;

/// An exact quantity value: `(-1)^negative * mantissa * 10^exp10`, with no trailing zeros in `mantissa`
/// (zero is `(false, 0, 0)`), so two quantities are equal iff their canonical forms are equal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Canonical {
    negative: bool,
    mantissa: u128,
    exp10: i32,
}

impl Canonical {
    fn new(negative: bool, mut mantissa: u128, mut exp10: i32) -> Canonical {
        if mantissa == 0 {
            return Canonical {
                negative: false,
                mantissa: 0,
                exp10: 0,
            };
        }
        while mantissa.is_multiple_of(10) {
            mantissa /= 10;
            exp10 += 1;
        }
        Canonical {
            negative,
            mantissa,
            exp10,
        }
    }
}

/// Parses a quantity string (`[+-]digits[.digits][suffix]`, suffix one of the binary SI `Ki..Ei`, decimal
/// SI `n u m "" k M G T P E`, or a decimal exponent `e<int>`/`E<int>`), as `resource.ParseQuantity` does.
pub fn parse(s: &str) -> Option<Canonical> {
    let s = s.trim();
    if s.is_empty() || s.len() > MAX_LEN {
        return None;
    }
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(rest.len());
    let (number, suffix) = rest.split_at(num_end);
    let (mantissa, frac_digits) = parse_number(number)?;
    let (exp10, binary_pow) = parse_suffix(suffix)?;
    let mut mantissa = mantissa;
    for _ in 0..binary_pow {
        mantissa = mantissa.checked_mul(1024)?;
    }
    let exp = exp10.checked_sub(frac_digits)?;
    Some(Canonical::new(negative, mantissa, exp))
}

/// `digits[.digits]` → (all digits as an integer, number of fraction digits). Leading zeros are fine.
fn parse_number(number: &str) -> Option<(u128, i32)> {
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    if (int.is_empty() && frac.is_empty()) || frac.contains('.') {
        return None;
    }
    let mut mantissa: u128 = 0;
    for c in int.chars().chain(frac.chars()) {
        let d = c.to_digit(10)?;
        mantissa = mantissa.checked_mul(10)?.checked_add(u128::from(d))?;
    }
    Some((mantissa, i32::try_from(frac.len()).ok()?))
}

/// Suffix → (decimal exponent, power of 1024).
fn parse_suffix(suffix: &str) -> Option<(i32, u32)> {
    let decimal = match suffix {
        "" => Some(0),
        "n" => Some(-9),
        "u" => Some(-6),
        "m" => Some(-3),
        "k" => Some(3),
        "M" => Some(6),
        "G" => Some(9),
        "T" => Some(12),
        "P" => Some(15),
        "E" => Some(18),
        _ => None,
    };
    if let Some(e) = decimal {
        return Some((e, 0));
    }
    let binary = match suffix {
        "Ki" => Some(1),
        "Mi" => Some(2),
        "Gi" => Some(3),
        "Ti" => Some(4),
        "Pi" => Some(5),
        "Ei" => Some(6),
        _ => None,
    };
    if let Some(p) = binary {
        return Some((0, p));
    }
    let exp = suffix.strip_prefix(['e', 'E'])?;
    let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 5 {
        return None;
    }
    let e: i32 = exp.parse().ok()?;
    (e.abs() <= MAX_EXP).then_some((e, 0))
}

/// A JSON scalar as a quantity: strings are parsed, numbers through their decimal text.
pub fn of_value(v: &Value) -> Option<Canonical> {
    match v {
        Value::String(s) => parse(s),
        Value::Number(n) => parse(&n.to_string()),
        _ => None,
    }
}

/// Whether two JSON scalars are the same quantity.
pub fn equal(a: &Value, b: &Value) -> bool {
    matches!((of_value(a), of_value(b)), (Some(x), Some(y)) if x == y)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn equivalent_spellings() {
        for (a, b) in [
            ("1000m", "1"),
            ("1Gi", "1024Mi"),
            ("0.5", "500m"),
            ("1e3", "1k"),
            ("1.5Gi", "1536Mi"),
            ("+2", "2000m"),
            (".5", "0.5"),
            ("0", "0m"),
            ("-0", "0"),
            ("1E-3", "1m"),
            ("129e6", "129M"),
            ("128974848", "128974848000m"),
            ("0.1", "100m"),
        ] {
            assert_eq!(parse(a), parse(b), "{a} vs {b}");
            assert!(parse(a).is_some(), "{a}");
        }
    }

    #[test]
    fn different_values() {
        for (a, b) in [("1", "1Gi"), ("1k", "1Ki"), ("500m", "5"), ("-1", "1"), ("1M", "1Mi")] {
            assert_ne!(parse(a), parse(b), "{a} vs {b}");
        }
    }

    #[test]
    fn rejects_non_quantities() {
        for s in [
            "",
            "abc",
            "1x",
            "1..2",
            ".",
            "1e",
            "1e+",
            "Gi",
            "1Gix",
            "1e99999",
            "--1",
            &"9".repeat(65),
        ] {
            assert_eq!(parse(s), None, "{s}");
        }
        // Too large for exact arithmetic: not a quantity, never a panic.
        assert_eq!(parse("999999999999999999999999999999999999999Ei"), None);
    }

    #[test]
    fn json_values() {
        assert!(equal(&json!(1), &json!("1000m")));
        assert!(equal(&json!(0.5), &json!("500m")));
        assert!(!equal(&json!(true), &json!("1")));
        assert!(!equal(&json!("abc"), &json!("abc")));
    }
}
