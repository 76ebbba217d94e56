//! A deliberately small HTTP/1.1 client over `std::net::TcpStream` (with rustls for `https://`), for
//! requests that well-behaved clients never send: malformed bodies, oversized bodies, unknown paths. Real
//! clients would refuse to build them or would hide the raw status and headers.

use std::{
    io::{ErrorKind, Read, Write},
    net::TcpStream,
    sync::Arc,
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

/// Where raw requests go: a base URL (`http://` or `https://host:port`), the CA to trust for HTTPS, and the
/// bearer token to send (none: the request is anonymous).
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub url: String,
    pub ca_pem: Option<String>,
    pub token: Option<String>,
}

impl Endpoint {
    /// The server, CA and token of a kubeconfig's first cluster and user (as `devcluster --kubeconfig-out`
    /// writes them).
    pub fn from_kubeconfig(path: &std::path::Path) -> Endpoint {
        use base64::Engine;
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let v: serde_json::Value = serde_saphyr::from_str(&text).expect("the kubeconfig is YAML");
        let s = |p: &str| v.pointer(p).and_then(serde_json::Value::as_str).map(str::to_owned);
        let ca = s("/clusters/0/cluster/certificate-authority-data").map(|b| {
            let der = base64::engine::general_purpose::STANDARD
                .decode(b)
                .expect("base64 CA data");
            String::from_utf8(der).expect("a PEM CA")
        });
        Endpoint {
            url: s("/clusters/0/cluster/server").expect("a server URL"),
            ca_pem: ca,
            token: s("/users/0/user/token"),
        }
    }

    /// The same server without credentials.
    pub fn anonymous(&self) -> Endpoint {
        Endpoint {
            token: None,
            ..self.clone()
        }
    }

    /// The same server with another bearer token.
    pub fn with_token(&self, token: &str) -> Endpoint {
        Endpoint {
            token: Some(token.to_owned()),
            ..self.clone()
        }
    }
}

/// Sends one request to `endpoint` and reads the whole response.
///
/// Over plain HTTP the body is written from a separate thread while the response is read, so a server
/// that answers early (413 before reading a huge body) and closes the connection is observed, not
/// deadlocked on. Over TLS (one stream, no split) the body is written first; the early-answer case then
/// shows up as the server's response or a reset after it.
pub async fn request(
    endpoint: &Endpoint,
    method: &str,
    path_and_query: &str,
    content_type: Option<&str>,
    body: Vec<u8>,
) -> RawResponse {
    let tls = endpoint.url.starts_with("https://");
    let authority = endpoint
        .url
        .trim_start_matches("https://")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let head = request_head(
        &authority,
        endpoint.token.as_deref(),
        method,
        path_and_query,
        content_type,
        body.len(),
    );
    let ca = endpoint.ca_pem.clone();
    tokio::task::spawn_blocking(move || {
        if tls {
            exchange_tls(&authority, ca.as_deref(), head, body)
        } else {
            exchange(&authority, head, body)
        }
    })
    .await
    .expect("the raw HTTP exchange does not panic")
}

fn request_head(
    authority: &str,
    token: Option<&str>,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    len: usize,
) -> String {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: application/json\r\n");
    if let Some(t) = token {
        head.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if let Some(ct) = content_type {
        head.push_str(&format!("Content-Type: {ct}\r\n"));
    }
    head.push_str(&format!("Content-Length: {len}\r\nConnection: close\r\n\r\n"));
    head
}

fn connect(authority: &str) -> TcpStream {
    let stream = TcpStream::connect(authority).unwrap_or_else(|e| panic!("cannot connect to {authority}: {e}"));
    stream.set_read_timeout(Some(IO_TIMEOUT)).expect("read timeout");
    stream.set_write_timeout(Some(IO_TIMEOUT)).expect("write timeout");
    stream
}

fn exchange(authority: &str, head: String, body: Vec<u8>) -> RawResponse {
    let stream = connect(authority);
    let mut writer = stream.try_clone().expect("the socket can be cloned");
    let write = std::thread::spawn(move || {
        // Errors are expected when the server rejects the body early and closes the connection.
        let _ = writer.write_all(head.as_bytes()).and_then(|()| writer.write_all(&body));
    });
    let raw = read_all(stream);
    let _ = write.join();
    parse(&raw)
}

fn parse(raw: &[u8]) -> RawResponse {
    parse_response(raw).unwrap_or_else(|| panic!("malformed HTTP response: {:?}", String::from_utf8_lossy(raw)))
}

/// A TLS client trusting only `ca_pem` (HTTP/1.1 by ALPN), as kubectl with a kubeconfig CA would be.
fn tls_config(ca_pem: &str) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::{pem::PemObject, CertificateDer};
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.expect("a PEM certificate"))
            .expect("the CA certificate is valid");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(cfg)
}

fn exchange_tls(authority: &str, ca_pem: Option<&str>, head: String, body: Vec<u8>) -> RawResponse {
    let ca = ca_pem.expect("an https endpoint needs the cluster CA");
    let host = authority.rsplit_once(':').map_or(authority, |(h, _)| h);
    let name =
        rustls::pki_types::ServerName::try_from(host.trim_matches(['[', ']']).to_owned()).expect("a server name");
    let conn = rustls::ClientConnection::new(tls_config(ca), name).expect("a TLS client");
    let mut tls = rustls::StreamOwned::new(conn, connect(authority));
    // Errors are expected when the server rejects the body early and closes the connection.
    let _ = tls.write_all(head.as_bytes()).and_then(|()| tls.write_all(&body));
    let _ = tls.flush();
    let raw = read_all(tls);
    parse(&raw)
}

/// Reads until EOF. A reset after data has arrived still yields that data (the server may reset a
/// connection whose request body it did not read); so does a TLS stream closed without close_notify.
fn read_all(mut stream: impl Read) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return raw,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) if !raw.is_empty() && matches!(e.kind(), ErrorKind::ConnectionReset | ErrorKind::UnexpectedEof) => {
                return raw
            }
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
