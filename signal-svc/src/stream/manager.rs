//! The stream manager: one task per actuator endpoint, which streams while this process
//! leads, reconnects with backoff on failure and stops on shutdown or when the endpoint goes.

use super::{Ended, StreamConfig, StreamError, accepted_epoch, connection};
use crate::shared::Shared;
use crate::writers::events::NodeEvent;
use cutover_runtime::backoff::Backoff;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The task of one endpoint: stream while leading, reconnect on failure, stop on shutdown.
async fn endpoint_task(
    endpoint: String,
    cfg: StreamConfig,
    shared: Arc<Shared>,
    events: mpsc::Sender<NodeEvent>,
    shutdown: CancellationToken,
) {
    let mut leader = shared.leader_rx();
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
    loop {
        let epoch = loop {
            if shutdown.is_cancelled() {
                return;
            }
            if let Some(e) = *leader.borrow_and_update() {
                break e;
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                r = leader.changed() => if r.is_err() { return },
            }
        };
        // Never stream a partial node list.
        tokio::select! {
            _ = shutdown.cancelled() => return,
            () = shared.nodes_synced() => {}
        }
        let result = {
            let conn = connection::run(
                &endpoint,
                epoch,
                &cfg,
                &shared,
                &events,
                &mut backoff,
                &shutdown,
            );
            tokio::select! {
                // A lost or changed leadership stops the stream at once (dropping it).
                _ = leadership_changed(&mut leader, epoch), if !shutdown.is_cancelled() => None,
                r = conn => Some(r),
            }
        };
        shared.set_stream_ready(&endpoint, false);
        match result {
            None => tracing::info!(%endpoint, "leadership changed; stream stopped"),
            Some(Ok(Ended::Shutdown)) => return,
            Some(Err(e)) => {
                if let StreamError::Status { status, .. } = &e
                    && let Some(accepted) = accepted_epoch(status)
                {
                    shared.report_accepted_epoch(accepted);
                }
                shared.metrics().stream_reconnects.inc();
                let delay = backoff.next_delay(rand::random::<f64>());
                tracing::warn!(error = %e, retry_in = ?delay, "actuator stream failed");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
            }
        }
    }
}

async fn leadership_changed(rx: &mut watch::Receiver<Option<u64>>, epoch: u64) {
    loop {
        if *rx.borrow_and_update() != Some(epoch) {
            return;
        }
        if rx.changed().await.is_err() {
            // Sender gone: the instance is shutting down; let shutdown handling win.
            std::future::pending::<()>().await;
        }
    }
}

/// Follows the endpoint set: starts/stops endpoint tasks (every endpoint gets every node).
pub async fn run(
    cfg: StreamConfig,
    shared: Arc<Shared>,
    mut endpoints: watch::Receiver<Vec<String>>,
    events: mpsc::Sender<NodeEvent>,
    shutdown: CancellationToken,
) {
    let mut tasks: HashMap<String, (JoinHandle<()>, CancellationToken)> = HashMap::new();
    loop {
        let eps = endpoints.borrow_and_update().clone();
        if shared.dry_run() {
            tracing::info!(endpoints = ?eps, "dry-run: not connecting to actuators");
        } else {
            tasks.retain(|ep, (_, stop)| {
                let keep = eps.contains(ep);
                if !keep {
                    // Removed endpoint: stop at once.
                    stop.cancel();
                    shared.set_stream_ready(ep, false);
                }
                keep
            });
            for ep in &eps {
                // Register the wake-up handle before the outbox so no wake-up is lost.
                shared.notify_for(ep);
                if !tasks.contains_key(ep) {
                    let stop = shutdown.child_token();
                    let h = tokio::spawn(endpoint_task(
                        ep.clone(),
                        cfg.clone(),
                        shared.clone(),
                        events.clone(),
                        stop.clone(),
                    ));
                    tasks.insert(ep.clone(), (h, stop));
                }
            }
        }
        shared.set_endpoints(eps);
        tokio::select! {
            _ = shutdown.cancelled() => break,
            r = endpoints.changed() => if r.is_err() {
                // Discovery ended (it only does at shutdown).
                shutdown.cancelled().await;
                break;
            },
        }
    }
    for (_, (h, _)) in tasks {
        let _ = h.await;
    }
}
