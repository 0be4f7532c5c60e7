//! The node list a new leader needs before it streams, and readiness (`/ready`).

use super::Shared;
use std::sync::atomic::Ordering;

/// A full node list completed within this counts as fresh for a new leadership.
pub const FRESH_NODE_LIST: std::time::Duration = std::time::Duration::from_secs(10);

/// The node watch's lists, as a leader needs them.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct NodeList {
    done_at: Option<tokio::time::Instant>,
    wanted_after: Option<tokio::time::Instant>,
}

impl NodeList {
    fn fresh(&self) -> bool {
        match (self.done_at, self.wanted_after) {
            (None, _) => false,
            (Some(done), Some(wanted)) => done >= wanted,
            (Some(_), None) => true,
        }
    }
}

impl Shared {
    /// The node watch completed a full list.
    pub fn set_nodes_synced(&self) {
        let now = tokio::time::Instant::now();
        self.node_list.send_modify(|l| l.done_at = Some(now));
    }

    /// Resolves once the node watch has finished a full list, and one begun after the last
    /// `want_fresh_node_list` (a leader never streams before: a partial list would
    /// assert a partial desired state, an old one a stale one).
    pub async fn nodes_synced(&self) {
        let mut rx = self.node_list.subscribe();
        let _ = rx.wait_for(NodeList::fresh).await;
    }

    /// A new leadership: a standby's watch may be half-open (the API server gone quiet on a
    /// connection nobody noticed; kube-runtime finds out after ~290 s) and its index minutes
    /// old, and streaming it under a new epoch would beat the actuators' fresher states (N7).
    /// Unless a full list completed within [`FRESH_NODE_LIST`], ask the watch for a new one;
    /// streams wait for it ([`Shared::nodes_synced`]).
    pub(super) fn want_fresh_node_list(&self) {
        let now = tokio::time::Instant::now();
        let stale = self
            .node_list
            .borrow()
            .done_at
            .is_none_or(|at| now.saturating_duration_since(at) > FRESH_NODE_LIST);
        if stale {
            self.node_list.send_modify(|l| l.wanted_after = Some(now));
            self.relist.notify_one();
        }
    }

    /// Resolves when a new node list is wanted (the node watch restarts its watcher).
    pub async fn relist_requested(&self) {
        self.relist.notified().await;
    }

    pub fn set_events_synced(&self) {
        self.events_synced.store(true, Ordering::Release);
    }

    pub(super) fn clear_streams_ready(&self) {
        self.streams_ready.lock().clear();
    }

    pub fn set_stream_ready(&self, endpoint: &str, ready: bool) {
        let mut s = self.streams_ready.lock();
        if ready {
            s.insert(endpoint.to_owned());
        } else {
            s.remove(endpoint);
        }
    }

    /// Watches synced and, on a (non-dry-run) leader, every endpoint's stream has sent its
    /// snapshot.
    pub fn is_ready(&self) -> bool {
        if self.node_list.borrow().done_at.is_none() || !self.events_synced.load(Ordering::Acquire)
        {
            return false;
        }
        if self.dry_run || self.leader_epoch().is_none() {
            return true;
        }
        let endpoints = self.core.lock().dispatch.endpoints().to_vec();
        let ready = self.streams_ready.lock();
        !endpoints.is_empty() && endpoints.iter().all(|e| ready.contains(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dispatch::Dispatcher;
    use crate::core::index::NodeIndex;
    use crate::core::taints::TriggerSet;
    use crate::shared::Core;
    use std::time::Duration;
    use tokio::sync::mpsc;

    fn shared() -> Shared {
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        Shared::new(core, "me".into(), false, mpsc::unbounded_channel().0)
    }

    async fn synced_within(s: &Shared, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), s.nodes_synced())
            .await
            .is_ok()
    }

    /// N7: a standby whose last full list is old (its watch may be half-open) lists again
    /// before it streams as leader; one that listed moments ago (a start-up) does not wait.
    #[tokio::test]
    async fn a_new_leader_streams_only_from_a_fresh_node_list() {
        let s = shared();
        assert!(!synced_within(&s, 50).await, "nothing listed yet");
        s.set_nodes_synced();
        s.want_fresh_node_list();
        assert!(synced_within(&s, 50).await, "listed moments ago: fresh");

        let old = tokio::time::Instant::now()
            .checked_sub(FRESH_NODE_LIST + Duration::from_secs(1))
            .expect("monotonic clock past 11 s");
        s.node_list.send_modify(|l| l.done_at = Some(old));
        s.want_fresh_node_list();
        assert!(
            !synced_within(&s, 50).await,
            "an old list must be redone first"
        );
        // The watch was asked for a new list...
        assert!(
            tokio::time::timeout(Duration::from_millis(50), s.relist_requested())
                .await
                .is_ok()
        );
        // ...and once it completes, the leader streams.
        s.set_nodes_synced();
        assert!(synced_within(&s, 50).await);
    }
}
