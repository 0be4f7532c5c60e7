//! The last pool data read from ARM per load balancer, as compact indexes, shared by the LB
//! writers (which own the updates) and the RPCs that answer from cache.
//!
//! Readers get `Arc`s: answering a question never copies or rebuilds an index.

use crate::index::{LbIndex, NicMap, PoolIndex};
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
