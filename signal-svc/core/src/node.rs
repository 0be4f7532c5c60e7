//! The parts of a Kubernetes Node that signal-svc uses, extracted once per watch event.

use super::hold::{HOLD_ANNOTATION, Hold};
use super::notice::{self, Notice};
use super::taints::{
    DRAIN_CONDITIONS, NodeStates, QUARANTINED, TaintView, UNSCHEDULABLE_TAINT, UPGRADE_STATUS_LABEL,
};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeSpec, NodeStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// The value of the exclusion label, if the node carries it (read through
/// [`TriggerSet::label_trigger`](super::taints::TriggerSet::label_trigger)).
pub fn exclude_label_value(node: &Node) -> Option<&str> {
    node.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(super::taints::EXCLUDE_FROM_LB_LABEL))
        .map(String::as_str)
}

/// The Spot-notice conditions on a node that are *not* acted on but must be reported: an
/// advisory (rebalance recommendation) or a form we do not know, with the condition type.
pub fn unacted_notice_conditions(node: &Node, now: Timestamp) -> Vec<(String, notice::Reading)> {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|cs| {
            cs.iter()
                .filter_map(|c| {
                    let r = notice::read_condition(
                        &c.type_,
                        &c.status,
                        c.message.as_deref().unwrap_or(""),
                        now,
                    )?;
                    matches!(r, notice::Reading::Advisory | notice::Reading::Unknown)
                        .then(|| (c.type_.clone(), r))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A node as the index sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct NodeView {
    pub name: String,
    pub uid: String,
    pub created: Option<Timestamp>,
    pub provider_id: String,
    pub internal_ips: Vec<String>,
    pub zone: String,
    pub taints: Vec<TaintView>,
    /// A true `PreemptionScheduled` / `VMEventScheduled (Preempt)` condition.
    pub condition_notice: Option<Notice>,
    /// signal-svc already tainted this node for a Spot notice (annotation
    /// [`SPOT_NOTICE_HANDLED`](super::taints::SPOT_NOTICE_HANDLED)).
    pub spot_notice_handled: bool,
    /// A well-formed tool hold (annotation `cutover.io/hold`). Boxed: almost no node has one,
    /// and the index keeps a view of every node.
    pub hold: Option<Box<Hold>>,
    /// Deletion, cordon, AKS quarantine and KEP-5683 drain conditions.
    pub states: NodeStates,
}

/// Why a node object cannot be used at all.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NodeError {
    #[error("node has no metadata.name")]
    MissingName,
    #[error("node {0} has no metadata.uid")]
    MissingUid(String),
}

impl NodeView {
    /// Extracts the view. Missing name or UID is an error (the node cannot be keyed); missing
    /// providerID or InternalIPs only produce warnings: the actuator can still resolve the
    /// node by name, and cutting traffic late is worse than resolving it by name.
    pub fn from_node(node: &Node, now: Timestamp) -> Result<(Self, Vec<String>), NodeError> {
        let meta = &node.metadata;
        let name = meta
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or(NodeError::MissingName)?;
        let uid = meta
            .uid
            .clone()
            .filter(|u| !u.is_empty())
            .ok_or_else(|| NodeError::MissingUid(name.clone()))?;
        let mut warnings = Vec::new();
        let spec = node.spec.as_ref();
        let provider_id = spec.and_then(|s| s.provider_id.clone()).unwrap_or_default();
        if provider_id.is_empty() {
            warnings.push("no spec.providerID; the actuator will resolve it by name".to_owned());
        }
        let status = node.status.as_ref();
        let internal_ips = internal_ips(status);
        if internal_ips.is_empty() {
            warnings.push("no InternalIP in status.addresses".to_owned());
        }
        let taints = taints(spec);
        let condition_notice = condition_notice(status, now);
        let hold = hold(meta, &mut warnings);
        let states = NodeStates {
            deleting: meta.deletion_timestamp.is_some(),
            cordoned: spec.and_then(|s| s.unschedulable) == Some(true)
                || taints.iter().any(|t| t.key == UNSCHEDULABLE_TAINT),
            quarantined: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(UPGRADE_STATUS_LABEL))
                .is_some_and(|v| v == QUARANTINED),
            drain_conditions: drain_conditions(status),
        };
        Ok((
            Self {
                hold,
                states,
                zone: meta
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(ZONE_LABEL))
                    .cloned()
                    .unwrap_or_default(),
                created: meta.creation_timestamp.as_ref().map(|t| t.0),
                name,
                uid,
                provider_id,
                internal_ips,
                taints,
                condition_notice,
                spot_notice_handled: meta
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(super::taints::SPOT_NOTICE_HANDLED)),
            },
            warnings,
        ))
    }

    /// The identity fields the actuator needs; a change in them is a change worth sending.
    pub fn same_ref(&self, other: &NodeView) -> bool {
        self.name == other.name
            && self.provider_id == other.provider_id
            && self.internal_ips == other.internal_ips
            && self.zone == other.zone
    }
}

/// The node's `InternalIP` addresses.
fn internal_ips(status: Option<&NodeStatus>) -> Vec<String> {
    status
        .and_then(|s| s.addresses.as_ref())
        .map(|addrs| {
            addrs
                .iter()
                .filter(|a| a.type_ == "InternalIP" && !a.address.is_empty())
                .map(|a| a.address.clone())
                .collect()
        })
        .unwrap_or_default()
}

fn taints(spec: Option<&NodeSpec>) -> Vec<TaintView> {
    spec.and_then(|s| s.taints.as_ref())
        .map(|ts| {
            ts.iter()
                .map(|t| TaintView {
                    key: t.key.clone(),
                    value: t.value.clone(),
                    effect: t.effect.clone(),
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The KEP-5683 drain conditions whose status is `True`.
fn drain_conditions(status: Option<&NodeStatus>) -> Vec<&'static str> {
    let conditions = status.and_then(|s| s.conditions.as_deref()).unwrap_or(&[]);
    DRAIN_CONDITIONS
        .into_iter()
        .filter(|t| {
            conditions
                .iter()
                .any(|c| c.type_ == *t && c.status == "True")
        })
        .collect()
}

/// The first node condition that is a Spot eviction notice.
fn condition_notice(status: Option<&NodeStatus>, now: Timestamp) -> Option<Notice> {
    status.and_then(|s| s.conditions.as_ref()).and_then(|cs| {
        cs.iter().find_map(|c| {
            notice::parse_condition(&c.type_, &c.status, c.message.as_deref().unwrap_or(""), now)
        })
    })
}

/// The tool hold in the node's annotation; one that does not parse is a warning.
fn hold(meta: &ObjectMeta, warnings: &mut Vec<String>) -> Option<Box<Hold>> {
    let v = meta.annotations.as_ref()?.get(HOLD_ANNOTATION)?;
    match Hold::parse(v) {
        Ok(h) => Some(Box::new(h)),
        Err(e) => {
            warnings.push(format!("annotation {HOLD_ANNOTATION} ignored: {e}"));
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(v: serde_json::Value) -> Node {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn name_and_uid_are_required_the_rest_only_warns() {
        let now = Timestamp::UNIX_EPOCH;
        assert_eq!(
            NodeView::from_node(&node(json!({"metadata": {}})), now).unwrap_err(),
            NodeError::MissingName
        );
        assert_eq!(
            NodeView::from_node(&node(json!({"metadata": {"name": "n", "uid": ""}})), now)
                .unwrap_err(),
            NodeError::MissingUid("n".into())
        );
        let (v, warnings) =
            NodeView::from_node(&node(json!({"metadata": {"name": "n", "uid": "u"}})), now)
                .unwrap();
        assert_eq!((v.name.as_str(), v.uid.as_str()), ("n", "u"));
        assert_eq!(warnings.len(), 2, "{warnings:?}");
    }

    #[test]
    fn only_nonempty_internal_ips_and_true_preempt_conditions_count() {
        let n = node(json!({
            "metadata": {"name": "n", "uid": "u", "labels": {"topology.kubernetes.io/zone": "z1"}},
            "spec": {"providerID": "azure:///x", "taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": ""}, {"type": "ExternalIP", "address": "1.2.3.4"},
                              {"type": "InternalIP", "address": "10.0.0.1"}],
                "conditions": [{"type": "VMEventScheduled", "status": "True", "message": "Reboot Scheduled: x"},
                               {"type": "PreemptionScheduled", "status": "True", "message": "Preempt Scheduled: soon"}]
            }
        }));
        let (v, warnings) = NodeView::from_node(&n, Timestamp::UNIX_EPOCH).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(v.internal_ips, vec!["10.0.0.1"]);
        assert_eq!(v.zone, "z1");
        assert_eq!(v.taints.len(), 1);
        // An eviction with an unparseable deadline: act now (fail closed).
        assert!(v.condition_notice.is_some_and(|c| !c.deadline_parsed));
        assert!(unacted_notice_conditions(&n, Timestamp::UNIX_EPOCH).is_empty());
        // A form we do not know, or an advisory, is never a notice; both are reported.
        let odd = node(json!({
            "metadata": {"name": "n", "uid": "u"},
            "status": {"conditions": [
                {"type": "PreemptionScheduled", "status": "True", "message": "?"},
                {"type": "VMEventScheduled", "status": "True", "message": "SpotRebalanceRecommendation Advisory: ."}
            ]}
        }));
        let (v, _) = NodeView::from_node(&odd, Timestamp::UNIX_EPOCH).unwrap();
        assert!(v.condition_notice.is_none());
        assert_eq!(
            unacted_notice_conditions(&odd, Timestamp::UNIX_EPOCH),
            vec![
                ("PreemptionScheduled".to_owned(), notice::Reading::Unknown),
                ("VMEventScheduled".to_owned(), notice::Reading::Advisory)
            ]
        );
    }

    /// A deletion timestamp, a cordon (either form), AKS's quarantine label and the KEP-5683
    /// drain conditions are read; only a `True` condition counts.
    #[test]
    fn node_states() {
        let now = Timestamp::UNIX_EPOCH;
        let (v, _) =
            NodeView::from_node(&node(json!({"metadata": {"name": "n", "uid": "u"}})), now)
                .unwrap();
        assert_eq!(v.states, NodeStates::default());
        let n = node(json!({
            "metadata": {"name": "n", "uid": "u", "deletionTimestamp": "2026-08-01T05:00:00Z",
                         "finalizers": ["karpenter.sh/termination"],
                         "labels": {"kubernetes.azure.com/upgrade-status": "Quarantined"}},
            "spec": {"unschedulable": true},
            "status": {"conditions": [
                {"type": "Drained", "status": "True"},
                {"type": "DrainInProgress", "status": "True"},
                {"type": "MaintenanceInProgress", "status": "True"}
            ]}
        }));
        let (v, _) = NodeView::from_node(&n, now).unwrap();
        assert_eq!(
            v.states,
            NodeStates {
                deleting: true,
                cordoned: true,
                quarantined: true,
                drain_conditions: vec!["DrainInProgress", "Drained"],
            }
        );
        // The taint alone is a cordon; a paused node is not quarantined; False / Unknown
        // conditions do not count.
        let n = node(json!({
            "metadata": {"name": "n", "uid": "u",
                         "labels": {"kubernetes.azure.com/upgrade-status": "paused"}},
            "spec": {"unschedulable": false,
                     "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]},
            "status": {"conditions": [
                {"type": "DrainInProgress", "status": "False"},
                {"type": "Drained", "status": "Unknown"}
            ]}
        }));
        let (v, _) = NodeView::from_node(&n, now).unwrap();
        assert_eq!(
            v.states,
            NodeStates {
                cordoned: true,
                ..NodeStates::default()
            }
        );
    }

    /// Arbitrary strings in every field the view reads: an answer, never a panic.
    #[test]
    fn any_field_values_convert_or_error() {
        fn prop(
            name: String,
            uid: String,
            ips: Vec<String>,
            cond: (String, String, String),
        ) -> bool {
            let n = node(json!({
                "metadata": {"name": name, "uid": uid},
                "status": {
                    "addresses": ips.iter().map(|a| json!({"type": "InternalIP", "address": a})).collect::<Vec<_>>(),
                    "conditions": [{"type": cond.0, "status": cond.1, "message": cond.2}]
                }
            }));
            match NodeView::from_node(&n, Timestamp::UNIX_EPOCH) {
                Ok((v, _)) => !v.name.is_empty() && !v.uid.is_empty(),
                Err(_) => name.is_empty() || uid.is_empty(),
            }
        }
        quickcheck::QuickCheck::new()
            .tests(300)
            .quickcheck(prop as fn(String, String, Vec<String>, (String, String, String)) -> bool);
    }
}
