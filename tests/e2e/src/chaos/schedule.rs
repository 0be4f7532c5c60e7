//! The chaos soak's fault schedule: which fault starts when and for how long, decided up front
//! from a seed and nothing else, so a run can be replayed. Pure: no I/O, no clock.
//!
//! Faults run in four lanes, one fault at a time per lane, so no moment has every replica of a
//! service dead at once (a pod's restart is part of the fault) and an ARM outage never hides a
//! second one: processes (signal-svc and actuator-svc kills, stops, restarts), the Kubernetes
//! API (latency, failed requests, watch drops and 410s, the Lease deleted), ARM (429 storms,
//! outages, operations ending `Failed`) and outside writers. A quiet tail at the end lets the
//! system settle before the end state is judged.

use std::time::Duration;

/// A small seeded generator (SplitMix64): reproducible across platforms and Rust versions.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }

    /// Uniform in `[lo, hi]` at millisecond resolution.
    pub fn between(&mut self, lo: Duration, hi: Duration) -> Duration {
        let (lo, hi) = (
            lo.as_millis() as u64,
            hi.as_millis().max(lo.as_millis()) as u64,
        );
        Duration::from_millis(lo + self.next_u64() % (hi - lo + 1))
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 <= p
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        items.get(self.below(items.len()))
    }
}

/// Every fault the soak injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FaultKind {
    /// Every Kubernetes request delayed by `param` ms (0-2,000) for the fault's length.
    KubeLatency,
    /// The next `param` Kubernetes requests on one path fail (500, 503, 504 or 429).
    KubeFailures,
    /// Every open watch ends (clients re-watch from their resourceVersion).
    WatchDrop,
    /// History compacted, then every watch ends: clients get 410 Gone and re-list.
    WatchExpired,
    /// The signal-svc Lease deleted.
    LeaseDeleted,
    /// A signal-svc replica SIGKILLed, restarted after the fault's length (its pod's restart).
    SignalKill,
    /// A signal-svc replica SIGTERMed (graceful: releases the Lease), restarted after the length.
    SignalTerm,
    /// A signal-svc replica SIGSTOPped for the fault's length, then SIGCONT.
    SignalStop,
    /// An actuator replica SIGKILLed, restarted after the fault's length.
    ActuatorKill,
    /// An actuator replica SIGSTOPped for the fault's length, then SIGCONT.
    ActuatorStop,
    /// An actuator replica SIGTERMed and started again at once (a rollout).
    ActuatorRestart,
    /// Every ARM request answered 429 for the fault's length.
    ArmThrottle,
    /// Every ARM request answered 500 for the fault's length.
    ArmOutage,
    /// The next `param` ARM write operations end `Failed`.
    ArmFailedOps,
    /// An outside writer sets one entry of a node `Down` (a healthy node's, if any).
    OutsideDown,
    /// An outside writer sets one entry of a node `None` (a Down node's, if any).
    OutsideNone,
    /// An internal load balancer deleted (cloud-provider-azure, its last internal Service
    /// gone) and created again after the fault's length with no admin state on any entry.
    LbRemoved,
    /// Every Lease call fails (503) for the fault's length while the standby signal-svc is
    /// stopped (it cannot win): an API server restart, an etcd leader change or throttling
    /// of the Lease alone. The leader re-takes its own record under the same epoch, the path
    /// that lost cuts silently (issue 26, N1).
    LeaseOutage,
}

impl FaultKind {
    pub const ALL: [FaultKind; 18] = [
        FaultKind::KubeLatency,
        FaultKind::KubeFailures,
        FaultKind::WatchDrop,
        FaultKind::WatchExpired,
        FaultKind::LeaseDeleted,
        FaultKind::SignalKill,
        FaultKind::SignalTerm,
        FaultKind::SignalStop,
        FaultKind::ActuatorKill,
        FaultKind::ActuatorStop,
        FaultKind::ActuatorRestart,
        FaultKind::ArmThrottle,
        FaultKind::ArmOutage,
        FaultKind::ArmFailedOps,
        FaultKind::OutsideDown,
        FaultKind::OutsideNone,
        FaultKind::LbRemoved,
        FaultKind::LeaseOutage,
    ];

    pub fn name(self) -> &'static str {
        match self {
            FaultKind::KubeLatency => "API latency",
            FaultKind::KubeFailures => "API requests failed",
            FaultKind::WatchDrop => "watches dropped",
            FaultKind::WatchExpired => "watches 410 Gone",
            FaultKind::LeaseDeleted => "Lease deleted",
            FaultKind::SignalKill => "signal-svc SIGKILL",
            FaultKind::SignalTerm => "signal-svc SIGTERM",
            FaultKind::SignalStop => "signal-svc SIGSTOP",
            FaultKind::ActuatorKill => "actuator SIGKILL",
            FaultKind::ActuatorStop => "actuator SIGSTOP",
            FaultKind::ActuatorRestart => "actuator restart",
            FaultKind::ArmThrottle => "ARM 429 storm",
            FaultKind::ArmOutage => "ARM outage",
            FaultKind::ArmFailedOps => "ARM operations Failed",
            FaultKind::OutsideDown => "outside write Down",
            FaultKind::OutsideNone => "outside write None",
            FaultKind::LbRemoved => "LB removed, re-created",
            FaultKind::LeaseOutage => "Lease outage, standby stopped",
        }
    }

    fn lane(self) -> Lane {
        match self {
            FaultKind::KubeLatency
            | FaultKind::KubeFailures
            | FaultKind::WatchDrop
            | FaultKind::WatchExpired
            | FaultKind::LeaseDeleted
            | FaultKind::LeaseOutage => Lane::Kube,
            FaultKind::SignalKill
            | FaultKind::SignalTerm
            | FaultKind::SignalStop
            | FaultKind::ActuatorKill
            | FaultKind::ActuatorStop
            | FaultKind::ActuatorRestart => Lane::Process,
            FaultKind::ArmThrottle | FaultKind::ArmOutage | FaultKind::ArmFailedOps => Lane::Arm,
            FaultKind::OutsideDown | FaultKind::OutsideNone => Lane::Outside,
            FaultKind::LbRemoved => Lane::Lb,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Kube,
    Process,
    Arm,
    Outside,
    /// Last, so adding it left the other lanes' draws for a seed as they were.
    Lb,
}

/// One scheduled fault.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fault {
    /// From the start of the run.
    pub at: Duration,
    /// How long it lasts (zero for instantaneous faults).
    pub length: Duration,
    pub kind: FaultKind,
    /// Which replica (process faults: `0` means the signal-svc leader, `1` a standby; the
    /// actuator replica index otherwise). Unused elsewhere.
    pub target: usize,
    /// Latency in ms, a failure or operation count, or the failing status; see [`FaultKind`].
    pub param: u64,
}

impl Fault {
    pub fn end(&self) -> Duration {
        self.at + self.length
    }
}

/// What to schedule: the run's length and each lane's pace and fault lengths.
#[derive(Debug, Clone)]
pub struct Plan {
    pub run: Duration,
    /// No fault starts or lasts into the last this-much of the run.
    pub quiet_tail: Duration,
    pub actuators: usize,
    /// Mean gap between two faults of a lane (each gap uniform in half to one and a half).
    pub process_gap: Duration,
    pub kube_gap: Duration,
    pub arm_gap: Duration,
    pub outside_gap: Duration,
    pub lb_gap: Duration,
    /// How long a removed load balancer stays away.
    pub lb_absent: (Duration, Duration),
    /// ARM outages: the 1-20 minutes scaled to the run (see [`Plan::for_run`]).
    pub outage: (Duration, Duration),
    pub storm: (Duration, Duration),
    /// How long a stopped process stays stopped.
    pub stop: (Duration, Duration),
    /// How long a killed or terminated process stays down before its pod restarts it.
    pub restart_delay: (Duration, Duration),
    pub latency_window: (Duration, Duration),
    pub max_latency_ms: u64,
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

impl Plan {
    /// The soak's plan for a run of `run`. ARM outages of the 1-20 minutes are scaled
    /// by `run / 20 min` and capped at a quarter of the run (a 10-minute soak: 30 s to 2.5 min;
    /// a 2-minute smoke: 6 to 30 s), so the system still has time to do work between them.
    pub fn for_run(run: Duration, actuators: usize) -> Plan {
        let scale = run.as_secs_f64() / 1200.0;
        let cap = run / 4;
        let outage_lo = Duration::from_secs_f64(60.0 * scale).clamp(secs(3), cap);
        let outage_hi = Duration::from_secs_f64(1200.0 * scale).clamp(outage_lo, cap);
        let short = run < secs(300);
        Plan {
            run,
            quiet_tail: if short { secs(40) } else { secs(60) },
            actuators,
            process_gap: if short { secs(12) } else { secs(25) },
            kube_gap: if short { secs(10) } else { secs(20) },
            arm_gap: (run / 5).max(secs(15)),
            outside_gap: if short { secs(10) } else { secs(20) },
            lb_gap: if short { secs(20) } else { secs(90) },
            lb_absent: if short {
                (secs(3), secs(12))
            } else {
                (secs(10), secs(60))
            },
            outage: (outage_lo, outage_hi),
            storm: if short {
                (secs(2), secs(8))
            } else {
                (secs(5), secs(45))
            },
            stop: if short {
                (secs(2), secs(8))
            } else {
                (secs(3), secs(30))
            },
            restart_delay: (secs(1), secs(10)),
            latency_window: if short {
                (secs(3), secs(10))
            } else {
                (secs(10), secs(60))
            },
            max_latency_ms: 2000,
        }
    }
}

const LANES: [Lane; 5] = [
    Lane::Process,
    Lane::Kube,
    Lane::Arm,
    Lane::Outside,
    Lane::Lb,
];

/// The schedule of faults for `seed`, ordered by start.
pub fn schedule(seed: u64, plan: &Plan) -> Vec<Fault> {
    let mut rng = Rng::new(seed);
    let horizon = plan.run.saturating_sub(plan.quiet_tail);
    let mut out = Vec::new();
    for lane in LANES {
        let gap = match lane {
            Lane::Process => plan.process_gap,
            Lane::Kube => plan.kube_gap,
            Lane::Arm => plan.arm_gap,
            Lane::Outside => plan.outside_gap,
            Lane::Lb => plan.lb_gap,
        };
        let kinds: Vec<FaultKind> = FaultKind::ALL
            .into_iter()
            .filter(|k| k.lane() == lane)
            .collect();
        let mut free_at = rng.between(gap / 2, gap);
        while let Some(&kind) = rng.pick(&kinds) {
            let mut fault = draw(&mut rng, plan, kind, free_at);
            if fault.at >= horizon {
                break;
            }
            // Clipped to the horizon: the quiet tail stays quiet.
            fault.length = fault.length.min(horizon - fault.at);
            free_at = fault.end() + rng.between(gap / 2, gap * 3 / 2);
            out.push(fault);
        }
    }
    out.sort_by_key(|f| (f.at, f.kind));
    out
}

fn draw(rng: &mut Rng, plan: &Plan, kind: FaultKind, at: Duration) -> Fault {
    let mut fault = Fault {
        at,
        length: Duration::ZERO,
        kind,
        target: 0,
        param: 0,
    };
    match kind {
        FaultKind::KubeLatency => {
            fault.length = rng.between(plan.latency_window.0, plan.latency_window.1);
            fault.param = rng.next_u64() % (plan.max_latency_ms + 1);
        }
        FaultKind::KubeFailures => {
            fault.param = 1 + rng.next_u64() % 3;
            // Which path and status: the driver draws them from `target`.
            fault.target = rng.below(16);
        }
        FaultKind::SignalKill | FaultKind::SignalTerm => {
            fault.length = rng.between(plan.restart_delay.0, plan.restart_delay.1);
            fault.target = usize::from(!rng.chance(0.7));
        }
        FaultKind::SignalStop => {
            fault.length = rng.between(plan.stop.0, plan.stop.1);
            fault.target = usize::from(!rng.chance(0.7));
        }
        FaultKind::ActuatorKill => {
            fault.length = rng.between(plan.restart_delay.0, plan.restart_delay.1);
            fault.target = rng.below(plan.actuators);
        }
        FaultKind::ActuatorStop => {
            fault.length = rng.between(plan.stop.0, plan.stop.1);
            fault.target = rng.below(plan.actuators);
        }
        FaultKind::ActuatorRestart => fault.target = rng.below(plan.actuators),
        // Longer than the renew deadline, shorter than what lets a standby win anyway.
        FaultKind::LeaseOutage => fault.length = rng.between(secs(4), secs(9)),
        FaultKind::ArmThrottle => fault.length = rng.between(plan.storm.0, plan.storm.1),
        FaultKind::ArmOutage => fault.length = rng.between(plan.outage.0, plan.outage.1),
        FaultKind::ArmFailedOps => fault.param = 1 + rng.next_u64() % 3,
        FaultKind::LbRemoved => {
            fault.length = rng.between(plan.lb_absent.0, plan.lb_absent.1);
            // Which internal LB: the driver takes it modulo their number.
            fault.target = rng.below(16);
        }
        FaultKind::WatchDrop
        | FaultKind::WatchExpired
        | FaultKind::LeaseDeleted
        | FaultKind::OutsideDown
        | FaultKind::OutsideNone => {}
    }
    fault
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ten_minutes() -> Plan {
        Plan::for_run(secs(600), 3)
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_another_seed_another() {
        let plan = ten_minutes();
        assert_eq!(schedule(7, &plan), schedule(7, &plan));
        assert_ne!(schedule(7, &plan), schedule(8, &plan));
    }

    #[test]
    fn a_ten_minute_run_injects_every_kind_of_fault_somewhere_in_a_few_seeds() {
        let plan = ten_minutes();
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..5 {
            seen.extend(schedule(seed, &plan).into_iter().map(|f| f.kind));
        }
        assert_eq!(seen.len(), FaultKind::ALL.len(), "{seen:?}");
    }

    #[test]
    fn one_fault_at_a_time_per_lane_and_a_quiet_tail() {
        let plan = ten_minutes();
        for seed in 0..20 {
            let faults = schedule(seed, &plan);
            for lane in LANES {
                let of_lane: Vec<&Fault> =
                    faults.iter().filter(|f| f.kind.lane() == lane).collect();
                for pair in of_lane.windows(2) {
                    assert!(pair[0].end() < pair[1].at, "{lane:?} overlaps: {pair:?}");
                }
            }
            let horizon = plan.run - plan.quiet_tail;
            assert!(faults.iter().all(|f| f.end() <= horizon), "seed {seed}");
        }
    }

    #[test]
    fn outages_are_scaled_to_the_run() {
        let ten = ten_minutes();
        assert_eq!(ten.outage, (secs(30), secs(150)));
        let smoke = Plan::for_run(secs(120), 2);
        assert_eq!(smoke.outage, (secs(6), secs(30)));
        let long = Plan::for_run(secs(7200), 3);
        assert_eq!(long.outage, (secs(360), secs(1800)));
        for seed in 0..20 {
            for f in schedule(seed, &ten) {
                if f.kind == FaultKind::ArmOutage {
                    assert!(f.length <= secs(150), "{f:?}");
                }
                if f.kind == FaultKind::KubeLatency {
                    assert!(f.param <= 2000, "{f:?}");
                }
                if matches!(f.kind, FaultKind::ActuatorKill | FaultKind::ActuatorStop) {
                    assert!(f.target < 3, "{f:?}");
                }
            }
        }
    }

    #[test]
    fn rng_stays_in_range() {
        let mut rng = Rng::new(1);
        for _ in 0..1000 {
            assert!(rng.below(3) < 3);
            let d = rng.between(secs(1), secs(2));
            assert!(d >= secs(1) && d <= secs(2));
        }
        assert_eq!(rng.below(0), 0);
        assert!(rng.pick::<u8>(&[]).is_none());
    }
}
