//! What a write sends (issue 20): the next write's `If-Match` comes from a read after the
//! operation ended, never from a PUT's answer (arm-sim changes the etag again at the end, as
//! ARM does, so such an `If-Match` would get 412). Bodies over ARM's 4 MB limit: `body_limit.rs`.

use crate::common::*;
use cutover_proto::v1::*;

/// No PUT of the run was answered 412: every `If-Match` matched the LB's etag of the moment.
fn no_412(sim: &arm_sim::ArmSim) {
    let stale: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PUT" && r.status == 412)
        .collect();
    assert!(stale.is_empty(), "{stale:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn if_match_comes_from_a_read_after_the_operation_ended() {
    for strategy in ["per-pool", "whole-lb"] {
        let (sim, cluster) = start_sim("aks").await;
        let mut a = start_actuator(&sim, &cluster, &["--write-strategy", strategy]).await;
        // Back-to-back writes on the same LBs: each If-Match follows the previous operation.
        let steps = [
            (3, AdminState::Down),
            (3, AdminState::None),
            (4, AdminState::Down),
        ];
        for (n, state) in steps {
            let node = &cluster.nodes[n];
            let rsp = a
                .client
                .set_node_admin_state(set_req(node, state, WaitFor::Effective))
                .await
                .unwrap()
                .into_inner();
            let result = rsp.result.unwrap();
            assert_eq!(
                phase(&result),
                ResultPhase::Effective,
                "{strategy}: {result:?}"
            );
        }
        assert!(puts(&sim, "kubernetes") >= 3, "{strategy}");
        no_412(&sim);
        a.running.shutdown().await;
        sim.shutdown().await;
    }
}

/// The base kept between rounds is the compact document (read-only members dropped), so it
/// fits a budget the document as ARM sent it would not, and the next signal's PUT goes out
/// without a GET first (at 5,000 nodes that GET is 16 MB and most of a second).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compact_base_is_kept_and_the_next_signal_writes_without_reading_first() {
    let (sim, cluster) = start_sim("aks").await;
    let store = arm_sim::seed::Seed::preset("aks", None)
        .unwrap()
        .build()
        .unwrap();
    let key = store.find_lb("kubernetes").unwrap();
    let lb = store.lb(&key.sub, &key.rg, &key.lb).unwrap();
    let doc = bytes::Bytes::from(serde_json::to_vec(&lb.render(&key.sub, &key.rg)).unwrap());
    let compact = actuator_svc::lb::splice::compact(&doc).unwrap();
    // A budget that keeps a base of at most half of it: the compact one, not the document.
    let budget = doc.len();
    assert!(
        compact.len() * 2 < budget,
        "{} vs {}",
        compact.len(),
        doc.len()
    );
    let mut a = start_actuator(
        &sim,
        &cluster,
        &["--base-cache-budget", &budget.to_string()],
    )
    .await;
    let (tx, _rx) = open_stream(&mut a, 1).await;
    let send = |node, seq| {
        tx.send(SignalMessage {
            kind: Some(signal_message::Kind::Delta(desired(
                node,
                AdminState::Down,
                1,
                seq,
            ))),
        })
    };
    send(&cluster.nodes[3], 1).await.unwrap();
    wait_until("first node Down", || async {
        all_are(&sim, &cluster, &cluster.nodes[3], "Down")
    })
    .await;
    // Let the round end (its base goes to the cache), then signal again.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let since = jiff::Timestamp::now();
    send(&cluster.nodes[4], 2).await.unwrap();
    wait_until("second node Down", || async {
        all_are(&sim, &cluster, &cluster.nodes[4], "Down")
    })
    .await;
    let on_public: Vec<_> = sim
        .requests()
        .into_iter()
        .filter(|r| r.received >= since && r.path.contains("/loadBalancers/kubernetes?"))
        .map(|r| r.method)
        .collect();
    assert_eq!(
        on_public.first().map(String::as_str),
        Some("PUT"),
        "requests on the public LB after the second signal: {on_public:?}"
    );
    no_412(&sim);
}

/// The counter `name` with `operation="op"` in a /metrics text (0 when absent).
fn counter(metrics: &str, name: &str, op: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(name) && l.contains(&format!("operation=\"{op}\"")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Seeing an operation end costs the same on any LB (and so does a PUT's answer, which echoes
/// the whole LB): the completion probe stops reading at
/// the LB's `provisioningState`, which NRP (and arm-sim) writes in the document's first few
/// hundred bytes, so it takes at most one read buffer (64 KiB) off the socket instead of a
/// multi-megabyte document every 50-150 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_probes_of_a_large_lb_read_one_buffer_not_the_document() {
    let (sim, cluster) = start_sim("aks").await;
    // Over the whole-read threshold (2 MiB), so completions are probed, still under 4 MB.
    let pad = serde_json::json!("x".repeat(2_500_000));
    sim.outside_pool_property("kubernetes", "kubernetes", "padding", pad)
        .unwrap();
    let mut a = start_actuator(&sim, &cluster, &["--write-strategy", "whole-lb"]).await;
    for (n, state) in [(3, AdminState::Down), (3, AdminState::None)] {
        let rsp = a
            .client
            .set_node_admin_state(set_req(&cluster.nodes[n], state, WaitFor::Effective))
            .await
            .unwrap()
            .into_inner();
        assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    }
    let (_, metrics) = http_get(a.running.admin_addr, "/metrics").await;
    let probes = counter(
        &metrics,
        "cutover_actuator_arm_requests_total",
        "get_lb_state",
    );
    let probe_bytes = counter(
        &metrics,
        "cutover_actuator_arm_response_bytes_total",
        "get_lb_state",
    );
    let reads = counter(&metrics, "cutover_actuator_arm_requests_total", "get_lb");
    let read_bytes = counter(
        &metrics,
        "cutover_actuator_arm_response_bytes_total",
        "get_lb",
    );
    assert!(
        probes >= 2.0,
        "no completion probe of the large LB:\n{metrics}"
    );
    assert!(
        probe_bytes / probes <= actuator_svc::arm::transport::PROBE_READ_MAX as f64,
        "{probe_bytes} bytes over {probes} probes:\n{metrics}"
    );
    // Whole reads (the base after an operation ends) still read whole documents.
    assert!(read_bytes / reads > 1_000_000.0 / 2.0, "{metrics}");
    // A PUT's answer echoes the whole LB; only its headers are needed: a short answer (the
    // internal LB's) is drained to keep the connection, a long one dropped after a read.
    let puts = counter(&metrics, "cutover_actuator_arm_requests_total", "put_lb");
    let put_bytes = counter(
        &metrics,
        "cutover_actuator_arm_response_bytes_total",
        "put_lb",
    );
    assert!(puts >= 2.0, "{metrics}");
    assert!(
        put_bytes / puts <= 2.0 * actuator_svc::arm::transport::PROBE_READ_MAX as f64,
        "{put_bytes} bytes over {puts} PUT answers:\n{metrics}"
    );
    a.running.shutdown().await;
    sim.shutdown().await;
}
