//! A throwaway certificate authority for the TLS tests: one CA, leaves signed for a name and
//! one extended key usage, everything as PEM strings.

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, SanType,
};

pub use rcgen::ExtendedKeyUsagePurpose as Usage;

pub struct TestCa {
    issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    /// A self-signed CA called `name`.
    pub fn new(name: &str) -> Self {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Self {
            issuer: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// (certificate, key) for `name` (CN and DNS SAN), usable for `usage` only.
    pub fn leaf(&self, name: &str, usage: ExtendedKeyUsagePurpose) -> (String, String) {
        let mut p = CertificateParams::new(vec![name.to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// (certificate, key) with exactly `sans` (DNS names, or URIs when they contain `://`) and,
    /// when given, the subject CN `cn`.
    #[allow(dead_code)] // used by tests/identities.rs, which includes this file
    pub fn leaf_with(
        &self,
        sans: &[&str],
        cn: Option<&str>,
        usage: ExtendedKeyUsagePurpose,
    ) -> (String, String) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.subject_alt_names = sans
            .iter()
            .map(|s| {
                if s.contains("://") {
                    SanType::URI((*s).try_into().unwrap())
                } else {
                    SanType::DnsName((*s).try_into().unwrap())
                }
            })
            .collect();
        // rcgen's default subject carries a CN of its own.
        p.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            p.distinguished_name.push(DnType::CommonName, cn);
        }
        p.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
