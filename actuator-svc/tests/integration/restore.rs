//! Level-triggered restore and results that reach signal-svc: an entry Down for a node whose
//! desired state is None is set back whatever put it there; entries of VMs that are not
//! cluster nodes are left alone; unconfirmed results are sent again.

use crate::common::*;
use arm_sim::model::AdminState as SimAdmin;
use cutover_proto::v1::*;
use std::time::Duration;
use tonic::Streaming;

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// The name of `node`'s entry in every (lb, pool) of the simulator that has one.
fn entries_of(
    sim: &arm_sim::ArmSim,
    cluster: &aks_fixture::Cluster,
    node: &aks_fixture::Node,
) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for (lb, pool) in cluster.pools_of(&node.name) {
        if pool.outbound_only {
            continue;
        }
        let snap = sim.pool(&lb.name, &pool.name).expect("pool exists");
        let ips = [node.ipv4.to_string(), node.ipv6.to_string()];
        let ipc = node
            .ip_configuration_id(
                &cluster.subscription_id,
                &cluster.resource_group,
                pool.family,
            )
            .to_ascii_lowercase();
        for e in &snap.entries {
            let by_nic = e
                .nic_ip_configuration
                .as_deref()
                .is_some_and(|id| id.to_ascii_lowercase() == ipc);
            if by_nic || e.ip_address.as_ref().is_some_and(|ip| ips.contains(ip)) {
                out.push((lb.name.clone(), pool.name.clone(), e.name.clone()));
            }
        }
    }
    out
}

/// Results on the stream until one satisfies `f` (or the wait ends).
async fn result_where(
    inbound: &mut Streaming<ActuatorMessage>,
    within: Duration,
    f: impl Fn(&NodeResult) -> bool,
) -> Option<NodeResult> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let m = tokio::time::timeout_at(deadline, inbound.message())
            .await
            .ok()?;
        if let Ok(Some(ActuatorMessage {
            kind: Some(actuator_message::Kind::Result(r)),
        })) = m
            && f(&r)
        {
            return Some(r);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_entry_set_down_from_outside_is_restored_and_non_node_vms_are_left_alone() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--self-heal-interval", "500ms"]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    let (node, stranger) = (&cluster.nodes[1], &cluster.nodes[6]);
    // Cut and restore: the restore is effective, so nothing asserts the node any more.
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    wait_until("node Down", || async {
        all_are(&sim, &cluster, node, "Down")
    })
    .await;
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::None,
        1,
        2,
    ))))
    .await
    .unwrap();
    result_where(&mut rx, WAIT, |r| {
        r.version.is_some_and(|v| v.seq == 2) && phase(r) == ResultPhase::Effective
    })
    .await
    .expect("restore effective");

    // An outside writer sets one entry of the node Down, and one of a VM the stream never
    // named (not a cluster node as far as the actuator knows).
    let (lb, pool, entry) = entries_of(&sim, &cluster, node).remove(0);
    sim.outside_write(&lb, &pool, &entry, Some(SimAdmin::Down))
        .unwrap();
    let (slb, spool, sentry) = entries_of(&sim, &cluster, stranger).remove(0);
    sim.outside_write(&slb, &spool, &sentry, Some(SimAdmin::Down))
        .unwrap();
    assert!(!all_are(&sim, &cluster, node, "None"));

    // Repaired within a few self-heal periods, reported as a repair of the same version.
    let repaired = result_where(&mut rx, Duration::from_secs(10), |r| {
        r.node.as_ref().is_some_and(|n| n.name == node.name)
            && phase(r) == ResultPhase::Effective
            && r.repaired
    })
    .await
    .expect("a repaired EFFECTIVE result");
    assert_eq!(repaired.version.unwrap().seq, 2);
    assert!(
        all_are(&sim, &cluster, node, "None"),
        "{:?}",
        sim_states(&sim, &cluster, node)
    );
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        metrics.contains("cutover_actuator_restored_total"),
        "{metrics}"
    );

    // The stranger's entry stays Down through more self-heal rounds.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let snap = sim.pool(&slb, &spool).unwrap();
    let e = snap.entries.iter().find(|e| e.name == sentry).unwrap();
    assert_eq!(e.effective, SimAdmin::Down, "a non-node entry was touched");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn results_are_sent_again_until_signal_svc_confirms_them() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    let node = &cluster.nodes[2];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    let effective = |r: &NodeResult| phase(r) == ResultPhase::Effective;
    result_where(&mut rx, WAIT, effective)
        .await
        .expect("effective");
    // Not confirmed (as if the result was lost): it comes again.
    result_where(&mut rx, Duration::from_secs(8), effective)
        .await
        .expect("the unconfirmed result is sent again");
    // Confirmed by the fleet status: no more.
    tx.send(msg(signal_message::Kind::NodeStatus(NodeStatus {
        node: Some(node_ref(node)),
        version: Some(Version { epoch: 1, seq: 1 }),
        phase: ResultPhase::Effective as i32,
    })))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        result_where(&mut rx, Duration::from_secs(7), effective)
            .await
            .is_none(),
        "a confirmed result was sent again"
    );
}
