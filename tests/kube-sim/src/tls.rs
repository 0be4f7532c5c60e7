//! The cluster CA and the serving certificate, generated at start as a test cluster's
//! control plane would be: a self-signed CA (`CN=kubernetes`) and a server certificate for
//! the names clients use (`localhost`, `127.0.0.1`, `kubernetes`, `kubernetes.default.svc`).
//! Clients trust the CA through the kubeconfig's `certificate-authority-data`.

use std::sync::Arc;
use tokio_rustls::rustls;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("generating certificates: {0}")]
    Cert(#[from] rcgen::Error),
    #[error("configuring TLS: {0}")]
    Rustls(#[from] rustls::Error),
}

/// A TLS acceptor and the CA (PEM) that signed its certificate.
#[derive(Clone)]
pub struct Tls {
    pub acceptor: tokio_rustls::TlsAcceptor,
    pub ca_pem: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").finish_non_exhaustive()
    }
}

const SERVER_NAMES: &[&str] = &[
    "localhost",
    "127.0.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
];

/// A fresh CA and a serving certificate signed by it, for the usual names and `extra_name`
/// (the host of a server URL given to `KubeSim::start_on`).
pub fn generate(extra_name: Option<&str>) -> Result<Tls, TlsError> {
    use rcgen::{
        BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
        KeyPair, KeyUsagePurpose,
    };
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.distinguished_name.push(DnType::CommonName, "kubernetes");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::from_params(&ca, &ca_key);

    let key = KeyPair::generate()?;
    let mut names: Vec<String> = SERVER_NAMES.iter().map(|s| s.to_string()).collect();
    if let Some(extra) = extra_name
        && !names.iter().any(|n| n == extra)
    {
        names.push(extra.to_string());
    }
    let mut server = CertificateParams::new(names)?;
    server
        .distinguished_name
        .push(DnType::CommonName, "kube-apiserver");
    server.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = server.signed_by(&key, &issuer)?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let key_der = rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert.der().clone()], key_der)?;
    // HTTP/1.1 only, like the rest of the simulator (kube-rs speaks nothing else).
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Tls {
        acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)),
        ca_pem: ca_cert.pem(),
    })
}
