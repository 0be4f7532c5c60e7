//! Tracking an operation to its end by reading the LB (`completion` paces the reads), and
//! the count of LBs being tracked that slows every reader evenly on a low budget.

use super::execute::WriteError;
use super::{Writer, retry_wait};
use crate::arm::{ArmError, PutAccepted, retry::Backoff};
use crate::lb::doc::Provisioning;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::time::Instant;

/// Documents up to this size are read whole while an operation is watched (a few ms to send
/// and scan); larger ones (thousands of nodes) are scanned until the operation ends, so a
/// 14 MB body is not buffered every few hundred milliseconds.
pub(super) const WHOLE_READ_MAX: usize = 2 << 20;

/// Counts the LBs with an operation being watched (reads slow down evenly when many are).
#[derive(Debug, Default)]
pub struct InFlight(AtomicUsize);

struct InFlightGuard<'a>(&'a InFlight);

impl InFlight {
    fn enter(&self) -> (usize, InFlightGuard<'_>) {
        let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        (n, InFlightGuard(self))
    }
    fn now(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }
}

impl Drop for InFlightGuard<'_> {
    fn drop(&mut self) {
        self.0.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Writer {
    /// Reads the LB until the operation running on it ends (`Succeeded` or `Failed`); the
    /// last read stays as the base. `ours`: the PUT we are tracking (its duration is learned,
    /// its operation URL read once for details if it failed).
    pub(super) async fn track(
        &mut self,
        since: Instant,
        ours: Option<PutAccepted>,
    ) -> Result<(), WriteError> {
        let in_flight = self.in_flight.clone();
        let (_, _guard) = in_flight.enter();
        let deadline = since + self.cfg.op_deadline;
        let mut errors = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        let expected = ours.as_ref().and_then(|_| self.durations.expected());
        // Send times (since `since`) of the previous read and of the last one that still said
        // `Updating`.
        let (mut last_sent, mut last_updating) = (None, None);
        let mut reported_slow = false;
        loop {
            let (fill, rate) = self.arm.read_headroom();
            let steps = self.cfg.pace.steps(self.in_flight.now(), fill, rate);
            self.metrics
                .completion_poll_interval(steps.base.as_secs_f64());
            let at = self.cfg.pace.next_send(last_sent, expected, steps);
            tokio::time::sleep_until(since + at).await;
            let sent = since.elapsed();
            last_sent = Some(sent);
            // Read whole when the read is the base of the next (coalesced) write, or when the
            // document is small: the read that sees the end then also says which entries are
            // effective, one round trip sooner. A large one is only scanned until it ends.
            let read = if self.store.unwritten_on(&self.lb) > 0 || self.body_len <= WHOLE_READ_MAX {
                self.read().await
            } else {
                self.probe().await
            };
            match read {
                Ok(()) => {}
                Err(e) if e.retryable() => {
                    tokio::time::sleep(retry_wait(&e, &mut errors)).await;
                    continue;
                }
                Err(e) => return Err(WriteError::Arm(e)),
            }
            let state = self.base.as_ref().map(|b| b.provisioning);
            match state {
                Some(Provisioning::Updating) => {
                    last_updating = Some(sent);
                    if !reported_slow && sent > self.cfg.op_slow {
                        // Still tracked (and repeated if it fails); the nodes waiting on it
                        // are told now rather than at the deadline.
                        reported_slow = true;
                        self.metrics.operation_failed(&self.lb, "Stuck");
                        let reason = format!(
                            "an operation on load balancer {} is still Updating after {} s",
                            self.lb,
                            sent.as_secs()
                        );
                        tracing::warn!(%reason, "operation slow");
                        self.store.fail_waiting_on(&self.lb, &reason);
                    }
                }
                // Ended (or the LB is gone): the read is the base of what comes next.
                Some(Provisioning::Succeeded) | None => {
                    if ours.is_some() {
                        self.durations
                            .record(self.cfg.pace.learned(last_updating, sent));
                        self.metrics.operation_took(sent.as_secs_f64());
                    }
                    return Ok(());
                }
                Some(Provisioning::Failed) => {
                    return Err(WriteError::Arm(self.failure(since, ours.as_ref()).await));
                }
            }
            if Instant::now() > deadline {
                return Err(WriteError::Arm(ArmError::Timeout {
                    op: "track_operation",
                    resource: self.lb.clone(),
                    timeout: self.cfg.op_deadline,
                }));
            }
        }
    }

    /// After our operation ended with the LB reading `Succeeded`: if an entry it changed
    /// reads otherwise, asks the operation why (canceled and superseded by another write, or
    /// failed); `Err` then carries that outcome. Costs a read only when the write did not land.
    pub(super) async fn landed(
        &self,
        since: Instant,
        ours: &PutAccepted,
        changes: &std::collections::BTreeMap<
            String,
            std::collections::BTreeMap<String, crate::lb::index::Admin>,
        >,
    ) -> Result<(), WriteError> {
        let (index, _) = self.cache.index(Some(&self.lb));
        if index.reads_all(&self.lb, changes) {
            return Ok(());
        }
        let Some(url) = &ours.operation else {
            return Ok(());
        };
        if since.elapsed() < ours.retry_after.unwrap_or_default() {
            return Ok(());
        }
        match self.arm.poll(url).await {
            Ok(crate::arm::OpStatus::Ended {
                status,
                code,
                message,
                details,
            }) if !status.eq_ignore_ascii_case("Succeeded") => {
                Err(WriteError::Arm(ArmError::Operation {
                    resource: self.lb.clone(),
                    status,
                    code,
                    message,
                    details,
                }))
            }
            // Succeeded, and overwritten since: the next plan writes it again.
            _ => Ok(()),
        }
    }

    /// The error of a failed operation: from its operation URL when ARM's `Retry-After`
    /// allows reading it by now, else what the LB says.
    pub(super) async fn failure(&self, since: Instant, ours: Option<&PutAccepted>) -> ArmError {
        let generic = ArmError::Operation {
            resource: self.lb.clone(),
            status: "Failed".into(),
            code: String::new(),
            message: "the load balancer reads provisioningState Failed after the write".into(),
            details: Vec::new(),
        };
        let Some(acc) = ours else {
            return generic;
        };
        let Some(url) = &acc.operation else {
            return generic;
        };
        if since.elapsed() < acc.retry_after.unwrap_or_default() {
            return generic;
        }
        match self.arm.poll(url).await {
            Ok(crate::arm::OpStatus::Ended {
                status,
                code,
                message,
                details,
            }) => ArmError::Operation {
                resource: self.lb.clone(),
                status,
                code,
                message,
                details,
            },
            _ => generic,
        }
    }
}
