//! A short run of every fuzz target with the coverage-less driver (seconds in all), so the
//! suite catches a parser that panics on mutated real input. Longer runs: tests/fuzz/run.sh.

use cutover_fuzz::{TARGETS, driver, seeds};
use std::time::Duration;

#[test]
fn every_target_survives_a_short_random_run() {
    // Seeded by the clock so each run explores other inputs; a crash prints the seed and input.
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut failures = Vec::new();
    for (name, target) in TARGETS {
        let seeds = seeds::seeds(name);
        assert!(!seeds.is_empty(), "{name} has no seeds");
        let report = driver::run(*target, &seeds, Duration::from_secs(2), 100_000, seed);
        eprintln!("{name}: {} executions", report.executions);
        if let Some(input) = report.crash {
            failures.push(format!(
                "{name} (seed {seed}) panicked on {:?}",
                String::from_utf8_lossy(&input)
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn every_target_has_a_name_the_fuzzer_can_select() {
    for (name, _) in TARGETS {
        assert!(cutover_fuzz::target(name).is_some());
    }
    assert!(cutover_fuzz::target("nope").is_none());
}
