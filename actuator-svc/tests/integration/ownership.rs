//! One writer per load balancer: assignments on the stream decide which replica writes which
//! LB; results cover the assigned LBs; a lapsed assignment stops writes; and the end of an
//! operation is seen by reading the LB, not at the operation's `Retry-After` cadence.

use crate::common::*;
use cutover_proto::v1::*;
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;
use tonic::Streaming;

fn msg(kind: signal_message::Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

fn assignment(epoch: u64, generation: u64, lbs: &[&str], valid_ms: u64) -> SignalMessage {
    echoing(epoch, generation, lbs, valid_ms, 0)
}

/// An assignment echoing the actuator's `Renew` number `echo`: the replica sends its k-th
/// renewal right after taking the k-th assignment of a stream, so a leader that sent k
/// assignments (and gave the replica a moment) echoes k.
fn echoing(epoch: u64, generation: u64, lbs: &[&str], valid_ms: u64, echo: u64) -> SignalMessage {
    msg(signal_message::Kind::Assignment(Assignment {
        leader_epoch: epoch,
        generation,
        load_balancers: lbs.iter().map(|s| s.to_string()).collect(),
        valid_for: Some(prost_types::Duration {
            seconds: (valid_ms / 1000) as i64,
            nanos: ((valid_ms % 1000) * 1_000_000) as i32,
        }),
        echo,
    }))
}

/// The next EFFECTIVE result of `seq`, skipping everything else.
async fn effective(inbound: &mut Streaming<ActuatorMessage>, seq: u64) -> NodeResult {
    loop {
        let m = tokio::time::timeout(WAIT, inbound.message())
            .await
            .expect("a result within the wait")
            .unwrap()
            .expect("stream open");
        if let Some(actuator_message::Kind::Result(r)) = m.kind
            && phase(&r) == ResultPhase::Effective
            && r.version.unwrap().seq == seq
        {
            return r;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_lb_is_written_by_its_assigned_replica_only() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--identity", "a"]).await;
    let mut b = start_actuator(&sim, &cluster, &["--identity", "b"]).await;
    let (ta, mut ra) = open_stream(&mut a, 3).await;
    let (tb, mut rb) = open_stream(&mut b, 3).await;
    ta.send(assignment(3, 1, &["kubernetes"], 5000))
        .await
        .unwrap();
    tb.send(assignment(3, 1, &["kubernetes-internal"], 5000))
        .await
        .unwrap();
    let node = &cluster.nodes[3];
    for tx in [&ta, &tb] {
        let d = desired(node, AdminState::Down, 3, 1);
        tx.send(msg(signal_message::Kind::Delta(d))).await.unwrap();
    }
    let from_a = effective(&mut ra, 1).await;
    let from_b = effective(&mut rb, 1).await;
    assert_eq!(from_a.load_balancers, vec!["kubernetes"]);
    assert_eq!(from_b.load_balancers, vec!["kubernetes-internal"]);
    assert!(all_are(&sim, &cluster, node, "Down"));
    // One PUT per LB: nobody queued behind another replica's lock.
    assert_eq!(puts(&sim, "kubernetes"), 1);
    assert_eq!(puts(&sim, "kubernetes-internal"), 1);

    // A takes over B's LB (B's replica "died"): A reports the larger set for the same version
    // once it confirmed the internal LB too, without a new desired state.
    ta.send(assignment(
        3,
        2,
        &["kubernetes", "kubernetes-internal"],
        5000,
    ))
    .await
    .unwrap();
    let again = effective(&mut ra, 1).await;
    assert_eq!(
        again.load_balancers,
        vec!["kubernetes", "kubernetes-internal"]
    );
    assert_eq!(
        puts(&sim, "kubernetes-internal"),
        1,
        "already Down: no write"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_owns_nothing_reads_nothing_during_a_wave() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, _rx) = open_stream(&mut a, 5).await;
    // A standby: every node's state arrives, no LB is its to write.
    tx.send(assignment(5, 1, &[], 5000)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = reads(&sim, "kubernetes") + reads(&sim, "kubernetes-internal");
    for (seq, node) in cluster.nodes.iter().take(12).enumerate() {
        let d = desired(node, AdminState::Down, 5, seq as u64 + 1);
        tx.send(msg(signal_message::Kind::Delta(d))).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = reads(&sim, "kubernetes") + reads(&sim, "kubernetes-internal");
    assert_eq!(after - before, 0, "a non-owner read the load balancers");
    assert_eq!(
        puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lapsed_or_stale_assignment_writes_nothing() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut rx) = open_stream(&mut a, 4).await;
    tx.send(assignment(
        4,
        1,
        &["kubernetes", "kubernetes-internal"],
        300,
    ))
    .await
    .unwrap();
    // No heartbeat: the assignment lapses (a frozen replica wakes up like this).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let node = &cluster.nodes[5];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        4,
        1,
    ))))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal"),
        0
    );
    // A late heartbeat (the same content) does not revive it: it echoes the renewal the
    // replica sent 0.8 s ago (it may have queued while the replica was frozen).
    tx.send(echoing(
        4,
        1,
        &["kubernetes", "kubernetes-internal"],
        300,
        1,
    ))
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal"),
        0
    );
    // A new grant that echoes the renewal the late heartbeat prompted does: the held state is
    // written at once, no resync needed.
    tokio::time::sleep(Duration::from_millis(50)).await;
    tx.send(echoing(
        4,
        2,
        &["kubernetes", "kubernetes-internal"],
        5000,
        2,
    ))
    .await
    .unwrap();
    let r = effective(&mut rx, 1).await;
    assert_eq!(r.load_balancers.len(), 2);
    assert!(all_are(&sim, &cluster, node, "Down"));
    // An older generation is fenced off: the stream is refused.
    tx.send(assignment(4, 1, &[], 5000)).await.unwrap();
    let end = loop {
        match tokio::time::timeout(WAIT, rx.message()).await.unwrap() {
            Ok(Some(_)) => continue,
            other => break other,
        }
    };
    let status = end.expect_err("refused");
    assert_eq!(status.code(), tonic::Code::FailedPrecondition, "{status:?}");
}

/// The simulator with NRP's cadence: 2 s operations, polls answered with `Retry-After: 10`.
async fn sim_at_nrp_cadence() -> (arm_sim::ArmSim, aks_fixture::Cluster) {
    let (sim, cluster) = start_sim("aks").await;
    let mut tuning = fast_tuning();
    tuning.completion_delay_ms = 2000;
    tuning.retry_after_secs = 10;
    sim.set_tuning(tuning);
    (sim, cluster)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_is_seen_at_once_with_retry_after_10() {
    let (sim, cluster) = sim_at_nrp_cadence().await;
    let mut a = start_actuator(&sim, &cluster, &["--poll-interval", "150ms"]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    let node = &cluster.nodes[1];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        1,
        1,
    ))))
    .await
    .unwrap();
    let r = effective(&mut rx, 1).await;
    let reported = jiff::Timestamp::new(r.at.unwrap().seconds, r.at.unwrap().nanos).unwrap();
    let in_arm = sim
        .effective_log()
        .iter()
        .map(|e| e.time)
        .max()
        .expect("the write became effective");
    let lag = reported.duration_since(in_arm);
    assert!(
        lag.as_secs_f64() < 0.5 && lag.as_secs_f64() >= 0.0,
        "reported {lag:?} after ARM (Retry-After 10 s would make it ~8 s)"
    );
    // The operation URL was never polled before its Retry-After.
    let polls = sim
        .requests()
        .iter()
        .filter(|r| r.path.contains("operations"))
        .count();
    assert_eq!(polls, 0);
}

/// Three writes in a row on each LB, each node arriving while the previous write's 2 s
/// operation runs (Retry-After 10): every write after the first reaches ARM within 0.25 s of
/// the previous operation's end, once from the base pace (no duration known yet) and once
/// from the fine window around the learned end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_coalesced_write_follows_the_previous_operation_end_at_once() {
    let (sim, cluster) = sim_at_nrp_cadence().await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let (tx, mut rx) = open_stream(&mut a, 1).await;
    for (seq, node) in (1..=3).zip(&cluster.nodes[1..4]) {
        if seq == 3 {
            // Node 2's write goes out when node 1's operation ends: node 3 arrives during it.
            effective(&mut rx, 1).await;
        }
        tx.send(msg(signal_message::Kind::Delta(desired(
            node,
            AdminState::Down,
            1,
            seq,
        ))))
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    effective(&mut rx, 3).await;
    let mut ends: BTreeMap<(String, String), jiff::Timestamp> = BTreeMap::new();
    for e in sim.effective_log() {
        ends.insert((e.lb.to_ascii_lowercase(), e.op_id), e.time);
    }
    let puts: Vec<(String, jiff::Timestamp)> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.status < 300)
        .filter_map(|r| {
            let lower = r.path.to_ascii_lowercase();
            let lb = lower
                .split("/loadbalancers/")
                .nth(1)?
                .split(['/', '?'])
                .next()?;
            Some((lb.to_string(), r.time))
        })
        .collect();
    let mut followed = 0;
    for (lb, put) in &puts {
        let before = ends
            .iter()
            .filter(|((l, _), t)| l == lb && *t < put)
            .map(|(_, t)| *t)
            .max();
        if let Some(end) = before {
            let gap = put.duration_since(end).as_secs_f64();
            assert!(
                gap <= 0.25,
                "PUT on {lb} {gap:.3} s after the previous operation ended"
            );
            followed += 1;
        }
    }
    // Every LB the nodes are on saw at least three writes (one per changed pool per round),
    // and every write but each LB's first followed an operation's end.
    let lbs: BTreeSet<&String> = puts.iter().map(|(lb, _)| lb).collect();
    assert!(puts.len() >= 3 * lbs.len(), "{puts:?}");
    assert_eq!(followed, puts.len() - lbs.len(), "{puts:?}");
}

/// `cutover_actuator_load_balancer_owned` of every LB, read from `/metrics`.
async fn owned_gauge(a: &Actuator) -> BTreeMap<String, String> {
    let (_, body) = http_get(a.running.admin_addr, "/metrics").await;
    body.lines()
        .filter_map(|l| l.strip_prefix("cutover_actuator_load_balancer_owned{load_balancer=\""))
        .filter_map(|l| l.split_once("\"} "))
        .map(|(lb, v)| (lb.to_string(), v.to_string()))
        .collect()
}

/// A resync or reconnect of a live replica: its stream ends and a new stream of the same
/// leader re-grants the same LBs within 1 s. The LBs are owned at every sample (store and
/// gauge), and a Down that arrives on the new stream before its grant is written at once
/// under the kept one. A replica that does not come back stops at the grant's lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_keeps_the_lbs_owned_and_writes_what_arrives_meanwhile() {
    const LBS: [&str; 2] = ["kubernetes", "kubernetes-internal"];
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let store = a.running.store.clone();
    let (tx, rx) = open_stream(&mut a, 7).await;
    tx.send(assignment(7, 1, &LBS, 2000)).await.unwrap();
    // Taken in the store and published on the gauge (a task of its own, a moment later).
    let admin = a.running.admin_addr;
    wait_until("the grant taken", || {
        let store = store.clone();
        async move {
            let (_, body) = http_get(admin, "/metrics").await;
            store.owned().len() == 2
                && LBS.iter().all(|lb| {
                    body.contains(&format!(
                        "cutover_actuator_load_balancer_owned{{load_balancer=\"{lb}\"}} 1"
                    ))
                })
        }
    })
    .await;

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = tokio::spawn({
        let (store, stop, admin) = (store.clone(), stop.clone(), a.running.admin_addr);
        async move {
            let mut gaps = Vec::new();
            let mut samples = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let owned = store.owned();
                let (_, body) = http_get(admin, "/metrics").await;
                let zero = LBS.iter().any(|lb| {
                    !body.contains(&format!(
                        "cutover_actuator_load_balancer_owned{{load_balancer=\"{lb}\"}} 1"
                    ))
                });
                if owned.len() != 2 || zero {
                    gaps.push((samples, owned, zero));
                }
                samples += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (samples, gaps)
        }
    });

    // The old stream ends right after a heartbeat.
    tx.send(echoing(7, 1, &LBS, 2000, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let ended = tokio::time::Instant::now();
    drop((tx, rx));
    wait_until("the end of the stream seen", || {
        let store = store.clone();
        async move { store.uplink().route() == actuator_svc::state::uplink::Route::Retry }
    })
    .await;

    // The new stream: its snapshot brings a Down before the leader re-grants the LBs.
    let (tx, mut rx) = open_stream(&mut a, 7).await;
    let node = &cluster.nodes[2];
    tx.send(msg(signal_message::Kind::Delta(desired(
        node,
        AdminState::Down,
        7,
        1,
    ))))
    .await
    .unwrap();
    tokio::time::sleep_until(ended + Duration::from_millis(800)).await;
    let regrant = jiff::Timestamp::now();
    tx.send(assignment(7, 2, &LBS, 2000)).await.unwrap();
    let r = effective(&mut rx, 1).await;
    assert_eq!(r.load_balancers.len(), 2);
    assert!(all_are(&sim, &cluster, node, "Down"));
    let first_put = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.status < 300)
        .map(|r| r.time)
        .min()
        .expect("the Down was written");
    assert!(
        first_put < regrant,
        "the Down waited for the new grant: PUT at {first_put}, re-grant at {regrant}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    tx.send(echoing(7, 2, &LBS, 2000, 1)).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let (samples, gaps) = sampler.await.unwrap();
    assert!(samples >= 20, "only {samples} samples");
    assert!(
        gaps.is_empty(),
        "not owned at samples {gaps:?} of {samples}"
    );

    // No new stream this time: the grant lapses on its own and the gauge says so.
    drop((tx, rx));
    let gone = tokio::time::Instant::now();
    wait_until("the grant lapsed", || {
        let a = &a;
        async move {
            let g = owned_gauge(a).await;
            g.len() == 2 && g.values().all(|v| v == "0")
        }
    })
    .await;
    assert!(store.owned().is_empty());
    let took = gone.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_millis(3000),
        "lapsed {took:?} after the stream ended (grant valid 2 s from the last heartbeat)"
    );
}
