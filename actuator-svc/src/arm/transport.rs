//! The one HTTP client of actuator-svc, for ARM and for tokens: hyper 1's pooled client over
//! rustls 0.23 (ring), the stack kube and tonic already bring into the tree, so the Azure side
//! adds no second HTTP or TLS stack (no reqwest).
//!
//! [`ArmClient`](super::ArmClient) sends its requests here directly; azure_identity's
//! credentials reach it through azure_core's [`HttpClient`] trait (set as the transport of
//! their pipelines in `credentials`).
//!
//! Connections are TCP (`HttpConnector`, through the proxy when the environment names one), or
//! whatever a [`Dialer`] opens ([`Transport::with_dialer`]: the deterministic simulation's
//! network); TLS, HTTP and everything above are the same either way.
//!
//! Trusted roots: the Mozilla roots (webpki-roots, so a distroless image needs no CA bundle),
//! the platform's store (which honours `SSL_CERT_FILE` / `SSL_CERT_DIR`), and any extra PEM
//! certificates the operator names (a private cloud, a TLS-inspecting proxy, the simulators).

use super::body::ChunkBody;
use azure_core::http::headers::{HeaderName, HeaderValue, Headers};
use azure_core::http::{AsyncRawResponse, Body, HttpClient, Request, StatusCode};
use bytes::Bytes;
use cutover_runtime::dial::{Conn, Dialer};
use futures::StreamExt;
use http_body_util::BodyExt;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connect, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioExecutor;
use std::sync::Arc;
use std::time::Duration;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

/// The `User-Agent` of every ARM and token request: support breaks throttling down by user
/// agent (azure-production.md 5). Token requests append the SDK's own after it. A replica's
/// transport names the replica in it ([`Transport::for_replica`]).
pub const USER_AGENT: &str = concat!("cutover/", env!("CARGO_PKG_VERSION"), " (actuator-svc)");

/// [`USER_AGENT`] naming `replica` (its pod): ARM's request logs and a support case then
/// tell which replica sent a write, as two writers of one load balancer would need.
/// Characters outside RFC 9110's token set become `-`, and the name is cut at 63 characters
/// (a pod name's limit).
pub fn user_agent(replica: &str) -> String {
    let name: String = replica
        .chars()
        .take(63)
        .map(|c| {
            if c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c) {
                c
            } else {
                '-'
            }
        })
        .collect();
    format!(
        "cutover/{} (actuator-svc; replica={name})",
        env!("CARGO_PKG_VERSION")
    )
}

/// How long a TCP connect may take before the attempt fails (and is retried by the caller).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Idle pooled connections are closed after this (ARM's front ends close theirs after ~4 min).
const POOL_IDLE: Duration = Duration::from_secs(90);
/// Bound on one token request through [`HttpClient`]; azure_core's retry policy may try again.
const TOKEN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest read from an ARM connection (see `client`).
pub const PROBE_READ_MAX: usize = 64 * 1024;

/// A transport that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    #[error("{path}: {message}")]
    Ca { path: String, message: String },
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

/// A sent request that did not produce a response.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SendError(String);

/// The shared HTTPS client. Cheap to clone (one connection pool).
#[derive(Clone)]
pub struct Transport {
    client: Clients,
    /// Sent as `User-Agent` by requests that name none.
    agent: http::HeaderValue,
}

/// The one client, by how it connects (the connector is part of hyper's client type).
#[derive(Clone)]
enum Clients {
    Tcp(Client<HttpsConnector<ProxyConnector>, ChunkBody>),
    Dialer(Client<HttpsConnector<ProxyConnector<Dialed>>, ChunkBody>),
}

/// A [`Dialer`] bounded by [`CONNECT_TIMEOUT`], as the TCP connector is.
#[derive(Clone)]
struct Dialed(Dialer);

impl tower::Service<http::Uri> for Dialed {
    type Response = Conn;
    type Error = std::io::Error;
    type Future = futures::future::BoxFuture<'static, std::io::Result<Conn>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let connecting = self.0.call(dst);
        Box::pin(async move {
            tokio::time::timeout(CONNECT_TIMEOUT, connecting)
                .await
                .map_err(|_| {
                    std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!("connect timed out after {CONNECT_TIMEOUT:?}"),
                    )
                })?
        })
    }
}

/// Opens connections directly (`C`: TCP, or a [`Dialer`]), or through an HTTP proxy's `CONNECT`
/// tunnel (opened with `C` too) when the proxy settings name one for the destination (AKS's HTTP proxy feature injects
/// `HTTPS_PROXY`/`NO_PROXY` into every pod, and where only the proxy leads out, ARM and Azure
/// AD are reached only through it; azure-production.md 4). TLS runs end to end inside the
/// tunnel. Only https destinations are tunnelled: plain http goes only to the managed-identity
/// endpoint (169.254.169.254, in AKS's default `NO_PROXY`) or to loopback.
#[derive(Clone)]
pub struct ProxyConnector<C = HttpConnector> {
    direct: C,
    matcher: Arc<Matcher>,
    /// Destinations already logged as reached through the proxy (logged once each).
    logged: Arc<parking_lot::Mutex<std::collections::BTreeSet<String>>>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<C> tower::Service<http::Uri> for ProxyConnector<C>
where
    C: tower::Service<http::Uri> + Clone + Send + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
    C::Future: Send + 'static,
    C::Error: Into<BoxError>,
{
    type Response = C::Response;
    type Error = BoxError;
    type Future = std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<Self::Response, BoxError>> + Send>,
    >;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), BoxError>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: http::Uri) -> Self::Future {
        let via = match dst.scheme_str() {
            Some("https") => self.matcher.intercept(&dst),
            _ => None,
        };
        let mut direct = self.direct.clone();
        let Some(proxy) = via else {
            return Box::pin(async move { direct.call(dst).await.map_err(Into::into) });
        };
        let proxy_uri = proxy.uri().clone();
        let target = dst.authority().map(|a| a.to_string()).unwrap_or_default();
        if self.logged.lock().insert(target.clone()) {
            // The proxy's URI may carry credentials: only its host and port are logged.
            tracing::info!(destination = %target, proxy = %proxy_uri.authority().map(|a| a.host()).unwrap_or_default(), port = proxy_uri.port_u16(), "reaching Azure through the HTTPS proxy");
        }
        let mut tunnel = Tunnel::new(proxy_uri.clone(), direct);
        if let Some(auth) = proxy.basic_auth() {
            tunnel = tunnel.with_auth(auth.clone());
        }
        Box::pin(async move {
            tunnel.call(dst).await.map_err(|e| {
                let host = proxy_uri.host().unwrap_or_default().to_string();
                let message = format!("through the HTTPS proxy {host} to {target}: {e}");
                BoxError::from(message)
            })
        })
    }
}

impl std::fmt::Debug for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transport").finish_non_exhaustive()
    }
}

/// Reads every certificate of a PEM file (the `--azure-ca-file` flag).
pub fn read_ca_file(
    path: &std::path::Path,
) -> Result<Vec<CertificateDer<'static>>, TransportError> {
    let bad = |message: String| TransportError::Ca {
        path: path.display().to_string(),
        message,
    };
    let pem = std::fs::read(path).map_err(|e| bad(e.to_string()))?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(e.to_string()))?;
    if certs.is_empty() {
        return Err(bad("no PEM certificate in it".into()));
    }
    Ok(certs)
}

impl Transport {
    /// A client trusting the built-in and platform roots plus `extra_roots`, reaching https
    /// destinations through the proxy `HTTPS_PROXY` (or `ALL_PROXY`, upper or lower case)
    /// names unless `NO_PROXY` covers them (hosts, domains and their subdomains, IPs, CIDRs,
    /// `*`: curl's rules, as hyper-util reads them).
    pub fn new(extra_roots: &[CertificateDer<'static>]) -> Result<Self, TransportError> {
        Self::with_proxy(extra_roots, Matcher::from_env())
    }

    /// [`Transport::new`] with explicit proxy settings instead of the environment's.
    pub fn with_proxy(
        extra_roots: &[CertificateDer<'static>],
        proxy: Matcher,
    ) -> Result<Self, TransportError> {
        let tls = tls_config(extra_roots)?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(CONNECT_TIMEOUT));
        http.set_nodelay(true);
        Ok(Self {
            client: Clients::Tcp(client(https(tls, http, proxy))),
            agent: http::HeaderValue::from_static(USER_AGENT),
        })
    }

    /// The same client (roots, TLS, HTTP settings, pool) over connections `dialer` opens:
    /// no TCP connect and no DNS lookup of its own, and no proxy (the environment's proxy
    /// settings are not read). Each dial is bounded by the same connect timeout.
    pub fn with_dialer(
        extra_roots: &[CertificateDer<'static>],
        dialer: Dialer,
    ) -> Result<Self, TransportError> {
        Self::with_dialer_and_proxy(extra_roots, dialer, Matcher::builder().build())
    }

    /// [`Transport::with_dialer`] reaching https destinations through the proxy `proxy` names,
    /// as [`Transport::with_proxy`] does (the tunnel to the proxy is dialled too).
    pub fn with_dialer_and_proxy(
        extra_roots: &[CertificateDer<'static>],
        dialer: Dialer,
        proxy: Matcher,
    ) -> Result<Self, TransportError> {
        let tls = tls_config(extra_roots)?;
        Ok(Self {
            client: Clients::Dialer(client(https(tls, Dialed(dialer), proxy))),
            agent: http::HeaderValue::from_static(USER_AGENT),
        })
    }

    /// The same client, its requests naming `replica` in their `User-Agent` ([`user_agent`]).
    pub fn for_replica(mut self, replica: &str) -> Self {
        // user_agent keeps only token characters: always a valid header value.
        if let Ok(agent) = http::HeaderValue::from_str(&user_agent(replica)) {
            self.agent = agent;
        }
        self
    }

    /// Sends one request (with this transport's `User-Agent` unless it names one); the
    /// response body is read by the caller.
    pub async fn send(
        &self,
        mut req: http::Request<ChunkBody>,
    ) -> Result<http::Response<hyper::body::Incoming>, SendError> {
        req.headers_mut()
            .entry(http::header::USER_AGENT)
            .or_insert_with(|| self.agent.clone());
        let sent = match &self.client {
            Clients::Tcp(c) => c.request(req).await,
            Clients::Dialer(c) => c.request(req).await,
        };
        sent.map_err(|e| {
            // hyper-util's error says "client error (Connect)"; the cause says what happened.
            let mut message = e.to_string();
            let mut source = std::error::Error::source(&e);
            while let Some(s) = source {
                message.push_str(": ");
                message.push_str(&s.to_string());
                source = s.source();
            }
            SendError(message)
        })
    }
}

/// The TLS client configuration: the built-in and platform roots plus `extra_roots`.
fn tls_config(
    extra_roots: &[CertificateDer<'static>],
) -> Result<rustls::ClientConfig, TransportError> {
    let mut roots = rustls::RootCertStore::empty();
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    let native = rustls_native_certs::load_native_certs();
    for e in &native.errors {
        tracing::debug!(error = %e, "platform certificate store");
    }
    let (_, unusable) = roots.add_parsable_certificates(native.certs);
    if unusable > 0 {
        tracing::debug!(unusable, "platform certificates skipped");
    }
    for cert in extra_roots {
        roots.add(cert.clone())?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// TLS (https) or not (http) over `direct`, through the proxy `proxy` names.
fn https<C>(
    tls: rustls::ClientConfig,
    direct: C,
    proxy: Matcher,
) -> HttpsConnector<ProxyConnector<C>> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .wrap_connector(ProxyConnector {
            direct,
            matcher: Arc::new(proxy),
            logged: Default::default(),
        })
}

/// The pooled client over `connector`.
fn client<C: Connect + Clone>(connector: C) -> Client<C, ChunkBody> {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(POOL_IDLE)
        // Reads of at most 64 KiB: a completion probe that stops at the LB's
        // provisioningState then takes at most that much of a 16 MB document off the
        // socket (hyper's adaptive buffer would grow to 400 KiB on a connection that
        // carried whole documents); a whole read costs a few hundred more syscalls.
        .http1_max_buf_size(PROBE_READ_MAX)
        .build(connector)
}

fn io_error(message: String) -> azure_core::Error {
    azure_core::Error::with_message(azure_core::error::ErrorKind::Io, message)
}

/// azure_identity's credentials send their token requests through this (small bodies, read
/// whole by the pipeline).
#[async_trait::async_trait]
impl HttpClient for Transport {
    async fn execute_request(&self, request: &Request) -> azure_core::Result<AsyncRawResponse> {
        let body = match request.body() {
            Body::Bytes(b) => ChunkBody::new(vec![b.clone()]),
            Body::SeekableStream(_) => {
                return Err(io_error("streamed request bodies are not used here".into()));
            }
        };
        let mut builder = http::Request::builder()
            .method(request.method().as_str())
            .uri(request.url().as_str());
        let ours = self.agent.to_str().unwrap_or(USER_AGENT);
        let mut agent = ours.to_string();
        for (name, value) in request.headers().iter() {
            if name.as_str().eq_ignore_ascii_case("user-agent") {
                // Ours first, then the SDK's component (azure_identity's).
                agent = format!("{ours} {}", value.as_str());
                continue;
            }
            builder = builder.header(name.as_str(), value.as_str());
        }
        builder = builder.header("user-agent", agent);
        let req = builder
            .body(body)
            .map_err(|e| io_error(format!("request: {e}")))?;
        let rsp = tokio::time::timeout(TOKEN_REQUEST_TIMEOUT, self.send(req))
            .await
            .map_err(|_| io_error(format!("no answer in {TOKEN_REQUEST_TIMEOUT:?}")))?
            .map_err(|e| io_error(e.to_string()))?;
        let (parts, body) = rsp.into_parts();
        let mut headers = Headers::new();
        for (name, value) in &parts.headers {
            if let Ok(v) = value.to_str() {
                headers.insert(
                    HeaderName::from(name.as_str().to_owned()),
                    HeaderValue::from(v.to_owned()),
                );
            }
        }
        let stream = body
            .into_data_stream()
            .map(|chunk| chunk.map_err(|e| io_error(format!("response body: {e}"))));
        Ok(AsyncRawResponse::new(
            StatusCode::from(parts.status.as_u16()),
            headers,
            Box::pin(stream.map(|r: azure_core::Result<Bytes>| r)),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_replica_as_a_valid_header_value() {
        let agent = user_agent("actuator-svc-7d9f8-x2k4q");
        assert!(agent.starts_with("cutover/"), "{agent}");
        assert!(
            agent.ends_with("(actuator-svc; replica=actuator-svc-7d9f8-x2k4q)"),
            "{agent}"
        );
        // Whatever --identity holds, the header stays valid and bounded.
        let odd = user_agent(&format!("a b/c\u{e9}\n{}", "x".repeat(100)));
        assert!(http::HeaderValue::from_str(&odd).is_ok(), "{odd}");
        assert!(odd.contains("replica=a-b-c--x"), "{odd}");
        assert!(odd.len() < USER_AGENT.len() + 80, "{odd}");
    }
}
