//! What each actuator stream must carry: versions, every node's state and per-endpoint
//! outboxes.
//!
//! Level-triggered restore: every node of the cluster is asserted, `Down` or `None`, in every
//! snapshot and resync. The whole desired state of a node is on the Node (taints, labels,
//! the hold annotation), so nothing here depends on remembering a restore for a while: an
//! actuator that sees `None` for a node whose entries read `Down` (an outside writer, an
//! outage, a restart, a re-registered node) repairs them.
//!
//! Fan-out: every asserted node goes to every endpoint. Which replica *writes* a load
//! balancer is decided by [`super::assign`], not by routing nodes: routing nodes over replicas
//! made every replica write every load balancer, queueing behind each other's LB lock.
//!
//! Level-triggered by construction: an outbox holds only a *dirty set* of node UIDs (plus
//! pending `Forget`s); the message is built from the latest asserted state when the stream
//! is ready to send. A slow stream therefore gets one message per node with its newest state,
//! never a backlog, and memory is bounded by the number of nodes.

use super::index::{Change, Desired, DesiredState};
use cutover_proto::v1::{
    AdminState, Forget, Hold, NodeDesiredState, NodeRef, Version, signal_message::Kind,
};
use jiff::Timestamp;
use std::collections::{HashMap, HashSet, VecDeque};

#[derive(Debug)]
struct Asserted {
    msg: NodeDesiredState,
    /// A `None` that follows a `Down` seen here (a restore worth a Node event), as opposed to
    /// the `None` every untriggered node carries.
    restore: bool,
}

#[derive(Debug, Default)]
struct Outbox {
    dirty: VecDeque<String>,
    in_dirty: HashSet<String>,
    forgets: HashMap<String, Forget>,
}

impl Outbox {
    fn mark(&mut self, uid: &str) {
        if self.in_dirty.insert(uid.to_owned()) {
            self.dirty.push_back(uid.to_owned());
        }
    }
}

/// Versions, assertions and outboxes of every endpoint.
#[derive(Debug)]
pub struct Dispatcher {
    epoch: u64,
    seq: u64,
    /// Every node of the cluster, by UID.
    asserted: HashMap<String, Asserted>,
    endpoints: Vec<String>,
    outboxes: HashMap<String, Outbox>,
}

impl Default for Dispatcher {
    fn default() -> Self {
        Self::new()
    }
}

impl Dispatcher {
    pub fn new() -> Self {
        Self {
            epoch: 0,
            seq: 0,
            asserted: HashMap::new(),
            endpoints: Vec::new(),
            outboxes: HashMap::new(),
        }
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Number of nodes currently asserted (every node, Down or None).
    pub fn asserted_len(&self) -> usize {
        self.asserted.len()
    }

    /// The state last asserted for a node UID (to match actuator results to it).
    pub fn current(&self, uid: &str) -> Option<&NodeDesiredState> {
        self.asserted.get(uid).map(|a| &a.msg)
    }

    /// Whether the node's current `None` restores a `Down` asserted before (only those get a
    /// Node event when effective; every other node carries `None` all the time).
    pub fn is_restore(&self, uid: &str) -> bool {
        self.asserted.get(uid).is_some_and(|a| a.restore)
    }

    fn next_version(&mut self) -> Version {
        self.seq += 1;
        Version {
            epoch: self.epoch,
            seq: self.seq,
        }
    }

    /// Feeds one index change. Returns the endpoints whose outbox changed.
    pub fn apply(&mut self, change: &Change, _now: Timestamp) -> Vec<String> {
        match change {
            Change::Set { state, .. } => self.set(state),
            Change::Removed { node, .. } => {
                let Some(old) = self.asserted.remove(&node.uid) else {
                    return Vec::new();
                };
                let version = self.next_version();
                let forget = Forget {
                    node: old.msg.node.clone(),
                    version: Some(version),
                };
                for ob in self.outboxes.values_mut() {
                    ob.forgets.insert(node.uid.clone(), forget.clone());
                    ob.mark(&node.uid);
                }
                self.endpoints.clone()
            }
        }
    }

    fn set(&mut self, state: &DesiredState) -> Vec<String> {
        let uid = state.node.uid.clone();
        let restore = state.desired == Desired::None
            && self
                .asserted
                .get(&uid)
                .is_some_and(|a| a.restore || a.msg.desired == AdminState::Down as i32);
        let version = self.next_version();
        let msg = to_proto(state, version);
        self.asserted.insert(uid.clone(), Asserted { msg, restore });
        for ob in self.outboxes.values_mut() {
            ob.forgets.remove(&uid);
            ob.mark(&uid);
        }
        self.endpoints.clone()
    }

    /// A new leadership epoch: every asserted state gets a version of the new epoch, so the
    /// actuator prefers it over anything a previous leader sent.
    ///
    /// Invariant: versions never go backwards within an epoch. The same epoch again (this
    /// process re-took its own Lease record after its streams closed) keeps the sequence:
    /// actuators still hold versions of it and drop anything not newer (restarting at 0 lost
    /// every cut and restore until the sequence caught up: issue 26, N1).
    pub fn set_epoch(&mut self, epoch: u64) {
        if epoch == self.epoch {
            return;
        }
        self.epoch = epoch;
        self.seq = 0;
        let mut uids: Vec<String> = self.asserted.keys().cloned().collect();
        uids.sort();
        for uid in uids {
            let v = self.next_version();
            if let Some(a) = self.asserted.get_mut(&uid) {
                a.msg.version = Some(v);
            }
        }
    }

    /// A new endpoint set. A new endpoint gets every asserted node (its stream sends them in
    /// its snapshot); a removed endpoint's outbox is dropped. Returns the new endpoints.
    pub fn set_endpoints(&mut self, mut endpoints: Vec<String>) -> Vec<String> {
        endpoints.sort();
        endpoints.dedup();
        self.outboxes.retain(|ep, _| endpoints.contains(ep));
        let mut added = Vec::new();
        for ep in &endpoints {
            if !self.outboxes.contains_key(ep) {
                let mut ob = Outbox::default();
                let mut uids: Vec<&String> = self.asserted.keys().collect();
                uids.sort();
                for uid in uids {
                    ob.mark(uid);
                }
                self.outboxes.insert(ep.clone(), ob);
                added.push(ep.clone());
            }
        }
        self.endpoints = endpoints;
        added
    }

    /// The full snapshot for a (re)connecting stream, sorted by node name. Clears the
    /// endpoint's dirty set: the snapshot supersedes every pending delta.
    pub fn snapshot(&mut self, endpoint: &str) -> Vec<NodeDesiredState> {
        if let Some(ob) = self.outboxes.get_mut(endpoint) {
            *ob = Outbox::default();
        }
        let mut out: Vec<NodeDesiredState> =
            self.asserted.values().map(|a| a.msg.clone()).collect();
        out.sort_by(|a, b| node_name(a).cmp(node_name(b)));
        out
    }

    /// A periodic resync on a live stream: every node's latest state is sent again.
    pub fn resync(&mut self, endpoint: &str) {
        let Some(ob) = self.outboxes.get_mut(endpoint) else {
            return;
        };
        let mut uids: Vec<&String> = self.asserted.keys().collect();
        uids.sort();
        for uid in uids {
            ob.mark(uid);
        }
    }

    /// Up to `max` pending messages for an endpoint, each with the node's latest state.
    pub fn next_deltas(&mut self, endpoint: &str, max: usize) -> Vec<Kind> {
        let mut out = Vec::new();
        let Some(ob) = self.outboxes.get_mut(endpoint) else {
            return out;
        };
        while out.len() < max {
            let Some(uid) = ob.dirty.pop_front() else {
                break;
            };
            ob.in_dirty.remove(&uid);
            if let Some(f) = ob.forgets.remove(&uid) {
                out.push(Kind::Forget(f));
            } else if let Some(a) = self.asserted.get(&uid) {
                out.push(Kind::Delta(a.msg.clone()));
            }
        }
        out
    }

    /// Number of pending messages for an endpoint.
    pub fn pending(&self, endpoint: &str) -> usize {
        self.outboxes.get(endpoint).map_or(0, |o| o.dirty.len())
    }
}

fn node_name(s: &NodeDesiredState) -> &str {
    s.node.as_ref().map_or("", |n| n.name.as_str())
}

fn proto_ts(t: Timestamp) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: t.as_second(),
        nanos: t.subsec_nanosecond(),
    }
}

/// The wire form of a desired state.
pub fn to_proto(state: &DesiredState, version: Version) -> NodeDesiredState {
    let n = &state.node;
    NodeDesiredState {
        node: Some(NodeRef {
            name: n.name.clone(),
            uid: n.uid.clone(),
            provider_id: n.provider_id.clone(),
            internal_ips: n.internal_ips.clone(),
            zone: n.zone.clone(),
        }),
        desired: match state.desired {
            Desired::Down => AdminState::Down,
            Desired::None => AdminState::None,
        } as i32,
        reasons: state.reasons.clone(),
        observed_at: Some(proto_ts(state.observed_at)),
        version: Some(version),
        deadline: state.deadline.map(proto_ts),
        hold: n.hold.as_ref().map(|h| Hold {
            reason: h.reason.clone(),
            requester: h.by.clone(),
            since: Some(proto_ts(h.since)),
        }),
    }
}

#[cfg(test)]
#[path = "dispatch_tests.rs"]
mod tests;
