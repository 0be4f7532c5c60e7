//! Where the real binaries are: `KUBEBUILDER_ASSETS` when set (controller-runtime's envtest
//! convention), else `target/tools/bin/` of this workspace, as `tests/tools/build.sh` leaves it.

use std::path::{Path, PathBuf};

/// Paths of the three binaries the harness runs.
#[derive(Debug, Clone)]
pub struct Tools {
    pub etcd: PathBuf,
    pub kube_apiserver: PathBuf,
    pub kubectl: PathBuf,
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the real Kubernetes binaries are missing ({missing}) in {dir}: run `bash tests/tools/build.sh` \
     (builds them from their Go modules) or set KUBEBUILDER_ASSETS to a folder holding etcd, \
     kube-apiserver and kubectl"
)]
pub struct ToolsMissing {
    pub dir: String,
    pub missing: String,
}

/// `target/tools/bin` of the workspace this crate belongs to.
pub fn default_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/tools/bin")
}

/// The folder the binaries are taken from.
pub fn dir() -> PathBuf {
    match std::env::var_os("KUBEBUILDER_ASSETS") {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => default_dir(),
    }
}

/// Finds the binaries, or says how to get them.
pub fn locate() -> Result<Tools, ToolsMissing> {
    let dir = dir();
    let found = |name: &str| {
        let p = dir.join(name);
        p.is_file().then_some(p)
    };
    match (found("etcd"), found("kube-apiserver"), found("kubectl")) {
        (Some(etcd), Some(kube_apiserver), Some(kubectl)) => Ok(Tools {
            etcd,
            kube_apiserver,
            kubectl,
        }),
        (e, a, k) => {
            let missing: Vec<&str> = [("etcd", e), ("kube-apiserver", a), ("kubectl", k)]
                .into_iter()
                .filter(|(_, p)| p.is_none())
                .map(|(n, _)| n)
                .collect();
            Err(ToolsMissing {
                dir: dir.display().to_string(),
                missing: missing.join(", "),
            })
        }
    }
}

/// True when the binaries are there (the sandbox chooses its Kubernetes side with this).
pub fn available() -> bool {
    locate().is_ok()
}
