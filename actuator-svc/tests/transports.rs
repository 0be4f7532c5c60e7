//! The transport seams (`runtime::start_with`, `Transport::with_dialer`, `ArmSim::start_on`):
//! the actuator and arm-sim over in-memory streams, no socket for ARM, Azure AD or gRPC. arm-sim
//! is reached as `arm:443` (not loopback, so https is required and its certificate must name
//! `arm`), the actuator as `actuator:9443` with mutual TLS: client identities reach the
//! allow-lists as over TCP.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[path = "integration/common.rs"]
mod common;

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::runtime::{self, Running, Transports};
use arm_sim::{ArmSim, ArmSimOptions};
use clap::Parser;
use common::*;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use cutover_runtime::dial::{BoxStream, Dialer, Listener};
use cutover_testkit::TestCa;
use cutover_testkit::certs::Usage;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tonic::Code;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

const ARM: (&str, u16) = ("arm", 443);
const TOOL_DNS: &str = "cutoverctl.cutover.svc";
const SIGNAL_DNS: &str = "signal-svc.cutover.svc";

type Handed = mpsc::Sender<(BoxStream, SocketAddr)>;
/// A host and port a listener is reachable at, and its sender.
type Route = ((String, u16), Handed);

/// A dialer reaching each named host:port through its handed listener's sender, over
/// `tokio::io::duplex` pairs; every other destination is refused. Records what was dialled.
#[derive(Clone, Default)]
struct Net {
    routes: Arc<Mutex<Vec<Route>>>,
    dialled: Arc<Mutex<Vec<(String, u16)>>>,
}

impl Net {
    /// A handed listener at `local` reachable as `host:port`.
    fn listen(&self, host: &str, port: u16, local: &str) -> Listener {
        let (tx, listener) = Listener::handed(local.parse().unwrap());
        self.routes.lock().push(((host.to_owned(), port), tx));
        listener
    }

    fn dialer(&self, from: &'static str) -> Dialer {
        let net = self.clone();
        Dialer::new(move |host, port| {
            net.dialled.lock().push((host.clone(), port));
            let route = net
                .routes
                .lock()
                .iter()
                .find(|(to, _)| to.0 == host && to.1 == port)
                .map(|(_, tx)| tx.clone());
            async move {
                let tx = route.ok_or_else(|| {
                    std::io::Error::new(
                        std::io::ErrorKind::ConnectionRefused,
                        format!("no route to {host}:{port}"),
                    )
                })?;
                let (ours, theirs) = tokio::io::duplex(256 * 1024);
                tx.send((BoxStream::new(theirs), from.parse().unwrap()))
                    .await
                    .map_err(|_| std::io::Error::other("listener gone"))?;
                Ok(BoxStream::new(ours))
            }
        })
    }

    fn dialled(&self) -> Vec<(String, u16)> {
        self.dialled.lock().clone()
    }
}

/// arm-sim (TLS, the `aks` preset, fast) on the network as `arm:443`.
async fn sim_on(net: &Net) -> (ArmSim, aks_fixture::Cluster) {
    let listener = net.listen(ARM.0, ARM.1, "10.0.0.4:443");
    let options = ArmSimOptions {
        tls: true,
        tuning: fast_tuning(),
        ..ArmSimOptions::preset("aks").unwrap()
    };
    let sim = ArmSim::start_on(options, listener, "arm:443")
        .await
        .unwrap();
    (sim, aks_fixture::preset("aks").unwrap())
}

/// The actuator's flags against `sim` with mutual TLS (serving as `actuator`), files in `dir`.
/// No listen flag: `start_with` takes its listeners.
fn flags(sim: &ArmSim, cluster: &aks_fixture::Cluster, ca: &TestCa, dir: &Path) -> Vec<String> {
    let config = write_config(dir, cluster);
    let leaf = ca
        .issue(&["actuator"], Some("actuator"), None, Usage::ServerAuth)
        .unwrap();
    let (cert, key) = (leaf.cert_pem, leaf.key_pem);
    let file = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.to_str().unwrap().to_owned()
    };
    let mut args: Vec<String> = vec![
        "actuator-svc".into(),
        "--cloud-config".into(),
        config.to_str().unwrap().into(),
        "--poll-interval".into(),
        "50ms".into(),
        "--self-heal-interval".into(),
        "1h".into(),
        "--shutdown-grace".into(),
        "10s".into(),
        "--identity".into(),
        "test-actuator".into(),
        "--standalone".into(),
        "--tls-cert".into(),
        file("tls.crt", &cert),
        "--tls-key".into(),
        file("tls.key", &key),
        "--tls-client-ca".into(),
        file("ca.crt", &ca.pem()),
        format!("--signal-clients={SIGNAL_DNS}"),
        format!("--tool-clients={TOOL_DNS}"),
    ];
    // ARM and Azure AD at https://arm:443, trusting arm-sim's CA (--azure-ca-file).
    args.extend(sim_args(sim, &config));
    assert_eq!(sim.url(), "https://arm:443");
    assert_eq!(sim.aad_authority(), "https://arm:443");
    args
}

/// One HTTP/1.0 GET over a stream handed to the admin listener: (status, body).
async fn admin_get(admin: &Handed, path: &str) -> (u16, String) {
    let (mut ours, theirs) = tokio::io::duplex(64 * 1024);
    if admin
        .send((BoxStream::new(theirs), "10.0.0.9:40000".parse().unwrap()))
        .await
        .is_err()
    {
        return (0, String::new());
    }
    ours.write_all(format!("GET {path} HTTP/1.0\r\nHost: actuator\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = ours.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (status, body)
}

/// A gRPC client of `actuator:9443` over `dialer`, presenting a certificate for `dns`.
async fn client(
    dialer: Dialer,
    ca: &TestCa,
    dns: &str,
) -> ActuatorClient<tonic::transport::Channel> {
    let leaf = ca.client(&[dns]).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca.pem()))
        .identity(Identity::from_pem(leaf.cert_pem, leaf.key_pem))
        .domain_name("actuator");
    let channel = Endpoint::from_static("https://actuator:9443")
        .tls_config(tls)
        .unwrap()
        .connect_with_connector(dialer)
        .await
        .unwrap();
    ActuatorClient::new(channel)
}

struct Started {
    running: Running,
    admin: Handed,
    _dir: tempfile::TempDir,
}

/// The actuator with `start_with`: its gRPC listener on the network as `actuator:9443`, its
/// admin listener fed directly, its dialer on the network; waits until ready.
async fn start_actuator_on(
    net: &Net,
    sim: &ArmSim,
    cluster: &aks_fixture::Cluster,
    ca: &TestCa,
) -> Started {
    let dir = tempfile::tempdir().unwrap();
    let args = Args::try_parse_from(flags(sim, cluster, ca, dir.path())).unwrap();
    let grpc = net.listen("actuator", 9443, "10.0.0.2:9443");
    let (admin, admin_listener) = Listener::handed("10.0.0.2:9091".parse().unwrap());
    let running = runtime::start_with(
        args,
        EnvOverrides::default(),
        Transports {
            grpc,
            admin: admin_listener,
            dialer: Some(net.dialer("10.0.0.2:0")),
        },
    )
    .await
    .expect("actuator starts");
    assert_eq!(running.grpc_addr.to_string(), "10.0.0.2:9443");
    assert_eq!(running.admin_addr.to_string(), "10.0.0.2:9091");
    let probe = admin.clone();
    wait_until("actuator ready", || {
        let probe = probe.clone();
        async move { admin_get(&probe, "/ready").await.0 == 200 }
    })
    .await;
    Started {
        running,
        admin,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_set_down_over_handed_streams_is_down_in_arm() {
    let net = Net::default();
    let (sim, cluster) = sim_on(&net).await;
    let ca = TestCa::new("transports test CA").unwrap();
    let a = start_actuator_on(&net, &sim, &cluster, &ca).await;

    // The token came from arm-sim's Azure AD over the dialer, and the pool index from its ARM.
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.path.contains("/oauth2/v2.0/token") && r.status == 200),
        "{:?}",
        sim.requests()
    );

    let mut tool = client(net.dialer("10.0.0.7:0"), &ca, TOOL_DNS).await;
    let node = &cluster.nodes[4];
    let rsp = tool
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert!(!rsp.timed_out);
    let result = rsp.result.unwrap();
    assert_eq!(phase(&result), ResultPhase::Effective, "{result:?}");
    assert!(
        all_are(&sim, &cluster, node, "Down"),
        "{:?}",
        sim_states(&sim, &cluster, node)
    );
    assert!(all_are(&sim, &cluster, &cluster.nodes[5], "None"));
    assert!(
        sim.effective_log()
            .iter()
            .any(|e| e.value == arm_sim::model::AdminState::Down),
        "{:?}",
        sim.effective_log()
    );

    // Client identities reach the allow-lists through handed streams as through TCP: the
    // signal identity may not call tool RPCs, and a tool may not open the stream.
    let mut signal = client(net.dialer("10.0.0.8:0"), &ca, SIGNAL_DNS).await;
    let refused = signal
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), Code::PermissionDenied, "{refused:?}");
    let held = tool
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(held.nodes.len(), 1, "{held:?}");
    let metrics = admin_get(&a.admin, "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("cutover_actuator_auth_refused_total")
                && l.contains("not_allowed")),
        "{metrics}"
    );
    assert!(
        metrics
            .lines()
            .any(|l| l == "cutover_actuator_insecure_plaintext 0"),
        "{metrics}"
    );

    // Every connection went to arm:443 or actuator:9443, none anywhere else (no IMDS, no
    // proxy, no DNS name of the real Azure).
    let dialled = net.dialled();
    assert!(
        dialled
            .iter()
            .all(|d| *d == ("arm".to_owned(), 443) || *d == ("actuator".to_owned(), 9443)),
        "{dialled:?}"
    );
    assert!(dialled.contains(&("arm".to_owned(), 443)));
    assert!(a.running.shutdown().await);
    drop(a.admin);
    sim.shutdown().await;
}

#[tokio::test]
async fn the_token_goes_only_to_https_over_a_dialer_too() {
    let net = Net::default();
    let (sim, cluster) = sim_on(&net).await;
    let ca = TestCa::new("transports test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut args = flags(&sim, &cluster, &ca, dir.path());
    // Plain http to a host that is not loopback: refused before anything is sent.
    let at = args.iter().position(|a| a == "--arm-endpoint").unwrap();
    args[at + 1] = "http://arm:443".into();
    let (_admin, admin) = Listener::handed("10.0.0.2:9091".parse().unwrap());
    let err = runtime::start_with(
        Args::try_parse_from(args).unwrap(),
        EnvOverrides::default(),
        Transports {
            grpc: net.listen("actuator", 9443, "10.0.0.2:9443"),
            admin,
            dialer: Some(net.dialer("10.0.0.2:0")),
        },
    )
    .await
    .err()
    .expect("plain http to arm is refused");
    assert!(format!("{err:#}").contains("--arm-endpoint"), "{err:#}");
    assert!(
        sim.requests().iter().all(|r| !r.authorization),
        "{:?}",
        sim.requests()
    );
}

#[tokio::test]
async fn the_preflight_runs_over_a_dialer() {
    let net = Net::default();
    let (sim, cluster) = sim_on(&net).await;
    let ca = TestCa::new("transports test CA").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut args = flags(&sim, &cluster, &ca, dir.path());
    args.push("--preflight".into());
    let report = actuator_svc::preflight::run_with(
        &Args::try_parse_from(args).unwrap(),
        &EnvOverrides::default(),
        Some(net.dialer("10.0.0.2:0")),
    )
    .await
    .unwrap();
    assert!(!report.blocking(), "{}", report.text);
    assert!(report.text.contains("NIC-based"), "{}", report.text);
    assert!(
        net.dialled().iter().all(|d| *d == ("arm".to_owned(), 443)),
        "{:?}",
        net.dialled()
    );
}
