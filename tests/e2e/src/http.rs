//! Plain-HTTP GETs against the services' admin ports (readiness probes, metrics).

use bytes::Bytes;
use http_body_util::Empty;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

/// The status code of `GET url`, or `None` if nothing answered within 5 s.
pub async fn get_status(url: &str) -> Option<u16> {
    let uri: hyper::Uri = url.parse().ok()?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(uri))
        .await
        .ok()?
        .ok()?;
    Some(response.status().as_u16())
}

/// The body of `GET url` when it answers 200 within 5 s.
pub async fn get_text(url: &str) -> Option<String> {
    use http_body_util::BodyExt;
    let uri: hyper::Uri = url.parse().ok()?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(uri))
        .await
        .ok()?
        .ok()?;
    if response.status() != 200 {
        return None;
    }
    let body = response.into_body().collect().await.ok()?.to_bytes();
    String::from_utf8(body.to_vec()).ok()
}
