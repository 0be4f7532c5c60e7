//! What leadership lets this process do, as [`crate::leader`] decides it:
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

use crate::state::Shared;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tokio::sync::{Notify, watch};

impl Shared {
    /// The epoch this process may write under: leading and renewed within the deadline.
    pub fn leader_epoch(&self) -> Option<u64> {
        if self.active.load(Ordering::Acquire) {
            *self.leader_tx.borrow()
        } else {
            None
        }
    }

    /// The epoch the streams run under (also while suspended).
    pub fn leader_rx(&self) -> watch::Receiver<Option<u64>> {
        self.leader_tx.subscribe()
    }

    /// Leads with `epoch`: resumes the same epoch, or starts a new one.
    pub fn lead(&self, epoch: u64) {
        if *self.leader_tx.borrow() == Some(epoch) {
            if !self.active.swap(true, Ordering::AcqRel) {
                tracing::info!(epoch, "lease renewed again; resuming under the same epoch");
                self.metrics.leader.set(1);
                // Streams send what piled up while suspended, and a fresh assignment.
                self.wake_all();
            }
            return;
        }
        self.become_leader(epoch);
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
        self.assign.lock().reset(epoch);
        self.metrics.leader.set(1);
        self.metrics
            .epoch
            .set(i64::try_from(epoch).unwrap_or(i64::MAX));
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
        self.clear_streams_ready();
        self.assign.lock().reset(0);
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
