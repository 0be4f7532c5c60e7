use super::*;
use crate::hold::HOLD_ANNOTATION;
use crate::taints::{
    BuiltIns, DRAIN_IN_PROGRESS, DRAINED, DRAINING, EXCLUDE_FROM_LB_LABEL, KARPENTER_DISRUPTED,
    NODE_CORDONED, NODE_DELETING, OUT_OF_SERVICE, QUARANTINED, SHUTDOWN, SPOT_EVICTION,
    SPOT_NOTICE_HANDLED, TO_BE_DELETED_BY_CA, UNSCHEDULABLE_TAINT, UPGRADE_STATUS_LABEL,
};
use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec, NodeStatus, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}
fn now() -> Timestamp {
    ts("2026-08-01T05:40:00Z")
}

fn mk_node(name: &str, uid: &str, taints: &[(&str, Option<&str>, &str)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            uid: Some(uid.into()),
            creation_timestamp: Some(Time(ts("2026-08-01T05:00:00Z"))),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(format!(
                "azure:///subscriptions/s/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/v/virtualMachines/{uid}"
            )),
            taints: Some(
                taints
                    .iter()
                    .map(|(k, v, e)| Taint {
                        key: (*k).into(),
                        value: v.map(Into::into),
                        effect: (*e).into(),
                        time_added: None,
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

fn with_created(mut n: Node, at: &str) -> Node {
    n.metadata.creation_timestamp = Some(Time(ts(at)));
    n
}

fn with_condition(mut n: Node, type_: &str, status: &str, message: &str) -> Node {
    n.status.get_or_insert_with(Default::default).conditions = Some(vec![NodeCondition {
        type_: type_.into(),
        status: status.into(),
        message: Some(message.into()),
        ..Default::default()
    }]);
    n
}

fn mk_event(uid: &str, node: &str, message: &str, at: &str) -> EventView {
    EventView {
        name: format!("{node}.{uid}"),
        uid: uid.into(),
        reason: "PreemptScheduled".into(),
        kind: Some("Node".into()),
        node_name: Some(node.into()),
        message: message.into(),
        time: Some(ts(at)),
    }
}

const NOTICE: &str = "Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. DurationInSeconds: -1. For more information, see https://aka.ms/aks/scheduledevents.";
const IMDS: &str = "IMDS query failed, exit code: 28\nConnection timed out after 24 seconds.";

fn desired_of(out: &Output) -> Vec<(String, Desired, Vec<String>)> {
    out.changes
        .iter()
        .filter_map(|c| match c {
            Change::Set { state, .. } => {
                Some((state.node.uid.clone(), state.desired, state.reasons.clone()))
            }
            Change::Removed { .. } => None,
        })
        .collect()
}

#[test]
fn every_trigger_goes_down_and_back() {
    let extra = "example.com/decommission";
    let triggers: [(&str, Option<&str>, &str); 8] = [
        (OUT_OF_SERVICE, None, "NoExecute"),
        (OUT_OF_SERVICE, Some("nodeshutdown"), "NoSchedule"),
        (SHUTDOWN, None, "NoSchedule"),
        (DRAINING, Some(SPOT_EVICTION), "NoSchedule"),
        (extra, None, "NoSchedule"),
        (KARPENTER_DISRUPTED, None, "NoSchedule"),
        (KARPENTER_DISRUPTED, None, "NoExecute"),
        (TO_BE_DELETED_BY_CA, Some("1700000000"), "NoSchedule"),
    ];
    for (i, taint) in triggers.iter().enumerate() {
        let mut idx = NodeIndex::new(TriggerSet::new(vec![extra.into()]));
        let first = idx.apply(&mk_node("n", "u", &[]), now());
        assert_eq!(
            desired_of(&first),
            vec![("u".into(), Desired::None, vec![])],
            "case {i}"
        );
        let down = idx.apply(&mk_node("n", "u", &[*taint]), now());
        assert_eq!(
            desired_of(&down),
            vec![("u".into(), Desired::Down, vec![taint.0.to_owned()])],
            "case {i}"
        );
        assert_eq!(down.signals, vec!["taint"]);
        let again = idx.apply(&mk_node("n", "u", &[*taint]), now());
        assert!(
            again.changes.is_empty(),
            "re-delivery changes nothing, case {i}"
        );
        let up = idx.apply(&mk_node("n", "u", &[]), now());
        assert_eq!(
            desired_of(&up),
            vec![("u".into(), Desired::None, vec![])],
            "case {i}"
        );
        match &up.changes[0] {
            Change::Set { previous, .. } => assert_eq!(*previous, Some(Desired::Down)),
            other => panic!("{other:?}"),
        }
    }
}

/// The Node as a DELETE leaves it while a finalizer (Karpenter's) holds it.
fn deleting(mut n: Node) -> Node {
    n.metadata.deletion_timestamp = Some(Time(ts("2026-08-01T05:39:00Z")));
    n.metadata.finalizers = Some(vec!["karpenter.sh/termination".into()]);
    n
}

/// `kubectl cordon`: the spec field and the taint the node lifecycle controller mirrors it in.
fn cordoned(mut n: Node) -> Node {
    let spec = n.spec.get_or_insert_with(Default::default);
    spec.unschedulable = Some(true);
    spec.taints.get_or_insert_with(Vec::new).push(Taint {
        key: UNSCHEDULABLE_TAINT.into(),
        value: None,
        effect: "NoSchedule".into(),
        time_added: None,
    });
    n
}

fn with_any_label(mut n: Node, key: &str, value: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    n
}

fn index_with(f: impl FnOnce(&mut BuiltIns)) -> NodeIndex {
    let mut b = BuiltIns::default();
    f(&mut b);
    NodeIndex::new(TriggerSet::with_built_ins(b, vec![]))
}

/// A node being deleted is `Down` from its deletionTimestamp for as long as a finalizer keeps
/// it (Karpenter's termination adds its label on top), and its DELETE removes it.
#[test]
fn a_deleting_node_goes_down_until_it_is_gone() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let down = idx.apply(&deleting(mk_node("n", "u", &[])), now());
    assert_eq!(
        desired_of(&down),
        vec![("u".into(), Desired::Down, vec![NODE_DELETING.to_owned()])]
    );
    assert_eq!(down.signals, vec!["deleting"]);
    // The finalizer's owner drains and labels the node: still Down, now for both reasons.
    let drained = idx.apply(
        &with_label(deleting(mk_node("n", "u", &[])), "karpenter"),
        now(),
    );
    assert_eq!(
        desired_of(&drained),
        vec![(
            "u".into(),
            Desired::Down,
            vec![NODE_DELETING.to_owned(), EXCLUDE_FROM_LB_LABEL.to_owned()]
        )]
    );
    assert_eq!(
        idx.get("u").unwrap().observed_at,
        now(),
        "kept since the first signal"
    );
    let gone = idx.delete(&deleting(mk_node("n", "u", &[])));
    assert!(matches!(
        gone.changes.as_slice(),
        [Change::Removed {
            last: Desired::Down,
            ..
        }]
    ));
    // Listed already deleting (a restart mid-drain): Down at once.
    let mut fresh = NodeIndex::new(TriggerSet::default());
    let out = fresh.apply(&deleting(mk_node("n", "u", &[])), now());
    assert_eq!(desired_of(&out)[0].1, Desired::Down);
}

/// KEP-5683's drain conditions, opt-in: only on a cordoned node; uncordoning (the condition
/// left behind is stale) brings the node back, and AKS's quarantined node is never cut.
#[test]
fn drain_conditions_on_a_cordoned_node_are_opt_in() {
    let drain = |n: Node, t: &str| with_condition(n, t, "True", "");
    let mut off = NodeIndex::new(TriggerSet::default());
    off.apply(&mk_node("n", "u", &[]), now());
    let out = off.apply(
        &drain(cordoned(mk_node("n", "u", &[])), DRAIN_IN_PROGRESS),
        now(),
    );
    assert!(out.changes.is_empty(), "off by default: {out:?}");

    let mut idx = index_with(|b| b.drain_conditions = true);
    idx.apply(&mk_node("n", "u", &[]), now());
    assert!(
        idx.apply(&cordoned(mk_node("n", "u", &[])), now())
            .changes
            .is_empty(),
        "a plain cordon is not a drain"
    );
    let down = idx.apply(
        &drain(cordoned(mk_node("n", "u", &[])), DRAIN_IN_PROGRESS),
        now(),
    );
    assert_eq!(
        desired_of(&down),
        vec![(
            "u".into(),
            Desired::Down,
            vec![DRAIN_IN_PROGRESS.to_owned()]
        )]
    );
    assert_eq!(down.signals, vec!["drain_condition"]);
    let done = idx.apply(&drain(cordoned(mk_node("n", "u", &[])), DRAINED), now());
    assert_eq!(
        desired_of(&done),
        vec![("u".into(), Desired::Down, vec![DRAINED.to_owned()])]
    );
    let stale = idx.apply(&drain(mk_node("n", "u", &[]), DRAINED), now());
    assert_eq!(
        desired_of(&stale),
        vec![("u".into(), Desired::None, vec![])]
    );
    let quarantined = with_any_label(
        drain(cordoned(mk_node("n", "u", &[])), DRAIN_IN_PROGRESS),
        UPGRADE_STATUS_LABEL,
        QUARANTINED,
    );
    assert!(idx.apply(&quarantined, now()).changes.is_empty());
}

/// `--trigger-cordon`: an AKS upgrade's cordon is `Down` until the reimaged node is
/// uncordoned; a node AKS quarantined (drain failed, not reimaged) stays `None`.
#[test]
fn trigger_cordon_cuts_every_cordon_but_a_quarantined_one() {
    let mut idx = index_with(|b| b.cordon = true);
    idx.apply(&mk_node("n", "u", &[]), now());
    let down = idx.apply(&cordoned(mk_node("n", "u", &[])), now());
    assert_eq!(
        desired_of(&down),
        vec![("u".into(), Desired::Down, vec![NODE_CORDONED.to_owned()])]
    );
    assert_eq!(down.signals, vec!["cordon"]);
    // The spec field alone (before the lifecycle controller mirrors it) is a cordon too.
    let mut spec_only = mk_node("n", "u", &[]);
    spec_only.spec.as_mut().unwrap().unschedulable = Some(true);
    assert!(idx.apply(&spec_only, now()).changes.is_empty());
    let back = idx.apply(&mk_node("n", "u", &[]), now());
    assert_eq!(desired_of(&back), vec![("u".into(), Desired::None, vec![])]);
    let quarantined = with_any_label(
        cordoned(mk_node("n", "u", &[])),
        UPGRADE_STATUS_LABEL,
        QUARANTINED,
    );
    assert!(idx.apply(&quarantined, now()).changes.is_empty());
    // The AKS remediator's taint alone is not a cordon.
    let remediator = mk_node(
        "n",
        "u",
        &[(
            "remediator.kubernetes.azure.com/unschedulable",
            None,
            "NoSchedule",
        )],
    );
    assert!(idx.apply(&remediator, now()).changes.is_empty());
}

fn with_label(mut n: Node, value: &str) -> Node {
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(EXCLUDE_FROM_LB_LABEL.into(), value.into());
    n
}

#[test]
fn extra_keys_are_opt_in() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let out = idx.apply(
        &mk_node(
            "n",
            "u",
            &[("example.com/decommission", None, "NoSchedule")],
        ),
        now(),
    );
    assert!(out.changes.is_empty());
}

/// Each built-in that can be turned off keeps the node `None` when it is off.
#[test]
fn built_ins_turned_off_keep_the_node_none() {
    let cases: [(BuiltIns, Node); 4] = [
        (
            BuiltIns {
                karpenter_disrupted: false,
                ..BuiltIns::default()
            },
            mk_node("n", "u", &[(KARPENTER_DISRUPTED, None, "NoSchedule")]),
        ),
        (
            BuiltIns {
                cluster_autoscaler: false,
                ..BuiltIns::default()
            },
            mk_node(
                "n",
                "u",
                &[(TO_BE_DELETED_BY_CA, Some("1700000000"), "NoSchedule")],
            ),
        ),
        (
            BuiltIns {
                exclude_label: false,
                ..BuiltIns::default()
            },
            with_label(mk_node("n", "u", &[]), "karpenter"),
        ),
        (
            BuiltIns {
                node_deleting: false,
                ..BuiltIns::default()
            },
            deleting(mk_node("n", "u", &[])),
        ),
    ];
    for (i, (built_ins, node)) in cases.into_iter().enumerate() {
        let mut idx = NodeIndex::new(TriggerSet::with_built_ins(built_ins, vec![]));
        idx.apply(&mk_node("n", "u", &[]), now());
        let out = idx.apply(&node, now());
        assert!(out.changes.is_empty(), "case {i}: {out:?}");
        assert_eq!(idx.get("u").unwrap().desired, Desired::None, "case {i}");
    }
}

/// The exclusion label goes Down and back with its key as the reason; a false boolean keeps
/// the node in, and flipping the value is a real change.
#[test]
fn exclusion_label_goes_down_and_back() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let down = idx.apply(&with_label(mk_node("n", "u", &[]), "karpenter"), now());
    assert_eq!(
        desired_of(&down),
        vec![(
            "u".into(),
            Desired::Down,
            vec![EXCLUDE_FROM_LB_LABEL.to_owned()]
        )]
    );
    assert_eq!(down.signals, vec!["label"]);
    // Another excluding value: nothing changes.
    let same = idx.apply(&with_label(mk_node("n", "u", &[]), "true"), now());
    assert!(same.changes.is_empty(), "{same:?}");
    let kept = idx.apply(&with_label(mk_node("n", "u", &[]), "false"), now());
    assert_eq!(desired_of(&kept), vec![("u".into(), Desired::None, vec![])]);
    let empty = idx.apply(&with_label(mk_node("n", "u", &[]), ""), now());
    assert_eq!(
        desired_of(&empty)[0].1,
        Desired::Down,
        "an empty value excludes"
    );
    // Label plus taint: both reasons, sorted; Down until both are gone.
    let both = idx.apply(
        &with_label(
            mk_node("n", "u", &[(KARPENTER_DISRUPTED, None, "NoSchedule")]),
            "karpenter",
        ),
        now(),
    );
    assert_eq!(
        desired_of(&both),
        vec![(
            "u".into(),
            Desired::Down,
            vec![
                KARPENTER_DISRUPTED.to_owned(),
                EXCLUDE_FROM_LB_LABEL.to_owned()
            ]
        )]
    );
    let taint_only = idx.apply(
        &mk_node("n", "u", &[(KARPENTER_DISRUPTED, None, "NoSchedule")]),
        now(),
    );
    assert_eq!(desired_of(&taint_only)[0].1, Desired::Down);
    let up = idx.apply(&mk_node("n", "u", &[]), now());
    assert_eq!(desired_of(&up), vec![("u".into(), Desired::None, vec![])]);
}

#[test]
fn cordon_not_ready_and_other_taints_change_nothing() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let mut cordoned = mk_node(
        "n",
        "u",
        &[("node.kubernetes.io/unschedulable", None, "NoSchedule")],
    );
    cordoned.spec.as_mut().unwrap().unschedulable = Some(true);
    assert!(idx.apply(&cordoned, now()).changes.is_empty());
    // The AKS remediator's cordon (node auto-drain) is a cordon too.
    let remediator = mk_node(
        "n",
        "u",
        &[(
            "remediator.kubernetes.azure.com/unschedulable",
            None,
            "NoSchedule",
        )],
    );
    assert!(idx.apply(&remediator, now()).changes.is_empty());
    // cluster-autoscaler's soft candidate taint is not a deletion.
    let candidate = mk_node(
        "n",
        "u",
        &[(
            "DeletionCandidateOfClusterAutoscaler",
            Some("1700000000"),
            "PreferNoSchedule",
        )],
    );
    assert!(idx.apply(&candidate, now()).changes.is_empty());
    let not_ready = with_condition(
        mk_node(
            "n",
            "u",
            &[("node.kubernetes.io/not-ready", None, "NoExecute")],
        ),
        "Ready",
        "False",
        "kubelet stopped posting node status",
    );
    assert!(idx.apply(&not_ready, now()).changes.is_empty());
    let other_draining = mk_node("n", "u", &[(DRAINING, Some("maintenance"), "NoSchedule")]);
    assert!(idx.apply(&other_draining, now()).changes.is_empty());
}

#[test]
fn multiple_triggers_keep_down_until_all_gone() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[(SHUTDOWN, None, "NoSchedule")]), now());
    let both = idx.apply(
        &mk_node(
            "n",
            "u",
            &[
                (SHUTDOWN, None, "NoSchedule"),
                (OUT_OF_SERVICE, None, "NoExecute"),
            ],
        ),
        now(),
    );
    assert_eq!(desired_of(&both)[0].1, Desired::Down);
    assert_eq!(desired_of(&both)[0].2.len(), 2);
    let one = idx.apply(
        &mk_node("n", "u", &[(OUT_OF_SERVICE, None, "NoExecute")]),
        now(),
    );
    assert_eq!(
        desired_of(&one),
        vec![("u".into(), Desired::Down, vec![OUT_OF_SERVICE.to_owned()])]
    );
}

#[test]
fn recreated_node_starts_from_its_own_taints() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(
        &mk_node("n", "old", &[(SHUTDOWN, None, "NoSchedule")]),
        now(),
    );
    // DELETE missed; the replacement arrives with a new UID and no taints.
    let out = idx.apply(&mk_node("n", "new", &[]), now());
    assert_eq!(out.changes.len(), 2);
    assert!(
        matches!(&out.changes[0], Change::Removed { node, last: Desired::Down } if node.uid == "old")
    );
    assert_eq!(
        desired_of(&out),
        vec![("new".into(), Desired::None, vec![])]
    );
    assert_eq!(idx.get("new").unwrap().desired, Desired::None);
    assert!(idx.get("old").is_none());
}

#[test]
fn delete_and_reset() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(
        &mk_node("a", "ua", &[(SHUTDOWN, None, "NoSchedule")]),
        now(),
    );
    idx.apply(&mk_node("b", "ub", &[]), now());
    let del = idx.delete(&mk_node("a", "ua", &[]));
    assert!(
        matches!(&del.changes[..], [Change::Removed { node, last: Desired::Down }] if node.name == "a")
    );
    assert!(
        idx.delete(&mk_node("a", "ua", &[])).changes.is_empty(),
        "second delete is no change"
    );
    // Relist: b is gone, c is new and down, nothing else.
    let out = idx.reset(
        &[mk_node("c", "uc", &[(OUT_OF_SERVICE, None, "NoExecute")])],
        now(),
    );
    assert_eq!(
        desired_of(&out),
        vec![("uc".into(), Desired::Down, vec![OUT_OF_SERVICE.to_owned()])]
    );
    assert!(
        out.changes
            .iter()
            .any(|c| matches!(c, Change::Removed { node, .. } if node.uid == "ub"))
    );
    let same = idx.reset(
        &[mk_node("c", "uc", &[(OUT_OF_SERVICE, None, "NoExecute")])],
        now(),
    );
    assert!(same.changes.is_empty(), "an identical relist emits nothing");
}

#[test]
fn a_node_taken_back_by_an_operator_is_not_tainted_again() {
    // signal-svc tainted this node for the notice earlier (annotation on the node), then an
    // operator removed the taint. A new leader re-deriving state from the cluster must not
    // add it again for the same, still-present notice.
    let mut node = mk_node("n", "u", &[]);
    node.metadata.annotations = Some(
        [(
            SPOT_NOTICE_HANDLED.to_string(),
            "2026-08-01T05:39:01Z".to_string(),
        )]
        .into(),
    );
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&node, now());
    let out = idx.apply_event(&mk_event("e1", "n", NOTICE, "2026-08-01T05:39:00Z"), now());
    assert!(out.taints.is_empty(), "{:?}", out.taints);
    assert!(idx.pending_taints().is_empty());
    // The same notice on a node without the annotation still taints (the control case).
    let mut fresh = NodeIndex::new(TriggerSet::default());
    fresh.apply(&mk_node("n", "u", &[]), now());
    let out = fresh.apply_event(&mk_event("e1", "n", NOTICE, "2026-08-01T05:39:00Z"), now());
    assert_eq!(out.taints.len(), 1);
}

#[test]
fn event_notice_requests_taint_once() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let out = idx.apply_event(&mk_event("e1", "n", NOTICE, "2026-08-01T05:39:00Z"), now());
    assert_eq!(
        out.taints,
        vec![TaintRequest {
            name: "n".into(),
            uid: "u".into()
        }]
    );
    assert_eq!(out.signals, vec!["preempt_event"]);
    // count bumps (MODIFIED), other events for the same node: nothing more.
    assert!(
        idx.apply_event(&mk_event("e1", "n", NOTICE, "2026-08-01T05:39:10Z"), now())
            .taints
            .is_empty()
    );
    assert!(
        idx.apply_event(&mk_event("e2", "n", NOTICE, "2026-08-01T05:39:20Z"), now())
            .taints
            .is_empty()
    );
    assert_eq!(
        idx.pending_taints().len(),
        1,
        "still pending until the taint is seen"
    );
    // The taint lands: Down with the notice's observation time and deadline.
    let later = ts("2026-08-01T05:40:01Z");
    let out = idx.apply(
        &mk_node("n", "u", &[(DRAINING, Some(SPOT_EVICTION), "NoSchedule")]),
        later,
    );
    match &out.changes[..] {
        [Change::Set { state, .. }] => {
            assert_eq!(state.desired, Desired::Down);
            assert_eq!(state.observed_at, now());
            assert_eq!(state.deadline, Some(ts("2026-08-01T05:41:02Z")));
        }
        other => panic!("{other:?}"),
    }
    assert!(idx.pending_taints().is_empty());
}

#[test]
fn imds_noise_and_strangers_are_ignored() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let out = idx.apply_event(&mk_event("e1", "n", IMDS, "2026-08-01T05:39:00Z"), now());
    assert!(out.taints.is_empty());
    assert_eq!(out.signals, vec!["preempt_event_ignored"]);
    assert!(
        idx.apply_event(&mk_event("e1", "n", IMDS, "2026-08-01T05:39:05Z"), now())
            .signals
            .is_empty()
    );
    let mut no_obj = mk_event("e3", "n", NOTICE, "2026-08-01T05:39:00Z");
    no_obj.node_name = None;
    let out = idx.apply_event(&no_obj, now());
    assert!(out.taints.is_empty());
    assert_eq!(out.warnings.len(), 1);
    assert!(
        idx.apply_event(&no_obj, now()).warnings.is_empty(),
        "warned once"
    );
}

#[test]
fn event_is_matched_by_name_and_time_never_uid() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    // Old event for a previous incarnation of the same name: ignored for the new node.
    idx.apply(
        &with_created(mk_node("n", "new", &[]), "2026-08-01T05:30:00Z"),
        now(),
    );
    let out = idx.apply_event(
        &mk_event("old-ev", "n", NOTICE, "2026-08-01T05:10:00Z"),
        now(),
    );
    assert!(out.taints.is_empty());
    // An event arriving before its node is remembered and matched when the node shows up.
    let mut idx = NodeIndex::new(TriggerSet::default());
    assert!(
        idx.apply_event(&mk_event("e", "m", NOTICE, "2026-08-01T05:39:00Z"), now())
            .taints
            .is_empty()
    );
    let out = idx.apply(&mk_node("m", "um", &[]), now());
    assert_eq!(
        out.taints,
        vec![TaintRequest {
            name: "m".into(),
            uid: "um".into()
        }]
    );
}

#[test]
fn operator_draining_taint_is_never_duplicated() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(
        &mk_node("n", "u", &[(DRAINING, Some("by-hand"), "NoExecute")]),
        now(),
    );
    let out = idx.apply_event(&mk_event("e", "n", NOTICE, "2026-08-01T05:39:00Z"), now());
    assert!(out.taints.is_empty());
    assert!(idx.pending_taints().is_empty());
}

#[test]
fn conditions_are_the_same_notice() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let n = with_condition(
        mk_node("n", "u", &[]),
        "PreemptionScheduled",
        "True",
        "Preempt Scheduled: Sat, 1 Aug 2026 05:41:02 GMT. For more information, see https://aka.ms/aks-spot-eviction. EventId: x",
    );
    let out = idx.apply(&n, now());
    assert_eq!(out.taints.len(), 1);
    assert_eq!(out.signals, vec!["preempt_condition"]);
    assert!(
        idx.apply(&n, now()).taints.is_empty(),
        "level-triggered condition counts once"
    );
    let mut idx = NodeIndex::new(TriggerSet::default());
    let vm = with_condition(
        mk_node("n", "u", &[]),
        "VMEventScheduled",
        "True",
        "Preempt Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1.",
    );
    assert_eq!(idx.apply(&vm, now()).taints.len(), 1);
    let mut idx = NodeIndex::new(TriggerSet::default());
    let reboot = with_condition(
        mk_node("n", "u", &[]),
        "VMEventScheduled",
        "True",
        "Reboot Scheduled: Wed, 26 Feb 2025 10:13:13 GMT.",
    );
    assert!(idx.apply(&reboot, now()).taints.is_empty());
}

/// A rebalance recommendation and unknown forms are counted once per node and never taint;
/// an unknown event form is warned about once.
#[test]
fn advisories_and_unknown_forms_are_counted_not_acted_on() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let advisory = with_condition(
        mk_node("n", "u", &[]),
        "PreemptionScheduled",
        "True",
        "SpotRebalanceRecommendation Advisory: Sat, 01 Aug 2026 05:41:02 GMT.",
    );
    let out = idx.apply(&advisory, now());
    assert!(out.taints.is_empty() && out.changes.len() == 1);
    assert_eq!(out.signals, vec!["preempt_advisory"]);
    assert_eq!(out.warnings.len(), 1);
    let again = idx.apply(&advisory, now());
    assert!(
        again.signals.is_empty() && again.warnings.is_empty(),
        "once"
    );
    assert!(idx.pending_taints().is_empty());
    // The advisory turns into an eviction: now it is acted on.
    let evict = with_condition(
        mk_node("n", "u", &[]),
        "PreemptionScheduled",
        "True",
        "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT. EventId: x",
    );
    let out = idx.apply(&evict, now());
    assert_eq!(out.taints.len(), 1);
    assert_eq!(out.signals, vec!["preempt_condition"]);

    let mut idx = NodeIndex::new(TriggerSet::default());
    let odd = with_condition(mk_node("n", "u", &[]), "PreemptionScheduled", "True", "?");
    let out = idx.apply(&odd, now());
    assert!(out.taints.is_empty());
    assert_eq!(out.signals, vec!["preempt_unknown_form"]);

    let mut idx = NodeIndex::new(TriggerSet::default());
    idx.apply(&mk_node("n", "u", &[]), now());
    let ev = mk_event("e1", "n", "Something else entirely", "2026-08-01T05:39:00Z");
    let out = idx.apply_event(&ev, now());
    assert!(out.taints.is_empty());
    assert_eq!(out.signals, vec!["preempt_unknown_form"]);
    assert_eq!(out.warnings.len(), 1);
    let again = idx.apply_event(&ev, now());
    assert!(again.signals.is_empty() && again.warnings.is_empty());
    let adv = mk_event(
        "e2",
        "n",
        "SpotRebalanceRecommendation Advisory.",
        "2026-08-01T05:39:00Z",
    );
    assert_eq!(
        idx.apply_event(&adv, now()).signals,
        vec!["preempt_advisory"]
    );
    assert!(idx.pending_taints().is_empty());
}

#[test]
fn malformed_nodes_are_reported_once() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let mut n = mk_node("n", "u", &[]);
    n.metadata.uid = None;
    let out = idx.apply(&n, now());
    assert!(out.changes.is_empty());
    assert_eq!(out.warnings.len(), 1);
    assert!(idx.apply(&n, now()).warnings.is_empty());
    let mut bare = mk_node("b", "ub", &[(SHUTDOWN, None, "NoSchedule")]);
    bare.spec.as_mut().unwrap().provider_id = None;
    bare.status = None;
    let out = idx.apply(&bare, now());
    assert_eq!(out.warnings.len(), 2, "{:?}", out.warnings);
    assert_eq!(
        desired_of(&out)[0].1,
        Desired::Down,
        "still cut: the actuator resolves by name"
    );
    assert!(idx.apply(&bare, now()).warnings.is_empty());
}

fn with_hold(mut n: Node, value: &str) -> Node {
    n.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(HOLD_ANNOTATION.into(), value.into());
    n
}

const HOLD: &str = r#"{"reason":"ticket 1234","by":"ops","since":"2026-08-01T05:30:00Z"}"#;

#[test]
fn a_hold_annotation_holds_down_until_removed() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let out = idx.apply(&mk_node("n1", "u1", &[]), now());
    assert_eq!(desired_of(&out), vec![("u1".into(), Desired::None, vec![])]);

    let out = idx.apply(&with_hold(mk_node("n1", "u1", &[]), HOLD), now());
    assert_eq!(
        desired_of(&out),
        vec![("u1".into(), Desired::Down, vec![HOLD_ANNOTATION.into()])]
    );
    assert_eq!(out.signals, vec!["hold"]);
    let held = idx.get("u1").unwrap().node.hold.as_deref().unwrap();
    assert_eq!(
        (held.reason.as_str(), held.by.as_str()),
        ("ticket 1234", "ops")
    );

    // The same annotation again changes nothing; a new reason is a change of the state.
    assert!(
        idx.apply(&with_hold(mk_node("n1", "u1", &[]), HOLD), now())
            .changes
            .is_empty()
    );
    let other = HOLD.replace("ticket 1234", "ticket 99");
    let out = idx.apply(&with_hold(mk_node("n1", "u1", &[]), &other), now());
    assert_eq!(
        out.changes.len(),
        1,
        "the reason text travels to the actuators"
    );

    let out = idx.apply(&mk_node("n1", "u1", &[]), now());
    assert_eq!(desired_of(&out), vec![("u1".into(), Desired::None, vec![])]);
}

#[test]
fn a_malformed_hold_is_reported_once_and_ignored() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let bad = with_hold(mk_node("n1", "u1", &[]), r#"{"reason":"x"}"#);
    let out = idx.apply(&bad, now());
    assert_eq!(desired_of(&out), vec![("u1".into(), Desired::None, vec![])]);
    assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
    assert!(
        out.warnings[0].contains(HOLD_ANNOTATION),
        "{:?}",
        out.warnings
    );
    let again = idx.apply(&bad, now());
    assert!(again.warnings.is_empty() && again.changes.is_empty());
}

#[test]
fn releasing_a_hold_keeps_a_tainted_node_down() {
    let mut idx = NodeIndex::new(TriggerSet::default());
    let tainted = || mk_node("n1", "u1", &[(OUT_OF_SERVICE, None, "NoExecute")]);
    idx.apply(&tainted(), now());
    let out = idx.apply(&with_hold(tainted(), HOLD), now());
    assert_eq!(
        desired_of(&out),
        vec![(
            "u1".into(),
            Desired::Down,
            vec![HOLD_ANNOTATION.into(), OUT_OF_SERVICE.into()]
        )]
    );
    let out = idx.apply(&tainted(), now());
    assert_eq!(
        desired_of(&out),
        vec![("u1".into(), Desired::Down, vec![OUT_OF_SERVICE.into()])],
        "the taint still holds it down"
    );
    assert!(idx.get("u1").unwrap().node.hold.is_none());
}
