//! actuator-svc binary: parse flags, set up logging, run until SIGTERM/SIGINT, drain.

use actuator_svc::config::azure_json::EnvOverrides;
use actuator_svc::config::cli::Args;
use clap::Parser;

/// jemalloc, not glibc malloc: glibc kept freed memory in its heaps (fragmented between
/// long-lived allocations, so neither trimming nor a fixed mmap threshold gave it back), about
/// half the actuator's RSS after a 5,000-node resync; jemalloc's background thread returns
/// pages freed for a second (settings: `_RJEM_MALLOC_CONF` in deploy/). mimalloc measured worse
/// than glibc here. Figures: docs/performance.md, memory and scale.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    cutover_runtime::log::init(args.log_format);
    if args.preflight {
        let report = actuator_svc::preflight::run(&args, &EnvOverrides::from_process()).await?;
        print!("{}", report.text);
        std::process::exit(if report.blocking() { 2 } else { 0 });
    }
    let running = actuator_svc::runtime::start(args, EnvOverrides::from_process()).await?;
    wait_for_signal().await?;
    tracing::info!("draining");
    if !running.shutdown().await {
        anyhow::bail!("in-flight writes did not finish within --shutdown-grace");
    }
    Ok(())
}

/// The first SIGTERM or SIGINT (a second one during the drain changes nothing).
async fn wait_for_signal() -> anyhow::Result<()> {
    cutover_runtime::drain::Signals::install()?.recv().await;
    Ok(())
}
