//! Client configurations for one control plane: in-process (`kube::Config`) and as kubeconfig
//! files for the services, kubectl and helm.

use crate::server::RealApiServer;
use serde_json::json;
use std::path::Path;

fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn document(server: &RealApiServer, user: serde_json::Value) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "real", "cluster": {
            "server": server.url(),
            "certificate-authority-data": b64(server.ca_pem()),
        }}],
        "users": [{"name": "user", "user": user}],
        "contexts": [{"name": "real", "context": {"cluster": "real", "user": "user"}}],
        "current-context": "real",
    })
}

fn admin_user(server: &RealApiServer) -> serde_json::Value {
    let (cert, key) = server.admin_identity_pem();
    json!({"client-certificate-data": b64(cert), "client-key-data": b64(key)})
}

fn write(path: &Path, doc: &serde_json::Value) -> std::io::Result<()> {
    let text = serde_yaml::to_string(doc).map_err(std::io::Error::other)?;
    std::fs::write(path, text)
}

pub fn write_admin(server: &RealApiServer, path: &Path) -> std::io::Result<()> {
    write(path, &document(server, admin_user(server)))
}

pub fn write_token(server: &RealApiServer, path: &Path, token: &str) -> std::io::Result<()> {
    write(path, &document(server, json!({"token": token})))
}

/// The admin configuration for in-process clients: the same CA and identity as the files.
pub fn admin_config(server: &RealApiServer) -> kube::Config {
    let mut config = kube::Config::new(server.url().parse().unwrap_or_default());
    config.root_cert = Some(vec![server.ca_der().to_vec()]);
    let (cert, key) = server.admin_identity_pem();
    config.auth_info.client_certificate_data = Some(b64(cert));
    config.auth_info.client_key_data = Some(b64(key).into());
    config
}
