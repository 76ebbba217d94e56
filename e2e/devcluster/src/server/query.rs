//! Lenient query-string parsing: empty `&` segments are ignored (kube-rs sends `?&limit=500`),
//! booleans accept `true`/`false`/`1`/`0`, `+` means space, unknown parameters are ignored.

use percent_encoding::percent_decode_str;

use crate::error::{ApiError, ApiResult};

/// Decoded query parameters in request order.
#[derive(Debug, Default, Clone)]
pub struct Query {
    pairs: Vec<(String, String)>,
}

fn decode(s: &str) -> String {
    let s = s.replace('+', " ");
    percent_decode_str(&s).decode_utf8_lossy().into_owned()
}

impl Query {
    pub fn parse(raw: &str) -> Self {
        let pairs = raw
            .split('&')
            .filter(|seg| !seg.is_empty())
            .map(|seg| match seg.split_once('=') {
                Some((k, v)) => (decode(k), decode(v)),
                None => (decode(seg), String::new()),
            })
            .collect();
        Query { pairs }
    }

    /// The last value of `name`.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// A non-empty value of `name`.
    pub fn non_empty(&self, name: &str) -> Option<&str> {
        self.get(name).filter(|v| !v.is_empty())
    }

    /// A boolean parameter; absent is `false`, a bare `?watch` is `true`.
    pub fn flag(&self, name: &str) -> ApiResult<bool> {
        match self.get(name) {
            None => Ok(false),
            Some(v) => parse_bool(v).ok_or_else(|| ApiError::bad_request(format!("invalid boolean for {name}: {v:?}"))),
        }
    }

    /// An unsigned integer parameter.
    pub fn uint(&self, name: &str) -> ApiResult<Option<u64>> {
        match self.non_empty(name) {
            None => Ok(None),
            Some(v) => v
                .parse::<i64>()
                .map(|n| Some(n.max(0) as u64))
                .map_err(|_| ApiError::bad_request(format!("invalid value for {name}: {v:?}"))),
        }
    }
}

pub fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "1" | "" | "t" | "yes" => Some(true),
        "false" | "0" | "f" | "no" => Some(false),
        _ => None,
    }
}

/// Split and percent-decode a URL path into its segments.
pub fn segments(path: &str) -> Vec<String> {
    path.split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lenient() {
        let q = Query::parse("&&limit=500&watch=1&labelSelector=app%3Dx%2Ctier%21%3Dy&force");
        assert_eq!(q.uint("limit").unwrap(), Some(500));
        assert!(q.flag("watch").unwrap());
        assert!(q.flag("force").unwrap());
        assert!(!q.flag("missing").unwrap());
        assert_eq!(q.get("labelSelector"), Some("app=x,tier!=y"));
        assert!(Query::parse("watch=0").flag("watch").map(|b| !b).unwrap());
        assert!(Query::parse("limit=abc").uint("limit").is_err());
    }

    #[test]
    fn path_segments() {
        assert_eq!(
            segments("/api/v1/namespaces/a%20b/"),
            vec!["api", "v1", "namespaces", "a b"]
        );
    }
}
