//! What users feel while AKS nodes leave, driven through the whole system (issue 28 item 2):
//! each departure is a script of Kubernetes API calls, other owners' ARM writes and the VM's and
//! pods' own steps ([`script`]); signal-svc and actuator-svc react as in a cluster; the data
//! plane ([`cutover_dataplane`], kernel-true where the machine allows) follows arm-sim's
//! effective admin state and pool membership ([`driver`]) while a load generator counts failed
//! and broken connections. `departures_bench` prints the table ([`table`]).

pub mod driver;
pub mod script;
pub mod table;

use anyhow::Context as _;
use cutover_dataplane::controller::Feed;
use cutover_dataplane::live::LiveFeed;
use cutover_dataplane::model::{Mode, Policy};
use cutover_dataplane::report::CellResult;
use cutover_dataplane::sim::Scenario;
use driver::{Target, World};
use rand::SeedableRng;
use rand::rngs::StdRng;
use script::{Flow, FlowTimings};
use std::path::PathBuf;

/// Which data plane runs the cells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Realisation {
    /// Network namespaces, nftables DNAT and conntrack.
    Kernel,
    /// The in-process proxy on loopback.
    Userspace,
}

impl Realisation {
    /// The kernel when namespaces and nftables work (and the user did not ask otherwise), with
    /// the reason when not.
    pub fn pick(force_userspace: bool) -> (Realisation, String) {
        if force_userspace {
            return (Realisation::Userspace, "asked for".into());
        }
        match cutover_dataplane::netns::kernel_available() {
            Ok(()) => (
                Realisation::Kernel,
                "namespaces + nftables + conntrack".into(),
            ),
            Err(why) => (Realisation::Userspace, format!("kernel unavailable: {why}")),
        }
    }
}

/// What every cell of a run shares.
#[derive(Debug, Clone)]
pub struct Setup {
    /// Probes, unknowns, clients and member count; policy and mode are set per cell.
    pub scenario: Scenario,
    pub timings: FlowTimings,
    /// The longest a drain gate may take before the cell fails (seconds).
    pub gate_budget: f64,
    pub realisation: Realisation,
    /// A binary that runs the data plane's `helper-*` subcommands.
    pub helper_exe: PathBuf,
}

/// One departure of one node.
#[derive(Debug, Clone)]
pub struct Cell {
    pub flow: Flow,
    pub policy: Policy,
    pub mode: Mode,
    pub node: String,
    pub seed: u64,
}

/// Runs one cell: the data plane starts, and once its clients have warmed up the script runs
/// against the stack.
pub async fn run_cell(
    world: World<'_>,
    cluster: &aks_fixture::Cluster,
    setup: &Setup,
    cell: &Cell,
    name: &str,
) -> anyhow::Result<CellResult> {
    let target = Target::of(cluster, &cell.node)?;
    let mut rng = StdRng::seed_from_u64(cell.seed);
    let steps = script::build(cell.flow, cell.mode, &setup.timings, &mut rng);
    driver::prepare(world, &target, &steps).await?;
    let (start_tx, start_rx) = tokio::sync::oneshot::channel();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let feed = Feed::Live(LiveFeed {
        start: start_tx,
        events: rx,
        length: script::length(&steps, setup.gate_budget),
    });
    let mut sc = setup.scenario.clone();
    sc.policy = cell.policy;
    sc.mode = cell.mode;
    if cell.flow == Flow::AksUpgrade {
        // The surge node (AKS's default max-surge of one) joined the pool before the cordon.
        sc.members += 1;
    }
    let exe = &setup.helper_exe;
    let data_plane = async {
        match setup.realisation {
            Realisation::Kernel => {
                cutover_dataplane::kernel::run_kernel_cell(&sc, cell.seed, exe, name, feed).await
            }
            Realisation::Userspace => {
                cutover_dataplane::userspace::run_userspace_cell(&sc, cell.seed, exe, feed).await
            }
        }
    };
    let drive = async {
        let t0 = start_rx.await.context("the data plane did not start")?;
        driver::perform(world, &target, &steps, t0, setup.gate_budget, tx).await
    };
    let (result, driven) = tokio::join!(data_plane, drive);
    // The data plane's own error first: when it fails to start, the script only sees that.
    let result = result?;
    driven.with_context(|| {
        format!(
            "{} {} {} on {}",
            cell.flow, cell.policy, cell.mode, cell.node
        )
    })?;
    Ok(result)
}

/// The smallest `aks-ip`-shaped cluster with `user` user-pool and `spot` Spot nodes to spare.
pub fn cluster_size(preset: &str, user: usize, spot: usize) -> anyhow::Result<usize> {
    for n in 8..=2000 {
        let c = aks_fixture::preset_sized(preset, n)?;
        let count = |pool: &str| c.nodes.iter().filter(|x| x.pool == pool).count();
        if count(USER_POOL) >= user && count(SPOT_POOL) >= spot {
            return Ok(n);
        }
    }
    anyhow::bail!("no cluster of at most 2,000 nodes has {user} user and {spot} Spot nodes")
}

pub const USER_POOL: &str = "userpool";
pub const SPOT_POOL: &str = "spotpool";

/// One node per cell, never reused (a departed node is gone or changed): Spot nodes for Spot
/// flows, user-pool nodes for the rest.
pub fn assign_nodes(
    cluster: &aks_fixture::Cluster,
    wanted: &[(Flow, Policy, Mode, u64)],
) -> anyhow::Result<Vec<Cell>> {
    let mut user = cluster.nodes.iter().filter(|n| n.pool == USER_POOL);
    let mut spot = cluster.nodes.iter().filter(|n| n.pool == SPOT_POOL);
    wanted
        .iter()
        .map(|&(flow, policy, mode, seed)| {
            let node = if flow.spot() {
                spot.next()
            } else {
                user.next()
            }
            .with_context(|| format!("no node left for {flow}"))?;
            Ok(Cell {
                flow,
                policy,
                mode,
                node: node.name.clone(),
                seed,
            })
        })
        .collect()
}

/// Runs `cells` against one stack, `parallel` at a time; results in the cells' order. `prefix`
/// names the cells' namespaces: unique among the runs of this process.
pub async fn run_all(
    stack: &crate::stack::Stack,
    setup: &Setup,
    cells: &[Cell],
    parallel: usize,
    prefix: &str,
) -> anyhow::Result<Vec<anyhow::Result<CellResult>>> {
    use futures::StreamExt as _;
    let client = crate::kube_ops::client(&stack.kubeconfig).await?;
    let kube = crate::kube_ops::Cluster::new(client);
    let world = World {
        kube: &kube,
        arm: &stack.arm,
    };
    let cluster = &stack.cluster;
    let results = futures::stream::iter(cells.iter().enumerate())
        .map(|(i, cell)| async move {
            (
                i,
                run_cell(world, cluster, setup, cell, &format!("{prefix}{i}")).await,
            )
        })
        .buffer_unordered(parallel.max(1))
        .collect::<Vec<_>>()
        .await;
    let mut results = results;
    results.sort_by_key(|(i, _)| *i);
    Ok(results.into_iter().map(|(_, r)| r).collect())
}
