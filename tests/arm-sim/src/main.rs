//! `arm-sim` binary: starts the simulator and prints, first, `listening on http://ADDR`, then the
//! subscription, tenant and the service principal the token endpoint accepts.

use anyhow::Context;
use arm_sim::{ArmSim, ArmSimOptions, Cadence, seed::Seed};
use clap::Parser;
use std::io::Write;

#[derive(Debug, Parser)]
#[command(
    name = "arm-sim",
    about = "Local ARM (Microsoft.Network) + Azure AD simulator"
)]
struct Args {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, env = "ARM_SIM_LISTEN", default_value = "127.0.0.1:0")]
    listen: std::net::SocketAddr,
    /// Seed file (JSON or YAML); see examples/seed.yaml.
    #[arg(long, env = "ARM_SIM_SEED", conflicts_with = "preset")]
    seed: Option<String>,
    /// aks-fixture preset: aks, aks-ip, aks-multi-slb; or a linked-access seed: byo-vnet,
    /// foreign-public-ip, ip-pool-vnet (no role assignment: permissive until `PUT /_sim/rbac`).
    #[arg(long, env = "ARM_SIM_PRESET")]
    preset: Option<String>,
    /// Node count of the preset (>= 6).
    #[arg(long, env = "ARM_SIM_PRESET_NODES", requires = "preset")]
    preset_nodes: Option<usize>,
    /// Serve HTTPS with a generated certificate; its CA PEM is written to --ca-out.
    #[arg(long, env = "ARM_SIM_TLS", requires = "ca_out")]
    tls: bool,
    #[arg(long, env = "ARM_SIM_CA_OUT")]
    ca_out: Option<String>,
    /// How long write operations stay InProgress, in milliseconds.
    #[arg(long, env = "ARM_SIM_COMPLETION_DELAY_MS", default_value_t = 1000)]
    completion_delay_ms: u64,
    /// When set, operation lengths are drawn uniformly from --completion-delay-ms to this
    /// (milliseconds; NRP's writes take 5-20 s by users' reports).
    #[arg(long, env = "ARM_SIM_COMPLETION_DELAY_MAX_MS")]
    completion_delay_max_ms: Option<u64>,
    /// Retry hints: `fast` (1 s) or `azure` (NRP-like: Retry-After 10 s on writes and running
    /// polls, lock conflicts "can be retried in 10 seconds").
    #[arg(long, env = "ARM_SIM_CADENCE", default_value = "fast")]
    cadence: Cadence,
    /// Retry-After (seconds) on writes and running polls; overrides the cadence.
    #[arg(long, env = "ARM_SIM_RETRY_AFTER_SECS")]
    retry_after_secs: Option<u64>,
    /// Retry hint (seconds) of a lock conflict; overrides the cadence.
    #[arg(long, env = "ARM_SIM_LOCK_RETRY_AFTER_SECS")]
    lock_retry_after_secs: Option<u64>,
    /// Refuse (400) a whole-LB PUT that changes anything but backend pool entries (a dropped,
    /// reordered or altered frontend, rule, probe or outbound rule).
    #[arg(long, env = "ARM_SIM_STRICT_LB_STRUCTURE")]
    strict_lb_structure: bool,
    /// LIST page size.
    #[arg(long, env = "ARM_SIM_PAGE_SIZE", default_value_t = 100)]
    page_size: usize,
    /// Token lifetime in seconds.
    #[arg(long, env = "ARM_SIM_TOKEN_LIFETIME_SECS", default_value_t = 3599)]
    token_lifetime_secs: u64,
    /// Log filter (tracing env-filter syntax).
    #[arg(long, env = "ARM_SIM_LOG", default_value = "warn")]
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
        (Some(path), _) => Seed::load(path).context("--seed")?,
        (None, Some(name)) => Seed::preset(name, args.preset_nodes).context("--preset")?,
        (None, None) => Seed::preset("aks", None).context("default preset")?,
    };
    if args.page_size == 0 {
        anyhow::bail!("--page-size must be at least 1");
    }
    let mut options = ArmSimOptions {
        listen: args.listen,
        seed,
        tls: args.tls,
        ..ArmSimOptions::default()
    }
    .with_cadence(args.cadence);
    options.tuning.completion_delay_ms = args.completion_delay_ms;
    if let Some(max) = args.completion_delay_max_ms {
        if max < args.completion_delay_ms {
            anyhow::bail!("--completion-delay-max-ms must be at least --completion-delay-ms");
        }
        options.tuning.completion_delay_max_ms = Some(max);
    }
    if let Some(secs) = args.retry_after_secs {
        options.tuning.retry_after_secs = secs;
    }
    if let Some(secs) = args.lock_retry_after_secs {
        options.tuning.lock_retry_after_secs = secs;
    }
    options.tuning.page_size = args.page_size;
    options.tuning.strict_lb_structure = args.strict_lb_structure;
    options.tuning.token_lifetime_secs = args.token_lifetime_secs;
    let sim = ArmSim::start(options).await.context("start")?;
    if let (Some(pem), Some(path)) = (sim.ca_pem(), &args.ca_out) {
        std::fs::write(path, pem).with_context(|| format!("--ca-out {path}"))?;
    }
    let creds = sim.credentials();
    let mut out = std::io::stdout().lock();
    writeln!(out, "listening on {}", sim.url())?;
    writeln!(out, "subscription {}", creds.subscription_id)?;
    writeln!(out, "tenant {}", creds.tenant_id)?;
    writeln!(out, "client-id {}", creds.client_id)?;
    writeln!(out, "client-secret {}", creds.client_secret)?;
    writeln!(out, "federated-token {}", sim.federated_token())?;
    writeln!(out, "identity-endpoint {}", sim.identity_endpoint())?;
    writeln!(out, "identity-header {}", sim.identity_header())?;
    out.flush()?;
    drop(out);
    tokio::signal::ctrl_c()
        .await
        .context("waiting for ctrl-c")?;
    sim.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_is_consistent() {
        Args::command().debug_assert();
    }
}
