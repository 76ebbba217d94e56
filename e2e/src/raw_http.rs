//! A deliberately small HTTP/1.1 client over `std::net::TcpStream`, for requests that well-behaved
//! clients never send: malformed bodies, oversized bodies, unknown paths. Real clients would refuse to
//! build them or would hide the raw status and headers.

use std::{
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    time::Duration,
};

/// How long a raw request may take end to end.
const IO_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct RawResponse {
    pub status: u16,
    /// Header names lower-cased, in order.
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl RawResponse {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers.iter().find(|(k, _)| *k == name).map(|(_, v)| v.as_str())
    }

    /// The body parsed as JSON; panics with the body text if it is not JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "response body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }
}

/// Sends one request to `base_url` (`http://host:port`) and reads the whole response.
///
/// The body is written from a separate thread while the response is read, so a server that answers
/// early (413 before reading a huge body) and closes the connection is observed, not deadlocked on.
pub async fn request(
    base_url: &str,
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> RawResponse {
    let authority = base_url.trim_start_matches("http://").trim_end_matches('/').to_owned();
    let head = request_head(&authority, method, path_and_query, content_type, body.len());
    tokio::task::spawn_blocking(move || exchange(&authority, head, body))
        .await
        .expect("the raw HTTP exchange does not panic")
}

fn request_head(authority: &str, method: &str, path: &str, content_type: Option<&str>, len: usize) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n");
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str(&format!("Content-Length: {len}\r\nConnection: close\r\n\r\n"));
    head
}

fn exchange(authority: &str, head: String, body: Vec<u8>) -> RawResponse {
    let stream = TcpStream::connect(authority).unwrap_or_else(|e| panic!("cannot connect to {authority}: {e}"));
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
    stream.set_write_timeout(Some(IO_TIMEOUT)).expect("write timeout");
    let mut writer = stream.try_clone().expect("the socket can be cloned");
    let write = std::thread::spawn(move || {
        // Errors are expected when the server rejects the body early and closes the connection.
        let _ = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&body));
    });
    let raw = read_all(stream);
    let _ = write.join();
    parse_response(&raw).unwrap_or_else(|| panic!("malformed HTTP response: {:?}", String::from_utf8_lossy(&raw)))
}

/// Reads until EOF. A reset after data has arrived still yields that data (the server may reset a
/// connection whose request body it did not read).
fn read_all(mut stream: TcpStream) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return raw,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if !raw.is_empty() && e.kind() == ErrorKind::ConnectionReset => return raw,
            Err(e) => panic!("reading the HTTP response failed after {} bytes: {e}", raw.len()),
        }
    }
}

fn parse_response(raw: &[u8]) -> Option<RawResponse> {
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..split]).ok()?;
    let mut lines = head.split("\r\n");
    let status = lines.next()?.split(' ').nth(1)?.parse().ok()?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let rest = &raw[split + 4..];
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { dechunk(rest)? } else { rest.to_vec() };
    Some(RawResponse { status, headers, body })
}

fn dechunk(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&rest[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Some(body);
        }
        body.extend_from_slice(rest.get(..size)?);
        rest = rest.get(size + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_chunked_responses() {
        let plain = parse_response(b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n\r\n{}").unwrap();
        assert_eq!(plain.status, 404);
        assert_eq!(plain.header("content-type"), Some("application/json"));
        assert_eq!(plain.body, b"{}");
        let chunked =
            parse_response(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
                .unwrap();
        assert_eq!(chunked.body, b"abcde");
    }
}
