//! Pure judgement of an outcome from what the ARM simulator recorded: is the end state exact,
//! did any entry flap, and how long did a node take from signal to effective on every entry.
//! Inputs are plain values so the rules are unit-tested without a simulator.

use aks_fixture::{Cluster, PoolType};
use std::collections::{BTreeMap, HashSet};

pub mod chaos;
pub mod gate;
pub mod leader;
pub mod tool;
pub mod writer;

/// The observable admin state of an entry (unset reads as `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    None,
    Down,
    Up,
}

/// One entry as currently in effect.
#[derive(Debug, Clone)]
pub struct EntryView {
    pub lb: String,
    pub pool: String,
    /// IP address (IP-based) or NIC ipConfiguration ID (NIC-based).
    pub target: String,
    pub state: State,
}

/// One effective change, in log order.
#[derive(Debug, Clone)]
pub struct Change {
    pub time: jiff::Timestamp,
    pub lb: String,
    pub pool: String,
    pub target: String,
    pub state: State,
    /// Written by an outside writer (not cutover): effective at once.
    pub outside: bool,
}

/// Where a node's entry in one pool lives: `(lb, pool, target)`, target lower-cased.
pub type EntryKey = (String, String, String);

pub fn key(lb: &str, pool: &str, target: &str) -> EntryKey {
    (
        lb.to_string(),
        pool.to_string(),
        target.to_ascii_lowercase(),
    )
}

/// Every entry of `node` in pools where admin state applies (not outbound-only pools).
pub fn node_entries(cluster: &Cluster, node: &str) -> Vec<EntryKey> {
    let Some(n) = cluster.node(node) else {
        return Vec::new();
    };
    cluster
        .pools_of(node)
        .filter(|(_, pool)| !pool.outbound_only)
        .map(|(lb, pool)| {
            let target = match cluster.backend_pool_type {
                PoolType::NodeIp => n.ip(pool.family),
                PoolType::NodeIpConfiguration => n.ip_configuration_id(
                    &cluster.subscription_id,
                    &cluster.resource_group,
                    pool.family,
                ),
            };
            key(&lb.name, &pool.name, &target)
        })
        .collect()
}

/// Pools whose entries must never change (outbound-only pools).
fn untouchable(cluster: &Cluster) -> HashSet<(String, String)> {
    cluster
        .load_balancers
        .iter()
        .flat_map(|lb| {
            lb.pools
                .iter()
                .filter(|p| p.outbound_only)
                .map(|p| (lb.name.clone(), p.name.clone()))
        })
        .collect()
}

/// The problems with the end state: every entry of a node in `down` or in `deleted_down` must
/// be `Down`, every other entry `None`. Returns an empty list when exact.
///
/// `deleted_down`: nodes whose Node object was deleted while they were `Down`. Their entries
/// stay in ARM, `Down`, until the cloud provider removes them: cutover never restores a
/// deleted node (that would send new flows to a machine on its way out).
pub fn end_state_problems(
    cluster: &Cluster,
    entries: &[EntryView],
    down: &HashSet<String>,
    deleted_down: &HashSet<String>,
) -> Vec<String> {
    let mut want_down: HashSet<EntryKey> = HashSet::new();
    for node in down.iter().chain(deleted_down) {
        want_down.extend(node_entries(cluster, node));
    }
    let mut problems = Vec::new();
    let mut seen: HashSet<EntryKey> = HashSet::new();
    for e in entries {
        let k = key(&e.lb, &e.pool, &e.target);
        let want = if want_down.contains(&k) {
            State::Down
        } else {
            State::None
        };
        if e.state != want {
            problems.push(format!(
                "{}/{} entry {} is {:?}, want {want:?}",
                e.lb, e.pool, e.target, e.state
            ));
        }
        seen.insert(k);
    }
    for missing in want_down.difference(&seen) {
        problems.push(format!(
            "{}/{} entry {} is missing",
            missing.0, missing.1, missing.2
        ));
    }
    problems.sort();
    problems
}

/// Keeps only real transitions: a change to the state an entry already had is dropped.
pub fn transitions(log: &[Change]) -> Vec<Change> {
    let mut last: BTreeMap<EntryKey, State> = BTreeMap::new();
    let mut out = Vec::new();
    for c in log {
        let k = key(&c.lb, &c.pool, &c.target);
        let before = last.get(&k).copied().unwrap_or(State::None);
        if before != c.state {
            out.push(c.clone());
        }
        last.insert(k, c.state);
    }
    out
}

/// Entries that changed more than once in `[since, until)` (a transition must change each
/// entry at most once), plus any change to an outbound-only pool.
pub fn flaps(
    cluster: &Cluster,
    log: &[Change],
    since: jiff::Timestamp,
    until: Option<jiff::Timestamp>,
) -> Vec<String> {
    let mut counts: BTreeMap<EntryKey, usize> = BTreeMap::new();
    let frozen = untouchable(cluster);
    let mut problems = Vec::new();
    let in_window = |c: &Change| c.time >= since && until.is_none_or(|u| c.time < u);
    for c in transitions(log).into_iter().filter(in_window) {
        if frozen.contains(&(c.lb.clone(), c.pool.clone())) {
            problems.push(format!("{}/{} is outbound-only but changed", c.lb, c.pool));
        }
        *counts.entry(key(&c.lb, &c.pool, &c.target)).or_default() += 1;
    }
    problems.extend(
        counts
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(k, n)| format!("{}/{} entry {} changed {n} times", k.0, k.1, k.2)),
    );
    problems
}

/// Time from `since` until every entry of `node` had changed to `state`; `None` while some
/// entry has not.
pub fn time_to_effective(
    cluster: &Cluster,
    log: &[Change],
    node: &str,
    state: State,
    since: jiff::Timestamp,
) -> Option<jiff::SignedDuration> {
    let entries = node_entries(cluster, node);
    if entries.is_empty() {
        return None;
    }
    let mut latest = since;
    for entry in &entries {
        let first = log.iter().find(|c| {
            c.time >= since && c.state == state && key(&c.lb, &c.pool, &c.target) == *entry
        })?;
        latest = latest.max(first.time);
    }
    Some(latest.duration_since(since))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_millisecond(1_700_000_000_000 + ms).unwrap()
    }

    fn views(cluster: &Cluster, down: &[&str]) -> Vec<EntryView> {
        let mut out = Vec::new();
        for n in &cluster.nodes {
            for (lb, pool, target) in node_entries(cluster, &n.name) {
                let state = if down.contains(&n.name.as_str()) {
                    State::Down
                } else {
                    State::None
                };
                out.push(EntryView {
                    lb,
                    pool,
                    target,
                    state,
                });
            }
        }
        out
    }

    #[test]
    fn every_node_has_an_entry_in_each_of_four_pools() {
        let c = aks_fixture::preset("aks").unwrap();
        let entries = node_entries(&c, &c.nodes[0].name);
        assert_eq!(entries.len(), 4);
        assert!(
            entries
                .iter()
                .any(|e| e.2.ends_with("/ipconfigurations/ipconfigv6"))
        );
        let ip = aks_fixture::preset("aks-ip").unwrap();
        assert!(
            node_entries(&ip, &ip.nodes[0].name)
                .iter()
                .any(|e| e.2 == ip.nodes[0].ipv6.to_string())
        );
    }

    #[test]
    fn exact_end_state_has_no_problems_and_one_wrong_entry_is_named() {
        let c = aks_fixture::preset("aks").unwrap();
        let a = c.nodes[0].name.clone();
        let down: HashSet<String> = [a.clone()].into();
        let none: HashSet<String> = HashSet::new();
        assert!(end_state_problems(&c, &views(&c, &[&a]), &down, &none).is_empty());
        let mut wrong = views(&c, &[&a]);
        wrong[1].state = State::None;
        let problems = end_state_problems(&c, &wrong, &down, &none);
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("want Down"));
        assert_eq!(
            end_state_problems(&c, &views(&c, &[&a]), &none, &none).len(),
            4
        );
    }

    #[test]
    fn a_node_deleted_while_down_must_stay_down() {
        let c = aks_fixture::preset("aks").unwrap();
        let a = c.nodes[0].name.clone();
        let none: HashSet<String> = HashSet::new();
        let deleted: HashSet<String> = [a.clone()].into();
        assert!(end_state_problems(&c, &views(&c, &[&a]), &none, &deleted).is_empty());
        // Restored after its deletion: every entry is named.
        let problems = end_state_problems(&c, &views(&c, &[]), &none, &deleted);
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(problems.iter().all(|p| p.contains("want Down")));
    }

    #[test]
    fn time_to_effective_waits_for_the_last_entry() {
        let c = aks_fixture::preset("aks").unwrap();
        let n = c.nodes[0].name.clone();
        let log: Vec<Change> = node_entries(&c, &n)
            .into_iter()
            .enumerate()
            .map(|(i, (lb, pool, target))| Change {
                time: at(100 * i as i64 + 500),
                lb,
                pool,
                target,
                state: State::Down,
                outside: false,
            })
            .collect();
        let t = time_to_effective(&c, &log, &n, State::Down, at(0)).unwrap();
        assert_eq!(t.as_millis(), 800);
        assert!(time_to_effective(&c, &log[..3], &n, State::Down, at(0)).is_none());
        assert!(time_to_effective(&c, &log, &n, State::None, at(0)).is_none());
    }

    #[test]
    fn a_down_none_down_sequence_is_a_flap_but_repeats_are_not() {
        let c = aks_fixture::preset("aks").unwrap();
        let (lb, pool, target) = node_entries(&c, &c.nodes[0].name).remove(0);
        let change = |ms, state| Change {
            time: at(ms),
            lb: lb.clone(),
            pool: pool.clone(),
            target: target.clone(),
            state,
            outside: false,
        };
        let steady = vec![change(1, State::Down), change(2, State::Down)];
        assert!(flaps(&c, &steady, at(0), None).is_empty());
        let flapping = vec![
            change(1, State::Down),
            change(2, State::None),
            change(3, State::Down),
        ];
        assert_eq!(flaps(&c, &flapping, at(0), None).len(), 1);
        // Only changes after `since` count.
        assert!(flaps(&c, &flapping, at(3), None).is_empty());
        assert!(flaps(&c, &flapping, at(0), Some(at(2))).is_empty());
    }
}
