//! azure.json's `cloud` against an arm-sim that accepts only one cloud's token audience, as a
//! sovereign cloud's ARM does (401 `InvalidAuthenticationTokenAudience` otherwise): the
//! actuator asks for `<resourceManagerEndpoint>/.default` of the configured cloud. The ARM
//! endpoint and the authority are the simulator's (flags override each value of the cloud on
//! its own); the scope is the cloud's. A custom cloud (azure.json's `resourceManagerEndpoint`)
//! takes all three from arm-sim's `/metadata/endpoints`, with no flag.
//!
//! End to end with the real host names: arm-sim answers as a sovereign cloud's ARM and login
//! hosts (`management.chinacloudapi.cn` and `login.chinacloudapi.cn`, ...) on a handed listener,
//! and the actuator reaches them through a dialer (no DNS, nothing leaves the process) with no
//! endpoint flag: the hosts it dials are the cloud's, and the token's audience is the one
//! the cloud's ARM accepts.

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

/// A sovereign cloud: azure.json's name, its ARM and login hosts, the scope's audience.
struct Sovereign {
    cloud: &'static str,
    arm: &'static str,
    login: &'static str,
    audience: &'static str,
}

const SOVEREIGN: &[Sovereign] = &[
    Sovereign {
        cloud: "AzureChinaCloud",
        arm: "management.chinacloudapi.cn",
        login: "login.chinacloudapi.cn",
        audience: "https://management.chinacloudapi.cn",
    },
    Sovereign {
        cloud: "AzureUSGovernmentCloud",
        arm: "management.usgovcloudapi.net",
        login: "login.microsoftonline.us",
        audience: "https://management.usgovcloudapi.net",
    },
];

type Dialled = std::sync::Arc<parking_lot::Mutex<Vec<(String, u16)>>>;

/// A dialer reaching each of `hosts` on port 443 through `to` (arm-sim's handed listener),
/// over in-memory pipes; every other destination is refused. Records what was dialled.
fn dialer_to(
    hosts: &[&str],
    to: tokio::sync::mpsc::Sender<(cutover_runtime::dial::BoxStream, std::net::SocketAddr)>,
    dialled: Dialled,
) -> cutover_runtime::dial::Dialer {
    use cutover_runtime::dial::BoxStream;
    let hosts: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    cutover_runtime::dial::Dialer::new(move |host, port| {
        dialled.lock().push((host.clone(), port));
        let to = (port == 443 && hosts.contains(&host)).then(|| to.clone());
        async move {
            let to = to.ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::ConnectionRefused,
                    format!("no route to {host}:{port}"),
                )
            })?;
            let (ours, theirs) = tokio::io::duplex(256 * 1024);
            to.send((BoxStream::new(theirs), "10.0.0.2:40000".parse().unwrap()))
                .await
                .map_err(|_| std::io::Error::other("arm-sim gone"))?;
            Ok(BoxStream::new(ours))
        }
    })
}

#[tokio::test]
async fn sovereign_clouds_are_reached_at_their_own_hosts_with_their_audience() {
    use actuator_svc::runtime::{self, Transports};
    use cutover_runtime::dial::Listener;
    for s in SOVEREIGN {
        // arm-sim as the cloud's ARM (its URLs name that host) and login host (its certificate
        // names both), accepting only the cloud's audience.
        let (to, listener) = Listener::handed("10.0.0.4:443".parse().unwrap());
        let options = arm_sim::ArmSimOptions {
            tls: true,
            tuning: fast_tuning(),
            tls_names: vec![s.login.into()],
            ..arm_sim::ArmSimOptions::preset("aks").unwrap()
        };
        let sim = ArmSim::start_on(options, listener, s.arm).await.unwrap();
        assert_eq!(sim.url(), format!("https://{}", s.arm));
        accept(&sim, &[s.audience]);
        let cluster = aks_fixture::preset("aks").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut json = cluster.azure_json();
        json["cloud"] = serde_json::json!(s.cloud);
        let config = dir.path().join("azure.json");
        std::fs::write(&config, json.to_string()).unwrap();
        // No endpoint flag: only the simulator's CA (--azure-ca-file).
        let mut args = base_args(&sim, &config);
        for flag in ["--arm-endpoint", "--aad-authority"] {
            let at = args.iter().position(|a| a == flag).unwrap();
            args.drain(at..at + 2);
        }
        let dialled = Dialled::default();
        let dialer = || dialer_to(&[s.arm, s.login], to.clone(), dialled.clone());

        let mut preflight_args = args.clone();
        preflight_args.push("--preflight".into());
        let r = preflight::run_with(
            &Args::try_parse_from(preflight_args).unwrap(),
            &EnvOverrides::default(),
            Some(dialer()),
        )
        .await
        .unwrap();
        assert!(!r.blocking(), "{}: {}", s.cloud, r.text);

        let tcp = || async {
            Listener::from(tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap())
        };
        let running = runtime::start_with(
            Args::try_parse_from(args).unwrap(),
            EnvOverrides::default(),
            Transports {
                grpc: tcp().await,
                admin: tcp().await,
                dialer: Some(dialer()),
            },
        )
        .await
        .unwrap();
        let admin = running.admin_addr;
        wait_until("actuator ready", || async move {
            http_get(admin, "/ready").await.0 == 200
        })
        .await;
        assert!(running.shutdown().await);

        // The token from the cloud's login host, ARM at its management host, nothing else.
        let hosts: std::collections::BTreeSet<(String, u16)> =
            dialled.lock().iter().cloned().collect();
        let want: std::collections::BTreeSet<(String, u16)> =
            [(s.arm.to_string(), 443), (s.login.to_string(), 443)].into();
        assert_eq!(hosts, want, "{}", s.cloud);
        let reqs = sim.requests();
        assert!(
            reqs.iter()
                .any(|r| r.path.contains("/oauth2/v2.0/token") && r.status == 200),
            "{}: {reqs:?}",
            s.cloud
        );
        assert!(
            reqs.iter().any(|r| r.method == "GET"
                && r.path.contains("/loadBalancers/")
                && r.status == 200),
            "{}: {reqs:?}",
            s.cloud
        );
        assert!(
            reqs.iter().all(|r| r.status != 401),
            "{}: a token was refused: {reqs:?}",
            s.cloud
        );
    }
}
