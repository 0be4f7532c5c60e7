//! `SetNodeAdminState`, once the caller passed its allow-list and rate limit and the request
//! validated, as named steps: a node without entries is answered at once; with a signal-svc
//! stream the hold goes up it and is stored on the Node ([`Inbound::set_durable`]); a stream
//! away for a leader change is waited for, then refused as retryable; without any stream
//! (the actuator used alone) the hold lives in this replica's memory
//! ([`Inbound::set_in_memory`]) and every answer says so.

use super::fresh::Unknown;
use crate::inbound::Inbound;
use crate::inbound::holds::{self, HoldWait, Route, UplinkError};
use crate::inbound::validate::{self, SetRequest};
use crate::lb::index::Admin;
use crate::state::{Source, admin_to_proto, entry_ref};
use cutover_proto::v1::{
    AdminState, Hold, NodeRef, NodeResult, ResultPhase, SetNodeAdminStateResponse, Version, WaitFor,
};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;
use tokio::time::Instant;
use tonic::Status;

/// Whether a result of a memory-only version answers a caller waiting for `wait`.
fn reached(r: &NodeResult, wait: WaitFor) -> bool {
    let phase = ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified);
    match phase {
        ResultPhase::Superseded => true,
        ResultPhase::Failed => !r.will_retry,
        ResultPhase::Effective => true,
        ResultPhase::Accepted => wait == WaitFor::Accepted,
        ResultPhase::Unspecified => false,
    }
}

/// A result of a memory-only hold, its reason saying so.
fn memory_only(mut r: NodeResult) -> Option<NodeResult> {
    r.reason = if r.reason.is_empty() {
        holds::MEMORY_ONLY.to_string()
    } else {
        format!("{}; {}", r.reason, holds::MEMORY_ONLY)
    };
    Some(r)
}

impl Inbound {
    /// `SetNodeAdminState` for `requester`, with the tool's `reason` text.
    pub async fn set(
        &self,
        req: SetRequest,
        reason: String,
        requester: String,
    ) -> Result<SetNodeAdminStateResponse, Status> {
        if let Unknown::Yes(note) = self.unknown_node(&req.node, &req.spec).await? {
            // Nothing to write and nothing held: answered without waking the writers.
            return Ok(self.no_entries(req.node, req.desired, note));
        }
        // A stream lost to a leader change or a reconnect is back within seconds: wait for it
        // (within the caller's timeout) rather than make every tool retry.
        let patience = req.timeout.min(Duration::from_secs(15));
        match self.store.uplink().route_within(patience).await {
            Route::Retry => Err(Status::unavailable(
                "no signal-svc stream (a leader change?); a hold set now would not be durable; retry in a few seconds",
            )),
            Route::Durable => {
                let w = HoldWait {
                    node: req.node,
                    spec: req.spec,
                    hold: req.desired == Admin::Down,
                    reason,
                    requester,
                    wait: req.wait,
                    deadline: Instant::now() + req.timeout,
                };
                self.set_durable(w).await
            }
            Route::MemoryOnly => self.set_in_memory(req, reason, requester).await,
        }
    }

    /// The answer for a node that resolves to no backend entry: EFFECTIVE at once, with the
    /// negative cache's note.
    fn no_entries(&self, node: NodeRef, desired: Admin, note: String) -> SetNodeAdminStateResponse {
        let now = prost_types::Timestamp::from(std::time::SystemTime::now());
        SetNodeAdminStateResponse {
            result: Some(NodeResult {
                node: Some(node),
                version: Some(self.store.next_tool_version()),
                desired: admin_to_proto(desired) as i32,
                phase: ResultPhase::Effective as i32,
                reason: note,
                will_retry: false,
                entries: Vec::new(),
                at: Some(now),
                received_at: Some(now),
                load_balancers: self.store.lbs(),
                ..NodeResult::default()
            }),
            timed_out: false,
        }
    }

    /// A tool hold while a signal-svc stream is connected: relayed to the leader, stored on
    /// the Node, then waited for as every replica sees it (see `inbound::holds`).
    async fn set_durable(&self, mut w: HoldWait) -> Result<SetNodeAdminStateResponse, Status> {
        let ack = self
            .store
            .uplink()
            .request(
                w.node.clone(),
                w.hold,
                w.reason.clone(),
                w.requester.clone(),
                w.deadline,
            )
            .await
            .map_err(|e| match e {
                UplinkError::Timeout => Status::deadline_exceeded(format!("{e}; retry")),
                _ => Status::unavailable(format!("{e}; retry")),
            })?;
        if !ack.ok {
            return Err(holds::refused(&ack));
        }
        if w.node.uid.is_empty() {
            w.node.uid = ack.node_uid.clone();
        }
        // A hold kept in memory before the stream came is superseded by the durable one.
        let dropped = self.store.drop_tool_states(&w.node.name);
        tracing::info!(node = %w.node.name, hold = w.hold, requester = %w.requester, dropped_memory_holds = dropped, "durable tool hold acknowledged by signal-svc");
        if w.wait == WaitFor::Unspecified {
            let desired = if w.hold {
                AdminState::Down
            } else {
                AdminState::None
            };
            return Ok(SetNodeAdminStateResponse {
                result: Some(NodeResult {
                    node: Some(w.node),
                    desired: desired as i32,
                    reason: "durable hold: stored on the Node".into(),
                    ..NodeResult::default()
                }),
                timed_out: false,
            });
        }
        let mut shutdown = self.shutdown.clone();
        let (mut result, timed_out) = tokio::select! {
            r = holds::wait_for(&self.store, &w) => r,
            _ = shutdown.wait_for(|s| *s) => {
                return Err(Status::unavailable("actuator is draining; ask another replica"));
            }
        };
        self.durable_entries(&w, &mut result);
        Ok(SetNodeAdminStateResponse {
            result: Some(result),
            timed_out,
        })
    }

    /// The node's entries as this replica's pool cache resolves them (from the stream's node
    /// reference, which signal-svc fills in). Another replica may have written them: once the
    /// fleet says EFFECTIVE, every one reads the desired state.
    fn durable_entries(&self, w: &HoldWait, result: &mut NodeResult) {
        let spec = self
            .store
            .find_stream(&w.node.uid, &w.node.name)
            .map_or_else(|| Arc::new(w.spec.clone()), |h| h.spec);
        let (index, _) = self.cache.index(None);
        let effective = result.phase == ResultPhase::Effective as i32;
        result.entries = index
            .resolve(&spec, None)
            .entries
            .iter()
            .map(|e| {
                let mut r = entry_ref(e);
                if effective {
                    r.admin_state = result.desired;
                }
                r
            })
            .collect();
    }

    /// No signal-svc stream: the actuator is used alone, and the hold can only live here.
    async fn set_in_memory(
        &self,
        req: SetRequest,
        reason: String,
        requester: String,
    ) -> Result<SetNodeAdminStateResponse, Status> {
        let SetRequest {
            node,
            spec,
            desired,
            reasons,
            wait,
            timeout,
        } = req;
        let version = self.store.next_tool_version();
        let rx = self.store.subscribe();
        let name = node.name.clone();
        let hold = (desired == Admin::Down).then(|| Hold {
            reason,
            requester,
            since: Some(prost_types::Timestamp::from(std::time::SystemTime::now())),
        });
        self.store.offer(
            validate::key_of(&node.uid, &node.name),
            node.clone(),
            spec,
            desired,
            version,
            Source::Tool,
            reasons,
            hold,
        );
        let last = NodeResult {
            node: Some(node),
            version: Some(version),
            desired: admin_to_proto(desired) as i32,
            phase: ResultPhase::Unspecified as i32,
            ..Default::default()
        };
        if wait == WaitFor::Unspecified {
            return Ok(SetNodeAdminStateResponse {
                result: memory_only(last),
                timed_out: false,
            });
        }
        let deadline = Instant::now() + timeout;
        self.wait_in_memory(rx, (version, &name), wait, deadline, last)
            .await
    }

    /// Waits until this replica's result of the memory-only `version` of node `name` reaches
    /// `wait`, the deadline passes (the last result, timed out) or the replica drains.
    async fn wait_in_memory(
        &self,
        mut rx: broadcast::Receiver<NodeResult>,
        (version, name): (Version, &str),
        wait: WaitFor,
        deadline: Instant,
        mut last: NodeResult,
    ) -> Result<SetNodeAdminStateResponse, Status> {
        let mut shutdown = self.shutdown.clone();
        loop {
            let next = tokio::select! {
                r = tokio::time::timeout_at(deadline, rx.recv()) => r,
                _ = shutdown.wait_for(|s| *s) => {
                    return Err(Status::unavailable("actuator is draining; ask another replica"));
                }
            };
            match next {
                Err(_) => {
                    return Ok(SetNodeAdminStateResponse {
                        result: memory_only(last),
                        timed_out: true,
                    });
                }
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => continue,
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    return Err(Status::unavailable("shutting down"));
                }
                Ok(Ok(r)) => {
                    let ours = r.version == Some(version)
                        && r.node.as_ref().is_some_and(|n| n.name == name);
                    if !ours {
                        continue;
                    }
                    let done = reached(&r, wait);
                    last = r;
                    if done {
                        return Ok(SetNodeAdminStateResponse {
                            result: memory_only(last),
                            timed_out: false,
                        });
                    }
                }
            }
        }
    }
}
