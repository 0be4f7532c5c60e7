//! Actuator results: metrics and Node events, only for the current version of a node, each
//! phase once per version (a resync re-sends the same version; it must not repeat events).

use crate::state::{Reported, Shared};
use cutover_proto::v1::{AdminState, NodeResult, ResultPhase};
use jiff::Timestamp;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

/// `reportingController` of our events.
pub const REPORTER: &str = "cutover-signal-svc";

/// A Node event to record.
#[derive(Debug, Clone)]
pub struct NodeEvent {
    pub node: String,
    pub uid: String,
    pub warning: bool,
    pub reason: &'static str,
    pub note: String,
}

fn secs_since(t: Option<&prost_types::Timestamp>, now: Timestamp) -> Option<f64> {
    let t = t?;
    let then = Timestamp::new(t.seconds, t.nanos).ok()?;
    Some(now.duration_since(then).as_secs_f64())
}

/// Handles one result; returns the event to record, if any.
pub fn handle(shared: &Shared, r: &NodeResult, now: Timestamp) -> Option<NodeEvent> {
    let node = r.node.as_ref()?;
    let version = r.version?;
    let current = {
        let core = shared.core.lock();
        core.dispatch.current(&node.uid).cloned()
    }?;
    if current.version != Some(version) || current.desired != r.desired {
        return None;
    }
    let phase = ResultPhase::try_from(r.phase).ok()?;
    let mut reported = shared.reported.lock();
    let rep = reported.entry(node.uid.clone()).or_default();
    if rep.version != Some(version) {
        *rep = Reported {
            version: Some(version),
            ..Reported::default()
        };
    }
    let down = r.desired == AdminState::Down as i32;
    match phase {
        ResultPhase::Accepted if !rep.accepted => {
            rep.accepted = true;
            shared.metrics.result("accepted");
            if let Some(s) = secs_since(current.observed_at.as_ref(), now) {
                shared.metrics.signal_to_accepted.observe(s);
            }
            None
        }
        ResultPhase::Effective if !rep.effective => {
            rep.effective = true;
            shared.metrics.result("effective");
            if let Some(s) = secs_since(current.observed_at.as_ref(), now) {
                shared.metrics.signal_to_effective.observe(s);
            }
            if down && let Some(left) = secs_since(current.deadline.as_ref(), now) {
                shared.metrics.notice_window_remaining.observe(-left);
            }
            let pools: Vec<String> = r
                .entries
                .iter()
                .map(|e| format!("{}/{}", e.load_balancer, e.pool))
                .collect();
            let state = if down { "Down" } else { "None" };
            Some(NodeEvent {
                node: node.name.clone(),
                uid: node.uid.clone(),
                warning: false,
                reason: if down {
                    "LoadBalancerAdminStateDown"
                } else {
                    "LoadBalancerAdminStateNone"
                },
                note: truncate(format!(
                    "Load balancer admin state {state} is effective on {} backend entries ({})",
                    r.entries.len(),
                    pools.join(", ")
                )),
            })
        }
        ResultPhase::Failed if !rep.failed => {
            rep.failed = true;
            shared.metrics.result("failed");
            let retry = if r.will_retry {
                "; the actuator retries"
            } else {
                ""
            };
            Some(NodeEvent {
                node: node.name.clone(),
                uid: node.uid.clone(),
                warning: true,
                reason: "LoadBalancerAdminStateUpdateFailed",
                note: truncate(format!(
                    "Setting the load balancer admin state failed: {}{retry}",
                    r.reason
                )),
            })
        }
        _ => None,
    }
}

fn truncate(mut s: String) -> String {
    if s.len() > 1000 {
        let mut cut = 1000;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Records queued Node events (events.k8s.io/v1) until shutdown.
pub async fn recorder(
    client: kube::Client,
    identity: String,
    mut rx: mpsc::Receiver<NodeEvent>,
    shutdown: CancellationToken,
) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: REPORTER.into(),
            instance: Some(identity),
        },
    );
    loop {
        let ev = tokio::select! {
            _ = shutdown.cancelled() => return,
            ev = rx.recv() => match ev { Some(ev) => ev, None => return },
        };
        let reference = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(ev.node.clone()),
            uid: Some(ev.uid.clone()),
            ..Default::default()
        };
        let event = Event {
            type_: if ev.warning {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: ev.reason.into(),
            note: Some(ev.note.clone()),
            action: "SetLoadBalancerAdminState".into(),
            secondary: None,
        };
        if let Err(e) = recorder.publish(&event, &reference).await {
            tracing::warn!(node = %ev.node, reason = ev.reason, error = %e, "recording a node event failed");
        }
    }
}

/// Convenience for the stream reader.
pub fn dispatch_result(shared: &Arc<Shared>, events: &mpsc::Sender<NodeEvent>, r: &NodeResult) {
    if let Some(ev) = handle(shared, r, Timestamp::now())
        && events.try_send(ev).is_err()
    {
        tracing::warn!("node event queue full; event dropped");
    }
}
