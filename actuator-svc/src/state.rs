//! The desired-state store: what this replica asserts for which node, the per-LB progress of
//! each node's current version, and the results fed to streams and watchers.
//!
//! Writers read the asserted set at the start of every round (level-triggered) and report per
//! LB; the store folds LB reports into node results (ACCEPTED once every LB accepted or had
//! nothing to do, EFFECTIVE once every LB read back) and emits each phase once per version.

use crate::index::{Admin, IndexedEntry, NodeSpec};
use crate::metrics::Metrics;
use cutover_proto::VersionExt;
use cutover_proto::v1::{AdminState, EntryRef, NodeRef, NodeResult, ResultPhase, Version};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::{Notify, broadcast};
use tokio::time::Instant;

/// Who asked for a node's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Stream,
    Tool,
}

impl Source {
    /// As in `HeldNode.source`.
    pub fn label(self) -> &'static str {
        match self {
            Source::Stream => "stream",
            Source::Tool => "tool",
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

/// A node this replica asserts.
#[derive(Debug, Clone)]
pub struct Held {
    pub key: String,
    pub node: NodeRef,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub version: Version,
    pub source: Source,
    pub reasons: Vec<String>,
    pub since: SystemTime,
    pub received_at: SystemTime,
    received: Instant,
    order: u64,
    progress: BTreeMap<String, LbProgress>,
    phase: ResultPhase,
    last_failure: Option<String>,
}

impl Held {
    /// True once every LB reads the desired state.
    pub fn effective(&self) -> bool {
        self.phase == ResultPhase::Effective
    }

    /// Every entry known for this version.
    pub fn entries(&self) -> Vec<EntryRef> {
        self.progress
            .values()
            .flat_map(|p| match p {
                LbProgress::Accepted(e) | LbProgress::Effective(e) => e.clone(),
                _ => Vec::new(),
            })
            .map(|e| entry_ref(&e))
            .collect()
    }
}

/// The proto form of an entry.
pub fn entry_ref(e: &IndexedEntry) -> EntryRef {
    EntryRef {
        load_balancer_id: e.lb_id.clone(),
        load_balancer: e.lb.clone(),
        pool: e.pool.clone(),
        entry: e.entry.clone(),
        ip_configuration_id: e.ip_configuration_id.clone(),
        ip_address: e.ip_address.clone(),
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
    pub key: String,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub version: Version,
    /// Already effective on this LB (a difference now is drift).
    pub effective_here: bool,
}

/// Outcome of offering a desired state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Offer {
    Applied,
    /// Older than (or equal to) what the stream already sent for this node.
    Stale,
}

struct Inner {
    held: HashMap<String, Held>,
    /// Newest stream version per node UID, kept after Forget so late messages stay dropped.
    stream_versions: HashMap<String, Version>,
    max_epoch: u64,
    tool_seq: u64,
    order: u64,
}

/// The shared store.
pub struct Store {
    inner: Mutex<Inner>,
    results: broadcast::Sender<NodeResult>,
    writers: BTreeMap<String, Arc<Notify>>,
    metrics: Arc<Metrics>,
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
                held: HashMap::new(),
                stream_versions: HashMap::new(),
                max_epoch: 0,
                tool_seq: 0,
                order: 0,
            }),
            results,
            writers: lbs
                .iter()
                .map(|l| (l.clone(), Arc::new(Notify::new())))
                .collect(),
            metrics,
        }
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
            let since = match inner.held.get(&key) {
                Some(old) if old.desired == desired => old.since,
                _ => now,
            };
            if let Some(old) = inner.held.get(&key)
                && !matches!(old.phase, ResultPhase::Effective | ResultPhase::Superseded)
            {
                emit.push(self.result_of(old, ResultPhase::Superseded, String::new(), false));
            }
            let held = Held {
                key: key.clone(),
                node,
                spec,
                desired,
                version,
                source,
                reasons,
                since,
                received_at: now,
                received: Instant::now(),
                order,
                progress: self
                    .writers
                    .keys()
                    .map(|l| (l.clone(), LbProgress::Pending))
                    .collect(),
                phase: ResultPhase::Unspecified,
                last_failure: None,
            };
            inner.held.insert(key, held);
        }
        for r in emit {
            self.emit(r);
        }
        self.wake_all();
        Offer::Applied
    }

    /// The node is gone: stop asserting it (no write).
    pub fn forget(&self, key: &str, uid: &str, version: Version) -> Offer {
        let mut inner = self.inner.lock();
        if let Some(seen) = inner.stream_versions.get(uid)
            && !version.is_newer_than(seen)
        {
            return Offer::Stale;
        }
        inner.stream_versions.insert(uid.to_string(), version);
        inner.held.remove(key);
        Offer::Applied
    }

    /// After a stream snapshot: stream-sourced nodes the snapshot did not mention stop being
    /// asserted. Returns how many were dropped.
    pub fn retain_stream(&self, mentioned: &HashSet<String>) -> usize {
        let mut inner = self.inner.lock();
        let before = inner.held.len();
        inner
            .held
            .retain(|k, h| h.source != Source::Stream || mentioned.contains(k));
        before - inner.held.len()
    }

    /// The nodes a writer must assert on `lb`, oldest instruction first: everything held
    /// `Down`, and `None` until it is effective everywhere.
    pub fn targets_for(&self, lb: &str) -> Vec<TargetView> {
        let inner = self.inner.lock();
        let mut v: Vec<&Held> = inner.held.values().collect();
        v.sort_by_key(|h| h.order);
        v.into_iter()
            .map(|h| TargetView {
                key: h.key.clone(),
                spec: h.spec.clone(),
                desired: h.desired,
                version: h.version,
                effective_here: matches!(h.progress.get(lb), Some(LbProgress::Effective(_))),
            })
            .collect()
    }

    /// Nodes with work left on `lb` (for the queue-depth gauge).
    pub fn pending_on(&self, lb: &str) -> usize {
        let inner = self.inner.lock();
        inner
            .held
            .values()
            .filter(|h| {
                matches!(
                    h.progress.get(lb),
                    Some(LbProgress::Pending | LbProgress::Accepted(_))
                )
            })
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
        {
            let mut inner = self.inner.lock();
            let Some(h) = inner.held.get_mut(key) else {
                return;
            };
            if h.version != version {
                return;
            }
            let Some(slot) = h.progress.get_mut(lb) else {
                return;
            };
            // Never step back from Effective to Accepted within a version.
            if matches!(slot, LbProgress::Effective(_))
                && matches!(progress, LbProgress::Accepted(_))
            {
                return;
            }
            *slot = progress;
            let all = |f: fn(&LbProgress) -> bool| h.progress.values().all(f);
            let accepted = all(|p| !matches!(p, LbProgress::Pending));
            let effective = all(|p| matches!(p, LbProgress::Effective(_) | LbProgress::NoEntries));
            let no_entries = all(|p| matches!(p, LbProgress::NoEntries));
            let reason = if no_entries {
                note.join("; ")
            } else {
                String::new()
            };
            let elapsed = h.received.elapsed().as_secs_f64();
            if accepted && matches!(h.phase, ResultPhase::Unspecified | ResultPhase::Failed) {
                h.phase = ResultPhase::Accepted;
                self.metrics.accepted_after(elapsed);
                emit.push(self.result_of(h, ResultPhase::Accepted, reason.clone(), false));
            }
            if effective && h.phase == ResultPhase::Accepted {
                h.phase = ResultPhase::Effective;
                h.last_failure = None;
                self.metrics.effective_after(elapsed);
                emit.push(self.result_of(h, ResultPhase::Effective, reason, false));
                // `None` is asserted only until it is true everywhere.
                if h.desired == Admin::None {
                    inner.held.remove(key);
                }
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
            self.result_of(h, ResultPhase::Failed, reason, will_retry)
        };
        self.emit(r);
    }

    /// Marks `key` as no longer effective on `lb` (drift found): it will be reported again.
    pub fn drifted(&self, lb: &str, key: &str) {
        let mut inner = self.inner.lock();
        if let Some(h) = inner.held.get_mut(key)
            && let Some(slot) = h.progress.get_mut(lb)
        {
            *slot = LbProgress::Pending;
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
