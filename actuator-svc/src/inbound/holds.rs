//! Durable tool holds: what a hold request waits for, and how a refusal is answered.
//!
//! A tool's hold must outlive this replica and show on every replica, so it is not kept here:
//! the replica that receives `SetNodeAdminState` relays it as a `HoldRequest` up a
//! desired-state stream of the current signal-svc leader, which stores it on the Kubernetes
//! Node (annotation `cutover.io/hold`) and answers with a `HoldAck`. The hold then comes back
//! down every replica's stream as an ordinary desired state (with `NodeDesiredState.hold`),
//! written by each load balancer's owner like any taint. Only when no stream is connected
//! (the actuator used alone) does a tool hold stay in this replica's memory, and the answers
//! say so.
//!
//! The stream side lives in `state::uplink`; this module says what a hold request waits for.

use crate::lb::index::{Admin, NodeSpec};
use crate::state::{Held, Store, admin_to_proto};
use cutover_proto::v1::{HoldAck, NodeRef, NodeResult, ResultPhase, WaitFor};
use tokio::time::Instant;
use tonic::Status;

pub use crate::state::uplink::{Route, Uplink, UplinkError};

/// The reason key of a durable hold in stream states (the Node annotation's name).
pub const HOLD_KEY: &str = "cutover.io/hold";

/// The note for a hold kept in memory only.
pub const MEMORY_ONLY: &str = "memory only: no signal-svc stream; this hold is written by this replica alone and is lost when it restarts";

/// The `SetNodeAdminState` error for a refused hold.
pub fn refused(ack: &HoldAck) -> Status {
    let msg = format!("signal-svc refused the hold: {}", ack.error);
    if ack.error.starts_with("unknown node") {
        Status::not_found(msg)
    } else if ack.error.starts_with("invalid") {
        Status::invalid_argument(msg)
    } else {
        // "not leader", a failed patch: another attempt may succeed.
        Status::unavailable(msg)
    }
}

/// What a durable hold request waits for.
#[derive(Debug, Clone)]
pub struct HoldWait {
    /// The node as the tool named it (`uid` from the ack when the tool gave none).
    pub node: NodeRef,
    /// How to find the node's entries, as the tool described it.
    pub spec: NodeSpec,
    pub hold: bool,
    pub reason: String,
    pub requester: String,
    pub wait: WaitFor,
    pub deadline: Instant,
}

/// Whether the stream state of a node reflects the request: the hold with this reason from
/// this requester, or (release) no hold at all.
fn reflects(h: Option<&Held>, w: &HoldWait) -> bool {
    match (h, w.hold) {
        (Some(h), true) => h
            .hold
            .as_ref()
            .is_some_and(|x| x.reason == w.reason && x.requester == w.requester),
        (Some(h), false) => h.hold.is_none(),
        (None, hold) => !hold,
    }
}

/// After signal-svc acknowledged the hold: waits until this replica's stream carries it and
/// the fleet-wide phase of that version reaches `wait` (any replica may write each load
/// balancer). Returns the last result and whether the deadline passed first.
pub async fn wait_for(store: &Store, w: &HoldWait) -> (NodeResult, bool) {
    let mut changes = store.changes();
    let desired = if w.hold { Admin::Down } else { Admin::None };
    let mut last = NodeResult {
        node: Some(w.node.clone()),
        desired: admin_to_proto(desired) as i32,
        phase: ResultPhase::Unspecified as i32,
        reason: "durable hold: stored on the Node, written by each load balancer's owner".into(),
        ..NodeResult::default()
    };
    loop {
        changes.borrow_and_update();
        let state = store.find_stream(&w.node.uid, &w.node.name);
        if reflects(state.as_ref(), w) {
            let Some(h) = state else {
                // Released and nothing else asserts the node: nothing to write.
                last.phase = ResultPhase::Effective as i32;
                last.reason = "no hold and no taint: nothing is asserted for the node".into();
                return (last, false);
            };
            last.node = Some(h.node.clone());
            last.version = Some(h.version);
            last.desired = admin_to_proto(h.desired) as i32;
            last.received_at = Some(prost_types::Timestamp::from(h.received_at));
            if !w.hold && h.desired == Admin::Down {
                last.reason = format!("released; still held down by {}", h.reasons.join(", "));
            }
            if let Some(phase) = store.fleet_phase(&h.node.uid, h.version) {
                last.phase = phase as i32;
                last.at = Some(prost_types::Timestamp::from(std::time::SystemTime::now()));
                let done = match phase {
                    ResultPhase::Effective => true,
                    ResultPhase::Accepted => w.wait == WaitFor::Accepted,
                    _ => false,
                };
                if done {
                    return (last, false);
                }
            }
        }
        match tokio::time::timeout_at(w.deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            // The store lives as long as the process; a closed channel means shutdown.
            Ok(Err(_)) | Err(_) => return (last, true),
        }
    }
}
