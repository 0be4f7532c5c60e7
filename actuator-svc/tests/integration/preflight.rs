//! `--preflight` against arm-sim: one seed variant per problem, each a shape real ARM answers
//! (Basic SKU, ServiceGateway's SKU `Service`, a rule without probe, a NAT-only pool, a missing
//! LB, a role without a read permission). The preflight never writes.

use crate::common::*;
use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::preflight::{self, classify::Report};
use arm_sim::ArmSim;
use arm_sim::faults::FaultSpec;
use clap::Parser;
use serde_json::json;

async fn run_preflight(sim: &ArmSim, cluster: &aks_fixture::Cluster) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), cluster);
    let mut args = base_args(sim, &config);
    args.push("--preflight".into());
    let args = Args::try_parse_from(args).unwrap();
    let report = preflight::run(&args, &EnvOverrides::default())
        .await
        .unwrap();
    let writes = sim
        .requests()
        .iter()
        // Token requests are POSTs to Azure AD, not ARM writes.
        .filter(|r| r.path.starts_with("/subscriptions") && r.method != "GET")
        .count();
    assert_eq!(writes, 0, "the preflight wrote:\n{}", report.text);
    report
}

#[tokio::test]
async fn preflight_of_a_plain_aks_cluster_is_ok() {
    let (sim, cluster) = start_sim_edited(|_| {}).await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(!r.blocking(), "{}", r.text);
    assert!(
        r.text.contains("api-version 2024-03-01: served"),
        "{}",
        r.text
    );
    assert!(r.text.contains("NIC-based"), "{}", r.text);
    assert!(r.text.contains("entries a cut acts on"), "{}", r.text);
    assert!(r.has("outbound-only-pool"), "{}", r.text);
    // One line per VM with its entries (no Kubernetes access: VMs, not nodes).
    assert!(r.text.contains("vmss "), "{}", r.text);
}

#[tokio::test]
async fn preflight_blocks_on_basic_sku() {
    let (sim, cluster) = start_sim_edited(|lbs| {
        seed_lb(lbs, "kubernetes").sku = Some(json!({"name": "Basic", "tier": "Regional"}));
    })
    .await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.blocking() && r.has("basic-sku"), "{}", r.text);
}

#[tokio::test]
async fn preflight_names_a_service_gateway_lb_and_never_manages_its_pools() {
    let (sim, cluster) = start_sim_edited(|lbs| {
        seed_lb(lbs, "kubernetes-internal").sku = Some(json!({"name": "Service"}));
    })
    .await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.has("service-gateway"), "{}", r.text);
    assert!(
        r.text.contains("not a node pool: ServiceGateway pod IPs"),
        "{}",
        r.text
    );
    // The public LB is still a node LB: not blocked.
    assert!(!r.blocking(), "{}", r.text);
}

#[tokio::test]
async fn preflight_reports_rules_without_probes() {
    let (sim, cluster) = start_sim_edited(|lbs| {
        let props = seed_lb(lbs, "kubernetes").properties.as_mut().unwrap();
        let rules = props["loadBalancingRules"].as_array_mut().unwrap();
        assert!(!rules.is_empty());
        rules[0]["properties"]
            .as_object_mut()
            .unwrap()
            .remove("probe");
    })
    .await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.has("rule-without-probe"), "{}", r.text);
    assert!(!r.blocking(), "{}", r.text);
}

#[tokio::test]
async fn preflight_reports_a_pool_used_only_by_nat_rules() {
    let (sim, cluster) = start_sim_edited(|lbs| add_nat_only_pool(lbs, "ssh-nat")).await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.has("nat-only-pool"), "{}", r.text);
    assert!(r.text.contains("kubernetes/ssh-nat"), "{}", r.text);
}

#[tokio::test]
async fn preflight_blocks_when_no_managed_lb_exists() {
    let (sim, cluster) = start_sim_edited(|lbs| lbs.clear()).await;
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.blocking() && r.has("no-managed-lb"), "{}", r.text);
    assert!(
        r.text
            .contains("kubernetes-internal (configured): not found"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn preflight_blocks_on_a_refused_read_and_names_the_permission() {
    let (sim, cluster) = start_sim_edited(|_| {}).await;
    sim.faults(FaultSpec {
        deny_actions: Some(vec!["Microsoft.Network/networkInterfaces/read".into()]),
        ..FaultSpec::default()
    });
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.blocking() && r.has("refused-read"), "{}", r.text);
    assert!(
        r.text
            .contains("HTTP 403 AuthorizationFailed): missing permission Microsoft.Network/networkInterfaces/read"),
        "{}",
        r.text
    );

    sim.faults(FaultSpec {
        deny_actions: Some(vec!["Microsoft.Network/loadBalancers/read".into()]),
        ..FaultSpec::default()
    });
    let r = run_preflight(&sim, &cluster).await;
    assert!(r.blocking(), "{}", r.text);
    assert!(
        r.text
            .contains("missing permission Microsoft.Network/loadBalancers/read"),
        "{}",
        r.text
    );
    // A refused read is not reported as a missing LB.
    assert!(!r.has("no-managed-lb"), "{}", r.text);
}
