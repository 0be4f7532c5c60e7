//! A kubeconfig pointing at the simulator: one cluster (plain HTTP), one user with a bearer
//! token (accepted but not checked), one selected context with namespace `default`.

use std::path::Path;

/// The token written into kubeconfigs. The simulator does not check it.
pub const TOKEN: &str = "kube-sim-token";

/// The kubeconfig text for a server URL.
pub fn render(server: &str) -> String {
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
    token: {TOKEN}
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
