//! What the tests repeat, written once (issue 30 item 4): moved here from the test crates that
//! had a copy each, not rewritten.
//!
//! | module | what | moved from |
//! | --- | --- | --- |
//! | [`certs`] | a throwaway CA issuing server and client leaves (DNS, IP and URI SANs), as PEM or files | `tests/e2e/src/certs.rs`, `tests/kube-real/src/pki.rs` |
//! | [`ports`] | [`free_port`]: a loopback port for a child to listen on, below the ephemeral range | `tests/kube-real/src/process.rs` |
//! | [`wait`] | [`eventually`]: poll until a check yields, fail with a message after a timeout; [`until_ok`]: the same, failing with what the check saw last | `tests/kube-sim/tests/common`, `tests/arm-sim/tests/common`, the e2e tests' loops |
//! | [`procs`] | [`Proc`]: an async child with its output in a log file, killed when dropped | `tests/e2e/src/procs.rs` |
//! | [`guarded`] | [`Guarded`]: a child in its own process group under a watchdog, killed with its group | `tests/kube-real/src/process.rs` |
//! | [`layers`] | the check that no import in a crate runs back up its layer table | `signal-svc` and `actuator-svc` `src/layers_tests.rs` |
//! | `fake_actuator` (feature `fake-actuator`) | `FakeActuator`: a recording fake actuator, an `Actuator` gRPC server answering per `Mode` | `signal-svc/tests/common/mod.rs` |
//!
//! Test code only: the services take this crate as a dev-dependency.

pub mod certs;
#[cfg(feature = "fake-actuator")]
pub mod fake_actuator;
pub mod guarded;
pub mod layers;
pub mod ports;
pub mod procs;
pub mod wait;

pub use certs::{CertFiles, Leaf, TestCa};
pub use guarded::Guarded;
pub use ports::free_port;
pub use procs::{Proc, Spec};
pub use wait::{eventually, eventually_within, until_ok};
