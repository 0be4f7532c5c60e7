//! Kubernetes in: the Node and Event watches, turned into calls on the pure [`crate::core`]
//! index through [`crate::shared::Shared`].
//!
//! - [`watch`]: the watch tasks (Nodes with a relist on demand, `PreemptScheduled` Events).
//! - [`slim_node`]: the slim Node the watch decodes (only the fields the core reads).
//! - [`client`]: the two clients over a caller's `Dialer`, stacked as `kube::Client::try_from`
//!   stacks them (the deterministic simulation's transport; production keeps `try_from`).
//! - [`proxy`]: whether the API server is reached through `HTTPS_PROXY` (`NO_PROXY` decides).

pub mod client;
pub mod proxy;
pub mod slim_node;
pub mod watch;
