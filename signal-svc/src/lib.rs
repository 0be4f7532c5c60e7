//! signal-svc: turns Kubernetes node signals into desired Azure Load Balancer admin states.
//!
//! Data flow:
//! ```text
//! kube watches (Nodes, PreemptScheduled Events)          [watch]
//!     -> NodeIndex (pure: desired state per node UID)     [domain::index]
//!     -> Dispatcher (pure: versions, every node asserted,  [domain::dispatch]
//!        per-endpoint dirty sets)
//!     -> one gRPC stream per actuator endpoint (leader)   [stream]
//!     <- NodeResults -> Node events + metrics             [results]
//! desired state + fleet-wide phase -> Node condition      [gate, domain::gate]
//!    LoadBalancerAdminStateDown (leader, nodes/status)
//! NodeIndex taint requests -> TaintWriter (leader)        [taint]
//! actuator HoldRequests -> Node annotation (leader)      [hold]
//! fleet-wide NodeStatus -> every actuator stream         [fleet]
//! Lease (RV-checked PUT) -> term and epoch               [leader, lease_lock,
//!                                                          leadership, domain::term]
//! ```
//! Decisions live in [`domain`] (no I/O); everything else is a thin adapter wired in
//! [`runtime::run`].

pub mod admin;
pub mod config;
pub mod config_error;
pub mod discovery;
pub mod domain;
pub mod fleet;
pub mod gate;
pub mod hold;
pub mod leader;
pub mod leadership;
pub mod lease_lock;
pub mod metrics;
pub mod results;
pub mod runtime;
pub mod slim_node;
pub mod state;
pub mod stream;
pub mod taint;
pub mod tls_reload;
pub mod watch;
