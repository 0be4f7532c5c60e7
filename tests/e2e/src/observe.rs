//! Reads the ARM simulator's state and logs into the judge's plain types.

use crate::judge::{Change, EntryView, State};
use aks_fixture::Cluster;
use arm_sim::ArmSim;
use arm_sim::model::AdminState;

fn state(s: AdminState) -> State {
    match s {
        AdminState::None => State::None,
        AdminState::Down => State::Down,
        AdminState::Up => State::Up,
    }
}

/// Every entry of every pool of the cluster's load balancers, as in effect now.
pub fn entries(arm: &ArmSim, cluster: &Cluster) -> Vec<EntryView> {
    let mut out = Vec::new();
    for lb in &cluster.load_balancers {
        for pool in &lb.pools {
            let Some(snapshot) = arm.pool(&lb.name, &pool.name) else {
                continue;
            };
            for e in snapshot.entries {
                let Some(target) = e.ip_address.clone().or(e.nic_ip_configuration.clone()) else {
                    continue;
                };
                out.push(EntryView {
                    lb: lb.name.clone(),
                    pool: pool.name.clone(),
                    target,
                    state: state(e.effective),
                });
            }
        }
    }
    out
}

/// The effective log as changes.
pub fn changes(arm: &ArmSim) -> Vec<Change> {
    arm.effective_log()
        .into_iter()
        .filter_map(|e| {
            Some(Change {
                time: e.time,
                lb: e.lb,
                pool: e.pool,
                target: e.target?,
                state: state(e.value),
                outside: e.op_id == "outside-writer",
            })
        })
        .collect()
}

/// ARM calls since `since`: (reads, writes, throttled).
pub fn arm_calls(arm: &ArmSim, since: jiff::Timestamp) -> (usize, usize, usize) {
    let mut reads = 0;
    let mut writes = 0;
    let mut throttled = 0;
    for r in arm.requests().into_iter().filter(|r| r.time >= since) {
        if r.path.contains("/oauth2/") || r.path.contains("/msi/") {
            continue;
        }
        match r.method.as_str() {
            "GET" | "HEAD" => reads += 1,
            _ => writes += 1,
        }
        if r.throttled {
            throttled += 1;
        }
    }
    (reads, writes, throttled)
}

/// The drain-gate condition as the API server committed each change (kube-sim's condition
/// log; the chaos soak runs on kube-sim).
pub fn gate_log(kube: &crate::kube_side::KubeSide) -> Vec<crate::judge::gate::GateChange> {
    kube.sim()
        .condition_log(Some("LoadBalancerAdminStateDown"))
        .into_iter()
        .map(|c| crate::judge::gate::GateChange {
            node: c.node,
            at: c.at,
            status: c.status,
            reason: c.reason,
        })
        .collect()
}
