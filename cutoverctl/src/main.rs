//! `cutoverctl`: talk to actuator-svc's tool RPCs (`cutover.v1.Actuator`).
//!
//! Flow: parse flags (`cli`) -> open one gRPC channel, with TLS client certificates when given
//! (`connect`) -> run one command (`commands`) -> print a table or JSON (`render`).
//! Exit codes: 0 success, 1 the actuator refused or failed, 2 usage or connection error,
//! 3 a `set --wait` that timed out, 141 stdout closed by its reader (`out`).

mod cli;
mod commands;
mod connect;
mod escape;
mod out;
mod render;

use clap::Parser;
use std::process::ExitCode;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli).await {
        Ok(outcome) => outcome.exit_code(),
        Err(err) => {
            // The error may carry the actuator's message: escaped like everything from the network.
            eprintln!("cutoverctl: {}", escape::text(&format!("{err:#}")));
            err.exit_code()
        }
    }
}
