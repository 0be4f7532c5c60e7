//! Memory and time at scale: the whole system at one cluster size, measured the way an
//! operator sizes a deployment. Start-up to ready of every service, resident memory (current
//! and peak, from `/proc/<pid>/status`) after a node wave, the resync of a restarted actuator
//! with every node asserted, and a compressed soak (taints, restores, node replacements, ARM
//! faults) sampling memory to show whether it stays flat. Used by `scale_bench` and its smoke
//! test; no figure here is a pass/fail target, only the end state is judged.

use crate::judge::{self, State};
use crate::kube_ops::OUT_OF_SERVICE;
use crate::observe;
use crate::sandbox::{Outcome, Sandbox};
use crate::stack::{Service, Stack, StackOptions};
use anyhow::{Context, bail};
use futures::StreamExt;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Resident memory of one process, KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Mem {
    /// `VmRSS`: resident now.
    pub rss_kib: u64,
    /// `VmHWM`: the most it was ever resident.
    pub hwm_kib: u64,
}

/// Parses `VmRSS` and `VmHWM` out of a `/proc/<pid>/status` text.
pub fn parse_status(text: &str) -> Option<Mem> {
    let field = |name: &str| -> Option<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some(Mem {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}

/// Memory of `pid`, or of this process (where the simulators run) for `None`.
pub fn mem_of(pid: Option<u32>) -> Option<Mem> {
    let path = match pid {
        Some(p) => format!("/proc/{p}/status"),
        None => "/proc/self/status".to_string(),
    };
    parse_status(&std::fs::read_to_string(path).ok()?)
}

/// The name under which this process (both simulators) is reported.
pub const SIMULATORS: &str = "simulators";

/// Every service process of `stack` with its pid, plus this process as [`SIMULATORS`].
pub fn processes(stack: &Stack) -> Vec<(String, Option<u32>)> {
    let mut out: Vec<(String, Option<u32>)> = stack
        .actuators
        .iter()
        .chain(stack.signals.iter())
        .filter_map(|s| Some((s.name.clone(), Some(s.proc.as_ref()?.pid()?))))
        .collect();
    out.push((SIMULATORS.to_string(), None));
    out
}

/// Memory of every process of `stack` now.
pub fn snapshot(stack: &Stack) -> Vec<(String, Mem)> {
    processes(stack)
        .into_iter()
        .filter_map(|(name, pid)| Some((name, mem_of(pid)?)))
        .collect()
}

/// The container of deploy/base's Deployment of `service` (`actuator-svc` or `signal-svc`).
fn deploy_container(service: &str) -> anyhow::Result<(PathBuf, serde_yaml::Value)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../deploy/base")
        .join(service)
        .join("deployment.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    let doc: serde_yaml::Value = serde_yaml::from_str(&text)?;
    Ok((
        path,
        doc["spec"]["template"]["spec"]["containers"][0].clone(),
    ))
}

/// The value deploy/base gives the environment variable `name` of `service`, if any.
pub fn deploy_env(service: &str, name: &str) -> anyhow::Result<Option<String>> {
    let (_, container) = deploy_container(service)?;
    Ok(container["env"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|e| e["name"].as_str() == Some(name))
        .and_then(|e| e["value"].as_str().map(str::to_string)))
}

/// The memory limit deploy/base sets for `service` (`actuator-svc` or `signal-svc`), bytes.
pub fn deploy_limit(service: &str) -> anyhow::Result<u64> {
    let (path, container) = deploy_container(service)?;
    let limit = container["resources"]["limits"]["memory"]
        .as_str()
        .with_context(|| format!("{}: no memory limit", path.display()))?;
    parse_quantity(limit).with_context(|| format!("memory limit {limit:?}"))
}

/// A Kubernetes memory quantity in bytes (binary and decimal suffixes, no exponents).
pub fn parse_quantity(q: &str) -> Option<u64> {
    const UNITS: [(&str, u64); 8] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
    ];
    for (suffix, factor) in UNITS {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<u64>().ok()?.checked_mul(factor);
        }
    }
    q.parse().ok()
}

/// What to run at one size.
#[derive(Debug, Clone)]
pub struct ScaleOptions {
    pub nodes: usize,
    /// Nodes tainted and restored before memory is read (500, or half the cluster).
    pub wave: usize,
    pub soak: Duration,
    /// How often the soak samples memory.
    pub sample_every: Duration,
    pub run_dir: PathBuf,
    /// Realistic ARM timings (the bench) or fast ones (the smoke test).
    pub realistic: bool,
    /// More actuator flags (e.g. `--base-cache-budget=64Mi` to compare).
    pub actuator_args: Vec<String>,
}

impl ScaleOptions {
    pub fn new(nodes: usize, soak: Duration, run_dir: PathBuf) -> Self {
        ScaleOptions {
            nodes,
            wave: 500.min(nodes / 2),
            soak,
            sample_every: Duration::from_secs(10),
            run_dir,
            realistic: true,
            actuator_args: Vec::new(),
        }
    }
}

/// The resync of an actuator killed and restarted with every node asserted.
#[derive(Debug, Clone, Default)]
pub struct Resync {
    /// Nodes asserted (Down) when it was killed.
    pub asserted: usize,
    /// Restart to `/ready` 200.
    pub ready: Duration,
    /// Restart to its `snapshot applied` log line (by the line's own time stamp, not when
    /// the bench read it), and the node count that line gave.
    pub snapshot: Option<(Duration, u64)>,
    /// Restart to its `actuator-svc started` log line (process exec and configuration).
    pub started: Option<Duration>,
    /// Restart to a node tainted right after the restart being effective in ARM.
    pub effective: Duration,
}

/// Memory samples of one process through the soak.
#[derive(Debug, Clone, Default)]
pub struct Series {
    /// (minutes since the soak started, RSS KiB).
    pub samples: Vec<(f64, u64)>,
}

impl Series {
    pub fn first(&self) -> u64 {
        self.samples.first().map_or(0, |s| s.1)
    }
    pub fn last(&self) -> u64 {
        self.samples.last().map_or(0, |s| s.1)
    }
    pub fn max(&self) -> u64 {
        self.samples.iter().map(|s| s.1).max().unwrap_or(0)
    }
    /// Least-squares slope, KiB per minute (0 with fewer than two samples).
    pub fn slope_kib_per_min(&self) -> f64 {
        slope(&self.samples)
    }
}

/// Least-squares slope of `(x, y)` points.
pub fn slope(points: &[(f64, u64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1 as f64).sum::<f64>() / n;
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (x, y) in points {
        sxy += (x - mx) * (*y as f64 - my);
        sxx += (x - mx) * (x - mx);
    }
    if sxx == 0.0 { 0.0 } else { sxy / sxx }
}

/// What the soak did and saw.
#[derive(Debug, Clone, Default)]
pub struct Soak {
    pub duration: Duration,
    pub rounds: usize,
    pub tainted: usize,
    pub recreated: usize,
    pub faults: usize,
    pub series: BTreeMap<String, Series>,
    /// End-state, flapping and failure problems (empty when exact).
    pub problems: Vec<String>,
}

/// ARM requests on the load balancers during one leg of the wave.
#[derive(Debug, Clone, Copy, Default)]
pub struct LbCalls {
    /// GETs of an LB (whole reads and completion probes alike: ARM sends the document).
    pub gets: usize,
    pub puts: usize,
}

/// Counts the LB GETs and PUTs ARM answered from `since` on.
fn lb_calls(arm: &arm_sim::ArmSim, since: jiff::Timestamp) -> LbCalls {
    let mut c = LbCalls::default();
    for r in arm.requests() {
        if r.time < since || !r.path.contains("/loadBalancers/") {
            continue;
        }
        match r.method.as_str() {
            "GET" => c.gets += 1,
            "PUT" => c.puts += 1,
            _ => {}
        }
    }
    c
}

/// Everything measured at one size.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    pub nodes: usize,
    pub wave: usize,
    /// LB requests of the wave's Down leg and of its restore leg.
    pub wave_calls: [LbCalls; 2],
    /// Start-up to ready per service process.
    pub startup: Vec<(String, Duration)>,
    /// Memory after the wave was tainted and restored.
    pub after_wave: Vec<(String, Mem)>,
    pub resync: Resync,
    /// Memory after the soak (peaks cover the whole run).
    pub after_soak: Vec<(String, Mem)>,
    pub soak: Soak,
}

fn stack_options(o: &ScaleOptions) -> StackOptions {
    let dir = o.run_dir.join(format!("n{}", o.nodes));
    let mut s = if o.realistic {
        StackOptions::realistic("aks", o.nodes, dir)
    } else {
        StackOptions::fast("aks", o.nodes, dir)
    };
    s.actuators = 2;
    s.signals = 2;
    // The resync asserts every node but one Down: memory is measured here, not the
    // blast-radius guard (default 0.5), which would leave half of them to the health probe.
    s.actuator_args.push("--max-down-share=1.0".into());
    s.actuator_args.extend(o.actuator_args.iter().cloned());
    s
}

/// Polls `/ready` of `service` until 200; returns the time since `since`.
async fn until_ready(
    service: &mut Service,
    since: Instant,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let url = format!("{}/ready", service.admin_url());
    loop {
        let Some(proc) = service.proc.as_mut() else {
            bail!("{} is not running", service.name);
        };
        if !proc.is_running() {
            bail!("{} exited:\n{}", service.name, proc.log_tail(30));
        }
        if crate::http::get_status(&url).await == Some(200) {
            return Ok(since.elapsed());
        }
        if since.elapsed() > timeout {
            bail!(
                "{} not ready after {timeout:?}:\n{}",
                service.name,
                proc.log_tail(30)
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Stops `service` gracefully, starts it again and times it to ready.
async fn time_startup(service: &mut Service, run_dir: &Path) -> anyhow::Result<Duration> {
    if let Some(p) = service.proc.as_mut() {
        p.terminate(Duration::from_secs(15)).await;
    }
    let t0 = Instant::now();
    Stack::restart(service, run_dir).await?;
    until_ready(service, t0, Duration::from_secs(120)).await
}

/// Waits until every entry of every node in `nodes` reads `state` in ARM now. Cheaper than
/// [`Sandbox::wait_state`] at thousands of nodes: it reads the current entries, not the log.
pub async fn wait_all(
    sb: &Sandbox,
    nodes: &[String],
    state: State,
    timeout: Duration,
) -> anyhow::Result<()> {
    let want: HashSet<judge::EntryKey> = nodes
        .iter()
        .flat_map(|n| judge::node_entries(&sb.stack.cluster, n))
        .collect();
    let deadline = Instant::now() + timeout;
    loop {
        let wrong = observe::entries(&sb.stack.arm, &sb.stack.cluster)
            .into_iter()
            .filter(|e| {
                e.state != state
                    && want.contains(&(e.lb.clone(), e.pool.clone(), e.target.to_ascii_lowercase()))
            })
            .count();
        if wrong == 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{wrong} entries not {state:?} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Taints (`Down`) or untaints every node in `nodes`, 16 requests in flight, and keeps the
/// sandbox's record of what must be down.
async fn set_all(sb: &mut Sandbox, nodes: &[String], state: State) -> anyhow::Result<()> {
    let ops = sb.ops.clone();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(nodes.iter().cloned())
        .map(|n| {
            let ops = ops.clone();
            async move {
                if state == State::Down {
                    ops.taint(&n, OUT_OF_SERVICE, Some("scale"), "NoExecute")
                        .await
                } else {
                    ops.untaint(&n, OUT_OF_SERVICE).await
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    results.into_iter().collect::<anyhow::Result<Vec<()>>>()?;
    for n in nodes {
        if state == State::Down {
            sb.down.insert(n.clone());
        } else {
            sb.down.remove(n);
        }
    }
    Ok(())
}

/// The first line containing `what` an actuator logged after byte `from` of its log, if any.
fn log_line(log: &Path, from: u64, what: &str) -> Option<String> {
    let bytes = std::fs::read(log).ok()?;
    let text = String::from_utf8_lossy(bytes.get(from as usize..)?);
    text.lines().find(|l| l.contains(what)).map(str::to_string)
}

/// The time stamp a plain-format log line starts with.
fn line_time(line: &str) -> Option<jiff::Timestamp> {
    line.split_whitespace().next()?.parse().ok()
}

/// From `since` to the time stamp of `line` (zero if the line is earlier).
fn after(since: jiff::Timestamp, line: &str) -> Option<Duration> {
    let d = line_time(line)?.duration_since(since);
    Some(Duration::try_from(d).unwrap_or_default())
}

/// The `snapshot applied` line an actuator logged after byte `from` of its log, if any:
/// returns the node count it gives.
fn snapshot_line(log: &Path, from: u64) -> Option<u64> {
    let line = log_line(log, from, "snapshot applied")?;
    // Plain format `nodes=N`; JSON format `"nodes":N`.
    let rest = line
        .split("nodes=")
        .nth(1)
        .or_else(|| line.split("\"nodes\":").nth(1))?;
    rest.chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .ok()
}

/// Kills actuator-0 (SIGKILL) while every node but one is asserted Down, restarts it at once
/// and times its way back: ready, the leader's snapshot applied, and a node tainted right after
/// the restart effective in ARM. Restores every node afterwards.
async fn resync(sb: &mut Sandbox) -> anyhow::Result<Resync> {
    let all: Vec<String> = sb
        .stack
        .cluster
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    let (probe, held) = all.split_last().context("empty cluster")?;
    let probe = probe.clone();
    let long = Duration::from_secs(300);
    set_all(sb, held, State::Down).await?;
    wait_all(sb, held, State::Down, long).await?;
    // Give the leader a moment to have every node's Down recorded as asserted.
    tokio::time::sleep(Duration::from_secs(1)).await;

    let run_dir = sb.stack.options.run_dir.clone();
    let service = &mut sb.stack.actuators[0];
    let log = service
        .proc
        .as_ref()
        .map(|p| p.log.clone())
        .context("actuator-0 is not running")?;
    if let Some(p) = service.proc.as_mut() {
        p.kill().await;
    }
    let from = std::fs::metadata(&log).map_or(0, |m| m.len());
    let t0 = Instant::now();
    let since = jiff::Timestamp::now();
    Stack::restart(service, &run_dir).await?;
    sb.ops
        .taint(&probe, OUT_OF_SERVICE, Some("scale"), "NoExecute")
        .await?;
    sb.down.insert(probe.clone());
    let ready = until_ready(&mut sb.stack.actuators[0], t0, long).await?;
    let mut snapshot = None;
    while t0.elapsed() < Duration::from_secs(60) {
        if let Some(n) = snapshot_line(&log, from) {
            // When the line says it happened (the log is read only after ready).
            let at = log_line(&log, from, "snapshot applied")
                .and_then(|l| after(since, &l))
                .unwrap_or_else(|| t0.elapsed());
            snapshot = Some((at, n));
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let started = log_line(&log, from, "actuator-svc started").and_then(|l| after(since, &l));
    sb.wait_state(std::slice::from_ref(&probe), State::Down, since, long)
        .await
        .map_err(anyhow::Error::msg)?;
    let effective = t0.elapsed();

    set_all(sb, &all, State::None).await?;
    wait_all(sb, &all, State::None, long).await?;
    Ok(Resync {
        asserted: all.len(),
        ready,
        snapshot,
        started,
        effective,
    })
}

/// A small deterministic generator (xorshift64*): the soak's choices only need to vary.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// Samples memory of `procs` every `every` until `stop` is set.
fn sampler(
    procs: Vec<(String, Option<u32>)>,
    every: Duration,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, Series>> {
    tokio::spawn(async move {
        let t0 = Instant::now();
        let mut out: BTreeMap<String, Series> = BTreeMap::new();
        loop {
            let minutes = t0.elapsed().as_secs_f64() / 60.0;
            for (name, pid) in &procs {
                if let Some(m) = mem_of(*pid) {
                    out.entry(name.clone())
                        .or_default()
                        .samples
                        .push((minutes, m.rss_kib));
                }
            }
            if stop.load(Ordering::Relaxed) {
                return out;
            }
            let next = Instant::now() + every;
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    })
}

/// The ARM fault of soak round `round`, rotating through the kinds a real ARM produces.
fn fault(round: usize) -> arm_sim::faults::FaultSpec {
    let mut f = arm_sim::faults::FaultSpec::default();
    match round % 4 {
        0 => f.throttle_for_ms = Some(3000),
        1 => f.server_errors = Some(3),
        2 => f.drop_connections = Some(2),
        _ => f.fail_operations = Some(1),
    }
    f
}

/// Rounds of churn until `duration` is spent: a random batch tainted (with an ARM fault every
/// other round), then two of it replaced (deleted and created again) and the rest restored.
/// Memory is sampled throughout; the end state and flapping are judged at the end.
async fn soak(sb: &mut Sandbox, duration: Duration, every: Duration) -> anyhow::Result<Soak> {
    let all: Vec<String> = sb
        .stack
        .cluster
        .nodes
        .iter()
        .map(|n| n.name.clone())
        .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let samples = sampler(processes(&sb.stack), every, stop.clone());
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ all.len() as u64);
    let mut result = Soak::default();
    let since = jiff::Timestamp::now();
    let mut windows = Vec::new();
    let started = Instant::now();
    let wait = Duration::from_secs(180);
    let max_batch = (all.len() / 10).clamp(3, 50);
    let mut failure = None;
    while started.elapsed() < duration {
        let round = result.rounds;
        result.rounds += 1;
        let size = 3 + rng.below(max_batch - 2);
        let mut batch: Vec<String> = Vec::with_capacity(size);
        while batch.len() < size {
            let n = &all[rng.below(all.len())];
            if !batch.contains(n) {
                batch.push(n.clone());
            }
        }
        if round % 2 == 1 {
            sb.stack.arm.faults(fault(round / 2));
            result.faults += 1;
        }
        let step = async {
            windows.push(jiff::Timestamp::now());
            set_all(sb, &batch, State::Down).await?;
            wait_all(sb, &batch, State::Down, wait).await?;
            windows.push(jiff::Timestamp::now());
            let (replaced, restored) = batch.split_at(2);
            for n in replaced {
                sb.ops.recreate(n).await?;
                sb.down.remove(n);
            }
            set_all(sb, restored, State::None).await?;
            wait_all(sb, &batch, State::None, wait).await?;
            anyhow::Ok(replaced.len())
        };
        match step.await {
            Ok(replaced) => {
                result.tainted += batch.len();
                result.recreated += replaced;
            }
            Err(e) => {
                failure = Some(format!("round {round}: {e:#}"));
                break;
            }
        }
    }
    result.duration = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    result.series = samples.await.unwrap_or_default();
    let mut outcome = Outcome::default();
    sb.finish(&mut outcome, since, &windows);
    result.problems.extend(failure);
    result.problems.extend(outcome.problems);
    Ok(result)
}

/// Runs every measurement at one size, against a fresh system.
pub async fn run(o: &ScaleOptions) -> anyhow::Result<Figures> {
    let mut sb = Sandbox::start(stack_options(o)).await?;
    let run_dir = sb.stack.options.run_dir.clone();
    let mut figures = Figures {
        nodes: o.nodes,
        wave: o.wave,
        ..Default::default()
    };
    for service in sb
        .stack
        .actuators
        .iter_mut()
        .chain(sb.stack.signals.iter_mut())
    {
        let took = time_startup(service, &run_dir).await?;
        figures.startup.push((service.name.clone(), took));
    }
    // Both signal-svc replicas restarted: wait until the leader streams to both actuators.
    sb.stack.wait_ready(Duration::from_secs(120)).await?;

    let user = o.wave.min(sb.unused_count("userpool"));
    let mut wave = sb.fresh_nodes("userpool", user)?;
    wave.extend(sb.fresh_nodes("spotpool", o.wave - user)?);
    let (put, op) = (
        sb.stack.options.arm_tuning.latency_ms.put as f64,
        sb.stack.options.arm_tuning.completion_delay_ms as f64,
    );
    let spread = Duration::from_secs(2);
    let timeout = Duration::from_secs(300);
    let t = jiff::Timestamp::now();
    crate::wave::play(&mut sb, &wave, State::Down, spread, put, op, timeout).await?;
    let t2 = jiff::Timestamp::now();
    let down = lb_calls(&sb.stack.arm, t);
    crate::wave::play(&mut sb, &wave, State::None, spread, put, op, timeout).await?;
    figures.wave_calls = [down, lb_calls(&sb.stack.arm, t2)];
    figures.after_wave = snapshot(&sb.stack);

    figures.resync = resync(&mut sb).await?;
    sb.stack.wait_ready(Duration::from_secs(120)).await?;

    figures.soak = soak(&mut sb, o.soak, o.sample_every).await?;
    figures.after_soak = snapshot(&sb.stack);
    sb.stack.stop().await;
    Ok(figures)
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The service a process name belongs to (`actuator-1` -> `actuator-svc`).
pub fn service_of(process: &str) -> &str {
    if process.starts_with("actuator") {
        "actuator-svc"
    } else if process.starts_with("signal") {
        "signal-svc"
    } else {
        process
    }
}

/// The bench's report of every size, as text.
pub fn report(all: &[Figures]) -> String {
    let mut out = String::new();
    let mut line = |s: String| {
        out.push_str(&s);
        out.push('\n');
    };
    line(format!(
        "{:>6} {:<11} {:>9} | {:>9} {:>9} | {:>9} {:>9}",
        "nodes", "process", "start s", "wave MiB", "peak", "soak MiB", "peak"
    ));
    for f in all {
        for (name, after_wave) in &f.after_wave {
            let start = f
                .startup
                .iter()
                .find(|(n, _)| n == name)
                .map_or("-".to_string(), |(_, d)| format!("{:.2}", d.as_secs_f64()));
            let soak = f
                .after_soak
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, m)| *m);
            line(format!(
                "{:>6} {:<11} {:>9} | {:>9} {:>9} | {:>9} {:>9}",
                f.nodes,
                name,
                start,
                mib(after_wave.rss_kib),
                mib(after_wave.hwm_kib),
                soak.map_or("-".into(), |m| mib(m.rss_kib)),
                soak.map_or("-".into(), |m| mib(m.hwm_kib)),
            ));
        }
    }
    line(String::new());
    for f in all {
        let [down, up] = f.wave_calls;
        line(format!(
            "wave of {} at {} nodes, LB requests to ARM (both actuators): Down leg {} GET / {} PUT, restore leg {} GET / {} PUT",
            f.wave, f.nodes, down.gets, down.puts, up.gets, up.puts
        ));
    }
    line(String::new());
    line("resync of actuator-0, SIGKILLed with every node but one asserted Down:".into());
    for f in all {
        let r = &f.resync;
        line(format!(
            "  {:>5} nodes: process started {} | ready {:.2} s | snapshot applied {} | probe node effective {:.2} s",
            f.nodes,
            r.started
                .map_or("-".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            r.ready.as_secs_f64(),
            r.snapshot.map_or("never logged".into(), |(d, n)| format!(
                "{:.2} s ({n} nodes)",
                d.as_secs_f64()
            )),
            r.effective.as_secs_f64(),
        ));
    }
    line(String::new());
    for f in all {
        let s = &f.soak;
        line(format!(
            "soak at {} nodes: {:.1} min, {} rounds, {} taint cycles, {} nodes replaced, {} ARM faults; end state {}",
            f.nodes,
            s.duration.as_secs_f64() / 60.0,
            s.rounds,
            s.tainted,
            s.recreated,
            s.faults,
            if s.problems.is_empty() {
                "exact".to_string()
            } else {
                format!("WRONG: {}", s.problems.join("; "))
            }
        ));
        for (name, series) in &s.series {
            line(format!(
                "  {:<11} RSS MiB first {:>7} last {:>7} max {:>7} | slope {:+.0} KiB/min over {} samples",
                name,
                mib(series.first()),
                mib(series.last()),
                mib(series.max()),
                series.slope_kib_per_min(),
                series.samples.len()
            ));
        }
    }
    if let (Some(lo), Some(hi)) = (all.first(), all.last())
        && hi.nodes > lo.nodes
    {
        line(String::new());
        let dn = (hi.nodes - lo.nodes) as f64;
        let largest = |f: &Figures, svc: &str| {
            f.after_wave
                .iter()
                .filter(|(n, _)| service_of(n) == svc)
                .map(|(_, m)| m.rss_kib)
                .max()
                .unwrap_or(0)
        };
        for svc in ["actuator-svc", "signal-svc", SIMULATORS] {
            let growth = (largest(hi, svc) as f64 - largest(lo, svc) as f64) * 1024.0 / dn;
            line(format!(
                "per-node growth {svc}: {growth:.0} bytes/node ({} -> {} nodes, largest replica after the wave)",
                lo.nodes, hi.nodes
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_fields_are_read_in_kib() {
        let text = "Name:\tx\nVmHWM:\t  20480 kB\nVmRSS:\t   10240 kB\n";
        assert_eq!(
            parse_status(text),
            Some(Mem {
                rss_kib: 10240,
                hwm_kib: 20480
            })
        );
        assert_eq!(parse_status("Name:\tx\n"), None);
        assert!(mem_of(None).is_some_and(|m| m.rss_kib > 0 && m.hwm_kib >= m.rss_kib));
    }

    #[test]
    fn the_stack_runs_the_allocator_settings_of_deploy() {
        for svc in ["actuator-svc", "signal-svc"] {
            assert_eq!(
                deploy_env(svc, crate::stack::JEMALLOC_CONF_VAR)
                    .unwrap()
                    .as_deref(),
                Some(crate::stack::JEMALLOC_CONF),
                "{svc}"
            );
        }
    }

    #[test]
    fn quantities_and_slopes() {
        assert_eq!(parse_quantity("64Mi"), Some(64 << 20));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000));
        assert_eq!(parse_quantity("1000"), Some(1000));
        assert_eq!(parse_quantity("lots"), None);
        assert_eq!(slope(&[(0.0, 100), (1.0, 100), (2.0, 100)]), 0.0);
        assert!((slope(&[(0.0, 100), (1.0, 110), (2.0, 120)]) - 10.0).abs() < 1e-9);
        assert_eq!(slope(&[(0.0, 100)]), 0.0);
    }

    #[test]
    fn the_snapshot_line_gives_its_node_count() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("a.log");
        std::fs::write(
            &log,
            "2025 INFO snapshot applied nodes=12 dropped=0\n2025 INFO snapshot applied nodes=4999 dropped=0\n",
        )
        .unwrap();
        assert_eq!(snapshot_line(&log, 0), Some(12));
        let second = std::fs::read_to_string(&log).unwrap().find('\n').unwrap() as u64 + 1;
        assert_eq!(snapshot_line(&log, second), Some(4999));
        assert_eq!(snapshot_line(&log, 10_000), None);
    }

    #[test]
    fn log_lines_are_timed_by_their_own_stamp() {
        let since: jiff::Timestamp = "2026-11-23T16:55:19.000000Z".parse().unwrap();
        let line = "2026-11-23T16:55:20.721859Z  INFO actuator_svc::grpc::service: snapshot applied nodes=5000 dropped=0";
        let d = after(since, line).unwrap();
        assert!((d.as_secs_f64() - 1.721859).abs() < 1e-6, "{d:?}");
        assert_eq!(after(since, "no stamp here"), None);
        let earlier: jiff::Timestamp = "2026-11-23T16:56:00Z".parse().unwrap();
        assert_eq!(after(earlier, line), Some(Duration::ZERO));
    }
}
