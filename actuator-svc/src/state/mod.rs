//! The desired-state store: what this replica asserts for which node, the per-LB progress of
//! each node's current version, and the results fed to streams and watchers.
//!
//! Writers read the asserted set at the start of every round (level-triggered) and report per
//! LB; the store folds LB reports into node results over the load balancers this replica
//! covers (its assignment, see `ownership`; every LB for tool requests): ACCEPTED once each
//! covered LB accepted or had nothing to do, EFFECTIVE once each read back. A phase is emitted
//! once per version and covered set: a replica that takes over another LB mid-version sends
//! the phase again with the larger set, and signal-svc unions the sets across replicas.
//!
//! Parts, one job each: `table` (the desired states and their versions), `progress` (folding
//! LB reports into phases), `fleet` (fleet-wide phases from signal-svc), `results` (result
//! building and broadcast), `held` / `lbset` (the data they share), `ownership` (which LBs
//! this replica writes; pure) and `uplink` (tool holds relayed up the streams). `Store` holds
//! the locks and wakes the writers; one mutex guards table, ownership and fleet phases together.

mod fleet;
mod held;
mod lbset;
pub mod ownership;
mod progress;
mod results;
mod table;
pub mod uplink;

pub use held::{Held, LbProgress, Offer, Source, TargetView, admin_to_proto, entry_ref};

use crate::lb::index::{Admin, NodeSpec};
use crate::metrics::Metrics;
use cutover_proto::v1::{Hold, NodeRef, NodeResult, ResultPhase, Version};
use fleet::FleetPhases;
use lbset::LbSet;
use ownership::{Grant, Ownership, Refused};
use parking_lot::Mutex;
use results::{Results, result_of};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use table::{Instruction, Table};
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;
use uplink::Uplink;

#[derive(Default)]
struct Inner {
    table: Table,
    ownership: Ownership,
    fleet: FleetPhases,
}

/// The shared store.
pub struct Store {
    inner: Mutex<Inner>,
    results: Results,
    /// The managed LBs, sorted: a position here is a slot of `Held::progress` and a bit of
    /// an `LbSet`.
    writers: BTreeMap<String, Arc<Notify>>,
    metrics: Arc<Metrics>,
    uplink: Uplink,
    /// Woken when the owned set changed by an assignment (see `ownership_changed`).
    ownership_changed: Notify,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("lbs", &self.writers.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Store {
    /// A store for the managed load balancers `lbs`.
    pub fn new(lbs: &[String], metrics: Arc<Metrics>) -> Self {
        Self {
            inner: Mutex::new(Inner::default()),
            results: Results::new(metrics.clone()),
            writers: lbs
                .iter()
                .map(|l| (l.clone(), Arc::new(Notify::new())))
                .collect(),
            metrics,
            uplink: Uplink::default(),
            ownership_changed: Notify::new(),
        }
    }

    /// The streams hold requests go up (see `inbound::holds`).
    pub fn uplink(&self) -> &Uplink {
        &self.uplink
    }

    /// Used without signal-svc (`--standalone`): tool holds kept in memory, and every load
    /// balancer written before any assignment. In a fleet neither.
    pub fn set_standalone(&self, standalone: bool) {
        self.uplink.set_standalone(standalone);
        self.inner.lock().ownership.set_standalone(standalone);
    }

    /// Wakes on every change of an asserted state or a fleet status.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.results.changes()
    }

    /// A feed of every result.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeResult> {
        self.results.subscribe()
    }

    /// The fleet-wide phases as results, for tool watchers.
    pub fn subscribe_fleet(&self) -> broadcast::Receiver<NodeResult> {
        self.results.subscribe_fleet()
    }

    /// Records a fleet-wide phase of `node` (see `note_status`) and, when it is news, tells
    /// tool watchers, whichever replica wrote the load balancers.
    pub fn note_fleet(&self, node: &NodeRef, version: Version, phase: ResultPhase) {
        let r = {
            let mut inner = self.inner.lock();
            if !inner.fleet.note(&node.uid, version, phase) {
                return;
            }
            let all = LbSet::all(self.writers.len());
            match inner.table.find_stream(&node.uid, &node.name) {
                Some(h) if h.version == version => {
                    result_of(h, phase, String::new(), false, &all, &self.lb_refs())
                }
                _ => NodeResult {
                    node: Some(node.clone()),
                    version: Some(version),
                    phase: phase as i32,
                    at: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
                    load_balancers: self.lbs(),
                    ..NodeResult::default()
                },
            }
        };
        self.results.changed();
        self.results.emit_fleet(NodeResult { fleet: true, ..r });
    }

    /// Sends again every stream result signal-svc has not confirmed (its `NodeStatus` for the
    /// node has not reached the phase), unless the node or version is gone. Returns how many.
    pub fn resend_unconfirmed(&self) -> usize {
        let pending = self.results.unconfirmed();
        let (mut done, mut again) = (Vec::new(), Vec::new());
        {
            let inner = self.inner.lock();
            for r in pending {
                let (Some(node), Some(version)) = (r.node.as_ref(), r.version) else {
                    continue;
                };
                let phase = ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified);
                let current = inner.table.known_version(&node.uid) == Some(version);
                if !current || inner.fleet.confirms(&node.uid, version, phase) {
                    done.push(node.uid.clone());
                } else {
                    again.push(r);
                }
            }
        }
        self.results.resend(&done, again)
    }

    /// Records a fleet-wide phase from signal-svc: newer versions replace older ones; within a
    /// version the phase only moves forward (FAILED, then ACCEPTED, then EFFECTIVE).
    pub fn note_status(&self, uid: &str, version: Version, phase: ResultPhase) {
        if self.inner.lock().fleet.note(uid, version, phase) {
            self.results.changed();
        }
    }

    /// The fleet-wide phase of `version` of node `uid`, if signal-svc reported one.
    pub fn fleet_phase(&self, uid: &str, version: Version) -> Option<ResultPhase> {
        self.inner.lock().fleet.phase(uid, version)
    }

    /// The fleet-wide phase of `version` of node `uid` and when signal-svc reported it.
    pub fn fleet_phase_since(&self, uid: &str, version: Version) -> Option<(ResultPhase, Instant)> {
        self.inner.lock().fleet.phase_since(uid, version)
    }

    /// Stops asserting memory-only tool states of node `name` (a durable hold request
    /// supersedes them). Returns how many were dropped.
    pub fn drop_tool_states(&self, name: &str) -> usize {
        self.inner.lock().table.drop_tool_states(name)
    }

    /// Stops asserting every memory-only tool state (the first signal-svc stream supersedes
    /// them all). Returns how many were dropped.
    pub fn drop_all_tool_states(&self) -> usize {
        let dropped = self.inner.lock().table.drop_all_tool_states();
        if dropped > 0 {
            self.wake_all();
        }
        dropped
    }

    /// The stream state of a node, by UID or else by name.
    pub fn find_stream(&self, uid: &str, name: &str) -> Option<Held> {
        self.inner.lock().table.find_stream(uid, name).cloned()
    }

    /// The held state of a node, by UID or else by name.
    pub fn find(&self, uid: &str, name: &str) -> Option<Held> {
        self.inner.lock().table.find(uid, name).cloned()
    }

    /// Snapshot of the held nodes, oldest instruction first.
    pub fn held(&self) -> Vec<Held> {
        let inner = self.inner.lock();
        inner.table.in_order().into_iter().cloned().collect()
    }

    /// The position of `lb` among the managed load balancers.
    fn slot(&self, lb: &str) -> Option<usize> {
        self.writers.keys().position(|l| l == lb)
    }

    /// The managed load balancers.
    pub fn lbs(&self) -> Vec<String> {
        self.writers.keys().cloned().collect()
    }

    fn lb_refs(&self) -> Vec<&String> {
        self.writers.keys().collect()
    }

    /// The wake-up of one LB's writer.
    pub fn notifier(&self, lb: &str) -> Option<Arc<Notify>> {
        self.writers.get(lb).cloned()
    }

    fn wake_all(&self) {
        for n in self.writers.values() {
            n.notify_one();
        }
    }

    // ---- ownership -------------------------------------------------------------------------

    /// Takes an assignment (or its heartbeat) from the leader's stream, valid from `anchor`
    /// (see `ownership::Renewals`); wakes every writer when the owned set changed.
    pub fn assign(&self, grant: Grant, anchor: Option<Instant>) -> Result<(), Refused> {
        let changed = {
            let mut inner = self.inner.lock();
            let have_epoch = inner.table.max_epoch();
            if grant.epoch < have_epoch {
                return Err(Refused::Stale {
                    epoch: grant.epoch,
                    generation: grant.generation,
                    have_epoch,
                    have_generation: 0,
                });
            }
            inner.ownership.accept(grant, anchor, Instant::now())?
        };
        self.owned_changed(changed);
        Ok(())
    }

    /// A leader of `epoch` opened a stream: an older epoch's grant ends now.
    pub fn retire_grants_before(&self, epoch: u64) {
        let changed = self
            .inner
            .lock()
            .ownership
            .retire_before(epoch, Instant::now());
        if changed {
            tracing::info!(
                epoch,
                "a newer leader opened a stream; the older leader's assignment ends"
            );
        }
        self.owned_changed(changed);
    }

    fn owned_changed(&self, changed: bool) {
        if changed {
            let owned = self.owned();
            tracing::info!(load_balancers = ?owned, "assignment changed");
            self.metrics.owned(&self.lbs(), &owned);
            self.ownership_changed.notify_one();
            self.wake_all();
        }
    }

    /// The leader's stream of `epoch` ended. The assignment it carried stands until it lapses
    /// (`valid_for` after its last heartbeat): the leader gives nobody else these load
    /// balancers before then, and a new stream from it re-grants them to this replica, so a
    /// resync or a reconnect continues the writes without a gap. A replica that does not come
    /// back stops writing at the lapse, as a frozen one does.
    pub fn stream_ended(&self, epoch: u64) {
        let (owned, lapses) = {
            let inner = self.inner.lock();
            let now = Instant::now();
            let lbs = self.lbs();
            (
                inner.ownership.owned_among(&lbs, now),
                inner
                    .ownership
                    .expires_at()
                    .map(|at| at.saturating_duration_since(now)),
            )
        };
        if !owned.is_empty() {
            tracing::info!(epoch, load_balancers = ?owned, lapses_in = ?lapses, "stream ended; assignment kept until it lapses or a new stream renews it");
        }
    }

    /// Resolves when an assignment changed the owned set (a grant lapsing by time does not
    /// wake it: see `ownership_expires_at`).
    pub async fn ownership_changed(&self) {
        self.ownership_changed.notified().await;
    }

    /// Sets `load_balancer_owned` from the ownership now (a grant that lapsed without a
    /// heartbeat changes it with no event); returns the owned load balancers.
    pub fn publish_owned(&self) -> Vec<String> {
        let owned = self.owned();
        self.metrics.owned(&self.lbs(), &owned);
        owned
    }

    /// Whether this replica writes `lb` now (see `ownership`).
    pub fn owns(&self, lb: &str) -> bool {
        self.inner.lock().ownership.owns(lb, Instant::now())
    }

    /// The load balancers this replica writes now.
    pub fn owned(&self) -> Vec<String> {
        let lbs = self.lbs();
        self.inner
            .lock()
            .ownership
            .owned_among(&lbs, Instant::now())
    }

    /// When the current assignment lapses without a heartbeat (writers re-check then).
    pub fn ownership_expires_at(&self) -> Option<Instant> {
        self.inner.lock().ownership.expires_at()
    }

    /// The accepted assignment's `(epoch, generation)`, if any (never lower than an earlier
    /// one: `Ownership::accept` refuses stale assignments).
    pub fn grant_version(&self) -> Option<(u64, u64)> {
        self.inner.lock().ownership.version()
    }

    // ---- desired states --------------------------------------------------------------------

    /// Accepts a leader epoch from a stream's Hello unless a newer one was seen.
    pub fn accept_epoch(&self, epoch: u64, incarnation: u64) -> Result<(), u64> {
        self.inner.lock().table.accept_epoch(epoch, incarnation)
    }

    /// The newest accepted leader epoch.
    pub fn max_epoch(&self) -> u64 {
        self.inner.lock().table.max_epoch()
    }

    /// The next version for a tool request.
    pub fn next_tool_version(&self) -> Version {
        self.inner.lock().table.next_tool_version()
    }

    /// Offers a desired state. Stream versions older than the newest seen for the UID are
    /// dropped; a newer version supersedes an unfinished older one.
    #[allow(clippy::too_many_arguments)]
    pub fn offer(
        &self,
        key: String,
        node: NodeRef,
        spec: NodeSpec,
        desired: Admin,
        version: Version,
        source: Source,
        reasons: Vec<String>,
        hold: Option<Hold>,
    ) -> Offer {
        let superseded = {
            let mut inner = self.inner.lock();
            if source == Source::Stream && !inner.table.admit_stream(&node.uid, version) {
                return Offer::Stale;
            }
            let i = Instruction {
                key,
                node,
                spec,
                desired,
                version,
                source,
                reasons,
                hold,
            };
            inner.table.insert(i, self.writers.len()).map(|old| {
                let cover = LbSet::all(old.progress.len());
                result_of(
                    &old,
                    ResultPhase::Superseded,
                    String::new(),
                    false,
                    &cover,
                    &self.lb_refs(),
                )
            })
        };
        if let Some(r) = superseded {
            self.results.emit_stream(r);
        }
        self.wake_all();
        self.results.changed();
        Offer::Applied
    }

    /// A desired-state stream opened (after its `Hello`): its id for [`Store::forget`],
    /// [`Store::retain_stream`] and [`Store::close_stream`].
    pub fn open_stream(&self) -> u64 {
        self.inner.lock().table.open_stream()
    }

    /// The stream `id` ended: what was kept only against its late messages is dropped.
    pub fn close_stream(&self, id: u64) {
        self.inner.lock().table.close_stream(id);
    }

    /// Sizes of the per-node maps: held, known, stream versions, tombstones, fleet phases,
    /// unconfirmed results (tests: churn must leave them at their floor).
    #[cfg(test)]
    pub(crate) fn map_sizes(&self) -> [usize; 6] {
        let inner = self.inner.lock();
        let [held, known, versions, tombstones] = inner.table.sizes();
        [
            held,
            known,
            versions,
            tombstones,
            inner.fleet.len(),
            self.results.unconfirmed_len(),
        ]
    }

    /// The node is gone (a Forget on stream `stream`): stop asserting it (no write), and
    /// remember its version only while another open stream could still send an older one.
    pub fn forget(&self, key: &str, uid: &str, version: Version, stream: u64) -> Offer {
        {
            let mut inner = self.inner.lock();
            if !inner.table.admit_stream(uid, version) {
                return Offer::Stale;
            }
            inner.table.forget(key);
            inner.table.bury(uid, stream);
            inner.fleet.remove(uid);
        }
        self.results.changed();
        Offer::Applied
    }

    /// After the snapshot of stream `stream`: stream-sourced nodes it did not mention stop
    /// being asserted (their versions buried as after a Forget). Returns how many were dropped.
    pub fn retain_stream(&self, mentioned: &HashSet<String>, stream: u64) -> usize {
        let dropped = {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let dropped = inner.table.retain_stream(mentioned, stream);
            // Fleet statuses only for nodes a stream still asserts (memory stays bounded).
            let held = &inner.table.held;
            inner.fleet.retain(|uid| held.contains_key(uid));
            dropped
        };
        self.results.changed();
        dropped
    }

    // ---- writers ---------------------------------------------------------------------------

    /// Whether this replica has anything to write on `lb`: it owns it, or holds a tool request
    /// (written whatever the assignment says). Cheaper than `targets_for`.
    pub fn writes_on(&self, lb: &str) -> bool {
        let inner = self.inner.lock();
        inner.ownership.owns(lb, Instant::now()) || inner.table.any_tool()
    }

    /// The nodes a writer must assert on `lb`, oldest instruction first: everything held
    /// `Down`, and `None` until it is effective everywhere. Stream states only while this
    /// replica owns `lb`; tool requests on every LB (they reach one replica only).
    pub fn targets_for(&self, lb: &str) -> Vec<TargetView> {
        let slot = self.slot(lb);
        let inner = self.inner.lock();
        let owns = inner.ownership.owns(lb, Instant::now());
        inner
            .table
            .in_order()
            .into_iter()
            .filter(|h| owns || h.source == Source::Tool)
            .map(|h| TargetView {
                key: h.key.clone(),
                spec: h.spec.clone(),
                desired: h.desired,
                version: h.version,
                effective_here: matches!(
                    slot.and_then(|i| h.progress.get(i)),
                    Some(LbProgress::Effective(_))
                ),
                tool: h.source == Source::Tool,
            })
            .collect()
    }

    /// Nodes with work left on `lb` (for the queue-depth gauge).
    pub fn pending_on(&self, lb: &str) -> usize {
        self.count_on(lb, |p| {
            matches!(p, LbProgress::Pending | LbProgress::Accepted(_))
        })
    }

    /// Nodes on `lb` whose current instruction no write has carried yet: the next read of
    /// `lb` is the base of a write (the writer keeps that read whole, others it only scans).
    pub fn unwritten_on(&self, lb: &str) -> usize {
        self.count_on(lb, |p| matches!(p, LbProgress::Pending))
    }

    fn count_on(&self, lb: &str, f: impl Fn(&LbProgress) -> bool) -> usize {
        let Some(slot) = self.slot(lb) else {
            return 0;
        };
        self.inner.lock().table.count_on(slot, f)
    }

    /// Records progress of `key`'s `version` on `lb` and emits node results as they complete.
    pub fn report(
        &self,
        lb: &str,
        key: &str,
        version: Version,
        progress: LbProgress,
        note: &[String],
    ) {
        let Some(slot) = self.slot(lb) else {
            return;
        };
        let lbs = self.lb_refs();
        let mut emit = Vec::new();
        let stream;
        {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let now = Instant::now();
            let Some(h) = inner.table.held.get_mut(key) else {
                return;
            };
            if h.version != version {
                return;
            }
            // The LBs this replica answers for: its assignment, or every LB for tool requests.
            // A bit set over the LB positions: this runs for every node every round.
            let mut cover = LbSet::default();
            for (i, l) in lbs.iter().enumerate() {
                if h.source == Source::Tool || inner.ownership.owns(l, now) {
                    cover.insert(i);
                }
            }
            stream = h.source == Source::Stream;
            for (phase, reason, cover) in
                progress::fold(h, slot, progress, note, cover, &self.metrics)
            {
                emit.push(result_of(h, phase, reason, false, &cover, &lbs));
                if phase == ResultPhase::Effective && h.repaired {
                    h.repaired = false;
                    // `restored` counts a `None` set back (level-triggered restore); a `Down`
                    // re-cut after drift is counted by the writer as drift repaired.
                    if h.desired == Admin::None {
                        self.metrics.restored(&lbs_of(&cover, &lbs));
                    }
                }
            }
            if progress::restored_everywhere(h) {
                inner.table.remove(key);
            }
        }
        for r in emit {
            if stream {
                self.results.emit_stream(r);
            } else {
                self.results.emit(r);
            }
        }
    }

    /// Reports a failure of `key`'s `version` (once per distinct reason).
    pub fn fail(&self, key: &str, version: Version, reason: String, will_retry: bool) {
        let r = {
            let mut inner = self.inner.lock();
            let Some(h) = inner.table.held.get_mut(key) else {
                return;
            };
            if h.version != version
                || h.phase == ResultPhase::Effective
                || h.last_failure.as_deref() == Some(reason.as_str())
            {
                return;
            }
            h.last_failure = Some(reason.clone());
            if h.phase == ResultPhase::Unspecified {
                h.phase = ResultPhase::Failed;
            }
            let cover = LbSet::all(h.progress.len());
            let r = result_of(
                h,
                ResultPhase::Failed,
                reason,
                will_retry,
                &cover,
                &self.lb_refs(),
            );
            (r, h.source == Source::Stream)
        };
        match r {
            (r, true) => self.results.emit_stream(r),
            (r, false) => self.results.emit(r),
        }
    }

    /// Reports FAILED (will retry) for every node this replica is writing on `lb` whose
    /// current version is not effective there yet: an operation on `lb` stays `Updating`.
    pub fn fail_waiting_on(&self, lb: &str, reason: &str) {
        let Some(slot) = self.slot(lb) else {
            return;
        };
        let waiting: Vec<(Arc<str>, Version)> = {
            let inner = self.inner.lock();
            let owns = inner.ownership.owns(lb, Instant::now());
            inner
                .table
                .held
                .values()
                .filter(|h| owns || h.source == Source::Tool)
                .filter(|h| {
                    matches!(
                        h.progress.get(slot),
                        Some(LbProgress::Pending | LbProgress::Accepted(_))
                    )
                })
                .map(|h| (h.key.clone(), h.version))
                .collect()
        };
        for (key, version) in waiting {
            self.fail(&key, version, reason.to_string(), true);
        }
    }

    // ---- level-triggered restore ------------------------------------------------------------

    /// Every node the stream told of (what ARM entries may belong to).
    pub fn known_nodes(&self) -> Vec<Arc<NodeSpec>> {
        self.inner.lock().table.known_specs()
    }

    /// Nodes the stream wants `None` that nothing asserts now (see `Table::restorable`).
    pub fn restorable(&self) -> Vec<(Arc<str>, Arc<NodeSpec>)> {
        self.inner.lock().table.restorable()
    }

    /// Asserts the stream's `None` of `key` again because an entry of it reads otherwise; its
    /// results say `repaired`. Returns false when there was nothing to re-assert.
    pub fn reassert(&self, key: &str) -> bool {
        let done = self.inner.lock().table.reassert(key, self.writers.len());
        if done {
            self.wake_all();
            self.results.changed();
        }
        done
    }

    /// Marks `key` as no longer effective on `lb` (drift found): it will be reported again,
    /// and a version reported EFFECTIVE there is reported regressed at once (`progress`).
    pub fn drifted(&self, lb: &str, key: &str) {
        let version = self.inner.lock().table.held.get(key).map(|h| h.version);
        if let Some(version) = version {
            self.report(lb, key, version, LbProgress::Pending, &[]);
        }
    }
}

/// The names of the load balancers in `cover`.
fn lbs_of(cover: &LbSet, lbs: &[&String]) -> Vec<String> {
    cover
        .iter()
        .filter_map(|i| lbs.get(i).map(|l| (*l).clone()))
        .collect()
}

#[cfg(test)]
mod tests;
