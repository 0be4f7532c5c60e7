//! The chaos soak's CI smoke: `chaos_soak --smoke` (100 s, 12 nodes, fast ARM timings, API
//! latency up to 2 s, faults in the first 60 s) must end with no violation and an exact end state, having injected
//! faults and judged transitions (a run that did nothing would prove nothing). The rules
//! themselves are unit-tested to report flaps, late transitions, nodes left Down and
//! leadership flaps (`judge::chaos`), Node writes by a replica without the Lease
//! (`judge::leader`, each replica with its own token), two writers of one load balancer
//! (`judge::writer`, each write told apart by the replica its User-Agent names) and tool
//! answers that ARM did not hold (`judge::tool`).

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

/// The first number after the row's name in the printed table.
fn count(stdout: &str, row: &str) -> usize {
    stdout
        .lines()
        .filter_map(|l| l.strip_prefix(row))
        .filter(|rest| rest.starts_with("  "))
        .find_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no row {row:?}:\n{stdout}"))
}

#[test]
fn chaos_smoke_has_no_violations_and_an_exact_end_state() {
    let stdout = cutover_e2e::smoke::run(env!("CARGO_BIN_EXE_chaos_soak"), &["--seed", "1"])
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{stdout}");
    assert!(
        stdout.contains("verdict: no violations, end state exact"),
        "{stdout}"
    );
    assert_eq!(count(&stdout, "end state not exact"), 0, "{stdout}");
    assert!(
        count(&stdout, "all") >= 5,
        "too few faults injected:\n{stdout}"
    );
    assert!(
        count(&stdout, "cut (-> Down)") >= 5,
        "too few cuts:\n{stdout}"
    );
    assert!(
        count(&stdout, "restore (-> None)") >= 5,
        "too few restores:\n{stdout}"
    );
    // The leader-only rule judged both replicas' writes, told apart by their tokens.
    let judged = stdout
        .lines()
        .find_map(|l| l.strip_prefix("leader only: "))
        .unwrap_or_else(|| panic!("no leader-only line:\n{stdout}"));
    let numbers: Vec<usize> = judged
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert!(
        numbers.len() >= 3 && numbers[0] > 0 && numbers[1] > 0 && numbers[2] == 2,
        "leader-only rule judged too little: {judged}"
    );
    // The one-writer rule judged writes by named replicas against sampled ownership, and the
    // tool-answers rule judged the drain gate as a drain script polls it.
    let numbers = |prefix: &str| -> Vec<usize> {
        let line = stdout
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line:\n{stdout}"));
        line.split([' ', '(', ','])
            .filter_map(|w| w.parse().ok())
            .collect()
    };
    let writers = numbers("one writer: ");
    assert!(
        writers.len() >= 3 && writers[0] > 0 && writers[1] >= 1,
        "one-writer rule judged too little: {writers:?}\n{stdout}"
    );
    let tool = numbers("tool answers: ");
    assert!(
        tool.len() >= 2 && tool[0] > 0 && tool[1] > 0,
        "tool-answers rule judged too little: {tool:?}\n{stdout}"
    );
}
