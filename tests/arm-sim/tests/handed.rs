//! `ArmSim::start_on`: the same API on streams handed in (no socket), plain or TLS by the
//! first byte, its URLs and certificate naming the authority it was given.
#![allow(clippy::unwrap_used)] // tests may unwrap (helpers outside #[test] fns too)

use arm_sim::{ArmSim, ArmSimOptions};
use bytes::Bytes;
use cutover_runtime::dial::{BoxStream, Dialer, Listener};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::CertificateDer;
use tokio_rustls::rustls::pki_types::pem::PemObject;

const LOCAL: &str = "10.0.0.4:443";

/// arm-sim on a handed listener under `arm:443`, and a dialer whose streams reach it only when
/// dialled as `arm:443` (counted).
async fn sim_on_handed(tls: bool) -> (ArmSim, Dialer, Arc<AtomicUsize>) {
    let (tx, listener) = Listener::handed(LOCAL.parse().unwrap());
    let options = ArmSimOptions {
        tls,
        ..ArmSimOptions::preset("aks").unwrap()
    };
    let sim = ArmSim::start_on(options, listener, "arm:443")
        .await
        .unwrap();
    let dialled = Arc::new(AtomicUsize::new(0));
    let count = dialled.clone();
    let dialer = Dialer::new(move |host, port| {
        let (tx, count) = (tx.clone(), count.clone());
        async move {
            if (host.as_str(), port) != ("arm", 443) {
                return Err(std::io::Error::other(format!("no route to {host}:{port}")));
            }
            count.fetch_add(1, Ordering::SeqCst);
            let (ours, theirs) = tokio::io::duplex(64 * 1024);
            let peer: SocketAddr = "10.0.0.9:50000".parse().unwrap();
            tx.send((BoxStream::new(theirs), peer))
                .await
                .map_err(|_| std::io::Error::other("arm-sim is gone"))?;
            Ok(BoxStream::new(ours))
        }
    });
    (sim, dialer, dialled)
}

/// An HTTPS client trusting only the simulator's CA, over `dialer`.
fn https_client(
    sim: &ArmSim,
    dialer: Dialer,
) -> Client<hyper_rustls::HttpsConnector<Dialer>, Full<Bytes>> {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(sim.ca_pem().unwrap().as_bytes()) {
        roots.add(c.unwrap()).unwrap();
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .wrap_connector(dialer);
    Client::builder(TokioExecutor::new()).build(connector)
}

async fn send(
    client: &Client<hyper_rustls::HttpsConnector<Dialer>, Full<Bytes>>,
    req: http::Request<Full<Bytes>>,
) -> (u16, serde_json::Value) {
    let rsp = client.request(req).await.unwrap();
    let status = rsp.status().as_u16();
    let body = rsp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or_default())
}

#[tokio::test]
async fn a_handed_listener_serves_tls_under_the_authority_given() {
    let (sim, dialer, dialled) = sim_on_handed(true).await;
    assert_eq!(sim.url(), "https://arm:443");
    assert_eq!(sim.https_url(), "https://arm:443");
    assert_eq!(sim.aad_authority(), "https://arm:443");
    assert_eq!(sim.identity_endpoint(), "https://arm:443/msi/token");
    assert_eq!(sim.authority(), "arm:443");
    assert_eq!(sim.addr(), LOCAL.parse::<SocketAddr>().unwrap());

    // The certificate is valid for "arm": rustls checks the name it dialled.
    let client = https_client(&sim, dialer);
    let c = sim.credentials();
    let form = format!(
        "grant_type=client_credentials&scope=https://management.azure.com/.default&client_id={}&client_secret={}",
        c.client_id, c.client_secret
    );
    let req = http::Request::post(format!("{}/{}/oauth2/v2.0/token", sim.url(), c.tenant_id))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(Full::new(Bytes::from(form)))
        .unwrap();
    let (status, body) = send(&client, req).await;
    assert_eq!(status, 200, "{body}");
    let token = body["access_token"].as_str().unwrap().to_owned();

    let lb = format!(
        "{}/subscriptions/{}/resourceGroups/MC_cutover-rg_cutover_eastus/providers/Microsoft.Network/loadBalancers/kubernetes?api-version=2024-03-01",
        sim.url(),
        c.subscription_id
    );
    let req = http::Request::get(lb)
        .header("authorization", format!("Bearer {token}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    let (status, body) = send(&client, req).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["name"], "kubernetes");
    // Links the simulator writes name the authority.
    let discovery = http::Request::get(format!(
        "{}/{}/v2.0/.well-known/openid-configuration",
        sim.url(),
        c.tenant_id
    ))
    .body(Full::new(Bytes::new()))
    .unwrap();
    let (status, body) = send(&client, discovery).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["token_endpoint"]
            .as_str()
            .unwrap()
            .starts_with("https://arm:443/"),
        "{body}"
    );
    assert!(dialled.load(Ordering::SeqCst) >= 1);
    assert!(sim.requests().iter().any(|r| r.status == 200));
    sim.shutdown().await;
}

#[tokio::test]
async fn a_handed_listener_still_serves_plain_http_by_the_first_byte() {
    let (sim, dialer, _) = sim_on_handed(false).await;
    assert_eq!(sim.url(), "http://arm:443");
    assert_eq!(sim.https_url(), "https://arm:443");
    let mut s = dialer.dial("arm", 443).await.unwrap();
    s.write_all(b"GET /nothing-here HTTP/1.0\r\nHost: arm\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.") && answer[8..].starts_with(" 4"),
        "{answer}"
    );
}

#[tokio::test]
async fn a_closed_handed_listener_keeps_the_simulator_up_until_shutdown() {
    let (tx, listener) = Listener::handed(LOCAL.parse().unwrap());
    let sim = ArmSim::start_on(ArmSimOptions::default(), listener, "arm:443")
        .await
        .unwrap();
    drop(tx);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert_eq!(sim.url(), "http://arm:443");
    tokio::time::timeout(std::time::Duration::from_secs(5), sim.shutdown())
        .await
        .expect("shutdown ends the accept loop");
}

#[tokio::test]
async fn a_bad_authority_is_refused() {
    for bad in ["", "arm:notaport", "user@arm:443", "/path"] {
        let (_tx, listener) = Listener::handed(LOCAL.parse().unwrap());
        let e = ArmSim::start_on(ArmSimOptions::default(), listener, bad)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("authority"), "{bad}: {e}");
    }
}
