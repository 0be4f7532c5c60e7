//! What the run saw, stamped with simulated time as it happened: after every step the
//! simulators' logs are read from where the last read stopped (ARM's effective changes and
//! writes, Kubernetes requests and the drain-gate condition), so each record carries the step
//! it appeared in (one tick of resolution).

use crate::hosts::Slots;
use crate::schedule::{Ms, Plan};
use cutover_e2e::judge::{EntryKey, EntryView, State, key, node_entries};

/// One ARM write, by the simulated host that sent it (the rule is the soak's too).
pub use cutover_e2e::judge::writer::ArmWrite;

/// One Kubernetes write by a signal-svc replica (the rule is the soak's too).
pub use cutover_e2e::judge::leader::KubeWrite;

/// Everything observed.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Entries as ARM made them effective (cutover's writes and outside ones).
    pub arm: Vec<(Ms, EntryKey, State, bool)>,
    pub arm_writes: Vec<ArmWrite>,
    pub kube_writes: Vec<KubeWrite>,
    /// The drain-gate condition as committed: (when, node name, status, reason).
    pub gate: Vec<(Ms, String, String, String)>,
    /// (when the API answered, node index, Down)
    pub intents: Vec<(Ms, usize, bool)>,
    /// Ownership changes as the actuators' stores said: (when, host, LB, owns).
    pub ownership: Vec<(Ms, String, String, bool)>,
    /// Actuators without any grant (writing every LB): (when, host, in that mode).
    pub ungranted: Vec<(Ms, String, bool)>,
    /// The tool's answers ([`crate::tool`]).
    pub tool_reads: Vec<crate::tool::ToolRead>,
    /// What the actuators accepted, each change.
    pub accepted: Vec<crate::judge::Accepted>,
    /// Each entry as in effect at the end.
    pub end: Vec<EntryView>,
    pub end_ms: Ms,
}

/// Every LB of the cluster, by name.
pub fn lbs(cluster: &aks_fixture::Cluster) -> Vec<String> {
    cluster
        .load_balancers
        .iter()
        .map(|l| l.name.clone())
        .collect()
}

/// Where `node`'s entries are (pools where admin state applies).
pub fn entries_of(cluster: &aks_fixture::Cluster, node: &str) -> Vec<EntryKey> {
    node_entries(cluster, node)
}

pub struct Observer {
    cluster: aks_fixture::Cluster,
    seen: Observed,
    arm_effective: usize,
    arm_requests: usize,
    kube_requests: usize,
    conditions: usize,
    /// Simulated host names by address (a request's peer names its sender).
    hosts: Vec<(std::net::IpAddr, String)>,
}

fn state(v: &arm_sim::model::AdminState) -> State {
    match v {
        arm_sim::model::AdminState::Down => State::Down,
        arm_sim::model::AdminState::Up => State::Up,
        arm_sim::model::AdminState::None => State::None,
    }
}

impl Observer {
    pub fn new(cluster: &aks_fixture::Cluster, _plan: &Plan) -> Self {
        Observer {
            cluster: cluster.clone(),
            seen: Observed::default(),
            arm_effective: 0,
            arm_requests: 0,
            kube_requests: 0,
            conditions: 0,
            hosts: Vec::new(),
        }
    }

    /// Learns the simulated hosts' addresses (call once the hosts are registered).
    pub fn learn_hosts(&mut self, hosts: Vec<(std::net::IpAddr, String)>) {
        self.hosts = hosts;
    }

    fn host_of(&self, peer: Option<std::net::SocketAddr>) -> String {
        peer.and_then(|p| {
            self.hosts
                .iter()
                .find(|(ip, _)| *ip == p.ip())
                .map(|(_, h)| h.clone())
        })
        .unwrap_or_else(|| "?".into())
    }

    /// Reads what is new since the last call, stamping it `now`.
    pub fn observe(&mut self, now: Ms, slots: &Slots) {
        if let Some(arm) = slots.arm.lock().clone() {
            let (effective, next) = arm.effective_since(self.arm_effective);
            self.arm_effective = next;
            for e in effective {
                let Some(target) = e.target.as_deref() else {
                    continue;
                };
                let outside = e.op_id == "outside-writer";
                self.seen
                    .arm
                    .push((now, key(&e.lb, &e.pool, target), state(&e.value), outside));
            }
            let (requests, next) = arm.requests_since(self.arm_requests);
            self.arm_requests = next;
            for r in requests {
                if r.method != "PUT" || !r.path.contains("/loadBalancers/") {
                    continue;
                }
                let lb = cutover_e2e::judge::writer::lb_of(&r.path).to_ascii_lowercase();
                let writer = self.host_of(r.peer);
                self.seen.arm_writes.push(ArmWrite {
                    at: now,
                    lb,
                    writer,
                    status: r.status,
                });
            }
        }
        if let Some(kube) = slots.kube.lock().clone() {
            let (requests, next) = kube.requests_since(self.kube_requests);
            self.kube_requests = next;
            for r in requests {
                if r.method == "GET" {
                    continue;
                }
                let Some(caller) = r.caller.clone() else {
                    continue;
                };
                if !caller.starts_with("signal-") {
                    continue;
                }
                self.seen.kube_writes.push(KubeWrite {
                    at: now,
                    caller,
                    method: r.method.clone(),
                    path: r.path.clone(),
                    status: r.status,
                });
            }
            let (changes, next) = kube.condition_log_since(self.conditions);
            self.conditions = next;
            for c in changes {
                if c.kind == "LoadBalancerAdminStateDown" {
                    self.seen.gate.push((now, c.node, c.status, c.reason));
                }
            }
        }
    }

    /// The observations, with the intents and every entry as in effect at the end.
    pub fn finish(mut self, now: Ms, slots: &Slots) -> Observed {
        self.seen.intents = slots.intents.lock().clone();
        self.seen.ownership = slots.ownership.lock().clone();
        self.seen.ungranted = slots.ungranted.lock().clone();
        self.seen.accepted = slots.accepted.lock().clone();
        self.seen.tool_reads = slots.tool_reads.lock().clone();
        self.seen.end_ms = now;
        if let Some(arm) = slots.arm.lock().clone() {
            self.seen.end = cutover_e2e::observe::entries(&arm, &self.cluster);
        }
        self.seen
    }
}
