//! The start-up error of a bad flag or file: it names the flag (shared by `config` and the TLS
//! files `tls_reload` re-reads at run time, whose errors convert).

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

/// The runtime's TLS errors name the flag with its dashes and the file; this error names the
/// flag, as every other of signal-svc's start-up errors (`--tls-ca: no PEM certificate found`).
impl From<cutover_runtime::tls_reload::TlsError> for ConfigError {
    fn from(e: cutover_runtime::tls_reload::TlsError) -> Self {
        use cutover_runtime::tls_reload::TlsError;
        let bare = |flag: &'static str| flag.trim_start_matches("--");
        match e {
            TlsError::Read { flag, path, source } => ConfigError::Read {
                flag: bare(flag),
                path,
                source,
            },
            TlsError::Parse { flag, reason, .. } => invalid(bare(flag), reason),
            TlsError::Config(reason) => invalid("tls-cert", reason),
        }
    }
}
