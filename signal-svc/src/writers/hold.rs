//! The hold writer: answers an actuator's `HoldRequest` by setting or removing the Node
//! annotation `cutover.io/hold` (see [`crate::core::hold`]), on the leader only.
//!
//! A merge patch of one annotation key, carrying the Node's UID and resourceVersion as
//! preconditions: a node recreated under the same name is never held by a request meant for
//! its predecessor, and the write is based on the Node as just read (a 409 re-reads and
//! retries). Leadership is checked right before every write, so a deposed leader (another
//! epoch, or a suspended term) writes nothing. The watch then turns the annotation into a
//! desired state for every actuator replica, like any taint.

use crate::core::FIELD_MANAGER;
use crate::core::hold::{self, HOLD_ANNOTATION, Hold};
use cutover_proto::v1::{HoldAck, HoldRequest, SignalMessage, signal_message::Kind};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Semaphore, mpsc};

/// How long one request may take against the API server.
const PATCH_TIMEOUT: Duration = Duration::from_secs(10);
/// Requests patched at once; tools are rate-limited by the actuator, this only caps bursts.
const CONCURRENT: usize = 4;
/// Read-modify-write rounds before giving up on a Node that keeps changing.
const ATTEMPTS: usize = 5;

/// Writes holds through the Kubernetes API.
#[derive(Clone)]
pub struct HoldWriter {
    api: Api<Node>,
    permits: Arc<Semaphore>,
}

impl std::fmt::Debug for HoldWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HoldWriter").finish_non_exhaustive()
    }
}

/// Why a request was refused (the `HoldAck.error`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Refusal {
    #[error("not leader")]
    NotLeader,
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("unknown node {0}")]
    UnknownNode(String),
    #[error("patch failed: {0}")]
    PatchFailed(String),
}

/// Checks a request before any API call.
pub fn validate(req: &HoldRequest) -> Result<(), Refusal> {
    let node = req
        .node
        .as_ref()
        .ok_or_else(|| Refusal::Invalid("node: required".into()))?;
    hold::node_name(&node.name).map_err(Refusal::Invalid)?;
    hold::text("reason", &req.reason).map_err(Refusal::Invalid)?;
    hold::text("requester", &req.requester).map_err(Refusal::Invalid)?;
    if req.request_id.is_empty() || req.request_id.len() > 64 {
        return Err(Refusal::Invalid("request_id: 1 to 64 bytes".into()));
    }
    Ok(())
}

/// The answer to send for `req`.
pub fn ack(req: &HoldRequest, outcome: Result<String, Refusal>) -> HoldAck {
    match outcome {
        Ok(uid) => HoldAck {
            request_id: req.request_id.clone(),
            ok: true,
            error: String::new(),
            node_uid: uid,
        },
        Err(e) => HoldAck {
            request_id: req.request_id.clone(),
            ok: false,
            error: e.to_string(),
            node_uid: String::new(),
        },
    }
}

impl HoldWriter {
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
            permits: Arc::new(Semaphore::new(CONCURRENT)),
        }
    }

    /// Validates and applies one request while `still_leader` holds; `Ok` is the Node's UID.
    pub async fn apply(
        &self,
        req: &HoldRequest,
        still_leader: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<String, Refusal> {
        validate(req)?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| Refusal::PatchFailed("shutting down".into()))?;
        let rounds = async {
            for _ in 0..ATTEMPTS {
                match self.patch(req, still_leader).await {
                    Err(Refusal::PatchFailed(e)) if e == CONFLICT => continue,
                    other => return other,
                }
            }
            Err(Refusal::PatchFailed(format!(
                "the node kept changing ({ATTEMPTS} conflicts)"
            )))
        };
        tokio::time::timeout(PATCH_TIMEOUT, rounds)
            .await
            .map_err(|_| Refusal::PatchFailed(format!("no answer within {PATCH_TIMEOUT:?}")))?
    }

    /// One read-modify-write round.
    async fn patch(
        &self,
        req: &HoldRequest,
        still_leader: &(dyn Fn() -> bool + Send + Sync),
    ) -> Result<String, Refusal> {
        let node_ref = req.node.clone().unwrap_or_default();
        let name = node_ref.name;
        let failed = |e: kube::Error| Refusal::PatchFailed(e.to_string());
        let node = self
            .api
            .get_opt(&name)
            .await
            .map_err(failed)?
            .ok_or_else(|| Refusal::UnknownNode(name.clone()))?;
        let uid = node.metadata.uid.clone().unwrap_or_default();
        if !node_ref.uid.is_empty() && node_ref.uid != uid {
            return Err(Refusal::UnknownNode(format!(
                "{name} (uid {})",
                node_ref.uid
            )));
        }
        // Nothing to change: the same hold again (which keeps its `since`), or no hold to lift.
        let Some(value) = annotation_value(req, &node) else {
            return Ok(uid);
        };
        let rv = node.metadata.resource_version.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "metadata": {
                "uid": uid,
                "resourceVersion": rv,
                "annotations": { HOLD_ANNOTATION: value }
            }
        });
        // Under the current fence: a leader that lost or paused its term writes nothing.
        if !still_leader() {
            return Err(Refusal::NotLeader);
        }
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        match self.api.patch(&name, &pp, &Patch::Merge(&patch)).await {
            Ok(_) => {
                tracing::info!(node = %name, hold = req.hold, requester = %req.requester, reason = %req.reason, "tool hold written");
                Ok(uid)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Err(Refusal::UnknownNode(name)),
            // The Node changed since we read it (or was recreated: the next read sees that).
            Err(kube::Error::Api(s)) if s.code == 409 => Err(Refusal::PatchFailed(CONFLICT.into())),
            Err(e) => Err(failed(e)),
        }
    }
}

/// The annotation value `req` asks for (`Null` removes it, as a merge patch), or `None` when
/// the Node already says so.
fn annotation_value(req: &HoldRequest, node: &Node) -> Option<serde_json::Value> {
    let annotations = node.metadata.annotations.as_ref();
    if req.hold {
        let current = annotations
            .and_then(|a| a.get(HOLD_ANNOTATION))
            .and_then(|v| Hold::parse(v).ok());
        // The same hold again keeps its `since` (and changes nothing on the Node).
        if current
            .as_ref()
            .is_some_and(|h| h.reason == req.reason && h.by == req.requester)
        {
            return None;
        }
        let hold = Hold {
            reason: req.reason.clone(),
            by: req.requester.clone(),
            since: jiff::Timestamp::now(),
        };
        Some(serde_json::Value::String(hold.to_annotation()))
    } else if annotations.is_some_and(|a| a.contains_key(HOLD_ANNOTATION)) {
        // Merge patch: null removes the key.
        Some(serde_json::Value::Null)
    } else {
        None
    }
}

const CONFLICT: &str = "conflict";

/// Answers one request that came up a stream, in the background (a slow API server must not
/// stall the stream's reader). `still_leader` says, when the request is served, whether that
/// stream's epoch is still the leader's; `writer` is absent when this process may not write
/// holds. The ack goes back on that stream if it is still open; a tool whose stream ended
/// retries through its actuator.
pub fn serve(
    writer: Option<HoldWriter>,
    dry_run: bool,
    still_leader: impl Fn() -> bool + Send + Sync + 'static,
    req: HoldRequest,
    reply: mpsc::WeakSender<SignalMessage>,
) {
    tokio::spawn(async move {
        let outcome = if !still_leader() {
            Err(Refusal::NotLeader)
        } else if dry_run {
            Err(Refusal::PatchFailed("dry-run: nothing is written".into()))
        } else {
            match &writer {
                Some(w) => w.apply(&req, &still_leader).await,
                None => Err(Refusal::NotLeader),
            }
        };
        if let Err(e) = &outcome {
            tracing::warn!(node = req.node.as_ref().map(|n| n.name.as_str()).unwrap_or(""), error = %e, "hold request refused");
        }
        let ack = ack(&req, outcome);
        if let Some(tx) = reply.upgrade() {
            let _ = tx
                .send(SignalMessage {
                    kind: Some(Kind::HoldAck(ack)),
                })
                .await;
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use cutover_proto::v1::NodeRef;

    fn req(name: &str, reason: &str) -> HoldRequest {
        HoldRequest {
            request_id: "r1".into(),
            node: Some(NodeRef {
                name: name.into(),
                ..NodeRef::default()
            }),
            hold: true,
            reason: reason.into(),
            requester: "ops".into(),
        }
    }

    /// A stream whose epoch is no longer the leader's (a standby, a deposed leader) refuses
    /// without touching the API server.
    #[tokio::test]
    async fn a_request_on_a_stale_epoch_is_answered_not_leader() {
        let (tx, mut rx) = mpsc::channel(4);
        serve(None, false, || false, req("n", "x"), tx.downgrade());
        let Some(SignalMessage {
            kind: Some(Kind::HoldAck(a)),
        }) = rx.recv().await
        else {
            panic!("no ack");
        };
        assert!(!a.ok);
        assert_eq!(a.error, "not leader");
        assert_eq!(a.request_id, "r1");
    }

    #[test]
    fn requests_are_checked_before_any_api_call() {
        assert_eq!(validate(&req("aks-np-1", "ticket 1")), Ok(()));
        assert!(matches!(
            validate(&req("Bad_Name", "x")),
            Err(Refusal::Invalid(_))
        ));
        assert!(matches!(
            validate(&req("n", &"x".repeat(257))),
            Err(Refusal::Invalid(_))
        ));
        assert!(matches!(
            validate(&req("n", "a\nb")),
            Err(Refusal::Invalid(_))
        ));
        let mut no_node = req("n", "x");
        no_node.node = None;
        assert!(validate(&no_node).is_err());
        let a = ack(&req("n", "x"), Err(Refusal::UnknownNode("n".into())));
        assert!(!a.ok && a.error == "unknown node n" && a.request_id == "r1");
    }
}
