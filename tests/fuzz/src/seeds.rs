//! Well-formed starting inputs for each target, so mutations start near real traffic.

use cutover_proto::v1::{
    AdminState, GetNodeAdminStateRequest, Hello, ListHeldEntriesRequest, NodeDesiredState, NodeRef,
    SetNodeAdminStateRequest, SignalMessage, Snapshot, Version, WaitFor, WatchResultsRequest,
    signal_message,
};
use prost::Message;
use serde_json::json;

const SUB: &str = "0b1f6471-1bf0-4dda-aec3-cb9272f09590";
const PROVIDER_ID: &str = "azure:///subscriptions/0b1f6471-1bf0-4dda-aec3-cb9272f09590/resourceGroups/mc_rg_aks_eastus/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/3";

fn node_ref() -> NodeRef {
    NodeRef {
        name: "aks-nodepool1-12345678-vmss000003".into(),
        uid: "5f0c2b9e-2d6a-4c8e-9d43-0c1f4b5e6a7b".into(),
        provider_id: PROVIDER_ID.into(),
        internal_ips: vec!["10.224.0.7".into(), "fd00::7".into()],
        zone: "eastus-1".into(),
    }
}

fn tagged(kind: u8, m: &impl Message) -> Vec<u8> {
    let mut out = vec![kind];
    out.extend(m.encode_to_vec());
    out
}

fn rpc() -> Vec<Vec<u8>> {
    let desired = NodeDesiredState {
        node: Some(node_ref()),
        desired: AdminState::Down as i32,
        reasons: vec!["node.kubernetes.io/out-of-service".into()],
        version: Some(Version { epoch: 3, seq: 9 }),
        ..Default::default()
    };
    vec![
        tagged(
            0,
            &SignalMessage {
                kind: Some(signal_message::Kind::Hello(Hello {
                    cluster_name: "kubernetes".into(),
                    sender_identity: "signal-0".into(),
                    leader_epoch: 3,
                    // One fake signal-svc process throughout.
                    incarnation: 1,
                })),
            },
        ),
        tagged(
            0,
            &SignalMessage {
                kind: Some(signal_message::Kind::Snapshot(Snapshot {
                    nodes: vec![desired.clone(); 2],
                })),
            },
        ),
        tagged(
            0,
            &SignalMessage {
                kind: Some(signal_message::Kind::Delta(desired)),
            },
        ),
        tagged(
            1,
            &SetNodeAdminStateRequest {
                node: Some(node_ref()),
                admin_state: AdminState::Down as i32,
                reason: "maintenance".into(),
                wait: WaitFor::Effective as i32,
                wait_timeout: Some(prost_types::Duration {
                    seconds: 30,
                    nanos: 0,
                }),
            },
        ),
        tagged(
            2,
            &GetNodeAdminStateRequest {
                node: Some(node_ref()),
                fresh: true,
            },
        ),
        tagged(
            3,
            &ListHeldEntriesRequest {
                load_balancer: "kubernetes-internal".into(),
            },
        ),
        tagged(
            4,
            &WatchResultsRequest {
                node_name: "aks-nodepool1-12345678-vmss000003".into(),
            },
        ),
    ]
}

fn arm_pools() -> Vec<Vec<u8>> {
    let lb = format!(
        "/subscriptions/{SUB}/resourceGroups/mc_rg/providers/Microsoft.Network/loadBalancers/kubernetes"
    );
    let ipc = format!(
        "/subscriptions/{SUB}/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachineScaleSets/aks-nodepool1-12345678-vmss/virtualMachines/3/networkInterfaces/aks-nodepool1-12345678-vmss/ipConfigurations/ipconfig1"
    );
    let nic_pool = json!({
        "name": "kubernetes", "id": format!("{lb}/backendAddressPools/kubernetes"), "etag": "W/\"1\"",
        "properties": {
            "provisioningState": "Succeeded",
            "loadBalancerBackendAddresses": [{
                "name": "mc_rg_aks-nodepool1-12345678-vmss_3ipconfig1",
                "properties": {"networkInterfaceIPConfiguration": {"id": ipc}, "adminState": "Down"}
            }],
            "backendIPConfigurations": [{"id": ipc}],
            "loadBalancingRules": [{"id": format!("{lb}/loadBalancingRules/r1")}]
        }
    });
    let ip_pool = json!({
        "name": "kubernetes-IPv6", "id": format!("{lb}/backendAddressPools/kubernetes-IPv6"),
        "properties": {
            "provisioningState": "Updating",
            "loadBalancerBackendAddresses": [{
                "name": "aks-nodepool1-12345678-vmss000003",
                "properties": {"ipAddress": "fd00::7", "adminState": "None",
                               "virtualNetwork": {"id": "/subscriptions/s/resourceGroups/rg/providers/Microsoft.Network/virtualNetworks/v"}}
            }]
        }
    });
    let nic = json!({
        "id": format!("/subscriptions/{SUB}/resourceGroups/mc_rg/providers/Microsoft.Network/networkInterfaces/vm1-nic"),
        "properties": {"virtualMachine": {"id": format!("/subscriptions/{SUB}/resourceGroups/mc_rg/providers/Microsoft.Compute/virtualMachines/vm1")},
                       "ipConfigurations": [{"id": "x", "properties": {"privateIPAddress": "10.224.0.9"}}]}
    });
    vec![
        json!({"value": [nic_pool.clone(), ip_pool.clone()], "nextLink": null}).to_string(),
        json!({"name": "kubernetes", "properties": {"backendAddressPools": [nic_pool, ip_pool]}})
            .to_string(),
        json!({"value": [nic]}).to_string(),
    ]
    .into_iter()
    .map(String::into_bytes)
    .collect()
}

fn kube_node() -> Vec<Vec<u8>> {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "aks-nodepool1-12345678-vmss000003", "uid": "5f0c2b9e-2d6a-4c8e-9d43-0c1f4b5e6a7b",
                     "creationTimestamp": "2026-08-01T05:00:00Z",
                     "labels": {"topology.kubernetes.io/zone": "eastus-1"},
                     "annotations": {"cutover.io/spot-notice-handled": "true"}},
        "spec": {"providerID": PROVIDER_ID,
                 "taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute", "value": "nodeshutdown"}]},
        "status": {"addresses": [{"type": "InternalIP", "address": "10.224.0.7"}, {"type": "Hostname", "address": "h"}],
                   "conditions": [{"type": "PreemptionScheduled", "status": "True",
                                   "message": "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. x"}]}
    });
    vec![node.to_string().into_bytes()]
}

fn kube_event() -> Vec<Vec<u8>> {
    let ev = json!({
        "metadata": {"name": "aks-spot-1.18a", "namespace": "default", "uid": "e1", "creationTimestamp": "2026-08-01T05:39:00Z"},
        "involvedObject": {"kind": "Node", "name": "aks-spot-1"},
        "reason": "PreemptScheduled", "type": "Warning",
        "message": "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1.",
        "firstTimestamp": "2026-08-01T05:39:00Z", "lastTimestamp": "2026-08-01T05:39:20Z",
        "series": {"lastObservedTime": "2026-08-01T05:39:30.000000Z"}
    });
    vec![ev.to_string().into_bytes()]
}

/// The seeds of target `name` (empty for an unknown name).
pub fn seeds(name: &str) -> Vec<Vec<u8>> {
    let strs = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect();
    match name {
        "azure_json" => {
            let mut out = Vec::new();
            for preset in ["aks", "aks-multi-slb"] {
                if let Ok(c) = aks_fixture::preset(preset) {
                    out.push(c.azure_json().to_string().into_bytes());
                }
            }
            out
        }
        "arm_error" => strs(&[
            r#"{"error":{"code":"RetryableError","message":"A retryable error occurred.","details":[{"code":"RetryableErrorDueToAnotherOperation","message":"Operation X is updating resource Y."}]}}"#,
            r#"{"status":"Canceled","error":{"code":"Canceled","message":"m","details":[{"code":"CanceledAndSupersededDueToAnotherOperation"}]}}"#,
            r#"{"status":"InProgress"}"#,
            "<html><body>502 Bad Gateway</body></html>",
        ]),
        // Parts separated by 0xff: retry-after-ms, x-ms-retry-after-ms, Retry-After, clock.
        "retry_after" => vec![
            b"250\xff\xff7\xff".to_vec(),
            b"\xff\xffSun, 06 Nov 1994 08:49:37 GMT\xff\x01\x02".to_vec(),
            b"\xff\xffFri, 31 Dec 9999 23:59:59 GMT\xff".to_vec(),
            b"\xff\xff18446744073709551615\xff".to_vec(),
        ],
        "arm_pools" => arm_pools(),
        "spot_notice" => strs(&[
            "Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1. Virtual machine is being evicted.",
            "Preempt Scheduled: Sat, 1 Aug 2026 05:41:02 GMT. EventId: 3C1E3E5E",
            "IMDS query failed, exit code: 28",
        ]),
        "kube_node" => kube_node(),
        "kube_event" => kube_event(),
        "rpc" => rpc(),
        _ => Vec::new(),
    }
}
