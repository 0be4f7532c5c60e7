//! `chaos_soak`: the whole system under random faults for N minutes, judged from ARM's log
//! (`cutover_e2e::chaos`). Prints a table; exits non-zero on any violation. Its CI smoke is
//! `tests/chaos_smoke.rs`.
//!
//!     cargo run --release -p cutover-e2e --bin chaos_soak -- --minutes 10 --seed 1
//!     cargo run --release -p cutover-e2e --bin chaos_soak -- --smoke     # ~100 s, fast ARM
//!     cargo run --release -p cutover-e2e --bin chaos_soak -- --minutes 10 --signals 1  # one signal-svc

use clap::Parser;
use cutover_e2e::chaos::{self, SoakOptions};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "chaos_soak",
    about = "Random faults for N minutes, judged from ARM's log"
)]
struct Cli {
    /// Length of the run, the quiet tail included.
    #[arg(long, default_value_t = 10.0)]
    minutes: f64,
    /// Seed of the fault schedule and the workload (the same seed replays the same plan).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Cluster size (the `aks` preset).
    #[arg(long, default_value_t = 24)]
    nodes: usize,
    /// A short run for CI: 100 s, 12 nodes, fast ARM timings (unless given explicitly).
    #[arg(long)]
    smoke: bool,
    /// The highest API latency injected, in ms (the 2 s, which the default lease
    /// timings are measured to tolerate).
    #[arg(long, default_value_t = 2000)]
    max_latency_ms: u64,
    /// signal-svc replicas: 2, or 1 for the single-replica configuration (no standby: a
    /// leader that loses its Lease can only re-take it).
    #[arg(long, default_value_t = 2)]
    signals: usize,
    /// Where logs go (default: target/chaos-soak/<time>).
    #[arg(long)]
    run_dir: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let run_dir = cli.run_dir.unwrap_or_else(|| {
        PathBuf::from("target/chaos-soak").join(
            jiff::Timestamp::now()
                .strftime("%Y%m%dT%H%M%SZ")
                .to_string(),
        )
    });
    let (minutes, nodes) = if cli.smoke {
        (100.0 / 60.0, 12)
    } else {
        (cli.minutes, cli.nodes)
    };
    let options = SoakOptions {
        run: Duration::from_secs_f64(minutes * 60.0),
        seed: cli.seed,
        nodes,
        fast: cli.smoke,
        max_latency_ms: cli.max_latency_ms,
        run_dir,
        signals: cli.signals,
    };
    eprintln!("chaos soak: logs in {}", options.run_dir.display());
    let report = chaos::run(&options).await?;
    print!("{}", chaos::render(&report));
    if report.violations() > 0 {
        std::process::exit(1);
    }
    Ok(())
}
