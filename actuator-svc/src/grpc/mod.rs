//! The gRPC server: `cutover.v1.Actuator`, `grpc.health.v1` and reflection (`v1` and
//! `v1alpha`), over TLS with client certificates when configured. Every service has a decoded
//! message limit sized from its largest legitimate message.

pub mod auth;
pub mod health;
pub mod service;
pub mod validate;

use cutover_proto::v1::actuator_server::ActuatorServer;
use service::ActuatorService;
use std::path::Path;
use tokio::net::TcpListener;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

/// The server cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("TLS settings: {0}")]
    Tls(String),
    #[error("reflection: {0}")]
    Reflection(String),
    #[error("gRPC server: {0}")]
    Serve(String),
}

/// TLS material paths.
#[derive(Debug, Clone)]
pub struct TlsFiles<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub client_ca: Option<&'a Path>,
}

fn read(flag: &'static str, path: &Path) -> Result<Vec<u8>, ServerError> {
    std::fs::read(path).map_err(|source| ServerError::Read {
        flag,
        path: path.display().to_string(),
        source,
    })
}

/// Builds the TLS configuration (reads the files now, so bad paths stop start-up).
pub fn tls_config(files: &TlsFiles<'_>) -> Result<ServerTlsConfig, ServerError> {
    let identity = Identity::from_pem(
        read("--tls-cert", files.cert)?,
        read("--tls-key", files.key)?,
    );
    let mut tls = ServerTlsConfig::new().identity(identity);
    if let Some(ca) = files.client_ca {
        // Client certificates are then required: a caller without one fails the handshake.
        tls = tls.client_ca_root(Certificate::from_pem(read("--tls-client-ca", ca)?));
    }
    Ok(tls)
}

fn reflection_builder() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(cutover_proto::v1::FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// Reflection as `grpc.reflection.v1` and as `grpc.reflection.v1alpha`: grpcio-reflection's
/// client, grpcui and older grpcurl speak only the latter.
pub fn reflection_services() -> Result<
    (
        tonic_reflection::pb::v1::server_reflection_server::ServerReflectionServer<
            impl tonic_reflection::pb::v1::server_reflection_server::ServerReflection,
        >,
        tonic_reflection::pb::v1alpha::server_reflection_server::ServerReflectionServer<
            impl tonic_reflection::pb::v1alpha::server_reflection_server::ServerReflection,
        >,
    ),
    ServerError,
> {
    let v1 = reflection_builder()
        .build_v1()
        .map_err(|e| ServerError::Reflection(e.to_string()))?
        .max_decoding_message_size(validate::MAX_DECODED_SMALL);
    let v1alpha = reflection_builder()
        .build_v1alpha()
        .map_err(|e| ServerError::Reflection(e.to_string()))?
        .max_decoding_message_size(validate::MAX_DECODED_SMALL);
    Ok((v1, v1alpha))
}

/// Serves until `shutdown` resolves.
pub async fn serve<H: tonic_health::pb::health_server::Health>(
    listener: TcpListener,
    tls: Option<ServerTlsConfig>,
    svc: ActuatorService,
    health_svc: tonic_health::pb::health_server::HealthServer<H>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (reflection_v1, reflection_v1alpha) = reflection_services()?;
    let mut builder = Server::builder();
    if let Some(tls) = tls {
        builder = builder
            .tls_config(tls)
            .map_err(|e| ServerError::Tls(e.to_string()))?;
    }
    // Our own listener bypasses tonic's `tcp_nodelay`: set it per connection, or Nagle holds
    // small answers back for a delayed ACK (~40 ms per unary call). HTTP/2 keepalive ends
    // streams of a peer that hangs without closing its connection.
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |conn| {
            if let Ok(c) = &conn {
                let _ = c.set_nodelay(true);
            }
            conn
        },
    );
    builder
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(1)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(2)))
        .add_service(health_svc.max_decoding_message_size(validate::MAX_DECODED_SMALL))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            ActuatorServer::new(svc).max_decoding_message_size(validate::MAX_DECODED_MESSAGE),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|e| ServerError::Serve(e.to_string()))
}
