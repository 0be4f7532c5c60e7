//! ARM's 4 MB request-body limit (contracts/arm.md section 9; issue 26 N11): a whole-LB write
//! whose minimal body is over the limit goes out as per-pool PUTs when each pool body fits
//! (arm-sim answers 413 to any larger body, LB or pool); only a pool body itself over the
//! limit is refused before sending, FAILED with the reason and a metric.

use crate::common::*;
use cutover_proto::v1::*;

/// Successful PUTs on the LB `lb` itself and on its pools, since `since`.
fn lb_and_pool_puts(sim: &arm_sim::ArmSim, lb: &str, since: jiff::Timestamp) -> (usize, usize) {
    let whole = format!("/loadbalancers/{}?", lb.to_ascii_lowercase());
    let pools = format!(
        "/loadbalancers/{}/backendaddresspools/",
        lb.to_ascii_lowercase()
    );
    let mut n = (0, 0);
    for r in sim.requests() {
        if r.method != "PUT" || r.received < since {
            continue;
        }
        let path = r.path.to_ascii_lowercase();
        assert!(r.status < 400, "a PUT was refused: {r:?}");
        if path.contains(&whole) {
            n.0 += 1;
        } else if path.contains(&pools) {
            assert!(r.body_bytes <= arm_sim::MAX_REQUEST_BODY, "{r:?}");
            n.1 += 1;
        }
    }
    n
}

/// The value of the first series of `name` on load balancer `lb` (and `extra`), 0 if none.
fn series(metrics: &str, name: &str, lb: &str, extra: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(&format!("load_balancer=\"{lb}\"")))
        .filter(|l| l.contains(extra))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_lb_body_over_4_mb_is_written_pool_by_pool() {
    let (sim, cluster) = start_sim("aks-ip").await;
    // The LB's minimal body is over ARM's limit: two pools each carry a large writable
    // property; each pool body alone stays under it.
    let pad = serde_json::json!("x".repeat(2_300_000));
    for pool in ["kubernetes", "kubernetes-IPv6"] {
        sim.outside_pool_property("kubernetes", pool, "padding", pad.clone())
            .unwrap();
    }
    let mut a = start_actuator(&sim, &cluster, &["--write-strategy", "whole-lb"]).await;
    let since = jiff::Timestamp::now();
    let node = &cluster.nodes[3];
    for (state, name) in [(AdminState::Down, "Down"), (AdminState::None, "None")] {
        let rsp = a
            .client
            .set_node_admin_state(set_req(node, state, WaitFor::Effective))
            .await
            .unwrap()
            .into_inner();
        let result = rsp.result.unwrap();
        assert_eq!(phase(&result), ResultPhase::Effective, "{name}: {result:?}");
        assert!(all_are(&sim, &cluster, node, name), "{name}");
    }
    let (whole, pools) = lb_and_pool_puts(&sim, "kubernetes", since);
    assert_eq!(whole, 0, "no whole-LB PUT of the large LB");
    // Down and None, each on the IPv4 and the IPv6 pool.
    assert!(pools >= 4, "{pools} pool PUTs");
    // The small internal LB is still written whole.
    let (internal_whole, internal_pools) = lb_and_pool_puts(&sim, "kubernetes-internal", since);
    if internal_whole + internal_pools > 0 {
        assert_eq!(internal_pools, 0, "the internal LB fits: written whole");
    }
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        series(
            &metrics,
            "cutover_actuator_per_pool_fallbacks_total",
            "kubernetes",
            ""
        ) >= 2.0,
        "{metrics}"
    );
    assert_eq!(
        series(
            &metrics,
            "cutover_actuator_bodies_too_large_total",
            "kubernetes",
            ""
        ),
        0.0,
        "{metrics}"
    );
    a.running.shutdown().await;
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_body_over_4_mb_is_not_sent_and_fails_with_the_reason() {
    let (sim, cluster) = start_sim("aks-ip").await;
    // The IPv4 pool alone is over the limit: per-pool writes cannot help.
    let pad = serde_json::json!("x".repeat(4_300_000));
    sim.outside_pool_property("kubernetes", "kubernetes", "padding", pad)
        .unwrap();
    let mut a = start_actuator(&sim, &cluster, &["--write-strategy", "whole-lb"]).await;
    let puts_before = puts(&sim, "kubernetes");
    let node = &cluster.nodes[3];
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    let result = rsp.result.unwrap();
    assert_eq!(phase(&result), ResultPhase::Failed, "{result:?}");
    assert!(
        result.reason.contains("over ARM's 4 MB request limit"),
        "{}",
        result.reason
    );
    assert!(!result.will_retry, "{result:?}");
    assert_eq!(
        puts(&sim, "kubernetes"),
        puts_before,
        "the oversize pool body was not sent"
    );
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    assert!(
        series(
            &metrics,
            "cutover_actuator_bodies_too_large_total",
            "kubernetes",
            "op=\"put_pool\""
        ) >= 1.0,
        "{metrics}"
    );
    a.running.shutdown().await;
    sim.shutdown().await;
}
