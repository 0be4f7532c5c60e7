//! The verdict of one run: the chaos soak's rules (tests/e2e `judge`: end state, late, left
//! down, changed twice, drain gate), fed with what the simulation observed, plus rules the
//! simulation sees exactly, each shared with the soak, which judges them from its own records:
//!
//! - **one writer per LB** (`cutover_e2e::judge::writer`), from the actuators' own state
//!   sampled every tick and ARM's writes by simulated host, within [`Bounds::dual_owner_ms`]
//!   and [`Bounds::in_flight_ms`];
//! - **only the leader writes Nodes** (`cutover_e2e::judge::leader`): a signal-svc replica's
//!   Node write (taints, the drain gate) completes only while it holds the Lease, except
//!   within [`Bounds::fence_ms`] of losing it (a write sent before);
//! - **tool answers** (`cutover_e2e::judge::tool`): every `GetNodeAdminState(fresh)` answer
//!   held to ARM within [`Bounds::tool_read_ms`].
//!
//! Pure: plain values in, violations out.

use crate::observe::Observed;
use crate::run::Applied;
use crate::schedule::{FaultKind, Ms, SIGNALS};
use cutover_e2e::chaos::schedule::FaultKind as SoakKind;
use cutover_e2e::judge::chaos::{self as rules, Active, Intent, Rule, Violation};
use cutover_e2e::judge::gate::GateChange;
use cutover_e2e::judge::leader::leader_only;
use cutover_e2e::judge::tool::tool_answers;
use cutover_e2e::judge::writer::{ANY_LB, WriterBounds, one_writer};
use cutover_e2e::judge::{Change, State};
use jiff::{SignedDuration, Timestamp};
use std::collections::BTreeMap;

/// The stated bounds of the simulation's own rules.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    pub dual_owner_ms: Ms,
    pub in_flight_ms: Ms,
    pub fence_ms: Ms,
    /// How far outside `[asked, answered]` the ARM state a tool answer reports may lie.
    pub tool_read_ms: Ms,
}

impl Default for Bounds {
    fn default() -> Self {
        Bounds {
            // The leader hands an LB over only after the old grant has lapsed by its holder's
            // clock: no overlap, beyond a sampling tick and a message's latency.
            dual_owner_ms: 50,
            // A PUT sent while owned completes after ARM's latency (plus a frozen host's
            // held messages, which the etag then refuses if another wrote meanwhile).
            in_flight_ms: 2_000,
            // A request sent before the Lease was lost, delayed by injected API latency.
            fence_ms: 2_000,
            // ARM's changes are stamped at the end of the step they appear in (one 5 ms
            // tick), and an answer's reads happen between its question and its answer.
            tool_read_ms: 10,
        }
    }
}

/// The soak's bounds with the simulation's settings (arm-sim's default latencies, 300 ms
/// operations, the actuators' 10 s self-heal).
pub fn soak_bounds() -> rules::Bounds {
    let t = arm_sim::faults::Tuning {
        completion_delay_ms: 300,
        ..Default::default()
    };
    rules::Bounds {
        write_ms: t.latency_ms.put + t.completion_delay_ms + t.latency_ms.poll,
        slack_ms: 1000 + 2 * t.latency_ms.get,
        retry_after_ms: 1000 * t.retry_after_secs.max(t.lock_retry_after_secs),
        backoff_cap_ms: 30_000,
        signal_failover_ms: 6000,
        signal_replicas: 2,
        actuator_failover_ms: 10_000,
        watch_recovery_ms: 5000,
        self_heal_ms: 10_000,
    }
}

/// What the simulation's own rules measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    /// The longest time two actuators both owned one LB.
    pub dual_owner_ms: Ms,
    /// The latest a successful ARM write completed after its sender stopped owning the LB.
    pub write_after_loss_ms: Ms,
    /// The latest a replica's Node write completed after it lost the Lease.
    pub late_fence_ms: Ms,
    pub arm_writes: usize,
    pub node_writes: usize,
    /// Tool answers judged, and the entry states in them.
    pub tool_answers: usize,
    pub tool_entries: usize,
    /// Changes of what the actuators accepted, judged never to go backwards.
    pub accepted: usize,
}

/// One change of what an actuator process accepted: the assignment's (epoch, generation)
/// or a node's stream state (epoch, seq), `what` naming which.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub at: Ms,
    /// The process (host and when it started): a restarted one starts from nothing.
    pub life: String,
    pub what: String,
    pub version: (u64, u64),
}

/// The **accepted never goes backwards** rule: within one actuator process, each
/// assignment and each node's stream state it accepted is never older than one it accepted
/// before ((epoch, generation) and (epoch, seq), in order). Returns (changes judged,
/// violations).
pub fn accepted_forward(accepted: &[Accepted]) -> (usize, Vec<Violation>) {
    // (process, what) -> (when, version) last accepted.
    let mut last: BTreeMap<(&str, &str), &Accepted> = BTreeMap::new();
    let mut out = Vec::new();
    for a in accepted {
        let key = (a.life.as_str(), a.what.as_str());
        if let Some(before) = last.get(&key)
            && a.version < before.version
        {
            out.push(Violation {
                rule: Rule::AcceptedBackwards,
                text: format!(
                    "{} accepted {} at {:?} at {} ms after {:?} at {} ms",
                    a.life, a.what, a.version, a.at, before.version, before.at
                ),
            });
        }
        last.insert(key, a);
    }
    (accepted.len(), out)
}

pub struct Verdict {
    pub soak: rules::Verdict,
    pub measured: Measured,
    pub violations: Vec<Violation>,
}

fn ts(ms: Ms) -> Timestamp {
    Timestamp::UNIX_EPOCH + SignedDuration::from_millis(ms as i64)
}

/// The soak's fault kinds that cost what a simulated fault costs (partitions cost what a
/// stopped process costs on the side that is cut off).
fn as_soak(a: &Applied, lbs: &[String]) -> Vec<Active> {
    let f = &a.fault;
    let active = |kind: SoakKind, param: u64, lb: Option<String>| Active {
        kind,
        start: ts(a.start),
        end: ts(a.end.max(a.start)),
        param,
        lb,
    };
    let stop = |h: &str| {
        if SIGNALS.contains(&h) {
            Some(SoakKind::SignalStop)
        } else if h.starts_with("actuator") {
            Some(SoakKind::ActuatorStop)
        } else {
            None
        }
    };
    let retry_span = |count: u32| Active {
        end: ts(a.start + u64::from(count) * 1000),
        ..active(SoakKind::ArmThrottle, 0, None)
    };
    match f.kind {
        FaultKind::Partition | FaultKind::SlowLink | FaultKind::Freeze => f
            .hosts
            .iter()
            .filter_map(|h| stop(h))
            .map(|k| active(k, 0, None))
            .collect(),
        FaultKind::Crash => match stop(f.hosts[0]) {
            Some(SoakKind::SignalStop) => vec![active(SoakKind::SignalStop, 0, None)],
            Some(_) => vec![active(SoakKind::ActuatorKill, 0, None)],
            None => vec![],
        },
        FaultKind::LeaseOutage => vec![
            active(SoakKind::LeaseOutage, 0, None),
            active(SoakKind::SignalStop, 0, None),
        ],
        FaultKind::KubeLatency => vec![active(SoakKind::KubeLatency, f.param, None)],
        FaultKind::KubeFailures => vec![active(SoakKind::KubeFailures, u64::from(f.count), None)],
        FaultKind::WatchDrop => vec![active(SoakKind::WatchDrop, 0, None)],
        FaultKind::WatchExpired => vec![active(SoakKind::WatchExpired, 0, None)],
        FaultKind::ArmThrottle | FaultKind::ArmServerErrors => vec![retry_span(f.count)],
        FaultKind::ArmOutage | FaultKind::ArmSlowOps => vec![active(SoakKind::ArmOutage, 0, None)],
        FaultKind::ArmFailedOps | FaultKind::ArmLockConflicts | FaultKind::ArmStaleWrites => {
            vec![active(SoakKind::ArmFailedOps, u64::from(f.count), None)]
        }
        FaultKind::OutsideWrite => match f.node {
            Some((_, true)) => vec![active(SoakKind::OutsideDown, 0, None)],
            _ => vec![active(SoakKind::OutsideNone, 0, None)],
        },
        FaultKind::LbRemoved => {
            let lb = lbs.get(f.param as usize % lbs.len().max(1)).cloned();
            vec![active(SoakKind::LbRemoved, 0, lb)]
        }
    }
}

/// Judges a run.
pub fn judge(
    cluster: &aks_fixture::Cluster,
    o: &Observed,
    applied: &[Applied],
    quiet_from: Ms,
    bounds: &Bounds,
) -> Verdict {
    let lbs = crate::observe::lbs(cluster);
    let faults: Vec<Active> = applied
        .iter()
        .filter(|a| a.skipped.is_none())
        .flat_map(|a| as_soak(a, &lbs))
        .collect();
    let log: Vec<Change> = o
        .arm
        .iter()
        .map(|(t, k, s, outside)| Change {
            time: ts(*t),
            lb: k.0.clone(),
            pool: k.1.clone(),
            target: k.2.clone(),
            state: *s,
            outside: *outside,
        })
        .collect();
    let intents: Vec<Intent> = o
        .intents
        .iter()
        .map(|(t, n, down)| Intent {
            node: cluster.nodes[*n].name.clone(),
            at: ts(*t),
            state: if *down { State::Down } else { State::None },
        })
        .collect();
    let gate: Vec<GateChange> = o
        .gate
        .iter()
        .map(|(t, node, status, reason)| GateChange {
            node: node.clone(),
            at: ts(*t),
            status: status.clone(),
            reason: reason.clone(),
        })
        .collect();
    let soak_bounds = soak_bounds();
    let inputs = rules::Inputs {
        cluster,
        log: &log,
        intents: &intents,
        faults: &faults,
        epochs: &[],
        end_entries: &o.end,
        gate: &gate,
        bounds: &soak_bounds,
        start: ts(0),
        end: ts(o.end_ms),
    };
    let soak = rules::judge(&inputs);
    let mut violations = soak.violations.clone();
    let mut measured = Measured {
        arm_writes: o.arm_writes.len(),
        node_writes: o.kube_writes.len(),
        ..Measured::default()
    };
    let ungranted: Vec<(Ms, String, String, bool)> = o
        .ungranted
        .iter()
        .map(|(t, h, u)| (*t, h.clone(), ANY_LB.to_owned(), *u))
        .collect();
    let writer_bounds = WriterBounds {
        dual_owner_ms: bounds.dual_owner_ms,
        in_flight_ms: bounds.in_flight_ms,
    };
    let (dual, late, v) = one_writer(
        &o.ownership,
        &ungranted,
        &o.arm_writes,
        o.end_ms,
        &writer_bounds,
    );
    measured.dual_owner_ms = dual;
    measured.write_after_loss_ms = late;
    violations.extend(v);
    measured.tool_answers = o.tool_reads.len();
    measured.tool_entries = o.tool_reads.iter().map(|r| r.entries.len()).sum();
    violations.extend(tool_answers(
        &o.tool_reads,
        &o.arm,
        &cluster.nodes,
        bounds.tool_read_ms,
    ));
    let (accepted, v) = accepted_forward(&o.accepted);
    measured.accepted = accepted;
    violations.extend(v);
    let (late, v) = leader_only(&o.kube_writes, bounds.fence_ms);
    measured.late_fence_ms = late;
    violations.extend(v);
    let _ = quiet_from;
    Verdict {
        soak,
        measured,
        violations,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(at: Ms, life: &str, what: &str, version: (u64, u64)) -> Accepted {
        Accepted {
            at,
            life: life.into(),
            what: what.into(),
            version,
        }
    }

    #[test]
    fn what_an_actuator_accepted_may_only_move_forward_within_its_life() {
        let ok = [
            acc(0, "a", "assignment", (1, 3)),
            acc(10, "a", "assignment", (1, 4)),
            // A new epoch restarts the generation: newer all the same.
            acc(20, "a", "assignment", (2, 0)),
            acc(30, "a", "node u1", (2, 7)),
            // A restarted process starts from nothing.
            acc(40, "a (restarted)", "assignment", (1, 0)),
        ];
        assert_eq!(accepted_forward(&ok), (5, Vec::new()));
        // N1's loss: the same epoch re-taken with its sequence back at 0.
        let back = [
            acc(0, "a", "node u1", (3, 9)),
            acc(5, "a", "node u1", (3, 1)),
        ];
        let (_, v) = accepted_forward(&back);
        assert_eq!(v.len(), 1, "{v:?}");
        assert_eq!(v[0].rule, Rule::AcceptedBackwards);
    }
}
