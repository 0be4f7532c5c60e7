//! The soak's workload: taints, the exclude label, tool holds and Spot notices come and go on
//! random nodes, through the Kubernetes API ([`kube_ops`]) and the actuators' tool RPC, and
//! every change of a node's desired state is recorded as an [`Intent`] with the time the
//! write was answered. Writes that fail under injected faults are retried, as an operator or
//! a controller would.

use super::schedule::Rng;
use crate::judge::State;
use crate::judge::chaos::Intent;
use crate::kube_ops::{
    self, EXCLUDE_FROM_LBS, KARPENTER_DISRUPTED, OUT_OF_SERVICE, SHUTDOWN, SPOT_EVICTION,
    TO_BE_DELETED_BY_CA,
};
use cutover_proto::v1::actuator_client::ActuatorClient;
use cutover_proto::v1::{AdminState, NodeRef, SetNodeAdminStateRequest, WaitFor};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tonic::transport::ClientTlsConfig;

/// One reason a node is leaving.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Trigger {
    Taint(&'static str),
    ExcludeLabel,
    Hold,
    /// A `PreemptScheduled` event; signal-svc adds the spot-eviction taint.
    Notice,
}

const TAINTS: [&str; 4] = [
    OUT_OF_SERVICE,
    SHUTDOWN,
    KARPENTER_DISRUPTED,
    TO_BE_DELETED_BY_CA,
];

#[derive(Debug, Default)]
struct Inner {
    triggers: BTreeMap<String, BTreeSet<Trigger>>,
    intents: Vec<Intent>,
}

/// Every node's triggers and the intents so far, shared with the drivers (the outside writer
/// picks healthy or leaving nodes) and read by the judge at the end.
#[derive(Debug, Clone, Default)]
pub struct Desired(Arc<Mutex<Inner>>);

impl Desired {
    pub fn state(&self, node: &str) -> State {
        let inner = self.0.lock();
        if inner.triggers.get(node).is_some_and(|t| !t.is_empty()) {
            State::Down
        } else {
            State::None
        }
    }

    /// Nodes whose desired state is `state` among those the workload touched; for `None`,
    /// every node the workload knows of.
    pub fn nodes_in(&self, state: State) -> Vec<String> {
        let inner = self.0.lock();
        inner
            .triggers
            .iter()
            .filter(|(_, t)| (state == State::Down) != t.is_empty())
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// The node of the latest intent (the one a drain script is most likely waiting on).
    pub fn last_changed(&self) -> Option<String> {
        self.0.lock().intents.last().map(|i| i.node.clone())
    }

    pub fn intents(&self) -> Vec<Intent> {
        let mut v = self.0.lock().intents.clone();
        v.sort_by_key(|i| i.at);
        v
    }

    fn triggers(&self, node: &str) -> BTreeSet<Trigger> {
        self.0
            .lock()
            .triggers
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// Records that `trigger` was added (`on`) or removed at `at`; an intent if the desired
    /// state changed.
    fn set(&self, node: &str, trigger: Trigger, on: bool, at: jiff::Timestamp) {
        let mut inner = self.0.lock();
        let set = inner.triggers.entry(node.to_string()).or_default();
        let before = !set.is_empty();
        if on {
            set.insert(trigger);
        } else {
            set.remove(&trigger);
        }
        let after = !set.is_empty();
        if before != after {
            inner.intents.push(Intent {
                node: node.to_string(),
                at,
                state: if after { State::Down } else { State::None },
            });
        }
    }
}

/// What the workload needs: the cluster's nodes, a client, and the actuators' tool ports.
pub struct Workload {
    pub ops: kube_ops::Cluster,
    pub nodes: Vec<String>,
    pub spot_nodes: Vec<String>,
    pub tool_tls: ClientTlsConfig,
    pub actuator_ports: Vec<u16>,
    pub desired: Desired,
    /// At most this many nodes leaving at once (below the blast-radius guard's share).
    pub max_down: usize,
    /// Mean gap between two actions.
    pub gap: Duration,
    pub rng: Rng,
    /// Spot nodes that had their notice (one per node: the event stays for an hour).
    noticed: BTreeSet<String>,
    pub actions: usize,
}

/// How long one action may keep retrying before the workload gives up on it.
const PERSIST: Duration = Duration::from_secs(120);

impl Workload {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ops: kube_ops::Cluster,
        nodes: Vec<String>,
        spot_nodes: Vec<String>,
        tool_tls: ClientTlsConfig,
        actuator_ports: Vec<u16>,
        max_down: usize,
        gap: Duration,
        seed: u64,
    ) -> Self {
        let desired = Desired::default();
        for n in &nodes {
            desired.0.lock().triggers.entry(n.clone()).or_default();
        }
        Workload {
            ops,
            nodes,
            spot_nodes,
            tool_tls,
            actuator_ports,
            desired,
            max_down,
            gap,
            rng: Rng::new(seed ^ 0x5851_F42D_4C95_7F2D),
            noticed: BTreeSet::new(),
            actions: 0,
        }
    }

    /// Acts until `until`.
    pub async fn run(&mut self, until: Instant) {
        while Instant::now() < until {
            let gap = self.rng.between(self.gap / 2, self.gap * 3 / 2);
            tokio::time::sleep(gap).await;
            if let Err(e) = self.step().await {
                eprintln!("chaos workload: {e:#}");
            }
        }
    }

    /// One random action: a node starts leaving (a taint, the label, a hold or a notice),
    /// another reason is added to a leaving node, or a reason is taken away.
    async fn step(&mut self) -> anyhow::Result<()> {
        let down = self.desired.nodes_in(State::Down);
        let healthy = self.desired.nodes_in(State::None);
        let grow = down.len() < self.max_down && self.rng.chance(0.55);
        if grow || down.is_empty() {
            let Some(node) = self.rng.pick(&healthy).cloned() else {
                return Ok(());
            };
            let spot = self.spot_nodes.contains(&node) && !self.noticed.contains(&node);
            let trigger = match self.rng.below(10) {
                0..=4 => Trigger::Taint(self.rng.pick(&TAINTS).unwrap_or(&OUT_OF_SERVICE)),
                5 => Trigger::ExcludeLabel,
                6 | 7 => Trigger::Hold,
                _ if spot => Trigger::Notice,
                _ => Trigger::Taint(OUT_OF_SERVICE),
            };
            return self.apply(&node, trigger, true).await;
        }
        let Some(node) = self.rng.pick(&down).cloned() else {
            return Ok(());
        };
        let have = self.desired.triggers(&node);
        // A held node keeps only its hold: releasing a hold sets None through the tool API.
        if !have.contains(&Trigger::Hold) && self.rng.chance(0.2) {
            let extra = Trigger::Taint(self.rng.pick(&TAINTS).unwrap_or(&SHUTDOWN));
            if !have.contains(&extra) {
                return self.apply(&node, extra, true).await;
            }
        }
        let list: Vec<Trigger> = have.into_iter().collect();
        if let Some(t) = self.rng.pick(&list).copied() {
            self.apply(&node, t, false).await?;
        }
        Ok(())
    }

    /// Adds or removes one trigger, retrying through injected faults.
    async fn apply(&mut self, node: &str, trigger: Trigger, on: bool) -> anyhow::Result<()> {
        self.actions += 1;
        let started = Instant::now();
        let first_try = jiff::Timestamp::now();
        loop {
            let result = self.write(node, trigger, on).await;
            match result {
                Ok(()) => {
                    // A hold is requested through an actuator, which has signal-svc write it:
                    // it may land any time after the first request went out.
                    let at = if trigger == Trigger::Hold {
                        first_try
                    } else {
                        jiff::Timestamp::now()
                    };
                    if trigger == Trigger::Notice {
                        self.noticed.insert(node.to_string());
                    }
                    self.desired.set(node, trigger, on, at);
                    return Ok(());
                }
                Err(e) if started.elapsed() > PERSIST => {
                    anyhow::bail!("{node}: {trigger:?} {on} gave up after {PERSIST:?}: {e:#}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
            }
        }
    }

    async fn write(&mut self, node: &str, trigger: Trigger, on: bool) -> anyhow::Result<()> {
        match (trigger, on) {
            (Trigger::Taint(key), true) => {
                let effect = if key == SHUTDOWN {
                    "NoSchedule"
                } else {
                    "NoExecute"
                };
                self.ops.taint(node, key, Some("chaos"), effect).await
            }
            (Trigger::Taint(key), false) => self.ops.untaint(node, key).await,
            (Trigger::ExcludeLabel, on) => {
                self.ops
                    .label(node, EXCLUDE_FROM_LBS, on.then_some("true"))
                    .await
            }
            (Trigger::Notice, true) => self.ops.preempt_event(node, 30).await.map(drop),
            // The operator takes the node back: the taint signal-svc added goes (once it is
            // there: removing it before signal-svc added it would leave the node tainted).
            (Trigger::Notice, false) => {
                if !self
                    .ops
                    .taints(node)
                    .await?
                    .iter()
                    .any(|t| t.key == SPOT_EVICTION)
                {
                    anyhow::bail!("{node}: the spot-eviction taint is not there yet");
                }
                self.ops.untaint(node, SPOT_EVICTION).await
            }
            (Trigger::Hold, on) => {
                let state = if on {
                    AdminState::Down
                } else {
                    AdminState::None
                };
                self.hold(node, state).await
            }
        }
    }

    /// `SetNodeAdminState` through a random actuator replica.
    async fn hold(&mut self, node: &str, state: AdminState) -> anyhow::Result<()> {
        let port = *self
            .rng
            .pick(&self.actuator_ports)
            .ok_or_else(|| anyhow::anyhow!("no actuator"))?;
        let channel =
            super::tool::tool_channel(port, &self.tool_tls, Duration::from_secs(15)).await?;
        ActuatorClient::new(channel)
            .set_node_admin_state(SetNodeAdminStateRequest {
                node: Some(NodeRef {
                    name: node.to_string(),
                    ..NodeRef::default()
                }),
                admin_state: state as i32,
                reason: "chaos soak: maintenance".into(),
                wait: WaitFor::Unspecified as i32,
                wait_timeout: None,
            })
            .await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + s).unwrap()
    }

    #[test]
    fn only_changes_of_the_desired_state_are_intents() {
        let d = Desired::default();
        d.set("a", Trigger::Taint(OUT_OF_SERVICE), true, t(1));
        d.set("a", Trigger::ExcludeLabel, true, t(2));
        d.set("a", Trigger::Taint(OUT_OF_SERVICE), false, t(3));
        assert_eq!(d.state("a"), State::Down);
        d.set("a", Trigger::ExcludeLabel, false, t(4));
        let got: Vec<_> = d.intents().into_iter().map(|i| (i.at, i.state)).collect();
        assert_eq!(got, [(t(1), State::Down), (t(4), State::None)]);
        assert_eq!(d.nodes_in(State::None), ["a"]);
        assert!(d.nodes_in(State::Down).is_empty());
    }
}
