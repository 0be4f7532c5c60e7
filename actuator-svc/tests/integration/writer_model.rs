//! Model-based test of the writer against arm-sim: random sequences of desired states for a
//! few nodes, sent on one stream, interleaved with throttling (429), stale etags (an outside
//! writer changes the LB: 412), operations canceled by another writer's PUT (supersede) and
//! failed operations. The model is the last desired state sent per node.
//!
//! Checked at the end of every case: every entry's effective state in ARM is exactly the
//! model's; an entry whose node's desired state never changed was never written; no entry
//! changed more often than its node's desired state did (no flap); and for every node the
//! versions reported EFFECTIVE only grow, ending at the last one sent.

use crate::common::*;
use arm_sim::faults::FaultSpec;
use cutover_proto::v1::*;
use parking_lot::Mutex;
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

static SEEN_412: AtomicUsize = AtomicUsize::new(0);
static SEEN_429: AtomicUsize = AtomicUsize::new(0);

/// The nodes whose desired states are generated; others are touched only by the faults.
const MODEL_NODES: usize = 4;

#[derive(Clone, Debug)]
enum Step {
    /// Desired states (node index, Down?) sent as deltas, in order.
    Send(Vec<(usize, bool)>),
    /// The next N ARM requests get 429.
    Throttle(u32),
    /// The next write operation ends Failed.
    FailOperation,
    /// An outside writer changes the LB (its etag) under the writer's cache: 412.
    StaleEtag,
    /// A desired state sent, then, while its write is running, another actuator writes the
    /// same LB: the running operation is canceled.
    Supersede(usize, bool),
    Pause(u64),
}

impl Arbitrary for Step {
    fn arbitrary(g: &mut Gen) -> Self {
        match u8::arbitrary(g) % 10 {
            0..=3 => {
                let n = 1 + usize::arbitrary(g) % 3;
                Step::Send(
                    (0..n)
                        .map(|_| (usize::arbitrary(g) % MODEL_NODES, bool::arbitrary(g)))
                        .collect(),
                )
            }
            4 => Step::Throttle(1 + u32::arbitrary(g) % 3),
            5 => Step::FailOperation,
            6 => Step::StaleEtag,
            7 => Step::Supersede(usize::arbitrary(g) % MODEL_NODES, bool::arbitrary(g)),
            _ => Step::Pause(u64::arbitrary(g) % 200),
        }
    }

    fn shrink(&self) -> Box<dyn Iterator<Item = Self>> {
        match self {
            Step::Send(v) => Box::new(v.shrink().filter(|v| !v.is_empty()).map(Step::Send)),
            _ => Box::new(std::iter::empty()),
        }
    }
}

/// Which entries (by target: IP address) belong to a node.
fn targets(n: &aks_fixture::Node) -> [String; 2] {
    [n.ipv4.to_string(), n.ipv6.to_string()]
}

/// Sends one desired state and updates the model.
async fn send(
    tx: &tokio::sync::mpsc::Sender<SignalMessage>,
    last: &mut [Option<(bool, u64)>],
    transitions: &mut [usize],
    nodes: &[aks_fixture::Node],
    (i, down, seq): (usize, bool, u64),
) -> Result<(), String> {
    let state = if down {
        AdminState::Down
    } else {
        AdminState::None
    };
    let was_down = last[i].is_some_and(|(d, _)| d);
    if was_down != down {
        transitions[i] += 1;
    }
    last[i] = Some((down, seq));
    let msg = SignalMessage {
        kind: Some(signal_message::Kind::Delta(desired(
            &nodes[i], state, 1, seq,
        ))),
    };
    tx.send(msg).await.map_err(|e| e.to_string())
}

async fn run(steps: Vec<Step>) -> Result<(), String> {
    let (sim, cluster) = start_sim("aks-ip").await;
    sim.faults(FaultSpec {
        supersede: Some(true),
        ..Default::default()
    });
    // Operations run long enough for another writer's PUT to land inside one.
    sim.set_tuning(arm_sim::faults::Tuning {
        completion_delay_ms: 400,
        ..sim.tuning()
    });
    let args = ["--max-down-share", "1.0", "--pool-refresh-interval", "1h"];
    let mut a = start_actuator(&sim, &cluster, &args).await;
    let b = start_actuator(&sim, &cluster, &args).await;
    let nodes = &cluster.nodes[..MODEL_NODES];
    let bystander = &cluster.nodes[cluster.nodes.len() - 1];
    let other_writer = &cluster.nodes[cluster.nodes.len() - 2];
    let initial: Vec<_> = nodes
        .iter()
        .map(|n| sim_states(&sim, &cluster, n))
        .collect();

    let (tx, mut inbound) = open_stream(&mut a, 1).await;
    let results: Arc<Mutex<Vec<NodeResult>>> = Arc::default();
    let collector = {
        let results = results.clone();
        tokio::spawn(async move {
            while let Ok(Some(m)) = inbound.message().await {
                if let Some(actuator_message::Kind::Result(r)) = m.kind {
                    results.lock().push(r);
                }
            }
        })
    };

    let mut seq = 0u64;
    // Per node: the last desired state sent (Down?) and its seq, and how often it changed.
    let mut last: Vec<Option<(bool, u64)>> = vec![None; MODEL_NODES];
    let mut transitions = vec![0usize; MODEL_NODES];
    let mut other_down = false;
    let mut side = Vec::new();
    for step in &steps {
        match step {
            Step::Send(list) => {
                for &(i, down) in list {
                    seq += 1;
                    send(&tx, &mut last, &mut transitions, nodes, (i, down, seq)).await?;
                }
            }
            Step::Throttle(n) => sim.faults(FaultSpec {
                throttle_requests: Some(*n),
                ..Default::default()
            }),
            Step::FailOperation => sim.faults(FaultSpec {
                fail_operations: Some(1),
                ..Default::default()
            }),
            Step::StaleEtag => {
                // Removing a property that is not set: no entry changes, the etag does.
                for lb in ["kubernetes", "kubernetes-internal"] {
                    let _ = sim.outside_write(lb, lb, &bystander.ipv4.to_string(), None);
                }
            }
            Step::Supersede(i, down) => {
                seq += 1;
                send(&tx, &mut last, &mut transitions, nodes, (*i, *down, seq)).await?;
                // The write is coalesced for a few ms, then runs for ~400 ms.
                tokio::time::sleep(Duration::from_millis(30)).await;
                other_down = !other_down;
                let state = if other_down {
                    AdminState::Down
                } else {
                    AdminState::None
                };
                let mut c = b.client.clone();
                let req = set_req(other_writer, state, WaitFor::Accepted);
                side.push(tokio::spawn(
                    async move { c.set_node_admin_state(req).await },
                ));
            }
            Step::Pause(ms) => tokio::time::sleep(Duration::from_millis(*ms)).await,
        }
    }
    for s in side {
        let _ = s.await;
    }

    // Converged: the last version of every node reported EFFECTIVE, and ARM holds it.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let done = nodes.iter().zip(&last).all(|(n, l)| match l {
            None => true,
            Some((down, s)) => {
                let effective = results.lock().iter().any(|r| {
                    phase(r) == ResultPhase::Effective
                        && r.node.as_ref().is_some_and(|x| x.name == n.name)
                        && r.version.is_some_and(|v| v.seq == *s)
                });
                effective && all_are(&sim, &cluster, n, if *down { "Down" } else { "None" })
            }
        });
        if done {
            break;
        }
        if tokio::time::Instant::now() > deadline {
            return Err(format!(
                "not converged: {:?}",
                nodes
                    .iter()
                    .map(|n| sim_states(&sim, &cluster, n))
                    .collect::<Vec<_>>()
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    for (i, n) in nodes.iter().enumerate() {
        if last[i].is_none() && sim_states(&sim, &cluster, n) != initial[i] {
            return Err(format!("{} was never sent but changed", n.name));
        }
        // Every change of an entry of this node, from the effective log.
        let t = targets(n);
        let mut per_entry: std::collections::BTreeMap<(String, String, String), usize> =
            Default::default();
        for ev in sim.effective_log() {
            if let Some(target) = ev.target.filter(|x| t.contains(x)) {
                *per_entry.entry((ev.lb, ev.pool, target)).or_default() += 1;
            }
        }
        for (entry, writes) in per_entry {
            if writes > transitions[i] {
                return Err(format!(
                    "{} entry {entry:?} changed {writes} times for {} desired changes",
                    n.name, transitions[i]
                ));
            }
        }
        // EFFECTIVE versions only grow.
        let versions: Vec<u64> = results
            .lock()
            .iter()
            .filter(|r| phase(r) == ResultPhase::Effective)
            .filter(|r| r.node.as_ref().is_some_and(|x| x.name == n.name))
            .filter_map(|r| r.version.map(|v| v.seq))
            .collect();
        if versions.windows(2).any(|w| w[1] < w[0]) {
            return Err(format!("{}: EFFECTIVE versions {versions:?}", n.name));
        }
    }
    // What the faults produced, summed over the cases (printed by the test).
    let requests = sim.requests();
    SEEN_412.fetch_add(requests.iter().filter(|r| r.status == 412).count(), Relaxed);
    SEEN_429.fetch_add(requests.iter().filter(|r| r.status == 429).count(), Relaxed);
    drop(tx);
    collector.abort();
    a.running.shutdown().await;
    b.running.shutdown().await;
    Ok(())
}

#[test]
fn the_writer_follows_the_model_through_412_429_and_canceled_operations() {
    fn prop(steps: Vec<Step>) -> TestResult {
        if steps.is_empty() {
            return TestResult::discard();
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        match rt.block_on(run(steps.clone())) {
            Ok(()) => TestResult::passed(),
            Err(e) => TestResult::error(format!("{e}\nsteps: {steps:?}")),
        }
    }
    // Each case starts a simulator and two actuators: few cases, up to 12 steps each.
    QuickCheck::new()
        .tests(6)
        .max_tests(20)
        .rng(Gen::new(12))
        .quickcheck(prop as fn(Vec<Step>) -> TestResult);
    eprintln!(
        "writer model: {} responses 412, {} responses 429",
        SEEN_412.load(Relaxed),
        SEEN_429.load(Relaxed)
    );
}
