//! How each way of leaving looks from the outside, as steps in time (issue 28 item 2; timings from
//! `../shared/contracts/dataplane.md` 4.1, 4.4 and 6.4). Pure: the steps are built from drawn
//! timings, and [`super::driver`] performs them through the Kubernetes API, arm-sim and the data
//! plane. t = 0 is the first signal.

use cutover_dataplane::model::{Mode, Policy};
use cutover_dataplane::params::Range;
use rand::Rng;
use std::fmt;

/// The departures of the table.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Flow {
    /// Karpenter / AKS node auto-provisioning: disrupted taint, replacement, deletion held by
    /// the termination finalizer, exclude label (cloud-provider-azure's pool removal), drain,
    /// forced VM delete, finalizer removed.
    Karpenter,
    /// cluster-autoscaler: its taint, drain, `node-delete-delay-after-taint`, VMSS instance
    /// delete (the NIC, and with it the pool entry, goes with the VM).
    ClusterAutoscaler,
    /// AKS node image / version upgrade: cordon, drain, reimage, rejoin, uncordon.
    AksUpgrade,
    /// Spot eviction with a `Preempt` notice `notice` seconds ahead; the VM goes at the notice's
    /// time (eviction policy Delete: the NIC goes too). AKS's best-effort drain taken as absent.
    Spot { notice: f64 },
    /// An operator's maintenance: the out-of-service taint, the drain gate (cutover's modes),
    /// `kubectl drain`, a reboot, uncordon and untaint, the gate again.
    ManualDrain,
}

impl fmt::Display for Flow {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Flow::Karpenter => write!(f, "Karpenter/NAP"),
            Flow::ClusterAutoscaler => write!(f, "cluster-autoscaler"),
            Flow::AksUpgrade => write!(f, "AKS upgrade (returns)"),
            Flow::Spot { notice } => write!(f, "Spot, {notice:.0} s notice"),
            Flow::ManualDrain => write!(f, "manual drain + gate (returns)"),
        }
    }
}

impl Flow {
    /// The flows of the full table.
    pub fn all() -> Vec<Flow> {
        vec![
            Flow::Karpenter,
            Flow::ClusterAutoscaler,
            Flow::AksUpgrade,
            Flow::Spot { notice: 30.0 },
            Flow::Spot { notice: 5.0 },
            Flow::ManualDrain,
        ]
    }

    /// Parses `karpenter`, `ca`, `upgrade`, `spot30`, `spot5`, `manual`.
    pub fn parse(s: &str) -> anyhow::Result<Flow> {
        Ok(match s.trim() {
            "karpenter" => Flow::Karpenter,
            "ca" => Flow::ClusterAutoscaler,
            "upgrade" => Flow::AksUpgrade,
            "spot30" => Flow::Spot { notice: 30.0 },
            "spot5" => Flow::Spot { notice: 5.0 },
            "manual" => Flow::ManualDrain,
            o => anyhow::bail!("unknown flow {o:?}: karpenter, ca, upgrade, spot30, spot5, manual"),
        })
    }

    /// The modes a flow is measured in. A cordon is a signal only with signal-svc's opt-in
    /// `--trigger-cordon`; it changes only the upgrade, the one flow with no other mark.
    pub fn modes(self) -> Vec<Mode> {
        let mut m = vec![Mode::ProbeOnly, Mode::Kep3836, Mode::Cutover];
        if self == Flow::AksUpgrade {
            m.push(Mode::CutoverCordon);
        }
        m
    }

    /// Whether the leaving node is a Spot node.
    pub fn spot(self) -> bool {
        matches!(self, Flow::Spot { .. })
    }
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Taint {
        key: &'static str,
        value: Option<&'static str>,
    },
    Untaint(&'static str),
    Cordon(bool),
    Label {
        key: &'static str,
        value: &'static str,
    },
    /// DELETE the Node (with Karpenter's finalizer on it: `deletionTimestamp`, the Node stays).
    Delete,
    /// Karpenter removes its finalizer once the instance is gone: the Node goes.
    RemoveFinalizer,
    /// A `PreemptScheduled` Event `notice` seconds ahead.
    Preempt {
        notice: f64,
    },
    /// Wait for the drain gate (`LoadBalancerAdminStateDown` `True` or `False`); later steps
    /// move by the wait. cutover's modes only.
    WaitGate {
        down: bool,
    },
    /// The node's pods get their SIGTERM (eTP Local: `healthCheckNodePort` 503 from here).
    PodsTerminating,
    /// They exit (eTP Local: kube-proxy drops new flows to the node).
    PodsExit,
    /// The VM stops forwarding (deleted, evicted, reimage or reboot started).
    VmDead,
    /// The VM forwards and kube-proxy serves again.
    VmRevive,
    /// Someone else takes the node's entry out of the pool (cloud-provider-azure's pool PUT, or
    /// the NIC going with the VM), retried while ARM answers 429.
    RemoveFromPool,
    /// The node is given back (counts "return -> first new flow" from here).
    Returned,
    End,
}

/// One step, `at` seconds after the first signal (plus whatever gate waits came before it).
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub at: f64,
    pub action: Action,
}

/// Timings of the scripts (contract 6.4; where a default is shortened for real-time runs, the
/// field says so).
#[derive(Debug, Clone)]
pub struct FlowTimings {
    /// Karpenter: disrupted taint -> deletion (replacement `Initialized`). Contract U[60, 180] s;
    /// shortened: it only lengthens the time the node is tainted before it goes.
    pub karpenter_replacement: Range,
    /// Karpenter: `MinDrainTime`.
    pub karpenter_min_drain: f64,
    /// Karpenter: VM force-delete latency after the drain.
    pub force_delete: Range,
    /// cluster-autoscaler: taint -> VMSS delete (drain + `node-delete-delay-after-taint`).
    pub ca_lead: f64,
    /// AKS upgrade: cordon -> reimage start (the drain; AKS allows up to 30 min).
    pub upgrade_drain: f64,
    /// Reimage downtime (contract U[60, 300] s; shortened).
    pub reimage: Range,
    /// Booting -> kube-proxy serving (contract 6.2: 10 s).
    pub proxy_ready: f64,
    /// Manual drain: the reboot's downtime.
    pub reboot: f64,
    /// Pods get SIGTERM this long after the drain starts.
    pub evict: Range,
    /// And exit this long after (an app exiting at once: the pessimistic end for new flows).
    pub pod_exit: f64,
    /// cloud-provider-azure's pool write, or the NIC's removal, after its cause (ARM latency).
    pub pool_removal: Range,
    /// How long the script runs on after its last change, so returns and probes show.
    pub settle: f64,
    /// Manual drain: how long the operator waits after the gate turns `True` before draining
    /// (the README's recipe; the data plane may apply `Down` up to U1 after ARM reports it).
    pub gate_settle: f64,
}

impl Default for FlowTimings {
    fn default() -> Self {
        FlowTimings {
            karpenter_replacement: Range::new(20.0, 30.0),
            karpenter_min_drain: 5.0,
            force_delete: Range::new(0.0, 10.0),
            ca_lead: 35.0,
            upgrade_drain: 30.0,
            reimage: Range::fixed(60.0),
            proxy_ready: 10.0,
            reboot: 30.0,
            evict: Range::new(0.0, 1.0),
            pod_exit: 1.0,
            pool_removal: Range::new(10.0, 20.0),
            settle: 25.0,
            gate_settle: 5.0,
        }
    }
}

pub const KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";
pub const KARPENTER_FINALIZER: &str = "karpenter.sh/termination";
pub const CA_TAINT: &str = "ToBeDeletedByClusterAutoscaler";
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

fn step(at: f64, action: Action) -> Step {
    Step { at, action }
}

/// The drain's pod steps from `from` on; returns when the pods are gone.
fn drain(steps: &mut Vec<Step>, from: f64, t: &FlowTimings, rng: &mut impl Rng) -> f64 {
    let term = from + t.evict.draw(rng);
    steps.push(step(term, Action::PodsTerminating));
    steps.push(step(term + t.pod_exit, Action::PodsExit));
    term + t.pod_exit
}

/// The steps of one departure, sorted by time. `policy` does not change what happens, only what
/// the data plane makes of the pods' steps; `mode` adds the operator's gate waits in cutover's
/// modes (without cutover there is no gate to wait on).
pub fn build(flow: Flow, mode: Mode, t: &FlowTimings, rng: &mut impl Rng) -> Vec<Step> {
    let mut s = Vec::new();
    match flow {
        Flow::Karpenter => {
            s.push(step(
                0.0,
                Action::Taint {
                    key: KARPENTER_DISRUPTED,
                    value: None,
                },
            ));
            let del = t.karpenter_replacement.draw(rng);
            s.push(step(del, Action::Delete));
            s.push(step(
                del,
                Action::Label {
                    key: EXCLUDE_LABEL,
                    value: "karpenter",
                },
            ));
            s.push(step(del + t.pool_removal.draw(rng), Action::RemoveFromPool));
            let drained = drain(&mut s, del, t, rng);
            let dead = del.max(drained).max(del + t.karpenter_min_drain) + t.force_delete.draw(rng);
            s.push(step(dead, Action::VmDead));
            s.push(step(dead + 5.0, Action::RemoveFinalizer));
            s.push(step(dead + t.settle, Action::End));
        }
        Flow::ClusterAutoscaler => {
            s.push(step(
                0.0,
                Action::Taint {
                    key: CA_TAINT,
                    value: None,
                },
            ));
            drain(&mut s, 0.0, t, rng);
            let dead = t.ca_lead;
            s.push(step(dead, Action::VmDead));
            s.push(step(
                dead + t.pool_removal.draw(rng),
                Action::RemoveFromPool,
            ));
            // The cloud node controller deletes the Node once the VM is gone (contract: >= 40 s
            // after; here at the end of the run).
            s.push(step(dead + t.settle, Action::Delete));
            s.push(step(dead + t.settle, Action::End));
        }
        Flow::AksUpgrade => {
            s.push(step(0.0, Action::Cordon(true)));
            drain(&mut s, 0.0, t, rng);
            let dead = t.upgrade_drain;
            s.push(step(dead, Action::VmDead));
            let back = dead + t.reimage.draw(rng) + t.proxy_ready;
            s.push(step(back, Action::VmRevive));
            // AKS uncordons the reimaged node once it is Ready.
            s.push(step(back, Action::Cordon(false)));
            s.push(step(back, Action::Returned));
            s.push(step(back + t.settle, Action::End));
        }
        Flow::Spot { notice } => {
            s.push(step(0.0, Action::Preempt { notice }));
            s.push(step(notice, Action::VmDead));
            s.push(step(
                notice + t.pool_removal.draw(rng),
                Action::RemoveFromPool,
            ));
            s.push(step(notice + t.settle, Action::Delete));
            s.push(step(notice + t.settle, Action::End));
        }
        Flow::ManualDrain => {
            s.push(step(
                0.0,
                Action::Taint {
                    key: OUT_OF_SERVICE,
                    value: Some("maintenance"),
                },
            ));
            let gated = mode.is_cutover();
            // The README's recipe: the gate, then a settle for the data plane's apply lag (U1).
            let start = if gated {
                s.push(step(0.0, Action::WaitGate { down: true }));
                t.gate_settle
            } else {
                0.0
            };
            s.push(step(start, Action::Cordon(true)));
            let drained = drain(&mut s, start, t, rng);
            let dead = drained + 1.0;
            s.push(step(dead, Action::VmDead));
            let back = dead + t.reboot;
            s.push(step(back, Action::VmRevive));
            s.push(step(back, Action::Cordon(false)));
            s.push(step(back, Action::Untaint(OUT_OF_SERVICE)));
            s.push(step(back, Action::Returned));
            if gated {
                s.push(step(back, Action::WaitGate { down: false }));
            }
            s.push(step(back + t.settle, Action::End));
        }
    }
    // Stable: steps of one instant keep the order written above.
    s.sort_by(|a, b| a.at.total_cmp(&b.at));
    s
}

/// How long a script may run: its `End` plus every gate wait's budget.
pub fn length(steps: &[Step], gate_budget: f64) -> f64 {
    let end = steps.iter().map(|s| s.at).fold(0.0, f64::max);
    let gates = steps
        .iter()
        .filter(|s| matches!(s.action, Action::WaitGate { .. }))
        .count();
    end + gates as f64 * gate_budget
}

/// Whether the data plane should see the pods' steps: eTP Cluster nodes forward to pods on other
/// nodes, so their own pods leaving changes nothing for the load balancer.
pub fn pods_matter(policy: Policy) -> bool {
    policy == Policy::Local
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn at(steps: &[Step], a: &Action) -> f64 {
        steps.iter().find(|s| &s.action == a).unwrap().at
    }

    #[test]
    fn every_flow_starts_with_its_signal_and_ends_after_its_vm_goes() {
        let t = FlowTimings::default();
        for flow in Flow::all() {
            for mode in flow.modes() {
                let s = build(flow, mode, &t, &mut StdRng::seed_from_u64(1));
                assert_eq!(s[0].at, 0.0, "{flow}");
                assert!(at(&s, &Action::VmDead) > 0.0 || flow.spot(), "{flow}");
                assert!(at(&s, &Action::End) > at(&s, &Action::VmDead), "{flow}");
                assert!(s.windows(2).all(|w| w[0].at <= w[1].at), "{flow}: sorted");
            }
        }
    }

    #[test]
    fn karpenter_deletes_labels_and_drains_before_the_forced_delete() {
        let t = FlowTimings::default();
        for seed in 0..20 {
            let s = build(
                Flow::Karpenter,
                Mode::Cutover,
                &t,
                &mut StdRng::seed_from_u64(seed),
            );
            let del = at(&s, &Action::Delete);
            assert!((20.0..=30.0).contains(&del));
            let dead = at(&s, &Action::VmDead);
            // MinDrainTime 5 s, then the force delete within 10 s.
            assert!(dead >= del + 5.0 && dead <= del + 15.0, "{dead} {del}");
            assert!(at(&s, &Action::RemoveFromPool) >= del + 10.0);
            assert_eq!(at(&s, &Action::RemoveFinalizer), dead + 5.0);
        }
    }

    #[test]
    fn an_upgrade_is_a_cordon_then_a_reimage_and_a_return() {
        let t = FlowTimings::default();
        let s = build(
            Flow::AksUpgrade,
            Mode::CutoverCordon,
            &t,
            &mut StdRng::seed_from_u64(3),
        );
        assert_eq!(s[0].action, Action::Cordon(true));
        // No taint, no deletion, no label: a cordon is the only mark.
        assert!(!s.iter().any(|x| matches!(
            x.action,
            Action::Taint { .. } | Action::Delete | Action::Label { .. }
        )));
        assert_eq!(at(&s, &Action::VmDead), 30.0);
        assert_eq!(at(&s, &Action::VmRevive), 100.0);
        assert_eq!(at(&s, &Action::Cordon(false)), 100.0);
    }

    #[test]
    fn only_cutovers_modes_wait_on_the_gate() {
        let t = FlowTimings::default();
        let gates = |mode| {
            build(Flow::ManualDrain, mode, &t, &mut StdRng::seed_from_u64(4))
                .iter()
                .filter(|s| matches!(s.action, Action::WaitGate { .. }))
                .count()
        };
        assert_eq!(gates(Mode::Cutover), 2);
        assert_eq!(gates(Mode::ProbeOnly), 0);
        assert_eq!(gates(Mode::Kep3836), 0);
        let s = build(
            Flow::ManualDrain,
            Mode::Cutover,
            &t,
            &mut StdRng::seed_from_u64(4),
        );
        // The gate comes before the cordon and the drain.
        let gate = s
            .iter()
            .position(|x| x.action == Action::WaitGate { down: true })
            .unwrap();
        let cordon = s
            .iter()
            .position(|x| x.action == Action::Cordon(true))
            .unwrap();
        assert!(gate < cordon);
        assert_eq!(length(&s, 60.0), at(&s, &Action::End) + 120.0);
    }

    #[test]
    fn flows_parse_by_name() {
        assert_eq!(Flow::parse("spot5").unwrap(), Flow::Spot { notice: 5.0 });
        assert!(Flow::parse("nope").is_err());
        assert_eq!(Flow::AksUpgrade.modes().len(), 4);
        assert_eq!(Flow::Karpenter.modes().len(), 3);
    }
}
