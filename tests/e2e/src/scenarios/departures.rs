//! How nodes leave a cluster today (docs/signal-sources.md): Karpenter's termination,
//! cluster-autoscaler's scale-down and its abort, and a drainer that waits on the drain gate,
//! the Node condition `LoadBalancerAdminStateDown`, before it deletes the Node.
//!
//! A deleted node's entries stay `Down` in ARM: the cloud provider removes them later, and
//! cutover never restores a deleted node. `Sandbox::delete_node` records that for the judge.

use super::{WAIT, restore, settle};
use crate::judge::{self, State};
use crate::kube_ops::{
    self, EXCLUDE_FROM_LBS, GATE_CONDITION, KARPENTER_DISRUPTED, TO_BE_DELETED_BY_CA,
};
use crate::sandbox::{Outcome, Sandbox, ms};
use std::time::{Duration, Instant};

/// How long a deleted node's entries are watched for a change.
const AFTER_DELETE: Duration = Duration::from_secs(2);

/// How a node leaves.
#[derive(Debug, Clone, Copy)]
enum Departure {
    /// `karpenter.sh/disrupted:NoSchedule` and the exclude label, value `karpenter`.
    Karpenter,
    /// `ToBeDeletedByClusterAutoscaler=<unix seconds>:NoSchedule`.
    Autoscaler,
}

impl Departure {
    /// Sets the departure's signals on `node`, as the tool does.
    async fn signal(self, ops: &kube_ops::Cluster, node: &str) -> anyhow::Result<()> {
        match self {
            Departure::Karpenter => {
                ops.taint(node, KARPENTER_DISRUPTED, None, "NoSchedule")
                    .await?;
                ops.label(node, EXCLUDE_FROM_LBS, Some("karpenter")).await
            }
            Departure::Autoscaler => {
                let now = jiff::Timestamp::now().as_second().to_string();
                ops.taint(node, TO_BE_DELETED_BY_CA, Some(&now), "NoSchedule")
                    .await
            }
        }
    }
}

/// Signals `nodes`, waits for `Down` on every entry, records the cut latencies.
async fn cut_by(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    nodes: &[String],
    how: Departure,
) -> anyhow::Result<jiff::Timestamp> {
    let t0 = jiff::Timestamp::now();
    for n in nodes {
        how.signal(&sb.ops, n).await?;
        sb.down.insert(n.clone());
    }
    settle(sb, outcome, nodes, State::Down, t0).await?;
    Ok(t0)
}

/// Deletes `node` and checks that none of the cluster's entries changes for a while: the
/// deleted node's entries stay `Down`.
async fn delete_and_watch(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    node: &str,
) -> anyhow::Result<()> {
    let at = sb.delete_node(node).await?;
    outcome
        .problems
        .extend(sb.expect_no_change(at, AFTER_DELETE).await);
    outcome.lines.push(format!(
        "  {node}: Node deleted; its {} entries stay Down ({} s watched)",
        judge::node_entries(&sb.stack.cluster, node).len(),
        AFTER_DELETE.as_secs()
    ));
    Ok(())
}

/// Karpenter terminates a node: taint and label, the drain (simulated by its first step, the
/// cordon), then the Node is deleted.
pub(super) async fn karpenter_termination(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    cut_by(sb, outcome, &nodes, Departure::Karpenter).await?;
    sb.ops.cordon(&nodes[0], true).await?;
    delete_and_watch(sb, outcome, &nodes[0]).await
}

/// cluster-autoscaler scales a node down: its taint, then the Node is deleted.
pub(super) async fn autoscaler_scale_down(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    cut_by(sb, outcome, &nodes, Departure::Autoscaler).await?;
    delete_and_watch(sb, outcome, &nodes[0]).await
}

/// cluster-autoscaler taints a node, then gives up (the node was needed after all) and removes
/// the taint: back to `None`, each entry changing once each way (`Sandbox::finish` judges it).
pub(super) async fn aborted_scale_down(
    sb: &mut Sandbox,
    outcome: &mut Outcome,
    windows: &mut Vec<jiff::Timestamp>,
) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 1)?;
    cut_by(sb, outcome, &nodes, Departure::Autoscaler).await?;
    windows.push(restore(sb, outcome, &nodes, TO_BE_DELETED_BY_CA).await?);
    Ok(())
}

/// What a drainer saw of one node.
struct Drained {
    node: String,
    /// Each distinct reading of the condition (`-` while absent) and when it was first read.
    readings: Vec<(jiff::Timestamp, String)>,
    /// When the condition was first read `True`.
    released: jiff::Timestamp,
    /// When the delete was answered.
    deleted: jiff::Timestamp,
    /// The condition's `lastTransitionTime` when it was read `True`.
    transition: Option<jiff::Timestamp>,
}

/// A drain script: polls the node's gate condition (as `kubectl wait
/// --for=condition=LoadBalancerAdminStateDown=True` does) and deletes the Node once it reads
/// `True`.
async fn drainer(ops: kube_ops::Cluster, node: String) -> anyhow::Result<Drained> {
    let deadline = Instant::now() + WAIT;
    let mut readings: Vec<(jiff::Timestamp, String)> = Vec::new();
    loop {
        let cond = ops.condition(&node, GATE_CONDITION).await?;
        let now = jiff::Timestamp::now();
        let reading = cond.as_ref().map_or_else(
            || "-".to_string(),
            |c| match c.reason.as_deref() {
                Some(r) if c.status != "True" => format!("{} ({r})", c.status),
                _ => c.status.clone(),
            },
        );
        if readings.last().is_none_or(|(_, r)| *r != reading) {
            readings.push((now, reading));
        }
        if let Some(c) = cond.filter(|c| c.status == "True") {
            ops.delete(&node).await?;
            return Ok(Drained {
                node,
                readings,
                released: now,
                deleted: jiff::Timestamp::now(),
                transition: c.last_transition_time.map(|t| t.0),
            });
        }
        if Instant::now() > deadline {
            anyhow::bail!("{node}: {GATE_CONDITION} not True within {WAIT:?}; read {readings:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Two nodes leave, one the Karpenter way and one the autoscaler way; a drainer per node waits
/// on the gate, then deletes the Node. ARM's log must show every entry of the node `Down`
/// before the delete, and the condition must never read `True` before ARM did.
pub(super) async fn drain_gate(sb: &mut Sandbox, outcome: &mut Outcome) -> anyhow::Result<()> {
    let nodes = sb.fresh_nodes("userpool", 2)?;
    let t0 = jiff::Timestamp::now();
    let drainers = nodes
        .iter()
        .map(|n| tokio::spawn(drainer(sb.ops.clone(), n.clone())))
        .collect::<Vec<_>>();
    for (n, how) in nodes
        .iter()
        .zip([Departure::Karpenter, Departure::Autoscaler])
    {
        how.signal(&sb.ops, n).await?;
        sb.down.insert(n.clone());
    }
    let mut drained = Vec::new();
    for d in drainers {
        drained.push(d.await??);
    }
    for d in &drained {
        sb.mark_deleted(&d.node);
    }
    let log = crate::observe::changes(&sb.stack.arm);
    let rel = |t: jiff::Timestamp| ms(t.duration_since(t0));
    for d in &drained {
        let Some(effective) =
            judge::time_to_effective(&sb.stack.cluster, &log, &d.node, State::Down, t0)
        else {
            outcome.problems.push(format!(
                "{}: deleted at +{:.0} ms, but not every entry was ever Down in ARM",
                d.node,
                rel(d.deleted)
            ));
            continue;
        };
        let effective_at = t0 + effective;
        outcome.cut_ms.push(ms(effective));
        if effective_at >= d.deleted {
            outcome.problems.push(format!(
                "{}: Node deleted at +{:.0} ms, before ARM had every entry Down (+{:.0} ms)",
                d.node,
                rel(d.deleted),
                rel(effective_at)
            ));
        }
        if d.released < effective_at {
            outcome.problems.push(format!(
                "{}: {GATE_CONDITION} read True at +{:.0} ms, before ARM had every entry Down (+{:.0} ms)",
                d.node,
                rel(d.released),
                rel(effective_at)
            ));
        }
        // lastTransitionTime has whole seconds: it may not be in an earlier second than ARM's.
        if d.transition
            .is_some_and(|t| t.as_second() < effective_at.as_second())
        {
            outcome.problems.push(format!(
                "{}: {GATE_CONDITION}=True since {:?}, earlier than ARM's Down at {effective_at}",
                d.node, d.transition
            ));
        }
        let seen: Vec<String> = d
            .readings
            .iter()
            .map(|(t, r)| format!("{r} @+{:.0}", rel(*t)))
            .collect();
        outcome.lines.push(format!(
            "  {}: ARM Down on all {} entries +{:.0} ms | gate read {} | deleted +{:.0} ms",
            d.node,
            judge::node_entries(&sb.stack.cluster, &d.node).len(),
            rel(effective_at),
            seen.join(" -> "),
            rel(d.deleted)
        ));
    }
    let last = drained.iter().map(|d| d.deleted).max().unwrap_or(t0);
    outcome
        .problems
        .extend(sb.expect_no_change(last, AFTER_DELETE).await);
    outcome.lines.push(format!(
        "  deleted nodes' entries stay Down ({} s watched)",
        AFTER_DELETE.as_secs()
    ));
    Ok(())
}
