//! The chaos soak's judge: pure rules over ARM's effective log, the workload's intents (when
//! each node's desired state changed, as the API server answered), the faults as injected
//! (actual times) and the leadership epochs observed. Rules:
//!
//! - **end state**: exact ([`super::end_state_problems`]).
//! - **changed twice**: cutover's changes of each entry follow the node's intents in order
//!   (each intent explains at most one change, made after it; an outside change may be
//!   repaired back): a change no intent explains undid a state for nothing, a flap or a healthy
//!   node cut. Writes of earlier transitions still in flight land in order and are explained.
//! - **late**: every transition effective within its [`allowance`]: the floor plus what the
//!   faults active during it may cost by design. A restore that is late is reported as
//!   **left down** (a healthy node's entries Down), as is an outside `Down` on a healthy node
//!   not repaired within the self-heal interval plus its allowance.
//! - **leader flap**: every new leadership epoch explained by a fault that costs leadership
//!   (the leader killed, terminated or stopped, the Lease deleted), at most one per fault.
//! - **drain gate**: the Node condition says `True` / `False` only while ARM has that state
//!   in effect on every entry, within stated bounds ([`super::gate`]).

use super::gate::{GateChange, GateStats, drain_gate};
use super::{Change, EntryKey, EntryView, State, end_state_problems, key, node_entries};
use crate::chaos::schedule::FaultKind;
use aks_fixture::Cluster;
use jiff::{SignedDuration, Timestamp};
use std::collections::{BTreeMap, HashMap, HashSet};

/// A node's desired state changed (the API server answered the write that changed it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Intent {
    pub node: String,
    pub at: Timestamp,
    pub state: State,
}

/// A fault as injected: when it started and ended (equal for instantaneous ones).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Active {
    pub kind: FaultKind,
    pub start: Timestamp,
    pub end: Timestamp,
    /// Latency in ms (API latency), a count (failures, failed operations).
    pub param: u64,
    /// The load balancer a removal took away (absent from `start` to `end`).
    pub lb: Option<String>,
}

/// What the design promises, in milliseconds: the floor and each fault's cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bounds {
    /// One ARM PUT plus its operation: the floor of one transition on one LB.
    pub write_ms: u64,
    /// Watch delivery, routing, the read-back that reports effective.
    pub slack_ms: u64,
    /// The simulator's retry hints (`Retry-After` of polls, lock conflicts, 429s).
    pub retry_after_ms: u64,
    /// The actuator's longest backoff between two ARM retries.
    pub backoff_cap_ms: u64,
    /// A new signal-svc leader streaming after the old one died (lease duration, the
    /// standby's retry, the snapshot).
    pub signal_failover_ms: u64,
    /// Another actuator replica writing a dead or hung replica's LBs (and handing them back
    /// when it returns).
    pub actuator_failover_ms: u64,
    /// A client's re-watch or re-list after a dropped watch, a 410 or failed requests.
    pub watch_recovery_ms: u64,
    /// The actuator's self-heal interval: an outside write is repaired on its next read.
    pub self_heal_ms: u64,
    /// signal-svc replicas. With one, nobody takes over from a killed or terminated leader:
    /// its successor is the same replica once restarted, so the fault costs its whole length.
    pub signal_replicas: usize,
}

impl Bounds {
    /// Without faults: the node's LB may be busy with a running operation (one more write
    /// ahead of ours: design section 8), then our own write, then the slack.
    pub fn base_ms(&self) -> u64 {
        2 * self.write_ms + self.slack_ms
    }
}

/// How long failed operations stay armed in the simulator before a write consumes them (the
/// workload writes every few seconds).
const FAILED_OPS_ARMED_MS: i64 = 30_000;
/// The actuator's backoff after a few consecutive failures (200 ms doubling: 0.2 + 0.4 + 0.8).
const FAILED_OP_BACKOFF_MS: u64 = 1_400;

fn ms(n: u64) -> SignedDuration {
    SignedDuration::from_millis(n as i64)
}

/// What `fault` costs a transition running over `[t, t + allow]`, or zero if it does not touch
/// it. Spans (outages, storms, latency) cost their remaining length plus the recovery; edges
/// (a kill, a stop, a restart, a wake-up) cost one failover each when they fall within a
/// failover before the window or inside it.
pub fn cost(b: &Bounds, f: &Active, t: Timestamp, allow: SignedDuration) -> SignedDuration {
    let end = t + allow;
    let edge = |x: Timestamp, c: SignedDuration| {
        if x >= t - c && x <= end {
            c
        } else {
            SignedDuration::ZERO
        }
    };
    let span = |recovery: SignedDuration| {
        if f.start <= end && f.end + recovery >= t {
            let from = f.start.max(t);
            let remaining = if f.end > from {
                f.end.duration_since(from)
            } else {
                SignedDuration::ZERO
            };
            remaining + recovery
        } else {
            SignedDuration::ZERO
        }
    };
    match f.kind {
        FaultKind::ArmOutage | FaultKind::ArmThrottle => {
            // Retries back off exponentially: the last sleep before the fault ends is at most
            // as long as the fault so far (and the cap), then one retry hint.
            let length = f.end.duration_since(f.start).max(SignedDuration::ZERO);
            span(length.min(ms(b.backoff_cap_ms)) + ms(b.retry_after_ms))
        }
        FaultKind::ArmFailedOps => {
            // Each failed operation: one more write, its retry hint and a short backoff.
            let armed = f.start + SignedDuration::from_millis(FAILED_OPS_ARMED_MS);
            if f.start <= end && armed >= t {
                ms(f.param * (b.write_ms + b.retry_after_ms + FAILED_OP_BACKOFF_MS))
            } else {
                SignedDuration::ZERO
            }
        }
        FaultKind::KubeLatency => {
            // A re-watch, a re-list and a patch, each delayed.
            let c = ms(3 * f.param);
            if f.start <= end && f.end + c >= t {
                c
            } else {
                SignedDuration::ZERO
            }
        }
        FaultKind::KubeFailures => edge(f.start, ms(b.watch_recovery_ms + 1000 * f.param)),
        FaultKind::WatchDrop | FaultKind::WatchExpired => edge(f.start, ms(b.watch_recovery_ms)),
        FaultKind::SignalKill | FaultKind::SignalTerm if b.signal_replicas <= 1 => {
            span(ms(b.signal_failover_ms))
        }
        FaultKind::LeaseDeleted | FaultKind::SignalKill | FaultKind::SignalTerm => {
            edge(f.start, ms(b.signal_failover_ms))
        }
        FaultKind::SignalStop => {
            edge(f.start, ms(b.signal_failover_ms)) + edge(f.end, ms(b.signal_failover_ms))
        }
        FaultKind::ActuatorKill | FaultKind::ActuatorStop => {
            edge(f.start, ms(b.actuator_failover_ms)) + edge(f.end, ms(b.actuator_failover_ms))
        }
        FaultKind::ActuatorRestart => edge(f.start, ms(b.actuator_failover_ms)),
        FaultKind::OutsideDown | FaultKind::OutsideNone => SignedDuration::ZERO,
        // Writes pause from the renew deadline to the first renewal after the outage; a
        // leadership lost meanwhile costs a fail-over (the standby is stopped: the same
        // process re-takes its record). Cuts are not lost: each still comes within this.
        FaultKind::LeaseOutage => span(ms(b.signal_failover_ms)),
        FaultKind::LbRemoved => {
            // Nothing can be written on it while it is gone; once it is back, the next
            // self-heal read (or the writer's retry after its backoff) writes it again.
            let length = f.end.duration_since(f.start).max(SignedDuration::ZERO);
            span(ms(b.self_heal_ms) + length.min(ms(b.backoff_cap_ms)) + ms(b.retry_after_ms))
        }
    }
}

/// The allowance of a transition starting at `t`: the base plus the cost of every fault that
/// touches it, widened until no further fault falls in (each fault counts once).
pub fn allowance(b: &Bounds, faults: &[Active], t: Timestamp) -> SignedDuration {
    let base = ms(b.base_ms());
    let mut allow = base;
    loop {
        let next = base
            + faults
                .iter()
                .map(|f| cost(b, f, t, allow))
                .fold(SignedDuration::ZERO, |a, c| a + c);
        if next <= allow {
            return allow;
        }
        allow = next;
    }
}

/// How long an outside change at `t` may take to be repaired: found on the owner's next
/// self-heal read (within the interval), then written within the allowance of that moment or
/// of `t`, whichever is longer (faults that start during the interval delay the repair: dst
/// seed 10024, an ARM partition and 14 s operations starting 5 s after the outside write).
pub fn repair_allowance(b: &Bounds, faults: &[Active], t: Timestamp) -> SignedDuration {
    let heal = ms(b.self_heal_ms);
    heal + allowance(b, faults, t).max(allowance(b, faults, t + heal))
}

/// Which rule a violation breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Rule {
    EndState,
    ChangedTwice,
    Late,
    LeftDown,
    LeaderFlap,
    DrainGate,
    /// Two actuators wrote one LB beyond the stated bound (judged by the simulation).
    OneWriter,
    /// A signal-svc replica wrote a Node without holding the Lease (judged by the simulation).
    LeaderOnly,
    /// What an actuator accepted (assignment generation, a node's version) went backwards
    /// (judged by the simulation, which reads the actuators' state).
    AcceptedBackwards,
}

impl Rule {
    pub const ALL: [Rule; 9] = [
        Rule::EndState,
        Rule::ChangedTwice,
        Rule::Late,
        Rule::LeftDown,
        Rule::LeaderFlap,
        Rule::DrainGate,
        Rule::OneWriter,
        Rule::LeaderOnly,
        Rule::AcceptedBackwards,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Rule::EndState => "end state not exact",
            Rule::ChangedTwice => "entry changed twice in one transition",
            Rule::Late => "transition beyond its allowance",
            Rule::LeftDown => "healthy node left Down",
            Rule::LeaderFlap => "leadership flapped",
            Rule::DrainGate => "drain gate said a state ARM did not have",
            Rule::OneWriter => "two writers of one load balancer",
            Rule::LeaderOnly => "a Node written without the Lease",
            Rule::AcceptedBackwards => "an actuator's accepted version went backwards",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub rule: Rule,
    pub text: String,
}

/// One judged transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub node: String,
    pub state: State,
    pub at: Timestamp,
    /// Time to effective on every entry; `None` if superseded before (within its allowance).
    pub took: Option<SignedDuration>,
    pub allowance: SignedDuration,
}

/// Everything the judge reads.
#[derive(Debug, Clone, Copy)]
pub struct Inputs<'a> {
    pub cluster: &'a Cluster,
    /// ARM's effective log (the whole run; earlier changes give the state at `start`).
    pub log: &'a [Change],
    /// In time order.
    pub intents: &'a [Intent],
    pub faults: &'a [Active],
    /// New leadership epochs as observed, in time order (the first is the initial election).
    pub epochs: &'a [(Timestamp, u64)],
    /// The entries as in effect at the end.
    pub end_entries: &'a [EntryView],
    /// The drain-gate condition as the API server committed it, in time order.
    pub gate: &'a [GateChange],
    pub bounds: &'a Bounds,
    pub start: Timestamp,
    pub end: Timestamp,
}

#[derive(Debug, Clone, Default)]
pub struct Verdict {
    pub transitions: Vec<Transition>,
    pub violations: Vec<Violation>,
    pub gate: GateStats,
}

/// Applies every rule.
pub fn judge(i: &Inputs<'_>) -> Verdict {
    let (transitions, mut violations) = timeliness(i);
    violations.extend(changed_twice(i));
    violations.extend(outside_repairs(i));
    violations.extend(leader_flaps(i.epochs, i.faults, i.bounds));
    let (gate, gate_violations) = drain_gate(i);
    violations.extend(gate_violations);
    let down: HashSet<String> = final_desired(i.intents)
        .into_iter()
        .filter(|(_, s)| *s == State::Down)
        .map(|(n, _)| n)
        .collect();
    violations.extend(
        end_state_problems(i.cluster, i.end_entries, &down, &HashSet::new())
            .into_iter()
            .map(|text| Violation {
                rule: Rule::EndState,
                text,
            }),
    );
    Verdict {
        transitions,
        violations,
        gate,
    }
}

fn final_desired(intents: &[Intent]) -> BTreeMap<String, State> {
    intents.iter().map(|i| (i.node.clone(), i.state)).collect()
}

/// Each entry's real changes (no-ops dropped), in log order.
pub(super) fn by_entry(log: &[Change]) -> HashMap<EntryKey, Vec<Change>> {
    let mut out: HashMap<EntryKey, Vec<Change>> = HashMap::new();
    for c in super::transitions(log) {
        out.entry(key(&c.lb, &c.pool, &c.target))
            .or_default()
            .push(c);
    }
    out
}

pub(super) fn state_at(changes: &[Change], t: Timestamp) -> State {
    changes
        .iter()
        .take_while(|c| c.time <= t)
        .last()
        .map_or(State::None, |c| c.state)
}

/// When the entry first reads `want` at or after `t`.
fn reached(changes: &[Change], t: Timestamp, want: State) -> Option<Timestamp> {
    if state_at(changes, t) == want {
        return Some(t);
    }
    changes
        .iter()
        .find(|c| c.time > t && c.state == want)
        .map(|c| c.time)
}

/// A node's intents, grouped.
pub(super) fn per_node(intents: &[Intent]) -> BTreeMap<&str, Vec<&Intent>> {
    let mut out: BTreeMap<&str, Vec<&Intent>> = BTreeMap::new();
    for i in intents {
        out.entry(i.node.as_str()).or_default().push(i);
    }
    out
}

/// When every entry of `node` reads `want` at or after `t`.
fn node_reached(
    entries: &[EntryKey],
    changes: &HashMap<EntryKey, Vec<Change>>,
    t: Timestamp,
    want: State,
) -> Option<Timestamp> {
    let mut latest = t;
    for e in entries {
        let log = changes.get(e).map_or(&[][..], Vec::as_slice);
        latest = latest.max(reached(log, t, want)?);
    }
    Some(latest)
}

/// The **late** and **left down** rules, and every transition's time.
pub fn timeliness(i: &Inputs<'_>) -> (Vec<Transition>, Vec<Violation>) {
    let changes = by_entry(i.log);
    let mut transitions = Vec::new();
    let mut violations = Vec::new();
    for (node, list) in per_node(i.intents) {
        let entries = node_entries(i.cluster, node);
        for (k, intent) in list.iter().enumerate() {
            let next = list.get(k + 1).map_or(i.end, |n| n.at);
            let allow = allowance(i.bounds, i.faults, intent.at);
            let deadline = intent.at + allow;
            let done = node_reached(&entries, &changes, intent.at, intent.state)
                .filter(|d| *d <= next.max(intent.at));
            let took = done.map(|d| d.duration_since(intent.at));
            let late = match took {
                Some(t) => t > allow,
                // Superseded (or the run ended) before it was effective: late only if the
                // allowance ran out first.
                None => deadline < next,
            };
            if late {
                let rule = if intent.state == State::None {
                    Rule::LeftDown
                } else {
                    Rule::Late
                };
                violations.push(Violation {
                    rule,
                    text: format!(
                        "{node} -> {:?} at {}: {} (allowance {:.1} s)",
                        intent.state,
                        intent.at,
                        took.map_or("not effective".to_string(), |t| format!(
                            "took {:.1} s",
                            t.as_secs_f64()
                        )),
                        allow.as_secs_f64()
                    ),
                });
            }
            transitions.push(Transition {
                node: node.to_string(),
                state: intent.state,
                at: intent.at,
                took,
                allowance: allow,
            });
        }
    }
    (transitions, violations)
}

/// The **changed twice** rule.
pub fn changed_twice(i: &Inputs<'_>) -> Vec<Violation> {
    let changes = by_entry(i.log);
    let intents = per_node(i.intents);
    let mut out = Vec::new();
    for n in &i.cluster.nodes {
        let list = intents.get(n.name.as_str()).cloned().unwrap_or_default();
        for e in node_entries(i.cluster, &n.name) {
            let log = changes.get(&e).map_or(&[][..], Vec::as_slice);
            if let Some(text) = unexplained(log, &list) {
                out.push(Violation {
                    rule: Rule::ChangedTwice,
                    text: format!("{} {}/{} {}: {text}", n.name, e.0, e.1, e.2),
                });
            }
        }
    }
    out
}

/// The first of cutover's changes of one entry that does not follow the node's intents in
/// order, if any. ARM applies an LB's writes in order and each intent gives each entry at most
/// one change, so cutover's changes must match a subsequence of the intents (each matched to
/// an intent made at or before it, later than the one the change before was matched to); an
/// outside change may be repaired back to the state last written (or to the initial `None`).
/// A change that matches nothing undid a state for no intent: a flap, or a healthy node cut.
fn unexplained(log: &[Change], intents: &[&Intent]) -> Option<String> {
    // Index of the next intent a change may match; the state last written by cutover.
    let mut next = 0;
    let mut last: State = State::None;
    let mut after_outside = false;
    for c in log {
        if c.outside {
            after_outside = true;
            continue;
        }
        if after_outside && c.state == last {
            // A repair of an outside write.
            after_outside = false;
            continue;
        }
        after_outside = false;
        let matched = intents[next..]
            .iter()
            .take_while(|x| x.at <= c.time)
            .position(|x| x.state == c.state);
        match matched {
            Some(k) => {
                next += k + 1;
                last = c.state;
            }
            None => {
                let wanted: Vec<State> = intents
                    .iter()
                    .take_while(|x| x.at <= c.time)
                    .map(|x| x.state)
                    .collect();
                return Some(format!(
                    "cutover made it {:?} at {} with no intent left to explain it (intents so far {wanted:?}; the change before matched intent {next})",
                    c.state, c.time
                ));
            }
        }
    }
    None
}

/// Outside writes against the desired state must be repaired within the self-heal interval
/// plus the allowance, unless the node's desired state changes first: a `Down` left on a
/// healthy node is **left down**, a `None` left on a leaving node **late**.
pub fn outside_repairs(i: &Inputs<'_>) -> Vec<Violation> {
    let changes = by_entry(i.log);
    let intents = per_node(i.intents);
    let owner: HashMap<EntryKey, &str> = i
        .cluster
        .nodes
        .iter()
        .flat_map(|n| {
            node_entries(i.cluster, &n.name)
                .into_iter()
                .map(move |e| (e, n.name.as_str()))
        })
        .collect();
    let mut out = Vec::new();
    for c in i
        .log
        .iter()
        .filter(|c| c.outside && c.time >= i.start && c.time <= i.end)
    {
        let k = key(&c.lb, &c.pool, &c.target);
        let Some(node) = owner.get(&k) else { continue };
        let list = intents.get(node).cloned().unwrap_or_default();
        let desired = list
            .iter()
            .take_while(|x| x.at <= c.time)
            .last()
            .map_or(State::None, |x| x.state);
        if c.state == desired {
            continue;
        }
        let next = list.iter().find(|x| x.at > c.time).map_or(i.end, |x| x.at);
        let deadline = c.time + repair_allowance(i.bounds, i.faults, c.time);
        let log = changes.get(&k).map_or(&[][..], Vec::as_slice);
        let repaired = log
            .iter()
            .find(|x| x.time > c.time && x.state == desired)
            .map(|x| x.time);
        let in_time = repaired.is_some_and(|r| r <= deadline);
        if !in_time && deadline < next {
            out.push(Violation {
                rule: if desired == State::None {
                    Rule::LeftDown
                } else {
                    Rule::Late
                },
                text: format!(
                    "{node} {}/{} {}: outside {:?} at {} {} (want {desired:?} by {deadline})",
                    c.lb,
                    c.pool,
                    c.target,
                    c.state,
                    c.time,
                    repaired.map_or("never repaired".to_string(), |r| format!("repaired at {r}"))
                ),
            });
        }
    }
    out
}

/// The **leader flap** rule: every new epoch after the first needs its own explaining fault.
pub fn leader_flaps(epochs: &[(Timestamp, u64)], faults: &[Active], b: &Bounds) -> Vec<Violation> {
    // Sampling adds up to a second to when a change is seen.
    let bound = ms(b.signal_failover_ms + 1000);
    let mut used = vec![false; faults.len()];
    let mut out = Vec::new();
    // API latency slows a failover by up to three delayed calls: the standby's last read of
    // the unchanged record, its acquiring write and the sampler's read (a 7.3 s failover under
    // 1.6 s of latency, soak seed 7).
    let slowed = |from: Timestamp| {
        let worst = faults
            .iter()
            .filter(|l| l.kind == FaultKind::KubeLatency)
            .filter(|l| l.start <= from + bound && l.end >= from)
            .map(|l| l.param)
            .max()
            .unwrap_or(0);
        bound + ms(3 * worst)
    };
    for (at, epoch) in epochs.iter().skip(1) {
        let explains = |f: &Active| match f.kind {
            // The only replica takes a new epoch once it is back (found by a 10-minute
            // single-replica soak, seed 7: epochs 5, 6 and 9 came 0.5-4 s after the restarts).
            FaultKind::SignalKill | FaultKind::SignalTerm if b.signal_replicas <= 1 => {
                *at >= f.start && *at <= f.end + slowed(f.end)
            }
            FaultKind::SignalKill | FaultKind::SignalTerm | FaultKind::LeaseDeleted => {
                *at >= f.start && *at <= f.start + slowed(f.start)
            }
            FaultKind::SignalStop => *at >= f.start && *at <= f.end + bound,
            // Past the lease duration the leader lets go and takes a new epoch (N1's fix:
            // versions go on either way).
            FaultKind::LeaseOutage => *at >= f.start && *at <= f.end + bound,
            _ => false,
        };
        match (0..faults.len()).find(|&k| !used[k] && explains(&faults[k])) {
            Some(k) => used[k] = true,
            None => out.push(Violation {
                rule: Rule::LeaderFlap,
                text: format!("new leadership epoch {epoch} at {at} with no fault to explain it"),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
            self_heal_ms: 30_000,
        }
    }

    fn fault(kind: FaultKind, start: i64, end: i64) -> Active {
        Active {
            kind,
            start: at(start),
            end: at(end),
            param: 0,
            lb: None,
        }
    }

    /// Every entry of `node` changes to `state` at `ms`.
    fn node_change(c: &Cluster, node: &str, ms: i64, state: State) -> Vec<Change> {
        node_entries(c, node)
            .into_iter()
            .map(|(lb, pool, target)| Change {
                time: at(ms),
                lb,
                pool,
                target,
                state,
                outside: false,
            })
            .collect()
    }

    fn intent(node: &str, ms: i64, state: State) -> Intent {
        Intent {
            node: node.into(),
            at: at(ms),
            state,
        }
    }

    fn end_views(c: &Cluster, down: &[&str]) -> Vec<EntryView> {
        c.nodes
            .iter()
            .flat_map(|n| {
                let state = if down.contains(&n.name.as_str()) {
                    State::Down
                } else {
                    State::None
                };
                node_entries(c, &n.name)
                    .into_iter()
                    .map(move |(lb, pool, target)| EntryView {
                        lb,
                        pool,
                        target,
                        state,
                    })
            })
            .collect()
    }

    fn run<'a>(
        c: &'a Cluster,
        log: &'a [Change],
        intents: &'a [Intent],
        faults: &'a [Active],
        epochs: &'a [(Timestamp, u64)],
        end: &'a [EntryView],
        b: &'a Bounds,
    ) -> Verdict {
        judge(&Inputs {
            cluster: c,
            log,
            intents,
            faults,
            epochs,
            end_entries: end,
            gate: &[],
            bounds: b,
            start: at(0),
            end: at(600_000),
        })
    }

    fn rules(v: &Verdict) -> Vec<Rule> {
        v.violations.iter().map(|v| v.rule).collect()
    }

    #[test]
    fn allowance_is_the_base_without_faults_and_grows_with_the_faults_it_overlaps() {
        let b = bounds();
        assert_eq!(allowance(&b, &[], at(0)), ms(3000));
        // An outage from -10 s to +20 s: its remaining 20 s plus backoff and a retry hint.
        let outage = fault(FaultKind::ArmOutage, -10_000, 20_000);
        assert_eq!(
            allowance(&b, std::slice::from_ref(&outage), at(0)),
            ms(3000 + 20_000 + 6000)
        );
        // Long over: nothing.
        assert_eq!(allowance(&b, &[outage], at(60_000)), ms(3000));
        // A kill 1 s after the start: one failover. A stop covering it: one per edge.
        let kill = fault(FaultKind::SignalKill, 1000, 4000);
        assert_eq!(allowance(&b, &[kill], at(0)), ms(3000 + 6000));
        let stop = fault(FaultKind::ActuatorStop, 1000, 5000);
        assert_eq!(allowance(&b, &[stop], at(0)), ms(3000 + 20_000));
        // Widening pulls in a fault that starts after the base window: base 3 s, the kill
        // makes it 9 s, which reaches the watch drop at +8 s.
        let chain = [
            fault(FaultKind::SignalKill, 1000, 1000),
            fault(FaultKind::WatchDrop, 8000, 8000),
        ];
        assert_eq!(allowance(&b, &chain, at(0)), ms(3000 + 6000 + 3000));
        // Latency of 2 s: three delayed calls.
        let mut slow = fault(FaultKind::KubeLatency, -5000, 5000);
        slow.param = 2000;
        assert_eq!(allowance(&b, &[slow], at(0)), ms(3000 + 6000));
        // An LB gone from -2 s to +8 s: its remaining 8 s, then a self-heal read (30 s), the
        // writer's backoff (its 10 s length, capped at 5 s) and a retry hint.
        let gone = fault(FaultKind::LbRemoved, -2000, 8000);
        assert_eq!(
            allowance(&b, std::slice::from_ref(&gone), at(0)),
            ms(3000 + 8000 + 30_000 + 5000 + 1000)
        );
        // Back more than its recovery before the transition: nothing.
        assert_eq!(allowance(&b, &[gone], at(60_000)), ms(3000));
    }

    #[test]
    fn a_timely_cut_and_restore_pass_and_an_exact_end_is_clean() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let mut log = node_change(&c, &n, 2500, State::Down);
        log.extend(node_change(&c, &n, 12_000, State::None));
        let intents = [intent(&n, 0, State::Down), intent(&n, 10_000, State::None)];
        let end = end_views(&c, &[]);
        let b = bounds();
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        let took: Vec<_> = v
            .transitions
            .iter()
            .map(|t| t.took.unwrap().as_millis())
            .collect();
        assert_eq!(took, [2500, 2000]);
    }

    #[test]
    fn a_slow_cut_is_late_and_a_slow_restore_leaves_a_healthy_node_down() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let mut log = node_change(&c, &n, 4000, State::Down);
        log.extend(node_change(&c, &n, 25_000, State::None));
        let intents = [intent(&n, 0, State::Down), intent(&n, 10_000, State::None)];
        let end = end_views(&c, &[]);
        let b = bounds();
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert_eq!(
            rules(&v),
            [Rule::Late, Rule::LeftDown],
            "{:?}",
            v.violations
        );
        // The same delays inside an outage's allowance pass.
        let outage = [fault(FaultKind::ArmOutage, 0, 2000)];
        let faults = [
            outage[0].clone(),
            fault(FaultKind::ArmThrottle, 10_000, 20_000),
        ];
        let v = run(&c, &log, &intents, &faults, &[], &end, &b);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
    }

    #[test]
    fn a_restore_never_made_is_left_down_and_breaks_the_end_state() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let log = node_change(&c, &n, 2000, State::Down);
        let intents = [intent(&n, 0, State::Down), intent(&n, 10_000, State::None)];
        let end = end_views(&c, &[&n]);
        let b = bounds();
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        let r = rules(&v);
        assert!(r.contains(&Rule::LeftDown), "{:?}", v.violations);
        assert_eq!(r.iter().filter(|r| **r == Rule::EndState).count(), 4);
    }

    #[test]
    fn a_superseded_transition_is_not_late_and_its_late_write_is_no_flap() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        // Down at 0, None at 1 s; the Down write lands at 1.5 s, the None at 3 s.
        let mut log = node_change(&c, &n, 1500, State::Down);
        log.extend(node_change(&c, &n, 3000, State::None));
        let intents = [intent(&n, 0, State::Down), intent(&n, 1000, State::None)];
        let end = end_views(&c, &[]);
        let b = bounds();
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!(v.transitions[0].took, None);
    }

    /// dst seed 10024: an outside Down at 12 s, an ARM outage from 16 s to 30 s; the repair is
    /// due at the next self-heal read, inside the outage (here: a 30 s interval, an outage
    /// from 20 s to 40 s).
    #[test]
    fn a_fault_starting_before_the_self_heal_read_delays_the_repair() {
        let b = bounds();
        let quiet = repair_allowance(&b, &[], at(0));
        assert_eq!(quiet, ms(b.self_heal_ms) + ms(b.base_ms()));
        let outage = [fault(FaultKind::ArmOutage, 20_000, 40_000)];
        assert_eq!(allowance(&b, &outage, at(0)), ms(b.base_ms()));
        assert!(repair_allowance(&b, &outage, at(0)) > quiet + ms(10_000));
    }

    #[test]
    fn down_none_down_within_one_transition_is_a_flap() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let mut log = node_change(&c, &n, 1000, State::Down);
        log.extend(node_change(&c, &n, 2000, State::None));
        log.extend(node_change(&c, &n, 3000, State::Down));
        let intents = [intent(&n, 0, State::Down)];
        let end = end_views(&c, &[&n]);
        let b = bounds();
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert_eq!(rules(&v), [Rule::ChangedTwice; 4], "{:?}", v.violations);
        // A change with no intent at all (a healthy node touched) is one too.
        let m = c.nodes[1].name.clone();
        let log = node_change(&c, &m, 1000, State::Down);
        let mut log2 = log.clone();
        log2.extend(node_change(&c, &m, 2000, State::None));
        let end = end_views(&c, &[]);
        let v = run(&c, &log2, &[], &[], &[], &end, &b);
        assert_eq!(rules(&v), [Rule::ChangedTwice; 4], "{:?}", v.violations);
    }

    /// Seen in the whole-service simulation (seed 2030 of `dst --heavy`): a node churned
    /// None, Down, None within half a second; the three writes landed in order, the last two
    /// after the last intent. Each was right when written; nothing undid a state once written
    /// for its own intent.
    #[test]
    fn writes_of_rapid_churn_landing_in_order_are_not_a_flap() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let mut log = node_change(&c, &n, 500, State::Down);
        log.extend(node_change(&c, &n, 1600, State::None));
        log.extend(node_change(&c, &n, 1900, State::Down));
        log.extend(node_change(&c, &n, 2200, State::None));
        let intents = [
            intent(&n, 0, State::Down),
            intent(&n, 1000, State::None),
            intent(&n, 1100, State::Down),
            intent(&n, 1500, State::None),
        ];
        let end = end_views(&c, &[]);
        let v = run(&c, &log, &intents, &[], &[], &end, &bounds());
        assert!(v.violations.is_empty(), "{:?}", v.violations);
    }

    /// Seen in a 10-minute soak: an LB re-created without admin states under a Down node;
    /// the repair (Down) was written just before the node turned None and completed after,
    /// then the restore. Two changes by cutover in the None transition, both right; a third
    /// would still be a flap.
    #[test]
    fn a_repair_in_flight_across_a_transition_is_not_a_flap() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let b = bounds();
        let mut log = node_change(&c, &n, 2000, State::Down);
        let mut reset = log[0].clone();
        reset.time = at(50_000);
        reset.state = State::None;
        reset.outside = true;
        let mut repair = reset.clone();
        repair.time = at(60_500);
        repair.state = State::Down;
        repair.outside = false;
        let mut restore = repair.clone();
        restore.time = at(62_000);
        restore.state = State::None;
        let mut rest = node_change(&c, &n, 62_000, State::None);
        rest.retain(|x| (&x.lb, &x.pool, &x.target) != (&reset.lb, &reset.pool, &reset.target));
        log.extend([reset, repair, restore.clone()]);
        log.extend(rest);
        let intents = [intent(&n, 0, State::Down), intent(&n, 60_000, State::None)];
        let end = end_views(&c, &[]);
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        let mut again = restore;
        again.time = at(62_200);
        again.state = State::Down;
        let mut back = again.clone();
        back.time = at(62_400);
        back.state = State::None;
        log.extend([again, back]);
        log.sort_by_key(|x| x.time);
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        assert!(
            rules(&v).contains(&Rule::ChangedTwice),
            "{:?}",
            v.violations
        );
    }

    #[test]
    fn outside_writes_are_allowed_one_repair_each_and_must_be_repaired() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let healthy = c.nodes[1].name.clone();
        let b = bounds();
        let mut log = node_change(&c, &n, 2000, State::Down);
        // An outside writer resets one entry of the Down node; cutover repairs it.
        let mut reset = log[0].clone();
        reset.time = at(50_000);
        reset.state = State::None;
        reset.outside = true;
        let mut repair = reset.clone();
        repair.time = at(70_000);
        repair.state = State::Down;
        repair.outside = false;
        log.extend([reset.clone(), repair]);
        // And sets an entry of a healthy node Down; never repaired.
        let (lb, pool, target) = node_entries(&c, &healthy).remove(0);
        log.push(Change {
            time: at(100_000),
            lb,
            pool,
            target,
            state: State::Down,
            outside: true,
        });
        let intents = [intent(&n, 0, State::Down)];
        let mut end = end_views(&c, &[&n]);
        let stuck = log.last().unwrap();
        for e in end.iter_mut() {
            if e.lb == stuck.lb && e.pool == stuck.pool && e.target == stuck.target {
                e.state = State::Down;
            }
        }
        let v = run(&c, &log, &intents, &[], &[], &end, &b);
        // The healthy node's entry: left Down, and wrong at the end.
        assert_eq!(
            rules(&v),
            [Rule::LeftDown, Rule::EndState],
            "{:?}",
            v.violations
        );
        // Repaired within the self-heal interval plus the base: clean.
        let mut fixed = log.clone();
        let mut back = fixed.last().unwrap().clone();
        back.time = at(125_000);
        back.state = State::None;
        back.outside = false;
        fixed.push(back);
        end = end_views(&c, &[&n]);
        let v = run(&c, &fixed, &intents, &[], &[], &end, &b);
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        // The reset entry left at None: late.
        let unrepaired: Vec<Change> = log[..log.len() - 2].to_vec();
        let v = run(&c, &unrepaired, &intents, &[], &[], &end, &b);
        assert!(rules(&v).contains(&Rule::Late), "{:?}", v.violations);
    }

    #[test]
    fn with_one_replica_a_kill_explains_the_epoch_taken_after_its_restart() {
        // Killed at 10 s, restarted at 19.5 s, the new epoch at 20 s (soak seed 7).
        let kill = fault(FaultKind::SignalKill, 10_000, 19_500);
        let epochs = [(at(0), 1), (at(20_000), 2)];
        let two = bounds();
        assert_eq!(
            leader_flaps(&epochs, std::slice::from_ref(&kill), &two).len(),
            1,
            "with a standby the new epoch must come within a fail-over of the kill"
        );
        let one = Bounds {
            signal_replicas: 1,
            ..bounds()
        };
        assert!(leader_flaps(&epochs, std::slice::from_ref(&kill), &one).is_empty());
        // Long after the restart: still a flap.
        let late = [(at(0), 1), (at(40_000), 2)];
        assert_eq!(
            leader_flaps(&late, std::slice::from_ref(&kill), &one).len(),
            1
        );
        // A cut during the downtime waits for the restart: the whole length is allowed.
        assert!(
            allowance(&one, std::slice::from_ref(&kill), at(11_000))
                > allowance(&two, &[kill], at(11_000))
        );
    }

    #[test]
    fn leadership_changes_need_a_fault_each() {
        let b = bounds();
        let kill = fault(FaultKind::SignalKill, 10_000, 15_000);
        let epochs = [(at(0), 1), (at(14_000), 2)];
        assert!(leader_flaps(&epochs, std::slice::from_ref(&kill), &b).is_empty());
        // A second change for the same kill, or one with no fault: flaps.
        let twice = [(at(0), 1), (at(14_000), 2), (at(15_000), 3)];
        assert_eq!(
            leader_flaps(&twice, std::slice::from_ref(&kill), &b).len(),
            1
        );
        let unexplained = [(at(0), 1), (at(40_000), 2)];
        let latency = fault(FaultKind::KubeLatency, 30_000, 50_000);
        let v = leader_flaps(&unexplained, &[kill, latency], &b);
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].rule, Rule::LeaderFlap);
        // A stop explains a change until a failover after it ends.
        let stop = fault(FaultKind::SignalStop, 30_000, 45_000);
        assert!(leader_flaps(&unexplained, &[stop], &b).is_empty());
        // API latency lengthens a failover by three delayed calls, no more.
        let kill = fault(FaultKind::SignalKill, 10_000, 17_000);
        let slow = Active {
            param: 1500,
            ..fault(FaultKind::KubeLatency, 0, 60_000)
        };
        let late = [(at(0), 1), (at(17_300), 2)];
        assert_eq!(
            leader_flaps(&late, std::slice::from_ref(&kill), &b).len(),
            1,
            "7.3 s without latency is beyond the bound"
        );
        assert!(leader_flaps(&late, &[kill.clone(), slow.clone()], &b).is_empty());
        let too_late = [(at(0), 1), (at(22_000), 2)];
        assert_eq!(leader_flaps(&too_late, &[kill, slow], &b).len(), 1);
    }
}
