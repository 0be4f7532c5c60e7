//! signal-bench: signal-to-wire latency and memory of signal-svc.
//!
//! Runs kube-sim (preset `aks`, 5,000 nodes) and a recording fake actuator in this process,
//! and signal-svc as a real child process (the built binary), so its RSS is its own.
//! Latency = from just before the taint PATCH is sent to kube-sim until the fake actuator has
//! received the matching delta (Down when tainting, None when untainting).
//!
//! Run: `cargo bench -p signal-svc --bench signal_bench` (env BENCH_RUNS, BENCH_NODES).

#![allow(clippy::unwrap_used, clippy::type_complexity, dead_code)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::*;
use cutover_proto::v1::AdminState;
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

struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn spawn_svc(c: &Cluster, act: &FakeActuator, admin: &str) -> Child {
    let child = std::process::Command::new(env!("CARGO_BIN_EXE_signal-svc"))
        .args([
            "--cluster-name=kubernetes",
            "--identity=bench",
            "--namespace=cutover",
            &format!("--kubeconfig={}", c.kubeconfig.display()),
            &format!("--admin-listen={admin}"),
            &format!("--actuator-endpoints={}", act.endpoint()),
        ])
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
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
    Child(child)
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::var("BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100);
    let nodes: usize = std::env::var("BENCH_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5000);

    // Baseline: 12 nodes.
    let small = cluster(12).await;
    let act_small = FakeActuator::start("small", Mode::Effective).await;
    let child_small = spawn_svc(&small, &act_small, &format!("127.0.0.1:{}", free_port())).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (rss_small, _) = rss_kib(child_small.0.id()).unwrap_or((0, 0));
    drop(child_small);

    let started = Instant::now();
    let c = cluster(nodes).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let child = spawn_svc(&c, &act, &format!("127.0.0.1:{}", free_port())).await;
    let ready_after = started.elapsed();
    let names = c.node_names().await;

    let mut down = Vec::with_capacity(runs);
    let mut up = Vec::with_capacity(runs);
    for i in 0..runs {
        let node = &names[(i * 37) % names.len()];
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
    let (rss, hwm) = rss_kib(child.0.id()).unwrap_or((0, 0));
    down.sort();
    up.sort();

    println!();
    println!(
        "signal-svc benchmark ({nodes} nodes, {runs} runs per direction, debug={})",
        cfg!(debug_assertions)
    );
    println!("| metric                                   | value      |");
    println!("|------------------------------------------|------------|");
    println!(
        "| taint PATCH -> Down delta at actuator p50 | {:>8.2} ms |",
        pct(&down, 0.5).as_secs_f64() * 1e3
    );
    println!(
        "| taint PATCH -> Down delta at actuator p99 | {:>8.2} ms |",
        pct(&down, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "| untaint PATCH -> None delta p50           | {:>8.2} ms |",
        pct(&up, 0.5).as_secs_f64() * 1e3
    );
    println!(
        "| untaint PATCH -> None delta p99           | {:>8.2} ms |",
        pct(&up, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "| start -> ready ({nodes} nodes, incl. sim seed) | {:>8.2} s  |",
        ready_after.as_secs_f64()
    );
    println!(
        "| RSS with {nodes} nodes (after runs)          | {:>8.1} MiB |",
        rss as f64 / 1024.0
    );
    println!(
        "| peak RSS (VmHWM) with {nodes} nodes          | {:>8.1} MiB |",
        hwm as f64 / 1024.0
    );
    println!(
        "| RSS with 12 nodes (baseline)              | {:>8.1} MiB |",
        rss_small as f64 / 1024.0
    );
    println!(
        "(latency includes the kube-sim PATCH round trip and watch delivery; polling adds none: receive times are stamped by the fake actuator)"
    );
}
