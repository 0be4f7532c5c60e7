//! Legacy (unaggregated) discovery documents. kubectl 1.32 asks for aggregated discovery
//! first (`as=APIGroupDiscoveryList`) but falls back to these when the response's
//! Content-Type is plain `application/json`, as it does against older servers.
//! `/openapi/v2` and `/openapi/v3` are not served (404); `get`, `describe`, `taint` and
//! `delete` do not need them.

use serde_json::{Value, json};

/// The Kubernetes version this simulator claims to be.
pub const GIT_VERSION: &str = "v1.32.4-kube-sim";

const STD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn resource(name: &str, kind: &str, namespaced: bool, verbs: &[&str], short: &[&str]) -> Value {
    let mut r = json!({
        "name": name,
        "singularName": if name.contains('/') { "" } else { kind_singular(kind) },
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if !short.is_empty() {
        r["shortNames"] = json!(short);
    }
    r
}

fn kind_singular(kind: &str) -> &'static str {
    match kind {
        "Node" => "node",
        "Event" => "event",
        "Lease" => "lease",
        "Pod" => "pod",
        "Namespace" => "namespace",
        _ => "",
    }
}

const GROUPS: &[&str] = &["events.k8s.io", "coordination.k8s.io"];

fn group(name: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [gv], "preferredVersion": gv})
}

/// The discovery document at `path`, or None (404).
pub fn document(path: &str, server_address: &str) -> Option<Value> {
    let doc = match path {
        "/version" => json!({
            "major": "1", "minor": "32", "gitVersion": GIT_VERSION,
            "gitCommit": "0000000000000000000000000000000000000000", "gitTreeState": "clean",
            "buildDate": "2026-01-01T00:00:00Z", "goVersion": "go1.23.8", "compiler": "gc",
            "platform": "linux/amd64"
        }),
        "/api" => json!({
            "kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
        }),
        "/api/v1" => json!({
            "kind": "APIResourceList", "groupVersion": "v1",
            "resources": [
                resource("events", "Event", true, STD_VERBS, &["ev"]),
                resource("namespaces", "Namespace", false, &["get", "list"], &["ns"]),
                resource("nodes", "Node", false, STD_VERBS, &["no"]),
                resource("nodes/status", "Node", false, &["get", "patch", "update"], &[]),
                resource("pods", "Pod", true, &["get", "list"], &["po"]),
            ]
        }),
        "/apis" => json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": GROUPS.iter().map(|g| group(g)).collect::<Vec<_>>()
        }),
        "/apis/events.k8s.io/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "events.k8s.io/v1",
            "resources": [resource("events", "Event", true, STD_VERBS, &["ev"])]
        }),
        "/apis/coordination.k8s.io/v1" => json!({
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "coordination.k8s.io/v1",
            "resources": [resource("leases", "Lease", true, STD_VERBS, &[])]
        }),
        other => {
            let name = other.strip_prefix("/apis/")?;
            if !GROUPS.contains(&name) {
                return None;
            }
            let mut g = group(name);
            g["kind"] = json!("APIGroup");
            g["apiVersion"] = json!("v1");
            g
        }
    };
    Some(doc)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents() {
        assert_eq!(document("/api", "a:1").unwrap()["versions"][0], "v1");
        assert_eq!(
            document("/apis", "a").unwrap()["groups"]
                .as_array()
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            document("/apis/coordination.k8s.io", "a").unwrap()["kind"],
            "APIGroup"
        );
        assert!(document("/apis/apps", "a").is_none());
        assert!(document("/apis/apps/v1", "a").is_none());
    }
}
