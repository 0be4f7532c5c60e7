//! Azure Standard Load Balancer data-plane simulator (issue 28): what clients feel while a node
//! leaves, with probe-only, KEP-3836's shared probe and cutover. The facts and the pessimistic
//! defaults are those of `../shared/contracts/dataplane.md`; see README.md.
//!
//! - [`params`], [`model`]: pure logic (probe engine, admin state, eligibility, selection).
//! - [`sim`]: the model realisation in virtual time (many seeds, fast; closed-form check).
//! - [`kernel`]: the kernel-true realisation (network namespaces, nftables DNAT + conntrack).
//! - [`report`]: counts and the table.

pub mod model;
pub mod params;
pub mod report;
pub mod sim;
