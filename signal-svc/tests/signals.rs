//! signal-svc against kube-sim in-process and a recording fake actuator: triggers, removal,
//! Spot notices, duplicates, recreated nodes, ignored signals, RV conflicts, node events.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use std::time::Duration;

const OOS: &str = "node.kubernetes.io/out-of-service";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trigger_goes_down_and_back_with_node_events() {
    let c = cluster(8).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &["--extra-taint-keys=example.com/decommission"],
    )
    .await;
    svc.wait_ready().await;
    assert_eq!(svc.get("/live").await.0, 200);
    // Ready once the snapshot is sent; the fake actuator counts it once received.
    eventually("the snapshot received", || async {
        (act.state.completed_snapshots() >= 1).then_some(())
    })
    .await;
    assert_eq!(act.state.completed_snapshots(), 1);
    let names = c.node_names().await;
    let states = act.state.states();
    assert_eq!(
        states.len(),
        names.len(),
        "an untainted cluster asserts None for every node"
    );
    assert!(states.iter().all(|(d, _)| d.desired() == AdminState::None));

    let cases: [(&str, Option<&str>, &str); 5] = [
        (OOS, None, "NoExecute"),
        (OOS, Some("nodeshutdown"), "NoSchedule"),
        (SHUTDOWN, None, "NoSchedule"),
        (DRAINING, Some("spot-eviction"), "NoSchedule"),
        ("example.com/decommission", None, "NoSchedule"),
    ];
    // A cordoned node is never asserted.
    let cordoned = &names[7];
    c.set_unschedulable(cordoned).await;

    for (i, (key, value, effect)) in cases.iter().enumerate() {
        let node = &names[i];
        let uid = c.uid(node).await;
        c.add_taint(node, key, *value, effect).await;
        let (state, got_uid, _) = eventually("Down delta", || async {
            act.state
                .latest(node)
                .flatten()
                .filter(|(s, ..)| *s == AdminState::Down)
        })
        .await;
        assert_eq!(state, AdminState::Down);
        assert_eq!(got_uid, uid, "keyed by the node's UID");
        let down = act.state.deltas(node).pop().unwrap();
        assert_eq!(down.reasons, vec![(*key).to_owned()]);
        assert!(!down.node.as_ref().unwrap().provider_id.is_empty());
        assert!(!down.node.as_ref().unwrap().internal_ips.is_empty());
        eventually("Normal LoadBalancerAdminStateDown event", || async {
            c.node_events(node)
                .await
                .iter()
                .any(|(t, r, _)| t == "Normal" && r == "LoadBalancerAdminStateDown")
                .then_some(())
        })
        .await;

        c.remove_taint(node, key).await;
        eventually("None delta", || async {
            (act.state.latest_state(node) == Some(AdminState::None)).then_some(())
        })
        .await;
        eventually("Normal LoadBalancerAdminStateNone event", || async {
            c.node_events(node)
                .await
                .iter()
                .any(|(t, r, _)| t == "Normal" && r == "LoadBalancerAdminStateNone")
                .then_some(())
        })
        .await;
        assert_eq!(
            act.state.deltas(node).len(),
            2,
            "exactly one Down and one None"
        );
    }
    assert!(
        act.state.deltas(cordoned).is_empty()
            && act.state.latest_state(cordoned) == Some(AdminState::None),
        "cordon is not a signal"
    );
    assert!(c.node_events(cordoned).await.is_empty());
    // Extra keys are opt-in: an unconfigured key is not a trigger.
    c.add_taint(
        &names[6],
        "example.com/other",
        Some("1700000000"),
        "NoSchedule",
    )
    .await;
    c.add_taint(&names[5], SHUTDOWN, None, "NoSchedule").await;
    eventually("sync point", || async {
        (act.state.latest_state(&names[5]) == Some(AdminState::Down)).then_some(())
    })
    .await;
    assert!(act.state.deltas(&names[6]).is_empty());
    assert_eq!(act.state.latest_state(&names[6]), Some(AdminState::None));
    assert!(
        svc.metric("cutover_signal_signals_total", "kind=\"taint\"")
            .await
            >= 6.0
    );
    // Every Down and None of the five cases reached EFFECTIVE, and was timed.
    assert!(
        svc.metric("cutover_signal_signal_to_effective_seconds_count", "")
            .await
            >= 10.0
    );
    assert!(
        svc.metric("cutover_signal_signal_to_accepted_seconds_count", "")
            .await
            >= 10.0
    );
    assert!(
        svc.metric("cutover_signal_results_total", "effective")
            .await
            >= 10.0
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spot_notice_taints_exactly_once_and_ignores_noise() {
    let c = cluster(8).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let (target, noisy, operator) = (&names[0], &names[1], &names[2]);
    // An operator's own draining taint must never be duplicated or replaced.
    c.add_taint(operator, DRAINING, Some("by-hand"), "NoExecute")
        .await;
    c.preempt_event("ev-noise", noisy, IMDS_NOISE, 1).await;
    c.preempt_event("ev-op", operator, NOTICE, 1).await;
    c.preempt_event("ev-1", target, NOTICE, 1).await;
    // NPD re-records: count bumps arrive as MODIFIED; a second event object too.
    for n in 2..5 {
        c.preempt_event("ev-1", target, NOTICE, n).await;
        c.preempt_event("ev-noise", noisy, IMDS_NOISE, n).await;
    }
    c.preempt_event("ev-2", target, NOTICE, 1).await;

    eventually("spot taint", || async {
        c.taints(target)
            .await
            .iter()
            .any(|(k, v, e)| {
                k == DRAINING && v.as_deref() == Some("spot-eviction") && e == "NoSchedule"
            })
            .then_some(())
    })
    .await;
    let down = eventually("Down on the stream", || async {
        act.state
            .deltas(target)
            .into_iter()
            .find(|d| d.desired() == AdminState::Down)
    })
    .await;
    let deadline = down.deadline.expect("NotBefore carried");
    assert_eq!(
        deadline.seconds,
        "2026-08-01T05:41:02Z"
            .parse::<jiff::Timestamp>()
            .unwrap()
            .as_second()
    );
    assert_eq!(down.reasons, vec![DRAINING.to_owned()]);

    // More repeats after the taint: still nothing new.
    c.preempt_event("ev-1", target, NOTICE, 9).await;
    // Sync point: the noise event and all repeats have been processed once this shows up.
    eventually("ignored-event metric", || async {
        (svc.metric("cutover_signal_signals_total", "preempt_event_ignored")
            .await
            >= 1.0)
            .then_some(())
    })
    .await;
    eventually("taint metric", || async {
        (svc.metric("cutover_signal_taints_added_total", "").await == 1.0).then_some(())
    })
    .await;
    let drains: Vec<_> = c
        .taints(target)
        .await
        .into_iter()
        .filter(|(k, ..)| k == DRAINING)
        .collect();
    assert_eq!(drains.len(), 1, "tainted exactly once");
    assert!(
        c.taints(noisy).await.iter().all(|(k, ..)| k != DRAINING),
        "IMDS noise is not a notice"
    );
    let op: Vec<_> = c
        .taints(operator)
        .await
        .into_iter()
        .filter(|(k, ..)| k == DRAINING)
        .collect();
    assert_eq!(
        op,
        vec![(
            DRAINING.to_owned(),
            Some("by-hand".to_owned()),
            "NoExecute".to_owned()
        )]
    );
    assert_eq!(
        act.state.latest_state(noisy),
        Some(AdminState::None),
        "noise leaves the node as it is"
    );
    eventually("notice window observed at EFFECTIVE", || async {
        (svc.metric("cutover_signal_notice_window_remaining_seconds_count", "")
            .await
            == 1.0)
            .then_some(())
    })
    .await;
    assert_eq!(
        act.state
            .deltas(target)
            .iter()
            .filter(|d| d.desired() == AdminState::Down)
            .count(),
        1
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreated_node_starts_from_its_own_taints() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    let old = c.node(node).await.unwrap();
    let old_uid = old.metadata.uid.clone().unwrap();
    c.add_taint(node, SHUTDOWN, None, "NoSchedule").await;
    eventually("Down", || async {
        (act.state.latest_state(node) == Some(AdminState::Down)).then_some(())
    })
    .await;
    // A notice for the old incarnation.
    c.preempt_event("ev-old", node, NOTICE, 1).await;
    eventually("old node spot-tainted", || async {
        c.taints(node)
            .await
            .iter()
            .any(|(k, ..)| k == DRAINING)
            .then_some(())
    })
    .await;

    c.nodes().delete(node, &Default::default()).await.unwrap();
    eventually("Forget", || async {
        (act.state.latest(node) == Some(None)).then_some(())
    })
    .await;
    // Same name, new object, no taints, created after the old event.
    tokio::time::sleep(Duration::from_millis(1100)).await; // creationTimestamp has 1 s resolution
    let mut fresh = old.clone();
    fresh.metadata = kube::api::ObjectMeta {
        name: Some(node.clone()),
        labels: old.metadata.labels.clone(),
        ..Default::default()
    };
    if let Some(spec) = fresh.spec.as_mut() {
        spec.taints = None;
    }
    c.nodes().create(&Default::default(), &fresh).await.unwrap();
    let new_uid = c.uid(node).await;
    assert_ne!(new_uid, old_uid);

    // Sync point: another node's change after the recreate has been streamed.
    c.add_taint(&names[1], OOS, None, "NoExecute").await;
    eventually("sync", || async {
        (act.state.latest_state(&names[1]) == Some(AdminState::Down)).then_some(())
    })
    .await;
    // The replacement never inherits Down; and because a reimaged VM keeps its NIC (so its
    // pool entries still read the old node's Down), its own None is asserted for the new UID.
    match act.state.latest(node) {
        Some(Some((AdminState::None, uid, _))) => {
            assert_eq!(uid, new_uid, "None is asserted for the replacement's UID")
        }
        other => panic!("the replacement must get its own None asserted, got {other:?}"),
    }
    assert!(
        c.taints(node).await.iter().all(|(k, ..)| k != DRAINING),
        "the old notice does not taint the new node"
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taint_patch_survives_concurrent_writers() {
    let c = sim_cluster(6).await;
    let names = c.node_names().await;
    let node = names[0].clone();
    let uid = c.uid(&node).await;
    c.add_taint(&node, "example.com/first", None, "PreferNoSchedule")
        .await;
    // Widen the read-modify-write window and keep another writer appending taints.
    c.sim().set_latency(Duration::from_millis(15));
    let writer = {
        let c2 = kube::Client::try_from(kube::Config::new(c.sim().url().parse().unwrap())).unwrap();
        let node = node.clone();
        tokio::spawn(async move {
            let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c2);
            for i in 0..20 {
                let op = serde_json::json!([{"op": "add", "path": "/spec/taints/-", "value": {"key": format!("example.com/op-{i}"), "effect": "PreferNoSchedule"}}]);
                let patch: json_patch::Patch = serde_json::from_value(op).unwrap();
                api.patch(
                    &node,
                    &Default::default(),
                    &kube::api::Patch::<()>::Json(patch),
                )
                .await
                .unwrap();
            }
        })
    };
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    let req = signal_svc::core::index::TaintRequest {
        name: node.clone(),
        uid,
    };
    let outcome = signal_svc::writers::taint::add_taint(&api, &req)
        .await
        .unwrap();
    assert_eq!(outcome, signal_svc::writers::taint::Outcome::Added);
    writer.await.unwrap();
    c.sim().set_latency(Duration::ZERO);
    let taints = c.taints(&node).await;
    assert_eq!(taints.iter().filter(|(k, ..)| k == DRAINING).count(), 1);
    for i in 0..20 {
        let key = format!("example.com/op-{i}");
        assert!(
            taints.iter().any(|(k, ..)| *k == key),
            "{key} lost: {taints:?}"
        );
    }
    // Our patches carried a precondition: a conflict shows up as a 409 in the log, or none
    // raced. Either way a second call is a no-op.
    assert_eq!(
        signal_svc::writers::taint::add_taint(&api, &req)
            .await
            .unwrap(),
        signal_svc::writers::taint::Outcome::AlreadyPresent
    );

    // Injected 409 on the patch: re-read and retry.
    let node2 = names[1].clone();
    let req2 = signal_svc::core::index::TaintRequest {
        name: node2.clone(),
        uid: c.uid(&node2).await,
    };
    let mut rule = kube_sim::FailRule::new(409, 2);
    rule.verb = Some("PATCH".into());
    c.sim().fail_next(rule);
    assert_eq!(
        signal_svc::writers::taint::add_taint(&api, &req2)
            .await
            .unwrap(),
        signal_svc::writers::taint::Outcome::Added
    );
    let patches = c
        .sim()
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.contains(&node2))
        .count();
    assert_eq!(patches, 3, "two conflicts then success");
    // A replaced node (other UID) is not tainted.
    let gone = signal_svc::core::index::TaintRequest {
        name: names[2].clone(),
        uid: "not-this-one".into(),
    };
    assert_eq!(
        signal_svc::writers::taint::add_taint(&api, &gone)
            .await
            .unwrap(),
        signal_svc::writers::taint::Outcome::Gone
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_results_record_a_warning() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Fail).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let node = c.node_names().await[0].clone();
    c.add_taint(&node, OOS, None, "NoExecute").await;
    let (_, _, note) = eventually("Warning event", || async {
        c.node_events(&node)
            .await
            .into_iter()
            .find(|(t, r, _)| t == "Warning" && r == "LoadBalancerAdminStateUpdateFailed")
    })
    .await;
    assert!(note.contains("ARM 500 InternalServerError"), "{note}");
    assert!(
        c.node_events(&node)
            .await
            .iter()
            .all(|(_, r, _)| r != "LoadBalancerAdminStateDown")
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_writes_and_sends_nothing() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &["--dry-run"]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    c.preempt_event("ev-1", &names[0], NOTICE, 1).await;
    c.add_taint(&names[1], OOS, None, "NoExecute").await;
    eventually("signals seen", || async {
        (svc.metric("cutover_signal_desired_state_changes_total", "down")
            .await
            >= 1.0
            && svc
                .metric("cutover_signal_signals_total", "preempt_event")
                .await
                >= 1.0)
            .then_some(())
    })
    .await;
    assert!(
        c.taints(&names[0])
            .await
            .iter()
            .all(|(k, ..)| k != DRAINING)
    );
    assert_eq!(act.state.streams.lock().len(), 0);
    // Nothing written: no Lease taken, no Node event recorded.
    let leases: kube::Api<k8s_openapi::api::coordination::v1::Lease> =
        kube::Api::namespaced(c.client.clone(), "cutover");
    assert_eq!(
        leases.list(&Default::default()).await.unwrap().items.len(),
        0
    );
    assert!(c.node_events(&names[1]).await.is_empty());
    svc.stop().await;
}
