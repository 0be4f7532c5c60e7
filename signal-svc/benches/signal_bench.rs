//! signal-bench: signal-to-wire latency and memory of signal-svc.
//!
//! Runs kube-sim (preset `aks`, 5,000 nodes) and a recording fake actuator in this process,
//! and signal-svc as a real child process (the built binary), so its RSS is its own.
//! Latency = from just before the taint PATCH is sent to kube-sim until the fake actuator has
//! received the matching delta (Down when tainting, None when untainting).
//!
//! Memory: for each cluster size (240, 1,000, 2,500, 5,000 nodes) a fresh kube-sim and
//! signal-svc; after start-up, a wave (min(500, nodes/2) nodes tainted, then restored) and
//! the latency runs, RSS (current and peak) of the child is printed.
//!
//! Run: `cargo bench -p signal-svc --bench signal_bench` (env BENCH_RUNS, BENCH_NODES as a
//! comma-separated list of sizes; latency is measured at the largest).

#![allow(clippy::unwrap_used, clippy::type_complexity, dead_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use cutover_proto::v1::AdminState;
use cutover_testkit::{Proc, Spec, free_port};
use std::time::Duration;
use tokio::time::Instant;

fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    let idx = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

/// signal-svc as a child (the kit's `Proc`: killed when dropped, its output in
/// `signal-svc.log` in the cluster's directory).
async fn spawn_svc(c: &Cluster, act: &FakeActuator, admin: &str) -> Proc {
    let spec = Spec::new("signal-svc", env!("CARGO_BIN_EXE_signal-svc").into())
        .args([
            "--cluster-name=kubernetes".to_owned(),
            "--identity=bench".to_owned(),
            "--namespace=cutover".to_owned(),
            format!("--kubeconfig={}", c.kubeconfig.display()),
            format!("--admin-listen={admin}"),
            format!("--actuator-endpoints={}", act.endpoint()),
            // The fake actuator on loopback is plaintext: said explicitly.
            "--insecure-plaintext".to_owned(),
        ])
        .env("RUST_LOG", "warn");
    let child = Proc::start(&spec, c.dir.path()).await.unwrap();
    let url = admin.to_owned();
    eventually("child ready", || {
        let url = url.clone();
        async move {
            let mut s = tokio::net::TcpStream::connect(&url).await.ok()?;
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            s.write_all(b"GET /ready HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await
                .ok()?;
            let mut buf = String::new();
            s.read_to_string(&mut buf).await.ok()?;
            buf.starts_with("HTTP/1.1 200").then_some(())
        }
    })
    .await;
    child
}

/// One wave: `count` nodes tainted at once, every Down received, then all restored.
async fn wave(c: &Cluster, act: &FakeActuator, names: &[String], count: usize) -> Duration {
    let started = Instant::now();
    let nodes: Vec<&String> = names
        .iter()
        .step_by(names.len() / count.max(1))
        .take(count)
        .collect();
    for chunk in nodes.chunks(50) {
        futures::future::join_all(
            chunk
                .iter()
                .map(|n| c.add_taint(n, "node.kubernetes.io/out-of-service", None, "NoExecute")),
        )
        .await;
    }
    for n in &nodes {
        eventually("wave Down", || async {
            act.state
                .delta_received_after(n, AdminState::Down, started)
                .map(|_| ())
        })
        .await;
    }
    let restore = Instant::now();
    for chunk in nodes.chunks(50) {
        futures::future::join_all(
            chunk
                .iter()
                .map(|n| c.remove_taint(n, "node.kubernetes.io/out-of-service")),
        )
        .await;
    }
    for n in &nodes {
        eventually("wave None", || async {
            act.state
                .delta_received_after(n, AdminState::None, restore)
                .map(|_| ())
        })
        .await;
    }
    started.elapsed()
}

struct Row {
    nodes: usize,
    ready: Duration,
    wave: Duration,
    rss: u64,
    hwm: u64,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let sizes: Vec<usize> = std::env::var("BENCH_NODES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![240, 1000, 2500, 5000]);
    let largest = sizes.iter().copied().max().unwrap_or(5000);

    // Baseline: 12 nodes.
    let small = cluster(12).await;
    let act_small = FakeActuator::start("small", Mode::Effective).await;
    let child_small = spawn_svc(
        &small,
        &act_small,
        &format!("127.0.0.1:{}", free_port().unwrap()),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_small, _) = child_small.pid().and_then(rss_kib).unwrap_or((0, 0));
    drop(child_small);
    drop(act_small);
    drop(small);

    let mut rows = Vec::new();
    let mut down = Vec::with_capacity(runs);
    let mut up = Vec::with_capacity(runs);
    for &nodes in &sizes {
        let c = cluster(nodes).await;
        let act = FakeActuator::start("a", Mode::Effective).await;
        let started = Instant::now();
        let child = spawn_svc(&c, &act, &format!("127.0.0.1:{}", free_port().unwrap())).await;
        let ready = started.elapsed();
        let names = c.node_names().await;
        let wave_took = wave(&c, &act, &names, (nodes / 2).min(500)).await;
        if nodes == largest {
            for i in 0..runs {
                let node = &names[(i * 37 + 1) % names.len()];
                let t0 = Instant::now();
                c.add_taint(node, "node.kubernetes.io/out-of-service", None, "NoExecute")
                    .await;
                let at = eventually("Down delta", || async {
                    act.state.delta_received_after(node, AdminState::Down, t0)
                })
                .await;
                down.push(at - t0);
                let t1 = Instant::now();
                c.remove_taint(node, "node.kubernetes.io/out-of-service")
                    .await;
                let at = eventually("None delta", || async {
                    act.state.delta_received_after(node, AdminState::None, t1)
                })
                .await;
                up.push(at - t1);
            }
        }
        let (rss, hwm) = child.pid().and_then(rss_kib).unwrap_or((0, 0));
        rows.push(Row {
            nodes,
            ready,
            wave: wave_took,
            rss,
            hwm,
        });
    }
    down.sort();
    up.sort();
    let mib = |k: u64| k as f64 / 1024.0;

    println!();
    println!(
        "signal-svc benchmark (sizes {sizes:?}, {runs} latency runs per direction at {largest} nodes, debug={})",
        cfg!(debug_assertions)
    );
    println!("| nodes | start -> ready | wave (taint + restore) | RSS after | peak RSS (VmHWM) |");
    println!("|------:|---------------:|-----------------------:|----------:|-----------------:|");
    for r in &rows {
        println!(
            "| {:>5} | {:>12.2} s | {:>15.2} s ({:>3} nodes) | {:>5.1} MiB | {:>12.1} MiB |",
            r.nodes,
            r.ready.as_secs_f64(),
            r.wave.as_secs_f64(),
            (r.nodes / 2).min(500),
            mib(r.rss),
            mib(r.hwm)
        );
    }
    println!("| 12 (baseline) | | | {:>5.1} MiB | |", mib(rss_small));
    if let (Some(first), Some(last)) = (rows.first(), rows.last())
        && last.nodes > first.nodes
    {
        let per_node =
            (last.rss as f64 - first.rss as f64) * 1024.0 / (last.nodes - first.nodes) as f64;
        println!(
            "per-node growth ({} -> {} nodes): {:.0} bytes/node",
            first.nodes, last.nodes, per_node
        );
    }
    if !down.is_empty() {
        println!();
        println!("| latency at {largest} nodes                  | value      |");
        println!("|------------------------------------------|------------|");
        for (label, v, p) in [
            ("taint PATCH -> Down delta at actuator p50", &down, 0.5),
            ("taint PATCH -> Down delta at actuator p99", &down, 0.99),
            ("untaint PATCH -> None delta p50          ", &up, 0.5),
            ("untaint PATCH -> None delta p99          ", &up, 0.99),
        ] {
            println!("| {label} | {:>8.2} ms |", pct(v, p).as_secs_f64() * 1e3);
        }
        println!(
            "(latency includes the kube-sim PATCH round trip and watch delivery; receive times are stamped by the fake actuator)"
        );
    }
}
