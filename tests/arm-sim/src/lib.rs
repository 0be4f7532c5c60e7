//! # arm-sim: a local Azure Resource Manager (Microsoft.Network) + Azure AD simulator
//!
//! Speaks the real wire protocols so the real clients (`azure_identity` 1.x, `azure_mgmt_network`
//! 0.21's generated client, and the official Python SDK) run against it unchanged. Facts it follows:
//! `/work/shared/contracts/arm.md`.
//!
//! Data flow: HTTP request → [`server`] (plain or TLS hyper 1 listener, on TCP or on streams
//! handed in: [`ArmSim::start_on`]) → [`routes`] (auth,
//! injected faults, api-version, token-bucket [`throttle`], then one handler per route) → the
//! [`store`] under one lock, writes through [`lro`] → JSON rendered by [`model`]. Writes start a long-running operation;
//! a timer completes it after the completion delay, which releases the LB lock and records each
//! admin-state change in the effective log.
//!
//! ## Modelled
//! - Backend pools (GET / PUT / DELETE / LIST with `nextLink` paging), load balancers (GET with
//!   pools embedded, whole-LB PUT), LIST NICs of a resource group, async-operation and
//!   operationResults URLs; every stable api-version from 2022-01-01 to 2026-03-01
//!   ([`API_VERSIONS`], configurable), others refused like ARM (400 `NoRegisteredProviderFound`).
//! - NIC-based pools (`backendIPConfigurations` + NIC-style `loadBalancerBackendAddresses` with
//!   GUID names) and IP-based pools (`ipAddress` entries, pool-level `virtualNetwork`);
//!   `adminState` `None|Up|Down`; readOnly handling documented in [`body`].
//! - Weak etags shared by the LB and all children, `If-Match` → 412, PUT 201/200 `Updating` with
//!   `Azure-AsyncOperation`, `Azure-AsyncNotification`, integer `Retry-After`; operations
//!   InProgress → Succeeded / Failed / Canceled (superseded); LB lock → 429
//!   `RetryableErrorDueToAnotherOperation`.
//! - Token buckets per (subscription, principal, class) plus 15x global buckets, with
//!   `x-ms-ratelimit-remaining-subscription-*` headers and 429 `SubscriptionRequestsThrottled`.
//! - Azure AD `/{tenant}/oauth2/v2.0/token` (client secret and federated assertion), OIDC
//!   discovery (for MSAL), App Service `/msi/token` and IMDS `/metadata/identity/oauth2/token`.
//! - Azure RBAC ([`rbac`]): role assignments per principal (client id or object id) and scope,
//!   built-in and custom role definitions (the `az role definition create` file format), deny
//!   assignments (AKS's node resource group lockdown), linked access checks on LB and pool PUTs
//!   (403 `LinkedAuthorizationFailed`), the `Microsoft.Authorization/permissions` API. With no
//!   role assignment configured every principal may do everything (permissive default). The
//!   `denyActions` fault still refuses actions for every principal and scope.
//! - Observation and control under `/_sim/...`: request log, effective log, pool snapshots,
//!   faults, tuning, outside writer.
//!
//! - Load-balancer structure ([`structure`]): frontends, rules, probes, NAT and outbound rules
//!   kept as written, rendered with ids, etags and ARM's back-references; a fingerprint and
//!   structure log detect whole-LB PUTs that change them; strict mode refuses those.
//!
//! ## Not modelled (yet)
//! - Other resource types (public IPs are only referenced), rule semantics (no traffic), VMSS and VM
//!   APIs (seeded scale sets are stored but not served), NIC writes.
//! - Tenant-level buckets and the Microsoft.Network per-5-minute limits; throttling of AAD.
//! - Real JWTs (tokens are opaque), certificate credentials, user-assigned managed identities
//!   beyond a single configured client id.
//! - DELETE of a pool removes it at once (no `Deleting` phase); `$expand` is ignored.
//! - The request log is bounded ([`REQUEST_LOG_CAP`]); `/_sim/...` calls are not logged.
//! - Authorization beyond [`rbac`]: cross-tenant linked resources and auxiliary tokens, ABAC
//!   conditions, group membership, Azure Policy and management locks (beyond the `policyDeny`
//!   and `readOnlyLocks` faults: one assignment denying every write, `ReadOnly` locks on
//!   resource groups), the delay before a new role assignment takes effect; the role
//!   assignment and deny assignment list APIs.

pub mod auth;
pub mod body;
pub mod errors;
pub mod faults;
pub mod lifecycle;
pub mod lro;
pub mod model;
pub mod rbac;
pub mod render;
pub mod routes;
pub mod seed;
pub mod server;
pub mod store;
pub mod structure;
pub mod throttle;
mod tls;

pub use crate::faults::Cadence;
use crate::faults::{FaultSpec, Faults, Tuning};
use crate::lro::{EffectiveEvent, Operations};
use crate::model::AdminState;
use crate::seed::Seed;
use crate::store::Store;
use crate::throttle::{Limits, Throttle};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::Arc;

pub use crate::server::StartError;

/// The Microsoft.Network stable api-versions the simulator serves by default, oldest first:
/// every one from 2022-01-01 (where `adminState` first appears) to the newest the official SDKs
/// send. Sources: the folders `specification/network/resource-manager/Microsoft.Network/stable/`
/// of Azure/azure-rest-api-specs (2022-01-01 .. 2025-07-01) and the defaults of azure-mgmt-network
/// 29.0 (2024-07-01), 30.0 (2024-10-01), 31.0 (2025-07-01), 32.0 (2025-09-01), 33.0 (2026-01-01)
/// and 33.1 (2026-03-01). Every version gets the same shapes (the load-balancer and pool schemas
/// did not change in ways the simulator renders; `Drain` is refused in all of them).
pub const API_VERSIONS: &[&str] = &[
    "2022-01-01",
    "2022-05-01",
    "2022-07-01",
    "2022-09-01",
    "2022-11-01",
    "2023-02-01",
    "2023-04-01",
    "2023-05-01",
    "2023-06-01",
    "2023-09-01",
    "2023-11-01",
    "2024-01-01",
    "2024-03-01",
    "2024-05-01",
    "2024-07-01",
    "2024-10-01",
    "2025-01-01",
    "2025-03-01",
    "2025-05-01",
    "2025-07-01",
    "2025-09-01",
    "2026-01-01",
    "2026-03-01",
];

/// Options of [`ArmSim::start`] (and of [`ArmSim::start_on`], which ignores `listen`).
#[derive(Debug, Clone)]
pub struct ArmSimOptions {
    pub listen: SocketAddr,
    /// Initial resources; the default is empty (use [`ArmSimOptions::preset`] or a seed file).
    /// Tenant and service principal default to the `aks-fixture` constants.
    pub seed: Seed,
    /// Report an `https` base URL ([`ArmSim::url`]). The port always speaks both plain HTTP and
    /// TLS with a certificate generated at start (see [`ArmSim::ca_pem`], [`ArmSim::https_url`]).
    pub tls: bool,
    pub limits: Limits,
    pub tuning: Tuning,
    pub api_versions: Vec<String>,
    /// The only `client_assertion` the token endpoint accepts for federated credentials.
    pub federated_token: String,
    /// The `X-IDENTITY-HEADER` secret of the App Service managed-identity endpoint.
    pub identity_header: String,
    /// The client id (principal) of the simulated managed identity.
    pub managed_identity_client_id: String,
    /// Its ARM resource ID (`msi_res_id`) and object ID (`object_id`).
    pub managed_identity_resource_id: String,
    pub managed_identity_object_id: String,
    /// More host names the generated TLS certificate is valid for, beside `localhost`,
    /// `127.0.0.1` and the authority's host: one simulator answering as several hosts through
    /// a dialer (a sovereign cloud's ARM and login hosts, [`ArmSim::start_on`]).
    pub tls_names: Vec<String>,
}

/// The object id of the seed's service principal when the seed names none (ARM messages name
/// a caller by client id and object id; role assignments may use either).
pub const DEFAULT_SP_OBJECT_ID: &str = "3c9f1d2e-7a4b-4e8c-b1d0-6f5e4a3b2c1d";

impl Default for ArmSimOptions {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: Seed::default(),
            tls: false,
            limits: Limits::default(),
            tuning: Tuning::default(),
            api_versions: API_VERSIONS.iter().map(|v| (*v).to_owned()).collect(),
            federated_token: "cutover-sim-federated-token".into(),
            identity_header: "cutover-sim-identity-header".into(),
            managed_identity_client_id: "0b5b9a1e-6c1f-4c3b-9a7e-3d2c1b0a9f8e".into(),
            managed_identity_resource_id: "/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/MC_rg_cluster_eastus/providers/Microsoft.ManagedIdentity/userAssignedIdentities/cluster-agentpool".into(),
            managed_identity_object_id: "5f0c7c1e-2b1a-4d3e-8f9a-0a1b2c3d4e5f".into(),
            tls_names: Vec::new(),
        }
    }
}

impl ArmSimOptions {
    /// Options with an `aks-fixture` preset as seed.
    pub fn preset(name: &str) -> Result<Self, seed::SeedError> {
        Ok(Self {
            seed: Seed::preset(name, None)?,
            ..Self::default()
        })
    }

    /// These options with the retry hints of a cadence preset (see [`Cadence`]); the default
    /// tuning is [`Cadence::Fast`].
    pub fn with_cadence(mut self, cadence: Cadence) -> Self {
        self.tuning = self.tuning.with_cadence(cadence);
        self
    }
}

/// The request log keeps at most this many records (oldest dropped first).
pub const REQUEST_LOG_CAP: usize = 100_000;

/// The largest ARM request body accepted: 4 MB (contracts/arm.md section 9, "ARM accepts
/// request bodies up to 4 MB"), counted as 4 MiB. A larger body gets 413
/// `RequestContentTooLarge` before any handler sees it, so the sandbox refuses what ARM would.
pub const MAX_REQUEST_BODY: usize = 4 * 1024 * 1024;

/// One request as the simulator saw it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// When the answer was ready (after the configured latency and the handling).
    pub time: jiff::Timestamp,
    /// When the request's head arrived.
    pub received: jiff::Timestamp,
    pub method: String,
    pub path: String,
    pub principal: Option<String>,
    pub status: u16,
    pub throttled: bool,
    pub lock_hit: bool,
    pub dropped: bool,
    /// The request body's length (a PUT's size against ARM's 4 MB limit).
    #[serde(default)]
    pub body_bytes: usize,
    /// The request's `User-Agent`.
    #[serde(default)]
    pub user_agent: Option<String>,
    /// The request's `x-ms-client-request-id`.
    #[serde(default)]
    pub client_request_id: Option<String>,
    /// Whether the request carried an `Authorization` header.
    #[serde(default)]
    pub authorization: bool,
    /// Who sent it: the connection's peer address (which replica, in a simulation).
    #[serde(default)]
    pub peer: Option<std::net::SocketAddr>,
}

/// The peer address of the connection a request came on (a request extension).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub std::net::SocketAddr);

/// Mutable state behind one lock.
#[derive(Debug)]
pub(crate) struct State {
    pub store: Store,
    pub ops: Operations,
    pub throttle: Throttle,
    pub tokens: auth::Tokens,
    pub faults: Faults,
    pub tuning: Tuning,
    pub requests: Vec<RequestRecord>,
    /// Records dropped from the front of `requests` (the log is bounded).
    pub requests_dropped: usize,
    pub structure_log: Vec<structure::StructureChange>,
    /// Load balancers deleted by an outside actor, by lower-cased name, for re-creation
    /// ([`lifecycle`]).
    pub removed_lbs: std::collections::BTreeMap<String, (store::LbKey, model::LoadBalancer)>,
    pub op_lengths: faults::OpLengths,
    /// Role and deny assignments ([`rbac`]).
    pub rbac: rbac::Rbac,
}

impl State {
    fn remove_lb(&mut self, lb: &str) -> Result<(), errors::ArmError> {
        let key = self
            .store
            .find_lb(lb)
            .ok_or_else(|| errors::ArmError::child_not_found(lb))?;
        let kept = lifecycle::remove_lb(
            &mut self.store,
            &mut self.ops,
            &key,
            self.tuning.lock_retry_after_secs,
        )?;
        self.removed_lbs
            .insert(key.lb.to_ascii_lowercase(), (key, kept));
        Ok(())
    }

    fn recreate_lb(&mut self, lb: &str) -> Result<(), String> {
        let (key, kept) = self
            .removed_lbs
            .remove(&lb.to_ascii_lowercase())
            .ok_or_else(|| format!("no removed load balancer {lb}"))?;
        lifecycle::recreate_lb(
            &mut self.store,
            &mut self.ops,
            &key,
            kept,
            jiff::Timestamp::now(),
        )
    }
}

/// Immutable configuration plus the state.
#[derive(Debug)]
pub(crate) struct Shared {
    pub base_url: String,
    pub tenant_id: String,
    pub client_id: String,
    pub client_secret: String,
    /// The service principal's object id.
    pub object_id: String,
    pub api_versions: Vec<String>,
    pub federated_token: String,
    pub identity_header: String,
    pub managed_identity_client_id: String,
    pub managed_identity_resource_id: String,
    pub managed_identity_object_id: String,
    /// Origin of the monotonic clock fed to the token buckets.
    pub origin: tokio::time::Instant,
    pub state: Mutex<State>,
}

impl Shared {
    pub fn now_secs(&self) -> f64 {
        self.origin.elapsed().as_secs_f64()
    }

    /// The object id of a token's principal (its client id): the service principal's or the
    /// managed identity's; an unknown principal is its own object id.
    pub fn object_id_of(&self, principal: &str) -> String {
        if principal.eq_ignore_ascii_case(&self.client_id) {
            self.object_id.clone()
        } else if principal.eq_ignore_ascii_case(&self.managed_identity_client_id) {
            self.managed_identity_object_id.clone()
        } else {
            principal.to_owned()
        }
    }
}

/// A running simulator.
#[derive(Debug)]
pub struct ArmSim {
    shared: Arc<Shared>,
    addr: SocketAddr,
    /// `host:port` the URLs name: the bound address, or what [`ArmSim::start_on`] was given.
    authority: String,
    ca_pem: Option<String>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// Credentials the token endpoint accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub tenant_id: String,
    pub subscription_id: String,
    pub client_id: String,
    pub client_secret: String,
}

/// A pool snapshot entry ([`ArmSim::pool`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EntrySnapshot {
    pub name: String,
    pub ip_address: Option<String>,
    pub nic_ip_configuration: Option<String>,
    /// The admin state last written (absent = unset).
    pub admin_state: Option<AdminState>,
    /// The admin state in effect.
    pub effective: AdminState,
}

/// A pool snapshot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PoolSnapshot {
    pub lb: String,
    pub pool: String,
    pub etag: String,
    pub provisioning_state: String,
    pub locked_by: Option<String>,
    pub entries: Vec<EntrySnapshot>,
}

impl ArmSim {
    /// Binds `options.listen`, seeds and starts serving.
    pub async fn start(options: ArmSimOptions) -> Result<Self, StartError> {
        server::start(options).await
    }

    /// Seeds and serves on `listener` (a TCP listener, or streams another transport hands in:
    /// the deterministic simulation's network) instead of binding `options.listen`. The URLs
    /// name `authority` (`host:port`, e.g. `arm:443`), and the TLS certificate is valid for its
    /// host too. Every connection is still plain or TLS by its first byte.
    pub async fn start_on(
        options: ArmSimOptions,
        listener: cutover_runtime::dial::Listener,
        authority: &str,
    ) -> Result<Self, StartError> {
        server::start_on(options, listener, authority).await
    }

    /// Base URL: ARM endpoint and AAD authority host (no trailing slash).
    pub fn url(&self) -> &str {
        &self.shared.base_url
    }

    /// The listener's address (for [`ArmSim::start_on`], what its listener says).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `host:port` the URLs name (the bound address unless [`ArmSim::start_on`] named another).
    pub fn authority(&self) -> &str {
        &self.authority
    }

    /// The same port over TLS (certificate for `127.0.0.1`, `localhost` and the authority's
    /// host, see [`ArmSim::ca_pem`]).
    pub fn https_url(&self) -> String {
        format!("https://{}", self.authority)
    }

    /// The AAD authority host: always https, the only scheme azure_identity 1.x accepts.
    pub fn aad_authority(&self) -> String {
        self.https_url()
    }

    /// PEM of the CA certificate to trust for TLS connections.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// Writes [`ArmSim::ca_pem`] to `path` (for `--azure-ca-file` or `SSL_CERT_FILE`).
    pub fn write_ca(&self, path: &std::path::Path) -> std::io::Result<()> {
        std::fs::write(path, self.ca_pem.as_deref().unwrap_or_default())
    }

    /// The service principal accepted by the token endpoint, and the first subscription.
    pub fn credentials(&self) -> Credentials {
        let sub = self
            .shared
            .state
            .lock()
            .store
            .subs
            .values()
            .next()
            .map(|s| s.id.clone())
            .unwrap_or_default();
        Credentials {
            tenant_id: self.shared.tenant_id.clone(),
            subscription_id: sub,
            client_id: self.shared.client_id.clone(),
            client_secret: self.shared.client_secret.clone(),
        }
    }

    pub fn tenant_id(&self) -> &str {
        &self.shared.tenant_id
    }

    /// The federated assertion accepted for the service principal's client id.
    pub fn federated_token(&self) -> &str {
        &self.shared.federated_token
    }

    /// The `IDENTITY_HEADER` value of the managed-identity endpoint.
    pub fn identity_header(&self) -> &str {
        &self.shared.identity_header
    }

    /// The App Service style managed-identity endpoint (`IDENTITY_ENDPOINT`).
    pub fn identity_endpoint(&self) -> String {
        format!("{}/msi/token", self.shared.base_url)
    }

    pub fn managed_identity_client_id(&self) -> &str {
        &self.shared.managed_identity_client_id
    }

    /// The ARM resource ID of the simulated managed identity.
    pub fn managed_identity_resource_id(&self) -> &str {
        &self.shared.managed_identity_resource_id
    }

    /// Every request so far (control calls excluded).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.state.lock().requests.clone()
    }

    /// The requests from the `from`-th ever logged on (counting those the bounded log has
    /// dropped), and the number to ask from next: a harness polling the log sees each once.
    pub fn requests_since(&self, from: usize) -> (Vec<RequestRecord>, usize) {
        let st = self.shared.state.lock();
        let total = st.requests_dropped + st.requests.len();
        let skip = from
            .saturating_sub(st.requests_dropped)
            .min(st.requests.len());
        (st.requests[skip..].to_vec(), total)
    }

    /// The effective changes from index `from` on, and the index to read from next.
    pub fn effective_since(&self, from: usize) -> (Vec<EffectiveEvent>, usize) {
        let st = self.shared.state.lock();
        let log = &st.ops.effective;
        let from = from.min(log.len());
        (log[from..].to_vec(), log.len())
    }

    /// Every admin-state change that became effective, in order.
    pub fn effective_log(&self) -> Vec<EffectiveEvent> {
        self.shared.state.lock().ops.effective.clone()
    }

    /// A snapshot of a pool, looked up by LB name in any resource group.
    pub fn pool(&self, lb: &str, pool: &str) -> Option<PoolSnapshot> {
        routes::control::snapshot(&self.shared.state.lock(), lb, pool)
    }

    /// An operation's start and end times and wire body, if known.
    pub fn operation_record(&self, op_id: &str) -> Option<lro::OperationRecord> {
        self.shared
            .state
            .lock()
            .ops
            .ops
            .get(op_id)
            .map(lro::Operation::record)
    }

    /// Every operation the simulator ran (or runs), oldest first.
    pub fn operation_records(&self) -> Vec<lro::OperationRecord> {
        let mut v: Vec<lro::OperationRecord> = self
            .shared
            .state
            .lock()
            .ops
            .ops
            .values()
            .map(lro::Operation::record)
            .collect();
        v.sort_by_key(|r| r.start_time);
        v
    }

    /// The async-operation body of an operation, if known.
    pub fn operation(&self, op_id: &str) -> Option<Value> {
        self.shared
            .state
            .lock()
            .ops
            .ops
            .get(op_id)
            .map(lro::Operation::body)
    }

    /// Injects faults (see [`FaultSpec`]).
    pub fn faults(&self, spec: FaultSpec) {
        self.shared
            .state
            .lock()
            .faults
            .apply(&spec, tokio::time::Instant::now());
    }

    /// Current tuning.
    pub fn tuning(&self) -> Tuning {
        self.shared.state.lock().tuning.clone()
    }

    /// Replaces the tuning (latencies, completion delay, Retry-After, page size, token lifetime).
    pub fn set_tuning(&self, tuning: Tuning) {
        self.shared.state.lock().tuning = tuning;
    }

    /// Switches the retry hints to a cadence preset (other tuning unchanged).
    pub fn set_cadence(&self, cadence: Cadence) {
        let mut st = self.shared.state.lock();
        st.tuning = st.tuning.clone().with_cadence(cadence);
    }

    /// Turns strict mode on or off: a whole-LB PUT that changes anything but pool entries gets
    /// 400 (see [`Tuning::strict_lb_structure`]).
    pub fn set_strict_lb_structure(&self, strict: bool) {
        self.shared.state.lock().tuning.strict_lb_structure = strict;
    }

    /// Turns the pessimistic NIC-pool mode on or off (see [`Tuning::refuse_nic_pool_puts`]).
    pub fn set_refuse_nic_pool_puts(&self, refuse: bool) {
        self.shared.state.lock().tuning.refuse_nic_pool_puts = refuse;
    }

    /// The fingerprint of a load balancer's non-pool structure (frontends, rules, probes, NAT
    /// and outbound rules, SKU, pool names; not pool members), looked up by name.
    pub fn lb_fingerprint(&self, lb: &str) -> Option<String> {
        let st = self.shared.state.lock();
        let key = st.store.find_lb(lb)?;
        st.store
            .lb(&key.sub, &key.rg, &key.lb)
            .ok()
            .map(model::LoadBalancer::fingerprint)
    }

    /// Every write that changed a load balancer's structure, in order.
    pub fn structure_log(&self) -> Vec<structure::StructureChange> {
        self.shared.state.lock().structure_log.clone()
    }

    /// Replaces the throttling limits (buckets refill to full).
    pub fn set_limits(&self, limits: Limits) {
        self.shared.state.lock().throttle.set_limits(limits);
    }

    /// Completes every running operation now (as Succeeded, or Failed if injected). With a long
    /// completion delay this gives tests exact control over when writes become effective.
    /// How many load balancer GET bodies were rendered so far (one per change, not per read).
    pub fn lb_renders(&self) -> u64 {
        self.shared.state.lock().store.lb_renders
    }

    pub fn complete_operations(&self) -> usize {
        let mut st = self.shared.state.lock();
        let st = &mut *st;
        lro::complete_running(&mut st.ops, &mut st.store, jiff::Timestamp::now())
    }

    /// Expires every issued token now.
    pub fn expire_tokens(&self) {
        self.shared
            .state
            .lock()
            .tokens
            .expire_all(jiff::Timestamp::now());
    }

    /// The outside writer: sets an entry's admin state directly (by entry name, IP address or
    /// NIC ipConfiguration ID), effective at once, new LB etag; `None` removes the property.
    pub fn outside_write(
        &self,
        lb: &str,
        pool: &str,
        entry: &str,
        value: Option<AdminState>,
    ) -> Result<(), errors::ArmError> {
        let mut st = self.shared.state.lock();
        let st = &mut *st;
        let key = st
            .store
            .find_lb(lb)
            .ok_or_else(|| errors::ArmError::child_not_found(lb))?;
        lro::outside_write(
            &mut st.store,
            &mut st.ops,
            &key,
            pool,
            entry,
            value,
            jiff::Timestamp::now(),
        )
    }

    /// An outside actor deletes load balancer `lb` (cloud-provider-azure when the last Service
    /// on it goes): refused with 429 while an operation holds it, then gone at once and kept
    /// for [`ArmSim::recreate_lb`].
    pub fn remove_lb(&self, lb: &str) -> Result<(), errors::ArmError> {
        self.shared.state.lock().remove_lb(lb)
    }

    /// A member leaves a pool the way its owner takes it out (cloud-provider-azure's pool PUT
    /// without the node, or the NIC going with its VM): refused with 429 while an operation holds
    /// the LB, then at once. `target`: the entry's IP address or NIC ipConfiguration ID.
    pub fn outside_remove_member(
        &self,
        lb: &str,
        pool: &str,
        target: &str,
    ) -> Result<usize, errors::ArmError> {
        let mut st = self.shared.state.lock();
        let st = &mut *st;
        let key = st
            .store
            .find_lb(lb)
            .ok_or_else(|| errors::ArmError::child_not_found(lb))?;
        lifecycle::remove_member(
            &mut st.store,
            &st.ops,
            &key,
            pool,
            target,
            st.tuning.lock_retry_after_secs,
        )
    }

    /// Creates a removed load balancer again, as its creator would: same structure and
    /// members, no admin state on any entry.
    pub fn recreate_lb(&self, lb: &str) -> Result<(), String> {
        self.shared.state.lock().recreate_lb(lb)
    }

    /// Another writer sets a writable pool property (as its pool PUT would, effective at once,
    /// new LB etag). Tests use it to make a load balancer as large as they need.
    pub fn outside_pool_property(
        &self,
        lb: &str,
        pool: &str,
        key: &str,
        value: Value,
    ) -> Result<(), errors::ArmError> {
        let mut st = self.shared.state.lock();
        let found = st
            .store
            .find_lb(lb)
            .ok_or_else(|| errors::ArmError::child_not_found(lb))?;
        let l = st.store.lb_mut(&found.sub, &found.rg, &found.lb)?;
        let p = l
            .pool_mut(pool)
            .ok_or_else(|| errors::ArmError::child_not_found(pool))?;
        p.props.insert(key.to_owned(), value);
        l.etag = model::new_etag();
        Ok(())
    }

    /// The service principal's object id (role assignments may name it or the client id).
    pub fn object_id(&self) -> &str {
        &self.shared.object_id
    }

    /// The managed identity's object id.
    pub fn managed_identity_object_id(&self) -> &str {
        &self.shared.managed_identity_object_id
    }

    /// The authorization configuration in force.
    pub fn rbac(&self) -> rbac::Rbac {
        self.shared.state.lock().rbac.clone()
    }

    /// Replaces the authorization configuration (role definitions, role and deny assignments);
    /// refused like ARM refuses a role definition naming an unknown action.
    pub fn set_rbac(&self, rbac: rbac::Rbac) -> Result<(), String> {
        rbac.validate()?;
        self.shared.state.lock().rbac = rbac;
        Ok(())
    }

    /// The token audiences ARM accepts (`None`, the default: any). A sovereign cloud's ARM
    /// accepts only its own (`https://management.chinacloudapi.cn`, ...); others get 401
    /// `InvalidAuthenticationTokenAudience`.
    pub fn set_accepted_audiences(&self, audiences: Option<Vec<String>>) {
        self.shared
            .state
            .lock()
            .tokens
            .set_accepted_audiences(audiences);
    }

    /// Locks a resource group down as AKS's node resource group lockdown does (a deny
    /// assignment on everything but reads, for everyone but `exempt`); returns the assignment.
    pub fn lockdown(&self, resource_group: &str, exempt: Vec<String>) -> rbac::DenyAssignment {
        let sub = self.credentials().subscription_id;
        let deny = rbac::DenyAssignment::nrg_lockdown(&sub, resource_group, exempt);
        self.shared
            .state
            .lock()
            .rbac
            .deny_assignments
            .push(deny.clone());
        deny
    }

    /// Stops accepting and waits for the accept loop to end.
    pub async fn shutdown(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ArmSim {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
