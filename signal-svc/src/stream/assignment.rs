//! A live stream's part in the load balancer assignment ([`crate::core::assign`]): joining
//! and leaving it, and the assignment messages it sends (new plans and heartbeats).

use super::msg;
use crate::core::assign::{Outcome, StreamId};
use crate::shared::Shared;
use cutover_proto::v1::SignalMessage;
use cutover_proto::v1::signal_message::Kind;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Leaves the assignment when a live stream ends, however it ends (error, resync, shutdown,
/// or the future being dropped on a leadership change).
pub(super) struct Membership {
    pub(super) shared: Arc<Shared>,
    pub(super) id: StreamId,
}

impl Drop for Membership {
    fn drop(&mut self) {
        let outcome = self
            .shared
            .assign
            .lock()
            .leave(self.id, tokio::time::Instant::now());
        publish_assignment(&self.shared, &outcome);
    }
}

/// After a plan change: metrics, and wake every stream so each sends its new assignment.
pub(super) fn publish_assignment(shared: &Shared, outcome: &Outcome) {
    if !outcome.changed {
        return;
    }
    let (owners, counts) = {
        let a = shared.assign.lock();
        (a.owners(), a.counts())
    };
    shared.metrics.set_assignment(&owners, &counts);
    if outcome.failed_over > 0 {
        shared
            .metrics
            .assignment_failovers
            .inc_by(outcome.failed_over as u64);
        tracing::warn!(
            load_balancers = outcome.failed_over,
            "load balancers of a lost actuator stream handed over"
        );
    }
    tracing::info!(?owners, "load balancer assignment changed");
    shared.wake_all();
}

/// Sends the stream's assignment if one is due (new plan or heartbeat).
///
/// It echoes the newest `Renew` the actuator sent up (`renewed`): the actuator counts the
/// assignment's validity from when it sent that, which precedes this send, from which the
/// fence of this stream counts (see `Assignment` in the proto).
pub(super) async fn send_assignment(
    shared: &Shared,
    id: StreamId,
    renewed: &AtomicU64,
    tx: &mpsc::Sender<SignalMessage>,
) -> Result<(), ()> {
    let now = tokio::time::Instant::now();
    let (released, outcome, due) = {
        let mut a = shared.assign.lock();
        // What the replica acknowledged may now go to its new owner.
        let released = a.acked(id, renewed.load(Ordering::Acquire), now);
        let outcome = a.tick(now);
        (released, outcome, a.due(id, now))
    };
    publish_assignment(shared, &released);
    publish_assignment(shared, &outcome);
    if let Some(mut m) = due {
        m.echo = renewed.load(Ordering::Acquire);
        tx.send(msg(Kind::Assignment(m.clone())))
            .await
            .map_err(|_| ())?;
        // Recorded once handed over: the fence of a dead stream counts from here.
        shared
            .assign
            .lock()
            .sent(id, &m, tokio::time::Instant::now());
    }
    Ok(())
}

/// When this stream must next look at its assignment: its heartbeat, or a fence lapsing.
pub(super) fn next_assignment_check(shared: &Shared, id: StreamId) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    let a = shared.assign.lock();
    let due = a.next_due(id, now).unwrap_or(now + a.heartbeat());
    a.next_fence_expiry().map_or(due, |f| f.min(due)).max(now)
}
