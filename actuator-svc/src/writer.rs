//! One writer task per load balancer: the only code that writes that LB.
//!
//! Leading edge: a wake-up starts a round at once. A round reads the *current* asserted set
//! from the store, plans against the cached pools (`plan.rs`), PUTs with `If-Match`, tracks
//! the `Azure-AsyncOperation` to completion and reads back before the next round, so anything
//! that arrived meanwhile coalesces into that next round. On 412 (someone else wrote the LB)
//! or a canceled operation it re-reads and re-plans: only our nodes' entries are edited on the
//! fresh copy, so other writers' changes are never undone. Retryable errors back off with
//! jitter; the self-heal tick re-reads and repairs drift.

use crate::arm::{ArmClient, ArmError, OpStatus, PutAccepted, retry::Backoff};
use crate::cache::{LbCache, SharedCache};
use crate::metrics::Metrics;
use crate::plan::{self, LbPlan, Target};
use crate::state::{LbProgress, Store, TargetView};
use serde_json::Value;
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
    /// Cached pools older than this are re-read before a round.
    pub max_cache_age: Duration,
    /// Poll interval when ARM sends no `Retry-After`.
    pub poll_default: Duration,
    /// Upper bound of one operation's tracking.
    pub op_deadline: Duration,
}

enum WriteError {
    /// Our copy is stale (412): re-read and re-plan at once (the other write went through).
    Stale,
    /// Another writer's operation is running on the LB (or just canceled ours): wait with
    /// jitter before re-reading, so two writers never keep superseding each other.
    Busy,
    Arm(ArmError),
}

fn updating(v: &Value) -> bool {
    v.pointer("/properties/provisioningState")
        .and_then(Value::as_str)
        .is_some_and(|s| s.eq_ignore_ascii_case("Updating"))
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
}

fn jitter() -> f64 {
    rand::random::<f64>()
}

impl Writer {
    /// A writer for `lb`.
    pub fn new(
        lb: String,
        arm: ArmClient,
        store: Arc<Store>,
        cache: Arc<SharedCache>,
        metrics: Arc<Metrics>,
        cfg: WriterConfig,
    ) -> Self {
        Self {
            lb,
            arm,
            store,
            cache,
            metrics,
            cfg,
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(30)),
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
            let mut retry_in = self.refresh().await.err().map(|e| {
                tracing::warn!(error = %e, "initial read failed");
                self.backoff.next_delay(jitter())
            });
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
                self.metrics
                    .queue(&self.lb, self.store.pending_on(&self.lb));
            }
        }
        .instrument(span)
        .await
    }

    /// Re-reads the LB (GET for whole-LB writes, LIST of pools for per-pool writes).
    async fn refresh(&self) -> Result<(), ArmError> {
        let id = self.arm.lb_id(&self.lb);
        let fetched = Some(Instant::now());
        let cache = match self.cfg.strategy {
            Strategy::WholeLb => match self.arm.get_lb(&self.lb).await? {
                None => LbCache {
                    exists: false,
                    id,
                    fetched,
                    ..Default::default()
                },
                Some(raw) => LbCache {
                    exists: true,
                    id,
                    pools: raw
                        .pointer("/properties/backendAddressPools")
                        .and_then(Value::as_array)
                        .cloned()
                        .unwrap_or_default(),
                    etag: raw.get("etag").and_then(Value::as_str).map(str::to_string),
                    raw_lb: Some(raw),
                    fetched,
                },
            },
            Strategy::PerPool => match self.arm.list_pools(&self.lb).await? {
                None => LbCache {
                    exists: false,
                    id,
                    fetched,
                    ..Default::default()
                },
                Some(pools) => LbCache {
                    exists: true,
                    id,
                    etag: pools
                        .iter()
                        .find_map(|p| p.get("etag").and_then(Value::as_str))
                        .map(str::to_string),
                    pools,
                    raw_lb: None,
                    fetched,
                },
            },
        };
        self.cache.put(&self.lb, cache);
        Ok(())
    }

    fn cache_age(&self) -> Option<Duration> {
        self.cache
            .get(&self.lb)
            .and_then(|c| c.fetched)
            .map(|f| f.elapsed())
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
        plan::plan_lb(&index, &self.lb, &t)
    }

    /// One round. `Err(wait)`: try again after `wait`.
    async fn round(&mut self, heal: bool) -> Result<(), Duration> {
        let stale = self.cache_age().is_none_or(|a| a > self.cfg.max_cache_age);
        if (heal || stale)
            && let Err(e) = self.refresh().await
        {
            tracing::warn!(error = %e, "read failed");
            return Err(e
                .retry_after()
                .unwrap_or_else(|| self.backoff.next_delay(jitter())));
        }
        let mut refreshed_for_unknown = false;
        for _attempt in 0..8 {
            let targets = self.store.targets_for(&self.lb);
            if targets.is_empty() {
                return Ok(());
            }
            let plan = self.plan(&targets);
            // A node we cannot find may be newer than our copy: re-read once, then report.
            let unknown = plan.targets.iter().any(|t| t.entries.is_empty());
            if unknown
                && !refreshed_for_unknown
                && self.cache_age().is_some_and(|a| a > Duration::from_secs(2))
            {
                refreshed_for_unknown = true;
                self.cache.request_nic_refresh();
                if self.refresh().await.is_ok() {
                    continue;
                }
            }
            let mut drift = 0;
            for (tp, tv) in plan.targets.iter().zip(&targets) {
                if tp.entries.is_empty() {
                    self.store.report(
                        &self.lb,
                        &tp.key,
                        tv.version,
                        LbProgress::NoEntries,
                        &tp.notes,
                    );
                } else if tp.already {
                    self.store.report(
                        &self.lb,
                        &tp.key,
                        tv.version,
                        LbProgress::Effective(tp.entries.clone()),
                        &[],
                    );
                } else if tv.effective_here {
                    drift += tp.entries.len();
                    self.store.drifted(&self.lb, &tp.key);
                }
            }
            if drift > 0 {
                tracing::info!(entries = drift, "repairing drifted entries");
                self.metrics.drift(drift);
            }
            if plan.changes.is_empty() {
                return Ok(());
            }
            let changed: Vec<(&crate::plan::TargetPlan, &TargetView)> = plan
                .targets
                .iter()
                .zip(&targets)
                .filter(|(tp, _)| !tp.already && !tp.entries.is_empty())
                .collect();
            if self.cfg.dry_run {
                tracing::info!(entries = plan.entry_count(), pools = ?plan.changes.keys().collect::<Vec<_>>(), "dry-run: would write");
                for (tp, tv) in &changed {
                    self.store.report(
                        &self.lb,
                        &tp.key,
                        tv.version,
                        LbProgress::Accepted(tp.entries.clone()),
                        &[],
                    );
                }
                return Ok(());
            }
            self.metrics.write_round(&self.lb, plan.entry_count());
            let accepted = |w: &Self| {
                for (tp, tv) in &changed {
                    w.store.report(
                        &w.lb,
                        &tp.key,
                        tv.version,
                        LbProgress::Accepted(tp.entries.clone()),
                        &[],
                    );
                }
            };
            let outcome = match self.cfg.strategy {
                Strategy::WholeLb => self.write_whole(&plan, accepted).await,
                Strategy::PerPool => self.write_pools(&plan, accepted).await,
            };
            match outcome {
                Ok(()) => {
                    // Plan again on the read-back: entries that read the desired state are
                    // reported EFFECTIVE; anything still unsettled (another writer's operation
                    // started meanwhile) or newly asked for is written in the next pass.
                    self.backoff.reset();
                }
                Err(e @ (WriteError::Stale | WriteError::Busy)) => {
                    if matches!(e, WriteError::Busy) {
                        tokio::time::sleep(self.backoff.next_delay(jitter())).await;
                    }
                    if let Err(e) = self.refresh().await {
                        return Err(e
                            .retry_after()
                            .unwrap_or_else(|| self.backoff.next_delay(jitter())));
                    }
                }
                Err(WriteError::Arm(e)) => {
                    let retry = e.retryable();
                    // Never sooner than the backoff step: a `Retry-After: 0` must not spin.
                    let wait = e
                        .retry_after()
                        .unwrap_or_default()
                        .max(self.backoff.next_delay(jitter()));
                    let op_failed = matches!(e, ArmError::Operation { .. });
                    if !retry || op_failed || self.backoff.attempts() >= 3 {
                        for (tp, tv) in &changed {
                            self.store.fail(&tp.key, tv.version, e.to_string(), retry);
                        }
                    }
                    tracing::warn!(error = %e, retry, wait_ms = wait.as_millis() as u64, "write failed");
                    if !retry {
                        // Not retried on our own; the self-heal tick or a new instruction tries again.
                        return Ok(());
                    }
                    tokio::time::sleep(wait).await;
                    if e.code().eq_ignore_ascii_case("canceled") || e.status() == 409 {
                        let _ = self.refresh().await;
                    }
                }
            }
        }
        Err(self.backoff.next_delay(jitter()))
    }

    async fn write_whole(
        &mut self,
        plan: &LbPlan,
        accepted: impl Fn(&Self),
    ) -> Result<(), WriteError> {
        let Some(c) = self.cache.get(&self.lb) else {
            return Err(WriteError::Stale);
        };
        let Some(mut body) = c.raw_lb.clone() else {
            return Err(WriteError::Stale);
        };
        // Never supersede another writer's running operation: wait for it.
        if updating(&body) {
            return Err(WriteError::Busy);
        }
        plan::apply_to_lb(&mut body, &plan.changes);
        let body = strip_lb(body);
        let acc = self
            .put(|arm| Box::pin(arm.put_lb(&self.lb, &body, c.etag.as_deref())))
            .await?;
        accepted(self);
        self.track(acc).await?;
        self.refresh().await.map_err(WriteError::Arm)
    }

    async fn write_pools(
        &mut self,
        plan: &LbPlan,
        accepted: impl Fn(&Self),
    ) -> Result<(), WriteError> {
        let total = plan.changes.len();
        for (i, (pool, changes)) in plan.changes.iter().enumerate() {
            let Some(c) = self.cache.get(&self.lb) else {
                return Err(WriteError::Stale);
            };
            let Some(mut body) = c
                .pools
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str) == Some(pool.as_str()))
                .cloned()
            else {
                return Err(WriteError::Stale);
            };
            if updating(&body) {
                return Err(WriteError::Busy);
            }
            if plan::apply_to_pool(&mut body, changes) == 0 {
                continue;
            }
            let body = plan::prepare_put_body(body);
            let acc = self
                .put(|arm| Box::pin(arm.put_pool(&self.lb, pool, &body, c.etag.as_deref())))
                .await?;
            if i + 1 == total {
                accepted(self);
            }
            self.track(acc).await?;
            // Fresh etag (shared by every child of the LB) and read-back for the next pool.
            self.refresh().await.map_err(WriteError::Arm)?;
        }
        Ok(())
    }

    async fn put<'a>(
        &'a self,
        send: impl FnOnce(
            &'a ArmClient,
        ) -> std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<PutAccepted, ArmError>> + Send + 'a>,
        >,
    ) -> Result<PutAccepted, WriteError> {
        match send(&self.arm).await {
            Ok(a) => Ok(a),
            Err(e) if e.is_precondition_failed() => {
                tracing::debug!("412: another writer changed the LB; re-reading");
                Err(WriteError::Stale)
            }
            Err(e) => Err(WriteError::Arm(e)),
        }
    }

    /// Polls the operation to completion, honouring `Retry-After`.
    async fn track(&mut self, acc: PutAccepted) -> Result<(), WriteError> {
        let Some(url) = acc.operation else {
            return Ok(());
        };
        let deadline = Instant::now() + self.cfg.op_deadline;
        // A floor keeps a `Retry-After: 0` from turning into a hot loop.
        let floor = Duration::from_millis(50);
        let mut wait = acc.retry_after.unwrap_or(self.cfg.poll_default).max(floor);
        let mut errors = Backoff::new(Duration::from_millis(200), Duration::from_secs(10));
        loop {
            tokio::time::sleep(wait).await;
            match self.arm.poll(&url).await {
                Ok(OpStatus::Succeeded) => return Ok(()),
                Ok(OpStatus::InProgress { retry_after }) => {
                    wait = retry_after.unwrap_or(self.cfg.poll_default).max(floor)
                }
                Ok(OpStatus::Ended {
                    status,
                    code,
                    message,
                    details,
                }) => {
                    let err = ArmError::Operation {
                        resource: self.lb.clone(),
                        status: status.clone(),
                        code,
                        message,
                        details,
                    };
                    if status.to_ascii_lowercase().starts_with("cancel") {
                        tracing::info!(error = %err, "operation canceled by another write; re-reading");
                        return Err(WriteError::Busy);
                    }
                    return Err(WriteError::Arm(err));
                }
                Err(e) if e.retryable() => {
                    wait = e
                        .retry_after()
                        .unwrap_or_default()
                        .max(errors.next_delay(jitter()))
                }
                Err(e) => return Err(WriteError::Arm(e)),
            }
            if Instant::now() > deadline {
                return Err(WriteError::Arm(ArmError::Timeout {
                    op: "track_operation",
                    resource: url.path().to_string(),
                    timeout: self.cfg.op_deadline,
                }));
            }
        }
    }
}

/// Read-only provisioning states are dropped from a whole-LB PUT body (NRP computes them).
fn strip_lb(body: Value) -> Value {
    let mut body = plan::prepare_put_body(body);
    if let Some(pools) = body
        .pointer_mut("/properties/backendAddressPools")
        .and_then(Value::as_array_mut)
    {
        for p in pools.iter_mut() {
            *p = plan::prepare_put_body(p.take());
        }
    }
    body
}
