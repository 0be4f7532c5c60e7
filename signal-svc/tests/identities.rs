//! Issue 29 item 2, signal-svc's side: the actuator identity signal-svc trusts is
//! `--tls-server-name`, checked as a DNS subject alternative name of the actuator's serving
//! certificate, exactly (rustls/webpki: never the subject CN, no prefix or suffix; the
//! certificate must chain to `--tls-ca`). An actuator whose certificate does not carry it gets
//! no stream: signal-svc keeps reconnecting and stays not ready. And plaintext only with
//! `--insecure-plaintext`, shown by `cutover_signal_insecure_plaintext`.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_testkit::TestCa;
use cutover_testkit::certs::Usage;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

const ACTUATOR: &str = "actuator-svc.cutover.svc";

/// A certificate with exactly `sans` (URIs when they contain `://`) and the CN `cn`.
fn leaf(ca: &TestCa, sans: &[&str], cn: Option<&str>, usage: Usage) -> (String, String) {
    let l = ca.issue(sans, cn, None, usage).unwrap();
    (l.cert_pem, l.key_pem)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_actuator_must_present_the_expected_name_as_a_san_never_as_the_cn() {
    let ca = TestCa::new("identities test CA").unwrap();
    let c = cluster(6).await;
    let write = |name: &str, body: &str| {
        let p = c.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let ca_file = write("ca.crt", &ca.pem());
    let (cert, key) = leaf(
        &ca,
        &["spiffe://cluster.local/ns/cutover/sa/signal-svc"],
        None,
        Usage::ClientAuth,
    );
    let cert = write("tls.crt", &cert);
    let key = write("tls.key", &key);
    let flags = [
        format!("--tls-ca={ca_file}"),
        format!("--tls-cert={cert}"),
        format!("--tls-key={key}"),
        format!("--tls-server-name={ACTUATOR}"),
    ];
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let serving = |sans: &[&str], cn: Option<&str>| {
        let (cert, key) = leaf(&ca, sans, cn, Usage::ServerAuth);
        ServerTlsConfig::new()
            .identity(Identity::from_pem(cert, key))
            .client_ca_root(Certificate::from_pem(ca.pem()))
    };

    let refused: [(&str, &[&str], Option<&str>); 4] = [
        ("cn-only", &[], Some(ACTUATOR)),
        (
            "suffix",
            &["actuator-svc.cutover.svc.evil.example"],
            Some(ACTUATOR),
        ),
        ("prefix", &["x.actuator-svc.cutover.svc"], None),
        (
            "uri-same-text",
            &["spiffe://actuator-svc.cutover.svc"],
            Some(ACTUATOR),
        ),
    ];
    for (i, (label, sans, cn)) in refused.into_iter().enumerate() {
        let act = FakeActuator::start_with(label, Mode::Effective, Some(serving(sans, cn))).await;
        let s = start(&c, &format!("pod-{i}"), &[act.endpoint()], &flags).await;
        eventually(&format!("{label}: reconnect attempts"), || async {
            (s.metric("cutover_signal_stream_reconnects_total", "").await >= 2.0).then_some(())
        })
        .await;
        assert_eq!(s.get("/ready").await.0, 503, "{label}");
        assert_eq!(
            act.state.completed_snapshots(),
            0,
            "{label}: a stream got through"
        );
        s.stop().await;
    }

    // The name as a DNS SAN (no CN at all): the stream flows.
    let act =
        FakeActuator::start_with("exact", Mode::Effective, Some(serving(&[ACTUATOR], None))).await;
    let s = start(&c, "pod-ok", &[act.endpoint()], &flags).await;
    s.wait_ready().await;
    // Ready once the snapshot is sent; the actuator may still be reading it.
    eventually("the snapshot reaches the actuator", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    assert_eq!(s.metric("cutover_signal_insecure_plaintext", "").await, 0.0);
    s.stop().await;
}

/// Plaintext only when said: with `--insecure-plaintext` (the harness passes it when a test
/// gives no TLS flag) signal-svc streams and says so in its metric; without it, or with a CA
/// alone, it does not start (tests/tls.rs and config's unit tests name the refusal).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_streams_only_with_the_flag_and_the_metric_reads_1() {
    let c = cluster(6).await;
    let act = FakeActuator::start("plain", Mode::Effective).await;
    let s = start(&c, "pod-plain", &[act.endpoint()], &[]).await;
    s.wait_ready().await;
    assert_eq!(s.metric("cutover_signal_insecure_plaintext", "").await, 1.0);
    s.stop().await;
    let err = <signal_svc::config::Args as clap::Parser>::try_parse_from([
        "signal-svc",
        "--cluster-name=kubernetes",
        "--identity=pod-x",
        &format!("--actuator-endpoints={}", act.endpoint()),
    ])
    .unwrap()
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--tls-ca") && err.contains("--insecure-plaintext"),
        "{err}"
    );
}
