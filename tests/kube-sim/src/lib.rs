//! `kube-sim`: a Kubernetes API server simulator for the subset cutover uses (Nodes, core/v1
//! and events.k8s.io/v1 Events, coordination.k8s.io/v1 Leases), speaking the real wire
//! protocol so kube-rs 5 and kubectl 1.32 work against it unchanged. The facts it follows are
//! in `shared/contracts/kube.md`.
//!
//! Data flow: hyper HTTP/1.1 (`server`) → path routing (`router`) → fault injection and the
//! request log (`faults`, `control`) → handlers (`handlers`, `watch`) → the store
//! (`store`: objects, one global resourceVersion, change history) with paging snapshots
//! (`list`). Pure logic (store, selectors, patches, event views, validation, paging) is
//! unit-tested without network.
//!
//! # Running
//!
//! Binary: `kube-sim --listen 127.0.0.1:0 [--seed FILE | --preset aks|aks-ip|aks-multi-slb
//! [--preset-nodes N]] [--kubeconfig PATH] [--bookmark-seconds S] [--secure]
//! [--token-auth-file FILE]`. The first stdout line is `listening on http(s)://ADDR`;
//! `--kubeconfig` writes a kubeconfig for kubectl and kube-rs (with `--secure`: the CA and
//! an admin token in `system:masters`).
//! The seed file format is documented in [`seed`] (example: `examples/seed.yaml`). Fault
//! injection over HTTP is documented in [`control`].
//!
//! Library (in-process, for other crates' tests):
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! use kube_sim::{FailRule, KubeSim, Options, Seed};
//! let sim = KubeSim::start(Options { seed: Seed::preset("aks", 12)?, ..Options::default() }).await?;
//! let url = sim.url(); // http://127.0.0.1:PORT, e.g. for kube::Config::new
//! sim.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"))?;
//! sim.fail_next(FailRule::new(503, 3).path_prefix("/api/v1/nodes"));
//! sim.close_watches();
//! sim.compact();
//! let patches = sim.requests().iter().filter(|r| r.method == "PATCH").count();
//! sim.shutdown().await;
//! # let _ = (url, patches); Ok(()) }
//! ```
//!
//! [`KubeSim::start_on`] serves the same API from any [`Listener`] (the streams a simulated
//! network hands in, no socket) and reports the URL it is given.
//!
//! # Covered
//! - Discovery: `/version`, `/api`, `/api/v1`, `/apis`, `/apis/{events.k8s.io,coordination.k8s.io}[/v1]`
//!   (legacy documents; kubectl falls back to them), and
//!   `/apis/rbac.authorization.k8s.io[/v1]`.
//! - OpenAPI v3 (`/openapi/v3` index and one document per group-version) and v2
//!   (`/openapi/v2`, JSON only), generated from k8s-openapi's schemas (see [`openapi`]).
//! - Nodes: list, get, watch, create, replace, patch, delete; `/status` get/replace/patch
//!   (the main resource keeps the stored status, `/status` keeps the stored spec).
//! - Events: one store, two views (core/v1, events.k8s.io/v1) with the field mapping of the
//!   real conversion; legacy validation for core/v1, strict validation for events.k8s.io
//!   creates, immutability for events.k8s.io updates.
//! - Leases: get, list, create, replace (RV required, create-on-update), patch, delete.
//! - ServiceAccounts (core/v1) and rbac.authorization.k8s.io/v1 Roles, ClusterRoles,
//!   RoleBindings, ClusterRoleBindings: the same verbs as the other kinds.
//! - One global resourceVersion; no-op writes do not bump it. Lists with `limit`/`continue`
//!   over a snapshot (all pages report the snapshot RV; expired token → 410), exact-RV lists
//!   rebuilt from history. Watches from unset/`0`/N with replay, too-old RV as HTTP 200 +
//!   in-stream ERROR 410, bookmarks (periodic and 2 s before the deadline), `timeoutSeconds`,
//!   `sendInitialEvents` with the `k8s.io/initial-events-end` bookmark and its 422 rules.
//! - Patches: JSON merge (RFC 7386), strategic merge (taints atomic; addresses/conditions by
//!   `type`; directives), JSON patch (RFC 6902, `test` failure → 422), RV/uid preconditions
//!   in bodies (409 with the real Status), apply as documented below.
//! - Field selectors (nodes: `metadata.name`, `spec.unschedulable`; events: contracts 2.8,
//!   both views) and label selectors (`=`, `==`, `!=`, `in`, `notin`, exists, `!`, `>`, `<`);
//!   other fields → 400 `field label not supported: X`.
//! - Status bodies as apimachinery builds them (NotFound, AlreadyExists, Conflict, Invalid,
//!   Expired, BadRequest, UnsupportedMediaType, MethodNotAllowed, TooManyRequests).
//! - Fault injection (methods on [`KubeSim`] and `/_sim/...`, see [`control`]).
//! - kubectl: `get` (server-side Table printing for nodes, events, leases, also on watches),
//!   `describe node` (pods read as an empty list), `taint`, `cordon`, `label`, `delete`,
//!   `get events -A`, and with no extra flags `create -f`, `apply -f` (client-side),
//!   `replace -f`, `edit` and `explain`.
//!
//! - With [`Security`] (`--secure`): HTTPS with the simulator's own CA, bearer tokens (static
//!   entries, ServiceAccount tokens from [`KubeSim::service_account_token`]; unknown token →
//!   401 `Unauthorized`; none → `system:anonymous`) and RBAC on every request from the
//!   stored Roles, ClusterRoles and bindings (403 with kube-apiserver's Status body and
//!   message), `system:masters` as the admin group, the default discovery policy seeded.
//!   Without it: plain HTTP, every caller may do everything.
//!
//! # Not covered
//! - Other authenticators (client certificates, OIDC, JWT verification of ServiceAccount
//!   tokens: tokens are opaque), impersonation, the TokenRequest and
//!   SubjectAccessReview APIs, RBAC escalation checks on role writes, aggregated ClusterRoles.
//! - `fieldValidation=Strict`: unknown fields are dropped silently, never rejected; only the
//!   types of the fields listed in `objects` are checked.
//! - Server-side apply field ownership: apply merges the applied configuration into the live
//!   object (creating it if missing), requires `fieldManager`, accepts `force`, but keeps no
//!   `managedFields`, so it never reports ownership conflicts and never prunes fields.
//! - Other resources (pods, namespaces are read-only and empty), protobuf, aggregated
//!   discovery, OpenAPI patch-strategy extensions, `deletecollection`, graceful deletion and finalizers,
//!   event TTL, watch-cache "too large RV" waits (answered with 504 at once), HTTP/2, TLS.
//! - Bookmarks are sent on event watches too (a real server serves events uncached, from
//!   etcd, without periodic bookmarks); kube-runtime handles either.

pub mod auth;
pub mod conditions;
pub mod control;
pub mod discovery;
pub mod events;
pub mod faults;
pub mod handlers;
pub mod kubeconfig;
pub mod list;
pub mod objects;
pub mod openapi;
pub mod params;
pub mod patch;
pub mod resource;
pub mod router;
pub mod seed;
pub mod selectors;
pub mod server;
pub mod status;
pub mod store;
pub mod table;
pub mod tls;
pub mod watch;

pub use auth::{Security, TokenEntry, User};
/// What [`KubeSim::start_on`] serves from.
pub use cutover_runtime::dial::Listener;
pub use faults::{FailRule, RequestRecord};
pub use seed::{Seed, SeedError};

use list::Pager;
use parking_lot::Mutex;
use server::{Shared, State, Tunables};
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use store::Store;
use tokio::net::TcpListener;
use tokio::sync::watch as signal;
use tokio::task::JoinHandle;

/// The user name of [`KubeSim::admin_token`].
pub const ADMIN_USER: &str = "kube-sim-admin";

/// How to start a simulator.
#[derive(Debug, Clone)]
pub struct Options {
    /// Address to bind; port 0 picks a free one.
    pub listen: SocketAddr,
    /// Initial contents.
    pub seed: Seed,
    /// Interval of periodic watch bookmarks (the real server: about a minute).
    pub bookmark_interval: Duration,
    /// Watch length when a client sends no `timeoutSeconds` (the real server: 30-60 min).
    pub default_watch_timeout: Duration,
    /// Changes kept for watch replay (all kinds together); older RVs are too old (410).
    /// A real API server keeps about 75 s of node changes in its watch cache.
    pub history_limit: usize,
    /// TLS, authentication and RBAC; `None` serves plain HTTP to anyone (every caller may
    /// do everything, and the bearer token only names the caller in the request log).
    pub security: Option<Security>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            seed: Seed::default(),
            bookmark_interval: Duration::from_secs(60),
            default_watch_timeout: Duration::from_secs(1800),
            history_limit: 10_000,
            security: None,
        }
    }
}

/// Failure to start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the listener's address: {0}")]
    Address(std::io::Error),
    #[error("server URL {url}: {reason}")]
    Url { url: String, reason: String },
    #[error(transparent)]
    Seed(#[from] SeedError),
    #[error(transparent)]
    Tls(#[from] tls::TlsError),
}

/// A running simulator. Dropping it without [`KubeSim::shutdown`] aborts the server task.
#[derive(Debug)]
pub struct KubeSim {
    shared: Arc<Shared>,
    stop: signal::Sender<bool>,
    task: Option<JoinHandle<()>>,
}

impl KubeSim {
    /// Binds, seeds the store and starts serving.
    pub async fn start(options: Options) -> Result<KubeSim, StartError> {
        let listener =
            TcpListener::bind(options.listen)
                .await
                .map_err(|source| StartError::Bind {
                    addr: options.listen,
                    source,
                })?;
        let address = listener.local_addr().map_err(|source| StartError::Bind {
            addr: options.listen,
            source,
        })?;
        let scheme = if options.security.is_some() {
            "https"
        } else {
            "http"
        };
        let url = format!("{scheme}://{address}");
        Self::launch(options, Listener::from(listener), url, None)
    }

    /// Seeds the store and serves the connections `listener` accepts (any transport: TCP,
    /// or the streams a simulated network hands in), the same API as [`KubeSim::start`].
    /// `options.listen` is not used; [`KubeSim::url`] answers `url` (`http://HOST:PORT`, or
    /// `https://...` with [`Security`], whose serving certificate then also names `HOST`) and
    /// [`KubeSim::address`] the listener's local address.
    pub async fn start_on(
        options: Options,
        listener: Listener,
        url: String,
    ) -> Result<KubeSim, StartError> {
        let host = url::Url::parse(&url)
            .map_err(|e| StartError::Url {
                url: url.clone(),
                reason: e.to_string(),
            })?
            .host_str()
            .map(|h| h.trim_start_matches('[').trim_end_matches(']').to_string())
            .ok_or_else(|| StartError::Url {
                url: url.clone(),
                reason: "no host".into(),
            })?;
        Self::launch(options, listener, url, Some(host))
    }

    /// Seeds the store and spawns the server on `listener`; with security, the serving
    /// certificate also names `server_name`.
    fn launch(
        options: Options,
        listener: Listener,
        url: String,
        server_name: Option<String>,
    ) -> Result<KubeSim, StartError> {
        let address = listener.local_addr().map_err(StartError::Address)?;
        let mut store = Store::new(options.history_limit);
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        let security = match &options.security {
            None => None,
            Some(config) => {
                for object in auth::rbac::bootstrap_policy() {
                    seed::apply_object(&mut store, &object, &now)?;
                }
                let mut tokens = auth::Authenticator::default();
                for entry in &config.tokens {
                    tokens.add(entry.clone());
                }
                let admin_token = uuid::Uuid::new_v4().simple().to_string();
                tokens.add(TokenEntry::new(
                    &admin_token,
                    ADMIN_USER,
                    &[auth::tokens::MASTERS],
                ));
                Some(server::SecurityState {
                    tls: tls::generate(server_name.as_deref())?,
                    tokens: Mutex::new(tokens),
                    admin_token,
                })
            }
        };
        options.seed.apply(&mut store, &now)?;
        let rv = store.current_rv();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                store,
                pager: Pager::new(64),
            }),
            rv: signal::Sender::new(rv),
            close_watches: signal::Sender::new(0),
            watches_paused: signal::Sender::new(false),
            faults: Mutex::new(faults::Faults::default()),
            tunables: Tunables {
                bookmark_interval: options.bookmark_interval,
                default_watch_timeout: options.default_watch_timeout,
            },
            address,
            url,
            security,
        });
        let (stop, stop_rx) = signal::channel(false);
        let task = tokio::spawn(server::serve(listener, shared.clone(), stop_rx));
        Ok(KubeSim {
            shared,
            stop,
            task: Some(task),
        })
    }

    /// `http://ADDR`, or `https://ADDR` with [`Security`]: the cluster server URL.
    /// (What [`KubeSim::start_on`] was given, when started that way.)
    pub fn url(&self) -> String {
        self.shared.url.clone()
    }

    /// The cluster CA (PEM) clients must trust, with [`Security`].
    pub fn ca_pem(&self) -> Option<String> {
        self.shared.security.as_ref().map(|s| s.tls.ca_pem.clone())
    }

    /// A token of the built-in admin ([`ADMIN_USER`], group `system:masters`), with
    /// [`Security`].
    pub fn admin_token(&self) -> Option<String> {
        self.shared.security.as_ref().map(|s| s.admin_token.clone())
    }

    /// Makes `entry.token` authenticate `entry.user` (no effect without [`Security`]).
    pub fn add_token(&self, entry: TokenEntry) {
        if let Some(s) = &self.shared.security {
            s.tokens.lock().add(entry);
        }
    }

    /// The credential id the request log records for `token` (see
    /// [`RequestRecord::credential_id`]), if it is a token this server issued with one.
    pub fn credential_id(&self, token: &str) -> Option<String> {
        let security = self.shared.security.as_ref()?;
        let user = security
            .tokens
            .lock()
            .authenticate(Some(&format!("Bearer {token}")))
            .ok()?;
        user.credential_id
    }

    /// Issues a token for the ServiceAccount `namespace/name`, which must exist: requests
    /// with it are `system:serviceaccount:<namespace>:<name>` in the groups
    /// `system:serviceaccounts` and `system:serviceaccounts:<namespace>`.
    pub fn service_account_token(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<String, status::ApiError> {
        let key = resource::Key::new(resource::Kind::ServiceAccount, namespace, name);
        let uid = {
            let state = self.shared.state.lock();
            let sa = state.store.get(&key).ok_or_else(|| {
                status::ApiError::not_found(resource::View::ServiceAccount.resource(), name)
            })?;
            sa["metadata"]["uid"].as_str().unwrap_or("").to_string()
        };
        let token = uuid::Uuid::new_v4().simple().to_string();
        let mut user = User::service_account(namespace, name, &uid);
        user.credential_id = Some(format!("JTI={}", uuid::Uuid::new_v4()));
        self.add_token(TokenEntry {
            token: token.clone(),
            user,
        });
        Ok(token)
    }

    /// Stores manifests of served kinds (as [`Seed::objects`]), e.g. RBAC objects.
    pub fn create_objects(&self, objects: &[serde_json::Value]) -> Result<(), SeedError> {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        {
            let mut state = self.shared.state.lock();
            for o in objects {
                seed::apply_object(&mut state.store, o, &now)?;
            }
        }
        self.shared.notify();
        Ok(())
    }

    /// The bound address (the listener's local address).
    pub fn address(&self) -> SocketAddr {
        self.shared.address
    }

    /// Writes a kubeconfig for this simulator (usable by kubectl and kube-rs); with
    /// [`Security`] it carries the CA and the admin's token.
    pub fn write_kubeconfig(&self, path: &Path) -> std::io::Result<()> {
        let token = self
            .admin_token()
            .unwrap_or_else(|| kubeconfig::TOKEN.to_string());
        self.write_kubeconfig_as(path, &token)
    }

    /// Writes a kubeconfig whose bearer token is `token` (and the CA, with [`Security`]).
    /// Without [`Security`] the token itself names the caller in [`RequestRecord::caller`];
    /// with it, the authenticated user's name does.
    pub fn write_kubeconfig_as(&self, path: &Path, token: &str) -> std::io::Result<()> {
        std::fs::write(
            path,
            kubeconfig::render_with(&self.url(), token, self.ca_pem().as_deref()),
        )
    }

    /// Ends every open watch cleanly; clients re-watch from their last RV.
    pub fn close_watches(&self) {
        self.shared.close_all_watches();
    }

    /// Holds new watch requests until [`KubeSim::resume_watches`] (open watches continue).
    /// With [`KubeSim::close_watches`] this makes a deterministic watch outage.
    pub fn pause_watches(&self) {
        self.shared.watches_paused.send_replace(true);
    }

    /// Serves held and new watch requests again.
    pub fn resume_watches(&self) {
        self.shared.watches_paused.send_replace(false);
    }

    /// Forgets history: watches, exact lists and continue tokens from older RVs get 410.
    pub fn compact(&self) {
        self.shared.compact();
    }

    /// Delays every Kubernetes request by `latency`.
    pub fn set_latency(&self, latency: Duration) {
        self.shared.faults.lock().set_latency(latency);
    }

    /// Fails the next matching requests (see [`FailRule`]).
    pub fn fail_next(&self, rule: FailRule) {
        self.shared.faults.lock().add_rule(rule);
    }

    /// Drops pending failure rules.
    pub fn clear_failures(&self) {
        self.shared.faults.lock().clear_rules();
    }

    /// Every Kubernetes request served so far (control requests excluded).
    pub fn requests(&self) -> Vec<RequestRecord> {
        self.shared.faults.lock().requests()
    }

    /// The requests served from index `from` on, and the index to read from next (for a
    /// harness that polls the log as it grows).
    pub fn requests_since(&self, from: usize) -> (Vec<RequestRecord>, usize) {
        self.shared.faults.lock().requests_since(from)
    }

    /// Node condition changes from index `from` on, and the index to read from next.
    pub fn condition_log_since(&self, from: usize) -> (Vec<conditions::ConditionChange>, usize) {
        self.shared.state.lock().store.conditions().since(from)
    }

    pub fn clear_requests(&self) {
        self.shared.faults.lock().clear_requests();
    }

    /// Every change of Node conditions of type `kind` (all when None), stamped when
    /// committed ([`conditions::ConditionLog`]).
    pub fn condition_log(&self, kind: Option<&str>) -> Vec<conditions::ConditionChange> {
        self.shared.state.lock().store.conditions().of_type(kind)
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.shared.state.lock().store.current_rv()
    }

    /// Stops accepting, closes watches and drops open connections.
    pub async fn shutdown(mut self) {
        self.resume_watches();
        self.shared.close_all_watches();
        self.stop.send_replace(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for KubeSim {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}
