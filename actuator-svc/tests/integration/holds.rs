//! Durable tool holds: a Set on one replica goes up the signal-svc leader's stream as a
//! `HoldRequest`; the hold comes back down as an ordinary desired state (on every replica);
//! the wait ends on the fleet-wide `NodeStatus`, whoever writes the load balancers. Without
//! a stream the hold stays in memory and the answer says so.

use crate::common::*;
use cutover_proto::v1::*;
use std::time::Duration;
use tonic::Streaming;

const HOLD_KEY: &str = "cutover.io/hold";

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// An assignment of no load balancer: this replica writes nothing.
fn writes_nothing(epoch: u64) -> SignalMessage {
    msg(signal_message::Kind::Assignment(Assignment {
        leader_epoch: epoch,
        generation: 1,
        load_balancers: vec![],
        valid_for: Some(prost_types::Duration {
            seconds: 30,
            nanos: 0,
        }),
        // No renewal echoed: valid from the HelloAck.
        echo: 0,
    }))
}

/// Waits for the stream's HelloAck: from then on the replica relays holds up this stream.
async fn acked(inbound: &mut Streaming<ActuatorMessage>) {
    loop {
        let m = tokio::time::timeout(WAIT, inbound.message())
            .await
            .expect("a HelloAck within the wait")
            .unwrap()
            .expect("stream open");
        if let Some(actuator_message::Kind::HelloAck(_)) = m.kind {
            return;
        }
    }
}

/// The next hold request on the stream, skipping results.
async fn hold_request(inbound: &mut Streaming<ActuatorMessage>) -> HoldRequest {
    loop {
        let m = tokio::time::timeout(WAIT, inbound.message())
            .await
            .expect("a hold request within the wait")
            .unwrap()
            .expect("stream open");
        if let Some(actuator_message::Kind::HoldRequest(r)) = m.kind {
            return r;
        }
    }
}

fn held_delta(node: &aks_fixture::Node, req: &HoldRequest, seq: u64) -> SignalMessage {
    let mut d = desired(node, AdminState::Down, 5, seq);
    d.reasons = vec![HOLD_KEY.into()];
    d.hold = Some(Hold {
        reason: req.reason.clone(),
        requester: req.requester.clone(),
        since: Some(prost_types::Timestamp {
            seconds: 1_795_000_000,
            nanos: 0,
        }),
    });
    msg(signal_message::Kind::Delta(d))
}

fn status(node: &aks_fixture::Node, seq: u64, phase: ResultPhase) -> SignalMessage {
    msg(signal_message::Kind::NodeStatus(NodeStatus {
        node: Some(NodeRef {
            name: node.name.clone(),
            uid: node.uid.clone(),
            ..NodeRef::default()
        }),
        version: Some(Version { epoch: 5, seq }),
        phase: phase as i32,
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_goes_up_the_stream_and_the_wait_ends_on_the_fleet_status() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--identity", "a"]).await;
    let mut b = start_actuator(&sim, &cluster, &["--identity", "b"]).await;
    let (ta, mut ra) = open_stream(&mut a, 5).await;
    let (tb, mut rb) = open_stream(&mut b, 5).await;
    acked(&mut ra).await;
    acked(&mut rb).await;
    for tx in [&ta, &tb] {
        tx.send(writes_nothing(5)).await.unwrap();
    }
    let node = &cluster.nodes[2];
    let set = tokio::spawn({
        let mut client = a.client.clone();
        let req = set_req(node, AdminState::Down, WaitFor::Effective);
        async move { client.set_node_admin_state(req).await }
    });

    let req = hold_request(&mut ra).await;
    assert!(req.hold);
    assert_eq!(req.node.as_ref().unwrap().name, node.name);
    assert_eq!(req.reason, "test");
    assert!(!req.requester.is_empty(), "the tool's identity travels");
    ta.send(msg(signal_message::Kind::HoldAck(HoldAck {
        request_id: req.request_id.clone(),
        ok: true,
        error: String::new(),
        node_uid: node.uid.clone(),
    })))
    .await
    .unwrap();
    // signal-svc fans the hold out to every replica as an ordinary desired state.
    for tx in [&ta, &tb] {
        tx.send(held_delta(node, &req, 1)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !set.is_finished(),
        "this replica writes no LB: only the fleet status can end the wait"
    );
    assert_eq!(
        puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal"),
        0,
        "a stream hold is written by the LB owners only"
    );
    ta.send(status(node, 1, ResultPhase::Accepted))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!set.is_finished(), "ACCEPTED is not EFFECTIVE");
    ta.send(status(node, 1, ResultPhase::Effective))
        .await
        .unwrap();
    let resp = tokio::time::timeout(WAIT, set)
        .await
        .expect("the wait ends on NodeStatus")
        .unwrap()
        .unwrap()
        .into_inner();
    assert!(!resp.timed_out);
    let r = resp.result.unwrap();
    assert_eq!(phase(&r), ResultPhase::Effective);
    assert_eq!(r.version, Some(Version { epoch: 5, seq: 1 }));
    assert!(!r.reason.contains("memory only"), "{}", r.reason);
    assert_eq!(r.entries.len(), 4, "every entry of the node: {r:?}");
    assert!(
        r.entries
            .iter()
            .all(|e| e.admin_state == AdminState::Down as i32),
        "{r:?}"
    );

    // Both replicas list it as a hold, with who set it; effective only where the fleet
    // status said so (b has not received one yet).
    for (replica, effective) in [(&mut a, true), (&mut b, false)] {
        let list = replica
            .client
            .list_held_entries(ListHeldEntriesRequest::default())
            .await
            .unwrap()
            .into_inner();
        let held: Vec<_> = list
            .nodes
            .iter()
            .filter(|h| h.node.as_ref().unwrap().name == node.name)
            .collect();
        assert_eq!(held.len(), 1, "{list:?}");
        assert_eq!(held[0].source, "hold");
        assert_eq!(held[0].requester, req.requester);
        assert_eq!(
            held[0].reasons,
            vec!["test".to_string()],
            "the tool's reason"
        );
        assert_eq!(
            held[0].since.unwrap().seconds,
            1_795_000_000,
            "the time the hold was set, not when this replica heard of it"
        );
        assert_eq!(held[0].effective, effective);
    }
    let get = b
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            fresh: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(get.desired, AdminState::Down as i32);
    assert!(
        get.notes
            .iter()
            .any(|n| n.contains("held down by") && n.contains("durable")),
        "{:?}",
        get.notes
    );

    // Released through the other replica: a HoldRequest{hold: false} up b's stream.
    let release = tokio::spawn({
        let mut client = b.client.clone();
        let req = set_req(node, AdminState::None, WaitFor::Unspecified);
        async move { client.set_node_admin_state(req).await }
    });
    let req = hold_request(&mut rb).await;
    assert!(!req.hold);
    assert_eq!(req.node.as_ref().unwrap().name, node.name);
    tb.send(msg(signal_message::Kind::HoldAck(HoldAck {
        request_id: req.request_id,
        ok: true,
        error: String::new(),
        node_uid: node.uid.clone(),
    })))
    .await
    .unwrap();
    let resp = tokio::time::timeout(WAIT, release)
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.result.unwrap().desired,
        AdminState::None as i32,
        "acknowledged; the change arrives as a delta"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_hold_is_an_error_and_without_a_stream_the_hold_says_memory_only_until_the_first_stream()
 {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[4];

    // Alone: the hold is kept here and the answer says so.
    let resp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    let r = resp.result.unwrap();
    assert_eq!(phase(&r), ResultPhase::Effective);
    assert!(r.reason.contains("memory only"), "{}", r.reason);
    assert!(all_are(&sim, &cluster, node, "Down"));
    let list = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(list.nodes.len(), 1);
    assert_eq!(list.nodes[0].source, "tool");
    assert!(!list.nodes[0].requester.is_empty());

    // The first stream ends every memory-only hold: from now on the leader's stream owns
    // the node's desired state (a hold kept here would make this replica write load
    // balancers another replica owns), and the node goes back to what the stream says.
    let (tx, mut rx) = open_stream(&mut a, 5).await;
    acked(&mut rx).await;
    let list = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(
        list.nodes.iter().all(|n| n.source != "tool"),
        "{:?}",
        list.nodes
    );
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::None,
        5,
        1,
    ))))
    .await
    .unwrap();
    wait_until("the memory-only hold's entries back to None", || async {
        all_are(&sim, &cluster, node, "None")
    })
    .await;

    // With a stream, signal-svc's refusal comes back as the RPC's error.
    let set = tokio::spawn({
        let mut client = a.client.clone();
        let req = set_req(&cluster.nodes[5], AdminState::Down, WaitFor::Effective);
        async move { client.set_node_admin_state(req).await }
    });
    let req = hold_request(&mut rx).await;
    tx.send(msg(signal_message::Kind::HoldAck(HoldAck {
        request_id: req.request_id,
        ok: false,
        error: "unknown node aks-x".into(),
        node_uid: String::new(),
    })))
    .await
    .unwrap();
    let err = tokio::time::timeout(WAIT, set)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
    assert!(err.message().contains("unknown node"), "{err:?}");
}
