//! One writer per load balancer: every replica gets every node, each load balancer is assigned
//! to one live replica, a hung replica's load balancers move once its assignment has lapsed,
//! and a node is effective (one Node event) only when every load balancer is covered.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use std::collections::BTreeSet;
use std::time::Duration;

const OOS: &str = "node.kubernetes.io/out-of-service";

fn lbs() -> Vec<String> {
    lbs_n(6)
}

fn lbs_n(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("kubernetes-lb{i}")).collect()
}

/// Load balancers for the hand-over test, which needs both replicas to win a share: shares
/// come from rendezvous hashing over endpoints with random ports, so with 6 LBs one replica
/// won them all in about 1 run in 32 (CI saw it); with 16, about 1 in 32,000.
const HANDOVER_LBS: usize = 16;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_replica_hands_its_load_balancers_over_and_nodes_are_effective_once_covered() {
    let c = cluster(6).await;
    let a = FakeActuator::start("a", Mode::Effective).await;
    // b answers nothing (a replica stuck writing) and sits behind a proxy we can freeze.
    let b = FakeActuator::start("b", Mode::Silent).await;
    *a.state.load_balancers.lock() = lbs_n(HANDOVER_LBS);
    *b.state.load_balancers.lock() = lbs_n(HANDOVER_LBS);
    let proxy = FreezableProxy::start(b.addr).await;
    let svc = start(&c, "pod-a", &[a.endpoint(), proxy.endpoint()], &[]).await;
    svc.wait_ready().await;

    // Each load balancer has exactly one owner, and both replicas have a share.
    let (on_a, on_b) = eventually("disjoint shares covering everything", || async {
        let (x, y) = (a.state.assigned()?, b.state.assigned()?);
        let mut all: Vec<&String> = x.iter().chain(y.iter()).collect();
        all.sort();
        all.dedup();
        (all.len() == HANDOVER_LBS
            && x.len() + y.len() == HANDOVER_LBS
            && !x.is_empty()
            && !y.is_empty())
        .then_some((x, y))
    })
    .await;
    let epoch = a.state.assignments().last().unwrap().0.leader_epoch;
    assert!(epoch >= 1);
    assert_eq!(
        svc.metric("cutover_signal_load_balancer_owner", "").await,
        HANDOVER_LBS as f64
    );

    // Every replica receives every node's state (the untriggered ones as None, which a
    // replica without an assignment yet may already have made effective: count from here).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let effective_before = svc
        .metric("cutover_signal_results_total", "phase=\"effective\"")
        .await;
    let n = c.node_names().await;
    c.add_taint(&n[0], OOS, None, "NoExecute").await;
    for act in [&a, &b] {
        eventually("Down on both replicas", || async {
            (act.state.latest_state(&n[0]) == Some(AdminState::Down)).then_some(())
        })
        .await;
    }
    // a covers only its share: no Normal event, nothing effective yet.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        svc.metric("cutover_signal_results_total", "phase=\"effective\"")
            .await,
        effective_before
    );
    assert!(
        !c.node_events(&n[0])
            .await
            .iter()
            .any(|(_, r, _)| r == "LoadBalancerAdminStateDown")
    );

    // b hangs: keepalive notices, its share moves to a once its assignment lapsed.
    let frozen_at = tokio::time::Instant::now();
    proxy.freeze();
    let took = eventually("a holds everything", || async {
        let (x, at) = a.state.assignments().last().cloned()?;
        (x.load_balancers.len() == HANDOVER_LBS).then_some(at - frozen_at)
    })
    .await;
    println!("failover after freeze: {took:?} (shares before: a {on_a:?}, b {on_b:?})");
    // Never before b's assignment can have lapsed (valid_for 3 s after the last heartbeat,
    // sent at most 1 s before the freeze); well within 10 s.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(8), "{took:?}");
    let last_to_b = b.state.assignments().last().unwrap().1;
    assert!(
        frozen_at + took >= last_to_b + Duration::from_secs(3),
        "no overlap: handed over only after b's last assignment lapsed"
    );
    assert!(
        svc.metric("cutover_signal_assignment_failovers_total", "")
            .await
            >= on_b.len() as f64
    );

    // a re-reports with its grown share: now the node is effective, once.
    let events = eventually("Normal event", || async {
        let evs = c.node_events(&n[0]).await;
        evs.iter()
            .any(|(_, r, _)| r == "LoadBalancerAdminStateDown")
            .then_some(evs)
    })
    .await;
    let downs = events
        .iter()
        .filter(|(_, r, _)| r == "LoadBalancerAdminStateDown")
        .count();
    assert_eq!(downs, 1);
    assert_eq!(
        svc.metric("cutover_signal_results_total", "phase=\"effective\"")
            .await,
        effective_before + 1.0
    );
    let gens: BTreeSet<u64> = a
        .state
        .assignments()
        .iter()
        .map(|(x, _)| x.generation)
        .collect();
    assert!(
        gens.len() >= 2,
        "the handover is a new generation: {gens:?}"
    );
    svc.stop().await;
}

/// With a periodic resync every second, a live replica's load balancers never lapse: the
/// stream stays, and every assignment it receives names all of its share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resync_owned_lb_count_never_drops_to_zero() {
    let c = cluster(6).await;
    let a = FakeActuator::start("a", Mode::Effective).await;
    *a.state.load_balancers.lock() = lbs();
    let svc = start(&c, "pod-a", &[a.endpoint()], &["--resync-interval=1s"]).await;
    svc.wait_ready().await;
    eventually("a owns everything", || async {
        (a.state.assigned()?.len() == 6).then_some(())
    })
    .await;
    let since = tokio::time::Instant::now();
    while since.elapsed() < Duration::from_millis(3500) {
        assert_eq!(
            a.state.assigned().map(|x| x.len()),
            Some(6),
            "owned load balancers dropped during a resync"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(a.state.streams.lock().len(), 1, "resync kept the stream");
    let gaps = a
        .state
        .assignments()
        .windows(2)
        .map(|w| w[1].1 - w[0].1)
        .max()
        .unwrap();
    assert!(
        gaps < Duration::from_secs(3),
        "heartbeats within valid_for: {gaps:?}"
    );
    svc.stop().await;
}

/// An actuator's managed set changes (a multi-SLB configuration gains one LB and loses
/// another): it says so up its stream and the leader reassigns on the same streams. The added
/// LB gets an owner, the removed one leaves the plan, every LB has exactly one owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_managed_set_is_reassigned_on_the_same_streams() {
    use cutover_proto::v1::{ActuatorMessage, ManagedLoadBalancers, actuator_message};
    let c = cluster(6).await;
    let a = FakeActuator::start("a", Mode::Effective).await;
    let b = FakeActuator::start("b", Mode::Effective).await;
    *a.state.load_balancers.lock() = lbs();
    *b.state.load_balancers.lock() = lbs();
    let svc = start(&c, "pod-a", &[a.endpoint(), b.endpoint()], &[]).await;
    svc.wait_ready().await;
    let union = |want: usize| {
        let (a, b) = (a.state.clone(), b.state.clone());
        async move {
            let mut all = a.assigned()?;
            all.extend(b.assigned()?);
            all.sort();
            (all.len() == want).then_some(all)
        }
    };
    eventually("both replicas share the six LBs", || union(6)).await;
    let now: Vec<String> = (1..7).map(|i| format!("kubernetes-lb{i}")).collect();
    for f in [&a, &b] {
        let m = ActuatorMessage {
            kind: Some(actuator_message::Kind::Managed(ManagedLoadBalancers {
                load_balancers: now.clone(),
            })),
        };
        assert!(f.state.send_up(m).await);
    }
    let all = eventually("the new set assigned", || async {
        union(6).await.filter(|all| *all == now)
    })
    .await;
    assert_eq!(all, now, "lb0 left the plan, lb6 has one owner");
    assert_eq!(a.state.streams.lock().len(), 1, "a kept its stream");
    assert_eq!(b.state.streams.lock().len(), 1, "b kept its stream");
    svc.stop().await;
}
