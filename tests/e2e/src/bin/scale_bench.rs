//! `scale_bench`: the whole system at 240 to 5,000 nodes. Per size: start-up to ready of every
//! service, resident memory (current and peak) after a wave of 500 nodes (or half the cluster)
//! tainted and restored, the resync of an actuator SIGKILLed with every node asserted, and a
//! compressed soak of churn and ARM faults with memory sampled every 10 s
//! (`cutover_e2e::scale`). Prints a table; not a test (its smoke is `tests/scale_smoke.rs`).
//!
//!     cargo run --release -p cutover-e2e --bin scale_bench                  # 240..5,000 (~30 min)
//!     cargo run --release -p cutover-e2e --bin scale_bench -- --nodes 5000
//!     cargo run --release -p cutover-e2e --bin scale_bench -- --smoke       # 60, fast ARM, 15-s soak

use clap::Parser;
use cutover_e2e::scale::{self, ScaleOptions};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "scale_bench",
    about = "Memory, start-up and resync of both services by cluster size"
)]
struct Cli {
    /// Cluster sizes, one fresh system each.
    #[arg(long, value_delimiter = ',', default_value = "240,1000,2500,5000")]
    nodes: Vec<usize>,
    /// Minutes of compressed churn per size.
    #[arg(long, default_value_t = 3.0)]
    soak_minutes: f64,
    /// Seconds between memory samples during the soak.
    #[arg(long, default_value_t = 10)]
    sample_secs: u64,
    /// Nodes tainted and restored before memory is read (default: 500, or half the cluster).
    #[arg(long)]
    wave: Option<usize>,
    /// Fast ARM timings (PUT and operation in milliseconds) instead of Azure's.
    #[arg(long)]
    fast: bool,
    /// An extra actuator flag (repeatable), e.g. `--actuator-arg=--base-cache-budget=64Mi`.
    #[arg(long, allow_hyphen_values = true)]
    actuator_arg: Vec<String>,
    /// Where logs go (default: target/scale-bench/<time>).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// 60 nodes, a 20-node wave, fast ARM timings and a 15-s soak: checks the bench runs.
    #[arg(long)]
    smoke: bool,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    if cli.smoke {
        cli.nodes = vec![60];
        cli.soak_minutes = 0.25;
        cli.sample_secs = 5;
        cli.wave = Some(20);
        cli.fast = true;
    }
    let dir = cli.run_dir.clone().unwrap_or_else(|| {
        PathBuf::from("target/scale-bench").join(
            jiff::Timestamp::now()
                .strftime("%Y%m%dT%H%M%SZ")
                .to_string(),
        )
    });
    let mut all = Vec::new();
    for &n in &cli.nodes {
        eprintln!("{n} nodes ...");
        let mut o = ScaleOptions::new(
            n,
            Duration::from_secs_f64(cli.soak_minutes * 60.0),
            dir.clone(),
        );
        o.sample_every = Duration::from_secs(cli.sample_secs);
        o.realistic = !cli.fast;
        o.actuator_args = cli.actuator_arg.clone();
        if let Some(w) = cli.wave {
            o.wave = w.min(n);
        }
        let figures = scale::run(&o).await?;
        // Print as we go: a later size may take long or fail.
        eprint!("{}", scale::report(std::slice::from_ref(&figures)));
        all.push(figures);
    }
    print!("{}", scale::report(&all));
    for svc in ["actuator-svc", "signal-svc"] {
        let limit = scale::deploy_limit(svc)?;
        println!("deploy/base limit {svc}: {} MiB", limit >> 20);
    }
    Ok(())
}
