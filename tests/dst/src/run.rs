//! One seed, start to verdict: the simulated world (hosts on turmoil's network and clock),
//! the plan's faults applied at their times, and every observation stamped with simulated
//! time as it happens.

use crate::hosts::{self, Setup, Slots};
use crate::observe::Observer;
use crate::schedule::{self, ACTUATORS, ARM, Fault, FaultKind, KUBE, Ms, Plan, Shape};
use std::sync::Arc;
use std::time::Duration;

/// How a run is shaped.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    pub shape: Shape,
    pub nodes: usize,
    /// Simulated time per step (turmoil's tick).
    pub tick: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            shape: Shape::SHORT,
            nodes: 6,
            tick: Duration::from_millis(5),
        }
    }
}

/// A message's latency on a healthy link is 1 ms up to this.
const MAX_LATENCY_MS: u64 = 5;

/// A fault as it was applied (actual simulated times).
#[derive(Debug, Clone)]
pub struct Applied {
    pub fault: Fault,
    pub start: Ms,
    pub end: Ms,
    /// Why it could not be applied, if it could not (e.g. an LB busy when it was to go).
    pub skipped: Option<String>,
}

/// Everything a run produced.
pub struct Outcome {
    pub plan: Plan,
    pub cluster: aks_fixture::Cluster,
    pub observed: crate::observe::Observed,
    pub applied: Vec<Applied>,
    pub steps: u64,
    pub exits: Vec<(Ms, String, String)>,
    /// Workload steps that were never taken (see [`crate::hosts::Slots::stuck`]).
    pub stuck: Vec<(Ms, String, String)>,
}

/// Runs `seed` to the end of its plan.
pub fn run(seed: u64, options: &Options) -> anyhow::Result<Outcome> {
    let plan = schedule::plan(seed, options.shape, options.nodes);
    let cluster = aks_fixture::preset_sized("aks", options.nodes)?;
    let dir = tempfile::tempdir()?;
    std::fs::write(
        dir.path().join("azure.json"),
        serde_json::to_vec_pretty(&cluster.azure_json())?,
    )?;
    std::fs::write(
        dir.path().join("kubeconfig"),
        kube_sim::kubeconfig::render_with(
            &format!("http://{KUBE}:{}", hosts::KUBE_PORT),
            "unused",
            None,
        ),
    )?;
    let slots = Arc::new(Slots::default());
    let setup = Arc::new(Setup {
        plan: plan.clone(),
        cluster: cluster.clone(),
        dir: dir.path().to_owned(),
        slots: slots.clone(),
    });

    let mut sim = turmoil::Builder::new()
        .rng_seed(seed)
        .tick_duration(options.tick)
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(MAX_LATENCY_MS))
        .simulation_duration(Duration::from_millis(options.shape.end_ms() + 60_000))
        .build();
    let s = setup.clone();
    sim.host(KUBE, move || hosts::kube(s.clone()));
    let s = setup.clone();
    sim.host(ARM, move || hosts::arm(s.clone()));
    for &h in plan.signal_hosts() {
        let s = setup.clone();
        sim.host(h, move || hosts::signal(s.clone(), h));
    }
    for h in ACTUATORS {
        let s = setup.clone();
        sim.host(h, move || hosts::actuator(s.clone(), h));
    }
    let s = setup.clone();
    sim.client("workload", hosts::workload(s));
    let s = setup.clone();
    sim.client("tool", crate::tool::tool(s));

    let mut observer = Observer::new(&cluster, &plan);
    let mut names: Vec<&str> = vec![KUBE, ARM, "workload", "tool"];
    names.extend(plan.service_hosts());
    observer.learn_hosts(
        names
            .into_iter()
            .map(|h| (sim.lookup(h), h.to_owned()))
            .collect(),
    );
    let mut pending: Vec<Fault> = plan.faults.clone();
    pending.reverse();
    let mut active: Vec<Applied> = Vec::new();
    let mut applied: Vec<Applied> = Vec::new();
    let mut steps = 0u64;
    let world = World {
        plan: &plan,
        slots: &slots,
        cluster: &cluster,
    };
    loop {
        let now = sim.elapsed().as_millis() as Ms;
        while pending.last().is_some_and(|f| f.at <= now) {
            let f = pending.pop().expect("checked");
            let skipped = start_fault(&mut sim, &world, &f).err();
            let a = Applied {
                fault: f,
                start: now,
                end: now,
                skipped,
            };
            if a.skipped.is_none() && a.fault.until > a.fault.at {
                active.push(a);
            } else {
                applied.push(a);
            }
        }
        let mut k = 0;
        while k < active.len() {
            if active[k].fault.until <= now {
                let mut a = active.remove(k);
                if let Err(e) = end_fault(&mut sim, &world, &a.fault) {
                    a.skipped = Some(e);
                }
                a.end = now;
                applied.push(a);
            } else {
                k += 1;
            }
        }
        let finished = sim.step().map_err(|e| anyhow::anyhow!("simulation: {e}"))?;
        steps += 1;
        observer.observe(sim.elapsed().as_millis() as Ms, &slots);
        if finished {
            break;
        }
    }
    applied.sort_by_key(|a| a.start);
    let exits = slots.exits.lock().clone();
    let stuck = slots.stuck.lock().clone();
    Ok(Outcome {
        observed: observer.finish(sim.elapsed().as_millis() as Ms, &slots),
        plan,
        cluster,
        applied,
        steps,
        exits,
        stuck,
    })
}

/// What applying a fault reads.
#[derive(Clone, Copy)]
struct World<'a> {
    plan: &'a Plan,
    slots: &'a Slots,
    cluster: &'a aks_fixture::Cluster,
}

fn kube(slots: &Slots) -> Result<Arc<kube_sim::KubeSim>, String> {
    slots
        .kube
        .lock()
        .clone()
        .ok_or_else(|| "kube-sim not up".into())
}

fn arm(slots: &Slots) -> Result<Arc<arm_sim::ArmSim>, String> {
    slots
        .arm
        .lock()
        .clone()
        .ok_or_else(|| "arm-sim not up".into())
}

/// The other hosts a frozen host is cut from.
fn everyone_but(plan: &Plan, host: &str) -> Vec<&'static str> {
    let mut all = vec![KUBE, ARM, "workload", "tool"];
    all.extend(plan.service_hosts());
    all.retain(|h| *h != host);
    all
}

/// Holds (or releases) every link of `host`: a frozen process.
fn freeze(sim: &mut turmoil::Sim<'_>, plan: &Plan, host: &'static str, frozen: bool) {
    for other in everyone_but(plan, host) {
        if frozen {
            sim.hold(host, other);
        } else {
            sim.release(host, other);
        }
    }
}

/// The LB a removal takes away.
fn removed_lb(cluster: &aks_fixture::Cluster, f: &Fault) -> Result<String, String> {
    let lbs = crate::observe::lbs(cluster);
    lbs.get(f.param as usize % lbs.len().max(1))
        .cloned()
        .ok_or_else(|| "no LB".into())
}

fn start_fault(sim: &mut turmoil::Sim<'_>, w: &World<'_>, f: &Fault) -> Result<(), String> {
    let World {
        plan,
        slots,
        cluster,
    } = *w;
    match f.kind {
        FaultKind::Partition => sim.hold(f.hosts[0], f.hosts[1]),
        FaultKind::SlowLink => {
            sim.set_link_max_message_latency(f.hosts[0], f.hosts[1], Duration::from_millis(f.param))
        }
        FaultKind::Crash => {
            sim.crash(f.hosts[0]);
            slots.disown_all(sim.elapsed().as_millis() as Ms, f.hosts[0]);
        }
        FaultKind::Freeze => freeze(sim, plan, f.hosts[0], true),
        FaultKind::LeaseOutage => {
            if let Some(h) = f.hosts.first() {
                freeze(sim, plan, h, true);
            }
            let mut rule = kube_sim::FailRule::new(503, 1_000_000);
            rule.path_prefix = Some("/apis/coordination.k8s.io".into());
            kube(slots)?.fail_next(rule);
        }
        FaultKind::KubeLatency => kube(slots)?.set_latency(Duration::from_millis(f.param)),
        FaultKind::KubeFailures => {
            kube(slots)?.fail_next(kube_sim::FailRule::new(f.param as u16, f.count))
        }
        FaultKind::WatchDrop => kube(slots)?.close_watches(),
        FaultKind::WatchExpired => {
            let k = kube(slots)?;
            k.compact();
            k.close_watches();
        }
        FaultKind::ArmThrottle => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            throttle_requests: Some(f.count),
            ..Default::default()
        }),
        FaultKind::ArmServerErrors => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            server_errors: Some(f.count),
            ..Default::default()
        }),
        FaultKind::ArmOutage => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            outage_for_ms: Some(f.until - f.at),
            ..Default::default()
        }),
        FaultKind::ArmFailedOps => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            fail_operations: Some(f.count),
            ..Default::default()
        }),
        FaultKind::ArmLockConflicts => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            lock_conflicts: Some(f.count),
            ..Default::default()
        }),
        FaultKind::ArmStaleWrites => arm(slots)?.faults(arm_sim::faults::FaultSpec {
            stale_writes: Some(f.count),
            ..Default::default()
        }),
        FaultKind::ArmSlowOps => {
            let a = arm(slots)?;
            let mut t = a.tuning();
            t.completion_delay_ms = f.until - f.at;
            a.set_tuning(t);
        }
        FaultKind::OutsideWrite => {
            let (node, down) = f.node.ok_or("no node")?;
            let name = &cluster.nodes[node].name;
            let (lb, pool, target) = crate::observe::entries_of(cluster, name)
                .into_iter()
                .next()
                .ok_or("node has no entry")?;
            let value = down.then_some(arm_sim::model::AdminState::Down);
            arm(slots)?
                .outside_write(&lb, &pool, &target, value)
                .map_err(|e| format!("{e:?}"))?;
        }
        FaultKind::LbRemoved => {
            let lb = removed_lb(cluster, f)?;
            arm(slots)?.remove_lb(&lb).map_err(|e| format!("{e:?}"))?;
        }
    }
    Ok(())
}

fn end_fault(sim: &mut turmoil::Sim<'_>, w: &World<'_>, f: &Fault) -> Result<(), String> {
    let World {
        plan,
        slots,
        cluster,
    } = *w;
    match f.kind {
        FaultKind::Partition => sim.release(f.hosts[0], f.hosts[1]),
        FaultKind::SlowLink => sim.set_link_max_message_latency(
            f.hosts[0],
            f.hosts[1],
            Duration::from_millis(MAX_LATENCY_MS),
        ),
        FaultKind::Crash => sim.bounce(f.hosts[0]),
        FaultKind::Freeze => freeze(sim, plan, f.hosts[0], false),
        FaultKind::LeaseOutage => {
            kube(slots)?.clear_failures();
            if let Some(h) = f.hosts.first() {
                freeze(sim, plan, h, false);
            }
        }
        FaultKind::KubeLatency => kube(slots)?.set_latency(Duration::ZERO),
        FaultKind::ArmSlowOps => {
            let a = arm(slots)?;
            let mut t = a.tuning();
            t.completion_delay_ms = 300;
            a.set_tuning(t);
        }
        FaultKind::LbRemoved => arm(slots)?.recreate_lb(&removed_lb(cluster, f)?)?,
        _ => {}
    }
    Ok(())
}
