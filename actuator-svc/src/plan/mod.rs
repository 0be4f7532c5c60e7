//! The coalescing plan: from every node currently asserted on one load balancer to the set of
//! entry changes of one write round (`lb::doc` edits the LB document that carries it). Pure.
//!
//! Beside it, what a plan is made from: `cache` (the last pool index read per LB, shared by
//! the writers and the tool RPCs) and `guard` (the blast-radius limit it applies).
//!
//! The writer calls this with the *current* desired states at the start of each round, so any
//! number of changes that arrived while the previous write was in flight collapse into one
//! write (coalescing without a timer). Entries already in the desired state are left out
//! (no-op writes are skipped); entries of nodes we do not assert are never touched.

pub mod cache;
pub mod guard;

use crate::lb::index::{Admin, IndexedEntry, NodeSpec, PoolIndex, Resolved};
use guard::{Candidate, Decision, Guard, PoolCount};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// One node asserted on this load balancer (shared with the store's held state: a round
/// copies pointers, not node specs).
#[derive(Debug, Clone)]
pub struct Target {
    pub key: Arc<str>,
    pub node: Arc<NodeSpec>,
    pub desired: Admin,
}

/// What one node needs on this load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPlan {
    pub key: Arc<str>,
    /// The node's entries on this LB, with `admin` set to the desired state.
    pub entries: Vec<IndexedEntry>,
    /// True when every entry already reads the desired state.
    pub already: bool,
    pub notes: Vec<String>,
    /// Set when the blast-radius guard keeps this node from going `Down` (the reason).
    pub refused: Option<String>,
}

/// One write round on one load balancer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LbPlan {
    /// pool name -> (entry name -> new admin state); only real changes.
    pub changes: BTreeMap<String, BTreeMap<String, Admin>>,
    pub targets: Vec<TargetPlan>,
}

impl LbPlan {
    /// Number of entries the round changes.
    pub fn entry_count(&self) -> usize {
        self.changes.values().map(BTreeMap::len).sum()
    }
}

/// Plans a round on `lb`. Later targets win when two claim the same entry (the caller orders
/// them by receipt, so the newest instruction stands). `guard` decides which `Down` targets
/// may be cut (`guard.rs`); a refused one is planned as `None` (its entries are left to, or
/// given back to, the health probe) and carries the reason.
pub fn plan_lb(index: &PoolIndex, lb: &str, targets: &[Target], guard: &Guard) -> LbPlan {
    let resolved: Vec<_> = targets
        .iter()
        .map(|t| index.resolve(&t.node, Some(lb)))
        .collect();
    let refused = guard_round(index, lb, targets, &resolved, guard);
    // Keyed by the index's shared names: no string is built per entry; only the real
    // changes are copied into `changes` (the write's edit list).
    let mut wanted: BTreeMap<(Arc<str>, Arc<str>), (bool, Admin)> = BTreeMap::new();
    let mut plans = Vec::with_capacity(targets.len());
    for ((t, r), refusal) in targets.iter().zip(resolved).zip(refused) {
        let desired = if refusal.is_some() {
            Admin::None
        } else {
            t.desired
        };
        let mut already = refusal.is_none();
        let mut entries = r.entries;
        for e in &mut entries {
            let holds = e.settled && reads_as(e.admin, desired);
            if !holds {
                already = false;
            }
            wanted.insert((e.pool.clone(), e.entry.clone()), (holds, desired));
            e.admin = desired;
        }
        plans.push(TargetPlan {
            key: t.key.clone(),
            entries,
            already,
            notes: r.notes,
            refused: refusal,
        });
    }
    let mut changes: BTreeMap<String, BTreeMap<String, Admin>> = BTreeMap::new();
    for ((pool, entry), (holds, desired)) in wanted {
        if !holds {
            changes
                .entry(pool.to_string())
                .or_default()
                .insert(entry.to_string(), desired);
        }
    }
    LbPlan {
        changes,
        targets: plans,
    }
}

/// The guard's refusals for `targets` (same order): counts every pool of `lb` from the read.
fn guard_round(
    index: &PoolIndex,
    lb: &str,
    targets: &[Target],
    resolved: &[Resolved],
    guard: &Guard,
) -> Vec<Option<String>> {
    let mut out = vec![None; targets.len()];
    if guard.share() >= 1.0 || !targets.iter().any(|t| t.desired == Admin::Down) {
        return out;
    }
    let claimed: BTreeSet<(&str, &str)> = resolved
        .iter()
        .flat_map(|r| r.entries.iter())
        .map(|e| (&*e.pool, &*e.entry))
        .collect();
    let pools: BTreeMap<String, PoolCount> = index
        .pool_counts(lb, |pool, entry| claimed.contains(&(pool, entry)))
        .into_iter()
        .map(|(pool, (total, foreign_down))| {
            (
                pool.to_string(),
                PoolCount {
                    total,
                    foreign_down,
                },
            )
        })
        .collect();
    let (slots, candidates): (Vec<usize>, Vec<Candidate>) = targets
        .iter()
        .zip(resolved)
        .enumerate()
        .filter(|(_, (t, r))| t.desired == Admin::Down && !r.entries.is_empty())
        .map(|(i, (_, r))| {
            let mut per_pool: BTreeMap<Arc<str>, usize> = BTreeMap::new();
            for e in &r.entries {
                *per_pool.entry(e.pool.clone()).or_default() += 1;
            }
            let incumbent = r.entries.iter().any(|e| e.admin == Admin::Down);
            (
                i,
                Candidate {
                    per_pool,
                    incumbent,
                },
            )
        })
        .unzip();
    for (slot, decision) in slots.into_iter().zip(guard.admit(&pools, &candidates)) {
        if let Decision::Refuse(reason) = decision {
            out[slot] = Some(reason);
        }
    }
    out
}

/// True when an entry reading `current` is in state `desired` (an absent field reads `None`).
pub fn reads_as(current: Admin, desired: Admin) -> bool {
    current == desired
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::index::{LbPools, NicMap};
    use serde_json::json;

    fn mk_index() -> (PoolIndex, Vec<LbPools>) {
        let lbs = vec![LbPools {
            name: "kubernetes".into(),
            id: "/lb".into(),
            pools: ["kubernetes", "kubernetes-IPv6"]
                .iter()
                .enumerate()
                .map(|(fam, p)| {
                    json!({"name": p, "properties": {"loadBalancingRules": [{"id": "r"}],
                        "loadBalancerBackendAddresses": (1..=3).map(|i| json!({
                            "name": format!("node{i}"),
                            "properties": {"ipAddress": if fam == 0 { format!("10.0.0.{i}") } else { format!("fd00::{i}") },
                                           "adminState": if i == 3 { "Down" } else { "None" }}
                        })).collect::<Vec<_>>()}})
                })
                .collect(),
        }];
        (PoolIndex::build(&lbs, NicMap::new()), lbs)
    }

    fn off() -> Guard {
        Guard::off()
    }

    fn mk_target(i: u8, desired: Admin) -> Target {
        Target {
            key: format!("uid{i}").into(),
            node: Arc::new(NodeSpec {
                name: format!("node{i}"),
                uid: format!("uid{i}"),
                provider_id: String::new(),
                internal_ips: vec![
                    format!("10.0.0.{i}").parse().unwrap(),
                    format!("fd00::{i}").parse().unwrap(),
                ],
            }),
            desired,
        }
    }

    #[test]
    fn many_nodes_coalesce_into_one_change_set_per_pool() {
        let (idx, _) = mk_index();
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(1, Admin::Down), mk_target(2, Admin::Down)],
            &off(),
        );
        assert_eq!(plan.changes.len(), 2, "both pools");
        assert_eq!(plan.entry_count(), 4);
        assert!(
            plan.targets
                .iter()
                .all(|t| !t.already && t.entries.len() == 2)
        );
    }

    #[test]
    fn no_op_targets_produce_no_changes() {
        let (idx, _) = mk_index();
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(3, Admin::Down), mk_target(1, Admin::None)],
            &off(),
        );
        assert!(plan.changes.is_empty());
        assert!(plan.targets.iter().all(|t| t.already));
        // Another LB: nothing there.
        let other = plan_lb(
            &idx,
            "kubernetes-internal",
            &[mk_target(1, Admin::Down)],
            &off(),
        );
        assert!(other.changes.is_empty() && other.targets[0].entries.is_empty());
    }

    #[test]
    fn entries_of_a_failed_pool_operation_are_written_again() {
        let (_, mut lbs) = mk_index();
        lbs[0].pools[0]["properties"]["provisioningState"] = json!("Failed");
        let idx = PoolIndex::build(&lbs, NicMap::new());
        // node3 reads Down, but the operation that set it failed: not a fact yet.
        let plan = plan_lb(&idx, "kubernetes", &[mk_target(3, Admin::Down)], &off());
        assert_eq!(plan.changes.keys().collect::<Vec<_>>(), vec!["kubernetes"]);
        assert!(!plan.targets[0].already);
    }

    #[test]
    fn later_target_wins_on_the_same_entry() {
        let (idx, _) = mk_index();
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(1, Admin::Down), mk_target(1, Admin::None)],
            &off(),
        );
        assert!(
            plan.changes.is_empty(),
            "the newest instruction (None) is already true"
        );
    }

    fn refused(plan: &LbPlan) -> Vec<&str> {
        plan.targets
            .iter()
            .filter(|t| t.refused.is_some())
            .map(|t| &*t.key)
            .collect()
    }

    #[test]
    fn the_guard_counts_entries_down_for_others_and_refuses_over_the_share() {
        let (idx, _) = mk_index();
        let half = Guard::new(0.5).unwrap();
        // Three entries per pool, limit 1, node3 already Down for someone else: no room.
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(1, Admin::Down), mk_target(2, Admin::Down)],
            &half,
        );
        assert!(plan.changes.is_empty());
        assert_eq!(refused(&plan), vec!["uid1", "uid2"]);
        let reason = plan.targets[0].refused.as_deref().unwrap();
        assert!(reason.starts_with("blast-radius guard:"), "{reason}");
        assert!(plan.targets.iter().all(|t| !t.already));
    }

    #[test]
    fn the_guard_keeps_the_node_already_cut_and_admits_others_once_it_is_restored() {
        let (idx, _) = mk_index();
        let half = Guard::new(0.5).unwrap();
        // node3 (already Down, signalled later) keeps its place; node1 waits.
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(1, Admin::Down), mk_target(3, Admin::Down)],
            &half,
        );
        assert_eq!(refused(&plan), vec!["uid1"]);
        assert!(plan.changes.is_empty() && plan.targets[1].already);
        // node3 restored: node1 goes Down in the same round.
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(1, Admin::Down), mk_target(3, Admin::None)],
            &half,
        );
        assert!(refused(&plan).is_empty());
        for pool in ["kubernetes", "kubernetes-IPv6"] {
            assert_eq!(plan.changes[pool]["node1"], Admin::Down);
            assert_eq!(plan.changes[pool]["node3"], Admin::None);
        }
    }

    #[test]
    fn a_refused_node_already_down_is_given_back_to_the_health_probe() {
        let (idx, _) = mk_index();
        // 0.3 of three entries: none may be Down.
        let plan = plan_lb(
            &idx,
            "kubernetes",
            &[mk_target(3, Admin::Down)],
            &Guard::new(0.3).unwrap(),
        );
        assert_eq!(refused(&plan), vec!["uid3"]);
        assert_eq!(plan.changes["kubernetes"]["node3"], Admin::None);
    }
}
