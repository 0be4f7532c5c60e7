//! One writer task per load balancer: the only code of this replica that writes that LB, and
//! it writes only while the replica owns the LB (`state::ownership`) or for tool requests.
//!
//! A round, as a list of steps (this file runs them; each job has its own file):
//! 1. **read** (`base`): GET the LB unless the last read is still a usable base;
//! 2. **wait** (`track`): if an operation runs on it (ours, another replica's,
//!    cloud-provider-azure's), read it until the operation ends (`completion` paces the
//!    reads), then go on from that read;
//! 3. **plan** (`plan`, pure) the *current* asserted set against the read: everything that
//!    arrived while the last write was in flight coalesces into this one write;
//! 4. **report** what needs no write (`outcome`);
//! 5. **write** (`execute`): one PUT with `If-Match` spliced from the read, report ACCEPTED;
//! 6. **track**: read the LB until the operation ends; that read is the base of step 3 again,
//!    so the next write goes out the moment the previous one ended.
//!
//! On 412 (someone else wrote) the LB is re-read and re-planned: only our nodes' entries are
//! edited, so other writers' changes are never undone. Retryable errors back off with jitter;
//! the self-heal tick re-reads and repairs drift.

mod base;
mod completion;
mod execute;
mod not_written;
mod outcome;
mod restore;
mod track;

pub use completion::{Durations, PollPace, Steps};
pub use track::InFlight;

use base::Base;
use execute::{WriteError, WriteIds};

use crate::arm::retry::{Attempts, Next};
use crate::arm::{ArmClient, ArmError, retry::Backoff};
use crate::lb::doc::Provisioning;
use crate::metrics::Metrics;
use crate::plan::cache::{BaseCache, DEFAULT_BASE_BUDGET, SharedCache};
use crate::plan::guard::Guard;
use crate::plan::{self, LbPlan, Target};
use crate::state::{Store, TargetView};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::Instrument;

/// How a round writes: one PUT per changed pool, or one PUT of the whole LB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    PerPool,
    WholeLb,
}

/// Writer settings.
#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub strategy: Strategy,
    pub dry_run: bool,
    /// Re-read and repair drift this often.
    pub self_heal: Duration,
    /// A read older than this is not used as the base of a write.
    pub max_cache_age: Duration,
    /// Pacing of the reads that watch an operation.
    pub pace: PollPace,
    /// Upper bound of one operation's tracking.
    pub op_deadline: Duration,
    /// An operation still `Updating` this long is reported: FAILED (will retry) for the nodes
    /// waiting on it, and a metric.
    pub op_slow: Duration,
    /// The last `Succeeded` read of each owned LB, kept between rounds under a byte budget
    /// (shared by every writer of the process).
    pub bases: Arc<BaseCache>,
    /// The blast-radius guard (shared by every writer and the RPCs that report it).
    pub guard: Guard,
}

impl WriterConfig {
    /// Defaults for tests and benches.
    pub fn new(strategy: Strategy) -> Self {
        Self {
            strategy,
            dry_run: false,
            self_heal: Duration::from_secs(30),
            max_cache_age: Duration::from_secs(60),
            pace: PollPace::default(),
            op_deadline: Duration::from_secs(600),
            op_slow: Duration::from_secs(60),
            bases: Arc::new(BaseCache::new(DEFAULT_BASE_BUDGET)),
            guard: Guard::default(),
        }
    }
}

/// The writer of one load balancer.
pub struct Writer {
    lb: String,
    arm: ArmClient,
    store: Arc<Store>,
    cache: Arc<SharedCache>,
    metrics: Arc<Metrics>,
    cfg: WriterConfig,
    backoff: Backoff,
    in_flight: Arc<InFlight>,
    durations: Durations,
    base: Option<Base>,
    /// Size of the LB's document at its last whole read.
    body_len: usize,
    /// When this writer last wrote the LB (the base cache evicts the least recent).
    written_at: Option<Instant>,
    /// What was last said about pools and entries never written.
    reported: not_written::Reported,
}

/// The least pause after a write given up (lock conflicts or 412s beyond their bound): the
/// other operation or writer gets time to finish before this one reads again.
const GIVE_UP_PAUSE: Duration = Duration::from_secs(2);

fn jitter() -> f64 {
    rand::random::<f64>()
}

fn retry_wait(e: &ArmError, backoff: &mut Backoff) -> Duration {
    e.retry_after()
        .unwrap_or_default()
        .max(backoff.next_delay(jitter()))
}

impl Writer {
    /// A writer for `lb`; `in_flight` is shared by every writer of the process.
    pub fn new(
        lb: String,
        arm: ArmClient,
        store: Arc<Store>,
        cache: Arc<SharedCache>,
        metrics: Arc<Metrics>,
        cfg: WriterConfig,
        in_flight: Arc<InFlight>,
    ) -> Self {
        Self {
            lb,
            arm,
            store,
            cache,
            metrics,
            cfg,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(30)),
            in_flight,
            durations: Durations::default(),
            base: None,
            body_len: usize::MAX,
            written_at: None,
            reported: Default::default(),
        }
    }

    /// Runs until `shutdown` turns true; a round in flight is finished first.
    pub async fn run(mut self, mut shutdown: watch::Receiver<bool>) {
        let span = tracing::info_span!("writer", lb = %self.lb);
        async move {
            let Some(notify) = self.store.notifier(&self.lb) else {
                return;
            };
            let mut heal = tokio::time::interval(self.cfg.self_heal);
            heal.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            heal.tick().await;
            // First read: the index must be built before we are ready.
            let mut retry_in = self.read().await.err().map(|e| {
                tracing::warn!(error = %e, "initial read failed");
                self.backoff.next_delay(jitter())
            });
            self.release_base();
            loop {
                if *shutdown.borrow() {
                    break;
                }
                let mut heal_round = false;
                let delay = retry_in.take().unwrap_or(Duration::from_secs(3600));
                tokio::select! {
                    _ = notify.notified() => {}
                    _ = heal.tick() => heal_round = true,
                    _ = tokio::time::sleep(delay) => heal_round = true,
                    _ = shutdown.changed() => continue,
                }
                self.metrics
                    .queue(&self.lb, self.store.pending_on(&self.lb));
                match self.round(heal_round).await {
                    Ok(()) => self.backoff.reset(),
                    Err(wait) => retry_in = Some(wait),
                }
                self.release_base();
                self.metrics
                    .queue(&self.lb, self.store.pending_on(&self.lb));
            }
        }
        .instrument(span)
        .await
    }

    fn plan(&self, targets: &[TargetView]) -> LbPlan {
        let (index, _) = self.cache.index(Some(&self.lb));
        let t: Vec<Target> = targets
            .iter()
            .map(|t| Target {
                key: t.key.clone(),
                node: t.spec.clone(),
                desired: t.desired,
            })
            .collect();
        let plan = plan::plan_lb(&index, &self.lb, &t, &self.cfg.guard);
        let refused = outcome::refused(&plan);
        self.metrics.guard_refused(&self.lb, refused.len());
        self.cfg.guard.record(&self.lb, refused);
        plan
    }

    /// Ends a round whose write kept being refused: its nodes are told FAILED (will retry)
    /// with `reason`, and the round is tried again after a backoff that grows while this goes
    /// on (and is at least ARM's `Retry-After`).
    fn give_up(
        &mut self,
        changed: &[(&plan::TargetPlan, &TargetView)],
        reason: String,
        e: Option<&ArmError>,
    ) -> Duration {
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

    /// One round. `Err(wait)`: try again after `wait`.
    async fn round(&mut self, heal: bool) -> Result<(), Duration> {
        let mut must_read = heal;
        let mut refreshed_for_unknown = false;
        let mut failures = 0u32;
        // Lock conflicts and 412s of this round's write, each retried at once but bounded.
        let mut attempts = Attempts::default();
        // After a lock conflict: no PUT before ARM's Retry-After, unless this LB showed the
        // holder's operation and we saw it end (a surer sign than the hint).
        let mut locked_until: Option<Instant> = None;
        let mut ids = WriteIds::default();
        // Level-triggered restore runs on the self-heal read (a fresh one), once a round.
        let mut check_restore = heal;
        // A replica that neither owns this LB nor holds a tool request for it writes nothing,
        // so it reads nothing either: every replica gets every desired state, and reading the
        // LB on each of them made N replicas cost N times the reads of one (only the self-heal
        // tick refreshes a non-owner's copy, for Get and a later takeover).
        if !heal && !self.store.writes_on(&self.lb) {
            self.metrics.guard_refused(&self.lb, 0);
            self.cfg.guard.record(&self.lb, Default::default());
            return Ok(());
        }
        self.restore_base();
        loop {
            let usable = self
                .base
                .as_ref()
                .is_some_and(|b| b.read_at.elapsed() <= self.cfg.max_cache_age);
            if must_read || !usable {
                if let Err(e) = self.read().await {
                    tracing::warn!(error = %e, "read failed");
                    return Err(retry_wait(&e, &mut self.backoff));
                }
                must_read = false;
            }
            let Some(since) = self
                .base
                .as_ref()
                .filter(|b| b.provisioning == Provisioning::Updating)
                .map(|b| b.read_at)
            else {
                if std::mem::take(&mut check_restore) {
                    self.restore_drift();
                    self.report_unmatched();
                }
                let targets = self.store.targets_for(&self.lb);
                if targets.is_empty() {
                    self.metrics.guard_refused(&self.lb, 0);
                    self.cfg.guard.record(&self.lb, Default::default());
                    return Ok(());
                }
                let plan = self.plan(&targets);
                // A node we cannot find may be newer than our copy: re-read once, then report.
                let unknown = plan.targets.iter().any(|t| t.entries.is_empty());
                if unknown
                    && !refreshed_for_unknown
                    && self
                        .cache
                        .age(&self.lb)
                        .is_some_and(|a| a > Duration::from_secs(2))
                {
                    refreshed_for_unknown = true;
                    self.cache.request_nic_refresh();
                    must_read = true;
                    continue;
                }
                let absent = self.cache.lb(&self.lb).is_none();
                let drift = outcome::report_settled(&self.store, &self.lb, &plan, &targets, absent);
                if drift > 0 {
                    tracing::info!(entries = drift, "repairing drifted entries");
                    self.metrics.drift(drift);
                }
                if plan.changes.is_empty() {
                    return Ok(());
                }
                let changed = outcome::changed(&plan, &targets);
                if self.cfg.dry_run {
                    tracing::info!(entries = plan.entry_count(), pools = ?plan.changes.keys().collect::<Vec<_>>(), "dry-run: would write");
                    outcome::report_accepted(&self.store, &self.lb, &changed);
                    return Ok(());
                }
                // Ownership may have lapsed while we planned: stream states are written only
                // by the owner (tool requests by whoever received them).
                if !self.store.owns(&self.lb) && changed.iter().any(|(_, t)| !t.tool) {
                    tracing::info!("no longer the owner of this load balancer; not writing");
                    return Ok(());
                }
                if let Some(until) = locked_until.take()
                    && until > Instant::now()
                {
                    tokio::time::sleep_until(until).await;
                    must_read = true;
                    continue;
                }
                self.metrics.write_round(&self.lb, plan.entry_count());
                let outcome = match self.cfg.strategy {
                    Strategy::WholeLb => self.write_whole(&plan, &changed, &mut ids).await,
                    Strategy::PerPool => self.write_pools(&plan, &changed, &mut ids).await,
                };
                match outcome {
                    // Plan again on the read that saw the operation end: entries that read the
                    // desired state are reported EFFECTIVE; anything that arrived meanwhile is
                    // written at once.
                    Ok(()) => {
                        failures = 0;
                        attempts.reset();
                        self.backoff.reset();
                    }
                    Err(WriteError::Stale(e)) => {
                        if attempts.stale() == Next::GiveUp {
                            // Another writer changes the LB between each of our reads and
                            // writes: say so and come back later instead of racing it.
                            let reason = match &e {
                                Some(e) => format!(
                                    "the load balancer changed under {} writes in a row: {}",
                                    crate::arm::retry::MAX_STALE,
                                    e.reason()
                                ),
                                None => format!(
                                    "no usable read of load balancer {} for {} writes in a row",
                                    self.lb,
                                    crate::arm::retry::MAX_STALE
                                ),
                            };
                            return Err(self.give_up(&changed, reason, e.as_ref()));
                        }
                        match &e {
                            Some(e) => {
                                tracing::debug!(error = %e, "another writer changed the LB; re-reading")
                            }
                            None => tracing::debug!("no usable base; re-reading"),
                        }
                        must_read = true;
                    }
                    Err(WriteError::Busy(e)) => {
                        if attempts.lock_conflict() == Next::GiveUp {
                            let reason = format!(
                                "another operation held the load balancer for {} writes in a row: {}",
                                crate::arm::retry::MAX_LOCK_CONFLICTS,
                                e.reason()
                            );
                            return Err(self.give_up(&changed, reason, Some(&e)));
                        }
                        // ARM said when to try again (Retry-After; NRP's message says the
                        // same): no write before, unless the next read shows the holder's
                        // operation on this LB and we see it end. The pause keeps a race
                        // (lock taken between our read and our PUT) from spinning and
                        // replicas that met the same lock apart.
                        let hint = e.retry_after().unwrap_or_default();
                        tracing::info!(error = %e, retry_after_ms = hint.as_millis() as u64, "load balancer locked by another operation");
                        locked_until = Some(Instant::now() + hint);
                        tokio::time::sleep(Duration::from_millis(50 + (jitter() * 100.0) as u64))
                            .await;
                        must_read = true;
                    }
                    Err(WriteError::Arm(e)) => {
                        failures += 1;
                        let retry = e.retryable();
                        let wait = retry_wait(&e, &mut self.backoff);
                        let op_failed = matches!(e, ArmError::Operation { .. });
                        if let ArmError::Operation { status, .. } = &e {
                            self.metrics.operation_failed(&self.lb, status);
                        }
                        if !retry || op_failed || failures >= 3 {
                            for (tp, tv) in &changed {
                                self.store.fail(&tp.key, tv.version, e.reason(), retry);
                            }
                        }
                        tracing::warn!(error = %e, retry, wait_ms = wait.as_millis() as u64, "write failed");
                        if !retry {
                            // Not retried on our own; the self-heal tick or a new instruction
                            // tries again.
                            return Ok(());
                        }
                        if failures >= 8 {
                            return Err(wait);
                        }
                        tokio::time::sleep(wait).await;
                        must_read = true;
                    }
                }
                continue;
            };
            // An operation runs on the LB: wait for its end, reading, then plan on that read.
            let tracked = self.track(since, None).await;
            if tracked.is_ok() {
                // The operation that held the lock (if it was this one) has ended.
                locked_until = None;
            }
            if let Err(e) = tracked {
                failures += 1;
                let wait = match &e {
                    WriteError::Arm(e) => retry_wait(e, &mut self.backoff),
                    _ => self.backoff.next_delay(jitter()),
                };
                if failures >= 8 {
                    return Err(wait);
                }
                tokio::time::sleep(wait).await;
                must_read = true;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(status: u16, retry_after: Option<Duration>) -> ArmError {
        ArmError::Http {
            op: "put_lb",
            resource: "/x".into(),
            status,
            code: String::new(),
            message: String::new(),
            details: vec![],
            retry_after,
            trace: Default::default(),
        }
    }

    /// Every 429 and 503 waits at least its Retry-After (parsed from seconds or an HTTP date
    /// by `arm::retry`), whatever the backoff says.
    #[test]
    fn retry_waits_honour_retry_after() {
        let mut backoff = Backoff::new(Duration::from_millis(200), Duration::from_secs(30));
        for status in [429, 503] {
            let wait = retry_wait(&http(status, Some(Duration::from_secs(7))), &mut backoff);
            assert!(wait >= Duration::from_secs(7), "{status}: {wait:?}");
        }
        let wait = retry_wait(&http(503, None), &mut backoff);
        assert!(wait < Duration::from_secs(7), "{wait:?}");
    }
}
