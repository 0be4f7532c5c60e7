//! mTLS towards the actuator: a client certificate from the configured flags is presented and
//! the actuator's certificate is checked against `--tls-ca` and `--tls-server-name`.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use cutover_testkit::TestCa;
use cutover_testkit::certs::Usage;
use tonic::transport::{Certificate, Identity, ServerTlsConfig};

struct Pki {
    ca: String,
    server: (String, String),
    client: (String, String),
}

/// A CA (the kit's) and a leaf each, named by its DNS SAN and CN.
fn pki() -> Pki {
    let ca = TestCa::new("test CA").unwrap();
    let leaf = |name: &str, usage| {
        let l = ca.issue(&[name], Some(name), None, usage).unwrap();
        (l.cert_pem, l.key_pem)
    };
    Pki {
        server: leaf("actuator-svc.cutover.svc", Usage::ServerAuth),
        client: leaf("signal-svc.cutover.svc", Usage::ClientAuth),
        ca: ca.pem(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_mtls_and_refuses_without_client_cert() {
    let pki = pki();
    let c = cluster(6).await;
    let write = |name: &str, body: &str| {
        let p = c.dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let ca = write("ca.crt", &pki.ca);
    let cert = write("tls.crt", &pki.client.0);
    let key = write("tls.key", &pki.client.1);
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&pki.server.0, &pki.server.1))
        .client_ca_root(Certificate::from_pem(&pki.ca));
    let act = FakeActuator::start_with("tls", Mode::Effective, Some(tls)).await;

    // Without a client certificate signal-svc does not start (a CA alone is not mutual TLS;
    // the actuator would refuse the handshake anyway).
    let err = <signal_svc::config::Args as clap::Parser>::try_parse_from([
        "signal-svc",
        "--cluster-name=kubernetes",
        "--identity=pod-x",
        &format!("--actuator-endpoints={}", act.endpoint()),
        &format!("--tls-ca={ca}"),
        "--tls-server-name=actuator-svc.cutover.svc",
    ])
    .unwrap()
    .validate()
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--tls-cert") && err.contains("--insecure-plaintext"),
        "{err}"
    );
    assert_eq!(act.state.completed_snapshots(), 0);

    let good = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &[
            &format!("--tls-ca={ca}"),
            &format!("--tls-cert={cert}"),
            &format!("--tls-key={key}"),
            "--tls-server-name=actuator-svc.cutover.svc",
        ],
    )
    .await;
    good.wait_ready().await;
    let node = c.node_names().await[0].clone();
    c.add_taint(
        &node,
        "node.kubernetes.io/out-of-service",
        None,
        "NoExecute",
    )
    .await;
    eventually("Down over mTLS", || async {
        (act.state.latest_state(&node) == Some(AdminState::Down)).then_some(())
    })
    .await;
    good.stop().await;
}

/// Writes `pki`'s CA and client certificate the way the kubelet updates a mounted Secret: a new
/// version directory, `..data` swapped to it by a rename, the files symlinks through `..data`.
fn write_secret(dir: &std::path::Path, version: u32, pki: &Pki) {
    let v = format!("..v{version}");
    std::fs::create_dir_all(dir.join(&v)).unwrap();
    let files = [
        ("ca.crt", &pki.ca),
        ("tls.crt", &pki.client.0),
        ("tls.key", &pki.client.1),
    ];
    for (name, body) in files {
        std::fs::write(dir.join(&v).join(name), body).unwrap();
    }
    std::os::unix::fs::symlink(&v, dir.join("..data_tmp")).unwrap();
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
    for (name, _) in files {
        let link = dir.join(name);
        if link.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(std::path::Path::new("..data").join(name), link).unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_client_certificate_and_ca_are_used_on_reconnect() {
    let (old, new) = (pki(), pki());
    let c = cluster(6).await;
    let dir = c.dir.path().join("tls");
    write_secret(&dir, 1, &old);
    // The actuator already moved to the new CA: it presents a certificate the old CA did not
    // sign and admits only clients of the new CA.
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&new.server.0, &new.server.1))
        .client_ca_root(Certificate::from_pem(&new.ca));
    let act = FakeActuator::start_with("tls", Mode::Effective, Some(tls)).await;
    let path = |n: &str| dir.join(n).display().to_string();
    let s = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &[
            &format!("--tls-ca={}", path("ca.crt")),
            &format!("--tls-cert={}", path("tls.crt")),
            &format!("--tls-key={}", path("tls.key")),
            "--tls-server-name=actuator-svc.cutover.svc",
        ],
    )
    .await;
    eventually("refused with the old material", || async {
        (s.metric("cutover_signal_stream_reconnects_total", "").await >= 1.0).then_some(())
    })
    .await;
    assert_eq!(s.get("/ready").await.0, 503);

    // The Secret is updated; the next reconnect reads it, without a restart.
    write_secret(&dir, 2, &new);
    s.wait_ready().await;
    eventually("a snapshot over the new material", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    s.stop().await;
}
