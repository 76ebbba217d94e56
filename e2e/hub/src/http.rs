//! HTTP plumbing shared by the handlers: response bodies, bounded body reading and gzip decoding, the bearer
//! token and HMAC checks, and the per-connection control the reset faults need.

use std::future::Future as _;
use std::io::Read;
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hmac::{Hmac, Mac};
use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_LENGTH, CONTENT_TYPE};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};

use crate::wire::WireError;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
pub type Body = BoxBody<Bytes, BoxError>;

/// Largest request body accepted as sent (compressed).
pub const MAX_BODY: usize = 8 * 1024 * 1024;
/// Largest request body accepted once decompressed.
pub const MAX_DECOMPRESSED: usize = 32 * 1024 * 1024;
/// Longest a client may take to send a body.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Returned by a handler to close the connection instead of answering (the reset and drop faults).
#[derive(Debug, thiserror::Error)]
#[error("connection closed by a fault")]
pub struct Abort;

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).map_err(|never| match never {}).boxed()
}

pub fn response(code: u16, content_type: &'static str, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(full(body));
    *r.status_mut() = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    r
}

pub fn json_response(code: u16, body: &Value) -> Response<Body> {
    response(code, "application/json", body.to_string())
}

/// `{"error": code, "message": ...}`.
pub fn error_body(error: &str, message: &str) -> Value {
    json!({"error": error, "message": message})
}

/// The short error code of a whole-request status.
pub fn error_code(status: u16) -> &'static str {
    match status {
        400 => "bad_request",
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not_found",
        405 => "method_not_allowed",
        409 => "conflict",
        413 => "too_large",
        415 => "unsupported_media_type",
        422 => "invalid",
        429 => "too_many_requests",
        503 => "unavailable",
        _ => "error",
    }
}

pub fn wire_error_response(e: &WireError) -> Response<Body> {
    json_response(e.status, &error_body(error_code(e.status), &e.message))
}

/// A body this much larger than the limit is read and dropped before the 413, so the client, still sending,
/// gets to read the answer; past it the connection is simply closed.
const DRAIN_MAX: usize = 64 * 1024 * 1024;

/// Reads a request body, refusing more than `limit` bytes (413) or a client slower than [`BODY_TIMEOUT`].
pub async fn read_body(body: Incoming, headers: &HeaderMap, limit: usize) -> Result<Vec<u8>, WireError> {
    let declared = headers
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let too_large = || WireError::too_large(format!("the body is larger than {limit} bytes"));
    if declared.is_some_and(|n| n > DRAIN_MAX as u64) {
        return Err(too_large());
    }
    match tokio::time::timeout(BODY_TIMEOUT, collect_bounded(body, limit)).await {
        Ok(Ok(Some(bytes))) => Ok(bytes),
        Ok(Ok(None)) => Err(too_large()),
        Ok(Err(e)) => Err(WireError::bad_request(format!("reading the body failed: {e}"))),
        Err(_) => Err(WireError::bad_request("the body did not arrive in time")),
    }
}

/// The body, or `None` when it is larger than `limit` (read on, and dropped, up to [`DRAIN_MAX`]).
async fn collect_bounded(mut body: Incoming, limit: usize) -> Result<Option<Vec<u8>>, hyper::Error> {
    let mut out = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        seen += data.len();
        if seen <= limit {
            out.extend_from_slice(&data);
        } else if seen > DRAIN_MAX {
            break;
        }
    }
    Ok((seen <= limit).then_some(out))
}

/// Decodes the body by its `Content-Encoding` (gzip, or none), at most [`MAX_DECOMPRESSED`] bytes.
pub fn decode_body(raw: &[u8], headers: &HeaderMap) -> Result<Vec<u8>, WireError> {
    let encoding = header(headers, "content-encoding")
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match encoding.as_str() {
        "" | "identity" => Ok(raw.to_vec()),
        "gzip" => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(raw)
                .take(MAX_DECOMPRESSED as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| WireError::bad_request(format!("the body is not valid gzip: {e}")))?;
            if out.len() > MAX_DECOMPRESSED {
                return Err(WireError::too_large(format!(
                    "the body is larger than {MAX_DECOMPRESSED} bytes once decompressed"
                )));
            }
            Ok(out)
        }
        other => Err(WireError::bad_request(format!(
            "Content-Encoding {other:?} is not supported (gzip or none)"
        ))),
    }
}

/// The first value of header `name` as text.
pub fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// The request headers as a JSON object, name → list of values, verbatim (for the request log).
pub fn headers_json(headers: &HeaderMap) -> String {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match map.entry(name.as_str()).or_insert_with(|| json!([])) {
            Value::Array(values) => values.push(Value::String(text)),
            _ => unreachable!("every entry is an array"),
        }
    }
    Value::Object(map).to_string()
}

/// The bearer token of `Authorization: Bearer <token>`.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = header(headers, "authorization")?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// A token's fingerprint for the request log and the auth checks: `sha256:` and 16 hex digits ("" for none).
pub fn fingerprint(token: Option<&str>) -> String {
    token.map_or_else(String::new, |t| {
        format!("sha256:{}", &hex::encode(Sha256::digest(t.as_bytes()))[..16])
    })
}

/// Checks `X-Capstan-Signature: sha256=<hex>` against the HMAC-SHA256 of the body bytes as sent.
pub fn signature_ok(key: &[u8], body_as_sent: &[u8], header_value: Option<&str>) -> bool {
    let Some(hex_sig) = header_value.and_then(|v| v.trim().strip_prefix("sha256=")) else {
        return false;
    };
    let Ok(sig) = hex::decode(hex_sig) else {
        return false;
    };
    let Ok(mut mac) = Hmac::<Sha256>::new_from_slice(key) else {
        return false;
    };
    mac.update(body_as_sent);
    mac.verify_slice(&sig).is_ok()
}

/// Control over one accepted connection's socket, for the reset faults and the long poll.
pub struct ConnCtl {
    /// A duplicate of the socket's descriptor; it closes with the connection's task.
    fd: Option<OwnedFd>,
}

impl ConnCtl {
    pub fn new(stream: &tokio::net::TcpStream) -> Self {
        Self {
            fd: stream.as_fd().try_clone_to_owned().ok(),
        }
    }

    /// Makes the close of this connection a TCP reset (SO_LINGER 0) instead of an orderly FIN.
    pub fn reset_on_close(&self) {
        if let Some(fd) = &self.fd {
            let _ = socket2::SockRef::from(fd).set_linger(Some(Duration::ZERO));
        }
    }

    /// True when the client closed its side (a long poll whose client went away claims no task). Only an
    /// orderly close is seen; TLS close alerts arrive as data and are not.
    pub fn peer_gone(&self) -> bool {
        let Some(fd) = &self.fd else { return false };
        let mut buf = [MaybeUninit::<u8>::uninit(); 1];
        match socket2::SockRef::from(fd).peek(&mut buf) {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
        }
    }
}

/// A body that sends its first half, waits a moment (so the bytes leave), then fails: hyper aborts the
/// connection mid-answer.
struct HalfBody {
    first: Option<Bytes>,
    pause: Pin<Box<tokio::time::Sleep>>,
}

impl hyper::body::Body for HalfBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if let Some(first) = self.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        match self.pause.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err("fault: reset while writing the answer".into()))),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `answer` cut in the middle: its head and `Content-Length`, half of its body, then a reset.
pub fn half_answer(answer: Response<Body>, body: Bytes) -> Response<Body> {
    let (mut parts, _) = answer.into_parts();
    parts.headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
    let half = body.slice(..body.len() / 2);
    let cut = HalfBody {
        first: Some(half),
        pause: Box::pin(tokio::time::sleep(Duration::from_millis(200))),
    };
    Response::from_parts(parts, cut.boxed())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_are_checked_over_the_bytes_as_sent() {
        let mut mac = Hmac::<Sha256>::new_from_slice(b"k").unwrap();
        mac.update(b"body");
        let good = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
        assert!(signature_ok(b"k", b"body", Some(&good)));
        assert!(!signature_ok(b"k", b"body2", Some(&good)));
        assert!(!signature_ok(b"other", b"body", Some(&good)));
        assert!(!signature_ok(b"k", b"body", None));
        assert!(!signature_ok(b"k", b"body", Some("sha256=zz")));
    }

    #[test]
    fn gzip_is_decoded_within_bounds() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"{\"a\":1}").unwrap();
        let gz = enc.finish().unwrap();
        let mut headers = HeaderMap::new();
        headers.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert_eq!(decode_body(&gz, &headers).unwrap(), b"{\"a\":1}");
        assert_eq!(decode_body(b"not gzip", &headers).unwrap_err().status, 400);
        headers.insert("content-encoding", HeaderValue::from_static("br"));
        assert_eq!(decode_body(&gz, &headers).unwrap_err().status, 400);
        let mut bomb = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        bomb.write_all(&vec![b'a'; MAX_DECOMPRESSED + 10]).unwrap();
        let bomb = bomb.finish().unwrap();
        headers.insert("content-encoding", HeaderValue::from_static("gzip"));
        assert_eq!(decode_body(&bomb, &headers).unwrap_err().status, 413);
    }

    #[test]
    fn bearer_tokens_and_fingerprints() {
        let mut headers = HeaderMap::new();
        headers.insert("authorization", HeaderValue::from_static("Bearer abc"));
        assert_eq!(bearer(&headers), Some("abc"));
        assert_eq!(fingerprint(Some("abc")).len(), "sha256:".len() + 16);
        assert_eq!(fingerprint(None), "");
        headers.insert("authorization", HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
    }
}
