//! actuator-svc against arm-sim, in process, through a real tonic client.

mod common;
mod faults;
mod rpc;
mod security;
mod stream;
