//! Wiring: config -> credential -> ARM client -> store + writers -> gRPC and admin servers, and
//! the drain on shutdown. Everything is validated before any port is bound (steps 1 and 2,
//! loading and the ARM client, are `bootstrap`'s, shared with `preflight`).
//!
//! [`start`] binds TCP and dials TCP; [`start_with`] takes its listeners and its dialer from
//! the caller ([`Transports`]: the deterministic simulation's network). Nothing else differs.

use crate::arm::ArmClient;
use crate::arm::budget::{Limits, ToolShare};
use crate::bootstrap;
use crate::config::azure_json::{AzureConfig, EnvOverrides, PoolConfigType};
use crate::config::cli::Args;
use crate::grpc::{self, auth::AllowLists, service::ActuatorService};
use crate::inbound::Inbound;
use crate::inbound::tools::{ToolLimiter, UnknownNodes};
use crate::metrics::Metrics;
use crate::plan::cache::SharedCache;
use crate::plan::guard::Guard;
use crate::state::Store;
use crate::writer::{InFlight, PollPace, Writer, WriterConfig};
use anyhow::Context;
use cutover_runtime::admin::{self, Admin, Connections, Style};
use cutover_runtime::backoff::Backoff;
use cutover_runtime::dial::{Dialer, Listener};
use cutover_runtime::tls_reload::{self, TlsReloader};
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// How often unconfirmed results are sent again (signal-svc confirms within a round trip).
const RESEND_EVERY: Duration = Duration::from_secs(3);

/// How the admin port has always answered here: `/live` says `ok`, no content type on text
/// answers, any method, HTTP/1.1 or HTTP/2, a pause after a failed accept.
const ADMIN_STYLE: Style = Style {
    live: "ok\n",
    text_content_type: false,
    get_only: false,
    connections: Connections::Auto,
    accept_error_pause: Some(Duration::from_millis(100)),
};

/// A running actuator.
pub struct Running {
    pub grpc_addr: SocketAddr,
    pub admin_addr: SocketAddr,
    pub store: Arc<Store>,
    shutdown: watch::Sender<bool>,
    writers: Vec<JoinHandle<()>>,
    servers: Vec<JoinHandle<()>>,
    grace: Duration,
}

impl Running {
    /// Drains: readiness off and servers stop accepting, then in-flight writes get up to the
    /// grace period to finish. Returns false when the grace period ran out.
    pub async fn shutdown(self) -> bool {
        let _ = self.shutdown.send(true);
        let all = async {
            for w in self.writers {
                let _ = w.await;
            }
            for s in self.servers {
                let _ = s.await;
            }
        };
        tokio::time::timeout(self.grace, all).await.is_ok()
    }
}

/// Where connections come from and go to, when not TCP ([`start_with`]).
#[derive(Debug)]
pub struct Transports {
    /// gRPC connections (instead of binding `--grpc-listen`).
    pub grpc: Listener,
    /// Admin connections (instead of binding `--admin-listen`).
    pub admin: Listener,
    /// Opens every outbound connection (tokens and ARM); `None`: TCP, through the
    /// environment's proxy settings, as [`start`] does.
    pub dialer: Option<Dialer>,
}

/// Loads the config and starts everything, as a list of steps: every input is validated
/// before any port is bound.
pub async fn start(args: Args, env: EnvOverrides) -> anyhow::Result<Running> {
    run(args, env, None, Step4::Bind).await
}

/// [`start`] on the listeners and dialer given instead of TCP (`--grpc-listen` and
/// `--admin-listen` are not read). `Running`'s addresses are the listeners' `local_addr`.
pub async fn start_with(
    args: Args,
    env: EnvOverrides,
    transports: Transports,
) -> anyhow::Result<Running> {
    let Transports {
        grpc,
        admin,
        dialer,
    } = transports;
    run(args, env, dialer, Step4::Given { grpc, admin }).await
}

/// Where step 4's listeners come from.
enum Step4 {
    Bind,
    Given { grpc: Listener, admin: Listener },
}

async fn run(
    args: Args,
    env: EnvOverrides,
    dialer: Option<Dialer>,
    step4: Step4,
) -> anyhow::Result<Running> {
    let loaded = bootstrap::load(&args, &env, dialer).await?;
    let metrics = Arc::new(Metrics::new());
    let (tls, lists) = bootstrap::grpc_security(&args, &metrics)?;
    let (arm, read) = bootstrap::arm_client(&args, &env, &loaded, metrics.clone())?;
    let writer_cfg = writer_config(&args)?;
    let lbs = bootstrap::managed_lbs(&loaded.cfg, &args.cluster_name);
    let store = Arc::new(Store::new(&lbs, metrics.clone()));
    store.set_standalone(args.standalone);
    let cache = Arc::new(SharedCache::default());
    let (grpc_listener, admin_listener) = match step4 {
        Step4::Bind => bind(&args).await?,
        Step4::Given { grpc, admin } => (grpc, admin),
    };
    let (grpc_addr, admin_addr) = (grpc_listener.local_addr()?, admin_listener.local_addr()?);
    let (shutdown, shutdown_rx) = watch::channel(false);

    let parts = Parts {
        arm,
        store: store.clone(),
        cache,
        metrics,
        lbs,
        shutdown: shutdown_rx,
    };
    let writers = parts.spawn_writers(&writer_cfg);
    let (mut servers, ready) = parts.spawn_background(&args, &loaded.cfg);
    servers.extend(parts.spawn_access_check(&args, &writer_cfg));
    servers.push(parts.spawn_resender());
    servers.push(parts.spawn_ownership_gauge());
    servers.push(parts.spawn_admin(admin_listener, ready.clone()));
    let svc = parts.service(&args, lists, &writer_cfg, read);
    servers.extend(parts.spawn_grpc(grpc_listener, tls, svc, ready).await);
    tracing::info!(%grpc_addr, %admin_addr, load_balancers = ?parts.lbs, strategy = ?args.write_strategy, dry_run = args.dry_run, "actuator-svc started");
    Ok(Running {
        grpc_addr,
        admin_addr,
        store,
        shutdown,
        writers,
        servers,
        grace: args.shutdown_grace,
    })
}

/// Step 3: the writers' settings.
fn writer_config(args: &Args) -> anyhow::Result<WriterConfig> {
    Ok(WriterConfig {
        strategy: args.write_strategy,
        dry_run: args.dry_run,
        self_heal: args.self_heal_interval,
        max_cache_age: args.pool_refresh_interval,
        pace: PollPace {
            base: args.poll_interval,
            fine: args.poll_fine_interval,
            ..PollPace::default()
        },
        guard: Guard::new(args.max_down_share)
            .map_err(anyhow::Error::msg)
            .context("--max-down-share")?,
        bases: Arc::new(crate::plan::cache::BaseCache::new(args.base_cache_budget)),
        op_slow: args.operation_slow_after,
        ..WriterConfig::new(args.write_strategy)
    })
}

/// Step 4: both listeners (the last step that can fail on input).
async fn bind(args: &Args) -> anyhow::Result<(Listener, Listener)> {
    let grpc = TcpListener::bind(args.grpc_listen)
        .await
        .with_context(|| format!("--grpc-listen {}", args.grpc_listen))?;
    let admin = TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("--admin-listen {}", args.admin_listen))?;
    Ok((grpc.into(), admin.into()))
}

/// The shared parts every task is built from.
struct Parts {
    arm: ArmClient,
    store: Arc<Store>,
    cache: Arc<SharedCache>,
    metrics: Arc<Metrics>,
    lbs: Vec<String>,
    shutdown: watch::Receiver<bool>,
}

impl Parts {
    /// One writer task per managed load balancer.
    fn spawn_writers(&self, cfg: &WriterConfig) -> Vec<JoinHandle<()>> {
        let in_flight = Arc::new(InFlight::default());
        self.lbs
            .iter()
            .map(|lb| {
                let w = Writer::new(
                    lb.clone(),
                    self.arm.clone(),
                    self.store.clone(),
                    self.cache.clone(),
                    self.metrics.clone(),
                    cfg.clone(),
                    in_flight.clone(),
                );
                tokio::spawn(w.run(self.shutdown.clone()))
            })
            .collect()
    }

    /// The token probe and the NIC refresher, and the readiness they feed.
    fn spawn_background(
        &self,
        args: &Args,
        cfg: &AzureConfig,
    ) -> (Vec<JoinHandle<()>>, admin::ReadyFn) {
        let mut tasks = Vec::new();
        // Token: readiness needs one; the first ARM call would get it anyway, this reports early.
        let token_ok = Arc::new(AtomicBool::new(false));
        tasks.push(tokio::spawn(token_probe(
            self.arm.clone(),
            token_ok.clone(),
            self.shutdown.clone(),
        )));
        if cfg.pool_type == PoolConfigType::NodeIpConfiguration {
            tasks.push(tokio::spawn(nic_refresher(
                self.arm.clone(),
                self.cache.clone(),
                args.pool_refresh_interval,
                self.shutdown.clone(),
            )));
        }
        (tasks, self.readiness(token_ok))
    }

    /// The access check (`preflight::watch`), in the background: start-up never waits for it.
    fn spawn_access_check(&self, args: &Args, cfg: &WriterConfig) -> Option<JoinHandle<()>> {
        if args.access_check_interval.is_zero() {
            tracing::info!("--access-check-interval 0: the service does not check its access");
            return None;
        }
        let watch = crate::preflight::watch::Watch {
            arm: self.arm.clone(),
            lbs: self.lbs.clone(),
            strategy: cfg.strategy,
            metrics: self.metrics.clone(),
            recheck: cfg.access_recheck.clone(),
            every: args.access_check_interval,
        };
        Some(tokio::spawn(watch.run(self.shutdown.clone())))
    }

    /// Re-sends the results signal-svc has not confirmed (lost on a lagging broadcast or a
    /// stream that ended) until its fleet status reaches their phase.
    fn spawn_resender(&self) -> JoinHandle<()> {
        let (store, mut shutdown) = (self.store.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RESEND_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        store.resend_unconfirmed();
                    }
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        })
    }

    /// Keeps `load_balancer_owned` true when a grant lapses without a heartbeat (its stream
    /// ended and no new one renewed it, or the leader went quiet): nothing else happens then.
    fn spawn_ownership_gauge(&self) -> JoinHandle<()> {
        let (store, mut shutdown) = (self.store.clone(), self.shutdown.clone());
        tokio::spawn(async move {
            loop {
                let now = tokio::time::Instant::now();
                // A heartbeat moves the lapse later without a wake-up: waking at the old one
                // finds nothing changed and waits for the new one.
                let lapse = store.ownership_expires_at().filter(|at| *at > now);
                tokio::select! {
                    _ = store.ownership_changed() => continue,
                    _ = tokio::time::sleep_until(lapse.unwrap_or(now)), if lapse.is_some() => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
                if store
                    .ownership_expires_at()
                    .is_some_and(|at| at <= tokio::time::Instant::now())
                {
                    let owned = store.publish_owned();
                    tracing::info!(load_balancers = ?owned, "assignment lapsed without a heartbeat");
                }
            }
        })
    }

    /// `/ready`: a token, every LB's pool index built, and not draining.
    fn readiness(&self, token_ok: Arc<AtomicBool>) -> admin::ReadyFn {
        let (cache, lbs, shutdown_rx) =
            (self.cache.clone(), self.lbs.clone(), self.shutdown.clone());
        Arc::new(move || {
            if *shutdown_rx.borrow() {
                return Err("shutting down".into());
            }
            if !token_ok.load(Ordering::Relaxed) {
                return Err("no Azure AD token yet".into());
            }
            if !cache.built(&lbs) {
                return Err("pool index not built yet".into());
            }
            Ok(())
        })
    }

    /// The admin port, until the drain starts.
    fn spawn_admin(&self, listener: Listener, ready: admin::ReadyFn) -> JoinHandle<()> {
        let metrics = self.metrics.clone();
        let admin = Admin {
            ready,
            metrics: Arc::new(move || metrics.encode()),
            style: ADMIN_STYLE,
        };
        let mut shutdown = self.shutdown.clone();
        let stop = async move {
            let _ = shutdown.changed().await;
        };
        tokio::spawn(admin::serve(listener, admin, stop))
    }

    /// The `cutover.v1.Actuator` service.
    fn service(
        &self,
        args: &Args,
        lists: AllowLists,
        writer_cfg: &WriterConfig,
        read: Limits,
    ) -> ActuatorService {
        ActuatorService {
            inbound: Inbound {
                store: self.store.clone(),
                cache: self.cache.clone(),
                arm: self.arm.clone(),
                identity: args.identity.clone(),
                cluster_name: args.cluster_name.clone(),
                shutdown: self.shutdown.clone(),
                guard: writer_cfg.guard.clone(),
                limiter: Arc::new(ToolLimiter::new(args.tool_rate, args.tool_burst)),
                unknown: Arc::new(UnknownNodes::new(args.unknown_node_refresh)),
                tool_reads: Arc::new(Mutex::new(ToolShare::new(
                    read,
                    tokio::time::Instant::now(),
                ))),
                metrics: self.metrics.clone(),
            },
            lists,
        }
    }

    /// The gRPC server, its health reporter and the TLS reloader.
    async fn spawn_grpc(
        &self,
        listener: Listener,
        tls: Option<Arc<TlsReloader>>,
        svc: ActuatorService,
        ready: admin::ReadyFn,
    ) -> Vec<JoinHandle<()>> {
        let mut tasks = Vec::new();
        // gRPC health follows /ready: NOT_SERVING until the token and pool index are ready, and
        // again from the start of the drain.
        let (health, health_svc) = grpc::health::reporter().await;
        tasks.push(tokio::spawn(grpc::health::follow(
            health.clone(),
            ready,
            self.shutdown.clone(),
        )));
        if let Some(tls) = &tls {
            tasks.push(tokio::spawn(
                tls.clone()
                    .watch(tls_reload::POLL_EVERY, self.shutdown.clone()),
            ));
        }
        let mut rx = self.shutdown.clone();
        let stop = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        tasks.push(tokio::spawn(async move {
            if let Err(e) = grpc::serve(listener, tls, svc, health_svc, stop).await {
                tracing::error!(error = %e, "gRPC server stopped");
            }
            drop(health);
        }));
        tasks
    }
}

async fn token_probe(arm: ArmClient, ok: Arc<AtomicBool>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        match arm.token().await {
            Ok(_) => {
                ok.store(true, Ordering::Relaxed);
                return;
            }
            Err(e) => tracing::warn!(error = %e, "no Azure AD token yet"),
        }
        tokio::select! {
            _ = tokio::time::sleep(backoff.next_delay(rand::random())) => {}
            _ = shutdown.changed() => return,
        }
    }
}

async fn nic_refresher(
    arm: ArmClient,
    cache: Arc<SharedCache>,
    every: Duration,
    mut shutdown: watch::Receiver<bool>,
) {
    // Early refreshes (unresolved nodes) are rate-limited to one per this interval.
    const MIN_GAP: Duration = Duration::from_secs(5);
    loop {
        match arm.list_nics().await {
            Ok(nics) => cache.set_nics(nics),
            Err(e) => tracing::warn!(error = %e, "listing NICs failed"),
        }
        let earliest = tokio::time::Instant::now() + MIN_GAP;
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = cache.nic_refresh_requested() => tokio::time::sleep_until(earliest).await,
            _ = shutdown.changed() => return,
        }
    }
}
