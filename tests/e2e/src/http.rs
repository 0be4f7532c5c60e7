//! Plain-HTTP GETs against the services' admin ports (probes, metrics).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

async fn get(url: &str) -> Option<(u16, Bytes)> {
    let uri: hyper::Uri = url.parse().ok()?;
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let response = tokio::time::timeout(Duration::from_secs(5), client.get(uri))
        .await
        .ok()?
        .ok()?;
    let status = response.status().as_u16();
    let body = tokio::time::timeout(Duration::from_secs(5), response.into_body().collect())
        .await
        .ok()?
        .ok()?
        .to_bytes();
    Some((status, body))
}

/// The status code of `GET url`, or `None` if nothing answered.
pub async fn get_status(url: &str) -> Option<u16> {
    get(url).await.map(|(status, _)| status)
}

/// The body of `GET url` when it answers 200.
pub async fn get_text(url: &str) -> Option<String> {
    match get(url).await? {
        (200, body) => String::from_utf8(body.to_vec()).ok(),
        _ => None,
    }
}

/// The value of one Prometheus sample (`name{labels}` exactly as exposed, or a bare name).
pub fn metric(text: &str, series: &str) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok()).flatten()
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn metric_finds_exact_series() {
        let text = "# HELP x\nx_total 3\nx_total{a=\"b\"} 5\ny 1.5\n";
        assert_eq!(super::metric(text, "x_total"), Some(3.0));
        assert_eq!(super::metric(text, "x_total{a=\"b\"}"), Some(5.0));
        assert_eq!(super::metric(text, "y"), Some(1.5));
        assert_eq!(super::metric(text, "z"), None);
    }
}
