//! The desired-state stream.

use crate::common::*;
use cutover_proto::v1::*;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Code, Streaming};

fn hello(epoch: u64) -> SignalMessage {
    SignalMessage {
        kind: Some(signal_message::Kind::Hello(Hello {
            cluster_name: "kubernetes".into(),
            sender_identity: "signal-0".into(),
            leader_epoch: epoch,
            // One fake signal-svc process throughout.
            incarnation: 1,
        })),
    }
}

fn snapshot(nodes: Vec<NodeDesiredState>) -> SignalMessage {
    SignalMessage {
        kind: Some(signal_message::Kind::Snapshot(Snapshot { nodes })),
    }
}

fn end(count: u64) -> SignalMessage {
    SignalMessage {
        kind: Some(signal_message::Kind::SnapshotEnd(SnapshotEnd {
            node_count: count,
        })),
    }
}

fn delta(d: NodeDesiredState) -> SignalMessage {
    SignalMessage {
        kind: Some(signal_message::Kind::Delta(d)),
    }
}

async fn open(a: &mut Actuator) -> (mpsc::Sender<SignalMessage>, Streaming<ActuatorMessage>) {
    let (tx, rx) = mpsc::channel(64);
    let inbound = a
        .client
        .stream_desired_states(ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    (tx, inbound)
}

async fn next(inbound: &mut Streaming<ActuatorMessage>) -> Result<ActuatorMessage, tonic::Status> {
    match tokio::time::timeout(WAIT, inbound.message())
        .await
        .expect("message within the wait")
    {
        Ok(Some(m)) => Ok(m),
        Ok(None) => Err(tonic::Status::cancelled("stream ended")),
        Err(s) => Err(s),
    }
}

/// Collects results until every (node, seq) in `want` reached EFFECTIVE.
async fn until_effective(
    inbound: &mut Streaming<ActuatorMessage>,
    want: &[(&str, u64)],
) -> Vec<NodeResult> {
    let mut all = Vec::new();
    let mut done = std::collections::HashSet::new();
    while done.len() < want.len() {
        let m = next(inbound).await.unwrap();
        let Some(actuator_message::Kind::Result(r)) = m.kind else {
            panic!("unexpected {m:?}")
        };
        let key = (
            r.node.as_ref().unwrap().name.clone(),
            r.version.unwrap().seq,
        );
        if phase(&r) == ResultPhase::Effective
            && want.iter().any(|(n, s)| *n == key.0 && *s == key.1)
        {
            done.insert(key);
        }
        all.push(r);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_then_deltas_with_stale_versions_dropped() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (n1, n2) = (&cluster.nodes[3], &cluster.nodes[9]);
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(7)).await.unwrap();
    let Some(actuator_message::Kind::HelloAck(ack)) = next(&mut inbound).await.unwrap().kind else {
        panic!("no ack")
    };
    assert_eq!(ack.actuator_identity, "test-actuator");
    assert_eq!(
        ack.load_balancers,
        vec!["kubernetes", "kubernetes-internal"]
    );

    tx.send(snapshot(vec![desired(n1, AdminState::Down, 7, 1)]))
        .await
        .unwrap();
    tx.send(snapshot(vec![desired(n2, AdminState::Down, 7, 2)]))
        .await
        .unwrap();
    tx.send(end(2)).await.unwrap();
    let results = until_effective(&mut inbound, &[(&n1.name, 1), (&n2.name, 2)]).await;
    for n in [n1, n2] {
        let phases: Vec<_> = results
            .iter()
            .filter(|r| r.node.as_ref().unwrap().name == n.name)
            .map(phase)
            .collect();
        assert_eq!(
            phases,
            vec![ResultPhase::Accepted, ResultPhase::Effective],
            "{}",
            n.name
        );
        let eff = results
            .iter()
            .find(|r| r.node.as_ref().unwrap().name == n.name && phase(r) == ResultPhase::Effective)
            .unwrap();
        assert_eq!(eff.entries.len(), 4);
        assert!(eff.received_at.is_some() && eff.at.is_some());
        assert!(all_are(&sim, &cluster, n, "Down"));
    }
    let writes_before = puts(&sim, "kubernetes");
    // An older version of n1 (a late message) is dropped: no write, no result.
    tx.send(delta(desired(n1, AdminState::None, 7, 0)))
        .await
        .unwrap();
    // The newest version restores n2.
    tx.send(delta(desired(n2, AdminState::None, 7, 3)))
        .await
        .unwrap();
    let results = until_effective(&mut inbound, &[(&n2.name, 3)]).await;
    assert!(
        results
            .iter()
            .all(|r| r.node.as_ref().unwrap().name == n2.name),
        "no result for the stale n1 version: {results:?}"
    );
    assert!(all_are(&sim, &cluster, n1, "Down"));
    assert!(all_are(&sim, &cluster, n2, "None"));
    assert!(puts(&sim, "kubernetes") > writes_before);

    // Forget: n1 is no longer asserted, and nothing is written for it.
    tx.send(SignalMessage {
        kind: Some(signal_message::Kind::Forget(Forget {
            node: Some(node_ref(n1)),
            version: Some(Version { epoch: 7, seq: 4 }),
        })),
    })
    .await
    .unwrap();
    wait_until("n1 forgotten", || {
        let mut c = a.client.clone();
        async move {
            c.list_held_entries(ListHeldEntriesRequest::default())
                .await
                .unwrap()
                .into_inner()
                .nodes
                .is_empty()
        }
    })
    .await;
    assert!(all_are(&sim, &cluster, n1, "Down"), "Forget writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protocol_violations_and_deposed_leaders_are_refused() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let n = &cluster.nodes[0];

    // First message not a hello.
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(end(0)).await.unwrap();
    let e = next(&mut inbound).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.message().starts_with("hello"), "{}", e.message());

    // Another cluster.
    let (tx, mut inbound) = open(&mut a).await;
    let mut h = hello(1);
    if let Some(signal_message::Kind::Hello(h)) = h.kind.as_mut() {
        h.cluster_name = "other".into();
    }
    tx.send(h).await.unwrap();
    assert_eq!(
        next(&mut inbound).await.unwrap_err().code(),
        Code::FailedPrecondition
    );

    // An invalid node in a snapshot batch: refused, nothing of the batch applied.
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(5)).await.unwrap();
    next(&mut inbound).await.unwrap();
    let mut bad = desired(&cluster.nodes[1], AdminState::Down, 5, 2);
    bad.node.as_mut().unwrap().uid.clear();
    tx.send(snapshot(vec![desired(n, AdminState::Down, 5, 1), bad]))
        .await
        .unwrap();
    let e = next(&mut inbound).await.unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert_eq!(e.message(), "snapshot.nodes[1].node.uid: required");
    let held = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.nodes.is_empty());

    // Delta before snapshot_end.
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(5)).await.unwrap();
    next(&mut inbound).await.unwrap();
    tx.send(delta(desired(n, AdminState::Down, 5, 3)))
        .await
        .unwrap();
    assert!(
        next(&mut inbound)
            .await
            .unwrap_err()
            .message()
            .starts_with("delta")
    );

    // A newer leader (epoch 6) deposes epoch 5: its open stream is cut at its next message and
    // a new epoch-5 hello is refused.
    let (old_tx, mut old_in) = open(&mut a).await;
    old_tx.send(hello(5)).await.unwrap();
    next(&mut old_in).await.unwrap();
    let (new_tx, mut new_in) = open(&mut a).await;
    new_tx.send(hello(6)).await.unwrap();
    next(&mut new_in).await.unwrap();
    old_tx.send(end(0)).await.unwrap();
    let e = next(&mut old_in).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(5)).await.unwrap();
    let e = next(&mut inbound).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition);
    assert!(e.message().contains("leader_epoch"), "{}", e.message());

    // The Lease deleted and created again by a signal-svc process that never saw it: the
    // accepted epoch 6 from another process is refused too, naming 6 to raise above (its
    // versions would restart at 1 and every one be dropped as stale).
    let (tx, mut inbound) = open(&mut a).await;
    let mut other = hello(6);
    if let Some(signal_message::Kind::Hello(h)) = other.kind.as_mut() {
        h.incarnation = 2;
    }
    tx.send(other).await.unwrap();
    let e = next(&mut inbound).await.unwrap_err();
    assert_eq!(e.code(), Code::FailedPrecondition, "{e:?}");
    assert_eq!(
        e.metadata()
            .get("cutover-accepted-epoch")
            .and_then(|v| v.to_str().ok()),
        Some("6")
    );
    assert_eq!(puts(&sim, "kubernetes"), 0, "nothing was written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_nodes_coalesces_into_few_write_rounds() {
    let mut opts = arm_sim::ArmSimOptions {
        seed: arm_sim::seed::Seed::preset("aks", Some(60)).unwrap(),
        ..Default::default()
    };
    opts.tuning = fast_tuning();
    opts.tuning.completion_delay_ms = 400;
    let sim = arm_sim::ArmSim::start(opts).await.unwrap();
    let cluster = aks_fixture::preset_sized("aks", 60).unwrap();
    // 40 of 60 nodes: over the blast-radius guard's default share, lifted to test coalescing.
    let mut a = start_actuator(&sim, &cluster, &["--max-down-share", "1.0"]).await;
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(1)).await.unwrap();
    next(&mut inbound).await.unwrap();
    tx.send(end(0)).await.unwrap();
    let nodes: Vec<_> = cluster.nodes.iter().take(40).collect();
    for (i, n) in nodes.iter().enumerate() {
        tx.send(delta(desired(n, AdminState::Down, 1, i as u64 + 1)))
            .await
            .unwrap();
    }
    let want: Vec<(&str, u64)> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i as u64 + 1))
        .collect();
    until_effective(&mut inbound, &want).await;
    for n in &nodes {
        assert!(all_are(&sim, &cluster, n, "Down"));
    }
    // 40 nodes x 2 pools per LB; a per-node writer would need 40+ writes per LB.
    let (p, i) = (puts(&sim, "kubernetes"), puts(&sim, "kubernetes-internal"));
    assert!(p <= 5 && i <= 5, "write rounds: public {p}, internal {i}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_ends_open_streams_within_the_grace_period() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut inbound) = open(&mut a).await;
    tx.send(hello(1)).await.unwrap();
    next(&mut inbound).await.unwrap();
    assert!(
        a.running.shutdown().await,
        "drained within the grace period"
    );
    let e = next(&mut inbound).await.unwrap_err();
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
}
