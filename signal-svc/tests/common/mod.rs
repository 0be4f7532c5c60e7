//! Shared helpers: kube-sim in-process, a recording fake actuator on 127.0.0.1:0, signal-svc
//! instances run in-process, and poll-until helpers (no fixed sleeps asserting timing).
#![allow(dead_code, clippy::unwrap_used, clippy::type_complexity)]

use clap::Parser;
use cutover_proto::v1::actuator_server::{Actuator, ActuatorServer};
use cutover_proto::v1::{
    ActuatorMessage, AdminState, Assignment, EntryRef, GetNodeAdminStateRequest,
    GetNodeAdminStateResponse, HelloAck, HoldAck, ListHeldEntriesRequest, ListHeldEntriesResponse,
    NodeDesiredState, NodeResult, ResultPhase, SetNodeAdminStateRequest, SetNodeAdminStateResponse,
    SignalMessage, Version, WatchResultsRequest, actuator_message, signal_message::Kind,
};
use futures::Stream;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::{KubeSim, Options, Seed};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

pub const DRAINING: &str = "cloudprovider.azure.microsoft.com/draining";
pub const NOTICE: &str = "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1. Virtual machine is being evicted. For more information, see https://aka.ms/aks/scheduledevents.";
pub const IMDS_NOISE: &str =
    "IMDS query failed, exit code: 28\nConnection timed out after 24 seconds.";

/// Polls `check` every 50 ms until it returns Some; fails after 30 s (the test kit's).
pub use cutover_testkit::eventually;

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
// Fake actuator
// ------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// ACCEPTED then EFFECTIVE for every state received.
    Effective,
    /// FAILED (will retry) for every state received.
    Fail,
    /// No results at all.
    Silent,
}

#[derive(Debug, Default)]
pub struct StreamLog {
    pub msgs: Vec<SignalMessage>,
    /// When each message was received (same index as `msgs`).
    pub at: Vec<tokio::time::Instant>,
    pub open: bool,
    /// The way back up this stream (for hold requests).
    pub up: Option<mpsc::Sender<Result<ActuatorMessage, tonic::Status>>>,
}

#[derive(Debug)]
pub struct FakeState {
    pub name: String,
    pub streams: Mutex<Vec<StreamLog>>,
    pub mode: Mutex<Mode>,
    /// What the HelloAck reports as managed.
    pub load_balancers: Mutex<Vec<String>>,
    /// The highest leader epoch accepted; lower hellos are refused as the real actuator
    /// does (FAILED_PRECONDITION naming it in `cutover-accepted-epoch`).
    pub max_epoch: Mutex<u64>,
}

impl FakeState {
    /// Sends a message up the newest open stream, as an actuator relaying a tool's hold does.
    pub async fn send_up(&self, m: ActuatorMessage) -> bool {
        let up = self
            .streams
            .lock()
            .iter()
            .rev()
            .find(|s| s.open)
            .and_then(|s| s.up.clone());
        match up {
            Some(tx) => tx.send(Ok(m)).await.is_ok(),
            None => false,
        }
    }

    /// Reports `phase` for the newest state received for node `name`, covering the newest
    /// assignment, as the actuator does when a write is accepted / effective / failed. For
    /// tests that decide when ARM "completes" (use with `Mode::Silent`).
    pub async fn report(&self, name: &str, phase: ResultPhase) -> bool {
        let latest = self
            .states()
            .into_iter()
            .map(|(n, _)| n)
            .filter(|n| n.node.as_ref().is_some_and(|r| r.name == name))
            .max_by_key(|n| n.version.map(|v| (v.epoch, v.seq)));
        let Some(n) = latest else { return false };
        let lbs = self.assigned().unwrap_or_default();
        self.send_up(result(&n, phase, "ARM 500 InternalServerError", &lbs))
            .await
    }

    /// Every `HoldAck` received, on any stream.
    pub fn hold_acks(&self) -> Vec<HoldAck> {
        self.streams
            .lock()
            .iter()
            .flat_map(|s| s.msgs.iter())
            .filter_map(|m| match &m.kind {
                Some(Kind::HoldAck(a)) => Some(a.clone()),
                _ => None,
            })
            .collect()
    }

    /// Every `NodeStatus` received for node `name`, on any stream: (version, phase).
    pub fn node_statuses(&self, name: &str) -> Vec<(Version, ResultPhase)> {
        self.streams
            .lock()
            .iter()
            .flat_map(|s| s.msgs.iter())
            .filter_map(|m| match &m.kind {
                Some(Kind::NodeStatus(s)) if s.node.as_ref().is_some_and(|n| n.name == name) => {
                    Some((s.version?, ResultPhase::try_from(s.phase).ok()?))
                }
                _ => None,
            })
            .collect()
    }

    /// Every desired state received (snapshot or delta), in order, with whether it was a delta.
    pub fn states(&self) -> Vec<(NodeDesiredState, bool)> {
        let mut out = Vec::new();
        for s in self.streams.lock().iter() {
            for m in &s.msgs {
                match &m.kind {
                    Some(Kind::Snapshot(snap)) => {
                        out.extend(snap.nodes.iter().cloned().map(|n| (n, false)))
                    }
                    Some(Kind::Delta(d)) => out.push((d.clone(), true)),
                    _ => {}
                }
            }
        }
        out
    }

    /// The newest (by version) state or Forget for a node name: `Some(None)` means forgotten.
    pub fn latest(&self, node: &str) -> Option<Option<(AdminState, String, Version)>> {
        let mut best: Option<(Version, Option<(AdminState, String, Version)>)> = None;
        for s in self.streams.lock().iter() {
            for m in &s.msgs {
                let item = match &m.kind {
                    Some(Kind::Snapshot(snap)) => snap
                        .nodes
                        .iter()
                        .filter(|n| n.node.as_ref().is_some_and(|r| r.name == node))
                        .map(|n| {
                            (
                                n.version.unwrap(),
                                Some((
                                    n.desired(),
                                    n.node.clone().unwrap().uid,
                                    n.version.unwrap(),
                                )),
                            )
                        })
                        .next_back(),
                    Some(Kind::Delta(n)) if n.node.as_ref().is_some_and(|r| r.name == node) => {
                        Some((
                            n.version.unwrap(),
                            Some((n.desired(), n.node.clone().unwrap().uid, n.version.unwrap())),
                        ))
                    }
                    Some(Kind::Forget(f)) if f.node.as_ref().is_some_and(|r| r.name == node) => {
                        Some((f.version.unwrap(), None))
                    }
                    _ => None,
                };
                if let Some((v, st)) = item
                    && best
                        .as_ref()
                        .is_none_or(|(bv, _)| (v.epoch, v.seq) >= (bv.epoch, bv.seq))
                {
                    best = Some((v, st));
                }
            }
        }
        best.map(|(_, s)| s)
    }

    pub fn latest_state(&self, node: &str) -> Option<AdminState> {
        self.latest(node).flatten().map(|(s, ..)| s)
    }

    /// Delta messages about a node.
    pub fn deltas(&self, node: &str) -> Vec<NodeDesiredState> {
        self.states()
            .into_iter()
            .filter(|(n, d)| *d && n.node.as_ref().is_some_and(|r| r.name == node))
            .map(|(n, _)| n)
            .collect()
    }

    /// When the first delta for `node` with `desired` arrived after `since`.
    pub fn delta_received_after(
        &self,
        node: &str,
        desired: AdminState,
        since: tokio::time::Instant,
    ) -> Option<tokio::time::Instant> {
        let streams = self.streams.lock();
        streams
            .iter()
            .flat_map(|s| s.msgs.iter().zip(s.at.iter()))
            .filter(|(_, at)| **at >= since)
            .find(|(m, _)| {
                matches!(&m.kind, Some(Kind::Delta(d)) if d.desired() == desired && d.node.as_ref().is_some_and(|r| r.name == node))
            })
            .map(|(_, at)| *at)
    }

    /// When `node` with `desired` first arrived (snapshot or delta) after `since`, and the
    /// version's epoch.
    pub fn state_received_after(
        &self,
        node: &str,
        desired: AdminState,
        since: tokio::time::Instant,
    ) -> Option<(tokio::time::Instant, u64)> {
        let streams = self.streams.lock();
        streams
            .iter()
            .flat_map(|s| s.msgs.iter().zip(s.at.iter()))
            .filter(|(_, at)| **at >= since)
            .find_map(|(m, at)| {
                let states: Vec<&NodeDesiredState> = match &m.kind {
                    Some(Kind::Delta(d)) => vec![d],
                    Some(Kind::Snapshot(s)) => s.nodes.iter().collect(),
                    _ => vec![],
                };
                states
                    .into_iter()
                    .find(|d| {
                        d.desired() == desired && d.node.as_ref().is_some_and(|r| r.name == node)
                    })
                    .map(|d| (*at, d.version.unwrap_or_default().epoch))
            })
    }

    pub fn forgets(&self, node: &str) -> usize {
        self.streams
            .lock()
            .iter()
            .flat_map(|s| s.msgs.iter())
            .filter(|m| matches!(&m.kind, Some(Kind::Forget(f)) if f.node.as_ref().is_some_and(|r| r.name == node)))
            .count()
    }

    pub fn hello_epochs(&self) -> Vec<u64> {
        self.streams
            .lock()
            .iter()
            .filter_map(|s| match s.msgs.first().and_then(|m| m.kind.as_ref()) {
                Some(Kind::Hello(h)) => Some(h.leader_epoch),
                _ => None,
            })
            .collect()
    }

    /// Streams whose snapshot has ended.
    pub fn completed_snapshots(&self) -> usize {
        self.streams
            .lock()
            .iter()
            .filter(|s| {
                s.msgs
                    .iter()
                    .any(|m| matches!(m.kind, Some(Kind::SnapshotEnd(_))))
            })
            .count()
    }

    /// Every assignment received, with when, in order.
    pub fn assignments(&self) -> Vec<(Assignment, tokio::time::Instant)> {
        self.streams
            .lock()
            .iter()
            .flat_map(|s| s.msgs.iter().zip(s.at.iter()))
            .filter_map(|(m, at)| match &m.kind {
                Some(Kind::Assignment(a)) => Some((a.clone(), *at)),
                _ => None,
            })
            .collect()
    }

    /// The load balancers of the newest assignment received on an open stream.
    pub fn assigned(&self) -> Option<Vec<String>> {
        let streams = self.streams.lock();
        streams
            .iter()
            .filter(|s| s.open)
            .flat_map(|s| s.msgs.iter())
            .filter_map(|m| match &m.kind {
                Some(Kind::Assignment(a)) => Some(a.load_balancers.clone()),
                _ => None,
            })
            .next_back()
    }

    pub fn open_streams(&self) -> usize {
        self.streams.lock().iter().filter(|s| s.open).count()
    }
}

struct FakeSvc(Arc<FakeState>);

fn result(
    n: &NodeDesiredState,
    phase: ResultPhase,
    reason: &str,
    load_balancers: &[String],
) -> ActuatorMessage {
    ActuatorMessage {
        kind: Some(actuator_message::Kind::Result(NodeResult {
            node: n.node.clone(),
            version: n.version,
            desired: n.desired,
            phase: phase as i32,
            reason: reason.into(),
            will_retry: phase == ResultPhase::Failed,
            entries: vec![EntryRef {
                load_balancer: "kubernetes".into(),
                pool: "kubernetes".into(),
                admin_state: n.desired,
                ..Default::default()
            }],
            load_balancers: load_balancers.to_vec(),
            ..Default::default()
        })),
    }
}

type Out = Pin<Box<dyn Stream<Item = Result<ActuatorMessage, tonic::Status>> + Send>>;

#[tonic::async_trait]
impl Actuator for FakeSvc {
    type StreamDesiredStatesStream = Out;
    type WatchResultsStream = Pin<Box<dyn Stream<Item = Result<NodeResult, tonic::Status>> + Send>>;

    async fn stream_desired_states(
        &self,
        request: tonic::Request<tonic::Streaming<SignalMessage>>,
    ) -> Result<tonic::Response<Out>, tonic::Status> {
        let mut inbound = request.into_inner();
        let state = self.0.clone();
        let idx = {
            let mut s = state.streams.lock();
            s.push(StreamLog {
                msgs: Vec::new(),
                at: Vec::new(),
                open: true,
                up: None,
            });
            s.len() - 1
        };
        let (tx, rx) = mpsc::channel(4096);
        state.streams.lock()[idx].up = Some(tx.clone());
        tokio::spawn(async move {
            // Like the real actuator: results cover the newest assignment's load balancers
            // (empty before any), and a grown assignment re-reports open versions.
            let mut assigned: Vec<String> = Vec::new();
            let mut latest: std::collections::BTreeMap<String, NodeDesiredState> =
                Default::default();
            while let Ok(Some(m)) = inbound.message().await {
                {
                    let mut streams = state.streams.lock();
                    streams[idx].msgs.push(m.clone());
                    streams[idx].at.push(tokio::time::Instant::now());
                }
                let nodes: Vec<NodeDesiredState> = match m.kind {
                    Some(Kind::Hello(h)) => {
                        let refused = {
                            let mut max = state.max_epoch.lock();
                            if h.leader_epoch < *max {
                                Some(*max)
                            } else {
                                *max = h.leader_epoch;
                                None
                            }
                        };
                        if let Some(accepted) = refused {
                            let mut st = tonic::Status::failed_precondition(format!(
                                "hello.leader_epoch: {} is older than the accepted leader epoch {accepted}",
                                h.leader_epoch
                            ));
                            st.metadata_mut().insert(
                                "cutover-accepted-epoch",
                                accepted.to_string().parse().unwrap(),
                            );
                            let _ = tx.send(Err(st)).await;
                            break;
                        }
                        let ack = ActuatorMessage {
                            kind: Some(actuator_message::Kind::HelloAck(HelloAck {
                                actuator_identity: state.name.clone(),
                                load_balancers: state.load_balancers.lock().clone(),
                            })),
                        };
                        let _ = tx.send(Ok(ack)).await;
                        continue;
                    }
                    Some(Kind::Snapshot(s)) => s.nodes,
                    Some(Kind::Delta(d)) => vec![d],
                    Some(Kind::Assignment(a)) => {
                        let grew = a.load_balancers.iter().any(|lb| !assigned.contains(lb));
                        assigned = a.load_balancers;
                        if !grew {
                            continue;
                        }
                        latest.values().cloned().collect()
                    }
                    _ => continue,
                };
                let mode = *state.mode.lock();
                for n in nodes {
                    let uid = n.node.as_ref().map(|r| r.uid.clone()).unwrap_or_default();
                    latest.insert(uid, n.clone());
                    let msgs = match mode {
                        Mode::Effective => vec![
                            result(&n, ResultPhase::Accepted, "", &assigned),
                            result(&n, ResultPhase::Effective, "", &assigned),
                        ],
                        Mode::Fail => vec![result(
                            &n,
                            ResultPhase::Failed,
                            "ARM 500 InternalServerError",
                            &assigned,
                        )],
                        Mode::Silent => vec![],
                    };
                    for r in msgs {
                        let _ = tx.send(Ok(r)).await;
                    }
                }
            }
            let mut streams = state.streams.lock();
            streams[idx].open = false;
            streams[idx].up = None;
        });
        Ok(tonic::Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn set_node_admin_state(
        &self,
        _: tonic::Request<SetNodeAdminStateRequest>,
    ) -> Result<tonic::Response<SetNodeAdminStateResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("fake"))
    }
    async fn get_node_admin_state(
        &self,
        _: tonic::Request<GetNodeAdminStateRequest>,
    ) -> Result<tonic::Response<GetNodeAdminStateResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("fake"))
    }
    async fn list_held_entries(
        &self,
        _: tonic::Request<ListHeldEntriesRequest>,
    ) -> Result<tonic::Response<ListHeldEntriesResponse>, tonic::Status> {
        Err(tonic::Status::unimplemented("fake"))
    }
    async fn watch_results(
        &self,
        _: tonic::Request<WatchResultsRequest>,
    ) -> Result<tonic::Response<Self::WatchResultsStream>, tonic::Status> {
        Err(tonic::Status::unimplemented("fake"))
    }
}

pub struct FakeActuator {
    pub addr: SocketAddr,
    pub state: Arc<FakeState>,
    task: JoinHandle<()>,
}

impl FakeActuator {
    pub async fn start(name: &str, mode: Mode) -> Self {
        Self::start_with(name, mode, None).await
    }

    /// With TLS (server identity and, for mTLS, the client CA) when given.
    pub async fn start_with(
        name: &str,
        mode: Mode,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState {
            name: name.into(),
            streams: Mutex::default(),
            mode: Mutex::new(mode),
            load_balancers: Mutex::new(vec!["kubernetes".into()]),
            max_epoch: Mutex::new(0),
        });
        let svc = ActuatorServer::new(FakeSvc(state.clone()));
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).unwrap();
        }
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = builder.add_service(svc).serve_with_incoming(incoming).await;
        });
        Self { addr, state, task }
    }

    pub fn endpoint(&self) -> String {
        self.addr.to_string()
    }
}

impl Drop for FakeActuator {
    fn drop(&mut self) {
        self.task.abort();
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
