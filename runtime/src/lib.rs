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
//! ```
//!
//! Not here yet: the TLS reloader (`tls_reload.rs`, still one per service).

pub mod admin;
pub mod backoff;
pub mod dial;
pub mod drain;
pub mod duration;
pub mod log;
