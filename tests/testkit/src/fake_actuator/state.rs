//! [`FakeState`]'s queries over what the fake recorded, and the test's own sends up a stream.

use super::FakeState;
use super::service::result;
use cutover_proto::v1::{
    ActuatorMessage, AdminState, Assignment, HoldAck, NodeDesiredState, ResultPhase, Version,
    signal_message::Kind,
};

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
