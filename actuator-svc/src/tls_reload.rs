//! The gRPC server's TLS material, re-read while running: a mounted Kubernetes Secret is
//! updated in place (the kubelet swaps a `..data` symlink), and cert-manager renews
//! certificates long before a pod restarts.
//!
//! The files are polled (their content, through the symlinks) rather than watched with
//! inotify: no extra dependency, and a symlink swap is seen the same way as a rewrite. A change
//! builds a whole new rustls `ServerConfig` (certificate, key and client CA checked together);
//! only if that succeeds does it replace the one new handshakes use. Established connections
//! keep the session they negotiated, so no stream is dropped. A half-written or mismatched set
//! is logged once and the previous configuration stays in force.
//!
//! Connections come from a [`Listener`]: TCP, or streams handed in by another transport (the
//! deterministic simulation's network), each with the addresses tonic reports for it
//! ([`Accepted`]), so client certificates reach the RPCs the same way from either.

use cutover_runtime::dial::{BoxStream, Listener};
use parking_lot::{Mutex, RwLock};
use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Context;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};
use tokio_rustls::server::TlsStream;
use tonic::transport::server::{Connected, TcpConnectInfo};

/// How often the files are compared with what was last read. A Secret update reaches the pod
/// after the kubelet's sync period (about a minute), so a few seconds more do not matter.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// A client that does not finish its handshake in this long is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the server's TLS material lives.
#[derive(Debug, Clone)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a CA, client certificates signed by it are required.
    pub client_ca: Option<PathBuf>,
}

/// Why a set of files cannot be used. Never carries file content (keys must not reach logs).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag} {path}: {reason}")]
    Parse {
        flag: &'static str,
        path: String,
        reason: String,
    },
    #[error("TLS settings: {0}")]
    Config(String),
}

impl ServerTlsFiles {
    fn paths(&self) -> Vec<(&'static str, &Path)> {
        let mut out = vec![
            ("--tls-cert", self.cert.as_path()),
            ("--tls-key", &self.key),
        ];
        if let Some(ca) = &self.client_ca {
            out.push(("--tls-client-ca", ca));
        }
        out
    }

    /// Reads every file (following symlinks, as a mounted Secret needs).
    fn read(&self) -> Result<Vec<Vec<u8>>, TlsError> {
        self.paths()
            .into_iter()
            .map(|(flag, path)| {
                std::fs::read(path).map_err(|source| TlsError::Read {
                    flag,
                    path: path.display().to_string(),
                    source,
                })
            })
            .collect()
    }

    /// Builds the server configuration from file contents (in [`Self::paths`] order).
    fn build(&self, contents: &[Vec<u8>]) -> Result<Arc<ServerConfig>, TlsError> {
        let parse_err = |flag: &'static str, path: &Path, reason: String| TlsError::Parse {
            flag,
            path: path.display().to_string(),
            reason,
        };
        let certs = pem_certs(&contents[0]).map_err(|r| parse_err("--tls-cert", &self.cert, r))?;
        let key = PrivateKeyDer::from_pem_slice(&contents[1]).map_err(|e| {
            parse_err(
                "--tls-key",
                &self.key,
                format!("no usable private key ({e})"),
            )
        })?;
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match (&self.client_ca, contents.get(2)) {
            (Some(path), Some(pem)) => {
                let mut roots = RootCertStore::empty();
                for c in pem_certs(pem).map_err(|r| parse_err("--tls-client-ca", path, r))? {
                    roots
                        .add(c)
                        .map_err(|e| parse_err("--tls-client-ca", path, e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| parse_err("--tls-client-ca", path, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        // Also checks that the key belongs to the certificate.
        let mut cfg = builder
            .with_single_cert(certs, key)
            .map_err(|e| parse_err("--tls-key", &self.key, e.to_string()))?;
        // gRPC is HTTP/2 only; clients such as grpcio insist on ALPN.
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Arc::new(cfg))
    }
}

/// Every certificate of a PEM bundle; at least one, and no broken block (a half-written file
/// ends inside one).
fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM ({e})"))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(certs)
}

/// What one poll found.
#[derive(Debug)]
pub enum Poll {
    Unchanged,
    Reloaded,
    /// The files changed but cannot be used; the previous configuration stays.
    Rejected(TlsError),
}

/// The current server configuration and the files it came from.
#[derive(Debug)]
pub struct TlsReloader {
    files: ServerTlsFiles,
    current: RwLock<Arc<ServerConfig>>,
    /// The contents last looked at (used or rejected), so a bad set is reported once.
    seen: Mutex<Vec<Vec<u8>>>,
}

impl TlsReloader {
    /// Reads and checks the files now: bad material stops start-up.
    pub fn load(files: ServerTlsFiles) -> Result<Self, TlsError> {
        let contents = files.read()?;
        let cfg = files.build(&contents)?;
        Ok(Self {
            files,
            current: RwLock::new(cfg),
            seen: Mutex::new(contents),
        })
    }

    /// The configuration new handshakes use.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current.read().clone()
    }

    /// Re-reads the files and switches to them if they changed and are usable.
    pub fn poll(&self) -> Poll {
        let contents = match self.files.read() {
            Ok(c) => c,
            // A file briefly missing (being replaced) is like a half-written one.
            Err(e) => return Poll::Rejected(e),
        };
        let mut seen = self.seen.lock();
        if *seen == contents {
            return Poll::Unchanged;
        }
        let result = self.files.build(&contents);
        *seen = contents;
        match result {
            Ok(cfg) => {
                *self.current.write() = cfg;
                Poll::Reloaded
            }
            Err(e) => Poll::Rejected(e),
        }
    }

    /// Polls every `every` until shutdown, logging what changed.
    pub async fn watch(self: Arc<Self>, every: Duration, mut shutdown: watch::Receiver<bool>) {
        // A missing file is reported once per disappearance, not every poll.
        let mut missing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            match self.poll() {
                Poll::Unchanged => missing = false,
                Poll::Reloaded => {
                    missing = false;
                    tracing::info!(cert = %self.files.cert.display(), "TLS certificate, key or client CA changed; new connections use them");
                }
                Poll::Rejected(e @ TlsError::Read { .. }) => {
                    if !missing {
                        tracing::warn!(error = %e, "TLS files unreadable; keeping the previous ones");
                    }
                    missing = true;
                }
                Poll::Rejected(e) => {
                    missing = false;
                    tracing::warn!(error = %e, "changed TLS files are not usable; keeping the previous ones");
                }
            }
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn files(dir: &Path) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: Some(dir.join("ca.crt")),
        }
    }

    fn write(dir: &Path, cert: &str, key: &str, ca: &str) {
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca).unwrap();
    }

    #[test]
    fn bad_new_material_is_refused_and_the_previous_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (self_signed("a"), self_signed("b"));
        write(dir.path(), &a.0, &a.1, &a.0);
        let r = TlsReloader::load(files(dir.path())).unwrap();
        let first = r.config();
        assert!(matches!(r.poll(), Poll::Unchanged));

        // The new certificate with the old key (the key file not yet replaced).
        write(dir.path(), &b.0, &a.1, &a.0);
        let Poll::Rejected(e) = r.poll() else {
            panic!("a mismatched key was accepted")
        };
        assert!(e.to_string().starts_with("--tls-key"), "{e}");
        assert!(Arc::ptr_eq(&first, &r.config()));
        // Reported once: the same bad set is not looked at again.
        assert!(matches!(r.poll(), Poll::Unchanged));

        // A half-written certificate, an empty CA bundle, a missing key file.
        write(dir.path(), &b.0[..b.0.len() / 2], &b.1, &a.0);
        assert!(matches!(r.poll(), Poll::Rejected(TlsError::Parse { .. })));
        write(dir.path(), &b.0, &b.1, "");
        assert!(matches!(r.poll(), Poll::Rejected(TlsError::Parse { .. })));
        std::fs::remove_file(dir.path().join("tls.key")).unwrap();
        assert!(matches!(r.poll(), Poll::Rejected(TlsError::Read { .. })));
        assert!(Arc::ptr_eq(&first, &r.config()));

        // The complete new set is taken.
        write(dir.path(), &b.0, &b.1, &b.0);
        assert!(matches!(r.poll(), Poll::Reloaded));
        assert!(!Arc::ptr_eq(&first, &r.config()));
        assert_eq!(r.config().alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn errors_never_carry_key_material() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (self_signed("a"), self_signed("b"));
        write(dir.path(), &a.0, &b.1, &a.0);
        let e = TlsReloader::load(files(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            !e.contains("PRIVATE KEY") && !e.contains(&b.1[40..80]),
            "{e}"
        );
    }
}
