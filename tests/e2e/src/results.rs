//! Follows every actuator's `WatchResults` stream as a tool client (mTLS with the tool
//! certificate), so scenarios can show when each node's change was accepted and effective as
//! the actuator reports it. Reconnects while actuators restart.

use crate::certs::Pki;
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{AdminState, ResultPhase, WatchResultsRequest};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::Duration;
use tokio_stream::StreamExt;
use tonic::transport::Endpoint;

/// One result as received.
#[derive(Debug, Clone)]
pub struct Seen {
    pub node: String,
    pub desired: AdminState,
    pub phase: ResultPhase,
    pub reason: String,
    pub will_retry: bool,
    /// A fleet-wide summary (`NodeResult.fleet`): its phase, without the writing replica's
    /// reason or retry flag.
    pub fleet: bool,
    /// When the actuator reached the phase (its clock; same machine).
    pub at: jiff::Timestamp,
}

/// Everything received so far, from all actuators.
#[derive(Debug, Clone, Default)]
pub struct Results {
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Results {
    /// Starts one follower task per actuator gRPC port.
    pub fn follow(pki: &Pki, ports: &[u16]) -> anyhow::Result<Results> {
        let results = Results::default();
        let tls = pki.tool_tls()?;
        for port in ports {
            let endpoint = Endpoint::from_shared(format!("https://127.0.0.1:{port}"))?
                .tls_config(tls.clone())?
                .connect_timeout(Duration::from_secs(2));
            let seen = results.seen.clone();
            tokio::spawn(async move {
                loop {
                    if let Ok(channel) = endpoint.connect().await {
                        let mut client = ActuatorClient::new(channel);
                        if let Ok(stream) =
                            client.watch_results(WatchResultsRequest::default()).await
                        {
                            let mut stream = stream.into_inner();
                            while let Some(Ok(r)) = stream.next().await {
                                let at = r
                                    .at
                                    .and_then(|t| jiff::Timestamp::new(t.seconds, t.nanos).ok())
                                    .unwrap_or_else(jiff::Timestamp::now);
                                seen.lock().push(Seen {
                                    node: r.node.map(|n| n.name).unwrap_or_default(),
                                    desired: AdminState::try_from(r.desired).unwrap_or_default(),
                                    phase: ResultPhase::try_from(r.phase).unwrap_or_default(),
                                    reason: r.reason,
                                    will_retry: r.will_retry,
                                    fleet: r.fleet,
                                    at,
                                });
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
            });
        }
        Ok(results)
    }

    /// The first time after `since` that `node` reached `phase` for `desired`.
    pub fn first(
        &self,
        node: &str,
        desired: AdminState,
        phase: ResultPhase,
        since: jiff::Timestamp,
    ) -> Option<jiff::Timestamp> {
        self.seen
            .lock()
            .iter()
            .filter(|s| s.node == node && s.desired == desired && s.phase == phase && s.at >= since)
            .map(|s| s.at)
            .min()
    }

    /// Final failures (the actuator gave up) reported after `since`, as text.
    pub fn failures(&self, since: jiff::Timestamp) -> Vec<String> {
        self.seen
            .lock()
            .iter()
            .filter(|s| s.phase == ResultPhase::Failed && !s.will_retry && s.at >= since)
            // The writing replica's own result says whether it retries (a guard refusal
            // does); the fleet summary of the same failure cannot.
            .filter(|s| !s.fleet)
            .map(|s| format!("{}: {}", s.node, s.reason))
            .collect()
    }
}
