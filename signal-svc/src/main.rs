//! signal-svc binary: parse, validate, log, run until SIGTERM.

use clap::Parser;
use signal_svc::config::{Args, LogFormat};
use tokio_util::sync::CancellationToken;

fn init_logs(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Plain => b.init(),
    }
}

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
    init_logs(format);
    let shutdown = CancellationToken::new();
    tokio::spawn(signal_svc::runtime::drain_on_signals(shutdown.clone()));
    signal_svc::runtime::run(config, shutdown).await?;
    Ok(())
}
