//! Certificate identities: the names a client certificate presents (SAN DNS names and URIs,
//! else the subject CN), as both the allow-lists (`grpc::auth`) and the per-identity tool rate
//! limit (`inbound::tools::limiter`) read them. Pure.

use x509_parser::extensions::GeneralName;
use x509_parser::prelude::{FromDer, X509Certificate};

/// The identities a DER certificate presents: SAN DNS names and URIs, plus the subject CN.
pub fn identities(der: &[u8]) -> Vec<String> {
    let Ok((_, cert)) = X509Certificate::from_der(der) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        for name in &san.value.general_names {
            match name {
                GeneralName::DNSName(d) => out.push(d.to_string()),
                GeneralName::URI(u) => out.push(u.to_string()),
                _ => {}
            }
        }
    }
    for cn in cert.subject().iter_common_name() {
        if let Ok(s) = cn.as_str() {
            out.push(s.to_string());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identities_include_sans_and_cn() {
        let mut params =
            rcgen::CertificateParams::new(vec!["signal-svc.cutover.svc".to_string()]).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "signal");
        params.subject_alt_names.push(rcgen::SanType::URI(
            "spiffe://cluster/ns/cutover/sa/signal".try_into().unwrap(),
        ));
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        let ids = identities(cert.der());
        assert!(ids.contains(&"signal-svc.cutover.svc".to_string()));
        assert!(ids.contains(&"spiffe://cluster/ns/cutover/sa/signal".to_string()));
        assert!(ids.contains(&"signal".to_string()));
        assert!(identities(b"not a certificate").is_empty());
    }
}
