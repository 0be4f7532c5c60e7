//! signal-svc's own Node writes pass deploy/base's ValidatingAdmissionPolicy on a real
//! kube-apiserver: the whole stack runs with deploy/base's RBAC and the policy, and a taint (the
//! drain-gate condition, nodes/status), a Spot notice (its taint and annotation) and a
//! cutoverctl hold (the hold annotation) are all written, none refused; the same ServiceAccount
//! is refused a label. tests/kube-real/tests/node_policy.rs checks each refusal one by one.

#![allow(clippy::unwrap_used)] // a test: a panic is the failure report

use cutover_e2e::judge::State;
use cutover_e2e::kube_ops::{self, OUT_OF_SERVICE};
use cutover_e2e::kube_side::KubeKind;
use cutover_e2e::manifests::{rbac_objects, render};
use cutover_e2e::sandbox::Sandbox;
use cutover_e2e::stack::{SIGNAL_CALLER, StackOptions};
use cutover_testkit::until_ok;
use std::time::Duration;

const DRAINING: &str = "cloudprovider.azure.microsoft.com/draining";

/// Polls `check` on a node until it holds (30 s).
async fn wait_node(
    sb: &Sandbox,
    node: &str,
    what: &str,
    check: impl Fn(&k8s_openapi::api::core::v1::Node) -> bool,
) {
    let (every, check) = (Duration::from_millis(200), &check);
    until_ok(Duration::from_secs(30), every, || async move {
        let n = sb.ops.node(node).await.unwrap();
        check(&n)
            .then_some(())
            .ok_or_else(|| format!("{node}: never {what}: {n:?}"))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_svc_writes_pass_the_node_write_policy() {
    let dir = std::env::temp_dir().join(format!("cutover-e2e-vap-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let docs = render("base").unwrap();
    let mut objects = rbac_objects(&docs);
    let policy: Vec<_> = docs
        .iter()
        .filter(|d| {
            d["kind"]
                .as_str()
                .is_some_and(|k| k.starts_with("ValidatingAdmissionPolicy"))
        })
        .cloned()
        .collect();
    assert_eq!(policy.len(), 2, "the policy and its binding");
    objects.extend(policy);
    let mut options = StackOptions::fast("aks", 8, dir);
    options.kube = KubeKind::Real;
    options.kube_objects = Some(objects);
    let mut sb = Sandbox::start(options).await.unwrap();
    let wait = Duration::from_secs(60);

    // The drain gate: LoadBalancerAdminStateDown through nodes/status.
    let node = sb.fresh_nodes("userpool", 1).unwrap().remove(0);
    let t0 = jiff::Timestamp::now();
    sb.ops
        .taint(&node, OUT_OF_SERVICE, None, "NoExecute")
        .await
        .unwrap();
    sb.wait_state(std::slice::from_ref(&node), State::Down, t0, wait)
        .await
        .unwrap();
    wait_node(&sb, &node, "gated True", |n| {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c.type_ == "LoadBalancerAdminStateDown" && c.status == "True")
            })
    })
    .await;

    // A Spot notice: signal-svc's taint and the annotation beside it.
    let spot = sb.fresh_nodes("spotpool", 1).unwrap().remove(0);
    let t0 = jiff::Timestamp::now();
    sb.ops.preempt_event(&spot, 30).await.unwrap();
    sb.wait_state(std::slice::from_ref(&spot), State::Down, t0, wait)
        .await
        .unwrap();
    wait_node(&sb, &spot, "tainted by signal-svc", |n| {
        n.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == DRAINING))
    })
    .await;

    // A tool hold, stored by the leader as the annotation cutover.io/hold.
    let held = sb.fresh_nodes("userpool", 1).unwrap().remove(0);
    let n = sb.stack.cluster.node(&held).unwrap().clone();
    let port = sb.stack.actuators[0].grpc_port.unwrap();
    let out = std::process::Command::new(cutover_e2e::bins::path("cutoverctl").unwrap())
        .args([
            "set",
            &held,
            "down",
            "--provider-id",
            &n.provider_id,
            "--ip",
            &n.ipv4.to_string(),
            "--ip",
            &n.ipv6.to_string(),
            "--reason",
            "node policy test",
        ])
        .env("CUTOVER_ENDPOINT", format!("https://127.0.0.1:{port}"))
        .env("CUTOVER_TLS_CA", &sb.stack.pki.ca)
        .env("CUTOVER_TLS_CERT", &sb.stack.pki.tool.cert)
        .env("CUTOVER_TLS_KEY", &sb.stack.pki.tool.key)
        .env("CUTOVER_TLS_SERVER_NAME", cutover_e2e::certs::ACTUATOR_NAME)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cutoverctl set down: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_node(&sb, &held, "held", |n| {
        n.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("cutover.io/hold"))
    })
    .await;

    // None of signal-svc's writes to Nodes was refused.
    let refused: Vec<String> = sb
        .stack
        .kube
        .requests()
        .into_iter()
        .filter(|r| r.caller.as_deref() == Some(SIGNAL_CALLER))
        .filter(|r| r.method == "PATCH" && r.path.starts_with("/api/v1/nodes/"))
        .filter(|r| r.status == 403 || r.status == 422)
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert!(refused.is_empty(), "refused: {refused:#?}");

    // And the policy is in force for that ServiceAccount.
    let signal =
        kube_ops::Cluster::new(kube_ops::client(&sb.stack.signal_kubeconfig).await.unwrap());
    let err = signal
        .label(
            &node,
            "node.kubernetes.io/exclude-from-external-load-balancers",
            Some("true"),
        )
        .await
        .expect_err("signal-svc's ServiceAccount may not label a Node");
    assert!(
        format!("{err:#}").contains("cutover-signal-svc-node-writes"),
        "{err:#}"
    );
    sb.stack.stop().await;
}
