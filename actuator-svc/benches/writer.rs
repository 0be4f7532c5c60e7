//! Writer benchmark against arm-sim with realistic latencies (PUT ~200 ms, operation ~2 s).
//! Prints a table; run with `cargo bench -p actuator-svc --bench writer` (`-- gets`: section 3 only).
//!
//! 1. One node Down on a dual-stack cluster with two LBs (4 pools): time to EFFECTIVE as the
//!    actuator reports it, and as the simulator's effective log shows it (when traffic is cut),
//!    against the floor (one write + one operation per LB, in parallel), per strategy.
//! 2. 500 nodes Down within one second through the stream: ARM writes and time to all effective.
//! 3. Cached `GetNodeAdminState` latency at 5,000 nodes: one at a time, and 200 at once over
//!    one connection (issue 9's targets: p99 5 ms single, 50 ms at 200 concurrent).

#![allow(clippy::unwrap_used)]

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use actuator_svc::runtime;
use arm_sim::faults::{Latencies, Tuning};
use arm_sim::{ArmSim, ArmSimOptions};
use clap::Parser;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::*;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

const PUT_MS: u64 = 200;
const COMPLETION_MS: u64 = 2000;

fn tuning() -> Tuning {
    Tuning {
        latency_ms: Latencies {
            get: 60,
            put: PUT_MS,
            delete: 200,
            list: 60,
            poll: 40,
            token: 20,
        },
        completion_delay_ms: COMPLETION_MS,
        retry_after_secs: 1,
        lock_retry_after_secs: 1,
        ..Tuning::default()
    }
}

fn node_ref(n: &aks_fixture::Node) -> NodeRef {
    NodeRef {
        name: n.name.clone(),
        uid: n.uid.clone(),
        provider_id: n.provider_id.clone(),
        internal_ips: vec![n.ipv4.to_string(), n.ipv6.to_string()],
        zone: n.zone.clone(),
    }
}

struct Setup {
    sim: ArmSim,
    cluster: aks_fixture::Cluster,
    running: runtime::Running,
    client: ActuatorClient<tonic::transport::Channel>,
    _dir: tempfile::TempDir,
}

async fn setup(nodes: usize, strategy: &str) -> Setup {
    let mut opts = ArmSimOptions {
        seed: arm_sim::seed::Seed::preset("aks", Some(nodes)).unwrap(),
        ..Default::default()
    };
    opts.tuning = tuning();
    let sim = ArmSim::start(opts).await.unwrap();
    let cluster = aks_fixture::preset_sized("aks", nodes).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("azure.json");
    std::fs::write(&config, cluster.azure_json().to_string()).unwrap();
    let ca = dir.path().join("ca.pem");
    sim.write_ca(&ca).unwrap();
    let args = Args::try_parse_from([
        "actuator-svc",
        "--cloud-config",
        config.to_str().unwrap(),
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
        "--write-strategy",
        strategy,
        "--self-heal-interval",
        "1h",
        "--poll-interval",
        "1s",
        // Used alone: tool holds are kept in memory.
        "--standalone",
        // On loopback, measuring writes: plaintext, said explicitly.
        "--insecure-plaintext",
        // Every node goes Down in the mass case: the blast-radius guard is lifted.
        "--max-down-share",
        "1.0",
        // The Get section measures the RPC path, not the per-tool rate limit.
        "--tool-rate",
        "100000",
        "--tool-burst",
        "100000",
    ])
    .unwrap();
    let running = runtime::start(args, EnvOverrides::default()).await.unwrap();
    let client = ActuatorClient::connect(format!("http://{}", running.grpc_addr))
        .await
        .unwrap();
    // Wait until ready (pools read and a token obtained) so the first write is not a cold read.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = client.clone();
        let probe = c
            .get_node_admin_state(GetNodeAdminStateRequest {
                node: Some(node_ref(&cluster.nodes[0])),
                fresh: false,
            })
            .await;
        if probe.is_ok() || Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Setup {
        sim,
        cluster,
        running,
        client,
        _dir: dir,
    }
}

fn puts(sim: &ArmSim) -> usize {
    sim.requests().iter().filter(|r| r.method == "PUT").count()
}

/// (actuator-reported, simulator-effective) seconds for one node going Down.
async fn one_node(s: &mut Setup, index: usize) -> (f64, f64) {
    let node = &s.cluster.nodes[index];
    let start_wall = jiff::Timestamp::now();
    let start = Instant::now();
    let rsp = s
        .client
        .set_node_admin_state(SetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            admin_state: AdminState::Down as i32,
            reason: "bench".into(),
            wait: WaitFor::Effective as i32,
            wait_timeout: Some(prost_types::Duration {
                seconds: 60,
                nanos: 0,
            }),
        })
        .await
        .unwrap()
        .into_inner();
    let reported = start.elapsed().as_secs_f64();
    assert_eq!(
        rsp.result.unwrap().phase,
        ResultPhase::Effective as i32,
        "bench write did not become effective"
    );
    let last = s
        .sim
        .effective_log()
        .iter()
        .filter(|e| e.time >= start_wall)
        .map(|e| e.time)
        .max()
        .unwrap();
    let effective = (last.as_millisecond() - start_wall.as_millisecond()) as f64 / 1000.0;
    (reported, effective)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// 500 nodes Down spread over one second; (ARM writes, seconds to all EFFECTIVE, sim-effective).
async fn mass(strategy: &str) -> (usize, f64, f64) {
    let s = setup(500, strategy).await;
    let mut client = s.client.clone();
    let (tx, rx) = mpsc::channel(1024);
    let mut inbound = client
        .stream_desired_states(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    let hello = Hello {
        cluster_name: "kubernetes".into(),
        sender_identity: "bench".into(),
        leader_epoch: 1,
        // One fake signal-svc process throughout.
        incarnation: 1,
    };
    tx.send(SignalMessage {
        kind: Some(signal_message::Kind::Hello(hello)),
    })
    .await
    .unwrap();
    inbound.message().await.unwrap();
    tx.send(SignalMessage {
        kind: Some(signal_message::Kind::SnapshotEnd(SnapshotEnd {
            node_count: 0,
        })),
    })
    .await
    .unwrap();
    let before = puts(&s.sim);
    let start_wall = jiff::Timestamp::now();
    let start = Instant::now();
    let nodes: Vec<_> = s.cluster.nodes.clone();
    let sender = tokio::spawn(async move {
        for (i, n) in nodes.iter().enumerate() {
            let d = NodeDesiredState {
                node: Some(node_ref(n)),
                desired: AdminState::Down as i32,
                reasons: vec!["node.kubernetes.io/out-of-service".into()],
                version: Some(Version {
                    epoch: 1,
                    seq: i as u64 + 1,
                }),
                ..Default::default()
            };
            tx.send(SignalMessage {
                kind: Some(signal_message::Kind::Delta(d)),
            })
            .await
            .unwrap();
            // 500 nodes within one second.
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        tx
    });
    let mut effective = std::collections::HashSet::new();
    while effective.len() < 500 {
        let m = tokio::time::timeout(Duration::from_secs(300), inbound.message())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        if let Some(actuator_message::Kind::Result(r)) = m.kind
            && r.phase == ResultPhase::Effective as i32
        {
            effective.insert(r.node.unwrap().uid);
        }
    }
    let took = start.elapsed().as_secs_f64();
    let _tx = sender.await.unwrap();
    let last = s
        .sim
        .effective_log()
        .iter()
        .filter(|e| e.time >= start_wall)
        .map(|e| e.time)
        .max()
        .unwrap();
    let sim_eff = (last.as_millisecond() - start_wall.as_millisecond()) as f64 / 1000.0;
    let writes = puts(&s.sim) - before;
    s.running.shutdown().await;
    (writes, took, sim_eff)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    // `cargo bench -p actuator-svc --bench writer -- gets`: only the cached Get section.
    if std::env::args().any(|a| a == "gets") {
        cached_gets(5000).await;
        return;
    }
    let floor = (PUT_MS + COMPLETION_MS) as f64 / 1000.0;
    println!(
        "arm-sim: PUT {PUT_MS} ms, operation {COMPLETION_MS} ms, Retry-After 1 s; preset aks (dual-stack, LBs kubernetes + kubernetes-internal, 2 pools each)"
    );
    println!();
    println!(
        "| scenario | strategy | ARM writes | actuator EFFECTIVE (s) | traffic cut in sim (s) | floor (s) |"
    );
    println!("|---|---|---|---|---|---|");
    let mut medians = Vec::new();
    for strategy in ["whole-lb", "per-pool"] {
        let mut s = setup(12, strategy).await;
        let before = puts(&s.sim);
        let mut reported = Vec::new();
        let mut eff = Vec::new();
        for i in 0..3 {
            let (r, e) = one_node(&mut s, 3 + i).await;
            reported.push(r);
            eff.push(e);
        }
        let writes = (puts(&s.sim) - before) as f64 / 3.0;
        let (r, e) = (median(reported), median(eff));
        medians.push((strategy, r));
        println!(
            "| 1 node Down (median of 3) | {strategy} | {writes:.0} per node | {r:.2} | {e:.2} | {floor:.2} |"
        );
        s.running.shutdown().await;
    }
    for strategy in ["whole-lb", "per-pool"] {
        let (writes, took, sim_eff) = mass(strategy).await;
        println!(
            "| 500 nodes Down within 1 s | {strategy} | {writes} | {took:.2} | {sim_eff:.2} | {floor:.2} |"
        );
    }
    medians.sort_by(|a, b| a.1.total_cmp(&b.1));
    println!();
    println!("winner (1 node, time to EFFECTIVE): {}", medians[0].0);
    cached_gets(5000).await;
}

fn percentile_ms(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1] * 1000.0
}

/// Cached Get latency: 500 Gets one after another, then 5 rounds of 200 concurrent Gets.
async fn cached_gets(nodes: usize) {
    let s = setup(nodes, "whole-lb").await;
    let get = |i: usize| {
        let mut c = s.client.clone();
        let node = node_ref(&s.cluster.nodes[i % s.cluster.nodes.len()]);
        async move {
            let t = Instant::now();
            c.get_node_admin_state(GetNodeAdminStateRequest {
                node: Some(node),
                fresh: false,
            })
            .await
            .unwrap();
            t.elapsed().as_secs_f64()
        }
    };
    let mut single = Vec::new();
    for i in 0..500 {
        single.push(get(i * 7).await);
    }
    let mut concurrent = Vec::new();
    for round in 0..5 {
        let all = (0..200).map(|i| get(round * 1000 + i * 13));
        concurrent.extend(futures::future::join_all(all).await);
    }
    println!();
    println!("| cached Get, {nodes} nodes | p50 (ms) | p99 (ms) | target p99 (ms) |");
    println!("|---|---|---|---|");
    println!(
        "| one at a time (500) | {:.2} | {:.2} | 5 |",
        percentile_ms(single.clone(), 50.0),
        percentile_ms(single, 99.0)
    );
    println!(
        "| 200 concurrent (5 rounds) | {:.2} | {:.2} | 50 |",
        percentile_ms(concurrent.clone(), 50.0),
        percentile_ms(concurrent, 99.0)
    );
}
