//! The desired-state table: every node this replica asserts, the newest stream version seen
//! per node (stale instructions are dropped), the leader epoch, and tool versions. No I/O.

use super::held::{Held, LbProgress, Source};
use super::lbset::LbSet;
use crate::lb::index::{Admin, NodeSpec};
use cutover_proto::VersionExt;
use cutover_proto::v1::{Hold, NodeRef, ResultPhase, Version};
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::time::Instant;

/// A desired state to insert (what `Store::offer` receives).
#[derive(Debug)]
pub(super) struct Instruction {
    pub key: String,
    pub node: NodeRef,
    pub spec: NodeSpec,
    pub desired: Admin,
    pub version: Version,
    pub source: Source,
    pub reasons: Vec<String>,
    pub hold: Option<Hold>,
}

/// The newest desired state the stream sent for a node, kept while the stream names the node
/// (also after a `None` stopped being asserted): the whole desired state of the cluster, which
/// self-heal compares with what ARM reads (level-triggered restore).
#[derive(Debug, Clone)]
pub(super) struct Known {
    pub node: NodeRef,
    pub spec: Arc<NodeSpec>,
    pub desired: Admin,
    pub version: Version,
    pub reasons: Vec<String>,
    pub hold: Option<Hold>,
}

/// The stream version of a node that left the stream `from` (Forget, or absent from its
/// snapshot). Within one stream the leader never sends a node again below that version (a
/// node it re-adds gets a newer one), so only another stream open at that moment (a
/// reconnect's predecessor still draining, an older leader's) can still deliver an older
/// message for it: the version is remembered until every such stream has closed.
#[derive(Debug)]
struct Tombstone {
    uid: String,
    version: Version,
    from: u64,
    /// The newest stream id then: streams with a larger id opened later.
    newest_then: u64,
}

#[derive(Debug, Default)]
pub(super) struct Table {
    pub(super) held: HashMap<Arc<str>, Held>,
    /// Every node the stream names, by key.
    known: HashMap<Arc<str>, Known>,
    /// Newest stream version per node UID. Kept after the node left the stream (a Forget, or
    /// absent from a snapshot) while a late message could still carry an older version: see
    /// [`Tombstone`]; then dropped, so churn leaves nothing behind.
    stream_versions: HashMap<String, Version>,
    /// The stream versions of nodes that left the stream, kept for late messages.
    tombstones: Vec<Tombstone>,
    /// The open desired-state streams (ids only grow).
    streams: BTreeSet<u64>,
    last_stream: u64,
    max_epoch: u64,
    /// The incarnation of the signal-svc process that first sent `max_epoch` (0: unknown).
    epoch_owner: u64,
    tool_seq: u64,
    order: u64,
}

impl Table {
    /// Accepts a leader epoch unless a newer one was seen, or this one from another process
    /// (`incarnation`, 0 when unknown): `Err` carries the newest, to raise above.
    pub(super) fn accept_epoch(&mut self, epoch: u64, incarnation: u64) -> Result<(), u64> {
        if epoch < self.max_epoch {
            return Err(self.max_epoch);
        }
        if epoch == self.max_epoch {
            match self.epoch_owner {
                0 => self.epoch_owner = incarnation,
                owner if incarnation != 0 && owner != incarnation => {
                    return Err(self.max_epoch);
                }
                _ => {}
            }
            return Ok(());
        }
        self.max_epoch = epoch;
        self.epoch_owner = incarnation;
        Ok(())
    }

    pub(super) fn max_epoch(&self) -> u64 {
        self.max_epoch
    }

    pub(super) fn next_tool_version(&mut self) -> Version {
        self.tool_seq += 1;
        Version {
            epoch: 0,
            seq: self.tool_seq,
        }
    }

    /// Records a stream version of `uid` unless it is not newer than the newest seen.
    pub(super) fn admit_stream(&mut self, uid: &str, version: Version) -> bool {
        if let Some(seen) = self.stream_versions.get(uid)
            && !version.is_newer_than(seen)
        {
            return false;
        }
        self.stream_versions.insert(uid.to_string(), version);
        true
    }

    /// A desired-state stream opened: its id, for [`Table::bury`] and [`Table::close_stream`].
    pub(super) fn open_stream(&mut self) -> u64 {
        self.last_stream += 1;
        self.streams.insert(self.last_stream);
        self.last_stream
    }

    /// A stream closed: versions only it could still contradict are dropped.
    pub(super) fn close_stream(&mut self, id: u64) {
        if self.streams.remove(&id) {
            let tombstones = std::mem::take(&mut self.tombstones);
            for t in tombstones {
                self.bury_or_keep(t);
            }
        }
    }

    /// Node `uid` left stream `from`: its stream version is kept only while another stream
    /// open now could still deliver an older message for it.
    pub(super) fn bury(&mut self, uid: &str, from: u64) {
        let Some(version) = self.stream_versions.get(uid).copied() else {
            return;
        };
        let t = Tombstone {
            uid: uid.to_string(),
            version,
            from,
            newest_then: self.last_stream,
        };
        self.bury_or_keep(t);
    }

    fn bury_or_keep(&mut self, t: Tombstone) {
        let pending = self
            .streams
            .iter()
            .any(|&s| s != t.from && s <= t.newest_then);
        if pending {
            self.tombstones.push(t);
        } else if self.stream_versions.get(&t.uid) == Some(&t.version) {
            // Unless a newer message named the node again meanwhile.
            self.stream_versions.remove(&t.uid);
        }
    }

    /// Sizes of the per-node maps (held, known, stream versions, tombstones), for tests.
    #[cfg(test)]
    pub(super) fn sizes(&self) -> [usize; 4] {
        [
            self.held.len(),
            self.known.len(),
            self.stream_versions.len(),
            self.tombstones.len(),
        ]
    }

    /// Inserts an instruction with `lbs` progress slots; returns the state it replaced when
    /// that one had not finished (to be reported SUPERSEDED).
    pub(super) fn insert(&mut self, i: Instruction, lbs: usize) -> Option<Held> {
        self.order += 1;
        let now = SystemTime::now();
        let since = match self.held.get(i.key.as_str()) {
            Some(old) if old.desired == i.desired => old.since,
            _ => now,
        };
        let key: Arc<str> = i.key.into();
        let spec = Arc::new(i.spec);
        if i.source == Source::Stream {
            let known = Known {
                node: i.node.clone(),
                spec: spec.clone(),
                desired: i.desired,
                version: i.version,
                reasons: i.reasons.clone(),
                hold: i.hold.clone(),
            };
            self.known.insert(key.clone(), known);
        }
        let held = Held {
            key: key.clone(),
            node: i.node,
            spec,
            desired: i.desired,
            version: i.version,
            source: i.source,
            reasons: i.reasons,
            hold: i.hold,
            since,
            received_at: now,
            received: Instant::now(),
            order: self.order,
            progress: vec![LbProgress::Pending; lbs],
            phase: ResultPhase::Unspecified,
            last_failure: None,
            accepted_lbs: LbSet::default(),
            effective_lbs: LbSet::default(),
            repaired: false,
        };
        self.held
            .insert(key, held)
            .filter(|old| !matches!(old.phase, ResultPhase::Effective | ResultPhase::Superseded))
    }

    pub(super) fn remove(&mut self, key: &str) {
        self.held.remove(key);
    }

    /// The node is gone from the stream: neither asserted nor known.
    pub(super) fn forget(&mut self, key: &str) {
        self.held.remove(key);
        self.known.remove(key);
    }

    /// The newest version the stream sent for the node `uid`, while the stream names it.
    pub(super) fn known_version(&self, uid: &str) -> Option<Version> {
        match self.known.get(uid) {
            Some(n) if n.node.uid == uid => Some(n.version),
            _ => self
                .known
                .values()
                .find(|n| n.node.uid == uid)
                .map(|n| n.version),
        }
    }

    /// Every known node.
    pub(super) fn known_specs(&self) -> Vec<Arc<NodeSpec>> {
        self.known.values().map(|n| n.spec.clone()).collect()
    }

    /// Known nodes whose desired state is `None` and that nothing asserts now (their `None`
    /// was effective everywhere, or never needed a write): what self-heal checks for entries
    /// left `Down`. A hold makes the desired state `Down`, so none of these has one.
    pub(super) fn restorable(&self) -> Vec<(Arc<str>, Arc<NodeSpec>)> {
        self.known
            .iter()
            .filter(|(k, n)| n.desired == Admin::None && !self.held.contains_key(&***k))
            .map(|(k, n)| (k.clone(), n.spec.clone()))
            .collect()
    }

    /// Asserts the known `None` of `key` again, marked as a repair; false when the node is
    /// unknown, not `None`, or already asserted.
    pub(super) fn reassert(&mut self, key: &str, lbs: usize) -> bool {
        let Some(n) = self.known.get(key).cloned() else {
            return false;
        };
        if n.desired != Admin::None || self.held.contains_key(key) {
            return false;
        }
        let i = Instruction {
            key: key.to_string(),
            node: n.node,
            spec: (*n.spec).clone(),
            desired: n.desired,
            version: n.version,
            source: Source::Stream,
            reasons: n.reasons,
            hold: n.hold,
        };
        self.insert(i, lbs);
        if let Some(h) = self.held.get_mut(key) {
            h.repaired = true;
        }
        true
    }

    /// Stream-sourced nodes not in `mentioned` (the snapshot of stream `from`) stop being
    /// asserted and their stream versions are buried; returns how many stopped.
    pub(super) fn retain_stream(&mut self, mentioned: &HashSet<String>, from: u64) -> usize {
        let before = self.held.len();
        self.held
            .retain(|k, h| h.source != Source::Stream || mentioned.contains(&**k));
        self.known.retain(|k, _| mentioned.contains(&**k));
        let buried: HashSet<&str> = self.tombstones.iter().map(|t| t.uid.as_str()).collect();
        let gone: Vec<String> = self
            .stream_versions
            .keys()
            .filter(|uid| !mentioned.contains(*uid) && !buried.contains(uid.as_str()))
            .cloned()
            .collect();
        for uid in gone {
            self.bury(&uid, from);
        }
        before - self.held.len()
    }

    /// Drops memory-only tool states of node `name`; returns how many.
    pub(super) fn drop_tool_states(&mut self, name: &str) -> usize {
        let before = self.held.len();
        self.held
            .retain(|_, h| h.source != Source::Tool || h.node.name != name);
        before - self.held.len()
    }

    /// Drops every memory-only tool state; returns how many.
    pub(super) fn drop_all_tool_states(&mut self) -> usize {
        let before = self.held.len();
        self.held.retain(|_, h| h.source != Source::Tool);
        before - self.held.len()
    }

    pub(super) fn any_tool(&self) -> bool {
        self.held.values().any(|h| h.source == Source::Tool)
    }

    /// The newest stream state of a node, by UID or else by name.
    pub(super) fn find_stream(&self, uid: &str, name: &str) -> Option<&Held> {
        self.held
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
    }

    /// The held state of a node, by key (UID) or else the newest by name.
    pub(super) fn find(&self, uid: &str, name: &str) -> Option<&Held> {
        if !uid.is_empty()
            && let Some(h) = self.held.get(uid)
        {
            return Some(h);
        }
        self.held
            .values()
            .filter(|h| h.node.name == name)
            .max_by_key(|h| h.order)
    }

    /// Every held state, oldest instruction first.
    pub(super) fn in_order(&self) -> Vec<&Held> {
        let mut v: Vec<&Held> = self.held.values().collect();
        v.sort_by_key(|h| h.order);
        v
    }

    /// Held nodes whose progress in `slot` satisfies `f`.
    pub(super) fn count_on(&self, slot: usize, f: impl Fn(&LbProgress) -> bool) -> usize {
        self.held
            .values()
            .filter(|h| h.progress.get(slot).is_some_and(&f))
            .count()
    }
}
