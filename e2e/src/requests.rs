//! Questions about devcluster's request log: which requests a client sent, with which parameters and
//! media types. Lets tests assert *how* kubectl and kube-rs talk, not only what ends up stored.

use devcluster::RequestRecord;

/// The decoded value of query parameter `key` (its first occurrence), if present.
///
/// Tolerates kube-rs's `?&a=b` form (empty segments) and decodes `%XX` and `+` as Go's
/// `url.Values.Encode` produces them (kubectl sends `env+in+%28a%2Cb%29`).
pub fn query_param(record: &RequestRecord, key: &str) -> Option<String> {
    record
        .query
        .trim_start_matches('?')
        .split('&')
        .filter(|segment| !segment.is_empty())
        .find_map(|segment| {
            let (k, v) = segment.split_once('=').unwrap_or((segment, ""));
            (decode(k) == key).then(|| decode(v))
        })
}

/// Whether the request is a watch (`watch=true` or `watch=1`).
pub fn is_watch(record: &RequestRecord) -> bool {
    matches!(query_param(record, "watch").as_deref(), Some("true" | "1"))
}

/// The requests with `method` whose path is exactly `path`.
pub fn matching<'a>(records: &'a [RequestRecord], method: &str, path: &str) -> Vec<&'a RequestRecord> {
    records
        .iter()
        .filter(|r| r.method == method && r.path == path)
        .collect()
}

/// The log as one line per request (status, method, path and query, Accept, Content-Type, User-Agent), for
/// assertion messages.
pub fn format_log(records: &[RequestRecord]) -> String {
    records
        .iter()
        .map(|r| {
            format!(
                "{} {} {}?{}  A: {}  CT: {}  UA: {}",
                r.status, r.method, r.path, r.query, r.accept, r.content_type, r.user_agent
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Percent-decoding for query strings, with `+` as a space.
fn decode(raw: &str) -> String {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok();
                match hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(byte) => {
                        out.push(byte);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            other => out.push(other),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(query: &str) -> RequestRecord {
        RequestRecord {
            method: "GET".into(),
            path: "/api/v1/configmaps".into(),
            query: query.into(),
            accept: String::new(),
            content_type: String::new(),
            user_agent: String::new(),
            status: 200,
            ..RequestRecord::default()
        }
    }

    #[test]
    fn query_params_decode_go_and_kube_rs_encodings() {
        let kubectl = record("labelSelector=env+in+%28a%2Cb%29&limit=500");
        assert_eq!(query_param(&kubectl, "labelSelector").as_deref(), Some("env in (a,b)"));
        let kube_rs = record("&watch=true&timeoutSeconds=290");
        assert!(is_watch(&kube_rs));
        assert_eq!(query_param(&kube_rs, "timeoutSeconds").as_deref(), Some("290"));
        assert_eq!(query_param(&kube_rs, "limit"), None);
        assert_eq!(query_param(&record("a=%zz"), "a").as_deref(), Some("%zz"));
    }
}
