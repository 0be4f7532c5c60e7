//! signal-svc: turns Kubernetes node signals into desired Azure Load Balancer admin states.
//!
//! Data flow, one stage folder each:
//! ```text
//! kube watches (Nodes, PreemptScheduled Events)          [k8s::watch]
//!     -> NodeIndex (pure: desired state per node UID)     [core::index]
//!     -> Dispatcher (pure: versions, every node asserted,  [core::dispatch]
//!        per-endpoint dirty sets)
//!     -> one gRPC stream per actuator endpoint (leader)   [stream]
//!     <- NodeResults -> Node events + metrics             [stream::results, writers::events]
//! desired state + fleet-wide phase -> Node condition      [writers::gate, core::gate]
//!    LoadBalancerAdminStateDown (leader, nodes/status)
//! NodeIndex taint requests -> TaintWriter (leader)        [writers::taint]
//! actuator HoldRequests -> Node annotation (leader)      [writers::hold]
//! fleet-wide NodeStatus -> every actuator stream         [stream::fleet]
//! Lease (RV-checked PUT) -> term and epoch               [leadership, core::lease,
//!                                                          core::term, shared::gating]
//! ```
//! Layers, bottom up; a module imports only from its own layer or below:
//! [`core`] (pure decisions, no I/O: the crate `signal_core` in `signal-svc/core/`, which Cargo
//! keeps from importing this crate) < [`config`], [`metrics`] < [`shared`] (state every task
//! shares, behind methods) < [`writers`] (the leader's writes to Kubernetes) < [`k8s`],
//! [`leadership`] < [`stream`] < [`runtime`] (the table of tasks). The admin port, the drain's
//! signals and the backoff are `cutover_runtime`'s.

pub mod config;
pub mod config_error;
pub use signal_core as core;
pub mod k8s;
pub mod leadership;
pub mod metrics;
pub mod runtime;
pub mod shared;
pub mod stream;
pub mod tls_reload;
pub mod writers;

#[cfg(test)]
mod layers_tests;
