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
//! - `coverage`: what actuator results covered, and the fleet-wide phases they reached.
//! - `readiness`: the node list a leader needs, and `/ready`.

pub mod assignment;
mod coverage;
pub mod gating;
mod readiness;

use crate::core::assign::Assigner;
use crate::core::coverage::Coverage;
use crate::core::dispatch::Dispatcher;
use crate::core::event::EventView;
use crate::core::index::{Change, Desired, NodeIndex, Output, TaintRequest};
use crate::metrics::Metrics;
use cutover_proto::v1::signal_message::Kind;
use cutover_proto::v1::{NodeDesiredState, NodeRef, NodeStatus, ResultPhase, Version};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use tokio::sync::{Notify, broadcast, mpsc, watch};

/// The pure core: one lock, so an index change and its dispatch are atomic.
#[derive(Debug)]
pub struct Core {
    pub index: NodeIndex,
    pub dispatch: Dispatcher,
}

/// How long an actuator's assignment holds without a heartbeat, unless configured.
pub const DEFAULT_ASSIGNMENT_VALID_FOR: std::time::Duration = std::time::Duration::from_secs(3);

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
    node_list: watch::Sender<readiness::NodeList>,
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
            node_list: watch::channel(readiness::NodeList::default()).0,
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
        let keep: HashSet<String> = endpoints.iter().cloned().collect();
        let touched = self.core.lock().dispatch.set_endpoints(endpoints);
        // A departed endpoint's wake-up handle goes with it: actuator pods come and go (every
        // rollout brings new addresses), and nothing else ever removed one.
        self.notifies.lock().retain(|ep, _| keep.contains(ep));
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
    use super::{Core, Shared};
    use crate::core::dispatch::Dispatcher;
    use crate::core::index::NodeIndex;
    use crate::core::taints::TriggerSet;
    use tokio::sync::mpsc;

    /// N11: 10,000 actuator endpoints that came and went (pods replaced) leave the wake-up
    /// handles at their floor: the endpoints there now.
    #[test]
    fn wake_up_handles_of_departed_endpoints_are_dropped() {
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        let s = Shared::new(core, "me".into(), false, mpsc::unbounded_channel().0);
        s.notify_for("stays:9443");
        s.set_endpoints(vec!["stays:9443".into()]);
        let floor = s.notifies.lock().len();
        for i in 0..10_000 {
            let ep = format!("10.0.{}.{}:9443", i / 256, i % 256);
            s.notify_for(&ep);
            s.set_endpoints(vec!["stays:9443".into(), ep]);
            assert_eq!(s.notifies.lock().len(), floor + 1);
        }
        s.set_endpoints(vec!["stays:9443".into()]);
        assert_eq!(s.notifies.lock().len(), floor);
        assert_eq!(floor, 1);
    }
}
