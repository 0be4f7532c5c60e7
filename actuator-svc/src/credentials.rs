//! Azure AD credentials, chosen as cloud-provider-azure does (`config::azure_json`):
//! workload identity > managed identity > client secret.
//!
//! azure_identity 0.21 covers the client secret (fixed at creation), workload identity (but
//! reads the projected token file only once) and system-assigned managed identity (IMDS, or
//! `IDENTITY_ENDPOINT` App-Service style). Small wrappers fill the gaps:
//! [`RotatingClientSecret`] takes a new `aadClientSecret` from the cloud-config file when it
//! changes, [`RotatingWorkloadIdentity`] re-reads the token file when it changes, and
//! [`UserAssignedManagedIdentity`] adds `client_id=` to the managed-identity request, which
//! 0.21 cannot express.
//!
//! Tokens are cached by azure_identity and fetched again 20 s before they expire (its
//! `TokenCache`); the managed-identity wrapper refreshes 2 minutes before.

use crate::config::azure_json::{self, CredentialChoice, EnvOverrides};
use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::error::{Error, ErrorKind};
use azure_core::{HttpClient, Method, Request, Url};
use azure_identity::{
    AppServiceManagedIdentityCredential, ClientSecretCredential, TokenCredentialOptions,
    VirtualMachineManagedIdentityCredential, WorkloadIdentityCredential,
};
use parking_lot::Mutex;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use time::OffsetDateTime;
use tokio::time::Instant;

/// A credential that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("aadFederatedTokenFile {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("IDENTITY_ENDPOINT: {0}")]
    IdentityEndpoint(String),
}

/// How often the secret-bearing files are compared with what was last read. A mounted Secret
/// or projected token changes on the kubelet's schedule (a minute or more); the check is one
/// small file read, done on the token path at most this often.
pub const REREAD_EVERY: Duration = Duration::from_secs(5);

/// Where rotating secrets are read again from.
#[derive(Clone)]
pub struct Sources {
    /// Files are re-read at most this often ([`REREAD_EVERY`] in production).
    pub reread_every: Duration,
    /// The cloud-config file and what parsing it needs: a new `aadClientSecret` in it is used
    /// for the next token request. Without it the secret is fixed.
    pub cloud_config: Option<CloudConfigFile>,
}

/// The cloud-config file, parsed again as at start-up when it changes.
#[derive(Clone)]
pub struct CloudConfigFile {
    pub path: PathBuf,
    pub cluster_name: String,
    pub env: EnvOverrides,
}

impl std::fmt::Debug for Sources {
    // `EnvOverrides` may hold the client secret: print only the path.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sources")
            .field("reread_every", &self.reread_every)
            .field("cloud_config", &self.cloud_config.as_ref().map(|c| &c.path))
            .finish()
    }
}

/// Builds the credential for `choice`.
pub fn build(
    choice: &CredentialChoice,
    tenant_id: &str,
    authority: &Url,
    http: Arc<dyn HttpClient>,
    sources: Sources,
) -> Result<Arc<dyn TokenCredential>, CredentialError> {
    let identity_endpoint = std::env::var("IDENTITY_ENDPOINT")
        .ok()
        .filter(|s| !s.is_empty());
    Ok(match choice {
        CredentialChoice::ClientSecret { client_id, secret } => {
            let cred = Arc::new(ClientSecretCredential::new(
                http.clone(),
                authority.clone(),
                tenant_id.to_string(),
                client_id.clone(),
                secret.clone(),
            ));
            match sources.cloud_config {
                None => cred,
                Some(file) => {
                    let watch = FileWatch::new(file.path.clone(), sources.reread_every);
                    Arc::new(RotatingClientSecret {
                        http,
                        authority: authority.clone(),
                        tenant_id: tenant_id.to_string(),
                        file,
                        state: Mutex::new((watch, cred)),
                    })
                }
            }
        }
        CredentialChoice::WorkloadIdentity {
            client_id,
            token_file,
        } => {
            // Fail at start-up, naming the file, rather than at the first token request.
            std::fs::read_to_string(token_file).map_err(|source| CredentialError::TokenFile {
                path: token_file.clone(),
                source,
            })?;
            Arc::new(RotatingWorkloadIdentity {
                http,
                authority: authority.clone(),
                tenant_id: tenant_id.to_string(),
                client_id: client_id.clone(),
                token_file: token_file.clone(),
                current: Mutex::new((
                    FileWatch::new(token_file.into(), sources.reread_every),
                    None,
                )),
            })
        }
        CredentialChoice::ManagedIdentity {
            user_assigned_client_id: Some(client_id),
        } => {
            let (endpoint, api_version) = match &identity_endpoint {
                Some(e) => (
                    Url::parse(e).map_err(|e| CredentialError::IdentityEndpoint(e.to_string()))?,
                    "2019-08-01",
                ),
                None => (
                    Url::parse("http://169.254.169.254/metadata/identity/oauth2/token")
                        .map_err(|e| CredentialError::IdentityEndpoint(e.to_string()))?,
                    "2018-02-01",
                ),
            };
            Arc::new(UserAssignedManagedIdentity {
                http,
                endpoint,
                api_version,
                client_id: client_id.clone(),
                cache: Mutex::new(None),
            })
        }
        CredentialChoice::ManagedIdentity {
            user_assigned_client_id: None,
        } => {
            let options = TokenCredentialOptions::from(http);
            if identity_endpoint.is_some() {
                Arc::new(
                    AppServiceManagedIdentityCredential::create(options)
                        .map_err(|e| CredentialError::IdentityEndpoint(e.to_string()))?,
                )
            } else {
                Arc::new(VirtualMachineManagedIdentityCredential::new(options))
            }
        }
    })
}

/// Notices when a file's content changes, reading it at most every `every`. Keeps only a
/// hash of the content: the files hold secrets, and this struct is printed by `Debug`.
#[derive(Debug)]
struct FileWatch {
    path: PathBuf,
    every: Duration,
    checked: Option<Instant>,
    hash: Option<u64>,
}

impl FileWatch {
    fn new(path: PathBuf, every: Duration) -> Self {
        Self {
            path,
            every,
            checked: None,
            hash: None,
        }
    }

    /// The new content when it changed since the last call that returned one (the first call
    /// always returns it). Read errors count as "no change": the previous secret stays in use.
    fn changed(&mut self) -> Option<String> {
        if self.checked.is_some_and(|at| at.elapsed() < self.every) {
            return None;
        }
        self.checked = Some(Instant::now());
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) => {
                tracing::warn!(path = %self.path.display(), error = %e, "cannot re-read a credential file; keeping the previous content");
                return None;
            }
        };
        let mut h = DefaultHasher::new();
        text.hash(&mut h);
        let hash = h.finish();
        if self.hash == Some(hash) {
            return None;
        }
        self.hash = Some(hash);
        Some(text)
    }

    /// Forgets the content, so the next call reads the file again whatever the interval.
    fn reset(&mut self) {
        self.checked = None;
        self.hash = None;
    }
}

/// A service-principal secret that follows the cloud-config file: a rotated `aadClientSecret`
/// is used from the next token request on, without a restart. An unparsable file (being
/// rewritten) or one that no longer names a client secret is logged and the previous secret
/// kept.
pub struct RotatingClientSecret {
    http: Arc<dyn HttpClient>,
    authority: Url,
    tenant_id: String,
    file: CloudConfigFile,
    state: Mutex<(FileWatch, Arc<ClientSecretCredential>)>,
}

impl std::fmt::Debug for RotatingClientSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RotatingClientSecret")
            .field("cloud_config", &self.file.path)
            .finish_non_exhaustive()
    }
}

impl RotatingClientSecret {
    fn credential(&self) -> Arc<ClientSecretCredential> {
        let mut state = self.state.lock();
        let Some(text) = state.0.changed() else {
            return state.1.clone();
        };
        let path = self.file.path.display();
        match azure_json::parse(&text, &self.file.cluster_name, &self.file.env) {
            Ok(cfg) => match cfg.credential {
                CredentialChoice::ClientSecret { client_id, secret } => {
                    state.1 = Arc::new(ClientSecretCredential::new(
                        self.http.clone(),
                        self.authority.clone(),
                        self.tenant_id.clone(),
                        client_id,
                        secret,
                    ));
                    tracing::debug!(%path, "cloud-config read again; client secret in use");
                }
                other => {
                    tracing::warn!(%path, credential = ?other, "cloud-config now names another kind of credential; a restart is needed to use it, keeping the client secret")
                }
            },
            // Once logged, the same bad content is not reported again (the hash is kept).
            Err(e) => {
                tracing::warn!(%path, error = %e, "changed cloud-config is not usable; keeping the previous client secret")
            }
        }
        state.1.clone()
    }
}

#[async_trait::async_trait]
impl TokenCredential for RotatingClientSecret {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let c = self.credential();
        c.get_token(scopes).await
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        // A 401 may mean the secret was rotated and the old one revoked: look again now.
        let c = {
            let mut state = self.state.lock();
            state.0.reset();
            state.1.clone()
        };
        c.clear_cache().await
    }
}

/// Workload identity that re-reads the projected service-account token (the kubelet rotates
/// it) when its content changes; azure_identity's own credential reads it once.
#[derive(Debug)]
pub struct RotatingWorkloadIdentity {
    http: Arc<dyn HttpClient>,
    authority: Url,
    tenant_id: String,
    client_id: String,
    token_file: String,
    current: Mutex<(FileWatch, Option<Arc<WorkloadIdentityCredential>>)>,
}

impl RotatingWorkloadIdentity {
    fn credential(&self) -> azure_core::Result<Arc<WorkloadIdentityCredential>> {
        let mut cur = self.current.lock();
        let changed = cur.0.changed().filter(|t| {
            // An empty file is a projection being written; keep the previous assertion.
            !t.trim().is_empty() || cur.1.is_none()
        });
        if let Some(assertion) = changed {
            cur.1 = Some(Arc::new(WorkloadIdentityCredential::new(
                self.http.clone(),
                self.authority.clone(),
                self.tenant_id.clone(),
                self.client_id.clone(),
                assertion.trim().to_string(),
            )));
        }
        cur.1.clone().ok_or_else(|| {
            Error::with_message(ErrorKind::Credential, || {
                format!("cannot read {}", self.token_file)
            })
        })
    }
}

#[async_trait::async_trait]
impl TokenCredential for RotatingWorkloadIdentity {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let c = self.credential()?;
        c.get_token(scopes).await
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        let c = {
            let mut cur = self.current.lock();
            cur.0.reset();
            cur.1.clone()
        };
        match c {
            Some(c) => c.clear_cache().await,
            None => Ok(()),
        }
    }
}

/// Managed identity with a user-assigned client ID (`userAssignedIdentityID`).
#[derive(Debug)]
pub struct UserAssignedManagedIdentity {
    http: Arc<dyn HttpClient>,
    endpoint: Url,
    api_version: &'static str,
    client_id: String,
    cache: Mutex<Option<AccessToken>>,
}

#[derive(serde::Deserialize)]
struct MsiToken {
    access_token: String,
    expires_on: String,
}

#[async_trait::async_trait]
impl TokenCredential for UserAssignedManagedIdentity {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        if let Some(t) = self.cache.lock().as_ref()
            && t.expires_on > OffsetDateTime::now_utc() + time::Duration::minutes(2)
        {
            return Ok(t.clone());
        }
        let resource = scopes
            .first()
            .map(|s| s.trim_end_matches("/.default"))
            .unwrap_or_default();
        let mut url = self.endpoint.clone();
        url.query_pairs_mut()
            .append_pair("api-version", self.api_version)
            .append_pair("resource", resource)
            .append_pair("client_id", &self.client_id);
        let mut req = Request::new(url, Method::Get);
        req.insert_header("metadata", "true");
        if let Ok(secret) = std::env::var("IDENTITY_HEADER") {
            req.insert_header("x-identity-header", secret);
        }
        let rsp = self.http.execute_request(&req).await?;
        let (status, _, body) = rsp.deconstruct();
        let body = body.collect().await?;
        if !status.is_success() {
            return Err(Error::with_message(ErrorKind::Credential, || {
                format!(
                    "managed identity endpoint answered {status}: {}",
                    String::from_utf8_lossy(&body)
                )
            }));
        }
        let t: MsiToken = serde_json::from_slice(&body).map_err(|e| {
            Error::with_message(ErrorKind::Credential, || {
                format!("managed identity token: {e}")
            })
        })?;
        let secs: i64 = t.expires_on.parse().map_err(|_| {
            Error::with_message(ErrorKind::Credential, || {
                "managed identity token: bad expires_on".to_string()
            })
        })?;
        let expires_on = OffsetDateTime::from_unix_timestamp(secs).map_err(|e| {
            Error::with_message(ErrorKind::Credential, || format!("expires_on: {e}"))
        })?;
        let token = AccessToken::new(Secret::new(t.access_token), expires_on);
        *self.cache.lock() = Some(token.clone());
        Ok(token)
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        *self.cache.lock() = None;
        Ok(())
    }
}
