//! The writer's write side: one PUT of the whole LB or one per changed pool, each body
//! spliced from the base's bytes, each followed by tracking its operation to the end. A
//! whole-LB body over ARM's 4 MB request limit is written as per-pool PUTs instead; only a
//! pool body itself over the limit is refused.

use super::{Writer, outcome};
use crate::arm::{ArmError, PutAccepted};
use crate::lb::doc::Provisioning;
use crate::lb::splice;
use crate::plan::{self, LbPlan};
use crate::state::TargetView;
use tokio::time::Instant;

pub(super) enum WriteError {
    /// Our copy is stale (412, the error; `None`: no usable copy at all): re-read and
    /// re-plan at once (the other write went through).
    Stale(Option<ArmError>),
    /// Another operation holds the LB's lock (the 429): wait out its `Retry-After`, then
    /// re-read, which waits for the holder's operation to end when the LB shows it.
    Busy(ArmError),
    Arm(ArmError),
}

/// The `x-ms-client-request-id` of each logical write of a round (one per PUT target: the
/// LB, or each pool), kept while that write is tried again (lock conflicts, 412s, throttling)
/// so ARM's logs show the attempts as one call; a write that went through ends it.
#[derive(Debug, Default)]
pub(super) struct WriteIds(std::collections::BTreeMap<String, String>);

impl WriteIds {
    /// The id of the write of `target` (a pool name, or empty for the whole LB).
    fn of(&mut self, target: &str) -> String {
        self.0
            .entry(target.to_string())
            .or_insert_with(crate::arm::client::new_request_id)
            .clone()
    }

    /// The write of `target` went through: its next one is a new logical call.
    fn done(&mut self, target: &str) {
        self.0.remove(target);
    }
}

impl Writer {
    pub(super) async fn write_whole(
        &mut self,
        plan: &LbPlan,
        changed: &[(&plan::TargetPlan, &TargetView)],
        ids: &mut WriteIds,
    ) -> Result<(), WriteError> {
        let Some(base) = self.base.take() else {
            return Err(WriteError::Stale(None));
        };
        // The body is the read's bytes with the edits spliced in: no second copy.
        let body = splice::whole_lb(&base.body, &plan.changes).map_err(|e| {
            WriteError::Arm(ArmError::Decode {
                op: "put_lb",
                resource: self.lb.clone(),
                message: e.to_string(),
            })
        })?;
        if body.len() > splice::MAX_REQUEST_BODY {
            // ARM would refuse it (413): the same edits go out pool by pool, each pool body
            // checked against the limit on its own, with the per-pool path's If-Match and
            // operation tracking.
            let size = body.len();
            drop(body);
            self.base = Some(base);
            self.fall_back_to_pools(size);
            return self.write_pools(plan, changed, ids).await;
        }
        if std::mem::take(&mut self.pool_fallback) {
            tracing::info!(
                size = body.len(),
                limit = splice::MAX_REQUEST_BODY,
                "the whole-LB body fits ARM's request limit again; writing the whole load balancer"
            );
        }
        self.written_at = Some(Instant::now());
        let id = ids.of("");
        let put = self
            .arm
            .put_lb(&self.lb, body, base.etag.as_deref(), &id)
            .await;
        drop(base);
        let acc = classify(put)?;
        ids.done("");
        outcome::report_accepted(&self.store, &self.lb, changed);
        let since = Instant::now();
        self.track(since, Some(acc.clone())).await?;
        self.landed(since, &acc, &plan.changes).await
    }

    pub(super) async fn write_pools(
        &mut self,
        plan: &LbPlan,
        changed: &[(&plan::TargetPlan, &TargetView)],
        ids: &mut WriteIds,
    ) -> Result<(), WriteError> {
        let total = plan.changes.len();
        for (i, (pool, changes)) in plan.changes.iter().enumerate() {
            let Some(base) = self.base.take() else {
                return Err(WriteError::Stale(None));
            };
            if base.provisioning == Provisioning::Updating {
                // Our own previous pool's operation (or another writer's) still runs: the
                // next round's read waits for its end.
                self.base = Some(base);
                return Err(WriteError::Stale(None));
            }
            let cut = splice::one_pool(&base.body, pool, changes).map_err(|e| {
                WriteError::Arm(ArmError::Decode {
                    op: "put_pool",
                    resource: format!("{}/{pool}", self.lb),
                    message: e.to_string(),
                })
            })?;
            let Some(body) = cut else {
                return Err(WriteError::Stale(None));
            };
            if body.count == 0 {
                self.base = Some(base);
                continue;
            }
            self.fits("put_pool", format!("{}/{pool}", self.lb), body.len())?;
            self.written_at = Some(Instant::now());
            let id = ids.of(pool);
            let put = self
                .arm
                .put_pool(&self.lb, pool, body, base.etag.as_deref(), &id)
                .await;
            drop(base);
            let acc = classify(put)?;
            ids.done(pool);
            if i + 1 == total {
                outcome::report_accepted(&self.store, &self.lb, changed);
            }
            // The fresh read is the base (and etag) of the next pool's write.
            let since = Instant::now();
            self.track(since, Some(acc.clone())).await?;
            let mine = std::iter::once((pool.clone(), changes.clone())).collect();
            self.landed(since, &acc, &mine).await?;
        }
        Ok(())
    }
}

impl Writer {
    /// Counts a whole-LB write sent pool by pool, and says so once when it starts.
    fn fall_back_to_pools(&mut self, size: usize) {
        self.metrics.per_pool_fallback(&self.lb);
        if !std::mem::replace(&mut self.pool_fallback, true) {
            tracing::warn!(
                size,
                limit = splice::MAX_REQUEST_BODY,
                "the whole-LB body is over ARM's 4 MB request limit even without read-only fields; writing this load balancer with one PUT per changed pool until it fits again"
            );
        }
    }

    /// Refuses, before sending, a pool body ARM would refuse for its size: FAILED (not
    /// retried) with the reason, and a metric. Bodies carry no read-only fields, so this is
    /// the minimal body (a whole-LB body is about 1 MB for a 5,000-node dual-stack LB; one
    /// over the limit never gets here, `write_whole` writes it pool by pool).
    #[allow(clippy::result_large_err)] // like `classify`
    fn fits(&self, op: &'static str, resource: String, size: usize) -> Result<(), WriteError> {
        if size <= splice::MAX_REQUEST_BODY {
            return Ok(());
        }
        self.metrics.body_too_large(&self.lb, op);
        Err(WriteError::Arm(ArmError::TooLarge {
            op,
            resource,
            size,
            limit: splice::MAX_REQUEST_BODY,
        }))
    }
}

/// Maps a PUT's answer to what the round does next.
#[allow(clippy::result_large_err)] // built once per failed call, like ArmError itself
fn classify(put: Result<PutAccepted, ArmError>) -> Result<PutAccepted, WriteError> {
    match put {
        Ok(a) => Ok(a),
        Err(e) if e.is_precondition_failed() => Err(WriteError::Stale(Some(e))),
        Err(e) if e.is_lock_conflict() => Err(WriteError::Busy(e)),
        Err(e) => Err(WriteError::Arm(e)),
    }
}
