//! The start-up error of a bad flag or file: it names the flag (shared by `config` and the TLS
//! files `tls_reload` re-reads at run time).

/// A configuration error, naming the flag.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--{flag}: {reason}")]
    Invalid { flag: &'static str, reason: String },
    #[error("--{flag}: cannot read {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
}

/// A `ConfigError::Invalid` for `flag`.
pub fn invalid(flag: &'static str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        flag,
        reason: reason.into(),
    }
}
