//! Throwaway certificates for one control plane: a CA, the API server's serving certificate
//! (SANs 127.0.0.1 and localhost), an admin client certificate in `system:masters`, and the
//! ServiceAccount token signing key. The CA is the test kit's.

use cutover_testkit::certs::{TestCa, Usage};
use std::path::{Path, PathBuf};

/// The files the API server reads, and the admin identity's PEM for clients.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_pem: String,
    pub ca_der: Vec<u8>,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// Signs ServiceAccount tokens; `sa_pub` verifies them.
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

/// Writes a new PKI under `dir`.
pub fn generate(dir: &Path) -> Result<Pki, std::io::Error> {
    let err = |e: anyhow::Error| std::io::Error::other(format!("{e:#}"));
    let ca = TestCa::new("cutover test kube CA").map_err(err)?;
    let serving = ca
        .issue(
            &["127.0.0.1", "localhost", "kubernetes.default.svc"],
            Some("kube-apiserver"),
            None,
            Usage::ServerAuth,
        )
        .map_err(err)?;
    // The API server's user and group: the subject CN and O.
    let admin = ca
        .issue(
            &[],
            Some("cutover-test-admin"),
            Some("system:masters"),
            Usage::ClientAuth,
        )
        .map_err(err)?;
    let sa = rcgen::KeyPair::generate().map_err(|e| std::io::Error::other(e.to_string()))?;
    let ca_cert = ca.write(dir, "ca").map_err(err)?;
    let serving = serving.write(dir, "apiserver").map_err(err)?;
    let pki = Pki {
        ca_cert,
        ca_pem: ca.pem(),
        ca_der: ca.der(),
        serving_cert: serving.cert,
        serving_key: serving.key,
        admin_cert_pem: admin.cert_pem,
        admin_key_pem: admin.key_pem,
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
    };
    std::fs::write(&pki.sa_key, sa.serialize_pem())?;
    std::fs::write(&pki.sa_pub, sa.public_key_pem())?;
    Ok(pki)
}
