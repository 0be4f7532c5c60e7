//! The Kubernetes clients over a caller's transport: the same stack `kube::Client::try_from`
//! builds from a `kube::Config` (kube 5's `make_generic_builder`), with the connections
//! opened by a [`Dialer`] instead of hyper-util's `HttpConnector` (a simulated network, in
//! the deterministic simulation). Only the transport differs:
//!
//! ```text
//! base URI ─ retry (kube's server_retry, main client only) ─ auth ─ extra headers ─ trace
//!   ─ hyper-util legacy client ─ connect/read/write timeouts ─ kube's rustls connector
//!   (https; http passes through) ─ Dialer
//! ```
//!
//! Not carried over: a proxy (`kcfg.proxy_url`: the dialer is the route, so it is refused),
//! gzip decompression (kube's `gzip` feature is off in this workspace, so production has
//! none either) and `Client::valid_until` (set by kube only for exec plugins returning client
//! certificates; informational).
//!
//! The production path ([`crate::runtime::Service::bind`]) does not use this module: it keeps
//! `kube::Client::try_from`.

use cutover_runtime::dial::Dialer;
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioExecutor;
use kube::client::ConfigExt;
use kube::client::retry::RetryPolicy;
use std::time::Duration;
use tower::retry::RetryLayer;
use tower::{BoxError, ServiceBuilder};
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::TraceLayer;
use tracing::Span;

/// The module kube's default stack logs its requests from.
const KUBE_TARGET: &str = "kube_client::client::builder";

/// Why the clients could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error(transparent)]
    Kube(#[from] kube::Error),
    #[error("proxy {0}: not supported over a dialer (the dialer is the route)")]
    Proxy(String),
}

/// signal-svc's two clients from `kcfg`, as [`crate::runtime::Service::bind`] makes them:
/// `(main, lease)`, the lease client without kube's retry of 429/503/504
/// (`default_retry = false`: the election retries on its own schedule).
pub fn over(
    kcfg: &kube::Config,
    dialer: Dialer,
) -> Result<(kube::Client, kube::Client), ClientError> {
    let mut lease_cfg = kcfg.clone();
    lease_cfg.default_retry = false;
    let lease = one_over(&lease_cfg, dialer.clone())?;
    let main = one_over(kcfg, dialer)?;
    Ok((main, lease))
}

/// One client as `kube::Client::try_from(kcfg.clone())` stacks it (kube's retry when
/// `kcfg.default_retry`), its connections opened by `dialer`.
pub fn one_over(kcfg: &kube::Config, dialer: Dialer) -> Result<kube::Client, ClientError> {
    if let Some(proxy) = &kcfg.proxy_url {
        let authority = proxy.authority().map(|a| a.as_str()).unwrap_or_default();
        let host = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
        return Err(ClientError::Proxy(host.to_owned()));
    }
    let auth_layer = kcfg.auth_layer()?;
    let connector = kcfg.rustls_https_connector_with_connector(dialer)?;
    let mut connector = hyper_timeout::TimeoutConnector::new(connector);
    connector.set_connect_timeout(kcfg.connect_timeout);
    connector.set_read_timeout(kcfg.read_timeout);
    connector.set_write_timeout(kcfg.write_timeout);
    connector.set_reset_reader_on_write(kcfg.reset_reader_on_write);
    let http: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(TokioExecutor::new()).build(connector);
    let service = ServiceBuilder::new()
        .layer(kcfg.base_uri_layer())
        .option_layer(
            kcfg.default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(auth_layer)
        .layer(kcfg.extra_headers_layer()?)
        .layer(
            // kube's request tracing as its default stack configures it: the same spans and
            // error lines, under kube's target so log filters select them alike.
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<kube::client::Body>| {
                    tracing::debug_span!(
                        target: KUBE_TARGET,
                        "HTTP",
                        http.method = %req.method(),
                        http.url = %req.uri(),
                        http.status_code = tracing::field::Empty,
                        otel.name = req.extensions().get::<&'static str>().unwrap_or(&"HTTP"),
                        otel.kind = "client",
                        otel.status_code = tracing::field::Empty,
                    )
                })
                .on_request(|_req: &Request<kube::client::Body>, _span: &Span| {
                    tracing::debug!(target: KUBE_TARGET, "requesting");
                })
                .on_response(|res: &Response<Incoming>, _latency: Duration, span: &Span| {
                    let status = res.status();
                    span.record("http.status_code", status.as_u16());
                    if status.is_client_error() || status.is_server_error() {
                        span.record("otel.status_code", "ERROR");
                    }
                })
                .on_body_chunk(())
                .on_eos(|_: Option<&HeaderMap>, _duration: Duration, _span: &Span| {
                    tracing::debug!(target: KUBE_TARGET, "stream closed");
                })
                .on_failure(
                    |ec: ServerErrorsFailureClass, _latency: Duration, span: &Span| {
                        span.record("otel.status_code", "ERROR");
                        match ec {
                            ServerErrorsFailureClass::StatusCode(status) => {
                                span.record("http.status_code", status.as_u16());
                                tracing::error!(target: KUBE_TARGET, "failed with status {}", status)
                            }
                            ServerErrorsFailureClass::Error(err) => {
                                tracing::error!(target: KUBE_TARGET, "failed with error {}", err)
                            }
                        }
                    },
                ),
        )
        .map_err(BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, kcfg.default_namespace.clone()))
}
