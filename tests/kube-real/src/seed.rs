//! Seeds Nodes the way a real cluster gets them: the kubelet creates the Node (metadata and
//! spec), the node status (addresses, conditions, capacity) is written through the `status`
//! subresource. The objects come from kube-sim's rendering of `tests/aks-fixture`, so both
//! servers hold the same cluster; only `uid` and `resourceVersion` are the server's own.

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube_sim::Seed;
use serde_json::Value;

/// Creates every Node of `seed` with its status. Returns how many were created.
pub async fn nodes(client: &kube::Client, seed: &Seed) -> Result<usize, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let now = jiff::Timestamp::now()
        .round(jiff::Unit::Second)
        .unwrap_or_else(|_| jiff::Timestamp::now())
        .to_string();
    for n in &seed.nodes {
        let mut obj = kube_sim::seed::node_object(n, &now);
        let status = obj
            .as_object_mut()
            .and_then(|o| o.remove("status"))
            .unwrap_or(Value::Null);
        if let Some(meta) = obj["metadata"].as_object_mut() {
            // Server-assigned on a real API server.
            meta.remove("uid");
            meta.remove("creationTimestamp");
        }
        obj["apiVersion"] = "v1".into();
        obj["kind"] = "Node".into();
        let node: Node = serde_json::from_value(obj).map_err(kube::Error::SerdeError)?;
        api.create(&PostParams::default(), &node).await?;
        api.patch_status(
            &n.name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await?;
    }
    Ok(seed.nodes.len())
}
