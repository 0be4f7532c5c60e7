//! The whole-service simulation's CI smoke: seeds of signal-svc, actuator-svc, kube-sim and
//! arm-sim on turmoil's network and clock, each judged by every rule (tests/dst/src/judge.rs).
//! `DST_SEEDS` sets how many (the bench binary `dst` runs more); a failing seed prints the
//! command that replays it.

use cutover_dst::report::{self, Summary};
use cutover_dst::run::Options;
use std::time::Instant;

#[test]
fn seeds_of_the_whole_services_keep_every_invariant() {
    let seeds: u64 = std::env::var("DST_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(8);
    let options = Options::default();
    let mut summary = Summary::default();
    let t0 = Instant::now();
    for seed in 0..seeds {
        let r = report::seed(seed, &options).expect("the simulation runs");
        for v in &r.violations {
            eprintln!("seed {seed}: {v}");
        }
        assert!(r.transitions > 0, "seed {seed}: no transition was judged");
        summary.add(&r);
    }
    summary.wall = t0.elapsed();
    eprint!("{}", summary.render());
    assert!(
        summary.failing.is_empty(),
        "failing seeds {:?}; replay: {}",
        summary.failing,
        report::replay(summary.failing[0])
    );
}
