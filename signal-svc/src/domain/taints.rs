//! Trigger taints: a node carrying any of them is leaving, so its entries go `Down`.

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

/// One taint as seen on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaintView {
    pub key: String,
    pub value: Option<String>,
    pub effect: String,
}

/// Decides which taints are triggers.
#[derive(Clone, Debug, Default)]
pub struct TriggerSet {
    extra_keys: Vec<String>,
}

impl TriggerSet {
    /// Built-in triggers plus opt-in extra keys (any value, any effect).
    pub fn new(extra_keys: Vec<String>) -> Self {
        Self { extra_keys }
    }

    /// The trigger key this taint stands for, if any.
    pub fn trigger<'a>(&self, taint: &'a TaintView) -> Option<&'a str> {
        let key = taint.key.as_str();
        let hit = match key {
            OUT_OF_SERVICE | SHUTDOWN => true,
            // Only the spot-eviction value: other `draining` values belong to other tools.
            DRAINING => taint.value.as_deref() == Some(SPOT_EVICTION),
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
        let set = TriggerSet::new(vec!["karpenter.sh/disrupted".into()]);
        let cases = [
            (t(OUT_OF_SERVICE, None, "NoExecute"), true),
            (t(OUT_OF_SERVICE, Some("nodeshutdown"), "NoSchedule"), true),
            (t(SHUTDOWN, None, "NoSchedule"), true),
            (t(DRAINING, Some(SPOT_EVICTION), "NoSchedule"), true),
            (t(DRAINING, Some(SPOT_EVICTION), "NoExecute"), true),
            (t(DRAINING, Some("other"), "NoSchedule"), false),
            (t("karpenter.sh/disrupted", None, "NoSchedule"), true),
            (
                t(
                    "ToBeDeletedByClusterAutoscaler",
                    Some("1700000000"),
                    "NoSchedule",
                ),
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
