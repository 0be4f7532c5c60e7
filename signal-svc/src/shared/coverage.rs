//! What the actuators' results covered per node ([`Coverage`]), and the fleet-wide phases
//! they reached, sent down every stream.

use super::{Shared, node_status};
use crate::core::coverage::{Coverage, Reached};
use cutover_proto::v1::{NodeResult, NodeStatus, ResultPhase, Version};
use std::collections::BTreeSet;
use tokio::sync::broadcast;

impl Shared {
    /// Adds a result to the node's coverage of `version`; returns the phases it reached.
    /// `managed` is [`Shared::managed_load_balancers`], read before.
    pub fn cover(
        &self,
        uid: &str,
        version: Version,
        phase: ResultPhase,
        result: &NodeResult,
        managed: &BTreeSet<String>,
    ) -> Vec<Reached> {
        let mut reported = self.reported.lock();
        let cov: &mut Coverage = reported.entry(uid.to_owned()).or_default();
        cov.add(
            version,
            phase,
            &result.load_balancers,
            result.repaired,
            managed,
        )
    }

    /// The fleet-wide phase the node's results reached (and for which version), and whether
    /// an effective state regressed since.
    pub fn reached(&self, uid: &str) -> Option<((Version, ResultPhase), bool)> {
        self.reported
            .lock()
            .get(uid)
            .and_then(|c| c.reached().map(|r| (r, c.regressed())))
    }

    /// Sends a fleet-wide phase down every stream (none listening is fine: a stream that
    /// opens later gets [`Shared::fleet_statuses`]).
    pub fn publish_status(&self, status: NodeStatus) {
        let _ = self.statuses.send(status);
    }

    /// Fleet-wide phases from now on.
    pub fn subscribe_statuses(&self) -> broadcast::Receiver<NodeStatus> {
        self.statuses.subscribe()
    }

    /// The fleet-wide phase of every asserted node's current version that reached one: what a
    /// stream that just opened has missed.
    pub fn fleet_statuses(&self) -> Vec<NodeStatus> {
        let reached: Vec<(String, Version, ResultPhase)> = self
            .reported
            .lock()
            .iter()
            .filter_map(|(uid, cov)| {
                let (version, phase) = cov.reached()?;
                Some((uid.clone(), version, phase))
            })
            .collect();
        let core = self.core.lock();
        reached
            .into_iter()
            .filter_map(|(uid, version, phase)| {
                let current = core.dispatch.current(&uid)?;
                if current.version != Some(version) {
                    return None;
                }
                let node = current.node.as_ref()?;
                Some(node_status(&node.name, &node.uid, version, phase))
            })
            .collect()
    }

    /// Forgets the result coverage of nodes that left the cluster (memory stays bounded by
    /// the nodes). Takes `core`, then (after releasing it) `reported`.
    pub fn prune_reported(&self) {
        let reported: Vec<String> = self.reported.lock().keys().cloned().collect();
        let gone: Vec<String> = {
            let core = self.core.lock();
            reported
                .into_iter()
                .filter(|uid| core.dispatch.current(uid).is_none())
                .collect()
        };
        if !gone.is_empty() {
            let mut r = self.reported.lock();
            for uid in gone {
                r.remove(&uid);
            }
        }
    }
}
