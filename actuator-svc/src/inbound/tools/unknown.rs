//! The negative cache: a tool request for a node that resolves to nothing in the cached pool
//! index triggers at most one re-read of the pools per interval, shared by every caller
//! (single flight); in between, such nodes are answered from the last re-read without any ARM
//! call. A node that appears in the re-read is served normally.

use crate::lb::index::{NodeSpec, PoolIndex};
use std::future::Future;
use std::time::Duration;
use tokio::sync::Mutex;
use tokio::time::Instant;
use tonic::Status;

/// What the negative cache says about a node.
#[derive(Debug, Clone)]
pub enum Lookup {
    /// The node has entries in this (fresh) index.
    Found(PoolIndex),
    /// No entries in pools read `age` ago; `refreshed` when this call did the read.
    Unknown { age: Duration, refreshed: bool },
}

#[derive(Debug, Default)]
struct Last {
    at: Option<Instant>,
    /// `None` when the last refresh failed.
    index: Option<PoolIndex>,
}

/// The single-flight pool refresh for unknown nodes.
#[derive(Debug)]
pub struct UnknownNodes {
    interval: Duration,
    last: Mutex<Last>,
}

impl UnknownNodes {
    /// At most one refresh per `interval`.
    pub fn new(interval: Duration) -> Self {
        Self {
            interval,
            last: Mutex::default(),
        }
    }

    /// The least time between two refreshes.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// `node` resolved to nothing in the cached index: look again in the last refresh if it
    /// is recent, else refresh (once for every concurrent caller) with `refresh`.
    pub async fn recheck<F, Fut>(&self, node: &NodeSpec, refresh: F) -> Result<Lookup, Status>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<PoolIndex, Status>>,
    {
        // Held across the refresh: concurrent callers wait for it instead of starting theirs.
        let mut last = self.last.lock().await;
        let fresh = last.at.filter(|at| at.elapsed() < self.interval);
        let (index, age, refreshed) = match fresh {
            Some(at) => match &last.index {
                Some(index) => (index.clone(), at.elapsed(), false),
                None => {
                    let left = self.interval.saturating_sub(at.elapsed());
                    return Err(Status::unavailable(format!(
                        "the node has no backend entry in the cached pools and re-reading them failed; retry in {} ms",
                        left.as_millis().max(1)
                    )));
                }
            },
            None => {
                last.at = Some(Instant::now());
                last.index = None;
                let index = refresh().await?;
                last.index = Some(index.clone());
                (index, Duration::ZERO, true)
            }
        };
        if index.resolve(node, None).entries.is_empty() {
            Ok(Lookup::Unknown { age, refreshed })
        } else {
            Ok(Lookup::Found(index))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::index::{LbPools, NicMap};
    use serde_json::json;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn index_with(ip: &str) -> PoolIndex {
        PoolIndex::build(
            &[LbPools {
                name: "kubernetes".into(),
                id: "/lb".into(),
                pools: vec![json!({"name": "kubernetes", "properties": {
                    "loadBalancingRules": [{"id": "r"}],
                    "loadBalancerBackendAddresses": [{"name": "n", "properties": {"ipAddress": ip}}]}})],
            }],
            NicMap::new(),
        )
    }

    fn node(ip: &str) -> NodeSpec {
        NodeSpec {
            name: "n".into(),
            uid: "u".into(),
            provider_id: String::new(),
            internal_ips: vec![ip.parse().unwrap()],
        }
    }

    #[tokio::test]
    async fn many_concurrent_unknowns_cost_one_refresh_per_interval() {
        let cache = Arc::new(UnknownNodes::new(Duration::from_millis(400)));
        let reads = Arc::new(AtomicUsize::new(0));
        let calls = (0..200).map(|i| {
            let (cache, reads) = (cache.clone(), reads.clone());
            async move {
                let ip = format!("10.9.{}.{}", i / 200, i % 200);
                cache
                    .recheck(&node(&ip), || async move {
                        reads.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Ok(index_with("10.0.0.1"))
                    })
                    .await
            }
        });
        let answers = futures::future::join_all(calls).await;
        assert_eq!(reads.load(Ordering::SeqCst), 1);
        assert_eq!(
            answers
                .iter()
                .filter(|a| matches!(
                    a,
                    Ok(Lookup::Unknown {
                        refreshed: false,
                        ..
                    })
                ))
                .count(),
            199
        );
        // After the interval, the next unknown refreshes again, and finds a new node.
        tokio::time::sleep(Duration::from_millis(400)).await;
        let found = cache
            .recheck(&node("10.0.0.7"), || async { Ok(index_with("10.0.0.7")) })
            .await
            .unwrap();
        assert!(matches!(found, Lookup::Found(_)));
    }

    #[tokio::test]
    async fn a_failed_refresh_is_not_retried_before_the_interval() {
        let cache = UnknownNodes::new(Duration::from_secs(5));
        let e = cache
            .recheck(&node("10.0.0.9"), || async {
                Err(Status::unavailable("arm down"))
            })
            .await
            .unwrap_err();
        assert_eq!(e.message(), "arm down");
        let again = cache
            .recheck(&node("10.0.0.9"), || async {
                panic!("no second refresh within the interval")
            })
            .await
            .unwrap_err();
        assert_eq!(again.code(), tonic::Code::Unavailable);
    }
}
