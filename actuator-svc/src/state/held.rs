//! What the store keeps per asserted node (`Held`) and the views it hands out.

use super::lbset::LbSet;
use crate::lb::index::{Admin, IndexedEntry, NodeSpec};
use cutover_proto::v1::{AdminState, EntryRef, Hold, NodeRef, ResultPhase, Version};
use std::sync::Arc;
use std::time::SystemTime;
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
    /// The LB itself reads 404 (deleted, perhaps to be re-created by cloud-provider-azure with
    /// entries that carry no admin state). A `None` holds there; a `Down` is not shown in ARM,
    /// so it stays pending (see `progress`).
    Absent,
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
    pub(super) received: Instant,
    pub(super) order: u64,
    /// Per managed LB, in the store's order (`Store::lbs`).
    pub(super) progress: Vec<LbProgress>,
    pub(super) phase: ResultPhase,
    pub(super) last_failure: Option<String>,
    /// The covered load balancers of the last ACCEPTED / EFFECTIVE emitted for this version.
    pub(super) accepted_lbs: LbSet,
    pub(super) effective_lbs: LbSet,
    /// Set when this version is asserted again because an entry was found in another state
    /// (drift): its next ACCEPTED / EFFECTIVE say `repaired`.
    pub(super) repaired: bool,
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
