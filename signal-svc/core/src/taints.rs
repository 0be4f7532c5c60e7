//! Triggers: taints, one label and node states that mean a node is leaving, so its entries go
//! `Down`.
//!
//! Who sets what, and why each is read the way it is:
//! - `node.kubernetes.io/out-of-service` (any value, any effect): operators, maintenance tools.
//! - `node.cloudprovider.kubernetes.io/shutdown`: the cloud node-lifecycle controller.
//! - `cloudprovider.azure.microsoft.com/draining=spot-eviction`: signal-svc on a Spot notice.
//! - `karpenter.sh/disrupted` (any effect; on by default): Karpenter / AKS node
//!   auto-provisioning when it starts terminating a node.
//! - `ToBeDeletedByClusterAutoscaler` (on by default): cluster-autoscaler before it drains and
//!   deletes a node; the upstream service controller drops such nodes from load balancers too
//!   (`nodeUnTaintedPredicate`, kubernetes/cloud-provider `controllers/service/controller.go`).
//! - label `node.kubernetes.io/exclude-from-external-load-balancers` (on by default): read as
//!   the service controller reads it, see [`label_excludes`].
//! - `metadata.deletionTimestamp` (on by default, reason [`NODE_DELETING`]): the Node is being
//!   deleted; it lingers only while a finalizer holds it (Karpenter's `karpenter.sh/termination`
//!   during its drain). The service controller already leaves such nodes out of load balancers
//!   and kube-proxy's `/healthz` (KEP-3836) answers 503 for them.
//! - a cordoned node with KEP-5683's `DrainInProgress` or `Drained` condition `True` (opt-in,
//!   reason: the condition type): alpha in Kubernetes 1.37, written by `kubectl drain` and
//!   maintenance controllers that adopt it. The cordon is required because the KEP leaves
//!   clearing the condition to whoever set it; a condition left behind on an uncordoned node is
//!   stale (the KEP's own detection rule).
//! - any cordoned node (opt-in, reason [`NODE_CORDONED`]): for clusters where a cordon always
//!   means departure, e.g. where only AKS upgrades cordon. AKS's node image and version upgrades
//!   cordon, drain and reimage, and leave no other mark on the node.
//!
//! A cordoned node that AKS labelled `kubernetes.azure.com/upgrade-status=Quarantined` is never
//! cut by the two cordon-based triggers: AKS gave up draining it and will not reimage it; it
//! keeps its pods.
//!
//! Deliberately not triggers by default: cordon (`node.kubernetes.io/unschedulable`), `NotReady`
//! (`node.kubernetes.io/not-ready` / `unreachable`) and the AKS remediator's cordon
//! (`remediator.kubernetes.azure.com/unschedulable`): they are too short-lived or too
//! ambiguous and would flap.

/// Set by operators and maintenance automation (any value, any effect).
pub const OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";
/// Set by the cloud node-lifecycle controller when the VM is shut down.
pub const SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";
/// Set by signal-svc on a Spot eviction notice (or by an operator).
pub const DRAINING: &str = "cloudprovider.azure.microsoft.com/draining";
/// The value of [`DRAINING`] that means a Spot eviction.
pub const SPOT_EVICTION: &str = "spot-eviction";
/// The effect signal-svc writes: no new pods; pod eviction is not ours to decide.
pub const DRAINING_EFFECT: &str = "NoSchedule";
/// Karpenter v1 (and AKS node auto-provisioning) taints a node it starts terminating
/// (`karpenter.sh/disrupted:NoSchedule`, no value).
pub const KARPENTER_DISRUPTED: &str = "karpenter.sh/disrupted";
/// cluster-autoscaler taints a node before it drains and deletes it (value: unix seconds).
pub const TO_BE_DELETED_BY_CA: &str = "ToBeDeletedByClusterAutoscaler";
/// The well-known label that takes a node out of external load balancers
/// (`v1.LabelNodeExcludeBalancers`). Karpenter sets it (value `karpenter`) at termination.
pub const EXCLUDE_FROM_LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
/// The reason of a Node with a `metadata.deletionTimestamp`.
pub const NODE_DELETING: &str = "node-deleting";
/// The reason of a cordoned Node under `--trigger-cordon`.
pub const NODE_CORDONED: &str = "node-cordoned";
/// The taint the node lifecycle controller mirrors `spec.unschedulable` into.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// KEP-5683 (Node Lifecycle Conditions, alpha in 1.37): the Node is actively being drained.
pub const DRAIN_IN_PROGRESS: &str = "DrainInProgress";
/// KEP-5683: the Node reached the drain criteria of whoever drains it.
pub const DRAINED: &str = "Drained";
/// The KEP-5683 drain conditions read by `--trigger-drain-conditions`.
pub const DRAIN_CONDITIONS: [&str; 2] = [DRAIN_IN_PROGRESS, DRAINED];
/// AKS labels a node it could not drain during an upgrade (`undrainableNodeBehavior: Cordon`)
/// `kubernetes.azure.com/upgrade-status=Quarantined`: cordoned, not reimaged, pods kept.
pub const UPGRADE_STATUS_LABEL: &str = "kubernetes.azure.com/upgrade-status";
/// The value of [`UPGRADE_STATUS_LABEL`] on a node AKS skipped.
pub const QUARANTINED: &str = "Quarantined";

/// Whether the exclusion label's value takes the node out of load balancers.
///
/// The rule of the upstream service controller (`nodeIncludedPredicate`,
/// kubernetes/cloud-provider `controllers/service/controller.go`, since commit e0d9f9a
/// "respect the exclude-from-external-load-balancers=false label", 2025-03): the value is
/// parsed with Go's `strconv.ParseBool`; a value that parses as `false` keeps the node in,
/// anything else (`true`, the empty string, `karpenter`, ` false`) takes it out. `ParseBool`
/// accepts exactly `0 f F false FALSE False` as false, with no trimming.
/// (cloud-provider-azure's own node cache excludes on the label's mere presence,
/// `pkg/provider/azure.go` `updateNodeCaches`; the service controller decides which nodes
/// it hands to the provider.)
pub fn label_excludes(value: &str) -> bool {
    !matches!(value, "0" | "f" | "F" | "false" | "FALSE" | "False")
}

/// The built-in triggers that can be switched (the first four are on by default, the two
/// cordon-based ones off).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIns {
    /// Taint [`KARPENTER_DISRUPTED`].
    pub karpenter_disrupted: bool,
    /// Taint [`TO_BE_DELETED_BY_CA`].
    pub cluster_autoscaler: bool,
    /// Label [`EXCLUDE_FROM_LB_LABEL`].
    pub exclude_label: bool,
    /// `metadata.deletionTimestamp` ([`NODE_DELETING`]).
    pub node_deleting: bool,
    /// A cordoned node with a true [`DRAIN_CONDITIONS`] condition (opt-in).
    pub drain_conditions: bool,
    /// Any cordoned node ([`NODE_CORDONED`], opt-in).
    pub cordon: bool,
}

impl Default for BuiltIns {
    fn default() -> Self {
        Self {
            karpenter_disrupted: true,
            cluster_autoscaler: true,
            exclude_label: true,
            node_deleting: true,
            drain_conditions: false,
            cordon: false,
        }
    }
}

/// The node states the state triggers read (taints and labels have their own methods).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeStates {
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.unschedulable` or the [`UNSCHEDULABLE_TAINT`].
    pub cordoned: bool,
    /// AKS labelled the node [`QUARANTINED`].
    pub quarantined: bool,
    /// The [`DRAIN_CONDITIONS`] whose status is `True`, in that order.
    pub drain_conditions: Vec<&'static str>,
}

/// One taint as seen on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintView {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// Decides which taints (and labels) are triggers.
#[derive(Clone, Debug, Default)]
pub struct TriggerSet {
    extra_keys: Vec<String>,
    built_ins: BuiltIns,
}

impl TriggerSet {
    /// Every built-in trigger plus opt-in extra keys (any value, any effect).
    pub fn new(extra_keys: Vec<String>) -> Self {
        Self::with_built_ins(BuiltIns::default(), extra_keys)
    }

    /// The chosen built-ins plus extra keys. An extra key always counts, even when it names a
    /// built-in that is turned off (the operator asked for it explicitly).
    pub fn with_built_ins(built_ins: BuiltIns, extra_keys: Vec<String>) -> Self {
        Self {
            extra_keys,
            built_ins,
        }
    }

    /// The exclusion label as a trigger, if it is on and the value excludes the node.
    pub fn label_trigger(&self, exclude_label_value: Option<&str>) -> Option<&'static str> {
        (self.built_ins.exclude_label && exclude_label_value.is_some_and(label_excludes))
            .then_some(EXCLUDE_FROM_LB_LABEL)
    }

    /// The reasons the node's state gives: [`NODE_DELETING`], [`NODE_CORDONED`] and the true
    /// drain conditions, each when its trigger is on.
    pub fn state_reasons(&self, s: &NodeStates) -> Vec<&'static str> {
        let mut out = Vec::new();
        if self.built_ins.node_deleting && s.deleting {
            out.push(NODE_DELETING);
        }
        let cordoned = s.cordoned && !s.quarantined;
        if self.built_ins.cordon && cordoned {
            out.push(NODE_CORDONED);
        }
        if self.built_ins.drain_conditions && cordoned {
            out.extend(s.drain_conditions.iter().copied());
        }
        out
    }

    /// The trigger key this taint stands for, if any.
    pub fn trigger<'a>(&self, taint: &'a TaintView) -> Option<&'a str> {
        let key = taint.key.as_str();
        let hit = match key {
            OUT_OF_SERVICE | SHUTDOWN => true,
            // Only the spot-eviction value: other `draining` values belong to other tools.
            DRAINING => taint.value.as_deref() == Some(SPOT_EVICTION),
            KARPENTER_DISRUPTED if self.built_ins.karpenter_disrupted => true,
            TO_BE_DELETED_BY_CA if self.built_ins.cluster_autoscaler => true,
            _ => self.extra_keys.iter().any(|k| k == key),
        };
        hit.then_some(key)
    }

    /// The sorted, de-duplicated trigger keys present in `taints`.
    pub fn reasons(&self, taints: &[TaintView]) -> Vec<String> {
        let mut keys: Vec<String> = taints
            .iter()
            .filter_map(|t| self.trigger(t))
            .map(str::to_owned)
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }
}

/// Annotation signal-svc writes together with the spot-eviction taint. It makes "taint once"
/// durable: an operator who removes the taint while the notice is still in the cluster is
/// not overruled by the next leader, which re-derives everything from the cluster.
pub const SPOT_NOTICE_HANDLED: &str = "cutover.io/spot-notice-handled";

/// True when any taint uses the draining key, whatever its value: then signal-svc never adds
/// its own (an operator's taint is never duplicated or replaced).
pub fn has_draining_key(taints: &[TaintView]) -> bool {
    taints.iter().any(|t| t.key == DRAINING)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(key: &str, value: Option<&str>, effect: &str) -> TaintView {
        TaintView {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
        }
    }

    #[test]
    fn triggers_and_non_triggers() {
        let set = TriggerSet::default();
        let cases = [
            (t(OUT_OF_SERVICE, None, "NoExecute"), true),
            (t(OUT_OF_SERVICE, Some("nodeshutdown"), "NoSchedule"), true),
            (t(SHUTDOWN, None, "NoSchedule"), true),
            (t(DRAINING, Some(SPOT_EVICTION), "NoSchedule"), true),
            (t(DRAINING, Some(SPOT_EVICTION), "NoExecute"), true),
            (t(DRAINING, Some("other"), "NoSchedule"), false),
            (t(KARPENTER_DISRUPTED, None, "NoSchedule"), true),
            (t(KARPENTER_DISRUPTED, None, "NoExecute"), true),
            (
                t(TO_BE_DELETED_BY_CA, Some("1700000000"), "NoSchedule"),
                true,
            ),
            (
                t(
                    "DeletionCandidateOfClusterAutoscaler",
                    Some("1700000000"),
                    "PreferNoSchedule",
                ),
                false,
            ),
            (t("karpenter.sh/unregistered", None, "NoExecute"), false),
            (
                t(
                    "remediator.kubernetes.azure.com/unschedulable",
                    None,
                    "NoSchedule",
                ),
                false,
            ),
            (
                t("node.kubernetes.io/unreachable", None, "NoExecute"),
                false,
            ),
            (
                t("node.kubernetes.io/unschedulable", None, "NoSchedule"),
                false,
            ),
            (t("node.kubernetes.io/not-ready", None, "NoExecute"), false),
            (
                t(
                    "kubernetes.azure.com/scalesetpriority",
                    Some("spot"),
                    "NoSchedule",
                ),
                false,
            ),
        ];
        for (taint, want) in cases {
            assert_eq!(set.trigger(&taint).is_some(), want, "{taint:?}");
        }
    }

    #[test]
    fn built_ins_can_be_turned_off_and_extra_keys_win() {
        let off = BuiltIns {
            karpenter_disrupted: false,
            cluster_autoscaler: false,
            exclude_label: false,
            node_deleting: false,
            drain_conditions: false,
            cordon: false,
        };
        let set = TriggerSet::with_built_ins(off, vec![]);
        assert_eq!(
            set.trigger(&t(KARPENTER_DISRUPTED, None, "NoSchedule")),
            None
        );
        assert_eq!(
            set.trigger(&t(TO_BE_DELETED_BY_CA, Some("1"), "NoSchedule")),
            None
        );
        assert_eq!(set.label_trigger(Some("true")), None);
        assert!(set.trigger(&t(OUT_OF_SERVICE, None, "NoExecute")).is_some());
        let set = TriggerSet::with_built_ins(off, vec![KARPENTER_DISRUPTED.into()]);
        assert!(
            set.trigger(&t(KARPENTER_DISRUPTED, None, "NoSchedule"))
                .is_some()
        );
        let set = TriggerSet::new(vec!["example.com/leaving".into()]);
        assert!(
            set.trigger(&t("example.com/leaving", None, "NoSchedule"))
                .is_some()
        );
        assert_eq!(
            set.trigger(&t("example.com/other", None, "NoSchedule")),
            None
        );
    }

    fn states(
        deleting: bool,
        cordoned: bool,
        quarantined: bool,
        conds: &[&'static str],
    ) -> NodeStates {
        NodeStates {
            deleting,
            cordoned,
            quarantined,
            drain_conditions: conds.to_vec(),
        }
    }

    /// By default a deleting node is cut and a cordon is not, whatever its drain conditions.
    #[test]
    fn state_triggers_by_default() {
        let set = TriggerSet::default();
        assert_eq!(
            set.state_reasons(&NodeStates::default()),
            Vec::<&str>::new()
        );
        assert_eq!(
            set.state_reasons(&states(true, false, false, &[])),
            [NODE_DELETING]
        );
        // A plain cordon, and a cordon with KEP-5683's conditions, change nothing by default.
        assert!(
            set.state_reasons(&states(false, true, false, &[]))
                .is_empty()
        );
        assert!(
            set.state_reasons(&states(false, true, false, &[DRAIN_IN_PROGRESS]))
                .is_empty()
        );
        let off = TriggerSet::with_built_ins(
            BuiltIns {
                node_deleting: false,
                ..BuiltIns::default()
            },
            vec![],
        );
        assert!(
            off.state_reasons(&states(true, true, false, &[]))
                .is_empty()
        );
    }

    /// The drain conditions count only on a cordoned node (an uncordoned one carries a stale
    /// condition), never on a node AKS quarantined; `--trigger-cordon` takes any cordon but a
    /// quarantined one.
    #[test]
    fn opt_in_cordon_triggers() {
        let drain = TriggerSet::with_built_ins(
            BuiltIns {
                drain_conditions: true,
                ..BuiltIns::default()
            },
            vec![],
        );
        assert_eq!(
            drain.state_reasons(&states(false, true, false, &[DRAIN_IN_PROGRESS])),
            [DRAIN_IN_PROGRESS]
        );
        assert_eq!(
            drain.state_reasons(&states(false, true, false, &[DRAIN_IN_PROGRESS, DRAINED])),
            [DRAIN_IN_PROGRESS, DRAINED]
        );
        assert!(
            drain
                .state_reasons(&states(false, false, false, &[DRAIN_IN_PROGRESS]))
                .is_empty(),
            "stale: not cordoned"
        );
        assert!(
            drain
                .state_reasons(&states(false, true, false, &[]))
                .is_empty()
        );
        assert!(
            drain
                .state_reasons(&states(false, true, true, &[DRAIN_IN_PROGRESS]))
                .is_empty()
        );
        let cordon = TriggerSet::with_built_ins(
            BuiltIns {
                cordon: true,
                ..BuiltIns::default()
            },
            vec![],
        );
        assert_eq!(
            cordon.state_reasons(&states(false, true, false, &[])),
            [NODE_CORDONED]
        );
        assert!(
            cordon
                .state_reasons(&states(false, true, true, &[]))
                .is_empty()
        );
        assert!(
            cordon
                .state_reasons(&states(false, false, false, &[]))
                .is_empty()
        );
        assert_eq!(
            cordon.state_reasons(&states(true, true, false, &[DRAINED])),
            [NODE_DELETING, NODE_CORDONED]
        );
    }

    /// Go's `strconv.ParseBool` false spellings keep the node; everything else excludes it.
    #[test]
    fn exclusion_label_values() {
        let set = TriggerSet::default();
        for keep in ["0", "f", "F", "false", "FALSE", "False"] {
            assert!(!label_excludes(keep), "{keep:?}");
            assert_eq!(set.label_trigger(Some(keep)), None, "{keep:?}");
        }
        for out in [
            "",
            "true",
            "True",
            "1",
            "t",
            "karpenter",
            "aws-node-termination-handler",
            " false",
            "false ",
            "no",
            "off",
            "fAlse",
        ] {
            assert!(label_excludes(out), "{out:?}");
            assert_eq!(
                set.label_trigger(Some(out)),
                Some(EXCLUDE_FROM_LB_LABEL),
                "{out:?}"
            );
        }
        assert_eq!(set.label_trigger(None), None);
    }

    #[test]
    fn reasons_are_sorted_and_unique() {
        let set = TriggerSet::default();
        let taints = [
            t(SHUTDOWN, None, "NoSchedule"),
            t(OUT_OF_SERVICE, None, "NoExecute"),
            t(OUT_OF_SERVICE, None, "NoSchedule"),
        ];
        assert_eq!(
            set.reasons(&taints),
            vec![SHUTDOWN.to_owned(), OUT_OF_SERVICE.to_owned()]
        );
    }
}
