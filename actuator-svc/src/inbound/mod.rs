//! What comes in over gRPC, below the service surface (`grpc`: allow-lists, the tonic
//! plumbing, `Response`s). One [`Inbound`] context serves both kinds of callers:
//! - `stream` (+ `session`, its pure protocol): the desired-state stream from signal-svc,
//!   Hello -> Snapshot* -> SnapshotEnd -> deltas, assignments and forgets;
//! - `tools`: the unary tool RPCs (set, read) and the protection of the ARM budget from them;
//! - `holds`: durable tool holds relayed to signal-svc (stored on the Node);
//! - `validate`: every request and stream message checked whole (INVALID_ARGUMENT naming the
//!   field) into typed values before anything touches state.

pub mod holds;
pub mod session;
pub mod stream;
pub mod tools;
pub mod validate;

use crate::arm::ArmClient;
use crate::arm::budget::ToolShare;
use crate::metrics::Metrics;
use crate::plan::cache::SharedCache;
use crate::plan::guard::Guard;
use crate::state::Store;
use parking_lot::Mutex;
use std::sync::Arc;
use tools::{ToolLimiter, UnknownNodes};

/// What the stream and the tool RPCs work on. Cheap to clone.
#[derive(Clone)]
pub struct Inbound {
    pub store: Arc<Store>,
    pub cache: Arc<SharedCache>,
    pub arm: ArmClient,
    /// This replica's name in `HelloAck`.
    pub identity: String,
    pub cluster_name: String,
    /// Turns true on drain: open streams end so the server can stop.
    pub shutdown: tokio::sync::watch::Receiver<bool>,
    /// The blast-radius guard (what it refuses shows in `GetNodeAdminState` notes).
    pub guard: Guard,
    /// Tool traffic protection (`tools`).
    pub limiter: Arc<ToolLimiter>,
    pub unknown: Arc<UnknownNodes>,
    pub tool_reads: Arc<Mutex<ToolShare>>,
    pub metrics: Arc<Metrics>,
}
