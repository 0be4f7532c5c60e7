//! azure.json's `cloud` against an arm-sim that accepts only one cloud's token audience, as a
//! sovereign cloud's ARM does (401 `InvalidAuthenticationTokenAudience` otherwise): the
//! actuator asks for `<resourceManagerEndpoint>/.default` of the configured cloud. The ARM
//! endpoint and the authority are the simulator's (flags override each value of the cloud on
//! its own); the scope is the cloud's.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[path = "integration/common.rs"]
mod common;

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::preflight;
use arm_sim::ArmSim;
use clap::Parser;
use common::*;

const CHINA: &[&str] = &[
    "https://management.core.chinacloudapi.cn",
    "https://management.chinacloudapi.cn",
];
const US_GOV: &[&str] = &[
    "https://management.core.usgovcloudapi.net",
    "https://management.usgovcloudapi.net",
];

async fn preflight_in(
    sim: &ArmSim,
    cluster: &aks_fixture::Cluster,
    cloud: &str,
) -> anyhow::Result<preflight::classify::Report> {
    let dir = tempfile::tempdir().unwrap();
    let mut json = cluster.azure_json();
    json["cloud"] = serde_json::json!(cloud);
    let config = dir.path().join("azure.json");
    std::fs::write(&config, json.to_string()).unwrap();
    let mut args = base_args(sim, &config);
    args.push("--preflight".into());
    preflight::run(
        &Args::try_parse_from(args).unwrap(),
        &EnvOverrides::default(),
    )
    .await
}

fn accept(sim: &ArmSim, audiences: &[&str]) {
    sim.set_accepted_audiences(Some(audiences.iter().map(|s| s.to_string()).collect()));
}

#[tokio::test]
async fn each_sovereign_cloud_gets_a_token_its_arm_accepts() {
    let (sim, cluster) = start_sim("aks").await;
    for (cloud, audiences) in [
        ("AzureChinaCloud", CHINA),
        ("AzureUSGovernmentCloud", US_GOV),
    ] {
        accept(&sim, audiences);
        let r = preflight_in(&sim, &cluster, cloud).await.unwrap();
        assert!(!r.blocking(), "{cloud}: {}", r.text);
    }
}

#[tokio::test]
async fn a_token_for_another_cloud_is_refused_by_a_sovereign_arm() {
    let (sim, cluster) = start_sim("aks").await;
    accept(&sim, CHINA);
    let r = preflight_in(&sim, &cluster, "AzurePublicCloud")
        .await
        .unwrap();
    assert!(r.blocking(), "{}", r.text);
    assert!(
        r.text.contains("InvalidAuthenticationTokenAudience"),
        "{}",
        r.text
    );
}

#[tokio::test]
async fn an_unknown_cloud_stops_start_up_naming_the_field() {
    let (sim, cluster) = start_sim("aks").await;
    let e = preflight_in(&sim, &cluster, "AzureGermanCloud")
        .await
        .unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.contains("cloud: unknown cloud \"AzureGermanCloud\""),
        "{text}"
    );
}
