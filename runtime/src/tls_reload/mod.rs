//! TLS material re-read while running: a mounted Kubernetes Secret is updated in place (the
//! kubelet swaps a `..data` symlink), and cert-manager renews certificates long before a pod
//! restarts.
//!
//! Moved from the two services' `tls_reload.rs`. Both read their files again (their content,
//! through the symlinks; no inotify, no extra dependency, and a symlink swap is seen the same
//! way as a rewrite), check a changed set as a whole (every PEM block complete, the key
//! matching the certificate, by building the rustls configuration) before it replaces the one
//! in use, and keep the previous set when the new one is half-written, mismatched or briefly
//! missing, reporting it once. Established connections keep the session they negotiated.
//! What they read differs, so there are two shapes over one [`Reloader`]:
//!
//! - [`server`] (actuator-svc's gRPC server): certificate, key and client CA
//!   ([`ServerTlsFiles`]) make a rustls `ServerConfig`; [`TlsReloader::watch`] polls every
//!   [`POLL_EVERY`] and each handshake takes [`TlsReloader::config`]. The accept loop that
//!   hands tonic its streams stays in actuator-svc (`grpc::incoming`): it speaks tonic's types.
//! - [`client`] (signal-svc's streams to the actuators): CA, client certificate and key
//!   ([`ClientTlsFiles`]) as checked PEM ([`ClientMaterial`]), read again at every connect with
//!   [`Reloader::refresh`] (connects are rare: start-up, failures, the periodic resync; no
//!   poller). signal-svc hands the PEM to tonic (`tls_reload::client_config`), which builds the
//!   same rustls `ClientConfig` as [`ClientTlsFiles::client_config`].

pub mod client;
pub mod server;

pub use client::{ClientMaterial, ClientTls, ClientTlsFiles};
pub use server::{ServerTlsFiles, TlsReloader};

use parking_lot::{Mutex, RwLock};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// How often the server's files are compared with what was last read. A Secret update reaches
/// the pod after the kubelet's sync period (about a minute), so a few seconds more do not
/// matter.
pub const POLL_EVERY: Duration = Duration::from_secs(2);

/// Why a set of files cannot be used. Never carries file content (keys must not reach logs).
/// `flag` is the command-line flag that names the file (`--tls-cert`, ...).
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("{flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag} {path}: {reason}")]
    Parse {
        flag: &'static str,
        path: String,
        reason: String,
    },
    #[error("TLS settings: {0}")]
    Config(String),
}

/// One shape of TLS material: which files, and what is made of their contents.
pub trait TlsFiles {
    /// What a usable set of contents becomes.
    type Material;

    /// The files, each with the flag that names it, in the order [`Self::build`] gets them.
    fn paths(&self) -> Vec<(&'static str, &Path)>;

    /// Checks file contents (in [`Self::paths`] order) and makes the material of them.
    fn build(&self, contents: &[Vec<u8>]) -> Result<Self::Material, TlsError>;
}

/// Reads every file (following symlinks, as a mounted Secret needs).
fn read(files: &impl TlsFiles) -> Result<Vec<Vec<u8>>, TlsError> {
    files
        .paths()
        .into_iter()
        .map(|(flag, path)| {
            std::fs::read(path).map_err(|source| TlsError::Read {
                flag,
                path: path.display().to_string(),
                source,
            })
        })
        .collect()
}

/// What one [`Reloader::refresh`] found.
#[derive(Debug)]
pub enum Refresh {
    Unchanged,
    Reloaded,
    /// The files changed (or cannot be read) and cannot be used; the previous material stays.
    Rejected(TlsError),
}

/// The material in use and the files it came from.
pub struct Reloader<F: TlsFiles> {
    files: F,
    current: RwLock<Arc<F::Material>>,
    /// The contents last looked at (used or rejected), so a bad set is reported once.
    seen: Mutex<Vec<Vec<u8>>>,
}

impl<F: TlsFiles + std::fmt::Debug> std::fmt::Debug for Reloader<F> {
    // Never print key material.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader")
            .field("files", &self.files)
            .finish_non_exhaustive()
    }
}

impl<F: TlsFiles> Reloader<F> {
    /// Reads and checks the files now: bad material stops start-up.
    pub fn load(files: F) -> Result<Self, TlsError> {
        let contents = read(&files)?;
        let material = files.build(&contents)?;
        Ok(Self {
            files,
            current: RwLock::new(Arc::new(material)),
            seen: Mutex::new(contents),
        })
    }

    /// Where the material is read from.
    pub fn files(&self) -> &F {
        &self.files
    }

    /// The material in use.
    pub fn current(&self) -> Arc<F::Material> {
        self.current.read().clone()
    }

    /// Re-reads the files and switches to them if they changed and are usable.
    pub fn refresh(&self) -> Refresh {
        let contents = match read(&self.files) {
            Ok(c) => c,
            // A file briefly missing (being replaced) is like a half-written one.
            Err(e) => return Refresh::Rejected(e),
        };
        let mut seen = self.seen.lock();
        if *seen == contents {
            return Refresh::Unchanged;
        }
        let result = self.files.build(&contents);
        *seen = contents;
        match result {
            Ok(material) => {
                *self.current.write() = Arc::new(material);
                Refresh::Reloaded
            }
            Err(e) => Refresh::Rejected(e),
        }
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    pub fn self_signed(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        (cert.pem(), key.serialize_pem())
    }
}
