//! RBAC is exactly what signal-svc calls: every request it makes to the real API server during a
//! full taint / restore / re-taint cycle and a Spot notice is allowed by the roles `deploy/base`
//! binds to its service account, none is refused, and every permission granted was used (read
//! from kube-apiserver's audit log). signal-svc runs with its ServiceAccount's token from
//! TokenRequest, so a verb missing from the ClusterRole is a real 403 and fails these tests.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::judge::State;
use cutover_e2e::kube_ops::{OUT_OF_SERVICE, SPOT_EVICTION};
use cutover_e2e::manifests::{allows, needed, permissions, rbac_objects, render};
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::stack::{SIGNAL_CALLER, StackOptions};
use cutover_testkit::{eventually_within, until_ok};
use std::collections::BTreeSet;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_svc_calls_exactly_what_its_rbac_grants() {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-rbac-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut sb = Sandbox::start(StackOptions::fast("aks", 8, dir))
        .await
        .unwrap();
    let wait = Duration::from_secs(60);
    // Down, None, Down again on one node: the repeat of a Node event is a patch.
    let node = sb.fresh_nodes("userpool", 1).unwrap().remove(0);
    let mut recorded = 0;
    for (taint, state) in [
        (true, State::Down),
        (false, State::None),
        (true, State::Down),
    ] {
        let t0 = jiff::Timestamp::now();
        if taint {
            sb.ops
                .taint(&node, OUT_OF_SERVICE, None, "NoExecute")
                .await
                .unwrap();
        } else {
            sb.ops.untaint(&node, OUT_OF_SERVICE).await.unwrap();
        }
        sb.wait_state(std::slice::from_ref(&node), state, t0, wait)
            .await
            .unwrap();
        recorded += 1;
        wait_for_event_writes(&sb, recorded).await;
    }
    // A Spot notice makes signal-svc read and patch the node.
    let spot = sb.fresh_nodes("spotpool", 1).unwrap().remove(0);
    let t0 = jiff::Timestamp::now();
    sb.ops.preempt_event(&spot, 30).await.unwrap();
    sb.wait_state(std::slice::from_ref(&spot), State::Down, t0, wait)
        .await
        .unwrap();
    wait_for_event_writes(&sb, recorded + 1).await;
    tokio::time::sleep(Duration::from_secs(3)).await; // a few lease renewals
    sb.stack.stop().await;

    let granted = permissions(&render("base").unwrap(), "signal-svc");
    let calls: Vec<_> = sb
        .stack
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.caller.as_deref() == Some(SIGNAL_CALLER))
        .collect();
    assert!(
        !calls.is_empty(),
        "signal-svc made no requests as {SIGNAL_CALLER}"
    );
    // The API server itself (a real one: the audit log records its answers) refused nothing.
    let refused: Vec<String> = calls
        .iter()
        .filter(|c| c.status == 403)
        .map(|c| format!("{} {}", c.method, c.path))
        .collect();
    assert!(
        refused.is_empty(),
        "the API server refused signal-svc: {refused:#?}"
    );
    let mut used = BTreeSet::new();
    for call in &calls {
        let Some(need) = needed(&call.method, &call.path) else {
            continue;
        };
        assert!(
            allows(&granted, &need),
            "signal-svc called {} {} which its RBAC does not allow ({need:?})",
            call.method,
            call.path
        );
        used.insert(need);
    }
    let unused: Vec<_> = granted
        .iter()
        .filter(|g| {
            !used
                .iter()
                .any(|u| u.0 == g.0 && u.1 == g.1 && u.2 == g.2 && (g.3.is_empty() || g.3 == u.3))
        })
        .collect();
    let event_calls: Vec<String> = calls
        .iter()
        .filter(|c| c.path.contains("events"))
        .map(|c| format!("{} {} {}", c.method, c.path, c.status))
        .collect();
    assert!(
        unused.is_empty(),
        "RBAC grants permissions signal-svc never used: {unused:?}\nevent calls: {event_calls:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_role_without_patch_on_nodes_refuses_the_spot_taint() {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-rbac-nopatch-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut objects = rbac_objects(&render("base").unwrap());
    let role = objects
        .iter_mut()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "cutover-signal-svc")
        .unwrap();
    for rule in role["rules"].as_array_mut().unwrap() {
        if rule["resources"] == serde_json::json!(["nodes"]) {
            rule["verbs"]
                .as_array_mut()
                .unwrap()
                .retain(|v| v != "patch");
        }
    }
    let mut options = StackOptions::fast("aks", 8, dir);
    options.kube_objects = Some(objects);
    let mut sb = Sandbox::start(options).await.unwrap();

    let spot = sb.fresh_nodes("spotpool", 1).unwrap().remove(0);
    sb.ops.preempt_event(&spot, 30).await.unwrap();
    let path = format!("/api/v1/nodes/{spot}");
    let what = format!("signal-svc to try to taint {spot}");
    let every = Duration::from_millis(100);
    let refused = eventually_within(Duration::from_secs(30), every, &what, || async {
        let refused: Vec<_> = sb
            .stack
            .kube
            .requests()
            .into_iter()
            .filter(|r| r.caller.as_deref() == Some(SIGNAL_CALLER))
            .filter(|r| r.method == "PATCH" && r.path.starts_with(&path))
            .collect();
        (!refused.is_empty()).then_some(refused)
    })
    .await;
    assert!(refused.iter().all(|r| r.status == 403), "{refused:?}");
    // The node keeps no cutover taint, and signal-svc says why in its log.
    let node = sb.ops.node(&spot).await.unwrap();
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    assert!(taints.iter().all(|t| t.key != SPOT_EVICTION), "{taints:?}");
    let expected = format!(
        "nodes \"{spot}\" is forbidden: User \"{SIGNAL_CALLER}\" cannot patch resource \"nodes\" in API group \"\" at the cluster scope"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let logs: String = sb
            .stack
            .signals
            .iter()
            .filter_map(|s| s.proc.as_ref())
            .map(|p| p.log_tail(400))
            .collect();
        if logs.contains(&expected) {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "signal-svc did not log the refusal ({expected}):\n{logs}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sb.stack.stop().await;
}

/// Waits until signal-svc has written `n` Node events (one per effective result).
async fn wait_for_event_writes(sb: &Sandbox, n: usize) {
    let every = Duration::from_millis(100);
    until_ok(Duration::from_secs(30), every, || async move {
        let writes = sb
            .stack
            .kube
            .requests()
            .iter()
            .filter(|r| r.caller.as_deref() == Some(SIGNAL_CALLER))
            .filter(|r| r.path.starts_with("/apis/events.k8s.io/") && r.method != "GET")
            .count();
        (writes >= n)
            .then_some(())
            .ok_or_else(|| format!("signal-svc wrote {writes} Node events, want {n}"))
    })
    .await
}
