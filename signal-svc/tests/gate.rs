//! The drain gate: the Node condition `LoadBalancerAdminStateDown` as a drainer sees it,
//! with a fake actuator whose results the test releases one by one.

#![allow(clippy::unwrap_used)]

mod common;

use common::*;
use cutover_proto::v1::{AdminState, ResultPhase};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;

const GATE: &str = "LoadBalancerAdminStateDown";
const OOS: &str = "node.kubernetes.io/out-of-service";

/// (status, reason) of the gate condition on a node.
async fn gate(c: &Cluster, node: &str) -> Option<(String, String)> {
    c.node(node)
        .await?
        .status?
        .conditions?
        .into_iter()
        .find(|c| c.type_ == GATE)
        .map(|c| (c.status, c.reason.unwrap_or_default()))
}

async fn gate_is(c: &Cluster, node: &str, status: &str, reason: &str) {
    eventually(&format!("{GATE}={status} ({reason})"), || async {
        gate(c, node)
            .await
            .filter(|(s, r)| s == status && r == reason)
            .map(|_| ())
    })
    .await;
}

/// The (status, reason) sequence a watcher saw.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

/// Records every distinct condition a drainer watching the node (as `kubectl wait` does)
/// sees.
fn watch_gate(c: &Cluster, node: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    use futures::StreamExt;
    use kube::runtime::watcher;
    let seen: Seen = Arc::default();
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(c.client.clone());
    let cfg = watcher::Config::default().fields(&format!("metadata.name={node}"));
    let out = seen.clone();
    let task = tokio::spawn(async move {
        let mut stream = watcher::watcher(api, cfg).boxed();
        while let Some(ev) = stream.next().await {
            let node = match ev {
                Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) => n,
                _ => continue,
            };
            let cond = node.status.and_then(|s| s.conditions).and_then(|cs| {
                cs.into_iter()
                    .find(|c| c.type_ == GATE)
                    .map(|c| (c.status, c.reason.unwrap_or_default()))
            });
            if let Some(cond) = cond {
                let mut v = out.lock();
                if v.last() != Some(&cond) {
                    v.push(cond);
                }
            }
        }
    });
    (seen, task)
}

async fn delta_received(act: &FakeActuator, node: &str, state: AdminState) {
    eventually("delta at the actuator", || async {
        (act.state.latest_state(node) == Some(state)).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gate_turns_true_only_once_effective_and_false_once_restored() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Silent).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    let (seen, poller) = watch_gate(&c, node);

    c.add_taint(node, OOS, None, "NoExecute").await;
    gate_is(&c, node, "Unknown", "SettingDown").await;
    delta_received(&act, node, AdminState::Down).await;
    // ARM accepted the write but the operation has not completed: still not True.
    assert!(act.state.report(node, ResultPhase::Accepted).await);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        gate(&c, node).await,
        Some(("Unknown".into(), "SettingDown".into())),
        "never True before EFFECTIVE"
    );
    assert!(act.state.report(node, ResultPhase::Effective).await);
    gate_is(&c, node, "True", "AdminStateDownEffective").await;
    // The kubelet's conditions are untouched (one entry merged by type).
    let conditions = c
        .node(node)
        .await
        .unwrap()
        .status
        .unwrap()
        .conditions
        .unwrap();
    assert!(
        conditions.iter().any(|c| c.type_ == "Ready"),
        "{conditions:?}"
    );

    c.remove_taint(node, OOS).await;
    gate_is(&c, node, "Unknown", "SettingNone").await;
    delta_received(&act, node, AdminState::None).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(gate(&c, node).await.unwrap().0, "Unknown");
    assert!(act.state.report(node, ResultPhase::Effective).await);
    gate_is(&c, node, "False", "AdminStateNoneEffective").await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    poller.abort();

    let statuses: Vec<String> = seen.lock().iter().map(|(s, _)| s.clone()).collect();
    assert_eq!(
        statuses,
        ["Unknown", "True", "Unknown", "False"],
        "{:?}",
        seen.lock()
    );
    // One write per transition, nothing redundant (ACCEPTED wrote nothing).
    assert_eq!(
        svc.metric("cutover_signal_condition_writes_total", "outcome=\"ok\"")
            .await,
        4.0
    );
    // Nodes never asserted get no condition at all.
    assert_eq!(gate(&c, &names[1]).await, None);
    svc.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_transition_is_unknown_with_a_reason_then_true() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Fail).await;
    let svc = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    svc.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    c.add_taint(node, OOS, None, "NoExecute").await;
    gate_is(&c, node, "Unknown", "SettingDownFailed").await;
    assert!(act.state.report(node, ResultPhase::Effective).await);
    gate_is(&c, node, "True", "AdminStateDownEffective").await;
    svc.stop().await;
}

/// A new leader re-stamps every version; a node whose gate is already True stays True (a
/// drainer that passed is never sent back), and the new leader's EFFECTIVE writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_change_keeps_a_true_gate() {
    let c = cluster(6).await;
    let act = FakeActuator::start("a", Mode::Effective).await;
    let a = start(&c, "pod-a", &[act.endpoint()], &[]).await;
    a.wait_ready().await;
    let names = c.node_names().await;
    let node = &names[0];
    c.add_taint(node, OOS, None, "NoExecute").await;
    gate_is(&c, node, "True", "AdminStateDownEffective").await;
    a.stop().await;
    let (seen, poller) = watch_gate(&c, node);
    let b = start(&c, "pod-b", &[act.endpoint()], &[]).await;
    b.wait_ready().await;
    eventually("the new leader's Down effective", || async {
        (b.metric("cutover_signal_results_total", "effective").await >= 1.0).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    poller.abort();
    let statuses: Vec<String> = seen.lock().iter().map(|(s, _)| s.clone()).collect();
    assert_eq!(statuses, ["True"], "{:?}", seen.lock());
    assert_eq!(
        b.metric("cutover_signal_condition_writes_total", "").await,
        0.0
    );
    b.stop().await;
}
