//! kube-sim held to the real API server: the requests signal-svc and kubectl make are sent to
//! both, seeded alike (the same fixture nodes, deploy/base's RBAC), and the status codes, Status
//! reasons and the fields cutover reads must agree. A difference fails with both answers.
#![allow(clippy::unwrap_used)]

use kube::client::Body;
use serde_json::{Value, json};
use std::time::Duration;

const NODE: &str = "aks-nodepool1-12345678-vmss000000";
const SA: &str = "system:serviceaccount:cutover:signal-svc";

/// One server under test, as an admin and as signal-svc's ServiceAccount.
struct Side {
    name: &'static str,
    admin: kube::Client,
    signal: kube::Client,
}

async fn client_from(kubeconfig: &std::path::Path) -> kube::Client {
    let kc = kube::config::Kubeconfig::read_from(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn rbac() -> Vec<Value> {
    let base = concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/base");
    let text: String = ["signal-svc/serviceaccount.yaml", "signal-svc/rbac.yaml"]
        .iter()
        .map(|f| std::fs::read_to_string(format!("{base}/{f}")).unwrap())
        .collect::<Vec<_>>()
        .join("\n---\n");
    let mut objects = kube_real::manifests::parse(&text).unwrap();
    for o in &mut objects {
        // Namespaced objects without a namespace go to `cutover` (the events Role names
        // `default`, where Node events are recorded).
        if o["kind"] != "ClusterRole"
            && o["kind"] != "ClusterRoleBinding"
            && o["metadata"]["namespace"].is_null()
        {
            o["metadata"]["namespace"] = json!("cutover");
        }
    }
    objects
}

/// An answer reduced to what cutover depends on.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    status: u16,
    /// `reason` of a Status body (Conflict, NotFound, Forbidden, Invalid, Expired, ...).
    reason: Option<String>,
    body: Value,
}

async fn send(
    client: &kube::Client,
    method: &str,
    path: &str,
    ctype: &str,
    body: Option<Value>,
) -> Answer {
    let mut req = http::Request::builder().method(method).uri(path);
    if body.is_some() {
        req = req.header("content-type", ctype);
    }
    let req = req
        .body(Body::from(
            body.map(|b| serde_json::to_vec(&b).unwrap())
                .unwrap_or_default(),
        ))
        .unwrap();
    let res = client.send(req).await.unwrap();
    let status = res.status().as_u16();
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let reason = (body["kind"] == "Status")
        .then(|| body["reason"].as_str().map(str::to_owned))
        .flatten();
    Answer {
        status,
        reason,
        body,
    }
}

fn rv(v: &Value) -> String {
    v["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn taint_keys(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["key"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// Every probe, run against one side; returns (probe name, what to compare).
async fn probes(s: &Side) -> Vec<(&'static str, Value)> {
    let mut out: Vec<(&'static str, Value)> = Vec::new();
    let a = &s.admin;
    let node_path = format!("/api/v1/nodes/{NODE}");
    let code = |x: &Answer| json!({"status": x.status, "reason": x.reason});

    // Lists with paging, as reflectors and kubectl page.
    let page = send(a, "GET", "/api/v1/nodes?limit=2", "", None).await;
    let cont = page.body["metadata"]["continue"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    out.push(("list limit=2", json!({"status": page.status, "items": page.body["items"].as_array().map(Vec::len), "continue": !cont.is_empty()})));
    let next = send(
        a,
        "GET",
        &format!("/api/v1/nodes?limit=2&continue={cont}"),
        "",
        None,
    )
    .await;
    out.push((
        "list continue",
        json!({"status": next.status, "items": next.body["items"].as_array().map(Vec::len)}),
    ));
    let bad = send(
        a,
        "GET",
        "/api/v1/nodes?limit=2&continue=not-a-token",
        "",
        None,
    )
    .await;
    out.push(("list bad continue", code(&bad)));

    // Strategic-merge, merge and JSON patches of taints, with and without preconditions.
    let node = send(a, "GET", &node_path, "", None).await.body;
    let stale = rv(&node);
    let sm = send(a, "PATCH", &node_path, "application/strategic-merge-patch+json",
        Some(json!({"metadata": {"resourceVersion": stale}, "spec": {"taints": [{"key": "k1", "effect": "NoSchedule"}]}}))).await;
    out.push((
        "strategic patch with current rv",
        json!({"status": sm.status, "taints": taint_keys(&sm.body)}),
    ));
    let stale_again = send(a, "PATCH", &node_path, "application/merge-patch+json",
        Some(json!({"metadata": {"resourceVersion": stale}, "spec": {"taints": [{"key": "k2", "effect": "NoSchedule"}]}}))).await;
    out.push(("merge patch with stale rv", code(&stale_again)));
    let jp_fail = send(a, "PATCH", &node_path, "application/json-patch+json",
        Some(json!([{"op": "test", "path": "/spec/taints/0/key", "value": "other"}, {"op": "remove", "path": "/spec/taints/0"}]))).await;
    out.push(("json patch failing test op", code(&jp_fail)));
    let jp = send(a, "PATCH", &node_path, "application/json-patch+json",
        Some(json!([{"op": "test", "path": "/spec/taints/0/key", "value": "k1"}, {"op": "add", "path": "/spec/taints/-", "value": {"key": "k3", "value": "v", "effect": "NoExecute"}}]))).await;
    out.push((
        "json patch append",
        json!({"status": jp.status, "taints": taint_keys(&jp.body)}),
    ));
    let merge = send(
        a,
        "PATCH",
        &node_path,
        "application/merge-patch+json",
        Some(json!({"metadata": {"annotations": {"cutover.io/hold": "{}"}}})),
    )
    .await;
    out.push(("merge patch annotation", json!({"status": merge.status, "hold": merge.body["metadata"]["annotations"]["cutover.io/hold"]})));
    let invalid = send(
        a,
        "PATCH",
        &node_path,
        "application/merge-patch+json",
        Some(json!({"spec": {"taints": [{"key": "k4", "effect": "Sometimes"}]}})),
    )
    .await;
    out.push(("invalid taint effect", code(&invalid)));
    let missing = send(
        a,
        "PATCH",
        "/api/v1/nodes/no-such-node",
        "application/merge-patch+json",
        Some(json!({"metadata": {"labels": {"a": "b"}}})),
    )
    .await;
    out.push(("patch missing node", code(&missing)));
    let unsupported = send(
        a,
        "PATCH",
        &node_path,
        "application/apply-patch+json-nope",
        Some(json!({})),
    )
    .await;
    out.push((
        "unsupported patch type",
        json!({"status": unsupported.status}),
    ));

    // Node status through the subresource (the drain gate's condition).
    let status = send(a, "PATCH", &format!("{node_path}/status"), "application/strategic-merge-patch+json",
        Some(json!({"status": {"conditions": [{"type": "LoadBalancerAdminStateDown", "status": "True", "reason": "Effective", "message": "m", "lastTransitionTime": "2026-11-25T00:00:00Z"}]}}))).await;
    let conditions: Vec<String> = status.body["status"]["conditions"]
        .as_array()
        .unwrap_or(&vec![])
        .iter()
        .map(|c| c["type"].as_str().unwrap_or_default().to_owned())
        .collect();
    out.push(("status patch keeps other conditions", json!({"status": status.status, "ready_kept": conditions.contains(&"Ready".to_string()), "added": conditions.contains(&"LoadBalancerAdminStateDown".to_string()), "taints_untouched": taint_keys(&status.body)})));

    // Lease create / update / conflicts, as leader election does.
    let leases = "/apis/coordination.k8s.io/v1/namespaces/cutover/leases";
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "cutover-signal-svc"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 4, "leaseTransitions": 1}});
    let created = send(
        &s.signal,
        "POST",
        leases,
        "application/json",
        Some(lease.clone()),
    )
    .await;
    out.push((
        "lease create",
        json!({"status": created.status, "transitions": created.body["spec"]["leaseTransitions"]}),
    ));
    let again = send(&s.signal, "POST", leases, "application/json", Some(lease)).await;
    out.push(("lease create again", code(&again)));
    let mut update = created.body.clone();
    update["spec"]["holderIdentity"] = json!("b");
    let updated = send(
        &s.signal,
        "PUT",
        &format!("{leases}/cutover-signal-svc"),
        "application/json",
        Some(update.clone()),
    )
    .await;
    out.push((
        "lease update",
        json!({"status": updated.status, "holder": updated.body["spec"]["holderIdentity"]}),
    ));
    let conflict = send(
        &s.signal,
        "PUT",
        &format!("{leases}/cutover-signal-svc"),
        "application/json",
        Some(update),
    )
    .await;
    out.push(("lease update stale rv", code(&conflict)));
    let other = send(
        &s.signal,
        "GET",
        &format!("{leases}/someone-else"),
        "",
        None,
    )
    .await;
    out.push(("lease get not granted", code(&other)));
    let deleted = send(
        a,
        "DELETE",
        &format!("{leases}/cutover-signal-svc"),
        "",
        None,
    )
    .await;
    out.push(("lease delete", json!({"status": deleted.status})));
    let gone = send(
        &s.signal,
        "GET",
        &format!("{leases}/cutover-signal-svc"),
        "",
        None,
    )
    .await;
    out.push(("lease get after delete", code(&gone)));

    // Events: core/v1 create and the field-selected list signal-svc watches; events.k8s.io.
    let ev = json!({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "preempt-1", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": NODE}, "reason": "PreemptScheduled", "type": "Warning",
        "message": "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT.", "source": {"component": "custom-scheduledevents-consolidated-preempt-plugin-monitor"},
        "firstTimestamp": "2026-11-25T00:00:00Z", "lastTimestamp": "2026-11-25T00:00:00Z", "count": 1});
    let made = send(
        a,
        "POST",
        "/api/v1/namespaces/default/events",
        "application/json",
        Some(ev),
    )
    .await;
    out.push(("core event create", json!({"status": made.status})));
    let selected = send(
        &s.signal,
        "GET",
        "/api/v1/events?fieldSelector=involvedObject.kind%3DNode%2Creason%3DPreemptScheduled",
        "",
        None,
    )
    .await;
    out.push(("events by field selector", json!({"status": selected.status, "items": selected.body["items"].as_array().map(Vec::len)})));
    let unsupported_field = send(
        &s.signal,
        "GET",
        "/api/v1/events?fieldSelector=message%3Dx",
        "",
        None,
    )
    .await;
    out.push(("events by unsupported field", code(&unsupported_field)));
    let node_uid = node["metadata"]["uid"].as_str().unwrap();
    let new_event = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "cut-1", "namespace": "default"},
        "eventTime": "2026-11-25T00:00:00.000000Z", "reportingController": "cutover-signal-svc", "reportingInstance": "pod-a",
        "action": "Cut", "reason": "LoadBalancerAdminStateDown", "type": "Normal", "note": "down",
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid}});
    let made = send(
        &s.signal,
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        "application/json",
        Some(new_event),
    )
    .await;
    out.push(("events.k8s.io create", json!({"status": made.status})));
    let series = send(
        &s.signal,
        "PATCH",
        "/apis/events.k8s.io/v1/namespaces/default/events/cut-1",
        "application/merge-patch+json",
        Some(json!({"series": {"count": 2, "lastObservedTime": "2026-11-25T00:00:01.000000Z"}})),
    )
    .await;
    out.push((
        "events.k8s.io series patch",
        json!({"status": series.status, "count": series.body["series"]["count"]}),
    ));

    // Refused calls carry a Forbidden Status naming the user.
    let forbidden = send(&s.signal, "DELETE", &node_path, "", None).await;
    out.push((
        "delete node as signal-svc",
        json!({"status": forbidden.status, "reason": forbidden.reason,
        "names_user": forbidden.body["message"].as_str().unwrap_or_default().contains(SA)}),
    ));
    let secrets = send(
        &s.signal,
        "GET",
        "/api/v1/namespaces/cutover/secrets",
        "",
        None,
    )
    .await;
    out.push(("list secrets as signal-svc", code(&secrets)));

    // Watch from a resourceVersion: a change arrives as MODIFIED; an ancient RV is 410 Expired.
    let current = rv(&send(a, "GET", &node_path, "", None).await.body);
    let watch_path = format!(
        "/api/v1/nodes?watch=true&allowWatchBookmarks=true&resourceVersion={current}&timeoutSeconds=2&fieldSelector=metadata.name%3D{NODE}"
    );
    let watcher = {
        let c = a.clone();
        tokio::spawn(async move { send_lines(&c, &watch_path).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    send(
        a,
        "PATCH",
        &node_path,
        "application/merge-patch+json",
        Some(json!({"metadata": {"labels": {"watched": "yes"}}})),
    )
    .await;
    let events = watcher.await.unwrap();
    let types: Vec<String> = events
        .iter()
        .map(|e| e["type"].as_str().unwrap_or_default().to_owned())
        .filter(|t| t != "BOOKMARK")
        .collect();
    out.push(("watch from rv", json!({"types": types})));

    out
}

/// A watch read until the server ends it (timeoutSeconds), as JSON lines.
async fn send_lines(client: &kube::Client, path: &str) -> Vec<Value> {
    let req = http::Request::get(path).body(Body::empty()).unwrap();
    let res = client.send(req).await.unwrap();
    let bytes = http_body_util::BodyExt::collect(res.into_body())
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    String::from_utf8_lossy(&bytes)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_sim_answers_what_the_real_api_server_answers() {
    let seed = kube_sim::Seed::preset("aks", 6).unwrap();
    let dir = tempfile::tempdir().unwrap();

    let real = kube_real::RealApiServer::start().await.unwrap();
    let admin = real.admin_client().unwrap();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "cutover"}});
    let mut objects = vec![ns];
    objects.extend(rbac());
    kube_real::manifests::apply(&admin, &objects, "cutover")
        .await
        .unwrap();
    kube_real::seed::nodes(&admin, &seed).await.unwrap();
    let token = real
        .service_account_token("cutover", "signal-svc", Duration::from_secs(3600))
        .await
        .unwrap();
    let real_signal = dir.path().join("real-signal");
    real.write_token_kubeconfig(&real_signal, &token).unwrap();
    let real_side = Side {
        name: "kube-apiserver",
        admin,
        signal: client_from(&real_signal).await,
    };

    let mut sim_seed = seed.clone();
    sim_seed.objects = rbac();
    let sim = kube_sim::KubeSim::start(kube_sim::Options {
        seed: sim_seed,
        security: Some(kube_sim::Security::default()),
        ..Default::default()
    })
    .await
    .unwrap();
    let (sim_admin, sim_signal) = (dir.path().join("sim-admin"), dir.path().join("sim-signal"));
    sim.write_kubeconfig(&sim_admin).unwrap();
    sim.write_kubeconfig_as(
        &sim_signal,
        &sim.service_account_token("cutover", "signal-svc").unwrap(),
    )
    .unwrap();
    let sim_side = Side {
        name: "kube-sim",
        admin: client_from(&sim_admin).await,
        signal: client_from(&sim_signal).await,
    };

    let want = probes(&real_side).await;
    let got = probes(&sim_side).await;
    let differences: Vec<String> = want
        .iter()
        .zip(&got)
        .filter(|(w, g)| w != g)
        .map(|((name, w), (_, g))| {
            format!(
                "{name}:\n  {}: {w}\n  {}: {g}",
                real_side.name, sim_side.name
            )
        })
        .collect();
    assert!(
        differences.is_empty(),
        "kube-sim differs from kube-apiserver:\n{}",
        differences.join("\n")
    );
}
