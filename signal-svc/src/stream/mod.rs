//! The desired-state streams to actuator-svc: one task per endpoint, on the leader only.
//!
//! A stream opens only once the node list has synced (a partial list would assert a partial
//! desired state). Each (re)connect sends `Hello`, the full snapshot of every node in
//! chunks, `SnapshotEnd`, then deltas drained from the endpoint's dirty set whenever it is
//! woken. A periodic resync re-sends every node's state as deltas *on the same stream*, so
//! the replica keeps its load balancers (ending the stream would drop its assignment).
//! While the leader is suspended (renew deadline passed) the stream stays open and sends
//! nothing. Failures reconnect with capped, jittered backoff; a hello refused because the
//! actuator accepted a higher epoch reports that epoch, so the leader raises its own.
//!
//! - [`manager`]: one task per discovered endpoint, (re)connecting while leading.
//! - `connection`: one stream from connect to its end, as named steps (open, snapshot,
//!   acknowledgement, live, serve).
//! - `reader`: the task reading what the actuator sends up.
//! - [`results`]: actuator results into metrics, fleet-wide phases and Node events.
//! - [`fleet`]: fleet-wide phases forwarded down every stream.
//! - [`discovery`]: the actuator endpoint set.

mod connection;
pub mod discovery;
pub mod fleet;
pub mod manager;
mod reader;
pub mod results;

use crate::config::TlsMaterial;
use crate::writers::hold::HoldWriter;
use cutover_proto::v1::SignalMessage;
use cutover_proto::v1::signal_message::Kind;
use cutover_runtime::dial::Dialer;
use std::time::Duration;
use tokio::task::JoinHandle;

/// Nodes per `Snapshot` message.
pub const SNAPSHOT_CHUNK: usize = 500;
const DELTA_BATCH: usize = 256;

/// Stream settings.
#[derive(Clone, Debug)]
pub struct StreamConfig {
    pub cluster_name: String,
    pub identity: String,
    pub tls: Option<TlsMaterial>,
    /// TLS name when `tls.server_name` is unset and the endpoint is an address.
    pub default_server_name: Option<String>,
    pub resync_interval: Duration,
    /// HTTP/2 keepalive interval and ack timeout.
    pub keepalive: Duration,
    /// Writes the tool holds actuators forward (absent in tests that do not talk to
    /// Kubernetes).
    pub holds: Option<HoldWriter>,
    /// Opens the streams' connections (a simulated network); None: tonic's TCP connector.
    /// TLS, when configured, runs over what it opens.
    pub dialer: Option<Dialer>,
}

/// How long the actuator has to acknowledge the `Hello`.
const ACK_TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("endpoint {endpoint}: {source}")]
    Transport {
        endpoint: String,
        source: tonic::transport::Error,
    },
    #[error("endpoint {endpoint}: {status}")]
    Status {
        endpoint: String,
        status: tonic::Status,
    },
    #[error("endpoint {endpoint}: stream closed by the actuator")]
    Closed { endpoint: String },
    #[error("endpoint {endpoint}: no HelloAck within {ACK_TIMEOUT:?}")]
    NoAck { endpoint: String },
}

pub(crate) enum Ended {
    Shutdown,
}

/// Trailing metadata key in which an actuator refusing a stale epoch names the epoch it has
/// accepted (the message says it too, for older actuators).
pub const ACCEPTED_EPOCH_KEY: &str = "cutover-accepted-epoch";

/// The epoch an actuator says it accepted, from a FAILED_PRECONDITION refusal of our hello
/// or of a superseded stream.
pub fn accepted_epoch(status: &tonic::Status) -> Option<u64> {
    if status.code() != tonic::Code::FailedPrecondition {
        return None;
    }
    if let Some(v) = status.metadata().get(ACCEPTED_EPOCH_KEY)
        && let Some(n) = v.to_str().ok().and_then(|v| v.parse().ok())
    {
        return Some(n);
    }
    let m = status.message();
    let tail = m
        .strip_prefix("hello.leader_epoch: ")
        .and_then(|r| r.split_once("accepted leader epoch ").map(|(_, t)| t))
        .or_else(|| {
            m.strip_prefix("leader epoch ")
                .and_then(|r| r.split_once("was superseded by ").map(|(_, t)| t))
        })?;
    tail.trim().parse().ok()
}

fn msg(kind: Kind) -> SignalMessage {
    SignalMessage { kind: Some(kind) }
}

/// Aborts a helper task (the reader, the fleet-status forwarder) however its stream ends.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
