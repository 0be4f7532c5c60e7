//! A smoke run of `scale_bench --smoke` (60 nodes, a 20-node wave, fast ARM timings, a 15-s
//! soak): the bench runs to the end and prints its table with every process. No figure is
//! asserted (this machine is shared); the full sweep is a release-build bench.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[test]
fn scale_bench_smoke_runs_and_prints_its_table() {
    let stdout = cutover_e2e::smoke::run(env!("CARGO_BIN_EXE_scale_bench"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    println!("{stdout}");
    let table: Vec<&str> = stdout.lines().collect();
    assert!(
        table.first().is_some_and(|l| l.contains("nodes")
            && l.contains("wave MiB")
            && l.contains("soak MiB")),
        "no table header:\n{stdout}"
    );
    for process in [
        "actuator-0",
        "actuator-1",
        "signal-0",
        "signal-1",
        "simulators",
    ] {
        assert!(
            table
                .iter()
                .any(|l| l.split_whitespace().take(2).eq(["60", process])),
            "no row for {process}:\n{stdout}"
        );
    }
    assert!(stdout.contains("resync of actuator-0"), "{stdout}");
    assert!(stdout.contains("soak at 60 nodes"), "{stdout}");
    assert!(
        stdout.contains("deploy/base limit actuator-svc"),
        "{stdout}"
    );
}
