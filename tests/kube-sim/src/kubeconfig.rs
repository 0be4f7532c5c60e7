//! A kubeconfig pointing at the simulator: one cluster (plain HTTP), one user with a bearer
//! token (accepted but not checked), one selected context with namespace `default`. The token
//! is recorded with each request, so tests can tell callers apart (e.g. to compare what a
//! component calls with its RBAC role).

use std::path::Path;

/// The token written into kubeconfigs. The simulator does not check it.
pub const TOKEN: &str = "kube-sim-token";

/// The kubeconfig text for a server URL.
pub fn render(server: &str) -> String {
    render_as(server, TOKEN)
}

/// The kubeconfig text for a server URL, with `token` as the caller's bearer token.
pub fn render_as(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sim
  cluster:
    server: {server}
users:
- name: kube-sim
  user:
    token: {token}
contexts:
- name: kube-sim
  context:
    cluster: kube-sim
    user: kube-sim
    namespace: default
current-context: kube-sim
preferences: {{}}
"
    )
}

/// Writes the kubeconfig to `path`.
pub fn write(path: &Path, server: &str) -> std::io::Result<()> {
    std::fs::write(path, render(server))
}

/// Writes a kubeconfig whose bearer token is `token`.
pub fn write_as(path: &Path, server: &str, token: &str) -> std::io::Result<()> {
    std::fs::write(path, render_as(server, token))
}
