//! The chaos soak (issue 18 item 7): the whole system on kube-sim and arm-sim while a seeded
//! [`schedule`] of faults is injected by the [`drivers`] and a [`workload`] of taints, holds
//! and Spot notices comes and goes; then the judge ([`crate::judge::chaos`]) reads ARM's
//! effective log and prints a table.
//!
//! Data flow: `schedule(seed)` → the run loop starts and ends each fault on time (the
//! drivers record when it really happened) while the workload task records intents, samplers
//! follow signal-svc's leadership epochs and each actuator's owned LBs ([`ownership`]), and a
//! [`tool`] host polls the drain gate through the actuators → after a quiet tail, the judge
//! gets ARM's log, the intents, the faults as injected, the epochs, the end state, who wrote
//! what (Kubernetes by credential, ARM by the replica each `User-Agent` names) and the tool's
//! answers.

pub mod drivers;
pub mod ownership;
pub mod schedule;
pub mod tool;
pub mod workload;

use crate::judge::State;
use crate::judge::chaos::{self as rules, Bounds, Intent, Rule, Verdict};
use crate::kube_ops;
use crate::report::{percentile, secs, table};
use crate::stack::{KubeKind, Stack, StackOptions};
use drivers::{Drivers, Leadership, Running};
use parking_lot::Mutex;
use schedule::{FaultKind, Plan};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// What to run.
#[derive(Debug, Clone)]
pub struct SoakOptions {
    pub run: Duration,
    pub seed: u64,
    pub nodes: usize,
    /// Fast ARM timings and a short self-heal interval (the CI smoke); realistic otherwise.
    pub fast: bool,
    /// The highest API latency injected (the issue: 2 s, which signal-svc's default lease
    /// timings are measured to tolerate, README "Leadership timings").
    pub max_latency_ms: u64,
    pub run_dir: PathBuf,
    /// signal-svc replicas: 2 (leader and standby) or 1 (`deploy/overlays/single-replica`).
    pub signals: usize,
}

/// The actuator's self-heal interval in the smoke (deploy/'s 30 s in the soak).
const SMOKE_SELF_HEAL: Duration = Duration::from_secs(10);
/// The actuator's longest backoff between ARM retries (actuator-svc writer).
const BACKOFF_CAP_MS: u64 = 30_000;

/// What a run produced.
#[derive(Debug, Clone)]
pub struct Report {
    pub options: SoakOptions,
    pub plan: Plan,
    pub bounds: Bounds,
    pub faults: Vec<rules::Active>,
    pub verdict: Verdict,
    pub actions: usize,
    pub epochs: usize,
    pub arm: (usize, usize, usize),
    /// signal-svc's Kubernetes writes judged against the Lease: (Lease writes, other writes,
    /// replicas seen writing).
    pub signal_writes: (usize, usize, usize),
    pub writers: WritersJudged,
    /// Tool answers judged: (answers, entry states in them).
    pub tool: (usize, usize),
}

/// What the one-writer rule judged.
#[derive(Debug, Clone, Default)]
pub struct WritersJudged {
    /// Successful and refused LB writes, by replica.
    pub writes: BTreeMap<String, usize>,
    /// Changes of an actuator's owned set seen.
    pub ownership_changes: usize,
    /// Longest time two replicas said they owned one LB.
    pub dual_owner_ms: u64,
    /// Latest a successful write arrived after its sender stopped owning the LB.
    pub late_ms: u64,
}

/// The one-writer rule's bounds here. The gauge is read every 100 ms, and a replica's start
/// of ownership is dated back to the read before (a write may follow a grant at once), so
/// two owners can seem to overlap by a read or two; a replica that was frozen reports its
/// lapsed grant at the next gauge update. Writes are judged by when ARM received them.
const WRITER_BOUNDS: crate::judge::writer::WriterBounds = crate::judge::writer::WriterBounds {
    dual_owner_ms: 1_000,
    in_flight_ms: 2_000,
};
/// How far outside `[asked, answered]` a tool answer's ARM state may lie: both clocks are
/// this process's (arm-sim runs in it), so only scheduling.
const TOOL_SLACK_MS: u64 = 50;

impl Report {
    pub fn violations(&self) -> usize {
        self.verdict.violations.len()
    }
}

fn stack_options(o: &SoakOptions) -> StackOptions {
    let preset = "aks";
    let mut s = if o.fast {
        let mut s = StackOptions::fast(preset, o.nodes, o.run_dir.clone());
        s.actuator_args.push(format!(
            "--self-heal-interval={}s",
            SMOKE_SELF_HEAL.as_secs()
        ));
        s
    } else {
        StackOptions::realistic(preset, o.nodes, o.run_dir.clone())
    };
    // kube-sim: the faults are injected there.
    s.kube = KubeKind::Sim;
    s.signals = o.signals.max(1);
    s
}

fn bounds(s: &StackOptions) -> Bounds {
    let t = &s.arm_tuning;
    let self_heal = if s.actuator_args.iter().any(|a| a.starts_with("--self-heal")) {
        SMOKE_SELF_HEAL
    } else {
        Duration::from_secs(30)
    };
    Bounds {
        write_ms: t.latency_ms.put + t.completion_delay_ms + t.latency_ms.poll,
        slack_ms: 1000 + 2 * t.latency_ms.get,
        retry_after_ms: 1000 * t.retry_after_secs.max(t.lock_retry_after_secs),
        backoff_cap_ms: BACKOFF_CAP_MS,
        // Lease duration 4 s, the standby's 250 ms retry, reconnect and snapshot.
        signal_failover_ms: 6000,
        actuator_failover_ms: 10_000,
        watch_recovery_ms: 5000,
        self_heal_ms: self_heal.as_millis() as u64,
        signal_replicas: s.signals,
    }
}

/// Runs the soak and judges it.
pub async fn run(o: &SoakOptions) -> anyhow::Result<Report> {
    let options = stack_options(o);
    let bounds = bounds(&options);
    let mut stack = Stack::start(options).await?;
    let origin = jiff::Timestamp::now();
    let ownership = ownership::Ownership::follow(&stack, origin);
    // The soak judges the fleet in service: start-up's quiet period (no writer for the first
    // `--assignment-valid-for` of the first leadership) is not a fault's cost.
    stack.wait_assigned(Duration::from_secs(30)).await?;
    let mut plan = Plan::for_run(o.run, stack.actuators.len());
    plan.max_latency_ms = o.max_latency_ms;
    let faults = schedule::schedule(o.seed, &plan);
    let client = kube_ops::client(&stack.kubeconfig).await?;
    let lead = Leadership::follow(&stack);
    let nodes: Vec<String> = stack.cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let spot: Vec<String> = stack
        .cluster
        .nodes
        .iter()
        .filter(|n| n.pool.contains("spot"))
        .map(|n| n.name.clone())
        .collect();
    let mut workload = workload::Workload::new(
        kube_ops::Cluster::new(client.clone()),
        nodes.clone(),
        spot,
        stack.pki.tool_tls()?,
        stack.actuators.iter().filter_map(|a| a.grpc_port).collect(),
        (nodes.len() / 4).max(1),
        if o.fast {
            Duration::from_millis(1500)
        } else {
            Duration::from_secs(3)
        },
        o.seed,
    );
    let desired = workload.desired.clone();
    let tool_reads = Arc::new(Mutex::new(Vec::new()));
    let tool = tool::Tool {
        actuators: stack
            .actuators
            .iter()
            .filter_map(|a| Some((a.name.clone(), a.grpc_port?)))
            .collect(),
        nodes: nodes.clone(),
        tls: stack.pki.tool_tls()?,
        desired: desired.clone(),
        origin,
        reads: tool_reads.clone(),
    };
    let mut drivers = Drivers::new(client, o.seed);

    let start = jiff::Timestamp::now();
    let t0 = Instant::now();
    let horizon = plan.run.saturating_sub(plan.quiet_tail);
    let work = tokio::spawn(async move {
        workload.run(t0 + horizon).await;
        workload
    });
    let asking = tokio::spawn(tool.run(t0 + plan.run, o.seed));
    let mut next = 0;
    let mut running: Vec<Running> = Vec::new();
    loop {
        let due_start = faults.get(next).map(|f| f.at);
        let due_end = running.iter().map(|r| r.fault.end()).min();
        let Some(due) = [due_start, due_end].into_iter().flatten().min() else {
            break;
        };
        tokio::time::sleep_until((t0 + due).into()).await;
        if due_end == Some(due) {
            if let Some(k) = running.iter().position(|r| r.fault.end() == due) {
                let r = running.swap_remove(k);
                drivers.finish(&mut stack, r).await;
            }
            continue;
        }
        let fault = faults[next].clone();
        next += 1;
        eprintln!(
            "chaos +{:>5.1}s {} ({} ms, target {}, param {})",
            t0.elapsed().as_secs_f64(),
            fault.kind.name(),
            fault.length.as_millis(),
            fault.target,
            fault.param
        );
        if let Some(r) = drivers.start(&mut stack, &lead, &desired, &fault).await {
            running.push(r);
        }
    }
    let workload = work.await?;
    tokio::time::sleep_until((t0 + plan.run).into()).await;
    asking.await?;
    stack.wait_ready(Duration::from_secs(60)).await?;
    let end = jiff::Timestamp::now();

    let log = crate::observe::changes(&stack.arm);
    let end_entries = crate::observe::entries(&stack.arm, &stack.cluster);
    let intents = desired.intents();
    let epochs = lead.epochs.lock().clone();
    let gate = crate::observe::gate_log(&stack.kube);
    let verdict = rules::judge(&rules::Inputs {
        cluster: &stack.cluster,
        log: &log,
        intents: &intents,
        faults: &drivers.active,
        epochs: &epochs,
        end_entries: &end_entries,
        gate: &gate,
        bounds: &bounds,
        start,
        end,
    });
    let mut verdict = verdict;
    let (writes, unattributed) = signal_writes(&stack);
    // A write sent while the replica held the Lease may be answered up to the injected API
    // latency later (plus a scheduling slack).
    let leases = writes.iter().filter(|w| w.path.contains("/leases")).count();
    let writers: std::collections::BTreeSet<&str> =
        writes.iter().map(|w| w.caller.as_str()).collect();
    let signal_writes = (leases, writes.len() - leases, writers.len());
    let (_, late) =
        crate::judge::leader::leader_only(&writes, plan.max_latency_ms + LEADER_WRITE_SLACK_MS);
    verdict.violations.extend(late);
    if unattributed > 0 {
        verdict.violations.push(rules::Violation {
            rule: Rule::LeaderOnly,
            text: format!(
                "{unattributed} writes by signal-svc's ServiceAccount with no replica's credential"
            ),
        });
    }
    let (writers, v) = judge_writers(&stack, &ownership, origin, end);
    verdict.violations.extend(v);
    let reads = tool_reads.lock().clone();
    let history: Vec<_> = log
        .iter()
        .map(|c| {
            let at = ownership::since(origin, c.time);
            (
                at,
                crate::judge::key(&c.lb, &c.pool, &c.target),
                c.state,
                c.outside,
            )
        })
        .collect();
    verdict.violations.extend(crate::judge::tool::tool_answers(
        &reads,
        &history,
        &stack.cluster.nodes,
        TOOL_SLACK_MS,
    ));
    let tool = (reads.len(), reads.iter().map(|r| r.entries.len()).sum());
    let arm = crate::observe::arm_calls(&stack.arm, start);
    if let Err(e) = write_record(&o.run_dir, &stack, &intents) {
        eprintln!("chaos soak: could not write the run's record: {e}");
    }
    stack.stop().await;
    Ok(Report {
        options: o.clone(),
        plan,
        bounds,
        faults: drivers.active,
        verdict,
        actions: workload.actions,
        epochs: epochs.len(),
        arm,
        signal_writes,
        writers,
        tool,
    })
}

/// The one-writer rule over the run: every LB write arm-sim received since `origin`, told
/// apart by the replica its `User-Agent` names, against the owned sets sampled. A write that
/// names no replica is a violation: nothing could say who sent it.
fn judge_writers(
    stack: &Stack,
    ownership: &ownership::Ownership,
    origin: jiff::Timestamp,
    end: jiff::Timestamp,
) -> (WritersJudged, Vec<rules::Violation>) {
    use crate::judge::writer::{ArmWrite, lb_of, one_writer};
    let mut judged = WritersJudged::default();
    let mut writes = Vec::new();
    let mut unnamed = 0;
    for r in stack.arm.requests() {
        if r.method != "PUT" || !r.path.contains("/loadBalancers/") || r.received < origin {
            continue;
        }
        let Some(writer) = r.user_agent.as_deref().and_then(replica_of) else {
            unnamed += 1;
            continue;
        };
        *judged.writes.entry(writer.to_owned()).or_default() += 1;
        writes.push(ArmWrite {
            at: ownership::since(origin, r.received),
            lb: lb_of(&r.path).to_ascii_lowercase(),
            writer: writer.to_owned(),
            status: r.status,
        });
    }
    let owned = ownership.log.lock().clone();
    judged.ownership_changes = owned.len();
    let (dual, late, mut v) = one_writer(
        &owned,
        &[],
        &writes,
        ownership::since(origin, end),
        &WRITER_BOUNDS,
    );
    judged.dual_owner_ms = dual;
    judged.late_ms = late;
    if unnamed > 0 {
        v.push(rules::Violation {
            rule: Rule::OneWriter,
            text: format!("{unnamed} load balancer writes whose User-Agent names no replica"),
        });
    }
    (judged, v)
}

/// The replica an actuator's `User-Agent` names (`... (actuator-svc; replica=<name>)`).
fn replica_of(agent: &str) -> Option<&str> {
    let rest = &agent[agent.find("replica=")? + "replica=".len()..];
    let name = rest.split([')', ';', ' ']).next()?;
    (!name.is_empty()).then_some(name)
}

/// How much later than the injected API latency a Lease holder's last write may be answered.
const LEADER_WRITE_SLACK_MS: u64 = 500;

/// Every write signal-svc's replicas made (kube-sim's log, told apart by each replica's
/// credential; times in ms since the first request, start-up's Lease writes included), in
/// order, and how many writes of its ServiceAccount no replica's credential explains.
fn signal_writes(stack: &Stack) -> (Vec<crate::judge::leader::KubeWrite>, usize) {
    let names: BTreeMap<&str, &str> = stack
        .signal_credentials
        .iter()
        .zip(&stack.signals)
        .filter_map(|((_, id), s)| Some((id.as_deref()?, s.name.as_str())))
        .collect();
    let requests = stack.kube.sim().requests();
    let Some(origin) = requests.iter().filter_map(|r| r.at).min() else {
        return (Vec::new(), 0);
    };
    let mut writes = Vec::new();
    let mut unattributed = 0;
    for r in requests {
        if r.method == "GET" || r.caller.as_deref() != Some(crate::stack::SIGNAL_CALLER) {
            continue;
        }
        let Some(at) = r.at else {
            continue;
        };
        let Some(name) = r.credential_id.as_deref().and_then(|id| names.get(id)) else {
            unattributed += 1;
            continue;
        };
        writes.push(crate::judge::leader::KubeWrite {
            at: at.duration_since(origin).as_millis().max(0) as u64,
            caller: (*name).to_owned(),
            method: r.method,
            path: r.path,
            status: r.status,
        });
    }
    (writes, unattributed)
}

/// What a reader needs to explain a verdict after the processes are gone: ARM's requests and
/// effective changes, and the intents, one JSON object per line in the run directory.
fn write_record(dir: &std::path::Path, stack: &Stack, intents: &[Intent]) -> anyhow::Result<()> {
    use std::io::Write;
    let mut requests =
        std::io::BufWriter::new(std::fs::File::create(dir.join("arm-requests.jsonl"))?);
    for r in stack.arm.requests() {
        serde_json::to_writer(&mut requests, &r)?;
        requests.write_all(b"\n")?;
    }
    let mut effective =
        std::io::BufWriter::new(std::fs::File::create(dir.join("arm-effective.jsonl"))?);
    for e in stack.arm.effective_log() {
        serde_json::to_writer(&mut effective, &e)?;
        effective.write_all(b"\n")?;
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(dir.join("intents.jsonl"))?);
    for i in intents {
        let line = serde_json::json!({"node": i.node, "at": i.at.to_string(), "state": format!("{:?}", i.state)});
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    Ok(())
}

fn range(r: (Duration, Duration)) -> String {
    format!("{:.0}-{:.0} s", r.0.as_secs_f64(), r.1.as_secs_f64())
}

/// The printed result: faults injected, transitions with p50/p99/max, violations by rule
/// (and the first few of each).
pub fn render(r: &Report) -> String {
    let o = &r.options;
    let mut out = format!(
        "chaos soak: seed {}, {} nodes, {:.1} min ({} ARM timings; faults stop {:.0} s before the end), \
         ARM outages {} (the issue's 1-20 min scaled to the run), 429 storms {}, stops {}, restarts after {}, \
         API latency up to {} ms\n",
        o.seed,
        o.nodes,
        o.run.as_secs_f64() / 60.0,
        if o.fast { "fast" } else { "realistic" },
        r.plan.quiet_tail.as_secs_f64(),
        range(r.plan.outage),
        range(r.plan.storm),
        range(r.plan.stop),
        range(r.plan.restart_delay),
        r.plan.max_latency_ms,
    );
    let b = &r.bounds;
    out.push_str(&format!(
        "allowance: base {:.1} s (2 x (PUT + operation) {:.1} s + {:.1} s) plus the faults touching the transition: \
         ARM outage/storm remaining + backoff (<= its length, cap {:.0} s) + {:.0} s retry hint; failed operation: a write + hint + 1.4 s each; signal-svc failover {:.0} s; \
         actuator failover {:.0} s per edge; watch recovery {:.0} s; API latency x3; outside writes repaired within {:.0} s self-heal + allowance\n\n",
        b.base_ms() as f64 / 1000.0,
        2.0 * b.write_ms as f64 / 1000.0,
        b.slack_ms as f64 / 1000.0,
        b.backoff_cap_ms as f64 / 1000.0,
        b.retry_after_ms as f64 / 1000.0,
        b.signal_failover_ms as f64 / 1000.0,
        b.actuator_failover_ms as f64 / 1000.0,
        b.watch_recovery_ms as f64 / 1000.0,
        b.self_heal_ms as f64 / 1000.0,
    ));
    let mut per_kind: BTreeMap<FaultKind, (usize, f64)> = BTreeMap::new();
    for f in &r.faults {
        let slot = per_kind.entry(f.kind).or_default();
        slot.0 += 1;
        slot.1 += f.end.duration_since(f.start).as_secs_f64();
    }
    let rows: Vec<Vec<String>> = FaultKind::ALL
        .iter()
        .map(|k| {
            let (n, total) = per_kind.get(k).copied().unwrap_or_default();
            vec![k.name().to_string(), n.to_string(), format!("{total:.0}")]
        })
        .chain(std::iter::once(vec![
            "all".to_string(),
            r.faults.len().to_string(),
            "-".to_string(),
        ]))
        .collect();
    out.push_str(&table(&["fault", "injected", "total s"], &rows));
    out.push('\n');
    let mut rows = Vec::new();
    for (name, state) in [
        ("cut (-> Down)", State::Down),
        ("restore (-> None)", State::None),
    ] {
        let of: Vec<&rules::Transition> = r
            .verdict
            .transitions
            .iter()
            .filter(|t| t.state == state)
            .collect();
        let took: Vec<f64> = of
            .iter()
            .filter_map(|t| t.took)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        let calm: Vec<f64> = of
            .iter()
            .filter(|t| t.allowance.as_millis() as u64 == r.bounds.base_ms())
            .filter_map(|t| t.took)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        rows.push(vec![
            name.to_string(),
            of.len().to_string(),
            (of.len() - took.len()).to_string(),
            secs(percentile(&took, 50.0)),
            secs(percentile(&took, 99.0)),
            secs(took.iter().copied().reduce(f64::max)),
            secs(percentile(&calm, 99.0)),
            secs(
                of.iter()
                    .map(|t| t.allowance.as_secs_f64() * 1000.0)
                    .reduce(f64::max),
            ),
        ]);
    }
    out.push_str(&table(
        &[
            "transitions",
            "count",
            "superseded",
            "p50 s",
            "p99 s",
            "max s",
            "p99 no fault s",
            "max allowance s",
        ],
        &rows,
    ));
    out.push('\n');
    let mut per_rule: BTreeMap<Rule, Vec<&str>> = BTreeMap::new();
    for v in &r.verdict.violations {
        per_rule.entry(v.rule).or_default().push(&v.text);
    }
    let rows: Vec<Vec<String>> = Rule::ALL
        .iter()
        .map(|k| {
            // The actuators' accepted versions are read from their state: in-process only.
            let count = if *k == Rule::AcceptedBackwards {
                "not judged here (tests/dst)".to_string()
            } else {
                per_rule.get(k).map_or(0, Vec::len).to_string()
            };
            vec![k.name().to_string(), count]
        })
        .collect();
    out.push_str(&table(&["rule", "violations"], &rows));
    out.push_str(&format!(
        "workload actions {}, leadership epochs seen {}, ARM calls {} reads / {} writes / {} throttled\n",
        r.actions, r.epochs, r.arm.0, r.arm.1, r.arm.2
    ));
    let g = &r.verdict.gate;
    out.push_str(&format!(
        "drain gate: {} True and {} False periods judged against ARM; longest stale {:.1} s\n",
        g.true_periods,
        g.false_periods,
        g.longest_stale.as_secs_f64()
    ));
    out.push_str(&format!(
        "leader only: {} Lease writes and {} other writes of signal-svc by {} replicas judged (each replica its own token)\n",
        r.signal_writes.0, r.signal_writes.1, r.signal_writes.2
    ));
    let w = &r.writers;
    out.push_str(&format!(
        "one writer: {} load balancer writes by {} replicas ({}) judged against {} owned-set changes read every {} ms; \
         longest two-owner overlap {} ms (bound {} ms), latest write after losing its LB {} ms\n",
        w.writes.values().sum::<usize>(),
        w.writes.len(),
        w.writes
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect::<Vec<_>>()
            .join(", "),
        w.ownership_changes,
        ownership::EVERY.as_millis(),
        w.dual_owner_ms,
        WRITER_BOUNDS.dual_owner_ms,
        w.late_ms,
    ));
    out.push_str(&format!(
        "tool answers: {} GetNodeAdminState(fresh) answers, {} entry states in them judged against ARM\n",
        r.tool.0, r.tool.1
    ));
    for (rule, texts) in &per_rule {
        out.push_str(&format!("\n{} ({}):\n", rule.name(), texts.len()));
        for t in texts.iter().take(8) {
            out.push_str(&format!("  {t}\n"));
        }
    }
    out.push_str(&format!(
        "\nverdict: {}\n",
        if r.violations() == 0 {
            "no violations, end state exact"
        } else {
            "VIOLATIONS"
        }
    ));
    out
}
