//! Byte streams in and out, independent of where they come from: TCP in production, or any
//! other transport a caller hands in (the deterministic simulation runs the services over a
//! simulated network this way). Only the transport is swapped: every byte above it (HTTP/1.1,
//! HTTP/2, gRPC, TLS where the service does TLS) runs the production code.
//!
//! ```text
//! outbound: Dialer ── tower::Service<Uri> ──▶ Conn (hyper's Read/Write; hyper-util Connection)
//! inbound:  Listener::accept ──▶ (Box<dyn Stream>, peer address)
//! ```

use futures::future::BoxFuture;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::mpsc;

/// A connected byte stream.
pub trait Stream: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Stream for T {}

/// A boxed byte stream (a TCP stream, a TLS stream, a simulated one).
pub struct BoxStream(Box<dyn Stream>);

impl BoxStream {
    pub fn new(s: impl Stream) -> Self {
        Self(Box::new(s))
    }
}

impl fmt::Debug for BoxStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("BoxStream")
    }
}

impl AsyncRead for BoxStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for BoxStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.0.is_write_vectored()
    }
}

/// An outbound connection as hyper (and so tonic and hyper-rustls) wants it.
pub type Conn = TokioIo<BoxStream>;

impl Connection for BoxStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

type DialFn = dyn Fn(String, u16) -> BoxFuture<'static, io::Result<BoxStream>> + Send + Sync;

/// Opens a byte stream to `host:port`. A `tower::Service<http::Uri>`, so it plugs in wherever
/// hyper-util, hyper-rustls or tonic take a connector.
#[derive(Clone)]
pub struct Dialer(Arc<DialFn>);

impl fmt::Debug for Dialer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Dialer")
    }
}

impl Dialer {
    /// A dialer from a function of host and port.
    pub fn new<F, Fut>(dial: F) -> Self
    where
        F: Fn(String, u16) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = io::Result<BoxStream>> + Send + 'static,
    {
        Self(Arc::new(move |host, port| Box::pin(dial(host, port))))
    }

    /// Plain TCP (no delay), as the services dial in production.
    pub fn tcp() -> Self {
        Self::new(|host, port| async move {
            let s = tokio::net::TcpStream::connect((host.as_str(), port)).await?;
            s.set_nodelay(true)?;
            Ok(BoxStream::new(s))
        })
    }

    /// Opens a stream to `host:port`.
    pub fn dial(&self, host: &str, port: u16) -> BoxFuture<'static, io::Result<BoxStream>> {
        (self.0)(host.to_owned(), port)
    }
}

/// The host and port a URI names (the scheme's default port when it names none).
pub fn host_port(uri: &http::Uri) -> io::Result<(String, u16)> {
    let host = uri
        .host()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, format!("{uri}: no host")))?;
    // IPv6 literals arrive bracketed; connecting wants them bare.
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    Ok((host, port))
}

impl tower::Service<http::Uri> for Dialer {
    type Response = Conn;
    type Error = io::Error;
    type Future = BoxFuture<'static, io::Result<Conn>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let dial = self.0.clone();
        Box::pin(async move {
            let (host, port) = host_port(&uri)?;
            Ok(TokioIo::new(dial(host, port).await?))
        })
    }
}

/// Accepted byte streams: a TCP listener, or streams handed in by another transport.
#[derive(Debug)]
pub enum Listener {
    Tcp(tokio::net::TcpListener),
    /// Streams pushed by whoever accepts them (`local` is the address they were made for).
    Handed {
        local: SocketAddr,
        streams: mpsc::Receiver<(BoxStream, SocketAddr)>,
    },
}

impl From<tokio::net::TcpListener> for Listener {
    fn from(l: tokio::net::TcpListener) -> Self {
        Self::Tcp(l)
    }
}

impl Listener {
    /// A listener fed by the sender it returns (`local` is what [`Listener::local_addr`] says).
    pub fn handed(local: SocketAddr) -> (mpsc::Sender<(BoxStream, SocketAddr)>, Self) {
        let (tx, streams) = mpsc::channel(64);
        (tx, Self::Handed { local, streams })
    }

    /// The next connection and its peer's address. A handed listener whose sender is gone
    /// answers `ConnectionAborted` from then on.
    pub async fn accept(&mut self) -> io::Result<(BoxStream, SocketAddr)> {
        match self {
            Self::Tcp(l) => {
                let (s, peer) = l.accept().await?;
                // Small request/response messages: Nagle would only add latency.
                let _ = s.set_nodelay(true);
                Ok((BoxStream::new(s), peer))
            }
            Self::Handed { streams, .. } => streams
                .recv()
                .await
                .ok_or_else(|| io::Error::new(io::ErrorKind::ConnectionAborted, "listener closed")),
        }
    }

    /// The address connections arrive at.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Tcp(l) => l.local_addr(),
            Self::Handed { local, .. } => Ok(*local),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn a_handed_listener_yields_what_the_dialer_opened() {
        let local: SocketAddr = "10.0.0.1:80".parse().unwrap();
        let (tx, mut listener) = Listener::handed(local);
        let dialer = Dialer::new(move |host, port| {
            let tx = tx.clone();
            async move {
                assert_eq!((host.as_str(), port), ("svc", 8080));
                let (a, b) = tokio::io::duplex(64);
                tx.send((BoxStream::new(b), "10.0.0.2:5000".parse().unwrap()))
                    .await
                    .map_err(|_| io::Error::other("closed"))?;
                Ok(BoxStream::new(a))
            }
        });
        let mut out = dialer.dial("svc", 8080).await.unwrap();
        let (mut inbound, peer) = listener.accept().await.unwrap();
        assert_eq!(peer.to_string(), "10.0.0.2:5000");
        assert_eq!(listener.local_addr().unwrap(), local);
        out.write_all(b"ping").await.unwrap();
        let mut buf = [0u8; 4];
        inbound.read_exact(&mut buf).await.unwrap();
        assert_eq!(&buf, b"ping");
    }

    #[tokio::test]
    async fn a_closed_handed_listener_says_so() {
        let (tx, mut listener) = Listener::handed("127.0.0.1:1".parse().unwrap());
        drop(tx);
        let err = listener.accept().await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::ConnectionAborted);
    }

    #[test]
    fn host_and_port_come_from_the_uri_with_scheme_defaults() {
        let hp = |s: &str| host_port(&s.parse().unwrap()).unwrap();
        assert_eq!(hp("https://arm"), ("arm".to_owned(), 443));
        assert_eq!(hp("http://kube:6443/api"), ("kube".to_owned(), 6443));
        assert_eq!(hp("http://[::1]:9"), ("::1".to_owned(), 9));
        assert!(host_port(&"/relative".parse().unwrap()).is_err());
    }
}
