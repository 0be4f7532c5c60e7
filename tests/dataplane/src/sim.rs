//! The model realisation: one departure simulated in virtual time (no sockets), many seeds in
//! milliseconds. Flows follow contract 3 "Model" (5-tuple hash = uniform pick over the eligible
//! entries of the flow's mux; established flows pinned; a dead VM drops everything).

use crate::model::{Departure, Mode, MuxView, NodeTimeline, Policy, probe_kind, simulate_probes};
use crate::params::{ClientParams, LbParams, Range, Timings, Unknowns};
use crate::report::{Cause, CellResult};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Everything a cell needs.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub departure: Departure,
    pub policy: Policy,
    pub mode: Mode,
    /// Backend members (nodes); member 0 leaves.
    pub members: usize,
    pub lb: LbParams,
    pub unknowns: Unknowns,
    pub timings: Timings,
    pub clients: ClientParams,
}

impl Scenario {
    pub fn new(departure: Departure, policy: Policy, mode: Mode) -> Self {
        Scenario {
            departure,
            policy,
            mode,
            members: 4,
            lb: LbParams::default(),
            unknowns: Unknowns::default(),
            timings: Timings::default(),
            clients: ClientParams::default(),
        }
    }

    /// How long after the first signal nothing can change any more.
    pub fn horizon(&self, node: &NodeTimeline) -> f64 {
        let admin = node.cutover_lro_done.unwrap_or(0.0) + self.unknowns.admin_apply_lag_max;
        node.dead.max(admin)
            + (f64::from(self.lb.probe_threshold) + 1.0) * self.lb.probe_interval
            + self.unknowns.probe_reaction_max
            + self.clients.connect_timeout
            + 1.0
    }
}

/// The departing member's state as every mux sees it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub node: NodeTimeline,
    pub views: Vec<MuxView>,
    pub horizon: f64,
}

pub fn plan(sc: &Scenario, rng: &mut StdRng) -> Plan {
    let node = NodeTimeline::draw(sc.departure, sc.policy, sc.mode, &sc.timings, rng);
    let horizon = sc.horizon(&node);
    let kind = probe_kind(sc.policy, sc.mode);
    let phase = rng.gen_range(0.0..sc.lb.probe_interval);
    let changes = simulate_probes(&node, kind, phase, horizon, &sc.lb, &sc.unknowns);
    let views = (0..sc.unknowns.muxes.max(1))
        .map(|_| {
            let admin = node.admin_down_for_mux(&sc.unknowns, rng);
            MuxView::build(&changes, admin, &sc.unknowns, rng)
        })
        .collect();
    Plan {
        node,
        views,
        horizon,
    }
}

struct Sim<'a> {
    sc: &'a Scenario,
    plan: &'a Plan,
    rng: StdRng,
    res: CellResult,
}

enum Connect {
    Ok { member: usize, mux: usize },
    Failed(Cause),
}

impl Sim<'_> {
    /// A new flow at `t`: pick a mux (ECMP), hash over its eligible entries, then what the
    /// client gets.
    fn connect(&mut self, t: f64) -> Connect {
        let n = self.sc.members;
        let mux = self.rng.gen_range(0..self.plan.views.len());
        let pick = |rng: &mut StdRng, t: f64| -> Option<usize> {
            let leaving_ok = self.plan.views[mux].eligible(t);
            let count = if leaving_ok { n } else { n - 1 };
            if count == 0 {
                return None;
            }
            let k = rng.gen_range(0..count);
            Some(if leaving_ok { k } else { k + 1 })
        };
        let Some(mut member) = pick(&mut self.rng, t) else {
            return Connect::Failed(Cause::NoEligible);
        };
        if member == 0 && t >= 0.0 {
            self.res.last_new_on_node =
                Some(self.res.last_new_on_node.map_or(t, |l: f64| l.max(t)));
        }
        // U5: without pinning, the SYN retransmissions (1 s, 3 s) are hashed again.
        if !self.sc.unknowns.pin_half_open
            && member == 0
            && !self.plan.node.serves(self.sc.policy, t)
        {
            for retry in [1.0, 3.0] {
                if retry >= self.sc.clients.connect_timeout {
                    break;
                }
                if let Some(m) = pick(&mut self.rng, t + retry) {
                    member = m;
                    if member != 0 {
                        break;
                    }
                }
            }
        }
        if member == 0 {
            let node = &self.plan.node;
            if !node.alive(t) {
                return Connect::Failed(Cause::VmDead);
            }
            if !node.serves(self.sc.policy, t) {
                return Connect::Failed(Cause::PodGone);
            }
        }
        Connect::Ok { member, mux }
    }

    /// When (and why) a flow pinned to member 0 through `mux`, open over [from, until), breaks.
    fn break_of(&self, mux: usize, from: f64, until: f64) -> Option<(f64, Cause)> {
        let node = &self.plan.node;
        let mut cands: Vec<(f64, Cause)> = vec![(node.dead, Cause::VmDead)];
        if self.sc.policy == Policy::Local
            && let Some(e) = node.local_exit
        {
            cands.push((e, Cause::PodExit));
        }
        if self.sc.unknowns.down_resets_established
            && let Some(d) = self.plan.views[mux].admin_down_at
        {
            cands.push((d, Cause::AdminDownReset));
        }
        cands
            .into_iter()
            .filter(|(t, _)| *t >= from && *t < until)
            .min_by(|a, b| a.0.total_cmp(&b.0))
    }

    /// A keep-alive pool slot or a stream: connections one after another until the horizon.
    fn run_slot(&mut self, max_age: f64, stream: bool) {
        let h = self.plan.horizon;
        // The slot's current connection was opened at a uniform point of its life.
        let mut t = -self.rng.gen_range(0.0..max_age);
        let mut first = true;
        while t < h {
            let (member, mux) = if first {
                first = false;
                let mux = self.rng.gen_range(0..self.plan.views.len());
                (self.rng.gen_range(0..self.sc.members), mux)
            } else {
                match self.connect(t) {
                    Connect::Ok { member, mux } => (member, mux),
                    Connect::Failed(cause) => {
                        if t >= 0.0 {
                            self.res.add_failed_reconnect(cause);
                        }
                        t += self.sc.clients.connect_timeout;
                        continue;
                    }
                }
            };
            let until = t + max_age;
            if member == 0 {
                if t <= self.plan.node.dead && until > self.plan.node.dead {
                    self.res.pinned_at_death += 1;
                }
                if let Some((b, cause)) = self.break_of(mux, t.max(0.0), until) {
                    self.res.add_broken(cause, stream);
                    // A hung flow is noticed at the request timeout; a reset at once.
                    t = b + if cause.is_hang() {
                        self.sc.clients.request_timeout
                    } else {
                        0.0
                    };
                    continue;
                }
            }
            t = until;
        }
    }
}

/// Run one cell with one seed.
pub fn run_cell(sc: &Scenario, seed: u64) -> CellResult {
    let mut rng = StdRng::seed_from_u64(seed);
    let plan = plan(sc, &mut rng);
    let mut sim = Sim {
        sc,
        plan: &plan,
        rng,
        res: CellResult::default(),
    };
    // Steady new connections: Poisson arrivals over [0, horizon].
    let lambda = sc.clients.new_per_sec;
    if lambda > 0.0 {
        let mut t = 0.0;
        loop {
            let u: f64 = sim.rng.gen_range(f64::EPSILON..1.0);
            t += -u.ln() / lambda;
            if t >= plan.horizon {
                break;
            }
            sim.res.new_attempts += 1;
            if let Connect::Failed(cause) = sim.connect(t) {
                sim.res.add_failed_new(cause);
            }
        }
    }
    for _ in 0..sc.clients.pool {
        sim.run_slot(sc.clients.pool_max_age, false);
    }
    for _ in 0..sc.clients.streams {
        sim.run_slot(sc.clients.stream_max_age, true);
    }
    sim.res.runs = 1;
    sim.res
}

/// Mean over `seeds` seeds.
pub fn run_cell_mean(sc: &Scenario, seeds: u64) -> CellResult {
    let mut acc = CellResult::default();
    for s in 0..seeds {
        acc.merge(&run_cell(sc, s));
    }
    acc
}

/// Draw helper re-exported for the realisations.
pub fn draw(r: Range, rng: &mut impl Rng) -> f64 {
    r.draw(rng)
}
