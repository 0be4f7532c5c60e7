//! A smoke run of `scale_bench` (240 nodes, a 40-node wave, a 20-s soak, fast ARM timings): every service
//! comes back ready after a restart and a SIGKILL, every process's memory is readable and
//! within the memory limit deploy/base gives its service, and the churn ends in the exact
//! state. Timings are printed, never asserted: this machine is shared.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::scale::{self, ScaleOptions};
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scale_bench_smoke_stays_within_deploy_limits_and_ends_exact() {
    let dir = std::env::temp_dir().join(format!("cutover-bench-smoke-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = ScaleOptions::new(240, Duration::from_secs(20), dir);
    o.sample_every = Duration::from_secs(5);
    o.realistic = false;
    o.wave = 40;
    let f = scale::run(&o).await.unwrap_or_else(|e| panic!("{e:#}"));
    println!("{}", scale::report(std::slice::from_ref(&f)));

    let services = ["actuator-0", "actuator-1", "signal-0", "signal-1"];
    for name in services {
        assert!(
            f.startup.iter().any(|(n, _)| n == name),
            "{name}: no start-up time"
        );
        let (_, mem) = f
            .after_soak
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("{name}: no memory figure"));
        let limit_kib = scale::deploy_limit(scale::service_of(name)).unwrap() >> 10;
        assert!(
            mem.rss_kib > 0 && mem.hwm_kib < limit_kib,
            "{name}: peak {} KiB, deploy limit {limit_kib} KiB",
            mem.hwm_kib
        );
        assert!(
            f.soak
                .series
                .get(name)
                .is_some_and(|s| s.samples.len() >= 2),
            "{name}: memory not sampled through the soak"
        );
    }
    assert!(
        f.resync.snapshot.is_some_and(|(_, n)| n > 0),
        "the restarted actuator never applied a snapshot: {:?}",
        f.resync
    );
    assert!(f.soak.rounds > 0 && f.soak.recreated > 0 && f.soak.faults > 0);
    assert!(f.soak.problems.is_empty(), "{:?}", f.soak.problems);
}
