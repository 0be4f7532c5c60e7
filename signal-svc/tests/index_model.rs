//! Model-based test of the desired-state pipeline (index -> dispatcher): random sequences of
//! taints added and removed, Spot notices (and the leader's taint writer acting on them), node
//! deletions, recreations under the same name with a new UID, relists and restarts (a new
//! process rebuilding from the objects then in the cluster, under a higher leader epoch),
//! checked after every step against a reference model that is one line: a node is `Down`
//! exactly when its object carries a trigger taint.
//!
//! Checked: the index and the asserted states match the model after every step; versions sent
//! for a node only grow; a node whose model state did not change in a step never has a
//! different state asserted (no Down/None flap), and one that changed gets exactly the new one.

#![allow(clippy::unwrap_used)]

use cutover_proto::v1::AdminState;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use quickcheck::{Arbitrary, Gen, QuickCheck, TestResult};
use signal_svc::core::dispatch::Dispatcher;
use signal_svc::core::event::EventView;
use signal_svc::core::index::{Change, Desired, NodeIndex, Output, TaintRequest};
use signal_svc::core::taints::{
    DRAINING, OUT_OF_SERVICE, SHUTDOWN, SPOT_EVICTION, SPOT_NOTICE_HANDLED, TriggerSet,
};
use std::collections::{BTreeMap, HashMap, HashSet};

const NAMES: [&str; 4] = ["aks-a-0", "aks-a-1", "aks-b-0", "aks-b-1"];
const EXTRA: &str = "karpenter.sh/disrupted";

/// (key, value, effect, is a trigger)
const TAINTS: [(&str, Option<&str>, &str, bool); 6] = [
    (OUT_OF_SERVICE, None, "NoExecute", true),
    (SHUTDOWN, None, "NoSchedule", true),
    (DRAINING, Some(SPOT_EVICTION), "NoSchedule", true),
    (DRAINING, Some("maintenance"), "NoSchedule", false),
    (EXTRA, None, "NoSchedule", true),
    ("example.com/unrelated", None, "NoSchedule", false),
];

#[derive(Clone, Debug)]
enum Op {
    AddTaint(usize, usize),
    RemoveTaint(usize, usize),
    Notice(usize),
    /// The leader's taint writer handles the pending spot-taint requests.
    TaintWriter,
    Delete(usize),
    /// Same name, new UID; the DELETE of the old object was seen or missed.
    Recreate(usize, bool),
    Relist,
    Restart,
}

impl Arbitrary for Op {
    fn arbitrary(g: &mut Gen) -> Self {
        let n = usize::arbitrary(g) % NAMES.len();
        let t = usize::arbitrary(g) % TAINTS.len();
        match u8::arbitrary(g) % 16 {
            0..=4 => Op::AddTaint(n, t),
            5..=8 => Op::RemoveTaint(n, t),
            9 | 10 => Op::Notice(n),
            11 => Op::TaintWriter,
            12 => Op::Delete(n),
            13 => Op::Recreate(n, bool::arbitrary(g)),
            14 => Op::Relist,
            _ => Op::Restart,
        }
    }
}

#[derive(Clone, Debug)]
struct Obj {
    uid: String,
    created: Timestamp,
    /// Indexes into [`TAINTS`].
    taints: Vec<usize>,
    handled: bool,
}

impl Obj {
    fn model(&self) -> Desired {
        if self.taints.iter().any(|t| TAINTS[*t].3) {
            Desired::Down
        } else {
            Desired::None
        }
    }

    fn to_node(&self, name: &str) -> Node {
        Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                uid: Some(self.uid.clone()),
                creation_timestamp: Some(Time(self.created)),
                annotations: self.handled.then(|| {
                    [(SPOT_NOTICE_HANDLED.to_owned(), "true".to_owned())]
                        .into_iter()
                        .collect()
                }),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                provider_id: Some(format!(
                    "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/{}",
                    self.uid
                )),
                taints: Some(
                    self.taints
                        .iter()
                        .map(|t| {
                            let (key, value, effect, _) = TAINTS[*t];
                            Taint {
                                key: key.into(),
                                value: value.map(Into::into),
                                effect: effect.into(),
                                time_added: None,
                            }
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: "10.224.0.4".into(),
                }]),
                ..Default::default()
            }),
        }
    }
}

/// The cluster and the signal-svc under test.
struct World {
    now: Timestamp,
    next_uid: u32,
    objects: BTreeMap<String, Obj>,
    events: Vec<EventView>,
    pending: Vec<TaintRequest>,
    epoch: u64,
    index: NodeIndex,
    disp: Dispatcher,
    /// Highest version sent per node UID.
    versions: HashMap<String, (u64, u64)>,
}

fn triggers() -> TriggerSet {
    TriggerSet::new(vec![EXTRA.to_owned()])
}

fn fresh(epoch: u64) -> (NodeIndex, Dispatcher) {
    let mut d = Dispatcher::new();
    d.set_epoch(epoch);
    (NodeIndex::new(triggers()), d)
}

impl World {
    fn new() -> Self {
        let (index, disp) = fresh(1);
        let mut w = World {
            now: "2026-08-01T05:00:00Z".parse().unwrap(),
            next_uid: 0,
            objects: BTreeMap::new(),
            events: Vec::new(),
            pending: Vec::new(),
            epoch: 1,
            index,
            disp,
            versions: HashMap::new(),
        };
        for name in NAMES {
            let obj = w.new_obj();
            w.objects.insert(name.to_owned(), obj);
        }
        let nodes = w.nodes();
        let out = w.index.reset(&nodes, w.now);
        let mut changes = Vec::new();
        w.feed(out, &mut changes);
        w
    }

    fn new_obj(&mut self) -> Obj {
        self.next_uid += 1;
        Obj {
            uid: format!("uid-{}", self.next_uid),
            created: self.now,
            taints: Vec::new(),
            handled: false,
        }
    }

    fn nodes(&self) -> Vec<Node> {
        self.objects.iter().map(|(n, o)| o.to_node(n)).collect()
    }

    /// Index output into the dispatcher; changes kept for the step's checks.
    fn feed(&mut self, out: Output, changes: &mut Vec<Change>) {
        for c in out.changes {
            self.disp.apply(&c, self.now);
            changes.push(c);
        }
        self.pending.extend(out.taints);
    }

    fn apply_obj(&mut self, name: &str, changes: &mut Vec<Change>) {
        let node = self.objects[name].to_node(name);
        let out = self.index.apply(&node, self.now);
        self.feed(out, changes);
    }

    fn step(&mut self, op: &Op, changes: &mut Vec<Change>) {
        self.now += jiff::SignedDuration::from_secs(1);
        match *op {
            Op::AddTaint(n, t) => {
                let Some(o) = self.objects.get_mut(NAMES[n]) else {
                    return;
                };
                // One taint per key (the API server refuses duplicates of key and effect).
                if o.taints.iter().any(|x| TAINTS[*x].0 == TAINTS[t].0) {
                    return;
                }
                o.taints.push(t);
                self.apply_obj(NAMES[n], changes);
            }
            Op::RemoveTaint(n, t) => {
                let Some(o) = self.objects.get_mut(NAMES[n]) else {
                    return;
                };
                o.taints.retain(|x| *x != t);
                self.apply_obj(NAMES[n], changes);
            }
            Op::Notice(n) => {
                if !self.objects.contains_key(NAMES[n]) {
                    return;
                }
                let ev = EventView {
                    name: format!("{}.{}", NAMES[n], self.events.len()),
                    uid: format!("ev-{}", self.events.len()),
                    reason: "PreemptScheduled".into(),
                    kind: Some("Node".into()),
                    node_name: Some(NAMES[n].into()),
                    message: "Scheduled: Sat, 01 Aug 2026 06:41:02 GMT. DurationInSeconds: -1."
                        .into(),
                    time: Some(self.now),
                };
                let out = self.index.apply_event(&ev, self.now);
                self.events.push(ev);
                self.feed(out, changes);
            }
            Op::TaintWriter => {
                for req in std::mem::take(&mut self.pending) {
                    // Resource-version checked by UID: a replaced node is never tainted.
                    let Some(o) = self.objects.get_mut(&req.name) else {
                        continue;
                    };
                    if o.uid != req.uid || o.taints.iter().any(|t| TAINTS[*t].0 == DRAINING) {
                        continue;
                    }
                    o.taints.push(2);
                    o.handled = true;
                    self.apply_obj(&req.name, changes);
                }
            }
            Op::Delete(n) => {
                if let Some(o) = self.objects.remove(NAMES[n]) {
                    let out = self.index.delete(&o.to_node(NAMES[n]));
                    self.feed(out, changes);
                }
            }
            Op::Recreate(n, delete_seen) => {
                if let Some(o) = self.objects.get(NAMES[n])
                    && delete_seen
                {
                    let out = self.index.delete(&o.to_node(NAMES[n]));
                    self.feed(out, changes);
                }
                let obj = self.new_obj();
                self.objects.insert(NAMES[n].to_owned(), obj);
                self.apply_obj(NAMES[n], changes);
            }
            Op::Relist => {
                let nodes = self.nodes();
                let out = self.index.reset(&nodes, self.now);
                self.feed(out, changes);
            }
            Op::Restart => {
                // A new process (a new leader, higher epoch) rebuilds from what the cluster
                // holds: events and nodes, then the notices still to act on.
                self.epoch += 1;
                (self.index, self.disp) = fresh(self.epoch);
                self.pending.clear();
                changes.clear();
                for ev in self.events.clone() {
                    let out = self.index.apply_event(&ev, self.now);
                    self.feed(out, changes);
                }
                let nodes = self.nodes();
                let out = self.index.reset(&nodes, self.now);
                self.feed(out, changes);
                self.pending = self.index.pending_taints();
            }
        }
    }

    fn asserted(&self, uid: &str) -> Option<(Desired, (u64, u64))> {
        self.disp.current(uid).map(|m| {
            let d = if m.desired == AdminState::Down as i32 {
                Desired::Down
            } else {
                Desired::None
            };
            let v = m.version.unwrap();
            (d, (v.epoch, v.seq))
        })
    }
}

fn check(ops: Vec<Op>) -> TestResult {
    let mut w = World::new();
    for (i, op) in ops.iter().enumerate() {
        let before: HashMap<String, Desired> = w
            .objects
            .values()
            .map(|o| (o.uid.clone(), o.model()))
            .collect();
        let mut changes = Vec::new();
        w.step(op, &mut changes);
        let ctx = || format!("step {i} {op:?} of {ops:?}");

        // The index is exact.
        if w.index.len() != w.objects.len() {
            return TestResult::error(format!(
                "index holds {} nodes, cluster {}: {}",
                w.index.len(),
                w.objects.len(),
                ctx()
            ));
        }
        let mut changed_uids = HashSet::new();
        for o in w.objects.values() {
            let want = o.model();
            let got = w.index.get(&o.uid).map(|s| s.desired);
            if got != Some(want) {
                return TestResult::error(format!(
                    "{}: index {got:?}, model {want:?}: {}",
                    o.uid,
                    ctx()
                ));
            }
            // Asserted states: Down exactly where the model says so.
            let asserted = w.asserted(&o.uid).map(|a| a.0);
            match (want, asserted) {
                (Desired::Down, Some(Desired::Down))
                | (Desired::None, None | Some(Desired::None)) => {}
                _ => {
                    return TestResult::error(format!(
                        "{}: asserted {asserted:?}, model {want:?}: {}",
                        o.uid,
                        ctx()
                    ));
                }
            }
            if before.get(&o.uid).is_some_and(|b| *b != want) {
                changed_uids.insert(o.uid.clone());
            }
            // Versions only grow.
            if let Some((_, v)) = w.asserted(&o.uid) {
                let last = w.versions.entry(o.uid.clone()).or_insert(v);
                if v < *last {
                    return TestResult::error(format!(
                        "{}: version {v:?} after {last:?}: {}",
                        o.uid,
                        ctx()
                    ));
                }
                *last = v;
            }
        }
        // No flap: every state the step emitted for a node is the model's state after it; a
        // node whose model state did not change got none other than it had.
        for c in &changes {
            let Change::Set { state, previous } = c else {
                continue;
            };
            let Some(o) = w.objects.values().find(|o| o.uid == state.node.uid) else {
                continue; // replaced later in the same step
            };
            if state.desired != o.model() {
                return TestResult::error(format!(
                    "{} emitted {:?}, model {:?}: {}",
                    o.uid,
                    state.desired,
                    o.model(),
                    ctx()
                ));
            }
            if !changed_uids.contains(&o.uid)
                && let Some(p) = previous
                && *p != state.desired
            {
                return TestResult::error(format!(
                    "{} flapped {p:?} -> {:?}: {}",
                    o.uid,
                    state.desired,
                    ctx()
                ));
            }
        }
    }
    TestResult::passed()
}

#[test]
fn index_and_dispatcher_follow_the_model() {
    QuickCheck::new()
        .tests(1000)
        .max_tests(2000)
        .rng(Gen::new(100))
        .quickcheck(check as fn(Vec<Op>) -> TestResult);
}
