//! Runs seeds of the whole-service simulation and prints the table; exits non-zero when any
//! seed breaks an invariant (each printed with the command that replays it).
//!
//!     cargo run --release -p cutover-dst --bin dst -- --seeds 100
//!     cargo run --release -p cutover-dst --bin dst -- --seed 17 --verbose

use clap::Parser;
use cutover_dst::report::{self, Summary};
use cutover_dst::run::Options;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// One seed (replay).
    #[arg(long)]
    seed: Option<u64>,
    /// How many seeds, from --first.
    #[arg(long, default_value_t = 20)]
    seeds: u64,
    #[arg(long, default_value_t = 0)]
    first: u64,
    /// Print every violation, fault and exit of each seed.
    #[arg(long)]
    verbose: bool,
    /// Print the seed's whole timeline (faults, intents, ARM, drain gate, exits).
    #[arg(long)]
    trace: bool,
    /// Run each seed this many times (a replay's interleaving is not bit-exact: see
    /// tests/README.md; this shows how often a failure comes back).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// The dense shape: a 60 s storm with 24 faults and 30 changes (default: 30 s, 8, 12).
    #[arg(long)]
    heavy: bool,
    /// Only taints and the exclude label in the workload (no holds, notices or re-created
    /// Nodes): the plans the first regression seeds were found in.
    #[arg(long)]
    taints_and_labels: bool,
    /// Simulations run at once (each is single-threaded).
    #[arg(long, default_value_t = 1)]
    jobs: usize,
    /// Simulated time per step, in ms (turmoil's tick; messages take 1-5 ms).
    #[arg(long)]
    tick_ms: Option<u64>,
}

/// Log lines stamped with simulated time (the hosts' spans name who wrote them).
struct SimTime;

impl tracing_subscriber::fmt::time::FormatTime for SimTime {
    fn format_time(&self, w: &mut tracing_subscriber::fmt::format::Writer<'_>) -> std::fmt::Result {
        let t = turmoil::sim_elapsed().unwrap_or_default();
        write!(w, "{:>8.3}", t.as_secs_f64())
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The services' own logs, when RUST_LOG asks for them.
    if std::env::var_os("RUST_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_timer(SimTime)
            .with_ansi(false)
            .init();
    }
    let mut options = Options::default();
    if args.heavy {
        options.shape = cutover_dst::schedule::Shape::HEAVY;
    }
    if args.taints_and_labels {
        options.shape.mix = cutover_dst::schedule::Mix::TaintsAndLabels;
    }
    if let Some(ms) = args.tick_ms {
        options.tick = std::time::Duration::from_millis(ms.max(1));
    }
    let seeds: Vec<u64> = match args.seed {
        Some(s) => vec![s],
        None => (args.first..args.first + args.seeds).collect(),
    };
    let mut runs: Vec<u64> = Vec::new();
    for seed in seeds {
        if args.trace {
            print!("{}", report::trace(seed, &options)?);
        }
        runs.extend(std::iter::repeat_n(seed, args.repeat.max(1) as usize));
    }
    let mut summary = Summary::default();
    let t0 = Instant::now();
    let queue = parking_lot::Mutex::new(runs.into_iter());
    let out = parking_lot::Mutex::new((Summary::default(), None::<anyhow::Error>));
    std::thread::scope(|s| {
        for _ in 0..args.jobs.max(1) {
            s.spawn(|| {
                loop {
                    let Some(seed) = queue.lock().next() else {
                        break;
                    };
                    let r = match report::seed(seed, &options) {
                        Ok(r) => r,
                        Err(e) => {
                            out.lock().1 = Some(e);
                            break;
                        }
                    };
                    let mut lines = format!(
                        "seed {:>6}: {} signal, {:>2} faults ({} skipped), {:>3} transitions, slowest {:>6} ms, gate stale {:>6} ms, {} exits, {:>6} steps, {:>5.1} s, {}\n",
                        r.seed,
                        r.signals,
                        r.faults,
                        r.skipped,
                        r.transitions,
                        r.slowest_ms,
                        r.longest_gate_stale_ms,
                        r.exits,
                        r.steps,
                        r.wall.as_secs_f64(),
                        if r.violations.is_empty() {
                            "ok".to_owned()
                        } else {
                            format!("{} VIOLATIONS", r.violations.len())
                        }
                    );
                    if args.verbose {
                        lines += &format!(
                            "    {} ARM writes, {} Node writes by signal-svc, {} drain-gate changes, {} intents\n",
                            r.measured.arm_writes, r.measured.node_writes, r.gate_changes, r.intents
                        );
                    }
                    if args.verbose || !r.violations.is_empty() {
                        for v in &r.violations {
                            lines += &format!("    {v}\n");
                        }
                    }
                    print!("{lines}");
                    out.lock().0.add(&r);
                }
            });
        }
    });
    let (done, error) = out.into_inner();
    if let Some(e) = error {
        return Err(e);
    }
    summary.absorb(done);
    summary.shape = Some(options.shape);
    summary.wall = t0.elapsed();
    print!("{}", summary.render());
    if !summary.failing.is_empty() {
        std::process::exit(1);
    }
    Ok(())
}
