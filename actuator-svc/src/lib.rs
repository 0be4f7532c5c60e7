//! actuator-svc: sets the admin state of Azure Load Balancer backend entries through ARM.
//!
//! Data flow, top to bottom as the tree reads:
//! ```text
//! signal-svc ─gRPC stream─▶ grpc ─▶ inbound::stream ─offer─▶ state::Store ─notify─▶ writer (one per LB)
//! tools ──unary RPCs─────▶   │  ─▶ inbound::tools           ▲   results           │ plan (pure) on plan::cache
//!                            ◀──── NodeResults ─────────────┘                     ▼
//!                                                                arm::client (budget, retry) ──▶ ARM
//!                                                                lb: the LB document as bytes (pure)
//! ```
//! Layers, each importing only from the ones below it (no `crate::` import runs back up):
//! - `lb` (pure; the crate `actuator_lb` in `actuator-svc/lb/`, which Cargo keeps from importing
//!   this crate): scanning, reading and splicing LB documents,
//!   ARM IDs, the pool index (which entries of which pools belong to a node); `identity`:
//!   certificate identities (SAN URIs and DNS names only, matched exactly; never the CN); `config::azure_json`: `azure.json` in cloud-provider-azure's format.
//! - `metrics`: the prometheus registry.
//! - `arm`: thin ARM client, shared read/write budget (`budget`, pure), retry policy, and the
//!   `TokenSource` trait it takes its bearer tokens from.
//! - `credentials`: azure_identity 1.x (implements `arm::TokenSource`); `plan` (pure): the
//!   coalesced entry changes of one write round, with `cache` (pool indexes) and `guard`
//!   (blast radius); `state`: desired states, per-LB progress, results, `ownership`, `uplink`.
//! - `writer`: one task per load balancer; `inbound`: the desired-state stream (`stream`, the
//!   loop, over `session`, its pure protocol), the tool RPCs (`tools`), durable holds relayed
//!   to signal-svc (`holds`), request validation (`validate`).
//! - `grpc`: the `cutover.v1.Actuator` service, mapping tonic to `inbound` behind mTLS
//!   allow-lists (plaintext only with `--insecure-plaintext`).
//! - `config::cli` (flags), `preflight` (`--preflight`, a read-only report of what cutover
//!   would manage and what blocks it; classification is pure), `runtime` (wiring and drain).
//!
//! The admin port (`/live`, `/ready`, `/metrics`), the drain's signals, the backoff and the TLS
//! reloader are `cutover_runtime`'s (the TLS accept loop, speaking tonic, is `grpc::incoming`).

pub mod arm;
pub mod bootstrap;
pub mod config;
pub mod credentials;
pub mod grpc;
pub mod identity;
pub mod inbound;
pub use actuator_lb as lb;
pub mod metrics;
pub mod plan;
pub mod preflight;
pub mod runtime;
pub mod state;
pub mod writer;

#[cfg(test)]
mod layers_tests;
