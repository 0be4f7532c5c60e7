//! The verdict of one run: the chaos soak's rules (tests/e2e `judge`: end state, late, left
//! down, changed twice, drain gate), fed with what the simulation observed, plus two rules
//! only the simulation can see exactly:
//!
//! - **one writer per LB**: at most one actuator owns an LB at a time, as the actuators' own
//!   state says (sampled every tick), except within [`Bounds::dual_owner_ms`]; and every ARM
//!   write that succeeded was sent by an actuator that owned the LB then, or landed at most
//!   [`Bounds::in_flight_ms`] after it stopped owning it while another held it (a write
//!   already on the wire; one landing later while nobody else held the LB is measured, not
//!   judged: it wrote over no one). Both are measured.
//! - **only the leader writes Nodes**: a signal-svc replica's Node write (taints, the drain
//!   gate) completes only while it holds the Lease, except within [`Bounds::fence_ms`] of
//!   losing it (a write sent before).
//!
//! Pure: plain values in, violations out.

use crate::observe::{ArmWrite, Observed};
use crate::run::Applied;
use crate::schedule::{FaultKind, Ms, SIGNALS};
use cutover_e2e::chaos::schedule::FaultKind as SoakKind;
use cutover_e2e::judge::chaos::{self as rules, Active, Intent, Rule, Violation};
use cutover_e2e::judge::gate::GateChange;
use cutover_e2e::judge::leader::leader_only;
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
    let (dual, late, v) = one_writer(&o.ownership, &ungranted, &o.arm_writes, o.end_ms, bounds);
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

/// Ownership intervals per (LB, host): `[from, until)`.
fn intervals(
    ownership: &[(Ms, String, String, bool)],
    end: Ms,
) -> BTreeMap<(String, String), Vec<(Ms, Ms)>> {
    let mut open: BTreeMap<(String, String), Ms> = BTreeMap::new();
    let mut out: BTreeMap<(String, String), Vec<(Ms, Ms)>> = BTreeMap::new();
    for (t, host, lb, owns) in ownership {
        let k = (lb.clone(), host.clone());
        match (*owns, open.remove(&k)) {
            (true, None) => {
                open.insert(k, *t);
            }
            (true, Some(from)) => {
                open.insert(k, from);
            }
            (false, Some(from)) => out.entry(k).or_default().push((from, *t)),
            (false, None) => {}
        }
    }
    for (k, from) in open {
        out.entry(k).or_default().push((from, end));
    }
    out
}

/// The LB name the ungranted mode is recorded under (it covers every LB).
const ANY_LB: &str = "*";

/// The **one writer per LB** rule: (longest time two actuators owned one LB by grant, latest
/// a successful write completed after its sender stopped owning, violations). A replica
/// without any grant (`ungranted`, LB [`ANY_LB`]) may write only while no other holds a grant
/// for that LB.
pub fn one_writer(
    ownership: &[(Ms, String, String, bool)],
    ungranted: &[(Ms, String, String, bool)],
    writes: &[ArmWrite],
    end: Ms,
    b: &Bounds,
) -> (Ms, Ms, Vec<Violation>) {
    let owned = intervals(ownership, end);
    let free = intervals(ungranted, end);
    let within = |spans: Option<&Vec<(Ms, Ms)>>, t: Ms| {
        spans.is_some_and(|s| s.iter().any(|&(f, u)| f <= t && t < u))
    };
    let mut out = Vec::new();
    let mut dual = 0;
    let keys: Vec<&(String, String)> = owned.keys().collect();
    for (i, a) in keys.iter().enumerate() {
        for bkey in &keys[i + 1..] {
            if a.0 != bkey.0 {
                continue;
            }
            for &(f1, u1) in &owned[*a] {
                for &(f2, u2) in &owned[*bkey] {
                    let overlap = u1.min(u2).saturating_sub(f1.max(f2));
                    dual = dual.max(overlap);
                    if overlap > b.dual_owner_ms {
                        out.push(Violation {
                            rule: Rule::OneWriter,
                            text: format!(
                                "{} owned by {} and {} together for {overlap} ms from {} ms (bound {} ms)",
                                a.0, a.1, bkey.1, f1.max(f2), b.dual_owner_ms
                            ),
                        });
                    }
                }
            }
        }
    }
    let mut late = 0;
    for w in writes.iter().filter(|w| (200..300).contains(&w.status)) {
        let k = (w.lb.clone(), w.writer.clone());
        let spans = owned.get(&k).map_or(&[][..], Vec::as_slice);
        let owned_at = spans.iter().any(|&(f, u)| f <= w.at && w.at < u);
        if owned_at {
            continue;
        }
        if within(free.get(&(ANY_LB.to_owned(), w.writer.clone())), w.at) {
            let granted_elsewhere: Vec<&str> = owned
                .iter()
                .filter(|((lb, h), s)| *lb == w.lb && *h != w.writer && within(Some(s), w.at))
                .map(|((_, h), _)| h.as_str())
                .collect();
            if granted_elsewhere.is_empty() {
                continue;
            }
            out.push(Violation {
                rule: Rule::OneWriter,
                text: format!(
                    "{} written by {} at {} ms without any grant while {} held it",
                    w.lb,
                    w.writer,
                    w.at,
                    granted_elsewhere.join(", ")
                ),
            });
            continue;
        }
        let lost = spans
            .iter()
            .filter(|&&(_, u)| u <= w.at)
            .map(|&(_, u)| u)
            .max();
        // Another replica held the LB between the writer's loss and the write landing: two
        // writers (the etag refuses the late one only if the new owner wrote first).
        let overlapped = lost.is_some_and(|l| {
            owned.iter().any(|((lb, h), s)| {
                *lb == w.lb && *h != w.writer && s.iter().any(|&(f, u)| f < w.at && u > l)
            })
        });
        match lost {
            Some(l) if !overlapped || w.at - l <= b.in_flight_ms => late = late.max(w.at - l),
            _ => out.push(Violation {
                rule: Rule::OneWriter,
                text: format!(
                    "{} written by {} at {} ms ({}) without owning it{}",
                    w.lb,
                    w.writer,
                    w.at,
                    w.status,
                    lost.map_or(" ever before".to_owned(), |l| format!(
                        " ({} ms after it stopped, while another held it)",
                        w.at - l
                    ))
                ),
            }),
        }
    }
    (dual, late, out)
}

/// The **tool answers** rule (issue 26: the drain gate through the actuator): every entry a
/// `GetNodeAdminState(fresh)` answer reports Down or None was in that state in ARM, with its
/// operation complete, at some moment between the question and the answer (within `slack`).
/// Entries answered without a state (an operation running) say nothing.
pub fn tool_answers(
    reads: &[crate::tool::ToolRead],
    arm: &[(Ms, cutover_e2e::judge::EntryKey, State, bool)],
    nodes: &[aks_fixture::Node],
    slack: Ms,
) -> Vec<Violation> {
    let norm = |k: &cutover_e2e::judge::EntryKey| {
        (
            k.0.to_ascii_lowercase(),
            k.1.to_ascii_lowercase(),
            k.2.to_ascii_lowercase(),
        )
    };
    let mut history: BTreeMap<_, Vec<(Ms, State)>> = BTreeMap::new();
    for (t, k, s, _) in arm {
        history.entry(norm(k)).or_default().push((*t, *s));
    }
    let mut out = Vec::new();
    for r in reads {
        let (from, to) = (r.sent.saturating_sub(slack), r.answered + slack);
        for (k, said) in &r.entries {
            let changes = history.get(&norm(k)).map_or(&[][..], Vec::as_slice);
            // The state in force at `from`, and every state it took until `to`.
            let at_from = changes
                .iter()
                .take_while(|(t, _)| *t <= from)
                .last()
                .map_or(State::None, |(_, s)| *s);
            let had: Vec<State> = std::iter::once(at_from)
                .chain(
                    changes
                        .iter()
                        .filter(|(t, _)| *t > from && *t <= to)
                        .map(|(_, s)| *s),
                )
                .collect();
            if !had.contains(said) {
                out.push(Violation {
                    rule: Rule::DrainGate,
                    text: format!(
                        "GetNodeAdminState(fresh) from {} about {} said {said:?} for {}/{} {} (asked {} ms, answered {} ms) while ARM had {had:?}",
                        r.host,
                        nodes.get(r.node).map_or("?", |n| n.name.as_str()),
                        k.0,
                        k.1,
                        k.2,
                        r.sent,
                        r.answered
                    ),
                });
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arm(at: Ms, lb: &str, writer: &str) -> ArmWrite {
        ArmWrite {
            at,
            lb: lb.into(),
            writer: writer.into(),
            status: 201,
        }
    }

    fn own(t: Ms, host: &str, owns: bool) -> (Ms, String, String, bool) {
        (t, host.into(), "kubernetes".into(), owns)
    }

    #[test]
    fn a_clean_handover_has_no_dual_owner_and_writes_while_owned_pass() {
        let o = [
            own(0, "a", true),
            own(4_000, "a", false),
            own(5_000, "b", true),
        ];
        let w = [
            arm(100, "kubernetes", "a"),
            arm(4_500, "kubernetes", "a"),
            arm(9_000, "kubernetes", "b"),
        ];
        let (dual, late, v) = one_writer(&o, &[], &w, 10_000, &Bounds::default());
        assert_eq!((dual, late), (0, 500));
        assert!(v.is_empty(), "{v:?}");
    }

    #[test]
    fn overlapping_owners_and_writes_without_ownership_are_judged() {
        let o = [
            own(0, "a", true),
            own(3_000, "b", true),
            own(3_400, "a", false),
        ];
        let (dual, _, v) = one_writer(&o, &[], &[], 10_000, &Bounds::default());
        assert_eq!(dual, 400);
        assert_eq!(v.len(), 1, "{v:?}");
        // A write long after losing the LB while another held it, and one by a replica that
        // never owned it.
        let o = [
            own(0, "a", true),
            own(1_000, "a", false),
            own(4_000, "b", true),
        ];
        let w = [arm(9_000, "kubernetes", "a"), arm(9_500, "kubernetes", "c")];
        let (_, _, v) = one_writer(&o, &[], &w, 10_000, &Bounds::default());
        assert_eq!(v.len(), 2, "{v:?}");
        // The same late write with nobody else holding the LB is measured only (dst seed
        // 4105: a frozen replica's PUT held in the network 4 s, landing after its grant had
        // lapsed, before anyone else had it).
        let o = [own(0, "a", true), own(1_000, "a", false)];
        let (_, late, v) = one_writer(&o, &[], &w[..1], 10_000, &Bounds::default());
        assert!(v.is_empty(), "{v:?}");
        assert_eq!(late, 8_000);
        // A refused write (412, 429) is not a write.
        let mut refused = arm(9_000, "kubernetes", "a");
        refused.status = 412;
        assert!(
            one_writer(&o, &[], &[refused], 10_000, &Bounds::default())
                .2
                .is_empty()
        );
    }

    #[test]
    fn an_ungranted_replica_may_write_only_what_nobody_holds() {
        let free = [(0, "c".to_owned(), ANY_LB.to_owned(), true)];
        let w = [arm(500, "kubernetes", "c")];
        assert!(
            one_writer(&[], &free, &w, 10_000, &Bounds::default())
                .2
                .is_empty()
        );
        let o = [own(0, "a", true)];
        let (_, _, v) = one_writer(&o, &free, &w, 10_000, &Bounds::default());
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(
            v[0].text.contains("without any grant while a held it"),
            "{v:?}"
        );
    }

    #[test]
    fn a_tool_answer_must_match_arm_between_question_and_answer() {
        use crate::tool::ToolRead;
        let entry = cutover_e2e::judge::key("kubernetes", "kubernetes", "/NIC/ipconfig1");
        // ARM: Down effective at 1000 ms, None again at 3000 ms.
        let arm = vec![
            (1000, entry.clone(), State::Down, false),
            (3000, entry.clone(), State::None, false),
        ];
        let read = |sent, answered, state| ToolRead {
            sent,
            answered,
            node: 0,
            host: "actuator-1",
            // The answer's names may differ in case from ARM's log.
            entries: vec![(
                cutover_e2e::judge::key("Kubernetes", "kubernetes", "/nic/IPCONFIG1"),
                state,
            )],
        };
        let judge = |r: ToolRead| tool_answers(&[r], &arm, &[], 10).len();
        // Down before ARM applied it: the early gate of issue 26.
        assert_eq!(judge(read(500, 900, State::Down)), 1);
        // Down while (or just as) it was effective.
        assert_eq!(judge(read(1500, 1600, State::Down)), 0);
        assert_eq!(judge(read(900, 995, State::Down)), 0);
        // None read across the restore: it held at some moment in between.
        assert_eq!(judge(read(2900, 3100, State::None)), 0);
        // None while ARM said Down throughout.
        assert_eq!(judge(read(2000, 2500, State::None)), 1);
        // Nothing known of an entry means the simulator's initial None.
        let other = ToolRead {
            entries: vec![(
                cutover_e2e::judge::key("kubernetes", "kubernetes", "/other"),
                State::Down,
            )],
            ..read(0, 10, State::Down)
        };
        assert_eq!(judge(other), 1);
    }
}
