//! Wiring: config -> credential -> ARM client -> store + writers -> gRPC and admin servers, and
//! the drain on shutdown. Everything is validated before any port is bound.

use crate::admin;
use crate::arm::ArmClient;
use crate::arm::budget::{Budget, DEFAULT_READ, DEFAULT_WRITE, Limits, ToolShare};
use crate::arm::client::Scope;
use crate::cache::SharedCache;
use crate::config::azure_json::{self, AzureConfig, EnvOverrides, PoolConfigType};
use crate::config::cli::Args;
use crate::credentials;
use crate::grpc::{self, auth::AllowLists, service::ActuatorService};
use crate::guard::Guard;
use crate::metrics::Metrics;
use crate::state::Store;
use crate::tls_reload::{self, ServerTlsFiles, TlsReloader};
use crate::tools::{ToolLimiter, UnknownNodes};
use crate::writer::{InFlight, PollPace, Writer, WriterConfig};
use anyhow::Context;
use parking_lot::Mutex;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The load balancers cutover manages: the cluster's (or `loadBalancerName`'s) public LB, or
/// every multi-SLB configuration, each with its `-internal` twin.
pub fn managed_lbs(cfg: &AzureConfig, cluster_name: &str) -> Vec<String> {
    let bases: Vec<String> = if cfg.multi_slb.is_empty() {
        vec![
            cfg.load_balancer_name
                .clone()
                .unwrap_or_else(|| cluster_name.to_string()),
        ]
    } else {
        cfg.multi_slb.clone()
    };
    bases
        .iter()
        .flat_map(|b| [b.clone(), format!("{b}-internal")])
        .collect()
}

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

/// Loads the config and starts everything.
pub async fn start(args: Args, env: EnvOverrides) -> anyhow::Result<Running> {
    let text = std::fs::read_to_string(&args.cloud_config)
        .with_context(|| format!("--cloud-config {}", args.cloud_config.display()))?;
    let cfg = azure_json::parse(&text, &args.cluster_name, &env)
        .with_context(|| format!("--cloud-config {}", args.cloud_config.display()))?;
    let authority = args
        .authority()
        .map_err(anyhow::Error::msg)
        .context("--aad-authority")?;
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(Arc::new(TlsReloader::load(ServerTlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.tls_client_ca.clone(),
        })?)),
        _ => None,
    };
    let lists = AllowLists {
        client_auth: args.tls_client_ca.is_some(),
        signal: args.signal_clients.clone(),
        tool: args.tool_clients.clone(),
    };
    tracing::info!(credential = ?cfg.credential, subscription = %cfg.subscription_id, "configuration loaded");

    let http = azure_core::new_http_client();
    let credential = credentials::build(
        &cfg.credential,
        &cfg.tenant_id,
        &authority,
        http.clone(),
        credentials::Sources {
            reread_every: credentials::REREAD_EVERY,
            cloud_config: Some(credentials::CloudConfigFile {
                path: args.cloud_config.clone(),
                cluster_name: args.cluster_name.clone(),
                env: env.clone(),
            }),
        },
    )?;
    let metrics = Arc::new(Metrics::new());
    let (read, write) = match cfg.rate_limit {
        Some(r) => (
            Limits {
                bucket: r.read_bucket,
                qps: r.read_qps,
            },
            Limits {
                bucket: r.write_bucket,
                qps: r.write_qps,
            },
        ),
        None => (DEFAULT_READ, DEFAULT_WRITE),
    };
    let budget = Arc::new(Mutex::new(Budget::new(
        read,
        write,
        tokio::time::Instant::now(),
    )));
    let arm = ArmClient::new(
        http,
        credential,
        Scope {
            endpoint: args.arm_endpoint.clone(),
            subscription_id: cfg.subscription_id.clone(),
            lb_resource_group: cfg.load_balancer_resource_group.clone(),
            node_resource_group: cfg.resource_group.clone(),
        },
        budget,
        metrics.clone(),
        args.arm_timeout,
    )
    .with_body_budget(args.lb_read_budget);
    let lbs = managed_lbs(&cfg, &args.cluster_name);
    let store = Arc::new(Store::new(&lbs, metrics.clone()));
    let cache = Arc::new(SharedCache::default());

    let grpc_listener = TcpListener::bind(args.grpc_listen)
        .await
        .with_context(|| format!("--grpc-listen {}", args.grpc_listen))?;
    let admin_listener = TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("--admin-listen {}", args.admin_listen))?;
    let grpc_addr = grpc_listener.local_addr()?;
    let admin_addr = admin_listener.local_addr()?;
    let (shutdown, shutdown_rx) = watch::channel(false);

    let writer_cfg = WriterConfig {
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
        bases: Arc::new(crate::cache::BaseCache::new(args.base_cache_budget)),
        ..WriterConfig::new(args.write_strategy)
    };
    let in_flight = Arc::new(InFlight::default());
    let writers: Vec<JoinHandle<()>> = lbs
        .iter()
        .map(|lb| {
            let w = Writer::new(
                lb.clone(),
                arm.clone(),
                store.clone(),
                cache.clone(),
                metrics.clone(),
                writer_cfg.clone(),
                in_flight.clone(),
            );
            tokio::spawn(w.run(shutdown_rx.clone()))
        })
        .collect();

    let mut servers = Vec::new();
    // Token: readiness needs one; the first ARM call would get it anyway, this reports early.
    let token_ok = Arc::new(AtomicBool::new(false));
    servers.push(tokio::spawn(token_probe(
        arm.clone(),
        token_ok.clone(),
        shutdown_rx.clone(),
    )));
    if cfg.pool_type == PoolConfigType::NodeIpConfiguration {
        servers.push(tokio::spawn(nic_refresher(
            arm.clone(),
            cache.clone(),
            args.pool_refresh_interval,
            shutdown_rx.clone(),
        )));
    }
    let ready: admin::ReadyFn = {
        let (cache, lbs, token_ok, shutdown_rx) = (
            cache.clone(),
            lbs.clone(),
            token_ok.clone(),
            shutdown_rx.clone(),
        );
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
    };
    servers.push(tokio::spawn(admin::serve(
        admin_listener,
        ready.clone(),
        metrics.clone(),
        shutdown_rx.clone(),
    )));

    let svc = ActuatorService {
        store: store.clone(),
        cache: cache.clone(),
        arm: arm.clone(),
        lists,
        identity: args.identity.clone(),
        cluster_name: args.cluster_name.clone(),
        shutdown: shutdown_rx.clone(),
        guard: writer_cfg.guard.clone(),
        limiter: Arc::new(ToolLimiter::new(args.tool_rate, args.tool_burst)),
        unknown: Arc::new(UnknownNodes::new(args.unknown_node_refresh)),
        tool_reads: Arc::new(Mutex::new(ToolShare::new(
            read,
            tokio::time::Instant::now(),
        ))),
        metrics: metrics.clone(),
    };
    // gRPC health follows /ready: NOT_SERVING until the token and pool index are ready, and
    // again from the start of the drain.
    let (health, health_svc) = grpc::health::reporter().await;
    servers.push(tokio::spawn(grpc::health::follow(
        health.clone(),
        ready,
        shutdown_rx.clone(),
    )));
    if let Some(tls) = &tls {
        servers.push(tokio::spawn(
            tls.clone()
                .watch(tls_reload::POLL_EVERY, shutdown_rx.clone()),
        ));
    }
    let mut rx = shutdown_rx.clone();
    let stop = async move {
        let _ = rx.wait_for(|s| *s).await;
    };
    servers.push(tokio::spawn(async move {
        if let Err(e) = grpc::serve(grpc_listener, tls, svc, health_svc, stop).await {
            tracing::error!(error = %e, "gRPC server stopped");
        }
        drop(health);
    }));
    tracing::info!(%grpc_addr, %admin_addr, load_balancers = ?lbs, strategy = ?args.write_strategy, dry_run = args.dry_run, "actuator-svc started");
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

async fn token_probe(arm: ArmClient, ok: Arc<AtomicBool>, mut shutdown: watch::Receiver<bool>) {
    let mut backoff =
        crate::arm::retry::Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn managed_lbs_cover_internal_twins_and_multi_slb() {
        let c = aks_fixture::preset("aks-multi-slb").unwrap();
        let cfg = azure_json::parse(
            &c.azure_json().to_string(),
            "kubernetes",
            &EnvOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            managed_lbs(&cfg, "kubernetes"),
            vec![
                "kubernetes",
                "kubernetes-internal",
                "kubernetes-2",
                "kubernetes-2-internal"
            ]
        );
        let c = aks_fixture::preset("aks").unwrap();
        let cfg = azure_json::parse(
            &c.azure_json().to_string(),
            "kubernetes",
            &EnvOverrides::default(),
        )
        .unwrap();
        assert_eq!(
            managed_lbs(&cfg, "kubernetes"),
            vec!["kubernetes", "kubernetes-internal"]
        );
    }
}
