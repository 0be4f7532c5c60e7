//! The drain gate through the actuator (issue 26): an answer that says a node is Down or None
//! is given only while ARM shows every entry in that state with its operation complete.
//! actuator-svc against arm-sim, in process, through a real tonic client (the harness of the
//! `integration` tests).

#![allow(clippy::unwrap_used)]

#[path = "integration/common.rs"]
mod common;

use common::*;
use cutover_proto::v1::*;
use std::time::Duration;
use tonic::Streaming;

const INTERNAL: &str = "kubernetes-internal";

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
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
        match m {
            Ok(Some(ActuatorMessage {
                kind: Some(actuator_message::Kind::Result(r)),
            })) if f(&r) => return Some(r),
            Ok(Some(_)) => {}
            _ => return None,
        }
    }
}

/// `GetNodeAdminState(fresh)` (what `cutoverctl wait` polls) while ARM's operations take
/// seconds: ARM answers the requested model (`provisioningState: Updating`) meanwhile, and
/// the actuator must not answer Down (or None) before ARM has applied it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_get_never_answers_a_state_before_its_operation_ends() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let mut tuning = sim.tuning();
    tuning.completion_delay_ms = 2500;
    sim.set_tuning(tuning);
    let (tx, _rx) = open_stream(&mut a, 1).await;
    let node = &cluster.nodes[1];
    let get = GetNodeAdminStateRequest {
        node: Some(node_ref(node)),
        fresh: true,
    };
    for (seq, (state, want)) in [(AdminState::Down, "Down"), (AdminState::None, "None")]
        .into_iter()
        .enumerate()
    {
        tx.send(msg(signal_message::Kind::Delta(desired(
            node,
            state,
            1,
            seq as u64 + 1,
        ))))
        .await
        .unwrap();
        let mut pending_seen = false;
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let resp = a
                .client
                .get_node_admin_state(get.clone())
                .await
                .unwrap()
                .into_inner();
            assert!(!resp.entries.is_empty());
            let all = resp.entries.iter().all(|e| e.admin_state() == state);
            // Read after the answer: ARM's effective state only moves toward `want` here.
            let in_arm = all_are(&sim, &cluster, node, want);
            assert!(
                !all || in_arm,
                "answered every entry {want} while ARM applies it: {:?} (notes {:?})",
                sim_states(&sim, &cluster, node),
                resp.notes
            );
            if resp
                .entries
                .iter()
                .any(|e| e.admin_state() == AdminState::Unspecified)
            {
                pending_seen = true;
                assert!(
                    resp.notes.iter().any(|n| n.contains("pending")),
                    "{:?}",
                    resp.notes
                );
            }
            if all {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never answered {want}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            pending_seen,
            "the operation was never seen running ({want})"
        );
    }
}

/// N3: a load balancer that reads 404 does not count as done for a Down node. A node cut
/// everywhere, then the internal LB removed: its EFFECTIVE version is reported regressed (a
/// repaired ACCEPTED), and a node cut while the LB is gone is not EFFECTIVE; once the LB is
/// re-created (with no admin state) and written, both are EFFECTIVE again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_absent_lb_keeps_a_cut_pending() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--self-heal-interval", "300ms"]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    let (first, second) = (&cluster.nodes[1], &cluster.nodes[2]);
    let of = |n: &aks_fixture::Node, seq: u64| {
        let name = n.name.clone();
        move |r: &NodeResult| {
            r.node.as_ref().is_some_and(|x| x.name == name)
                && r.version.is_some_and(|v| v.seq == seq)
        }
    };
    tx.send(msg(signal_message::Kind::Delta(desired(
        first,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    let first_is = of(first, 1);
    result_where(&mut rx, WAIT, |r| {
        first_is(r) && phase(r) == ResultPhase::Effective
    })
    .await
    .expect("first node effective");

    sim.remove_lb(INTERNAL).unwrap();
    let regressed = result_where(&mut rx, Duration::from_secs(10), |r| {
        first_is(r) && phase(r) == ResultPhase::Accepted && r.repaired
    })
    .await
    .expect("the effective cut is reported regressed when its LB reads 404");
    assert!(regressed.reason.contains("404"), "{}", regressed.reason);

    tx.send(msg(signal_message::Kind::Delta(desired(
        second,
        AdminState::Down,
        1,
        2,
    ))))
    .await
    .unwrap();
    let second_is = of(second, 2);
    result_where(&mut rx, WAIT, |r| {
        second_is(r) && phase(r) == ResultPhase::Accepted
    })
    .await
    .expect("second node accepted");
    assert!(
        result_where(&mut rx, Duration::from_secs(2), |r| {
            (second_is(r) || first_is(r)) && phase(r) == ResultPhase::Effective
        })
        .await
        .is_none(),
        "EFFECTIVE while a managed LB reads 404"
    );

    sim.recreate_lb(INTERNAL).unwrap();
    let mut effective = [false, false];
    while effective != [true, true] {
        let r = result_where(&mut rx, WAIT, |r| phase(r) == ResultPhase::Effective)
            .await
            .expect("effective again once the LB is back");
        effective[0] |= first_is(&r);
        effective[1] |= second_is(&r);
    }
    assert!(all_are(&sim, &cluster, first, "Down"));
    assert!(all_are(&sim, &cluster, second, "Down"));
}
