//! The read-only tool RPCs, once the caller passed its allow-list (and, for a fresh read, its
//! rate limit) and the request validated: `GetNodeAdminState` ([`Inbound::get`]),
//! `ListHeldEntries` ([`Inbound::list_held`], from memory and the cached pools) and
//! `WatchResults` ([`Inbound::watch`]).

use super::fresh::Unknown;
use crate::inbound::Inbound;
use crate::inbound::holds;
use crate::lb::index::{Admin, NodeSpec, PoolIndex};
use crate::state::{Held, Source, admin_to_proto, entry_ref};
use cutover_proto::v1::{
    AdminState, EntryRef, GetNodeAdminStateResponse, HeldNode, NodeRef, NodeResult, ResultPhase,
};
use std::time::Duration;
use tokio_stream::{Stream, StreamExt};
use tonic::Status;

/// The `GetNodeAdminState` note for a tool hold: who, since when, why, and how durable.
fn hold_note(h: &Held) -> Option<String> {
    let x = h.hold.as_ref()?;
    let since = x.since.map(|t| t.to_string()).unwrap_or_else(|| "?".into());
    let how = match h.source {
        Source::Stream => "durable: stored on the Node, the same on every replica",
        Source::Tool => holds::MEMORY_ONLY,
    };
    Some(format!(
        "held down by {} since {since}: {:?} ({how})",
        x.requester, x.reason
    ))
}

/// A held node's reasons and since: a hold shows its own reason text and the time it was set
/// (which outlives any replica), not the time this replica learnt of it.
fn reasons_and_since(h: &Held) -> (Vec<String>, prost_types::Timestamp) {
    match (&h.hold, h.source) {
        // The tool's reason first (as for a memory-only hold), then any taint keys.
        (Some(x), Source::Stream) => (
            std::iter::once(x.reason.clone())
                .chain(
                    h.reasons
                        .iter()
                        .filter(|r| r.as_str() != holds::HOLD_KEY)
                        .cloned(),
                )
                .collect(),
            x.since
                .unwrap_or_else(|| prost_types::Timestamp::from(h.since)),
        ),
        _ => (h.reasons.clone(), prost_types::Timestamp::from(h.since)),
    }
}

impl Inbound {
    /// `GetNodeAdminState`: the node's entries from the cached pools, or read from ARM now
    /// when `fresh`; with the desired state held here and notes (guard refusals, holds,
    /// pending entries).
    pub async fn get(
        &self,
        node: NodeRef,
        spec: NodeSpec,
        fresh: bool,
    ) -> Result<GetNodeAdminStateResponse, Status> {
        let mut notes = Vec::new();
        let (index, age) = if fresh {
            match self.unknown_node(&node, &spec).await? {
                Unknown::No => (self.fresh_index().await?, Duration::ZERO),
                Unknown::FoundIn(index) => (index, Duration::ZERO),
                Unknown::Yes(note) => {
                    notes.push(note);
                    self.cache.index(None)
                }
            }
        } else {
            if !self.cache.built(&self.store.lbs()) {
                return Err(Status::unavailable(
                    "pool cache not built yet; retry or ask with fresh = true",
                ));
            }
            self.cache.index(None)
        };
        let resolved = index.resolve(&spec, None);
        let held = self.store.find(&node.uid, &node.name);
        let desired = held
            .as_ref()
            .map(|h| admin_to_proto(h.desired))
            .unwrap_or(AdminState::Unspecified);
        if notes.is_empty() {
            notes = resolved.notes;
        }
        if let Some(h) = &held {
            for (lb, reason) in self.guard.refused(&h.key) {
                notes.push(format!("{reason} [load balancer {lb}]"));
            }
            if let Some(note) = hold_note(h) {
                notes.push(note);
            }
        }
        // Entries of an LB whose operation runs are pending, not in the state they read.
        let entries = super::answer::entries(&resolved.entries, &mut notes);
        Ok(GetNodeAdminStateResponse {
            entries,
            age: prost_types::Duration::try_from(age).ok(),
            desired: desired as i32,
            notes,
        })
    }

    /// `ListHeldEntries`: every node held `Down`, with its entries (on `lb_filter` only, when
    /// given). Answered from memory and the cached pools, with no ARM call.
    pub fn list_held(&self, lb_filter: Option<&str>) -> Vec<HeldNode> {
        let (index, _) = self.cache.index(None);
        self.store
            .held()
            .into_iter()
            .filter(|h| h.desired == Admin::Down)
            .filter_map(|h| self.held_node(h, &index, lb_filter))
            .collect()
    }

    /// One held node of `ListHeldEntries`; `None` when `lb_filter` leaves it no entry.
    fn held_node(&self, h: Held, index: &PoolIndex, lb_filter: Option<&str>) -> Option<HeldNode> {
        let mut entries: Vec<_> = index
            .resolve(&h.spec, lb_filter)
            .entries
            .iter()
            .map(entry_ref)
            .collect();
        if lb_filter.is_some() && entries.is_empty() {
            return None;
        }
        let reached = self.reached(&h, &mut entries);
        let effective = reached
            && entries
                .iter()
                .all(|e| e.admin_state == AdminState::Down as i32);
        let (reasons, since) = reasons_and_since(&h);
        Some(HeldNode {
            requester: h
                .hold
                .as_ref()
                .map(|x| x.requester.clone())
                .unwrap_or_default(),
            node: Some(h.node.clone()),
            source: h.source.label(h.hold.is_some()).to_string(),
            reasons,
            version: Some(h.version),
            since: Some(since),
            entries,
            effective,
        })
    }

    /// Whether a held node's version reached its state. Stream states: the fleet-wide phase
    /// (another replica may own the LBs); a memory-only tool hold is written by this replica
    /// alone. The entries listed never contradict `effective`: an entry whose copy here was
    /// read before the fleet status arrived (a non-owner's copy, older than the owner's write)
    /// shows the state the owners confirmed; one read since shows what it reads, and then
    /// decides (an outside writer may have changed it after the status).
    fn reached(&self, h: &Held, entries: &mut [EntryRef]) -> bool {
        match h.source {
            Source::Stream => match self.store.fleet_phase_since(&h.node.uid, h.version) {
                Some((ResultPhase::Effective, at)) => {
                    for e in entries {
                        let older = self
                            .cache
                            .age(&e.load_balancer)
                            .is_none_or(|age| age > at.elapsed());
                        if older {
                            e.admin_state = AdminState::Down as i32;
                        }
                    }
                    true
                }
                _ => false,
            },
            Source::Tool => h.effective(),
        }
    }

    /// `WatchResults`: this replica's own results (tool requests it writes, the LBs it owns)
    /// and the fleet-wide phases signal-svc reports (every replica's writes, `fleet` set), of
    /// node `name` (every node when empty), until the replica drains.
    pub fn watch(
        &self,
        name: String,
    ) -> impl Stream<Item = Result<NodeResult, Status>> + Send + 'static {
        let own = tokio_stream::wrappers::BroadcastStream::new(self.store.subscribe());
        let fleet = tokio_stream::wrappers::BroadcastStream::new(self.store.subscribe_fleet());
        let stream = own.merge(fleet).filter_map(move |r| match r {
            Ok(r) if name.is_empty() || r.node.as_ref().is_some_and(|n| n.name == name) => {
                Some(Ok(r))
            }
            _ => None,
        });
        let mut shutdown = self.shutdown.clone();
        let drained = async move {
            let _ = shutdown.wait_for(|s| *s).await;
        };
        futures::StreamExt::take_until(stream, drained)
    }
}
