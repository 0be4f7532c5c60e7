//! Performs a departure script against the running stack (issue 28 item 2): Kubernetes steps
//! through the API server (signal-svc sees them as it would in a cluster), other owners' pool
//! writes through arm-sim, and the VM's and pods' steps straight to the data plane. Meanwhile it
//! reads what the data plane must follow, each change as a [`LiveEvent`]:
//! - admin state from arm-sim's effective log, at the instant ARM made it effective;
//! - pool membership from arm-sim's pool snapshots;
//! - kube-proxy's `/healthz` verdict (KEP-3836) from the Node: a `deletionTimestamp` or the
//!   cluster-autoscaler taint.

use super::script::{Action, CA_TAINT, KARPENTER_FINALIZER, Step};
use crate::kube_ops::{Cluster, GATE_CONDITION};
use anyhow::Context as _;
use arm_sim::ArmSim;
use arm_sim::model::AdminState;
use cutover_dataplane::helper::now;
use cutover_dataplane::live::{LiveEvent, NodeChange};
use cutover_dataplane::model::Admin;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// The leaving node and its entry in the Service's pool.
#[derive(Debug, Clone)]
pub struct Target {
    pub node: String,
    pub lb: String,
    pub pool: String,
    /// The entry's IP address (IP-based pools) or NIC ipConfiguration ID (NIC-based).
    pub entry: String,
    /// Every entry of the node, (load balancer, pool, entry), both families and every load
    /// balancer: what leaves with its VM's NIC or cloud-provider-azure's exclusion.
    pub all: Vec<(String, String, String)>,
}

impl Target {
    /// The node's IPv4 entry in the first public load balancer's first load-balancing pool:
    /// where a `LoadBalancer` Service's frontend sends its flows.
    pub fn of(cluster: &aks_fixture::Cluster, node: &str) -> anyhow::Result<Target> {
        let n = cluster
            .nodes
            .iter()
            .find(|n| n.name == node)
            .with_context(|| format!("no node {node}"))?;
        let (lb, pool) = cluster
            .load_balancers
            .iter()
            .filter(|lb| !lb.internal)
            .flat_map(|lb| lb.pools.iter().map(move |p| (lb, p)))
            .find(|(_, p)| {
                p.family == aks_fixture::IpFamily::V4
                    && !p.outbound_only
                    && p.members.iter().any(|m| m == node)
            })
            .with_context(|| format!("{node} is in no public IPv4 load-balancing pool"))?;
        let entry = match cluster.backend_pool_type {
            aks_fixture::PoolType::NodeIp => n.ipv4.to_string(),
            aks_fixture::PoolType::NodeIpConfiguration => n.ip_configuration_id(
                &cluster.subscription_id,
                &cluster.resource_group,
                aks_fixture::IpFamily::V4,
            ),
        };
        let entry_of = |family| match cluster.backend_pool_type {
            aks_fixture::PoolType::NodeIp => n.ip(family),
            aks_fixture::PoolType::NodeIpConfiguration => {
                n.ip_configuration_id(&cluster.subscription_id, &cluster.resource_group, family)
            }
        };
        let all = cluster
            .load_balancers
            .iter()
            .flat_map(|lb| lb.pools.iter().map(move |p| (lb, p)))
            .filter(|(_, p)| p.members.iter().any(|m| m == node))
            .map(|(lb, p)| (lb.name.clone(), p.name.clone(), entry_of(p.family)))
            .collect();
        Ok(Target {
            node: node.to_string(),
            lb: lb.name.clone(),
            pool: pool.name.clone(),
            entry,
            all,
        })
    }
}

/// What a script acts on.
#[derive(Clone, Copy)]
pub struct World<'a> {
    pub kube: &'a Cluster,
    pub arm: &'a ArmSim,
}

fn unix(ts: jiff::Timestamp) -> f64 {
    ts.as_nanosecond() as f64 / 1e9
}

async fn sleep_until_unix(t: f64) {
    let d = t - now();
    if d > 0.0 {
        tokio::time::sleep(Duration::from_secs_f64(d)).await;
    }
}

fn send(tx: &UnboundedSender<LiveEvent>, change: NodeChange) {
    let _ = tx.send(LiveEvent { at: now(), change });
}

/// Performs `steps` from `t0` (Unix seconds of the first signal) while reading the stack's
/// changes; returns once `End` was sent. A gate wait longer than `gate_budget` seconds is an
/// error (the data plane's run was sized with that budget).
pub async fn perform(
    world: World<'_>,
    target: &Target,
    steps: &[Step],
    t0: f64,
    gate_budget: f64,
    tx: UnboundedSender<LiveEvent>,
) -> anyhow::Result<()> {
    let script = async {
        tokio::try_join!(
            main_steps(world, target, steps, t0, gate_budget, &tx),
            removals(world, target, steps, t0),
        )
        .map(|_| ())
    };
    tokio::select! {
        r = script => r,
        r = read_changes(world, target, &tx) => r,
    }
}

async fn main_steps(
    world: World<'_>,
    target: &Target,
    steps: &[Step],
    t0: f64,
    gate_budget: f64,
    tx: &UnboundedSender<LiveEvent>,
) -> anyhow::Result<()> {
    let node = target.node.as_str();
    let kube = world.kube;
    let mut shift = 0.0;
    for st in steps.iter().filter(|s| s.action != Action::RemoveFromPool) {
        sleep_until_unix(t0 + shift + st.at).await;
        match &st.action {
            Action::Taint { key, value } => kube.taint(node, key, *value, "NoSchedule").await?,
            Action::Untaint(key) => kube.untaint(node, key).await?,
            Action::Cordon(on) => kube.cordon(node, *on).await?,
            Action::Label { key, value } => kube.label(node, key, Some(value)).await?,
            Action::Delete => kube.delete(node).await?,
            Action::RemoveFinalizer => kube.set_finalizers(node, &[]).await?,
            Action::Preempt { notice } => {
                kube.preempt_event(node, notice.round() as i64).await?;
            }
            Action::WaitGate { down } => {
                let started = now();
                wait_gate(kube, node, *down, gate_budget).await?;
                shift += now() - started;
            }
            Action::PodsTerminating => send(tx, NodeChange::LocalTerminating),
            Action::PodsExit => send(tx, NodeChange::LocalExit),
            Action::VmDead => send(tx, NodeChange::Dead),
            Action::VmRevive => send(tx, NodeChange::Revive),
            Action::Returned => send(tx, NodeChange::Returned),
            Action::End => {
                send(tx, NodeChange::End);
                return Ok(());
            }
            Action::RemoveFromPool => {}
        }
    }
    send(tx, NodeChange::End);
    Ok(())
}

/// Waits until the drain gate says `True` (`down`) or `False`.
async fn wait_gate(kube: &Cluster, node: &str, down: bool, budget: f64) -> anyhow::Result<()> {
    let want = if down { "True" } else { "False" };
    let deadline = now() + budget;
    loop {
        if let Some(c) = kube.condition(node, GATE_CONDITION).await?
            && c.status == want
        {
            return Ok(());
        }
        anyhow::ensure!(
            now() < deadline,
            "{node}: {GATE_CONDITION} not {want} within {budget:.0} s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Other owners' pool writes: retried every second while ARM answers 429 (another operation
/// holds the load balancer), as cloud-provider-azure retries.
async fn removals(
    world: World<'_>,
    target: &Target,
    steps: &[Step],
    t0: f64,
) -> anyhow::Result<()> {
    for st in steps.iter().filter(|s| s.action == Action::RemoveFromPool) {
        sleep_until_unix(t0 + st.at).await;
        // The Service's pool first (the one the data plane reads), then the node's other
        // entries: they leave together, and a Down entry left behind in another pool would
        // count against cutover's blast-radius guard for every later departure.
        let mut all = target.all.clone();
        all.sort_by_key(|(lb, pool, _)| !(lb == &target.lb && pool == &target.pool));
        for (lb, pool, entry) in &all {
            loop {
                match world.arm.outside_remove_member(lb, pool, entry) {
                    Ok(_) => break,
                    Err(e) if e.status.as_u16() == 429 => {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                    // Gone already.
                    Err(e) if e.status.as_u16() == 404 => break,
                    Err(e) => anyhow::bail!("removing {entry} from {lb}/{pool}: {e:?}"),
                }
            }
        }
    }
    Ok(())
}

fn admin(s: AdminState) -> Admin {
    match s {
        AdminState::None => Admin::None,
        AdminState::Down => Admin::Down,
        AdminState::Up => Admin::Up,
    }
}

/// Reads the stack's changes to the node until cancelled.
async fn read_changes(
    world: World<'_>,
    target: &Target,
    tx: &UnboundedSender<LiveEvent>,
) -> anyhow::Result<()> {
    let mut next = world.arm.effective_log().len();
    let mut member = true;
    let mut kep = false;
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut ticks: u64 = 0;
    loop {
        tick.tick().await;
        ticks += 1;
        let (events, n) = world.arm.effective_since(next);
        next = n;
        for e in events {
            if e.lb.eq_ignore_ascii_case(&target.lb)
                && e.pool.eq_ignore_ascii_case(&target.pool)
                && e.target
                    .as_deref()
                    .is_some_and(|t| t.eq_ignore_ascii_case(&target.entry))
            {
                let _ = tx.send(LiveEvent {
                    at: unix(e.time),
                    change: NodeChange::Admin(admin(e.value)),
                });
            }
        }
        if member {
            let present = world.arm.pool(&target.lb, &target.pool).is_some_and(|p| {
                p.entries.iter().any(|e| {
                    e.ip_address.as_deref() == Some(target.entry.as_str())
                        || e.nic_ip_configuration
                            .as_deref()
                            .is_some_and(|n| n.eq_ignore_ascii_case(&target.entry))
                })
            });
            if !present {
                member = false;
                send(tx, NodeChange::Removed);
            }
        }
        // kube-proxy learns of the Node through a watch; a read every 200 ms is close enough
        // next to a 5 s probe, and spares the API server.
        if !kep
            && ticks.is_multiple_of(4)
            && let Ok(node) = world.kube.node(&target.node).await
        {
            let tainted = node
                .spec
                .as_ref()
                .and_then(|s| s.taints.as_ref())
                .is_some_and(|ts| ts.iter().any(|t| t.key == CA_TAINT));
            if node.metadata.deletion_timestamp.is_some() || tainted {
                kep = true;
                send(tx, NodeChange::Kep503);
            }
        }
    }
}

/// Before t = 0: what the node carries from its creation (Karpenter's finalizer).
pub async fn prepare(world: World<'_>, target: &Target, steps: &[Step]) -> anyhow::Result<()> {
    if steps.iter().any(|s| s.action == Action::RemoveFinalizer) {
        world
            .kube
            .set_finalizers(&target.node, &[KARPENTER_FINALIZER])
            .await?;
    }
    Ok(())
}
