//! What comes in over gRPC, below the service surface (`grpc`: allow-lists and the tonic
//! plumbing):
//! - `validate`: every request and stream message checked whole (INVALID_ARGUMENT naming the
//!   field) into typed values before anything touches state;
//! - `tools`: the unary tool RPCs and the protection of the ARM budget from them;
//! - `holds`: durable tool holds relayed to signal-svc (stored on the Node).

pub mod holds;
pub mod tools;
pub mod validate;
