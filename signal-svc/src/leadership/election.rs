//! Leader election with client-go's semantics on a coordination.k8s.io/v1 Lease
//! ([`crate::leadership::lease_lock`] does the I/O, [`crate::core::term`] the timing rules):
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

use crate::core::lease::Epochs;
use crate::core::term::{Standing, Term, Timings};
use crate::leadership::lease_lock::{LeaseLock, Step};
use crate::shared::Shared;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use std::convert::Infallible;
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
    /// The epoch of a term this process lost by timing alone: if the Lease record still
    /// names us with it (nobody took over), re-acquiring keeps it instead of re-versioning.
    last_epoch: Option<u64>,
}

/// While a Lease call is in flight, applies the term's deadlines on time: suspends at the
/// renew deadline and stops the streams at the lease's end (the call's answer may still
/// renew the term as of its send, and the loop then resumes).
async fn keep_time(term: Option<Term>, timings: Timings, shared: &Shared) -> Infallible {
    if let Some(t) = term {
        while let Some(at) = t.next_change(Instant::now(), &timings) {
            tokio::time::sleep_until(at).await;
            match t.standing(Instant::now(), &timings) {
                Standing::Active => {}
                Standing::Suspended => shared.suspend(),
                Standing::Lost => shared.lose_leadership(),
            }
        }
    }
    std::future::pending().await
}

impl Election {
    /// One attempt; the term's deadlines are kept while it runs.
    async fn attempt(&mut self, shared: &Shared, sent: Instant) {
        let bound = match self.term {
            Some(_) => self.timings.attempt_bound(),
            None => self.timings.duration,
        };
        let epochs = Epochs {
            mine: self.term.map(|t| t.epoch).or(self.last_epoch),
            floor: shared.epoch_floor(),
            seen: 0,
        };
        let call = tokio::time::timeout(bound, self.lock.try_once(epochs));
        let outcome = tokio::select! {
            outcome = call => outcome,
            never = keep_time(self.term, self.timings, shared) => match never {},
        };
        match outcome {
            Ok(Ok(Step::Leading(epoch))) => match &mut self.term {
                Some(t) if t.epoch == epoch => t.renewed(sent),
                _ => self.term = Some(Term::new(epoch, sent)),
            },
            Ok(Ok(Step::NotLeading)) => {
                self.last_epoch = None;
                if self.term.take().is_some() {
                    tracing::warn!("another replica holds the lease; stopping at once");
                    shared.lose_leadership();
                }
                self.lock.forget();
            }
            Ok(Err(e)) => {
                shared.metrics().lease_failure(e.metric_label());
                tracing::debug!(error = %e, "lease call failed; retrying");
            }
            Err(_) => {
                shared.metrics().lease_failure("timeout");
                tracing::debug!(?bound, "lease call timed out; retrying");
            }
        }
    }

    /// Applies where the term stands now to what this process may do.
    fn apply(&mut self, shared: &Shared) {
        let Some(term) = self.term else { return };
        match term.standing(Instant::now(), &self.timings) {
            Standing::Active => shared.lead_until(
                term.epoch,
                Some(term.renewed_sent_at + self.timings.renew_deadline),
            ),
            Standing::Suspended => shared.suspend(),
            Standing::Lost => {
                tracing::warn!(
                    epoch = term.epoch,
                    "no renewal within the lease duration; letting the lease go"
                );
                self.last_epoch = Some(term.epoch);
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
        last_epoch: None,
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
