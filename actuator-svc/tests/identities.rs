//! Issue 29 item 2, the actuator's side: who may call it.
//!
//! - Only certificate SANs (URI or DNS) are identities, compared exactly with the group's list:
//!   a certificate with only a CN is refused (UNAUTHENTICATED) even when the CN names an
//!   allowed identity; a SAN on no list, or on the other group's list, is refused
//!   (PERMISSION_DENIED); a SAN that extends or shortens an allowed one is refused; an empty
//!   list admits nobody. Each refusal is counted in `cutover_actuator_auth_refused_total`.
//! - mTLS or nothing: without the TLS flags start-up fails naming them, unless
//!   `--insecure-plaintext`, which starts and says so in `cutover_actuator_insecure_plaintext 1`
//!   (and in a warning of the real binary).

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[path = "integration/common.rs"]
mod common;

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use clap::Parser;
use common::*;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use cutover_testkit::certs::Usage;
use cutover_testkit::{Proc, Spec, TestCa, until_ok};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

const SIGNAL_URI: &str = "spiffe://cluster.local/ns/cutover/sa/signal-svc";
const TOOL_URI: &str = "spiffe://cluster.local/ns/cutover/sa/cutoverctl";
const TOOL_DNS: &str = "cutoverctl.cutover.svc";

struct Tls {
    ca: TestCa,
    dir: tempfile::TempDir,
}

impl Tls {
    fn new() -> Self {
        let ca = TestCa::new("identities test CA").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let leaf = ca
            .issue(&["localhost"], Some("localhost"), None, Usage::ServerAuth)
            .unwrap();
        std::fs::write(dir.path().join("tls.crt"), leaf.cert_pem).unwrap();
        std::fs::write(dir.path().join("tls.key"), leaf.key_pem).unwrap();
        std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
        Self { ca, dir }
    }

    fn path(&self, name: &str) -> String {
        self.dir.path().join(name).to_str().unwrap().to_string()
    }

    /// The mutual-TLS flags and both allow-lists.
    fn flags(&self, signal: &str, tool: &str) -> Vec<String> {
        vec![
            "--tls-cert".into(),
            self.path("tls.crt"),
            "--tls-key".into(),
            self.path("tls.key"),
            "--tls-client-ca".into(),
            self.path("ca.crt"),
            format!("--signal-clients={signal}"),
            format!("--tool-clients={tool}"),
        ]
    }

    /// A client presenting a certificate with exactly `sans` and `cn`.
    async fn client(
        &self,
        addr: SocketAddr,
        sans: &[&str],
        cn: Option<&str>,
    ) -> ActuatorClient<Channel> {
        let leaf = self.ca.issue(sans, cn, None, Usage::ClientAuth).unwrap();
        let tls = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(self.ca.pem()))
            .identity(Identity::from_pem(leaf.cert_pem, leaf.key_pem))
            .domain_name("localhost");
        let ch = Channel::from_shared(format!("https://localhost:{}", addr.port()))
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        ActuatorClient::new(ch)
    }
}

async fn start_tls(sim: &arm_sim::ArmSim, cluster: &aks_fixture::Cluster, tls: &Tls) -> Actuator {
    let flags = tls.flags(SIGNAL_URI, &format!("{TOOL_URI},{TOOL_DNS}"));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    start_actuator(sim, cluster, &flags).await
}

/// A tool call's status code (Ok for an answer).
async fn tool_call(c: &mut ActuatorClient<Channel>) -> Result<(), tonic::Status> {
    c.list_held_entries(ListHeldEntriesRequest::default())
        .await
        .map(drop)
}

fn hello() -> SignalMessage {
    SignalMessage {
        kind: Some(signal_message::Kind::Hello(Hello {
            cluster_name: "kubernetes".into(),
            sender_identity: "signal-0".into(),
            leader_epoch: 1,
            incarnation: 1,
        })),
    }
}

/// Opens the desired-state stream; Ok when the actuator answers the Hello.
async fn stream_call(c: &mut ActuatorClient<Channel>) -> Result<(), tonic::Status> {
    let mut s = c
        .stream_desired_states(tokio_stream::iter(vec![hello()]))
        .await?
        .into_inner();
    match s.next().await {
        Some(Ok(m)) if matches!(m.kind, Some(actuator_message::Kind::HelloAck(_))) => Ok(()),
        other => panic!("no HelloAck: {other:?}"),
    }
}

async fn metrics(a: &Actuator) -> String {
    http_get(a.running.admin_addr, "/metrics").await.1
}

fn metric_line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    text.lines().find(|l| l.starts_with(prefix))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_with_only_a_cn_is_refused_even_when_the_cn_is_allowed() {
    let (sim, cluster) = start_sim("aks").await;
    let tls = Tls::new();
    let a = start_tls(&sim, &cluster, &tls).await;
    let addr = a.running.grpc_addr;
    // The CN is the allowed tool identity, the certificate has no SAN: refused.
    let mut cn_only = tls.client(addr, &[], Some(TOOL_DNS)).await;
    let e = tool_call(&mut cn_only).await.unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    assert!(
        e.message()
            .contains("no DNS or URI subject alternative name"),
        "{e:?}"
    );
    assert!(
        e.message().contains(TOOL_DNS),
        "names the CN it ignored: {e:?}"
    );
    let e = stream_call(&mut tls.client(addr, &[], Some(SIGNAL_URI)).await)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{e:?}");
    // A SAN not on the list next to an allowed CN: the CN does not help.
    let mut cn_and_stranger = tls
        .client(addr, &["stranger.example"], Some(TOOL_DNS))
        .await;
    let e = tool_call(&mut cn_and_stranger).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    let m = metrics(&a).await;
    assert_eq!(
        metric_line(
            &m,
            "cutover_actuator_auth_refused_total{group=\"tool\",reason=\"no_san\"}"
        ),
        Some("cutover_actuator_auth_refused_total{group=\"tool\",reason=\"no_san\"} 1"),
        "{m}"
    );
    assert!(
        metric_line(
            &m,
            "cutover_actuator_auth_refused_total{group=\"signal\",reason=\"no_san\"} 1"
        )
        .is_some(),
        "{m}"
    );
    // The same tool with its identity as a SAN passes.
    let mut tool = tls.client(addr, &[TOOL_DNS], Some("anything")).await;
    tool_call(&mut tool).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_san_on_no_list_or_the_other_groups_list_is_refused() {
    let (sim, cluster) = start_sim("aks").await;
    let tls = Tls::new();
    let a = start_tls(&sim, &cluster, &tls).await;
    let addr = a.running.grpc_addr;
    let mut stranger = tls
        .client(
            addr,
            &["stranger.example", "spiffe://cluster.local/ns/other/sa/x"],
            None,
        )
        .await;
    let e = tool_call(&mut stranger).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("--tool-clients"), "{e:?}");
    let e = stream_call(&mut stranger).await.unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    assert!(e.message().contains("--signal-clients"), "{e:?}");
    // Denied before any handler logic: an invalid request still gets PERMISSION_DENIED.
    let e = stranger
        .set_node_admin_state(SetNodeAdminStateRequest::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    // signal-svc's identity does not make a tool, nor the reverse.
    let mut signal = tls.client(addr, &[SIGNAL_URI], None).await;
    stream_call(&mut signal).await.unwrap();
    assert_eq!(
        tool_call(&mut signal).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    let mut tool = tls.client(addr, &[TOOL_URI], None).await;
    tool_call(&mut tool).await.unwrap();
    assert_eq!(
        stream_call(&mut tool).await.unwrap_err().code(),
        Code::PermissionDenied
    );
    let m = metrics(&a).await;
    assert!(
        metric_line(
            &m,
            "cutover_actuator_auth_refused_total{group=\"tool\",reason=\"not_allowed\"} 3"
        )
        .is_some(),
        "{m}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identities_match_exactly_never_by_prefix_or_suffix() {
    let (sim, cluster) = start_sim("aks").await;
    let tls = Tls::new();
    let a = start_tls(&sim, &cluster, &tls).await;
    let addr = a.running.grpc_addr;
    for near in [
        "spiffe://cluster.local/ns/cutover/sa/signal-svc-2",
        "spiffe://cluster.local/ns/cutover/sa/signal-sv",
        "spiffe://cluster.local/ns/cutover/sa/signal-svc/extra",
        "spiffe://cluster.local.evil/ns/cutover/sa/signal-svc",
        "spiffe://evil/spiffe://cluster.local/ns/cutover/sa/signal-svc",
    ] {
        let e = stream_call(&mut tls.client(addr, &[near], None).await)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{near}: {e:?}");
    }
    for near in [
        "cutoverctl.cutover.svc.evil.example",
        "x.cutoverctl.cutover.svc",
        "cutoverctl.cutover",
        "*.cutover.svc",
    ] {
        let e = tool_call(&mut tls.client(addr, &[near], None).await)
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{near}: {e:?}");
    }
    // A DNS entry is not a URI SAN with the same text.
    let e = tool_call(
        &mut tls
            .client(addr, &[&format!("dns://{TOOL_DNS}")], None)
            .await,
    )
    .await
    .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
    // The exact names pass (DNS names without regard to case, as DNS compares them).
    stream_call(&mut tls.client(addr, &[SIGNAL_URI], None).await)
        .await
        .unwrap();
    tool_call(&mut tls.client(addr, &["CutoverCtl.cutover.svc"], None).await)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_tool_list_admits_no_tool() {
    let (sim, cluster) = start_sim("aks").await;
    let tls = Tls::new();
    let flags = tls.flags(SIGNAL_URI, "");
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let a = start_actuator(&sim, &cluster, &flags).await;
    let e = tool_call(&mut tls.client(a.running.grpc_addr, &[TOOL_DNS], None).await)
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
}

/// `runtime::start` with the simulator's flags minus `--insecure-plaintext`, plus `extra`.
async fn start_err(sim: &arm_sim::ArmSim, config: &Path, extra: &[String]) -> String {
    let mut args = base_args(sim, config);
    args.retain(|a| a != "--insecure-plaintext");
    args.extend(extra.iter().cloned());
    match actuator_svc::runtime::start(Args::try_parse_from(args).unwrap(), EnvOverrides::default())
        .await
    {
        Ok(_) => panic!("started with {extra:?}"),
        Err(e) => format!("{e:#}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plaintext_without_the_flag_is_refused_at_start_naming_the_flags() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &cluster);
    let tls = Tls::new();

    let e = start_err(&sim, &config, &[]).await;
    for f in [
        "--tls-cert",
        "--tls-key",
        "--tls-client-ca",
        "--insecure-plaintext",
    ] {
        assert!(e.contains(f), "{f}: {e}");
    }
    // Server TLS without client authentication is not a mode either.
    let partial = vec![
        "--tls-cert".to_string(),
        tls.path("tls.crt"),
        "--tls-key".into(),
        tls.path("tls.key"),
        format!("--signal-clients={SIGNAL_URI}"),
    ];
    let e = start_err(&sim, &config, &partial).await;
    assert!(e.contains("missing --tls-client-ca"), "{e}");
    // A fleet actuator (not --standalone) must name signal-svc's identity...
    let mut args = base_args(&sim, &config);
    args.retain(|a| a != "--insecure-plaintext" && a != "--standalone");
    args.extend(tls.flags("", TOOL_DNS));
    let e = match actuator_svc::runtime::start(
        Args::try_parse_from(args).unwrap(),
        EnvOverrides::default(),
    )
    .await
    {
        Ok(_) => panic!("started without --signal-clients"),
        Err(e) => format!("{e:#}"),
    };
    assert!(e.contains("--signal-clients is empty"), "{e}");
    // ...and no entry may be a pattern.
    let e = start_err(&sim, &config, &tls.flags(SIGNAL_URI, "*.cutover.svc")).await;
    assert!(
        e.contains("--tool-clients") && e.contains("wildcard"),
        "{e}"
    );
    // The flag and TLS exclude each other.
    let mut both = base_args(&sim, &config);
    both.extend(tls.flags(SIGNAL_URI, TOOL_DNS));
    let e = Args::try_parse_from(both).unwrap_err().to_string();
    assert!(
        e.contains("--insecure-plaintext") && e.contains("cannot be used"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_flag_it_starts_in_plaintext_and_the_metric_reads_1() {
    let (sim, cluster) = start_sim("aks").await;
    // start_actuator passes --insecure-plaintext (base_args).
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    a.client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap();
    let m = metrics(&a).await;
    assert_eq!(
        metric_line(&m, "cutover_actuator_insecure_plaintext "),
        Some("cutover_actuator_insecure_plaintext 1"),
        "{m}"
    );
    // With mutual TLS it reads 0.
    let tls = Tls::new();
    let b = start_tls(&sim, &cluster, &tls).await;
    assert_eq!(
        metric_line(&metrics(&b).await, "cutover_actuator_insecure_plaintext "),
        Some("cutover_actuator_insecure_plaintext 0")
    );
}

/// The real binary: refuses to start without TLS flags (exit non-zero, naming them), and with
/// `--insecure-plaintext` starts and logs the warning. No ARM call is needed for either.
#[tokio::test]
async fn the_binary_refuses_plaintext_unless_told_and_warns_when_told() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = aks_fixture::preset("aks").unwrap().azure_json();
    let path: PathBuf = dir.path().join("azure.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    // Nothing listens there: no call leaves the machine.
    let base = [
        "--cloud-config",
        path.to_str().unwrap(),
        "--arm-endpoint",
        "https://127.0.0.1:9",
        "--aad-authority",
        "https://127.0.0.1:9",
        "--grpc-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ];
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_actuator-svc"))
        .args(base)
        .env_remove("ACTUATOR_INSECURE_PLAINTEXT")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--tls-cert") && err.contains("--insecure-plaintext"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");

    // A kit Proc: killed when dropped, its output in `dir`.
    let spec = Spec::new("plaintext", env!("CARGO_BIN_EXE_actuator-svc").into())
        .args(base)
        .args(["--insecure-plaintext", "--standalone"]);
    let child = Proc::start(&spec, dir.path()).await.unwrap();
    let line = until_ok(
        std::time::Duration::from_secs(30),
        std::time::Duration::from_millis(200),
        || {
            let log = std::fs::read_to_string(&child.log).unwrap_or_default();
            let warned = log
                .lines()
                .find(|l| l.contains("--insecure-plaintext"))
                .map(str::to_owned);
            async move { warned.ok_or_else(|| "no --insecure-plaintext warning".to_owned()) }
        },
    )
    .await;
    drop(child);
    assert!(line.contains("\"level\":\"WARN\""), "{line}");
}
