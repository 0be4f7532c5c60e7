//! The gate writer: keeps the Node condition `LoadBalancerAdminStateDown` (decided by
//! [`crate::core::gate`]) on the Node through `PATCH nodes/<name>/status`, leader only.
//!
//! Data flow: the node watch reports each Node's condition and desired-state changes
//! ([`GateHandle::node_applied`]); fleet-wide phases arrive on `Shared::statuses` (sent by
//! `results` when a version of a node becomes ACCEPTED / EFFECTIVE / FAILED on every managed
//! load balancer, or regresses from EFFECTIVE); a leadership change re-evaluates every node. One task drains the dirty set:
//! for each node it reads the current desired state and phase, asks the planner, and writes
//! only a change. Off the signal path: a slow API server delays the gate, never a cut.
//!
//! The patch is a strategic merge of one entry of `status.conditions` (merged by `type`, so
//! the kubelet's conditions are untouched) with `metadata.uid` and `metadata.resourceVersion`
//! as preconditions: a node recreated under the same name answers 409 and is left alone, and
//! a decision overtaken by a change of the Node (it left or came back while the write was on
//! its way: dst seed 4011, a `True` committed after the node had returned) answers 409 and is
//! decided again. The resourceVersion is the newest the watch or our own last write saw.
//! RBAC: `patch` on `nodes/status`, nothing else.

use crate::core::FIELD_MANAGER;
use crate::core::gate::{CONDITION_TYPE, Gate, GateCondition, GateStatus, observed};
use crate::core::index::Desired;
use crate::shared::Shared;
use cutover_proto::v1::AdminState;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use parking_lot::Mutex;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, broadcast};
use tokio_util::sync::CancellationToken;

/// Per write; a slower API server only delays the gate.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_MIN: Duration = Duration::from_millis(500);
const RETRY_MAX: Duration = Duration::from_secs(30);

#[derive(Debug, Default)]
struct Inner {
    gate: Gate,
    dirty: BTreeSet<String>,
    /// Each Node's newest resourceVersion seen, by UID: a write's precondition.
    versions: HashMap<String, String>,
}

/// Shared between the node watch (which reports) and the gate writer task.
#[derive(Debug, Default)]
pub struct GateHandle {
    inner: Mutex<Inner>,
    notify: Notify,
}

impl GateHandle {
    pub fn new() -> Arc<Self> {
        Arc::default()
    }

    /// A Node was listed, added or modified. `changed`: the index emitted a change for it.
    pub fn node_applied(&self, node: &Node, changed: bool) {
        let Some(uid) = node.metadata.uid.as_deref() else {
            return;
        };
        let mut inner = self.inner.lock();
        if let Some(rv) = &node.metadata.resource_version {
            inner.versions.insert(uid.to_owned(), rv.clone());
        }
        let differs = inner.gate.observe(uid, observed(node));
        if changed || differs {
            inner.dirty.insert(uid.to_owned());
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// A Node is gone.
    pub fn node_deleted(&self, uid: &str) {
        let mut inner = self.inner.lock();
        inner.gate.forget(uid);
        inner.dirty.remove(uid);
        inner.versions.remove(uid);
    }

    fn kick(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if inner.gate.knows(uid) {
            inner.dirty.insert(uid.to_owned());
            drop(inner);
            self.notify.notify_one();
        }
    }

    fn kick_all(&self) {
        let mut inner = self.inner.lock();
        let all = inner.gate.uids();
        inner.dirty.extend(all);
        drop(inner);
        self.notify.notify_one();
    }
}

/// One planned write.
struct Write {
    uid: String,
    name: String,
    cond: GateCondition,
    /// The transition time to keep (same status as on the Node), else now.
    since: Option<jiff::Timestamp>,
    /// The Node's resourceVersion the decision was made at (the precondition).
    version: Option<String>,
}

/// Decides for every dirty node; returns the writes to make (empty on a standby).
fn plan(shared: &Shared, handle: &GateHandle) -> Vec<Write> {
    let dirty = std::mem::take(&mut handle.inner.lock().dirty);
    let leader = shared.leader_epoch().is_some() && !shared.dry_run();
    let mut writes = Vec::new();
    for uid in dirty {
        let current = shared.current_with(&uid, |s| {
            let desired = match AdminState::try_from(s.desired).ok()? {
                AdminState::Down => Desired::Down,
                AdminState::None => Desired::None,
                _ => return None,
            };
            Some((s.node.as_ref()?.name.clone(), desired, s.version))
        });
        // Never asserted (never Down) or forgotten: no condition to keep.
        let Some((name, desired, version)) = current else {
            continue;
        };
        let (phase, regressed) = shared
            .reached(&uid)
            .filter(|((v, _), _)| Some(*v) == version)
            .map_or((None, false), |((_, p), regressed)| (Some(p), regressed));
        let mut inner = handle.inner.lock();
        let Some(cond) = inner.gate.evaluate(&uid, desired, phase, regressed) else {
            continue;
        };
        if leader {
            let since = inner
                .gate
                .seen(&uid)
                .filter(|s| s.status == cond.status)
                .and_then(|s| s.last_transition);
            let version = inner.versions.get(&uid).cloned();
            writes.push(Write {
                uid,
                name,
                cond,
                since,
                version,
            });
        }
    }
    writes
}

#[derive(Debug, thiserror::Error)]
enum WriteError {
    #[error("node {node}: {source}")]
    Api { node: String, source: kube::Error },
    #[error("node {node}: timed out after {WRITE_TIMEOUT:?}")]
    Timeout { node: String },
}

/// What a write came to.
enum Written {
    /// Committed; the Node's resourceVersion after it.
    Done(Option<String>),
    /// The node is gone (nothing to retry).
    Gone,
    /// The Node changed (or was replaced) since the decision: decide again.
    Overtaken,
}

/// Writes one condition.
async fn write(api: &Api<Node>, w: &Write) -> Result<Written, WriteError> {
    let now = jiff::Timestamp::now();
    let mut metadata = serde_json::json!({"uid": w.uid});
    if let Some(rv) = &w.version {
        metadata["resourceVersion"] = serde_json::Value::String(rv.clone());
    }
    let patch = serde_json::json!({
        "metadata": metadata,
        "status": {"conditions": [{
            "type": CONDITION_TYPE,
            "status": w.cond.status.as_str(),
            "reason": w.cond.reason,
            "message": w.cond.message,
            "lastTransitionTime": w.since.unwrap_or(now).strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
            "lastHeartbeatTime": now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        }]}
    });
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    let patch = Patch::Strategic(&patch);
    let call = api.patch_status(&w.name, &params, &patch);
    match tokio::time::timeout(WRITE_TIMEOUT, call).await {
        Ok(Ok(node)) => Ok(Written::Done(node.metadata.resource_version)),
        Ok(Err(kube::Error::Api(s))) if s.is_not_found() => Ok(Written::Gone),
        Ok(Err(kube::Error::Api(s))) if s.is_conflict() => Ok(Written::Overtaken),
        Ok(Err(source)) => Err(WriteError::Api {
            node: w.name.clone(),
            source,
        }),
        Err(_) => Err(WriteError::Timeout {
            node: w.name.clone(),
        }),
    }
}

/// Runs the gate writer until shutdown. `client` must not retry on its own (kube's default
/// retry re-sends a failed PATCH as it was, after `Retry-After`): a condition that failed is
/// decided again from the current state before the next try.
pub async fn run(
    client: kube::Client,
    shared: Arc<Shared>,
    handle: Arc<GateHandle>,
    shutdown: CancellationToken,
) {
    let api: Api<Node> = Api::all(client);
    let mut statuses = shared.subscribe_statuses();
    let mut leader = shared.leader_rx();
    let mut resumed = shared.resumed_rx();
    let mut retry: Option<tokio::time::Instant> = None;
    let mut backoff = RETRY_MIN;
    let mut failed: HashSet<String> = HashSet::new();
    loop {
        let retry_at = retry;
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = handle.notify.notified() => {}
            s = statuses.recv() => match s {
                Ok(s) => if let Some(n) = s.node { handle.kick(&n.uid) },
                Err(broadcast::error::RecvError::Lagged(_)) => handle.kick_all(),
                Err(broadcast::error::RecvError::Closed) => return,
            },
            r = leader.changed() => {
                if r.is_err() { return }
                handle.kick_all();
            }
            // Conditions decided while writes were paused were not written: decide again.
            r = resumed.changed() => {
                if r.is_err() { return }
                handle.kick_all();
            }
            _ = async { tokio::time::sleep_until(retry_at.unwrap_or_else(tokio::time::Instant::now)).await }, if retry_at.is_some() => {
                retry = None;
                for uid in failed.drain() {
                    handle.inner.lock().dirty.insert(uid);
                }
            }
        }
        let writes = plan(&shared, &handle);
        if write_all(&api, &shared, &handle, writes, &mut failed).await {
            backoff = RETRY_MIN;
        }
        if !failed.is_empty() && retry.is_none() {
            retry = Some(tokio::time::Instant::now() + backoff);
            backoff = (backoff * 2).min(RETRY_MAX);
        }
    }
}

/// Writes the planned conditions in turn while this process leads; what fails goes to
/// `failed` (decided again at the retry). Returns whether any write was committed.
async fn write_all(
    api: &Api<Node>,
    shared: &Shared,
    handle: &GateHandle,
    writes: Vec<Write>,
    failed: &mut HashSet<String>,
) -> bool {
    let mut committed = false;
    for w in writes {
        // Fenced per write, not per plan: a write queued behind a slow API server may
        // outlive the term it was decided under (N9). What is not written is decided
        // again on resume or by the next leader.
        if shared.leader_epoch().is_none() {
            break;
        }
        let status = w.cond.status.as_str();
        match write(api, &w).await {
            Ok(Written::Done(version)) => {
                shared.metrics().condition_write(status, "ok");
                log_write(&w);
                let mut inner = handle.inner.lock();
                if let Some(rv) = version {
                    inner.versions.insert(w.uid.clone(), rv);
                }
                inner.gate.written(&w.uid, w.cond);
                committed = true;
            }
            Ok(Written::Gone) => {}
            Ok(Written::Overtaken) => {
                // Decided again once the newer Node is known (the watch delivers it and
                // kicks; the retry covers a watch that is behind). A replaced node's UID
                // is no longer current then, so nothing is written for it.
                shared.metrics().condition_write(status, "conflict");
                failed.insert(w.uid);
            }
            Err(e) => {
                shared.metrics().condition_write(status, "error");
                tracing::warn!(error = %e, "writing the LoadBalancerAdminStateDown condition failed; retrying");
                failed.insert(w.uid);
            }
        }
    }
    committed
}

fn log_write(w: &Write) {
    let status = w.cond.status;
    if status == GateStatus::Unknown {
        tracing::debug!(node = %w.name, status = status.as_str(), reason = %w.cond.reason, "drain gate condition");
    } else {
        tracing::info!(node = %w.name, status = status.as_str(), reason = %w.cond.reason, "drain gate condition");
    }
}
