//! The kernel path, one short run per behaviour (timings scaled down: probe every 1 s), when this
//! machine allows network namespaces and nftables; skipped with the reason otherwise.
//! - cutover: once `Down` is effective no new connection reaches the leaving node, and the
//!   established flows on it persist until the VM goes;
//! - probe-only, a VM that dies silently: new connections fail for about the probe window.

#![allow(clippy::unwrap_used)]

use cutover_dataplane::controller::Feed;
use cutover_dataplane::kernel::run_kernel_cell;
use cutover_dataplane::model::{Departure, Mode, Policy};
use cutover_dataplane::netns;
use cutover_dataplane::params::Range;
use cutover_dataplane::report::CellResult;
use cutover_dataplane::sim::Scenario;
use std::path::Path;

fn scaled(dep: Departure, mode: Mode) -> Scenario {
    let mut sc = Scenario::new(dep, Policy::Cluster, mode);
    sc.members = 3;
    sc.lb.probe_interval = 1.0;
    sc.unknowns.probe_reaction_max = 0.5;
    sc.unknowns.admin_apply_lag_max = 0.5;
    sc.unknowns.flap_hold = 2.0;
    sc.timings.arm_operation = Range::fixed(1.0);
    sc.timings.planned_lead = Range::fixed(5.0);
    sc.clients.new_per_sec = 60.0;
    sc.clients.pool = 12;
    sc.clients.pool_request_every = 0.2;
    sc.clients.streams = 6;
    sc.clients.connect_timeout = 1.5;
    sc.clients.request_timeout = 2.0;
    sc
}

fn count(r: &CellResult, kind: &str, cause: &str) -> u64 {
    r.by_cause
        .get(&(kind.to_string(), cause.to_string()))
        .copied()
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kernel_smoke_cutover_keeps_established_and_probe_only_fails_for_the_probe_window() {
    if let Err(why) = netns::kernel_available() {
        println!("SKIPPED: kernel realisation unavailable on this machine: {why}");
        return;
    }
    netns::remove_stale();
    let exe = Path::new(env!("CARGO_BIN_EXE_dataplane_bench"));
    let cut = scaled(Departure::Planned, Mode::Cutover);
    let probe = scaled(Departure::SilentDeath, Mode::ProbeOnly);
    let (a, b) = tokio::join!(
        run_kernel_cell(&cut, 7, exe, "smoke-cut", Feed::Drawn),
        run_kernel_cell(&probe, 7, exe, "smoke-probe", Feed::Drawn),
    );
    let (cut_r, probe_r) = (a.unwrap(), b.unwrap());
    println!("cutover: {cut_r:?}\nprobe-only: {probe_r:?}");

    // cutover: Down effective by 0.2 + 1 + 0.5 s; the VM goes at 5 s.
    assert_eq!(
        cut_r.failed_new, 0,
        "no new connection may fail with Down before death"
    );
    let last = cut_r.last_new_on_node.unwrap_or(0.0);
    assert!(
        last <= 3.0,
        "a new flow reached the node at {last:.1} s, after Down"
    );
    // Flows pinned to the node lived from Down to the VM's death, and broke only then.
    assert!(
        count(&cut_r, "pool", "vm_dead") + count(&cut_r, "stream", "vm_dead") > 0,
        "{cut_r:?}"
    );
    assert_eq!(
        count(&cut_r, "pool", "other") + count(&cut_r, "stream", "other"),
        0,
        "{cut_r:?}"
    );

    // probe-only: TCP probe 1 s x 2: down (2, 3] s + R [0, 0.5] after death; at 60/s over 3
    // members about 20/s x 2.75 s = 55 failed connects.
    let f = probe_r.failed_new;
    assert!(
        (25..=110).contains(&f),
        "failed new connections {f}, expected about 55"
    );
    assert_eq!(count(&probe_r, "new", "vm_dead"), f, "{probe_r:?}");
    let last = probe_r.last_new_on_node.unwrap_or(0.0);
    assert!(
        (1.8..=4.0).contains(&last),
        "last new flow on the dead node at {last:.1} s"
    );
    assert!(
        netns_left().is_empty(),
        "namespaces left: {:?}",
        netns_left()
    );
}

fn netns_left() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    let me = format!("cdp-{}-smoke", std::process::id());
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with(&me))
        .map(str::to_string)
        .collect()
}

/// The user-space fallback obeys the same rules (runs everywhere: loopback only).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn userspace_smoke_same_rules() {
    use cutover_dataplane::userspace::run_userspace_cell;
    let exe = Path::new(env!("CARGO_BIN_EXE_dataplane_bench"));
    let cut = scaled(Departure::Planned, Mode::Cutover);
    let probe = scaled(Departure::SilentDeath, Mode::ProbeOnly);
    let (a, b) = tokio::join!(
        run_userspace_cell(&cut, 7, exe, Feed::Drawn),
        run_userspace_cell(&probe, 7, exe, Feed::Drawn)
    );
    let (cut_r, probe_r) = (a.unwrap(), b.unwrap());
    println!("userspace cutover: {cut_r:?}\nuserspace probe-only: {probe_r:?}");
    assert_eq!(cut_r.failed_new, 0, "{cut_r:?}");
    assert!(cut_r.last_new_on_node.unwrap_or(0.0) <= 3.0, "{cut_r:?}");
    assert!(
        count(&cut_r, "pool", "vm_dead") + count(&cut_r, "stream", "vm_dead") > 0,
        "{cut_r:?}"
    );
    assert_eq!(
        count(&cut_r, "pool", "other") + count(&cut_r, "stream", "other"),
        0,
        "{cut_r:?}"
    );
    let f = probe_r.failed_new;
    assert!(
        (25..=110).contains(&f),
        "failed new connections {f}, expected about 55"
    );
    assert_eq!(count(&probe_r, "new", "vm_dead"), f, "{probe_r:?}");
}
