//! The departures bench's CI smoke (issue 28 item 2): one flow through the whole system. An
//! operator's maintenance (out-of-service taint, drain, reboot, return) runs against the real
//! kube-apiserver, arm-sim and both services while a data plane (kernel-true where this machine
//! allows, else the user-space fallback) carries a load generator's connections. Timings are
//! scaled down (probe every 1 s, 5 s reboot); `departures_bench` runs every flow at full scale.
//!
//! - with cutover, the operator waits on the drain gate: no new connection fails, the flows the
//!   reboot breaks are those already on the node, and the node takes new flows again after it
//!   returns (admin `None` from arm-sim's effective log, then a fresh successful probe);
//! - without it (probe-only), the same maintenance fails new connections until the probe
//!   notices the reboot.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use arm_sim::model::AdminState;
use cutover_dataplane::model::{Departure, Mode, Policy};
use cutover_dataplane::params::Range;
use cutover_dataplane::report::CellResult;
use cutover_dataplane::sim::Scenario;
use cutover_e2e::departures::driver::Target;
use cutover_e2e::departures::script::{Flow, FlowTimings};
use cutover_e2e::departures::{self, Realisation, Setup};
use cutover_e2e::stack::{Stack, StackOptions};
use std::path::PathBuf;

fn count(r: &CellResult, kind: &str, cause: &str) -> u64 {
    r.by_cause
        .get(&(kind.to_string(), cause.to_string()))
        .copied()
        .unwrap_or(0)
}

fn scaled_setup() -> Setup {
    let mut sc = Scenario::new(Departure::Planned, Policy::Cluster, Mode::ProbeOnly);
    sc.members = 3;
    sc.lb.probe_interval = 1.0;
    sc.unknowns.probe_reaction_max = 0.5;
    sc.unknowns.admin_apply_lag_max = 0.5;
    sc.unknowns.flap_hold = 2.0;
    sc.clients.new_per_sec = 60.0;
    sc.clients.pool = 12;
    sc.clients.streams = 6;
    sc.clients.connect_timeout = 1.5;
    sc.clients.request_timeout = 2.0;
    let (realisation, why) = Realisation::pick(false);
    println!("realisation: {realisation:?} ({why})");
    Setup {
        scenario: sc,
        timings: FlowTimings {
            evict: Range::new(0.0, 0.5),
            pod_exit: 0.5,
            reboot: 5.0,
            settle: 6.0,
            gate_settle: 1.0,
            ..FlowTimings::default()
        },
        gate_budget: 30.0,
        realisation,
        helper_exe: PathBuf::from(env!("CARGO_BIN_EXE_departures_bench")),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_maintenance_through_the_whole_system_fails_no_new_connection_with_cutovers_gate() {
    cutover_dataplane::netns::remove_stale();
    let dir = std::env::temp_dir().join(format!("cutover-e2e-departures-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let stack = Stack::start(StackOptions::fast("aks-ip", 8, dir))
        .await
        .unwrap();
    let setup = scaled_setup();
    let wanted = [
        (Flow::ManualDrain, Policy::Cluster, Mode::Cutover, 11),
        (Flow::ManualDrain, Policy::Cluster, Mode::ProbeOnly, 12),
    ];
    let cells = departures::assign_nodes(&stack.cluster, &wanted).unwrap();
    let results = departures::run_all(&stack, &setup, &cells, 2, "s")
        .await
        .unwrap();
    let mut results = results.into_iter().map(|r| r.unwrap());
    let (cut, probe) = (results.next().unwrap(), results.next().unwrap());
    println!("cutover: {cut:?}\nprobe-only: {probe:?}");

    // cutover's admin state reached the data plane from arm-sim: the node's entry went Down,
    // then None when it returned, both written by cutover (not by an outside writer).
    let target = Target::of(&stack.cluster, &cells[0].node).unwrap();
    let changes: Vec<AdminState> = stack
        .arm
        .effective_log()
        .into_iter()
        .filter(|e| {
            e.target.as_deref() == Some(target.entry.as_str())
                && e.lb == target.lb
                && e.pool == target.pool
        })
        .inspect(|e| assert_ne!(e.op_id, "outside-writer", "{e:?}"))
        .map(|e| e.value)
        .collect();
    assert_eq!(changes, vec![AdminState::Down, AdminState::None]);

    // With the gate, the reboot comes after Down is effective: no new connection fails ...
    assert!(cut.new_attempts > 500, "{cut:?}");
    assert_eq!(cut.failed_new + cut.failed_reconnect, 0, "{cut:?}");
    // ... the flows it breaks were on the node before the signal, and nothing else broke ...
    assert_eq!(
        count(&cut, "pool", "other") + count(&cut, "stream", "other"),
        0,
        "{cut:?}"
    );
    // ... and the node serves new flows again after its return.
    assert_eq!(cut.return_runs, 1, "no new flow after the return: {cut:?}");

    // Without cutover the same maintenance fails new connections for the probe window, all
    // of them at the rebooting VM.
    assert!(probe.failed_new > 0, "{probe:?}");
    assert_eq!(
        count(&probe, "new", "vm_dead"),
        probe.failed_new,
        "{probe:?}"
    );
    let mut stack = stack;
    stack.stop().await;
}
