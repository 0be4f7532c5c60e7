//! Whole-system tests: both simulators, two signal-svc and two or three actuator-svc processes, the
//! scenarios of the sandbox, asserted on the exact end state of every backend entry and on the
//! absence of flapping (each entry changes at most once per transition, read from the ARM
//! simulator's effective log). ARM timings are shortened so the suite stays quick; the
//! sandbox plays the same scenarios with realistic timings.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::judge::State;
use cutover_e2e::kube_ops::OUT_OF_SERVICE;
use cutover_e2e::sandbox::{Outcome, Sandbox};
use cutover_e2e::scenarios::{Scenario, play};
use cutover_e2e::stack::{KubeKind, Stack, StackOptions};
use std::time::Duration;

/// One whole system at a time: each starts four service processes on a 2-core machine.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A system on the real kube-apiserver.
async fn sandbox(preset: &str, nodes: usize, name: &str) -> Sandbox {
    sandbox_on(KubeKind::Real, preset, nodes, name).await
}

async fn sandbox_on(kube: KubeKind, preset: &str, nodes: usize, name: &str) -> Sandbox {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = StackOptions::fast(preset, nodes, dir);
    options.kube = kube;
    Sandbox::start(options)
        .await
        .unwrap_or_else(|e| panic!("start {preset}: {e:#}"))
}

fn assert_passed(outcomes: &[Outcome]) {
    let failed: Vec<String> = outcomes
        .iter()
        .filter(|o| !o.passed())
        .map(|o| format!("{}:\n  {}", o.name, o.problems.join("\n  ")))
        .collect();
    assert!(
        failed.is_empty(),
        "scenarios failed:\n{}",
        failed.join("\n")
    );
}

/// Three actuator replicas, each writing the load balancers the signal-svc leader assigns
/// it: a wave and a replica frozen (SIGSTOP) mid-wave end exact, no entry changes twice in one
/// transition, and the woken replica writes nothing (`Scenario::ActuatorFrozen` judges that);
/// a tool hold set through one replica survives a restart of all three and is released
/// through another (`Scenario::ToolHold`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_replicas_through_a_wave_and_a_frozen_replica() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("cutover-e2e-three-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = StackOptions::fast("aks", 48, dir);
    options.actuators = 3;
    let mut sb = Sandbox::start(options).await.unwrap();
    let outcomes = play_all(
        &mut sb,
        &[
            Scenario::UpgradeWave,
            Scenario::ActuatorFrozen,
            Scenario::ToolHold,
        ],
        20,
    )
    .await;
    sb.stack.stop().await;
    assert_passed(&outcomes);
}

async fn play_all(sb: &mut Sandbox, scenarios: &[Scenario], wave: usize) -> Vec<Outcome> {
    let mut out = Vec::new();
    for s in scenarios {
        out.push(play(sb, *s, wave).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nic_based_dual_stack_cluster_every_signal_ends_exact() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut sb = sandbox("aks", 48, "nic").await;
    let outcomes = play_all(
        &mut sb,
        &[
            Scenario::OutOfService,
            Scenario::Shutdown,
            Scenario::SpotNotice,
            Scenario::Cordon,
            Scenario::RecreatedNode,
            Scenario::UpgradeWave,
            Scenario::ThrottlingStorm,
            Scenario::OutsideWriter,
            // After the Spot node was taken back: a new leader must not taint it again.
            Scenario::SignalLeaderKill,
        ],
        20,
    )
    .await;
    sb.stack.stop().await;
    assert_passed(&outcomes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ip_based_pools_and_multiple_standard_lbs_end_exact() {
    let _serial = ONE_AT_A_TIME.lock().await;
    for preset in ["aks-ip", "aks-multi-slb"] {
        let mut sb = sandbox(preset, 16, preset).await;
        let outcomes = play_all(
            &mut sb,
            &[
                Scenario::OutOfService,
                Scenario::SpotNotice,
                Scenario::OutsideWriter,
            ],
            0,
        )
        .await;
        sb.stack.stop().await;
        assert_passed(&outcomes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_and_actuator_kills_lose_nothing() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let mut sb = sandbox("aks", 16, "kills").await;
    let outcomes = play_all(
        &mut sb,
        &[Scenario::SignalLeaderKill, Scenario::ActuatorKill],
        0,
    )
    .await;
    sb.stack.stop().await;
    assert_passed(&outcomes);
}

/// Kills both actuators right after ARM accepted the write and before the operation
/// completed, then the signal-svc leader in the middle of its next snapshot: once everything is
/// back, every entry must read exactly what the taints say, without flapping.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarts_at_the_worst_moments_converge_without_flapping() {
    let _serial = ONE_AT_A_TIME.lock().await;
    // kube-sim: the test drops every watch and compacts the history mid-way.
    let mut sb = sandbox_on(KubeKind::Sim, "aks", 16, "worst").await;
    // Slow operations widen the accepted-but-not-effective window.
    let mut tuning = sb.stack.arm.tuning();
    tuning.completion_delay_ms = 3000;
    sb.stack.arm.set_tuning(tuning);
    let since = jiff::Timestamp::now();
    let nodes = sb.fresh_nodes("userpool", 3).unwrap();
    let puts_before = put_count(&sb);
    for n in &nodes {
        sb.ops
            .taint(n, OUT_OF_SERVICE, None, "NoExecute")
            .await
            .unwrap();
        sb.down.insert(n.clone());
    }
    // Wait for the first accepted PUT, then kill every actuator before it completes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while put_count(&sb) == puts_before {
        assert!(std::time::Instant::now() < deadline, "no PUT reached ARM");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in sb.stack.actuators.iter_mut() {
        a.proc.as_mut().unwrap().kill().await;
    }
    let dir = sb.stack.options.run_dir.clone();
    for a in sb.stack.actuators.iter_mut() {
        Stack::restart(a, &dir).await.unwrap();
    }
    // The API server drops every watch and compacts its history (410 on resume).
    sb.stack.kube.sim().close_watches();
    sb.stack.kube.sim().compact();
    // A new leader has to snapshot everything to the restarted actuators: kill the leader, let
    // the standby take over, and kill it too shortly after it starts streaming.
    let more = sb.fresh_nodes("userpool", 3).unwrap();
    for n in &more {
        sb.ops
            .taint(n, OUT_OF_SERVICE, None, "NoExecute")
            .await
            .unwrap();
        sb.down.insert(n.clone());
    }
    for round in 0..2 {
        let Some(leader) = leader_index(&sb).await else {
            continue;
        };
        sb.stack.signals[leader].proc.as_mut().unwrap().kill().await;
        tokio::time::sleep(Duration::from_millis(if round == 0 { 200 } else { 50 })).await;
        Stack::restart(&mut sb.stack.signals[leader], &dir)
            .await
            .unwrap();
        // Let the other replica take the lease before the next kill.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while leader_index(&sb).await == Some(leader) && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    sb.stack.wait_ready(Duration::from_secs(60)).await.unwrap();
    let all: Vec<String> = nodes.iter().chain(&more).cloned().collect();
    sb.wait_state(&all, State::Down, since, Duration::from_secs(90))
        .await
        .unwrap();
    let mut outcome = Outcome {
        name: "worst moments".into(),
        ..Default::default()
    };
    sb.finish(&mut outcome, since, &[]);
    sb.stack.stop().await;
    assert_passed(&[outcome]);
}

fn put_count(sb: &Sandbox) -> usize {
    sb.stack
        .arm
        .requests()
        .iter()
        .filter(|r| r.method == "PUT" && (200..300).contains(&r.status))
        .count()
}

async fn leader_index(sb: &Sandbox) -> Option<usize> {
    let client = cutover_e2e::kube_ops::client(&sb.stack.kubeconfig)
        .await
        .ok()?;
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(client, "cutover");
    let holder = leases
        .get("cutover-signal-svc")
        .await
        .ok()?
        .spec?
        .holder_identity?;
    sb.stack.signals.iter().position(|s| s.name == holder)
}

/// How nodes leave today: Karpenter's termination and cluster-autoscaler's scale-down are cut
/// before the Node is deleted, and the deleted node's entries stay Down (cutover never restores
/// a deleted node); an aborted scale-down goes back to None without flapping; drainers that
/// wait on `LoadBalancerAdminStateDown=True` delete the Node only after ARM has every entry
/// Down, and the condition never reads True before ARM does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn departures_are_cut_before_the_node_goes_and_the_gate_waits_for_arm() {
    let _serial = ONE_AT_A_TIME.lock().await;
    let dir = std::env::temp_dir().join(format!("cutover-e2e-departures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut options = StackOptions::fast("aks", 16, dir);
    // A self-heal pass every second: the scenarios watch each deleted node for 2 s, so a
    // repair that would restore it (an entry Down for a node nobody asserts) shows up here.
    options.actuator_args = vec!["--self-heal-interval=1s".into()];
    let mut sb = Sandbox::start(options).await.unwrap();
    let outcomes = play_all(&mut sb, &Scenario::DEPARTURES, 0).await;
    sb.stack.stop().await;
    for o in &outcomes {
        eprintln!(
            "{} ({:.1} s, {} ARM reads, {} writes)",
            o.name,
            o.duration.as_secs_f64(),
            o.reads,
            o.writes
        );
        for line in &o.lines {
            eprintln!("{line}");
        }
    }
    assert_passed(&outcomes);
}
