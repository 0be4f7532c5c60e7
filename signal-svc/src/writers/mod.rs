//! The leader's writes to Kubernetes, each one task fed by the stages above it.
//!
//! - [`taint`]: the Spot-eviction draining taint.
//! - [`gate`]: the drain-gate Node condition `LoadBalancerAdminStateDown`.
//! - [`hold`]: tool holds stored as a Node annotation.
//! - [`events`]: Node events about admin states (repaired, effective, failed).

pub mod events;
pub mod gate;
pub mod hold;
pub mod taint;
