//! Shared harness: an in-process arm-sim seeded from the AKS fixture, an in-process actuator
//! pointed at it, a real tonic client, and polling helpers (no fixed sleeps).

#![allow(dead_code)]

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::runtime::{self, Running};
use aks_fixture::{Cluster, Node};
use arm_sim::faults::{Latencies, Tuning};
use arm_sim::seed::{Seed, SeedLb};
use arm_sim::{ArmSim, ArmSimOptions};
use clap::Parser;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tonic::transport::Channel;

pub const WAIT: Duration = Duration::from_secs(30);

/// Fast simulator: millisecond latencies, short operations, `Retry-After: 0`.
pub fn fast_tuning() -> Tuning {
    Tuning {
        latency_ms: Latencies {
            get: 2,
            put: 5,
            delete: 5,
            list: 2,
            poll: 1,
            token: 1,
        },
        completion_delay_ms: 150,
        retry_after_secs: 0,
        lock_retry_after_secs: 0,
        ..Tuning::default()
    }
}

pub async fn start_sim(preset: &str) -> (ArmSim, Cluster) {
    let mut opts = ArmSimOptions::preset(preset).expect("preset");
    opts.tuning = fast_tuning();
    let sim = ArmSim::start(opts).await.expect("arm-sim starts");
    (sim, aks_fixture::preset(preset).unwrap())
}

/// The `aks` preset's seed with its load balancers changed by `edit`, served by a fresh
/// arm-sim at [`fast_tuning`].
pub async fn start_sim_edited(edit: impl FnOnce(&mut Vec<SeedLb>)) -> (ArmSim, Cluster) {
    let cluster = aks_fixture::preset("aks").unwrap();
    let mut seed = Seed::preset("aks", None).unwrap();
    edit(&mut seed.subscriptions[0].resource_groups[0].load_balancers);
    let opts = ArmSimOptions {
        seed,
        tuning: fast_tuning(),
        ..ArmSimOptions::default()
    };
    (ArmSim::start(opts).await.unwrap(), cluster)
}

/// The seeded load balancer `name`.
pub fn seed_lb<'a>(lbs: &'a mut [SeedLb], name: &str) -> &'a mut SeedLb {
    lbs.iter_mut().find(|l| l.name == name).unwrap()
}

/// Adds to the public LB a copy of its first pool named `name` (so every node has entries
/// there) that only an inbound NAT rule v2 uses (a port range on a pool, as the portal
/// creates for SSH access).
pub fn add_nat_only_pool(lbs: &mut [SeedLb], name: &str) {
    let l = seed_lb(lbs, "kubernetes");
    let mut pool = l.backend_pools[0].clone();
    pool.name = name.into();
    l.backend_pools.push(pool);
    let lb_id =
        "/subscriptions/x/resourceGroups/x/providers/Microsoft.Network/loadBalancers/kubernetes";
    let props = l.properties.as_mut().unwrap();
    let frontend = props["frontendIPConfigurations"][0]["name"].clone();
    props["inboundNatRules"] = serde_json::json!([{ "name": "ssh", "properties": {
        "frontendIPConfiguration": {"id": format!("{lb_id}/frontendIPConfigurations/{}", frontend.as_str().unwrap())},
        "backendAddressPool": {"id": format!("{lb_id}/backendAddressPools/{name}")},
        "protocol": "Tcp", "frontendPortRangeStart": 50000, "frontendPortRangeEnd": 50100,
        "backendPort": 22, "idleTimeoutInMinutes": 4, "enableFloatingIP": false, "enableTcpReset": false
    }}]);
}

pub fn write_config(dir: &Path, cluster: &Cluster) -> PathBuf {
    let path = dir.join("azure.json");
    std::fs::write(&path, cluster.azure_json().to_string()).unwrap();
    path
}

/// The flags that point the actuator at `sim`: ARM, the AAD authority (https, as
/// azure_identity requires) and the simulator's CA, written next to `config`.
pub fn sim_args(sim: &ArmSim, config: &Path) -> Vec<String> {
    let ca = config.with_file_name("arm-sim-ca.pem");
    sim.write_ca(&ca).unwrap();
    vec![
        "--arm-endpoint".into(),
        sim.url().into(),
        "--aad-authority".into(),
        sim.aad_authority(),
        "--azure-ca-file".into(),
        ca.to_str().unwrap().into(),
    ]
}

pub fn base_args(sim: &ArmSim, config: &Path) -> Vec<String> {
    let mut args: Vec<String> = [
        "actuator-svc",
        "--cloud-config",
        config.to_str().unwrap(),
        "--grpc-listen",
        "127.0.0.1:0",
        "--admin-listen",
        "127.0.0.1:0",
        "--poll-interval",
        "50ms",
        "--self-heal-interval",
        "1h",
        "--shutdown-grace",
        "10s",
        "--identity",
        "test-actuator",
        // Most tests use the actuator alone: a tool hold is kept in memory at once.
        "--standalone",
        // Plaintext on loopback, said explicitly (start_actuator drops it for a TLS test).
        "--insecure-plaintext",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(sim_args(sim, config));
    args
}

pub struct Actuator {
    pub running: Running,
    pub client: ActuatorClient<Channel>,
    pub dir: tempfile::TempDir,
}

impl Actuator {
    pub fn admin_url(&self, path: &str) -> (std::net::SocketAddr, String) {
        (self.running.admin_addr, path.to_string())
    }
}

/// Starts an actuator against `sim` with extra flags, and waits until it is ready.
pub async fn start_actuator(sim: &ArmSim, cluster: &Cluster, extra: &[&str]) -> Actuator {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), cluster);
    let mut args = base_args(sim, &config);
    if extra.contains(&"--tls-cert") {
        args.retain(|a| a != "--insecure-plaintext");
    }
    args.extend(extra.iter().map(|s| s.to_string()));
    let running = runtime::start(Args::try_parse_from(args).unwrap(), EnvOverrides::default())
        .await
        .expect("actuator starts");
    let admin = running.admin_addr;
    wait_until("actuator ready", || async move {
        http_get(admin, "/ready").await.0 == 200
    })
    .await;
    let client = ActuatorClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    Actuator {
        running,
        client,
        dir,
    }
}

/// Polls `cond` every 20 ms until true, failing after [`WAIT`] (the test kit's wait, for a
/// yes/no check).
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    cutover_testkit::eventually_within(WAIT, Duration::from_millis(20), what, || {
        let polled = cond();
        async move { polled.await.then_some(()) }
    })
    .await
}

/// A minimal HTTP/1.0 GET: (status, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
        return (0, String::new());
    };
    if s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .is_err()
    {
        return (0, String::new());
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf).await;
    let text = String::from_utf8_lossy(&buf).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split("\r\n\r\n")
        .nth(1)
        .unwrap_or_default()
        .to_string();
    (status, body)
}

pub fn node_ref(n: &Node) -> NodeRef {
    NodeRef {
        name: n.name.clone(),
        uid: n.uid.clone(),
        provider_id: n.provider_id.clone(),
        internal_ips: vec![n.ipv4.to_string(), n.ipv6.to_string()],
        zone: n.zone.clone(),
    }
}

pub fn desired(n: &Node, state: AdminState, epoch: u64, seq: u64) -> NodeDesiredState {
    NodeDesiredState {
        node: Some(node_ref(n)),
        desired: state as i32,
        reasons: if state == AdminState::Down {
            vec!["node.kubernetes.io/out-of-service".into()]
        } else {
            vec![]
        },
        version: Some(Version { epoch, seq }),
        ..Default::default()
    }
}

pub fn set_req(n: &Node, state: AdminState, wait: WaitFor) -> SetNodeAdminStateRequest {
    SetNodeAdminStateRequest {
        node: Some(node_ref(n)),
        admin_state: state as i32,
        reason: "test".into(),
        wait: wait as i32,
        wait_timeout: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
    }
}

/// The effective admin state of every entry of `node` across the cluster's pools (skipping
/// outbound-only pools), as the simulator holds it: (lb, pool, state).
pub fn sim_states(sim: &ArmSim, cluster: &Cluster, node: &Node) -> Vec<(String, String, String)> {
    sim_states_on(sim, cluster, node, |_| true)
}

/// [`sim_states`] on the load balancers whose name `lb` accepts.
pub fn sim_states_on(
    sim: &ArmSim,
    cluster: &Cluster,
    node: &Node,
    lb_ok: impl Fn(&str) -> bool,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (lb, pool) in cluster.pools_of(&node.name) {
        if pool.outbound_only || !lb_ok(&lb.name) {
            continue;
        }
        let snap = sim.pool(&lb.name, &pool.name).expect("pool exists");
        let v4 = node.ipv4.to_string();
        let v6 = node.ipv6.to_string();
        let ipc = node
            .ip_configuration_id(
                &cluster.subscription_id,
                &cluster.resource_group,
                pool.family,
            )
            .to_ascii_lowercase();
        for e in &snap.entries {
            let mine = e
                .ip_address
                .as_deref()
                .is_some_and(|ip| ip == v4 || ip == v6)
                || e.nic_ip_configuration
                    .as_deref()
                    .is_some_and(|id| id.to_ascii_lowercase() == ipc);
            if mine {
                out.push((
                    lb.name.clone(),
                    pool.name.clone(),
                    format!("{:?}", e.effective),
                ));
            }
        }
    }
    out.sort();
    out
}

/// True when every entry of `node` is effectively `state` ("Down"/"None").
pub fn all_are(sim: &ArmSim, cluster: &Cluster, node: &Node, state: &str) -> bool {
    let s = sim_states(sim, cluster, node);
    !s.is_empty() && s.iter().all(|(_, _, st)| st == state)
}

/// Number of write requests (PUT) the simulator served for `lb` (the LB or its pools) so far.
pub fn puts(sim: &ArmSim, lb: &str) -> usize {
    calls(sim, "PUT", lb)
}

/// Reads of `lb` (the LB itself or one of its pools).
pub fn reads(sim: &ArmSim, lb: &str) -> usize {
    calls(sim, "GET", lb)
}

fn calls(sim: &ArmSim, method: &str, lb: &str) -> usize {
    let needle = format!("/loadbalancers/{}", lb.to_ascii_lowercase());
    sim.requests()
        .iter()
        .filter(|r| r.method == method)
        .filter(|r| {
            let p = r
                .path
                .split('?')
                .next()
                .unwrap_or_default()
                .to_ascii_lowercase();
            p.ends_with(&needle) || p.contains(&format!("{needle}/"))
        })
        .count()
}

pub fn phase(r: &NodeResult) -> ResultPhase {
    ResultPhase::try_from(r.phase).unwrap()
}

/// Opens a desired-state stream of leader epoch `epoch` with an empty snapshot.
pub async fn open_stream(
    a: &mut Actuator,
    epoch: u64,
) -> (
    tokio::sync::mpsc::Sender<SignalMessage>,
    tonic::Streaming<ActuatorMessage>,
) {
    let msg = |kind| SignalMessage { kind: Some(kind) };
    let (tx, rx) = tokio::sync::mpsc::channel(256);
    tx.send(msg(signal_message::Kind::Hello(Hello {
        cluster_name: "kubernetes".into(),
        sender_identity: "test".into(),
        leader_epoch: epoch,
        // One fake signal-svc process throughout.
        incarnation: 1,
    })))
    .await
    .unwrap();
    tx.send(msg(signal_message::Kind::SnapshotEnd(SnapshotEnd {
        node_count: 0,
    })))
    .await
    .unwrap();
    let inbound = a
        .client
        .stream_desired_states(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, inbound)
}
