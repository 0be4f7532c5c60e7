//! `kube-sim` binary: starts the simulator, prints `listening on http(s)://ADDR` as the first
//! stdout line, optionally writes a kubeconfig, and serves until SIGINT/SIGTERM.

use anyhow::Context;
use clap::Parser;
use kube_sim::{KubeSim, Options, Security, Seed};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "kube-sim",
    about = "Kubernetes API server simulator (Nodes, Events, Leases)"
)]
struct Args {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, env = "KUBE_SIM_LISTEN", default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// Seed file (YAML or JSON) with nodes and events.
    #[arg(long, env = "KUBE_SIM_SEED", conflicts_with = "preset")]
    seed: Option<PathBuf>,
    /// AKS preset from aks-fixture: aks, aks-ip or aks-multi-slb.
    #[arg(long, env = "KUBE_SIM_PRESET")]
    preset: Option<String>,
    /// Node count of the preset (at least 6).
    #[arg(
        long,
        env = "KUBE_SIM_PRESET_NODES",
        default_value_t = 12,
        requires = "preset"
    )]
    preset_nodes: usize,
    /// Write a kubeconfig for this server here.
    #[arg(long, env = "KUBE_SIM_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Seconds between watch bookmarks.
    #[arg(long, env = "KUBE_SIM_BOOKMARK_SECONDS", default_value_t = 60)]
    bookmark_seconds: u64,
    /// Serve HTTPS with a fresh cluster CA, authenticate bearer tokens and authorize every
    /// request with RBAC. The kubeconfig then carries the CA and an admin token.
    #[arg(long, env = "KUBE_SIM_SECURE")]
    secure: bool,
    /// Static tokens (`token,user,uid,"group1,group2"` per line, like kube-apiserver's
    /// --token-auth-file); implies --secure.
    #[arg(long, env = "KUBE_SIM_TOKEN_AUTH_FILE")]
    token_auth_file: Option<PathBuf>,
    /// Log filter (tracing EnvFilter syntax).
    #[arg(long, env = "KUBE_SIM_LOG", default_value = "info")]
    log: String,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log).context("--log")?)
        .with_writer(std::io::stderr)
        .init();
    let seed = match (&args.seed, &args.preset) {
        (Some(path), _) => Seed::from_file(path)?,
        (None, Some(name)) => Seed::preset(name, args.preset_nodes).context("--preset")?,
        (None, None) => Seed::default(),
    };
    let security = match (&args.token_auth_file, args.secure) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("--token-auth-file {}", path.display()))?;
            let tokens = kube_sim::auth::tokens::parse_token_file(&text)
                .map_err(|e| anyhow::anyhow!("--token-auth-file {}: {e}", path.display()))?;
            Some(Security { tokens })
        }
        (None, true) => Some(Security::default()),
        (None, false) => None,
    };
    let sim = KubeSim::start(Options {
        listen: args.listen,
        seed,
        bookmark_interval: Duration::from_secs(args.bookmark_seconds.max(1)),
        security,
        ..Options::default()
    })
    .await?;
    if let Some(path) = &args.kubeconfig {
        sim.write_kubeconfig(path)
            .with_context(|| format!("--kubeconfig {}", path.display()))?;
    }
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", sim.url())?;
        out.flush()?;
    }
    tracing::info!(url = %sim.url(), "kube-sim serving");
    shutdown_signal().await;
    sim.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        if let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        {
            tokio::select! {
                _ = ctrl_c => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = ctrl_c.await;
}
