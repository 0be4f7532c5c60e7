//! What this LB holds that cutover never writes, reported once per change (a log line and
//! gauges; `GetNodeAdminState` notes come from the index itself): pools that are not node
//! pools or where admin state cannot act (skipped by the index), and entries of written pools
//! that no known node claims. Nothing here changes what is written; it only tells.

use super::Writer;
use crate::lb::index::{LbIndex, SkippedPool};

/// What was last reported for one LB.
#[derive(Debug, Default)]
pub(super) struct Reported {
    skipped: Vec<SkippedPool>,
    unmatched: Option<usize>,
}

impl Writer {
    /// After a whole read: the skipped pools, logged when they differ from the last report.
    pub(super) fn report_skipped(&mut self, index: &LbIndex) {
        let now = index.skipped();
        if now == self.reported.skipped.as_slice() {
            return;
        }
        self.metrics
            .pools_not_written(&self.lb, &self.reported.skipped, now);
        for p in now
            .iter()
            .filter(|p| p.why.notable() && !self.reported.skipped.contains(p))
        {
            tracing::warn!(
                pool = %p.name,
                entries = p.entries,
                reason = p.why.label(),
                "pool never written: {}",
                p.why.reason()
            );
        }
        self.reported.skipped = now.to_vec();
    }

    /// On a self-heal round, once the stream has told of the nodes: entries no node claims,
    /// logged when their number changes.
    pub(super) fn report_unmatched(&mut self) {
        let nodes = self.store.known_nodes();
        if nodes.is_empty() {
            return;
        }
        let (index, _) = self.cache.index(Some(&self.lb));
        let unmatched = index.unmatched(&self.lb, nodes.iter().map(|n| &**n));
        self.metrics.unmatched(&self.lb, unmatched.count);
        if self.reported.unmatched == Some(unmatched.count) {
            return;
        }
        if unmatched.count > 0 {
            tracing::info!(
                entries = unmatched.count,
                sample = ?unmatched.sample,
                "backend entries match no cluster node: never written"
            );
        }
        self.reported.unmatched = Some(unmatched.count);
    }
}
