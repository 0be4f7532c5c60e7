//! Triggers: taints (and one label) that mean a node is leaving, so its entries go `Down`.
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
//!
//! Deliberately not triggers: cordon (`node.kubernetes.io/unschedulable`), `NotReady`
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

/// The built-in triggers that can be turned off (each is on by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltIns {
    /// Taint [`KARPENTER_DISRUPTED`].
    pub karpenter_disrupted: bool,
    /// Taint [`TO_BE_DELETED_BY_CA`].
    pub cluster_autoscaler: bool,
    /// Label [`EXCLUDE_FROM_LB_LABEL`].
    pub exclude_label: bool,
}

impl Default for BuiltIns {
    fn default() -> Self {
        Self {
            karpenter_disrupted: true,
            cluster_autoscaler: true,
            exclude_label: true,
        }
    }
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
