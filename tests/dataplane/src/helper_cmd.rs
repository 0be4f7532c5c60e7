//! The processes of a run as hidden subcommands (`helper-member`, `helper-prober`,
//! `helper-client`), shared by every binary that runs cells: the realisations start them with
//! `ip netns exec <binary> helper-...` (kernel) or directly (user-space).

use crate::helper::{self, ClientArgs, ProbeTarget};
use clap::Subcommand;

#[derive(Subcommand, Debug)]
#[allow(clippy::enum_variant_names)] // the subcommand names are helper-*
pub enum HelperCmd {
    #[command(hide = true)]
    HelperMember {
        #[arg(long)]
        id: usize,
        #[arg(long, default_value = "0.0.0.0")]
        bind: String,
        #[arg(long)]
        service: u16,
        #[arg(long)]
        healthz: u16,
        #[arg(long)]
        hcnp: u16,
    },
    #[command(hide = true)]
    HelperProber {
        #[arg(long)]
        interval: f64,
        #[arg(long)]
        http_timeout: f64,
        #[arg(long)]
        target: Vec<ProbeTarget>,
    },
    #[command(hide = true)]
    HelperClient {
        #[arg(long)]
        target: std::net::SocketAddr,
        #[arg(long)]
        rate: f64,
        #[arg(long)]
        pool: usize,
        #[arg(long)]
        pool_max_age: f64,
        #[arg(long)]
        pool_every: f64,
        #[arg(long)]
        streams: usize,
        #[arg(long)]
        connect_timeout: f64,
        #[arg(long)]
        request_timeout: f64,
        #[arg(long)]
        duration: f64,
    },
}

impl HelperCmd {
    pub async fn run(self) -> anyhow::Result<()> {
        match self {
            HelperCmd::HelperMember {
                id,
                bind,
                service,
                healthz,
                hcnp,
            } => helper::member(id, &bind, service, healthz, hcnp).await,
            HelperCmd::HelperProber {
                interval,
                http_timeout,
                target,
            } => helper::prober(target, interval, http_timeout).await,
            HelperCmd::HelperClient {
                target,
                rate,
                pool,
                pool_max_age,
                pool_every,
                streams,
                connect_timeout,
                request_timeout,
                duration,
            } => {
                helper::client(ClientArgs {
                    target,
                    new_per_sec: rate,
                    pool,
                    pool_max_age,
                    pool_every,
                    streams,
                    connect_timeout,
                    request_timeout,
                    duration,
                })
                .await
            }
        }
    }
}
