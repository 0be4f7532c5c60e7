//! What a seed decides, up front and from nothing else: the topology (one or two signal-svc
//! replicas), the workload (taints and labels that make nodes leave and return) and the
//! faults (network partitions one- and two-sided, process crashes and freezes, Kubernetes and
//! ARM faults, outside writers, load balancers removed and re-created). Pure: no I/O, no clock.
//!
//! The run has three phases: warm-up (the first election, streams and snapshots), the storm
//! (workload and faults together) and a quiet tail (no faults, no workload) in which every
//! entry must settle to its node's desired state.

use cutover_e2e::chaos::schedule::Rng;
use std::time::Duration;

/// Milliseconds of simulated time since the run began.
pub type Ms = u64;

/// The phases' lengths and the topology's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub warmup_ms: Ms,
    pub storm_ms: Ms,
    pub tail_ms: Ms,
    /// Workload changes per storm (spread uniformly).
    pub changes: usize,
    /// Faults per storm (spread uniformly; each lasts a drawn time).
    pub faults: usize,
    /// Which departures the workload draws.
    pub mix: Mix,
}

impl Shape {
    /// The CI smoke's shape: short phases, a few faults.
    pub const SHORT: Shape = Shape {
        warmup_ms: 8_000,
        storm_ms: 30_000,
        tail_ms: 40_000,
        changes: 12,
        faults: 8,
        mix: Mix::Every,
    };

    /// The bench's dense shape: a longer storm, three times the faults, more changes.
    pub const HEAVY: Shape = Shape {
        warmup_ms: 8_000,
        storm_ms: 60_000,
        tail_ms: 40_000,
        changes: 30,
        faults: 24,
        mix: Mix::Every,
    };

    pub fn end_ms(&self) -> Ms {
        self.warmup_ms + self.storm_ms + self.tail_ms
    }

    /// When faults stop (every fault has ended by then: lengths are clipped to it).
    pub fn quiet_from(&self) -> Ms {
        self.warmup_ms + self.storm_ms
    }
}

/// A simulated host's name (also its DNS name on the simulated network).
pub type Host = &'static str;

pub const KUBE: Host = "kube";
pub const ARM: Host = "arm";
pub const SIGNALS: [Host; 2] = ["signal-1", "signal-2"];
pub const ACTUATORS: [Host; 3] = ["actuator-1", "actuator-2", "actuator-3"];

/// How a node leaves service, and so what brings it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Leave {
    /// `ToBeDeletedByClusterAutoscaler:NoSchedule` (the autoscaler's scale-down); returns when
    /// the taint goes.
    Taint,
    /// `node.kubernetes.io/exclude-from-external-load-balancers`; returns when the label goes.
    Exclude,
    /// A tool hold through the actuators' `SetNodeAdminState` (an actuator relays it, signal-svc
    /// stores it on the Node); returns when the tool releases it the same way.
    Hold,
    /// A Spot eviction notice: a `PreemptScheduled` Event as AKS's node-problem-detector
    /// records it (signal-svc taints the node); returns when the operator removes that taint.
    Notice,
}

impl Leave {
    pub const ALL: [Leave; 4] = [Leave::Taint, Leave::Exclude, Leave::Hold, Leave::Notice];
}

/// Which departures a plan's workload draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mix {
    /// Taints and the exclude label only (the plans the first regression seeds were found in).
    TaintsAndLabels,
    /// Every [`Leave`], and nodes deleted and registered again.
    Every,
}

/// A workload step through the Kubernetes API (or the tool API for holds).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Work {
    /// The node starts leaving.
    Leave { node: usize, how: Leave },
    /// The departure `how` is undone: the node is back in service.
    Return { node: usize, how: Leave },
    /// The Node is deleted and registered again under its name with a new UID and none of
    /// the departure's marks (a reimaged or replaced VM): back in service.
    Recreate { node: usize },
}

impl Work {
    pub fn node(&self) -> usize {
        match self {
            Work::Leave { node, .. } | Work::Return { node, .. } | Work::Recreate { node } => *node,
        }
    }

    /// Whether the step makes the node leave (Down) rather than return (None).
    pub fn leaves(&self) -> bool {
        matches!(self, Work::Leave { .. })
    }
}

/// Every fault kind (the coverage table lists them in this order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Two hosts cannot reach each other: what either sends waits on the link until it heals,
    /// then arrives in order (TCP retransmits; turmoil's own partitions drop segments from the
    /// middle of a stream, which TCP never does, so they are not used).
    Partition,
    /// The link between two hosts turns slow (congestion, retransmissions): each message
    /// takes up to the fault's latency.
    SlowLink,
    /// A process crashes and restarts after the fault's length (fresh state, as a pod).
    Crash,
    /// A process stops answering and sending (its links held) and resumes (a SIGSTOP, a
    /// starved or GC-paused pod): what it sent meanwhile arrives late.
    Freeze,
    /// Every Kubernetes request slowed.
    KubeLatency,
    /// The next requests fail (500/503/429).
    KubeFailures,
    /// Lease calls fail for the fault's length while one signal-svc is frozen (N1).
    LeaseOutage,
    /// Every watch ends; clients re-watch.
    WatchDrop,
    /// History compacted and watches ended: re-watches get 410 and re-list.
    WatchExpired,
    /// 429s from ARM.
    ArmThrottle,
    /// 500s from ARM.
    ArmServerErrors,
    /// Every ARM request fails for the fault's length.
    ArmOutage,
    /// Write operations end `Failed`.
    ArmFailedOps,
    /// Writes find the LB locked by another operation (429).
    ArmLockConflicts,
    /// Writes carrying `If-Match` find a new etag (412).
    ArmStaleWrites,
    /// ARM operations take long (the fault's length is their length).
    ArmSlowOps,
    /// An outside writer sets a node's entry to `Down` or clears it.
    OutsideWrite,
    /// A load balancer deleted and re-created after the fault's length.
    LbRemoved,
}

impl FaultKind {
    pub const ALL: [FaultKind; 18] = [
        FaultKind::Partition,
        FaultKind::SlowLink,
        FaultKind::Crash,
        FaultKind::Freeze,
        FaultKind::KubeLatency,
        FaultKind::KubeFailures,
        FaultKind::LeaseOutage,
        FaultKind::WatchDrop,
        FaultKind::WatchExpired,
        FaultKind::ArmThrottle,
        FaultKind::ArmServerErrors,
        FaultKind::ArmOutage,
        FaultKind::ArmFailedOps,
        FaultKind::ArmLockConflicts,
        FaultKind::ArmStaleWrites,
        FaultKind::ArmSlowOps,
        FaultKind::OutsideWrite,
        FaultKind::LbRemoved,
    ];
}

/// One fault as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    pub kind: FaultKind,
    pub at: Ms,
    /// When it ends (equal to `at` for instantaneous ones).
    pub until: Ms,
    /// The hosts it touches (partitions: both ends, `a` before `b`; crash and freeze: one).
    pub hosts: Vec<Host>,
    /// A latency in ms (Kubernetes latency, a slow link), a status (Kubernetes failures), which
    /// LB (removal).
    pub param: u64,
    /// How many requests or operations fail.
    pub count: u32,
    /// The node an outside write touches, with the state it writes (`true`: Down).
    pub node: Option<(usize, bool)>,
}

/// A seed's whole plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub seed: u64,
    pub shape: Shape,
    /// How many signal-svc replicas run (1: the single-replica configuration).
    pub signals: usize,
    pub nodes: usize,
    pub work: Vec<(Ms, Work)>,
    pub faults: Vec<Fault>,
}

impl Plan {
    pub fn signal_hosts(&self) -> &'static [Host] {
        &SIGNALS[..self.signals]
    }

    /// Every service host of this plan.
    pub fn service_hosts(&self) -> Vec<Host> {
        let mut v = self.signal_hosts().to_vec();
        v.extend(ACTUATORS);
        v
    }
}

fn ms(d: Duration) -> Ms {
    d.as_millis() as Ms
}

/// Draws the plan of `seed` for a cluster of `nodes` nodes.
pub fn plan(seed: u64, shape: Shape, nodes: usize) -> Plan {
    let mut rng = Rng::new(seed);
    // One run in five is the single-replica configuration (deploy/overlays/single-replica).
    let signals = if rng.chance(0.2) { 1 } else { 2 };
    let storm = (shape.warmup_ms, shape.quiet_from());
    let mut work = workload(&mut rng, seed, shape, nodes, storm);
    work.sort_by_key(|(t, _)| *t);
    let mut faults: Vec<Fault> = (0..shape.faults)
        .map(|_| fault(&mut rng, signals, nodes, storm))
        .collect();
    faults.sort_by_key(|f| f.at);
    Plan {
        seed,
        shape,
        signals,
        nodes,
        work,
        faults,
    }
}

/// At most this many nodes leaving at once: the actuators' blast-radius guard (default
/// `--max-down-share 0.5`, 3 of the 6 nodes) refuses more by design, and restores may lag.
pub const MAX_LEAVING: usize = 2;

/// Workload changes: each node alternates between leaving and returning, so a node may be cut
/// and restored several times; never more than [`MAX_LEAVING`] nodes away at once. Times,
/// nodes and the taint-or-label choice come from the plan's stream; with [`Mix::Every`] a
/// second stream (so a seed keeps its times and faults whatever the mix) turns some taints
/// into Spot notices, some labels into tool holds, and a third of the returns of a node never
/// noticed into the Node being deleted and registered again.
fn workload(
    rng: &mut Rng,
    seed: u64,
    shape: Shape,
    nodes: usize,
    (from, to): (Ms, Ms),
) -> Vec<(Ms, Work)> {
    let mut variety = Rng::new(seed ^ 0x005e_ed0f_4a11_d0c5);
    let every = shape.mix == Mix::Every;
    let mut leaving: Vec<Option<Leave>> = vec![None; nodes];
    let mut noticed = vec![false; nodes];
    let mut times: Vec<Ms> = (0..shape.changes)
        .map(|_| from + rng.below((to - from) as usize) as Ms)
        .collect();
    times.sort_unstable();
    let mut out = Vec::new();
    for t in times {
        let mut node = rng.below(nodes);
        let away: Vec<usize> = (0..nodes).filter(|n| leaving[*n].is_some()).collect();
        if leaving[node].is_none() && away.len() >= MAX_LEAVING {
            node = *rng.pick(&away).unwrap_or(&node);
        }
        let w = match leaving[node] {
            None => {
                let taint = rng.chance(0.5);
                let how = match (taint, every && variety.chance(0.5)) {
                    (true, false) => Leave::Taint,
                    // signal-svc taints a Node object once for a notice: an operator who
                    // removed that taint took the node back, and the Event stays (a new VM,
                    // a new Node object, may be noticed again).
                    (true, true) if noticed[node] => Leave::Taint,
                    (true, true) => {
                        noticed[node] = true;
                        Leave::Notice
                    }
                    (false, false) => Leave::Exclude,
                    (false, true) => Leave::Hold,
                };
                leaving[node] = Some(how);
                Work::Leave { node, how }
            }
            Some(how) => {
                leaving[node] = None;
                // Never a Node that had a notice: its Event outlives the Node and names it,
                // and signal-svc tells a stale one from the new incarnation's by comparing the
                // Event's time with the Node's creationTimestamp, both whole seconds of the
                // real clock, which this simulation compresses 30-80x: the same second counts
                // the notice again (fail closed). In a cluster a VM is re-registered minutes
                // after its notice; `core::index`'s tests hold that rule.
                if every && !noticed[node] && variety.chance(1.0 / 3.0) {
                    Work::Recreate { node }
                } else {
                    Work::Return { node, how }
                }
            }
        };
        out.push((t, w));
    }
    out
}

fn fault(rng: &mut Rng, signals: usize, nodes: usize, (from, to): (Ms, Ms)) -> Fault {
    let kind = *rng.pick(&FaultKind::ALL).unwrap_or(&FaultKind::WatchDrop);
    let at = from + rng.below((to - from) as usize) as Ms;
    let len = |rng: &mut Rng, lo: u64, hi: u64| {
        let d = ms(rng.between(Duration::from_millis(lo), Duration::from_millis(hi)));
        (at + d).min(to)
    };
    let services: Vec<Host> = SIGNALS[..signals]
        .iter()
        .chain(ACTUATORS.iter())
        .copied()
        .collect();
    let any_host: Vec<Host> = services.iter().copied().chain([KUBE, ARM]).collect();
    let mut f = Fault {
        kind,
        at,
        until: at,
        hosts: Vec::new(),
        param: 0,
        count: 0,
        node: None,
    };
    match kind {
        FaultKind::Partition | FaultKind::SlowLink => {
            let a = *rng.pick(&services).unwrap_or(&ACTUATORS[0]);
            let others: Vec<Host> = any_host.iter().copied().filter(|h| *h != a).collect();
            let b = *rng.pick(&others).unwrap_or(&KUBE);
            f.hosts = vec![a, b];
            f.until = len(rng, 1_000, 12_000);
            if kind == FaultKind::SlowLink {
                f.param = 100 + rng.below(1_900) as u64;
            }
        }
        FaultKind::Crash | FaultKind::Freeze => {
            f.hosts = vec![*rng.pick(&services).unwrap_or(&ACTUATORS[0])];
            f.until = len(rng, 500, 10_000);
        }
        FaultKind::LeaseOutage => {
            // One of two replicas frozen for the outage (the standby, or the leader itself):
            // a frozen standby cannot take over, so the leader must re-take its own Lease (N1).
            // With one replica, the outage alone.
            if signals == 2 {
                f.hosts = vec![*rng.pick(&SIGNALS).unwrap_or(&SIGNALS[0])];
            }
            f.until = len(rng, 2_000, 8_000);
        }
        FaultKind::KubeLatency => {
            f.param = 50 + rng.below(700) as u64;
            f.until = len(rng, 1_000, 8_000);
        }
        FaultKind::KubeFailures => {
            f.param = *rng.pick(&[500u64, 503, 429]).unwrap_or(&500);
            f.count = 1 + rng.below(20) as u32;
        }
        FaultKind::WatchDrop | FaultKind::WatchExpired => {}
        FaultKind::ArmThrottle | FaultKind::ArmServerErrors | FaultKind::ArmFailedOps => {
            f.count = 1 + rng.below(6) as u32;
        }
        FaultKind::ArmLockConflicts | FaultKind::ArmStaleWrites => {
            f.count = 1 + rng.below(4) as u32;
        }
        FaultKind::ArmOutage => f.until = len(rng, 1_000, 10_000),
        FaultKind::ArmSlowOps => f.until = len(rng, 3_000, 15_000),
        FaultKind::OutsideWrite => f.node = Some((rng.below(nodes), rng.chance(0.5))),
        FaultKind::LbRemoved => {
            // Which of the cluster's LBs (modulo their count).
            f.param = rng.below(16) as u64;
            f.until = len(rng, 1_000, 8_000);
        }
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_is_its_plan() {
        let a = plan(42, Shape::SHORT, 6);
        let b = plan(42, Shape::SHORT, 6);
        assert_eq!(a, b);
        assert_ne!(a, plan(43, Shape::SHORT, 6));
    }

    #[test]
    fn every_fault_ends_before_the_quiet_tail_and_starts_in_the_storm() {
        for seed in 0..500 {
            let p = plan(seed, Shape::SHORT, 6);
            for f in &p.faults {
                assert!(f.at >= p.shape.warmup_ms, "{f:?}");
                assert!(f.until <= p.shape.quiet_from(), "{f:?}");
                assert!(f.until >= f.at, "{f:?}");
            }
            for (t, _) in &p.work {
                assert!(*t >= p.shape.warmup_ms && *t < p.shape.quiet_from());
            }
        }
    }

    #[test]
    fn faults_only_touch_hosts_that_run() {
        for seed in 0..500 {
            let p = plan(seed, Shape::SHORT, 6);
            let running: Vec<Host> = p.service_hosts().into_iter().chain([KUBE, ARM]).collect();
            for f in &p.faults {
                for h in &f.hosts {
                    assert!(running.contains(h), "seed {seed}: {f:?} touches {h}");
                }
                if let [a, b] = f.hosts[..] {
                    assert_ne!(a, b);
                }
            }
        }
    }

    #[test]
    fn a_thousand_seeds_cover_every_fault_kind_and_both_topologies() {
        let mut kinds = std::collections::BTreeSet::new();
        let mut singles = 0;
        for seed in 0..1000 {
            let p = plan(seed, Shape::SHORT, 6);
            kinds.extend(p.faults.iter().map(|f| f.kind));
            singles += usize::from(p.signals == 1);
        }
        assert_eq!(kinds.len(), FaultKind::ALL.len());
        assert!(
            (100..300).contains(&singles),
            "{singles} single-replica runs"
        );
    }

    #[test]
    fn never_more_than_the_guard_allows_are_away() {
        for seed in 0..300 {
            let p = plan(
                seed,
                Shape {
                    changes: 60,
                    ..Shape::SHORT
                },
                6,
            );
            let mut away = std::collections::BTreeSet::new();
            for (_, w) in &p.work {
                if w.leaves() {
                    away.insert(w.node());
                } else {
                    away.remove(&w.node());
                }
                assert!(away.len() <= MAX_LEAVING, "seed {seed}");
            }
        }
    }

    #[test]
    fn a_node_alternates_between_leaving_and_returning() {
        let p = plan(
            7,
            Shape {
                changes: 200,
                ..Shape::SHORT
            },
            3,
        );
        for n in 0..3 {
            let mut away: Option<Leave> = None;
            let mut noticed = false;
            for (_, w) in p.work.iter().filter(|(_, w)| w.node() == n) {
                match (w, away) {
                    (Work::Leave { how, .. }, None) => {
                        // One notice per Node object.
                        if *how == Leave::Notice {
                            assert!(!noticed, "node {n} noticed twice");
                            noticed = true;
                        }
                        away = Some(*how);
                    }
                    // A return undoes the departure it follows, or the Node is registered anew.
                    (Work::Return { how, .. }, Some(left)) if *how == left => away = None,
                    (Work::Recreate { .. }, Some(_)) => {
                        assert!(!noticed, "node {n} re-registered after a notice");
                        away = None;
                    }
                    _ => panic!("node {n}: {w:?} while away {away:?}"),
                }
            }
        }
    }

    #[test]
    fn every_departure_and_the_recreation_are_drawn_and_the_mix_keeps_times_and_faults() {
        let mut seen = std::collections::BTreeSet::new();
        let mut recreated = 0;
        for seed in 0..200 {
            let every = plan(seed, Shape::SHORT, 6);
            let old = plan(
                seed,
                Shape {
                    mix: Mix::TaintsAndLabels,
                    ..Shape::SHORT
                },
                6,
            );
            assert_eq!(every.faults, old.faults, "seed {seed}");
            let when = |p: &Plan| {
                p.work
                    .iter()
                    .map(|(t, w)| (*t, w.node(), w.leaves()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(when(&every), when(&old), "seed {seed}");
            for (_, w) in &every.work {
                match w {
                    Work::Leave { how, .. } => {
                        seen.insert(*how);
                    }
                    Work::Recreate { .. } => recreated += 1,
                    Work::Return { .. } => {}
                }
            }
            assert!(old.work.iter().all(|(_, w)| !matches!(
                w,
                Work::Recreate { .. }
                    | Work::Leave {
                        how: Leave::Hold | Leave::Notice,
                        ..
                    }
            )));
        }
        assert_eq!(seen.len(), Leave::ALL.len());
        assert!(recreated > 50, "{recreated} recreations");
    }
}
