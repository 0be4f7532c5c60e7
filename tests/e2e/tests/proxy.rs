//! signal-svc behind an HTTP proxy, as AKS's HTTP proxy feature runs every pod: `HTTPS_PROXY`
//! and `NO_PROXY` in its environment. The real binary runs against the real kube-apiserver and
//! an actuator with `HTTPS_PROXY` naming a CONNECT proxy that this test runs on loopback and
//! counts:
//!
//! 1. `NO_PROXY` covers the API server: signal-svc starts, leads and is ready, and the proxy sees
//!    no connection at all (the API server is reached directly; the gRPC streams to the actuator
//!    never take a proxy).
//! 2. no `NO_PROXY`: every API request goes through the proxy (CONNECT to the API server's
//!    `host:port`, nothing else), and signal-svc still leads and cuts a tainted node (the drain
//!    gate condition it writes through the tunnel turns `True`).
//!
//! The proxy listens on 127.0.0.2, the API server on 127.0.0.1: kube 5 on its own checks
//! `NO_PROXY` against the proxy's address, so `NO_PROXY=127.0.0.1` proves signal-svc matches it
//! against the API server's.
//!
//! And `sandbox serve`, started with proxy variables naming a proxy that refuses every
//! connection and no `NO_PROXY`, comes up (every service ready): the sandbox's own Kubernetes
//! clients go direct and its services get `NO_PROXY` plus loopback.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::certs;
use cutover_e2e::kube_ops::{self, GATE_CONDITION, OUT_OF_SERVICE};
use cutover_e2e::stack::{KubeKind, Stack, StackOptions};
use cutover_testkit::procs::{Proc, Spec};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A forward proxy that answers `CONNECT host:port` and records each target (and anything else
/// it is asked, refused with 405).
struct ConnectProxy {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    async fn start(ip: &str) -> ConnectProxy {
        let listener = TcpListener::bind((ip, 0))
            .await
            .unwrap_or_else(|e| panic!("bind the proxy on {ip}: {e}"));
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let task = tokio::spawn(async move {
            while let Ok((conn, _)) = listener.accept().await {
                let log = log.clone();
                tokio::spawn(async move {
                    let _ = tunnel(conn, log).await;
                });
            }
        });
        ConnectProxy { addr, seen, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().clone()
    }

    fn clear(&self) {
        self.seen.lock().clear();
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn tunnel(mut client: TcpStream, log: Arc<Mutex<Vec<String>>>) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if client.read(&mut byte).await? == 0 || head.len() > 16 * 1024 {
            return Ok(());
        }
        head.push(byte[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let first = text.lines().next().unwrap_or_default().to_string();
    let mut parts = first.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    if method != "CONNECT" {
        log.lock().push(format!("{method} {target}"));
        client
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await?;
        return Ok(());
    }
    log.lock().push(target.to_string());
    let mut upstream = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(_) => {
            client
                .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
                .await?;
            return Ok(());
        }
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// signal-svc's process as the stack starts it, with `env` on top of this process's environment.
fn signal_spec(stack: &Stack, name: &str, admin: u16, env: &[(&str, &str)]) -> Spec {
    let endpoints: Vec<String> = stack
        .actuators
        .iter()
        .filter_map(|a| a.grpc_port)
        .map(|p| format!("https://127.0.0.1:{p}"))
        .collect();
    let p = &stack.pki;
    let mut spec = Spec::new(name, cutover_e2e::bins::path("signal-svc").unwrap())
        .arg(format!(
            "--kubeconfig={}",
            stack.signal_kubeconfig.display()
        ))
        .arg(format!("--cluster-name={}", stack.cluster.name))
        .arg("--namespace=cutover")
        .arg(format!("--identity={name}"))
        .arg(format!("--actuator-endpoints={}", endpoints.join(",")))
        .arg(format!("--tls-ca={}", p.ca.display()))
        .arg(format!("--tls-cert={}", p.signal.cert.display()))
        .arg(format!("--tls-key={}", p.signal.key.display()))
        .arg(format!("--tls-server-name={}", certs::ACTUATOR_NAME))
        .arg(format!("--admin-listen=127.0.0.1:{admin}"))
        .env("RUST_LOG", "info");
    for (k, v) in env {
        spec = spec.env(k, *v);
    }
    spec
}

/// The proxy variables AKS injects, upper and lower case; `no` empty means none.
fn proxy_env<'a>(proxy: &'a str, no: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("HTTPS_PROXY", proxy),
        ("https_proxy", proxy),
        ("HTTP_PROXY", proxy),
        ("http_proxy", proxy),
        ("NO_PROXY", no),
        ("no_proxy", no),
    ]
}

/// Waits until signal-svc is ready and leads (`cutover_signal_leader 1`).
async fn wait_leading(proc: &mut Proc, admin: u16, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    let base = format!("http://127.0.0.1:{admin}");
    loop {
        assert!(
            proc.is_running(),
            "signal-svc exited:\n{}",
            proc.log_tail(30)
        );
        let ready = cutover_e2e::http::get_status(&format!("{base}/ready")).await == Some(200);
        let leads = cutover_e2e::http::get_text(&format!("{base}/metrics"))
            .await
            .is_some_and(|m| m.lines().any(|l| l.trim() == "cutover_signal_leader 1"));
        if ready && leads {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "signal-svc not ready and leading after {timeout:?} (ready {ready}, leads {leads}):\n{}",
            proc.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// One system at a time: each test starts API server, simulator and service processes.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_serve_comes_up_with_proxy_variables_set() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("cutover-e2e-proxy-sb-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Port 9 on loopback: nothing listens, every connection through it is refused.
    let dead = "http://127.0.0.1:9";
    let mut spec = Spec::new("sandbox", env!("CARGO_BIN_EXE_sandbox").into())
        .args([
            "serve",
            "--nodes",
            "12",
            "--actuators",
            "1",
            "--kube",
            "sim",
        ])
        .arg("--cadence=fast")
        .arg(format!("--run-dir={}", dir.join("run").display()));
    for (k, v) in proxy_env(dead, "") {
        spec = spec.env(k, v);
    }
    spec = spec.env("ALL_PROXY", dead).env("all_proxy", dead);
    let mut proc = Proc::start(&spec, &dir).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let log = std::fs::read_to_string(&proc.log).unwrap_or_default();
        if log.contains("cutover sandbox is up") {
            break;
        }
        assert!(
            proc.is_running(),
            "sandbox serve exited with proxy variables set:\n{}",
            proc.log_tail(30)
        );
        assert!(
            Instant::now() < deadline,
            "sandbox serve not up after 240 s:\n{}",
            proc.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // Ctrl-C, as a user stops it (it stops its services and simulators).
    proc.signal("INT").await;
    let stop = Instant::now() + Duration::from_secs(60);
    while proc.is_running() && Instant::now() < stop {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    proc.terminate(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_svc_reaches_the_api_server_directly_or_through_a_connect_proxy() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("cutover-e2e-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = StackOptions::fast("aks", 8, dir.clone());
    options.kube = KubeKind::Real;
    options.actuators = 1;
    options.signals = 0;
    let mut stack = Stack::start(options).await.unwrap();
    let api: hyper::Uri = stack.kube.url().parse().unwrap();
    let api_host_port = format!("{}:{}", api.host().unwrap(), api.port_u16().unwrap());
    assert_eq!(api.host(), Some("127.0.0.1"), "the API server's address");
    let proxy = ConnectProxy::start("127.0.0.2").await;
    let proxy_url = proxy.url();

    // 1. NO_PROXY covers the API server (as AKS's default list does): nothing through the proxy.
    let admin = cutover_testkit::free_port().unwrap();
    let spec = signal_spec(
        &stack,
        "signal-no-proxy",
        admin,
        &proxy_env(&proxy_url, "localhost,127.0.0.1"),
    );
    let mut proc = Proc::start(&spec, &dir).await.unwrap();
    wait_leading(&mut proc, admin, Duration::from_secs(60)).await;
    // a few more seconds of watches, Lease renewals and stream traffic
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        proc.is_running(),
        "signal-svc exited:\n{}",
        proc.log_tail(30)
    );
    assert_eq!(
        proxy.seen(),
        Vec::<String>::new(),
        "NO_PROXY covers the API server; the proxy must see nothing"
    );
    let log = std::fs::read_to_string(&proc.log).unwrap();
    assert!(
        log.contains("reached directly: NO_PROXY covers it"),
        "the start-up log names the route:\n{}",
        proc.log_tail(30)
    );
    proc.terminate(Duration::from_secs(15)).await;
    proxy.clear();

    // 2. No NO_PROXY: the API traffic is tunnelled, and signal-svc works through it.
    let admin = cutover_testkit::free_port().unwrap();
    let spec = signal_spec(
        &stack,
        "signal-via-proxy",
        admin,
        &proxy_env(&proxy_url, ""),
    );
    let mut proc = Proc::start(&spec, &dir).await.unwrap();
    wait_leading(&mut proc, admin, Duration::from_secs(60)).await;
    let ops = kube_ops::Cluster::new(kube_ops::client(&stack.kubeconfig).await.unwrap());
    let node = ops
        .node_names()
        .await
        .unwrap()
        .into_iter()
        .find(|n| n.contains("userpool"))
        .unwrap();
    ops.taint(&node, OUT_OF_SERVICE, None, "NoExecute")
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = ops
            .condition(&node, GATE_CONDITION)
            .await
            .unwrap()
            .map(|c| c.status);
        if status.as_deref() == Some("True") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "{node}'s {GATE_CONDITION} is {status:?} after 60 s:\n{}",
            proc.log_tail(30)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let seen = proxy.seen();
    assert!(
        seen.contains(&api_host_port),
        "the proxy must have tunnelled the API traffic to {api_host_port}; it saw {seen:?}"
    );
    assert!(
        seen.iter().all(|t| *t == api_host_port),
        "only the API server goes through the proxy (gRPC to actuators never does): {seen:?}"
    );
    let log = std::fs::read_to_string(&proc.log).unwrap();
    assert!(
        log.contains("through the HTTP proxy"),
        "the start-up log names the route:\n{}",
        proc.log_tail(30)
    );
    proc.terminate(Duration::from_secs(15)).await;
    stack.stop().await;
}
