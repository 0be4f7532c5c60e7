//! A throwaway certificate authority for the sandbox and the whole-system tests: one serving
//! certificate for the actuators and one client certificate per caller identity, as the
//! deploy manifests wire them from Secrets in a real cluster. Identities are SANs only (the
//! services never read the CN, and these certificates have none): each client certificate
//! carries its DNS name (deploy/base's and the chart's existingSecrets identities) and its
//! SPIFFE-style URI (the chart's cert-manager identities); the sandbox's actuators admit the
//! URIs.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
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
    /// A client certificate from the same CA with no SAN, its subject CN the tool's DNS name:
    /// refused (UNAUTHENTICATED), since a CN is never an identity.
    pub cn_only: CertFiles,
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
/// DNS identity of signal-svc's client certificate.
pub const SIGNAL_NAME: &str = "signal-svc.cutover.svc";
/// URI identity of signal-svc's client certificate (what the sandbox's actuators admit).
pub const SIGNAL_URI: &str = "spiffe://cluster.local/ns/cutover/sa/signal-svc";
/// DNS identity of cutoverctl's client certificate.
pub const TOOL_NAME: &str = "cutoverctl.cutover.svc";
/// URI identity of cutoverctl's client certificate (what the sandbox's actuators admit).
pub const TOOL_URI: &str = "spiffe://cluster.local/ns/cutover/sa/cutoverctl";

/// A leaf with SANs `name` and `extra_sans` (DNS names or IPs; URIs when they contain `://`)
/// and no subject; `name` empty: no SAN, `cn` as the subject CN.
#[allow(clippy::too_many_arguments)]
fn leaf(
    dir: &Path,
    file: &str,
    name: &str,
    extra_sans: &[&str],
    cn: Option<&str>,
    usage: ExtendedKeyUsagePurpose,
    ca: &CertifiedIssuer<'_, KeyPair>,
) -> anyhow::Result<CertFiles> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    for san in std::iter::once(&name)
        .chain(extra_sans)
        .filter(|s| !s.is_empty())
    {
        let san = if san.contains("://") {
            SanType::URI(san.to_string().try_into()?)
        } else if let Ok(ip) = san.parse() {
            SanType::IpAddress(ip)
        } else {
            SanType::DnsName(san.to_string().try_into()?)
        };
        params.subject_alt_names.push(san);
    }
    params.distinguished_name = DistinguishedName::new();
    if let Some(cn) = cn {
        params.distinguished_name.push(DnType::CommonName, cn);
    }
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
            None,
            ExtendedKeyUsagePurpose::ServerAuth,
            &ca,
        )?,
        signal: leaf(
            dir,
            "signal",
            SIGNAL_NAME,
            &[SIGNAL_URI],
            None,
            client.clone(),
            &ca,
        )?,
        tool: leaf(
            dir,
            "tool",
            TOOL_NAME,
            &[TOOL_URI],
            None,
            client.clone(),
            &ca,
        )?,
        stranger: leaf(
            dir,
            "stranger",
            "stranger.example",
            &["spiffe://cluster.local/ns/cutover/sa/stranger"],
            None,
            client.clone(),
            &ca,
        )?,
        cn_only: leaf(dir, "cn-only", "", &[], Some(TOOL_NAME), client, &ca)?,
        ca: ca_path,
    })
}
