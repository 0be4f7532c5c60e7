//! `departures_bench`: what clients feel while AKS nodes leave, every departure driven through
//! the whole system (issue 28 item 2). Each cell starts a data plane (kernel-true where the
//! machine allows), runs one departure script against the Kubernetes API server, arm-sim and
//! both services, and counts failed new connections and broken established flows. Not a test.
//!
//!     cargo run --bin departures_bench                                 # every flow, ~30 min
//!     cargo run --bin departures_bench -- --flows manual,ca --policies Cluster
//!
//! The `helper-*` subcommands are the data plane's processes (members, prober, client).

use clap::{Parser, Subcommand};
use cutover_dataplane::helper_cmd::HelperCmd;
use cutover_dataplane::model::{Departure, Mode, Policy};
use cutover_dataplane::params::Range;
use cutover_dataplane::report::{CellResult, Row, render_causes};
use cutover_dataplane::sim::Scenario;
use cutover_e2e::departures::script::{Flow, FlowTimings};
use cutover_e2e::departures::{self, Realisation, Setup, table};
use cutover_e2e::stack::{Stack, StackOptions};
use std::path::PathBuf;

#[derive(Parser, Debug)]
#[command(about = "Failed and broken connections per AKS departure, through the whole system")]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Flows: karpenter, ca, upgrade, spot30, spot5, manual.
    #[arg(long, default_value = "karpenter,ca,upgrade,spot30,spot5,manual")]
    flows: String,
    /// Traffic policies: Cluster, Local.
    #[arg(long, default_value = "Cluster,Local")]
    policies: String,
    /// Modes: probe-only, kep3836, cutover, cordon (`cutover --trigger-cordon`; upgrade only).
    #[arg(long, default_value = "probe-only,kep3836,cutover,cordon")]
    modes: String,
    /// Runs per cell with cutover (each its own node and seed), averaged.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// Runs per cell without cutover: their failures come from a probe window that is uniform
    /// over 5-10 s, so one run scatters by about 20 %; these cells run six at once.
    #[arg(long, default_value_t = 2)]
    runs_no_cutover: u64,
    /// Cells at once without cutover (probe-only, KEP-3836: nothing writes ARM but the
    /// simulated cloud-provider-azure, so cells do not disturb each other).
    #[arg(long, default_value_t = 6)]
    parallel: usize,
    /// Cells at once with cutover: they share the load balancer and its one writer, so more at
    /// once measures concurrent departures rather than one (ARM serialises operations on an LB:
    /// a second departure waits for the first's 10-20 s operation).
    #[arg(long, default_value_t = 1)]
    parallel_cutover: usize,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// ARM operation length, "MIN,MAX" seconds (NRP's cadence: 10-20 s).
    #[arg(long, default_value = "10,20")]
    arm_op_s: String,
    /// New connections per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Backend members (nodes) behind the frontend; member 0 leaves.
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// The AKS upgrade's drain, cordon to reimage start (s).
    #[arg(long, default_value_t = 30.0)]
    upgrade_drain_s: f64,
    /// Reimage downtime (s; the contract's range is 60-300).
    #[arg(long, default_value_t = 60.0)]
    reimage_s: f64,
    /// Use the user-space data plane even where the kernel one works.
    #[arg(long)]
    userspace: bool,
    /// Also print every row's failures by kind and cause.
    #[arg(long)]
    causes: bool,
    /// Where the stack's logs go (default target/departures-bench/<time>).
    #[arg(long)]
    dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    #[command(flatten)]
    Helper(HelperCmd),
}

fn parse_range(s: &str) -> anyhow::Result<Range> {
    Range::parse(s).map_err(|e| anyhow::anyhow!("--arm-op-s {e}"))
}

fn parse_policy(s: &str) -> anyhow::Result<Policy> {
    match s.trim() {
        "Cluster" | "cluster" => Ok(Policy::Cluster),
        "Local" | "local" => Ok(Policy::Local),
        o => anyhow::bail!("--policies: Cluster or Local, not {o:?}"),
    }
}

fn parse_mode(s: &str) -> anyhow::Result<Mode> {
    match s.trim() {
        "probe-only" => Ok(Mode::ProbeOnly),
        "kep3836" => Ok(Mode::Kep3836),
        "cutover" => Ok(Mode::Cutover),
        "cordon" => Ok(Mode::CutoverCordon),
        o => anyhow::bail!("--modes: probe-only, kep3836, cutover or cordon, not {o:?}"),
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new()?;
    match cli.cmd {
        Some(Cmd::Helper(h)) => rt.block_on(h.run()),
        None => rt.block_on(bench(cli)),
    }
}

async fn bench(cli: Cli) -> anyhow::Result<()> {
    let op = parse_range(&cli.arm_op_s)?;
    let flows: Vec<Flow> = cli
        .flows
        .split(',')
        .map(Flow::parse)
        .collect::<Result<_, _>>()?;
    let policies: Vec<Policy> = cli
        .policies
        .split(',')
        .map(parse_policy)
        .collect::<Result<_, _>>()?;
    let modes: Vec<Mode> = cli
        .modes
        .split(',')
        .map(parse_mode)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(cli.members >= 2, "--members must be at least 2");
    let (realisation, why) = Realisation::pick(cli.userspace);
    let mut scenario = Scenario::new(Departure::Planned, Policy::Cluster, Mode::ProbeOnly);
    scenario.members = cli.members;
    scenario.clients.new_per_sec = cli.rate;
    let timings = FlowTimings {
        upgrade_drain: cli.upgrade_drain_s,
        reimage: Range::fixed(cli.reimage_s),
        pool_removal: op,
        ..FlowTimings::default()
    };
    let setup = Setup {
        scenario,
        timings,
        // `kubectl wait --timeout=2m`, as the README's drain recipe.
        gate_budget: 120.0,
        realisation,
        helper_exe: std::env::current_exe()?,
    };
    let mut wanted = Vec::new();
    let mut seed = cli.seed;
    for run in 0..cli.runs.max(cli.runs_no_cutover) {
        for &flow in &flows {
            for &policy in &policies {
                for mode in flow.modes().into_iter().filter(|m| modes.contains(m)) {
                    let runs = if mode.is_cutover() {
                        cli.runs
                    } else {
                        cli.runs_no_cutover
                    };
                    if run < runs {
                        wanted.push((flow, policy, mode, seed));
                    }
                    seed += 1;
                }
            }
        }
    }
    let dir = cli.dir.clone().unwrap_or_else(|| {
        PathBuf::from(format!(
            "target/departures-bench/{}",
            jiff::Timestamp::now().as_second()
        ))
    });
    cutover_dataplane::netns::remove_stale();
    println!(
        "departures_bench: {} members, {} new conns/s, ARM operation {}-{} s, realisation {realisation:?} ({why}); logs in {}",
        cli.members,
        cli.rate,
        op.min,
        op.max,
        dir.display()
    );
    // Three stacks: without cutover (its actuators stopped, so nothing cuts the nodes), with
    // signal-svc's default triggers, and with `--trigger-cordon`. The first runs beside the
    // other two (it writes nothing the others read); those two run one after the other.
    let no_cutover = run_phase(Phase::NoCutover, &wanted, &setup, op, cli.parallel, &dir);
    let with_cutover = async {
        let mut out = run_phase(
            Phase::Cutover,
            &wanted,
            &setup,
            op,
            cli.parallel_cutover,
            &dir,
        )
        .await?;
        out.extend(
            run_phase(
                Phase::CutoverCordon,
                &wanted,
                &setup,
                op,
                cli.parallel_cutover,
                &dir,
            )
            .await?,
        );
        anyhow::Ok(out)
    };
    let (a, b) = tokio::join!(no_cutover, with_cutover);
    let mut rows: Vec<Row> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for (cell, r) in a?.into_iter().chain(b?) {
        match r {
            Ok(r) => merge_row(&mut rows, &cell, &r),
            Err(e) => failures.push(format!(
                "{} / {} / {} on {}: {e:#}",
                cell.flow, cell.policy, cell.mode, cell.node
            )),
        }
    }
    rows.sort_by_key(|r| order(&flows, &policies, r));
    println!(
        "{}",
        table::render(
            &rows,
            &format!("{realisation:?} ({why}), through the whole system")
        )
    );
    if cli.causes {
        println!("{}", render_causes(&rows));
    }
    if !failures.is_empty() {
        println!("cells that failed (not in the table):");
        for f in &failures {
            println!("- {f}");
        }
        anyhow::bail!("{} cells failed", failures.len());
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    NoCutover,
    Cutover,
    CutoverCordon,
}

impl Phase {
    fn of(mode: Mode) -> Phase {
        match mode {
            Mode::ProbeOnly | Mode::Kep3836 => Phase::NoCutover,
            Mode::Cutover => Phase::Cutover,
            Mode::CutoverCordon => Phase::CutoverCordon,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Phase::NoCutover => "no-cutover",
            Phase::Cutover => "cutover",
            Phase::CutoverCordon => "cutover-cordon",
        }
    }
}

type Wanted = (Flow, Policy, Mode, u64);

/// One stack for the cells of `phase`; its ARM logs are written to its directory under `dir`.
async fn run_phase(
    phase: Phase,
    wanted: &[Wanted],
    setup: &Setup,
    op: Range,
    parallel: usize,
    dir: &std::path::Path,
) -> anyhow::Result<Vec<(departures::Cell, anyhow::Result<CellResult>)>> {
    let cells: Vec<Wanted> = wanted
        .iter()
        .copied()
        .filter(|w| Phase::of(w.2) == phase)
        .collect();
    if cells.is_empty() {
        return Ok(Vec::new());
    }
    let dir = dir.join(phase.name());
    let dir = dir.as_path();
    let user = cells.iter().filter(|w| !w.0.spot()).count();
    let spot = cells.len() - user;
    let nodes = departures::cluster_size("aks-ip", user, spot)?;
    let mut o = StackOptions::realistic("aks-ip", nodes, dir.to_path_buf());
    o.arm_tuning.completion_delay_ms = (op.min * 1000.0) as u64;
    o.arm_tuning.completion_delay_max_ms = Some((op.max * 1000.0) as u64);
    o.actuators = 2;
    if phase == Phase::CutoverCordon {
        o.signal_args = vec!["--trigger-cordon=true".into()];
    }
    let mut stack = Stack::start(o).await?;
    if phase == Phase::NoCutover {
        // No actuator, no cutover: signal-svc's intents reach nothing.
        for a in &mut stack.actuators {
            if let Some(p) = a.proc.as_mut() {
                p.terminate(std::time::Duration::from_secs(5)).await;
            }
        }
    }
    let assigned = departures::assign_nodes(&stack.cluster, &cells)?;
    let prefix = match phase {
        Phase::NoCutover => "n",
        Phase::Cutover => "c",
        Phase::CutoverCordon => "k",
    };
    let results = departures::run_all(&stack, setup, &assigned, parallel, prefix).await;
    write_arm_logs(&stack, dir);
    stack.stop().await;
    Ok(assigned.into_iter().zip(results?).collect())
}

/// arm-sim's effective log and request log as JSON lines, to read a cell's ARM side afterwards.
fn write_arm_logs(stack: &Stack, dir: &std::path::Path) {
    let lines = |v: Vec<serde_json::Value>| {
        v.iter()
            .map(|x| x.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    };
    let eff: Vec<serde_json::Value> = stack
        .arm
        .effective_log()
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let req: Vec<serde_json::Value> = stack
        .arm
        .requests()
        .iter()
        .filter_map(|e| serde_json::to_value(e).ok())
        .collect();
    let _ = std::fs::write(dir.join("arm-effective.jsonl"), lines(eff));
    let _ = std::fs::write(dir.join("arm-requests.jsonl"), lines(req));
}

fn merge_row(rows: &mut Vec<Row>, cell: &departures::Cell, r: &CellResult) {
    let (d, p, m) = (
        cell.flow.to_string(),
        cell.policy.to_string(),
        cell.mode.to_string(),
    );
    match rows
        .iter_mut()
        .find(|x| x.departure == d && x.policy == p && x.mode == m)
    {
        Some(row) => row.result.merge(r),
        None => {
            let mut result = CellResult::default();
            result.merge(r);
            rows.push(Row {
                departure: d,
                policy: p,
                mode: m,
                result,
            });
        }
    }
}

/// The table's order: flows, then policies as asked, then modes.
fn order(flows: &[Flow], policies: &[Policy], r: &Row) -> (usize, usize, usize) {
    let f = flows
        .iter()
        .position(|f| f.to_string() == r.departure)
        .unwrap_or(usize::MAX);
    let p = policies
        .iter()
        .position(|p| p.to_string() == r.policy)
        .unwrap_or(usize::MAX);
    let m = [
        Mode::ProbeOnly,
        Mode::Kep3836,
        Mode::Cutover,
        Mode::CutoverCordon,
    ]
    .iter()
    .position(|m| m.to_string() == r.mode)
    .unwrap_or(usize::MAX);
    (f, p, m)
}
