//! The user scenarios the sandbox plays and the whole-system tests assert. Each acts through
//! the Kubernetes API (or kills a process, or injects an ARM fault), waits for the outcome on
//! the ARM side, and records latencies, ARM calls and any problem with the end state.

use crate::judge::State;
use crate::kube_ops::{OUT_OF_SERVICE, SHUTDOWN, SPOT_EVICTION};
use crate::sandbox::{Outcome, Sandbox, ms};
use crate::stack::Stack;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{
    AdminState, HeldNode, ListHeldEntriesRequest, NodeRef, NodeResult, ResultPhase,
    SetNodeAdminStateRequest, WaitFor,
};
use k8s_openapi::api::coordination::v1::Lease;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, Endpoint};

mod departures;

/// Every scenario, in the order the sandbox plays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scenario {
    OutOfService,
    Shutdown,
    SpotNotice,
    Cordon,
    RecreatedNode,
    UpgradeWave,
    ThrottlingStorm,
    SignalLeaderKill,
    ActuatorKill,
    ActuatorFrozen,
    OutsideWriter,
    EveryNodeAtOnce,
    ToolHold,
    KarpenterTermination,
    AutoscalerScaleDown,
    AbortedScaleDown,
    DrainGate,
}

impl Scenario {
    pub const ALL: [Scenario; 17] = [
        Scenario::OutOfService,
        Scenario::Shutdown,
        Scenario::SpotNotice,
        Scenario::Cordon,
        Scenario::RecreatedNode,
        Scenario::UpgradeWave,
        Scenario::ThrottlingStorm,
        Scenario::SignalLeaderKill,
        Scenario::ActuatorKill,
        Scenario::ActuatorFrozen,
        Scenario::OutsideWriter,
        Scenario::EveryNodeAtOnce,
        Scenario::ToolHold,
        Scenario::KarpenterTermination,
        Scenario::AutoscalerScaleDown,
        Scenario::AbortedScaleDown,
        Scenario::DrainGate,
    ];

    /// How nodes leave today (docs/signal-sources.md), the drain gate last.
    pub const DEPARTURES: [Scenario; 4] = [
        Scenario::KarpenterTermination,
        Scenario::AutoscalerScaleDown,
        Scenario::AbortedScaleDown,
        Scenario::DrainGate,
    ];

    /// Whether the scenario injects faults or kills processes.
    pub fn disrupted(self) -> bool {
        matches!(
            self,
            Scenario::ThrottlingStorm
                | Scenario::SignalLeaderKill
                | Scenario::ActuatorKill
                | Scenario::ActuatorFrozen
                | Scenario::OutsideWriter
                | Scenario::EveryNodeAtOnce
                | Scenario::ToolHold
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            Scenario::OutOfService => "out-of-service taint",
            Scenario::Shutdown => "shutdown taint",
            Scenario::SpotNotice => "Spot PreemptScheduled (+repeats, +IMDS noise)",
            Scenario::Cordon => "cordon (must change nothing)",
            Scenario::RecreatedNode => "node recreated under the same name",
            Scenario::UpgradeWave => "upgrade wave",
            Scenario::ThrottlingStorm => "ARM throttling storm",
            Scenario::SignalLeaderKill => "signal-svc leader killed",
            Scenario::ActuatorKill => "actuator killed",
            Scenario::ActuatorFrozen => "actuator frozen mid-wave, then woken",
            Scenario::OutsideWriter => "outside writer resets an entry",
            Scenario::EveryNodeAtOnce => "every node tainted at once (guard holds)",
            Scenario::ToolHold => "tool hold across actuator restarts, released elsewhere",
            Scenario::KarpenterTermination => {
                "Karpenter termination (taint + exclude label, drain, Node deleted)"
            }
            Scenario::AutoscalerScaleDown => "cluster-autoscaler scale-down (taint, Node deleted)",
            Scenario::AbortedScaleDown => "aborted scale-down (autoscaler taint removed)",
            Scenario::DrainGate => "drain gate (drainers wait for the condition, then delete)",
        }
    }
}

/// How long any single wait may take before the scenario fails.
const WAIT: Duration = Duration::from_secs(90);

/// Plays one scenario. `wave` is the node count of the upgrade wave.
pub async fn play(sb: &mut Sandbox, scenario: Scenario, wave: usize) -> Outcome {
    let started = Instant::now();
    let since = jiff::Timestamp::now();
    let mut outcome = Outcome {
        name: scenario.name().to_string(),
        disrupted: scenario.disrupted(),
        ..Default::default()
    };
    let mut windows = Vec::new();
    let result = match scenario {
        Scenario::OutOfService => {
            taint_cycle(
                sb,
                &mut outcome,
                &mut windows,
                "userpool",
                OUT_OF_SERVICE,
                None,
                "NoExecute",
            )
            .await
        }
        Scenario::Shutdown => {
            taint_cycle(
                sb,
                &mut outcome,
                &mut windows,
                "userpool",
                SHUTDOWN,
                None,
                "NoSchedule",
            )
            .await
        }
        Scenario::SpotNotice => spot_notice(sb, &mut outcome, &mut windows).await,
        Scenario::Cordon => cordon(sb, &mut outcome).await,
        Scenario::RecreatedNode => recreated(sb, &mut outcome, &mut windows).await,
        Scenario::UpgradeWave => upgrade_wave(sb, &mut outcome, &mut windows, wave).await,
        Scenario::ThrottlingStorm => throttling_storm(sb, &mut outcome, &mut windows).await,
        Scenario::SignalLeaderKill => leader_kill(sb, &mut outcome, &mut windows).await,
        Scenario::ActuatorKill => actuator_kill(sb, &mut outcome, &mut windows).await,
        Scenario::ActuatorFrozen => actuator_frozen(sb, &mut outcome, &mut windows).await,
        Scenario::OutsideWriter => outside_writer(sb, &mut outcome, &mut windows).await,
        Scenario::EveryNodeAtOnce => every_node_at_once(sb, &mut outcome, &mut windows).await,
        Scenario::ToolHold => tool_hold(sb, &mut outcome, &mut windows).await,
        Scenario::KarpenterTermination => departures::karpenter_termination(sb, &mut outcome).await,
        Scenario::AutoscalerScaleDown => departures::autoscaler_scale_down(sb, &mut outcome).await,
        Scenario::AbortedScaleDown => {
            departures::aborted_scale_down(sb, &mut outcome, &mut windows).await
        }
        Scenario::DrainGate => departures::drain_gate(sb, &mut outcome).await,
    };
    if let Err(e) = result {
        outcome.problems.push(format!("{e:#}"));
    }
    sb.finish(&mut outcome, since, &windows);
    outcome.duration = started.elapsed();
    outcome
}

/// Taints `nodes`, waits for Down everywhere, records the cut latencies.
async fn cut(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    nodes: &[String],
    key: &str,
    value: Option<&str>,
    effect: &str,
) -> anyhow::Result<jiff::Timestamp> {
    let t0 = jiff::Timestamp::now();
    for n in nodes {
        sb.ops.taint(n, key, value, effect).await?;
        sb.down.insert(n.clone());
    }
    settle(sb, outcome, nodes, State::Down, t0).await?;
    Ok(t0)
}

/// Removes the taint from `nodes`, waits for None everywhere, records restore latencies.
async fn restore(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    nodes: &[String],
    key: &str,
) -> anyhow::Result<jiff::Timestamp> {
    let t0 = jiff::Timestamp::now();
    for n in nodes {
        sb.ops.untaint(n, key).await?;
        sb.down.remove(n);
    }
    settle(sb, outcome, nodes, State::None, t0).await?;
    Ok(t0)
}

/// Waits for `state` on every entry of `nodes` since `t0` and records the latencies (cut or
/// restore) and, for a handful of nodes, one detail line each.
async fn settle(
    sb: &Sandbox,
    outcome: &mut Outcome,
    nodes: &[String],
    state: State,
    t0: jiff::Timestamp,
) -> anyhow::Result<()> {
    let done = sb
        .wait_state(nodes, state, t0, WAIT)
        .await
        .map_err(anyhow::Error::msg)?;
    let (latencies, desired) = match state {
        State::Down => (&mut outcome.cut_ms, AdminState::Down),
        _ => (&mut outcome.restore_ms, AdminState::None),
    };
    latencies.extend(done.iter().map(|(_, d)| ms(*d)));
    if nodes.len() <= 4 {
        // The actuator reports effective after its own read-back, a little after ARM
        // completed the operation: give the report a moment before printing the line.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline
            && nodes.iter().any(|n| {
                sb.results
                    .first(n, desired, cutover_proto::v1::ResultPhase::Effective, t0)
                    .is_none()
            })
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for n in nodes {
            outcome.lines.push(sb.node_line(n, desired, t0));
        }
    }
    Ok(())
}

async fn taint_cycle(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
    pool: &str,
    key: &str,
    value: Option<&str>,
    effect: &str,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes(pool, 1)?;
    cut(sb, outcome, &nodes, key, value, effect).await?;
    windows.push(restore(sb, outcome, &nodes, key).await?);
    Ok(())
}

async fn spot_notice(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("spotpool", 2)?;
    let (node, noisy) = (nodes[0].clone(), nodes[1].clone());
    // Noise first: the same reason with an IMDS failure must change nothing.
    sb.ops.imds_failure_event(&noisy).await?;
    let t0 = jiff::Timestamp::now();
    let event = sb.ops.preempt_event(&node, 30).await?;
    sb.down.insert(node.clone());
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        sb.ops.repeat_event(&event).await?;
    }
    let done = sb
        .wait_state(std::slice::from_ref(&node), State::Down, t0, WAIT)
        .await
        .map_err(anyhow::Error::msg)?;
    outcome.cut_ms.extend(done.iter().map(|(_, d)| ms(*d)));
    outcome
        .lines
        .push(sb.node_line(&node, AdminState::Down, t0));
    let taints = sb.ops.taints(&node).await?;
    let ours: Vec<_> = taints.iter().filter(|t| t.key == SPOT_EVICTION).collect();
    match ours.as_slice() {
        [t] if t.value.as_deref() == Some("spot-eviction") && t.effect == "NoSchedule" => {
            outcome.lines.push(format!(
                "  {node}: taint {SPOT_EVICTION}=spot-eviction:NoSchedule added once"
            ))
        }
        other => outcome.problems.push(format!(
            "{node}: want one spot-eviction taint, found {other:?}"
        )),
    }
    if sb
        .ops
        .taints(&noisy)
        .await?
        .iter()
        .any(|t| t.key == SPOT_EVICTION)
    {
        outcome.problems.push(format!(
            "{noisy}: tainted from an `IMDS query failed` event"
        ));
    }
    // The operator takes the node back.
    windows.push(restore(sb, outcome, std::slice::from_ref(&node), SPOT_EVICTION).await?);
    Ok(())
}

async fn cordon(sb: &mut Sandbox, outcome: &mut Outcome) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    let t0 = jiff::Timestamp::now();
    sb.ops.cordon(&nodes[0], true).await?;
    outcome
        .problems
        .extend(sb.expect_no_change(t0, Duration::from_secs(3)).await);
    sb.ops.cordon(&nodes[0], false).await?;
    outcome.lines.push(format!(
        "  {}: cordoned for 3 s, no entry changed",
        nodes[0]
    ));
    Ok(())
}

async fn recreated(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    cut(sb, outcome, &nodes, OUT_OF_SERVICE, None, "NoExecute").await?;
    // The VM is reimaged: the Node object is deleted and registers again, untainted, with a
    // new UID. The old Down must not carry over.
    let t0 = jiff::Timestamp::now();
    let old_uid = sb
        .ops
        .node(&nodes[0])
        .await?
        .metadata
        .uid
        .unwrap_or_default();
    let new = sb.ops.recreate(&nodes[0]).await?;
    sb.down.remove(&nodes[0]);
    let new_uid = new.metadata.uid.unwrap_or_default();
    if new_uid == old_uid {
        outcome.problems.push("recreated node kept its UID".into());
    }
    let done = sb
        .wait_state(&nodes, State::None, t0, WAIT)
        .await
        .map_err(anyhow::Error::msg)?;
    outcome.restore_ms.extend(done.iter().map(|(_, d)| ms(*d)));
    outcome.lines.push(format!(
        "  {}: recreated (uid {old_uid} -> {new_uid}); entries back to None",
        nodes[0]
    ));
    windows.push(t0);
    Ok(())
}

async fn upgrade_wave(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
    wave: usize,
) -> anyhow::Result<()> {
    let spot = (wave / 4).min(sb.unused_count("spotpool"));
    let mut nodes = sb.fresh_nodes("spotpool", spot)?;
    nodes.extend(sb.fresh_nodes("userpool", wave - spot)?);
    // Nodes leave in quick succession, as a surge upgrade cordons and taints them.
    let (t0, last) = wave_step(sb, outcome, &nodes, State::Down).await?;
    outcome.lines.push(format!(
        "  {} nodes tainted over {:.1} s",
        nodes.len(),
        last.duration_since(t0).as_secs_f64()
    ));
    let (t1, _) = wave_step(sb, outcome, &nodes, State::None).await?;
    windows.push(t1);
    Ok(())
}

/// Taints (`Down`) or untaints (`None`) `nodes` ten at a time, 100 ms apart, waits for every
/// entry, and records each node's latency from its own signal. Returns when the step started
/// and when the last node was signalled.
async fn wave_step(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    nodes: &[String],
    state: State,
) -> anyhow::Result<(jiff::Timestamp, jiff::Timestamp)> {
    let t0 = jiff::Timestamp::now();
    let mut signalled_at = Vec::new();
    for chunk in nodes.chunks(10) {
        for n in chunk {
            if state == State::Down {
                sb.ops
                    .taint(n, OUT_OF_SERVICE, Some("upgrade"), "NoExecute")
                    .await?;
                sb.down.insert(n.clone());
            } else {
                sb.ops.untaint(n, OUT_OF_SERVICE).await?;
                sb.down.remove(n);
            }
            signalled_at.push((n.clone(), jiff::Timestamp::now()));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    sb.wait_state(nodes, state, t0, WAIT * 2)
        .await
        .map_err(anyhow::Error::msg)?;
    let log = crate::observe::changes(&sb.stack.arm);
    let latencies = if state == State::Down {
        &mut outcome.cut_ms
    } else {
        &mut outcome.restore_ms
    };
    for (n, at) in &signalled_at {
        let d = crate::judge::time_to_effective(&sb.stack.cluster, &log, n, state, *at)
            .ok_or_else(|| anyhow::anyhow!("{n}: no {state:?} after its signal"))?;
        latencies.push(ms(d));
    }
    if state == State::Down {
        let signals: Vec<f64> = signalled_at
            .iter()
            .map(|(_, at)| ms(at.duration_since(t0)))
            .collect();
        let tuning = &sb.stack.options.arm_tuning;
        outcome.ideal_cut_ms.extend(crate::wave::ideal_ms(
            &signals,
            tuning.latency_ms.put as f64,
            tuning.completion_delay_ms as f64,
        ));
    }
    let last = signalled_at.last().map_or(t0, |(_, t)| *t);
    Ok((t0, last))
}

async fn throttling_storm(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 3)?;
    let storm = Duration::from_secs(6);
    let t0 = jiff::Timestamp::now();
    sb.stack.arm.faults(arm_sim::faults::FaultSpec {
        throttle_for_ms: Some(storm.as_millis() as u64),
        ..Default::default()
    });
    cut(sb, outcome, &nodes, OUT_OF_SERVICE, None, "NoExecute").await?;
    let (reads, writes, throttled) = crate::observe::arm_calls(&sb.stack.arm, t0);
    outcome.lines.push(format!(
        "  during a {}-s 429 storm: {} ARM calls ({reads} reads, {writes} writes), {throttled} throttled",
        storm.as_secs(),
        reads + writes
    ));
    windows.push(restore(sb, outcome, &nodes, OUT_OF_SERVICE).await?);
    Ok(())
}

/// The signal-svc replica that holds the lease.
async fn leader(sb: &Sandbox) -> anyhow::Result<usize> {
    let client = crate::kube_ops::client(&sb.stack.kubeconfig).await?;
    let leases: kube::Api<Lease> = kube::Api::namespaced(client, "cutover");
    let lease = leases.get("cutover-signal-svc").await?;
    let holder = lease
        .spec
        .and_then(|s| s.holder_identity)
        .unwrap_or_default();
    sb.stack
        .signals
        .iter()
        .position(|s| s.name == holder)
        .ok_or_else(|| anyhow::anyhow!("lease held by unknown {holder:?}"))
}

async fn leader_kill(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let old = leader(sb).await?;
    let nodes = sb.fresh_nodes("userpool", 1)?;
    if let Some(p) = sb.stack.signals[old].proc.as_mut() {
        p.kill().await;
    }
    outcome.lines.push(format!(
        "  killed {} (SIGKILL); tainting {} right away",
        sb.stack.signals[old].name, nodes[0]
    ));
    cut(sb, outcome, &nodes, OUT_OF_SERVICE, None, "NoExecute").await?;
    let new = leader(sb).await?;
    outcome
        .lines
        .push(format!("  new leader {}", sb.stack.signals[new].name));
    if new == old {
        outcome
            .problems
            .push("the killed replica still holds the lease".into());
    }
    let run_dir = sb.stack.options.run_dir.clone();
    Stack::restart(&mut sb.stack.signals[old], &run_dir).await?;
    windows.push(restore(sb, outcome, &nodes, OUT_OF_SERVICE).await?);
    sb.stack.wait_ready(WAIT).await?;
    Ok(())
}

async fn actuator_kill(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 4)?;
    if let Some(p) = sb.stack.actuators[0].proc.as_mut() {
        p.kill().await;
    }
    outcome.lines.push(format!(
        "  killed {} (SIGKILL); it restarts after 3 s, as its pod would",
        sb.stack.actuators[0].name
    ));
    let t0 = jiff::Timestamp::now();
    for n in &nodes {
        sb.ops.taint(n, OUT_OF_SERVICE, None, "NoExecute").await?;
        sb.down.insert(n.clone());
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let run_dir = sb.stack.options.run_dir.clone();
    Stack::restart(&mut sb.stack.actuators[0], &run_dir).await?;
    let done = sb
        .wait_state(&nodes, State::Down, t0, WAIT)
        .await
        .map_err(anyhow::Error::msg)?;
    outcome.cut_ms.extend(done.iter().map(|(_, d)| ms(*d)));
    for n in &nodes {
        outcome.lines.push(sb.node_line(n, AdminState::Down, t0));
    }
    sb.stack.wait_ready(WAIT).await?;
    windows.push(restore(sb, outcome, &nodes, OUT_OF_SERVICE).await?);
    Ok(())
}

/// One actuator replica freezes (SIGSTOP: a hung node, a partition without RST) while a
/// 16-node wave is tainted; the load balancers it owned move to the live replicas and every
/// node is cut. Then it wakes up: it must write nothing stale.
async fn actuator_frozen(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let spot = sb.unused_count("spotpool").min(8);
    let mut nodes = sb.fresh_nodes("spotpool", spot)?;
    nodes.extend(sb.fresh_nodes("userpool", 16 - spot)?);
    let pid = sb.stack.actuators[0]
        .proc
        .as_ref()
        .and_then(|p| p.pid())
        .ok_or_else(|| anyhow::anyhow!("actuator-0 is not running"))?;
    let freeze = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        cutover_testkit::procs::signal_pid(pid, "STOP").await;
        jiff::Timestamp::now()
    };
    let (frozen_at, step) = tokio::join!(freeze, wave_step(sb, outcome, &nodes, State::Down));
    let (t0, _) = step?;
    let log = crate::observe::changes(&sb.stack.arm);
    let last = nodes
        .iter()
        .filter_map(|n| {
            crate::judge::time_to_effective(&sb.stack.cluster, &log, n, State::Down, t0)
        })
        .max()
        .unwrap_or_default();
    outcome.lines.push(format!(
        "  froze {} (SIGSTOP) {:.1} s into a {}-node wave; every node Down {:.1} s after the freeze",
        sb.stack.actuators[0].name,
        ms(frozen_at.duration_since(t0)) / 1000.0,
        nodes.len(),
        (ms(last) - ms(frozen_at.duration_since(t0))) / 1000.0,
    ));
    cutover_testkit::procs::signal_pid(pid, "CONT").await;
    let woke = jiff::Timestamp::now();
    windows.push(woke);
    // Woken with a lapsed assignment and stale views: nothing may change.
    outcome
        .problems
        .extend(sb.expect_no_change(woke, Duration::from_secs(5)).await);
    outcome.lines.push(format!(
        "  woke {} (SIGCONT): no entry changed in the next 5 s",
        sb.stack.actuators[0].name
    ));
    let (t1, _) = wave_step(sb, outcome, &nodes, State::None).await?;
    windows.push(t1);
    Ok(())
}

/// A wrong signal: every node of the cluster tainted at once. The blast-radius guard must
/// keep every pool at most half Down (the rest stay with their health probes), then
/// everything is restored.
async fn every_node_at_once(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    // Deleted nodes are gone from the API; their entries stay Down, counted below.
    let all = sb.live_nodes();
    for n in &all {
        sb.ops
            .taint(n, OUT_OF_SERVICE, Some("mistake"), "NoExecute")
            .await?;
    }
    // Settled: no change in the effective log for 3 s (bounded by WAIT).
    let deadline = Instant::now() + WAIT;
    let mut last = usize::MAX;
    let mut quiet = 0;
    while quiet < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let n = crate::observe::changes(&sb.stack.arm).len();
        quiet = if n == last { quiet + 1 } else { 0 };
        last = n;
    }
    let mut per_pool: std::collections::BTreeMap<(String, String), (usize, usize)> =
        Default::default();
    for e in crate::observe::entries(&sb.stack.arm, &sb.stack.cluster) {
        let slot = per_pool.entry((e.lb, e.pool)).or_default();
        slot.1 += 1;
        if e.state == State::Down {
            slot.0 += 1;
        }
    }
    let mut cut_any = false;
    for ((lb, pool), (down, total)) in &per_pool {
        cut_any |= *down > 0;
        if *down * 2 > *total {
            outcome.problems.push(format!(
                "{lb}/{pool}: {down} of {total} entries Down, more than half"
            ));
        }
        outcome
            .lines
            .push(format!("  {lb}/{pool}: {down} of {total} entries Down"));
    }
    if !cut_any {
        outcome
            .problems
            .push("the guard cut nothing at all (it should cut up to half)".into());
    }
    let t1 = jiff::Timestamp::now();
    // Last signalled first: the refused nodes go before any cut one frees room, so none of
    // them is cut on the way out (the guard would rightly let them in, then restore them).
    for n in all.iter().rev() {
        sb.ops.untaint(n, OUT_OF_SERVICE).await?;
    }
    windows.push(t1);
    // Nodes the guard refused never went Down, so "restored" means: nothing reads Down but
    // the entries of nodes deleted while Down.
    let kept: std::collections::HashSet<_> = sb
        .deleted_down
        .iter()
        .flat_map(|n| crate::judge::node_entries(&sb.stack.cluster, n))
        .collect();
    let deadline = Instant::now() + WAIT;
    loop {
        let down = crate::observe::entries(&sb.stack.arm, &sb.stack.cluster)
            .into_iter()
            .filter(|e| e.state == State::Down)
            .filter(|e| {
                !kept.contains(&(e.lb.clone(), e.pool.clone(), e.target.to_ascii_lowercase()))
            })
            .count();
        if down == 0 {
            break;
        }
        if Instant::now() > deadline {
            anyhow::bail!("{down} entries still Down {WAIT:?} after every taint was removed");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

async fn outside_writer(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    cut(sb, outcome, &nodes, OUT_OF_SERVICE, None, "NoExecute").await?;
    // Another writer (cloud-provider-azure's blind PUT from a stale cache) resets one entry.
    let (lb, pool, target) = crate::judge::node_entries(&sb.stack.cluster, &nodes[0])
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("node has no entries"))?;
    let t0 = jiff::Timestamp::now();
    sb.stack
        .arm
        .outside_write(&lb, &pool, &target, None)
        .map_err(|e| anyhow::anyhow!("outside write: {e:?}"))?;
    windows.push(t0);
    let t1 = loop {
        let log = crate::observe::changes(&sb.stack.arm);
        let repaired = log
            .iter()
            .filter(|c| c.time > t0 && c.lb == lb && c.pool == pool && c.state == State::Down)
            .find(|c| c.target.eq_ignore_ascii_case(&target));
        if let Some(c) = repaired {
            break c.time;
        }
        if jiff::Timestamp::now().duration_since(t0).as_secs_f64() > WAIT.as_secs_f64() {
            anyhow::bail!("entry {lb}/{pool} {target} was not repaired within {WAIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    windows.push(t1);
    outcome.lines.push(format!(
        "  reset {lb}/{pool} entry to None; repaired to Down after {:.1} s",
        t1.duration_since(t0).as_secs_f64()
    ));
    windows.push(restore(sb, outcome, &nodes, OUT_OF_SERVICE).await?);
    Ok(())
}

/// A tool client (mTLS with the tool certificate) to actuator replica `i`.
async fn tool_client(sb: &Sandbox, i: usize) -> anyhow::Result<ActuatorClient<Channel>> {
    let pki = &sb.stack.pki;
    let port = sb.stack.actuators[i]
        .grpc_port
        .ok_or_else(|| anyhow::anyhow!("actuator {i} has no gRPC port"))?;
    let tls = pki.tool_tls()?;
    let channel = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))?
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await?;
    Ok(ActuatorClient::new(channel))
}

/// `SetNodeAdminState` through replica `i`, waiting until the change is effective everywhere.
async fn tool_set(
    sb: &Sandbox,
    i: usize,
    node: &str,
    state: AdminState,
) -> anyhow::Result<NodeResult> {
    let resp = tool_client(sb, i)
        .await?
        .set_node_admin_state(SetNodeAdminStateRequest {
            node: Some(NodeRef {
                name: node.to_string(),
                ..NodeRef::default()
            }),
            admin_state: state as i32,
            reason: "sandbox: disk replacement".into(),
            wait: WaitFor::Effective as i32,
            wait_timeout: prost_types::Duration::try_from(WAIT).ok(),
        })
        .await?
        .into_inner();
    let r = resp.result.unwrap_or_default();
    if resp.timed_out || r.phase != ResultPhase::Effective as i32 {
        anyhow::bail!(
            "Set {state:?} through {} not effective (timed out: {}, result {r:?})",
            sb.stack.actuators[i].name,
            resp.timed_out
        );
    }
    Ok(r)
}

/// The held nodes replica `i` lists for `node`.
async fn listed(sb: &Sandbox, i: usize, node: &str) -> anyhow::Result<Vec<HeldNode>> {
    let list = tool_client(sb, i)
        .await?
        .list_held_entries(ListHeldEntriesRequest::default())
        .await?
        .into_inner();
    Ok(list
        .nodes
        .into_iter()
        .filter(|h| h.node.as_ref().is_some_and(|n| n.name == node))
        .collect())
}

/// A tool holds a node Down through one actuator replica; every replica restarts (a rollout of
/// the whole Deployment); another replica lists the hold, effective, while ARM keeps the node
/// Down; a third replica releases it. The hold lives on the Node, not in any replica.
async fn tool_hold(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let replicas = sb.stack.actuators.len();
    if replicas < 3 {
        anyhow::bail!("the scenario needs 3 actuator replicas, the stack has {replicas}");
    }
    let nodes = sb.fresh_nodes("userpool", 1)?;
    let node = nodes[0].clone();
    let t0 = jiff::Timestamp::now();
    sb.down.insert(node.clone());
    let r = tool_set(sb, 0, &node, AdminState::Down).await?;
    if r.reason.contains("memory only") {
        outcome
            .problems
            .push(format!("the hold was kept in memory only: {}", r.reason));
    }
    settle(sb, outcome, &nodes, State::Down, t0).await?;
    outcome.lines.push(format!(
        "  {node}: held Down through {} ({})",
        sb.stack.actuators[0].name, r.reason
    ));

    // The whole Deployment restarts: every replica dies, then comes back.
    for a in sb.stack.actuators.iter_mut() {
        if let Some(p) = a.proc.as_mut() {
            p.kill().await;
        }
    }
    let restarted = jiff::Timestamp::now();
    let run_dir = sb.stack.options.run_dir.clone();
    for a in sb.stack.actuators.iter_mut() {
        Stack::restart(a, &run_dir).await?;
    }
    sb.stack.wait_ready(WAIT).await?;
    let deadline = Instant::now() + WAIT;
    let held = loop {
        let held = listed(sb, 1, &node).await.unwrap_or_default();
        if held.iter().any(|h| h.effective) || Instant::now() > deadline {
            break held;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    match held.as_slice() {
        [h] if h.source == "hold" && h.effective && !h.requester.is_empty() => {
            outcome.lines.push(format!(
                "  every actuator restarted; {} lists it: source {}, by {}, reasons {:?}, effective",
                sb.stack.actuators[1].name, h.source, h.requester, h.reasons
            ))
        }
        other => outcome.problems.push(format!(
            "{} after the restart: want one effective hold for {node}, got {other:?}",
            sb.stack.actuators[1].name
        )),
    }
    // Nothing moved in ARM across the restarts: the node stayed Down all along.
    outcome
        .problems
        .extend(sb.expect_no_change(restarted, Duration::from_secs(2)).await);

    let t1 = jiff::Timestamp::now();
    sb.down.remove(&node);
    tool_set(sb, 2, &node, AdminState::None).await?;
    settle(sb, outcome, &nodes, State::None, t1).await?;
    windows.push(t1);
    let left = listed(sb, 0, &node).await?;
    if !left.is_empty() {
        outcome.problems.push(format!(
            "{} still lists {node} after the release: {left:?}",
            sb.stack.actuators[0].name
        ));
    }
    outcome.lines.push(format!(
        "  released through {}; {} lists nothing",
        sb.stack.actuators[2].name, sb.stack.actuators[0].name
    ));
    Ok(())
}
