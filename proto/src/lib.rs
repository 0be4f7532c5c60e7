//! The `cutover.v1` gRPC contract (see `proto/cutover/v1/actuator.proto`).
//!
//! The Rust code under `src/gen/` is generated from the `.proto` files and checked in, so a
//! build needs no `protoc`. The test `tests/codegen.rs` regenerates it with a vendored `protoc`
//! and fails when the checked-in code has drifted; run it with `CUTOVER_BLESS=1` to update.

/// Generated messages, client and server for package `cutover.v1`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod v1 {
    include!("gen/cutover.v1.rs");

    /// The encoded `FileDescriptorSet` of the package, for gRPC server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!("gen/cutover.v1.bin");
}

mod version;
pub use version::VersionExt;
