//! The client shape (signal-svc's streams to the actuators): the CA bundle that signed the
//! server's certificate and the client's own certificate and key, kept as checked PEM and read
//! again whenever a connection is made. Reading at connect time needs no watcher: connects are
//! rare (start-up, failures, the periodic resync) and the files are small.

use super::{Reloader, TlsError, TlsFiles};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tokio_rustls::rustls::crypto::{self, ring};
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::{ClientConfig, RootCertStore};

/// Where the material lives.
#[derive(Clone, Debug)]
pub struct ClientTlsFiles {
    /// CA bundle that signed the server's certificate (`--tls-ca`).
    pub ca: PathBuf,
    /// Client certificate and key (`--tls-cert`, `--tls-key`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

/// One usable set of PEM contents.
pub struct ClientMaterial {
    pub ca_pem: Vec<u8>,
    /// Client certificate and key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl std::fmt::Debug for ClientMaterial {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientMaterial")
            .field("identity", &self.identity.is_some())
            .finish_non_exhaustive()
    }
}

/// Every `BEGIN` has its `END` (a file cut short while being written fails this) and at least
/// one block of `kind` is there.
fn complete_pem(pem: &[u8], kind: &str) -> bool {
    let text = String::from_utf8_lossy(pem);
    let begins = text.matches("-----BEGIN ").count();
    begins > 0
        && begins == text.matches("-----END ").count()
        && text.contains(&format!("-----BEGIN {kind}"))
}

impl ClientTlsFiles {
    fn parse_err(&self, flag: &'static str, reason: impl Into<String>) -> TlsError {
        let path = match (flag, &self.identity) {
            ("--tls-cert", Some((cert, _))) => cert,
            ("--tls-key", Some((_, key))) => key,
            _ => &self.ca,
        };
        TlsError::Parse {
            flag,
            path: path.display().to_string(),
            reason: reason.into(),
        }
    }

    /// The rustls configuration tonic's `ClientTlsConfig` makes of `material` (tonic 0.14,
    /// `TlsConnector::new`): the CA bundle's certificates as the only roots, the client
    /// certificate and key, ALPN `h2`. Building it parses every certificate and checks that
    /// the key belongs to the client certificate. Errors never quote the files.
    pub fn client_config(&self, material: &ClientMaterial) -> Result<ClientConfig, TlsError> {
        let unusable = |flag, e: &dyn std::fmt::Display| {
            self.parse_err(flag, format!("unusable TLS material: {e}"))
        };
        let provider = match crypto::CryptoProvider::get_default() {
            Some(p) => p.clone(),
            None => Arc::new(ring::default_provider()),
        };
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let ca = CertificateDer::pem_slice_iter(&material.ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| unusable("--tls-ca", &e))?;
        let mut roots = RootCertStore::empty();
        roots.add_parsable_certificates(ca);
        let builder = builder.with_root_certificates(roots);
        let mut config = match &material.identity {
            Some((cert, key)) => {
                let certs = CertificateDer::pem_slice_iter(cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| unusable("--tls-cert", &e))?;
                let key =
                    PrivateKeyDer::from_pem_slice(key).map_err(|e| unusable("--tls-key", &e))?;
                builder
                    .with_client_auth_cert(certs, key)
                    .map_err(|e| unusable("--tls-cert", &e))?
            }
            None => builder.with_no_client_auth(),
        };
        config.alpn_protocols.push(b"h2".to_vec());
        Ok(config)
    }
}

impl TlsFiles for ClientTlsFiles {
    type Material = ClientMaterial;

    fn paths(&self) -> Vec<(&'static str, &Path)> {
        let mut out = vec![("--tls-ca", self.ca.as_path())];
        if let Some((cert, key)) = &self.identity {
            out.push(("--tls-cert", cert));
            out.push(("--tls-key", key));
        }
        out
    }

    /// Checks contents read in [`Self::paths`] order. Errors never quote the files.
    fn build(&self, contents: &[Vec<u8>]) -> Result<ClientMaterial, TlsError> {
        let mut it = contents.iter().cloned();
        let ca_pem = it.next().unwrap_or_default();
        if !complete_pem(&ca_pem, "CERTIFICATE-----") {
            return Err(self.parse_err("--tls-ca", "no PEM certificate found"));
        }
        let identity = match (it.next(), it.next()) {
            (Some(cert), Some(key)) => {
                if !complete_pem(&cert, "CERTIFICATE-----") {
                    return Err(self.parse_err("--tls-cert", "no PEM certificate found"));
                }
                if !String::from_utf8_lossy(&key).contains("PRIVATE KEY-----")
                    || !complete_pem(&key, "")
                {
                    return Err(self.parse_err("--tls-key", "no PEM private key found"));
                }
                Some((cert, key))
            }
            _ => None,
        };
        let material = ClientMaterial { ca_pem, identity };
        self.client_config(&material)?;
        Ok(material)
    }
}

/// The client material in use, and where it is read again from.
pub type ClientTls = Reloader<ClientTlsFiles>;

impl Reloader<ClientTlsFiles> {
    /// Whether the material in use has a client certificate.
    pub fn has_client_cert(&self) -> bool {
        self.current().identity.is_some()
    }

    /// The CA bundle in use (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        self.current().ca_pem.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::super::Refresh;
    use super::super::test_support::self_signed;
    use super::*;

    fn write(dir: &Path, ca: &str, cert: &str, key: &str) {
        std::fs::write(dir.join("ca.crt"), ca).unwrap();
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
    }

    #[test]
    fn bad_new_material_is_refused_and_the_previous_kept() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b) = (self_signed("a"), self_signed("b"));
        write(d, &a.0, &a.0, &a.1);
        let tls = ClientTls::load(ClientTlsFiles {
            ca: d.join("ca.crt"),
            identity: Some((d.join("tls.crt"), d.join("tls.key"))),
        })
        .unwrap();
        assert!(matches!(tls.refresh(), Refresh::Unchanged));

        // New certificate, old key: refused, once.
        write(d, &b.0, &b.0, &a.1);
        let Refresh::Rejected(e) = tls.refresh() else {
            panic!("a mismatched key was taken")
        };
        assert!(!e.to_string().contains("PRIVATE KEY-----"), "{e}");
        assert!(matches!(tls.refresh(), Refresh::Unchanged));
        assert_eq!(tls.ca_pem(), a.0.as_bytes());
        // A CA bundle cut short while being written.
        write(d, &b.0[..b.0.len() - 30], &b.0, &b.1);
        assert!(matches!(tls.refresh(), Refresh::Rejected(_)));
        assert_eq!(tls.ca_pem(), a.0.as_bytes());

        write(d, &b.0, &b.0, &b.1);
        assert!(matches!(tls.refresh(), Refresh::Reloaded));
        assert_eq!(tls.ca_pem(), b.0.as_bytes());
        assert!(tls.has_client_cert());
        // A missing file (between the kubelet's steps) keeps what is in use.
        std::fs::remove_file(d.join("tls.key")).unwrap();
        assert!(matches!(
            tls.refresh(),
            Refresh::Rejected(TlsError::Read { .. })
        ));
        assert_eq!(tls.ca_pem(), b.0.as_bytes());
    }

    #[test]
    fn errors_name_the_flag_and_never_carry_key_material() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (a, b) = (self_signed("a"), self_signed("b"));
        let files = || ClientTlsFiles {
            ca: d.join("ca.crt"),
            identity: Some((d.join("tls.crt"), d.join("tls.key"))),
        };
        write(d, &a.0, &a.0, &b.1);
        let e = ClientTls::load(files()).unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::Parse {
                    flag: "--tls-cert",
                    ..
                }
            ),
            "{e}"
        );
        let e = e.to_string();
        assert!(
            e.contains("unusable TLS material")
                && !e.contains("PRIVATE KEY")
                && !e.contains(&b.1[40..80]),
            "{e}"
        );
        write(d, "", &a.0, &a.1);
        let e = ClientTls::load(files()).unwrap_err();
        assert!(
            matches!(e, TlsError::Parse { flag: "--tls-ca", ref reason, .. } if reason == "no PEM certificate found"),
            "{e}"
        );
        write(d, &a.0, &a.0, &a.0);
        let e = ClientTls::load(files()).unwrap_err();
        assert!(
            matches!(
                e,
                TlsError::Parse {
                    flag: "--tls-key",
                    ..
                }
            ),
            "{e}"
        );
        write(d, &a.0, &a.0, &a.1);
        let config = files().client_config(&ClientTls::load(files()).unwrap().current());
        assert_eq!(config.unwrap().alpn_protocols, vec![b"h2".to_vec()]);
    }
}
