//! A kubeconfig pointing at the simulator: one cluster (plain HTTP, or HTTPS with the CA
//! embedded), one user with a bearer token, one selected context with namespace `default`.

use std::path::Path;

/// The token written into kubeconfigs of a simulator without `Security` (not checked).
pub const TOKEN: &str = "kube-sim-token";

/// The kubeconfig text for a server URL.
pub fn render(server: &str) -> String {
    render_as(server, TOKEN)
}

/// The kubeconfig text for a server URL, with `token` as the caller's bearer token.
pub fn render_as(server: &str, token: &str) -> String {
    render_with(server, token, None)
}

/// The kubeconfig text, trusting `ca_pem` (as `certificate-authority-data`) when given.
pub fn render_with(server: &str, token: &str, ca_pem: Option<&str>) -> String {
    use base64::Engine;
    let ca = ca_pem
        .map(|pem| {
            format!(
                "\n    certificate-authority-data: {}",
                base64::engine::general_purpose::STANDARD.encode(pem)
            )
        })
        .unwrap_or_default();
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: kube-sim
  cluster:
    server: {server}{ca}
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
