//! The listener: binds, builds the shared state from the options, and serves every connection
//! with hyper 1 (HTTP/1.1 and HTTP/2, plain or TLS on the same port) until shutdown.

use crate::{ArmSim, ArmSimOptions, Shared, State};
use hyper_util::rt::{TokioExecutor, TokioIo};
use parking_lot::Mutex;
use std::sync::Arc;
use tokio::net::TcpListener;

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot bind {addr}: {source}")]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Seed(#[from] crate::seed::SeedError),
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
}

pub(crate) async fn start(options: ArmSimOptions) -> Result<ArmSim, StartError> {
    let store = options.seed.build()?;
    if let Some(rbac) = &options.seed.rbac {
        rbac.validate().map_err(crate::seed::SeedError::Invalid)?;
    }
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
    // Every connection may be plain or TLS (told apart by its first byte): azure_identity 1.x
    // accepts only an https authority host, so AAD is always reachable over TLS; `tls` chooses
    // which scheme `url()` reports.
    let (acceptor, pem) = crate::tls::acceptor()?;
    let (tls, ca_pem) = (Some(acceptor), Some(pem));
    let scheme = if options.tls { "https" } else { "http" };
    let seed = &options.seed;
    let shared = Arc::new(Shared {
        base_url: format!("{scheme}://{addr}"),
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
        ca_pem,
        shutdown: Some(tx),
        task: Some(task),
    })
}

async fn accept_loop(
    listener: TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    mut shutdown: tokio::sync::oneshot::Receiver<()>,
) {
    // Dropping the set at the end aborts open connections.
    let mut conns = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => break,
            a = listener.accept() => a,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
        };
        let (stream, _) = match accepted {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                continue;
            }
        };
        let shared = shared.clone();
        let tls = tls.clone();
        conns.spawn(async move {
            let service =
                hyper::service::service_fn(move |req| crate::routes::handle(shared.clone(), req));
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            // A TLS connection starts with a handshake record (content type 22).
            let mut first = [0u8; 1];
            let is_tls = matches!(stream.peek(&mut first).await, Ok(1) if first[0] == 0x16);
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
