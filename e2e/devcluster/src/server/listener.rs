//! Accepting connections: plain TCP (`--insecure-http`) or TLS. TLS handshakes run in their own tasks with
//! a deadline, so a client that connects and says nothing cannot stall the accept loop. A client certificate
//! verified during the handshake travels with the connection ([`Peer`]) to every request on it.

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;
use tokio_rustls::TlsAcceptor;

use crate::auth::pki::client_cert_user;
use crate::auth::UserInfo;

/// Longest a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// One accepted connection.
pub enum Conn {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Conn {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Who is on the other end of a connection.
#[derive(Debug, Clone)]
pub struct Peer {
    pub addr: SocketAddr,
    /// The user of a client certificate the CA signed, if one was presented.
    pub cert_user: Option<Arc<UserInfo>>,
}

/// The listener axum serves from: connections arrive ready (handshake done) over a channel.
pub struct Incoming {
    rx: mpsc::Receiver<(Conn, Peer)>,
    local: SocketAddr,
}

impl Listener for Incoming {
    type Io = Conn;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.rx.recv().await {
            Some(c) => c,
            // The accept loop only ends once this listener is gone; never yield a fake connection.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.local,
            cert_user: None,
        })
    }
}

impl Connected<IncomingStream<'_, Incoming>> for Peer {
    fn connect_info(stream: IncomingStream<'_, Incoming>) -> Self {
        stream.remote_addr().clone()
    }
}

/// Start accepting on `listener`, with TLS when `tls` is set.
pub fn incoming(listener: TcpListener, tls: Option<Arc<rustls::ServerConfig>>) -> io::Result<Incoming> {
    let local = listener.local_addr()?;
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(accept_loop(listener, tls.map(TlsAcceptor::from), tx));
    Ok(Incoming { rx, local })
}

async fn accept_loop(listener: TcpListener, tls: Option<TlsAcceptor>, tx: mpsc::Sender<(Conn, Peer)>) {
    loop {
        let (tcp, addr) = tokio::select! {
            _ = tx.closed() => return,
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(e) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // Small writes (watch events) must not wait for Nagle.
        let _ = tcp.set_nodelay(true);
        let tx = tx.clone();
        match &tls {
            None => {
                let _ = tx.send((Conn::Plain(tcp), Peer { addr, cert_user: None })).await;
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => {
                            let cert_user = stream
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .and_then(|der| client_cert_user(der))
                                .map(Arc::new);
                            let _ = tx.send((Conn::Tls(Box::new(stream)), Peer { addr, cert_user })).await;
                        }
                        Ok(Err(e)) => tracing::debug!(%addr, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(%addr, "TLS handshake timed out"),
                    }
                });
            }
        }
    }
}
