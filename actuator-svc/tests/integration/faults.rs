//! Races, locks, throttling, failed and canceled operations, token expiry, self-heal.

use crate::common::*;
use arm_sim::faults::FaultSpec;
use arm_sim::model::AdminState as SimAdmin;
use cutover_proto::v1::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_etag_412_rereads_and_never_undoes_another_writer() {
    let (sim, cluster) = start_sim("aks-ip").await;
    let mut a = start_actuator(&sim, &cluster, &["--pool-refresh-interval", "1h"]).await;
    let ours = &cluster.nodes[0];
    let theirs = &cluster.nodes[1];
    // Someone else changes the LB after our read: our cached etag is now stale.
    sim.outside_write("kubernetes", "kubernetes", &theirs.name, Some(SimAdmin::Up))
        .unwrap();
    let rsp = a
        .client
        .set_node_admin_state(set_req(ours, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.status == 412),
        "the stale write got 412"
    );
    assert!(all_are(&sim, &cluster, ours, "Down"));
    let snap = sim.pool("kubernetes", "kubernetes").unwrap();
    let e = snap.entries.iter().find(|e| e.name == theirs.name).unwrap();
    assert_eq!(
        e.effective,
        SimAdmin::Up,
        "the other writer's entry was not undone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_actuators_on_one_lb_both_win() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let mut b = start_actuator(&sim, &cluster, &[]).await;
    let (n1, n2) = (&cluster.nodes[6], &cluster.nodes[7]);
    let (ra, rb) = tokio::join!(
        a.client
            .set_node_admin_state(set_req(n1, AdminState::Down, WaitFor::Effective)),
        b.client
            .set_node_admin_state(set_req(n2, AdminState::Down, WaitFor::Effective)),
    );
    assert_eq!(
        phase(&ra.unwrap().into_inner().result.unwrap()),
        ResultPhase::Effective
    );
    assert_eq!(
        phase(&rb.unwrap().into_inner().result.unwrap()),
        ResultPhase::Effective
    );
    assert!(
        all_are(&sim, &cluster, n1, "Down"),
        "{:?}",
        sim_states(&sim, &cluster, n1)
    );
    assert!(
        all_are(&sim, &cluster, n2, "Down"),
        "{:?}",
        sim_states(&sim, &cluster, n2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn superseded_operations_are_rewritten_until_both_hold() {
    let (sim, cluster) = start_sim("aks").await;
    sim.faults(FaultSpec {
        supersede: Some(true),
        ..Default::default()
    });
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let mut b = start_actuator(&sim, &cluster, &[]).await;
    let (n1, n2) = (&cluster.nodes[2], &cluster.nodes[8]);
    let (ra, rb) = tokio::join!(
        a.client
            .set_node_admin_state(set_req(n1, AdminState::Down, WaitFor::Effective)),
        b.client
            .set_node_admin_state(set_req(n2, AdminState::Down, WaitFor::Effective)),
    );
    let (ra, rb) = (ra.unwrap().into_inner(), rb.unwrap().into_inner());
    assert_eq!(phase(&ra.result.unwrap()), ResultPhase::Effective);
    assert_eq!(phase(&rb.result.unwrap()), ResultPhase::Effective);
    assert!(all_are(&sim, &cluster, n1, "Down"));
    assert!(all_are(&sim, &cluster, n2, "Down"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttling_storm_is_waited_out_without_a_hot_loop() {
    let (sim, cluster) = start_sim("aks").await;
    let mut tuning = fast_tuning();
    tuning.retry_after_secs = 1;
    sim.set_tuning(tuning);
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let before = sim.requests().len();
    sim.faults(FaultSpec {
        throttle_for_ms: Some(1500),
        ..Default::default()
    });
    let node = &cluster.nodes[3];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    let reqs = sim.requests();
    let throttled = reqs[before..].iter().filter(|r| r.status == 429).count();
    assert!(throttled >= 1, "the storm was hit");
    // Retry-After honoured for the whole class: a handful of 429s, not hundreds.
    assert!(throttled <= 10, "{throttled} throttled requests: hot loop");
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        metrics.contains("cutover_actuator_arm_throttled_total"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_operations_are_reported_and_retried() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    sim.faults(FaultSpec {
        fail_operations: Some(1),
        server_errors: Some(2),
        ..Default::default()
    });
    let node = &cluster.nodes[10];
    let mut watch = a
        .client
        .watch_results(WatchResultsRequest {
            node_name: node.name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    assert!(all_are(&sim, &cluster, node, "Down"));
    let mut phases = Vec::new();
    while let Ok(Ok(Some(r))) =
        tokio::time::timeout(std::time::Duration::from_millis(200), watch.message()).await
    {
        if phase(&r) == ResultPhase::Failed {
            assert!(r.will_retry, "{r:?}");
            assert!(!r.reason.is_empty());
        }
        phases.push(phase(&r));
    }
    assert!(phases.contains(&ResultPhase::Failed), "{phases:?}");
    assert_eq!(phases.last(), Some(&ResultPhase::Effective));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_tokens_are_renewed() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    sim.expire_tokens();
    let node = &cluster.nodes[5];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    assert!(
        sim.requests().iter().any(|r| r.status == 401),
        "the expired token was refused once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_heal_repairs_an_entry_reset_from_outside() {
    let (sim, cluster) = start_sim("aks-ip").await;
    let mut a = start_actuator(&sim, &cluster, &["--self-heal-interval", "300ms"]).await;
    let node = &cluster.nodes[4];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    // cloud-provider-azure style: a whole-pool write from an old cache drops our adminState.
    sim.outside_write("kubernetes-internal", "kubernetes-IPv6", &node.name, None)
        .unwrap();
    assert!(!all_are(&sim, &cluster, node, "Down"));
    wait_until("drift repaired", || async {
        all_are(&sim, &cluster, node, "Down")
    })
    .await;
    let admin = a.running.admin_addr;
    wait_until("drift metric", || async move {
        let (_, m) = http_get(admin, "/metrics").await;
        m.lines()
            .any(|l| l.starts_with("cutover_actuator_drift_repaired_total") && !l.ends_with(" 0"))
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_resolves_but_never_writes() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--dry-run"]).await;
    let node = &cluster.nodes[0];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Accepted))
        .await
        .unwrap()
        .into_inner();
    let r = rsp.result.unwrap();
    assert_eq!(phase(&r), ResultPhase::Accepted);
    assert_eq!(r.entries.len(), 4);
    assert!(sim.requests().iter().all(|r| r.method != "PUT"));
    assert!(all_are(&sim, &cluster, node, "None"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_pool_strategy_is_correct_too() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &["--write-strategy", "per-pool"]).await;
    let node = &cluster.nodes[9];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    assert!(all_are(&sim, &cluster, node, "Down"));
    assert!(
        sim.requests()
            .iter()
            .any(|r| r.method == "PUT" && r.path.contains("/backendAddressPools/"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn low_remaining_write_quota_slows_writes_down() {
    let (sim, cluster) = start_sim("aks").await;
    // A nearly exhausted write budget: every answer reports fewer than 20 writes left.
    sim.set_limits(arm_sim::throttle::Limits {
        writes: arm_sim::throttle::Limit {
            capacity: 15.0,
            refill_per_sec: 5.0,
        },
        ..Default::default()
    });
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    for i in 0..3 {
        let rsp = a
            .client
            .set_node_admin_state(set_req(
                &cluster.nodes[i],
                AdminState::Down,
                WaitFor::Effective,
            ))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    }
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    let gauge = metrics
        .lines()
        .find(|l| l.starts_with("cutover_actuator_arm_remaining_quota{class=\"write\"}"))
        .unwrap_or_else(|| panic!("no write quota gauge:\n{metrics}"));
    let value: f64 = gauge.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(value < 20.0, "{gauge}");
    assert!(
        metrics.lines().any(|l| l
            .starts_with("cutover_actuator_arm_rate_limited_total{class=\"write\"}")
            && !l.ends_with(" 0")),
        "writes were held back by the client-side brake:\n{metrics}"
    );
    assert!(
        sim.requests().iter().all(|r| r.status != 429),
        "slowed down before ARM throttled"
    );
}
