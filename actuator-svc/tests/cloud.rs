//! azure.json's `cloud` against an arm-sim that accepts only one cloud's token audience, as a
//! sovereign cloud's ARM does (401 `InvalidAuthenticationTokenAudience` otherwise): the
//! actuator asks for `<resourceManagerEndpoint>/.default` of the configured cloud. The ARM
//! endpoint and the authority are the simulator's (flags override each value of the cloud on
//! its own); the scope is the cloud's. A custom cloud (azure.json's `resourceManagerEndpoint`)
//! takes all three from arm-sim's `/metadata/endpoints`, with no flag.

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

/// azure.json naming a custom cloud by `resourceManagerEndpoint` (arm-sim's URL), with no
/// `--arm-endpoint`, `--aad-authority` or `--arm-token-scope`: the actuator reads the
/// endpoints from ARM's metadata document, as cloud-provider-azure does.
fn custom_cloud_args(
    sim: &ArmSim,
    cluster: &aks_fixture::Cluster,
    dir: &std::path::Path,
) -> Vec<String> {
    let mut json = cluster.azure_json();
    json["cloud"] = serde_json::json!("AzureStackCloud");
    json["resourceManagerEndpoint"] = serde_json::json!(sim.url());
    let config = dir.join("azure.json");
    std::fs::write(&config, json.to_string()).unwrap();
    let mut args = base_args(sim, &config);
    for flag in ["--arm-endpoint", "--aad-authority"] {
        let at = args.iter().position(|a| a == flag).unwrap();
        args.drain(at..at + 2);
    }
    args
}

#[tokio::test]
async fn a_custom_cloud_is_read_from_the_resource_manager_metadata_endpoint() {
    let (sim, cluster) = start_sim("aks").await;
    // The audience only the metadata names: a token for any other is refused.
    const AUDIENCE: &str = "https://management.stack.example/5f0c7c1e";
    accept(&sim, &[AUDIENCE]);
    let dir = tempfile::tempdir().unwrap();
    let mut args = custom_cloud_args(&sim, &cluster, dir.path());
    args.push("--preflight".into());
    let r = preflight::run(
        &Args::try_parse_from(args).unwrap(),
        &EnvOverrides::default(),
    )
    .await
    .unwrap();
    assert!(!r.blocking(), "{}", r.text);
    let reqs = sim.requests();
    assert_eq!(
        reqs.first().map(|r| r.path.as_str()),
        Some("/metadata/endpoints?api-version=2019-05-01"),
        "the metadata document is read first"
    );
    assert!(
        reqs.iter()
            .all(|r| !r.path.contains("metadata/endpoints") || !r.authorization),
        "no token to the metadata endpoint"
    );
    // The service itself starts on it and is ready (a token and every LB read).
    let dir = tempfile::tempdir().unwrap();
    let args = custom_cloud_args(&sim, &cluster, dir.path());
    let running =
        actuator_svc::runtime::start(Args::try_parse_from(args).unwrap(), EnvOverrides::default())
            .await
            .unwrap();
    let admin = running.admin_addr;
    wait_until("actuator ready", || async move {
        http_get(admin, "/ready").await.0 == 200
    })
    .await;
    assert!(running.shutdown().await);
}

#[tokio::test]
async fn an_unreadable_metadata_endpoint_stops_start_up_naming_it() {
    let (sim, cluster) = start_sim("aks").await;
    let dir = tempfile::tempdir().unwrap();
    let mut json = cluster.azure_json();
    // Not ARM's metadata: arm-sim answers 404 under another path.
    json["resourceManagerEndpoint"] = serde_json::json!(format!("{}/nothing-here", sim.url()));
    let config = dir.path().join("azure.json");
    std::fs::write(&config, json.to_string()).unwrap();
    let mut args = base_args(&sim, &config);
    args.push("--preflight".into());
    let e = preflight::run(
        &Args::try_parse_from(args).unwrap(),
        &EnvOverrides::default(),
    )
    .await
    .unwrap_err();
    let text = format!("{e:#}");
    assert!(
        text.contains("resourceManagerEndpoint")
            && text.contains("/nothing-here/metadata/endpoints?api-version=2019-05-01"),
        "{text}"
    );
    // Plain http off loopback is refused before anything is sent.
    let mut json = cluster.azure_json();
    json["resourceManagerEndpoint"] = serde_json::json!("http://management.stack.example");
    std::fs::write(&config, json.to_string()).unwrap();
    let mut args = base_args(&sim, &config);
    args.push("--preflight".into());
    let e = preflight::run(
        &Args::try_parse_from(args).unwrap(),
        &EnvOverrides::default(),
    )
    .await
    .unwrap_err();
    assert!(format!("{e:#}").contains("use https"), "{e:#}");
}
