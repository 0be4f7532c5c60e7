//! Shared helpers: kube-sim in-process, a recording fake actuator on 127.0.0.1:0 (the test
//! kit's), signal-svc instances run in-process, and poll-until helpers (no fixed sleeps
//! asserting timing).
#![allow(dead_code, clippy::unwrap_used, clippy::type_complexity)]

use clap::Parser;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::{KubeSim, Options, Seed};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub const DRAINING: &str = "cloudprovider.azure.microsoft.com/draining";
pub const NOTICE: &str = "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1. Virtual machine is being evicted. For more information, see https://aka.ms/aks/scheduledevents.";
pub const IMDS_NOISE: &str =
    "IMDS query failed, exit code: 28\nConnection timed out after 24 seconds.";

/// Polls `check` every 50 ms until it returns Some; fails after 30 s (the test kit's).
pub use cutover_testkit::eventually;

/// The recording fake actuator on 127.0.0.1:0 (the test kit's, feature `fake-actuator`).
pub use cutover_testkit::fake_actuator::{FakeActuator, Mode};

// ------------------------------------------------------------------------------------------
// The Kubernetes side: a real kube-apiserver and etcd by default, kube-sim where a test needs
// its fault injection
// ------------------------------------------------------------------------------------------

pub enum Backend {
    Real(Box<kube_real::RealApiServer>),
    Sim(KubeSim),
}

/// A cluster seeded with the AKS-like fixture. `client` is an admin (the tests act as
/// operators and emitters); `kubeconfig` is what signal-svc runs with: on the real server,
/// the token of deploy/base's `signal-svc` ServiceAccount under deploy/base's RBAC.
pub struct Cluster {
    pub backend: Backend,
    pub client: kube::Client,
    pub dir: tempfile::TempDir,
    pub kubeconfig: std::path::PathBuf,
}

/// deploy/base's namespace and signal-svc RBAC, as a user installs them.
pub fn signal_rbac_manifests() -> String {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../deploy/base");
    [
        "namespace.yaml",
        "signal-svc/serviceaccount.yaml",
        "signal-svc/rbac.yaml",
    ]
    .iter()
    .map(|f| std::fs::read_to_string(format!("{base}/{f}")).unwrap())
    .collect::<Vec<_>>()
    .join("\n---\n")
}

/// A real API server with `nodes` fixture nodes, deploy/base's RBAC applied.
pub async fn cluster(nodes: usize) -> Cluster {
    cluster_with_rbac(nodes, &signal_rbac_manifests()).await
}

/// As [`cluster`], with the given RBAC manifests instead of deploy/base's.
pub async fn cluster_with_rbac(nodes: usize, rbac: &str) -> Cluster {
    let server = kube_real::RealApiServer::start().await.unwrap();
    let client = server.admin_client().unwrap();
    let objects = kube_real::manifests::parse(rbac).unwrap();
    kube_real::manifests::apply(&client, &objects, "cutover")
        .await
        .unwrap();
    kube_real::seed::nodes(&client, &Seed::preset("aks", nodes).unwrap())
        .await
        .unwrap();
    let token = server
        .service_account_token("cutover", "signal-svc", Duration::from_secs(3600))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_token_kubeconfig(&kubeconfig, &token).unwrap();
    Cluster {
        backend: Backend::Real(Box::new(server)),
        client,
        dir,
        kubeconfig,
    }
}

/// kube-sim with `nodes` fixture nodes, for tests that inject faults (latency, failures,
/// watch drops, compaction) the real server has no switch for.
pub async fn sim_cluster(nodes: usize) -> Cluster {
    let options = Options {
        seed: Seed::preset("aks", nodes).unwrap(),
        ..Options::default()
    };
    let sim = KubeSim::start(options).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&kubeconfig).unwrap();
    let client = kube::Client::try_from(kube::Config::new(sim.url().parse().unwrap())).unwrap();
    Cluster {
        backend: Backend::Sim(sim),
        client,
        dir,
        kubeconfig,
    }
}

impl Cluster {
    /// kube-sim's fault switches; only clusters from [`sim_cluster`] have them.
    pub fn sim(&self) -> &KubeSim {
        match &self.backend {
            Backend::Sim(sim) => sim,
            Backend::Real(_) => panic!("this test injects faults: start it with sim_cluster()"),
        }
    }

    pub fn nodes(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Node names sorted, skipping spot nodes (their preset taint is not a trigger anyway).
    pub async fn node_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .nodes()
            .list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        names.sort();
        names
    }

    pub async fn node(&self, name: &str) -> Option<Node> {
        self.nodes().get_opt(name).await.unwrap()
    }

    pub async fn uid(&self, name: &str) -> String {
        self.node(name).await.unwrap().metadata.uid.unwrap()
    }

    pub async fn taints(&self, name: &str) -> Vec<(String, Option<String>, String)> {
        self.node(name)
            .await
            .and_then(|n| n.spec.and_then(|s| s.taints))
            .unwrap_or_default()
            .into_iter()
            .map(|t| (t.key, t.value, t.effect))
            .collect()
    }

    /// Operator-style taint edit: JSON patch append (no precondition).
    pub async fn add_taint(&self, name: &str, key: &str, value: Option<&str>, effect: &str) {
        let has_list = self
            .node(name)
            .await
            .unwrap()
            .spec
            .and_then(|s| s.taints)
            .is_some();
        let taint = serde_json::json!({"key": key, "value": value, "effect": effect});
        let ops = if has_list {
            serde_json::json!([{"op": "add", "path": "/spec/taints/-", "value": taint}])
        } else {
            serde_json::json!([{"op": "add", "path": "/spec/taints", "value": [taint]}])
        };
        let patch: json_patch::Patch = serde_json::from_value(ops).unwrap();
        self.nodes()
            .patch(name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
            .unwrap();
    }

    pub async fn remove_taint(&self, name: &str, key: &str) {
        let taints: Vec<serde_json::Value> = self
            .taints(name)
            .await
            .into_iter()
            .filter(|(k, ..)| k != key)
            .map(|(k, v, e)| serde_json::json!({"key": k, "value": v, "effect": e}))
            .collect();
        let patch = serde_json::json!({"spec": {"taints": taints}});
        self.nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
    }

    pub async fn set_unschedulable(&self, name: &str) {
        let patch = serde_json::json!({"spec": {"unschedulable": true}});
        self.nodes()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .unwrap();
        self.add_taint(name, "node.kubernetes.io/unschedulable", None, "NoSchedule")
            .await;
    }

    /// A `PreemptScheduled` event as AKS node-problem-detector records it (empty involvedObject.uid).
    pub async fn preempt_event(&self, event_name: &str, node: &str, message: &str, count: i32) {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let ev = serde_json::json!({
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": event_name, "namespace": "default"},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node},
            "reason": "PreemptScheduled", "type": "Warning", "message": message,
            "source": {"component": "custom-scheduledevents-consolidated-preempt-plugin-monitor", "host": node},
            "firstTimestamp": now, "lastTimestamp": now, "count": count,
        });
        let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), "default");
        let ev: CoreEvent = serde_json::from_value(ev).unwrap();
        match api.get_opt(event_name).await.unwrap() {
            None => {
                api.create(&PostParams::default(), &ev).await.unwrap();
            }
            Some(_) => {
                let patch = serde_json::json!({"count": count, "lastTimestamp": now});
                api.patch(event_name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .unwrap();
            }
        }
    }

    /// events.k8s.io/v1 events about a node, as (type, reason).
    pub async fn node_events(&self, node: &str) -> Vec<(String, String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        api.list(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(node))
            .filter(|e| e.reporting_controller.as_deref() == Some("cutover-signal-svc"))
            .map(|e| {
                (
                    e.type_.unwrap_or_default(),
                    e.reason.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }
}

// ------------------------------------------------------------------------------------------
// signal-svc instances
// ------------------------------------------------------------------------------------------

pub struct Instance {
    pub identity: String,
    pub admin: SocketAddr,
    pub shutdown: CancellationToken,
    pub handle: JoinHandle<Result<(), signal_svc::runtime::RunError>>,
}

/// Starts signal-svc in-process (default lease timings, which are short).
pub async fn start(
    cluster: &Cluster,
    identity: &str,
    endpoints: &[String],
    extra: &[&str],
) -> Instance {
    let mut argv: Vec<String> = vec![
        "signal-svc".into(),
        "--cluster-name=kubernetes".into(),
        format!("--identity={identity}"),
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        "--namespace=cutover".into(),
        "--admin-listen=127.0.0.1:0".into(),
        format!("--actuator-endpoints={}", endpoints.join(",")),
    ];
    // The fake actuators are plaintext unless a test gives TLS flags: said explicitly.
    if !extra.iter().any(|a| a.starts_with("--tls-")) {
        argv.push("--insecure-plaintext".into());
    }
    argv.extend(extra.iter().map(|s| (*s).to_owned()));
    let config = signal_svc::config::Args::try_parse_from(argv)
        .unwrap()
        .validate()
        .unwrap();
    let svc = signal_svc::runtime::Service::bind(config).await.unwrap();
    let admin = svc.admin_addr();
    let shutdown = CancellationToken::new();
    let handle = tokio::spawn(svc.run(shutdown.clone()));
    Instance {
        identity: identity.into(),
        admin,
        shutdown,
        handle,
    }
}

impl Instance {
    pub async fn get(&self, path: &str) -> (u16, String) {
        let mut s = tokio::net::TcpStream::connect(self.admin).await.unwrap();
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.unwrap();
        let text = String::from_utf8_lossy(&buf).to_string();
        let status = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, b)| b.to_owned())
            .unwrap_or_default();
        (status, body)
    }

    /// A metric's value (sum over label sets matching `filter`), 0 when absent.
    pub async fn metric(&self, name: &str, filter: &str) -> f64 {
        let (_, body) = self.get("/metrics").await;
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .filter(|l| l.split([' ', '{']).next() == Some(name) && l.contains(filter))
            .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
            .sum()
    }

    pub async fn is_leader(&self) -> bool {
        self.metric("cutover_signal_leader", "").await == 1.0
    }

    pub async fn wait_ready(&self) {
        eventually("ready", || async {
            (self.get("/ready").await.0 == 200).then_some(())
        })
        .await;
    }

    /// Graceful stop (releases the lease).
    pub async fn stop(self) {
        self.shutdown.cancel();
        let r = tokio::time::timeout(Duration::from_secs(30), self.handle).await;
        assert!(matches!(r, Ok(Ok(Ok(())))), "clean exit: {r:?}");
    }

    /// Abrupt death: the task is aborted, the lease is not released.
    pub async fn kill(self) {
        self.handle.abort();
        let _ = self.handle.await;
    }
}

// ------------------------------------------------------------------------------------------
// A TCP proxy that can freeze (a SIGSTOPped peer, a partition without RST)
// ------------------------------------------------------------------------------------------

pub struct FreezableProxy {
    pub addr: SocketAddr,
    frozen: Arc<std::sync::atomic::AtomicBool>,
    task: JoinHandle<()>,
}

impl FreezableProxy {
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let frozen = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let f = frozen.clone();
        let task = tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                if f.load(std::sync::atomic::Ordering::SeqCst) {
                    // A frozen host accepts nothing either; keep the socket open, silent.
                    tokio::spawn(async move {
                        let _hold = down;
                        std::future::pending::<()>().await;
                    });
                    continue;
                }
                let Ok(up) = tokio::net::TcpStream::connect(upstream).await else {
                    continue;
                };
                let (dr, dw) = down.into_split();
                let (ur, uw) = up.into_split();
                tokio::spawn(pump(dr, uw, f.clone()));
                tokio::spawn(pump(ur, dw, f.clone()));
            }
        });
        Self { addr, frozen, task }
    }

    /// Stops forwarding bytes in both directions, without closing anything.
    pub fn freeze(&self) {
        self.frozen.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
}

async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    frozen: Arc<std::sync::atomic::AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if frozen.load(std::sync::atomic::Ordering::SeqCst) {
            // Hold both halves open forever: no FIN, no RST.
            let _hold = (from, to);
            std::future::pending::<()>().await;
            return;
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}

impl Drop for FreezableProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
