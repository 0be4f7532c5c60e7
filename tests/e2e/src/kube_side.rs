//! The Kubernetes side of the stack: a real kube-apiserver and etcd (tests/tools/build.sh)
//! or kube-sim. Both are seeded with the same `aks-fixture` nodes and deploy/base's RBAC;
//! kubectl and the tests act as cluster admin, signal-svc holds its ServiceAccount's token.

use crate::stack::{SIGNAL_NAMESPACE, SIGNAL_SERVICE_ACCOUNT};
use anyhow::Context;
use std::path::Path;
use std::time::Duration;

/// Which API server to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum KubeKind {
    /// kube-apiserver and etcd built from their Go modules.
    Real,
    /// The embedded simulator (fault injection: latency, failures, watch drops, compaction).
    Sim,
}

impl KubeKind {
    /// The real server when its binaries are there, else kube-sim (with a hint on stderr).
    pub fn best_available() -> Self {
        match kube_real::tools::locate() {
            Ok(_) => KubeKind::Real,
            Err(missing) => {
                eprintln!("note: using the embedded kube-sim; {missing}");
                KubeKind::Sim
            }
        }
    }
}

/// A running API server of either kind.
pub enum KubeSide {
    Real(Box<kube_real::RealApiServer>),
    Sim(kube_sim::KubeSim),
}

impl std::fmt::Debug for KubeSide {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} at {}", self.kind_name(), self.url())
    }
}

/// Lifetime of signal-svc's ServiceAccount token (a projected token is an hour by default).
const TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

impl KubeSide {
    /// Starts the server, seeds it, and writes both kubeconfigs. Also returns the credential
    /// id kube-sim logs for signal-svc's token (none on a real server).
    pub async fn start(
        kind: KubeKind,
        seed: kube_sim::Seed,
        rbac: Vec<serde_json::Value>,
        admin_kubeconfig: &Path,
        signal_kubeconfig: &Path,
    ) -> anyhow::Result<(Self, Option<String>)> {
        match kind {
            KubeKind::Sim => {
                let mut seed = seed;
                seed.objects = rbac;
                let kube = kube_sim::KubeSim::start(kube_sim::Options {
                    seed,
                    security: Some(kube_sim::Security::default()),
                    ..Default::default()
                })
                .await?;
                kube.write_kubeconfig(admin_kubeconfig)?;
                let token = kube
                    .service_account_token(SIGNAL_NAMESPACE, SIGNAL_SERVICE_ACCOUNT)
                    .context("signal-svc's ServiceAccount is not among the loaded objects")?;
                kube.write_kubeconfig_as(signal_kubeconfig, &token)?;
                let credential = kube.credential_id(&token);
                Ok((KubeSide::Sim(kube), credential))
            }
            KubeKind::Real => {
                let server = kube_real::RealApiServer::start().await?;
                let admin = server.admin_client()?;
                let namespace = serde_json::json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": SIGNAL_NAMESPACE},
                });
                let mut objects = vec![namespace];
                objects.extend(rbac);
                kube_real::manifests::apply(&admin, &objects, SIGNAL_NAMESPACE).await?;
                kube_real::seed::nodes(&admin, &seed).await?;
                server.write_admin_kubeconfig(admin_kubeconfig)?;
                let token = server
                    .service_account_token(SIGNAL_NAMESPACE, SIGNAL_SERVICE_ACCOUNT, TOKEN_TTL)
                    .await?;
                server.write_token_kubeconfig(signal_kubeconfig, &token)?;
                Ok((KubeSide::Real(Box::new(server)), None))
            }
        }
    }

    pub fn url(&self) -> String {
        match self {
            KubeSide::Real(s) => s.url().to_owned(),
            KubeSide::Sim(s) => s.url(),
        }
    }

    /// Writes a kubeconfig for one more signal-svc pod: a token of its own for the same
    /// ServiceAccount (as each pod's projected token is). Returns the credential id kube-sim's
    /// request log records for it (none on a real server).
    pub async fn another_signal_kubeconfig(&self, path: &Path) -> anyhow::Result<Option<String>> {
        match self {
            KubeSide::Sim(kube) => {
                let token = kube
                    .service_account_token(SIGNAL_NAMESPACE, SIGNAL_SERVICE_ACCOUNT)
                    .context("signal-svc's ServiceAccount is not among the loaded objects")?;
                kube.write_kubeconfig_as(path, &token)?;
                Ok(kube.credential_id(&token))
            }
            KubeSide::Real(server) => {
                let token = server
                    .service_account_token(SIGNAL_NAMESPACE, SIGNAL_SERVICE_ACCOUNT, TOKEN_TTL)
                    .await?;
                server.write_token_kubeconfig(path, &token)?;
                Ok(None)
            }
        }
    }

    pub fn kind_name(&self) -> &'static str {
        match self {
            KubeSide::Real(_) => "kube-apiserver",
            KubeSide::Sim(_) => "kube-sim",
        }
    }

    /// Every request answered so far: kube-sim's request log, or the real server's audit log.
    pub fn requests(&self) -> Vec<kube_sim::RequestRecord> {
        match self {
            KubeSide::Sim(s) => s.requests(),
            KubeSide::Real(s) => s
                .requests()
                .into_iter()
                .map(|r| kube_sim::RequestRecord {
                    method: r.method,
                    path: r.path,
                    status: r.status,
                    content_type: None,
                    caller: Some(r.user),
                    // Not read from the audit log (nothing here needs them on a real server).
                    credential_id: None,
                    at: None,
                })
                .collect(),
        }
    }

    /// kube-sim's fault switches and request log; a test that needs them runs on kube-sim.
    pub fn sim(&self) -> &kube_sim::KubeSim {
        match self {
            KubeSide::Sim(s) => s,
            KubeSide::Real(_) => panic!("this needs kube-sim's fault injection: use KubeKind::Sim"),
        }
    }
}
