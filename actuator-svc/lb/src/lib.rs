//! The load balancer document, as bytes: pure code with no I/O, a crate of its own
//! (actuator-lb) so that Cargo keeps it from importing anything of actuator-svc, which
//! re-exports it as its `lb` module. It sits on the ground floor under actuator-svc's `arm`
//! (which moves the bytes), `plan` and `writer` (which decide what to change).
//!
//! - `scan`: a streaming JSON scanner over a document's bytes;
//! - `doc`: what an LB document says (entries, pools, provisioning), read through `scan`;
//! - `splice`: edits of admin states spliced into the read bytes (per-pool or whole-LB PUT
//!   bodies, the compact base kept between rounds);
//! - `ids`: ARM resource ID parsing;
//! - `nic`: the fields of a network interface cutover reads (its ID and its VM's);
//! - `index`: which entries of which pools belong to a node (the pool index built from `doc`).

pub mod doc;
pub mod ids;
pub mod index;
pub mod nic;
pub mod scan;
pub mod splice;
