//! One seed judged, and many seeds summed up: seeds per second, faults per seed, coverage of
//! the fault kinds, the measured bounds, and the one command that replays a failing seed.

use crate::judge::{self, Bounds};
use crate::run::{self, Options};
use crate::schedule::{FaultKind, Ms};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// One seed's result.
pub struct SeedReport {
    pub seed: u64,
    pub signals: usize,
    pub faults: usize,
    pub kinds: Vec<FaultKind>,
    pub skipped: usize,
    pub steps: u64,
    pub wall: Duration,
    pub exits: usize,
    pub transitions: usize,
    /// The slowest transition that completed (ms).
    pub slowest_ms: Ms,
    pub measured: judge::Measured,
    pub longest_gate_stale_ms: Ms,
    pub violations: Vec<String>,
    pub gate_changes: usize,
    pub intents: usize,
}

/// The command that replays `seed` (with the shape's flag when it is not the default).
pub fn replay(seed: u64) -> String {
    format!("cargo run --release -p cutover-dst --bin dst -- --seed {seed}")
}

/// [`replay`] for a run of the given shape.
pub fn replay_shaped(seed: u64, shape: crate::schedule::Shape) -> String {
    use crate::schedule::{Mix, Shape};
    let mut flags = String::new();
    if (Shape {
        mix: Mix::Every,
        ..shape
    }) == Shape::HEAVY
    {
        flags += " --heavy";
    }
    if shape.mix == Mix::TaintsAndLabels {
        flags += " --taints-and-labels";
    }
    format!("{}{flags}", replay(seed))
}

/// Runs and judges `seed`.
pub fn seed(seed: u64, options: &Options) -> anyhow::Result<SeedReport> {
    let t0 = Instant::now();
    let out = run::run(seed, options).map_err(|e| e.context(format!("seed {seed}")))?;
    let verdict = judge::judge(
        &out.cluster,
        &out.observed,
        &out.applied,
        out.plan.shape.quiet_from(),
        &Bounds::default(),
    );
    let slowest_ms = verdict
        .soak
        .transitions
        .iter()
        .filter_map(|t| t.took)
        .map(|d| d.as_millis().max(0) as Ms)
        .max()
        .unwrap_or(0);
    Ok(SeedReport {
        seed,
        signals: out.plan.signals,
        faults: out.applied.len(),
        kinds: out
            .applied
            .iter()
            .filter(|a| a.skipped.is_none())
            .map(|a| a.fault.kind)
            .collect(),
        skipped: out.applied.iter().filter(|a| a.skipped.is_some()).count(),
        steps: out.steps,
        wall: t0.elapsed(),
        exits: out.exits.len(),
        transitions: verdict.soak.transitions.len(),
        slowest_ms,
        measured: verdict.measured,
        longest_gate_stale_ms: verdict.soak.gate.longest_stale.as_millis().max(0) as Ms,
        gate_changes: out.observed.gate.len(),
        intents: out.observed.intents.len(),
        violations: verdict
            .violations
            .iter()
            .map(|v| format!("{}: {}", v.rule.name(), v.text))
            .chain(out.stuck.iter().map(|(t, what, why)| {
                format!("a workload step was refused for 30 s: {what} from {t} ms: {why}")
            }))
            .collect(),
    })
}

/// Many seeds summed up.
#[derive(Default)]
pub struct Summary {
    pub seeds: usize,
    pub failing: Vec<u64>,
    pub faults: usize,
    pub coverage: BTreeMap<FaultKind, usize>,
    pub wall: Duration,
    pub dual_owner_ms: Ms,
    pub write_after_loss_ms: Ms,
    pub late_fence_ms: Ms,
    pub gate_stale_ms: Ms,
    pub slowest_ms: Ms,
    pub single_replica: usize,
    /// Tool answers judged against ARM, and the entry states they reported.
    pub tool_answers: usize,
    pub tool_entries: usize,
    /// Changes of what the actuators accepted, judged never to go backwards.
    pub accepted: usize,
    /// The shape the seeds ran with (for the replay commands).
    pub shape: Option<crate::schedule::Shape>,
}

impl Summary {
    pub fn add(&mut self, r: &SeedReport) {
        self.seeds += 1;
        if !r.violations.is_empty() {
            self.failing.push(r.seed);
        }
        self.faults += r.faults;
        for k in &r.kinds {
            *self.coverage.entry(*k).or_default() += 1;
        }
        self.dual_owner_ms = self.dual_owner_ms.max(r.measured.dual_owner_ms);
        self.write_after_loss_ms = self.write_after_loss_ms.max(r.measured.write_after_loss_ms);
        self.late_fence_ms = self.late_fence_ms.max(r.measured.late_fence_ms);
        self.gate_stale_ms = self.gate_stale_ms.max(r.longest_gate_stale_ms);
        self.slowest_ms = self.slowest_ms.max(r.slowest_ms);
        self.single_replica += usize::from(r.signals == 1);
        self.tool_answers += r.measured.tool_answers;
        self.tool_entries += r.measured.tool_entries;
        self.accepted += r.measured.accepted;
    }

    /// Adds another summary's seeds (runs on other threads).
    pub fn absorb(&mut self, o: Summary) {
        self.seeds += o.seeds;
        self.failing.extend(o.failing);
        self.failing.sort_unstable();
        self.faults += o.faults;
        self.tool_answers += o.tool_answers;
        self.tool_entries += o.tool_entries;
        self.accepted += o.accepted;
        for (k, n) in o.coverage {
            *self.coverage.entry(k).or_default() += n;
        }
        self.dual_owner_ms = self.dual_owner_ms.max(o.dual_owner_ms);
        self.write_after_loss_ms = self.write_after_loss_ms.max(o.write_after_loss_ms);
        self.late_fence_ms = self.late_fence_ms.max(o.late_fence_ms);
        self.gate_stale_ms = self.gate_stale_ms.max(o.gate_stale_ms);
        self.slowest_ms = self.slowest_ms.max(o.slowest_ms);
        self.single_replica += o.single_replica;
    }

    /// The closing table.
    pub fn render(&self) -> String {
        let secs = self.wall.as_secs_f64().max(1e-9);
        let mut s = format!(
            "seeds {} ({} single-replica), failing {}, {:.2} seeds/s, {:.1} faults/seed\n",
            self.seeds,
            self.single_replica,
            self.failing.len(),
            self.seeds as f64 / secs,
            self.faults as f64 / self.seeds.max(1) as f64
        );
        s += &format!(
            "measured: longest two-owner overlap {} ms, latest ARM write after losing the LB {} ms, latest Node write after losing the Lease {} ms, longest stale drain gate {} ms, slowest transition {} ms\n",
            self.dual_owner_ms,
            self.write_after_loss_ms,
            self.late_fence_ms,
            self.gate_stale_ms,
            self.slowest_ms
        );
        s += &format!(
            "drain gate through the actuators: {} GetNodeAdminState(fresh) answers judged, {} entry states in them\n",
            self.tool_answers, self.tool_entries
        );
        s += &format!(
            "accepted never backwards: {} changes of the actuators' accepted assignments and node states judged\n",
            self.accepted
        );
        s += "coverage (faults applied per kind):\n";
        for k in FaultKind::ALL {
            s += &format!(
                "  {:<18} {}\n",
                format!("{k:?}"),
                self.coverage.get(&k).copied().unwrap_or(0)
            );
        }
        for seed in &self.failing {
            let shape = self.shape.unwrap_or(crate::schedule::Shape::SHORT);
            s += &format!("replay: {}\n", replay_shaped(*seed, shape));
        }
        s
    }
}

/// The whole timeline of `seed`, one line per event in simulated time.
pub fn trace(seed: u64, options: &Options) -> anyhow::Result<String> {
    let out = run::run(seed, options).map_err(|e| e.context(format!("seed {seed}")))?;
    let mut lines: Vec<(Ms, String)> = Vec::new();
    for a in &out.applied {
        lines.push((
            a.start,
            format!(
                "fault {:?} {:?} until {} ms (planned {}..{}){}",
                a.fault.kind,
                a.fault.hosts,
                a.end,
                a.fault.at,
                a.fault.until,
                a.skipped
                    .as_deref()
                    .map(|s| format!(" SKIPPED: {s}"))
                    .unwrap_or_default()
            ),
        ));
    }
    for (t, w) in &out.plan.work {
        lines.push((
            *t,
            format!("work {} {w:?} (planned)", out.cluster.nodes[w.node()].name),
        ));
    }
    for (t, n, down) in &out.observed.intents {
        lines.push((
            *t,
            format!(
                "intent {} {}",
                out.cluster.nodes[*n].name,
                if *down { "Down" } else { "None" }
            ),
        ));
    }
    for (t, k, s, outside) in &out.observed.arm {
        lines.push((
            *t,
            format!(
                "arm {}/{} {} -> {s:?}{}",
                k.0,
                k.1,
                short(&k.2),
                if *outside { " (outside)" } else { "" }
            ),
        ));
    }
    for (t, node, status, reason) in &out.observed.gate {
        lines.push((*t, format!("gate {node} {status} {reason}")));
    }
    for w in &out.observed.arm_writes {
        lines.push((
            w.at,
            format!("arm-write {} by {} -> {}", w.lb, w.writer, w.status),
        ));
    }
    for (t, host, why) in &out.exits {
        lines.push((*t, format!("exit {host}: {why}")));
    }
    lines.sort_by_key(|(t, _)| *t);
    Ok(lines
        .into_iter()
        .map(|(t, l)| format!("{:>7.3} {l}\n", t as f64 / 1000.0))
        .collect())
}

/// An entry's target as `vmss/instance/ipconfig` (or the IP address).
fn short(target: &str) -> String {
    let parts: Vec<&str> = target.split('/').collect();
    match parts
        .iter()
        .position(|p| p.eq_ignore_ascii_case("virtualMachineScaleSets"))
    {
        Some(i) if parts.len() > i + 3 => {
            format!(
                "{}/{}/{}",
                parts[i + 1],
                parts[i + 3],
                parts[parts.len() - 1]
            )
        }
        _ => target.to_owned(),
    }
}
