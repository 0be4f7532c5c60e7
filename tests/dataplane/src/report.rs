//! What is counted (contract 6.6) and the table the bench prints.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Why a connection failed or a flow broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cause {
    /// SYN or packets to a VM that is gone (dropped, no RST).
    VmDead,
    /// eTP Local: the node lives but its local pods have exited (kube-proxy DROP / pod closed).
    PodExit,
    /// eTP Local: SYN dropped by kube-proxy after the local pods exited.
    PodGone,
    /// No eligible entry: the frontend drops the SYN.
    NoEligible,
    /// `Down` reset established flows (U12 second pass).
    AdminDownReset,
    /// The entry left the backend pool (U4: its established flows blackholed by default).
    MemberRemoved,
    /// Seen by a real client without a more precise cause.
    Other,
}

impl Cause {
    pub fn is_hang(self) -> bool {
        matches!(
            self,
            Cause::VmDead | Cause::NoEligible | Cause::MemberRemoved
        )
    }
    pub fn name(self) -> &'static str {
        match self {
            Cause::VmDead => "vm_dead",
            Cause::PodExit => "pod_exit",
            Cause::PodGone => "pod_gone",
            Cause::NoEligible => "no_eligible",
            Cause::AdminDownReset => "admin_down_reset",
            Cause::MemberRemoved => "member_removed",
            Cause::Other => "other",
        }
    }
}

/// Counts of one cell, summed over `runs` runs (seeds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CellResult {
    pub runs: u64,
    pub new_attempts: u64,
    /// Failed new connections of the steady stream.
    pub failed_new: u64,
    /// Failed connects of keep-alive pools and streams reconnecting.
    pub failed_reconnect: u64,
    pub broken_pool: u64,
    pub broken_stream: u64,
    /// Established flows (pool + streams) open on the node when the VM went away.
    pub pinned_at_death: u64,
    /// Failures by (kind, cause) name, e.g. ("connect_timeout", "vm_dead").
    pub by_cause: BTreeMap<(String, String), u64>,
    /// Latest new flow assigned to the leaving node after the first signal (max over runs).
    pub last_new_on_node: Option<f64>,
    /// Sum of per-run "last new flow" (for the mean).
    pub last_new_sum: f64,
    pub last_new_runs: u64,
    /// Node given back -> first new flow assigned to it (sum over the runs that saw one).
    pub return_to_first_new_sum: f64,
    pub return_runs: u64,
    /// Runs whose node was given back but took no new flow before the run ended.
    pub return_without_new: u64,
}

impl CellResult {
    fn tag(&mut self, kind: &str, cause: Cause) {
        *self
            .by_cause
            .entry((kind.to_string(), cause.name().to_string()))
            .or_default() += 1;
    }
    pub fn add_failed_new(&mut self, cause: Cause) {
        self.failed_new += 1;
        self.tag("new", cause);
    }
    pub fn add_failed_reconnect(&mut self, cause: Cause) {
        self.failed_reconnect += 1;
        self.tag("reconnect", cause);
    }
    pub fn add_broken(&mut self, cause: Cause, stream: bool) {
        if stream {
            self.broken_stream += 1;
            self.tag("stream", cause);
        } else {
            self.broken_pool += 1;
            self.tag("pool", cause);
        }
    }
    pub fn merge(&mut self, o: &CellResult) {
        self.runs += o.runs;
        self.new_attempts += o.new_attempts;
        self.failed_new += o.failed_new;
        self.failed_reconnect += o.failed_reconnect;
        self.broken_pool += o.broken_pool;
        self.broken_stream += o.broken_stream;
        self.pinned_at_death += o.pinned_at_death;
        for (k, v) in &o.by_cause {
            *self.by_cause.entry(k.clone()).or_default() += v;
        }
        if let Some(l) = o.last_new_on_node {
            self.last_new_on_node = Some(self.last_new_on_node.map_or(l, |m: f64| m.max(l)));
            self.last_new_sum += l;
            self.last_new_runs += 1;
        }
        self.return_to_first_new_sum += o.return_to_first_new_sum;
        self.return_runs += o.return_runs;
        self.return_without_new += o.return_without_new;
        if o.runs == 1 && o.last_new_on_node.is_none() {
            // a run where the node took no new flow after the signal counts as 0
            self.last_new_runs += 1;
        }
    }
    /// Mean time from the node's return to its first new flow, over the runs that saw one.
    pub fn mean_return_to_first_new(&self) -> Option<f64> {
        (self.return_runs > 0).then(|| self.return_to_first_new_sum / self.return_runs as f64)
    }
    pub fn per_run(&self, v: u64) -> f64 {
        v as f64 / self.runs.max(1) as f64
    }
    pub fn mean_failed_new(&self) -> f64 {
        self.per_run(self.failed_new)
    }
    pub fn mean_failed_connects(&self) -> f64 {
        self.per_run(self.failed_new + self.failed_reconnect)
    }
    pub fn mean_broken(&self) -> f64 {
        self.per_run(self.broken_pool + self.broken_stream)
    }
    pub fn mean_last_new(&self) -> f64 {
        if self.last_new_runs == 0 {
            0.0
        } else {
            self.last_new_sum / self.last_new_runs as f64
        }
    }
}

/// One row of the bench's table.
#[derive(Debug, Clone)]
pub struct Row {
    pub departure: String,
    pub policy: String,
    pub mode: String,
    pub result: CellResult,
}

pub fn render_table(rows: &[Row], realisation: &str) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "realisation: {realisation}");
    let _ = writeln!(
        s,
        "| departure | eTP | mode | failed new conns (steady / +reconnects) | broken established (pool / streams) | signal -> last new flow on node (mean / max) | runs |"
    );
    let _ = writeln!(s, "| --- | --- | --- | --- | --- | --- | --- |");
    for r in rows {
        let c = &r.result;
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.1} / {:.1} | {:.1} ({:.1} / {:.1}) | {:.1} s / {:.1} s | {} |",
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
            c.runs,
        );
    }
    s
}

/// The failures of every row by kind and cause.
pub fn render_causes(rows: &[Row]) -> String {
    let mut s = String::new();
    for r in rows {
        let causes: Vec<String> = r
            .result
            .by_cause
            .iter()
            .map(|((k, c), n)| format!("{k}/{c} {:.1}", *n as f64 / r.result.runs.max(1) as f64))
            .collect();
        let _ = writeln!(
            s,
            "- {} / {} / {}: new attempts {:.0}; {}",
            r.departure,
            r.policy,
            r.mode,
            r.result.new_attempts as f64 / r.result.runs.max(1) as f64,
            causes.join(", ")
        );
    }
    s
}
