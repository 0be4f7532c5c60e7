//! Leader election on a Lease: the I/O around the pure decisions of [`crate::core::lease`]
//! and [`crate::core::term`]. What leading lets the process do is gated in
//! [`crate::shared::gating`].
//!
//! - [`election`]: the election task (attempts, renewals, the term's clock).
//! - [`lease_lock`]: one resourceVersion-checked read-modify-write of the Lease.

pub mod election;
pub mod lease_lock;
