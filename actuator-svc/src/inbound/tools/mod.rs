//! The unary tool RPCs and the protection of the ARM budget from tool traffic:
//! - `set`: `SetNodeAdminState` (a durable hold up the stream, or memory-only when the
//!   actuator is used alone);
//! - `read`: `GetNodeAdminState`, `ListHeldEntries`, `WatchResults`;
//! - `fresh`: reads of ARM for tools, within their share of the read budget, and the answer
//!   for nodes that resolve to nothing;
//! - `answer`: an entry is answered in a state only once ARM shows it done (not while an
//!   operation runs on its load balancer);
//! - `limiter`: a token bucket per client identity (RESOURCE_EXHAUSTED beyond it);
//! - `unknown`: the negative cache for nodes that resolve to nothing (one pool refresh per
//!   interval at most, whatever the call rate);
//! - tool-initiated ARM reads go through `arm::budget::ToolShare`, so the cutover stream keeps
//!   priority for the shared read budget. Tool writes need nothing extra: they only reach ARM
//!   inside the per-LB writers' rounds, coalesced with the stream's changes, so a tool never
//!   adds a write ahead of the stream, and the rate limit bounds how often it can wake them.

pub mod answer;
mod fresh;
pub mod limiter;
pub mod read;
pub mod set;
pub mod unknown;

pub use limiter::{ToolLimiter, caller_identity};
pub use unknown::{Lookup, UnknownNodes};

use super::Inbound;
use tonic::Status;

impl Inbound {
    /// The per-identity tool rate limit for a call of `rpc` by `identity`.
    pub fn limit(&self, identity: &str, rpc: &str) -> Result<(), Status> {
        self.limiter
            .check(identity, rpc)
            .inspect_err(|_| self.metrics.tool_limited(rpc))
    }
}
