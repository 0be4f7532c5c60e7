//! The desired-state index: watch events in, real changes out.
//!
//! Keyed by node UID, so a node recreated under the same name starts from its own taints.
//! Plain synchronous `apply` / `delete` / `reset` methods (as in linkerd's policy indexes);
//! the caller owns the lock and the I/O.

use super::event::EventView;
use super::hold::HOLD_ANNOTATION;
use super::node::{NodeView, exclude_label_value, unacted_notice_conditions};
use super::notice::{self, EVENT_REASON, Reading};
use super::taints::{
    DRAIN_CONDITIONS, EXCLUDE_FROM_LB_LABEL, NODE_CORDONED, NODE_DELETING, TriggerSet,
    has_draining_key,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use std::collections::{HashMap, HashSet};

/// The admin state a node should have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Desired {
    None,
    Down,
}

/// The desired state of one node.
#[derive(Clone, Debug, PartialEq)]
pub struct DesiredState {
    pub node: NodeView,
    pub desired: Desired,
    /// Trigger taint keys present, the exclusion label's key when it excludes the node,
    /// `node-deleting`, `node-cordoned` and the KEP-5683 drain condition types when their
    /// triggers fire, plus `cutover.io/hold` for a tool hold (whose text is in `node.hold`);
    /// sorted; empty for `None`.
    pub reasons: Vec<String>,
    /// When the signal behind this state was first observed (the notice for a Spot taint).
    pub observed_at: Timestamp,
    /// Spot NotBefore deadline, when the state is `Down` after a notice.
    pub deadline: Option<Timestamp>,
}

/// One real change.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// New node (`previous: None`) or a changed desired state / reasons / node reference.
    Set {
        state: DesiredState,
        previous: Option<Desired>,
    },
    /// The node is gone.
    Removed { node: NodeView, last: Desired },
}

/// Ask the (leader's) taint writer to add the spot-eviction taint.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TaintRequest {
    pub name: String,
    pub uid: String,
}

/// What the index learnt from one call.
#[derive(Debug, Default, PartialEq)]
pub struct Output {
    pub changes: Vec<Change>,
    pub taints: Vec<TaintRequest>,
    /// Signal kinds seen, for metrics: `taint`, `label`, `hold`, `deleting`, `cordon`,
    /// `drain_condition`, `preempt_event`,
    /// `preempt_condition`, `preempt_event_ignored`, `preempt_advisory` (rebalance
    /// recommendations, not acted on), `preempt_unknown_form` (not acted on, logged once).
    pub signals: Vec<&'static str>,
    /// Problems with cluster data, each reported once per object.
    pub warnings: Vec<String>,
}

#[derive(Clone, Copy, Debug)]
struct NoticeSeen {
    observed_at: Timestamp,
    deadline: Timestamp,
}

#[derive(Clone, Copy, Debug)]
struct PendingNotice {
    at: Option<Timestamp>,
    observed_at: Timestamp,
    deadline: Timestamp,
}

#[derive(Debug)]
struct Entry {
    state: DesiredState,
    notice: Option<NoticeSeen>,
}

/// Per-UID desired states plus Spot notices by node name.
#[derive(Debug, Default)]
pub struct NodeIndex {
    triggers: TriggerSet,
    nodes: HashMap<String, Entry>,
    by_name: HashMap<String, String>,
    /// Latest valid notice per node name, kept so an event seen before its node still counts.
    notices: HashMap<String, PendingNotice>,
    /// Event UIDs already counted (re-deliveries and `count` bumps change nothing).
    seen_events: HashMap<String, Timestamp>,
    warned: HashSet<String>,
    /// During a relist: the UIDs listed so far (see [`NodeIndex::begin_relist`]).
    relisted: Option<HashSet<String>>,
}

/// Events older than this are forgotten (the API server keeps events for 1 h by default).
const EVENT_MEMORY: jiff::SignedDuration = jiff::SignedDuration::from_hours(2);

impl NodeIndex {
    pub fn new(triggers: TriggerSet) -> Self {
        Self {
            triggers,
            ..Self::default()
        }
    }

    /// Number of nodes known.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The current desired state of a node UID.
    pub fn get(&self, uid: &str) -> Option<&DesiredState> {
        self.nodes.get(uid).map(|e| &e.state)
    }

    /// A Node was added or modified (or listed, during a relist).
    pub fn apply(&mut self, node: &Node, now: Timestamp) -> Output {
        let mut out = Output::default();
        if let Some(uid) = self.apply_into(node, now, &mut out)
            && let Some(seen) = self.relisted.as_mut()
        {
            seen.insert(uid);
        }
        out
    }

    /// A relist starts: the listed nodes follow one by one through [`NodeIndex::apply`] (so no
    /// whole list is ever buffered), then [`NodeIndex::finish_relist`].
    pub fn begin_relist(&mut self) {
        self.relisted = Some(HashSet::new());
    }

    /// The relist is complete: nodes it did not list are removed.
    pub fn finish_relist(&mut self) -> Output {
        let mut out = Output::default();
        let present = self.relisted.take().unwrap_or_default();
        let gone: Vec<String> = self
            .nodes
            .keys()
            .filter(|u| !present.contains(*u))
            .cloned()
            .collect();
        for uid in gone {
            self.remove_uid(&uid, &mut out);
        }
        out
    }

    /// A Node was deleted.
    pub fn delete(&mut self, node: &Node) -> Output {
        let mut out = Output::default();
        let uid = node.metadata.uid.clone().or_else(|| {
            node.metadata
                .name
                .as_ref()
                .and_then(|n| self.by_name.get(n).cloned())
        });
        if let Some(uid) = uid {
            self.remove_uid(&uid, &mut out);
        }
        out
    }

    /// A complete list of Nodes (after a (re)list): nodes missing from it are removed.
    pub fn reset(&mut self, nodes: &[Node], now: Timestamp) -> Output {
        self.begin_relist();
        let mut out = Output::default();
        for node in nodes {
            let o = self.apply(node, now);
            out.changes.extend(o.changes);
            out.taints.extend(o.taints);
            out.signals.extend(o.signals);
            out.warnings.extend(o.warnings);
        }
        let o = self.finish_relist();
        out.changes.extend(o.changes);
        out
    }

    /// A `PreemptScheduled` event was added or modified (or listed).
    pub fn apply_event(&mut self, ev: &EventView, now: Timestamp) -> Output {
        let mut out = Output::default();
        if ev.reason != EVENT_REASON {
            return out;
        }
        if self.seen_events.len() > 10_000 {
            self.seen_events.retain(|_, t| *t + EVENT_MEMORY > now);
            self.notices
                .retain(|_, p| p.observed_at + EVENT_MEMORY > now);
        }
        let first_delivery = self.seen_events.insert(ev.uid.clone(), now).is_none();
        let Some(node_name) = ev.node_name.clone() else {
            self.warn_once(&mut out, format!("event/{}", ev.uid), || {
                format!("event {} has no involvedObject.name; skipped", ev.name)
            });
            return out;
        };
        if ev.kind.as_deref() != Some("Node") {
            self.warn_once(&mut out, format!("event-kind/{}", ev.uid), || {
                format!("event {} is not about a Node; skipped", ev.name)
            });
            return out;
        }
        let parsed = match notice::read_event_message(&ev.message, now) {
            Reading::Notice(n) => n,
            Reading::Ignored => {
                if first_delivery {
                    out.signals.push("preempt_event_ignored");
                }
                return out;
            }
            // A rebalance recommendation is not an eviction: counted, never acted on.
            Reading::Advisory => {
                if first_delivery {
                    out.signals.push("preempt_advisory");
                }
                return out;
            }
            Reading::Unknown => {
                if first_delivery {
                    out.signals.push("preempt_unknown_form");
                }
                self.warn_once(&mut out, format!("event-form/{}", ev.uid), || {
                    format!(
                        "event {} for node {node_name}: unknown {EVENT_REASON} message form, not acted on: {:.200}",
                        ev.name, ev.message
                    )
                });
                return out;
            }
        };
        if !parsed.deadline_parsed {
            self.warn_once(&mut out, format!("deadline/{}", ev.uid), || {
                format!(
                    "event {} for node {node_name}: unparsable NotBefore, assuming now",
                    ev.name
                )
            });
        }
        let pending = PendingNotice {
            at: ev.time,
            observed_at: now,
            deadline: parsed.deadline,
        };
        let keep = match self.notices.get(&node_name) {
            Some(old) => old.at < pending.at,
            None => true,
        };
        if keep {
            self.notices.insert(node_name.clone(), pending);
        }
        if let Some(uid) = self.by_name.get(&node_name).cloned() {
            self.match_event_notice(&uid, pending, &mut out);
        }
        out
    }

    /// Every node that has a notice but no draining taint yet: what a new leader must do.
    pub fn pending_taints(&self) -> Vec<TaintRequest> {
        self.nodes
            .values()
            .filter(|e| e.notice.is_some() && needs_spot_taint(&e.state.node))
            .map(|e| TaintRequest {
                name: e.state.node.name.clone(),
                uid: e.state.node.uid.clone(),
            })
            .collect()
    }

    fn apply_into(&mut self, node: &Node, now: Timestamp, out: &mut Output) -> Option<String> {
        let view = self.read_node(node, now, out)?;
        let uid = view.uid.clone();
        self.note_unacted_conditions(node, &view, now, out);
        // Same name, new UID: the old node is gone even if its DELETE was missed.
        if let Some(old) = self.by_name.get(&view.name).filter(|u| **u != uid).cloned() {
            self.remove_uid(&old, out);
        }
        self.by_name.insert(view.name.clone(), uid.clone());

        let reasons = self.reasons(node, &view);
        let desired = if reasons.is_empty() {
            Desired::None
        } else {
            Desired::Down
        };
        let entry = self.nodes.get(&uid);
        let previous = entry.map(|e| &e.state);
        signal_new_reasons(previous, &reasons, out);
        let notice = self.notice_of(&view, entry.and_then(|e| e.notice), now, out);
        let (observed_at, deadline) = since(previous, desired, notice, now);
        let changed = previous.is_none_or(|p| {
            p.desired != desired
                || p.reasons != reasons
                || p.node.hold != view.hold
                || !p.node.same_ref(&view)
        });
        let prev_desired = previous.map(|p| p.desired);
        let state = DesiredState {
            node: view,
            desired,
            reasons,
            observed_at,
            deadline,
        };
        if changed {
            out.changes.push(Change::Set {
                state: state.clone(),
                previous: prev_desired,
            });
        }
        self.nodes.insert(uid.clone(), Entry { state, notice });
        Some(uid)
    }

    /// The node as the index reads it; a node that cannot be read is warned about once and
    /// skipped, and so is each lesser problem with one of its fields.
    fn read_node(&mut self, node: &Node, now: Timestamp, out: &mut Output) -> Option<NodeView> {
        let (view, warnings) = match NodeView::from_node(node, now) {
            Ok(v) => v,
            Err(e) => {
                let key = format!("node/{:?}/{:?}", node.metadata.name, node.metadata.uid);
                self.warn_once(out, key, || format!("{e}; skipped"));
                return None;
            }
        };
        for w in warnings {
            let key = format!("node/{}/{w}", view.uid);
            self.warn_once(out, key, || format!("node {}: {w}", view.name));
        }
        Some(view)
    }

    /// Notice conditions that are not an eviction: counted and logged once, never acted on.
    fn note_unacted_conditions(
        &mut self,
        node: &Node,
        view: &NodeView,
        now: Timestamp,
        out: &mut Output,
    ) {
        for (type_, reading) in unacted_notice_conditions(node, now) {
            let (kind, what) = match reading {
                Reading::Advisory => (
                    "preempt_advisory",
                    "a Spot rebalance recommendation (advisory)",
                ),
                _ => ("preempt_unknown_form", "an unknown message form"),
            };
            let key = format!("cond/{}/{type_}/{kind}", view.uid);
            if self.warned.insert(key) {
                out.signals.push(kind);
                out.warnings.push(format!(
                    "node {}: condition {type_} is {what}; not acted on",
                    view.name
                ));
            }
        }
    }

    /// Why the node should be `Down`: its trigger taints, the exclusion label, its state
    /// (deletion, cordon, drain conditions), a hold (sorted, no duplicates; empty: `None`).
    fn reasons(&self, node: &Node, view: &NodeView) -> Vec<String> {
        let mut reasons = self.triggers.reasons(&view.taints);
        if let Some(label) = self.triggers.label_trigger(exclude_label_value(node)) {
            reasons.push(label.to_owned());
        }
        reasons.extend(
            self.triggers
                .state_reasons(&view.states)
                .into_iter()
                .map(str::to_owned),
        );
        if view.hold.is_some() {
            reasons.push(HOLD_ANNOTATION.to_owned());
        }
        reasons.sort();
        reasons.dedup();
        reasons
    }

    /// The node's Spot notice: the one seen before, else one from its conditions, else a
    /// pending event notice for this incarnation. A new one is a signal, and asks for the
    /// draining taint if the node needs it.
    fn notice_of(
        &self,
        view: &NodeView,
        seen: Option<NoticeSeen>,
        now: Timestamp,
        out: &mut Output,
    ) -> Option<NoticeSeen> {
        if seen.is_some() {
            return seen;
        }
        let notice = if let Some(c) = view.condition_notice {
            out.signals.push("preempt_condition");
            NoticeSeen {
                observed_at: now,
                deadline: c.deadline,
            }
        } else if let Some(p) = self.notices.get(&view.name).copied()
            && event_belongs_to(p.at, view.created)
        {
            out.signals.push("preempt_event");
            NoticeSeen {
                observed_at: p.observed_at,
                deadline: p.deadline,
            }
        } else {
            return None;
        };
        if needs_spot_taint(view) {
            out.taints.push(TaintRequest {
                name: view.name.clone(),
                uid: view.uid.clone(),
            });
        }
        Some(notice)
    }

    fn match_event_notice(&mut self, uid: &str, p: PendingNotice, out: &mut Output) {
        let Some(entry) = self.nodes.get_mut(uid) else {
            return;
        };
        if entry.notice.is_some() || !event_belongs_to(p.at, entry.state.node.created) {
            return;
        }
        entry.notice = Some(NoticeSeen {
            observed_at: p.observed_at,
            deadline: p.deadline,
        });
        out.signals.push("preempt_event");
        if needs_spot_taint(&entry.state.node) {
            out.taints.push(TaintRequest {
                name: entry.state.node.name.clone(),
                uid: uid.to_owned(),
            });
        }
    }

    fn remove_uid(&mut self, uid: &str, out: &mut Output) {
        if let Some(entry) = self.nodes.remove(uid) {
            if self
                .by_name
                .get(&entry.state.node.name)
                .is_some_and(|u| u == uid)
            {
                self.by_name.remove(&entry.state.node.name);
            }
            self.warned.retain(|k| !k.contains(uid));
            out.changes.push(Change::Removed {
                node: entry.state.node,
                last: entry.state.desired,
            });
        }
    }

    fn warn_once(&mut self, out: &mut Output, key: String, msg: impl FnOnce() -> String) {
        if self.warned.insert(key) {
            out.warnings.push(msg());
        }
    }
}

/// New trigger keys are signals.
fn signal_new_reasons(previous: Option<&DesiredState>, reasons: &[String], out: &mut Output) {
    for r in reasons {
        if !previous.is_some_and(|p| p.reasons.contains(r)) {
            out.signals.push(match r.as_str() {
                HOLD_ANNOTATION => "hold",
                EXCLUDE_FROM_LB_LABEL => "label",
                NODE_DELETING => "deleting",
                NODE_CORDONED => "cordon",
                c if DRAIN_CONDITIONS.contains(&c) => "drain_condition",
                _ => "taint",
            });
        }
    }
}

/// Since when the node has wanted `desired`, and the notice's deadline: kept while the
/// desired state stays; a new `Down` counts from its notice if one came first.
fn since(
    previous: Option<&DesiredState>,
    desired: Desired,
    notice: Option<NoticeSeen>,
    now: Timestamp,
) -> (Timestamp, Option<Timestamp>) {
    match previous {
        Some(p) if p.desired == desired => (p.observed_at, p.deadline),
        _ if desired == Desired::Down => match notice {
            Some(n) => (n.observed_at.min(now), Some(n.deadline)),
            None => (now, None),
        },
        _ => (now, None),
    }
}

/// An event belongs to the current incarnation of a node when it is not older than the node.
/// A notice taints a node only if no draining taint is there and signal-svc never tainted this
/// node object before (an operator may have taken the node back).
fn needs_spot_taint(node: &NodeView) -> bool {
    !has_draining_key(&node.taints) && !node.spot_notice_handled
}

fn event_belongs_to(event_at: Option<Timestamp>, node_created: Option<Timestamp>) -> bool {
    match (event_at, node_created) {
        (Some(e), Some(c)) => e >= c,
        // Without times we cannot tell; a notice is too important to drop.
        _ => true,
    }
}

#[cfg(test)]
#[path = "index_tests.rs"]
mod tests;
