//! One write round of one load balancer, as named steps repeated until the LB reads as
//! planned or the round must stop:
//! 1. [`Writer::ensure_read`]: a usable base (re-read when asked to, or when too old);
//! 2. [`Writer::settle`]: if an operation runs on the LB, read until it ends;
//! 3. [`Writer::plan_round`]: plan the current asserted set on the read, report what needs
//!    no write, and say whether anything is left to write;
//! 4. [`Writer::write`]: one write (after a lock conflict's wait), then
//!    [`Writer::after_write`] decides on its error: re-read at once, wait, or give up.
//!
//! A step that ends the round returns [`Flow::Done`]; otherwise the round loops, and the next
//! plan is made on the read that saw the last operation end.

use super::execute::{WriteError, WriteIds};
use super::{GIVE_UP_PAUSE, Strategy, Writer, jitter, outcome, retry_wait};
use crate::arm::ArmError;
use crate::arm::access::AccessRefusal;
use crate::arm::retry::{self, Attempts, Next};
use crate::lb::doc::Provisioning;
use crate::plan::{LbPlan, TargetPlan};
use crate::state::TargetView;
use std::time::Duration;
use tokio::time::Instant;

/// What a round carries from one step to the next.
struct Round {
    /// Read the LB before the next plan.
    must_read: bool,
    /// A node we could not find made us re-read once already.
    refreshed_for_unknown: bool,
    /// Failed writes and tracks in this round.
    failures: u32,
    /// Lock conflicts and 412s of this round's write, each retried at once but bounded.
    attempts: Attempts,
    /// After a lock conflict: no PUT before ARM's Retry-After, unless this LB showed the
    /// holder's operation and we saw it end (a surer sign than the hint).
    locked_until: Option<Instant>,
    ids: WriteIds,
    /// Level-triggered restore runs on the self-heal read (a fresh one), once a round.
    check_restore: bool,
}

/// Whether the round goes on (`Again`: back to its first step) or ends with this result
/// (`Err(wait)`: try again after `wait`).
enum Flow {
    Again,
    Done(Result<(), Duration>),
}

/// A planned round: the plan and the targets it was made for.
enum Planned {
    Write(LbPlan, Vec<TargetView>),
    Flow(Flow),
}

type Changed<'a> = [(&'a TargetPlan, &'a TargetView)];

impl Writer {
    /// One round. `Err(wait)`: try again after `wait`.
    pub(super) async fn round(&mut self, heal: bool) -> Result<(), Duration> {
        // A replica that neither owns this LB nor holds a tool request for it writes nothing,
        // so it reads nothing either: every replica gets every desired state, and reading the
        // LB on each of them made N replicas cost N times the reads of one (only the self-heal
        // tick refreshes a non-owner's copy, for Get and a later takeover).
        if !heal && !self.store.writes_on(&self.lb) {
            self.record_no_refusals();
            return Ok(());
        }
        self.restore_base();
        let mut r = Round {
            must_read: heal,
            refreshed_for_unknown: false,
            failures: 0,
            attempts: Attempts::default(),
            locked_until: None,
            ids: WriteIds::default(),
            check_restore: heal,
        };
        loop {
            self.ensure_read(&mut r).await?;
            let flow = match self.updating_since() {
                // An operation runs on the LB: wait for its end, reading, then plan on that read.
                Some(since) => self.settle(&mut r, since).await,
                None => match self.plan_round(&mut r) {
                    Planned::Write(plan, targets) => {
                        let changed = outcome::changed(&plan, &targets);
                        self.write(&mut r, &plan, &changed).await
                    }
                    Planned::Flow(flow) => flow,
                },
            };
            if let Flow::Done(result) = flow {
                return result;
            }
        }
    }

    /// Nothing refused on this LB (nothing planned).
    fn record_no_refusals(&self) {
        self.metrics.guard_refused(&self.lb, 0);
        self.cfg.guard.record(&self.lb, Default::default());
    }

    /// Step 1: reads the LB if asked to or if the base is missing or too old.
    async fn ensure_read(&mut self, r: &mut Round) -> Result<(), Duration> {
        let usable = self
            .base
            .as_ref()
            .is_some_and(|b| b.read_at.elapsed() <= self.cfg.max_cache_age);
        if r.must_read || !usable {
            if let Err(e) = self.read().await {
                tracing::warn!(error = %e, "read failed");
                return Err(retry_wait(&e, &mut self.backoff));
            }
            r.must_read = false;
        }
        Ok(())
    }

    /// When the base read an operation running on the LB: the time of that read.
    fn updating_since(&self) -> Option<Instant> {
        self.base
            .as_ref()
            .filter(|b| b.provisioning == Provisioning::Updating)
            .map(|b| b.read_at)
    }

    /// Step 2: reads the LB until the operation that runs on it ends.
    async fn settle(&mut self, r: &mut Round, since: Instant) -> Flow {
        let tracked = self.track(since, None).await;
        if tracked.is_ok() {
            // The operation that held the lock (if it was this one) has ended.
            r.locked_until = None;
        }
        if let Err(e) = tracked {
            r.failures += 1;
            let wait = match &e {
                WriteError::Arm(e) => retry_wait(e, &mut self.backoff),
                _ => self.backoff.next_delay(jitter()),
            };
            if r.failures >= 8 {
                return Flow::Done(Err(wait));
            }
            tokio::time::sleep(wait).await;
            r.must_read = true;
        }
        Flow::Again
    }

    /// Step 3: plans the asserted set on the read and reports what needs no write (restored
    /// drift, settled and drifted entries).
    fn plan_round(&mut self, r: &mut Round) -> Planned {
        if std::mem::take(&mut r.check_restore) {
            self.restore_drift();
            self.report_unmatched();
        }
        let targets = self.store.targets_for(&self.lb);
        if targets.is_empty() {
            self.record_no_refusals();
            return Planned::Flow(Flow::Done(Ok(())));
        }
        let plan = self.plan(&targets);
        // A node we cannot find may be newer than our copy: re-read once, then report.
        let unknown = plan.targets.iter().any(|t| t.entries.is_empty());
        if unknown
            && !r.refreshed_for_unknown
            && self
                .cache
                .age(&self.lb)
                .is_some_and(|a| a > Duration::from_secs(2))
        {
            r.refreshed_for_unknown = true;
            self.cache.request_nic_refresh();
            r.must_read = true;
            return Planned::Flow(Flow::Again);
        }
        let absent = self.cache.lb(&self.lb).is_none();
        let drift = outcome::report_settled(&self.store, &self.lb, &plan, &targets, absent);
        if drift > 0 {
            tracing::info!(entries = drift, "repairing drifted entries");
            self.metrics.drift(drift);
        }
        if plan.changes.is_empty() {
            return Planned::Flow(Flow::Done(Ok(())));
        }
        Planned::Write(plan, targets)
    }

    /// Step 4: writes the plan's changes, unless this is a dry run, the LB is no longer ours
    /// to write, or a lock conflict's wait is not over (then re-read first).
    async fn write(&mut self, r: &mut Round, plan: &LbPlan, changed: &Changed<'_>) -> Flow {
        if self.cfg.dry_run {
            tracing::info!(entries = plan.entry_count(), pools = ?plan.changes.keys().collect::<Vec<_>>(), "dry-run: would write");
            outcome::report_accepted(&self.store, &self.lb, changed);
            return Flow::Done(Ok(()));
        }
        // Ownership may have lapsed while we planned: stream states are written only by the
        // owner (tool requests by whoever received them).
        if !self.store.owns(&self.lb) && changed.iter().any(|(_, t)| !t.tool) {
            tracing::info!("no longer the owner of this load balancer; not writing");
            return Flow::Done(Ok(()));
        }
        // After a write refused for access (writer/refused.rs): nothing before its pause ends.
        if let Some(wait) = self.access_wait(changed) {
            return Flow::Done(Err(wait));
        }
        if let Some(until) = r.locked_until.take()
            && until > Instant::now()
        {
            tokio::time::sleep_until(until).await;
            r.must_read = true;
            return Flow::Again;
        }
        self.metrics.write_round(&self.lb, plan.entry_count());
        let written = match self.cfg.strategy {
            Strategy::WholeLb => self.write_whole(plan, changed, &mut r.ids).await,
            Strategy::PerPool => self.write_pools(plan, changed, &mut r.ids).await,
        };
        self.after_write(r, written, changed).await
    }

    /// What a write's result means for the round.
    async fn after_write(
        &mut self,
        r: &mut Round,
        written: Result<(), WriteError>,
        changed: &Changed<'_>,
    ) -> Flow {
        match written {
            // Plan again on the read that saw the operation end: entries that read the
            // desired state are reported EFFECTIVE; anything that arrived meanwhile is
            // written at once.
            Ok(()) => {
                r.failures = 0;
                r.attempts.reset();
                self.backoff.reset();
                if self.access.cleared() {
                    tracing::info!("write authorized again after access refusals");
                }
                Flow::Again
            }
            Err(WriteError::Stale(e)) => self.on_stale(r, e, changed),
            Err(WriteError::Busy(e)) => self.on_busy(r, e, changed).await,
            Err(WriteError::Arm(e)) => self.on_failed(r, e, changed).await,
        }
    }

    /// 412, or no usable read: re-read and re-plan at once, a bounded number of times.
    fn on_stale(&mut self, r: &mut Round, e: Option<ArmError>, changed: &Changed<'_>) -> Flow {
        if r.attempts.stale() == Next::GiveUp {
            // Another writer changes the LB between each of our reads and writes: say so and
            // come back later instead of racing it.
            let reason = match &e {
                Some(e) => format!(
                    "the load balancer changed under {} writes in a row: {}",
                    retry::MAX_STALE,
                    e.reason()
                ),
                None => format!(
                    "no usable read of load balancer {} for {} writes in a row",
                    self.lb,
                    retry::MAX_STALE
                ),
            };
            return Flow::Done(Err(self.give_up(changed, reason, e.as_ref())));
        }
        match &e {
            Some(e) => tracing::debug!(error = %e, "another writer changed the LB; re-reading"),
            None => tracing::debug!("no usable base; re-reading"),
        }
        r.must_read = true;
        Flow::Again
    }

    /// Another operation holds the LB's lock: no write before its Retry-After, a bounded
    /// number of times.
    async fn on_busy(&mut self, r: &mut Round, e: ArmError, changed: &Changed<'_>) -> Flow {
        if r.attempts.lock_conflict() == Next::GiveUp {
            let reason = format!(
                "another operation held the load balancer for {} writes in a row: {}",
                retry::MAX_LOCK_CONFLICTS,
                e.reason()
            );
            return Flow::Done(Err(self.give_up(changed, reason, Some(&e))));
        }
        // ARM said when to try again (Retry-After; NRP's message says the same): no write
        // before, unless the next read shows the holder's operation on this LB and we see it
        // end. The pause keeps a race (lock taken between our read and our PUT) from spinning
        // and replicas that met the same lock apart.
        let hint = e.retry_after().unwrap_or_default();
        tracing::info!(error = %e, retry_after_ms = hint.as_millis() as u64, "load balancer locked by another operation");
        r.locked_until = Some(Instant::now() + hint);
        tokio::time::sleep(Duration::from_millis(50 + (jitter() * 100.0) as u64)).await;
        r.must_read = true;
        Flow::Again
    }

    /// Any other failed write: its nodes are told FAILED once it is final or repeated, and it
    /// is tried again after a backoff while retryable.
    async fn on_failed(&mut self, r: &mut Round, e: ArmError, changed: &Changed<'_>) -> Flow {
        // 403 for access: reported as such, written again only after a slow pause.
        if let Some(refusal) = AccessRefusal::of(&e) {
            return Flow::Done(Err(self.on_access_refused(&refusal, &e, changed)));
        }
        r.failures += 1;
        let retry = e.retryable();
        let wait = retry_wait(&e, &mut self.backoff);
        let op_failed = matches!(e, ArmError::Operation { .. });
        if let ArmError::Operation { status, .. } = &e {
            self.metrics.operation_failed(&self.lb, status);
        }
        if !retry || op_failed || r.failures >= 3 {
            for (tp, tv) in changed {
                self.store.fail(&tp.key, tv.version, e.reason(), retry);
            }
        }
        tracing::warn!(error = %e, retry, wait_ms = wait.as_millis() as u64, "write failed");
        if !retry {
            // Not retried on our own; the self-heal tick or a new instruction tries again.
            return Flow::Done(Ok(()));
        }
        if r.failures >= 8 {
            return Flow::Done(Err(wait));
        }
        tokio::time::sleep(wait).await;
        r.must_read = true;
        Flow::Again
    }

    /// Ends a round whose write kept being refused: its nodes are told FAILED (will retry)
    /// with `reason`, and the round is tried again after a backoff that grows while this goes
    /// on (and is at least ARM's `Retry-After`).
    fn give_up(&mut self, changed: &Changed<'_>, reason: String, e: Option<&ArmError>) -> Duration {
        let wait = match e {
            Some(e) => retry_wait(e, &mut self.backoff),
            None => self.backoff.next_delay(jitter()),
        }
        .max(GIVE_UP_PAUSE);
        tracing::warn!(%reason, wait_ms = wait.as_millis() as u64, "write given up for now");
        for (tp, tv) in changed {
            self.store.fail(&tp.key, tv.version, reason.clone(), true);
        }
        wait
    }
}
