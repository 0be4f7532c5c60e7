//! Authentication and authorization, as kube-apiserver does them with
//! `--token-auth-file` and `--authorization-mode=RBAC`:
//! - [`tokens`]: bearer tokens to users (static entries and ServiceAccount identities);
//! - [`rbac`]: the decision from the Roles, ClusterRoles and bindings in the store;
//! - [`attributes`]: what a request asks to do (verb, group, resource, namespace, name).

pub mod attributes;
pub mod rbac;
pub mod tokens;

pub use attributes::Attributes;
pub use tokens::{Authenticator, TokenEntry, User};

/// Turns on what a real cluster enforces: TLS with the simulator's own CA, bearer-token
/// authentication (401 for unknown tokens) and RBAC authorization of every request (403)
/// from the Roles, ClusterRoles and bindings in the store. The default policy
/// (`cluster-admin` for `system:masters`, discovery for authenticated users) is seeded.
#[derive(Debug, Clone, Default)]
pub struct Security {
    /// Static tokens, like kube-apiserver's `--token-auth-file` (see [`tokens::parse_token_file`]).
    pub tokens: Vec<TokenEntry>,
}
