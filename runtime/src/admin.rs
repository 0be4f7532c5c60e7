//! The admin HTTP port: `/live`, `/ready`, `/metrics`, apart from any data path. The caller
//! binds the listener (after its config is validated) and says what ready means.
//!
//! Moved from signal-svc and actuator-svc, whose copies answered differently; [`Style`] holds
//! each difference, and each service passes the answers it gave before the move.

use crate::dial::{BoxStream, Listener};
use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Readiness, computed on each probe: `Err(why)` answers 503 `not ready: {why}`, or
/// `not ready` alone when `why` is empty.
pub type ReadyFn = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// The metrics text (OpenMetrics), encoded on each scrape.
pub type MetricsFn = Arc<dyn Fn() -> String + Send + Sync>;

/// How the admin port answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Style {
    /// The body of `/live` (signal-svc `live\n`, actuator-svc `ok\n`).
    pub live: &'static str,
    /// `Content-Type: text/plain` on the text answers (`/live`, `/ready`, 404, 405).
    pub text_content_type: bool,
    /// 405 to anything but GET and HEAD (otherwise every method gets the same answer).
    pub get_only: bool,
    /// The protocols served and what shutdown does to open connections.
    pub connections: Connections,
    /// A pause after a failed accept (a full file table fails every accept at once).
    pub accept_error_pause: Option<Duration>,
}

/// The protocols of the admin port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connections {
    /// HTTP/1.1 only; shutdown closes open connections gracefully.
    Http1Graceful,
    /// HTTP/1.1 or HTTP/2, whichever the client speaks; open connections run until they end.
    Auto,
}

/// What the admin port serves.
#[derive(Clone)]
pub struct Admin {
    /// `/ready`.
    pub ready: ReadyFn,
    /// `/metrics`.
    pub metrics: MetricsFn,
    /// How it answers.
    pub style: Style,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin")
            .field("style", &self.style)
            .finish_non_exhaustive()
    }
}

const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

fn reply(
    status: StatusCode,
    content_type: Option<&str>,
    body: impl Into<Bytes>,
) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body.into()));
    *r.status_mut() = status;
    if let Some(v) = content_type.and_then(|t| t.parse().ok()) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route(admin: &Admin, method: &Method, path: &str) -> Response<Full<Bytes>> {
    let style = &admin.style;
    let text = style.text_content_type.then_some("text/plain");
    if style.get_only && method != Method::GET && method != Method::HEAD {
        return reply(StatusCode::METHOD_NOT_ALLOWED, text, "method not allowed\n");
    }
    match path {
        "/live" => reply(StatusCode::OK, text, style.live),
        "/ready" => match (admin.ready)() {
            Ok(()) => reply(StatusCode::OK, text, "ready\n"),
            Err(why) if why.is_empty() => {
                reply(StatusCode::SERVICE_UNAVAILABLE, text, "not ready\n")
            }
            Err(why) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                text,
                format!("not ready: {why}\n"),
            ),
        },
        "/metrics" => reply(StatusCode::OK, Some(OPENMETRICS), (admin.metrics)()),
        _ => reply(StatusCode::NOT_FOUND, text, "not found\n"),
    }
}

/// Serves the connections `listener` accepts (a TCP listener converts) until `shutdown`
/// completes.
pub async fn serve(
    listener: impl Into<Listener>,
    admin: Admin,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut listener = listener.into();
    // Open connections see the end of `shutdown` through this token.
    let stop = CancellationToken::new();
    let _stop_on_return = stop.clone().drop_guard();
    tokio::pin!(shutdown);
    loop {
        let (stream, _) = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(s) => s,
                // A handed listener whose sender is gone accepts nothing more: serve the open
                // connections until shutdown instead of spinning on the error.
                Err(e) if matches!(listener, Listener::Handed { .. })
                    && e.kind() == std::io::ErrorKind::ConnectionAborted =>
                {
                    shutdown.await;
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "admin accept failed");
                    if let Some(pause) = admin.style.accept_error_pause {
                        tokio::time::sleep(pause).await;
                    }
                    continue;
                }
            },
        };
        tokio::spawn(connection(stream, admin.clone(), stop.clone()));
    }
}

async fn connection(stream: BoxStream, admin: Admin, stop: CancellationToken) {
    let style = admin.style;
    let svc = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let rsp = route(&admin, req.method(), req.uri().path());
        async move { Ok::<_, std::convert::Infallible>(rsp) }
    });
    let io = TokioIo::new(stream);
    match style.connections {
        Connections::Http1Graceful => {
            let conn = hyper::server::conn::http1::Builder::new().serve_connection(io, svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
        }
        Connections::Auto => {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(io, svc)
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    const SIGNAL: Style = Style {
        live: "live\n",
        text_content_type: true,
        get_only: true,
        connections: Connections::Http1Graceful,
        accept_error_pause: None,
    };
    const ACTUATOR: Style = Style {
        live: "ok\n",
        text_content_type: false,
        get_only: false,
        connections: Connections::Auto,
        accept_error_pause: Some(Duration::from_millis(100)),
    };

    fn mk_admin(style: Style, ready: Result<(), &'static str>) -> Admin {
        Admin {
            ready: Arc::new(move || ready.map_err(str::to_owned)),
            metrics: Arc::new(|| "# EOF\n".to_owned()),
            style,
        }
    }

    async fn answer(admin: &Admin, method: Method, path: &str) -> (u16, Option<String>, String) {
        let rsp = route(admin, &method, path);
        let status = rsp.status().as_u16();
        let ct = rsp
            .headers()
            .get(hyper::header::CONTENT_TYPE)
            .map(|v| v.to_str().unwrap_or_default().to_owned());
        let body = rsp.into_body().collect().await.map(|b| b.to_bytes());
        let body = String::from_utf8_lossy(&body.unwrap_or_default()).into_owned();
        (status, ct, body)
    }

    fn text(s: &str) -> Option<String> {
        Some(s.to_owned())
    }

    #[tokio::test]
    async fn each_style_answers_as_its_service_did() {
        let s = mk_admin(SIGNAL, Err(""));
        assert_eq!(
            answer(&s, Method::GET, "/live").await,
            (200, text("text/plain"), "live\n".into())
        );
        assert_eq!(
            answer(&s, Method::GET, "/ready").await,
            (503, text("text/plain"), "not ready\n".into())
        );
        assert_eq!(answer(&s, Method::POST, "/live").await.0, 405);
        assert_eq!(answer(&s, Method::HEAD, "/nope").await.0, 404);

        let a = mk_admin(ACTUATOR, Err("no Azure AD token yet"));
        assert_eq!(
            answer(&a, Method::GET, "/live").await,
            (200, None, "ok\n".into())
        );
        assert_eq!(
            answer(&a, Method::GET, "/ready").await,
            (503, None, "not ready: no Azure AD token yet\n".into())
        );
        assert_eq!(answer(&a, Method::POST, "/live").await.0, 200);
        assert_eq!(answer(&a, Method::GET, "/nope").await.0, 404);

        for style in [SIGNAL, ACTUATOR] {
            let ready = mk_admin(style, Ok(()));
            assert_eq!(answer(&ready, Method::GET, "/ready").await.2, "ready\n");
            assert_eq!(
                answer(&ready, Method::GET, "/metrics").await,
                (200, text(OPENMETRICS), "# EOF\n".into())
            );
        }
    }

    /// Over a socket, both styles serve until shutdown and then return.
    #[tokio::test]
    async fn serves_until_shutdown() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        for style in [SIGNAL, ACTUATOR] {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let stop = CancellationToken::new();
            let server = tokio::spawn(serve(
                listener,
                mk_admin(style, Ok(())),
                stop.clone().cancelled_owned(),
            ));
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            c.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut rsp = String::new();
            c.read_to_string(&mut rsp).await.unwrap();
            assert!(rsp.starts_with("HTTP/1.1 200"), "{rsp}");
            assert!(rsp.ends_with("ready\n"), "{rsp}");
            stop.cancel();
            tokio::time::timeout(Duration::from_secs(5), server)
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// Streams handed in by another transport are served the same way.
    #[tokio::test]
    async fn serves_a_handed_listener() {
        use crate::dial::{BoxStream, Listener};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        for style in [SIGNAL, ACTUATOR] {
            let (tx, listener) = Listener::handed("10.0.0.1:8080".parse().unwrap());
            let stop = CancellationToken::new();
            let server = tokio::spawn(serve(
                listener,
                mk_admin(style, Err("warming up")),
                stop.clone().cancelled_owned(),
            ));
            let (mut c, s) = tokio::io::duplex(4096);
            tx.send((BoxStream::new(s), "10.0.0.2:5000".parse().unwrap()))
                .await
                .unwrap();
            c.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut rsp = String::new();
            c.read_to_string(&mut rsp).await.unwrap();
            assert!(rsp.starts_with("HTTP/1.1 503"), "{rsp}");
            assert!(rsp.ends_with("not ready: warming up\n"), "{rsp}");
            stop.cancel();
            tokio::time::timeout(Duration::from_secs(5), server)
                .await
                .unwrap()
                .unwrap();
        }
    }

    /// A handed listener whose sender is gone leaves the server waiting for shutdown.
    #[tokio::test]
    async fn a_closed_handed_listener_waits_for_shutdown() {
        use crate::dial::Listener;
        let (tx, listener) = Listener::handed("10.0.0.1:8080".parse().unwrap());
        drop(tx);
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(
            listener,
            mk_admin(SIGNAL, Ok(())),
            stop.clone().cancelled_owned(),
        ));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!server.is_finished());
        stop.cancel();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .unwrap()
            .unwrap();
    }
}
