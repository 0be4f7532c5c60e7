//! Legacy (unaggregated) discovery documents. kubectl 1.32 asks for aggregated discovery
//! first (`as=APIGroupDiscoveryList`) but falls back to these when the response's
//! Content-Type is plain `application/json`, as it does against older servers.
//! The resource lists are derived from [`View::ALL`]; OpenAPI is served by `openapi`.

use crate::resource::View;
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
    let singular = if name.contains('/') {
        String::new()
    } else {
        kind.to_ascii_lowercase()
    };
    let mut r = json!({
        "name": name,
        "singularName": singular,
        "namespaced": namespaced,
        "kind": kind,
        "verbs": verbs,
    });
    if !short.is_empty() {
        r["shortNames"] = json!(short);
    }
    r
}

/// The served API groups (besides the core group), in discovery order.
pub const GROUPS: &[&str] = &[
    "events.k8s.io",
    "coordination.k8s.io",
    crate::resource::RBAC_GROUP,
];

fn group(name: &str) -> Value {
    let gv = json!({"groupVersion": format!("{name}/v1"), "version": "v1"});
    json!({"name": name, "versions": [gv], "preferredVersion": gv})
}

/// The resources of a group's v1 (`""` for the core group) as an APIResourceList.
fn resource_list(group_name: &str) -> Value {
    let mut resources: Vec<Value> = View::ALL
        .into_iter()
        .filter(|v| v.group() == group_name)
        .map(|v| {
            resource(
                v.plural(),
                v.kind_name(),
                v.kind().namespaced(),
                STD_VERBS,
                v.short_names(),
            )
        })
        .collect();
    if group_name.is_empty() {
        resources.push(resource(
            "namespaces",
            "Namespace",
            false,
            &["get", "list"],
            &["ns"],
        ));
        resources.push(resource(
            "nodes/status",
            "Node",
            false,
            &["get", "patch", "update"],
            &[],
        ));
        resources.push(resource("pods", "Pod", true, &["get", "list"], &["po"]));
    }
    resources.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let group_version = if group_name.is_empty() {
        "v1".to_string()
    } else {
        format!("{group_name}/v1")
    };
    let mut list =
        json!({"kind": "APIResourceList", "groupVersion": group_version, "resources": resources});
    if !group_name.is_empty() {
        list["apiVersion"] = json!("v1");
    }
    list
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
        "/api/v1" => resource_list(""),
        "/apis" => json!({
            "kind": "APIGroupList", "apiVersion": "v1",
            "groups": GROUPS.iter().map(|g| group(g)).collect::<Vec<_>>()
        }),
        other => {
            let rest = other.strip_prefix("/apis/")?;
            let (name, version) = match rest.split_once('/') {
                Some((name, version)) => (name, Some(version)),
                None => (rest, None),
            };
            let name = GROUPS.iter().find(|g| **g == name)?;
            match version {
                Some("v1") => resource_list(name),
                Some(_) => return None,
                None => {
                    let mut g = group(name);
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    g
                }
            }
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
            3
        );
        let rbac = document("/apis/rbac.authorization.k8s.io/v1", "a").unwrap();
        assert_eq!(rbac["resources"].as_array().unwrap().len(), 4);
        assert_eq!(
            document("/apis/coordination.k8s.io", "a").unwrap()["kind"],
            "APIGroup"
        );
        assert!(document("/apis/apps", "a").is_none());
        assert!(document("/apis/apps/v1", "a").is_none());
    }
}
