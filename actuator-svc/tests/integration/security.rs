//! mTLS, allow-lists, health, reflection, readiness and metrics.

use crate::common::*;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use cutover_testkit::TestCa;
use cutover_testkit::certs::Usage;
use std::path::{Path, PathBuf};
use tokio_stream::StreamExt;
use tonic::Code;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

struct Pki {
    ca_pem: String,
    ca: PathBuf,
    server: (PathBuf, PathBuf),
    clients: Vec<(String, String)>,
}

fn mk_pki(dir: &Path) -> Pki {
    let ca = TestCa::new("test CA").unwrap();
    // Each leaf named by its DNS SAN and CN.
    let leaf = |name: &str, usage| {
        let l = ca.issue(&[name], Some(name), None, usage).unwrap();
        (l.cert_pem, l.key_pem)
    };
    let (cert, key) = leaf("localhost", Usage::ServerAuth);
    std::fs::write(dir.join("server.crt"), cert).unwrap();
    std::fs::write(dir.join("server.key"), key).unwrap();
    std::fs::write(dir.join("ca.crt"), ca.pem()).unwrap();
    let clients = [
        "signal-svc.cutover.svc",
        "cutoverctl.cutover.svc",
        "stranger.example",
    ]
    .iter()
    .map(|n| leaf(n, Usage::ClientAuth))
    .collect();
    Pki {
        ca_pem: ca.pem(),
        ca: dir.join("ca.crt"),
        server: (dir.join("server.crt"), dir.join("server.key")),
        clients,
    }
}

async fn tls_client(
    addr: std::net::SocketAddr,
    pki: &Pki,
    who: Option<usize>,
) -> Result<ActuatorClient<Channel>, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(&pki.ca_pem))
        .domain_name("localhost");
    if let Some(i) = who {
        let (cert, key) = &pki.clients[i];
        tls = tls.identity(Identity::from_pem(cert, key));
    }
    let ch = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .unwrap()
        .tls_config(tls)?
        .connect()
        .await?;
    Ok(ActuatorClient::new(ch))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mtls_refuses_strangers_and_separates_signal_from_tools() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let pki = mk_pki(dir.path());
    let a = start_actuator(
        &sim,
        &cluster,
        &[
            "--tls-cert",
            pki.server.0.to_str().unwrap(),
            "--tls-key",
            pki.server.1.to_str().unwrap(),
            "--tls-client-ca",
            pki.ca.to_str().unwrap(),
            "--signal-clients",
            "signal-svc.cutover.svc",
            "--tool-clients",
            "cutoverctl.cutover.svc",
        ],
    )
    .await;
    let addr = a.running.grpc_addr;
    let node = &cluster.nodes[0];
    let list = || ListHeldEntriesRequest::default();

    // No client certificate: the handshake fails, no RPC gets through.
    let refused = match tls_client(addr, &pki, None).await {
        Err(_) => true,
        Ok(mut c) => c.list_held_entries(list()).await.is_err(),
    };
    assert!(refused, "a caller without a certificate got through");

    let mut tool = tls_client(addr, &pki, Some(1)).await.unwrap();
    assert!(tool.list_held_entries(list()).await.is_ok());
    let mut signal = tls_client(addr, &pki, Some(0)).await.unwrap();
    let mut stranger = tls_client(addr, &pki, Some(2)).await.unwrap();
    for c in [&mut signal, &mut stranger] {
        let e = c.list_held_entries(list()).await.unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied, "{e:?}");
        // Denied before any handler logic: an invalid request still gets PERMISSION_DENIED.
        let e = c
            .set_node_admin_state(SetNodeAdminStateRequest::default())
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::PermissionDenied);
    }
    // The stream is for signal clients only.
    let e = tool
        .stream_desired_states(tokio_stream::iter(Vec::<SignalMessage>::new()))
        .await
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied);
    let hello = SignalMessage {
        kind: Some(signal_message::Kind::Hello(Hello {
            cluster_name: "kubernetes".into(),
            sender_identity: "s".into(),
            leader_epoch: 1,
            // One fake signal-svc process throughout.
            incarnation: 1,
        })),
    };
    let mut s = signal
        .stream_desired_states(tokio_stream::iter(vec![hello]))
        .await
        .unwrap()
        .into_inner();
    let first = s.next().await.unwrap().unwrap();
    assert!(matches!(
        first.kind,
        Some(actuator_message::Kind::HelloAck(_))
    ));
    let _ = node;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reflection_readiness_and_metrics() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let ch = Channel::from_shared(format!("http://{}", a.running.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // Health follows readiness with a short delay (grpc::health::POLL) after /ready turns 200.
    let health = tonic_health::pb::health_client::HealthClient::new(ch.clone());
    wait_until("gRPC health SERVING", || {
        let mut health = health.clone();
        async move {
            health
                .check(tonic_health::pb::HealthCheckRequest {
                    service: "cutover.v1.Actuator".into(),
                })
                .await
                .is_ok_and(|r| {
                    r.into_inner().status
                        == tonic_health::pb::health_check_response::ServingStatus::Serving as i32
                })
        }
    })
    .await;

    use tonic_reflection::pb::v1::{
        ServerReflectionRequest, server_reflection_client::ServerReflectionClient,
        server_reflection_request::MessageRequest, server_reflection_response::MessageResponse,
    };
    let mut refl = ServerReflectionClient::new(ch);
    let req = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut out = refl
        .server_reflection_info(tokio_stream::iter(vec![req]))
        .await
        .unwrap()
        .into_inner();
    let msg = out.next().await.unwrap().unwrap();
    let Some(MessageResponse::ListServicesResponse(list)) = msg.message_response else {
        panic!("{msg:?}")
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"cutover.v1.Actuator"), "{names:?}");
    assert!(names.contains(&"grpc.health.v1.Health"), "{names:?}");

    let admin = a.running.admin_addr;
    assert_eq!(http_get(admin, "/live").await.0, 200);
    assert_eq!(http_get(admin, "/ready").await.0, 200);
    assert_eq!(http_get(admin, "/nope").await.0, 404);
    a.client
        .set_node_admin_state(set_req(
            &cluster.nodes[1],
            AdminState::Down,
            WaitFor::Effective,
        ))
        .await
        .unwrap();
    let (status, metrics) = http_get(admin, "/metrics").await;
    assert_eq!(status, 200);
    for name in [
        "cutover_actuator_arm_requests_total{",
        "cutover_actuator_write_rounds_total{",
        "cutover_actuator_receipt_to_effective_seconds_count",
        "cutover_actuator_receipt_to_accepted_seconds_count",
        "cutover_actuator_entries_per_write_count",
    ] {
        assert!(metrics.contains(name), "{name} missing:\n{metrics}");
    }
    // Readiness turns off on drain.
    let running = a.running;
    assert!(running.shutdown().await);
    assert_ne!(http_get(admin, "/ready").await.0, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_while_arm_is_unreachable() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), &cluster);
    let mut args = base_args(&sim, &config);
    // An endpoint where nothing listens: no pool index can be built.
    let pos = args.iter().position(|a| a == "--arm-endpoint").unwrap();
    args[pos + 1] = "http://127.0.0.1:9".into();
    let running = actuator_svc::runtime::start(
        <actuator_svc::config::cli::Args as clap::Parser>::try_parse_from(args).unwrap(),
        actuator_svc::config::azure_json::EnvOverrides::default(),
    )
    .await
    .unwrap();
    let (status, body) = http_get(running.admin_addr, "/ready").await;
    assert_eq!(status, 503);
    assert!(body.contains("not ready"), "{body}");
    assert_eq!(http_get(running.admin_addr, "/live").await.0, 200);
}
