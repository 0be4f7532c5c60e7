//! The coalescing plan: from every node currently asserted on one load balancer to the set of
//! entry changes of one write round (`arm::doc` edits the LB document that carries it). Pure.
//!
//! The writer calls this with the *current* desired states at the start of each round, so any
//! number of changes that arrived while the previous write was in flight collapse into one
//! write (coalescing without a timer). Entries already in the desired state are left out
//! (no-op writes are skipped); entries of nodes we do not assert are never touched.

use crate::index::{Admin, IndexedEntry, NodeSpec, PoolIndex};
use std::collections::BTreeMap;

/// One node asserted on this load balancer.
#[derive(Debug, Clone)]
pub struct Target {
    pub key: String,
    pub node: NodeSpec,
    pub desired: Admin,
}

/// What one node needs on this load balancer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetPlan {
    pub key: String,
    /// The node's entries on this LB, with `admin` set to the desired state.
    pub entries: Vec<IndexedEntry>,
    /// True when every entry already reads the desired state.
    pub already: bool,
    pub notes: Vec<String>,
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
/// them by receipt, so the newest instruction stands).
pub fn plan_lb(index: &PoolIndex, lb: &str, targets: &[Target]) -> LbPlan {
    let mut wanted: BTreeMap<(String, String), (bool, Admin)> = BTreeMap::new();
    let mut plans = Vec::with_capacity(targets.len());
    for t in targets {
        let resolved = index.resolve(&t.node, Some(lb));
        let mut already = true;
        let mut entries = Vec::with_capacity(resolved.entries.len());
        for e in resolved.entries {
            let holds = e.settled && reads_as(e.admin, t.desired);
            if !holds {
                already = false;
            }
            wanted.insert((e.pool.clone(), e.entry.clone()), (holds, t.desired));
            let mut e = e;
            e.admin = t.desired;
            entries.push(e);
        }
        plans.push(TargetPlan {
            key: t.key.clone(),
            entries,
            already,
            notes: resolved.notes,
        });
    }
    let mut changes: BTreeMap<String, BTreeMap<String, Admin>> = BTreeMap::new();
    for ((pool, entry), (holds, desired)) in wanted {
        if !holds {
            changes.entry(pool).or_default().insert(entry, desired);
        }
    }
    LbPlan {
        changes,
        targets: plans,
    }
}

/// True when an entry reading `current` is in state `desired` (an absent field reads `None`).
pub fn reads_as(current: Admin, desired: Admin) -> bool {
    current == desired
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::{LbPools, NicMap};
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

    fn mk_target(i: u8, desired: Admin) -> Target {
        Target {
            key: format!("uid{i}"),
            node: NodeSpec {
                name: format!("node{i}"),
                uid: format!("uid{i}"),
                provider_id: String::new(),
                internal_ips: vec![
                    format!("10.0.0.{i}").parse().unwrap(),
                    format!("fd00::{i}").parse().unwrap(),
                ],
            },
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
        );
        assert!(plan.changes.is_empty());
        assert!(plan.targets.iter().all(|t| t.already));
        // Another LB: nothing there.
        let other = plan_lb(&idx, "kubernetes-internal", &[mk_target(1, Admin::Down)]);
        assert!(other.changes.is_empty() && other.targets[0].entries.is_empty());
    }

    #[test]
    fn entries_of_a_failed_pool_operation_are_written_again() {
        let (_, mut lbs) = mk_index();
        lbs[0].pools[0]["properties"]["provisioningState"] = json!("Failed");
        let idx = PoolIndex::build(&lbs, NicMap::new());
        // node3 reads Down, but the operation that set it failed: not a fact yet.
        let plan = plan_lb(&idx, "kubernetes", &[mk_target(3, Admin::Down)]);
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
        );
        assert!(
            plan.changes.is_empty(),
            "the newest instruction (None) is already true"
        );
    }
}
