//! The last pool data read from ARM per load balancer, as compact indexes, shared by the LB
//! writers (which own the updates) and the RPCs that answer from cache.
//!
//! Readers get `Arc`s: answering a question never copies or rebuilds an index.

use crate::lb::index::{LbIndex, NicMap, PoolIndex};
use parking_lot::RwLock;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// One load balancer as last read.
#[derive(Debug, Clone)]
struct LbRead {
    /// `None` when ARM said 404 (for example no internal LB in this cluster).
    index: Option<Arc<LbIndex>>,
    fetched: Instant,
}

/// Every managed LB's index, plus the NIC map.
#[derive(Debug, Default)]
pub struct SharedCache {
    lbs: RwLock<BTreeMap<String, LbRead>>,
    nics: RwLock<Arc<NicMap>>,
    /// Wakes the NIC refresher early when a node could not be resolved.
    nic_refresh: tokio::sync::Notify,
}

impl SharedCache {
    /// Stores a fresh read of `lb` (`None`: it does not exist).
    pub fn put(&self, lb: &str, index: Option<LbIndex>, fetched: Instant) {
        self.lbs.write().insert(
            lb.to_string(),
            LbRead {
                index: index.map(Arc::new),
                fetched,
            },
        );
    }

    /// The index of one LB (`None` when never read or absent in ARM).
    pub fn lb(&self, lb: &str) -> Option<Arc<LbIndex>> {
        self.lbs.read().get(lb).and_then(|r| r.index.clone())
    }

    /// How old the last read of `lb` is.
    pub fn age(&self, lb: &str) -> Option<Duration> {
        self.lbs.read().get(lb).map(|r| r.fetched.elapsed())
    }

    /// Asks for an early NIC list refresh (a node may be a VM we have not seen yet).
    pub fn request_nic_refresh(&self) {
        self.nic_refresh.notify_one();
    }

    /// Resolves when an early NIC refresh was asked for.
    pub async fn nic_refresh_requested(&self) {
        self.nic_refresh.notified().await;
    }

    /// Replaces the NIC map.
    pub fn set_nics(&self, nics: NicMap) {
        *self.nics.write() = Arc::new(nics);
    }

    /// True once every LB in `lbs` has been read at least once.
    pub fn built(&self, lbs: &[String]) -> bool {
        let map = self.lbs.read();
        lbs.iter().all(|l| map.contains_key(l))
    }

    /// An index over `lbs` (all when `None`), and the age of the oldest data behind it.
    pub fn index(&self, only: Option<&str>) -> (PoolIndex, Duration) {
        let map = self.lbs.read();
        let mut age = Duration::ZERO;
        let lbs = map
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .filter_map(|(_, r)| {
                age = age.max(r.fetched.elapsed());
                r.index.clone()
            })
            .collect();
        (PoolIndex::new(lbs, self.nics.read().clone()), age)
    }
}

/// The default of [`BaseCache`]'s budget.
pub const DEFAULT_BASE_BUDGET: usize = 16 << 20;

/// The last `Succeeded` document of an LB, kept between rounds as the base of its next write.
#[derive(Debug, Clone)]
pub struct KeptBase {
    pub body: bytes::Bytes,
    pub etag: Option<String>,
    pub read_at: Instant,
    /// When this replica last wrote the LB (eviction order), or when it was read if never.
    pub written_at: Instant,
}

/// Bases of the LBs this replica owns, under one byte budget.
///
/// Why: without a kept base, the first write on an idle LB must GET it first (one more round
/// trip before the PUT, which is much of the gap to an ideal single writer in a wave). Keeping
/// every base costs a ~14 MB document per LB at 5,000 nodes, so they are kept while the total
/// fits the budget, evicting the least recently written first.
///
/// A document larger than half the budget is never kept. A kept base is resident while the
/// other LBs are read (reads are bounded separately by `--lb-read-budget`), so a base that
/// fits the budget only alone means two whole large documents resident between writes: at
/// 5,000 nodes that was ~28 MB of a 64 MiB target, for one GET saved per idle-to-busy LB (a
/// few per wave, measured in docs/performance.md, memory and scale). Half the budget is the
/// largest size at which a kept base and a read of a same-sized LB still fit the budget
/// together. The alternative, one joint budget for kept and in-flight documents, would need
/// reads to evict kept bases while they wait for room (the ARM client's read budget reaching
/// into this cache) for the same outcome at the sizes that matter: small LBs keep their
/// bases, large ones are read before their first write.
#[derive(Debug)]
pub struct BaseCache {
    budget: usize,
    kept: parking_lot::Mutex<BTreeMap<String, KeptBase>>,
}

impl BaseCache {
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            kept: parking_lot::Mutex::new(BTreeMap::new()),
        }
    }

    /// Takes the base of `lb` out (the writer holds it during a round).
    pub fn take(&self, lb: &str) -> Option<KeptBase> {
        self.kept.lock().remove(lb)
    }

    /// Keeps `base` for `lb`, then evicts the least recently written bases until the total
    /// fits the budget (possibly this one). A base larger than half the budget is not kept
    /// (see the type's comment). Returns whether it was kept.
    pub fn keep(&self, lb: &str, base: KeptBase) -> bool {
        let mut kept = self.kept.lock();
        if base.body.len() > self.budget / 2 {
            kept.remove(lb);
            return false;
        }
        kept.insert(lb.to_string(), base);
        let mut total: usize = kept.values().map(|b| b.body.len()).sum();
        while total > self.budget {
            let Some(oldest) = kept
                .iter()
                .min_by_key(|(_, b)| b.written_at)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(b) = kept.remove(&oldest) {
                total -= b.body.len();
            }
        }
        kept.contains_key(lb)
    }

    /// Forgets the base of `lb` (another replica owns it: it goes stale with their writes).
    pub fn forget(&self, lb: &str) {
        self.kept.lock().remove(lb);
    }

    /// Bytes kept now.
    pub fn bytes(&self) -> usize {
        self.kept.lock().values().map(|b| b.body.len()).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_that_fits_the_budget_only_alone_is_not_kept() {
        let t0 = Instant::now();
        let c = BaseCache::new(100);
        assert!(c.keep("small", base(20, t0)));
        // 51 of 100: it and a read of a same-sized LB would not fit together.
        assert!(!c.keep("big", base(51, t0 + Duration::from_secs(1))));
        assert!(c.take("big").is_none());
        // Nothing was evicted for it, and an older base of the same LB is dropped.
        assert_eq!(c.bytes(), 20);
        assert!(!c.keep("small", base(60, t0)));
        assert_eq!(c.bytes(), 0);
        assert!(c.keep("half", base(50, t0)));
        // The default budget keeps no 5,000-node document (~14 MB) and any sandbox one.
        let d = BaseCache::new(DEFAULT_BASE_BUDGET);
        assert!(!d.keep("kubernetes", base(14 << 20, t0)));
        assert!(d.keep("kubernetes", base(2 << 20, t0)));
    }

    fn base(len: usize, written_at: Instant) -> KeptBase {
        KeptBase {
            body: bytes::Bytes::from(vec![b' '; len]),
            etag: None,
            read_at: written_at,
            written_at,
        }
    }

    #[test]
    fn bases_fit_the_budget_evicting_the_least_recently_written() {
        let t0 = Instant::now();
        let at = |s| t0 + Duration::from_secs(s);
        let c = BaseCache::new(100);
        assert!(c.keep("a", base(40, at(1))));
        assert!(c.keep("b", base(40, at(3))));
        // c does not fit with a and b: a (written longest ago) goes.
        assert!(c.keep("c", base(40, at(2))));
        assert!(c.take("a").is_none());
        assert_eq!(c.bytes(), 80);
        // Larger than the budget on its own: not kept, and nothing else is evicted for it.
        assert!(!c.keep("huge", base(101, at(9))));
        assert_eq!(c.bytes(), 80);
        assert!(c.keep("b", base(10, at(3))));
        assert!(c.take("b").is_some());
        assert!(c.take("b").is_none());
    }
}
