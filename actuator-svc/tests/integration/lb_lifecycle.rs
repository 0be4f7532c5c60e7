//! A managed load balancer deleted and created again by cloud-provider-azure (the internal LB
//! goes with its last internal Service and comes back with the next one): while it is gone
//! the actuator writes the other LBs and never creates it itself; once it is back, every node
//! that should be Down is Down on it again, though the new LB came with no admin state.

use crate::common::*;
use cutover_proto::v1::*;

const INTERNAL: &str = "kubernetes-internal";

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// `node`'s entries on `lb` as (pool, state), the LB being there.
fn on_lb(
    sim: &arm_sim::ArmSim,
    cluster: &aks_fixture::Cluster,
    node: &aks_fixture::Node,
    lb: &str,
) -> Vec<String> {
    sim_states_on(sim, cluster, node, |l| l == lb)
        .into_iter()
        .map(|(_, _, s)| s)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_removed_lb_is_left_alone_and_every_down_is_written_again_once_it_is_back() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--self-heal-interval", "500ms"]).await;
    let (tx, _rx) = open_stream(&mut a, 1).await;
    let (first, second) = (&cluster.nodes[1], &cluster.nodes[2]);
    assert!(
        !on_lb(&sim, &cluster, first, INTERNAL).is_empty(),
        "the fixture puts nodes on the internal LB"
    );
    tx.send(msg(signal_message::Kind::Delta(desired(
        first,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    wait_until("first node Down", || async {
        all_are(&sim, &cluster, first, "Down")
    })
    .await;

    // The internal LB goes; a second node leaves meanwhile: its public entries are cut.
    wait_until("internal LB removed", || async {
        sim.remove_lb(INTERNAL).is_ok()
    })
    .await;
    tx.send(msg(signal_message::Kind::Delta(desired(
        second,
        AdminState::Down,
        1,
        2,
    ))))
    .await
    .unwrap();
    wait_until("second node Down on the public LB", || async {
        let s = on_lb(&sim, &cluster, second, "kubernetes");
        !s.is_empty() && s.iter().all(|x| x == "Down")
    })
    .await;
    // A few self-heal periods with the LB gone: nothing creates it.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    assert!(sim.recreate_lb(INTERNAL).is_ok(), "nobody else created it");

    // Back without admin state; both nodes are Down on it again.
    for node in [first, second] {
        wait_until("Down again on the re-created LB", || async {
            all_are(&sim, &cluster, node, "Down")
        })
        .await;
    }
    // Untouched nodes stay None.
    assert!(all_are(&sim, &cluster, &cluster.nodes[3], "None"));
}
