//! A thin ARM client over the project's one hyper + rustls client ([`Transport`]) and a
//! [`TokenSource`] (in the service, `credentials`: an `azure_identity` 1.x credential).
//!
//! Why not `azure_mgmt_network`'s generated client: it cannot send `If-Match` and, with no
//! `Retry-After` on a poll, waits 30 s between operation polls (`contracts/arm.md` 1.7). Nor its
//! models: they refuse a whole NIC for a type mismatch in any field, and cutover reads two
//! (`lb::nic`). So the five requests we need are built here: GET LB, PUT pool / PUT LB with
//! `If-Match`, GET the `Azure-AsyncOperation` URL, LIST NICs (following `nextLink`). Load
//! balancer documents stay raw bytes here (`lb::doc` reads and edits them without building JSON
//! trees). Every call goes through the shared [`Budget`], is bounded by a
//! timeout, records metrics and runs in a tracing span.

use super::answer::{
    Answer, BodyBudget, DEFAULT_BODY_BUDGET, LbBody, ReadAs, discard_body, header, read_body,
};
use super::body::ChunkBody;
use super::budget::{Budget, Class, Verdict};
use super::error::{ArmError, Trace};
use super::token::TokenSource;
use super::transport::Transport;
use crate::lb::index::{self, NicMap};
use crate::lb::scan::LbState;
use crate::lb::splice::Spliced;
use crate::metrics::Metrics;
use http::{HeaderMap, Method};
use parking_lot::Mutex;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use url::Url;

/// The api-version of every call (`package-2024-03` of the Microsoft.Network specification,
/// whose examples the tests read).
pub const API_VERSION: &str = "2024-03-01";
/// The public cloud's token scope for ARM (another cloud's: [`ArmClient::with_token_scope`]).
pub const SCOPE: &str = "https://management.azure.com/.default";

/// A PUT that ARM accepted.
#[derive(Debug, Clone)]
pub struct PutAccepted {
    /// The operation to poll, if ARM gave one.
    pub operation: Option<Url>,
    pub retry_after: Option<Duration>,
}

/// The state of a long-running operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpStatus {
    InProgress {
        retry_after: Option<Duration>,
    },
    Succeeded,
    /// `Failed` or `Canceled`, with the error.
    Ended {
        status: String,
        code: String,
        message: String,
        details: Vec<String>,
    },
}

/// Where the managed resources live.
#[derive(Debug, Clone)]
pub struct Scope {
    pub endpoint: Url,
    pub subscription_id: String,
    pub lb_resource_group: String,
    pub node_resource_group: String,
}

/// The ARM client. Cheap to clone; the budget is shared.
#[derive(Clone)]
pub struct ArmClient {
    http: Transport,
    credential: Arc<dyn TokenSource>,
    scope: Scope,
    budget: Arc<Mutex<Budget>>,
    metrics: Arc<Metrics>,
    timeout: Duration,
    bodies: BodyBudget,
    /// The token scope for ARM (the configured cloud's, `config::cloud`).
    token_scope: Arc<str>,
}

impl std::fmt::Debug for ArmClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArmClient")
            .field("endpoint", &self.scope.endpoint.as_str())
            .finish()
    }
}
/// Parses `Retry-After` (seconds or an HTTP date) and the millisecond variants.
pub fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let ms = [
        header(headers, "retry-after-ms"),
        header(headers, "x-ms-retry-after-ms"),
    ];
    super::retry::parse_retry_after(
        &[ms[0].as_deref(), ms[1].as_deref()],
        header(headers, "retry-after").as_deref(),
        time::OffsetDateTime::now_utc(),
    )
}

/// A fresh `x-ms-client-request-id`: one per logical call, the same on each of its retries.
pub fn new_request_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Whether the bearer token may go to `endpoint` at all: https, or plain http to a loopback
/// host only (arm-sim in tests and the sandbox, or a local sidecar: the token never leaves
/// the machine). No flag widens this: a token over plain http to another host is readable
/// by every hop.
pub fn endpoint_allowed(endpoint: &Url) -> Result<(), String> {
    match endpoint.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(endpoint) => Ok(()),
        "http" => Err(
            "plain http is allowed only to a loopback host (a simulator or a local sidecar); use https"
                .into(),
        ),
        other => Err(format!("scheme {other}: only https is used")),
    }
}

fn is_loopback(url: &Url) -> bool {
    match url.host() {
        Some(url::Host::Ipv4(a)) => a.is_loopback(),
        Some(url::Host::Ipv6(a)) => a.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    }
}

/// `url` without its query, fragment and user info, for errors and logs (an operation URL's
/// query carries opaque signatures).
fn shown(url: &Url) -> String {
    let mut u = url.clone();
    u.set_query(None);
    u.set_fragment(None);
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.to_string()
}

/// Splits an ARM error body into code, message and detail codes.
fn cloud_error(body: &[u8]) -> (String, String, Vec<String>) {
    let e = super::error::CloudError::parse(body);
    (e.code, e.message, e.details)
}

/// An ARM request: bearer token, client request id, `If-Match` when given, and the body sent
/// chunk by chunk with its exact length (no chunked encoding). The transport adds the
/// `User-Agent`.
fn request(
    method: &Method,
    url: &Url,
    token: &str,
    request_id: &str,
    if_match: Option<&str>,
    body: Option<&ChunkBody>,
) -> Result<http::Request<ChunkBody>, http::Error> {
    let mut req = http::Request::builder()
        .method(method.clone())
        .uri(url.as_str())
        .header("authorization", format!("Bearer {token}"))
        .header("accept", "application/json")
        .header("x-ms-client-request-id", request_id)
        .header("x-ms-return-client-request-id", "true");
    if let Some(etag) = if_match {
        req = req.header("if-match", etag);
    }
    if let Some(body) = body {
        req = req
            .header("content-type", "application/json")
            .header("content-length", body.len());
    }
    req.body(body.cloned().unwrap_or_else(ChunkBody::empty))
}

impl ArmClient {
    /// A client for `scope`, sharing `budget`.
    pub fn new(
        http: Transport,
        credential: Arc<dyn TokenSource>,
        scope: Scope,
        budget: Arc<Mutex<Budget>>,
        metrics: Arc<Metrics>,
        timeout: Duration,
    ) -> Self {
        Self {
            http,
            credential,
            scope,
            budget,
            metrics,
            timeout,
            bodies: BodyBudget::new(DEFAULT_BODY_BUDGET),
            token_scope: Arc::from(SCOPE),
        }
    }

    /// Asks for tokens of `scope` (another cloud's ARM) instead of the public cloud's [`SCOPE`].
    pub fn with_token_scope(mut self, scope: &str) -> Self {
        self.token_scope = Arc::from(scope);
        self
    }

    /// Bounds the bytes of whole LB documents read at once (see [`DEFAULT_BODY_BUDGET`]).
    pub fn with_body_budget(mut self, bytes: usize) -> Self {
        self.bodies = BodyBudget::new(bytes);
        self
    }

    /// How full the read budget is (0..=1) and its sustained rate per second.
    pub fn read_headroom(&self) -> (f64, f64) {
        self.budget
            .lock()
            .headroom(Class::Read, tokio::time::Instant::now())
    }

    /// Where this client points.
    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The ARM ID of a load balancer.
    pub fn lb_id(&self, lb: &str) -> String {
        format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/loadBalancers/{lb}",
            self.scope.subscription_id, self.scope.lb_resource_group
        )
    }

    // ArmError carries the ARM error body for results; it is built once per failed call.
    #[allow(clippy::result_large_err)]
    fn url(&self, path: &str) -> Result<Url, ArmError> {
        let mut url = self
            .scope
            .endpoint
            .join(path)
            .map_err(|e| ArmError::Decode {
                op: "url",
                resource: path.to_string(),
                message: e.to_string(),
            })?;
        url.query_pairs_mut()
            .append_pair("api-version", API_VERSION);
        Ok(url)
    }

    /// Refuses, before a token is fetched, a URL the token must not go to: anything but the
    /// configured endpoint's scheme, host and port, and that endpoint itself when it is plain
    /// http off loopback. URLs from answers (`Azure-AsyncOperation`, `nextLink`) go through
    /// here like every other request.
    #[allow(clippy::result_large_err)] // like `url`
    fn trusted(&self, op: &'static str, url: &Url) -> Result<(), ArmError> {
        let endpoint = &self.scope.endpoint;
        let why = match endpoint_allowed(endpoint) {
            Err(why) => why,
            Ok(()) if url.origin() != endpoint.origin() => format!(
                "not the configured ARM endpoint {}",
                endpoint.origin().ascii_serialization()
            ),
            Ok(()) => return Ok(()),
        };
        Err(ArmError::UntrustedUrl {
            op,
            url: shown(url),
            why,
        })
    }

    /// Gets a token now (used for readiness and by every call).
    pub async fn token(&self) -> Result<String, ArmError> {
        self.credential
            .token(&self.token_scope)
            .await
            .map_err(ArmError::Token)
    }

    async fn wait_budget(&self, class: Class) {
        loop {
            let verdict = self
                .budget
                .lock()
                .acquire(class, tokio::time::Instant::now());
            match verdict {
                Verdict::Go => return,
                Verdict::Wait(d) => {
                    self.metrics.rate_limited(class.label());
                    tokio::time::sleep(d).await;
                }
            }
        }
    }

    /// One request: budget, token, timeout, metrics, error mapping. A 401 drops the cached
    /// token and is tried once more (a token that expired early, or was revoked).
    pub(super) async fn call(
        &self,
        op: &'static str,
        method: Method,
        url: Url,
        if_match: Option<&str>,
        body: Option<&ChunkBody>,
    ) -> Result<Answer, ArmError> {
        self.call_as(op, method, url, if_match, body, ReadAs::Collect, None)
            .await
    }

    /// `request_id`: the logical call's `x-ms-client-request-id` when the caller repeats one
    /// (a write tried again), else a fresh one.
    #[allow(clippy::too_many_arguments)] // one private seam; every argument is per call
    async fn call_as(
        &self,
        op: &'static str,
        method: Method,
        url: Url,
        if_match: Option<&str>,
        body: Option<&ChunkBody>,
        mut read_as: ReadAs<'_>,
        request_id: Option<&str>,
    ) -> Result<Answer, ArmError> {
        self.trusted(op, &url)?;
        let request_id = request_id.map_or_else(new_request_id, str::to_owned);
        let class = if method == Method::GET || method == Method::HEAD {
            Class::Read
        } else {
            Class::Write
        };
        let resource = url.path().to_string();
        let span = tracing::debug_span!("arm", op, resource = %resource, client_request_id = %request_id, status = tracing::field::Empty);
        async {
            let call = (op, class, &method, &url, request_id.as_str());
            let mut answer = self.call_once(call, if_match, body, &mut read_as).await?;
            if answer.status == 401 {
                // The same logical call: the same client request id.
                self.credential.invalidate();
                answer = self.call_once(call, if_match, body, &mut read_as).await?;
            }
            tracing::Span::current().record("status", answer.status);
            if (200..300).contains(&answer.status) {
                return Ok(answer);
            }
            let (code, message, details) = cloud_error(&answer.body);
            let retry_after = retry_after(&answer.headers);
            let trace = Trace::of(&request_id, &answer.headers);
            if answer.status == 429 {
                self.metrics.throttled(class.label());
                // Honour Retry-After for the whole class, except for NRP's refusals of one
                // resource (its lock, a resource it references not provisioned), which say
                // nothing about the subscription's budget: the writer of that LB waits them
                // out alone, the others keep writing.
                if !super::retry::is_resource_scoped(&code, &details) {
                    let pause = retry_after.unwrap_or(Duration::from_secs(1));
                    self.budget
                        .lock()
                        .on_throttled(class, pause, tokio::time::Instant::now());
                }
            }
            Err(ArmError::Http {
                op,
                resource: resource.clone(),
                status: answer.status,
                code,
                message,
                details,
                retry_after,
                trace,
            })
        }
        .instrument(span)
        .await
    }

    /// One attempt of a call: budget, token, request, answer, metrics.
    async fn call_once(
        &self,
        (op, class, method, url, request_id): (&'static str, Class, &Method, &Url, &str),
        if_match: Option<&str>,
        body: Option<&ChunkBody>,
        read_as: &mut ReadAs<'_>,
    ) -> Result<Answer, ArmError> {
        self.wait_budget(class).await;
        let token = self.token().await?;
        let resource = url.path().to_string();
        let req = request(method, url, &token, request_id, if_match, body).map_err(|e| {
            ArmError::Transport {
                op,
                resource: resource.clone(),
                message: format!("request: {e}"),
            }
        })?;
        let answer = match self.exchange(op, req, read_as).await {
            Err(None) => {
                self.metrics.arm_request(op, 0);
                return Err(ArmError::Timeout {
                    op,
                    resource,
                    timeout: self.timeout,
                });
            }
            Err(Some(e)) => {
                self.metrics.arm_request(op, 0);
                return Err(ArmError::Transport {
                    op,
                    resource,
                    message: e,
                });
            }
            Ok(a) => a,
        };
        self.metrics.arm_request(op, answer.status);
        self.note_remaining(class, &answer.headers);
        Ok(answer)
    }

    /// Sends `req` and reads its answer as `read_as` says, each within the timeout (waiting
    /// for room in the body budget is not part of it). `Err(None)`: timed out.
    async fn exchange(
        &self,
        op: &'static str,
        req: http::Request<ChunkBody>,
        read_as: &mut ReadAs<'_>,
    ) -> Result<Answer, Option<String>> {
        let timeout = self.timeout;
        let rsp = tokio::time::timeout(timeout, self.http.send(req))
            .await
            .map_err(|_| None)?
            .map_err(|e| Some(e.to_string()))?;
        let (parts, stream) = rsp.into_parts();
        let (status, headers) = (parts.status.as_u16(), parts.headers);
        let ok = (200..300).contains(&status);
        let len = header(&headers, "content-length").and_then(|v| v.trim().parse().ok());
        // Waiting for room is not part of the call's timeout.
        let room = match read_as {
            ReadAs::Budgeted if ok => self.bodies.take(len.unwrap_or(0)).await,
            _ => None,
        };
        let discard = ok && matches!(read_as, ReadAs::Discard);
        let scan = match read_as {
            ReadAs::Scan(state) if ok => Some(&mut **state),
            _ => None,
        };
        let read = async {
            if discard {
                discard_body(stream).await
            } else {
                read_body(stream, len, scan).await
            }
        };
        let (body, read) = tokio::time::timeout(timeout, read)
            .await
            .map_err(|_| None)?
            .map_err(|e| Some(e.to_string()))?;
        self.metrics.arm_response_bytes(op, read);
        Ok(Answer {
            status,
            headers,
            body,
            room,
        })
    }

    /// ARM's count of the requests of `class` left to the subscription, into the metrics and
    /// the budget.
    fn note_remaining(&self, class: Class, headers: &HeaderMap) {
        let remaining_header = match class {
            Class::Read => "x-ms-ratelimit-remaining-subscription-reads",
            Class::Write => "x-ms-ratelimit-remaining-subscription-writes",
        };
        if let Some(rem) =
            header(headers, remaining_header).and_then(|v| v.trim().parse::<u64>().ok())
        {
            self.metrics.remaining(class.label(), rem);
            self.budget
                .lock()
                .on_remaining(class, rem, tokio::time::Instant::now());
        }
    }

    /// GET the load balancer (pools embedded), as raw bytes. `Ok(None)` when it does not exist.
    pub async fn get_lb(&self, lb: &str) -> Result<Option<bytes::Bytes>, ArmError> {
        Ok(self.get_lb_body(lb).await?.map(LbBody::into_bytes))
    }

    /// GET the load balancer into one buffer, once the body budget has room for it.
    pub async fn get_lb_body(&self, lb: &str) -> Result<Option<LbBody>, ArmError> {
        let path = self.lb_id(lb);
        let url = self.url(&path)?;
        match self
            .call_as(
                "get_lb",
                Method::GET,
                url,
                None,
                None,
                ReadAs::Budgeted,
                None,
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
            Ok(a) => Ok(Some(LbBody {
                bytes: a.body,
                _room: a.room,
            })),
        }
    }

    /// GET the load balancer for its etag and `provisioningState` only: the body streams
    /// through a scanner and is never held.
    pub async fn get_lb_state(&self, lb: &str) -> Result<Option<LbState>, ArmError> {
        let path = self.lb_id(lb);
        let url = self.url(&path)?;
        let mut state = LbState::default();
        match self
            .call_as(
                "get_lb_state",
                Method::GET,
                url,
                None,
                None,
                ReadAs::Scan(&mut state),
                None,
            )
            .await
        {
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
            Ok(_) => Ok(Some(state)),
        }
    }

    async fn put(
        &self,
        op: &'static str,
        path: &str,
        body: Spliced,
        if_match: Option<&str>,
        request_id: &str,
    ) -> Result<PutAccepted, ArmError> {
        let body = ChunkBody::new(body.chunks());
        // Only the headers matter: the body echoes the whole LB.
        let a = self
            .call_as(
                op,
                Method::PUT,
                self.url(path)?,
                if_match,
                Some(&body),
                ReadAs::Discard,
                Some(request_id),
            )
            .await?;
        let operation =
            header(&a.headers, "azure-asyncoperation").and_then(|u| Url::parse(&u).ok());
        Ok(PutAccepted {
            operation,
            retry_after: retry_after(&a.headers),
        })
    }

    /// PUT one backend pool with `If-Match`; `request_id` names the logical write (the same
    /// on its retries, see [`new_request_id`]).
    pub async fn put_pool(
        &self,
        lb: &str,
        pool: &str,
        body: Spliced,
        if_match: Option<&str>,
        request_id: &str,
    ) -> Result<PutAccepted, ArmError> {
        let path = format!("{}/backendAddressPools/{pool}", self.lb_id(lb));
        self.put("put_pool", &path, body, if_match, request_id)
            .await
    }

    /// PUT the whole load balancer with `If-Match`; `request_id` as for [`Self::put_pool`].
    pub async fn put_lb(
        &self,
        lb: &str,
        body: Spliced,
        if_match: Option<&str>,
        request_id: &str,
    ) -> Result<PutAccepted, ArmError> {
        let path = self.lb_id(lb);
        self.put("put_lb", &path, body, if_match, request_id).await
    }

    /// GET an `Azure-AsyncOperation` URL once.
    pub async fn poll(&self, operation: &Url) -> Result<OpStatus, ArmError> {
        let a = self
            .call("poll_operation", Method::GET, operation.clone(), None, None)
            .await?;
        let status =
            super::error::parse_operation(&a.body).map_err(|message| ArmError::Decode {
                op: "poll_operation",
                resource: operation.path().to_string(),
                message,
            })?;
        Ok(match status {
            super::error::OperationStatus::Succeeded => OpStatus::Succeeded,
            super::error::OperationStatus::Ended { status, error } => OpStatus::Ended {
                status,
                code: error.code,
                message: error.message,
                details: error.details,
            },
            super::error::OperationStatus::InProgress => OpStatus::InProgress {
                retry_after: retry_after(&a.headers),
            },
        })
    }

    /// LIST the NICs of the node resource group (for standalone VMs), following `nextLink`,
    /// one page at a time into the NIC map (pages are never accumulated). A NIC that cannot be
    /// read ([`crate::lb::nic`]) is logged with its ID and the reason and counted in
    /// `cutover_actuator_nics_unreadable_total`, at every listing; the map keeps the list.
    pub async fn list_nics(&self) -> Result<NicMap, ArmError> {
        let map = self.list_nics_pages().await?;
        self.report_unreadable(map.unreadable());
        Ok(map)
    }

    /// Logs (the first few by name, then how many more) and counts the unreadable NICs of a
    /// listing.
    fn report_unreadable(&self, nics: &[crate::lb::nic::Unreadable]) {
        const NAMED: usize = 10;
        for u in nics.iter().take(NAMED) {
            tracing::warn!(
                nic = %u.nic,
                reason = %u.reason,
                "NIC unreadable: skipped, so backend entries on it match no node"
            );
        }
        if nics.len() > NAMED {
            tracing::warn!(
                more = nics.len() - NAMED,
                "more NICs unreadable in this listing (not named)"
            );
        }
        self.metrics.nics_unreadable(nics.len());
    }

    async fn list_nics_pages(&self) -> Result<NicMap, ArmError> {
        const OP: &str = "list_nics";
        let path = format!(
            "/subscriptions/{}/resourceGroups/{}/providers/Microsoft.Network/networkInterfaces",
            self.scope.subscription_id, self.scope.node_resource_group
        );
        let mut map = NicMap::new();
        let mut url = self.url(&path)?;
        for _page in 0..10_000 {
            let a = match self.call(OP, Method::GET, url.clone(), None, None).await {
                Err(e) if e.is_not_found() => return Ok(map),
                other => other?,
            };
            #[derive(serde::Deserialize)]
            struct Page {
                #[serde(default)]
                value: Vec<Value>,
                #[serde(default, rename = "nextLink")]
                next_link: Option<String>,
            }
            let page: Page = serde_json::from_slice(&a.body).map_err(|e| ArmError::Decode {
                op: OP,
                resource: path.clone(),
                message: e.to_string(),
            })?;
            for nic in &page.value {
                index::add_nic(&mut map, nic);
            }
            match page.next_link.filter(|s| !s.is_empty()) {
                Some(next) => {
                    url = Url::parse(&next).map_err(|e| ArmError::Decode {
                        op: OP,
                        resource: path.clone(),
                        message: format!("bad nextLink: {e}"),
                    })?;
                }
                None => return Ok(map),
            }
        }
        Err(ArmError::Decode {
            op: OP,
            resource: path,
            message: "more than 10,000 pages".into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn retry_after_in_seconds_milliseconds_and_http_dates() {
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7")])),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            retry_after(&headers(&[("retry-after", "7"), ("retry-after-ms", "250")])),
            Some(Duration::from_millis(250))
        );
        let soon = time::OffsetDateTime::now_utc() + time::Duration::seconds(30);
        let date = soon
            .format(&time::format_description::well_known::Rfc2822)
            .unwrap();
        let d = retry_after(&headers(&[("retry-after", &date)])).unwrap();
        assert!(
            d > Duration::from_secs(25) && d <= Duration::from_secs(30),
            "{d:?}"
        );
        assert_eq!(retry_after(&headers(&[("retry-after", "soon")])), None);
        assert_eq!(retry_after(&headers(&[])), None);
    }

    #[test]
    fn cloud_errors_carry_code_message_and_detail_codes() {
        let body = br#"{"error":{"code":"RetryableError","message":"A retryable error occurred.","details":[{"code":"RetryableErrorDueToAnotherOperation","message":"Operation X is updating resource Y."}]}}"#;
        let (code, message, details) = cloud_error(body);
        assert_eq!(code, "RetryableError");
        assert!(message.contains("Operation X is updating"));
        assert_eq!(details, vec!["RetryableErrorDueToAnotherOperation"]);
        assert_eq!(
            cloud_error(b"not json"),
            (String::new(), String::new(), vec![])
        );
    }
}
