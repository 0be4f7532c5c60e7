//! The simulator at cluster scale: `cargo bench -p arm-sim --bench scale` starts the real
//! `arm-sim` binary with the `aks` preset at each size (default 240 and 5,000 nodes; override
//! with `ARM_SIM_SCALE_NODES=240,1000,5000`) and prints its start-up time, resident memory
//! (current and peak, from /proc) and the latency of the reads a writer makes at start and on
//! every refresh: GET of the whole LB, the paged LIST of its pools (page size 1, so `nextLink` is
//! followed), GET of one pool and the NIC LIST.
#![allow(clippy::unwrap_used)] // benchmark harness: a failure should abort loudly

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::collections::HashMap;
use std::process::Stdio;
use std::time::Instant;
use tokio::io::{AsyncBufReadExt, BufReader};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

const RG: &str = "MC_cutover-rg_cutover_eastus";

async fn get(client: &HttpClient, url: &str, auth: &str) -> Bytes {
    let req = http::Request::get(url)
        .header("authorization", auth)
        .body(Full::new(Bytes::new()))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    assert_eq!(resp.status(), 200, "{url}");
    resp.into_body().collect().await.unwrap().to_bytes()
}

/// (VmRSS, VmHWM) of a process in MiB.
fn rss_mib(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map(|kb| kb / 1024.0)
            .unwrap_or(f64::NAN)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

struct Timing {
    p50: f64,
    p99: f64,
    bytes: usize,
}

async fn time<F, Fut>(n: usize, mut f: F) -> Timing
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let mut lat = Vec::with_capacity(n);
    let mut bytes = 0;
    for _ in 0..n {
        let t = Instant::now();
        bytes = f().await;
        lat.push(t.elapsed());
    }
    lat.sort();
    let at = |p: f64| lat[((lat.len() as f64 - 1.0) * p).round() as usize].as_secs_f64() * 1e3;
    Timing {
        p50: at(0.5),
        p99: at(0.99),
        bytes,
    }
}

async fn measure(nodes: usize) {
    let started = Instant::now();
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_arm-sim"))
        .args(["--preset", "aks", "--preset-nodes", &nodes.to_string()])
        .args(["--completion-delay-ms", "0", "--page-size", "1"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = child.id().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut info = HashMap::new();
    for _ in 0..5 {
        let line = lines.next_line().await.unwrap().unwrap();
        let (k, v) = line.split_once(' ').unwrap();
        info.insert(k.to_owned(), v.to_owned());
    }
    let startup = started.elapsed();
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let (rss_idle, _) = rss_mib(pid);
    let url = info["listening"].trim_start_matches("on ").to_owned();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    // Unthrottled, so the figures are the simulator's own cost.
    let big = r#"{"capacity":1e9,"refill_per_sec":1e9}"#;
    let limits = format!(r#"{{"reads":{big},"writes":{big},"deletes":{big},"global_factor":1.0}}"#);
    let req = http::Request::put(format!("{url}/_sim/limits"))
        .body(Full::new(Bytes::from(limits)))
        .unwrap();
    assert_eq!(client.request(req).await.unwrap().status(), 200);
    let form = format!(
        "grant_type=client_credentials&scope=https://management.azure.com/.default&client_id={}&client_secret={}",
        info["client-id"], info["client-secret"]
    );
    let req = http::Request::post(format!("{url}/{}/oauth2/v2.0/token", info["tenant"]))
        .body(Full::new(Bytes::from(form)))
        .unwrap();
    let body = client
        .request(req)
        .await
        .unwrap()
        .into_body()
        .collect()
        .await
        .unwrap()
        .to_bytes();
    let token: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let auth = format!("Bearer {}", token["access_token"].as_str().unwrap());
    let base = format!(
        "{url}/subscriptions/{}/resourceGroups/{RG}/providers/Microsoft.Network",
        info["subscription"]
    );
    let lb_url = format!("{base}/loadBalancers/kubernetes?api-version=2026-03-01");
    let pools_url =
        format!("{base}/loadBalancers/kubernetes/backendAddressPools?api-version=2026-03-01");
    let pool_url = format!(
        "{base}/loadBalancers/kubernetes/backendAddressPools/kubernetes?api-version=2026-03-01"
    );
    let nics_url = format!("{base}/networkInterfaces?api-version=2026-03-01");
    let n = if nodes > 1000 { 20 } else { 100 };

    let lb = time(n, || async { get(&client, &lb_url, &auth).await.len() }).await;
    let list = time(n, || {
        let (client, auth, first) = (&client, &auth, &pools_url);
        async move {
            let mut next = Some(first.clone());
            let mut total = 0;
            let mut count = 0;
            while let Some(u) = next {
                let b = get(client, &u, auth).await;
                total += b.len();
                count += 1;
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
                next = v["nextLink"].as_str().map(str::to_owned);
            }
            assert!(count >= 3, "{count} pages");
            total
        }
    })
    .await;
    let pool = time(n, || async { get(&client, &pool_url, &auth).await.len() }).await;
    let nics = time(n, || async { get(&client, &nics_url, &auth).await.len() }).await;
    // Four readers at once (two actuator replicas refreshing both LBs).
    let t = Instant::now();
    let readers: Vec<_> = (0..4)
        .map(|_| {
            let (client, url, auth) = (client.clone(), lb_url.clone(), auth.clone());
            tokio::spawn(async move {
                for _ in 0..5 {
                    get(&client, &url, &auth).await;
                }
            })
        })
        .collect();
    for r in readers {
        r.await.unwrap();
    }
    let concurrent = t.elapsed().as_secs_f64() * 1e3 / 20.0;
    let (rss, hwm) = rss_mib(pid);
    println!(
        "nodes {nodes}: start-up {:.2} s, RSS idle {rss_idle:.1} MiB, after reads {rss:.1} MiB (peak {hwm:.1} MiB)",
        startup.as_secs_f64()
    );
    for (name, t) in [
        ("GET LB kubernetes", &lb),
        ("LIST pools (3 pages)", &list),
        ("GET pool kubernetes", &pool),
        ("LIST NICs", &nics),
    ] {
        println!(
            "  {name:<22} p50 {:>8.2} ms  p99 {:>8.2} ms  {:>10} bytes",
            t.p50, t.p99, t.bytes
        );
    }
    println!("  GET LB, 4 concurrent readers: {concurrent:.2} ms per request");
    child.kill().await.unwrap();
    let _ = child.wait().await;
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let sizes = std::env::var("ARM_SIM_SCALE_NODES").unwrap_or_else(|_| "240,5000".into());
    for n in sizes
        .split(',')
        .filter_map(|s| s.trim().parse::<usize>().ok())
    {
        measure(n).await;
    }
}
