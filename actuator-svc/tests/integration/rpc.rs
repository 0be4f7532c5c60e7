//! The unary RPCs.

use crate::common::*;
use cutover_proto::v1::*;
use tonic::Code;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_down_then_none_on_every_pool_and_read_it_back() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[4];
    let other = &cluster.nodes[5];

    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert!(!rsp.timed_out);
    let result = rsp.result.unwrap();
    assert_eq!(phase(&result), ResultPhase::Effective, "{result:?}");
    // Four pools (public and internal LB, IPv4 and IPv6); the outbound-only pool is skipped.
    assert_eq!(result.entries.len(), 4, "{:?}", result.entries);
    assert!(
        all_are(&sim, &cluster, node, "Down"),
        "{:?}",
        sim_states(&sim, &cluster, node)
    );
    assert!(
        all_are(&sim, &cluster, other, "None"),
        "a neighbour was touched"
    );
    let outbound = sim.pool("kubernetes", "aksOutboundBackendPool").unwrap();
    assert!(
        outbound.entries.iter().all(|e| e.admin_state.is_none()),
        "the outbound-only pool is not written"
    );

    let got = a
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(node_ref(node)),
            fresh: true,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.entries.len(), 4);
    assert!(
        got.entries
            .iter()
            .all(|e| e.admin_state == AdminState::Down as i32)
    );
    assert_eq!(got.desired, AdminState::Down as i32);

    let held = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert_eq!(held.nodes.len(), 1);
    assert_eq!(held.nodes[0].source, "tool");
    assert_eq!(held.nodes[0].reasons, vec!["test"]);
    assert!(held.nodes[0].effective);
    let only_internal = a
        .client
        .list_held_entries(ListHeldEntriesRequest {
            load_balancer: "kubernetes-internal".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        only_internal.nodes[0]
            .entries
            .iter()
            .all(|e| e.load_balancer == "kubernetes-internal")
    );

    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::None, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(phase(&rsp.result.unwrap()), ResultPhase::Effective);
    assert!(all_are(&sim, &cluster, node, "None"));
    let held = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.nodes.is_empty(), "None is not held");
    assert!(a.running.shutdown().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_name_the_field_and_change_nothing() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[0];
    let mut cases: Vec<(SetNodeAdminStateRequest, &str)> = Vec::new();
    let mut r = set_req(node, AdminState::Down, WaitFor::Effective);
    r.node = None;
    cases.push((r, "node: required"));
    let mut r = set_req(node, AdminState::Down, WaitFor::Effective);
    r.node.as_mut().unwrap().name.clear();
    cases.push((r, "node.name: required"));
    cases.push((
        set_req(node, AdminState::Up, WaitFor::Effective),
        "admin_state: must be DOWN or NONE",
    ));
    cases.push((
        set_req(node, AdminState::Unspecified, WaitFor::Effective),
        "admin_state: must be DOWN or NONE",
    ));
    let mut r = set_req(node, AdminState::Down, WaitFor::Effective);
    r.node
        .as_mut()
        .unwrap()
        .internal_ips
        .push("10.0.0.300".into());
    cases.push((r, "node.internal_ips[2]"));
    let mut r = set_req(node, AdminState::Down, WaitFor::Effective);
    r.wait_timeout = Some(prost_types::Duration {
        seconds: 3600,
        nanos: 0,
    });
    cases.push((r, "wait_timeout"));
    let mut r = set_req(node, AdminState::Down, WaitFor::Effective);
    r.wait = 42;
    cases.push((r, "wait"));
    for (req, field) in cases {
        let e = a.client.set_node_admin_state(req).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{field}: {e:?}");
        assert!(
            e.message().starts_with(field),
            "{} does not name {field}",
            e.message()
        );
    }
    let e = a
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: None,
            fresh: false,
        })
        .await
        .unwrap_err();
    assert_eq!(
        (e.code(), e.message()),
        (Code::InvalidArgument, "node: required")
    );
    let held = a
        .client
        .list_held_entries(ListHeldEntriesRequest::default())
        .await
        .unwrap()
        .into_inner();
    assert!(held.nodes.is_empty(), "nothing half-applied");
    assert_eq!(
        puts(&sim, "kubernetes") + puts(&sim, "kubernetes-internal"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cached_reads_have_an_age_and_name_only_requests_say_so() {
    let (sim, cluster) = start_sim("aks-ip").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[2];
    let by_name = NodeRef {
        name: node.name.clone(),
        ..Default::default()
    };
    let got = a
        .client
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(by_name.clone()),
            fresh: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(got.entries.len(), 4);
    assert!(got.age.is_some());
    assert!(
        got.notes.iter().any(|n| n.contains("name only")),
        "{:?}",
        got.notes
    );
    assert_eq!(got.desired, AdminState::Unspecified as i32);
    // A tool may also act by name only.
    let rsp = a
        .client
        .set_node_admin_state(SetNodeAdminStateRequest {
            node: Some(by_name),
            admin_state: AdminState::Down as i32,
            wait: WaitFor::Accepted as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let p = phase(&rsp.result.unwrap());
    assert!(
        matches!(p, ResultPhase::Accepted | ResultPhase::Effective),
        "{p:?}"
    );
    wait_until("name-only Down effective", || async {
        all_are(&sim, &cluster, node, "Down")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_results_follows_one_node() {
    let (sim, cluster) = start_sim("aks").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    let node = &cluster.nodes[1];
    let mut watch = a
        .client
        .watch_results(WatchResultsRequest {
            node_name: node.name.clone(),
        })
        .await
        .unwrap()
        .into_inner();
    a.client
        .set_node_admin_state(set_req(
            &cluster.nodes[2],
            AdminState::Down,
            WaitFor::Unspecified,
        ))
        .await
        .unwrap();
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Unspecified))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        phase(&rsp.result.unwrap()),
        ResultPhase::Unspecified,
        "no wait asked"
    );
    let mut seen = Vec::new();
    while let Some(r) = tokio::time::timeout(WAIT, watch.message())
        .await
        .unwrap()
        .unwrap()
    {
        assert_eq!(r.node.as_ref().unwrap().name, node.name, "filtered by name");
        seen.push(phase(&r));
        if phase(&r) == ResultPhase::Effective {
            break;
        }
    }
    assert_eq!(seen, vec![ResultPhase::Accepted, ResultPhase::Effective]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_slb_reaches_every_lb_and_per_service_pools() {
    let (sim, cluster) = start_sim("aks-multi-slb").await;
    let mut a = start_actuator(&sim, &cluster, &[]).await;
    // The last user node sits on LB `kubernetes` and also serves shop-checkout on `kubernetes-2`.
    let node = cluster
        .nodes
        .iter()
        .rfind(|n| n.pool == "userpool")
        .unwrap();
    let rsp = a
        .client
        .set_node_admin_state(set_req(node, AdminState::Down, WaitFor::Effective))
        .await
        .unwrap()
        .into_inner();
    let result = rsp.result.unwrap();
    assert_eq!(phase(&result), ResultPhase::Effective);
    let mut pools: Vec<(String, String)> = result
        .entries
        .iter()
        .map(|e| (e.load_balancer.clone(), e.pool.clone()))
        .collect();
    pools.sort();
    pools.dedup();
    assert!(
        pools.contains(&("kubernetes-2".into(), "shop-checkout-ipv6".into())),
        "{pools:?}"
    );
    assert!(
        pools.contains(&("kubernetes-internal".into(), "kubernetes".into())),
        "{pools:?}"
    );
    assert!(
        all_are(&sim, &cluster, node, "Down"),
        "{:?}",
        sim_states(&sim, &cluster, node)
    );
}
