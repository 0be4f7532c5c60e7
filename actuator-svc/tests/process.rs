//! The real binary as a process: managed identity through `IDENTITY_ENDPOINT` (App Service
//! style, aimed at arm-sim; never IMDS), a start-up config error naming the field, and the drain
//! on SIGTERM. Plus workload identity in process.

#![allow(clippy::unwrap_used)]

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use arm_sim::{ArmSim, ArmSimOptions};
use clap::Parser;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use cutover_testkit::{Proc, Spec, free_port};
use std::process::Command;
use std::time::Duration;

async fn sim() -> (ArmSim, aks_fixture::Cluster) {
    let mut opts = ArmSimOptions::preset("aks").unwrap();
    opts.tuning.completion_delay_ms = 100;
    opts.tuning.retry_after_secs = 0;
    (
        ArmSim::start(opts).await.unwrap(),
        aks_fixture::preset("aks").unwrap(),
    )
}

fn set_down(n: &aks_fixture::Node) -> SetNodeAdminStateRequest {
    SetNodeAdminStateRequest {
        node: Some(NodeRef {
            name: n.name.clone(),
            uid: n.uid.clone(),
            provider_id: n.provider_id.clone(),
            ..Default::default()
        }),
        admin_state: AdminState::Down as i32,
        wait: WaitFor::Effective as i32,
        wait_timeout: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        ..Default::default()
    }
}

async fn connect(port: u16) -> ActuatorClient<tonic::transport::Channel> {
    for _ in 0..600 {
        if let Ok(c) = ActuatorClient::connect(format!("http://127.0.0.1:{port}")).await {
            return c;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("actuator did not come up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn managed_identity_binary_writes_and_drains_on_sigterm() {
    managed_identity_run(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn user_assigned_managed_identity_binary_writes() {
    managed_identity_run(true).await;
}

async fn managed_identity_run(user_assigned: bool) {
    let (sim, cluster) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = cluster.azure_json();
    cfg["useManagedIdentityExtension"] = true.into();
    if user_assigned {
        cfg["userAssignedIdentityID"] = sim.managed_identity_client_id().into();
    }
    cfg.as_object_mut().unwrap().remove("aadClientSecret");
    cfg.as_object_mut().unwrap().remove("aadClientId");
    let path = dir.path().join("azure.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let ca = dir.path().join("ca.pem");
    sim.write_ca(&ca).unwrap();
    let (grpc, admin) = (free_port().unwrap(), free_port().unwrap());
    let mut spec = Spec::new("actuator-svc", env!("CARGO_BIN_EXE_actuator-svc").into())
        .args([
            "--cloud-config",
            path.to_str().unwrap(),
            "--arm-endpoint",
            sim.url(),
            "--aad-authority",
            &sim.aad_authority(),
        ])
        // The simulator's CA through the platform store's own variable.
        .env("SSL_CERT_FILE", ca.to_str().unwrap())
        .args([
            "--grpc-listen",
            &format!("127.0.0.1:{grpc}"),
            "--admin-listen",
            &format!("127.0.0.1:{admin}"),
        ])
        .args(["--poll-interval", "50ms", "--log-format", "json"])
        // Used alone: the tool hold is kept in memory.
        .arg("--standalone")
        // A test on loopback: plaintext, said explicitly.
        .arg("--insecure-plaintext")
        .env("IDENTITY_ENDPOINT", sim.identity_endpoint())
        .env("IDENTITY_HEADER", sim.identity_header());
    // Nothing else from this process's environment (no AZURE_CLIENT_ID, AZURE_TENANT_ID or
    // AZURE_FEDERATED_TOKEN_FILE), as in a pod with only a managed identity.
    spec.clear_env = true;
    // Killed if the test fails before the drain; its output in `actuator-svc.log` in `dir`.
    let mut child = Proc::start(&spec, dir.path()).await.unwrap();
    let mut client = connect(grpc).await;
    let node = &cluster.nodes[2];
    let rsp = client
        .set_node_admin_state(set_down(node))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rsp.result.unwrap().phase, ResultPhase::Effective as i32);
    let mi = sim.managed_identity_client_id().to_string();
    assert!(
        sim.requests()
            .iter()
            .filter(|r| r.method == "PUT")
            .all(|r| r.principal.as_deref() == Some(mi.as_str())),
        "writes made as the managed identity"
    );
    assert!(child.is_running());
    child.signal("TERM").await;
    let exit = child
        .exit_within(Duration::from_secs(30))
        .await
        .expect("no exit after SIGTERM");
    assert!(exit.success(), "drained cleanly: {exit:?}");
}

#[test]
fn broken_config_stops_start_up_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = aks_fixture::preset("aks").unwrap().azure_json();
    cfg["loadBalancerBackendPoolConfigurationType"] = "podIP".into();
    let path = dir.path().join("azure.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_actuator-svc"))
        .args([
            "--cloud-config",
            path.to_str().unwrap(),
            "--grpc-listen",
            "127.0.0.1:0",
            "--admin-listen",
            "127.0.0.1:0",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("loadBalancerBackendPoolConfigurationType"),
        "{err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workload_identity_reads_the_projected_token_file() {
    let (sim, cluster) = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, sim.federated_token()).unwrap();
    let mut cfg = cluster.azure_json();
    cfg["useFederatedWorkloadIdentityExtension"] = true.into();
    cfg["aadFederatedTokenFile"] = token.to_str().unwrap().into();
    cfg.as_object_mut().unwrap().remove("aadClientSecret");
    let path = dir.path().join("azure.json");
    std::fs::write(&path, cfg.to_string()).unwrap();
    let ca = dir.path().join("ca.pem");
    sim.write_ca(&ca).unwrap();
    let args = Args::try_parse_from([
        "actuator-svc",
        "--cloud-config",
        path.to_str().unwrap(),
        "--arm-endpoint",
        sim.url(),
        "--aad-authority",
        &sim.aad_authority(),
        "--azure-ca-file",
        ca.to_str().unwrap(),
        "--grpc-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--poll-interval",
        "50ms",
        "--standalone",
        "--insecure-plaintext",
    ])
    .unwrap();
    let running = actuator_svc::runtime::start(args, EnvOverrides::default())
        .await
        .unwrap();
    let mut client = connect(running.grpc_addr.port()).await;
    let rsp = client
        .set_node_admin_state(set_down(&cluster.nodes[1]))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(rsp.result.unwrap().phase, ResultPhase::Effective as i32);
    assert!(running.shutdown().await);
}
