//! Optional HTTPS: a throwaway CA and a server certificate for `localhost` / `127.0.0.1` (and
//! the host a caller serves the simulator under, [`crate::ArmSim::start_on`], and
//! [`crate::ArmSimOptions::tls_names`]), generated at start. The Python Azure SDK refuses bearer tokens over plain http, so its test runs the
//! simulator with TLS and trusts the CA PEM.

use std::sync::Arc;
use tokio_rustls::rustls;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("certificate generation failed: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("TLS configuration failed: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A TLS acceptor plus the CA certificate (PEM) clients must trust. The certificate names
/// `localhost`, `127.0.0.1` and each of `hosts` (DNS names or IP addresses).
pub(crate) fn acceptor(hosts: &[String]) -> Result<(tokio_rustls::TlsAcceptor, String), TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "arm-sim test CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca_params, &ca_key);

    let key = KeyPair::generate()?;
    let mut names = vec!["localhost".to_owned(), "127.0.0.1".to_owned()];
    for host in hosts {
        if !names.iter().any(|n| n.eq_ignore_ascii_case(host)) {
            names.push(host.clone());
        }
    }
    let mut params = CertificateParams::new(names)?;
    params
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params.signed_by(&key, &issuer)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone(), ca_cert.der().clone()], key_der)?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((
        tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_cert.pem(),
    ))
}
