//! The drain gate: the Node condition `LoadBalancerAdminStateDown`, decided here, written by
//! the leader's gate writer (signal-svc's `writers::gate`).
//!
//! - `True` once the node's current desired state is `Down` and the actuator fleet reported
//!   it EFFECTIVE on every managed load balancer (the entries read back `Down` in ARM);
//! - `False` once the current desired state is `None` and that is EFFECTIVE;
//! - `Unknown` with a reason while a transition is in flight (`SettingDown` / `SettingNone`)
//!   or failing (`SettingDownFailed` / `SettingNoneFailed`);
//! - `Unknown` (`RepairingDown` / `RepairingNone`) while an EFFECTIVE version has regressed:
//!   an actuator found an entry of the node in another state in ARM (an outside writer, a load
//!   balancer re-created or absent) and reported it; back to `True` / `False` once the repair
//!   is EFFECTIVE. `Unknown`, not the opposite status: the node is still leaving (or back),
//!   only ARM does not show it.
//!
//! It never turns `True` before an EFFECTIVE `Down`. A new version of the *same* desired state
//! (reasons changed, a new leader re-stamped everything) is not a transition: the condition
//! already on the node stays, so a drainer that waited once is never sent back to waiting by a
//! leader change. A node that was never asserted (never `Down`) gets no condition at all.
//!
//! Writes happen only on change: the planner compares with the condition it last saw on the
//! Node (from the watch, or its own successful write), and messages carry no timestamps.

use super::index::Desired;
use cutover_proto::v1::ResultPhase;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use std::collections::HashMap;

/// The condition type.
pub const CONDITION_TYPE: &str = "LoadBalancerAdminStateDown";

/// A condition status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GateStatus {
    True,
    False,
    Unknown,
}

impl GateStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::True => "True",
            Self::False => "False",
            Self::Unknown => "Unknown",
        }
    }

    fn parse(s: &str) -> Self {
        match s {
            "True" => Self::True,
            "False" => Self::False,
            _ => Self::Unknown,
        }
    }
}

/// The condition as signal-svc writes it, or as read back from the Node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GateCondition {
    pub status: GateStatus,
    pub reason: String,
    pub message: String,
    /// Only for conditions read from a Node: when the status last changed.
    pub last_transition: Option<Timestamp>,
}

impl GateCondition {
    fn new(status: GateStatus, reason: &str, message: &str) -> Self {
        Self {
            status,
            reason: reason.to_owned(),
            message: message.to_owned(),
            last_transition: None,
        }
    }

    /// Same status, reason and message (the transition time is bookkeeping).
    pub fn same(&self, other: &GateCondition) -> bool {
        self.status == other.status && self.reason == other.reason && self.message == other.message
    }
}

/// The condition on a Node, if present.
pub fn observed(node: &Node) -> Option<GateCondition> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == CONDITION_TYPE)?;
    Some(GateCondition {
        status: GateStatus::parse(&c.status),
        reason: c.reason.clone().unwrap_or_default(),
        message: c.message.clone().unwrap_or_default(),
        last_transition: c.last_transition_time.as_ref().map(|t| t.0),
    })
}

/// The condition while an EFFECTIVE version of `desired` has regressed (see the module doc).
pub fn repairing(desired: Desired) -> GateCondition {
    match desired {
        Desired::Down => GateCondition::new(
            GateStatus::Unknown,
            "RepairingDown",
            "A backend entry of this node was found in another state than Down in ARM (an outside writer, a load balancer re-created or absent); waiting for it to be Down again.",
        ),
        Desired::None => GateCondition::new(
            GateStatus::Unknown,
            "RepairingNone",
            "A backend entry of this node was found Down in ARM without a trigger or hold; waiting for it to be None again.",
        ),
    }
}

/// The condition for a desired state and the fleet-wide phase its current version reached.
pub fn target(desired: Desired, phase: Option<ResultPhase>) -> GateCondition {
    use GateStatus::{False, True, Unknown};
    match (desired, phase) {
        (Desired::Down, Some(ResultPhase::Effective)) => GateCondition::new(
            True,
            "AdminStateDownEffective",
            "Every load-balancer backend entry of this node is Down in ARM: no new flows reach it.",
        ),
        (Desired::None, Some(ResultPhase::Effective)) => GateCondition::new(
            False,
            "AdminStateNoneEffective",
            "Every load-balancer backend entry of this node is None again (follows the health probe).",
        ),
        (Desired::Down, Some(ResultPhase::Failed)) => GateCondition::new(
            Unknown,
            "SettingDownFailed",
            "Setting the backend entries Down failed; the actuator retries (see the LoadBalancerAdminStateUpdateFailed event).",
        ),
        (Desired::None, Some(ResultPhase::Failed)) => GateCondition::new(
            Unknown,
            "SettingNoneFailed",
            "Setting the backend entries back to None failed; the actuator retries (see the LoadBalancerAdminStateUpdateFailed event).",
        ),
        (Desired::Down, _) => GateCondition::new(
            Unknown,
            "SettingDown",
            "The node is leaving; waiting for its backend entries to be Down in ARM.",
        ),
        (Desired::None, _) => GateCondition::new(
            Unknown,
            "SettingNone",
            "The node is back; waiting for its backend entries to be None in ARM.",
        ),
    }
}

#[derive(Debug, Default)]
struct NodeGate {
    /// The condition on the Node as last seen (watch) or written (our successful write).
    seen: Option<GateCondition>,
    /// The desired state the condition on the Node confirms, while it still does.
    confirmed: Option<Desired>,
}

/// Per node UID: what the condition says and what it confirms.
#[derive(Debug, Default)]
pub struct Gate {
    nodes: HashMap<String, NodeGate>,
}

impl Gate {
    /// The condition as the watch saw it on the Node. The first sight seeds what it confirms
    /// (after a restart or failover, a `True` written before stays `True`). Returns whether it
    /// differs from what was known, i.e. whether the node needs a look.
    pub fn observe(&mut self, uid: &str, cond: Option<GateCondition>) -> bool {
        let first = !self.nodes.contains_key(uid);
        let n = self.nodes.entry(uid.to_owned()).or_default();
        if first {
            n.confirmed = cond.as_ref().and_then(confirms);
        }
        let changed = match (&n.seen, &cond) {
            (Some(a), Some(b)) => !a.same(b),
            (None, None) => false,
            _ => true,
        };
        n.seen = cond;
        changed
    }

    /// The node is gone.
    pub fn forget(&mut self, uid: &str) {
        self.nodes.remove(uid);
    }

    /// Whether the gate knows this node (it was observed).
    pub fn knows(&self, uid: &str) -> bool {
        self.nodes.contains_key(uid)
    }

    /// Decides the condition for the node's current desired state and phase. `regressed`: the
    /// current version was EFFECTIVE and an actuator reported it is not any more (not yet
    /// repaired). Returns the condition to write, if it differs from the one on the Node. Also
    /// runs on standbys (with the write dropped), so that what a condition confirms is tracked
    /// across a failover.
    pub fn evaluate(
        &mut self,
        uid: &str,
        desired: Desired,
        phase: Option<ResultPhase>,
        regressed: bool,
    ) -> Option<GateCondition> {
        let n = self.nodes.entry(uid.to_owned()).or_default();
        // Every node is asserted None (level-triggered restore); one that never carried the
        // condition was never cut, and writing `False` on each would cost a status write per
        // node at every start. No condition already means "not Down".
        if desired == Desired::None && n.seen.is_none() {
            return None;
        }
        if n.confirmed != Some(desired) {
            // A transition: whatever the condition said no longer holds.
            n.confirmed = None;
        }
        let want = match phase {
            // ARM does not show the state any more: whatever the condition said no longer
            // holds, and only the repair's EFFECTIVE confirms it again.
            _ if regressed => {
                n.confirmed = None;
                repairing(desired)
            }
            Some(ResultPhase::Effective) => {
                n.confirmed = Some(desired);
                target(desired, phase)
            }
            Some(ResultPhase::Failed) => {
                n.confirmed = None;
                target(desired, phase)
            }
            // Not a transition (same desired state, new version): keep what is there.
            _ if n.confirmed == Some(desired) => return None,
            _ => target(desired, phase),
        };
        match &n.seen {
            Some(seen) if seen.same(&want) => None,
            _ => Some(want),
        }
    }

    /// A write succeeded: the Node now carries `cond`.
    pub fn written(&mut self, uid: &str, cond: GateCondition) {
        self.nodes.entry(uid.to_owned()).or_default().seen = Some(cond);
    }

    /// The condition on the Node as last seen or written.
    pub fn seen(&self, uid: &str) -> Option<&GateCondition> {
        self.nodes.get(uid).and_then(|n| n.seen.as_ref())
    }

    /// Every node the gate knows.
    pub fn uids(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }
}

fn confirms(c: &GateCondition) -> Option<Desired> {
    match c.status {
        GateStatus::True => Some(Desired::Down),
        GateStatus::False => Some(Desired::None),
        GateStatus::Unknown => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use GateStatus::{False, True, Unknown};

    fn status(c: Option<GateCondition>) -> Option<(GateStatus, String)> {
        c.map(|c| (c.status, c.reason))
    }

    /// Applies what `evaluate` asked to write, as a successful write would.
    fn step(
        g: &mut Gate,
        desired: Desired,
        phase: Option<ResultPhase>,
    ) -> Option<(GateStatus, String)> {
        let out = g.evaluate("u", desired, phase, false);
        if let Some(c) = out.clone() {
            g.written("u", c);
        }
        status(out)
    }

    #[test]
    fn down_and_back_unknown_true_unknown_false() {
        let mut g = Gate::default();
        g.observe("u", None);
        let down = Desired::Down;
        let none = Desired::None;
        assert_eq!(
            step(&mut g, down, None),
            Some((Unknown, "SettingDown".into()))
        );
        // Accepted is still in flight: nothing new to write.
        assert_eq!(step(&mut g, down, Some(ResultPhase::Accepted)), None);
        assert_eq!(
            step(&mut g, down, Some(ResultPhase::Effective)),
            Some((True, "AdminStateDownEffective".into()))
        );
        // The same EFFECTIVE again (a resync): no write.
        assert_eq!(step(&mut g, down, Some(ResultPhase::Effective)), None);
        // A new version of Down (reasons changed, or a new leader): True stays.
        assert_eq!(step(&mut g, down, None), None);
        assert_eq!(
            step(&mut g, none, None),
            Some((Unknown, "SettingNone".into()))
        );
        assert_eq!(step(&mut g, none, Some(ResultPhase::Accepted)), None);
        assert_eq!(
            step(&mut g, none, Some(ResultPhase::Effective)),
            Some((False, "AdminStateNoneEffective".into()))
        );
    }

    /// Only an EFFECTIVE Down makes it True, whatever came before.
    #[test]
    fn a_node_never_cut_gets_no_condition() {
        let mut g = Gate::default();
        g.observe("u", None);
        for phase in [
            None,
            Some(ResultPhase::Accepted),
            Some(ResultPhase::Effective),
        ] {
            assert_eq!(g.evaluate("u", Desired::None, phase, false), None);
        }
    }

    #[test]
    fn never_true_before_effective() {
        let phases = [None, Some(ResultPhase::Accepted), Some(ResultPhase::Failed)];
        for seen in [
            None,
            Some(target(Desired::None, Some(ResultPhase::Effective))),
        ] {
            let mut g = Gate::default();
            g.observe("u", seen);
            for p in phases {
                let c = g.evaluate("u", Desired::Down, p, false);
                assert_ne!(c.map(|c| c.status), Some(True), "{p:?}");
            }
        }
    }

    /// Down → None → Down while the None write never landed (the Node still says True): the
    /// stale True must not be kept for the second Down.
    #[test]
    fn a_stale_true_is_not_kept_across_a_transition() {
        let mut g = Gate::default();
        g.observe("u", None);
        step(&mut g, Desired::Down, Some(ResultPhase::Effective));
        // None decided, but its Unknown write failed (not recorded as written).
        assert!(g.evaluate("u", Desired::None, None, false).is_some());
        let again = g.evaluate("u", Desired::Down, None, false);
        assert_eq!(status(again), Some((Unknown, "SettingDown".into())));
    }

    /// N3: a cut node's entry set back to no admin state from outside. The actuator reports
    /// the EFFECTIVE version regressed: the condition leaves `True` for `Unknown` (never
    /// `False`: the node is still leaving) until the repair is EFFECTIVE, and a new version of
    /// the same Down meanwhile does not bring the old `True` back.
    #[test]
    fn a_regressed_version_is_unknown_until_the_repair_is_effective() {
        let mut g = Gate::default();
        g.observe("u", None);
        let (down, none) = (Desired::Down, Desired::None);
        step(&mut g, down, Some(ResultPhase::Effective));
        let regressed = |g: &mut Gate, desired, phase| {
            let out = g.evaluate("u", desired, phase, true);
            if let Some(c) = out.clone() {
                g.written("u", c);
            }
            status(out)
        };
        assert_eq!(
            regressed(&mut g, down, Some(ResultPhase::Accepted)),
            Some((Unknown, "RepairingDown".into()))
        );
        assert_eq!(regressed(&mut g, down, Some(ResultPhase::Accepted)), None);
        // A new version of Down (reasons changed) while repairing: still not True.
        assert_eq!(
            step(&mut g, down, None),
            Some((Unknown, "SettingDown".into()))
        );
        assert_eq!(
            step(&mut g, down, Some(ResultPhase::Effective)),
            Some((True, "AdminStateDownEffective".into()))
        );
        // The same for None: False, drift (an entry found Down), Unknown, False again.
        step(&mut g, none, Some(ResultPhase::Effective));
        assert_eq!(
            regressed(&mut g, none, Some(ResultPhase::Accepted)),
            Some((Unknown, "RepairingNone".into()))
        );
        assert_eq!(
            step(&mut g, none, Some(ResultPhase::Effective)),
            Some((False, "AdminStateNoneEffective".into()))
        );
        // A node never cut still gets no condition.
        let mut g = Gate::default();
        g.observe("u", None);
        assert_eq!(
            g.evaluate("u", none, Some(ResultPhase::Accepted), true),
            None
        );
    }

    #[test]
    fn failures_are_unknown_with_a_reason_and_recover() {
        let mut g = Gate::default();
        g.observe("u", None);
        step(&mut g, Desired::Down, None);
        assert_eq!(
            step(&mut g, Desired::Down, Some(ResultPhase::Failed)),
            Some((Unknown, "SettingDownFailed".into()))
        );
        assert_eq!(
            step(&mut g, Desired::Down, Some(ResultPhase::Effective)),
            Some((True, "AdminStateDownEffective".into()))
        );
    }

    /// After a restart or failover the condition read from the Node is kept while the desired
    /// state is the one it confirms; a condition someone else changed is written back.
    #[test]
    fn a_new_leader_keeps_a_confirmed_condition_and_repairs_others() {
        let mut g = Gate::default();
        g.observe(
            "u",
            Some(target(Desired::Down, Some(ResultPhase::Effective))),
        );
        assert_eq!(g.evaluate("u", Desired::Down, None, false), None);
        assert_eq!(
            g.evaluate("u", Desired::Down, Some(ResultPhase::Effective), false),
            None
        );
        // Someone rewrote it: the watch shows the change, the next evaluation repairs it.
        let tampered = GateCondition::new(False, "Manual", "");
        assert!(g.observe("u", Some(tampered)));
        assert_eq!(
            status(g.evaluate("u", Desired::Down, Some(ResultPhase::Effective), false)),
            Some((True, "AdminStateDownEffective".into()))
        );
        // A True left on a node whose desired state is now None goes Unknown, then False.
        let mut g = Gate::default();
        g.observe(
            "u",
            Some(target(Desired::Down, Some(ResultPhase::Effective))),
        );
        assert_eq!(
            status(g.evaluate("u", Desired::None, None, false)),
            Some((Unknown, "SettingNone".into()))
        );
    }

    #[test]
    fn observe_reports_only_changes() {
        let mut g = Gate::default();
        assert!(!g.observe("u", None));
        assert!(!g.observe("u", None));
        let t = target(Desired::Down, Some(ResultPhase::Effective));
        assert!(g.observe("u", Some(t.clone())));
        let mut later = t.clone();
        later.last_transition = Some(Timestamp::UNIX_EPOCH);
        assert!(
            !g.observe("u", Some(later)),
            "transition time alone is no change"
        );
        g.forget("u");
        assert!(!g.knows("u"));
    }

    #[test]
    fn reads_the_condition_from_a_node() {
        let node: Node = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n", "uid": "u"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": CONDITION_TYPE, "status": "True", "reason": "AdminStateDownEffective",
                 "message": "m", "lastTransitionTime": "2026-08-01T05:00:00Z"}
            ]}
        }))
        .unwrap();
        let c = observed(&node).unwrap();
        assert_eq!(
            (c.status, c.reason.as_str()),
            (True, "AdminStateDownEffective")
        );
        assert!(c.last_transition.is_some());
        let bare: Node =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "n"}})).unwrap();
        assert_eq!(observed(&bare), None);
    }
}
