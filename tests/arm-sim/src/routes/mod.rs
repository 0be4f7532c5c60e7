//! Request dispatch: `/_sim/...` control calls, `/subscriptions/...` ARM calls, and the identity
//! endpoints (AAD token + OIDC discovery, App Service MSI, IMDS). Every non-control request is
//! recorded in the request log.

pub mod aad;
pub mod arm;
pub mod control;
pub mod metadata;
pub mod path;
pub mod reads;
pub mod writes;

use crate::{RequestRecord, Shared};
use bytes::Bytes;
use http::{HeaderValue, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use serde_json::Value;
use std::sync::Arc;

pub type Resp = http::Response<Full<Bytes>>;

/// Returned to hyper to close the connection without a response (fault injection).
#[derive(Debug, thiserror::Error)]
#[error("connection dropped by fault injection")]
pub struct Dropped;

/// What a handler produced, with the facts the request log needs.
#[derive(Debug)]
pub struct Outcome {
    /// `None` drops the connection.
    pub resp: Option<Resp>,
    pub principal: Option<String>,
    pub throttled: bool,
    pub lock_hit: bool,
}

impl Outcome {
    pub fn plain(resp: Resp) -> Self {
        Self {
            resp: Some(resp),
            principal: None,
            throttled: false,
            lock_hit: false,
        }
    }
}

/// A JSON response with ARM's standard headers.
pub fn json(status: StatusCode, body: &Value) -> Resp {
    json_bytes(
        status,
        Bytes::from(serde_json::to_vec(body).unwrap_or_default()),
    )
}

/// A JSON answer from bytes already rendered.
pub fn json_bytes(status: StatusCode, bytes: Bytes) -> Resp {
    let mut resp = http::Response::new(Full::new(bytes));
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    h.insert(http::header::PRAGMA, HeaderValue::from_static("no-cache"));
    h.insert(http::header::EXPIRES, HeaderValue::from_static("-1"));
    resp
}

/// An empty response (202/204).
pub fn empty(status: StatusCode) -> Resp {
    let mut resp = http::Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    resp.headers_mut()
        .insert(http::header::EXPIRES, HeaderValue::from_static("-1"));
    resp
}

pub fn set_header(resp: &mut Resp, name: &'static str, value: &str) {
    if let Ok(v) = HeaderValue::from_str(value) {
        resp.headers_mut().insert(name, v);
    }
}

pub fn arm_error(e: &crate::errors::ArmError) -> Resp {
    let mut resp = json(e.status, &e.body());
    if let Some(secs) = e.retry_after {
        set_header(&mut resp, "retry-after", &secs.to_string());
    }
    resp
}

/// The tracing headers ARM puts on every answer, errors included (azure-production.md 5):
/// a new `x-ms-request-id`, the client's `x-ms-correlation-request-id` or a new one, the
/// client's `x-ms-client-request-id` echoed (clients must not depend on the echo), and
/// `x-ms-routing-request-id` as `REGION:YYYYMMDDTHHMMSSZ:GUID`.
fn tracing_headers(parts: &http::request::Parts, resp: &mut Resp) {
    let header = |name: &str| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let new_id = || uuid::Uuid::new_v4().to_string();
    set_header(resp, "x-ms-request-id", &new_id());
    let correlation = header("x-ms-correlation-request-id").unwrap_or_else(new_id);
    set_header(resp, "x-ms-correlation-request-id", &correlation);
    if let Some(client) = header("x-ms-client-request-id") {
        set_header(resp, "x-ms-client-request-id", &client);
    }
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    set_header(
        resp,
        "x-ms-routing-request-id",
        &format!("EASTUS:{stamp}:{}", new_id()),
    );
}

fn request_header(parts: &http::request::Parts, name: &str) -> Option<String> {
    parts
        .headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// Entry point for hyper.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    req: http::Request<Incoming>,
) -> Result<Resp, Dropped> {
    let received = jiff::Timestamp::now();
    let (parts, body) = req.into_parts();
    let body = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Bytes::new(),
    };
    let path = parts.uri.path().to_owned();
    if path == "/_sim" || path.starts_with("/_sim/") {
        return Ok(control::handle(&shared, &parts, &body));
    }
    let outcome = if path.to_ascii_lowercase().starts_with("/subscriptions/") {
        if body.len() > crate::MAX_REQUEST_BODY {
            // ARM refuses it before the resource provider (or auth) sees it.
            Outcome::plain(arm_error(&crate::errors::ArmError::request_too_large()))
        } else {
            let mut out = arm::handle(&shared, &parts, &body).await;
            if let Some(resp) = out.resp.as_mut() {
                tracing_headers(&parts, resp);
            }
            out
        }
    } else if path.eq_ignore_ascii_case("/metadata/endpoints") {
        metadata::handle(&shared, &parts)
    } else {
        aad::handle(&shared, &parts, &body).await
    };
    let mut st = shared.state.lock();
    // Bounded: a long sandbox run must not grow without limit; the oldest quarter goes first.
    if st.requests.len() >= crate::REQUEST_LOG_CAP {
        st.requests.drain(..crate::REQUEST_LOG_CAP / 4);
        st.requests_dropped += crate::REQUEST_LOG_CAP / 4;
    }
    let peer = parts.extensions.get::<crate::Peer>().map(|p| p.0);
    st.requests.push(RequestRecord {
        time: jiff::Timestamp::now(),
        received,
        method: parts.method.to_string(),
        path: parts
            .uri
            .path_and_query()
            .map(|p| p.to_string())
            .unwrap_or(path),
        principal: outcome.principal.clone(),
        status: outcome
            .resp
            .as_ref()
            .map(|r| r.status().as_u16())
            .unwrap_or(0),
        throttled: outcome.throttled,
        lock_hit: outcome.lock_hit,
        dropped: outcome.resp.is_none(),
        body_bytes: body.len(),
        user_agent: request_header(&parts, http::header::USER_AGENT.as_str()),
        client_request_id: request_header(&parts, "x-ms-client-request-id"),
        authorization: parts.headers.contains_key(http::header::AUTHORIZATION),
        peer,
    });
    drop(st);
    outcome.resp.ok_or(Dropped)
}

/// Sleeps for an artificial latency.
pub async fn delay(ms: u64) {
    if ms > 0 {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }
}

/// The query parameter `name`, decoded.
pub fn query_param(uri: &http::Uri, name: &str) -> Option<String> {
    let q = uri.query()?;
    url::form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.into_owned())
}
