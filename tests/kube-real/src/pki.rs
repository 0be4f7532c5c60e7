//! Throwaway certificates for one control plane: a CA, the API server's serving certificate
//! (SANs 127.0.0.1 and localhost), an admin client certificate in `system:masters`, and the
//! ServiceAccount token signing key.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
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

fn issue(
    sans: &[&str],
    common_name: &str,
    organization: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
    ca: &CertifiedIssuer<'_, KeyPair>,
) -> Result<(String, String), rcgen::Error> {
    let mut params =
        CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    if let Some(o) = organization {
        params.distinguished_name.push(DnType::OrganizationName, o);
    }
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// Writes a new PKI under `dir`.
pub fn generate(dir: &Path) -> Result<Pki, std::io::Error> {
    let err = |e: rcgen::Error| std::io::Error::other(e.to_string());
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(err)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "cutover test kube CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca =
        CertifiedIssuer::self_signed(params, KeyPair::generate().map_err(err)?).map_err(err)?;
    let (serving, serving_key) = issue(
        &["127.0.0.1", "localhost", "kubernetes.default.svc"],
        "kube-apiserver",
        None,
        ExtendedKeyUsagePurpose::ServerAuth,
        &ca,
    )
    .map_err(err)?;
    let (admin_cert_pem, admin_key_pem) = issue(
        &[],
        "cutover-test-admin",
        Some("system:masters"),
        ExtendedKeyUsagePurpose::ClientAuth,
        &ca,
    )
    .map_err(err)?;
    let sa = KeyPair::generate().map_err(err)?;
    let pki = Pki {
        ca_cert: dir.join("ca.crt"),
        ca_pem: ca.pem(),
        ca_der: ca.der().to_vec(),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert_pem,
        admin_key_pem,
        sa_key: dir.join("sa.key"),
        sa_pub: dir.join("sa.pub"),
    };
    std::fs::write(&pki.ca_cert, &pki.ca_pem)?;
    std::fs::write(&pki.serving_cert, serving)?;
    std::fs::write(&pki.serving_key, serving_key)?;
    std::fs::write(&pki.sa_key, sa.serialize_pem())?;
    std::fs::write(&pki.sa_pub, sa.public_key_pem())?;
    Ok(pki)
}
