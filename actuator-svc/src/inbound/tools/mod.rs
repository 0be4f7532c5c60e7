//! Tool answers and the protection of the ARM budget from tool traffic (the unary tool RPCs):
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
pub mod limiter;
pub mod unknown;

pub use limiter::{ToolLimiter, caller_identity};
pub use unknown::{Lookup, UnknownNodes};
