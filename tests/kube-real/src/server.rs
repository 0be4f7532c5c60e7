//! One control plane: etcd plus kube-apiserver, started, waited for, and torn down on drop.

use crate::kubeconfig;
use crate::pki::{self, Pki};
use crate::tools::{self, Tools, ToolsMissing};
use cutover_testkit::Guarded;
use cutover_testkit::ports::{free_port, lost_its_port};
use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long the API server may take to become ready (a cold start on 2 busy cores).
const READY_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Missing(#[from] ToolsMissing),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("{name} exited during start-up ({status}); its log, {log}, ends with:\n{tail}")]
    Exited {
        name: String,
        status: String,
        log: String,
        tail: String,
    },
    #[error("kube-apiserver was not ready within {0:?}; see {1}")]
    NotReady(Duration, String),
    #[error("kube client: {0}")]
    Client(String),
}

/// A running etcd and kube-apiserver on loopback.
#[derive(Debug)]
pub struct RealApiServer {
    tools: Tools,
    pki: Pki,
    url: String,
    // Declared before `dir` so both processes die before their data directory goes.
    apiserver: Guarded,
    etcd: Guarded,
    dir: tempfile::TempDir,
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> StartError {
    let what = what.into();
    move |source| StartError::Io { what, source }
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

fn etcd_args(dir: &Path, client: u16, peer: u16) -> Vec<String> {
    let client = format!("http://127.0.0.1:{client}");
    let peer = format!("http://127.0.0.1:{peer}");
    vec![
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client}"),
        format!("--advertise-client-urls={client}"),
        format!("--listen-peer-urls={peer}"),
        format!("--initial-advertise-peer-urls={peer}"),
        format!("--initial-cluster=default={peer}"),
        // Test data: durability across a power cut is not needed, speed is.
        "--unsafe-no-fsync=true".into(),
        "--log-level=warn".into(),
    ]
}

/// Every request at Metadata level, written when the response is complete (watches also when
/// their response starts, so a long-running watch is seen before it ends).
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
  - level: Metadata
"#;

fn apiserver_args(pki: &Pki, dir: &Path, etcd: u16, port: u16) -> Vec<String> {
    vec![
        format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ),
        format!("--audit-log-path={}", dir.join("audit.log").display()),
        "--audit-log-format=json".into(),
        "--audit-log-mode=blocking".into(),
        format!("--etcd-servers=http://127.0.0.1:{etcd}"),
        "--bind-address=127.0.0.1".into(),
        format!("--secure-port={port}"),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--client-ca-file={}", pki.ca_cert.display()),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", pki.sa_pub.display()),
        format!(
            "--service-account-signing-key-file={}",
            pki.sa_key.display()
        ),
        // AKS authorizes with Node and RBAC; no kubelet talks to this server, so RBAC alone.
        "--authorization-mode=RBAC".into(),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--allow-privileged=true".into(),
        // The `kubernetes` Service's endpoints would need a non-loopback address.
        "--endpoint-reconciler-type=none".into(),
        "--v=0".into(),
    ]
}

impl RealApiServer {
    /// Starts etcd and kube-apiserver and waits until `/readyz` answers 200. A start whose
    /// port was taken between the check and the bind is tried again on other ports.
    pub async fn start() -> Result<Self, StartError> {
        const ATTEMPTS: usize = 3;
        let mut attempt = 1;
        loop {
            match Self::start_once().await {
                Err(StartError::Exited { tail, .. })
                    if attempt < ATTEMPTS && lost_its_port(&tail) =>
                {
                    attempt += 1;
                }
                other => return other,
            }
        }
    }

    async fn start_once() -> Result<Self, StartError> {
        let tools = tools::locate()?;
        let dir = tempfile::Builder::new()
            .prefix("kube-real-")
            .tempdir()
            .map_err(io("temp dir"))?;
        let pki = pki::generate(dir.path()).map_err(io("certificates"))?;
        std::fs::write(dir.path().join("audit-policy.yaml"), AUDIT_POLICY)
            .map_err(io("audit policy"))?;
        let (etcd_port, peer_port, api_port) = (
            free_port().map_err(io("port"))?,
            free_port().map_err(io("port"))?,
            free_port().map_err(io("port"))?,
        );
        let etcd_log = dir.path().join("etcd.log");
        let etcd = Guarded::spawn(
            "etcd",
            &tools.etcd,
            &etcd_args(dir.path(), etcd_port, peer_port),
            &etcd_log,
        )
        .map_err(io("start etcd"))?;
        let api_log = dir.path().join("kube-apiserver.log");
        let apiserver = Guarded::spawn(
            "kube-apiserver",
            &tools.kube_apiserver,
            &apiserver_args(&pki, dir.path(), etcd_port, api_port),
            &api_log,
        )
        .map_err(io("start kube-apiserver"))?;
        let mut server = RealApiServer {
            tools,
            pki,
            url: format!("https://127.0.0.1:{api_port}"),
            apiserver,
            etcd,
            dir,
        };
        let started = Instant::now();
        loop {
            server.fail_if_exited()?;
            if server.ready().await {
                return Ok(server);
            }
            if started.elapsed() > READY_TIMEOUT {
                return Err(StartError::NotReady(
                    READY_TIMEOUT,
                    server.apiserver_log().display().to_string(),
                ));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn fail_if_exited(&mut self) -> Result<(), StartError> {
        let logs = [
            self.dir.path().join("etcd.log"),
            self.dir.path().join("kube-apiserver.log"),
        ];
        for (p, log) in [&mut self.etcd, &mut self.apiserver].into_iter().zip(logs) {
            if let Some(status) = p.exited() {
                return Err(StartError::Exited {
                    name: p.name().to_owned(),
                    status: status.to_string(),
                    log: log.display().to_string(),
                    tail: tail(&log),
                });
            }
        }
        Ok(())
    }

    async fn ready(&self) -> bool {
        let Ok(client) = self.admin_client() else {
            return false;
        };
        let req = http_get("/readyz");
        matches!(client.request_text(req).await, Ok(body) if body.trim() == "ok")
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn ca_pem(&self) -> &str {
        &self.pki.ca_pem
    }

    pub fn ca_der(&self) -> &[u8] {
        &self.pki.ca_der
    }

    pub fn tools(&self) -> &Tools {
        &self.tools
    }

    /// The working directory: PKI, etcd data, both logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// kube-apiserver's log (for failure messages).
    pub fn apiserver_log(&self) -> PathBuf {
        self.dir.path().join("kube-apiserver.log")
    }

    /// A cluster-admin client (client certificate in `system:masters`).
    pub fn admin_client(&self) -> Result<kube::Client, StartError> {
        let config = kubeconfig::admin_config(self);
        kube::Client::try_from(config).map_err(|e| StartError::Client(e.to_string()))
    }

    /// Writes an admin kubeconfig (client certificate), as `kubectl` and tools use it.
    pub fn write_admin_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        kubeconfig::write_admin(self, path)
    }

    /// Writes a kubeconfig that authenticates with `token` (a ServiceAccount's).
    pub fn write_token_kubeconfig(&self, path: &Path, token: &str) -> std::io::Result<()> {
        kubeconfig::write_token(self, path, token)
    }

    pub(crate) fn admin_identity_pem(&self) -> (&str, &str) {
        (&self.pki.admin_cert_pem, &self.pki.admin_key_pem)
    }

    /// Creates the ServiceAccount if needed and issues a token for it through TokenRequest,
    /// as the kubelet does for a projected volume.
    pub async fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
        ttl: Duration,
    ) -> Result<String, kube::Error> {
        let client = self
            .admin_client()
            .map_err(|e| kube::Error::Service(e.to_string().into()))?;
        let sas: Api<ServiceAccount> = Api::namespaced(client, namespace);
        if sas.get_opt(name).await?.is_none() {
            let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": namespace}
            }))
            .map_err(kube::Error::SerdeError)?;
            match sas.create(&PostParams::default(), &sa).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(e),
            }
        }
        let req = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": ttl.as_secs()},
        });
        let issued: TokenRequest = sas
            .create_subresource("token", name, &PostParams::default(), &req)
            .await?;
        Ok(issued.status.and_then(|s| s.token).unwrap_or_default())
    }

    /// Every request the server has answered so far, from its audit log, in order.
    pub fn requests(&self) -> Vec<crate::audit::Request> {
        crate::audit::read(&self.dir.path().join("audit.log"))
    }

    /// Stops kube-apiserver (SIGTERM first, as a graceful shutdown would).
    pub fn stop(self) {
        self.apiserver.signal_group("TERM");
        drop(self);
    }

    /// The etcd process (kept for tests that stop the store under the API server).
    pub fn etcd(&self) -> &Guarded {
        &self.etcd
    }
}

fn http_get(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path)
        .body(Vec::new())
        .unwrap_or_default()
}
