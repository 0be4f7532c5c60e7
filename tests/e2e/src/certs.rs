//! A throwaway certificate authority for the sandbox and the whole-system tests: one serving
//! certificate for the actuators and one client certificate per caller identity, as the
//! deploy manifests wire them from Secrets in a real cluster.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// Paths of one PEM certificate and its key.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// The CA plus the issued certificates, written under one directory.
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca: PathBuf,
    pub actuator: CertFiles,
    pub signal: CertFiles,
    pub tool: CertFiles,
    /// A client certificate from the same CA whose identity is on no allow-list.
    pub stranger: CertFiles,
}

impl Pki {
    /// TLS for a tool talking to an actuator: this CA, the tool's client certificate.
    pub fn tool_tls(&self) -> anyhow::Result<ClientTlsConfig> {
        Ok(ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(std::fs::read(&self.ca)?))
            .identity(Identity::from_pem(
                std::fs::read(&self.tool.cert)?,
                std::fs::read(&self.tool.key)?,
            ))
            .domain_name(ACTUATOR_NAME))
    }
}

/// DNS name in the actuator's serving certificate (and the `--tls-server-name` clients use).
pub const ACTUATOR_NAME: &str = "actuator-svc.cutover.svc";
/// Identity of signal-svc's client certificate.
pub const SIGNAL_NAME: &str = "signal-svc.cutover.svc";
/// Identity of cutoverctl's client certificate.
pub const TOOL_NAME: &str = "cutoverctl.cutover.svc";

fn leaf(
    dir: &Path,
    file: &str,
    name: &str,
    extra_sans: &[&str],
    usage: ExtendedKeyUsagePurpose,
    ca: &CertifiedIssuer<'_, KeyPair>,
) -> anyhow::Result<CertFiles> {
    let mut sans = vec![name.to_string()];
    sans.extend(extra_sans.iter().map(|s| s.to_string()));
    let mut params = CertificateParams::new(sans)?;
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, ca)?;
    let files = CertFiles {
        cert: dir.join(format!("{file}.crt")),
        key: dir.join(format!("{file}.key")),
    };
    std::fs::write(&files.cert, cert.pem())?;
    std::fs::write(&files.key, key.serialize_pem())?;
    Ok(files)
}

/// Creates a CA and the certificates under `dir`.
pub fn generate(dir: &Path) -> anyhow::Result<Pki> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, "cutover sandbox CA");
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate()?)?;
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem())?;
    let client = ExtendedKeyUsagePurpose::ClientAuth;
    Ok(Pki {
        actuator: leaf(
            dir,
            "actuator",
            ACTUATOR_NAME,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca,
        )?,
        signal: leaf(dir, "signal", SIGNAL_NAME, &[], client.clone(), &ca)?,
        tool: leaf(dir, "tool", TOOL_NAME, &[], client.clone(), &ca)?,
        stranger: leaf(dir, "stranger", "stranger.example", &[], client, &ca)?,
        ca: ca_path,
    })
}
