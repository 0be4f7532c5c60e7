//! The departures that carry no taint (issue 28 item 5): a Node being deleted (on by default),
//! and an AKS node image / version upgrade, which only cordons, drains and reimages: KEP-5683's
//! drain conditions on a cordoned node (`--trigger-drain-conditions`) and any cordon
//! (`--trigger-cordon`), both opt-in. A plain cordon stays a no-op by default. signal-svc
//! in-process against a real API server and a recording fake actuator.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use kube::api::{DeleteParams, Patch, PatchParams};

const DELETING: &str = "node-deleting";
const CORDONED: &str = "node-cordoned";
const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
const UPGRADE_STATUS: &str = "kubernetes.azure.com/upgrade-status";

async fn down_with(act: &FakeActuator, node: &str, reasons: &[&str]) {
    eventually("Down delta", || async {
        act.state
            .deltas(node)
            .into_iter()
            .rev()
            .find(|d| d.desired() == AdminState::Down)
            .filter(|d| d.reasons == reasons)
    })
    .await;
    assert_eq!(act.state.latest_state(node), Some(AdminState::Down));
}

async fn back_to_none(act: &FakeActuator, node: &str) {
    eventually("None delta", || async {
        (act.state.latest_state(node) == Some(AdminState::None)).then_some(())
    })
    .await;
}

/// Every node is asserted (level-triggered): `None` once the first state arrived.
async fn asserted_none(act: &FakeActuator, node: &str) {
    back_to_none(act, node).await;
}

async fn merge(c: &Cluster, node: &str, patch: serde_json::Value) {
    c.nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// `kubectl uncordon`, and the lifecycle controller's taint with it.
async fn uncordon(c: &Cluster, node: &str) {
    merge(
        c,
        node,
        serde_json::json!({"spec": {"unschedulable": false}}),
    )
    .await;
    c.remove_taint(node, "node.kubernetes.io/unschedulable")
        .await;
}

/// A KEP-5683 condition as `kubectl drain` would write it (strategic merge by type).
async fn drain_condition(c: &Cluster, node: &str, type_: &str, status: &str) {
    let patch = serde_json::json!({"status": {"conditions": [{
        "type": type_, "status": status, "reason": "AdminRequested",
        "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }]}});
    c.nodes()
        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
}

/// Karpenter's termination: its finalizer is on the Node, so a DELETE only sets the
/// deletionTimestamp and the Node stays while it drains. Cut from that moment; a plain cordon
/// and a cordon with a drain condition change nothing by default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleting_node_is_cut_and_a_cordon_is_not() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    for n in &names {
        asserted_none(&act, n).await;
    }

    c.set_unschedulable(&names[1]).await;
    c.set_unschedulable(&names[2]).await;
    drain_condition(&c, &names[2], DRAIN_IN_PROGRESS, "True").await;

    let node = &names[0];
    merge(
        &c,
        node,
        serde_json::json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}}),
    )
    .await;
    c.nodes()
        .delete(node, &DeleteParams::default())
        .await
        .unwrap();
    let held = c.node(node).await.unwrap();
    assert!(
        held.metadata.deletion_timestamp.is_some(),
        "the finalizer holds it"
    );
    down_with(&act, node, &[DELETING]).await;

    // Applied before the deletion, so seen before its Down: both still None.
    for n in &names[1..3] {
        assert_eq!(
            act.state.latest_state(n),
            Some(AdminState::None),
            "{n}: a cordon is not a departure by default"
        );
    }
    assert!(
        svc.metric("cutover_signal_signals_total", "kind=\"deleting\"")
            .await
            >= 1.0
    );

    // The finalizer's owner is done: the Node goes.
    merge(
        &c,
        node,
        serde_json::json!({"metadata": {"finalizers": null}}),
    )
    .await;
    eventually("node gone", || async {
        c.node(node).await.is_none().then_some(())
    })
    .await;
    svc.stop().await;
}

/// `--trigger-node-deleting=false` leaves a deleting node `None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_deleting_can_be_turned_off() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &["--trigger-node-deleting=false"],
    )
    .await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    asserted_none(&act, node).await;
    merge(
        &c,
        node,
        serde_json::json!({"metadata": {"finalizers": ["karpenter.sh/termination"]}}),
    )
    .await;
    c.nodes()
        .delete(node, &DeleteParams::default())
        .await
        .unwrap();
    // Sync point: a trigger that is on, applied after the deletion.
    c.add_taint(
        &names[1],
        "node.kubernetes.io/out-of-service",
        None,
        "NoExecute",
    )
    .await;
    down_with(&act, &names[1], &["node.kubernetes.io/out-of-service"]).await;
    assert_eq!(act.state.latest_state(node), Some(AdminState::None));
    svc.stop().await;
}

/// `--trigger-drain-conditions`: an AKS upgrade (or `kubectl drain`) that writes KEP-5683's
/// `DrainInProgress` on the node it cordoned is cut at the start of the drain, before the
/// reimage; the plain cordon next to it is not; uncordoning the reimaged node brings it back
/// even if the condition is left behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_conditions_cut_a_cordoned_node_being_drained() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &["--trigger-drain-conditions=true"],
    )
    .await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    for n in &names {
        asserted_none(&act, n).await;
    }
    c.set_unschedulable(&names[1]).await;

    let node = &names[0];
    c.set_unschedulable(node).await;
    drain_condition(&c, node, DRAIN_IN_PROGRESS, "True").await;
    down_with(&act, node, &[DRAIN_IN_PROGRESS]).await;
    assert_eq!(
        act.state.latest_state(&names[1]),
        Some(AdminState::None),
        "a plain cordon stays None"
    );

    // Reimaged and rejoined: uncordoned, the condition still True (stale).
    uncordon(&c, node).await;
    back_to_none(&act, node).await;
    svc.stop().await;
}

/// `--trigger-cordon`: the AKS upgrade as it is today (surge, cordon, drain, reimage, rejoin,
/// uncordon) is cut at the cordon and restored at the uncordon; a node AKS quarantined (its
/// drain failed; it is not reimaged and keeps its pods) is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_cordon_cuts_an_aks_upgrade_at_the_cordon() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &["--trigger-cordon=true"]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    for n in &names {
        asserted_none(&act, n).await;
    }
    let quarantined = &names[1];
    merge(
        &c,
        quarantined,
        serde_json::json!({"metadata": {"labels": {UPGRADE_STATUS: "Quarantined"}}}),
    )
    .await;
    c.set_unschedulable(quarantined).await;

    let node = &names[0];
    c.set_unschedulable(node).await;
    down_with(&act, node, &[CORDONED]).await;
    assert_eq!(
        act.state.latest_state(quarantined),
        Some(AdminState::None),
        "a quarantined node stays None"
    );
    assert!(
        svc.metric("cutover_signal_signals_total", "kind=\"cordon\"")
            .await
            >= 1.0
    );
    uncordon(&c, node).await;
    back_to_none(&act, node).await;
    svc.stop().await;
}
