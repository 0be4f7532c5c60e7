//! A throwaway certificate authority for the sandbox and the whole-system tests: one serving
//! certificate for the actuators and one client certificate per caller identity, as the
//! deploy manifests wire them from Secrets in a real cluster. Identities are SANs only (the
//! services never read the CN, and these certificates have none): each client certificate
//! carries its DNS name (deploy/base's and the chart's existingSecrets identities) and its
//! SPIFFE-style URI (the chart's cert-manager identities); the sandbox's actuators admit the
//! URIs.

use cutover_testkit::certs::{TestCa, Usage};
use std::path::{Path, PathBuf};
use tonic::transport::{Certificate, ClientTlsConfig, Identity};

pub use cutover_testkit::CertFiles;

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

/// Creates a CA and the certificates under `dir` (the test kit's CA).
pub fn generate(dir: &Path) -> anyhow::Result<Pki> {
    let ca = TestCa::new("cutover sandbox CA")?;
    let stranger = [
        "stranger.example",
        "spiffe://cluster.local/ns/cutover/sa/stranger",
    ];
    Ok(Pki {
        ca: ca.write(dir, "ca")?,
        actuator: ca
            .server(&[ACTUATOR_NAME, "localhost", "127.0.0.1"])?
            .write(dir, "actuator")?,
        signal: ca
            .client(&[SIGNAL_NAME, SIGNAL_URI])?
            .write(dir, "signal")?,
        tool: ca.client(&[TOOL_NAME, TOOL_URI])?.write(dir, "tool")?,
        stranger: ca.client(&stranger)?.write(dir, "stranger")?,
        cn_only: ca
            .issue(&[], Some(TOOL_NAME), None, Usage::ClientAuth)?
            .write(dir, "cn-only")?,
    })
}
