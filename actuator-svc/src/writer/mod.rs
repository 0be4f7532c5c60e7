//! One writer task per load balancer: the only code of this replica that writes that LB, and
//! it writes only while the replica owns the LB (`state::ownership`) or for tool requests.
//!
//! A round, as a list of steps (`round` runs them, `run` here runs the rounds; each job has
//! its own file):
//! 1. **read** (`base`): GET the LB unless the last read is still a usable base;
//! 2. **wait** (`track`): if an operation runs on it (ours, another replica's,
//!    cloud-provider-azure's), read it until the operation ends (`completion` paces the
//!    reads), then go on from that read;
//! 3. **plan** (`plan`, pure) the *current* asserted set against the read: everything that
//!    arrived while the last write was in flight coalesces into this one write;
//! 4. **report** what needs no write (`outcome`);
//! 5. **write** (`execute`): one PUT with `If-Match` spliced from the read, report ACCEPTED
//!    (a whole-LB body over ARM's 4 MB limit goes out as per-pool PUTs instead);
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
mod refused;
mod restore;
mod round;
mod track;

pub use completion::{Durations, PollPace, Steps};
pub use refused::AccessRecheck;
pub use track::InFlight;

use base::Base;

use crate::arm::{ArmClient, ArmError, retry::Backoff};
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
    /// Told the load balancer of each write refused for access, so the access check runs
    /// again for it (shared by every writer and that check).
    pub access_recheck: Arc<AccessRecheck>,
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
            access_recheck: Arc::default(),
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
    /// After a write refused for access (403): no write before the pause ends.
    access: refused::AccessPause,
    /// The whole-LB body was over ARM's request limit at the last whole-LB write, which went
    /// out pool by pool (logged once when it starts and once when it ends).
    pool_fallback: bool,
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
            access: Default::default(),
            pool_fallback: false,
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
        for (node, reason) in self.cfg.guard.record(&self.lb, refused) {
            // The node stays with the health probe; its drain gate stays Unknown.
            tracing::warn!(lb = %self.lb, node = %node, %reason, "not cut");
        }
        plan
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
