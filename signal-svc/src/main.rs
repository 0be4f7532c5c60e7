//! signal-svc binary: parse, validate, log, run until SIGTERM.

use clap::Parser;
use signal_svc::config::Args;
use tokio_util::sync::CancellationToken;

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
    let format = args.log_format;
    let config = match args.validate() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("signal-svc: invalid configuration: {e}");
            std::process::exit(2);
        }
    };
    cutover_runtime::log::init(format);
    let shutdown = CancellationToken::new();
    tokio::spawn(cutover_runtime::drain::drain_on_signals(shutdown.clone()));
    signal_svc::runtime::run(config, shutdown).await?;
    Ok(())
}
