//! Initial cluster contents: a seed file or an AKS preset from `aks-fixture`.
//!
//! Seed file format (YAML or JSON; see `examples/seed.yaml`):
//!
//! ```yaml
//! nodes:
//!   - name: aks-nodepool1-12345678-vmss000000   # required
//!     uid: 0b5c...                              # optional, random if absent
//!     providerID: azure:///subscriptions/.../virtualMachines/0
//!     zone: eastus-1                            # sets topology.kubernetes.io/zone
//!     labels: {agentpool: nodepool1}
//!     addresses:                                # status.addresses
//!       - {type: InternalIP, address: 10.224.0.4}
//!     taints:
//!       - {key: kubernetes.azure.com/scalesetpriority, value: spot, effect: NoSchedule}
//!     creationTimestamp: "2026-01-01T00:00:00Z" # optional, now if absent
//!     unschedulable: false                      # optional
//!     ready: true                               # optional, Ready condition status
//! events:                                       # core/v1 Event objects, stored as given
//!   - metadata: {name: aks-x.17f0c1, namespace: default}
//!     involvedObject: {apiVersion: v1, kind: Node, name: aks-x}
//!     reason: PreemptScheduled
//!     type: Warning
//!     message: "Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1. ..."
//! ```

use crate::objects;
use crate::resource::{Key, Kind};
use crate::store::Store;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// A seed that cannot be read or used.
#[derive(Debug, thiserror::Error)]
pub enum SeedError {
    #[error("reading seed file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing seed file {path}: {source}")]
    Parse {
        path: String,
        source: serde_yaml::Error,
    },
    #[error(transparent)]
    Preset(#[from] aks_fixture::UnknownPreset),
    #[error("seed {what} {name:?} is invalid: {reason}")]
    Invalid {
        what: &'static str,
        name: String,
        reason: String,
    },
}

/// One address in `status.addresses`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
pub struct Address {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

/// A taint.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Taint {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<String>,
    pub effect: String,
}

/// A node in a seed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeSeed {
    pub name: String,
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default, rename = "providerID")]
    pub provider_id: Option<String>,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    #[serde(default)]
    pub addresses: Vec<Address>,
    #[serde(default)]
    pub taints: Vec<Taint>,
    #[serde(default)]
    pub creation_timestamp: Option<String>,
    #[serde(default)]
    pub unschedulable: bool,
    #[serde(default = "yes")]
    pub ready: bool,
}

fn yes() -> bool {
    true
}

/// Initial contents of the simulated cluster.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
pub struct Seed {
    #[serde(default)]
    pub nodes: Vec<NodeSeed>,
    /// core/v1 Event objects.
    #[serde(default)]
    pub events: Vec<Value>,
    /// Manifests of any served kind with `apiVersion` and `kind` (ServiceAccounts, RBAC
    /// objects, Leases, ...), as `kubectl create -f` would take them. Namespaced objects
    /// without a namespace go to `default`.
    #[serde(default)]
    pub objects: Vec<Value>,
}

impl Seed {
    /// Reads a seed file (YAML or JSON).
    pub fn from_file(path: &std::path::Path) -> Result<Seed, SeedError> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| SeedError::Read {
            path: shown.clone(),
            source,
        })?;
        serde_yaml::from_str(&text).map_err(|source| SeedError::Parse {
            path: shown,
            source,
        })
    }

    /// The nodes of an `aks-fixture` preset (`aks`, `aks-ip`, `aks-multi-slb`; the
    /// Kubernetes side is the same for all three).
    pub fn preset(name: &str, nodes: usize) -> Result<Seed, SeedError> {
        let cluster = aks_fixture::preset_sized(name, nodes)?;
        let nodes = cluster
            .nodes
            .iter()
            .map(|n| NodeSeed {
                name: n.name.clone(),
                uid: Some(n.uid.clone()),
                provider_id: Some(n.provider_id.clone()),
                zone: Some(n.zone.clone()),
                labels: n.labels.clone(),
                addresses: vec![
                    Address {
                        kind: "InternalIP".into(),
                        address: n.ipv4.to_string(),
                    },
                    Address {
                        kind: "InternalIP".into(),
                        address: n.ipv6.to_string(),
                    },
                    Address {
                        kind: "Hostname".into(),
                        address: n.name.clone(),
                    },
                ],
                taints: n
                    .taints
                    .iter()
                    .map(|t| Taint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                    })
                    .collect(),
                creation_timestamp: None,
                unschedulable: false,
                ready: true,
            })
            .collect();
        Ok(Seed {
            nodes,
            ..Seed::default()
        })
    }

    /// Writes the seed into an empty store.
    pub fn apply(&self, store: &mut Store, now: &str) -> Result<(), SeedError> {
        for n in &self.nodes {
            let obj = node_object(n, now);
            let errs = objects::validate(crate::resource::View::Node, &obj);
            if let Some(e) = errs.first() {
                return Err(SeedError::Invalid {
                    what: "node",
                    name: n.name.clone(),
                    reason: format!("{}: {}", e.field, e.body),
                });
            }
            store
                .create(Key::new(Kind::Node, "", &n.name), obj)
                .map_err(|e| SeedError::Invalid {
                    what: "node",
                    name: n.name.clone(),
                    reason: e.to_string(),
                })?;
        }
        for e in &self.events {
            let mut obj = objects::to_stored(crate::resource::View::CoreEvent, e);
            let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
            if name.is_empty() {
                return Err(SeedError::Invalid {
                    what: "event",
                    name,
                    reason: "metadata.name is required".into(),
                });
            }
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default")
                .to_string();
            let meta = objects::meta_mut(&mut obj);
            meta.insert("namespace".into(), json!(ns));
            meta.entry("uid")
                .or_insert_with(|| json!(uuid::Uuid::new_v4().to_string()));
            meta.entry("creationTimestamp")
                .or_insert_with(|| json!(now));
            store
                .create(Key::new(Kind::Event, &ns, &name), obj)
                .map_err(|e| SeedError::Invalid {
                    what: "event",
                    name: name.clone(),
                    reason: e.to_string(),
                })?;
        }
        for o in &self.objects {
            apply_object(store, o, now)?;
        }
        Ok(())
    }
}

/// Stores one manifest of a served kind, stamped as a create would stamp it.
pub fn apply_object(store: &mut Store, o: &Value, now: &str) -> Result<(), SeedError> {
    let api_version = o["apiVersion"].as_str().unwrap_or("");
    let kind = o["kind"].as_str().unwrap_or("");
    let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
    let invalid = |reason: String| SeedError::Invalid {
        what: "object",
        name: format!("{kind}/{name}"),
        reason,
    };
    let view = crate::resource::View::from_type(api_version, kind)
        .ok_or_else(|| invalid(format!("{api_version} {kind} is not served")))?;
    let mut obj = objects::to_stored(view, o);
    if let Some(e) = objects::validate(view, &obj).first() {
        return Err(invalid(format!("{}: {}", e.field, e.body)));
    }
    let namespaced = view.kind().namespaced();
    let ns = obj["metadata"]["namespace"]
        .as_str()
        .filter(|n| !n.is_empty())
        .unwrap_or("default")
        .to_string();
    objects::stamp_create(
        &mut obj,
        namespaced.then_some(ns.as_str()),
        uuid::Uuid::new_v4().to_string(),
        now,
    );
    store
        .create(Key::new(view.kind(), &ns, &name), obj)
        .map_err(|e| invalid(e.to_string()))?;
    Ok(())
}

/// A full Node object for a seed entry: labels, providerID, taints, addresses, a Ready
/// condition and nodeInfo, as a kubelet on AKS reports them.
pub fn node_object(n: &NodeSeed, now: &str) -> Value {
    let mut labels: Map<String, Value> = n
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect();
    labels
        .entry("kubernetes.io/hostname")
        .or_insert_with(|| json!(n.name));
    if let Some(zone) = &n.zone {
        labels.insert("topology.kubernetes.io/zone".into(), json!(zone));
    }
    let created = n
        .creation_timestamp
        .clone()
        .unwrap_or_else(|| now.to_string());
    let uid = n
        .uid
        .clone()
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut spec = Map::new();
    if let Some(p) = &n.provider_id {
        spec.insert("providerID".into(), json!(p));
    }
    if !n.taints.is_empty() {
        spec.insert(
            "taints".into(),
            serde_json::to_value(&n.taints).unwrap_or_default(),
        );
    }
    if n.unschedulable {
        spec.insert("unschedulable".into(), json!(true));
    }
    let ready = if n.ready { "True" } else { "False" };
    let (reason, message) = if n.ready {
        ("KubeletReady", "kubelet is posting ready status")
    } else {
        ("KubeletNotReady", "container runtime network not ready")
    };
    let condition = |t: &str, s: &str, r: &str, m: &str| {
        json!({"type": t, "status": s, "reason": r, "message": m,
               "lastHeartbeatTime": now, "lastTransitionTime": created})
    };
    json!({
        "metadata": {
            "name": n.name, "uid": uid, "creationTimestamp": created, "labels": labels,
            "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                            "volumes.kubernetes.io/controller-managed-attach-detach": "true"}
        },
        "spec": spec,
        "status": {
            "addresses": n.addresses,
            "capacity": {"cpu": "4", "memory": "16365060Ki", "pods": "110", "ephemeral-storage": "129886128Ki"},
            "allocatable": {"cpu": "3860m", "memory": "12880900Ki", "pods": "110", "ephemeral-storage": "119703055367"},
            "conditions": [
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
                condition("Ready", ready, reason, message),
            ],
            "nodeInfo": {
                "machineID": uid.replace('-', ""), "systemUUID": uid, "bootID": uid,
                "kernelVersion": "5.15.0-1089-azure", "osImage": "Ubuntu 22.04.5 LTS",
                "containerRuntimeVersion": "containerd://1.7.27-1", "kubeletVersion": "v1.32.4",
                "kubeProxyVersion": "v1.32.4", "operatingSystem": "linux", "architecture": "amd64"
            },
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preset_nodes_look_like_aks() {
        let seed = Seed::preset("aks", 12).unwrap();
        assert_eq!(seed.nodes.len(), 12);
        let spot: Vec<_> = seed.nodes.iter().filter(|n| !n.taints.is_empty()).collect();
        assert!(!spot.is_empty());
        let n = node_object(spot[0], "2026-01-01T00:00:00Z");
        assert_eq!(
            n["metadata"]["labels"]["kubernetes.azure.com/scalesetpriority"],
            "spot"
        );
        assert_eq!(n["spec"]["taints"][0]["effect"], "NoSchedule");
        assert!(
            n["spec"]["providerID"]
                .as_str()
                .unwrap()
                .starts_with("azure:///subscriptions/")
        );
        let types: Vec<&str> = n["status"]["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["type"].as_str().unwrap())
            .collect();
        assert_eq!(types, ["InternalIP", "InternalIP", "Hostname"]);
        assert!(Seed::preset("gke", 12).is_err());
    }

    #[test]
    fn seed_file_parses_and_applies() {
        let text = include_str!("../examples/seed.yaml");
        let seed: Seed = serde_yaml::from_str(text).unwrap();
        let mut store = Store::new(100);
        seed.apply(&mut store, "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(store.list(Kind::Node, None).len(), seed.nodes.len());
        assert_eq!(
            store.list(Kind::Event, Some("default")).len(),
            seed.events.len()
        );
    }
}
