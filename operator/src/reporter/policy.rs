//! Pure: what the reporter does with an answer (the status-code table of docs/reporter-protocol.md),
//! `Retry-After` parsing and the full-jitter backoff.

use std::time::{Duration, SystemTime};

use serde::Deserialize;

/// Longest `Retry-After` honoured.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(15 * 60);
/// First backoff ceiling.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// Largest backoff.
pub const BACKOFF_MAX: Duration = Duration::from_secs(5 * 60);
/// Least time between two tries after a 401/403 when the token did not change.
pub const AUTH_RETRY: Duration = Duration::from_secs(5 * 60);

/// What to do after an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// 2xx: acknowledged (the body still has to be read).
    Ack,
    /// 400/422: split the batch to isolate the bad item.
    Split,
    /// 413: halve the batch size.
    Halve,
    /// 401/403: stop until the token changes (or [`AUTH_RETRY`]).
    AuthFailed,
    /// 409 `stale_epoch`: a newer term exists.
    StepDown {
        /// The receiver's epoch.
        current_epoch: u64,
    },
    /// Any other 409: run a digest round.
    Resync,
    /// 429/503: no request of any kind before this long.
    Wait(Duration),
    /// 5xx, 3xx, an unknown code, a timeout, a reset or a malformed answer: back off, same batch.
    Backoff,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Conflict {
    #[serde(default)]
    error: String,
    #[serde(default)]
    current_epoch: Option<u64>,
}

/// Classifies an HTTP answer. `retry_after` is the header's value, `now` the time to measure an
/// HTTP date against.
pub fn classify(status: u16, body: &[u8], retry_after: Option<&str>, now: SystemTime) -> Verdict {
    match status {
        200..=299 => Verdict::Ack,
        400 | 422 => Verdict::Split,
        413 => Verdict::Halve,
        401 | 403 => Verdict::AuthFailed,
        409 => match serde_json::from_slice::<Conflict>(body) {
            Ok(Conflict {
                error,
                current_epoch: Some(n),
            }) if error == "stale_epoch" => Verdict::StepDown { current_epoch: n },
            _ => Verdict::Resync,
        },
        429 | 503 => retry_after
            .and_then(|v| parse_retry_after(v, now))
            .map_or(Verdict::Backoff, Verdict::Wait),
        _ => Verdict::Backoff,
    }
}

/// `Retry-After`: delay-seconds or an HTTP date, capped at [`MAX_RETRY_AFTER`]; `None` when
/// unparseable. A date in the past means "now".
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let wait = if let Ok(secs) = value.parse::<u64>() {
        Duration::from_secs(secs)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(wait.min(MAX_RETRY_AFTER))
}

/// Full-jitter exponential backoff: a uniform draw in `[0, min(max, base * 2^attempt)]`, never below
/// `base` (so a dead receiver is not hammered). `random` is in `[0, 1)`.
pub fn backoff(attempt: u32, random: f64) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX))
        .min(BACKOFF_MAX);
    ceiling.mul_f64(random.clamp(0.0, 1.0)).max(BACKOFF_BASE)
}

/// A random number in `[0, 1)` from the standard library's per-process random keys (no RNG crate
/// for jitter and instance suffixes).
pub fn random_unit() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

pub use crate::controllers::random_u64;

/// Whether the namespace pattern `pattern` (`*` any run, `?` one character) matches `text` entirely:
/// the code base's one glob matcher, in which no wildcard matches `/`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    crate::glob::glob_match(pattern, text, crate::glob::Options::NAMES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_code_table() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let cases: &[(u16, &str, Option<&str>, Verdict)] = &[
            (200, "", None, Verdict::Ack),
            (204, "", None, Verdict::Ack),
            (400, "", None, Verdict::Split),
            (422, "", None, Verdict::Split),
            (413, "", None, Verdict::Halve),
            (401, "", None, Verdict::AuthFailed),
            (403, "", None, Verdict::AuthFailed),
            (
                409,
                r#"{"error":"stale_epoch","currentEpoch":7}"#,
                None,
                Verdict::StepDown { current_epoch: 7 },
            ),
            (409, r#"{"error":"stale_epoch"}"#, None, Verdict::Resync),
            (409, "not json", None, Verdict::Resync),
            (429, "", Some("5"), Verdict::Wait(Duration::from_secs(5))),
            (503, "", Some("99999"), Verdict::Wait(MAX_RETRY_AFTER)),
            (503, "", None, Verdict::Backoff),
            (503, "", Some("soon"), Verdict::Backoff),
            (500, "", None, Verdict::Backoff),
            (502, "", Some("5"), Verdict::Backoff),
            (302, "", None, Verdict::Backoff),
            (418, "", None, Verdict::Backoff),
        ];
        for (status, body, retry_after, want) in cases {
            assert_eq!(
                &classify(*status, body.as_bytes(), *retry_after, now),
                want,
                "{status} {body} {retry_after:?}"
            );
        }
    }

    #[test]
    fn retry_after_takes_seconds_and_http_dates() {
        let now = httpdate::parse_http_date("Wed, 21 Oct 2015 07:28:00 GMT").unwrap();
        assert_eq!(parse_retry_after(" 5 ", now), Some(Duration::from_secs(5)));
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            parse_retry_after("Fri, 21 Oct 2016 07:28:00 GMT", now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(parse_retry_after("-1", now), None);
        assert_eq!(parse_retry_after("", now), None);
    }

    #[test]
    fn backoff_is_full_jitter_between_one_second_and_five_minutes() {
        assert_eq!(backoff(0, 0.0), BACKOFF_BASE);
        assert_eq!(backoff(3, 0.5), Duration::from_secs(4));
        assert_eq!(backoff(3, 0.999_999), Duration::from_secs(8).mul_f64(0.999_999));
        assert_eq!(backoff(30, 1.0), BACKOFF_MAX);
        assert_eq!(backoff(u32::MAX, 0.5), BACKOFF_MAX / 2);
        let r = random_unit();
        assert!((0.0..1.0).contains(&r));
    }

    #[test]
    fn globs() {
        for (p, t, want) in [
            ("team-*", "team-a", true),
            ("team-*", "team", false),
            ("*", "", true),
            ("a?c", "abc", true),
            ("a?c", "ac", false),
            ("*-prod", "eu-prod", true),
            ("prod", "prod-1", false),
            ("*a*b", "xaxxb", true),
            ("team-*", "team-x/../capstan-system", false),
            ("*", "a/b", false),
        ] {
            assert_eq!(glob_match(p, t), want, "{p} {t}");
        }
    }
}
