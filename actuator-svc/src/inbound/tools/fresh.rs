//! Tool reads that spend ARM budget: every managed LB read now (within the tools' share of
//! the read budget), and what the negative cache answers for a node without entries.

use super::Lookup;
use crate::arm::budget::Verdict;
use crate::inbound::Inbound;
use crate::lb::index::{LbIndex, NodeSpec, PoolIndex};
use cutover_proto::v1::NodeRef;
use std::sync::Arc;
use std::time::Duration;
use tonic::Status;

/// What the negative cache says about a tool request's node.
pub(super) enum Unknown {
    /// Resolvable from the cached pools (or already held): the usual path.
    No,
    /// Found only in a fresh re-read.
    FoundIn(PoolIndex),
    /// No entries anywhere: the note to answer with.
    Yes(String),
}

impl Inbound {
    /// Reads every managed LB from ARM now (one GET each, in parallel), each read within the
    /// tool share of the read budget.
    pub(super) async fn fresh_index(&self) -> Result<PoolIndex, Status> {
        let lbs = self.store.lbs();
        for _ in &lbs {
            self.tool_read_permit().await?;
        }
        let reads = lbs.into_iter().map(|lb| {
            let arm = self.arm.clone();
            async move { (lb.clone(), arm.get_lb(&lb).await) }
        });
        let mut lbs = Vec::new();
        for (lb, r) in futures::future::join_all(reads).await {
            match r {
                Ok(Some(body)) => {
                    let index = LbIndex::read(&lb, &self.arm.lb_id(&lb), &body).map_err(|e| {
                        Status::unavailable(format!("reading load balancer {lb}: {e}"))
                    })?;
                    lbs.push(Arc::new(index));
                }
                Ok(None) => {}
                Err(e) => {
                    return Err(Status::unavailable(format!(
                        "reading load balancer {lb}: {e}"
                    )));
                }
            }
        }
        let (cached, _) = self.cache.index(None);
        Ok(cached.with_lbs(lbs))
    }

    /// Waits for a tool read within `ToolShare` (the stream keeps priority); refuses when the
    /// wait would be long.
    async fn tool_read_permit(&self) -> Result<(), Status> {
        const MAX_WAIT: Duration = Duration::from_secs(5);
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        loop {
            let (fill, rate) = self.arm.read_headroom();
            let now = tokio::time::Instant::now();
            let verdict = self.tool_reads.lock().acquire(fill, rate, now);
            match verdict {
                Verdict::Go => return Ok(()),
                Verdict::Wait(d) if now + d <= deadline => {
                    tokio::time::sleep(d.max(Duration::from_millis(10))).await
                }
                Verdict::Wait(d) => {
                    return Err(Status::resource_exhausted(format!(
                        "the ARM read budget is kept for the cutover stream now; retry in {} ms or ask without fresh",
                        d.as_millis().max(1)
                    )));
                }
            }
        }
    }

    /// For a node without any backend entry in the cached pools and not held: the answer of
    /// the negative cache (`Yes`, no ARM call between refreshes), or `FoundIn` when the node
    /// has entries after all (in the fresh index that has them).
    pub(super) async fn unknown_node(
        &self,
        node: &NodeRef,
        spec: &NodeSpec,
    ) -> Result<Unknown, Status> {
        if !self.cache.built(&self.store.lbs()) || self.store.find(&node.uid, &node.name).is_some()
        {
            return Ok(Unknown::No);
        }
        let (cached, _) = self.cache.index(None);
        if !cached.resolve(spec, None).entries.is_empty() {
            return Ok(Unknown::No);
        }
        let lookup = self
            .unknown
            .recheck(spec, || async {
                // Standalone NICs (VMSS Flex, availability sets) are in the NIC list, which its
                // refresher re-reads early at most every few seconds.
                self.cache.request_nic_refresh();
                self.fresh_index().await
            })
            .await?;
        Ok(match lookup {
            Lookup::Found(index) => {
                self.metrics.unknown_answer("found_on_refresh");
                Unknown::FoundIn(index)
            }
            Lookup::Unknown { age, refreshed } => {
                self.metrics.unknown_answer(if refreshed {
                    "refreshed"
                } else {
                    "negative_cache"
                });
                Unknown::Yes(format!(
                    "node has no backend entries (pools re-read {:.1} s ago; nodes without entries are answered from that read, which is repeated at most every {} s)",
                    age.as_secs_f64(),
                    self.unknown.interval().as_secs_f64()
                ))
            }
        })
    }
}
