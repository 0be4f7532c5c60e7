//! The server shape (actuator-svc's gRPC server): certificate, key and, with mutual TLS, the CA
//! that signs client certificates, made into a rustls `ServerConfig` and polled while serving.
//! A change builds a whole new configuration (certificate, key and client CA checked
//! together); only if that succeeds does it replace the one new handshakes use.

use super::{Refresh, Reloader, TlsError, TlsFiles};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio_rustls::rustls::crypto::ring;
use tokio_rustls::rustls::pki_types::pem::PemObject;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::rustls::server::WebPkiClientVerifier;
use tokio_rustls::rustls::{RootCertStore, ServerConfig};

/// Where the server's TLS material lives.
#[derive(Debug, Clone)]
pub struct ServerTlsFiles {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a CA, client certificates signed by it are required.
    pub client_ca: Option<PathBuf>,
}

impl TlsFiles for ServerTlsFiles {
    type Material = ServerConfig;

    fn paths(&self) -> Vec<(&'static str, &Path)> {
        let mut out = vec![
            ("--tls-cert", self.cert.as_path()),
            ("--tls-key", &self.key),
        ];
        if let Some(ca) = &self.client_ca {
            out.push(("--tls-client-ca", ca));
        }
        out
    }

    /// Builds the server configuration from file contents (in [`Self::paths`] order).
    fn build(&self, contents: &[Vec<u8>]) -> Result<ServerConfig, TlsError> {
        let parse_err = |flag: &'static str, path: &Path, reason: String| TlsError::Parse {
            flag,
            path: path.display().to_string(),
            reason,
        };
        let certs = pem_certs(&contents[0]).map_err(|r| parse_err("--tls-cert", &self.cert, r))?;
        let key = PrivateKeyDer::from_pem_slice(&contents[1]).map_err(|e| {
            parse_err(
                "--tls-key",
                &self.key,
                format!("no usable private key ({e})"),
            )
        })?;
        let provider = Arc::new(ring::default_provider());
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Config(e.to_string()))?;
        let builder = match (&self.client_ca, contents.get(2)) {
            (Some(path), Some(pem)) => {
                let mut roots = RootCertStore::empty();
                for c in pem_certs(pem).map_err(|r| parse_err("--tls-client-ca", path, r))? {
                    roots
                        .add(c)
                        .map_err(|e| parse_err("--tls-client-ca", path, e.to_string()))?;
                }
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                        .build()
                        .map_err(|e| parse_err("--tls-client-ca", path, e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
            _ => builder.with_no_client_auth(),
        };
        // Also checks that the key belongs to the certificate.
        let mut cfg = builder
            .with_single_cert(certs, key)
            .map_err(|e| parse_err("--tls-key", &self.key, e.to_string()))?;
        // gRPC is HTTP/2 only; clients such as grpcio insist on ALPN.
        cfg.alpn_protocols = vec![b"h2".to_vec()];
        Ok(cfg)
    }
}

/// Every certificate of a PEM bundle; at least one, and no broken block (a half-written file
/// ends inside one).
pub(super) fn pem_certs(pem: &[u8]) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("bad PEM ({e})"))?;
    if certs.is_empty() {
        return Err("no PEM certificate found".into());
    }
    Ok(certs)
}

/// The current server configuration and the files it came from.
pub type TlsReloader = Reloader<ServerTlsFiles>;

impl Reloader<ServerTlsFiles> {
    /// The configuration new handshakes use.
    pub fn config(&self) -> Arc<ServerConfig> {
        self.current()
    }

    /// Polls every `every` (actuator-svc: [`super::POLL_EVERY`]) until shutdown, logging what
    /// changed.
    pub async fn watch(self: Arc<Self>, every: Duration, mut shutdown: watch::Receiver<bool>) {
        // A missing file is reported once per disappearance, not every poll.
        let mut missing = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
            match self.refresh() {
                Refresh::Unchanged => missing = false,
                Refresh::Reloaded => {
                    missing = false;
                    tracing::info!(cert = %self.files().cert.display(), "TLS certificate, key or client CA changed; new connections use them");
                }
                Refresh::Rejected(e @ TlsError::Read { .. }) => {
                    if !missing {
                        tracing::warn!(error = %e, "TLS files unreadable; keeping the previous ones");
                    }
                    missing = true;
                }
                Refresh::Rejected(e) => {
                    missing = false;
                    tracing::warn!(error = %e, "changed TLS files are not usable; keeping the previous ones");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::self_signed;
    use super::*;

    fn files(dir: &Path) -> ServerTlsFiles {
        ServerTlsFiles {
            cert: dir.join("tls.crt"),
            key: dir.join("tls.key"),
            client_ca: Some(dir.join("ca.crt")),
        }
    }

    fn write(dir: &Path, cert: &str, key: &str, ca: &str) {
        std::fs::write(dir.join("tls.crt"), cert).unwrap();
        std::fs::write(dir.join("tls.key"), key).unwrap();
        std::fs::write(dir.join("ca.crt"), ca).unwrap();
    }

    #[test]
    fn bad_new_material_is_refused_and_the_previous_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (self_signed("a"), self_signed("b"));
        write(dir.path(), &a.0, &a.1, &a.0);
        let r = TlsReloader::load(files(dir.path())).unwrap();
        let first = r.config();
        assert!(matches!(r.refresh(), Refresh::Unchanged));

        // The new certificate with the old key (the key file not yet replaced).
        write(dir.path(), &b.0, &a.1, &a.0);
        let Refresh::Rejected(e) = r.refresh() else {
            panic!("a mismatched key was accepted")
        };
        assert!(e.to_string().starts_with("--tls-key"), "{e}");
        assert!(Arc::ptr_eq(&first, &r.config()));
        // Reported once: the same bad set is not looked at again.
        assert!(matches!(r.refresh(), Refresh::Unchanged));

        // A half-written certificate, an empty CA bundle, a missing key file.
        write(dir.path(), &b.0[..b.0.len() / 2], &b.1, &a.0);
        assert!(matches!(
            r.refresh(),
            Refresh::Rejected(TlsError::Parse { .. })
        ));
        write(dir.path(), &b.0, &b.1, "");
        assert!(matches!(
            r.refresh(),
            Refresh::Rejected(TlsError::Parse { .. })
        ));
        std::fs::remove_file(dir.path().join("tls.key")).unwrap();
        assert!(matches!(
            r.refresh(),
            Refresh::Rejected(TlsError::Read { .. })
        ));
        assert!(Arc::ptr_eq(&first, &r.config()));

        // The complete new set is taken.
        write(dir.path(), &b.0, &b.1, &b.0);
        assert!(matches!(r.refresh(), Refresh::Reloaded));
        assert!(!Arc::ptr_eq(&first, &r.config()));
        assert_eq!(r.config().alpn_protocols, vec![b"h2".to_vec()]);
    }

    #[test]
    fn errors_never_carry_key_material() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (self_signed("a"), self_signed("b"));
        write(dir.path(), &a.0, &b.1, &a.0);
        let e = TlsReloader::load(files(dir.path()))
            .unwrap_err()
            .to_string();
        assert!(
            !e.contains("PRIVATE KEY") && !e.contains(&b.1[40..80]),
            "{e}"
        );
    }

    #[test]
    fn debug_never_prints_key_material() {
        let dir = tempfile::tempdir().unwrap();
        let a = self_signed("a");
        write(dir.path(), &a.0, &a.1, &a.0);
        let r = TlsReloader::load(files(dir.path())).unwrap();
        let printed = format!("{r:?}");
        assert!(
            printed.contains("tls.key") && !printed.contains(&a.1[40..80]),
            "{printed}"
        );
    }
}
