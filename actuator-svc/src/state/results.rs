//! Results: built from a node's held state, counted, and broadcast to the streams and tool
//! watchers; plus the change counter tool waits re-check on.

use super::held::{Held, admin_to_proto};
use super::lbset::LbSet;
use crate::metrics::Metrics;
use cutover_proto::v1::{NodeResult, ResultPhase};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{broadcast, watch};

fn ts(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

/// The result feed of one replica.
pub(super) struct Results {
    tx: broadcast::Sender<NodeResult>,
    metrics: Arc<Metrics>,
    /// Bumped on every change of an asserted state or a fleet status (tool waits re-check).
    changes: watch::Sender<u64>,
    /// Fleet-wide phases as results, for tool watchers (never sent up a stream).
    fleet: broadcast::Sender<NodeResult>,
    /// Per node UID: the newest result of a stream state signal-svc has not confirmed yet
    /// (its `NodeStatus` has not reached the phase). A result lost on a lagging broadcast or
    /// a dropped stream is sent again until it is confirmed (`Store::resend_unconfirmed`).
    /// Locked on its own, never while the store's state is locked.
    unconfirmed: Mutex<HashMap<String, NodeResult>>,
}

impl Results {
    pub(super) fn new(metrics: Arc<Metrics>) -> Self {
        let (tx, _) = broadcast::channel(4096);
        Self {
            tx,
            metrics,
            changes: watch::channel(0).0,
            fleet: broadcast::channel(1024).0,
            unconfirmed: Mutex::default(),
        }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<NodeResult> {
        self.tx.subscribe()
    }

    pub(super) fn subscribe_fleet(&self) -> broadcast::Receiver<NodeResult> {
        self.fleet.subscribe()
    }

    /// Broadcasts a fleet-wide phase to tool watchers.
    pub(super) fn emit_fleet(&self, r: NodeResult) {
        let _ = self.fleet.send(r);
    }

    /// Emits the result of a stream state and keeps it until signal-svc confirms it.
    pub(super) fn emit_stream(&self, r: NodeResult) {
        if let Some(uid) = r.node.as_ref().map(|n| n.uid.clone()) {
            let mut unconfirmed = self.unconfirmed.lock();
            if r.phase == ResultPhase::Superseded as i32 {
                unconfirmed.remove(&uid);
            } else {
                unconfirmed.insert(uid, r.clone());
            }
        }
        self.emit(r);
    }

    #[cfg(test)]
    pub(super) fn unconfirmed_len(&self) -> usize {
        self.unconfirmed.lock().len()
    }

    /// The results not confirmed yet.
    pub(super) fn unconfirmed(&self) -> Vec<NodeResult> {
        self.unconfirmed.lock().values().cloned().collect()
    }

    /// Stops re-sending the results of the UIDs `done` (confirmed, or about a node or
    /// version that is gone); re-sends the others that are still the newest of their node.
    pub(super) fn resend(&self, done: &[String], again: Vec<NodeResult>) -> usize {
        {
            let mut unconfirmed = self.unconfirmed.lock();
            for uid in done {
                unconfirmed.remove(uid);
            }
        }
        let mut n = 0;
        for r in again {
            let newest = r.node.as_ref().is_some_and(|node| {
                self.unconfirmed
                    .lock()
                    .get(&node.uid)
                    .is_some_and(|x| x.version == r.version && x.phase == r.phase)
            });
            if newest {
                self.metrics.result_resent();
                let _ = self.tx.send(r);
                n += 1;
            }
        }
        n
    }

    pub(super) fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    pub(super) fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Counts, logs and broadcasts one result.
    pub(super) fn emit(&self, r: NodeResult) {
        let phase = ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified);
        self.metrics.result(phase.as_str_name());
        tracing::debug!(node = r.node.as_ref().map(|n| n.name.as_str()).unwrap_or(""), phase = phase.as_str_name(), reason = %r.reason, "result");
        // No receiver is fine: results are also visible through ListHeldEntries.
        let _ = self.tx.send(r);
    }
}

/// The result of `h` reaching `phase` on the load balancers `cover` (positions in `lbs`).
pub(super) fn result_of(
    h: &Held,
    phase: ResultPhase,
    reason: String,
    will_retry: bool,
    cover: &LbSet,
    lbs: &[&String],
) -> NodeResult {
    NodeResult {
        node: Some(h.node.clone()),
        version: Some(h.version),
        desired: admin_to_proto(h.desired) as i32,
        phase: phase as i32,
        reason,
        will_retry,
        entries: h.entries(),
        at: Some(ts(SystemTime::now())),
        received_at: Some(ts(h.received_at)),
        load_balancers: cover
            .iter()
            .filter_map(|i| lbs.get(i).map(|l| (*l).clone()))
            .collect(),
        repaired: h.repaired && matches!(phase, ResultPhase::Accepted | ResultPhase::Effective),
        fleet: false,
    }
}
