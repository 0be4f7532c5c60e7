//! The fleet-protocol simulation as a bench: many seeds, or one seed replayed.
//!
//! `fleet_sim --seeds 100000` sweeps seeds and prints seeds per second, faults per seed and the
//! fault kinds covered; `fleet_sim --seed N` replays one seed and prints what it found.

use clap::Parser;
use cutover_e2e::fleet_sim::{Plan, replay_command, run, sweep};
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Replay this one seed and print its report.
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds to sweep.
    #[arg(long, default_value_t = 100_000)]
    seeds: u64,
    /// With --seed: print every step (faults, leaderships, assignments) before the report.
    #[arg(long)]
    trace: bool,
    /// The first seed of the sweep.
    #[arg(long, default_value_t = 0)]
    first: u64,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if let Some(seed) = args.seed {
        let mut r = run(Plan {
            trace: args.trace,
            ..Plan::new(seed)
        });
        for line in std::mem::take(&mut r.trace) {
            println!("{line}");
        }
        println!("{r:#?}");
        return if r.violations.is_empty() {
            std::process::ExitCode::SUCCESS
        } else {
            std::process::ExitCode::FAILURE
        };
    }
    let started = Instant::now();
    let (failed, faults, max_overlap) = sweep(args.first, args.seeds);
    let secs = started.elapsed().as_secs_f64();
    let total: u32 = faults.values().sum();
    println!(
        "| seeds | seconds | seeds/s | faults/seed | failing seeds | longest two-writer overlap |"
    );
    println!("| --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {secs:.1} | {:.0} | {:.1} | {} | {} ms |",
        args.seeds,
        args.seeds as f64 / secs,
        f64::from(total) / args.seeds as f64,
        failed.len(),
        max_overlap
    );
    println!();
    println!("| fault kind | injected |");
    println!("| --- | --- |");
    for (k, v) in &faults {
        println!("| {k} | {v} |");
    }
    for r in failed.iter().take(10) {
        println!(
            "\nseed {}: {:?}\n  replay: {}",
            r.seed,
            r.violations,
            replay_command(r.seed)
        );
    }
    if failed.is_empty() {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
