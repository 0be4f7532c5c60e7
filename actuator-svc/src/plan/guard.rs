//! The blast-radius guard: a wrong signal (an operator tainting every node, a buggy notice
//! source) must not take a whole load balancer out of rotation.
//!
//! Rule, per pool of one load balancer: at most `floor(share × entries)` entries read `Down`
//! after a write round. Entries `Down` for someone else count against the limit too. A node is
//! cut on an LB only if every pool it is in there has room for all of its entries there; a
//! node over the limit is left to the health probe (its entries stay, or go back to, `None`),
//! which is exactly what would happen without cutover, so the guard is never worse than
//! running without it.
//!
//! Order: nodes already cut keep their place (no flapping when a snapshot replays the nodes in
//! another order), then the store's receipt order: the nodes signalled first are cut first.
//! Refused nodes are planned again every round, so they are cut as soon as held nodes are
//! restored.
//!
//! Default share, 0.5: the signals cutover acts on take out a bounded part of a cluster at a
//! time (a Spot eviction wave takes the Spot pool, a quarter of the nodes in the AKS presets;
//! an upgrade surges and drains a few nodes; an operator drains one node pool). Half of a
//! pool's backends staying in rotation leaves the rest of the fleet able to absorb the load
//! while still covering all of those, and a signal that claims more than half of the nodes at
//! once is far more likely to be a mistake than a real event. Never 1.0 by default: a
//! single wrong taint on every node would drop every connection of every service at once.
//! `--max-down-share=1.0` is the explicit override that lets every entry go `Down`.
//!
//! Pure: `admit` decides on counts; `Guard` also keeps what it refuses now, per LB, for the
//! RPC answers and the metric.

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;

/// The default share of a pool's entries that may be `Down` at once.
pub const DEFAULT_MAX_DOWN_SHARE: f64 = 0.5;

/// Every reason the guard gives starts with this.
pub const REASON_PREFIX: &str = "blast-radius guard:";

/// One pool's counts before the round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PoolCount {
    pub total: usize,
    /// Entries reading `Down` that no node of this round claims (someone else's, or of nodes
    /// we no longer assert).
    pub foreign_down: usize,
}

/// A node that wants `Down` on this LB.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Candidate {
    /// pool -> number of the node's entries in it (the pool name shared with the index:
    /// built every round for every node going `Down`).
    pub per_pool: BTreeMap<std::sync::Arc<str>, usize>,
    /// Some entry of the node already reads `Down` (it was cut before).
    pub incumbent: bool,
}

/// The guard's answer for one candidate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Admit,
    Refuse(String),
}

/// The guard settings and what it refuses now.
#[derive(Debug, Clone)]
pub struct Guard {
    share: f64,
    refused: Arc<Mutex<BTreeMap<String, BTreeMap<String, String>>>>,
}

impl Default for Guard {
    fn default() -> Self {
        Self::new(DEFAULT_MAX_DOWN_SHARE).unwrap_or_else(|_| Self::off())
    }
}

impl Guard {
    /// A guard letting at most `share` (0 < share <= 1) of a pool's entries be `Down`.
    pub fn new(share: f64) -> Result<Self, String> {
        if !(share > 0.0 && share <= 1.0) {
            return Err(format!(
                "--max-down-share: {share} is not in (0, 1]; 1.0 lets every entry go Down"
            ));
        }
        Ok(Self {
            share,
            refused: Arc::default(),
        })
    }

    /// No limit (`--max-down-share=1.0`).
    pub fn off() -> Self {
        Self {
            share: 1.0,
            refused: Arc::default(),
        }
    }

    pub fn share(&self) -> f64 {
        self.share
    }

    /// The most entries of a pool of `total` that may be `Down`.
    pub fn limit(&self, total: usize) -> usize {
        if self.share >= 1.0 {
            return total;
        }
        // The epsilon keeps 0.3 × 10 at 3 despite binary fractions.
        ((self.share * total as f64) + 1e-9).floor() as usize
    }

    /// Decides, for `candidates` in receipt order, which may be cut: incumbents first, then
    /// the rest, each group in the given order. The answer is in the input order.
    pub fn admit(
        &self,
        pools: &BTreeMap<String, PoolCount>,
        candidates: &[Candidate],
    ) -> Vec<Decision> {
        let mut down: BTreeMap<&str, usize> = pools
            .iter()
            .map(|(p, c)| (p.as_str(), c.foreign_down))
            .collect();
        let mut out = vec![Decision::Admit; candidates.len()];
        let order = candidates
            .iter()
            .enumerate()
            .filter(|(_, c)| c.incumbent)
            .chain(candidates.iter().enumerate().filter(|(_, c)| !c.incumbent));
        for (i, c) in order {
            let over = c.per_pool.iter().find(|(pool, n)| {
                let total = pools.get(&***pool).map_or(0, |p| p.total);
                let now = down.get(&***pool).copied().unwrap_or(0);
                now + **n > self.limit(total)
            });
            match over {
                Some((pool, _)) => {
                    let total = pools.get(&**pool).map_or(0, |p| p.total);
                    out[i] = Decision::Refuse(format!(
                        "{REASON_PREFIX} cutting this node would put more than {} of the {total} entries of pool {pool} Down (--max-down-share {}); left to the health probe, and cut once held nodes are restored",
                        self.limit(total),
                        self.share
                    ));
                }
                None => {
                    for (pool, n) in &c.per_pool {
                        *down.entry(&**pool).or_default() += n;
                    }
                }
            }
        }
        out
    }

    /// Records what the last round on `lb` refused (node key -> reason).
    /// Keeps what the guard refuses now on `lb`; returns the nodes (key, reason) it did not
    /// refuse there before, so a refusal is logged once, not every round.
    pub fn record(&self, lb: &str, refused: BTreeMap<String, String>) -> Vec<(String, String)> {
        let mut map = self.refused.lock();
        let before = map.get(lb);
        let new = refused
            .iter()
            .filter(|(k, _)| before.is_none_or(|b| !b.contains_key(*k)))
            .map(|(k, r)| (k.clone(), r.clone()))
            .collect();
        if refused.is_empty() {
            map.remove(lb);
        } else {
            map.insert(lb.to_string(), refused);
        }
        new
    }

    /// What the guard refuses now for the node `key`: (LB, reason).
    pub fn refused(&self, key: &str) -> Vec<(String, String)> {
        self.refused
            .lock()
            .iter()
            .filter_map(|(lb, m)| m.get(key).map(|r| (lb.clone(), r.clone())))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pools(list: &[(&str, usize, usize)]) -> BTreeMap<String, PoolCount> {
        list.iter()
            .map(|(p, total, foreign_down)| {
                (
                    p.to_string(),
                    PoolCount {
                        total: *total,
                        foreign_down: *foreign_down,
                    },
                )
            })
            .collect()
    }

    fn node(pools: &[&str], incumbent: bool) -> Candidate {
        Candidate {
            per_pool: pools.iter().map(|p| ((*p).into(), 1)).collect(),
            incumbent,
        }
    }

    fn admitted(d: &[Decision]) -> Vec<usize> {
        d.iter()
            .enumerate()
            .filter(|(_, d)| **d == Decision::Admit)
            .map(|(i, _)| i)
            .collect()
    }

    #[test]
    fn limit_rounds_down_and_never_reaches_every_entry_below_one() {
        let g = Guard::new(0.5).unwrap();
        assert_eq!(g.limit(12), 6);
        assert_eq!(g.limit(5), 2);
        assert_eq!(g.limit(1), 0, "a single backend is never taken out");
        assert_eq!(Guard::new(0.3).unwrap().limit(10), 3);
        assert_eq!(Guard::off().limit(7), 7);
        assert!(Guard::new(0.0).is_err());
        assert!(Guard::new(1.5).is_err());
        assert!(Guard::new(f64::NAN).is_err());
        assert_eq!(Guard::default().share(), DEFAULT_MAX_DOWN_SHARE);
    }

    #[test]
    fn every_node_tainted_cuts_the_first_signalled_up_to_the_share() {
        let g = Guard::default();
        let p = pools(&[("v4", 12, 0), ("v6", 12, 0)]);
        let all: Vec<Candidate> = (0..12).map(|_| node(&["v4", "v6"], false)).collect();
        let d = g.admit(&p, &all);
        assert_eq!(admitted(&d), (0..6).collect::<Vec<_>>());
        for r in &d[6..] {
            let Decision::Refuse(reason) = r else {
                panic!("refused expected")
            };
            assert!(reason.starts_with(REASON_PREFIX), "{reason}");
            assert!(reason.contains("more than 6 of the 12 entries"), "{reason}");
        }
    }

    #[test]
    fn nodes_already_cut_keep_their_place_whatever_the_order() {
        let g = Guard::default();
        let p = pools(&[("v4", 4, 0)]);
        // A replayed snapshot lists the cut nodes (2, 3) last: they stay, 0 and 1 wait.
        let c = vec![
            node(&["v4"], false),
            node(&["v4"], false),
            node(&["v4"], true),
            node(&["v4"], true),
        ];
        assert_eq!(admitted(&g.admit(&p, &c)), vec![2, 3]);
    }

    #[test]
    fn foreign_down_entries_count_and_small_pools_block_only_their_nodes() {
        let g = Guard::default();
        // Two entries of "big" are Down for someone else: only one more fits.
        let p = pools(&[("big", 6, 2), ("svc", 2, 0)]);
        let c = vec![
            node(&["big", "svc"], false),
            node(&["big", "svc"], false),
            node(&["big"], false),
        ];
        let d = g.admit(&p, &c);
        assert_eq!(admitted(&d), vec![0]);
        // With room in "big" but a full "svc", a node outside "svc" still goes.
        let p = pools(&[("big", 10, 0), ("svc", 2, 0)]);
        assert_eq!(admitted(&g.admit(&p, &c)), vec![0, 2]);
    }

    #[test]
    fn the_override_lets_every_entry_go_down() {
        let g = Guard::new(1.0).unwrap();
        let p = pools(&[("v4", 3, 0)]);
        let c: Vec<Candidate> = (0..3).map(|_| node(&["v4"], false)).collect();
        assert_eq!(admitted(&g.admit(&p, &c)), vec![0, 1, 2]);
    }

    #[test]
    fn refusals_are_kept_per_lb_until_a_round_clears_them() {
        let g = Guard::default();
        let clone = g.clone();
        g.record("lb1", [("uid1".to_string(), "r".to_string())].into());
        g.record("lb2", [("uid1".to_string(), "s".to_string())].into());
        assert_eq!(clone.refused("uid1").len(), 2);
        g.record("lb1", BTreeMap::new());
        assert_eq!(
            clone.refused("uid1"),
            vec![("lb2".to_string(), "s".to_string())]
        );
        assert!(clone.refused("uid2").is_empty());
    }

    #[test]
    fn a_refusal_is_reported_once_until_it_ends() {
        let g = Guard::new(0.5).unwrap();
        let one = BTreeMap::from([("n1".to_string(), "full".to_string())]);
        assert_eq!(
            g.record("lb", one.clone()),
            vec![("n1".into(), "full".into())]
        );
        assert!(g.record("lb", one.clone()).is_empty());
        assert!(g.record("lb", BTreeMap::new()).is_empty());
        assert_eq!(g.record("lb", one).len(), 1);
    }
}
