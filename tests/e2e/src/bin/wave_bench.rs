//! `wave_bench`: waves of nodes tainted over 2 s against the whole system, per actuator
//! replica count and ARM poll cadence, each judged against the ideal single writer computed
//! from the same signal times (`cutover_e2e::wave`). Prints a table; not a test.
//!
//!     cargo run --release --bin wave_bench                 # the full grid (~30 min)
//!     cargo run --release --bin wave_bench -- --smoke      # one small cell
//!
//! The grid: cluster sizes 240 / 2,000 / 5,000 (AKS's largest), waves of 1 (one node against
//! the floor), 100 and 500 nodes, 1 and 3 replicas, NRP's Retry-After of 10 s. A wave larger
//! than the cluster's user and spot pools is skipped.

use clap::Parser;
use cutover_e2e::judge::State;
use cutover_e2e::report::percentile;
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::stack::StackOptions;
use cutover_e2e::wave::{self, WaveFigures};
use cutover_testkit::procs;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "wave_bench",
    about = "Time to effective of node waves against the ideal"
)]
struct Cli {
    /// Wave sizes (nodes tainted over `--spread`).
    #[arg(long, value_delimiter = ',', default_value = "1,100,500")]
    waves: Vec<usize>,
    /// Retry-After of operation polls and lock conflicts, seconds (10: NRP's cadence).
    #[arg(long, value_delimiter = ',', default_value = "10")]
    retry_after: Vec<u64>,
    /// Actuator replica counts.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    replicas: Vec<usize>,
    /// Operation lengths in ms: a fixed length (`2000`) or a range drawn from (`2000-15000`);
    /// the ideal meets the lengths the simulator ran.
    #[arg(long, value_delimiter = ',', default_value = "2000,2000-15000", value_parser = parse_op)]
    op_ms: Vec<(u64, Option<u64>)>,
    /// Cluster sizes (nodes in the simulated cluster).
    #[arg(long, value_delimiter = ',', default_value = "240,2000,5000")]
    nodes: Vec<usize>,
    /// One-node waves are repeated this many times on different nodes (one after the other,
    /// each effective before the next), for a p99 of the time to the first PUT.
    #[arg(long, default_value_t = 20)]
    singles: usize,
    /// Pause (ms) before each one-node cut and restore, so each starts from idle: after an
    /// operation the actuator reads the whole LB once (16 MB at 5,000 nodes), and a node comes
    /// back minutes later in a real cluster, not then.
    #[arg(long, default_value_t = 2000)]
    settle_ms: u64,
    /// Seconds over which a wave's taints are spread.
    #[arg(long, default_value_t = 2.0)]
    spread: f64,
    /// Also freeze one of three replicas (SIGSTOP) mid-wave.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    frozen: bool,
    /// Where each cell's logs go (default: target/wave-bench/<time>).
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Two small cells (CI smoke): one node and 20 nodes of 60, Retry-After 10, 2 replicas,
    /// no frozen case.
    #[arg(long)]
    smoke: bool,
}

/// `2000` or `2000-15000`.
fn parse_op(s: &str) -> Result<(u64, Option<u64>), String> {
    let num = |x: &str| x.trim().parse::<u64>().map_err(|e| format!("{x:?}: {e}"));
    match s.split_once('-') {
        None => Ok((num(s)?, None)),
        Some((lo, hi)) => {
            let (lo, hi) = (num(lo)?, num(hi)?);
            if hi < lo {
                return Err(format!("{s}: the range is empty"));
            }
            Ok((lo, Some(hi)))
        }
    }
}

fn op_label(op: (u64, Option<u64>)) -> String {
    match op.1 {
        None => format!("{:.0}", op.0 as f64 / 1000.0),
        Some(hi) => format!("{:.0}-{:.0}", op.0 as f64 / 1000.0, hi as f64 / 1000.0),
    }
}

/// Where a cell sits in the grid.
#[derive(Debug, Clone, Copy)]
struct At {
    nodes: usize,
    op: (u64, Option<u64>),
    wave: usize,
    retry_after: u64,
    replicas: usize,
}

impl At {
    /// The cell's own directory under the run's.
    fn dir(&self, run: &std::path::Path) -> PathBuf {
        run.join(format!(
            "n{}-op{}-w{}-ra{}-r{}",
            self.nodes,
            op_label(self.op),
            self.wave,
            self.retry_after,
            self.replicas
        ))
    }

    /// The first columns of every table row.
    fn columns(&self) -> String {
        format!(
            "{:>5} {:>5} {:>5} {:>4} {:>3}",
            self.nodes,
            op_label(self.op),
            self.wave,
            self.retry_after,
            self.replicas
        )
    }
}

struct Cell {
    at: At,
    down: WaveFigures,
    up: WaveFigures,
}

fn options(nodes: usize, replicas: usize, retry_after: u64, dir: PathBuf) -> StackOptions {
    let mut o = StackOptions::realistic("aks", nodes, dir);
    o.arm_tuning.completion_delay_max_ms = None;
    o.actuators = replicas;
    o.signals = 1;
    o.arm_tuning.retry_after_secs = retry_after;
    o.arm_tuning.lock_retry_after_secs = retry_after;
    // A 500-node wave is most of the cluster: the blast-radius guard (default 50 % per pool)
    // would hold half of it back. This bench measures speed, so the guard is lifted.
    o.actuator_args = vec!["--max-down-share=1.0".into()];
    o
}

fn wave_nodes(sb: &mut Sandbox, n: usize) -> anyhow::Result<Vec<String>> {
    let user = n.min(sb.unused_count("userpool"));
    let mut nodes = sb.fresh_nodes("userpool", user)?;
    nodes.extend(sb.fresh_nodes("spotpool", n - user)?);
    Ok(nodes)
}

async fn cell(cli: &Cli, dir: &std::path::Path, at: At) -> anyhow::Result<Option<Cell>> {
    let cell_dir = at.dir(dir);
    let wave_n = at.wave;
    let mut opts = options(at.nodes, at.replicas, at.retry_after, cell_dir.clone());
    opts.arm_tuning.completion_delay_ms = at.op.0;
    opts.arm_tuning.completion_delay_max_ms = at.op.1;
    let (put_ms, op_ms) = (
        opts.arm_tuning.latency_ms.put as f64,
        opts.arm_tuning.completion_delay_ms as f64,
    );
    let mut sb = Sandbox::start(opts).await?;
    if wave_n > sb.unused_count("userpool") + sb.unused_count("spotpool") {
        sb.stack.stop().await;
        return Ok(None);
    }
    let spread = Duration::from_secs_f64(cli.spread);
    let timeout = Duration::from_secs(180);
    let repeats = if wave_n == 1 { cli.singles.max(1) } else { 1 };
    // Every cell starts on a running system: "ready" comes while the actuators still apply
    // the signal-svc's first snapshot (5,000 nodes) and read their LBs, and a first signal in
    // that second paid for it (~200 ms at 5,000 nodes), which is start-up, not a wave.
    tokio::time::sleep(Duration::from_millis(cli.settle_ms)).await;
    let (mut downs, mut ups) = (Vec::new(), Vec::new());
    for _ in 0..repeats {
        let nodes = wave_nodes(&mut sb, wave_n)?;
        downs.push(wave::play(&mut sb, &nodes, State::Down, spread, put_ms, op_ms, timeout).await?);
        // One node is measured from idle both ways (ARM's log shows the cut effective before
        // cutover's completion read has seen it; a node comes back minutes later, not then).
        let settle = Duration::from_millis(cli.settle_ms);
        if repeats > 1 {
            tokio::time::sleep(settle).await;
        }
        ups.push(wave::play(&mut sb, &nodes, State::None, spread, put_ms, op_ms, timeout).await?);
        if repeats > 1 {
            tokio::time::sleep(settle).await;
        }
    }
    let (down, up) = (WaveFigures::merge(&downs), WaveFigures::merge(&ups));
    write_arm_log(&sb, &cell_dir)?;
    sb.stack.stop().await;
    Ok(Some(Cell { at, down, up }))
}

/// ARM's side of a cell, for reading where the time went: every request (arrival, method,
/// status, time to answer, path) and every operation's end, one per line, by time.
fn write_arm_log(sb: &Sandbox, dir: &std::path::Path) -> anyhow::Result<()> {
    let mut lines: Vec<(jiff::Timestamp, String)> = Vec::new();
    for r in sb.stack.arm.requests() {
        let took = r.time.duration_since(r.received).as_secs_f64() * 1000.0;
        let line = format!(
            "{} {} {} {took:.0}ms {}",
            r.received, r.method, r.status, r.path
        );
        lines.push((r.received, line));
    }
    let mut ends: std::collections::BTreeMap<(String, String), jiff::Timestamp> =
        Default::default();
    for e in sb.stack.arm.effective_log() {
        let end = ends.entry((e.lb, e.op_id)).or_insert(e.time);
        *end = (*end).max(e.time);
    }
    for ((lb, op), at) in ends {
        lines.push((at, format!("{at} END {lb} {op}")));
    }
    lines.sort();
    let text: String = lines.into_iter().map(|(_, l)| l + "\n").collect();
    std::fs::create_dir_all(dir)?;
    std::fs::write(dir.join("arm.log"), text)?;
    Ok(())
}

/// Three replicas, Retry-After 10: one replica frozen 0.5 s into a wave, woken after the
/// wave is effective. Returns (seconds from the freeze until every node was effective,
/// problems found after the wake-up).
async fn frozen(
    cli: &Cli,
    dir: &std::path::Path,
    wave_n: usize,
) -> anyhow::Result<(f64, Vec<String>)> {
    let size = cli.nodes.iter().copied().min().unwrap_or(240).max(240);
    let mut sb = Sandbox::start(options(size, 3, 10, dir.join("frozen"))).await?;
    let nodes = wave_nodes(&mut sb, wave_n)?;
    let pid = sb.stack.actuators[0]
        .proc
        .as_ref()
        .and_then(|p| p.pid())
        .ok_or_else(|| anyhow::anyhow!("actuator-0 is not running"))?;
    let spread = Duration::from_secs_f64(cli.spread);
    let freeze = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        procs::signal_pid(pid, "STOP").await;
        jiff::Timestamp::now()
    };
    let timeout = Duration::from_secs(180);
    let (frozen_at, fig) = tokio::join!(
        freeze,
        wave::play(&mut sb, &nodes, State::Down, spread, 200.0, 2000.0, timeout)
    );
    fig?;
    // The last node's effective time, from ARM's log.
    let log = cutover_e2e::observe::changes(&sb.stack.arm);
    let done = log
        .iter()
        .filter(|c| c.state == State::Down)
        .map(|c| c.time)
        .max()
        .unwrap_or(frozen_at);
    procs::signal_pid(pid, "CONT").await;
    let woke = jiff::Timestamp::now();
    // A woken stale replica must not write anything.
    let problems = sb.expect_no_change(woke, Duration::from_secs(5)).await;
    sb.stack.stop().await;
    Ok((done.duration_since(frozen_at).as_secs_f64(), problems))
}

fn s(ms: f64) -> String {
    format!("{:.2}", ms / 1000.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    if cli.smoke {
        cli.waves = vec![1, 20];
        cli.retry_after = vec![10];
        cli.replicas = vec![2];
        cli.nodes = vec![60];
        cli.op_ms = vec![(2000, None)];
        cli.frozen = false;
        cli.singles = 3;
        cli.settle_ms = 500;
    }
    let dir = cli.run_dir.clone().unwrap_or_else(|| {
        PathBuf::from("target/wave-bench").join(
            jiff::Timestamp::now()
                .strftime("%Y%m%dT%H%M%SZ")
                .to_string(),
        )
    });
    let mut cells = Vec::new();
    for &size in &cli.nodes {
        for &op in &cli.op_ms {
            for &w in &cli.waves {
                for &ra in &cli.retry_after {
                    for &r in &cli.replicas {
                        eprintln!(
                            "{size} nodes, operations {} s, wave {w}, Retry-After {ra} s, {r} replica(s) ...",
                            op_label(op)
                        );
                        let at = At {
                            nodes: size,
                            op,
                            wave: w,
                            retry_after: ra,
                            replicas: r,
                        };
                        match cell(&cli, &dir, at).await? {
                            Some(c) => cells.push(c),
                            None => {
                                eprintln!("  skipped: the cluster has fewer than {w} worker nodes")
                            }
                        }
                    }
                }
            }
        }
    }
    println!(
        "{:>5} {:>5} {:>5} {:>4} {:>3} | {:>6} {:>6} {:>8} {:>6} | {:>6} {:>6} {:>8} {:>6} | {:>7} {:>7} {:>5} {:>6} {:>9}",
        "nodes",
        "op s",
        "wave",
        "RA s",
        "rep",
        "cut50",
        "cut99",
        "ideal99",
        "ratio",
        "rst50",
        "rst99",
        "ideal99",
        "ratio",
        "PUT/LB↓",
        "PUT/LB↑",
        "locks",
        "reads",
        "PUT max B"
    );
    for c in &cells {
        println!(
            "{} | {:>6} {:>6} {:>8} {:>6.2} | {:>6} {:>6} {:>8} {:>6.2} | {:>7} {:>7} {:>5} {:>6} {:>9}",
            c.at.columns(),
            s(c.down.p50_ms),
            s(c.down.p99_ms),
            s(c.down.ideal_p99_ms),
            c.down.ratio(),
            s(c.up.p50_ms),
            s(c.up.p99_ms),
            s(c.up.ideal_p99_ms),
            c.up.ratio(),
            c.down.puts_per_lb,
            c.up.puts_per_lb,
            c.down.lock_conflicts + c.up.lock_conflicts,
            c.down.reads + c.up.reads,
            c.down.largest_put.max(c.up.largest_put),
        );
    }
    if cli.frozen {
        let (secs, problems) = frozen(&cli, &dir, 100).await?;
        println!(
            "frozen replica (1 of 3 SIGSTOPped 0.5 s into a 100-node wave, Retry-After 10): every node effective {secs:.2} s after the freeze; after waking: {}",
            if problems.is_empty() {
                "no entry changed".to_string()
            } else {
                problems.join("; ")
            }
        );
    }
    println!();
    println!(
        "where the time beyond the ideal went (ms, from ARM's logs): lead = first signal to first PUT (p99 over the LBs and repeats), react = operation end to next PUT; \
         CPU ms over both directions: sim = the bench process (arm-sim, kube-sim, harness), svc = every service process"
    );
    println!(
        "{:>5} {:>5} {:>5} {:>4} {:>3} | {:>8} {:>8} {:>8} | {:>8} {:>8} {:>8} | {:>9} {:>9}",
        "nodes",
        "op s",
        "wave",
        "RA s",
        "rep",
        "lead↓99",
        "react↓50",
        "react↓max",
        "lead↑99",
        "react↑50",
        "react↑max",
        "sim CPU",
        "svc CPU"
    );
    for c in &cells {
        let lead = |f: &WaveFigures| percentile(&f.overhead.lead_ms, 99.0).unwrap_or(f64::NAN);
        let react = |f: &WaveFigures, p: f64| {
            percentile(&f.overhead.react_ms, p).map_or("-".to_string(), |v| format!("{v:.0}"))
        };
        println!(
            "{} | {:>8.0} {:>8} {:>8} | {:>8.0} {:>8} {:>8} | {:>9.0} {:>9.0}",
            c.at.columns(),
            lead(&c.down),
            react(&c.down, 50.0),
            react(&c.down, 100.0),
            lead(&c.up),
            react(&c.up, 50.0),
            react(&c.up, 100.0),
            c.down.sim_cpu_ms + c.up.sim_cpu_ms,
            c.down.services_cpu_ms + c.up.services_cpu_ms,
        );
    }
    let worst = cells
        .iter()
        .flat_map(|c| [c.down.ratio(), c.up.ratio()])
        .fold(0.0_f64, f64::max);
    println!("worst p99 / ideal p99: {worst:.2} (target at most 1.15)");
    Ok(())
}
