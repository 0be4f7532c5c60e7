//! Actuator results: metrics and Node events, only for the current version of a node, each
//! phase once per version (a resync re-sends the same version; it must not repeat events).
//! Several replicas each cover their load balancers; [`Coverage`](crate::core::coverage::Coverage) combines them.

use crate::core::coverage::Reached;
use crate::shared::Shared;
use crate::writers::events::NodeEvent;
use cutover_proto::v1::{AdminState, NodeDesiredState, NodeRef, NodeResult, ResultPhase, Version};
use jiff::Timestamp;
use std::collections::BTreeSet;
use std::sync::Arc;
use tokio::sync::mpsc;

fn secs_since(t: Option<&prost_types::Timestamp>, now: Timestamp) -> Option<f64> {
    let t = t?;
    let then = Timestamp::new(t.seconds, t.nanos).ok()?;
    Some(now.duration_since(then).as_secs_f64())
}

/// Handles one result; returns the event to record, if any.
pub fn handle(shared: &Shared, r: &NodeResult, now: Timestamp) -> Option<NodeEvent> {
    let node = r.node.as_ref()?;
    let version = r.version?;
    let (current, restore) = shared.current_and_restore(&node.uid);
    let current = current?;
    if current.version != Some(version) || current.desired != r.desired {
        return None;
    }
    let phase = ResultPhase::try_from(r.phase).ok()?;
    let managed = shared.managed_load_balancers();
    let reached = shared.cover(&node.uid, version, phase, r, &managed);
    publish_phases(shared, node, version, &reached);
    let result = Reported {
        r,
        node,
        down: r.desired == AdminState::Down as i32,
    };
    if r.repaired && phase == ResultPhase::Effective {
        return Some(result.repaired(shared, &reached));
    }
    let mut event = None;
    for step in reached {
        match step {
            Reached::Regressed => {
                // Told by the drain gate (back to Unknown until the repair is effective).
                shared.metrics().result("regressed");
                tracing::info!(node = %node.name, reason = %r.reason, "an effective admin state regressed; the drain gate waits for the repair");
            }
            Reached::Accepted => {
                shared.metrics().result("accepted");
                if let Some(s) = secs_since(current.observed_at.as_ref(), now) {
                    shared.metrics().signal_to_accepted.observe(s);
                }
            }
            Reached::Effective => {
                shared.metrics().result("effective");
                if !result.down && !restore {
                    // The None every untriggered node carries: nothing happened to tell.
                    continue;
                }
                observe_effective(shared, &current, result.down, now);
                event = Some(result.effective(&managed));
            }
            Reached::Failed => {
                shared.metrics().result("failed");
                event = Some(result.failed());
            }
        }
    }
    event
}

/// Sends the fleet-wide phases a result reached down every stream.
fn publish_phases(shared: &Shared, node: &NodeRef, version: Version, reached: &[Reached]) {
    for step in reached {
        let phase = match step {
            Reached::Accepted | Reached::Regressed => ResultPhase::Accepted,
            Reached::Effective => ResultPhase::Effective,
            Reached::Failed => ResultPhase::Failed,
        };
        // No stream listening is fine: a stream that opens later gets `fleet_statuses`. A
        // regression goes out as ACCEPTED: it wakes the gate writer (which reads the
        // regression from the coverage), and actuators keep their EFFECTIVE (phases only move
        // forward there within a version).
        shared.publish_status(crate::shared::node_status(
            &node.name, &node.uid, version, phase,
        ));
    }
}

/// How long from the signal to an effective state, and what was left of a Spot notice.
fn observe_effective(shared: &Shared, current: &NodeDesiredState, down: bool, now: Timestamp) {
    if let Some(s) = secs_since(current.observed_at.as_ref(), now) {
        shared.metrics().signal_to_effective.observe(s);
    }
    if down && let Some(left) = secs_since(current.deadline.as_ref(), now) {
        shared.metrics().notice_window_remaining.observe(-left);
    }
}

/// One result of the node's current version, as the events about it read it.
struct Reported<'a> {
    r: &'a NodeResult,
    node: &'a NodeRef,
    down: bool,
}

impl Reported<'_> {
    fn event(&self, warning: bool, reason: &'static str, note: String) -> NodeEvent {
        NodeEvent {
            node: self.node.name.clone(),
            uid: self.node.uid.clone(),
            warning,
            reason,
            note: truncate(note),
        }
    }

    /// The actuator found entries of this node in another state than desired (an outside
    /// writer, an outage, a restart, a load balancer re-created) and set them back: each
    /// repair is news, whatever was reported before.
    fn repaired(&self, shared: &Shared, reached: &[Reached]) -> NodeEvent {
        shared.metrics().result("repaired");
        if reached.contains(&Reached::Effective) {
            shared.metrics().result("effective");
        }
        let entries: Vec<&str> = self.r.entries.iter().map(|e| e.pool.as_str()).collect();
        let note = if self.down {
            format!(
                "Backend entries of this node were found in another state than Down (an outside writer, a re-created load balancer) and were set back to Down (pools: {})",
                entries.join(", ")
            )
        } else {
            format!(
                "Backend entries of this node were Down without a trigger or hold and were set back to None (pools: {})",
                entries.join(", ")
            )
        };
        self.event(true, "LoadBalancerAdminStateRepaired", note)
    }

    /// The desired state is effective on every managed load balancer.
    fn effective(&self, managed: &BTreeSet<String>) -> NodeEvent {
        let state = if self.down { "Down" } else { "None" };
        let lbs: Vec<&str> = if managed.is_empty() {
            self.r
                .entries
                .iter()
                .map(|e| e.load_balancer.as_str())
                .collect()
        } else {
            managed.iter().map(String::as_str).collect()
        };
        let mut lbs = lbs;
        lbs.sort_unstable();
        lbs.dedup();
        let reason = if self.down {
            "LoadBalancerAdminStateDown"
        } else {
            "LoadBalancerAdminStateNone"
        };
        let note = format!(
            "Load balancer admin state {state} is effective on every managed load balancer ({})",
            lbs.join(", ")
        );
        self.event(false, reason, note)
    }

    fn failed(&self) -> NodeEvent {
        let retry = if self.r.will_retry {
            "; the actuator retries"
        } else {
            ""
        };
        let note = format!(
            "Setting the load balancer admin state failed: {}{retry}",
            self.r.reason
        );
        self.event(true, "LoadBalancerAdminStateUpdateFailed", note)
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > 1000 {
        let mut cut = 1000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Convenience for the stream reader.
pub fn dispatch_result(shared: &Arc<Shared>, events: &mpsc::Sender<NodeEvent>, r: &NodeResult) {
    if let Some(ev) = handle(shared, r, Timestamp::now())
        && events.try_send(ev).is_err()
    {
        tracing::warn!("node event queue full; event dropped");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::dispatch::Dispatcher;
    use crate::core::index::{Change, Desired, DesiredState, NodeIndex, Output};
    use crate::core::node::NodeView;
    use crate::core::taints::TriggerSet;
    use crate::shared::Core;
    use cutover_proto::v1::NodeRef;
    use cutover_proto::v1::Version;

    fn shared_with_down_node() -> Shared {
        shared_with_node(Desired::Down)
    }

    fn shared_with_node(desired: Desired) -> Shared {
        let (tx, _rx) = mpsc::unbounded_channel();
        let core = Core {
            index: NodeIndex::new(TriggerSet::default()),
            dispatch: Dispatcher::new(),
        };
        let shared = Shared::new(core, "me".into(), false, tx);
        shared.become_leader(4);
        // One live stream managing one load balancer (an empty managed set covers nothing).
        shared.join_assignment("a", &["pub".to_owned()]);
        let node = NodeView {
            name: "n".into(),
            uid: "u".into(),
            created: None,
            provider_id: String::new(),
            internal_ips: vec![],
            zone: String::new(),
            taints: vec![],
            condition_notice: None,
            spot_notice_handled: false,
            hold: None,
            states: Default::default(),
        };
        let state = DesiredState {
            node,
            desired,
            reasons: vec!["node.kubernetes.io/out-of-service".into()],
            observed_at: Timestamp::now(),
            deadline: Some(Timestamp::now() + jiff::SignedDuration::from_secs(30)),
        };
        let out = Output {
            changes: vec![Change::Set {
                state,
                previous: None,
            }],
            ..Output::default()
        };
        shared.absorb(out, Timestamp::now());
        shared
    }

    fn result(version: Version, desired: AdminState, phase: ResultPhase) -> NodeResult {
        NodeResult {
            node: Some(NodeRef {
                name: "n".into(),
                uid: "u".into(),
                ..NodeRef::default()
            }),
            version: Some(version),
            desired: desired as i32,
            phase: phase as i32,
            reason: "boom".into(),
            ..NodeResult::default()
        }
    }

    #[test]
    fn every_repair_of_a_healthy_node_is_a_warning_event() {
        let shared = shared_with_node(Desired::None);
        let current = shared.current_with("u", |s| s.version).unwrap();
        let now = Timestamp::now();
        let mut repaired = result(current, AdminState::None, ResultPhase::Effective);
        repaired.repaired = true;
        for _ in 0..2 {
            let ev = handle(&shared, &repaired, now).unwrap();
            assert_eq!(ev.reason, "LoadBalancerAdminStateRepaired");
            assert!(ev.warning);
        }
        // The plain None every healthy node carries tells nothing.
        assert!(
            handle(
                &shared,
                &result(current, AdminState::None, ResultPhase::Effective),
                now
            )
            .is_none()
        );
    }

    /// N3: an EFFECTIVE Down, then the actuator reports drift (a repaired ACCEPTED of the
    /// same version): the coverage regresses, the gate writer is woken (an ACCEPTED status),
    /// and the repair's EFFECTIVE makes it EFFECTIVE again, told as a repair to Down.
    #[test]
    fn drift_regresses_an_effective_down_until_repaired() {
        let shared = shared_with_down_node();
        let current = shared.current_with("u", |s| s.version).unwrap();
        let now = Timestamp::now();
        let mut statuses = shared.subscribe_statuses();
        let ev = handle(
            &shared,
            &result(current, AdminState::Down, ResultPhase::Effective),
            now,
        )
        .unwrap();
        assert_eq!(ev.reason, "LoadBalancerAdminStateDown");
        let reached = |shared: &Shared| shared.reached("u").map(|(r, _)| r);
        let regressed = |shared: &Shared| shared.reached("u").unwrap().1;
        assert_eq!(reached(&shared), Some((current, ResultPhase::Effective)));
        while statuses.try_recv().is_ok() {}
        let mut drift = result(current, AdminState::Down, ResultPhase::Accepted);
        drift.repaired = true;
        assert!(handle(&shared, &drift, now).is_none());
        assert_eq!(reached(&shared), Some((current, ResultPhase::Accepted)));
        assert!(regressed(&shared));
        let woken = statuses.try_recv().unwrap();
        assert_eq!(woken.phase, ResultPhase::Accepted as i32);
        let mut repaired = result(current, AdminState::Down, ResultPhase::Effective);
        repaired.repaired = true;
        let ev = handle(&shared, &repaired, now).unwrap();
        assert_eq!(ev.reason, "LoadBalancerAdminStateRepaired");
        assert!(ev.note.contains("set back to Down"), "{}", ev.note);
        assert_eq!(reached(&shared), Some((current, ResultPhase::Effective)));
        assert!(!regressed(&shared));
        assert_eq!(
            statuses.try_recv().unwrap().phase,
            ResultPhase::Effective as i32
        );
    }

    #[test]
    fn only_current_versions_and_each_phase_once() {
        let shared = shared_with_down_node();
        let current = shared.current_with("u", |s| s.version).unwrap();
        let now = Timestamp::now();
        let old = Version { epoch: 3, seq: 99 };
        assert!(
            handle(
                &shared,
                &result(old, AdminState::Down, ResultPhase::Effective),
                now
            )
            .is_none(),
            "stale version"
        );
        assert!(
            handle(
                &shared,
                &result(current, AdminState::None, ResultPhase::Effective),
                now
            )
            .is_none(),
            "other state"
        );
        assert!(
            handle(
                &shared,
                &result(current, AdminState::Down, ResultPhase::Accepted),
                now
            )
            .is_none()
        );
        let ev = handle(
            &shared,
            &result(current, AdminState::Down, ResultPhase::Effective),
            now,
        )
        .unwrap();
        assert_eq!(ev.reason, "LoadBalancerAdminStateDown");
        assert!(!ev.warning);
        // A resync re-sends the same version: no second event.
        assert!(
            handle(
                &shared,
                &result(current, AdminState::Down, ResultPhase::Effective),
                now
            )
            .is_none()
        );
        let failed = handle(
            &shared,
            &result(current, AdminState::Down, ResultPhase::Failed),
            now,
        )
        .unwrap();
        assert_eq!(failed.reason, "LoadBalancerAdminStateUpdateFailed");
        assert!(failed.warning && failed.note.contains("boom"));
        let text = shared.metrics().encode();
        assert!(
            text.contains("cutover_signal_signal_to_effective_seconds_count 1\n"),
            "{text}"
        );
        assert!(
            text.contains("cutover_signal_notice_window_remaining_seconds_count 1\n"),
            "{text}"
        );
    }
}
