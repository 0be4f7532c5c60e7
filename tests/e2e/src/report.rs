//! The sandbox's output: per-scenario detail and the summary table.

use crate::sandbox::Outcome;

/// The `p`-th percentile (0-100) of `values` by nearest rank; `None` when empty.
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied()
}

/// Milliseconds as seconds with two decimals (`-` for none).
pub fn secs(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |ms| format!("{:.2}", ms / 1000.0))
}

/// Measured cut p99 over the ideal single writer's p99 for the same signals ("-" without one).
fn ratio(cut: &[f64], ideal: &[f64]) -> String {
    match (percentile(cut, 99.0), percentile(ideal, 99.0)) {
        (Some(c), Some(i)) if i > 0.0 => format!("{:.2}", c / i),
        _ => "-".into(),
    }
}

/// Probe window cutover races against: two failed probes five seconds apart.
pub const PROBE_WINDOW_MS: f64 = 10_000.0;

/// The summary table over all outcomes, with a verdict line.
pub fn summary(preset: &str, outcomes: &[Outcome]) -> String {
    let mut rows = Vec::new();
    for o in outcomes {
        rows.push(vec![
            o.name.clone(),
            if o.passed() {
                "ok".into()
            } else {
                "FAILED".into()
            },
            o.cut_ms.len().to_string(),
            secs(percentile(&o.cut_ms, 50.0)),
            secs(percentile(&o.cut_ms, 99.0)),
            secs(percentile(&o.ideal_cut_ms, 99.0)),
            ratio(&o.cut_ms, &o.ideal_cut_ms),
            secs(percentile(&o.restore_ms, 50.0)),
            secs(percentile(&o.restore_ms, 99.0)),
            o.reads.to_string(),
            o.writes.to_string(),
            o.throttled.to_string(),
            format!("{:.1}", o.duration.as_secs_f64()),
        ]);
    }
    let all_cut: Vec<f64> = outcomes.iter().flat_map(|o| o.cut_ms.clone()).collect();
    let all_restore: Vec<f64> = outcomes.iter().flat_map(|o| o.restore_ms.clone()).collect();
    let reads: usize = outcomes.iter().map(|o| o.reads).sum();
    let writes: usize = outcomes.iter().map(|o| o.writes).sum();
    let throttled: usize = outcomes.iter().map(|o| o.throttled).sum();
    let exact = outcomes.iter().all(Outcome::passed);
    rows.push(vec![
        "all".into(),
        if exact { "ok".into() } else { "FAILED".into() },
        all_cut.len().to_string(),
        secs(percentile(&all_cut, 50.0)),
        secs(percentile(&all_cut, 99.0)),
        "-".into(),
        "-".into(),
        secs(percentile(&all_restore, 50.0)),
        secs(percentile(&all_restore, 99.0)),
        reads.to_string(),
        writes.to_string(),
        throttled.to_string(),
        format!(
            "{:.1}",
            outcomes
                .iter()
                .map(|o| o.duration.as_secs_f64())
                .sum::<f64>()
        ),
    ]);
    let table = table(
        &[
            "scenario",
            "result",
            "cuts",
            "cut p50 s",
            "cut p99 s",
            "ideal p99 s",
            "ratio",
            "restore p50 s",
            "restore p99 s",
            "ARM reads",
            "ARM writes",
            "429s",
            "took s",
        ],
        &rows,
    );
    let calm: Vec<f64> = outcomes
        .iter()
        .filter(|o| !o.disrupted)
        .flat_map(|o| o.cut_ms.clone())
        .collect();
    let disrupted: Vec<f64> = outcomes
        .iter()
        .filter(|o| o.disrupted)
        .flat_map(|o| o.cut_ms.clone())
        .collect();
    let p50 = percentile(&calm, 50.0);
    let p99 = percentile(&calm, 99.0);
    let verdict = match p99 {
        Some(p) if p < PROBE_WINDOW_MS => format!(
            "taint -> effective (no faults): p50 {} s, p99 {:.2} s, inside the {:.0} s probe window ({:.0}% of it)",
            secs(p50),
            p / 1000.0,
            PROBE_WINDOW_MS / 1000.0,
            100.0 * p / PROBE_WINDOW_MS
        ),
        Some(p) => format!(
            "taint -> effective (no faults): p50 {} s, p99 {:.2} s, OUTSIDE the {:.0} s probe window",
            secs(p50),
            p / 1000.0,
            PROBE_WINDOW_MS / 1000.0
        ),
        None => "no cut measured".to_string(),
    };
    let faults = match (percentile(&disrupted, 50.0), percentile(&disrupted, 99.0)) {
        (Some(a), Some(b)) => format!(
            "taint -> effective under faults and kills: p50 {} s, p99 {} s\n",
            secs(Some(a)),
            secs(Some(b))
        ),
        _ => String::new(),
    };
    format!(
        "Summary ({preset}):\n{table}{verdict}\n{faults}end state exact in every scenario: {}\n",
        if exact { "yes" } else { "NO" }
    )
}

/// A plain-text table: the first column left-aligned, the rest right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.len());
        }
    }
    let fmt = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (c, w))| {
                if i == 0 {
                    format!("{c:<w$}")
                } else {
                    format!("{c:>w$}")
                }
            })
            .collect::<Vec<_>>()
            .join("  ")
    };
    let mut out = fmt(headers.to_vec());
    out.push('\n');
    out.push_str(&"-".repeat(out.len() - 1));
    out.push('\n');
    for row in rows {
        out.push_str(&fmt(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(50.0));
        assert_eq!(percentile(&v, 99.0), Some(99.0));
        assert_eq!(percentile(&[7.0], 99.0), Some(7.0));
        assert_eq!(percentile(&[], 50.0), None);
    }

    #[test]
    fn summary_flags_failures_and_the_probe_window() {
        let good = Outcome {
            name: "a".into(),
            cut_ms: vec![2000.0, 3000.0],
            duration: Duration::from_secs(4),
            ..Default::default()
        };
        let text = summary("aks", std::slice::from_ref(&good));
        assert!(text.contains("inside the 10 s probe window"), "{text}");
        assert!(text.contains("end state exact in every scenario: yes"));
        let bad = Outcome {
            name: "b".into(),
            disrupted: false,
            problems: vec!["x".into()],
            cut_ms: vec![12_000.0],
            ..Default::default()
        };
        let text = summary("aks", &[good, bad]);
        assert!(text.contains("FAILED"));
        assert!(text.contains("OUTSIDE"));
        assert!(text.contains("end state exact in every scenario: NO"));
    }
}
