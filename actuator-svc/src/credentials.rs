//! Azure AD credentials, chosen as cloud-provider-azure does (`config::azure_json`):
//! workload identity > managed identity > client secret.
//!
//! azure_identity 0.21 covers the client secret, workload identity (but reads the projected
//! token file only once) and system-assigned managed identity (IMDS, or `IDENTITY_ENDPOINT`
//! App-Service style). Two small wrappers fill the gaps: [`RotatingWorkloadIdentity`] re-reads
//! the token file, and [`UserAssignedManagedIdentity`] adds `client_id=` to the managed-identity
//! request, which 0.21 cannot express.

use crate::config::azure_json::CredentialChoice;
use azure_core::auth::{AccessToken, Secret, TokenCredential};
use azure_core::error::{Error, ErrorKind};
use azure_core::{HttpClient, Method, Request, Url};
use azure_identity::{
    AppServiceManagedIdentityCredential, ClientSecretCredential, TokenCredentialOptions,
    VirtualMachineManagedIdentityCredential, WorkloadIdentityCredential,
};
use parking_lot::Mutex;
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

/// Builds the credential for `choice`.
pub fn build(
    choice: &CredentialChoice,
    tenant_id: &str,
    authority: &Url,
    http: Arc<dyn HttpClient>,
) -> Result<Arc<dyn TokenCredential>, CredentialError> {
    let identity_endpoint = std::env::var("IDENTITY_ENDPOINT")
        .ok()
        .filter(|s| !s.is_empty());
    Ok(match choice {
        CredentialChoice::ClientSecret { client_id, secret } => {
            Arc::new(ClientSecretCredential::new(
                http,
                authority.clone(),
                tenant_id.to_string(),
                client_id.clone(),
                secret.clone(),
            ))
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
                current: Mutex::new(None),
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

/// Workload identity that re-reads the projected service-account token (kubelet rotates it)
/// every few minutes; azure_identity's own credential reads it once.
#[derive(Debug)]
pub struct RotatingWorkloadIdentity {
    http: Arc<dyn HttpClient>,
    authority: Url,
    tenant_id: String,
    client_id: String,
    token_file: String,
    current: Mutex<Option<(Instant, Arc<WorkloadIdentityCredential>)>>,
}

const REREAD_TOKEN_FILE: Duration = Duration::from_secs(300);

impl RotatingWorkloadIdentity {
    fn credential(&self) -> azure_core::Result<Arc<WorkloadIdentityCredential>> {
        let mut cur = self.current.lock();
        if let Some((at, c)) = cur.as_ref()
            && at.elapsed() < REREAD_TOKEN_FILE
        {
            return Ok(c.clone());
        }
        let assertion = std::fs::read_to_string(&self.token_file).map_err(|e| {
            Error::with_message(ErrorKind::Credential, || {
                format!("read {}: {e}", self.token_file)
            })
        })?;
        let c = Arc::new(WorkloadIdentityCredential::new(
            self.http.clone(),
            self.authority.clone(),
            self.tenant_id.clone(),
            self.client_id.clone(),
            assertion.trim().to_string(),
        ));
        *cur = Some((Instant::now(), c.clone()));
        Ok(c)
    }
}

#[async_trait::async_trait]
impl TokenCredential for RotatingWorkloadIdentity {
    async fn get_token(&self, scopes: &[&str]) -> azure_core::Result<AccessToken> {
        let c = self.credential()?;
        c.get_token(scopes).await
    }

    async fn clear_cache(&self) -> azure_core::Result<()> {
        *self.current.lock() = None;
        Ok(())
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
