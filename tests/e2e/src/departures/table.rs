//! The table `departures_bench` prints: per flow, traffic policy and mode, what clients felt.

use cutover_dataplane::report::Row;
use std::fmt::Write as _;

pub fn render(rows: &[Row], realisation: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "realisation: {realisation}");
    let _ = writeln!(
        s,
        "| departure | eTP | mode | failed new conns (steady / +reconnects) | broken established (pool / streams) | signal -> last new flow on node (mean / max) | return -> first new flow | runs |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let c = &r.result;
        let back = match (c.mean_return_to_first_new(), c.return_without_new) {
            (Some(m), 0) => format!("{m:.1} s"),
            (Some(m), k) => format!("{m:.1} s ({k} runs none)"),
            (None, 0) => "-".to_string(),
            (None, _) => "none".to_string(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} / {:.1} | {:.1} ({:.1} / {:.1}) | {:.1} s / {:.1} s | {} | {} |",
            r.departure,
            r.policy,
            r.mode,
            c.mean_failed_new(),
            c.mean_failed_connects(),
            c.mean_broken(),
            c.per_run(c.broken_pool),
            c.per_run(c.broken_stream),
            c.mean_last_new(),
            c.last_new_on_node.unwrap_or(0.0),
            back,
            c.runs,
        );
    }
    s
}
