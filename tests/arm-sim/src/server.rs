//! The listener: binds (or takes a listener handed in), builds the shared state from the
//! options, and serves every connection with hyper 1 (HTTP/1.1 and HTTP/2, plain or TLS on the
//! same port) until shutdown.

use crate::{ArmSim, ArmSimOptions, Shared, State};
use cutover_runtime::dial::{BoxStream, Listener};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    /// The authority given to [`ArmSim::start_on`] is not `host[:port]`.
    #[error("authority {authority:?}: {reason}")]
    Authority { authority: String, reason: String },
    #[error(transparent)]
    Seed(#[from] crate::seed::SeedError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

pub(crate) async fn start(options: ArmSimOptions) -> Result<ArmSim, StartError> {
    // The seed is checked before binding.
    let store = build(&options)?;
    let listener = TcpListener::bind(options.listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: options.listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: options.listen,
        source,
    })?;
    serve(options, store, listener.into(), &addr.to_string())
}

fn build(options: &ArmSimOptions) -> Result<crate::store::Store, StartError> {
    let store = options.seed.build()?;
    if let Some(rbac) = &options.seed.rbac {
        rbac.validate().map_err(crate::seed::SeedError::Invalid)?;
    }
    Ok(store)
}

/// The host of `authority` (`host[:port]`, IPv6 in brackets), as a certificate names it.
fn host_of(authority: &str) -> Result<String, StartError> {
    let bad = |reason: String| StartError::Authority {
        authority: authority.to_owned(),
        reason,
    };
    let parsed: http::uri::Authority = authority.parse().map_err(|e| bad(format!("{e}")))?;
    if parsed.as_str().contains('@') {
        return Err(bad("user information is not an authority ARM has".into()));
    }
    // `http` parses the port lazily: `arm:x` has a host and no port.
    let after_host = &parsed.as_str()[parsed.host().len()..];
    if !after_host.is_empty() && parsed.port_u16().is_none() {
        return Err(bad(format!("{after_host:?} is not a port")));
    }
    let host = parsed.host().trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() {
        return Err(bad("no host".into()));
    }
    Ok(host.to_owned())
}

pub(crate) async fn start_on(
    options: ArmSimOptions,
    listener: Listener,
    authority: &str,
) -> Result<ArmSim, StartError> {
    host_of(authority)?;
    let store = build(&options)?;
    serve(options, store, listener, authority)
}

/// Serves the simulator on `listener`; its URLs name `authority`.
fn serve(
    options: ArmSimOptions,
    store: crate::store::Store,
    listener: Listener,
    authority: &str,
) -> Result<ArmSim, StartError> {
    let host = host_of(authority)?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: options.listen,
        source,
    })?;
    // Every connection may be plain or TLS (told apart by its first byte): azure_identity 1.x
    // accepts only an https authority host, so AAD is always reachable over TLS; `tls` chooses
    // which scheme `url()` reports.
    let mut names = vec![host];
    names.extend(options.tls_names.iter().cloned());
    let (acceptor, pem) = crate::tls::acceptor(&names)?;
    let (tls, ca_pem) = (Some(acceptor), Some(pem));
    let scheme = if options.tls { "https" } else { "http" };
    let seed = &options.seed;
    let shared = Arc::new(Shared {
        base_url: format!("{scheme}://{authority}"),
        tenant_id: seed
            .tenant_id
            .clone()
            .unwrap_or_else(|| aks_fixture::TENANT_ID.to_owned()),
        client_id: seed
            .client_id
            .clone()
            .unwrap_or_else(|| aks_fixture::CLIENT_ID.to_owned()),
        client_secret: seed
            .client_secret
            .clone()
            .unwrap_or_else(|| aks_fixture::CLIENT_SECRET.to_owned()),
        object_id: seed
            .object_id
            .clone()
            .unwrap_or_else(|| crate::DEFAULT_SP_OBJECT_ID.to_owned()),
        api_versions: options.api_versions.clone(),
        federated_token: options.federated_token.clone(),
        identity_header: options.identity_header.clone(),
        managed_identity_client_id: options.managed_identity_client_id.clone(),
        managed_identity_resource_id: options.managed_identity_resource_id.clone(),
        managed_identity_object_id: options.managed_identity_object_id.clone(),
        origin: tokio::time::Instant::now(),
        state: Mutex::new(State {
            store,
            ops: Default::default(),
            throttle: crate::throttle::Throttle::new(options.limits),
            tokens: Default::default(),
            faults: Default::default(),
            tuning: options.tuning.clone(),
            requests: Vec::new(),
            requests_dropped: 0,
            structure_log: Vec::new(),
            removed_lbs: Default::default(),
            op_lengths: Default::default(),
            rbac: seed.rbac.clone().unwrap_or_default(),
        }),
    });
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(accept_loop(listener, tls, shared.clone(), rx));
    Ok(ArmSim {
        shared,
        addr,
        authority: authority.to_owned(),
        ca_pem,
        shutdown: Some(tx),
        task: Some(task),
    })
}

/// An accepted connection: TCP (its first byte is peeked) or a stream handed in (its first
/// byte is read and put back in front).
enum Incoming {
    Tcp(TcpStream),
    Handed(BoxStream),
}

async fn accept(listener: &mut Listener) -> io::Result<(Incoming, std::net::SocketAddr)> {
    match listener {
        // As before the listener could be handed in: no TCP_NODELAY here.
        Listener::Tcp(l) => l.accept().await.map(|(s, p)| (Incoming::Tcp(s), p)),
        handed => handed.accept().await.map(|(s, p)| (Incoming::Handed(s), p)),
    }
}

impl Incoming {
    /// The stream, and whether it starts with a TLS handshake record (content type 22).
    async fn classify(self) -> (BoxStream, bool) {
        match self {
            Incoming::Tcp(s) => {
                let mut first = [0u8; 1];
                let is_tls = matches!(s.peek(&mut first).await, Ok(1) if first[0] == 0x16);
                (BoxStream::new(s), is_tls)
            }
            Incoming::Handed(mut s) => {
                let mut first = [0u8; 1];
                let read = s.read(&mut first).await;
                let is_tls = matches!(read, Ok(1) if first[0] == 0x16);
                let first = match read {
                    Ok(1) => Some(first[0]),
                    _ => None,
                };
                (BoxStream::new(Rewound { first, inner: s }), is_tls)
            }
        }
    }
}

/// A stream whose first byte was already read, given back before the rest.
struct Rewound {
    first: Option<u8>,
    inner: BoxStream,
}

impl AsyncRead for Rewound {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if buf.remaining() > 0
            && let Some(b) = self.first.take()
        {
            buf.put_slice(&[b]);
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Rewound {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

async fn accept_loop(
    mut listener: Listener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    // Dropping the set at the end aborts open connections.
    let mut conns = tokio::task::JoinSet::new();
    // A handed listener whose sender is gone yields nothing more: serve what is open until
    // shutdown.
    let mut closed = false;
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = accept(&mut listener), if !closed => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (incoming, peer) = match accepted {
            Ok(s) => s,
            Err(e) if matches!(listener, Listener::Handed { .. }) => {
                tracing::debug!(error = %e, "handed listener closed");
                closed = true;
                continue;
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let shared = shared.clone();
        let tls = tls.clone();
        conns.spawn(async move {
            let service = hyper::service::service_fn(move |mut req: http::Request<_>| {
                // The request log names who sent each request.
                req.extensions_mut().insert(crate::Peer(peer));
                crate::routes::handle(shared.clone(), req)
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            let (stream, is_tls) = incoming.classify().await;
            let result = match tls.filter(|_| is_tls) {
                Some(acceptor) => match acceptor.accept(stream).await {
                    Ok(s) => builder.serve_connection(TokioIo::new(s), service).await,
                    Err(e) => {
                        tracing::debug!(error = %e, "TLS handshake failed");
                        return;
                    }
                },
                None => {
                    builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                }
            };
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection ended with an error");
            }
        });
    }
}
