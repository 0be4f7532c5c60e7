//! Log set-up: `--log-format plain|json`, the filter from `RUST_LOG` (default `info`).

use clap::ValueEnum;

/// The log output format (`--log-format`).
// No doc comments on the variants: clap would print them in `--help`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Plain,
    Json,
}

/// Installs the global subscriber: the filter from `RUST_LOG`, else `info`, written to
/// stdout in `format`. Call once, before anything logs.
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let b = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        // JSON has no colour whatever `with_ansi` says (its formatter never writes escapes).
        LogFormat::Json => b.json().init(),
        // Colour only on a terminal: log files and collectors get plain text.
        LogFormat::Plain => b
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_values_are_plain_and_json() {
        assert_eq!(LogFormat::from_str("plain", false), Ok(LogFormat::Plain));
        assert_eq!(LogFormat::from_str("json", false), Ok(LogFormat::Json));
        assert!(LogFormat::from_str("text", false).is_err());
    }
}
