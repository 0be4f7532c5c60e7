//! Tools cannot drain the ARM budget the cutover path needs: names that resolve to nothing are
//! answered from the negative cache, and each client identity has its own rate limit.

use crate::common::*;
use cutover_proto::v1::*;
use std::time::{Duration, Instant};

/// A well-formed node that no pool holds.
fn junk(i: usize) -> NodeRef {
    NodeRef {
        name: format!("junk-{i}"),
        uid: format!("00000000-0000-4000-8000-{i:012}"),
        provider_id: String::new(),
        internal_ips: vec![format!("10.250.{}.{}", i / 250, i % 250 + 1)],
        zone: String::new(),
    }
}

fn junk_set(i: usize) -> SetNodeAdminStateRequest {
    SetNodeAdminStateRequest {
        node: Some(junk(i)),
        admin_state: AdminState::Down as i32,
        reason: "junk".into(),
        wait: WaitFor::Effective as i32,
        wait_timeout: Some(prost_types::Duration {
            seconds: 10,
            nanos: 0,
        }),
    }
}

/// Sends `n` junk Sets spread over one second; returns (codes by outcome, ARM calls made).
async fn junk_burst(a: &Actuator, sim: &arm_sim::ArmSim, n: usize) -> (Vec<tonic::Code>, usize) {
    let before = sim.requests().len();
    let start = Instant::now();
    let calls: Vec<_> = (0..n)
        .map(|i| {
            let mut client = a.client.clone();
            let at = Duration::from_secs_f64(i as f64 / n as f64);
            tokio::spawn(async move {
                tokio::time::sleep(at).await;
                match client.set_node_admin_state(junk_set(i)).await {
                    Ok(r) => {
                        let r = r.into_inner().result.unwrap();
                        assert_eq!(phase(&r), ResultPhase::Effective);
                        assert!(r.entries.is_empty());
                        tonic::Code::Ok
                    }
                    Err(s) => s.code(),
                }
            })
        })
        .collect();
    let mut codes = Vec::new();
    for c in calls {
        codes.push(c.await.unwrap());
    }
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // Anything the Sets woke up (writers, NIC refresher) has had time to call ARM.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (codes, sim.requests().len() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_junk_sets_in_a_second_cost_one_pool_refresh() {
    let (sim, cluster) = start_sim("aks").await;
    // The per-identity limit lifted: what is measured here is the negative cache alone.
    let a = start_actuator(
        &sim,
        &cluster,
        &["--tool-rate", "100000", "--tool-burst", "100000"],
    )
    .await;
    let (codes, arm_calls) = junk_burst(&a, &sim, 1000).await;
    assert!(codes.iter().all(|c| *c == tonic::Code::Ok), "{codes:?}");
    println!("1000 junk Sets in 1 s (rate limit lifted): {arm_calls} ARM calls");
    // One re-read of the two LBs, plus at most one early NIC list.
    assert!(arm_calls <= 3, "{arm_calls} ARM calls");
    // Nothing was held for them, so later rounds do not chase them either.
    let held = a
        .client
        .clone()
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.nodes.is_empty());
    // A fresh Get of a junk name is answered from the same cache.
    let before = sim.requests().len();
    for i in 0..50 {
        let got = a
            .client
            .clone()
            .get_node_admin_state(GetNodeAdminStateRequest {
                node: Some(junk(i)),
                fresh: true,
            })
            .await
            .unwrap()
            .into_inner();
        assert!(got.entries.is_empty());
        assert!(
            got.notes.iter().any(|n| n.contains("no backend entries")),
            "{:?}",
            got.notes
        );
    }
    assert_eq!(
        sim.requests().len() - before,
        0,
        "no ARM call for junk Gets"
    );
    // A real node is still served at once.
    let node = &cluster.nodes[2];
    let r = a
        .client
        .clone()
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&r.result.unwrap()), ResultPhase::Effective);
    assert!(all_are(&sim, &cluster, node, "Down"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_identity_is_held_to_its_rate() {
    let (sim, cluster) = start_sim("aks").await;
    let a = start_actuator(&sim, &cluster, &[]).await;
    let (codes, arm_calls) = junk_burst(&a, &sim, 1000).await;
    let ok = codes.iter().filter(|c| **c == tonic::Code::Ok).count();
    let limited = codes
        .iter()
        .filter(|c| **c == tonic::Code::ResourceExhausted)
        .count();
    println!(
        "1000 junk Sets in 1 s (defaults, one identity): {ok} answered, {limited} RESOURCE_EXHAUSTED, {arm_calls} ARM calls"
    );
    // Burst 20 plus 10/s for about a second.
    assert!((20..=35).contains(&ok), "{ok} answered");
    assert_eq!(ok + limited, 1000);
    assert!(arm_calls <= 3, "{arm_calls} ARM calls");
    let err = a
        .client
        .clone()
        .list_held_entries(ListHeldEntriesRequest::default())
        .await;
    // The bucket may have refilled a token meanwhile; the message names the limit otherwise.
    if let Err(e) = err {
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("tool rate limit"), "{}", e.message());
    }
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        metrics.lines().any(|l| l
            .starts_with("cutover_actuator_tool_rate_limited_total{rpc=\"SetNodeAdminState\"}")),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_are_not_rate_limited_fresh_reads_are() {
    let (sim, cluster) = start_sim("aks").await;
    let a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[1];
    let get = |fresh: bool| {
        let mut c = a.client.clone();
        let req = GetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            fresh,
        };
        async move { c.get_node_admin_state(req).await.map(|_| ()) }
    };
    // 200 concurrent cached Gets from one identity (defaults: 10/s, burst 20) spend no ARM
    // budget: every one answers.
    let cached = futures::future::join_all((0..200).map(|_| get(false))).await;
    let refused = cached.iter().filter(|r| r.is_err()).count();
    assert_eq!(refused, 0, "{:?}", cached.iter().find(|r| r.is_err()));
    let lists = futures::future::join_all((0..50).map(|_| {
        let mut c = a.client.clone();
        async move { c.list_held_entries(ListHeldEntriesRequest::default()).await }
    }))
    .await;
    assert!(lists.iter().all(|r| r.is_ok()));
    // Fresh reads do spend it: the same burst is held to the rate.
    let fresh = futures::future::join_all((0..60).map(|_| get(true))).await;
    let limited = fresh
        .iter()
        .filter(|r| matches!(r, Err(s) if s.code() == tonic::Code::ResourceExhausted))
        .count();
    assert!(limited > 0, "60 fresh Gets at once were not limited");
}
