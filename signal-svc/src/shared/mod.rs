//! State shared by the adapters: the pure core behind one lock, result coverage, the load
//! balancer assignment, readiness, and what leadership allows ([`gating`]).
//!
//! Every field is private: callers say what they do through methods (apply a node, take a
//! stream's snapshot, join the assignment, ...), so the locks never leave this module.
//! Lock order: no method of [`Shared`] holds two of its locks at once (`core`, `reported`,
//! `assign`, `notifies`, `streams_ready`, `writable_until`): each takes what it needs, copies
//! it out and releases it before taking the next. `tests/locks.rs` runs every pair of
//! lock-taking paths concurrently under a timeout.
//!
//! - [`gating`]: leading, suspended, not leading: what may be written.
//! - [`assignment`]: the live streams' load balancer assignment.

pub mod assignment;
pub mod gating;

use crate::core::assign::Assigner;
use crate::core::coverage::{Coverage, Reached};
use crate::core::dispatch::Dispatcher;
use crate::core::event::EventView;
use crate::core::index::{Change, Desired, NodeIndex, Output, TaintRequest};
use crate::metrics::Metrics;
use cutover_proto::v1::signal_message::Kind;
use cutover_proto::v1::{NodeDesiredState, NodeRef, NodeResult, NodeStatus, ResultPhase, Version};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use tokio::sync::{Notify, broadcast, mpsc, watch};

/// The pure core: one lock, so an index change and its dispatch are atomic.
#[derive(Debug)]
pub struct Core {
    pub index: NodeIndex,
    pub dispatch: Dispatcher,
}

/// How long an actuator's assignment holds without a heartbeat, unless configured.
pub const DEFAULT_ASSIGNMENT_VALID_FOR: std::time::Duration = std::time::Duration::from_secs(3);

/// A full node list completed within this counts as fresh for a new leadership.
pub const FRESH_NODE_LIST: std::time::Duration = std::time::Duration::from_secs(10);

/// The node watch's lists, as a leader needs them.
#[derive(Debug, Default, Clone, Copy)]
struct NodeList {
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

/// Shared by every task of one signal-svc instance. See the module doc for the lock rule.
#[derive(Debug)]
pub struct Shared {
    core: Mutex<Core>,
    metrics: Metrics,
    identity: String,
    /// Drawn at start: tells actuators which process an epoch belongs to (`Hello`).
    incarnation: u64,
    dry_run: bool,
    notifies: Mutex<HashMap<String, Arc<Notify>>>,
    streams_ready: Mutex<HashSet<String>>,
    /// When the node watch last completed a full list, and after which instant a leader
    /// needs one (see [`Shared::want_fresh_node_list`]).
    node_list: watch::Sender<NodeList>,
    /// Asks the node watch for a new list (see [`Shared::want_fresh_node_list`]).
    relist: Notify,
    events_synced: AtomicBool,
    /// The epoch streams run under (`None`: not leading); see [`gating`].
    leader_tx: watch::Sender<Option<u64>>,
    /// The term is renewed within its deadline: taints, holds and stream writes may go out.
    active: AtomicBool,
    /// The term's renew deadline by this process's monotonic clock (`None`: no election, or
    /// not known yet). Checked on every write, so a process frozen past it (SIGSTOP, a long
    /// GC-like stall of the host) writes nothing when it wakes, whichever task runs first.
    writable_until: Mutex<Option<tokio::time::Instant>>,
    /// Bumped when writes resume under the same epoch (see [`gating`]).
    resumed: watch::Sender<u64>,
    /// The highest epoch an actuator reported having accepted.
    epoch_floor: AtomicU64,
    epoch_raise: Arc<Notify>,
    taint_tx: mpsc::UnboundedSender<TaintRequest>,
    /// Per node UID: what the results for its current version have covered.
    reported: Mutex<HashMap<String, Coverage>>,
    /// Which live stream writes which load balancer (leader only).
    assign: Mutex<Assigner>,
    /// Fleet-wide phases as they are reached, for every actuator stream (leader only).
    statuses: broadcast::Sender<NodeStatus>,
}

impl Shared {
    pub fn new(
        core: Core,
        identity: String,
        dry_run: bool,
        taint_tx: mpsc::UnboundedSender<TaintRequest>,
    ) -> Self {
        let (leader_tx, _) = watch::channel(None);
        Self {
            core: Mutex::new(core),
            metrics: Metrics::new(),
            identity,
            // Never 0 (0 means "not sent" to an actuator).
            incarnation: rand::random::<u64>().max(1),
            dry_run,
            notifies: Mutex::default(),
            streams_ready: Mutex::default(),
            node_list: watch::channel(NodeList::default()).0,
            relist: Notify::new(),
            events_synced: AtomicBool::new(false),
            leader_tx,
            active: AtomicBool::new(false),
            writable_until: Mutex::new(None),
            resumed: watch::channel(0).0,
            epoch_floor: AtomicU64::new(0),
            epoch_raise: Arc::default(),
            taint_tx,
            reported: Mutex::default(),
            assign: Mutex::new(Assigner::new(DEFAULT_ASSIGNMENT_VALID_FOR)),
            statuses: broadcast::channel(4096).0,
        }
    }

    /// The instance's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Dry-run: decide and log, write nothing.
    pub fn dry_run(&self) -> bool {
        self.dry_run
    }

    /// Starts a relist of the nodes (see [`NodeIndex::begin_relist`]).
    pub fn begin_relist(&self) {
        self.core.lock().index.begin_relist();
    }

    /// A node as listed or watched: indexed, then [absorbed](Shared::absorb). True if its
    /// desired state changed.
    pub fn apply_node(&self, node: &Node, now: Timestamp) -> bool {
        let out = self.core.lock().index.apply(node, now);
        let changed = !out.changes.is_empty();
        self.absorb(out, now);
        changed
    }

    /// The relist is complete: what it found gone (for the caller to look at, then
    /// [absorb](Shared::absorb)).
    pub fn finish_relist(&self) -> Output {
        self.core.lock().index.finish_relist()
    }

    /// A node deleted: forgotten, then [absorbed](Shared::absorb).
    pub fn delete_node(&self, node: &Node, now: Timestamp) {
        let out = self.core.lock().index.delete(node);
        self.absorb(out, now);
    }

    /// A `PreemptScheduled` event: indexed, then [absorbed](Shared::absorb).
    pub fn apply_event(&self, event: &EventView, now: Timestamp) {
        let out = self.core.lock().index.apply_event(event, now);
        self.absorb(out, now);
    }

    /// The actuator endpoints changed: their outboxes follow, and the ones touched wake.
    pub fn set_endpoints(&self, endpoints: Vec<String>) {
        let touched = self.core.lock().dispatch.set_endpoints(endpoints);
        self.wake(&touched);
    }

    /// Every asserted node's state, for a stream that (re)connects to `endpoint`.
    pub fn snapshot(&self, endpoint: &str) -> Vec<NodeDesiredState> {
        self.core.lock().dispatch.snapshot(endpoint)
    }

    /// Marks every node dirty for `endpoint` (a periodic resync on the same stream).
    pub fn resync(&self, endpoint: &str) {
        self.core.lock().dispatch.resync(endpoint);
    }

    /// Up to `max` pending deltas for `endpoint`, taken from its dirty set.
    pub fn next_deltas(&self, endpoint: &str, max: usize) -> Vec<Kind> {
        self.core.lock().dispatch.next_deltas(endpoint, max)
    }

    /// Reads the node's current (asserted) state, if it has one.
    pub fn current_with<R>(
        &self,
        uid: &str,
        read: impl FnOnce(&NodeDesiredState) -> Option<R>,
    ) -> Option<R> {
        self.core.lock().dispatch.current(uid).and_then(read)
    }

    /// The node's current state and whether it is a restore to `None` (one lock: the two
    /// agree).
    pub fn current_and_restore(&self, uid: &str) -> (Option<NodeDesiredState>, bool) {
        let core = self.core.lock();
        let current = core.dispatch.current(uid).cloned();
        (current, core.dispatch.is_restore(uid))
    }

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

    /// The wake-up handle of an endpoint's stream task.
    pub fn notify_for(&self, endpoint: &str) -> Arc<Notify> {
        self.notifies
            .lock()
            .entry(endpoint.to_owned())
            .or_default()
            .clone()
    }

    /// Wakes the stream tasks of `endpoints`.
    fn wake(&self, endpoints: &[String]) {
        let map = self.notifies.lock();
        for ep in endpoints {
            if let Some(n) = map.get(ep) {
                n.notify_one();
            }
        }
    }

    /// Wakes every stream task.
    pub fn wake_all(&self) {
        for n in self.notifies.lock().values() {
            n.notify_one();
        }
    }

    /// Applies what the index produced: dispatch, metrics, logs, taint requests.
    pub fn absorb(&self, out: Output, now: Timestamp) {
        for w in &out.warnings {
            tracing::warn!("{w}");
        }
        for s in &out.signals {
            self.metrics.signal(s);
        }
        let mut touched = Vec::new();
        {
            let mut core = self.core.lock();
            for change in &out.changes {
                if let Change::Set { state, previous } = change
                    && *previous != Some(state.desired)
                {
                    let label = match state.desired {
                        Desired::Down => "down",
                        Desired::None => "none",
                    };
                    self.metrics.desired_change(label);
                    if previous.is_some() || state.desired == Desired::Down {
                        tracing::info!(node = %state.node.name, uid = %state.node.uid, desired = label, reasons = ?state.reasons, "desired state changed");
                    }
                }
                let eps = core.dispatch.apply(change, now);
                if self.dry_run {
                    match change {
                        Change::Set { state, .. }
                            if core.dispatch.current(&state.node.uid).is_some() =>
                        {
                            tracing::info!(node = %state.node.name, desired = ?state.desired, reasons = ?state.reasons, "dry-run: would send");
                        }
                        Change::Removed { node, .. } => {
                            tracing::info!(node = %node.name, "dry-run: would send Forget")
                        }
                        Change::Set { .. } => {}
                    }
                }
                touched.extend(eps);
            }
            self.metrics
                .asserted_nodes
                .set(i64::try_from(core.dispatch.asserted_len()).unwrap_or(i64::MAX));
        }
        touched.sort();
        touched.dedup();
        self.wake(&touched);
        if out
            .changes
            .iter()
            .any(|c| matches!(c, Change::Removed { .. }))
        {
            self.prune_reported();
        }
        for t in out.taints {
            // Standbys drop these: a new leader re-derives them from the index.
            if self.leader_epoch().is_some() {
                let _ = self.taint_tx.send(t);
            }
        }
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

    fn send_taint(&self, t: TaintRequest) {
        let _ = self.taint_tx.send(t);
    }

    /// Re-queues a taint request (after a transient failure).
    pub fn requeue_taint(&self, req: TaintRequest) {
        let _ = self.taint_tx.send(req);
    }

    /// This process's incarnation (see `Hello.incarnation`).
    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// The node watch completed a full list.
    pub fn set_nodes_synced(&self) {
        let now = tokio::time::Instant::now();
        self.node_list.send_modify(|l| l.done_at = Some(now));
    }

    /// Resolves once the node watch has finished a full list, and one begun after the last
    /// [`Shared::want_fresh_node_list`] (a leader never streams before: a partial list would
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
    fn want_fresh_node_list(&self) {
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

    fn clear_streams_ready(&self) {
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

/// The fleet-wide status of one node's `version` (sent down every stream).
pub fn node_status(name: &str, uid: &str, version: Version, phase: ResultPhase) -> NodeStatus {
    NodeStatus {
        node: Some(NodeRef {
            name: name.to_owned(),
            uid: uid.to_owned(),
            ..NodeRef::default()
        }),
        version: Some(version),
        phase: phase as i32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::taints::TriggerSet;
    use std::time::Duration;

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
