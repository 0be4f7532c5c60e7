//! A drain script's view of the drain gate: every [`EVERY`] it asks one actuator (each in
//! turn) `GetNodeAdminState(fresh)` about a node, as `cutoverctl wait` polls, mostly the node
//! that changed last, and records each answer for the tool-answers rule (`judge::tool`):
//! every entry said Down or None must have held in ARM between the question and the answer.

use super::ownership::since;
use super::schedule::Rng;
use super::workload::Desired;
use crate::judge::tool::ToolRead;
use crate::judge::{EntryKey, State};
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{GetNodeAdminStateRequest, NodeRef};
use parking_lot::Mutex;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

/// How often the tool asks (`cutoverctl wait`'s poll).
const EVERY: Duration = Duration::from_secs(1);

/// The tool host: which actuators to ask (name, gRPC port) and about which nodes.
pub struct Tool {
    pub actuators: Vec<(String, u16)>,
    pub nodes: Vec<String>,
    pub tls: ClientTlsConfig,
    pub desired: Desired,
    pub origin: jiff::Timestamp,
    pub reads: Arc<Mutex<Vec<ToolRead>>>,
}

impl Tool {
    /// Asks until `until`; a refused or timed-out question says nothing and is not recorded.
    pub async fn run(self, until: Instant, seed: u64) {
        let mut rng = Rng::new(seed ^ 0x0070_0100_cafe_f00d);
        let mut turn = 0usize;
        while Instant::now() + EVERY <= until {
            tokio::time::sleep(EVERY).await;
            let node = match self.desired.last_changed() {
                Some(n) if rng.chance(0.7) => self.nodes.iter().position(|x| *x == n),
                _ => None,
            }
            .unwrap_or_else(|| rng.below(self.nodes.len()));
            let (host, port) = &self.actuators[turn % self.actuators.len()];
            turn += 1;
            let sent = since(self.origin, jiff::Timestamp::now());
            if let Ok(entries) = self.ask(*port, &self.nodes[node]).await {
                self.reads.lock().push(ToolRead {
                    sent,
                    answered: since(self.origin, jiff::Timestamp::now()),
                    node,
                    host: host.clone(),
                    entries,
                });
            }
        }
    }

    async fn ask(&self, port: u16, node: &str) -> anyhow::Result<Vec<(EntryKey, State)>> {
        let channel = tool_channel(port, &self.tls, Duration::from_secs(5)).await?;
        ask(channel, node).await
    }
}

/// A channel to the actuator on `port` with the tool's certificate, each call bounded by
/// `timeout` (the workload's holds and this tool's questions).
pub async fn tool_channel(
    port: u16,
    tls: &ClientTlsConfig,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    Ok(Endpoint::from_shared(format!("https://127.0.0.1:{port}"))?
        .tls_config(tls.clone())?
        .connect_timeout(Duration::from_secs(2))
        .timeout(timeout)
        .connect()
        .await?)
}

/// One `GetNodeAdminState(fresh)` question about `node` on `channel`, as `cutoverctl wait`
/// asks it: the entries the answer reports Down or None (the whole-service simulation's tool
/// asks the same way).
pub async fn ask(channel: Channel, node: &str) -> anyhow::Result<Vec<(EntryKey, State)>> {
    let answer = ActuatorClient::new(channel)
        .get_node_admin_state(GetNodeAdminStateRequest {
            node: Some(NodeRef {
                name: node.to_owned(),
                ..NodeRef::default()
            }),
            fresh: true,
        })
        .await?
        .into_inner();
    Ok(crate::judge::tool::answered(answer))
}
