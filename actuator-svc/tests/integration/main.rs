//! actuator-svc against arm-sim, in process, through a real tonic client.

// Tests may unwrap (clippy.toml); this covers the shared helpers outside `#[test]` functions.
#![allow(clippy::unwrap_used)]

mod arm_faults;
mod body_limit;
mod common;
mod edge;
mod faults;
mod guard;
mod holds;
mod lb_lifecycle;
mod not_node_pools;
mod ownership;
mod preflight;
mod restore;
mod rotation;
mod rpc;
mod security;
mod stream;
mod tools;
mod write_size;
mod writer_model;
