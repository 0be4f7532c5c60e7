//! Actuator endpoint discovery: a static list, or a headless Service name re-resolved
//! periodically (every address is one actuator replica).

use crate::config::Discovery;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Publishes the sorted endpoint set (`host:port`) whenever it changes.
pub async fn run(
    discovery: Discovery,
    every: Duration,
    tx: watch::Sender<Vec<String>>,
    shutdown: CancellationToken,
) {
    match discovery {
        Discovery::Static(mut eps) => {
            eps.sort();
            eps.dedup();
            tx.send_replace(eps);
        }
        Discovery::Service { host, port } => loop {
            match tokio::net::lookup_host((host.as_str(), port)).await {
                Ok(addrs) => {
                    let mut eps: Vec<String> = addrs.map(|a| a.to_string()).collect();
                    eps.sort();
                    eps.dedup();
                    if eps.is_empty() {
                        tracing::warn!(%host, "actuator service resolved to no address; keeping the previous set");
                    } else if *tx.borrow() != eps {
                        tracing::info!(%host, endpoints = ?eps, "actuator endpoints changed");
                        tx.send_replace(eps);
                    }
                }
                // Keep the last known set: a DNS hiccup must not move every node.
                Err(e) => {
                    tracing::warn!(%host, error = %e, "resolving the actuator service failed")
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(every) => {}
            }
        },
    }
}
