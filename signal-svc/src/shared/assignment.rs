//! The live streams' load balancer assignment ([`crate::core::assign::Assigner`], leader
//! only): joining, leaving, the actuator's managed set, the assignment messages due. Every
//! change of plan is published (metrics, logs) and wakes every stream, so each sends its new
//! assignment.

use super::Shared;
use crate::core::assign::{Assigner, Outcome, StreamId};
use cutover_proto::v1::Assignment;
use std::collections::BTreeSet;
use tokio::time::Instant;

impl Shared {
    /// Sets how long assignments hold without a heartbeat.
    pub fn with_assignment_valid_for(self, valid_for: std::time::Duration) -> Self {
        *self.assign.lock() = Assigner::new(valid_for);
        self
    }

    /// A stream went live (acknowledged, snapshot sent) reporting `load_balancers`.
    pub fn join_assignment(&self, endpoint: &str, load_balancers: &[String]) -> StreamId {
        let (id, outcome) = self
            .assign
            .lock()
            .join(endpoint, load_balancers, Instant::now());
        self.publish_assignment(&outcome);
        id
    }

    /// A live stream ended, however it ended.
    pub fn leave_assignment(&self, id: StreamId) {
        let outcome = self.assign.lock().leave(id, Instant::now());
        self.publish_assignment(&outcome);
    }

    /// The actuator behind stream `id` now manages `load_balancers`.
    pub fn set_managed(&self, id: StreamId, load_balancers: &[String]) {
        let outcome = self
            .assign
            .lock()
            .manages(id, load_balancers, Instant::now());
        self.publish_assignment(&outcome);
    }

    /// Records what the replica acknowledged (`renewed`: its newest `Renew`), lets fences
    /// lapse, and returns the stream's assignment if one is due (new plan or heartbeat).
    pub fn assignment_due(&self, id: StreamId, renewed: u64) -> Option<Assignment> {
        let now = Instant::now();
        let (released, outcome, due) = {
            let mut a = self.assign.lock();
            // What the replica acknowledged may now go to its new owner.
            let released = a.acked(id, renewed, now);
            let outcome = a.tick(now);
            (released, outcome, a.due(id, now))
        };
        self.publish_assignment(&released);
        self.publish_assignment(&outcome);
        due
    }

    /// The assignment `m` was handed to stream `id`: the fence of a dead stream counts from
    /// here.
    pub fn assignment_sent(&self, id: StreamId, m: &Assignment) {
        self.assign.lock().sent(id, m, Instant::now());
    }

    /// When stream `id` must next look at its assignment: its heartbeat, or a fence lapsing.
    pub fn next_assignment_check(&self, id: StreamId) -> Instant {
        let now = Instant::now();
        let a = self.assign.lock();
        let due = a.next_due(id, now).unwrap_or(now + a.heartbeat());
        a.next_fence_expiry().map_or(due, |f| f.min(due)).max(now)
    }

    /// The load balancers the live actuators manage (empty: none reported).
    pub fn managed_load_balancers(&self) -> BTreeSet<String> {
        self.assign.lock().managed().clone()
    }

    /// Which stream owns which load balancer.
    pub fn assignment_owners(&self) -> Vec<(String, Option<String>)> {
        self.assign.lock().owners()
    }

    /// After a plan change: metrics, and wake every stream so each sends its new assignment.
    fn publish_assignment(&self, outcome: &Outcome) {
        if !outcome.changed {
            return;
        }
        let (owners, counts) = {
            let a = self.assign.lock();
            (a.owners(), a.counts())
        };
        self.metrics.set_assignment(&owners, &counts);
        if outcome.failed_over > 0 {
            self.metrics
                .assignment_failovers
                .inc_by(outcome.failed_over as u64);
            tracing::warn!(
                load_balancers = outcome.failed_over,
                "load balancers of a lost actuator stream handed over"
            );
        }
        tracing::info!(?owners, "load balancer assignment changed");
        self.wake_all();
    }
}
