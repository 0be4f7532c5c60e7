//! A throwaway certificate authority for tests: one self-signed CA that issues leaves for a
//! server (DNS names and IPs) or a client (DNS names and URIs, e.g. SPIFFE IDs), as PEM strings
//! or written to files in a directory.
//!
//! A leaf's identities are its subject alternative names: each SAN is a URI when it contains
//! `://`, an IP address when it parses as one, a DNS name otherwise. A leaf has no subject
//! unless one is asked for ([`TestCa::issue`] with a CN and an organization: the Kubernetes
//! user and group of a client certificate), since a CN is never an identity.

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DistinguishedName, DnType, IsCa, KeyPair,
    KeyUsagePurpose, SanType,
};
use std::path::{Path, PathBuf};

/// What a leaf is for: its one extended key usage (`ServerAuth`, `ClientAuth`).
pub use rcgen::ExtendedKeyUsagePurpose as Usage;

/// A self-signed CA (its key usages: certificate and CRL signing).
pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A certificate and its private key, PEM.
#[derive(Debug, Clone)]
pub struct Leaf {
    pub cert_pem: String,
    pub key_pem: String,
}

/// Paths of one PEM certificate and its key.
#[derive(Debug, Clone)]
pub struct CertFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl TestCa {
    /// A new CA whose subject CN is `name`.
    pub fn new(name: &str) -> anyhow::Result<Self> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        Ok(TestCa {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate()?)?,
        })
    }

    /// The CA certificate, PEM.
    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// The CA certificate, DER.
    pub fn der(&self) -> Vec<u8> {
        self.issuer.der().to_vec()
    }

    /// Writes the CA certificate to `dir/<name>.crt` (creating `dir`) and returns its path.
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<PathBuf> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let path = dir.join(format!("{name}.crt"));
        std::fs::write(&path, self.pem()).with_context(|| format!("write {}", path.display()))?;
        Ok(path)
    }

    /// A serving certificate for `sans` (DNS names and IPs), no subject.
    pub fn server(&self, sans: &[&str]) -> anyhow::Result<Leaf> {
        self.issue(sans, None, None, Usage::ServerAuth)
    }

    /// A client certificate for `sans` (DNS names and URIs), no subject.
    pub fn client(&self, sans: &[&str]) -> anyhow::Result<Leaf> {
        self.issue(sans, None, None, Usage::ClientAuth)
    }

    /// A leaf with exactly the SANs `sans` (URIs when they contain `://`, IPs when they parse as
    /// one, DNS names otherwise; none is fine), the subject CN `cn` and organization `org` when
    /// given (no subject otherwise), usable for `usage` only.
    pub fn issue(
        &self,
        sans: &[&str],
        cn: Option<&str>,
        org: Option<&str>,
        usage: Usage,
    ) -> anyhow::Result<Leaf> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        for san in sans {
            let san = if san.contains("://") {
                SanType::URI(san.to_string().try_into()?)
            } else if let Ok(ip) = san.parse() {
                SanType::IpAddress(ip)
            } else {
                SanType::DnsName(san.to_string().try_into()?)
            };
            params.subject_alt_names.push(san);
        }
        // rcgen's default subject carries a CN of its own.
        params.distinguished_name = DistinguishedName::new();
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        if let Some(org) = org {
            params
                .distinguished_name
                .push(DnType::OrganizationName, org);
        }
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate()?;
        let cert = params.signed_by(&key, &self.issuer)?;
        Ok(Leaf {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

impl Leaf {
    /// Writes `dir/<name>.crt` and `dir/<name>.key` (creating `dir`).
    pub fn write(&self, dir: &Path, name: &str) -> anyhow::Result<CertFiles> {
        std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        let files = CertFiles {
            cert: dir.join(format!("{name}.crt")),
            key: dir.join(format!("{name}.key")),
        };
        std::fs::write(&files.cert, &self.cert_pem)
            .with_context(|| format!("write {}", files.cert.display()))?;
        std::fs::write(&files.key, &self.key_pem)
            .with_context(|| format!("write {}", files.key.display()))?;
        Ok(files)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leaves_are_written_beside_the_ca() {
        let dir =
            std::env::temp_dir().join(format!("cutover-testkit-certs-{}", std::process::id()));
        let ca = TestCa::new("testkit CA").unwrap();
        let ca_path = ca.write(&dir, "ca").unwrap();
        let files = ca
            .server(&["localhost", "127.0.0.1"])
            .unwrap()
            .write(&dir, "server")
            .unwrap();
        let client = ca
            .client(&["a.example", "spiffe://cluster.local/ns/x/sa/a"])
            .unwrap();
        assert_eq!(std::fs::read_to_string(&ca_path).unwrap(), ca.pem());
        assert!(
            std::fs::read_to_string(&files.cert)
                .unwrap()
                .contains("BEGIN CERTIFICATE")
        );
        assert!(
            std::fs::read_to_string(&files.key)
                .unwrap()
                .contains("PRIVATE KEY")
        );
        assert_eq!(
            sans_and_subject(&client.cert_pem),
            (
                vec![
                    r#"DNSName("a.example")"#.to_owned(),
                    r#"URI("spiffe://cluster.local/ns/x/sa/a")"#.to_owned()
                ],
                String::new()
            )
        );
        let server = ca.server(&["localhost", "127.0.0.1"]).unwrap();
        assert_eq!(
            sans_and_subject(&server.cert_pem).0,
            [r#"DNSName("localhost")"#, "IPAddress([127, 0, 0, 1])"]
        );
        let admin = ca
            .issue(
                &[],
                Some("admin"),
                Some("system:masters"),
                Usage::ClientAuth,
            )
            .unwrap();
        assert_eq!(
            sans_and_subject(&admin.cert_pem),
            (vec![], "CN=admin, O=system:masters".to_owned())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The SANs (as `Kind(value)`) and the subject of a PEM certificate.
    fn sans_and_subject(pem: &str) -> (Vec<String>, String) {
        let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = pem.parse_x509().unwrap();
        let sans = cert
            .subject_alternative_name()
            .unwrap()
            .map(|ext| {
                ext.value
                    .general_names
                    .iter()
                    .map(|n| format!("{n:?}"))
                    .collect()
            })
            .unwrap_or_default();
        (sans, cert.subject().to_string())
    }
}
