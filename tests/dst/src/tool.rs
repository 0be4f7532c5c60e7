//! A drain script's view: the tool host polls `GetNodeAdminState(fresh)` on the actuators, as
//! `cutoverctl wait` does, and every answer is recorded with when it was asked and answered.
//! The judge holds each answer to ARM (issue 26: "every RPC or CLI answer that says a node
//! is Down or None" says so only while ARM shows it with its operation complete).
//!
//! It asks about the node the workload touched last (most of the time: that is where a
//! script waits), else any node; one question a second, to a replica in turn.

use crate::hosts::{GRPC_PORT, Setup, now_ms};
use crate::net;
use crate::schedule::{ACTUATORS, Ms};
use cutover_e2e::chaos::schedule::Rng;
use cutover_e2e::judge::{EntryKey, State};
use std::sync::Arc;
use std::time::Duration;

/// One answer (the rule is the soak's too).
pub use cutover_e2e::judge::tool::ToolRead;

/// How often the tool asks.
const EVERY: Duration = Duration::from_secs(1);

pub async fn tool(setup: Arc<Setup>) -> turmoil::Result {
    let mut rng = Rng::new(setup.plan.seed ^ 0x0070_0100_cafe_f00d);
    let nodes: Vec<String> = setup.cluster.nodes.iter().map(|n| n.name.clone()).collect();
    let end = setup.plan.shape.end_ms();
    let mut turn = 0usize;
    tokio::time::sleep(Duration::from_millis(setup.plan.shape.warmup_ms)).await;
    while now_ms() + EVERY.as_millis() as Ms <= end {
        tokio::time::sleep(EVERY).await;
        let last = setup.slots.intents.lock().last().map(|(_, n, _)| *n);
        let node = match last {
            Some(n) if rng.chance(0.7) => n,
            _ => rng.below(nodes.len()),
        };
        let host = ACTUATORS[turn % ACTUATORS.len()];
        turn += 1;
        let sent = now_ms();
        // A refused or timed-out question says nothing.
        if let Ok(entries) = ask(host, &nodes[node]).await {
            setup.slots.tool_reads.lock().push(ToolRead {
                sent,
                answered: now_ms(),
                node,
                host: host.to_owned(),
                entries,
            });
        }
    }
    Ok(())
}

async fn ask(host: &str, node: &str) -> anyhow::Result<Vec<(EntryKey, State)>> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{host}:{GRPC_PORT}"))?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .connect_with_connector(net::dialer())
        .await?;
    cutover_e2e::chaos::tool::ask(channel, node).await
}
