//! The last pool data read from ARM per load balancer, shared by the LB writers (which own the
//! updates) and the RPCs that answer from cache.

use crate::index::{LbPools, NicMap, PoolIndex};
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;
use tokio::time::Instant;

/// One load balancer as last read.
#[derive(Debug, Clone, Default)]
pub struct LbCache {
    /// False when ARM said 404 (for example no internal LB in this cluster).
    pub exists: bool,
    pub id: String,
    pub pools: Vec<Value>,
    /// The whole LB (for whole-LB writes), when read with GET.
    pub raw_lb: Option<Value>,
    /// The LB-wide etag (every child carries the LB's etag).
    pub etag: Option<String>,
    pub fetched: Option<Instant>,
}

/// Every managed LB's cache, plus the NIC map.
#[derive(Debug, Default)]
pub struct SharedCache {
    lbs: RwLock<BTreeMap<String, LbCache>>,
    nics: RwLock<NicMap>,
    /// Wakes the NIC refresher early when a node could not be resolved.
    nic_refresh: tokio::sync::Notify,
}

impl SharedCache {
    /// Stores a fresh read of `lb`.
    pub fn put(&self, lb: &str, cache: LbCache) {
        self.lbs.write().insert(lb.to_string(), cache);
    }

    /// The cache of one LB.
    pub fn get(&self, lb: &str) -> Option<LbCache> {
        self.lbs.read().get(lb).cloned()
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
        *self.nics.write() = nics;
    }

    /// True once every LB in `lbs` has been read at least once.
    pub fn built(&self, lbs: &[String]) -> bool {
        let map = self.lbs.read();
        lbs.iter()
            .all(|l| map.get(l).is_some_and(|c| c.fetched.is_some()))
    }

    /// An index over `lbs` (all when `None`), and the age of the oldest data behind it.
    pub fn index(&self, only: Option<&str>) -> (PoolIndex, Duration) {
        let map = self.lbs.read();
        let now = Instant::now();
        let mut age = Duration::ZERO;
        let lbs: Vec<LbPools> = map
            .iter()
            .filter(|(name, _)| only.is_none_or(|o| o == name.as_str()))
            .filter(|(_, c)| c.exists)
            .map(|(name, c)| {
                if let Some(f) = c.fetched {
                    age = age.max(now.saturating_duration_since(f));
                }
                LbPools {
                    name: name.clone(),
                    id: c.id.clone(),
                    pools: c.pools.clone(),
                }
            })
            .collect();
        (PoolIndex::build(&lbs, self.nics.read().clone()), age)
    }
}
