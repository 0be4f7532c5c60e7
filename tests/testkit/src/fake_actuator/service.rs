//! The fake's `Actuator` service: records each stream's messages into [`FakeState`] and
//! answers hellos and desired states as the real actuator does, per [`Mode`].

use super::{FakeState, Mode, StreamLog};
use cutover_proto::v1::actuator_server::Actuator;
use cutover_proto::v1::{
    ActuatorMessage, EntryRef, GetNodeAdminStateRequest, GetNodeAdminStateResponse, HelloAck,
    ListHeldEntriesRequest, ListHeldEntriesResponse, NodeDesiredState, NodeResult, ResultPhase,
    SetNodeAdminStateRequest, SetNodeAdminStateResponse, SignalMessage, WatchResultsRequest,
    actuator_message, signal_message::Kind,
};
use futures::Stream;
use std::pin::Pin;
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub(super) struct FakeSvc(pub(super) Arc<FakeState>);

pub(super) fn result(
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
