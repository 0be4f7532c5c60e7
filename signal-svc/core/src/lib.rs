//! The pure core of signal-svc: no I/O, no clocks, no tasks. Time is always an argument.
//! A crate of its own (signal-core), so Cargo keeps it from importing anything of signal-svc,
//! which re-exports it as its `core` module.
//!
//! - [`taints`]: which taints are triggers.
//! - [`notice`]: Spot eviction notices from `PreemptScheduled` events and node conditions.
//! - [`node`]: the parts of a Kubernetes Node we use, extracted and validated.
//! - [`event`]: the parts of a core/v1 Event we use, read leniently from JSON.
//! - [`hold`]: durable tool holds stored as a Node annotation.
//! - [`index`]: watch events in, desired-state changes and taint requests out.
//! - [`route`]: rendezvous hashing of load balancers onto actuator endpoints.
//! - [`dispatch`]: versions, every node's asserted state and the per-endpoint outboxes
//!   (latest state + dirty set).
//! - [`assign`]: which live actuator stream writes which load balancer, fenced handovers.
//! - [`coverage`]: a node version is accepted / effective once its results cover every
//!   managed load balancer.
//! - [`gate`]: the drain gate, the Node condition `LoadBalancerAdminStateDown`.
//! - [`lease`]: the leader-election decision for one observed Lease, epochs that never go back.
//! - [`term`]: a leader's term: renew deadline, suspension, loss (client-go semantics).

/// The field manager of every write signal-svc makes to a Node (taints, hold annotations).
pub const FIELD_MANAGER: &str = "cutover-signal-svc";

pub mod assign;
pub mod coverage;
pub mod dispatch;
pub mod event;
pub mod gate;
pub mod hold;
pub mod index;
pub mod lease;
pub mod node;
pub mod notice;
pub mod route;
pub mod taints;
pub mod term;
