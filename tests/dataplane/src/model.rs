//! The pure data-plane model (no I/O): departure timelines, probe engine, admin state,
//! eligibility and selection, per-mux application of changes. Contract sections 1, 2.6, 3, 4.4,
//! 6.2, 6.3. The kernel and user-space realisations drive the same functions in real time.

use crate::params::{LbParams, Range, Timings, Unknowns};
use rand::Rng;
use std::fmt;

/// How the node leaves (contract 4.4; t = 0 at the first signal).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Departure {
    /// Planned (cluster-autoscaler shape): taint at 0 (cutover and KEP-3836 see it), pods evicted,
    /// VM deleted at `Timings::planned_lead`.
    Planned,
    /// The VM dies silently at 0: no Kubernetes signal before the probe notices.
    SilentDeath,
    /// Spot eviction: `Preempt` notice at 0 (cutover's signal; KEP-3836 blind), VM gone after
    /// `notice` seconds; AKS's best-effort drain is taken as absent (pessimistic).
    Spot { notice: f64 },
    /// AKS node image / version upgrade (4.4 `upgrade`): cordon at 0 (no taint, no
    /// `deletionTimestamp`: KEP-3836 and cutover's default triggers are blind; only
    /// `--trigger-cordon` sees it), the node's pods evicted as in [`Departure::Planned`], soak 0,
    /// the VM stops forwarding at the reimage start, `drain` seconds after the cordon
    /// (the contract's drain timeout is [`crate::params::AKS_DRAIN_TIMEOUT`]).
    AksUpgrade { drain: f64 },
}

impl fmt::Display for Departure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Departure::Planned => write!(f, "planned (CA)"),
            Departure::SilentDeath => write!(f, "silent VM death"),
            Departure::Spot { notice } => write!(f, "Spot, {notice:.0} s notice"),
            Departure::AksUpgrade { drain } => write!(f, "AKS upgrade, {drain:.0} s drain"),
        }
    }
}

/// The Service's `externalTrafficPolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    Cluster,
    Local,
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Policy::Cluster => "Cluster",
            Policy::Local => "Local",
        })
    }
}

/// What takes the node out of the load balancer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// CPA's default `servicenodeport` probes only.
    ProbeOnly,
    /// AKS shared-probe mode: eTP Cluster rules probe kube-proxy's `/healthz` (KEP-3836);
    /// eTP Local rules unchanged.
    Kep3836,
    /// cutover: `adminState=Down` written at the signal (default probes underneath), with
    /// signal-svc's default triggers (CA taint, Spot notice, `deletionTimestamp`; not a cordon).
    Cutover,
    /// cutover with signal-svc's opt-in `--trigger-cordon`: a cordon is a signal too.
    CutoverCordon,
}

impl Mode {
    /// Whether cutover writes `Down` in this mode (at its signal).
    pub fn is_cutover(self) -> bool {
        matches!(self, Mode::Cutover | Mode::CutoverCordon)
    }
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::ProbeOnly => "probe-only",
            Mode::Kep3836 => "KEP-3836 shared",
            Mode::Cutover => "cutover",
            Mode::CutoverCordon => "cutover --trigger-cordon",
        })
    }
}

/// The probe of the rule (contract 2 "What is probed").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    /// TCP to the nodePort (eTP Cluster, `servicenodeport`): succeeds on any live node.
    Tcp,
    /// HTTP `/healthz` of kube-proxy (shared mode): 503 with `deletionTimestamp` or the CA taint.
    HttpShared,
    /// HTTP `healthCheckNodePort` (eTP Local): 503 once no local endpoint is ready.
    HttpHcnp,
}

impl ProbeKind {
    pub fn is_http(self) -> bool {
        !matches!(self, ProbeKind::Tcp)
    }
}

pub fn probe_kind(policy: Policy, mode: Mode) -> ProbeKind {
    match (policy, mode) {
        (Policy::Local, _) => ProbeKind::HttpHcnp,
        (Policy::Cluster, Mode::Kep3836) => ProbeKind::HttpShared,
        (Policy::Cluster, _) => ProbeKind::Tcp,
    }
}

/// One departure of one node, as the data plane sees it (contract 6.2). `None`: never.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeTimeline {
    /// kube-proxy's `/healthz` answers 503 from here (deletionTimestamp or CA taint).
    pub kep_unhealthy: Option<f64>,
    /// Local endpoints turn terminating: `healthCheckNodePort` answers 503 from here.
    pub local_terminating: Option<f64>,
    /// Local pods have exited: kube-proxy drops SYNs to the Service (eTP Local "no local
    /// endpoints"), established flows to them end.
    pub local_exit: Option<f64>,
    /// The VM is gone: every packet dropped, no RST (contract 4.1 force delete).
    pub dead: f64,
    /// cutover's PUT accepted by ARM.
    pub cutover_put: Option<f64>,
    /// cutover's operation `Succeeded`.
    pub cutover_lro_done: Option<f64>,
}

impl NodeTimeline {
    pub fn draw(
        dep: Departure,
        policy: Policy,
        mode: Mode,
        t: &Timings,
        rng: &mut impl Rng,
    ) -> Self {
        let (dead, kep, signal_for_cutover) = match dep {
            Departure::Planned => (t.planned_lead.draw(rng), Some(0.0), true),
            Departure::SilentDeath => (0.0, None, false),
            Departure::Spot { notice } => (notice, None, true),
            // A cordon only: no CA taint, no deletionTimestamp (KEP-3836 blind).
            Departure::AksUpgrade { drain } => (drain, None, mode == Mode::CutoverCordon),
        };
        let (local_terminating, local_exit) = match (dep, policy) {
            (Departure::Planned | Departure::AksUpgrade { .. }, Policy::Local) => {
                let term = t.planned_evict_after.draw(rng);
                let exit = (term + t.local_pod_exit_after.draw(rng)).min(dead);
                (Some(term), Some(exit))
            }
            _ => (None, None),
        };
        let (cutover_put, cutover_lro_done) = if mode.is_cutover() && signal_for_cutover {
            let put = t.cutover_put_after.draw(rng);
            (Some(put), Some(put + t.arm_operation.draw(rng)))
        } else {
            (None, None)
        };
        NodeTimeline {
            kep_unhealthy: kep,
            local_terminating,
            local_exit,
            dead,
            cutover_put,
            cutover_lro_done,
        }
    }

    pub fn alive(&self, t: f64) -> bool {
        t < self.dead
    }

    /// Whether the Service answers on this node at `t` (alive and, for eTP Local, local pods).
    pub fn serves(&self, policy: Policy, t: f64) -> bool {
        self.alive(t) && !(policy == Policy::Local && self.local_exit.is_some_and(|e| t >= e))
    }

    /// Outcome of a probe sent at `s` (contract 2.6 "Model").
    pub fn probe_outcome(&self, kind: ProbeKind, s: f64) -> ProbeOutcome {
        if !self.alive(s) {
            return ProbeOutcome::Timeout;
        }
        let bad = match kind {
            ProbeKind::Tcp => false,
            ProbeKind::HttpShared => self.kep_unhealthy.is_some_and(|k| s >= k),
            ProbeKind::HttpHcnp => self.local_terminating.is_some_and(|k| s >= k),
        };
        match (kind, bad) {
            (_, false) => ProbeOutcome::Ok,
            (ProbeKind::Tcp, true) => ProbeOutcome::Reset,
            (_, true) => ProbeOutcome::HttpNon200,
        }
    }

    /// When the data plane's admin state of this entry turns `Down` for one mux (U1).
    pub fn admin_down_for_mux(&self, u: &Unknowns, rng: &mut impl Rng) -> Option<f64> {
        let base = if u.apply_before_lro {
            self.cutover_put?
        } else {
            self.cutover_lro_done?
        };
        Some(base + Range::new(0.0, u.admin_apply_lag_max).draw(rng))
    }
}

/// One probe's answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// TCP connected / HTTP 200.
    Ok,
    /// HTTP non-200.
    HttpNon200,
    /// TCP RST (kube-proxy REJECT, closed port).
    Reset,
    /// No answer within the probe's timeout.
    Timeout,
}

/// When a probe's outcome is known: a timeout at the next send (TCP) or after min(I, 30 s)
/// (HTTP); an answer at once.
pub fn probe_eval_time(kind: ProbeKind, outcome: ProbeOutcome, sent: f64, lb: &LbParams) -> f64 {
    match (outcome, kind.is_http()) {
        (ProbeOutcome::Timeout, true) => sent + lb.http_timeout(),
        (ProbeOutcome::Timeout, false) => sent + lb.probe_interval,
        _ => sent,
    }
}

/// A probe-driven state change detected at `at` (before the platform's reaction R).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeChange {
    pub at: f64,
    pub up: bool,
}

/// The probe state machine of one (entry, probe) (contract 2.6 "Model").
#[derive(Debug, Clone, PartialEq)]
pub struct ProbeState {
    pub up: bool,
    fails: u32,
    oks: u32,
    last_down: Option<f64>,
}

impl Default for ProbeState {
    /// Instances start healthy (a running VM with one successful probe after boot).
    fn default() -> Self {
        ProbeState {
            up: true,
            fails: 0,
            oks: 0,
            last_down: None,
        }
    }
}

impl ProbeState {
    /// Feed one outcome, evaluated at `at` (use [`probe_eval_time`]); results must come in
    /// evaluation order. Returns the change it causes.
    pub fn observe(
        &mut self,
        kind: ProbeKind,
        outcome: ProbeOutcome,
        at: f64,
        lb: &LbParams,
        u: &Unknowns,
    ) -> Option<ProbeChange> {
        let go_down = |s: &mut ProbeState| {
            s.fails = 0;
            s.oks = 0;
            if s.up {
                s.up = false;
                s.last_down = Some(at);
                Some(ProbeChange { at, up: false })
            } else {
                None
            }
        };
        let go_up = |s: &mut ProbeState| {
            s.fails = 0;
            s.oks = 0;
            if s.up {
                return None;
            }
            s.up = true;
            let hold = match s.last_down {
                Some(d) if at - d <= u.flap_window => u.flap_hold,
                _ => 0.0,
            };
            Some(ProbeChange {
                at: at + hold,
                up: true,
            })
        };
        match (kind.is_http(), outcome) {
            // HTTP: explicit answers mark up or down at once; only timeouts count.
            (true, ProbeOutcome::Ok) => go_up(self),
            (true, ProbeOutcome::HttpNon200 | ProbeOutcome::Reset) => go_down(self),
            (_, ProbeOutcome::Timeout)
            | (false, ProbeOutcome::Reset | ProbeOutcome::HttpNon200) => {
                self.oks = 0;
                self.fails += 1;
                if self.fails >= lb.probe_threshold {
                    go_down(self)
                } else {
                    None
                }
            }
            (false, ProbeOutcome::Ok) => {
                self.fails = 0;
                if self.up {
                    return None;
                }
                self.oks += 1;
                if self.oks >= lb.probe_threshold {
                    go_up(self)
                } else {
                    None
                }
            }
        }
    }
}

/// Probe changes of one entry over `[0, until]`, probes sent at `phase + k I` (phase in
/// [0, I), drawn once), outcomes from the node's timeline.
pub fn simulate_probes(
    node: &NodeTimeline,
    kind: ProbeKind,
    phase: f64,
    until: f64,
    lb: &LbParams,
    u: &Unknowns,
) -> Vec<ProbeChange> {
    let mut results: Vec<(f64, ProbeOutcome)> = Vec::new();
    // Start a few intervals early so the state is settled at 0.
    let mut s = phase - 4.0 * lb.probe_interval;
    while s <= until {
        let o = node.probe_outcome(kind, s);
        results.push((probe_eval_time(kind, o, s, lb), o));
        s += lb.probe_interval;
    }
    results.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut st = ProbeState::default();
    results
        .into_iter()
        .filter_map(|(at, o)| st.observe(kind, o, at, lb, u))
        .collect()
}

/// Admin state of a backend entry (contract 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admin {
    None,
    Up,
    Down,
}

/// Eligibility of an entry for a new flow (contract 1 "Model"): admin `Down` never; `Up`
/// always; `None` follows the probe. A rule without probe ignores admin state.
pub fn eligible(member: bool, admin: Admin, probe_up: bool, has_probe: bool) -> bool {
    if !member {
        return false;
    }
    if !has_probe {
        return true;
    }
    match admin {
        Admin::Down => false,
        Admin::Up => true,
        Admin::None => probe_up,
    }
}

/// 5-tuple hash selection over the eligible entries (sorted, so every realisation agrees).
pub fn select(hash: u64, eligible: &[usize]) -> Option<usize> {
    if eligible.is_empty() {
        None
    } else {
        Some(eligible[(hash % eligible.len() as u64) as usize])
    }
}

/// A simple 5-tuple hash (FNV-1a), for the user-space realisation.
pub fn tuple_hash(src: std::net::SocketAddr, dst: std::net::SocketAddr) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let s = format!("{src}-{dst}-tcp");
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    // splitmix64 finaliser: FNV's low bits are weak for sequential ephemeral ports.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// What one mux believes about one entry over time: piecewise-constant change points.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MuxView {
    probe: Vec<(f64, bool)>,
    /// When this mux applies admin `Down` (U1 drawn per mux).
    pub admin_down_at: Option<f64>,
}

impl MuxView {
    /// Each probe change reaches this mux after its own reaction draw R (U2); admin `Down` at
    /// `admin_down_at` (U1, already drawn per mux).
    pub fn build(
        changes: &[ProbeChange],
        admin_down_at: Option<f64>,
        u: &Unknowns,
        rng: &mut impl Rng,
    ) -> Self {
        let mut probe: Vec<(f64, bool)> = changes
            .iter()
            .map(|c| (c.at + Range::new(0.0, u.probe_reaction_max).draw(rng), c.up))
            .collect();
        probe.sort_by(|a, b| a.0.total_cmp(&b.0));
        MuxView {
            probe,
            admin_down_at,
        }
    }

    pub fn probe_up(&self, t: f64) -> bool {
        self.probe
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .is_none_or(|(_, up)| *up)
    }

    pub fn admin(&self, t: f64) -> Admin {
        if self.admin_down_at.is_some_and(|d| t >= d) {
            Admin::Down
        } else {
            Admin::None
        }
    }

    pub fn eligible(&self, t: f64) -> bool {
        eligible(true, self.admin(t), self.probe_up(t), true)
    }

    /// The last instant this mux still takes new flows for the entry (None: never stops).
    pub fn ineligible_from(&self, after: f64) -> Option<f64> {
        let mut candidates: Vec<f64> = self.probe.iter().map(|(t, _)| *t).collect();
        candidates.extend(self.admin_down_at);
        candidates.push(after);
        candidates.sort_by(f64::total_cmp);
        candidates
            .into_iter()
            .filter(|t| *t >= after)
            .find(|t| !self.eligible(*t))
    }
}

/// The contract's analytic anchor (section 5): failed new connections of a silent death behind
/// a TCP probe, λ/N × (mean W + mean R), W ∈ (T I, (T+1) I].
pub fn closed_form_probe_only(
    new_per_sec: f64,
    members: usize,
    lb: &LbParams,
    u: &Unknowns,
) -> f64 {
    let mean_w = (f64::from(lb.probe_threshold) + 0.5) * lb.probe_interval;
    let mean_r = u.probe_reaction_max / 2.0;
    new_per_sec / members as f64 * (mean_w + mean_r)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn dead_at(d: f64) -> NodeTimeline {
        NodeTimeline {
            kep_unhealthy: None,
            local_terminating: None,
            local_exit: None,
            dead: d,
            cutover_put: None,
            cutover_lro_done: None,
        }
    }

    #[test]
    fn tcp_probe_marks_a_dead_vm_down_between_2i_and_3i() {
        let lb = LbParams::default();
        let u = Unknowns::default();
        for phase in [0.01, 1.0, 2.5, 4.99] {
            let ch = simulate_probes(&dead_at(0.0), ProbeKind::Tcp, phase, 60.0, &lb, &u);
            assert_eq!(ch.len(), 1, "{ch:?}");
            assert!(!ch[0].up);
            assert!(ch[0].at > 10.0 && ch[0].at <= 15.0, "phase {phase}: {ch:?}");
        }
    }

    #[test]
    fn http_probe_marks_down_on_the_first_503() {
        let lb = LbParams::default();
        let u = Unknowns::default();
        let mut node = dead_at(100.0);
        node.kep_unhealthy = Some(3.0);
        let ch = simulate_probes(&node, ProbeKind::HttpShared, 4.0, 60.0, &lb, &u);
        assert_eq!(ch[0], ProbeChange { at: 4.0, up: false });
        // The nodePort TCP probe does not see kube-proxy's verdict.
        assert!(simulate_probes(&node, ProbeKind::Tcp, 4.0, 60.0, &lb, &u).is_empty());
    }

    #[test]
    fn http_probe_timeout_needs_the_threshold() {
        let lb = LbParams::default();
        let u = Unknowns::default();
        let ch = simulate_probes(&dead_at(0.0), ProbeKind::HttpHcnp, 2.0, 60.0, &lb, &u);
        // sent 2 and 7, each times out after min(I, 30) = 5 s: down at 12.
        assert_eq!(
            ch[0],
            ProbeChange {
                at: 12.0,
                up: false
            }
        );
    }

    #[test]
    fn tcp_up_needs_threshold_successes_and_flap_hold() {
        let lb = LbParams::default();
        let u = Unknowns::default();
        let mut st = ProbeState::default();
        let k = ProbeKind::Tcp;
        assert!(st.observe(k, ProbeOutcome::Timeout, 5.0, &lb, &u).is_none());
        assert_eq!(
            st.observe(k, ProbeOutcome::Timeout, 10.0, &lb, &u),
            Some(ProbeChange {
                at: 10.0,
                up: false
            })
        );
        assert!(st.observe(k, ProbeOutcome::Ok, 15.0, &lb, &u).is_none());
        // Up after T successes, held by the flap hold-down (Down 10 s earlier).
        assert_eq!(
            st.observe(k, ProbeOutcome::Ok, 20.0, &lb, &u),
            Some(ProbeChange { at: 30.0, up: true })
        );
    }

    #[test]
    fn eligibility_follows_admin_then_probe() {
        assert!(!eligible(true, Admin::Down, true, true));
        assert!(eligible(true, Admin::Up, false, true));
        assert!(eligible(true, Admin::None, true, true));
        assert!(!eligible(true, Admin::None, false, true));
        // No probe: admin state has no effect (contract 1).
        assert!(eligible(true, Admin::Down, false, false));
        assert!(!eligible(false, Admin::Up, true, true));
    }

    #[test]
    fn selection_is_stable_per_hash_and_spreads() {
        let el = [1, 3, 5];
        assert_eq!(select(4, &el), Some(3));
        assert_eq!(select(4, &el), select(4, &el));
        assert_eq!(select(0, &[]), None);
    }

    #[test]
    fn mux_view_down_then_ineligible() {
        let u = Unknowns::default();
        let mut rng = StdRng::seed_from_u64(1);
        let v = MuxView::build(
            &[ProbeChange {
                at: 12.0,
                up: false,
            }],
            Some(8.0),
            &u,
            &mut rng,
        );
        assert!(v.eligible(7.9));
        assert!(!v.eligible(8.0));
        assert_eq!(v.ineligible_from(0.0), Some(8.0));
    }

    #[test]
    fn cutover_timeline_needs_a_signal() {
        let t = Timings::default();
        let mut rng = StdRng::seed_from_u64(2);
        let silent = NodeTimeline::draw(
            Departure::SilentDeath,
            Policy::Cluster,
            Mode::Cutover,
            &t,
            &mut rng,
        );
        assert_eq!(silent.cutover_lro_done, None);
        let spot = NodeTimeline::draw(
            Departure::Spot { notice: 30.0 },
            Policy::Cluster,
            Mode::Cutover,
            &t,
            &mut rng,
        );
        let done = spot.cutover_lro_done.unwrap();
        assert!((10.2..=20.2).contains(&done));
        assert_eq!(spot.dead, 30.0);
    }

    #[test]
    fn aks_upgrade_loses_new_flows_only_after_the_reimage_unless_the_cordon_cuts() {
        use crate::sim::{Scenario, run_cell};
        let drain = 30.0;
        let dep = Departure::AksUpgrade { drain };
        let mk = |policy, mode| {
            let mut sc = Scenario::new(dep, policy, mode);
            sc.clients.pool = 0;
            sc.clients.streams = 0;
            sc
        };
        // No taint, no deletionTimestamp: KEP-3836's /healthz and cutover's defaults see nothing.
        let mut rng = StdRng::seed_from_u64(3);
        let t = Timings::default();
        for mode in [Mode::ProbeOnly, Mode::Kep3836, Mode::Cutover] {
            let node = NodeTimeline::draw(dep, Policy::Cluster, mode, &t, &mut rng);
            assert_eq!(node.kep_unhealthy, None);
            assert_eq!(node.cutover_lro_done, None);
            assert_eq!(node.dead, drain);
        }
        // Probe-only, eTP Cluster: the node serves through the drain; every failed new
        // connection is a SYN to the reimaged VM, and the node takes new flows until the
        // probe notices it (after the reimage).
        let sc = mk(Policy::Cluster, Mode::ProbeOnly);
        for seed in 0..20 {
            let r = run_cell(&sc, seed);
            assert!(r.failed_new > 0, "{r:?}");
            assert_eq!(
                r.by_cause.get(&("new".to_string(), "vm_dead".to_string())),
                Some(&r.failed_new),
                "{r:?}"
            );
            assert!(r.last_new_on_node.unwrap() >= drain, "{r:?}");
            // Not one new flow lost during the drain: the node is still eligible when it dies.
            let plan = crate::sim::plan(&sc, &mut StdRng::seed_from_u64(seed));
            assert!(plan.views.iter().all(|v| v.eligible(drain - 1e-9)));
        }
        // cutover --trigger-cordon: Down at 0.2 s + the operation + A, before the reimage when
        // the operation is shorter than the drain: no new connection fails.
        for op in [
            Range::new(10.0, 20.0),
            Range::fixed(2.0),
            Range::fixed(24.0),
        ] {
            let mut sc = mk(Policy::Cluster, Mode::CutoverCordon);
            sc.timings.arm_operation = op;
            let r = crate::sim::run_cell_mean(&sc, 50);
            assert_eq!(r.failed_new + r.failed_reconnect, 0, "op {op:?}: {r:?}");
            assert!(
                r.last_new_on_node.unwrap_or(0.0) < drain,
                "op {op:?}: {r:?}"
            );
        }
        // The plain-cordon-blind default equals probe-only, seed by seed.
        for seed in 0..5 {
            assert_eq!(
                run_cell(&mk(Policy::Cluster, Mode::Cutover), seed),
                run_cell(&mk(Policy::Cluster, Mode::ProbeOnly), seed)
            );
        }
    }

    #[test]
    fn closed_form_matches_the_contract_example() {
        // λ = 1000/s, N = 10, I = 5, T = 2: 100/s × (12.5 + 2.5) = 1,500.
        let v = closed_form_probe_only(1000.0, 10, &LbParams::default(), &Unknowns::default());
        assert!((v - 1500.0).abs() < 1e-9);
    }
}
