//! The gRPC server's connections: each accepted from a [`Listener`] (TCP, or streams handed in
//! by another transport, the deterministic simulation's network), with the addresses tonic
//! reports for it ([`Accepted`]), so client certificates reach the RPCs the same way from
//! either; under TLS, each handshake takes the configuration current when the connection
//! arrives (`cutover_runtime::tls_reload`'s server shape, re-read while running). Here and not
//! in the runtime crate because it speaks tonic's types (`Connected`, `TcpConnectInfo`).

use cutover_runtime::dial::{BoxStream, Listener};
use cutover_runtime::tls_reload::TlsReloader;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// A client that does not finish its handshake in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// An accepted connection: a TCP stream, or a stream handed in with the addresses it was made
/// for. tonic sees both as TCP (`TcpConnectInfo`, and under TLS `TlsConnectInfo` of it, where
/// `Request::peer_certs` finds the client certificate).
#[derive(Debug)]
pub enum Accepted {
    Tcp(TcpStream),
    Handed {
        stream: BoxStream,
        local: SocketAddr,
        peer: SocketAddr,
    },
}

impl Connected for Accepted {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        match self {
            Accepted::Tcp(s) => s.connect_info(),
            Accepted::Handed { local, peer, .. } => TcpConnectInfo {
                local_addr: Some(*local),
                remote_addr: Some(*peer),
            },
        }
    }
}

impl AsyncRead for Accepted {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Accepted::Handed { stream, .. } => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Accepted {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Accepted::Handed { stream, .. } => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_flush(cx),
            Accepted::Handed { stream, .. } => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> std::task::Poll<io::Result<()>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Accepted::Handed { stream, .. } => Pin::new(stream).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> std::task::Poll<io::Result<usize>> {
        match self.get_mut() {
            Accepted::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Accepted::Handed { stream, .. } => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Accepted::Tcp(s) => s.is_write_vectored(),
            Accepted::Handed { stream, .. } => stream.is_write_vectored(),
        }
    }
}

/// The next connection of `listener` and its peer's address. TCP connections get
/// `TCP_NODELAY`: Nagle would hold small answers back for a delayed ACK (~40 ms per unary
/// call). A handed listener whose sender is gone answers `ConnectionAborted` from then on.
pub async fn accept(listener: &mut Listener) -> io::Result<(Accepted, SocketAddr)> {
    match listener {
        Listener::Tcp(l) => {
            let (tcp, peer) = l.accept().await?;
            let _ = tcp.set_nodelay(true);
            Ok((Accepted::Tcp(tcp), peer))
        }
        handed => {
            let local = handed.local_addr()?;
            let (stream, peer) = handed.accept().await?;
            Ok((
                Accepted::Handed {
                    stream,
                    local,
                    peer,
                },
                peer,
            ))
        }
    }
}

/// Accepts connections and completes TLS handshakes with whatever configuration is
/// current when each connection arrives; handshakes run concurrently so a slow client holds
/// up nobody. Ends when the receiver is dropped. A handed listener that closes accepts
/// nothing more; the receiver then waits (for the server's shutdown).
pub fn incoming(
    mut listener: Listener,
    tls: Arc<TlsReloader>,
) -> mpsc::Receiver<io::Result<TlsStream<Accepted>>> {
    let (tx, rx) = mpsc::channel(64);
    tokio::spawn(async move {
        loop {
            let (conn, peer) = tokio::select! {
                r = accept(&mut listener) => match r {
                    Ok(c) => c,
                    Err(e) if matches!(listener, Listener::Handed { .. }) => {
                        tracing::debug!(error = %e, "gRPC listener closed");
                        tx.closed().await;
                        return;
                    }
                    Err(e) => {
                        // Out of file descriptors and the like: back off briefly.
                        tracing::warn!(error = %e, "accepting a gRPC connection failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
                _ = tx.closed() => return,
            };
            let acceptor = TlsAcceptor::from(tls.config());
            let tx = tx.clone();
            tokio::spawn(handshake(acceptor, conn, peer, tx));
        }
    });
    rx
}

async fn handshake(
    acceptor: TlsAcceptor,
    conn: Accepted,
    peer: SocketAddr,
    tx: mpsc::Sender<io::Result<TlsStream<Accepted>>>,
) {
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(conn)).await {
        Ok(Ok(stream)) => {
            let _ = tx.send(Ok(stream)).await;
        }
        // A refused client is its own problem; it must not stop the server.
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}
