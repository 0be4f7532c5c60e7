//! actuator-svc: sets the admin state of Azure Load Balancer backend entries through ARM.
//!
//! Data flow:
//! ```text
//! signal-svc ──gRPC stream──▶ grpc::service ──offer──▶ state::Store ──notify──▶ writer (one per LB)
//! tools ─────unary RPCs────▶      │                        ▲   results          │ plan.rs (pure) on cache.rs
//!                                 ◀── NodeResults ─────────┘                    ▼
//!                                                               arm::client (budget, retry) ──▶ ARM
//! ```
//! - `config`: `azure.json` (cloud-provider-azure format) and flags; `credentials`: azure_identity 1.x.
//! - `index` (pure): which entries of which pools belong to a node; `plan` (pure): the
//!   coalesced entry changes of one write round.
//! - `arm`: thin ARM client, shared read/write budget (`budget`, pure), retry policy.
//! - `holds`: tool holds relayed to signal-svc (stored on the Node, fleet-wide and durable).
//! - `writer`: one task per load balancer; `state`: desired states, per-LB progress, results.
//! - `grpc`: the `cutover.v1.Actuator` service with mTLS allow-lists; `admin`: `/live`,
//!   `/ready`, `/metrics`; `runtime`: wiring and drain.
//! - `preflight`: `--preflight`, a read-only report of what cutover would manage and what
//!   blocks it (reads through the same client; classification is pure).

pub mod admin;
pub mod arm;
pub mod cache;
pub mod config;
pub mod credentials;
pub mod grpc;
pub mod guard;
pub mod holds;
pub mod index;
pub mod metrics;
pub mod ownership;
pub mod plan;
pub mod preflight;
pub mod runtime;
pub mod state;
pub mod tls_reload;
pub mod tools;
pub mod uplink;
pub mod writer;
