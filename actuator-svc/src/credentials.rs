//! Azure AD credentials from azure_identity 1.x, chosen as cloud-provider-azure does
//! (`config::azure_json`): workload identity > managed identity > client secret.
//!
//! - Client secret: `ClientSecretCredential`. A rotated `aadClientSecret` in the cloud-config
//!   file is picked up without a restart: the credential is rebuilt with it.
//! - Workload identity: `ClientAssertionCredential` with [`FileAssertion`], which reads the
//!   projected service-account token again whenever it changed (azure_identity's own
//!   `WorkloadIdentityCredential` re-reads it only every 10 minutes).
//! - Managed identity: `ManagedIdentityCredential` (IMDS, or the App Service endpoint when
//!   `IDENTITY_ENDPOINT` and `IDENTITY_HEADER` are set, as azure_identity decides), with the
//!   user-assigned identity `userAssignedIdentityID` names: a client ID, or an ARM resource ID
//!   (cloud-provider-azure tells them apart the same way).
//!
//! Every request goes through the project's one HTTP client ([`Transport`]); the AAD
//! authority is set as a custom cloud, so only endpoints change between Azure and the
//! simulators. Tokens are cached by azure_identity and fetched again 5 minutes before they
//! expire. A 401 from ARM makes [`Credential::invalidate`] drop the credential and its cache,
//! so the next call asks AAD again (azure_core 1.x has no `clear_cache`).

use crate::arm::TokenSource;
use crate::arm::transport::Transport;
use crate::config::azure_json::{self, CredentialChoice, EnvOverrides};
use azure_core::cloud::{CloudConfiguration, CustomConfiguration};
use azure_core::credentials::{AccessToken, Secret, TokenCredential};
use azure_core::error::{Error, ErrorKind};
use azure_core::http::{ClientMethodOptions, ClientOptions};
use azure_identity::{
    ClientAssertion, ClientAssertionCredential, ClientAssertionCredentialOptions,
    ClientSecretCredential, ClientSecretCredentialOptions, ManagedIdentityCredential,
    ManagedIdentityCredentialOptions, UserAssignedId,
};
use parking_lot::Mutex;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use url::Url;

/// A credential that cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error("aadFederatedTokenFile {path}: {source}")]
    TokenFile {
        path: String,
        source: std::io::Error,
    },
    #[error("managed identity: {0}")]
    ManagedIdentity(String),
    #[error("{0}")]
    Identity(String),
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

/// Builds the credential for `choice`; its token requests go to `authority` (AAD) or the
/// managed-identity endpoint through `http`.
pub fn build(
    choice: &CredentialChoice,
    tenant_id: &str,
    authority: &Url,
    http: Transport,
    sources: Sources,
) -> Result<Arc<Credential>, CredentialError> {
    let mut cloud = CustomConfiguration::default();
    cloud.authority_host = authority.as_str().trim_end_matches('/').to_string();
    let options = ClientOptions {
        transport: Some(azure_core::http::Transport::new(Arc::new(http))),
        cloud: Some(Arc::new(CloudConfiguration::from(cloud))),
        ..Default::default()
    };
    let kind = match choice {
        CredentialChoice::ClientSecret { client_id, secret } => Kind::ClientSecret {
            tenant_id: tenant_id.to_string(),
            client_id: client_id.clone(),
            secret: Secret::new(secret.clone()),
            file: sources.cloud_config.map(|file| {
                let mut watch = FileWatch::new(file.path.clone(), sources.reread_every);
                // The content at start-up is the one already parsed.
                let _ = watch.changed();
                (watch, file)
            }),
        },
        CredentialChoice::WorkloadIdentity {
            client_id,
            token_file,
        } => Kind::WorkloadIdentity {
            tenant_id: tenant_id.to_string(),
            client_id: client_id.clone(),
            assertion: FileAssertion::new(token_file.into(), sources.reread_every)?,
        },
        CredentialChoice::ManagedIdentity { user_assigned_id } => Kind::ManagedIdentity {
            id: user_assigned_id.as_deref().map(user_assigned),
        },
    };
    let cred = Credential {
        options,
        kind: Mutex::new(kind),
        current: Mutex::new(None),
    };
    // Fail at start-up, naming the problem, rather than at the first token request.
    cred.current().map_err(|e| match choice {
        CredentialChoice::ManagedIdentity { .. } => CredentialError::ManagedIdentity(e.to_string()),
        _ => CredentialError::Identity(e.to_string()),
    })?;
    Ok(Arc::new(cred))
}

/// `userAssignedIdentityID` as cloud-provider-azure reads it: an ARM resource ID
/// (`/subscriptions/...`) or else a client ID.
pub fn user_assigned(id: &str) -> UserAssignedId {
    if id.to_ascii_lowercase().starts_with("/subscriptions/") {
        UserAssignedId::ResourceId(id.to_string())
    } else {
        UserAssignedId::ClientId(id.to_string())
    }
}

/// What the azure_identity credential is built from.
enum Kind {
    ClientSecret {
        tenant_id: String,
        client_id: String,
        secret: Secret,
        /// The cloud-config file a rotated secret is read from, if any.
        file: Option<(FileWatch, CloudConfigFile)>,
    },
    WorkloadIdentity {
        tenant_id: String,
        client_id: String,
        assertion: FileAssertion,
    },
    ManagedIdentity {
        id: Option<UserAssignedId>,
    },
}

/// The service's credential: one azure_identity credential, rebuilt (with an empty token
/// cache) when its secret rotates or after [`Credential::invalidate`].
pub struct Credential {
    options: ClientOptions,
    kind: Mutex<Kind>,
    current: Mutex<Option<Arc<dyn TokenCredential>>>,
}

impl std::fmt::Debug for Credential {
    // Names the kind only: the secret stays out of every log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match &*self.kind.lock() {
            Kind::ClientSecret { .. } => "client secret",
            Kind::WorkloadIdentity { .. } => "workload identity",
            Kind::ManagedIdentity { .. } => "managed identity",
        };
        f.debug_struct("Credential")
            .field("kind", &kind)
            .finish_non_exhaustive()
    }
}

impl Credential {
    /// A token for `scope`, cached by azure_identity until 5 minutes before it expires.
    pub async fn token(&self, scope: &str) -> azure_core::Result<AccessToken> {
        let cred = self.current()?;
        cred.get_token(&[scope], None).await
    }

    /// Forgets the cached token (and reads rotating files again now): after a 401 the next
    /// call asks AAD for a new one.
    pub fn invalidate(&self) {
        match &mut *self.kind.lock() {
            Kind::ClientSecret {
                file: Some((watch, _)),
                ..
            } => watch.reset(),
            Kind::WorkloadIdentity { assertion, .. } => assertion.watch.lock().reset(),
            _ => {}
        }
        *self.current.lock() = None;
    }

    /// The credential in use, built or rebuilt first if needed.
    fn current(&self) -> azure_core::Result<Arc<dyn TokenCredential>> {
        let mut kind = self.kind.lock();
        let rotated = rotate_secret(&mut kind);
        let mut current = self.current.lock();
        if let Some(c) = current.as_ref().filter(|_| !rotated) {
            return Ok(c.clone());
        }
        let options = self.options.clone();
        let built: Arc<dyn TokenCredential> = match &*kind {
            Kind::ClientSecret {
                tenant_id,
                client_id,
                secret,
                ..
            } => ClientSecretCredential::new(
                tenant_id,
                client_id.clone(),
                secret.clone(),
                Some(ClientSecretCredentialOptions {
                    client_options: options,
                }),
            )?,
            Kind::WorkloadIdentity {
                tenant_id,
                client_id,
                assertion,
            } => ClientAssertionCredential::new(
                tenant_id.clone(),
                client_id.clone(),
                assertion.clone(),
                Some(ClientAssertionCredentialOptions {
                    client_options: options,
                }),
            )?,
            Kind::ManagedIdentity { id } => {
                ManagedIdentityCredential::new(Some(ManagedIdentityCredentialOptions {
                    user_assigned_id: id.clone(),
                    client_options: options,
                }))?
            }
        };
        *current = Some(built.clone());
        Ok(built)
    }
}

/// The ARM client's token source (`arm::token`): the secret's text, errors as text.
#[async_trait::async_trait]
impl TokenSource for Credential {
    async fn token(&self, scope: &str) -> Result<String, String> {
        Credential::token(self, scope)
            .await
            .map(|t| t.token.secret().to_string())
            .map_err(|e| e.to_string())
    }

    fn invalidate(&self) {
        Credential::invalidate(self)
    }
}

/// Takes a new `aadClientSecret` from the cloud-config file when it changed; true if the
/// secret in use changed. An unparsable file (being rewritten) or one that now names another
/// kind of credential is logged and the previous secret kept.
fn rotate_secret(kind: &mut Kind) -> bool {
    let Kind::ClientSecret {
        client_id,
        secret,
        file: Some((watch, file)),
        ..
    } = kind
    else {
        return false;
    };
    let Some(text) = watch.changed() else {
        return false;
    };
    let path = file.path.display();
    match azure_json::parse(&text, &file.cluster_name, &file.env) {
        Ok(cfg) => match cfg.credential {
            CredentialChoice::ClientSecret {
                client_id: id,
                secret: new,
            } => {
                *client_id = id;
                *secret = Secret::new(new);
                tracing::debug!(%path, "cloud-config read again; client secret in use");
                return true;
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
    false
}

/// The projected service-account token of workload identity, read again whenever the file
/// changed (the kubelet rotates it). An empty file is a projection being written: the
/// previous assertion stays in use. Clones share the file state.
#[derive(Clone)]
pub struct FileAssertion {
    path: PathBuf,
    watch: Arc<Mutex<FileWatch>>,
    current: Arc<Mutex<Option<Secret>>>,
}

impl std::fmt::Debug for FileAssertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileAssertion")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl FileAssertion {
    /// Reads the file now: a missing token file stops start-up, naming it.
    pub fn new(path: PathBuf, reread_every: Duration) -> Result<Self, CredentialError> {
        std::fs::read_to_string(&path).map_err(|source| CredentialError::TokenFile {
            path: path.display().to_string(),
            source,
        })?;
        Ok(Self {
            watch: Arc::new(Mutex::new(FileWatch::new(path.clone(), reread_every))),
            path,
            current: Arc::new(Mutex::new(None)),
        })
    }

    fn assertion(&self) -> Option<String> {
        let mut current = self.current.lock();
        if let Some(text) = self.watch.lock().changed()
            && !text.trim().is_empty()
        {
            *current = Some(Secret::new(text.trim().to_string()));
        }
        current.as_ref().map(|s| s.secret().to_string())
    }
}

#[async_trait::async_trait]
impl ClientAssertion for FileAssertion {
    async fn secret(&self, _: Option<ClientMethodOptions<'_>>) -> azure_core::Result<String> {
        self.assertion().ok_or_else(|| {
            Error::with_message(
                ErrorKind::Credential,
                format!("no service-account token in {}", self.path.display()),
            )
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_assigned_identity_is_a_resource_id_or_else_a_client_id() {
        let rid = "/SUBSCRIPTIONS/s/resourceGroups/rg/providers/Microsoft.ManagedIdentity/userAssignedIdentities/agentpool";
        assert!(matches!(user_assigned(rid), UserAssignedId::ResourceId(r) if r == rid));
        assert!(matches!(
            user_assigned("0b5b9a1e-6c1f-4c3b-9a7e-3d2c1b0a9f8e"),
            UserAssignedId::ClientId(c) if c == "0b5b9a1e-6c1f-4c3b-9a7e-3d2c1b0a9f8e"
        ));
    }

    #[test]
    fn the_assertion_follows_the_file_and_survives_an_empty_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        assert!(matches!(
            FileAssertion::new(path.clone(), Duration::ZERO),
            Err(CredentialError::TokenFile { .. })
        ));
        std::fs::write(&path, "first.jwt\n").unwrap();
        let a = FileAssertion::new(path.clone(), Duration::ZERO).unwrap();
        assert_eq!(a.assertion().as_deref(), Some("first.jwt"));
        std::fs::write(&path, "second.jwt").unwrap();
        assert_eq!(a.assertion().as_deref(), Some("second.jwt"));
        // The kubelet truncates before writing: the previous assertion stays.
        std::fs::write(&path, "").unwrap();
        assert_eq!(a.clone().assertion().as_deref(), Some("second.jwt"));
        // Debug never shows the assertion.
        assert!(!format!("{a:?}").contains("second.jwt"));
    }
}
