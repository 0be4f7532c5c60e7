//! What a person or a cloud controller does to the cluster in the scenarios, through the real
//! Kubernetes API (kube-rs against kube-sim): taint and untaint, label, cordon, Spot notices,
//! node replacement and deletion, and reading a Node's conditions (the drain gate).

use anyhow::Context;
use k8s_openapi::api::core::v1::{Event, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Config};
use serde_json::json;
use std::path::Path;

/// Taint keys that mean "the node is leaving".
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
pub const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
pub const SPOT_EVICTION: &str = "cloudprovider.azure.microsoft.com/draining";
/// Karpenter (and AKS node auto-provisioning) when it starts terminating a node.
pub const KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";
/// cluster-autoscaler before it drains and deletes a node (value: unix seconds).
pub const TO_BE_DELETED_BY_CA: &str = "ToBeDeletedByClusterAutoscaler";
/// The label Karpenter sets at termination (value `karpenter`).
pub const EXCLUDE_FROM_LBS: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The Node condition signal-svc keeps: the drain gate.
pub const GATE_CONDITION: &str = "LoadBalancerAdminStateDown";

/// A kube client from a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> anyhow::Result<Client> {
    let raw = kube::config::Kubeconfig::read_from(kubeconfig)
        .with_context(|| format!("read {}", kubeconfig.display()))?;
    let mut config = Config::from_custom_kubeconfig(raw, &Default::default()).await?;
    // The sandbox's API servers are on loopback: its own requests never take a proxy the
    // user's environment names (kube 5 would send them through HTTPS_PROXY).
    config.proxy_url = None;
    Ok(Client::try_from(config)?)
}

/// Cluster operations used by scenarios.
#[derive(Clone)]
pub struct Cluster {
    nodes: Api<Node>,
    events: Api<Event>,
}

impl Cluster {
    pub fn new(client: Client) -> Self {
        Cluster {
            nodes: Api::all(client.clone()),
            events: Api::namespaced(client, "default"),
        }
    }

    pub async fn node(&self, name: &str) -> anyhow::Result<Node> {
        Ok(self.nodes.get(name).await?)
    }

    pub async fn node_names(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .nodes
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect())
    }

    /// Adds a taint (as `kubectl taint` does: the whole list, guarded by resourceVersion).
    pub async fn taint(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
        effect: &str,
    ) -> anyhow::Result<()> {
        self.edit_taints(node, |taints| {
            taints.retain(|t| t["key"] != key);
            let mut taint = json!({"key": key, "effect": effect});
            if let Some(v) = value {
                taint["value"] = json!(v);
            }
            taints.push(taint);
        })
        .await
    }

    /// Removes every taint with `key`.
    pub async fn untaint(&self, node: &str, key: &str) -> anyhow::Result<()> {
        self.edit_taints(node, |taints| taints.retain(|t| t["key"] != key))
            .await
    }

    async fn edit_taints(
        &self,
        node: &str,
        edit: impl Fn(&mut Vec<serde_json::Value>),
    ) -> anyhow::Result<()> {
        for _ in 0..10 {
            let current = self.nodes.get(node).await?;
            let mut taints: Vec<serde_json::Value> = current
                .spec
                .as_ref()
                .and_then(|s| s.taints.clone())
                .unwrap_or_default()
                .into_iter()
                .map(|t| serde_json::to_value(t).unwrap_or_default())
                .collect();
            edit(&mut taints);
            let patch = json!({
                "metadata": {"resourceVersion": current.metadata.resource_version},
                "spec": {"taints": taints},
            });
            match self
                .nodes
                .patch(node, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                Err(kube::Error::Api(e)) if e.code == 409 => continue,
                Err(e) => return Err(e.into()),
            }
        }
        anyhow::bail!("taint update of {node} kept conflicting")
    }

    /// Sets (`Some`) or removes (`None`) a label, as `kubectl label` does.
    pub async fn label(&self, node: &str, key: &str, value: Option<&str>) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"labels": {key: value}}});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Deletes the Node object, as Karpenter or cluster-autoscaler do once the node is drained.
    pub async fn delete(&self, node: &str) -> anyhow::Result<()> {
        self.nodes.delete(node, &DeleteParams::default()).await?;
        Ok(())
    }

    /// Sets the Node's finalizers (Karpenter holds `karpenter.sh/termination` on its nodes for
    /// their whole termination; an empty list lets a deleted Node go).
    pub async fn set_finalizers(&self, node: &str, finalizers: &[&str]) -> anyhow::Result<()> {
        let patch = json!({"metadata": {"finalizers": finalizers}});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// The node's condition of type `type_`, if it has one.
    pub async fn condition(
        &self,
        node: &str,
        type_: &str,
    ) -> anyhow::Result<Option<k8s_openapi::api::core::v1::NodeCondition>> {
        Ok(self
            .nodes
            .get(node)
            .await?
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == type_))
    }

    /// `kubectl cordon`.
    pub async fn cordon(&self, node: &str, on: bool) -> anyhow::Result<()> {
        let patch = json!({"spec": {"unschedulable": on}});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Records a `PreemptScheduled` Warning the way AKS node-problem-detector does (core/v1,
    /// namespace default, involvedObject without uid), with a notice `seconds_ahead` in the future.
    pub async fn preempt_event(&self, node: &str, seconds_ahead: i64) -> anyhow::Result<String> {
        let not_before = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(seconds_ahead);
        let rfc1123 = not_before.strftime("%a, %d %b %Y %H:%M:%S GMT").to_string();
        self.record_preempt(
            node,
            format!(
                "Scheduled: {rfc1123}. DurationInSeconds: -1. Virtual machine is going to be preempted. For more information, see https://aka.ms/aks/scheduledevents."
            ),
        )
        .await
    }

    async fn record_preempt(&self, node: &str, message: String) -> anyhow::Result<String> {
        let now = jiff::Timestamp::now();
        let name = format!("{node}.{:x}", now.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.into()),
                ..Default::default()
            },
            reason: Some("PreemptScheduled".into()),
            type_: Some("Warning".into()),
            message: Some(message),
            source: Some(k8s_openapi::api::core::v1::EventSource {
                component: Some(
                    "custom-scheduledevents-consolidated-preempt-plugin-monitor".into(),
                ),
                host: Some(node.into()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Default::default()
        };
        self.events.create(&PostParams::default(), &event).await?;
        Ok(name)
    }

    /// The same reason emitted for an IMDS failure, which is no notice at all.
    pub async fn imds_failure_event(&self, node: &str) -> anyhow::Result<()> {
        self.record_preempt(
            node,
            "IMDS query failed, exit code: 28\nConnection timed out after 24 seconds.".into(),
        )
        .await?;
        Ok(())
    }

    /// The node's taints.
    pub async fn taints(
        &self,
        node: &str,
    ) -> anyhow::Result<Vec<k8s_openapi::api::core::v1::Taint>> {
        Ok(self
            .nodes
            .get(node)
            .await?
            .spec
            .and_then(|s| s.taints)
            .unwrap_or_default())
    }

    /// The recorder's aggregation of a repeat: bump `count` and `lastTimestamp`.
    pub async fn repeat_event(&self, name: &str) -> anyhow::Result<()> {
        let current = self.events.get(name).await?;
        let patch = json!({
            "count": current.count.unwrap_or(1) + 1,
            "lastTimestamp": Time(jiff::Timestamp::now()),
        });
        self.events
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Deletes a node and creates it again under the same name with a new UID and no taints
    /// but the ones it had from its pool, as a VM reimage or replacement does.
    pub async fn recreate(&self, node: &str) -> anyhow::Result<Node> {
        let mut old = self.nodes.get(node).await?;
        self.nodes.delete(node, &DeleteParams::default()).await?;
        let pool_taints: Vec<_> = old
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default()
            .into_iter()
            .filter(|t| t.key == "kubernetes.azure.com/scalesetpriority")
            .collect();
        old.metadata = ObjectMeta {
            name: old.metadata.name.clone(),
            labels: old.metadata.labels.clone(),
            annotations: old.metadata.annotations.clone(),
            ..Default::default()
        };
        if let Some(spec) = old.spec.as_mut() {
            spec.taints = Some(pool_taints).filter(|t| !t.is_empty());
            spec.unschedulable = None;
        }
        Ok(self.nodes.create(&PostParams::default(), &old).await?)
    }
}
