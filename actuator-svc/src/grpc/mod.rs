//! The gRPC server: `cutover.v1.Actuator`, `grpc.health.v1` and reflection (`v1` and
//! `v1alpha`), over TLS with required client certificates (material re-read live:
//! `cutover_runtime::tls_reload`; connections accepted in `incoming`), or in plaintext with `--insecure-plaintext` only. Every service has a decoded message limit sized from its largest legitimate
//! message.

pub mod auth;
pub mod health;
pub mod incoming;
pub mod service;

use crate::inbound::validate;
use cutover_proto::v1::actuator_server::ActuatorServer;
use cutover_runtime::dial::Listener;
use cutover_runtime::tls_reload::TlsReloader;
use service::ActuatorService;
use std::sync::Arc;
use tonic::transport::Server;

/// The server cannot be set up.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("reflection: {0}")]
    Reflection(String),
    #[error("gRPC server: {0}")]
    Serve(String),
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

/// Serves until `shutdown` resolves, on `listener` (a TCP listener converts).
pub async fn serve<H: tonic_health::pb::health_server::Health>(
    listener: impl Into<Listener>,
    tls: Option<Arc<TlsReloader>>,
    svc: ActuatorService,
    health_svc: tonic_health::pb::health_server::HealthServer<H>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listener = listener.into();
    let (reflection_v1, reflection_v1alpha) = reflection_services()?;
    // HTTP/2 keepalive ends streams of a peer that hangs without closing its connection.
    let router = Server::builder()
        .http2_keepalive_interval(Some(std::time::Duration::from_secs(1)))
        .http2_keepalive_timeout(Some(std::time::Duration::from_secs(2)))
        .add_service(health_svc.max_decoding_message_size(validate::MAX_DECODED_SMALL))
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(
            ActuatorServer::new(svc).max_decoding_message_size(validate::MAX_DECODED_MESSAGE),
        );
    let served = match tls {
        // Our own TLS acceptor (not tonic's) so the certificate can change while running.
        Some(tls) => {
            let incoming =
                tokio_stream::wrappers::ReceiverStream::new(incoming::incoming(listener, tls));
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
        None => {
            // Our own listener bypasses tonic's `tcp_nodelay`: `accept` sets it per
            // connection. Accept errors go to tonic (which skips them); a handed listener
            // that closed yields nothing more until shutdown.
            let incoming = futures::stream::unfold(listener, |mut listener| async move {
                match incoming::accept(&mut listener).await {
                    Ok((conn, _)) => Some((Ok(conn), listener)),
                    Err(_) if matches!(listener, Listener::Handed { .. }) => {
                        std::future::pending::<()>().await;
                        None
                    }
                    Err(e) => Some((Err(e), listener)),
                }
            });
            router
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await
        }
    };
    served.map_err(|e| ServerError::Serve(e.to_string()))
}
