//! Wiring: builds the client, binds the admin port, spawns every task, drains on shutdown.

use crate::config::{Config, Discovery};
use crate::core::dispatch::Dispatcher;
use crate::core::index::NodeIndex;
use crate::core::taints::TriggerSet;
use crate::k8s::watch;
use crate::leadership::election as leader;
use crate::leadership::election::LeaseConfig;
use crate::shared::{Core, Shared};
use crate::stream;
use crate::stream::StreamConfig;
use crate::stream::discovery;
use crate::writers::{events, gate, taint};
use cutover_runtime::admin::{self, Admin, Connections, Style};
use cutover_runtime::dial::{Dialer, Listener};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{mpsc, watch as tokio_watch};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("--kubeconfig {path}: {reason}")]
    Kubeconfig { path: String, reason: String },
    #[error("kubernetes client: {0}")]
    Client(String),
    #[error("--admin-listen {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("task {0} stopped unexpectedly")]
    TaskDied(&'static str),
}

/// A bound, not yet running instance (tests read the admin address before running it).
pub struct Service {
    config: Config,
    client: kube::Client,
    /// For the Lease and the drain gate: without kube's built-in retry of 429/503/504, which
    /// waits out `Retry-After` inside one call and then sends the same request again. The
    /// election retries on its own schedule, bounded by the time left before its renew
    /// deadline; the gate writer decides again from the current state before it retries (a
    /// condition re-sent as decided a second earlier may no longer be true: dst seed 3192).
    lease_client: kube::Client,
    listener: Listener,
    admin_addr: SocketAddr,
    /// Opens the streams to the actuators; None: tonic's own TCP connector.
    dialer: Option<Dialer>,
}

/// What a [`Service`] runs on besides its [`Config`]: [`Service::bind`] makes them from the
/// config (kube's clients, the admin port bound on TCP, tonic's own connector); a caller with
/// another transport (the deterministic simulation) hands its own in to
/// [`Service::from_parts`] (clients over a `Dialer`: [`crate::k8s::client::over`]).
pub struct Parts {
    /// Every Kubernetes call but the Lease's.
    pub client: kube::Client,
    /// The Lease's and the drain gate's calls: a client without kube's retry of 429/503/504
    /// (`default_retry = false`; see [`Service`]).
    pub lease_client: kube::Client,
    /// Where the admin port (`/live`, `/ready`, `/metrics`) accepts connections.
    pub admin: Listener,
    /// Opens the gRPC streams to the actuators; None: tonic's TCP connector.
    pub dialer: Option<Dialer>,
}

impl std::fmt::Debug for Parts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parts")
            .field("admin", &self.admin)
            .field("dialer", &self.dialer)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for Service {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Service")
            .field("admin_addr", &self.admin_addr)
            .finish_non_exhaustive()
    }
}

async fn kube_config(config: &Config) -> Result<kube::Config, RunError> {
    let mut kcfg = match &config.kubeconfig {
        Some(path) => {
            let kerr = |reason: String| RunError::Kubeconfig {
                path: path.display().to_string(),
                reason,
            };
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| kerr(e.to_string()))?;
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| kerr(e.to_string()))?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| RunError::Client(e.to_string()))?,
    };
    crate::k8s::proxy::route_from_env(&mut kcfg);
    Ok(kcfg)
}

impl Service {
    /// Builds the Kubernetes client and binds the admin port.
    pub async fn bind(config: Config) -> Result<Self, RunError> {
        let kcfg = kube_config(&config).await?;
        let client_of = |kcfg: kube::Config| {
            kube::Client::try_from(kcfg).map_err(|e| RunError::Client(e.to_string()))
        };
        let mut lease_cfg = kcfg.clone();
        lease_cfg.default_retry = false;
        let lease_client = client_of(lease_cfg)?;
        let client = client_of(kcfg)?;
        let listener = TcpListener::bind(config.admin_listen)
            .await
            .map_err(|source| RunError::Bind {
                addr: config.admin_listen,
                source,
            })?;
        Self::from_parts(
            config,
            Parts {
                client,
                lease_client,
                admin: listener.into(),
                dialer: None,
            },
        )
    }

    /// An instance from `config` and the given clients, admin listener and dialer
    /// (`config.kubeconfig` and `config.admin_listen` are then not used, but for naming the
    /// listener in an error).
    pub fn from_parts(config: Config, parts: Parts) -> Result<Self, RunError> {
        let Parts {
            client,
            lease_client,
            admin: listener,
            dialer,
        } = parts;
        let admin_addr = listener.local_addr().map_err(|source| RunError::Bind {
            addr: config.admin_listen,
            source,
        })?;
        Ok(Self {
            config,
            client,
            lease_client,
            listener,
            admin_addr,
            dialer,
        })
    }

    /// The bound admin address.
    pub fn admin_addr(&self) -> SocketAddr {
        self.admin_addr
    }

    /// Runs until `shutdown` is cancelled (then drains within `--shutdown-grace`) or a
    /// critical task dies (an error: the pod should restart).
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RunError> {
        let Self {
            config,
            client,
            lease_client,
            listener,
            admin_addr,
            dialer,
        } = self;
        let (taint_tx, taint_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(shared_state(&config, taint_tx));
        let plaintext = config.tls.is_none();
        if plaintext {
            tracing::warn!(
                "--insecure-plaintext: the streams to the actuators are NOT encrypted and present \
                 no client certificate (tests only)"
            );
        }
        shared
            .metrics()
            .insecure_plaintext
            .set(i64::from(plaintext));
        let stop = shutdown.child_token();
        let mut tasks: JoinSet<&'static str> = JoinSet::new();
        let wiring = Wiring {
            config: &config,
            client,
            lease_client,
            listener,
            admin_addr,
            dialer,
            shared,
            taint_rx,
            stop: stop.clone(),
        };
        wiring.spawn_all(&mut tasks);
        let died = first_to_die(&mut tasks, &stop).await;
        if let Some(name) = died {
            tracing::error!(task = name, "critical task stopped; shutting down");
            stop.cancel();
        } else {
            tracing::info!(grace = ?config.shutdown_grace, "shutting down");
        }
        drain(tasks, config.shutdown_grace).await;
        match died {
            Some(name) => Err(RunError::TaskDied(name)),
            None => Ok(()),
        }
    }
}

/// The state every task shares: the pure core with the configured triggers.
fn shared_state(
    config: &Config,
    taint_tx: mpsc::UnboundedSender<crate::core::index::TaintRequest>,
) -> Shared {
    let core = Core {
        index: NodeIndex::new(TriggerSet::with_built_ins(
            config.built_ins,
            config.extra_taint_keys.clone(),
        )),
        dispatch: Dispatcher::new(),
    };
    Shared::new(core, config.identity.clone(), config.dry_run, taint_tx)
        .with_assignment_valid_for(config.assignment_valid_for)
}

/// Everything the tasks are built from.
struct Wiring<'a> {
    config: &'a Config,
    client: kube::Client,
    lease_client: kube::Client,
    listener: Listener,
    admin_addr: SocketAddr,
    dialer: Option<Dialer>,
    shared: Arc<Shared>,
    taint_rx: mpsc::UnboundedReceiver<crate::core::index::TaintRequest>,
    stop: CancellationToken,
}

/// Spawns `task` under `name`: the name is what the task set reports when it ends.
fn spawn(
    tasks: &mut JoinSet<&'static str>,
    name: &'static str,
    task: impl Future<Output = ()> + Send + 'static,
) {
    tasks.spawn(async move {
        task.await;
        name
    });
}

impl Wiring<'_> {
    /// The table of tasks, in start order. Each runs until shutdown; any that ends before is
    /// critical (see [`first_to_die`]).
    fn spawn_all(self, tasks: &mut JoinSet<&'static str>) {
        let Self {
            config,
            client,
            lease_client,
            listener,
            admin_addr,
            dialer,
            shared: s,
            taint_rx,
            stop: t,
        } = self;
        let (ep_tx, ep_rx) = tokio_watch::channel(Vec::new());
        let (ev_tx, ev_rx) = mpsc::channel(1024);
        let gate = gate::GateHandle::new();
        let c = &client;
        let admin = admin::serve(listener, admin_port(s.clone()), t.clone().cancelled_owned());
        spawn(tasks, "admin", admin);
        let node_watch = watch::nodes(c.clone(), s.clone(), gate.clone(), t.clone());
        spawn(tasks, "node watch", node_watch);
        spawn(
            tasks,
            "drain gate",
            // No automatic retry: a failed condition write is decided again, never re-sent.
            gate::run(lease_client.clone(), s.clone(), gate, t.clone()),
        );
        spawn(
            tasks,
            "event watch",
            watch::events(c.clone(), s.clone(), t.clone()),
        );
        let taints = taint::run(c.clone(), s.clone(), taint_rx, t.clone());
        spawn(tasks, "taint writer", taints);
        let recorder = events::recorder(c.clone(), config.identity.clone(), ev_rx, t.clone());
        spawn(tasks, "event recorder", recorder);
        if config.dry_run {
            tracing::info!(
                "dry-run: no lease, no taints, no streams, no events; acting as leader for logs only"
            );
            s.become_leader(0);
        } else {
            let lcfg = LeaseConfig {
                namespace: config.namespace.clone(),
                name: config.lease_name.clone(),
                identity: config.identity.clone(),
                timings: config.lease,
            };
            spawn(
                tasks,
                "lease",
                leader::run(lease_client, lcfg, s.clone(), t.clone()),
            );
        }
        let discover = discover(
            config.discovery.clone(),
            config.resolve_interval,
            ep_tx,
            t.clone(),
        );
        spawn(tasks, "discovery", discover);
        let streams = stream::manager::run(
            stream_config(config, c, dialer),
            s.clone(),
            ep_rx,
            ev_tx,
            t.clone(),
        );
        spawn(tasks, "stream manager", streams);
        spawn(tasks, "readiness", log_when_ready(s, admin_addr, t));
    }
}

/// How the admin port has always answered here: `/live` says `live`, text answers say
/// `text/plain`, only GET and HEAD, HTTP/1.1 closed gracefully on shutdown.
const ADMIN_STYLE: Style = Style {
    live: "live\n",
    text_content_type: true,
    get_only: true,
    connections: Connections::Http1Graceful,
    accept_error_pause: None,
};

/// The admin port: `/ready` is [`Shared::is_ready`] (no reason given), `/metrics` the registry.
fn admin_port(s: Arc<Shared>) -> Admin {
    let m = s.clone();
    Admin {
        ready: Arc::new(move || s.is_ready().then_some(()).ok_or_else(String::new)),
        metrics: Arc::new(move || m.metrics().encode()),
        style: ADMIN_STYLE,
    }
}

/// The streams' settings; hold requests arriving on them are written through `client`; the
/// streams are opened by `dialer` when given.
fn stream_config(config: &Config, client: &kube::Client, dialer: Option<Dialer>) -> StreamConfig {
    let default_server_name = match &config.discovery {
        Discovery::Service { host, .. } => Some(host.clone()),
        Discovery::Static(_) => None,
    };
    StreamConfig {
        cluster_name: config.cluster_name.clone(),
        identity: config.identity.clone(),
        tls: config.tls.clone(),
        default_server_name,
        resync_interval: config.resync_interval,
        keepalive: config.actuator_keepalive,
        holds: Some(crate::writers::hold::HoldWriter::new(client.clone())),
        dialer,
    }
}

/// Publishes the actuator endpoints until shutdown.
async fn discover(
    d: Discovery,
    every: Duration,
    tx: tokio_watch::Sender<Vec<String>>,
    t: CancellationToken,
) {
    discovery::run(d, every, tx, t.clone()).await;
    // A static list is published once; keep the task alive until shutdown.
    t.cancelled().await;
}

/// Logs once the instance is ready, then waits for shutdown.
async fn log_when_ready(s: Arc<Shared>, admin_addr: SocketAddr, t: CancellationToken) {
    loop {
        if s.is_ready() {
            tracing::info!(admin = %admin_addr, leader_epoch = ?s.leader_epoch(), "signal-svc ready");
            break;
        }
        tokio::select! {
            _ = t.cancelled() => break,
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
    t.cancelled().await;
}

/// The first task that ends on its own, unless shutdown began first (tasks end on their own
/// only when it has).
async fn first_to_die(
    tasks: &mut JoinSet<&'static str>,
    stop: &CancellationToken,
) -> Option<&'static str> {
    tokio::select! {
        biased;
        _ = stop.cancelled() => None,
        r = tasks.join_next() => match r {
            _ if stop.is_cancelled() => None,
            Some(Ok(name)) => Some(name),
            _ => Some("unknown"),
        },
    }
}

/// Lets every task finish within `grace`, then aborts what is left.
async fn drain(mut tasks: JoinSet<&'static str>, grace: Duration) {
    let drained =
        tokio::time::timeout(grace, async { while tasks.join_next().await.is_some() {} }).await;
    if drained.is_err() {
        tracing::warn!("shutdown grace elapsed; aborting remaining tasks");
        tasks.abort_all();
    }
}

/// Binds and runs one instance until `shutdown` (the in-process entry used by tests).
pub async fn run(config: Config, shutdown: CancellationToken) -> Result<(), RunError> {
    Service::bind(config).await?.run(shutdown).await
}
