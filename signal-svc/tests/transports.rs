//! signal-svc on transports handed in (`Service::from_parts`), the seam the deterministic
//! simulation swaps: its Kubernetes clients over a `Dialer` (`k8s::client::over`), kube-sim
//! on a handed listener fed by in-memory pipes, the admin port on a handed listener, and the
//! streams to a recording fake actuator opened by the same dialer, by name (the test's dialer
//! reaches the fake over loopback; signal-svc itself neither binds, connects nor resolves).

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use cutover_runtime::dial::{BoxStream, Dialer, Listener};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube_sim::{FailRule, KubeSim, Options, Security, Seed};
use parking_lot::Mutex;
use signal_svc::runtime::{Parts, Service};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const KUBE: (&str, u16) = ("kube.sim", 6443);
const ACTUATOR: (&str, u16) = ("actuator-0.sim", 50051);
const OOS: &str = "node.kubernetes.io/out-of-service";
const LEASE: &str = "cutover-signal-svc";

type Handed = mpsc::Sender<(BoxStream, SocketAddr)>;

/// A tiny network: `kube.sim:6443` is a pipe into kube-sim's handed listener,
/// `actuator-0.sim:50051` the fake actuator (over loopback, the test's own connection);
/// every dial is logged, anything else is refused.
#[derive(Clone)]
struct Net {
    kube: Handed,
    actuator: Option<SocketAddr>,
    dials: Arc<Mutex<Vec<String>>>,
}

impl Net {
    fn dialer(&self) -> Dialer {
        let net = self.clone();
        Dialer::new(move |host, port| {
            let net = net.clone();
            async move {
                net.dials.lock().push(format!("{host}:{port}"));
                if (host.as_str(), port) == KUBE {
                    return pipe(&net.kube).await;
                }
                match net.actuator {
                    Some(addr) if (host.as_str(), port) == ACTUATOR => {
                        let s = tokio::net::TcpStream::connect(addr).await?;
                        s.set_nodelay(true)?;
                        Ok(BoxStream::new(s))
                    }
                    _ => Err(std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!("{host}:{port}: unreachable"),
                    )),
                }
            }
        })
    }
}

/// One in-memory connection handed to a listener; the caller's end is returned.
async fn pipe(to: &Handed) -> std::io::Result<BoxStream> {
    let (near, far) = tokio::io::duplex(256 * 1024);
    to.send((BoxStream::new(far), "10.244.0.9:40000".parse().unwrap()))
        .await
        .map_err(|_| std::io::Error::other("listener gone"))?;
    Ok(BoxStream::new(near))
}

/// kube-sim on a handed listener, reached as `{scheme}://kube.sim:6443`.
async fn kube_sim(nodes: usize, security: Option<Security>) -> (KubeSim, Handed) {
    let (tx, listener) = Listener::handed("10.96.0.1:6443".parse().unwrap());
    let scheme = if security.is_some() { "https" } else { "http" };
    let options = Options {
        seed: Seed::preset("aks", nodes).unwrap(),
        security,
        ..Options::default()
    };
    let url = format!("{scheme}://{}:{}", KUBE.0, KUBE.1);
    let sim = KubeSim::start_on(options, listener, url).await.unwrap();
    (sim, tx)
}

/// One HTTP/1.1 GET on the admin port, through a pipe into its handed listener.
async fn admin_get(admin: &Handed, path: &str) -> (u16, String) {
    let mut s = pipe(admin).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await.unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    (status, body)
}

fn config(identity: &str) -> signal_svc::config::Config {
    config_with(identity, &["--insecure-plaintext".to_owned()])
}

fn config_with(identity: &str, extra: &[String]) -> signal_svc::config::Config {
    use clap::Parser;
    let mut argv = vec![
        "signal-svc".to_owned(),
        "--cluster-name=kubernetes".to_owned(),
        format!("--identity={identity}"),
        "--namespace=cutover".to_owned(),
        format!("--actuator-endpoints={}:{}", ACTUATOR.0, ACTUATOR.1),
    ];
    argv.extend(extra.iter().cloned());
    signal_svc::config::Args::try_parse_from(argv)
        .unwrap()
        .validate()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leads_and_streams_over_handed_transports() {
    let (sim, kube_tx) = kube_sim(6, None).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let net = Net {
        kube: kube_tx,
        actuator: Some(act.addr),
        dials: Arc::default(),
    };
    let dialer = net.dialer();
    let mut kcfg = kube::Config::new(format!("http://{}:{}", KUBE.0, KUBE.1).parse().unwrap());
    kcfg.auth_info.token = Some("signal-svc-token".to_owned().into());
    let (client, lease_client) = signal_svc::k8s::client::over(&kcfg, dialer.clone()).unwrap();

    let (admin_tx, admin) = Listener::handed("10.244.0.5:8080".parse().unwrap());
    let svc = Service::from_parts(
        config("pod-a"),
        Parts {
            client: client.clone(),
            lease_client,
            admin,
            dialer: Some(dialer),
        },
    )
    .unwrap();
    assert_eq!(svc.admin_addr(), "10.244.0.5:8080".parse().unwrap());
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(svc.run(shutdown.clone()));

    // Ready and leading, seen on the handed admin port.
    eventually("ready", || async {
        (admin_get(&admin_tx, "/ready").await.0 == 200).then_some(())
    })
    .await;
    let (_, metrics) = admin_get(&admin_tx, "/metrics").await;
    assert!(
        metrics.lines().any(|l| l == "cutover_signal_leader 1"),
        "{metrics}"
    );

    // The Lease in kube-sim names it.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "cutover");
    let lease = eventually("the Lease", || async {
        leases.get_opt(LEASE).await.unwrap()
    })
    .await;
    assert_eq!(
        lease.spec.unwrap().holder_identity.as_deref(),
        Some("pod-a")
    );

    // The snapshot reached the actuator, then a taint's Down delta.
    let c = Cluster {
        backend: Backend::Sim(sim),
        client,
        dir: tempfile::tempdir().unwrap(),
        kubeconfig: "/nonexistent".into(),
    };
    let names = c.node_names().await;
    eventually("the snapshot", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    for name in &names {
        assert_eq!(
            act.state.latest_state(name),
            Some(AdminState::None),
            "{name}"
        );
    }
    c.add_taint(&names[1], OOS, None, "NoExecute").await;
    eventually("Down delta", || async {
        act.state
            .deltas(&names[1])
            .into_iter()
            .find(|d| d.desired() == AdminState::Down)
    })
    .await;

    // Only the two names were dialed, and kube-sim saw signal-svc's token on its calls.
    let dials = net.dials.lock().clone();
    assert!(dials.iter().any(|d| d == "kube.sim:6443"), "{dials:?}");
    assert!(
        dials.iter().any(|d| d == "actuator-0.sim:50051"),
        "{dials:?}"
    );
    assert!(
        dials
            .iter()
            .all(|d| d == "kube.sim:6443" || d == "actuator-0.sim:50051"),
        "{dials:?}"
    );
    let lease_calls = c
        .sim()
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/leases"))
        .collect::<Vec<_>>();
    assert!(
        lease_calls
            .iter()
            .any(|r| r.method == "POST" || r.method == "PUT")
    );
    assert!(
        lease_calls
            .iter()
            .all(|r| r.caller.as_deref() == Some("signal-svc-token")),
        "{lease_calls:?}"
    );

    shutdown.cancel();
    let r = tokio::time::timeout(Duration::from_secs(30), handle).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "clean exit: {r:?}");
}

/// The two clients stack as `kube::Client::try_from` does: HTTPS with kube's TLS connector
/// over the dialer, the bearer token, kube's retry of a 503 on the main client and none on
/// the lease client.
#[tokio::test]
async fn clients_over_a_dialer_stack_as_kube_does() {
    let (sim, kube_tx) = kube_sim(6, Some(Security { tokens: Vec::new() })).await;
    let net = Net {
        kube: kube_tx,
        actuator: None,
        dials: Arc::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).unwrap();
    let raw = kube::config::Kubeconfig::read_from(&path).unwrap();
    let kcfg = kube::Config::from_custom_kubeconfig(raw, &Default::default())
        .await
        .unwrap();
    assert_eq!(kcfg.cluster_url.scheme_str(), Some("https"));
    let (client, lease_client) = signal_svc::k8s::client::over(&kcfg, net.dialer()).unwrap();

    let path_of = format!("/apis/coordination.k8s.io/v1/namespaces/cutover/leases/{LEASE}");
    let gets = |sim: &KubeSim| {
        sim.requests()
            .into_iter()
            .filter(|r| r.method == "GET" && r.path == path_of)
            .map(|r| (r.status, r.caller))
            .collect::<Vec<_>>()
    };
    let admin = Some(kube_sim::ADMIN_USER.to_owned());

    // Main client: the 503 is retried (after its Retry-After of 1 s), the answer is the 404.
    sim.fail_next(FailRule::new(503, 1).path_prefix(path_of.clone()));
    let main: Api<Lease> = Api::namespaced(client, "cutover");
    assert!(main.get_opt(LEASE).await.unwrap().is_none());
    assert_eq!(gets(&sim), vec![(503, admin.clone()), (404, admin.clone())]);

    // Lease client: the 503 is the answer.
    sim.clear_requests();
    sim.fail_next(FailRule::new(503, 1).path_prefix(path_of.clone()));
    let lease: Api<Lease> = Api::namespaced(lease_client, "cutover");
    match lease.get_opt(LEASE).await.unwrap_err() {
        kube::Error::Api(s) => assert_eq!(s.code, 503, "{s:?}"),
        other => panic!("expected the 503, got {other:?}"),
    }
    assert_eq!(gets(&sim), vec![(503, admin.clone())]);
    assert!(net.dials.lock().iter().all(|d| d == "kube.sim:6443"));

    // A proxy cannot be honoured over a dialer: refused rather than bypassed.
    let mut proxied = kcfg.clone();
    proxied.proxy_url = Some("http://user:pw@proxy.corp:3128".parse().unwrap());
    let Err(e) = signal_svc::k8s::client::over(&proxied, net.dialer()) else {
        panic!("a proxy over a dialer was accepted");
    };
    assert_eq!(
        e.to_string(),
        "proxy proxy.corp:3128: not supported over a dialer (the dialer is the route)"
    );
}

/// A CA, the actuator's server certificate and signal-svc's client certificate (PEM pairs).
fn pki() -> (String, (String, String), (String, String)) {
    use cutover_testkit::{TestCa, certs::Usage};
    let ca = TestCa::new("test CA").unwrap();
    let leaf = |name: &str, usage| {
        let l = ca.issue(&[name], Some(name), None, usage).unwrap();
        (l.cert_pem, l.key_pem)
    };
    let server = leaf("actuator-svc.cutover.svc", Usage::ServerAuth);
    let client = leaf("signal-svc.cutover.svc", Usage::ClientAuth);
    (ca.pem(), server, client)
}

/// The streams' mutual TLS runs over what the dialer opens: the actuator requires signal-svc's
/// client certificate, and signal-svc checks the actuator's against `--tls-server-name`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_over_mtls_through_the_dialer() {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let (ca, server, client_cert) = pki();
    let tls = ServerTlsConfig::new()
        .identity(Identity::from_pem(&server.0, &server.1))
        .client_ca_root(Certificate::from_pem(&ca));
    let act = FakeActuator::start_with("tls", Mode::Effective, Some(tls)).await;
    let (sim, kube_tx) = kube_sim(6, None).await;
    let net = Net {
        kube: kube_tx,
        actuator: Some(act.addr),
        dials: Arc::default(),
    };
    let dialer = net.dialer();
    let kcfg = kube::Config::new(format!("http://{}:{}", KUBE.0, KUBE.1).parse().unwrap());
    let (client, lease_client) = signal_svc::k8s::client::over(&kcfg, dialer.clone()).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, body: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, body).unwrap();
        p.display().to_string()
    };
    let flags = [
        format!("--tls-ca={}", write("ca.crt", &ca)),
        format!("--tls-cert={}", write("tls.crt", &client_cert.0)),
        format!("--tls-key={}", write("tls.key", &client_cert.1)),
        "--tls-server-name=actuator-svc.cutover.svc".to_owned(),
    ];
    let (_admin_tx, admin) = Listener::handed("10.244.0.6:8080".parse().unwrap());
    let svc = Service::from_parts(
        config_with("pod-t", &flags),
        Parts {
            client,
            lease_client,
            admin,
            dialer: Some(dialer),
        },
    )
    .unwrap();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(svc.run(shutdown.clone()));

    eventually("a snapshot over mTLS", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    assert!(net.dials.lock().iter().any(|d| d == "actuator-0.sim:50051"));
    shutdown.cancel();
    let r = tokio::time::timeout(Duration::from_secs(30), handle).await;
    assert!(matches!(r, Ok(Ok(Ok(())))), "clean exit: {r:?}");
    drop(sim);
}
