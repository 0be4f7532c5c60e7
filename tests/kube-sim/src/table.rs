//! Server-side printing (`meta.k8s.io/v1` Table), which `kubectl get` asks for with
//! `Accept: application/json;as=Table;v=v1;g=meta.k8s.io,...`. Columns follow kubernetes'
//! `pkg/printers/internalversion` for nodes, events and leases; row objects are
//! `PartialObjectMetadata` (the default `includeObject=Metadata`) or the full object.

use crate::resource::View;
use serde_json::{Value, json};

/// Whether an Accept header asks for a Table.
pub fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| {
        let params: Vec<&str> = part.split(';').map(str::trim).collect();
        params.contains(&"as=Table") && params.contains(&"g=meta.k8s.io")
    })
}

fn column(name: &str, ty: &str, format: &str, priority: u8, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": priority})
}

fn columns(view: View) -> Vec<Value> {
    let name = column(
        "Name",
        "string",
        "name",
        0,
        "Name must be unique within a namespace.",
    );
    let age = column(
        "Age",
        "string",
        "",
        0,
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );
    match view {
        View::Node => vec![
            name,
            column("Status", "string", "", 0, "The status of the node"),
            column("Roles", "string", "", 0, "The roles of the node"),
            age,
            column(
                "Version",
                "string",
                "",
                0,
                "Kubelet Version reported by the node.",
            ),
            column(
                "Internal-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            column(
                "External-IP",
                "string",
                "",
                1,
                "List of addresses reachable to the node. Queried from cloud provider, if available.",
            ),
            column(
                "OS-Image",
                "string",
                "",
                1,
                "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy)).",
            ),
            column(
                "Kernel-Version",
                "string",
                "",
                1,
                "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64).",
            ),
            column(
                "Container-Runtime",
                "string",
                "",
                1,
                "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2).",
            ),
        ],
        View::CoreEvent | View::EventsV1 => vec![
            column(
                "Last Seen",
                "string",
                "",
                0,
                "Time when last this event was seen.",
            ),
            column(
                "Type",
                "string",
                "",
                0,
                "Type of this event (Normal, Warning), new types could be added in the future.",
            ),
            column(
                "Reason",
                "string",
                "",
                0,
                "This should be a short, machine understandable string that gives the reason for this event being generated.",
            ),
            column("Object", "string", "", 0, "The object this Event is about."),
            column(
                "Subobject",
                "string",
                "",
                1,
                "The subobject this Event is about.",
            ),
            column(
                "Source",
                "string",
                "",
                1,
                "The component reporting this event.",
            ),
            column(
                "Message",
                "string",
                "",
                0,
                "A human-readable description of the status of this operation.",
            ),
            column(
                "First Seen",
                "string",
                "",
                1,
                "The first time at which the event was seen.",
            ),
            column(
                "Count",
                "string",
                "",
                1,
                "The number of times this event has occurred.",
            ),
            column(
                "Name",
                "string",
                "name",
                1,
                "Name must be unique within a namespace.",
            ),
        ],
        View::Lease => vec![
            name,
            column("Holder", "string", "", 0, "The holder of the lease."),
            age,
        ],
        View::ServiceAccount => vec![
            name,
            column(
                "Secrets",
                "string",
                "",
                0,
                "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use.",
            ),
            age,
        ],
        View::ClusterRole | View::Role => vec![
            name,
            column(
                "Created At",
                "date",
                "",
                0,
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ],
        View::ClusterRoleBinding | View::RoleBinding => vec![
            name,
            column("Role", "string", "", 0, "Role referenced by this binding."),
            age,
        ],
    }
}

/// `kubectl`'s short human durations (`translateTimestampSince`).
pub fn human_duration(secs: i64) -> String {
    let s = secs.max(0);
    let (m, h, d) = (s / 60, s / 3600, s / 86400);
    if s < 120 {
        format!("{s}s")
    } else if m < 10 {
        let rem = s % 60;
        if rem == 0 {
            format!("{m}m")
        } else {
            format!("{m}m{rem}s")
        }
    } else if h < 3 {
        format!("{m}m")
    } else if h < 8 {
        let rem = m % 60;
        if rem == 0 {
            format!("{h}h")
        } else {
            format!("{h}h{rem}m")
        }
    } else if h < 48 {
        format!("{h}h")
    } else if d < 8 {
        let rem = h % 24;
        if rem == 0 {
            format!("{d}d")
        } else {
            format!("{d}d{rem}h")
        }
    } else if d < 365 * 2 {
        format!("{d}d")
    } else {
        format!("{}y", d / 365)
    }
}

fn since(ts: &Value, now: jiff::Timestamp) -> String {
    match ts.as_str().and_then(|t| t.parse::<jiff::Timestamp>().ok()) {
        Some(t) => human_duration(now.as_second() - t.as_second()),
        None => "<unknown>".to_string(),
    }
}

fn node_cells(n: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let conditions = n["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let ready = conditions.iter().find(|c| c["type"] == "Ready");
    let mut status = match ready.and_then(|c| c["status"].as_str()) {
        Some("True") => "Ready".to_string(),
        Some("False") => "NotReady".to_string(),
        _ => "Unknown".to_string(),
    };
    if n["spec"]["unschedulable"].as_bool() == Some(true) {
        status.push_str(",SchedulingDisabled");
    }
    let mut roles: Vec<String> = Vec::new();
    if let Some(labels) = n["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if let Some(role) = k.strip_prefix("node-role.kubernetes.io/") {
                roles.push(role.to_string());
            } else if k == "kubernetes.io/role"
                && let Some(v) = v.as_str()
            {
                roles.push(v.to_string());
            }
        }
    }
    roles.sort();
    roles.dedup();
    let roles = if roles.is_empty() {
        "<none>".to_string()
    } else {
        roles.join(",")
    };
    let address = |kind: &str| -> String {
        n["status"]["addresses"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|a| a["type"] == kind)
            .and_then(|a| a["address"].as_str())
            .unwrap_or("<none>")
            .to_string()
    };
    let info = &n["status"]["nodeInfo"];
    let text = |v: &Value| v.as_str().unwrap_or("").to_string();
    vec![
        json!(n["metadata"]["name"]),
        json!(status),
        json!(roles),
        json!(since(&n["metadata"]["creationTimestamp"], now)),
        json!(text(&info["kubeletVersion"])),
        json!(address("InternalIP")),
        json!(address("ExternalIP")),
        json!(text(&info["osImage"])),
        json!(text(&info["kernelVersion"])),
        json!(text(&info["containerRuntimeVersion"])),
    ]
}

/// Cells of a stored (core-shaped) event.
fn event_cells(e: &Value, now: jiff::Timestamp) -> Vec<Value> {
    let last = [
        &e["series"]["lastObservedTime"],
        &e["lastTimestamp"],
        &e["eventTime"],
    ]
    .into_iter()
    .find(|v| v.is_string())
    .map(|v| since(v, now))
    .unwrap_or_else(|| "<unknown>".into());
    let first = [&e["firstTimestamp"], &e["eventTime"]]
        .into_iter()
        .find(|v| v.is_string())
        .map(|v| since(v, now))
        .unwrap_or_else(|| "<unknown>".into());
    let io = &e["involvedObject"];
    let object = format!(
        "{}/{}",
        io["kind"].as_str().unwrap_or("").to_lowercase(),
        io["name"].as_str().unwrap_or("")
    );
    let source = e["source"]["component"]
        .as_str()
        .or(e["reportingComponent"].as_str())
        .unwrap_or("")
        .to_string();
    let count = e["series"]["count"]
        .as_i64()
        .or(e["count"].as_i64())
        .unwrap_or(1);
    vec![
        json!(last),
        json!(e["type"].as_str().unwrap_or("")),
        json!(e["reason"].as_str().unwrap_or("")),
        json!(object),
        json!(io["fieldPath"].as_str().unwrap_or("")),
        json!(source),
        json!(e["message"].as_str().unwrap_or("").trim()),
        json!(first),
        json!(count),
        json!(e["metadata"]["name"]),
    ]
}

fn lease_cells(l: &Value, now: jiff::Timestamp) -> Vec<Value> {
    vec![
        json!(l["metadata"]["name"]),
        json!(l["spec"]["holderIdentity"].as_str().unwrap_or("")),
        json!(since(&l["metadata"]["creationTimestamp"], now)),
    ]
}

/// One row for a stored object; `object` is what the row carries (already in view shape).
fn row(view: View, stored: &Value, object: Value, now: jiff::Timestamp) -> Value {
    let cells = match view {
        View::Node => node_cells(stored, now),
        View::CoreEvent | View::EventsV1 => event_cells(stored, now),
        View::Lease => lease_cells(stored, now),
        View::ServiceAccount => vec![
            json!(stored["metadata"]["name"]),
            json!(stored["secrets"].as_array().map_or(0, Vec::len)),
            json!(since(&stored["metadata"]["creationTimestamp"], now)),
        ],
        View::ClusterRole | View::Role => vec![
            json!(stored["metadata"]["name"]),
            json!(stored["metadata"]["creationTimestamp"]),
        ],
        View::ClusterRoleBinding | View::RoleBinding => vec![
            json!(stored["metadata"]["name"]),
            json!(format!(
                "{}/{}",
                stored["roleRef"]["kind"].as_str().unwrap_or(""),
                stored["roleRef"]["name"].as_str().unwrap_or("")
            )),
            json!(since(&stored["metadata"]["creationTimestamp"], now)),
        ],
    };
    json!({"cells": cells, "object": object})
}

/// The row object for `includeObject` (`None`, `Metadata` (default) or `Object`).
pub fn row_object(include: Option<&str>, full: Value) -> Value {
    match include {
        Some("None") => Value::Null,
        Some("Object") => full,
        _ => json!({"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                     "metadata": full["metadata"]}),
    }
}

/// A Table of stored objects. `objects` pairs each stored object with its row object.
pub fn table(view: View, objects: Vec<(Value, Value)>, metadata: Value) -> Value {
    let now = jiff::Timestamp::now();
    let rows: Vec<Value> = objects
        .into_iter()
        .map(|(stored, object)| row(view, &stored, object, now))
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": metadata,
           "columnDefinitions": columns(view), "rows": rows})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_detection() {
        assert!(wants_table(
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json"
        ));
        assert!(!wants_table("application/json"));
        assert!(!wants_table(""));
    }

    #[test]
    fn durations_like_kubectl() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(150), "2m30s");
        assert_eq!(human_duration(3600), "60m");
        assert_eq!(human_duration(4 * 3600 + 60), "4h1m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400), "3d");
        assert_eq!(human_duration(20 * 86400), "20d");
        assert_eq!(human_duration(800 * 86400), "2y");
    }

    #[test]
    fn event_name_column_is_wide_only() {
        let cols = columns(View::CoreEvent);
        let narrow: Vec<&str> = cols
            .iter()
            .filter(|c| c["priority"] == 0)
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(narrow, ["Last Seen", "Type", "Reason", "Object", "Message"]);
    }

    #[test]
    fn node_row() {
        let n = json!({"metadata": {"name": "n", "creationTimestamp": "2000-01-01T00:00:00Z",
                "labels": {"kubernetes.io/role": "agent", "node-role.kubernetes.io/agent": ""}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                       "nodeInfo": {"kubeletVersion": "v1.32.4"}}});
        let cells = node_cells(&n, jiff::Timestamp::now());
        assert_eq!(cells[1], "Ready,SchedulingDisabled");
        assert_eq!(cells[2], "agent");
        assert_eq!(cells[4], "v1.32.4");
        assert_eq!(cells[5], "10.0.0.4");
        assert_eq!(cells[6], "<none>");
    }
}
