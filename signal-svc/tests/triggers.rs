//! The built-in triggers of today's node departures (Karpenter / node auto-provisioning,
//! cluster-autoscaler, the exclusion label), each on by default and each with a flag to turn
//! it off; signal-svc in-process against the test cluster and a recording fake actuator.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::AdminState;
use kube::api::{Patch, PatchParams};

const KARPENTER: &str = "karpenter.sh/disrupted";
const CA: &str = "ToBeDeletedByClusterAutoscaler";
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// Sets (`Some`) or removes (`None`) a label with a merge patch, as `kubectl label` does.
async fn label(c: &Cluster, node: &str, key: &str, value: Option<&str>) {
    let patch = serde_json::json!({"metadata": {"labels": {key: value}}});
    c.nodes()
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn built_in_triggers_go_down_and_back() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;

    // Karpenter's taint, any effect.
    for (node, effect) in [(&names[0], "NoSchedule"), (&names[1], "NoExecute")] {
        c.add_taint(node, KARPENTER, None, effect).await;
        down_with(&act, node, &[KARPENTER]).await;
        c.remove_taint(node, KARPENTER).await;
        back_to_none(&act, node).await;
    }

    // cluster-autoscaler's taint (its value is a unix time).
    let node = &names[2];
    c.add_taint(node, CA, Some("1700000000"), "NoSchedule")
        .await;
    down_with(&act, node, &[CA]).await;
    c.remove_taint(node, CA).await;
    back_to_none(&act, node).await;

    // The exclusion label as Karpenter writes it; a false boolean brings the node back,
    // any other value takes it out again; removing the label restores it.
    let node = &names[3];
    label(&c, node, EXCLUDE, Some("karpenter")).await;
    down_with(&act, node, &[EXCLUDE]).await;
    label(&c, node, EXCLUDE, Some("false")).await;
    back_to_none(&act, node).await;
    label(&c, node, EXCLUDE, Some("")).await;
    eventually("Down again", || async {
        (act.state.latest_state(node) == Some(AdminState::Down)).then_some(())
    })
    .await;
    label(&c, node, EXCLUDE, None).await;
    back_to_none(&act, node).await;

    // Karpenter's real termination sets both: one Down carrying both reasons, and the node
    // stays Down until both are gone.
    let node = &names[4];
    c.add_taint(node, KARPENTER, None, "NoSchedule").await;
    label(&c, node, EXCLUDE, Some("karpenter")).await;
    down_with(&act, node, &[KARPENTER, EXCLUDE]).await;
    c.remove_taint(node, KARPENTER).await;
    down_with(&act, node, &[EXCLUDE]).await;
    label(&c, node, EXCLUDE, None).await;
    back_to_none(&act, node).await;

    assert!(
        svc.metric("cutover_signal_signals_total", "kind=\"label\"")
            .await
            >= 3.0
    );
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_flag_off_keeps_its_node_none() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let svc = start(
        &c,
        "pod-a",
        &[act.endpoint()],
        &[
            "--trigger-karpenter-disrupted=false",
            "--trigger-cluster-autoscaler=false",
            "--trigger-exclude-label=false",
        ],
    )
    .await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    c.add_taint(&names[0], KARPENTER, None, "NoSchedule").await;
    c.add_taint(&names[1], CA, Some("1700000000"), "NoSchedule")
        .await;
    label(&c, &names[2], EXCLUDE, Some("karpenter")).await;
    // Sync point: a trigger that is on, applied after the others.
    c.add_taint(&names[3], SHUTDOWN, None, "NoSchedule").await;
    down_with(&act, &names[3], &[SHUTDOWN]).await;
    for node in &names[..3] {
        // Every node is asserted None (level-triggered); none of these may be Down.
        assert_eq!(
            act.state.latest_state(node),
            Some(AdminState::None),
            "{node} must stay None"
        );
    }
    svc.stop().await;
}
