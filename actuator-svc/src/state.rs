//! The desired-state store: what this replica asserts for which node, the per-LB progress of
//! each node's current version, and the results fed to streams and watchers.
//!
//! Writers read the asserted set at the start of every round (level-triggered) and report per
//! LB; the store folds LB reports into node results over the load balancers this replica
//! covers (its assignment, see `ownership`; every LB for tool requests): ACCEPTED once each
//! covered LB accepted or had nothing to do, EFFECTIVE once each read back. A phase is emitted
//! once per version and covered set: a replica that takes over another LB mid-version sends
//! the phase again with the larger set, and signal-svc unions the sets across replicas.

use crate::index::{Admin, IndexedEntry, NodeSpec};
use crate::metrics::Metrics;
use crate::ownership::{Grant, Ownership, Refused};
use crate::uplink::Uplink;
use cutover_proto::VersionExt;
use cutover_proto::v1::{AdminState, EntryRef, Hold, NodeRef, NodeResult, ResultPhase, Version};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{Notify, broadcast, watch};
use tokio::time::Instant;

/// Who asked for a node's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Stream,
    Tool,
}

impl Source {
    /// As in `HeldNode.source`: a stream state carrying a durable tool hold is `hold`.
    pub fn label(self, hold: bool) -> &'static str {
        match (self, hold) {
            (Source::Stream, false) => "stream",
            (Source::Stream, true) => "hold",
            (Source::Tool, _) => "tool",
        }
    }
}

/// Progress of the current version on one load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LbProgress {
    Pending,
    Accepted(Vec<IndexedEntry>),
    Effective(Vec<IndexedEntry>),
    /// The node has no entry on this LB.
    NoEntries,
}

/// A set of managed load balancers, by position in the store's sorted list: one bit each,
/// inline up to 64 (every real cluster), so folding a report allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LbSet {
    low: u64,
    high: Vec<u64>,
}

impl LbSet {
    /// Every position below `n`.
    fn all(n: usize) -> Self {
        let mut s = Self::default();
        for i in 0..n {
            s.insert(i);
        }
        s
    }

    fn insert(&mut self, i: usize) {
        if i < 64 {
            self.low |= 1 << i;
            return;
        }
        let w = i / 64 - 1;
        if self.high.len() <= w {
            self.high.resize(w + 1, 0);
        }
        self.high[w] |= 1 << (i % 64);
    }

    fn remove(&mut self, i: usize) {
        if i < 64 {
            self.low &= !(1 << i);
        } else if let Some(w) = self.high.get_mut(i / 64 - 1) {
            *w &= !(1 << (i % 64));
        }
    }

    #[cfg(test)]
    fn contains(&self, i: usize) -> bool {
        if i < 64 {
            return self.low & (1 << i) != 0;
        }
        self.high
            .get(i / 64 - 1)
            .is_some_and(|w| w & (1 << (i % 64)) != 0)
    }

    fn is_empty(&self) -> bool {
        self.low == 0 && self.high.iter().all(|w| *w == 0)
    }

    fn is_subset(&self, other: &Self) -> bool {
        self.low & !other.low == 0
            && self
                .high
                .iter()
                .enumerate()
                .all(|(i, w)| w & !other.high.get(i).copied().unwrap_or(0) == 0)
    }

    /// The positions in the set, ascending.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        std::iter::once(self.low)
            .chain(self.high.iter().copied())
            .enumerate()
            .flat_map(|(w, bits)| {
                (0..64)
                    .filter(move |b| bits & (1 << b) != 0)
                    .map(move |b| w * 64 + b)
            })
    }
}

/// A node this replica asserts.
#[derive(Debug, Clone)]
pub struct Held {
    /// Shared with every round's targets (`Store::targets_for` copies pointers).
    pub key: Arc<str>,
    pub node: NodeRef,
    pub spec: Arc<NodeSpec>,
    pub desired: Admin,
    pub version: Version,
    pub source: Source,
    pub reasons: Vec<String>,
    /// The tool hold behind this state: durable (a stream state from the Node annotation) or
    /// memory-only (`Source::Tool`).
    pub hold: Option<Hold>,
    pub since: SystemTime,
    pub received_at: SystemTime,
    received: Instant,
    order: u64,
    /// Per managed LB, in the store's order (`Store::lbs`).
    progress: Vec<LbProgress>,
    phase: ResultPhase,
    last_failure: Option<String>,
    /// The covered load balancers of the last ACCEPTED / EFFECTIVE emitted for this version.
    accepted_lbs: LbSet,
    effective_lbs: LbSet,
}

impl Held {
    /// True once every LB reads the desired state.
    pub fn effective(&self) -> bool {
        self.phase == ResultPhase::Effective
    }

    /// Every entry known for this version.
    pub fn entries(&self) -> Vec<EntryRef> {
        self.progress
            .iter()
            .flat_map(|p| match p {
                LbProgress::Accepted(e) | LbProgress::Effective(e) => e.as_slice(),
                _ => &[],
            })
            .map(entry_ref)
            .collect()
    }
}

/// The proto form of an entry.
pub fn entry_ref(e: &IndexedEntry) -> EntryRef {
    EntryRef {
        load_balancer_id: e.lb_id.to_string(),
        load_balancer: e.lb.to_string(),
        pool: e.pool.to_string(),
        entry: e.entry.to_string(),
        ip_configuration_id: e.ip_configuration_id(),
        ip_address: e.ip_address(),
        admin_state: admin_to_proto(e.admin) as i32,
    }
}

/// Admin state to proto.
pub fn admin_to_proto(a: Admin) -> AdminState {
    match a {
        Admin::None => AdminState::None,
        Admin::Down => AdminState::Down,
        Admin::Up => AdminState::Up,
        Admin::Other => AdminState::Unspecified,
    }
}

/// What a writer needs to know about one asserted node.
#[derive(Debug, Clone)]
pub struct TargetView {
    pub key: Arc<str>,
    pub spec: Arc<NodeSpec>,
    pub desired: Admin,
    pub version: Version,
    /// Already effective on this LB (a difference now is drift).
    pub effective_here: bool,
    /// From a tool request (written whatever the assignment says).
    pub tool: bool,
}

/// Outcome of offering a desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    Applied,
    /// Older than (or equal to) what the stream already sent for this node.
    Stale,
}

struct Inner {
    ownership: Ownership,
    held: HashMap<Arc<str>, Held>,
    /// Newest stream version per node UID, kept after Forget so late messages stay dropped.
    stream_versions: HashMap<String, Version>,
    max_epoch: u64,
    tool_seq: u64,
    order: u64,
    /// Per node UID: the fleet-wide phase of its newest version signal-svc reported
    /// (`NodeStatus`), whichever replica wrote each load balancer.
    fleet: HashMap<String, (Version, ResultPhase)>,
}

/// The shared store.
pub struct Store {
    inner: Mutex<Inner>,
    results: broadcast::Sender<NodeResult>,
    /// The managed LBs, sorted: a position here is a slot of `Held::progress` and a bit of
    /// an `LbSet`.
    writers: BTreeMap<String, Arc<Notify>>,
    metrics: Arc<Metrics>,
    /// Bumped on every change of an asserted state or a fleet status (tool waits re-check).
    changes: watch::Sender<u64>,
    uplink: Uplink,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("lbs", &self.writers.keys().collect::<Vec<_>>())
            .finish()
    }
}

fn ts(t: SystemTime) -> prost_types::Timestamp {
    prost_types::Timestamp::from(t)
}

impl Store {
    /// A store for the managed load balancers `lbs`.
    pub fn new(lbs: &[String], metrics: Arc<Metrics>) -> Self {
        let (results, _) = broadcast::channel(4096);
        Self {
            inner: Mutex::new(Inner {
                ownership: Ownership::default(),
                held: HashMap::new(),
                stream_versions: HashMap::new(),
                max_epoch: 0,
                tool_seq: 0,
                order: 0,
                fleet: HashMap::new(),
            }),
            results,
            writers: lbs
                .iter()
                .map(|l| (l.clone(), Arc::new(Notify::new())))
                .collect(),
            metrics,
            changes: watch::channel(0).0,
            uplink: Uplink::default(),
        }
    }

    /// The streams hold requests go up (see `holds`).
    pub fn uplink(&self) -> &Uplink {
        &self.uplink
    }

    /// Wakes on every change of an asserted state or a fleet status.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn changed(&self) {
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Records a fleet-wide phase from signal-svc: newer versions replace older ones; within a
    /// version the phase only moves forward (FAILED, then ACCEPTED, then EFFECTIVE).
    pub fn note_status(&self, uid: &str, version: Version, phase: ResultPhase) {
        let rank = |p: ResultPhase| match p {
            ResultPhase::Effective => 3,
            ResultPhase::Accepted => 2,
            ResultPhase::Failed => 1,
            _ => 0,
        };
        {
            let mut inner = self.inner.lock();
            match inner.fleet.get(uid) {
                Some((v, _)) if version.is_newer_than(v) => {}
                Some((v, p)) if *v == version && rank(phase) > rank(*p) => {}
                Some(_) => return,
                None => {}
            }
            inner.fleet.insert(uid.to_owned(), (version, phase));
        }
        self.changed();
    }

    /// The fleet-wide phase of `version` of node `uid`, if signal-svc reported one.
    pub fn fleet_phase(&self, uid: &str, version: Version) -> Option<ResultPhase> {
        self.inner
            .lock()
            .fleet
            .get(uid)
            .filter(|(v, _)| *v == version)
            .map(|(_, p)| *p)
    }

    /// Stops asserting memory-only tool states of node `name` (a durable hold request
    /// supersedes them). Returns how many were dropped.
    pub fn drop_tool_states(&self, name: &str) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.held.len();
        inner
            .held
            .retain(|_, h| h.source != Source::Tool || h.node.name != name);
        before - inner.held.len()
    }

    /// The stream state of a node, by UID or else by name.
    pub fn find_stream(&self, uid: &str, name: &str) -> Option<Held> {
        let inner = self.inner.lock();
        inner
            .held
            .values()
            .filter(|h| h.source == Source::Stream)
            .filter(|h| {
                if uid.is_empty() {
                    h.node.name == name
                } else {
                    h.node.uid == uid
                }
            })
            .max_by_key(|h| h.order)
            .cloned()
    }

    /// The position of `lb` among the managed load balancers.
    fn slot(&self, lb: &str) -> Option<usize> {
        self.writers.keys().position(|l| l == lb)
    }

    /// The managed load balancers.
    pub fn lbs(&self) -> Vec<String> {
        self.writers.keys().cloned().collect()
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

    /// A feed of every result.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeResult> {
        self.results.subscribe()
    }

    /// Takes an assignment (or its heartbeat) from the leader's stream; wakes every writer
    /// when the owned set changed.
    pub fn assign(&self, grant: Grant) -> Result<(), Refused> {
        let changed = {
            let mut inner = self.inner.lock();
            if grant.epoch < inner.max_epoch {
                return Err(Refused::Stale {
                    epoch: grant.epoch,
                    generation: grant.generation,
                    have_epoch: inner.max_epoch,
                    have_generation: 0,
                });
            }
            inner.ownership.accept(grant, Instant::now())?
        };
        if changed {
            let owned = self.owned();
            tracing::info!(load_balancers = ?owned, "assignment changed");
            self.metrics.owned(&self.lbs(), &owned);
            self.wake_all();
        }
        Ok(())
    }

    /// The leader's stream of `epoch` ended: its assignment stops at once.
    pub fn stream_ended(&self, epoch: u64) {
        if self.inner.lock().ownership.lapse(epoch) {
            tracing::info!(epoch, "assignment dropped with its stream");
            self.metrics.owned(&self.lbs(), &[]);
        }
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

    /// Accepts a leader epoch from a stream's Hello unless a newer one was seen.
    pub fn accept_epoch(&self, epoch: u64) -> Result<(), u64> {
        let mut inner = self.inner.lock();
        if epoch < inner.max_epoch {
            return Err(inner.max_epoch);
        }
        inner.max_epoch = epoch;
        Ok(())
    }

    /// The newest accepted leader epoch.
    pub fn max_epoch(&self) -> u64 {
        self.inner.lock().max_epoch
    }

    /// The next version for a tool request.
    pub fn next_tool_version(&self) -> Version {
        let mut inner = self.inner.lock();
        inner.tool_seq += 1;
        Version {
            epoch: 0,
            seq: inner.tool_seq,
        }
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
        let mut emit = Vec::new();
        {
            let mut inner = self.inner.lock();
            if source == Source::Stream {
                if let Some(seen) = inner.stream_versions.get(&node.uid)
                    && !version.is_newer_than(seen)
                {
                    return Offer::Stale;
                }
                inner.stream_versions.insert(node.uid.clone(), version);
            }
            inner.order += 1;
            let order = inner.order;
            let now = SystemTime::now();
            let since = match inner.held.get(key.as_str()) {
                Some(old) if old.desired == desired => old.since,
                _ => now,
            };
            if let Some(old) = inner.held.get(key.as_str())
                && !matches!(old.phase, ResultPhase::Effective | ResultPhase::Superseded)
            {
                let cover = LbSet::all(old.progress.len());
                emit.push(self.result_of(
                    old,
                    ResultPhase::Superseded,
                    String::new(),
                    false,
                    &cover,
                ));
            }
            let key: Arc<str> = key.into();
            let held = Held {
                key: key.clone(),
                node,
                spec: Arc::new(spec),
                desired,
                version,
                source,
                reasons,
                hold,
                since,
                received_at: now,
                received: Instant::now(),
                order,
                progress: vec![LbProgress::Pending; self.writers.len()],
                phase: ResultPhase::Unspecified,
                last_failure: None,
                accepted_lbs: LbSet::default(),
                effective_lbs: LbSet::default(),
            };
            inner.held.insert(key, held);
        }
        for r in emit {
            self.emit(r);
        }
        self.wake_all();
        self.changed();
        Offer::Applied
    }

    /// The node is gone: stop asserting it (no write).
    pub fn forget(&self, key: &str, uid: &str, version: Version) -> Offer {
        {
            let mut inner = self.inner.lock();
            if let Some(seen) = inner.stream_versions.get(uid)
                && !version.is_newer_than(seen)
            {
                return Offer::Stale;
            }
            inner.stream_versions.insert(uid.to_string(), version);
            inner.held.remove(key);
            inner.fleet.remove(uid);
        }
        self.changed();
        Offer::Applied
    }

    /// After a stream snapshot: stream-sourced nodes the snapshot did not mention stop being
    /// asserted. Returns how many were dropped.
    pub fn retain_stream(&self, mentioned: &HashSet<String>) -> usize {
        let dropped = {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let before = inner.held.len();
            inner
                .held
                .retain(|k, h| h.source != Source::Stream || mentioned.contains(&**k));
            // Fleet statuses only for nodes a stream still asserts (memory stays bounded).
            let held = &inner.held;
            inner.fleet.retain(|uid, _| held.contains_key(uid.as_str()));
            before - inner.held.len()
        };
        self.changed();
        dropped
    }

    /// The nodes a writer must assert on `lb`, oldest instruction first: everything held
    /// `Down`, and `None` until it is effective everywhere. Stream states only while this
    /// replica owns `lb`; tool requests on every LB (they reach one replica only).
    /// Whether this replica has anything to write on `lb`: it owns it, or holds a tool request
    /// (written whatever the assignment says). Cheaper than `targets_for`.
    pub fn writes_on(&self, lb: &str) -> bool {
        let inner = self.inner.lock();
        inner.ownership.owns(lb, Instant::now())
            || inner.held.values().any(|h| h.source == Source::Tool)
    }

    pub fn targets_for(&self, lb: &str) -> Vec<TargetView> {
        let slot = self.slot(lb);
        let inner = self.inner.lock();
        let owns = inner.ownership.owns(lb, Instant::now());
        let mut v: Vec<&Held> = inner
            .held
            .values()
            .filter(|h| owns || h.source == Source::Tool)
            .collect();
        v.sort_by_key(|h| h.order);
        v.into_iter()
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

    /// Held nodes whose progress on `lb` satisfies `f`.
    fn count_on(&self, lb: &str, f: impl Fn(&LbProgress) -> bool) -> usize {
        let Some(slot) = self.slot(lb) else {
            return 0;
        };
        let inner = self.inner.lock();
        inner
            .held
            .values()
            .filter(|h| h.progress.get(slot).is_some_and(&f))
            .count()
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
        let mut emit = Vec::new();
        let lb_slot = self.slot(lb);
        {
            let mut guard = self.inner.lock();
            let inner = &mut *guard;
            let now = Instant::now();
            let Some(h) = inner.held.get_mut(key) else {
                return;
            };
            if h.version != version {
                return;
            }
            let Some(slot) = lb_slot.and_then(|i| h.progress.get_mut(i)) else {
                return;
            };
            // Never step back from Effective to Accepted within a version.
            if matches!(slot, LbProgress::Effective(_))
                && matches!(progress, LbProgress::Accepted(_))
            {
                return;
            }
            *slot = progress;
            // The LBs this replica answers for: its assignment, or every LB for tool requests.
            // A bit set over the LB positions: this runs for every node every round.
            let mut cover = LbSet::default();
            for (i, l) in self.writers.keys().enumerate() {
                if h.source == Source::Tool || inner.ownership.owns(l, now) {
                    cover.insert(i);
                }
            }
            let done =
                |p: &LbProgress| matches!(p, LbProgress::Effective(_) | LbProgress::NoEntries);
            let at = |i: usize| h.progress.get(i);
            let accepted = !cover.is_empty()
                && cover
                    .iter()
                    .all(|i| !matches!(at(i), Some(LbProgress::Pending) | None));
            let effective = !cover.is_empty() && cover.iter().all(|i| at(i).is_some_and(done));
            let no_entries = cover
                .iter()
                .all(|i| matches!(at(i), Some(LbProgress::NoEntries)));
            let reason = if no_entries || !note.is_empty() {
                note.join("; ")
            } else {
                String::new()
            };
            let elapsed = h.received.elapsed().as_secs_f64();
            if accepted && !cover.is_subset(&h.accepted_lbs) {
                if h.accepted_lbs.is_empty() {
                    self.metrics.accepted_after(elapsed);
                }
                h.accepted_lbs = cover.clone();
                if matches!(h.phase, ResultPhase::Unspecified | ResultPhase::Failed) {
                    h.phase = ResultPhase::Accepted;
                }
                emit.push(self.result_of(h, ResultPhase::Accepted, reason.clone(), false, &cover));
            }
            if effective && !cover.is_subset(&h.effective_lbs) {
                if h.effective_lbs.is_empty() {
                    self.metrics.effective_after(elapsed);
                }
                h.effective_lbs = cover.clone();
                h.phase = ResultPhase::Effective;
                h.last_failure = None;
                emit.push(self.result_of(h, ResultPhase::Effective, reason, false, &cover));
            }
            // `None` is asserted only until it is true everywhere (every managed LB: with an
            // assignment, that is until the stream stops naming the node).
            if h.desired == Admin::None && h.progress.iter().all(done) {
                inner.held.remove(key);
            }
        }
        for r in emit {
            self.emit(r);
        }
    }

    /// Reports a failure of `key`'s `version` (once per distinct reason).
    pub fn fail(&self, key: &str, version: Version, reason: String, will_retry: bool) {
        let r = {
            let mut inner = self.inner.lock();
            let Some(h) = inner.held.get_mut(key) else {
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
            self.result_of(h, ResultPhase::Failed, reason, will_retry, &cover)
        };
        self.emit(r);
    }

    /// Marks `key` as no longer effective on `lb` (drift found): it will be reported again.
    pub fn drifted(&self, lb: &str, key: &str) {
        let Some(i) = self.slot(lb) else {
            return;
        };
        let mut inner = self.inner.lock();
        if let Some(h) = inner.held.get_mut(key)
            && let Some(slot) = h.progress.get_mut(i)
        {
            *slot = LbProgress::Pending;
            h.accepted_lbs.remove(i);
            h.effective_lbs.remove(i);
        }
    }

    /// Snapshot of the held nodes.
    pub fn held(&self) -> Vec<Held> {
        let inner = self.inner.lock();
        let mut v: Vec<Held> = inner.held.values().cloned().collect();
        v.sort_by_key(|h| h.order);
        v
    }

    /// The held state of a node, by UID or else by name.
    pub fn find(&self, uid: &str, name: &str) -> Option<Held> {
        let inner = self.inner.lock();
        if !uid.is_empty()
            && let Some(h) = inner.held.get(uid)
        {
            return Some(h.clone());
        }
        inner
            .held
            .values()
            .filter(|h| h.node.name == name)
            .max_by_key(|h| h.order)
            .cloned()
    }

    fn result_of(
        &self,
        h: &Held,
        phase: ResultPhase,
        reason: String,
        will_retry: bool,
        cover: &LbSet,
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
            load_balancers: {
                let lbs: Vec<&String> = self.writers.keys().collect();
                cover
                    .iter()
                    .filter_map(|i| lbs.get(i).map(|l| (*l).clone()))
                    .collect()
            },
        }
    }

    fn emit(&self, r: NodeResult) {
        let phase = ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified);
        self.metrics.result(phase.as_str_name());
        tracing::debug!(node = r.node.as_ref().map(|n| n.name.as_str()).unwrap_or(""), phase = phase.as_str_name(), reason = %r.reason, "result");
        // No receiver is fine: results are also visible through ListHeldEntries.
        let _ = self.results.send(r);
    }
}

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
