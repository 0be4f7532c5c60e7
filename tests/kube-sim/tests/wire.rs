//! Exact wire checks with a raw HTTP/1.1 client: golden `Status` bodies as kube-apiserver
//! writes them (apimachinery `pkg/api/errors`), list shapes, query tolerance, watch framing.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::{names, raw, sim, sim_with};
use kube_sim::FailRule;
use serde_json::json;

const SPOT: &str = "aks-spotpool-34567890-vmss000000";

fn failure(
    message: &str,
    reason: &str,
    details: serde_json::Value,
    code: u16,
) -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "details": details, "code": code})
}

#[tokio::test]
async fn golden_status_bodies() {
    let sim = sim().await;

    let r = raw(&sim, "GET", "/api/v1/nodes/nope", None, b"").await;
    assert_eq!(r.status, 404);
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(
        r.json(),
        failure(
            "nodes \"nope\" not found",
            "NotFound",
            json!({"name": "nope", "kind": "nodes"}),
            404
        )
    );

    let r = raw(
        &sim,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/l",
        None,
        b"",
    )
    .await;
    assert_eq!(
        r.json(),
        failure(
            "leases.coordination.k8s.io \"l\" not found",
            "NotFound",
            json!({"name": "l", "group": "coordination.k8s.io", "kind": "leases"}),
            404
        )
    );

    let event = br#"{"metadata":{"name":"e1"},"involvedObject":{"kind":"Node","name":"n"}}"#;
    let r = raw(
        &sim,
        "POST",
        "/api/v1/namespaces/default/events",
        Some("application/json"),
        event,
    )
    .await;
    assert_eq!(r.status, 201);
    assert_eq!(r.json()["kind"], "Event");
    assert_eq!(r.json()["metadata"]["namespace"], "default");
    let r = raw(&sim, "POST", "/apis/events.k8s.io/v1/namespaces/default/events", Some("application/json"),
        br#"{"metadata":{"name":"e1"},"eventTime":"2026-01-01T00:00:00.000000Z","regarding":{"kind":"Node","name":"n"},
            "reportingController":"c","reportingInstance":"i","action":"a","reason":"r","type":"Normal"}"#).await;
    assert_eq!(
        r.json(),
        failure(
            "events.events.k8s.io \"e1\" already exists",
            "AlreadyExists",
            json!({"name": "e1", "group": "events.k8s.io", "kind": "events"}),
            409
        )
    );

    let stale = format!(r#"{{"metadata":{{"name":"{SPOT}","resourceVersion":"1"}}}}"#);
    let r = raw(
        &sim,
        "PUT",
        &format!("/api/v1/nodes/{SPOT}"),
        Some("application/json"),
        stale.as_bytes(),
    )
    .await;
    assert_eq!(
        r.json(),
        failure(
            &format!(
                "Operation cannot be fulfilled on nodes \"{SPOT}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            "Conflict",
            json!({"name": SPOT, "kind": "nodes"}),
            409
        )
    );

    let r = raw(
        &sim,
        "POST",
        "/api/v1/nodes",
        Some("application/json"),
        br#"{"metadata":{"name":"Bad_Name"},"spec":{"taints":[{"key":"k","effect":"Never"}]}}"#,
    )
    .await;
    assert_eq!(
        r.json(),
        failure(
            "Node \"Bad_Name\" is invalid: [metadata.name: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character, spec.taints[0].effect: Unsupported value: \"Never\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"]",
            "Invalid",
            json!({"name": "Bad_Name", "kind": "Node", "causes": [
                {"reason": "FieldValueInvalid", "message": "Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character", "field": "metadata.name"},
                {"reason": "FieldValueNotSupported", "message": "Unsupported value: \"Never\": supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\"", "field": "spec.taints[0].effect"}
            ]}),
            422
        )
    );

    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?fieldSelector=status.phase%3DRunning",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["message"],
        "field label not supported: status.phase"
    );
    assert_eq!(r.json()["reason"], "BadRequest");

    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?sendInitialEvents=true",
        None,
        b"",
    )
    .await;
    assert_eq!(
        r.json(),
        failure(
            "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for list",
            "Invalid",
            json!({"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
                {"reason": "FieldValueForbidden", "message": "Forbidden: sendInitialEvents is forbidden for list", "field": "sendInitialEvents"}]}),
            422
        )
    );
    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?watch=true&sendInitialEvents=true&allowWatchBookmarks=true",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 422);
    assert!(
        r.json()["message"]
            .as_str()
            .unwrap()
            .ends_with("sendInitialEvents requires setting resourceVersionMatch to NotOlderThan")
    );

    // Expired continue token after a compaction.
    let r = raw(&sim, "GET", "/api/v1/nodes?limit=5", None, b"").await;
    let token = r.json()["metadata"]["continue"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(r.json()["metadata"]["remainingItemCount"], 7);
    // A write after the list, then compaction up to it: the snapshot's RV is gone (a
    // compaction exactly at the snapshot RV would keep it valid, as in etcd).
    raw(
        &sim,
        "PATCH",
        "/api/v1/nodes/aks-nodepool1-12345678-vmss000000",
        Some("application/merge-patch+json"),
        br#"{"metadata":{"labels":{"w":"1"}}}"#,
    )
    .await;
    sim.compact();
    let r = raw(
        &sim,
        "GET",
        &format!("/api/v1/nodes?limit=5&continue={token}"),
        None,
        b"",
    )
    .await;
    let mut want = failure(
        "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter.",
        "Expired",
        json!(null),
        410,
    );
    want.as_object_mut().unwrap().remove("details");
    assert_eq!(r.json(), want);
    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?resourceVersion=2&resourceVersionMatch=Exact",
        None,
        b"",
    )
    .await;
    assert_eq!(
        (r.status, r.json()["message"].as_str().unwrap()),
        (410, "The resourceVersion for the provided list is too old.")
    );

    // Injected 429 carries Retry-After and retryAfterSeconds.
    sim.fail_next(FailRule::new(429, 1));
    let r = raw(&sim, "GET", "/api/v1/nodes", None, b"").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.json()["reason"], "TooManyRequests");
    assert_eq!(r.json()["details"]["retryAfterSeconds"], 1);

    // An injected 409 on a named object is the real Conflict for it.
    sim.fail_next(FailRule::new(409, 1).verb("PATCH"));
    let r = raw(
        &sim,
        "PATCH",
        &format!("/api/v1/nodes/{SPOT}"),
        Some("application/merge-patch+json"),
        b"{}",
    )
    .await;
    assert_eq!(
        r.json()["message"],
        format!(
            "Operation cannot be fulfilled on nodes \"{SPOT}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    );
    assert_eq!(r.json()["reason"], "Conflict");

    // Delete answers a Success Status.
    let r = raw(&sim, "DELETE", &format!("/api/v1/nodes/{SPOT}"), None, b"").await;
    assert_eq!(r.status, 200);
    let body = r.json();
    assert_eq!(
        (body["status"].as_str(), body["details"]["name"].as_str()),
        (Some("Success"), Some(SPOT))
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn list_shapes_and_query_tolerance() {
    let sim = sim_with(6, |_| {}).await;
    // kube-style `?&`, trailing `&`, `+` as space in a set-based label selector.
    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?&labelSelector=agentpool+in+%28spotpool%2Cnodepool1%29&limit=500&",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    let list = r.json();
    assert_eq!(
        (list["kind"].as_str(), list["apiVersion"].as_str()),
        (Some("NodeList"), Some("v1"))
    );
    assert_eq!(names(&list).len(), 6);
    assert!(
        list["items"][0].get("kind").is_none(),
        "items carry no type meta"
    );
    assert!(list["metadata"].get("continue").is_none());

    let r = raw(&sim, "GET", "/apis/events.k8s.io/v1/events", None, b"").await;
    assert_eq!(
        r.json(),
        json!({"kind": "EventList", "apiVersion": "events.k8s.io/v1",
        "metadata": {"resourceVersion": sim.resource_version().to_string()}, "items": []})
    );
    let r = raw(
        &sim,
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/x/leases",
        None,
        b"",
    )
    .await;
    assert_eq!(r.json()["kind"], "LeaseList");

    // A POST without a body name and a bare `?` query.
    let r = raw(
        &sim,
        "POST",
        "/api/v1/nodes?",
        Some("application/json"),
        br#"{"metadata":{"generateName":"gen-"}}"#,
    )
    .await;
    assert_eq!(r.status, 201);
    assert!(
        r.json()["metadata"]["name"]
            .as_str()
            .unwrap()
            .starts_with("gen-")
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn watch_framing_and_too_old_rv() {
    let sim = sim().await;
    // timeoutSeconds=1 ends the stream cleanly: ADDED per node (RV unset), newline-terminated.
    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?watch=true&timeoutSeconds=1",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert_eq!(r.header("content-type"), Some("application/json"));
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(text.ends_with('\n'));
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let added = lines.iter().filter(|l| l["type"] == "ADDED").count();
    assert_eq!(added, 12);
    assert_eq!(lines[0]["object"]["kind"], "Node");

    // sendInitialEvents: ADDED for the state, then the initial-events-end bookmark.
    let r = raw(&sim, "GET", "/api/v1/nodes?watch=true&timeoutSeconds=1&allowWatchBookmarks=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&resourceVersion=0", None, b"").await;
    let lines: Vec<serde_json::Value> = String::from_utf8(r.body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[12]["type"], "BOOKMARK");
    assert_eq!(
        lines[12]["object"],
        json!({"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": sim.resource_version().to_string(),
               "annotations": {"k8s.io/initial-events-end": "true"}}})
    );

    // sendInitialEvents=false: no synthetic ADDED events.
    let r = raw(&sim, "GET", "/api/v1/nodes?watch=true&timeoutSeconds=1&sendInitialEvents=false&resourceVersionMatch=NotOlderThan", None, b"").await;
    assert!(r.body.is_empty(), "{}", String::from_utf8_lossy(&r.body));

    // With bookmarks allowed and nothing changing, the only line is the bookmark sent 2 s
    // before the deadline (the periodic interval is a minute by default).
    let rv = sim.resource_version();
    let r = raw(&sim, "GET", &format!("/api/v1/nodes?watch=true&timeoutSeconds=3&allowWatchBookmarks=true&resourceVersion={rv}"), None, b"").await;
    let lines: Vec<serde_json::Value> = String::from_utf8(r.body)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": rv.to_string()}}})
        ]
    );
    // A watch from a future RV is refused.
    let r = raw(
        &sim,
        "GET",
        &format!("/api/v1/nodes?watch=true&resourceVersion={}", rv + 100),
        None,
        b"",
    )
    .await;
    assert_eq!(
        (r.status, r.json()["reason"].as_str()),
        (504, Some("Timeout"))
    );

    // Too old: HTTP 200 with one ERROR line, then the end.
    raw(
        &sim,
        "PATCH",
        &format!("/api/v1/nodes/{SPOT}"),
        Some("application/merge-patch+json"),
        br#"{"metadata":{"labels":{"a":"b"}}}"#,
    )
    .await;
    sim.compact();
    let r = raw(
        &sim,
        "GET",
        "/api/v1/nodes?watch=true&resourceVersion=3",
        None,
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    let oldest = sim.resource_version();
    let text = String::from_utf8(r.body).unwrap();
    assert_eq!(text.lines().count(), 1);
    let line: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
    assert_eq!(
        line,
        json!({"type": "ERROR", "object": failure_no_details(
        &format!("too old resource version: 3 ({oldest})"), "Expired", 410)})
    );
    // Events use the etcd wording (they are not served from the watch cache).
    let r = raw(
        &sim,
        "GET",
        "/api/v1/events?watch=true&resourceVersion=3",
        None,
        b"",
    )
    .await;
    let line: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(
        line["object"]["message"],
        "The resourceVersion for the provided watch is too old."
    );
    sim.shutdown().await;
}

fn failure_no_details(message: &str, reason: &str, code: u16) -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

#[tokio::test]
async fn discovery_documents() {
    let sim = sim().await;
    let r = raw(&sim, "GET", "/api/v1", None, b"").await;
    let resources: Vec<String> = r.json()["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap().to_string())
        .collect();
    assert!(resources.contains(&"nodes".to_string()) && resources.contains(&"events".to_string()));
    let r = raw(&sim, "GET", "/apis", None, b"").await;
    assert_eq!(r.json()["kind"], "APIGroupList");
    let v2 = raw(&sim, "GET", "/openapi/v2", None, b"").await;
    assert_eq!(v2.status, 200);
    assert_eq!(v2.json()["swagger"], "2.0");
    assert_eq!(
        raw(&sim, "GET", "/openapi/v3/apis/apps/v1", None, b"")
            .await
            .status,
        404
    );
    assert_eq!(
        raw(&sim, "GET", "/version", None, b"").await.json()["major"],
        "1"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn injected_latency_delays_kubernetes_requests_only() {
    let sim = sim_with(6, |_| {}).await;
    sim.set_latency(std::time::Duration::from_millis(300));
    let started = std::time::Instant::now();
    assert_eq!(
        raw(&sim, "GET", "/api/v1/nodes", None, b"").await.status,
        200
    );
    // A lower bound only: the delay is at least what was injected.
    assert!(started.elapsed() >= std::time::Duration::from_millis(300));
    // Control endpoints are neither delayed nor logged.
    assert_eq!(
        raw(&sim, "GET", "/_sim/latency", None, b"").await.json()["ms"],
        300
    );
    sim.set_latency(std::time::Duration::ZERO);
    let log = sim.requests();
    assert_eq!(log.len(), 1);
    assert_eq!(log[0].path, "/api/v1/nodes");
    sim.shutdown().await;
}
