//! The taint writer: adds `cloudprovider.azure.microsoft.com/draining=spot-eviction:NoSchedule`
//! to a node on its first Spot notice, once, on the leader only.
//!
//! `spec.taints` is an atomic list (strategic merge and merge patch both replace it whole), so
//! the patch carries the full list read from the node plus `metadata.resourceVersion` (and
//! `uid`) as preconditions: a concurrent writer makes it fail with 409, and we re-read and
//! retry instead of dropping their change. Any taint with the draining key means "done".

use crate::core::FIELD_MANAGER;
use crate::core::index::TaintRequest;
use crate::core::taints::{DRAINING, DRAINING_EFFECT, SPOT_EVICTION, SPOT_NOTICE_HANDLED};
use crate::shared::Shared;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams};
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const MAX_CONFLICTS: usize = 50;

/// Outcome of one taint attempt.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Added,
    /// A taint with the draining key is already there (ours or an operator's).
    AlreadyPresent,
    /// The node is gone or was replaced (different UID).
    Gone,
}

#[derive(Debug, thiserror::Error)]
pub enum TaintError {
    #[error("node {node}: {source}")]
    Api { node: String, source: kube::Error },
    #[error("node {node}: still conflicting after {MAX_CONFLICTS} attempts")]
    Conflicts { node: String },
}

/// Adds the taint with read-modify-write under resourceVersion precondition.
pub async fn add_taint(api: &Api<Node>, req: &TaintRequest) -> Result<Outcome, TaintError> {
    let api_err = |source| TaintError::Api {
        node: req.name.clone(),
        source,
    };
    for _ in 0..MAX_CONFLICTS {
        let node = match api.get_opt(&req.name).await.map_err(api_err)? {
            Some(n) => n,
            None => return Ok(Outcome::Gone),
        };
        if node.metadata.uid.as_deref() != Some(req.uid.as_str()) {
            return Ok(Outcome::Gone);
        }
        let mut taints: Vec<Taint> = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let handled = node
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(SPOT_NOTICE_HANDLED));
        if handled || taints.iter().any(|t| t.key == DRAINING) {
            return Ok(Outcome::AlreadyPresent);
        }
        taints.push(Taint {
            key: DRAINING.to_owned(),
            value: Some(SPOT_EVICTION.to_owned()),
            effect: DRAINING_EFFECT.to_owned(),
            time_added: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                jiff::Timestamp::now(),
            )),
        });
        // The annotation travels in the same patch as the taint, so "tainted once" survives
        // leader changes even after an operator removes the taint.
        let patch = serde_json::json!({
            "metadata": {
                "resourceVersion": node.metadata.resource_version,
                "uid": req.uid,
                "annotations": { SPOT_NOTICE_HANDLED: jiff::Timestamp::now().to_string() },
            },
            "spec": { "taints": taints },
        });
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match api.patch(&req.name, &pp, &Patch::Strategic(&patch)).await {
            Ok(_) => return Ok(Outcome::Added),
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(node = %req.name, "taint patch conflicted; re-reading");
                // A little jitter so two busy writers do not keep colliding in lockstep.
                tokio::time::sleep(Duration::from_millis(1 + rand::random::<u64>() % 20)).await;
            }
            Err(kube::Error::Api(s)) if s.code == 404 => return Ok(Outcome::Gone),
            Err(e) => return Err(api_err(e)),
        }
    }
    Err(TaintError::Conflicts {
        node: req.name.clone(),
    })
}

/// Runs the writer until shutdown. Each node UID is handled once per process.
pub async fn run(
    client: kube::Client,
    shared: Arc<Shared>,
    mut rx: mpsc::UnboundedReceiver<TaintRequest>,
    shutdown: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let mut done: HashSet<String> = HashSet::new();
    loop {
        let req = tokio::select! {
            _ = shutdown.cancelled() => return,
            r = rx.recv() => match r { Some(r) => r, None => return },
        };
        if shared.leader_epoch().is_none() || done.contains(&req.uid) {
            continue;
        }
        if shared.dry_run() {
            tracing::info!(node = %req.name, uid = %req.uid, "dry-run: would add taint {DRAINING}={SPOT_EVICTION}:{DRAINING_EFFECT}");
            done.insert(req.uid);
            continue;
        }
        let attempt = tokio::time::timeout(Duration::from_secs(30), add_taint(&api, &req)).await;
        match attempt {
            Ok(Ok(outcome)) => {
                if outcome == Outcome::Added {
                    shared.metrics().taints_added.inc();
                    tracing::info!(node = %req.name, uid = %req.uid, "added taint {DRAINING}={SPOT_EVICTION}:{DRAINING_EFFECT}");
                } else {
                    tracing::debug!(node = %req.name, ?outcome, "no taint needed");
                }
                done.insert(req.uid);
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "adding the spot-eviction taint failed; retrying");
                requeue_later(&shared, req);
            }
            Err(_) => {
                tracing::warn!(node = %req.name, "adding the spot-eviction taint timed out; retrying");
                requeue_later(&shared, req);
            }
        }
    }
}

fn requeue_later(shared: &Arc<Shared>, req: TaintRequest) {
    let shared = shared.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        shared.requeue_taint(req);
    });
}
