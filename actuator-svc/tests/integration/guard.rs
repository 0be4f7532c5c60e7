//! The blast-radius guard end to end: every node tainted at once takes at most the share of
//! each pool out of rotation, the first signalled first; the others are reported FAILED (will
//! retry) and go Down by themselves once held nodes are restored.

use crate::common::*;
use cutover_proto::v1::*;
use std::collections::{BTreeMap, BTreeSet};
use tonic::Streaming;

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// Reads results until every `effective` name has an EFFECTIVE result and every `failed`
/// name a FAILED one; returns the FAILED results by node name.
async fn collect(
    inbound: &mut Streaming<ActuatorMessage>,
    effective: &[&str],
    failed: &[&str],
) -> BTreeMap<String, NodeResult> {
    let mut seen_effective = BTreeSet::new();
    let mut seen_failed = BTreeMap::new();
    while effective.iter().any(|n| !seen_effective.contains(*n))
        || failed.iter().any(|n| !seen_failed.contains_key(*n))
    {
        let m = tokio::time::timeout(WAIT, inbound.message())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "results: effective {seen_effective:?}, failed {:?}",
                    seen_failed.keys()
                )
            })
            .unwrap()
            .expect("stream open");
        let Some(actuator_message::Kind::Result(r)) = m.kind else {
            continue;
        };
        let name = r.node.as_ref().unwrap().name.clone();
        match phase(&r) {
            ResultPhase::Effective => {
                seen_effective.insert(name);
            }
            ResultPhase::Failed => {
                seen_failed.insert(name, r);
            }
            _ => {}
        }
    }
    seen_failed
}

fn gauge(metrics: &str, lb: &str) -> i64 {
    let key = format!("cutover_actuator_guard_refused_nodes{{load_balancer=\"{lb}\"}}");
    metrics
        .lines()
        .find(|l| l.starts_with(&key))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key} in\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_node_tainted_at_once_cuts_only_the_share_first_signalled_first() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut inbound) = open_stream(&mut a, 1).await;
    let n = cluster.nodes.len();
    assert_eq!(n, 12);
    for (i, node) in cluster.nodes.iter().enumerate() {
        tx.send(msg(signal_message::Kind::Delta(desired(
            node,
            AdminState::Down,
            1,
            i as u64 + 1,
        ))))
        .await
        .unwrap();
    }
    // Every pool holds the 12 nodes: the default share 0.5 lets 6 go Down, the first six.
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    let failed = collect(&mut inbound, &names[..6], &names[6..]).await;
    for (name, r) in &failed {
        assert!(
            r.reason.starts_with("blast-radius guard:"),
            "{name}: {}",
            r.reason
        );
        assert!(r.will_retry, "{name}: the guard retries by itself");
    }
    for node in &cluster.nodes[..6] {
        assert!(all_are(&sim, &cluster, node, "Down"), "{}", node.name);
    }
    for node in &cluster.nodes[6..] {
        assert!(all_are(&sim, &cluster, node, "None"), "{}", node.name);
    }
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert_eq!(gauge(&metrics, "kubernetes"), 6);
    assert_eq!(gauge(&metrics, "kubernetes-internal"), 6);
    // The RPC answer says why the node stays in rotation.
    let got = a
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(node_ref(&cluster.nodes[7])),
            fresh: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        got.notes
            .iter()
            .any(|n| n.starts_with("blast-radius guard:")),
        "{:?}",
        got.notes
    );

    // Two held nodes are restored: the next two refused ones go Down without a new signal.
    for (i, node) in cluster.nodes[..2].iter().enumerate() {
        tx.send(msg(signal_message::Kind::Delta(desired(
            node,
            AdminState::None,
            1,
            n as u64 + 1 + i as u64,
        ))))
        .await
        .unwrap();
    }
    collect(&mut inbound, &[names[0], names[1], names[6], names[7]], &[]).await;
    let down: Vec<&str> = cluster
        .nodes
        .iter()
        .filter(|node| all_are(&sim, &cluster, node, "Down"))
        .map(|node| node.name.as_str())
        .collect();
    assert_eq!(down, names[2..8].to_vec());
    assert!(all_are(&sim, &cluster, &cluster.nodes[0], "None"));
    // The guard never let more than the share be Down: replay ARM's effective log per pool.
    let mut state: BTreeMap<(String, String), BTreeSet<String>> = BTreeMap::new();
    for e in sim.effective_log() {
        let set = state.entry((e.lb.clone(), e.pool.clone())).or_default();
        if e.value == arm_sim::model::AdminState::Down {
            set.insert(e.entry.clone());
        } else {
            set.remove(&e.entry);
        }
        assert!(set.len() <= 6, "{} Down in {}/{}", set.len(), e.lb, e.pool);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_override_lets_every_entry_go_down() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--max-down-share", "1.0"]).await;
    let (tx, mut inbound) = open_stream(&mut a, 1).await;
    for (i, node) in cluster.nodes.iter().enumerate() {
        tx.send(msg(signal_message::Kind::Delta(desired(
            node,
            AdminState::Down,
            1,
            i as u64 + 1,
        ))))
        .await
        .unwrap();
    }
    let names: Vec<&str> = cluster.nodes.iter().map(|n| n.name.as_str()).collect();
    collect(&mut inbound, &names, &[]).await;
    assert!(
        cluster
            .nodes
            .iter()
            .all(|n| all_are(&sim, &cluster, n, "Down"))
    );
}
