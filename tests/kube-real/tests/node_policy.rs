//! deploy/base's ValidatingAdmissionPolicy `cutover-signal-svc-node-writes` on a real
//! kube-apiserver: signal-svc's ServiceAccount (with deploy/base's RBAC, which allows `patch`
//! on any Node field) can make exactly the writes signal-svc makes (the shapes of
//! signal-svc's taint, hold and gate writers) and no other change to a Node; an admin is
//! not affected; without the binding the same ServiceAccount could (RBAC alone allows it).
#![allow(clippy::unwrap_used)]

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube_real::RealApiServer;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const POLICY: &str = "cutover-signal-svc-node-writes";
const DRAINING: &str = "cloudprovider.azure.microsoft.com/draining";

fn deploy(file: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../../deploy/base/{file}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

async fn client_from(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn params() -> PatchParams {
    PatchParams {
        field_manager: Some("cutover-signal-svc".into()),
        ..PatchParams::default()
    }
}

/// A patch of the Node (`status`: of nodes/status) as signal-svc; `Ok` or the refusal.
async fn patch(
    api: &Api<Node>,
    node: &str,
    status: bool,
    p: &Patch<Value>,
) -> Result<Node, Box<kube::core::Status>> {
    let r = if status {
        api.patch_status(node, &params(), p).await
    } else {
        api.patch(node, &params(), p).await
    };
    r.map_err(|e| match e {
        kube::Error::Api(s) => s,
        other => panic!("{node}: not an API answer: {other}"),
    })
}

/// The refusal must come from the policy, with the validation's message.
fn refused_by_policy(r: Result<Node, Box<kube::core::Status>>, message: &str, what: &str) {
    match r {
        Err(s) => {
            assert_eq!(s.code, 403, "{what}: {s:?}");
            assert!(
                s.message.contains(POLICY) && s.message.contains(message),
                "{what}: refused, but not by the policy's `{message}`: {}",
                s.message
            );
        }
        Ok(_) => panic!("{what}: allowed, must be refused by {POLICY}"),
    }
}

fn taints(n: &Node) -> Vec<Value> {
    n.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .map(|t| serde_json::to_value(t).unwrap())
        .collect()
}

/// taint.rs: the full taint list plus one, under resourceVersion and uid preconditions, with
/// the spot-notice-handled annotation in the same strategic merge patch.
fn taint_patch(n: &Node, extra: Value, annotation: &str) -> Patch<Value> {
    let mut list = taints(n);
    list.push(extra);
    Patch::Strategic(json!({
        "metadata": {
            "resourceVersion": n.metadata.resource_version,
            "uid": n.metadata.uid,
            "annotations": { annotation: "2026-01-01T00:00:00Z" },
        },
        "spec": { "taints": list },
    }))
}

/// gate.rs: one condition merged by type, under a uid precondition.
fn condition_patch(n: &Node, type_: &str, status: &str) -> Patch<Value> {
    Patch::Strategic(json!({
        "metadata": {"uid": n.metadata.uid},
        "status": {"conditions": [{
            "type": type_,
            "status": status,
            "reason": "AdminStateDown",
            "message": "every load balancer entry is Down",
            "lastTransitionTime": "2026-01-01T00:00:00Z",
            "lastHeartbeatTime": "2026-01-01T00:00:00Z",
        }]}
    }))
}

#[tokio::test]
async fn signal_svc_may_change_only_its_own_node_fields() {
    let server = RealApiServer::start().await.unwrap();
    let admin = server.admin_client().unwrap();
    let seed = kube_sim::Seed::preset("aks", 6).unwrap();
    kube_real::seed::nodes(&admin, &seed).await.unwrap();
    let text = [
        "namespace.yaml",
        "signal-svc/serviceaccount.yaml",
        "signal-svc/rbac.yaml",
        "signal-svc/node-policy.yaml",
    ]
    .map(deploy)
    .join("\n---\n");
    let objects = kube_real::manifests::parse(&text).unwrap();
    kube_real::manifests::apply(&admin, &objects, "cutover")
        .await
        .unwrap();

    let token = server
        .service_account_token("cutover", "signal-svc", Duration::from_secs(3600))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    server.write_token_kubeconfig(&kubeconfig, &token).unwrap();
    let signal: Api<Node> = Api::all(client_from(&kubeconfig).await);
    let nodes: Api<Node> = Api::all(admin.clone());
    let names: Vec<String> = nodes
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|n| n.metadata.name.unwrap())
        .collect();
    let (a, b, c) = (names[0].as_str(), names[1].as_str(), names[2].as_str());

    // A policy takes effect once the API server has compiled it: wait for the first refusal.
    let label = Patch::Merge(json!({"metadata": {"labels": {
        "node.kubernetes.io/exclude-from-external-load-balancers": "true"
    }}}));
    let started = Instant::now();
    loop {
        match patch(&signal, a, false, &label).await {
            Err(s) if s.code == 403 && s.message.contains(POLICY) => break,
            Err(s) => panic!("label patch refused, but not by the policy: {s:?}"),
            Ok(_) => {
                assert!(
                    started.elapsed() < Duration::from_secs(60),
                    "the policy never took effect (kube-apiserver log: {})",
                    server.apiserver_log().display()
                );
                // Undo it as the admin, then try again.
                nodes
                    .patch(
                        a,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {
                            "node.kubernetes.io/exclude-from-external-load-balancers": null
                        }}})),
                    )
                    .await
                    .unwrap();
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }

    // (a) signal-svc's own writes pass.
    let node = nodes.get(a).await.unwrap();
    let spot = json!({"key": DRAINING, "value": "spot-eviction", "effect": "NoSchedule",
                      "timeAdded": "2026-01-01T00:00:00Z"});
    let tainted = patch(
        &signal,
        a,
        false,
        &taint_patch(&node, spot.clone(), "cutover.io/spot-notice-handled"),
    )
    .await
    .unwrap_or_else(|s| panic!("taint.rs's write refused: {s:?}"));
    assert!(taints(&tainted).iter().any(|t| t["key"] == DRAINING));
    // On a node that already has other taints, which it re-sends unchanged.
    for name in [b, c] {
        nodes
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Strategic(json!({"spec": {"taints": [
                    {"key": "karpenter.sh/disrupted", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "gpu", "effect": "NoExecute"},
                ]}})),
            )
            .await
            .unwrap();
    }
    let node_b = nodes.get(b).await.unwrap();
    patch(
        &signal,
        b,
        false,
        &taint_patch(&node_b, spot.clone(), "cutover.io/spot-notice-handled"),
    )
    .await
    .unwrap_or_else(|s| panic!("taint.rs's write beside other taints refused: {s:?}"));
    // hold.rs: set, then remove, the hold annotation (merge patch, uid and resourceVersion).
    for value in [
        json!("reason=ticket 1;by=ops;since=2026-01-01T00:00:00Z"),
        Value::Null,
    ] {
        let n = nodes.get(a).await.unwrap();
        patch(
            &signal,
            a,
            false,
            &Patch::Merge(json!({"metadata": {
                "uid": n.metadata.uid,
                "resourceVersion": n.metadata.resource_version,
                "annotations": {"cutover.io/hold": value},
            }})),
        )
        .await
        .unwrap_or_else(|s| panic!("hold.rs's write ({value}) refused: {s:?}"));
    }
    // gate.rs: the drain-gate condition, added and then changed.
    for status in ["Unknown", "True", "False"] {
        let n = nodes.get(a).await.unwrap();
        let written = patch(
            &signal,
            a,
            true,
            &condition_patch(&n, "LoadBalancerAdminStateDown", status),
        )
        .await
        .unwrap_or_else(|s| panic!("gate.rs's write ({status}) refused: {s:?}"));
        let conditions = written.status.unwrap().conditions.unwrap();
        assert!(
            conditions
                .iter()
                .any(|c| c.type_ == "LoadBalancerAdminStateDown" && c.status == status)
        );
        assert!(conditions.iter().any(|c| c.type_ == "Ready"));
    }

    // (b) anything else is refused (on `c`, which has other taints and not signal-svc's).
    let n = nodes.get(c).await.unwrap();
    let spot_taint_only = "may only add the taint";
    for (what, extra) in [
        (
            "another taint",
            json!({"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}),
        ),
        (
            "its own key with NoExecute",
            json!({"key": DRAINING, "value": "spot-eviction", "effect": "NoExecute"}),
        ),
        (
            "its own key with another value",
            json!({"key": DRAINING, "value": "anything", "effect": "NoSchedule"}),
        ),
    ] {
        refused_by_policy(
            patch(
                &signal,
                c,
                false,
                &taint_patch(&n, extra, "cutover.io/hold"),
            )
            .await,
            spot_taint_only,
            what,
        );
    }
    let mut fewer = taints(&n);
    fewer.retain(|t| t["key"] != "dedicated");
    refused_by_policy(
        patch(
            &signal,
            c,
            false,
            &Patch::Strategic(json!({"spec": {"taints": fewer}})),
        )
        .await,
        spot_taint_only,
        "removing another taint",
    );
    let mut edited = taints(&n);
    for t in &mut edited {
        if t["key"] == "dedicated" {
            t["effect"] = json!("NoSchedule");
        }
    }
    refused_by_policy(
        patch(
            &signal,
            c,
            false,
            &Patch::Strategic(json!({"spec": {"taints": edited}})),
        )
        .await,
        spot_taint_only,
        "editing another taint",
    );
    let mut without_own = taints(&nodes.get(b).await.unwrap());
    without_own.retain(|t| t["key"] != DRAINING);
    refused_by_policy(
        patch(
            &signal,
            b,
            false,
            &Patch::Strategic(json!({"spec": {"taints": without_own}})),
        )
        .await,
        spot_taint_only,
        "removing its own taint",
    );
    refused_by_policy(
        patch(&signal, a, false, &label).await,
        "labels",
        "the exclude-from-external-load-balancers label",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            false,
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await,
        "spec other than",
        "spec.unschedulable (a cordon)",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            false,
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/other": "x"}}})),
        )
        .await,
        "only the annotations",
        "another annotation",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            false,
            &Patch::Merge(json!({"metadata": {"finalizers": ["example.com/keep"]}})),
        )
        .await,
        "finalizers",
        "a finalizer",
    );
    let n = nodes.get(a).await.unwrap();
    refused_by_policy(
        patch(&signal, a, true, &condition_patch(&n, "Ready", "False")).await,
        "only the LoadBalancerAdminStateDown condition",
        "the Ready condition",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            true,
            &Patch::Merge(json!({"status": {"addresses": [
                {"type": "InternalIP", "address": "10.9.9.9"}
            ]}})),
        )
        .await,
        "status other than",
        "status.addresses",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            true,
            &Patch::Merge(json!({"metadata": {"labels": {"example.com/x": "y"}}})),
        )
        .await,
        "labels",
        "a label through nodes/status",
    );
    refused_by_policy(
        patch(
            &signal,
            a,
            true,
            &Patch::Merge(json!({"metadata": {"annotations": {"cutover.io/hold": "x"}}})),
        )
        .await,
        "only the annotations",
        "the hold annotation through nodes/status",
    );

    // (c) Other callers are not matched: the admin labels and cordons.
    nodes
        .patch(a, &PatchParams::default(), &label)
        .await
        .unwrap();
    nodes
        .patch(
            a,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();

    // Without the binding, RBAC alone lets signal-svc's ServiceAccount change any field: the
    // policy is what refuses.
    let bindings: Api<kube::api::DynamicObject> = Api::all_with(
        admin.clone(),
        &kube::api::ApiResource {
            group: "admissionregistration.k8s.io".into(),
            version: "v1".into(),
            api_version: "admissionregistration.k8s.io/v1".into(),
            kind: "ValidatingAdmissionPolicyBinding".into(),
            plural: "validatingadmissionpolicybindings".into(),
        },
    );
    bindings
        .delete(POLICY, &DeleteParams::default())
        .await
        .unwrap();
    let cordon_off = Patch::Merge(json!({"spec": {"unschedulable": false}}));
    let started = Instant::now();
    while let Err(s) = patch(&signal, a, false, &cordon_off).await {
        assert!(
            s.message.contains(POLICY),
            "refused by something else: {s:?}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "still refused after the binding was deleted: {s:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
