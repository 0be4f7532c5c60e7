//! Deterministic simulation testing of the whole services (issue 26, item 2).
//!
//! signal-svc (one or two replicas), actuator-svc (three), kube-sim and arm-sim run in one
//! process on turmoil's simulated network and clock. Only the transports and the clock are
//! swapped: each service starts through its own library entry point with a
//! `cutover_runtime::dial` dialer and listener over turmoil's TCP, and every timer is tokio's,
//! which turmoil drives. No product logic is re-implemented here.
//!
//! ```text
//! schedule (seed → plan: topology, workload, faults)
//!   → run (turmoil world; faults applied between steps)
//!     → hosts (each host's software: the simulators, the services, the workload)
//!     → tool (a drain script asking the actuators what ARM shows)
//!     → observe (the simulators' logs, stamped with simulated time after every step)
//!   → judge (the chaos soak's rules + one writer per LB + only the leader writes Nodes)
//! ```

pub mod hosts;
pub mod judge;
pub mod net;
pub mod observe;
pub mod report;
pub mod run;
pub mod schedule;
pub mod tool;
