//! The **drain gate** rule: the Node condition `LoadBalancerAdminStateDown` says `True` only
//! while ARM has `Down` in effect on every entry of the node, and `False` only while none is
//! `Down` (issue 26: "the drain gate says so only while ARM shows every entry of the node in
//! that state with its operation complete"). A drainer acts on the condition at once, so the
//! moment judged is when the API server committed it (kube-sim's condition log), not when a
//! slow watcher saw it.
//!
//! What may make the gate stale, and for how long:
//! - an outside write (a reset, an LB re-created without admin states) under a `True` or
//!   `False`: found on the actuator's next self-heal read, so the condition must leave that
//!   status within the self-heal interval plus the transition allowance of the write;
//! - a load balancer removed (by its owner) under a `True`: it keeps a cut pending once read
//!   (design, "The drain gate"), found on the next self-heal read as an outside write is; an
//!   absent load balancer has no entry that could be `Down`, so it never contradicts `False`;
//! - cutover's own write of the node's next desired state (the drainer's node came back or
//!   left again): the condition must leave the old status within the allowance of the intent
//!   (signal-svc writes `Unknown` when it sees the change, the actuator's write may be faster);
//! - nothing else: a status committed while an entry was already out of it by cutover's own
//!   write is wrong from its first instant (it was never true).

use super::chaos::{
    Inputs, Rule, Violation, allowance, by_entry, per_node, repair_allowance, state_at,
};
use super::{Change, State, node_entries};
use jiff::{SignedDuration, Timestamp};

/// The condition as committed by the API server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateChange {
    pub node: String,
    pub at: Timestamp,
    /// `True`, `False`, `Unknown`, or empty once removed (the Node deleted).
    pub status: String,
    pub reason: String,
}

/// What the rule measured.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GateStats {
    /// Periods of `True` and of `False` judged.
    pub true_periods: usize,
    pub false_periods: usize,
    /// The longest time the gate said a state some entry was not in (allowed or not).
    pub longest_stale: SignedDuration,
}

/// The state a status claims, if any.
fn claimed(status: &str) -> Option<State> {
    match status {
        "True" => Some(State::Down),
        "False" => Some(State::None),
        _ => None,
    }
}

/// Applies the rule to every node's committed gate periods.
pub fn drain_gate(i: &Inputs<'_>) -> (GateStats, Vec<Violation>) {
    let changes = by_entry(i.log);
    let intents = per_node(i.intents);
    let mut stats = GateStats::default();
    let mut out = Vec::new();
    let mut by_node: std::collections::BTreeMap<&str, Vec<&GateChange>> = Default::default();
    for g in i.gate {
        by_node.entry(g.node.as_str()).or_default().push(g);
    }
    for (node, list) in by_node {
        let entries = node_entries(i.cluster, node);
        let node_intents = intents.get(node).cloned().unwrap_or_default();
        // Whether cutover was asked for `state` at some moment in `[from, to]`: its write for
        // that intent may land then even when a later intent superseded it (rapid churn).
        let asked_for = |state: State, from: Timestamp, to: Timestamp| {
            let mut current = node_intents
                .iter()
                .take_while(|x| x.at <= from)
                .last()
                .map(|x| x.state);
            if current == Some(state) {
                return true;
            }
            for x in node_intents.iter().filter(|x| x.at > from && x.at <= to) {
                current = Some(x.state);
                if current == Some(state) {
                    return true;
                }
            }
            false
        };
        for (k, g) in list.iter().enumerate() {
            let Some(want) = claimed(&g.status) else {
                continue;
            };
            let from = g.at;
            let until = list.get(k + 1).map_or(i.end, |n| n.at);
            if want == State::Down {
                stats.true_periods += 1;
            } else {
                stats.false_periods += 1;
            }
            for e in &entries {
                let real = changes.get(e).map_or(&[][..], Vec::as_slice);
                let log = with_absence(real, &e.0, i.faults);
                for (cause, wrong_from, wrong_until) in wrong_periods(&log, want, from, until) {
                    let stale = wrong_until.duration_since(wrong_from);
                    stats.longest_stale = stats.longest_stale.max(stale);
                    let verdict = match cause {
                        Some(c) if c.outside => {
                            let bound = repair_allowance(i.bounds, i.faults, c.time);
                            (wrong_until > c.time + bound).then(|| {
                                format!(
                                    "outside {:?} at {} not reflected within {:.1} s",
                                    c.state,
                                    c.time,
                                    bound.as_secs_f64()
                                )
                            })
                        }
                        Some(c) if wrong_from > from && asked_for(c.state, from, c.time) => {
                            let bound = allowance(i.bounds, i.faults, c.time);
                            (wrong_until > c.time + bound).then(|| {
                                format!("kept after cutover wrote {:?} at {} for the next desired state (allowance {:.1} s)", c.state, c.time, bound.as_secs_f64())
                            })
                        }
                        _ => Some("committed while ARM did not have it in effect".to_string()),
                    };
                    if let Some(why) = verdict {
                        out.push(Violation {
                            rule: Rule::DrainGate,
                            text: format!(
                                "{node} said {} ({}) from {wrong_from} to {wrong_until} ({:.2} s) while {}/{} {} was not {want:?}: {why}",
                                g.status,
                                g.reason,
                                stale.as_secs_f64(),
                                e.0,
                                e.1,
                                e.2,
                            ),
                        });
                    }
                }
            }
        }
    }
    (stats, out)
}

/// The entry's log with its load balancer's removals in it: while absent it counts as `None`
/// for a `False` and as an outside write of `None` for a `True` (see the module doc), back to
/// its logged state when re-created (arm-sim logs the re-creation's cleared admin states).
fn with_absence(log: &[Change], lb: &str, faults: &[super::chaos::Active]) -> Vec<Change> {
    let mut out = log.to_vec();
    for f in faults.iter().filter(|f| f.lb.as_deref() == Some(lb)) {
        let Some(template) = log.first() else {
            continue;
        };
        let absent = |time, state| Change {
            time,
            state,
            outside: true,
            ..template.clone()
        };
        let back = log
            .iter()
            .take_while(|c| c.time <= f.end)
            .last()
            .map_or(State::None, |c| c.state);
        // Gone: nothing there can be Down (for a True, a change away from Down).
        out.push(absent(f.start, State::None));
        out.push(absent(f.end, back));
    }
    out.sort_by_key(|c| c.time);
    out
}

/// The parts of `[from, until)` in which the entry (its effective `log`) is not in `want`,
/// each with the change that took it out (None: it never was in `want`).
fn wrong_periods(
    log: &[Change],
    want: State,
    from: Timestamp,
    until: Timestamp,
) -> Vec<(Option<&Change>, Timestamp, Timestamp)> {
    let mut out = Vec::new();
    let last_before = log.iter().take_while(|c| c.time <= from).last();
    let mut open = (state_at(log, from) != want).then_some((last_before, from));
    for c in log.iter().filter(|c| c.time > from && c.time < until) {
        match (open, c.state == want) {
            (Some((cause, start)), true) => {
                out.push((cause, start, c.time));
                open = None;
            }
            (None, false) => open = Some((Some(c), c.time)),
            _ => {}
        }
    }
    if let Some((cause, start)) = open {
        out.push((cause, start, until));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::chaos::{Bounds, Inputs};
    use super::*;
    use aks_fixture::Cluster;

    fn at(ms: i64) -> Timestamp {
        Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn bounds() -> Bounds {
        Bounds {
            write_ms: 1000,
            slack_ms: 1000,
            retry_after_ms: 1000,
            backoff_cap_ms: 5000,
            signal_failover_ms: 6000,
            signal_replicas: 2,
            actuator_failover_ms: 10_000,
            watch_recovery_ms: 3000,
            self_heal_ms: 10_000,
        }
    }

    fn cluster() -> Cluster {
        aks_fixture::preset("aks").expect("the aks preset")
    }

    fn changes(c: &Cluster, node: &str, ms: i64, state: State, outside: bool) -> Vec<Change> {
        node_entries(c, node)
            .into_iter()
            .map(|(lb, pool, target)| Change {
                time: at(ms),
                lb,
                pool,
                target,
                state,
                outside,
            })
            .collect()
    }

    fn gate(node: &str, ms: i64, status: &str) -> GateChange {
        GateChange {
            node: node.into(),
            at: at(ms),
            status: status.into(),
            reason: String::new(),
        }
    }

    fn judge(
        c: &Cluster,
        log: &[Change],
        intents: &[super::super::chaos::Intent],
        gate: &[GateChange],
    ) -> Vec<Violation> {
        let b = bounds();
        let i = Inputs {
            cluster: c,
            log,
            intents,
            faults: &[],
            epochs: &[],
            end_entries: &[],
            gate,
            bounds: &b,
            start: at(0),
            end: at(120_000),
        };
        drain_gate(&i).1
    }

    fn intent(node: &str, ms: i64, state: State) -> super::super::chaos::Intent {
        super::super::chaos::Intent {
            node: node.into(),
            at: at(ms),
            state,
        }
    }

    #[test]
    fn true_after_the_cut_is_effective_and_unknown_before_the_restore_pass() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let mut log = changes(&c, &n, 2_000, State::Down, false);
        log.extend(changes(&c, &n, 12_000, State::None, false));
        let intents = [intent(&n, 0, State::Down), intent(&n, 10_000, State::None)];
        let g = [
            gate(&n, 100, "Unknown"),
            gate(&n, 2_300, "True"),
            gate(&n, 10_200, "Unknown"),
            gate(&n, 12_300, "False"),
        ];
        assert_eq!(judge(&c, &log, &intents, &g), vec![]);
    }

    /// The bug class of issue 26 ("the gate through the actuator answers before ARM does"):
    /// `True` before the operation made `Down` effective.
    #[test]
    fn true_before_the_cut_is_effective_is_a_violation() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let log = changes(&c, &n, 8_000, State::Down, false);
        let intents = [intent(&n, 0, State::Down)];
        let v = judge(&c, &log, &intents, &[gate(&n, 300, "True")]);
        assert!(!v.is_empty(), "True at 0.3 s, Down effective at 8 s");
        assert!(v.iter().all(|v| v.rule == Rule::DrainGate));
    }

    /// N3: an outside writer resets an entry of a cut node; the gate must leave `True` within
    /// the self-heal interval plus the allowance, not stay `True` for good.
    #[test]
    fn an_outside_reset_under_true_must_be_reflected_within_self_heal() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let mut log = changes(&c, &n, 2_000, State::Down, false);
        let one = changes(&c, &n, 20_000, State::None, true).remove(0);
        log.push(one);
        let intents = [intent(&n, 0, State::Down)];
        let quick = [gate(&n, 2_300, "True"), gate(&n, 25_000, "Unknown")];
        assert_eq!(judge(&c, &log, &intents, &quick), vec![]);
        let never = [gate(&n, 2_300, "True")];
        assert_eq!(
            judge(&c, &log, &intents, &never).len(),
            1,
            "True for 100 s over a None entry"
        );
    }

    /// A node that comes back: the gate may lag cutover's own restore by the allowance, no
    /// more.
    #[test]
    fn true_kept_long_after_the_restore_is_a_violation() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let mut log = changes(&c, &n, 2_000, State::Down, false);
        log.extend(changes(&c, &n, 12_000, State::None, false));
        let intents = [intent(&n, 0, State::Down), intent(&n, 10_000, State::None)];
        let g = [gate(&n, 2_300, "True"), gate(&n, 60_000, "False")];
        assert!(!judge(&c, &log, &intents, &g).is_empty());
    }

    /// A soak found this: an LB removed while its node was cut, the node restored while it was
    /// gone (an absent LB counts as done for `None`), `False` committed before the LB came
    /// back without admin states. Nothing was `Down` anywhere: no violation. A `True` kept
    /// over the absence must still drop within the self-heal bound.
    #[test]
    fn an_absent_load_balancer_never_contradicts_false_and_must_end_a_true() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let entries = node_entries(&c, &n);
        let lb = entries[0].0.clone();
        let mut log = changes(&c, &n, 2_000, State::Down, false);
        log.extend(
            changes(&c, &n, 40_000, State::None, false)
                .into_iter()
                .filter(|x| x.lb != lb),
        );
        // arm-sim logs the re-creation's cleared admin states as outside writes.
        log.extend(
            changes(&c, &n, 45_000, State::None, true)
                .into_iter()
                .filter(|x| x.lb == lb),
        );
        let removal = super::super::chaos::Active {
            kind: crate::chaos::schedule::FaultKind::LbRemoved,
            start: at(30_000),
            end: at(45_000),
            param: 0,
            lb: Some(lb),
        };
        let intents = [intent(&n, 0, State::Down), intent(&n, 38_000, State::None)];
        let b = bounds();
        let g = [
            gate(&n, 2_300, "True"),
            gate(&n, 38_100, "Unknown"),
            gate(&n, 40_300, "False"),
        ];
        let run = |g: &[GateChange]| {
            drain_gate(&Inputs {
                cluster: &c,
                log: &log,
                intents: &intents,
                faults: std::slice::from_ref(&removal),
                epochs: &[],
                end_entries: &[],
                gate: g,
                bounds: &b,
                start: at(0),
                end: at(120_000),
            })
            .1
        };
        assert_eq!(run(&g), vec![]);
        let stuck = [gate(&n, 2_300, "True")];
        assert!(
            !run(&stuck).is_empty(),
            "True over an absent LB and a restore, for good"
        );
    }
    /// Seen in the whole-service simulation (`dst --heavy` seed 3100): the node left and came
    /// back within 155 ms while the API link was slow; the cut for the first intent landed
    /// after the second, 85 ms before the condition left `False`. Cutover's own write for an
    /// intent it was given: within the allowance, not a wrong `False`.
    #[test]
    fn a_cut_for_a_superseded_intent_under_false_is_within_the_allowance() {
        let c = cluster();
        let n = c.nodes[0].name.clone();
        let mut log = changes(&c, &n, 38_255, State::Down, false);
        log.extend(changes(&c, &n, 39_050, State::None, false));
        let intents = [
            intent(&n, 37_865, State::Down),
            intent(&n, 38_020, State::None),
        ];
        let g = [
            gate(&n, 1_000, "False"),
            gate(&n, 38_340, "Unknown"),
            gate(&n, 39_075, "False"),
        ];
        assert!(judge(&c, &log, &intents, &g).is_empty());
        // With no intent asking for Down, the same Down is wrong from its first instant.
        let intents = [intent(&n, 38_020, State::None)];
        assert!(!judge(&c, &log, &intents, &g).is_empty());
    }
}
