//! Access against arm-sim's linked-access seeds (RBAC enforced, `deploy/azure/` roles):
//! `--preflight` asks the permissions API at every scope a write needs and names each missing
//! action with its `az role assignment create`; `--preflight-write-probe` finds the node
//! resource group lockdown; at run time a write refused with 403 is reported as such (metric,
//! FAILED reason) and not tried again before its pause.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[path = "integration/common.rs"]
mod common;

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::preflight::{self, classify::Report};
use arm_sim::rbac::{Rbac, RoleAssignment, RoleDefinition};
use arm_sim::seed::Seed;
use arm_sim::{ArmSim, ArmSimOptions};
use clap::Parser;
use common::*;
use cutover_proto::v1::*;
use std::path::Path;
use std::time::Duration;

const SUB: &str = "5a2e4b2c-1f7d-4c4e-9a55-0b0c8d7e6f31";
const MC: &str = "MC_cutover-rg_cutover_eastus";
const NET_RG: &str = "customer-net-rg";
const JOIN_SUBNET: &str = "Microsoft.Network/virtualNetworks/subnets/join/action";

fn rg_id(rg: &str) -> String {
    format!("/subscriptions/{SUB}/resourceGroups/{rg}")
}

fn vnet_id() -> String {
    format!(
        "{}/providers/Microsoft.Network/virtualNetworks/customer-vnet",
        rg_id(NET_RG)
    )
}

fn role(file: &str) -> RoleDefinition {
    let path = format!("{}/../deploy/azure/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

async fn start_seed(name: &str) -> ArmSim {
    let mut options = ArmSimOptions {
        seed: Seed::preset(name, None).unwrap(),
        ..Default::default()
    };
    options.tuning = fast_tuning();
    ArmSim::start(options).await.unwrap()
}

/// The writer role on the node resource group, and the joiner on each of `joined`.
fn assign(sim: &ArmSim, joined: &[String]) {
    let principal = sim.credentials().client_id;
    let (writer, joiner) = (
        role("role-lb-writer.json"),
        role("role-network-joiner.json"),
    );
    let mut assignments = vec![RoleAssignment {
        principal_id: principal.clone(),
        role: writer.name.clone(),
        scope: rg_id(MC),
    }];
    for scope in joined {
        assignments.push(RoleAssignment {
            principal_id: principal.clone(),
            role: joiner.name.clone(),
            scope: scope.clone(),
        });
    }
    sim.set_rbac(Rbac {
        role_definitions: vec![writer, joiner],
        role_assignments: assignments,
        ..Rbac::default()
    })
    .unwrap();
}

/// azure.json for the seeds' cluster (cluster name `kubernetes`, node resource group `MC`).
fn write_azure_json(sim: &ArmSim, dir: &Path) -> std::path::PathBuf {
    let c = sim.credentials();
    let path = dir.join("azure.json");
    let json = serde_json::json!({
        "cloud": "AzurePublicCloud",
        "tenantId": c.tenant_id,
        "subscriptionId": SUB,
        "aadClientId": c.client_id,
        "aadClientSecret": c.client_secret,
        "resourceGroup": MC,
        "location": "eastus",
        "vmType": "vmss",
        "loadBalancerSku": "Standard",
    });
    std::fs::write(&path, json.to_string()).unwrap();
    path
}

async fn run_preflight(sim: &ArmSim, probe: bool) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let config = write_azure_json(sim, dir.path());
    let mut args = base_args(sim, &config);
    args.push("--preflight".into());
    if probe {
        args.push("--preflight-write-probe".into());
    }
    let args = Args::try_parse_from(args).unwrap();
    let report = preflight::run(&args, &EnvOverrides::default())
        .await
        .unwrap();
    println!("{}", report.text);
    // Nothing was written: every PUT (the probe's) was refused.
    for r in sim.requests() {
        if r.method == "PUT" {
            assert!(r.status >= 400, "a preflight PUT went through: {r:?}");
        }
    }
    report
}

#[tokio::test]
async fn byo_vnet_with_both_roles_passes_and_the_write_probe_is_authorized() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[vnet_id()]);
    let r = run_preflight(&sim, true).await;
    assert!(!r.blocking(), "{}", r.text);
    assert!(!r.has("access-missing"), "{}", r.text);
    assert!(r.has("write-probe-authorized"), "{}", r.text);
    assert!(
        r.text.contains(&format!("{JOIN_SUBNET}: granted")),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn byo_vnet_without_the_joiner_names_the_subnet_join_and_its_fix() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[]);
    let r = run_preflight(&sim, false).await;
    assert!(r.blocking(), "{}", r.text);
    let subnet = format!("{}/subnets/aks-subnet", vnet_id());
    let missing: Vec<_> = r
        .findings
        .iter()
        .filter(|f| f.code == "access-missing")
        .collect();
    assert_eq!(missing.len(), 1, "{}", r.text);
    assert!(
        missing[0].message.contains(JOIN_SUBNET) && missing[0].message.contains(&subnet),
        "{}",
        r.text
    );
    assert!(
        r.text.contains(&format!(
            "az role assignment create --assignee-object-id \"$OID\" --assignee-principal-type ServicePrincipal --role \"Cutover Network Joiner\" --scope \"{subnet}\""
        )),
        "{}",
        r.text
    );
    assert!(r.has("lockdown-not-checked"), "{}", r.text);
}

#[tokio::test]
async fn foreign_public_ip_and_ip_pool_vnet_without_the_joiner_name_their_joins() {
    for (seed, action, group) in [
        (
            "foreign-public-ip",
            "Microsoft.Network/publicIPAddresses/join/action",
            "customer-ip-rg",
        ),
        (
            "foreign-public-ip",
            "Microsoft.Network/publicIPPrefixes/join/action",
            "customer-ip-rg",
        ),
        (
            "ip-pool-vnet",
            "Microsoft.Network/virtualNetworks/joinLoadBalancer/action",
            NET_RG,
        ),
    ] {
        let sim = start_seed(seed).await;
        assign(&sim, &[]);
        let r = run_preflight(&sim, false).await;
        assert!(r.blocking(), "{seed}: {}", r.text);
        assert!(
            r.findings
                .iter()
                .any(|f| f.code == "access-missing" && f.message.contains(action)),
            "{seed}: {action} not named:\n{}",
            r.text
        );
        // granted everywhere: passes
        assign(&sim, &[rg_id(group)]);
        let r = run_preflight(&sim, false).await;
        assert!(!r.blocking(), "{seed} with the joiner: {}", r.text);
    }
}

#[tokio::test]
async fn the_write_probe_reports_the_node_resource_group_lockdown() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[vnet_id()]);
    sim.lockdown(MC, Vec::new());
    // The permissions API does not show deny assignments: reads alone pass.
    let r = run_preflight(&sim, false).await;
    assert!(!r.blocking(), "{}", r.text);
    assert!(r.has("lockdown-not-checked"), "{}", r.text);
    let r = run_preflight(&sim, true).await;
    assert!(r.blocking() && r.has("nrg-lockdown"), "{}", r.text);
    assert!(
        r.text.contains("node resource group lockdown"),
        "{}",
        r.text
    );
}

/// A node of the byo-vnet seed.
fn node0() -> NodeRef {
    NodeRef {
        name: "aks-nodepool1-12345678-vmss000000".into(),
        uid: "00000000-0000-4000-8000-000000000001".into(),
        provider_id: format!(
            "azure://{}/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/0",
            rg_id(MC)
        ),
        internal_ips: vec!["10.10.0.4".into()],
        zone: String::new(),
    }
}

#[tokio::test]
async fn a_write_refused_for_linked_access_is_counted_reported_and_not_hammered() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = write_azure_json(&sim, dir.path());
    let args = Args::try_parse_from(base_args(&sim, &config)).unwrap();
    let running = actuator_svc::runtime::start(args, EnvOverrides::default())
        .await
        .expect("actuator starts");
    let admin = running.admin_addr;
    wait_until("actuator ready", || async move {
        http_get(admin, "/ready").await.0 == 200
    })
    .await;
    let mut client = cutover_proto::v1::actuator_client::ActuatorClient::connect(format!(
        "http://{}",
        running.grpc_addr
    ))
    .await
    .unwrap();
    let set = |state: AdminState| SetNodeAdminStateRequest {
        node: Some(node0()),
        admin_state: state as i32,
        reason: "test".into(),
        wait: WaitFor::Accepted as i32,
        // A refused write fails with will_retry, so the answer comes at the timeout with the
        // refusal as its last result; the refusal itself takes milliseconds.
        wait_timeout: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
    };
    let answer = client.set_node_admin_state(set(AdminState::Down)).await;
    let text = format!("{answer:?}");
    assert!(
        text.contains("LinkedAuthorizationFailed") && text.contains(JOIN_SUBNET),
        "the FAILED reason names the refusal: {text}"
    );
    let metric = format!(
        "cutover_actuator_arm_access_refused_total{{load_balancer=\"kubernetes-internal\",code=\"LinkedAuthorizationFailed\",action=\"{JOIN_SUBNET}\"}} 1"
    );
    wait_until("the refusal in the metric", || {
        let metric = metric.clone();
        async move { http_get(admin, "/metrics").await.1.contains(&metric) }
    })
    .await;
    let puts_after_refusal = puts(&sim, "kubernetes-internal");
    assert_eq!(puts_after_refusal, 1);
    // Asked again and again within the pause: no PUT goes out. Each ask waits briefly (the
    // writer does not depend on the wait), so the pause is probed six times in about 2 s.
    for _ in 0..3 {
        let _ = client
            .set_node_admin_state(briefly(set(AdminState::None)))
            .await;
        let _ = client
            .set_node_admin_state(briefly(set(AdminState::Down)))
            .await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        puts(&sim, "kubernetes-internal"),
        puts_after_refusal,
        "writes went out during the pause"
    );
    assert!(running.shutdown().await);
}

/// The metric line of one missing (action, scope) of `lb`.
fn missing_metric(lb: &str, action: &str, scope: &str) -> String {
    format!(
        "cutover_actuator_missing_permission{{load_balancer=\"{lb}\",action=\"{action}\",scope=\"{scope}\"}} 1"
    )
}

/// The actuator against `sim` (the seeds' azure.json), with `extra` flags; waits until ready.
async fn start_service(sim: &ArmSim, dir: &Path, extra: &[&str]) -> actuator_svc::runtime::Running {
    let config = write_azure_json(sim, dir);
    let mut args = base_args(sim, &config);
    args.extend(extra.iter().map(|s| s.to_string()));
    let running =
        actuator_svc::runtime::start(Args::try_parse_from(args).unwrap(), EnvOverrides::default())
            .await
            .expect("actuator starts");
    let admin = running.admin_addr;
    wait_until("actuator ready", || async move {
        http_get(admin, "/ready").await.0 == 200
    })
    .await;
    running
}

async fn wait_for_metric(admin: std::net::SocketAddr, what: &str, line: String) {
    wait_until(what, || {
        let line = line.clone();
        async move { http_get(admin, "/metrics").await.1.contains(&line) }
    })
    .await;
}

#[tokio::test]
async fn at_start_the_service_names_a_missing_join_and_its_scope_without_writing() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[]);
    let dir = tempfile::tempdir().unwrap();
    // The first check comes `min(10 s, interval)` after start; 1 s keeps the test short.
    let running = start_service(&sim, dir.path(), &["--access-check-interval", "1s"]).await;
    let admin = running.admin_addr;
    let subnet = format!("{}/subnets/aks-subnet", vnet_id());
    wait_for_metric(
        admin,
        "the missing join in the metric",
        missing_metric("kubernetes-internal", JOIN_SUBNET, &subnet),
    )
    .await;
    let text = http_get(admin, "/metrics").await.1;
    assert!(
        text.contains(
            "cutover_actuator_missing_permissions{load_balancer=\"kubernetes-internal\"} 1"
        ),
        "{text}"
    );
    // Only the join is missing: the writer role covers the rest.
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("cutover_actuator_missing_permission{"))
            .count(),
        1,
        "{text}"
    );
    // Read-only: the permissions API and GETs, never a write.
    let reqs = sim.requests();
    assert!(
        reqs.iter().any(|r| r
            .path
            .contains("/providers/Microsoft.Authorization/permissions")),
        "the permissions API was not asked"
    );
    assert!(reqs.iter().all(|r| r.method != "PUT"), "a write went out");
    assert!(running.shutdown().await);
}

#[tokio::test]
async fn a_write_refused_for_access_runs_the_access_check_again() {
    let sim = start_seed("byo-vnet").await;
    assign(&sim, &[vnet_id()]);
    let dir = tempfile::tempdir().unwrap();
    // The scheduled checks: the first `FIRST_AFTER` (10 s) after start, then hourly. The check
    // this test waits for must come before the first, so only the refusal can have run it.
    let started = std::time::Instant::now();
    let running = start_service(&sim, dir.path(), &["--access-check-interval", "1h"]).await;
    let admin = running.admin_addr;
    // The joiner's assignment is removed while the service runs; the next write is refused.
    assign(&sim, &[]);
    let mut client = cutover_proto::v1::actuator_client::ActuatorClient::connect(format!(
        "http://{}",
        running.grpc_addr
    ))
    .await
    .unwrap();
    let _ = client.set_node_admin_state(set0(AdminState::Down)).await;
    let subnet = format!("{}/subnets/aks-subnet", vnet_id());
    wait_for_metric(
        admin,
        "the refusal's check naming the join",
        missing_metric("kubernetes-internal", JOIN_SUBNET, &subnet),
    )
    .await;
    let first_scheduled = actuator_svc::preflight::watch::FIRST_AFTER;
    assert!(
        started.elapsed() < first_scheduled,
        "the check came {:?} after start, not before the first scheduled one ({first_scheduled:?})",
        started.elapsed()
    );
    let text = http_get(admin, "/metrics").await.1;
    assert!(
        text.contains(
            "cutover_actuator_missing_permissions{load_balancer=\"kubernetes-internal\"} 1"
        ),
        "{text}"
    );
    assert!(running.shutdown().await);
}

/// The request that sets `node0` to `state`, answered once accepted or after 1 s (a refused
/// write fails with will_retry: its answer comes at the timeout, the refusal as its result).
fn set0(state: AdminState) -> SetNodeAdminStateRequest {
    SetNodeAdminStateRequest {
        node: Some(node0()),
        admin_state: state as i32,
        reason: "test".into(),
        wait: WaitFor::Accepted as i32,
        wait_timeout: Some(prost_types::Duration {
            seconds: 1,
            nanos: 0,
        }),
    }
}

/// `request`, answered after at most 300 ms: for asks whose answer the test does not read.
fn briefly(mut request: SetNodeAdminStateRequest) -> SetNodeAdminStateRequest {
    request.wait_timeout = Some(prost_types::Duration {
        seconds: 0,
        nanos: 300_000_000,
    });
    request
}

/// An Azure Policy deny and a ReadOnly lock: each fault, what the FAILED reason must name, the
/// metric's code, and the preflight write probe's finding.
fn governance_cases() -> Vec<(
    arm_sim::faults::FaultSpec,
    Vec<String>,
    &'static str,
    &'static str,
)> {
    use arm_sim::faults::FaultSpec;
    vec![
        (
            FaultSpec {
                policy_deny: Some("deny-lb-writes".into()),
                ..Default::default()
            },
            vec![
                "RequestDisallowedByPolicy".into(),
                "Azure Policy assignment(s) deny-lb-writes".into(),
            ],
            "RequestDisallowedByPolicy",
            "policy-denied",
        ),
        (
            FaultSpec {
                read_only_locks: Some(vec![MC.into()]),
                ..Default::default()
            },
            vec![
                "ScopeLocked".into(),
                format!("ReadOnly management lock on {}", rg_id(MC)),
            ],
            "ScopeLocked",
            "scope-locked",
        ),
    ]
}

#[tokio::test]
async fn a_write_denied_by_policy_or_a_read_only_lock_is_counted_reported_and_not_hammered() {
    for (fault, named, code, _) in governance_cases() {
        let sim = start_seed("byo-vnet").await;
        assign(&sim, &[vnet_id()]);
        sim.faults(fault);
        let dir = tempfile::tempdir().unwrap();
        let running = start_service(&sim, dir.path(), &[]).await;
        let admin = running.admin_addr;
        let mut client = cutover_proto::v1::actuator_client::ActuatorClient::connect(format!(
            "http://{}",
            running.grpc_addr
        ))
        .await
        .unwrap();
        let text = format!(
            "{:?}",
            client.set_node_admin_state(set0(AdminState::Down)).await
        );
        for n in &named {
            assert!(
                text.contains(n.as_str()),
                "the FAILED reason names {n:?}: {text}"
            );
        }
        wait_for_metric(
            admin,
            "the refusal in the metric",
            format!(
                "cutover_actuator_arm_access_refused_total{{load_balancer=\"kubernetes-internal\",code=\"{code}\",action=\"-\"}} 1"
            ),
        )
        .await;
        assert_eq!(puts(&sim, "kubernetes-internal"), 1);
        // Asked again and again within the pause: no PUT goes out.
        for _ in 0..3 {
            let _ = client
                .set_node_admin_state(briefly(set0(AdminState::None)))
                .await;
            let _ = client
                .set_node_admin_state(briefly(set0(AdminState::Down)))
                .await;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            puts(&sim, "kubernetes-internal"),
            1,
            "{code}: writes went out during the pause"
        );
        assert!(running.shutdown().await);
    }
}

#[tokio::test]
async fn the_write_probe_reports_a_policy_deny_and_a_read_only_lock() {
    for (fault, named, _, finding) in governance_cases() {
        let sim = start_seed("byo-vnet").await;
        assign(&sim, &[vnet_id()]);
        sim.faults(fault);
        // The permissions API does not show them: reads alone pass.
        let r = run_preflight(&sim, false).await;
        assert!(!r.blocking(), "{}", r.text);
        let r = run_preflight(&sim, true).await;
        assert!(r.blocking() && r.has(finding), "{}", r.text);
        assert!(r.text.contains(named[1].as_str()), "{}", r.text);
    }
}
