//! The Node as the watch reads it: only the fields the index uses are ever materialised.
//!
//! A whole Node is 10-30 KB of JSON (managedFields, images, capacity, nodeInfo...); the watch
//! needs a few hundred bytes of it. Deserialising straight into this type skips everything
//! else without allocating (serde ignores unknown fields), so neither a LIST page nor a watch
//! event ever holds a full Node. Labels and annotations keep only the keys we read.
//!
//! Lenient like the `DynamicObject` path it replaces: a leaf of the wrong shape does not fail a
//! whole LIST page; it marks the object malformed, and the watch skips it with one warning.

use crate::core::hold::HOLD_ANNOTATION;
use crate::core::taints::{EXCLUDE_FROM_LB_LABEL, SPOT_NOTICE_HANDLED, UPGRADE_STATUS_LABEL};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::Deserialize;
use serde::de::{DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;

const KEPT_LABELS: &[&str] = &[
    "topology.kubernetes.io/zone",
    EXCLUDE_FROM_LB_LABEL,
    UPGRADE_STATUS_LABEL,
];
const KEPT_ANNOTATIONS: &[&str] = &[SPOT_NOTICE_HANDLED, HOLD_ANNOTATION];

/// A leaf read leniently: `Err` keeps the reason instead of failing the whole object.
#[derive(Clone, Debug)]
pub struct Leaf<T>(Result<Option<T>, String>);

impl<T> Default for Leaf<T> {
    fn default() -> Self {
        Self(Ok(None))
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Leaf<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // Leaves are small (a name, a taint list): buffering them is cheap.
        let v = serde_json::Value::deserialize(d)?;
        if v.is_null() {
            return Ok(Self(Ok(None)));
        }
        Ok(Self(
            serde_json::from_value(v)
                .map(Some)
                .map_err(|e| e.to_string()),
        ))
    }
}

/// Keeps only the wanted keys of a string map; other values are skipped unread.
fn filtered_map<'de, D: Deserializer<'de>>(
    d: D,
    keep: &'static [&'static str],
) -> Result<Leaf<BTreeMap<String, String>>, D::Error> {
    struct V(&'static [&'static str]);
    impl<'de> Visitor<'de> for V {
        type Value = Leaf<BTreeMap<String, String>>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings")
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(Leaf::default())
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut out = BTreeMap::new();
            let mut problem = None;
            while let Some(k) = map.next_key::<Cow<'de, str>>()? {
                if self.0.contains(&k.as_ref()) {
                    match map.next_value::<serde_json::Value>()? {
                        serde_json::Value::String(s) => {
                            out.insert(k.into_owned(), s);
                        }
                        other => problem = Some(format!("{k}: not a string: {other}")),
                    }
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(Leaf(match problem {
                Some(p) => Err(p),
                None => Ok(Some(out)),
            }))
        }
    }
    d.deserialize_any(V(keep))
}

fn labels<'de, D: Deserializer<'de>>(d: D) -> Result<Leaf<BTreeMap<String, String>>, D::Error> {
    filtered_map(d, KEPT_LABELS)
}

fn annotations<'de, D: Deserializer<'de>>(
    d: D,
) -> Result<Leaf<BTreeMap<String, String>>, D::Error> {
    filtered_map(d, KEPT_ANNOTATIONS)
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Leaf<String>,
    #[serde(default)]
    uid: Leaf<String>,
    #[serde(default)]
    resource_version: Leaf<String>,
    #[serde(default)]
    creation_timestamp: Leaf<Time>,
    #[serde(default)]
    deletion_timestamp: Leaf<Time>,
    #[serde(default, deserialize_with = "labels")]
    labels: Leaf<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "annotations")]
    annotations: Leaf<BTreeMap<String, String>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimSpec {
    #[serde(rename = "providerID", default)]
    provider_id: Leaf<String>,
    #[serde(default)]
    taints: Leaf<Vec<Taint>>,
    #[serde(default)]
    unschedulable: Leaf<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct SlimStatus {
    #[serde(default)]
    addresses: Leaf<Vec<NodeAddress>>,
    #[serde(default)]
    conditions: Leaf<Vec<NodeCondition>>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: SlimMeta,
    #[serde(default)]
    spec: Option<SlimSpec>,
    #[serde(default)]
    status: Option<SlimStatus>,
}

/// A Node with only what signal-svc reads; see the module doc.
#[derive(Clone, Debug)]
pub struct SlimNode {
    meta: ObjectMeta,
    node: Result<Node, String>,
}

fn take<T>(leaf: Leaf<T>, field: &str, problems: &mut Vec<String>) -> Option<T> {
    match leaf.0 {
        Ok(v) => v,
        Err(e) => {
            problems.push(format!("{field}: {e}"));
            None
        }
    }
}

impl<'de> Deserialize<'de> for SlimNode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = Wire::deserialize(d)?;
        let mut problems = Vec::new();
        let m = w.metadata;
        let meta = ObjectMeta {
            name: take(m.name, "metadata.name", &mut problems),
            uid: take(m.uid, "metadata.uid", &mut problems),
            resource_version: take(
                m.resource_version,
                "metadata.resourceVersion",
                &mut problems,
            ),
            creation_timestamp: take(
                m.creation_timestamp,
                "metadata.creationTimestamp",
                &mut problems,
            ),
            deletion_timestamp: take(
                m.deletion_timestamp,
                "metadata.deletionTimestamp",
                &mut problems,
            ),
            labels: take(m.labels, "metadata.labels", &mut problems),
            annotations: take(m.annotations, "metadata.annotations", &mut problems),
            ..ObjectMeta::default()
        };
        let spec = w.spec.map(|s| NodeSpec {
            provider_id: take(s.provider_id, "spec.providerID", &mut problems),
            taints: take(s.taints, "spec.taints", &mut problems),
            unschedulable: take(s.unschedulable, "spec.unschedulable", &mut problems),
            ..NodeSpec::default()
        });
        let status = w.status.map(|s| NodeStatus {
            addresses: take(s.addresses, "status.addresses", &mut problems),
            conditions: take(s.conditions, "status.conditions", &mut problems),
            ..NodeStatus::default()
        });
        let node = if problems.is_empty() {
            Ok(Node {
                metadata: meta.clone(),
                spec,
                status,
            })
        } else {
            Err(problems.join("; "))
        };
        Ok(Self { meta, node })
    }
}

impl SlimNode {
    /// The Node with the fields the index reads, or why it cannot be read.
    pub fn node(&self) -> Result<&Node, &str> {
        self.node.as_ref().map_err(String::as_str)
    }

    pub fn into_node(self) -> Result<Node, String> {
        self.node
    }
}

impl kube::Resource for SlimNode {
    type DynamicType = ();
    type Scope = k8s_openapi::ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "Node".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "nodes".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.meta
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_what_the_index_reads_and_drops_the_rest() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {
                "name": "aks-n-1", "uid": "u1", "resourceVersion": "42",
                "creationTimestamp": "2026-08-01T05:00:00Z",
                "deletionTimestamp": "2026-08-01T06:00:00Z", "finalizers": ["karpenter.sh/termination"],
                "labels": {"topology.kubernetes.io/zone": "eastus-1", "kubernetes.azure.com/agentpool": "n",
                           EXCLUDE_FROM_LB_LABEL: "karpenter", UPGRADE_STATUS_LABEL: "Quarantined"},
                "annotations": {SPOT_NOTICE_HANDLED: "2026-08-01T05:41:00Z", "node.alpha.kubernetes.io/ttl": "0"},
                "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
            },
            "spec": {"providerID": "azure:///x", "podCIDR": "10.244.0.0/24", "unschedulable": true,
                     "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.4"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "images": [{"names": ["mcr.microsoft.com/x:1"], "sizeBytes": 1}],
                "nodeInfo": {"kubeletVersion": "v1.31.0"}
            }
        });
        let slim: SlimNode = serde_json::from_value(json).unwrap();
        let node = slim.node().unwrap();
        let meta = &node.metadata;
        assert_eq!(meta.name.as_deref(), Some("aks-n-1"));
        assert_eq!(meta.resource_version.as_deref(), Some("42"));
        assert_eq!(
            meta.labels.as_ref().unwrap().len(),
            3,
            "only the zone, exclusion and upgrade-status labels"
        );
        assert!(meta.deletion_timestamp.is_some());
        assert_eq!(
            meta.labels
                .as_ref()
                .unwrap()
                .get(EXCLUDE_FROM_LB_LABEL)
                .map(String::as_str),
            Some("karpenter")
        );
        assert_eq!(meta.annotations.as_ref().unwrap().len(), 1);
        assert!(meta.managed_fields.is_none());
        let spec = node.spec.as_ref().unwrap();
        assert_eq!(spec.provider_id.as_deref(), Some("azure:///x"));
        assert!(spec.pod_cidr.is_none());
        assert_eq!(spec.unschedulable, Some(true));
        assert_eq!(spec.taints.as_ref().unwrap()[0].key, "k");
        let status = node.status.as_ref().unwrap();
        assert_eq!(status.addresses.as_ref().unwrap().len(), 1);
        assert_eq!(status.conditions.as_ref().unwrap().len(), 1);
        assert!(status.images.is_none() && status.node_info.is_none());
    }

    #[test]
    fn a_malformed_leaf_marks_the_object_instead_of_failing_the_page() {
        let page = serde_json::json!([
            {"metadata": {"name": "bad", "uid": "u1"}, "spec": {"taints": "oops"}},
            {"metadata": {"name": "good", "uid": "u2"}, "spec": {"taints": null}}
        ]);
        let nodes: Vec<SlimNode> = serde_json::from_value(page).unwrap();
        let err = nodes[0].node().unwrap_err();
        assert!(err.contains("spec.taints"), "{err}");
        assert_eq!(nodes[0].meta.name.as_deref(), Some("bad"));
        assert!(nodes[1].node().is_ok());
    }
}
