//! HTTP/1.1 serving (hyper 1): the accept loop, per-request fault injection and logging,
//! and dispatch to discovery, control, resource handlers and watches.

use crate::auth::{Attributes, rbac};
use crate::control;
use crate::discovery;
use crate::faults::{Faults, RequestInfo, RequestRecord};
use crate::handlers;
use crate::list::Pager;
use crate::openapi;
use crate::router::{self, Route};
use crate::status::ApiError;
use crate::store::Store;
use bytes::Bytes;
use cutover_runtime::dial::Listener;
use http::{HeaderValue, Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full, combinators::BoxBody};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde_json::Value;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;

/// Response body: a full JSON document or a stream of watch lines.
pub type Body = BoxBody<Bytes, Infallible>;

/// Server tunables (see `Options` in the crate root for the public knobs).
#[derive(Debug, Clone)]
pub struct Tunables {
    pub bookmark_interval: Duration,
    /// Watch length when the client sends no `timeoutSeconds`.
    pub default_watch_timeout: Duration,
}

/// Mutable API state under one lock: writes, their RV and the paging snapshots.
#[derive(Debug)]
pub struct State {
    pub store: Store,
    pub pager: Pager,
}

/// Everything request handlers share.
#[derive(Debug)]
pub struct Shared {
    pub state: Mutex<State>,
    /// The latest RV, published after every write so watches wake up.
    pub rv: watch::Sender<u64>,
    /// Bumped to end every open watch.
    pub close_watches: watch::Sender<u64>,
    /// While true, new watch requests wait before they are served (a watch outage).
    pub watches_paused: watch::Sender<bool>,
    pub faults: Mutex<Faults>,
    pub tunables: Tunables,
    pub address: SocketAddr,
    /// What `KubeSim::url` answers.
    pub url: String,
    /// TLS, tokens and RBAC; None serves plain HTTP to anyone.
    pub security: Option<SecurityState>,
}

/// What [`crate::Security`] turns on, ready to serve.
#[derive(Debug)]
pub struct SecurityState {
    pub tls: crate::tls::Tls,
    pub tokens: Mutex<crate::auth::Authenticator>,
    pub admin_token: String,
}

impl Shared {
    /// Publishes the store's current RV to watchers (call after a write, lock released).
    pub fn notify(&self) {
        let rv = self.state.lock().store.current_rv();
        self.rv.send_replace(rv);
    }
}

/// Serves the connections `listener` accepts until `stop` flips to true; then open
/// connections are dropped.
pub async fn serve(mut listener: Listener, shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(s) => s,
                    // A handed listener whose sender is gone accepts nothing more: serve
                    // the open connections until stop.
                    Err(e) if matches!(listener, Listener::Handed { .. })
                        && e.kind() == std::io::ErrorKind::ConnectionAborted =>
                    {
                        let _ = stop.wait_for(|s| *s).await;
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let shared = shared.clone();
                let acceptor = shared.security.as_ref().map(|s| s.tls.acceptor.clone());
                conns.spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let shared = shared.clone();
                        async move { Ok::<_, Infallible>(handle(shared, req).await) }
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let result = match acceptor {
                        None => http.serve_connection(TokioIo::new(stream), service).await,
                        Some(acceptor) => match acceptor.accept(stream).await {
                            Ok(tls) => http.serve_connection(TokioIo::new(tls), service).await,
                            Err(e) => {
                                tracing::debug!(error = %e, "TLS handshake failed");
                                return;
                            }
                        },
                    };
                    if let Err(e) = result {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            _ = stop.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
    conns.abort_all();
}

/// `/openapi/v2` and `/openapi/v3[/<group-version>]`.
fn openapi_response(path: &str, req: &Req) -> Result<Response<Body>, ApiError> {
    if req.method != Method::GET {
        return Err(ApiError::path_not_found());
    }
    if !openapi::accepts_json(&req.accept) {
        // Only JSON is served; client-go answers 406 by trying its next option.
        return Err(ApiError::not_acceptable(&["application/json"]));
    }
    let docs = &*openapi::DOCUMENTS;
    let (body, immutable) = match path {
        "/openapi/v2" => (&docs.v2, false),
        "/openapi/v3" => (&docs.index, false),
        other => {
            let key = other.trim_start_matches("/openapi/v3/");
            let doc = docs.v3.get(key).ok_or_else(ApiError::path_not_found)?;
            // A URL carrying the current hash never changes, so clients may cache it for good.
            (&doc.body, req.param("hash") == Some(doc.hash.as_str()))
        }
    };
    let mut resp = raw_json_response(200, body.clone());
    let cache = if immutable {
        "public, immutable"
    } else {
        "no-cache, private"
    };
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    Ok(resp)
}

/// A JSON response.
pub fn json_response(status: u16, value: &Value) -> Response<Body> {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// A response from already serialized JSON.
pub fn raw_json_response(status: u16, body: Vec<u8>) -> Response<Body> {
    let mut resp = Response::new(Full::new(Bytes::from(body)).boxed());
    *resp.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The `Status` response for an error.
pub fn error_response(e: &ApiError) -> Response<Body> {
    let mut resp = json_response(e.code, &e.to_status());
    if let Some(secs) = e.retry_after
        && let Ok(v) = HeaderValue::from_str(&secs.to_string())
    {
        resp.headers_mut().insert(header::RETRY_AFTER, v);
    }
    resp
}

/// Request bodies larger than this are refused (the real server's limit is 3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// A parsed request, as handlers see it.
#[derive(Debug)]
pub struct Req {
    pub method: Method,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub content_type: String,
    pub accept: String,
    pub body: Bytes,
}

impl Req {
    /// The last value of a query parameter.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.query
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

async fn handle(shared: Arc<Shared>, req: Request<Incoming>) -> Response<Body> {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let path_and_query = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| path.clone());
    let query: Vec<(String, String)> =
        url::form_urlencoded::parse(req.uri().query().unwrap_or("").as_bytes())
            .filter(|(k, _)| !k.is_empty())
            .map(|(k, v)| (k.into_owned(), v.into_owned()))
            .collect();
    let content_type = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let body = match read_body(req.into_body()).await {
        Ok(b) => b,
        Err(e) => return error_response(&e),
    };
    let req = Req {
        method,
        path,
        query,
        content_type,
        accept,
        body,
    };
    let route = router::route(&req.path);
    if let Route::Control(rest) = &route {
        return control::handle(&shared, rest, &req);
    }

    let watch = req.param("watch").is_some_and(|w| w == "true" || w == "1");
    let (caller, credential_id, denied) =
        authenticate_and_authorize(&shared, authorization.as_deref(), &route, &req, watch);
    if let Some(e) = denied {
        let resp = error_response(&e);
        shared.faults.lock().record(RequestRecord {
            method: req.method.to_string(),
            path: path_and_query,
            status: resp.status().as_u16(),
            content_type: (!req.content_type.is_empty()).then(|| req.content_type.clone()),
            caller,
            credential_id,
            at: Some(jiff::Timestamp::now()),
        });
        return resp;
    }
    let collection = matches!(&route, Route::Resource(t) if t.name.is_none());
    let info = RequestInfo {
        method: req.method.as_str(),
        path: &req.path,
        watch,
        collection,
    };
    let (latency, injected) = {
        let mut f = shared.faults.lock();
        (f.latency(), f.take_failure(&info))
    };
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    if watch && injected.is_none() {
        let mut paused = shared.watches_paused.subscribe();
        // Err only if the sender is gone, i.e. the server is shutting down.
        let _ = paused.wait_for(|p| !*p).await;
    }
    let resp = match injected {
        Some(e) => error_response(&shape_injected(e, &route)),
        None => dispatch(&shared, route, &req, watch),
    };
    shared.faults.lock().record(RequestRecord {
        method: req.method.to_string(),
        path: path_and_query,
        status: resp.status().as_u16(),
        content_type: (!req.content_type.is_empty()).then(|| req.content_type.clone()),
        caller,
        credential_id,
        at: Some(jiff::Timestamp::now()),
    });
    resp
}

/// The caller's name and credential for the request log, and the 401/403 if the request may
/// not proceed. Without security the bearer token itself names the caller and everything is
/// allowed.
fn authenticate_and_authorize(
    shared: &Shared,
    authorization: Option<&str>,
    route: &Route,
    req: &Req,
    watch: bool,
) -> (Option<String>, Option<String>, Option<ApiError>) {
    let Some(security) = &shared.security else {
        let token = authorization.and_then(|v| v.strip_prefix("Bearer "));
        return (token.map(str::to_string), None, None);
    };
    let user = match security.tokens.lock().authenticate(authorization) {
        Ok(user) => user,
        Err(_) => return (None, None, Some(ApiError::unauthorized())),
    };
    let attrs = Attributes::of(route, req.method.as_str(), &req.path, watch);
    let decision = rbac::authorize(&shared.state.lock().store, &user, &attrs);
    match decision {
        rbac::Decision::Allow => (Some(user.name), user.credential_id, None),
        rbac::Decision::Deny { reason } => {
            let e = rbac::forbidden(&user, &attrs, &reason);
            tracing::info!(user = %user.name, message = %e.message, "forbidden");
            (Some(user.name), user.credential_id, Some(e))
        }
    }
}

/// Gives an injected 404/409/410 the body the real server would send for this route, so
/// clients classify it as they would a genuine one (`Conflict` for a taint PATCH, ...).
fn shape_injected(e: ApiError, route: &Route) -> ApiError {
    let Route::Resource(t) = route else {
        return e;
    };
    match (e.code, &t.name) {
        (404, Some(name)) => ApiError::not_found(t.view.resource(), name),
        (409, Some(name)) => ApiError::conflict(t.view.resource(), name),
        (410, _) => ApiError::expired("The resourceVersion for the provided list is too old."),
        _ => e,
    }
}

async fn read_body(body: Incoming) -> Result<Bytes, ApiError> {
    let limited = http_body_util::Limited::new(body, MAX_BODY);
    match limited.collect().await {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) => Err(ApiError::bad_request(format!(
            "error reading request body: {e}"
        ))),
    }
}

fn dispatch(shared: &Arc<Shared>, route: Route, req: &Req, watch: bool) -> Response<Body> {
    let result = match route {
        Route::Discovery(path) => {
            if req.method != Method::GET {
                Err(ApiError::path_not_found())
            } else {
                discovery::document(&path, &shared.address.to_string())
                    .map(|d| json_response(200, &d))
                    .ok_or_else(ApiError::path_not_found)
            }
        }
        Route::OpenApi(path) => openapi_response(&path, req),
        Route::Empty(target) => handlers::empty(&target, req),
        Route::Resource(target) => {
            if watch && target.name.is_none() && req.method == Method::GET {
                crate::watch::start(shared.clone(), &target, req)
            } else {
                handlers::resource(shared, &target, req)
            }
        }
        Route::Control(_) | Route::NotFound => Err(ApiError::path_not_found()),
    };
    match result {
        Ok(resp) => resp,
        Err(e) => error_response(&e),
    }
}
