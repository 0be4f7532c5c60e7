//! Durable tool holds against kube-sim: an actuator's `HoldRequest` becomes the Node
//! annotation `cutover.io/hold`, the hold comes back down every stream as a `Down` delta, the
//! fleet-wide `NodeStatus` follows the results, and a release removes it again.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::{
    ActuatorMessage, AdminState, HoldAck, HoldRequest, NodeRef, ResultPhase, actuator_message,
};

const HOLD: &str = "cutover.io/hold";

fn request(id: &str, node: &str, hold: bool, reason: &str) -> ActuatorMessage {
    ActuatorMessage {
        kind: Some(actuator_message::Kind::HoldRequest(HoldRequest {
            request_id: id.into(),
            node: Some(NodeRef {
                name: node.into(),
                ..NodeRef::default()
            }),
            hold,
            reason: reason.into(),
            requester: "spiffe://ops/cutoverctl".into(),
        })),
    }
}

async fn ack(act: &FakeActuator, id: &str) -> HoldAck {
    eventually(&format!("hold ack {id}"), || async {
        act.state
            .hold_acks()
            .into_iter()
            .find(|a| a.request_id == id)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_request_patches_the_node_and_the_delta_and_status_follow() {
    let c = cluster(8).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    eventually("the snapshot received", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    let names = c.node_names().await;
    let node = &names[1];
    let uid = c.uid(node).await;

    assert!(
        act.state
            .send_up(request("r1", node, true, "ticket 7"))
            .await
    );
    let a = ack(&act, "r1").await;
    assert!(a.ok, "{a:?}");
    assert_eq!(a.node_uid, uid);
    // Stored on the Node, where every signal-svc replica (and a restarted one) reads it.
    let stored = c.node(node).await.unwrap().metadata.annotations.unwrap()[HOLD].clone();
    let v: serde_json::Value = serde_json::from_str(&stored).unwrap();
    assert_eq!(v["reason"], "ticket 7");
    assert_eq!(v["by"], "spiffe://ops/cutoverctl");
    assert!(
        v["since"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .is_ok()
    );

    let down = eventually("the hold's Down delta", || async {
        act.state
            .deltas(node)
            .into_iter()
            .find(|d| d.desired == AdminState::Down as i32)
    })
    .await;
    assert_eq!(down.reasons, vec![HOLD.to_string()]);
    let hold = down.hold.clone().unwrap();
    assert_eq!(
        (hold.reason.as_str(), hold.requester.as_str()),
        ("ticket 7", "spiffe://ops/cutoverctl")
    );
    let version = down.version.unwrap();
    eventually("the fleet-wide EFFECTIVE status", || async {
        act.state
            .node_statuses(node)
            .contains(&(version, ResultPhase::Effective))
            .then_some(())
    })
    .await;

    // The same hold again changes nothing on the Node (its `since` stays).
    assert!(
        act.state
            .send_up(request("r2", node, true, "ticket 7"))
            .await
    );
    assert!(ack(&act, "r2").await.ok);
    let again = c.node(node).await.unwrap().metadata.annotations.unwrap()[HOLD].clone();
    assert_eq!(again, stored);

    // Refusals: bad input and unknown nodes never reach a patch.
    assert!(
        act.state
            .send_up(request("r3", "Bad_Name", true, "x"))
            .await
    );
    let bad = ack(&act, "r3").await;
    assert!(!bad.ok && bad.error.starts_with("invalid"), "{bad:?}");
    assert!(
        act.state
            .send_up(request("r4", "no-such-node", true, "x"))
            .await
    );
    let unknown = ack(&act, "r4").await;
    assert!(
        !unknown.ok && unknown.error.starts_with("unknown node"),
        "{unknown:?}"
    );

    // Release: the annotation goes, the node follows its (absent) taints again.
    assert!(act.state.send_up(request("r5", node, false, "")).await);
    assert!(ack(&act, "r5").await.ok);
    let annotations = c
        .node(node)
        .await
        .unwrap()
        .metadata
        .annotations
        .unwrap_or_default();
    assert!(!annotations.contains_key(HOLD), "{annotations:?}");
    eventually("the release's None delta", || async {
        act.state
            .deltas(node)
            .into_iter()
            .rev()
            .find(|d| d.desired == AdminState::None as i32 && d.hold.is_none())
    })
    .await;
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_survives_a_restart_of_signal_svc_and_reaches_a_new_stream() {
    let c = cluster(8).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    eventually("a stream to send up", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    assert!(
        act.state
            .send_up(request("r1", node, true, "disk swap"))
            .await
    );
    assert!(ack(&act, "r1").await.ok);
    svc.stop().await;

    // A new process knows the hold from the Node alone, and tells a new stream the fleet
    // phase it reached (the late stream missed the broadcast).
    let before = act.state.completed_snapshots();
    let svc = start(&c, "pod-b", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let state = eventually("the hold in the new snapshot", || async {
        (act.state.completed_snapshots() > before).then_some(())?;
        act.state
            .states()
            .into_iter()
            .rev()
            .find(|(d, _)| d.node.as_ref().is_some_and(|n| &n.name == node))
            .map(|(d, _)| d)
    })
    .await;
    assert_eq!(state.desired, AdminState::Down as i32);
    assert_eq!(state.hold.unwrap().reason, "disk swap");
    let version = state.version.unwrap();
    eventually("the EFFECTIVE status of the new version", || async {
        act.state
            .node_statuses(node)
            .contains(&(version, ResultPhase::Effective))
            .then_some(())
    })
    .await;
    svc.stop().await;
}
