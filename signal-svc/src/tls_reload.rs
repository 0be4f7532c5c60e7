//! The mTLS material towards actuator-svc, read again whenever a connection is made: a mounted
//! Secret is updated in place (the kubelet swaps a `..data` symlink) and cert-manager renews
//! certificates long before a pod restarts. Established streams keep the session they
//! negotiated; every connect and reconnect uses the files as they are then.
//!
//! Reading at connect time needs no watcher: connects are rare (start-up, failures, the
//! periodic resync) and the files are small. A changed set is checked as a whole (every PEM
//! block complete, the key matching the certificate) before it replaces the one in use; a
//! half-written or mismatched set is logged once and the previous one kept.

use crate::config_error::{ConfigError, invalid};
use parking_lot::Mutex;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity};

/// Where the material lives.
#[derive(Clone, Debug)]
pub struct ClientTlsFiles {
    /// CA bundle that signed the actuator's certificate (`--tls-ca`).
    pub ca: PathBuf,
    /// Client certificate and key (`--tls-cert`, `--tls-key`).
    pub identity: Option<(PathBuf, PathBuf)>,
}

impl ClientTlsFiles {
    fn paths(&self) -> Vec<(&'static str, &Path)> {
        let mut out = vec![("tls-ca", self.ca.as_path())];
        if let Some((cert, key)) = &self.identity {
            out.push(("tls-cert", cert));
            out.push(("tls-key", key));
        }
        out
    }

    fn read(&self) -> Result<Vec<Vec<u8>>, ConfigError> {
        self.paths()
            .into_iter()
            .map(|(flag, p)| {
                std::fs::read(p).map_err(|source| ConfigError::Read {
                    flag,
                    path: p.display().to_string(),
                    source,
                })
            })
            .collect()
    }
}

/// One usable set of PEM contents.
struct Material {
    ca_pem: Vec<u8>,
    identity: Option<(Vec<u8>, Vec<u8>)>,
}

impl Material {
    fn config(&self, domain: String) -> ClientTlsConfig {
        let mut t = ClientTlsConfig::new()
            .ca_certificate(Certificate::from_pem(&self.ca_pem))
            .domain_name(domain);
        if let Some((cert, key)) = &self.identity {
            t = t.identity(Identity::from_pem(cert, key));
        }
        t
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

/// Checks contents read in [`ClientTlsFiles::paths`] order. Errors never quote the files.
fn check(contents: Vec<Vec<u8>>) -> Result<Material, ConfigError> {
    let mut it = contents.into_iter();
    let ca_pem = it.next().unwrap_or_default();
    if !complete_pem(&ca_pem, "CERTIFICATE-----") {
        return Err(invalid("tls-ca", "no PEM certificate found"));
    }
    let identity = match (it.next(), it.next()) {
        (Some(cert), Some(key)) => {
            if !complete_pem(&cert, "CERTIFICATE-----") {
                return Err(invalid("tls-cert", "no PEM certificate found"));
            }
            if !String::from_utf8_lossy(&key).contains("PRIVATE KEY-----")
                || !complete_pem(&key, "")
            {
                return Err(invalid("tls-key", "no PEM private key found"));
            }
            Some((cert, key))
        }
        _ => None,
    };
    let material = Material { ca_pem, identity };
    // Building the rustls configuration parses every certificate and checks that the key
    // belongs to the client certificate.
    Endpoint::from_static("https://localhost")
        .tls_config(material.config("localhost".to_owned()))
        .map_err(|e| {
            let reason = match std::error::Error::source(&e) {
                Some(s) => format!("unusable TLS material: {s}"),
                None => format!("unusable TLS material: {e}"),
            };
            invalid("tls-cert", &reason)
        })?;
    Ok(material)
}

struct State {
    /// The contents last looked at (used or refused), so a bad set is reported once.
    seen: Vec<Vec<u8>>,
    good: Arc<Material>,
}

/// The material in use, and where it is read again from.
pub struct ClientTls {
    files: ClientTlsFiles,
    state: Mutex<State>,
}

impl std::fmt::Debug for ClientTls {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

/// What [`ClientTls::refresh`] found.
#[derive(Debug)]
pub enum Refresh {
    Unchanged,
    Reloaded,
    /// Changed but unusable (or unreadable): the previous material stays.
    Rejected(ConfigError),
}

impl ClientTls {
    /// Reads and checks the files now: bad material stops start-up.
    pub fn load(files: ClientTlsFiles) -> Result<Self, ConfigError> {
        let seen = files.read()?;
        let good = Arc::new(check(seen.clone())?);
        Ok(Self {
            files,
            state: Mutex::new(State { seen, good }),
        })
    }

    /// Re-reads the files and switches to them if they changed and are usable.
    pub fn refresh(&self) -> Refresh {
        let contents = match self.files.read() {
            Ok(c) => c,
            Err(e) => return Refresh::Rejected(e),
        };
        let mut state = self.state.lock();
        if state.seen == contents {
            return Refresh::Unchanged;
        }
        state.seen = contents.clone();
        match check(contents) {
            Ok(m) => {
                state.good = Arc::new(m);
                Refresh::Reloaded
            }
            Err(e) => Refresh::Rejected(e),
        }
    }

    /// The TLS settings for a new connection to `domain`, from the files as they are now.
    pub fn client_config(&self, domain: String) -> ClientTlsConfig {
        match self.refresh() {
            Refresh::Unchanged => {}
            Refresh::Reloaded => {
                tracing::info!(ca = %self.files.ca.display(), "TLS material towards the actuators changed; new connections use it")
            }
            Refresh::Rejected(e) => {
                tracing::warn!(error = %e, "TLS material towards the actuators is not usable; keeping the previous one")
            }
        }
        let good = self.state.lock().good.clone();
        good.config(domain)
    }

    /// Whether the material in use has a client certificate.
    pub fn has_client_cert(&self) -> bool {
        self.state.lock().good.identity.is_some()
    }

    /// The CA bundle in use (PEM).
    pub fn ca_pem(&self) -> Vec<u8> {
        self.state.lock().good.ca_pem.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }

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
            Refresh::Rejected(ConfigError::Read { .. })
        ));
        assert_eq!(tls.ca_pem(), b.0.as_bytes());
    }
}
