//! The admin HTTP port: `/live`, `/ready` (pool index built for every managed LB and an Azure
//! AD token obtained), `/metrics`.

use crate::metrics::Metrics;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Request, Response, StatusCode};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Readiness, computed on each probe.
pub type ReadyFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut rsp = Response::new(Full::new(Bytes::from(body)));
    *rsp.status_mut() = status;
    rsp
}

fn route(path: &str, ready: &ReadyFn, metrics: &Metrics) -> Response<Full<Bytes>> {
    match path {
        "/live" => reply(StatusCode::OK, "ok\n".into()),
        "/ready" => match ready() {
            Ok(()) => reply(StatusCode::OK, "ready\n".into()),
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
            ),
        },
        "/metrics" => {
            let mut rsp = reply(StatusCode::OK, metrics.encode());
            if let Ok(v) = "application/openmetrics-text; version=1.0.0; charset=utf-8".parse() {
                rsp.headers_mut().insert(http::header::CONTENT_TYPE, v);
            }
            rsp
        }
        _ => reply(StatusCode::NOT_FOUND, "not found\n".into()),
    }
}

/// Serves until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    ready: ReadyFn,
    metrics: Arc<Metrics>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            },
            _ = shutdown.changed() => return,
        };
        let ready = ready.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                let rsp = route(req.uri().path(), &ready, &metrics);
                async move { Ok::<_, std::convert::Infallible>(rsp) }
            });
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ =
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(io, svc)
                    .await;
        });
    }
}
