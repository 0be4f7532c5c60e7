//! Admin HTTP server: `/live`, `/ready`, `/metrics` (separate from any data path).

use crate::shared::Shared;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

fn reply(status: StatusCode, content_type: &str, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route(shared: &Shared, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return reply(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "method not allowed\n",
        );
    }
    match req.uri().path() {
        "/live" => reply(StatusCode::OK, "text/plain", "live\n"),
        "/ready" => {
            if shared.is_ready() {
                reply(StatusCode::OK, "text/plain", "ready\n")
            } else {
                reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "not ready\n")
            }
        }
        "/metrics" => reply(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            shared.metrics().encode(),
        ),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n"),
    }
}

/// Serves until shutdown. The listener is bound by the caller (after config validation).
pub async fn serve(listener: TcpListener, shared: Arc<Shared>, shutdown: CancellationToken) {
    loop {
        let (stream, _) = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    continue;
                }
            },
        };
        let shared = shared.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let resp = route(&shared, &req);
                async move { Ok::<_, std::convert::Infallible>(resp) }
            });
            let conn = http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        });
    }
}
