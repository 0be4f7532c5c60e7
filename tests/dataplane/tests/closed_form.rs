//! The simulator against the contract's analytic anchor (section 5): probe-only, TCP probe
//! 5 s x 2, a VM that dies silently, uniform load: failed new connections within 15 % of
//! λ/N × (mean W + mean R).

use cutover_dataplane::model::{Departure, Mode, Policy, closed_form_probe_only};
use cutover_dataplane::sim::{Scenario, run_cell_mean};

#[test]
fn probe_only_silent_death_matches_the_closed_form_within_15_percent() {
    let mut sc = Scenario::new(Departure::SilentDeath, Policy::Cluster, Mode::ProbeOnly);
    sc.members = 10;
    sc.clients.new_per_sec = 1000.0;
    sc.clients.pool = 0;
    sc.clients.streams = 0;
    let seeds = 100;
    let r = run_cell_mean(&sc, seeds);
    let expected = closed_form_probe_only(1000.0, 10, &sc.lb, &sc.unknowns);
    let got = r.mean_failed_new();
    println!("closed form {expected:.1}, simulated mean over {seeds} seeds {got:.1}");
    assert!(
        (got - expected).abs() <= 0.15 * expected,
        "simulated {got:.1} vs closed form {expected:.1}"
    );
    // Every failure is a SYN to the dead VM.
    assert_eq!(
        r.failed_new,
        r.by_cause[&("new".to_string(), "vm_dead".to_string())]
    );
}

#[test]
fn cutover_before_death_fails_no_new_connection() {
    let mut sc = Scenario::new(Departure::Planned, Policy::Cluster, Mode::Cutover);
    sc.clients.pool = 0;
    sc.clients.streams = 0;
    let r = run_cell_mean(&sc, 50);
    assert_eq!(r.failed_new, 0, "{r:?}");
    // The last new flow on the node is before Down is effective everywhere (≤ 20.2 + 5 s).
    assert!(r.last_new_on_node.unwrap_or(0.0) <= 25.2, "{r:?}");
}

#[test]
fn spot_5s_notice_beats_no_arm_operation_so_cutover_equals_probe_only_on_average() {
    let mk = |mode| {
        let mut sc = Scenario::new(Departure::Spot { notice: 5.0 }, Policy::Cluster, mode);
        sc.clients.pool = 0;
        sc.clients.streams = 0;
        run_cell_mean(&sc, 100).mean_failed_new()
    };
    let probe = mk(Mode::ProbeOnly);
    let cut = mk(Mode::Cutover);
    // With a 10-20 s operation the Down lands after the VM is gone: it can only shorten the
    // probe's window, never lengthen it.
    assert!(
        cut <= probe * 1.05 && cut > 0.0,
        "cutover {cut} probe {probe}"
    );
}
