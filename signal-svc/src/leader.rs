//! Leader election with client-go's semantics on a coordination.k8s.io/v1 Lease
//! ([`crate::lease_lock`] does the I/O, [`crate::domain::term`] the timing rules):
//!
//! - the leader renews every `renew_interval`; each attempt is bounded by the time left
//!   before its renew deadline, counted from the last *successful* renewal, and a failed or
//!   slow renewal is simply retried: one bad API call never costs leadership;
//! - past the renew deadline it stops writing (suspended) but keeps its epoch and streams: a
//!   later renewal of the same record resumes them; past the lease duration it lets go;
//! - a standby reads the Lease every `retry_interval` and acquires only after seeing the
//!   record unchanged for the lease duration by its own clock (clock skew does not matter);
//! - on shutdown the leader stops streaming first, then releases the Lease (hand-over at the
//!   standby's next look).
//!
//! The epoch is the Lease's `leaseTransitions`, and it never goes backwards: an acquisition
//! takes one more than anything seen on the Lease or reported by an actuator, and when an
//! actuator refuses our hello because it accepted a higher epoch (the Lease was deleted and
//! recreated below it), the leader raises its own Lease above it with an RV-checked PUT.

use crate::domain::lease::Epochs;
use crate::domain::term::{Standing, Term, Timings};
use crate::lease_lock::{LeaseLock, Step};
use crate::state::Shared;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::sync::Arc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Lease settings.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    pub identity: String,
    pub timings: Timings,
}

/// The election loop's state.
struct Election {
    lock: LeaseLock,
    timings: Timings,
    term: Option<Term>,
}

impl Election {
    /// One attempt, bounded by what the current term allows.
    async fn attempt(&mut self, shared: &Shared, sent: Instant) {
        let bound = self.term.map_or(self.timings.duration, |t| {
            t.attempt_bound(sent, &self.timings)
        });
        let epochs = Epochs {
            mine: self.term.map(|t| t.epoch),
            floor: shared.epoch_floor(),
            seen: 0,
        };
        match tokio::time::timeout(bound, self.lock.try_once(epochs)).await {
            Ok(Ok(Step::Leading(epoch))) => match &mut self.term {
                Some(t) if t.epoch == epoch => t.renewed(sent),
                _ => self.term = Some(Term::new(epoch, sent)),
            },
            Ok(Ok(Step::NotLeading)) => {
                if self.term.take().is_some() {
                    tracing::warn!("another replica holds the lease; stopping at once");
                    shared.lose_leadership();
                }
                self.lock.forget();
            }
            Ok(Err(e)) => {
                shared.metrics.lease_failure(e.metric_label());
                tracing::debug!(error = %e, "lease call failed; retrying");
            }
            Err(_) => {
                shared.metrics.lease_failure("timeout");
                tracing::debug!(?bound, "lease call timed out; retrying");
            }
        }
    }

    /// Applies where the term stands now to what this process may do.
    fn apply(&mut self, shared: &Shared) {
        let Some(term) = self.term else { return };
        match term.standing(Instant::now(), &self.timings) {
            Standing::Active => shared.lead(term.epoch),
            Standing::Suspended => shared.suspend(),
            Standing::Lost => {
                tracing::warn!(
                    epoch = term.epoch,
                    "no renewal within the lease duration; letting the lease go"
                );
                self.term = None;
                self.lock.forget();
                shared.lose_leadership();
            }
        }
    }

    fn pause(&self) -> std::time::Duration {
        match self.term {
            Some(_) => self.timings.renew_interval,
            None => self.timings.retry_interval,
        }
    }
}

/// Runs the election until shutdown; on shutdown stops leading first, then releases.
pub async fn run(
    client: kube::Client,
    cfg: LeaseConfig,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
) {
    let api: Api<Lease> = Api::namespaced(client, &cfg.namespace);
    let mut el = Election {
        lock: LeaseLock::new(api, cfg.name, cfg.identity, cfg.timings.duration),
        timings: cfg.timings,
        term: None,
    };
    let raise = shared.epoch_raise_requested();
    loop {
        let sent = Instant::now();
        tokio::select! {
            _ = shutdown.cancelled() => break,
            () = el.attempt(&shared, sent) => {}
        }
        el.apply(&shared);
        // An actuator reported an epoch at or above ours: raise soon (not in a hot loop).
        let raise_due = el.term.is_some_and(|t| shared.epoch_floor() >= t.epoch);
        let pause = if raise_due {
            el.pause().min(std::time::Duration::from_millis(100))
        } else {
            el.pause()
        };
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tokio::time::sleep_until(sent + pause) => {}
            _ = raise.notified() => {}
        }
    }
    if el.term.take().is_some() {
        shared.lose_leadership();
        el.lock.release().await;
    }
}
