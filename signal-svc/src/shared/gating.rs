//! What leadership lets this process do, as [`crate::leadership::election`] decides it:
//!
//! - **leading** ([`Shared::lead`]): streams run under the epoch; taints, holds and stream
//!   writes go out. Leading again with the *same* epoch (a renewal after a suspension, or
//!   the same process re-acquiring its own record) resumes without re-versioning anything
//!   and without touching the streams;
//! - **suspended** ([`Shared::suspend`]): past the renew deadline: nothing is written, the
//!   streams stay open and idle;
//! - **not leading** ([`Shared::lose_leadership`]): the streams close.
//!
//! Actuators report the highest epoch they accepted when they refuse ours
//! ([`Shared::report_accepted_epoch`]); the leader then raises its Lease above it.

use crate::shared::Shared;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{Notify, watch};

impl Shared {
    /// The epoch this process may write under: leading and renewed within the deadline.
    ///
    /// The deadline is read from the clock here, not only applied by the election task: after
    /// the process was frozen (SIGSTOP, a stalled host), a task holding an old request may
    /// run before the election notices the term lapsed, and it must not write.
    pub fn leader_epoch(&self) -> Option<u64> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let until = *self.writable_until.lock();
        if until.is_some_and(|at| tokio::time::Instant::now() >= at) {
            return None;
        }
        *self.leader_tx.borrow()
    }

    /// Leads with `epoch` until `until` (the term's renew deadline by this process's
    /// monotonic clock; `None` keeps the one set before, or none: no election). Resuming the
    /// same epoch after writes were paused (suspended, or the deadline passed before the
    /// election noticed) does what the pause held back; a new epoch starts over.
    pub fn lead_until(&self, epoch: u64, until: Option<tokio::time::Instant>) {
        let lapsed = {
            let mut w = self.writable_until.lock();
            let lapsed = w.is_some_and(|at| tokio::time::Instant::now() >= at);
            if until.is_some() {
                *w = until;
            }
            lapsed
        };
        if *self.leader_tx.borrow() == Some(epoch) {
            let was_active = self.active.swap(true, Ordering::AcqRel);
            if !was_active || lapsed {
                tracing::info!(epoch, "lease renewed again; resuming under the same epoch");
                self.metrics.leader.set(1);
                self.writable_again();
            }
            return;
        }
        self.become_leader(epoch);
    }

    /// Leads with `epoch` (see [`Shared::lead_until`]).
    pub fn lead(&self, epoch: u64) {
        self.lead_until(epoch, None);
    }

    /// Writes resume under the same epoch: a Spot notice seen meanwhile still needs its taint
    /// (the taint writer drops requests while nothing may be written), drain-gate conditions
    /// decided meanwhile still need writing, and streams send what piled up and a fresh
    /// assignment.
    fn writable_again(&self) {
        let pending = self.core.lock().index.pending_taints();
        for t in pending {
            self.send_taint(t);
        }
        self.resumed.send_modify(|n| *n += 1);
        self.wake_all();
    }

    /// Bumped each time writes resume under the same epoch (a new epoch changes
    /// [`Shared::leader_rx`] instead).
    pub fn resumed_rx(&self) -> watch::Receiver<u64> {
        self.resumed.subscribe()
    }

    /// The epoch the streams run under (also while suspended).
    pub fn leader_rx(&self) -> watch::Receiver<Option<u64>> {
        self.leader_tx.subscribe()
    }

    /// This process now leads with a new `epoch`: re-stamp every state, re-derive pending
    /// taints. Streams of an older epoch reconnect with a new hello.
    pub fn become_leader(&self, epoch: u64) {
        tracing::info!(epoch, identity = %self.identity, "acquired the lease; leading");
        let pending = {
            let mut core = self.core.lock();
            core.dispatch.set_epoch(epoch);
            core.index.pending_taints()
        };
        self.reported.lock().clear();
        self.assign.lock().begin(epoch, tokio::time::Instant::now());
        self.metrics.leader.set(1);
        self.metrics
            .epoch
            .set(i64::try_from(epoch).unwrap_or(i64::MAX));
        self.want_fresh_node_list();
        self.active.store(true, Ordering::Release);
        self.leader_tx.send_replace(Some(epoch));
        for t in pending {
            self.send_taint(t);
        }
        self.wake_all();
    }

    /// Past the renew deadline: write nothing, keep the streams.
    pub fn suspend(&self) {
        if self.active.swap(false, Ordering::AcqRel) {
            tracing::warn!(
                "could not renew the lease in time; pausing every write until it is renewed"
            );
            self.metrics.leader.set(0);
        }
    }

    /// Leadership lost (or given up): streams stop at once.
    pub fn lose_leadership(&self) {
        self.active.store(false, Ordering::Release);
        self.metrics.leader.set(0);
        self.leader_tx.send_replace(None);
        // The assigner keeps its epoch, generation and fences: the streams that end now fence
        // what they were told, and re-taking the same epoch goes on from there.
        self.clear_streams_ready();
    }

    /// An actuator has accepted `epoch` (it refused ours because of it).
    pub fn report_accepted_epoch(&self, epoch: u64) {
        let before = self.epoch_floor.fetch_max(epoch, Ordering::AcqRel);
        let ours = *self.leader_tx.borrow();
        if epoch > before && ours.is_some_and(|e| epoch >= e) {
            tracing::warn!(
                accepted = epoch,
                ours = ?ours,
                "an actuator accepted a higher epoch (the Lease was recreated?); raising ours"
            );
            self.epoch_raise.notify_one();
        }
    }

    /// The highest epoch any actuator reported.
    pub fn epoch_floor(&self) -> u64 {
        self.epoch_floor.load(Ordering::Acquire)
    }

    /// Woken when an epoch must be raised.
    pub fn epoch_raise_requested(&self) -> Arc<Notify> {
        self.epoch_raise.clone()
    }
}

#[cfg(test)]
mod tests {
    use crate::core::dispatch::Dispatcher;
    use crate::core::index::NodeIndex;
    use crate::core::taints::TriggerSet;
    use crate::shared::{Core, Shared};
    use std::time::Duration;
    use tokio::sync::mpsc;
    use tokio::time::Instant;

    fn shared() -> Shared {
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        Shared::new(core, "me".into(), false, mpsc::unbounded_channel().0)
    }

    /// A leader frozen past its renew deadline (SIGSTOP) must not write when it wakes, even
    /// if the task holding an old hold request runs before the election task suspends it:
    /// a new leader may have written the opposite hold meanwhile (the chaos smoke saw a
    /// released node held Down again that way).
    #[tokio::test]
    async fn past_the_renew_deadline_nothing_may_be_written_before_the_election_notices() {
        let s = shared();
        s.lead_until(7, Some(Instant::now() + Duration::from_millis(300)));
        assert_eq!(s.leader_epoch(), Some(7));
        tokio::time::sleep(Duration::from_millis(350)).await;
        assert_eq!(s.leader_epoch(), None, "suspend() was never called");
        // A renewal moves the deadline on and the same epoch writes again.
        let resumed = s.resumed_rx();
        s.lead_until(7, Some(Instant::now() + Duration::from_secs(30)));
        assert_eq!(s.leader_epoch(), Some(7));
        assert!(resumed.has_changed().unwrap(), "a lapse counts as a pause");
    }

    /// A Spot notice seen while writes were paused (a slow API server makes the leader miss
    /// its renew deadline now and then) got no taint: the taint writer drops requests it may
    /// not act on. Resuming sends it again; before, it waited for a new epoch, and the chaos
    /// soak saw a noticed node never cut.
    #[tokio::test]
    async fn a_notice_seen_while_suspended_is_tainted_on_resume() {
        use crate::core::event::EventView;
        use k8s_openapi::api::core::v1::{Node, NodeSpec};
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let (tx, mut rx) = mpsc::unbounded_channel();
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        let s = Shared::new(core, "me".into(), false, tx);
        s.lead_until(3, Some(Instant::now() + Duration::from_secs(30)));
        s.suspend();
        let now = jiff::Timestamp::now();
        let node = Node {
            metadata: ObjectMeta {
                name: Some("n".into()),
                uid: Some("u".into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(
                    "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/1".into(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        };
        let notice = EventView {
            name: "n.e1".into(),
            uid: "e1".into(),
            reason: "PreemptScheduled".into(),
            kind: Some("Node".into()),
            node_name: Some("n".into()),
            message: "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1.".into(),
            time: Some(now),
        };
        {
            let mut core = s.core.lock();
            core.index.apply(&node, now);
            // The request the event produced went to a writer that dropped it (suspended).
            assert_eq!(core.index.apply_event(&notice, now).taints.len(), 1);
        }
        assert!(rx.try_recv().is_err());
        s.lead_until(3, Some(Instant::now() + Duration::from_secs(30)));
        let again = rx
            .try_recv()
            .expect("the pending taint is sent again on resume");
        assert_eq!((again.name.as_str(), again.uid.as_str()), ("n", "u"));
    }
}
