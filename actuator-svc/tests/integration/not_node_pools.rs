//! Pools that are not node pools are never written (issue 21 item 4): a ServiceGateway load
//! balancer (SKU `Service`) next to the node LB. A cut writes the node LB only, answers say
//! why the other is left alone, and the metric names it.

use crate::common::*;
use cutover_proto::v1::*;
use serde_json::json;

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_gateway_lb_is_never_written_and_reported() {
    let (sim, cluster) = start_sim_edited(|lbs| {
        seed_lb(lbs, "kubernetes-internal").sku = Some(json!({"name": "Service"}));
    })
    .await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    let node = &cluster.nodes[3];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    // Effective once the node LB's entries are Down: the other LB holds nothing to write.
    loop {
        let m = tokio::time::timeout(WAIT, rx.message())
            .await
            .expect("a result in time")
            .unwrap()
            .expect("stream open");
        if let Some(actuator_message::Kind::Result(r)) = m.kind
            && phase(&r) == ResultPhase::Effective
        {
            break;
        }
    }
    let states = sim_states(&sim, &cluster, node);
    assert!(!states.is_empty());
    for (lb, pool, state) in &states {
        let want = if lb == "kubernetes" { "Down" } else { "None" };
        assert_eq!(state, want, "{lb}/{pool}: {states:?}");
    }
    assert_eq!(
        puts(&sim, "kubernetes-internal"),
        0,
        "the ServiceGateway LB was written"
    );

    let got = a
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            fresh: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        got.entries.iter().all(|e| e.load_balancer == "kubernetes"),
        "{:?}",
        got.entries
    );
    assert!(
        got.notes
            .iter()
            .any(|n| n.contains("kubernetes-internal") && n.contains("ServiceGateway")),
        "{:?}",
        got.notes
    );
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        metrics.lines().any(
            |l| l.starts_with("cutover_actuator_pool_not_written_entries{")
                && l.contains("load_balancer=\"kubernetes-internal\"")
                && l.contains("reason=\"service_gateway\"")
        ),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_only_nat_rules_use_keeps_its_entries_through_a_cut() {
    let (sim, cluster) = start_sim_edited(|lbs| add_nat_only_pool(lbs, "ssh-nat")).await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, _rx) = open_stream(&mut a, 1).await;
    let node = &cluster.nodes[3];
    let nat_entry = |sim: &arm_sim::ArmSim| {
        let snap = sim.pool("kubernetes", "ssh-nat").expect("pool exists");
        let ipc = node
            .ip_configuration_id(
                &cluster.subscription_id,
                &cluster.resource_group,
                cluster.load_balancers[0].pools[0].family,
            )
            .to_ascii_lowercase();
        snap.entries
            .into_iter()
            .find(|e| {
                e.nic_ip_configuration
                    .as_deref()
                    .is_some_and(|id| id.to_ascii_lowercase() == ipc)
            })
            .expect("the node has an entry in the NAT pool")
    };
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
    assert_eq!(
        nat_entry(&sim).effective,
        arm_sim::model::AdminState::None,
        "the NAT-only pool was written"
    );
}
