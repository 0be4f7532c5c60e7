//! Node events (events.k8s.io/v1) about admin states: decided from actuator results
//! ([`crate::stream::results`]), recorded here by one task.

use kube::runtime::events::{Event, EventType, Recorder, Reporter};
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
