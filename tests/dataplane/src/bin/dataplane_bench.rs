//! The data-plane bench (issue 28): failed new connections and broken established flows per
//! departure flow, traffic policy and mode. See tests/dataplane/README.md.
//!
//!     cargo run -p cutover-dataplane --release --bin dataplane_bench
//!
//! The `helper-*` subcommands are the processes of a run (members, prober, client).

use clap::{Parser, Subcommand};
use cutover_dataplane::controller::Feed;
use cutover_dataplane::helper_cmd::HelperCmd;
use cutover_dataplane::model::{Departure, Mode, Policy, closed_form_probe_only};
use cutover_dataplane::params::Range;
use cutover_dataplane::report::{CellResult, Row, render_causes, render_table};
use cutover_dataplane::sim::{Scenario, run_cell_mean};
use cutover_dataplane::{kernel, netns};
use std::sync::Arc;

#[derive(Parser, Debug)]
#[command(
    about = "Failed and broken connections per node departure: probe-only, KEP-3836, cutover"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Option<Cmd>,
    /// Which realisation runs the table: auto (kernel when namespaces and nftables work, else
    /// user-space), kernel, userspace, or model (virtual time only).
    #[arg(long, default_value = "auto")]
    realisation: String,
    /// Shorthand for --realisation userspace.
    #[arg(long)]
    userspace: bool,
    /// Seeds per cell of the model's table.
    #[arg(long, default_value_t = 400)]
    model_seeds: u64,
    /// Real-time cells run at once.
    #[arg(long, default_value_t = 6)]
    parallel: usize,
    /// First seed of the real-time cells.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Real-time runs per cell (each cell and run its own seed, derived from --seed), averaged.
    #[arg(long, default_value_t = 1)]
    runs: u64,
    /// cutover's ARM operation, "MIN,MAX" seconds (contract: NRP 10-20 s; arm-sim's default 2).
    #[arg(long, default_value = "10,20")]
    arm_op_s: String,
    /// New connections per second (steady stream).
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Backend members (nodes).
    #[arg(long, default_value_t = 4)]
    members: usize,
    /// U12 second pass: `Down` resets established flows.
    #[arg(long)]
    down_resets_established: bool,
    /// Unknowns of the contract's section 7 as `name=value,...` (what azure-kit/analyze.py prints).
    #[arg(long, default_value = "")]
    unknowns: String,
    /// Also print every row's failures by kind and cause.
    #[arg(long)]
    causes: bool,
    /// Only these departures (comma list of planned, silent, spot30, spot5, upgrade).
    #[arg(long, default_value = "planned,silent,spot30,spot5,upgrade")]
    flows: String,
    /// The AKS upgrade's drain, cordon to reimage start, in seconds (the contract allows up to
    /// AKS's 30 min drain timeout; 30 s keeps real-time runs short).
    #[arg(long, default_value_t = 30.0)]
    upgrade_drain_s: f64,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    #[command(flatten)]
    Helper(HelperCmd),
}

fn parse_range(s: &str) -> anyhow::Result<Range> {
    Range::parse(s).map_err(|e| anyhow::anyhow!("--arm-op-s {e}"))
}

fn departures(s: &str, upgrade_drain: f64) -> anyhow::Result<Vec<Departure>> {
    s.split(',')
        .map(|f| {
            Ok(match f.trim() {
                "planned" => Departure::Planned,
                "silent" => Departure::SilentDeath,
                "spot30" => Departure::Spot { notice: 30.0 },
                "spot5" => Departure::Spot { notice: 5.0 },
                "upgrade" => Departure::AksUpgrade {
                    drain: upgrade_drain,
                },
                o => anyhow::bail!("unknown flow {o}"),
            })
        })
        .collect()
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
    let arm = parse_range(&cli.arm_op_s)?;
    let mut cells = Vec::new();
    anyhow::ensure!(
        cli.upgrade_drain_s >= 0.0,
        "--upgrade-drain-s must not be negative"
    );
    for dep in departures(&cli.flows, cli.upgrade_drain_s)? {
        // A cordon is a signal only with signal-svc's opt-in --trigger-cordon: its row is the
        // upgrade's alone (every other departure has a default signal or none at all).
        let modes: &[Mode] = match dep {
            Departure::AksUpgrade { .. } => &[
                Mode::ProbeOnly,
                Mode::Kep3836,
                Mode::Cutover,
                Mode::CutoverCordon,
            ],
            _ => &[Mode::ProbeOnly, Mode::Kep3836, Mode::Cutover],
        };
        for pol in [Policy::Cluster, Policy::Local] {
            for &mode in modes {
                let mut sc = Scenario::new(dep, pol, mode);
                sc.members = cli.members;
                sc.clients.new_per_sec = cli.rate;
                sc.timings.arm_operation = arm;
                sc.unknowns.down_resets_established = cli.down_resets_established;
                for kv in cli.unknowns.split(',').filter(|kv| !kv.trim().is_empty()) {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| anyhow::anyhow!("--unknowns: name=value, not {kv}"))?;
                    sc.unknowns.set(k.trim(), v.trim())?;
                }
                cells.push(sc);
            }
        }
    }
    let row = |sc: &Scenario, r: CellResult| Row {
        departure: sc.departure.to_string(),
        policy: sc.policy.to_string(),
        mode: sc.mode.to_string(),
        result: r,
    };
    println!(
        "dataplane_bench: {} members, {} new conns/s, keep-alive pool {} (max age {} s), {} streams; probe {} s x {}; R ~ U[0, {}] s; cutover ARM operation U[{}, {}] s + A ~ U[0, {}] s; {} muxes",
        cli.members,
        cli.rate,
        cells[0].clients.pool,
        cells[0].clients.pool_max_age,
        cells[0].clients.streams,
        cells[0].lb.probe_interval,
        cells[0].lb.probe_threshold,
        cells[0].unknowns.probe_reaction_max,
        arm.min,
        arm.max,
        cells[0].unknowns.admin_apply_lag_max,
        cells[0].unknowns.muxes,
    );

    // The model's expectation (virtual time, many seeds) always.
    let rows: Vec<Row> = cells
        .iter()
        .map(|sc| row(sc, run_cell_mean(sc, cli.model_seeds)))
        .collect();
    print!(
        "\n{}",
        render_table(
            &rows,
            &format!("model (virtual time, mean of {} seeds)", cli.model_seeds)
        )
    );
    let anchor = closed_form_probe_only(cli.rate, cli.members, &cells[0].lb, &cells[0].unknowns);
    if let Some(r) = rows.iter().find(|r| {
        r.departure == Departure::SilentDeath.to_string()
            && r.policy == "Cluster"
            && r.mode == "probe-only"
    }) {
        println!(
            "\nclosed form (contract section 5), probe-only silent death: λ/N × (mean W + mean R) = {} / {} × ({} + {}) = {:.1}; model {:.1} ({:+.1} %)",
            cli.rate,
            cli.members,
            (f64::from(cells[0].lb.probe_threshold) + 0.5) * cells[0].lb.probe_interval,
            cells[0].unknowns.probe_reaction_max / 2.0,
            anchor,
            r.result.mean_failed_new(),
            (r.result.mean_failed_new() / anchor - 1.0) * 100.0
        );
    }

    let realisation = if cli.userspace {
        "userspace".to_string()
    } else {
        cli.realisation.clone()
    };
    let realisation = match realisation.as_str() {
        "model" => return Ok(()),
        "auto" => match netns::kernel_available() {
            Ok(()) => "kernel".to_string(),
            Err(e) => {
                println!("\nkernel realisation unavailable ({e}); running the user-space fallback");
                "userspace".to_string()
            }
        },
        o => o.to_string(),
    };
    if cli.down_resets_established {
        println!(
            "\nnote: U12 = true (Down resets established flows) is applied by the model only; the {realisation} run keeps them"
        );
    }
    let exe = std::env::current_exe()?;
    if realisation == "kernel" {
        netns::remove_stale();
    }
    let sem = Arc::new(tokio::sync::Semaphore::new(cli.parallel.max(1)));
    let mut tasks = Vec::new();
    for run in 0..cli.runs.max(1) {
        for (i, sc) in cells.iter().enumerate() {
            let sc = sc.clone();
            let exe = exe.clone();
            let sem = sem.clone();
            let real = realisation.clone();
            // A seed per cell and run: cells must not share their probe phases.
            let seed = cli.seed * 1_000_003 + run * 1_000 + i as u64;
            tasks.push(tokio::spawn(async move {
                let _permit = sem.acquire_owned().await;
                let r = match real.as_str() {
                    "kernel" => {
                        kernel::run_kernel_cell(
                            &sc,
                            seed,
                            &exe,
                            &format!("k{i}r{run}"),
                            Feed::Drawn,
                        )
                        .await
                    }
                    "userspace" => {
                        cutover_dataplane::userspace::run_userspace_cell(
                            &sc,
                            seed,
                            &exe,
                            Feed::Drawn,
                        )
                        .await
                    }
                    _ => anyhow::bail!("unknown realisation {real}"),
                };
                r.map(|r| (i, r))
            }));
        }
    }
    let mut acc = vec![CellResult::default(); cells.len()];
    for t in tasks {
        let (i, r) = t.await??;
        acc[i].merge(&r);
    }
    let rows: Vec<Row> = cells.iter().zip(acc).map(|(sc, r)| row(sc, r)).collect();
    print!(
        "\n{}",
        render_table(
            &rows,
            &format!(
                "{realisation} (real time, {} run(s) per cell, base seed {})",
                cli.runs.max(1),
                cli.seed
            )
        )
    );
    if cli.causes {
        print!(
            "\nfailures by cause ({realisation}):\n{}",
            render_causes(&rows)
        );
    }
    Ok(())
}
