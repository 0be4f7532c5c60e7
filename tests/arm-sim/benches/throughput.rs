//! Simulator throughput, so tests and the sandbox know the simulator is not the bottleneck:
//! `cargo bench -p arm-sim --bench throughput` prints a table (requests per second and latency
//! percentiles over loopback HTTP, debug or release build as invoked).
#![allow(clippy::unwrap_used)] // benchmark harness: a failure should abort loudly

use arm_sim::throttle::{Limit, Limits};
use arm_sim::{ArmSim, ArmSimOptions};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use std::time::{Duration, Instant};

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn call(
    client: &HttpClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> (u16, Bytes) {
    let mut req = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = client
        .request(req.body(Full::new(Bytes::from(body))).unwrap())
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.into_body().collect().await.unwrap().to_bytes())
}

struct Row {
    name: &'static str,
    n: usize,
    elapsed: Duration,
    lat: Vec<Duration>,
}

fn pct(lat: &mut [Duration], p: f64) -> f64 {
    lat.sort();
    let i = ((lat.len() as f64 - 1.0) * p).round() as usize;
    lat[i].as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let mut options = ArmSimOptions::preset("aks-ip").unwrap();
    options.tuning.completion_delay_ms = 0;
    options.tuning.retry_after_secs = 0;
    let big = Limit {
        capacity: 1e9,
        refill_per_sec: 1e9,
    };
    options.limits = Limits {
        reads: big,
        writes: big,
        deletes: big,
        global_factor: 1.0,
    };
    let sim = ArmSim::start(options).await.unwrap();
    let client: HttpClient = Client::builder(TokioExecutor::new()).build_http();
    let c = sim.credentials();
    let token_url = format!("{}/{}/oauth2/v2.0/token", sim.url(), c.tenant_id);
    let form = format!(
        "grant_type=client_credentials&scope=https://management.azure.com/.default&client_id={}&client_secret={}",
        c.client_id, c.client_secret
    );
    let pool_url = format!(
        "{}/subscriptions/{}/resourceGroups/MC_cutover-rg_cutover_eastus/providers/Microsoft.Network/loadBalancers/kubernetes/backendAddressPools/kubernetes?api-version=2024-03-01",
        sim.url(),
        c.subscription_id
    );
    let mut rows = Vec::new();

    let n = 500;
    let start = Instant::now();
    let mut lat = Vec::with_capacity(n);
    let mut token = String::new();
    for _ in 0..n {
        let t = Instant::now();
        let (s, b) = call(&client, "POST", &token_url, &[], form.clone().into_bytes()).await;
        assert_eq!(s, 200);
        lat.push(t.elapsed());
        token = serde_json::from_slice::<serde_json::Value>(&b).unwrap()["access_token"]
            .as_str()
            .unwrap()
            .to_owned();
    }
    rows.push(Row {
        name: "token (serial)",
        n,
        elapsed: start.elapsed(),
        lat,
    });
    let auth = format!("Bearer {token}");

    let n = 2000;
    let start = Instant::now();
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let (s, _) = call(
            &client,
            "GET",
            &pool_url,
            &[("authorization", &auth)],
            Vec::new(),
        )
        .await;
        assert_eq!(s, 200);
        lat.push(t.elapsed());
    }
    rows.push(Row {
        name: "GET pool (serial)",
        n,
        elapsed: start.elapsed(),
        lat,
    });

    let n = 4000;
    let start = Instant::now();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let (client, url, auth) = (client.clone(), pool_url.clone(), auth.clone());
            tokio::spawn(async move {
                let mut lat = Vec::with_capacity(n / 8);
                for _ in 0..n / 8 {
                    let t = Instant::now();
                    let (s, _) = call(
                        &client,
                        "GET",
                        &url,
                        &[("authorization", &auth)],
                        Vec::new(),
                    )
                    .await;
                    assert_eq!(s, 200);
                    lat.push(t.elapsed());
                }
                lat
            })
        })
        .collect();
    let mut lat = Vec::with_capacity(n);
    for t in tasks {
        lat.extend(t.await.unwrap());
    }
    rows.push(Row {
        name: "GET pool (8 concurrent)",
        n,
        elapsed: start.elapsed(),
        lat,
    });

    // Write + poll to completion, alternating Down/None on the first entry.
    let (_, body) = call(
        &client,
        "GET",
        &pool_url,
        &[("authorization", &auth)],
        Vec::new(),
    )
    .await;
    let mut pool: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let n = 300;
    let start = Instant::now();
    let mut lat = Vec::with_capacity(n);
    for i in 0..n {
        let t = Instant::now();
        pool["properties"]["loadBalancerBackendAddresses"][0]["properties"]["adminState"] =
            serde_json::json!(if i % 2 == 0 { "Down" } else { "None" });
        let (s, b) = call(
            &client,
            "PUT",
            &pool_url,
            &[
                ("authorization", &auth),
                ("content-type", "application/json"),
            ],
            serde_json::to_vec(&pool).unwrap(),
        )
        .await;
        assert_eq!(s, 200, "{}", String::from_utf8_lossy(&b));
        loop {
            let lb = sim.pool("kubernetes", "kubernetes").unwrap();
            if lb.locked_by.is_none() {
                break;
            }
            tokio::task::yield_now().await;
        }
        lat.push(t.elapsed());
    }
    rows.push(Row {
        name: "PUT pool until effective",
        n,
        elapsed: start.elapsed(),
        lat,
    });

    println!(
        "{:<28} {:>7} {:>10} {:>9} {:>9}",
        "operation", "n", "req/s", "p50 ms", "p99 ms"
    );
    for mut r in rows {
        let rate = r.n as f64 / r.elapsed.as_secs_f64();
        println!(
            "{:<28} {:>7} {:>10.0} {:>9.2} {:>9.2}",
            r.name,
            r.n,
            rate,
            pct(&mut r.lat, 0.5),
            pct(&mut r.lat, 0.99)
        );
    }
    sim.shutdown().await;
}
