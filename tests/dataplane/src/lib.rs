//! Azure Standard Load Balancer data-plane simulator (issue 28): what clients feel while a node
//! leaves, with probe-only, KEP-3836's shared probe and cutover. The facts and the pessimistic
//! defaults are those of `../shared/contracts/dataplane.md`; see README.md.
//!
//! - [`params`], [`model`]: pure logic (probe engine, admin state, eligibility, selection).
//! - [`sim`]: the model realisation in virtual time (many seeds, fast; closed-form check).
//! - [`kernel`], [`netns`]: the kernel-true realisation (network namespaces, nftables DNAT +
//!   conntrack) and the real-time controller shared with [`userspace`].
//! - [`controller`]: the real-time controller both realisations share; [`live`]: the leaving
//!   node's changes as the full stack makes them (tests/e2e's `departures_bench`).
//! - [`userspace`]: the fallback, an in-process TCP proxy applying the same rules.
//! - [`helper`]: the member, prober and client processes.
//! - [`report`]: counts and the table.

pub mod controller;
pub mod helper;
pub mod helper_cmd;
pub mod kernel;
pub mod live;
pub mod model;
pub mod netns;
pub mod params;
pub mod report;
pub mod sim;
pub mod userspace;
