//! A smoke run of `wave_bench --smoke` (60 nodes, waves of 1 and 20, 2 replicas, NRP's
//! Retry-After): it runs, prints a row per cell with its ratio, and every PUT it sent fits
//! ARM's 4 MB limit. Speed targets are read from the full grid, not asserted here.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

#[test]
fn wave_bench_smoke_prints_a_row_per_cell_and_every_put_fits() {
    let stdout = cutover_e2e::smoke::run(env!("CARGO_BIN_EXE_wave_bench"), &[])
        .unwrap_or_else(|e| panic!("{e}"));
    // Rows of the first table: "nodes op wave RA rep | ... | ... PUT max B".
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .take_while(|l| !l.is_empty())
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    for (row, wave) in rows.iter().zip(["1", "20"]) {
        assert_eq!(row[..3], ["60", "2", wave], "{stdout}");
        let ratio: f64 = row[9].parse().unwrap();
        assert!(ratio.is_finite() && ratio >= 0.9, "{stdout}");
        let largest: usize = row.last().unwrap().parse().unwrap();
        assert!(largest > 0 && largest <= 4 * 1024 * 1024, "{stdout}");
    }
    assert!(stdout.contains("worst p99 / ideal p99"), "{stdout}");
}
