//! The sandbox: a running [`Stack`] plus what scenarios need to act and judge. Acting goes
//! through the Kubernetes API; judging reads the ARM simulator (the truth about entries) and
//! the actuators' result streams (when they said accepted and effective).

use crate::judge::{self, State};
use crate::kube_ops;
use crate::observe;
use crate::results::Results;
use crate::stack::{Stack, StackOptions};
use cutover_proto::v1::{AdminState, ResultPhase};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// How one scenario went.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub name: String,
    /// Played under injected faults or process kills: reported apart from the headline.
    pub disrupted: bool,
    pub problems: Vec<String>,
    /// Per-node and per-LB detail lines.
    pub lines: Vec<String>,
    /// Signal to effective `Down` on every entry, per node (ms).
    pub cut_ms: Vec<f64>,
    /// Signal removed to effective `None` on every entry, per node (ms).
    pub restore_ms: Vec<f64>,
    /// What the ideal single writer would have taken for the same cut signals (ms), for
    /// scenarios that measure it (`wave::ideal_ms`).
    pub ideal_cut_ms: Vec<f64>,
    pub reads: usize,
    pub writes: usize,
    pub throttled: usize,
    pub duration: Duration,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.problems.is_empty()
    }
}

/// A running sandbox.
pub struct Sandbox {
    pub stack: Stack,
    pub ops: kube_ops::Cluster,
    pub results: Results,
    /// Nodes that must be `Down` now.
    pub down: BTreeSet<String>,
    /// Nodes deleted while `Down`: their entries must stay `Down` (see
    /// [`judge::end_state_problems`]).
    pub deleted_down: BTreeSet<String>,
    /// Every node whose Node object was deleted.
    deleted: BTreeSet<String>,
    /// Nodes not yet used by a scenario, per node pool.
    unused: BTreeMap<String, Vec<String>>,
}

/// Milliseconds of a signed duration.
pub fn ms(d: jiff::SignedDuration) -> f64 {
    d.as_secs_f64() * 1000.0
}

impl Sandbox {
    pub async fn start(options: StackOptions) -> anyhow::Result<Sandbox> {
        let stack = Stack::start(options).await?;
        let client = kube_ops::client(&stack.kubeconfig).await?;
        let ports: Vec<u16> = stack.actuators.iter().filter_map(|a| a.grpc_port).collect();
        let results = Results::follow(&stack.pki, &ports)?;
        let mut unused: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for n in stack.cluster.nodes.iter().rev() {
            unused
                .entry(n.pool.clone())
                .or_default()
                .push(n.name.clone());
        }
        Ok(Sandbox {
            ops: kube_ops::Cluster::new(client),
            stack,
            results,
            down: BTreeSet::new(),
            deleted_down: BTreeSet::new(),
            deleted: BTreeSet::new(),
            unused,
        })
    }

    /// `count` nodes of `pool` that no scenario used yet.
    pub fn fresh_nodes(&mut self, pool: &str, count: usize) -> anyhow::Result<Vec<String>> {
        let list = self.unused.entry(pool.to_string()).or_default();
        if list.len() < count {
            anyhow::bail!(
                "not enough unused nodes in pool {pool}: need {count}, have {}",
                list.len()
            );
        }
        Ok((0..count).filter_map(|_| list.pop()).collect())
    }

    /// How many nodes of `pool` no scenario used yet.
    pub fn unused_count(&self, pool: &str) -> usize {
        self.unused.get(pool).map_or(0, Vec::len)
    }

    /// Deletes the Node object (Karpenter or cluster-autoscaler after the drain) and returns
    /// when the API server answered. A node that was `Down` must stay `Down`.
    pub async fn delete_node(&mut self, node: &str) -> anyhow::Result<jiff::Timestamp> {
        self.ops.delete(node).await?;
        let at = jiff::Timestamp::now();
        self.mark_deleted(node);
        Ok(at)
    }

    /// Records that `node`'s Node object was deleted (by a scenario's own client).
    pub fn mark_deleted(&mut self, node: &str) {
        self.deleted.insert(node.to_string());
        if self.down.remove(node) {
            self.deleted_down.insert(node.to_string());
        }
    }

    /// Nodes whose Node object still exists (every node of the cluster but the deleted ones).
    pub fn live_nodes(&self) -> Vec<String> {
        self.stack
            .cluster
            .nodes
            .iter()
            .map(|n| n.name.clone())
            .filter(|n| !self.deleted.contains(n))
            .collect()
    }

    /// Waits until every entry of every node in `nodes` reads `state` in effect after
    /// `since`; returns each node's time to get there.
    pub async fn wait_state(
        &self,
        nodes: &[String],
        state: State,
        since: jiff::Timestamp,
        timeout: Duration,
    ) -> Result<Vec<(String, jiff::SignedDuration)>, String> {
        let deadline = Instant::now() + timeout;
        loop {
            let log = observe::changes(&self.stack.arm);
            let done: Vec<_> = nodes
                .iter()
                .filter_map(|n| {
                    judge::time_to_effective(&self.stack.cluster, &log, n, state, since)
                        .map(|d| (n.clone(), d))
                })
                .collect();
            if done.len() == nodes.len() {
                return Ok(done);
            }
            if Instant::now() > deadline {
                let missing: Vec<_> = nodes
                    .iter()
                    .filter(|n| !done.iter().any(|(d, _)| d == *n))
                    .take(5)
                    .cloned()
                    .collect();
                return Err(format!(
                    "{} of {} nodes did not reach {state:?} within {timeout:?} (e.g. {missing:?})",
                    nodes.len() - done.len(),
                    nodes.len()
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Asserts that nothing changes on any entry for `quiet` after `since`.
    pub async fn expect_no_change(&self, since: jiff::Timestamp, quiet: Duration) -> Vec<String> {
        tokio::time::sleep(quiet).await;
        judge::transitions(&observe::changes(&self.stack.arm))
            .into_iter()
            .filter(|c| c.time >= since)
            .map(|c| {
                format!(
                    "unexpected change {}/{} {} -> {:?}",
                    c.lb, c.pool, c.target, c.state
                )
            })
            .collect()
    }

    /// One line per node: signal, accepted and effective, relative to the signal.
    pub fn node_line(&self, node: &str, desired: AdminState, since: jiff::Timestamp) -> String {
        let rel = |t: Option<jiff::Timestamp>| {
            t.map_or_else(
                || "-".to_string(),
                |t| format!("+{:.0} ms", ms(t.duration_since(since))),
            )
        };
        let accepted = self
            .results
            .first(node, desired, ResultPhase::Accepted, since);
        let reported = self
            .results
            .first(node, desired, ResultPhase::Effective, since);
        let state = if desired == AdminState::Down {
            State::Down
        } else {
            State::None
        };
        let log = observe::changes(&self.stack.arm);
        let effective = judge::time_to_effective(&self.stack.cluster, &log, node, state, since);
        let entries = judge::node_entries(&self.stack.cluster, node).len();
        format!(
            "  {node} -> {}: signal 0 ms | accepted {} | effective in ARM {} ({entries} entries) | reported effective {}",
            if desired == AdminState::Down {
                "Down"
            } else {
                "None"
            },
            rel(accepted),
            effective.map_or_else(|| "-".to_string(), |d| format!("+{:.0} ms", ms(d))),
            rel(reported),
        )
    }

    /// ARM writes per load balancer since `since`.
    pub fn lb_lines(&self, since: jiff::Timestamp) -> Vec<String> {
        let mut per_lb: BTreeMap<String, usize> = BTreeMap::new();
        for r in self.stack.arm.requests() {
            if r.time < since || r.method != "PUT" {
                continue;
            }
            if let Some(lb) = r.path.split("/loadBalancers/").nth(1) {
                let lb = lb.split(['/', '?']).next().unwrap_or_default();
                *per_lb.entry(lb.to_string()).or_default() += 1;
            }
        }
        per_lb
            .into_iter()
            .map(|(lb, n)| format!("  LB {lb}: {n} PUT(s)"))
            .collect()
    }

    /// Fills in the end-state and flapping judgement and the ARM budget of a scenario.
    pub fn finish(
        &self,
        outcome: &mut Outcome,
        since: jiff::Timestamp,
        windows: &[jiff::Timestamp],
    ) {
        let entries = observe::entries(&self.stack.arm, &self.stack.cluster);
        let down: std::collections::HashSet<String> = self.down.iter().cloned().collect();
        let deleted: std::collections::HashSet<String> =
            self.deleted_down.iter().cloned().collect();
        outcome.problems.extend(
            judge::end_state_problems(&self.stack.cluster, &entries, &down, &deleted)
                .into_iter()
                .take(10),
        );
        let log = observe::changes(&self.stack.arm);
        let mut bounds: Vec<jiff::Timestamp> = vec![since];
        bounds.extend_from_slice(windows);
        for (i, start) in bounds.iter().enumerate() {
            let until = bounds.get(i + 1).copied();
            outcome
                .problems
                .extend(judge::flaps(&self.stack.cluster, &log, *start, until));
        }
        let (reads, writes, throttled) = observe::arm_calls(&self.stack.arm, since);
        outcome.reads = reads;
        outcome.writes = writes;
        outcome.throttled = throttled;
        outcome.lines.extend(self.lb_lines(since));
        outcome.problems.extend(
            self.results
                .failures(since)
                .into_iter()
                .filter(|f| !f.is_empty())
                .take(5)
                .map(|f| format!("actuator reported failure: {f}")),
        );
    }
}
