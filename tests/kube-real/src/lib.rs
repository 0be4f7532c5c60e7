//! A real Kubernetes control plane for tests, envtest style: etcd and kube-apiserver built
//! from their Go modules by `tests/tools/build.sh` (or taken from `KUBEBUILDER_ASSETS`),
//! started on free loopback ports with TLS, client-certificate admin access, a ServiceAccount
//! token issuer, RBAC authorization and the default admission plugins.
//!
//! ```text
//! tools::locate ──▶ pki::generate ──▶ Guarded (etcd, kube-apiserver; killed with the test)
//!                                        │
//!           RealApiServer::start ◀── /readyz ──▶ admin client ──▶ manifests, seed, tokens
//! ```
//! No controller-manager runs: nothing here needs one (no pods, no namespace deletion,
//! TokenRequest is served by the API server itself), as with envtest.

pub mod audit;
pub mod kubeconfig;
pub mod manifests;
pub mod pki;
pub mod seed;
pub mod server;
pub mod tools;

pub use server::{RealApiServer, StartError};
pub use tools::{Tools, ToolsMissing};
