//! Waves of nodes leaving together, measured against the ideal.
//!
//! The ideal (`design.md` section 8) is one writer per load balancer that sends the next
//! coalesced write the instant the previous operation ends: a node signalled while its LB is
//! idle is cut after one PUT and one operation; a node signalled while an operation runs waits
//! for it and then one more. [`ideal_ms`] replays the actual signal times through that model
//! (pure), so every measured wave is judged against what its own arrival pattern allowed.

use crate::judge::{self, State};
use crate::kube_ops::OUT_OF_SERVICE;
use crate::report::percentile;
use crate::sandbox::{Sandbox, ms};
use std::collections::BTreeMap;
use std::time::Duration;

/// Per-node latency (ms) of the ideal single writer for signals at `signals` (ms, any order),
/// with a PUT taking `put_ms` and its operation `op_ms`. Every LB runs the same schedule in
/// parallel, so one LB stands for all.
pub fn ideal_ms(signals: &[f64], put_ms: f64, op_ms: f64) -> Vec<f64> {
    ideal_with(signals, |_| put_ms + op_ms)
}

/// Like [`ideal_ms`], each write of a load balancer taking as long as the simulator's
/// operations on that LB really took, in order (`writes_ms`: from a write's arrival to its
/// operation's end, oldest first; the last repeats if the ideal writes more often). With
/// operation lengths drawn from a distribution the ideal meets the same lengths the measured
/// writers did. A node is effective when its slowest LB is, so its ideal is the largest.
pub fn ideal_from_ops_ms(signals: &[f64], writes_ms: &BTreeMap<String, Vec<f64>>) -> Vec<f64> {
    let mut out = vec![0.0_f64; signals.len()];
    for lengths in writes_ms.values().filter(|l| !l.is_empty()) {
        let per_lb = ideal_with(signals, |k| lengths[k.min(lengths.len() - 1)]);
        for (o, v) in out.iter_mut().zip(per_lb) {
            *o = o.max(v);
        }
    }
    out
}

/// The ideal single writer with its `k`-th write taking `write_ms(k)`.
fn ideal_with(signals: &[f64], write_ms: impl Fn(usize) -> f64) -> Vec<f64> {
    let mut order: Vec<usize> = (0..signals.len()).collect();
    order.sort_by(|a, b| signals[*a].total_cmp(&signals[*b]));
    let mut out = vec![0.0; signals.len()];
    let mut free_at = f64::NEG_INFINITY;
    let mut i = 0;
    let mut k = 0;
    while i < order.len() {
        // The write starts when the writer is free and something is waiting; it carries every
        // signal that arrived by then.
        let start = free_at.max(signals[order[i]]);
        let done = start + write_ms(k);
        k += 1;
        while i < order.len() && signals[order[i]] <= start {
            out[order[i]] = done - signals[order[i]];
            i += 1;
        }
        free_at = done;
    }
    out
}

/// Where a wave's time went beyond the ideal, per load balancer, from ARM's own logs.
///
/// `lead_ms`: from the first signal to the first PUT's arrival at ARM (the signal path, plus
/// a read before the write if the writer had no usable base). `react_ms`: from an operation's
/// end to the arrival of the next PUT on the same LB (seeing the end, planning, building the
/// body). The ideal writer has both at zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Overhead {
    pub lead_ms: Vec<f64>,
    pub react_ms: Vec<f64>,
}

/// [`Overhead`] from the first signal (ms), each LB's accepted PUTs (arrival ms) and each LB's
/// operation ends (ms), all on one clock. A PUT pairs with the last operation that ended before
/// it; a PUT that starts while nothing ended yet is the LB's lead.
pub fn overhead(
    first_signal: f64,
    puts: &BTreeMap<String, Vec<f64>>,
    op_ends: &BTreeMap<String, Vec<f64>>,
) -> Overhead {
    let mut out = Overhead::default();
    for (lb, puts) in puts {
        let mut puts = puts.clone();
        puts.sort_by(f64::total_cmp);
        let mut ends = op_ends.get(lb).cloned().unwrap_or_default();
        ends.sort_by(f64::total_cmp);
        let mut used = 0;
        for (k, put) in puts.iter().enumerate() {
            if k == 0 {
                out.lead_ms.push(put - first_signal);
                continue;
            }
            // The operation of the previous PUT: its end is the newest one before this PUT.
            let before = ends.iter().rposition(|e| e <= put);
            if let Some(i) = before.filter(|i| *i >= used) {
                out.react_ms.push(put - ends[i]);
                used = i + 1;
            }
        }
    }
    out
}

/// What one wave direction measured.
#[derive(Debug, Clone, Default)]
pub struct WaveFigures {
    pub nodes: usize,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub ideal_p99_ms: f64,
    /// PUTs per load balancer (the most any LB got).
    pub puts_per_lb: usize,
    /// Writes refused because another operation held the LB.
    pub lock_conflicts: usize,
    pub reads: usize,
    /// Each node's time to effective and its ideal (ms), for merging repeated runs.
    pub latencies_ms: Vec<f64>,
    pub ideals_ms: Vec<f64>,
    /// The largest PUT body ARM received (bytes; its limit is 4 MB).
    pub largest_put: usize,
    /// CPU time during the wave (ms): the bench process, which runs arm-sim, kube-sim and the
    /// harness; and the services' processes together. A simulator that needs a core of its
    /// own would be measured instead of cutover.
    pub sim_cpu_ms: f64,
    pub services_cpu_ms: f64,
    pub overhead: Overhead,
}

impl WaveFigures {
    /// Several runs as one: percentiles over every node of every run, sums of counts and CPU,
    /// the most PUTs per LB of any run, every lead and reaction.
    pub fn merge(runs: &[WaveFigures]) -> WaveFigures {
        let mut m = WaveFigures::default();
        for r in runs {
            m.nodes += r.nodes;
            m.puts_per_lb = m.puts_per_lb.max(r.puts_per_lb);
            m.lock_conflicts += r.lock_conflicts;
            m.reads += r.reads;
            m.latencies_ms.extend(&r.latencies_ms);
            m.ideals_ms.extend(&r.ideals_ms);
            m.largest_put = m.largest_put.max(r.largest_put);
            m.sim_cpu_ms += r.sim_cpu_ms;
            m.services_cpu_ms += r.services_cpu_ms;
            m.overhead.lead_ms.extend(&r.overhead.lead_ms);
            m.overhead.react_ms.extend(&r.overhead.react_ms);
        }
        m.p50_ms = percentile(&m.latencies_ms, 50.0).unwrap_or(f64::NAN);
        m.p99_ms = percentile(&m.latencies_ms, 99.0).unwrap_or(f64::NAN);
        m.ideal_p99_ms = percentile(&m.ideals_ms, 99.0).unwrap_or(f64::NAN);
        m
    }

    pub fn ratio(&self) -> f64 {
        if self.ideal_p99_ms > 0.0 {
            self.p99_ms / self.ideal_p99_ms
        } else {
            f64::NAN
        }
    }
}

/// CPU time (user + system, ms) a process used so far, from `/proc/<pid>/stat` (`self` for
/// this one); 0 when unreadable.
pub fn cpu_ms(pid: Option<u32>) -> f64 {
    let path = pid.map_or("/proc/self/stat".to_string(), |p| format!("/proc/{p}/stat"));
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| parse_cpu_ticks(&t))
        .map_or(0.0, |ticks| ticks as f64 * 10.0)
}

/// utime + stime (fields 14 and 15, in clock ticks of 1/100 s: USER_HZ on Linux) of a
/// `/proc/<pid>/stat` line; the command name may contain spaces, so fields count from the
/// last ')'.
fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After ')': state is field 3, so utime (14) and stime (15) are at 11 and 12.
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn services_cpu_ms(sb: &Sandbox) -> f64 {
    sb.stack
        .actuators
        .iter()
        .chain(sb.stack.signals.iter())
        .filter_map(|s| s.proc.as_ref().and_then(|p| p.pid()))
        .map(|pid| cpu_ms(Some(pid)))
        .sum()
}

/// Taints (`Down`) or untaints (`None`) `nodes` spread evenly over `spread`, waits until every
/// entry reads the state in ARM, and measures each node from its own signal.
pub async fn play(
    sb: &mut Sandbox,
    nodes: &[String],
    state: State,
    spread: Duration,
    put_ms: f64,
    op_ms: f64,
    timeout: Duration,
) -> anyhow::Result<WaveFigures> {
    let t0 = jiff::Timestamp::now();
    let start = tokio::time::Instant::now();
    let (sim_cpu0, svc_cpu0) = (cpu_ms(None), services_cpu_ms(sb));
    // Each node's taint goes out at its own moment of the spread, whether or not the ones
    // before it were answered: one after the other, 500 read-modify-writes took 4-5.5 s on a
    // busy API server, so a "2 s" wave was not one.
    let mut patches = tokio::task::JoinSet::new();
    for (i, n) in nodes.iter().enumerate() {
        let due = start + spread.mul_f64(i as f64 / nodes.len().max(1) as f64);
        let (ops, n) = (sb.ops.clone(), n.clone());
        patches.spawn(async move {
            tokio::time::sleep_until(due).await;
            let done = if state == State::Down {
                ops.taint(&n, OUT_OF_SERVICE, Some("wave"), "NoExecute")
                    .await
            } else {
                ops.untaint(&n, OUT_OF_SERVICE).await
            };
            done.map(|()| (n, jiff::Timestamp::now()))
        });
    }
    let mut signalled = Vec::with_capacity(nodes.len());
    while let Some(done) = patches.join_next().await {
        let (n, at) = done??;
        if state == State::Down {
            sb.down.insert(n.clone());
        } else {
            sb.down.remove(&n);
        }
        signalled.push((n, at));
    }
    sb.wait_state(nodes, state, t0, timeout)
        .await
        .map_err(anyhow::Error::msg)?;
    let (sim_cpu_ms, services_cpu_ms) = (cpu_ms(None) - sim_cpu0, services_cpu_ms(sb) - svc_cpu0);
    let log = crate::observe::changes(&sb.stack.arm);
    let mut latencies = Vec::with_capacity(nodes.len());
    let mut signals = Vec::with_capacity(nodes.len());
    for (n, at) in &signalled {
        let d = judge::time_to_effective(&sb.stack.cluster, &log, n, state, *at)
            .ok_or_else(|| anyhow::anyhow!("{n}: no {state:?} after its signal"))?;
        latencies.push(ms(d));
        signals.push(ms(at.duration_since(t0)));
    }
    // The ideal meets the operation lengths the simulator really ran (they may be drawn
    // from a distribution); with none recorded, the configured ones.
    let mut writes_ms: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for op in sb.stack.arm.operation_records() {
        if let Some(end) = op.end_time.filter(|_| op.start_time >= t0) {
            writes_ms
                .entry(op.lb)
                .or_default()
                .push(ms(end.duration_since(op.start_time)));
        }
    }
    let ideal = if writes_ms.is_empty() {
        ideal_ms(&signals, put_ms, op_ms)
    } else {
        ideal_from_ops_ms(&signals, &writes_ms)
    };
    let mut puts: BTreeMap<String, usize> = BTreeMap::new();
    let mut put_starts: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let (mut lock_conflicts, mut reads, mut largest_put) = (0, 0, 0);
    for r in sb.stack.arm.requests() {
        if r.time < t0 || r.path.contains("/oauth2/") || r.path.contains("/msi/") {
            continue;
        }
        if r.lock_hit {
            lock_conflicts += 1;
        }
        match r.method.as_str() {
            "GET" => reads += 1,
            "PUT" => {
                largest_put = largest_put.max(r.body_bytes);
                if let Some(lb) = r.path.split("/loadBalancers/").nth(1) {
                    let lb = lb.split(['/', '?']).next().unwrap_or_default();
                    *puts.entry(lb.to_string()).or_default() += 1;
                    if r.status < 300 {
                        put_starts
                            .entry(lb.to_string())
                            .or_default()
                            .push(ms(r.received.duration_since(t0)));
                    }
                }
            }
            _ => {}
        }
    }
    // Each operation ends when its last entry became effective.
    let mut ends: BTreeMap<(String, String), f64> = BTreeMap::new();
    for e in sb.stack.arm.effective_log() {
        if e.time < t0 {
            continue;
        }
        let at = ms(e.time.duration_since(t0));
        let end = ends.entry((e.lb, e.op_id)).or_insert(at);
        *end = end.max(at);
    }
    let mut op_ends: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    for ((lb, _), at) in ends {
        op_ends.entry(lb).or_default().push(at);
    }
    let first_signal = signals.iter().copied().fold(f64::INFINITY, f64::min);
    Ok(WaveFigures {
        overhead: overhead(first_signal, &put_starts, &op_ends),
        nodes: nodes.len(),
        p50_ms: percentile(&latencies, 50.0).unwrap_or(f64::NAN),
        p99_ms: percentile(&latencies, 99.0).unwrap_or(f64::NAN),
        ideal_p99_ms: percentile(&ideal, 99.0).unwrap_or(f64::NAN),
        latencies_ms: latencies,
        ideals_ms: ideal,
        puts_per_lb: puts.values().copied().max().unwrap_or(0),
        lock_conflicts,
        reads,
        largest_put,
        sim_cpu_ms,
        services_cpu_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_are_read_after_the_command_name() {
        let stat = "42 (arm sim) S 1 42 42 0 -1 4194560 100 0 0 0 250 30 0 0 20 0 9 0 100";
        assert_eq!(parse_cpu_ticks(stat), Some(280));
        assert_eq!(parse_cpu_ticks("garbage"), None);
        assert!(cpu_ms(None) >= 0.0);
    }

    #[test]
    fn an_idle_writer_cuts_at_the_floor() {
        assert_eq!(ideal_ms(&[0.0], 200.0, 2000.0), vec![2200.0]);
        // Far apart: each at the floor.
        assert_eq!(
            ideal_ms(&[0.0, 10_000.0], 200.0, 2000.0),
            vec![2200.0, 2200.0]
        );
    }

    #[test]
    fn overhead_splits_the_lead_from_each_reaction_to_an_operation_end() {
        let lb = |v: &[f64]| BTreeMap::from([("lb".to_string(), v.to_vec())]);
        // Signal at 0; PUTs arrive at 300, 2700 and 5000; operations end at 2500 and 4800.
        let o = overhead(0.0, &lb(&[2700.0, 300.0, 5000.0]), &lb(&[2500.0, 4800.0]));
        assert_eq!(o.lead_ms, vec![300.0]);
        assert_eq!(o.react_ms, vec![200.0, 200.0]);
        // A PUT whose previous operation's end is not logged (no entry changed) pairs with
        // nothing, and one end never pairs twice.
        let o = overhead(0.0, &lb(&[300.0, 2700.0, 2900.0]), &lb(&[2500.0]));
        assert_eq!(o.react_ms, vec![200.0]);
    }

    #[test]
    fn the_ideal_meets_each_lbs_own_operation_lengths_and_a_node_waits_for_its_slowest_lb() {
        let lbs = BTreeMap::from([
            ("a".to_string(), vec![3000.0, 9000.0]),
            ("b".to_string(), vec![5000.0]),
        ]);
        // 0 goes out at once on both: 3 s on a, 5 s on b. 1000 waits for each LB's first
        // write: a's second takes 9 s (done at 12 s), b's repeats its 5 s (done at 10 s).
        let got = ideal_from_ops_ms(&[0.0, 1000.0], &lbs);
        assert_eq!(got, vec![5000.0, 11_000.0]);
        // Constant lengths give the fixed-length ideal.
        let same = BTreeMap::from([("a".to_string(), vec![2200.0; 4])]);
        let signals = [0.0, 100.0, 2000.0, 5000.0];
        assert_eq!(
            ideal_from_ops_ms(&signals, &same),
            ideal_ms(&signals, 200.0, 2000.0)
        );
    }

    #[test]
    fn arrivals_during_a_write_wait_for_it_then_one_more() {
        // 0 starts a write (done 2200); 100 and 2000 wait for it, go out at 2200, done 4400.
        let got = ideal_ms(&[2000.0, 0.0, 100.0], 200.0, 2000.0);
        assert_eq!(got, vec![2400.0, 2200.0, 4300.0]);
        // A signal exactly at the moment the writer frees up joins that next write.
        let got = ideal_ms(&[0.0, 2200.0, 2300.0], 200.0, 2000.0);
        assert_eq!(got, vec![2200.0, 2200.0, 4300.0]);
    }
}
