//! Shared helpers for the integration tests: a started simulator, a kube client for it, a
//! raw HTTP/1.1 client for exact wire checks (polling: `cutover_testkit::eventually`).
#![allow(dead_code, clippy::unwrap_used)]

use kube::Client;
use kube_sim::{KubeSim, Options, Seed};
use serde_json::Value;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A simulator seeded with the `aks` preset of `nodes` nodes.
pub async fn sim_with(nodes: usize, tweak: impl FnOnce(&mut Options)) -> KubeSim {
    let mut options = Options {
        seed: Seed::preset("aks", nodes).unwrap(),
        ..Options::default()
    };
    tweak(&mut options);
    KubeSim::start(options).await.unwrap()
}

pub async fn sim() -> KubeSim {
    sim_with(12, |_| {}).await
}

/// A kube client with the default config for the simulator URL.
pub fn client(sim: &KubeSim) -> Client {
    let config = kube::Config::new(sim.url().parse().unwrap());
    Client::try_from(config).unwrap()
}

/// A raw response.
#[derive(Debug)]
pub struct Raw {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Raw {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "body is not JSON ({e}): {}",
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends one HTTP/1.1 request with `Connection: close` and reads the whole response.
pub async fn raw(
    sim: &KubeSim,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: &[u8],
) -> Raw {
    let headers: Vec<(&str, &str)> = content_type
        .map(|ct| ("Content-Type", ct))
        .into_iter()
        .collect();
    raw_with(sim, method, path, &headers, body).await
}

/// A GET with extra request headers.
pub async fn raw_get(sim: &KubeSim, path: &str, headers: &[(&str, &str)]) -> Raw {
    raw_with(sim, "GET", path, headers, b"").await
}

/// Sends one HTTP/1.1 request with `Connection: close` and the given headers.
pub async fn raw_with(
    sim: &KubeSim,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Raw {
    let mut stream = tokio::net::TcpStream::connect(sim.address()).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\nContent-Length: {}\r\n",
        sim.address(),
        body.len()
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut buf))
        .await
        .expect("response within 30 s")
        .unwrap();
    parse_response(&buf)
}

pub fn parse_response(buf: &[u8]) -> Raw {
    let split = buf
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("complete header");
    let head = String::from_utf8_lossy(&buf[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = buf[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Raw {
        status,
        headers,
        body,
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size =
            usize::from_str_radix(String::from_utf8_lossy(&data[..eol]).trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
    out
}

/// The names of a list response.
pub fn names(list: &Value) -> Vec<String> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap().to_string())
        .collect()
}
