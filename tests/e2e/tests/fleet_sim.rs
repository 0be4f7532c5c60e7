//! The fleet protocol under seeded faults (see `cutover_e2e::fleet_sim`): 1,000 seeds, each
//! 45 s of simulated time with about one fault a second, every invariant checked at every
//! tick. A failing seed prints the one command that replays it.

use cutover_e2e::fleet_sim::{replay_command, sweep};

#[test]
fn a_thousand_seeds_keep_one_writer_per_lb_versions_forward_and_settle() {
    let (failed, faults, max_overlap) = sweep(0, 1000);
    let report: Vec<String> = failed
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "seed {}: {:?}\n  replay: {}",
                r.seed,
                r.violations,
                replay_command(r.seed)
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "{} seeds failed:\n{}",
        failed.len(),
        report.join("\n")
    );
    assert_eq!(max_overlap, 0, "two writers at once");
    // Every fault kind was drawn (a sweep that injects nothing proves nothing).
    for kind in [
        "signal frozen",
        "actuator frozen",
        "lease outage, standby frozen",
        "partition (one-sided or both)",
        "slow stream",
        "signal crash and restart",
        "actuator crash and restart",
        "lease blip",
        "Lease deleted",
    ] {
        assert!(
            faults.get(kind).is_some_and(|n| *n > 100),
            "{kind}: {faults:?}"
        );
    }
}
