//! What starts the drain: SIGTERM (the kubelet stopping the pod) or SIGINT (a terminal).
//!
//! [`Signals`] is the wait both services had; [`drain_on_signals`] is signal-svc's drain
//! trigger, moved: the first signal cancels one token every task watches, a second one exits
//! at once. actuator-svc waits for one signal on [`Signals`] and then drains within its grace;
//! a second signal changes nothing there (its drain ends at the grace at the latest).
//! How long a drain may take (the grace) stays with each service's task table.

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio_util::sync::CancellationToken;

/// SIGTERM and SIGINT, caught: once installed, neither ends the process by itself.
#[derive(Debug)]
pub struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    /// Installs the handlers (needs a tokio runtime).
    pub fn install() -> std::io::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// The next SIGTERM or SIGINT.
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.int.recv() => {}
        }
    }
}

/// First SIGTERM/SIGINT cancels `shutdown` (the drain begins); a second one exits at once
/// with status 130. Spawn it beside the service.
pub async fn drain_on_signals(shutdown: CancellationToken) {
    let Ok(mut signals) = Signals::install() else {
        tracing::error!("cannot install signal handlers");
        return;
    };
    signals.recv().await;
    tracing::info!("signal received; draining (send again to exit at once)");
    shutdown.cancel();
    signals.recv().await;
    std::process::exit(130);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A signal sent to this process is seen, and does not end it.
    #[tokio::test]
    async fn a_signal_is_caught() {
        let mut signals = Signals::install().unwrap();
        let pid = std::process::id().to_string();
        let kill = tokio::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .await
            .unwrap();
        assert!(kill.success());
        tokio::time::timeout(std::time::Duration::from_secs(10), signals.recv())
            .await
            .unwrap();
    }
}
