//! One writer task per load balancer: the only code of this replica that writes that LB, and
//! it writes only while the replica owns the LB (`ownership`) or for tool requests.
//!
//! A round, as a list of steps:
//! 1. **read**: GET the LB unless the last read is still a usable base (`base`);
//! 2. **wait**: if an operation runs on it (ours, another replica's, cloud-provider-azure's),
//!    read its `provisioningState` until it ends (`completion`), then go on from that read;
//! 3. **plan** (`plan.rs`, pure) the *current* asserted set against the read: everything that
//!    arrived while the last write was in flight coalesces into this one write;
//! 4. **report** what needs no write (`outcome`);
//! 5. **write**: one PUT with `If-Match` built from the read (`arm::doc`), report ACCEPTED;
//! 6. **track**: read the LB until the operation ends; that read is the base of step 3 again,
//!    so the next write goes out the moment the previous one ended.
//!
//! On 412 (someone else wrote) the LB is re-read and re-planned: only our nodes' entries are
//! edited, so other writers' changes are never undone. Retryable errors back off with jitter;
//! the self-heal tick re-reads and repairs drift.

mod completion;
mod outcome;

pub use completion::{Durations, PollPace, Steps};

use crate::arm::doc::Provisioning;
use crate::arm::scan::{self, LbState};
use crate::arm::splice;
use crate::arm::{ArmClient, ArmError, PutAccepted, retry::Backoff};
use crate::cache::{BaseCache, DEFAULT_BASE_BUDGET, KeptBase, SharedCache};
use crate::guard::Guard;
use crate::index::LbIndex;
use crate::metrics::Metrics;
use crate::plan::{self, LbPlan, Target};
use crate::state::{Store, TargetView};
use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
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
            bases: Arc::new(BaseCache::new(DEFAULT_BASE_BUDGET)),
            guard: Guard::default(),
        }
    }
}

/// Documents up to this size are read whole while an operation is watched (a few ms to send
/// and scan); larger ones (thousands of nodes) are scanned until the operation ends, so a
/// 14 MB body is not buffered every few hundred milliseconds.
const WHOLE_READ_MAX: usize = 2 << 20;

enum WriteError {
    /// Our copy is stale (412): re-read and re-plan at once (the other write went through).
    Stale,
    /// Another operation holds the LB's lock: re-read, which waits for it to end.
    Busy,
    Arm(ArmError),
}

/// The last read of the LB, the base of the next write.
struct Base {
    /// Empty when the read was only scanned (an operation was still running).
    body: Bytes,
    /// Room in the ARM client's body budget, given back when the base is dropped or kept.
    _room: Option<tokio::sync::OwnedSemaphorePermit>,
    etag: Option<String>,
    provisioning: Provisioning,
    read_at: Instant,
}

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
}

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

    /// Between rounds the base goes to the shared base cache, which keeps it while the LB is
    /// owned and the budget has room; a base of an LB another replica owns goes stale with
    /// that replica's writes (a takeover reads first), and a base read mid-operation is no
    /// base at all.
    fn release_base(&mut self) {
        let base = self.base.take();
        // A base kept while this replica owned the LB (or before its first assignment) goes
        // stale with the new owner's writes: a later takeover must read first.
        if !self.store.owns(&self.lb) {
            self.cfg.bases.forget(&self.lb);
            return;
        }
        let Some(base) = base else {
            return;
        };
        if base.provisioning != Provisioning::Succeeded || base.body.is_empty() {
            self.cfg.bases.forget(&self.lb);
            return;
        }
        self.cfg.bases.keep(
            &self.lb,
            KeptBase {
                body: base.body,
                etag: base.etag,
                read_at: base.read_at,
                written_at: self.written_at.unwrap_or(base.read_at),
            },
        );
    }

    /// The base kept between rounds, if any.
    fn restore_base(&mut self) {
        if self.base.is_none() {
            self.base = self.cfg.bases.take(&self.lb).map(|k| Base {
                body: k.body,
                _room: None,
                etag: k.etag,
                provisioning: Provisioning::Succeeded,
                read_at: k.read_at,
            });
        }
    }

    /// GETs the LB whole. A document whose operation still runs is only scanned (its
    /// entries state a goal, not a fact, and it is no base); else it updates the shared
    /// index and becomes the next base.
    async fn read(&mut self) -> Result<(), ArmError> {
        let fetched = Instant::now();
        // Give the old base's room back first: two reads of one LB never wait on each other.
        self.base = None;
        let Some(body) = self.arm.get_lb_body(&self.lb).await? else {
            self.cache.put(&self.lb, None, fetched);
            return Ok(());
        };
        let (body, room) = body.into_parts();
        self.body_len = body.len();
        let decode = |message: String| ArmError::Decode {
            op: "get_lb",
            resource: self.lb.clone(),
            message,
        };
        let mut state = LbState::default();
        scan::scan(&body, &mut state).map_err(|e| decode(e.to_string()))?;
        let provisioning = Provisioning::parse(state.provisioning_state.as_deref());
        if provisioning == Provisioning::Updating && self.cache.lb(&self.lb).is_some() {
            self.base = Some(Base {
                body: Bytes::new(),
                _room: None,
                etag: state.etag,
                provisioning,
                read_at: fetched,
            });
            return Ok(());
        }
        let index = LbIndex::read(&self.lb, &self.arm.lb_id(&self.lb), &body)
            .map_err(|e| decode(e.to_string()))?;
        self.metrics.unprobed(&self.lb, index.unprobed_len());
        self.cache.put(&self.lb, Some(index), fetched);
        self.base = Some(Base {
            body,
            _room: room,
            etag: state.etag,
            provisioning,
            read_at: fetched,
        });
        Ok(())
    }

    /// Reads only the LB's `provisioningState` (the body streams through a scanner); when
    /// the operation ended, reads the LB whole.
    async fn probe(&mut self) -> Result<(), ArmError> {
        let fetched = Instant::now();
        match self.arm.get_lb_state(&self.lb).await? {
            Some(state)
                if Provisioning::parse(state.provisioning_state.as_deref())
                    == Provisioning::Updating =>
            {
                self.base = Some(Base {
                    body: Bytes::new(),
                    _room: None,
                    etag: state.etag,
                    provisioning: Provisioning::Updating,
                    read_at: fetched,
                });
                Ok(())
            }
            _ => self.read().await,
        }
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

    /// One round. `Err(wait)`: try again after `wait`.
    async fn round(&mut self, heal: bool) -> Result<(), Duration> {
        let mut must_read = heal;
        let mut refreshed_for_unknown = false;
        let mut failures = 0u32;
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
                let drift = outcome::report_settled(&self.store, &self.lb, &plan, &targets);
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
                self.metrics.write_round(&self.lb, plan.entry_count());
                let outcome = match self.cfg.strategy {
                    Strategy::WholeLb => self.write_whole(&plan, &changed).await,
                    Strategy::PerPool => self.write_pools(&plan, &changed).await,
                };
                match outcome {
                    // Plan again on the read that saw the operation end: entries that read the
                    // desired state are reported EFFECTIVE; anything that arrived meanwhile is
                    // written at once.
                    Ok(()) => {
                        failures = 0;
                        self.backoff.reset();
                    }
                    Err(WriteError::Stale) => {
                        tracing::debug!("412: another writer changed the LB; re-reading");
                        must_read = true;
                    }
                    Err(WriteError::Busy) => {
                        // The lock holder's operation shows as `Updating` on the next read,
                        // which then waits for its end; the pause only keeps a race (lock
                        // taken between our read and our PUT) from spinning.
                        tokio::time::sleep(Duration::from_millis(50 + (jitter() * 100.0) as u64))
                            .await;
                        must_read = true;
                    }
                    Err(WriteError::Arm(e)) => {
                        failures += 1;
                        let retry = e.retryable();
                        let wait = retry_wait(&e, &mut self.backoff);
                        let op_failed = matches!(e, ArmError::Operation { .. });
                        if !retry || op_failed || failures >= 3 {
                            for (tp, tv) in &changed {
                                self.store.fail(&tp.key, tv.version, e.to_string(), retry);
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
            if let Err(e) = self.track(since, None).await {
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

    async fn write_whole(
        &mut self,
        plan: &LbPlan,
        changed: &[(&plan::TargetPlan, &TargetView)],
    ) -> Result<(), WriteError> {
        let Some(base) = self.base.take() else {
            return Err(WriteError::Stale);
        };
        // The body is the read's bytes with the edits spliced in: no second copy.
        let body = splice::whole_lb(&base.body, &plan.changes).map_err(|e| {
            WriteError::Arm(ArmError::Decode {
                op: "put_lb",
                resource: self.lb.clone(),
                message: e.to_string(),
            })
        })?;
        self.written_at = Some(Instant::now());
        let put = self.arm.put_lb(&self.lb, body, base.etag.as_deref()).await;
        drop(base);
        let acc = classify(put)?;
        outcome::report_accepted(&self.store, &self.lb, changed);
        self.track(Instant::now(), Some(acc)).await
    }

    async fn write_pools(
        &mut self,
        plan: &LbPlan,
        changed: &[(&plan::TargetPlan, &TargetView)],
    ) -> Result<(), WriteError> {
        let total = plan.changes.len();
        for (i, (pool, changes)) in plan.changes.iter().enumerate() {
            let Some(base) = self.base.take() else {
                return Err(WriteError::Stale);
            };
            if base.provisioning == Provisioning::Updating {
                return Err(WriteError::Busy);
            }
            let cut = splice::one_pool(&base.body, pool, changes).map_err(|e| {
                WriteError::Arm(ArmError::Decode {
                    op: "put_pool",
                    resource: format!("{}/{pool}", self.lb),
                    message: e.to_string(),
                })
            })?;
            let Some(body) = cut else {
                return Err(WriteError::Stale);
            };
            if body.count == 0 {
                self.base = Some(base);
                continue;
            }
            self.written_at = Some(Instant::now());
            let put = self
                .arm
                .put_pool(&self.lb, pool, body, base.etag.as_deref())
                .await;
            drop(base);
            let acc = classify(put)?;
            if i + 1 == total {
                outcome::report_accepted(&self.store, &self.lb, changed);
            }
            // The fresh read is the base (and etag) of the next pool's write.
            self.track(Instant::now(), Some(acc)).await?;
        }
        Ok(())
    }

    /// Reads the LB until the operation running on it ends (`Succeeded` or `Failed`); the
    /// last read stays as the base. `ours`: the PUT we are tracking (its duration is learned,
    /// its operation URL read once for details if it failed).
    async fn track(&mut self, since: Instant, ours: Option<PutAccepted>) -> Result<(), WriteError> {
        let in_flight = self.in_flight.clone();
        let (_, _guard) = in_flight.enter();
        let deadline = since + self.cfg.op_deadline;
        let mut errors = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        let expected = ours.as_ref().and_then(|_| self.durations.expected());
        // Send times (since `since`) of the previous read and of the last one that still said
        // `Updating`.
        let (mut last_sent, mut last_updating) = (None, None);
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
                Some(Provisioning::Updating) => last_updating = Some(sent),
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

    /// The error of a failed operation: from its operation URL when ARM's `Retry-After`
    /// allows reading it by now, else what the LB says.
    async fn failure(&self, since: Instant, ours: Option<&PutAccepted>) -> ArmError {
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

/// Maps a PUT's answer to what the round does next.
#[allow(clippy::result_large_err)] // built once per failed call, like ArmError itself
fn classify(put: Result<PutAccepted, ArmError>) -> Result<PutAccepted, WriteError> {
    match put {
        Ok(a) => Ok(a),
        Err(e) if e.is_precondition_failed() => Err(WriteError::Stale),
        Err(e) if e.is_lock_conflict() => Err(WriteError::Busy),
        Err(e) => Err(WriteError::Arm(e)),
    }
}
