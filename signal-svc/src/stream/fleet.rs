//! Fleet-wide node status for every actuator stream: the phase the union of all replicas'
//! results has reached for a node's version ([`crate::core::coverage`]). Any actuator
//! replica can then answer whether a node is effective everywhere, whoever writes each load
//! balancer, and a tool waiting on one replica sees another replica's writes complete.

use crate::shared::Shared;
use cutover_proto::v1::{SignalMessage, signal_message::Kind};
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc};
use tokio::task::JoinHandle;

/// Sends what the stream missed (every asserted node's reached phase), then every phase as it
/// is reached, until the stream closes. Holds only a weak sender, so it never keeps a stream
/// open that its owner closed.
pub fn forward(shared: &Arc<Shared>, tx: mpsc::WeakSender<SignalMessage>) -> JoinHandle<()> {
    // Subscribe before reading the catch-up, so nothing falls between the two.
    let mut rx = shared.subscribe_statuses();
    let shared = shared.clone();
    tokio::spawn(async move {
        let mut backlog = shared.fleet_statuses();
        loop {
            for s in backlog.drain(..) {
                let Some(tx) = tx.upgrade() else { return };
                if tx
                    .send(SignalMessage {
                        kind: Some(Kind::NodeStatus(s)),
                    })
                    .await
                    .is_err()
                {
                    return;
                }
            }
            match rx.recv().await {
                Ok(s) => backlog.push(s),
                // Level-triggered: a lagging stream gets the whole current picture again.
                Err(broadcast::error::RecvError::Lagged(_)) => backlog = shared.fleet_statuses(),
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    })
}
