//! cutover-runtime: what signal-svc and actuator-svc both run on, written once.
//!
//! Each piece was moved here from the two services, not rewritten. Where the two copies
//! answered differently, the difference is a parameter and each service passes its own
//! (the items say which).
//!
//! ```text
//! main.rs:  flags (clap) ─ duration::parse for every duration flag, log::LogFormat
//!           ─▶ log::init ─▶ service wiring ─▶ drain::Signals / drain::drain_on_signals
//! wiring:   admin::serve (/live, /ready, /metrics) on its own port, until shutdown
//! transport: dial::Dialer out, dial::Listener in (TCP, or a simulated network's streams)
//! loops:    backoff::Backoff between reconnects and retries (time-free: the caller sleeps)
//! TLS:      tls_reload::Reloader, the cert/key/CA files re-read while running, two shapes:
//!           server (actuator-svc's gRPC server: rustls ServerConfig, polled every POLL_EVERY)
//!           client (signal-svc's streams: checked PEM, read again at every connect)
//! ```
//!
//! No tonic here: what speaks tonic's types stays in the service (actuator-svc's TLS accept
//! loop, `grpc::incoming`; signal-svc's `ClientTlsConfig`, `tls_reload::client_config`).

pub mod admin;
pub mod backoff;
pub mod dial;
pub mod drain;
pub mod duration;
pub mod log;
pub mod tls_reload;
