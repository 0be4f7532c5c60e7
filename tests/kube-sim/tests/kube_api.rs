//! kube-rs typed clients against the simulator: the calls signal-svc makes, and the error
//! classification (`is_conflict`, 404, 422) kube applies to real server answers.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::{client, sim};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference, Taint};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::core::Status;
use serde_json::json;

fn api_error(e: kube::Error) -> Status {
    match e {
        kube::Error::Api(s) => *s,
        other => panic!("expected an API error, got {other:?}"),
    }
}

const SPOT: &str = "aks-spotpool-34567890-vmss000000";

#[tokio::test]
async fn nodes_list_get_patch_replace_delete() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));

    let list = nodes.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 12);
    let rv: u64 = list.metadata.resource_version.unwrap().parse().unwrap();
    assert_eq!(rv, sim.resource_version());

    let spot = nodes.get(SPOT).await.unwrap();
    let labels = spot.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.azure.com/scalesetpriority"], "spot");
    let addresses = spot.status.clone().unwrap().addresses.unwrap();
    assert_eq!(
        addresses.iter().filter(|a| a.type_ == "InternalIP").count(),
        2
    );

    // Label selector and field selector.
    let spots = nodes
        .list(&ListParams::default().labels("kubernetes.azure.com/scalesetpriority=spot"))
        .await
        .unwrap();
    assert_eq!(spots.items.len(), 3);
    let one = nodes
        .list(&ListParams::default().fields(&format!("metadata.name={SPOT}")))
        .await
        .unwrap();
    assert_eq!(one.items.len(), 1);
    let e = api_error(
        nodes
            .list(&ListParams::default().fields("status.phase=Running"))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (400, "BadRequest"));
    assert_eq!(e.message, "field label not supported: status.phase");

    // Merge patch of a label bumps the RV; an identical patch does not.
    let patched = nodes
        .patch(
            SPOT,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    let rv1 = patched.metadata.resource_version.clone().unwrap();
    assert_ne!(Some(rv1.clone()), spot.metadata.resource_version);
    let again = nodes
        .patch(
            SPOT,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "1"}}})),
        )
        .await
        .unwrap();
    assert_eq!(again.metadata.resource_version.unwrap(), rv1);

    // Replace with the current RV works; the main resource cannot change status.
    let mut node = patched.clone();
    node.spec.as_mut().unwrap().unschedulable = Some(true);
    node.status.as_mut().unwrap().addresses = Some(vec![]);
    let replaced = nodes
        .replace(SPOT, &PostParams::default(), &node)
        .await
        .unwrap();
    assert_eq!(replaced.spec.unwrap().unschedulable, Some(true));
    assert_eq!(replaced.status.unwrap().addresses.unwrap().len(), 3);
    let cordoned = nodes
        .list(&ListParams::default().fields("spec.unschedulable=true"))
        .await
        .unwrap();
    assert_eq!(cordoned.items.len(), 1);
    // Replace with the stale RV is a conflict.
    let e = api_error(
        nodes
            .replace(SPOT, &PostParams::default(), &node)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));

    // Create (201, uid assigned), AlreadyExists, delete, NotFound.
    let new = Node {
        metadata: ObjectMeta {
            name: Some("extra".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    let created = nodes.create(&PostParams::default(), &new).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let e = api_error(
        nodes
            .create(&PostParams::default(), &new)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "AlreadyExists"));
    nodes
        .delete("extra", &DeleteParams::default())
        .await
        .unwrap();
    let e = api_error(nodes.get("extra").await.unwrap_err());
    assert_eq!((e.code, e.reason.as_str()), (404, "NotFound"));
    assert_eq!(e.message, "nodes \"extra\" not found");
    sim.shutdown().await;
}

#[tokio::test]
async fn taint_patch_with_stale_rv_conflicts_then_succeeds_after_reread() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let seen = nodes.get(SPOT).await.unwrap();
    // Someone else changes the node after we read it.
    nodes
        .patch(
            SPOT,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"other": "writer"}}})),
        )
        .await
        .unwrap();

    let taint_patch = |node: &Node| {
        let mut taints = node.spec.clone().unwrap().taints.unwrap_or_default();
        taints.push(Taint {
            key: "cloudprovider.azure.microsoft.com/draining".into(),
            value: Some("spot-eviction".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        });
        json!({"metadata": {"resourceVersion": node.metadata.resource_version}, "spec": {"taints": taints}})
    };
    let e = api_error(
        nodes
            .patch(
                SPOT,
                &PatchParams::default(),
                &Patch::Strategic(taint_patch(&seen)),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert_eq!(
        e.message,
        format!(
            "Operation cannot be fulfilled on nodes \"{SPOT}\": the object has been modified; please apply your changes to the latest version and try again"
        )
    );

    let fresh = nodes.get(SPOT).await.unwrap();
    let done = nodes
        .patch(
            SPOT,
            &PatchParams::default(),
            &Patch::Strategic(taint_patch(&fresh)),
        )
        .await
        .unwrap();
    let taints = done.spec.unwrap().taints.unwrap();
    // The strategic patch replaced the (atomic) list: the spot taint is kept because the
    // patch carried it, and the new one was appended.
    let keys: Vec<&str> = taints.iter().map(|t| t.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "kubernetes.azure.com/scalesetpriority",
            "cloudprovider.azure.microsoft.com/draining"
        ]
    );
    assert_eq!(done.metadata.labels.unwrap()["other"], "writer");

    // An invalid taint effect is 422 Invalid naming the field.
    let e = api_error(
        nodes
            .patch(
                SPOT,
                &PatchParams::default(),
                &Patch::Strategic(
                    json!({"spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}}),
                ),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message
            .contains("spec.taints[0].effect: Unsupported value: \"Sometimes\""),
        "{}",
        e.message
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn status_subresource_merges_conditions_by_type() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let condition = json!({"status": {"conditions": [{
        "type": "PreemptionScheduled", "status": "True", "reason": "SpotEvictionIncoming",
        "message": "Preempt Scheduled: Sat, 01 Aug 2026 05:41:02 GMT.",
        "lastHeartbeatTime": "2026-08-01T05:40:00Z", "lastTransitionTime": "2026-08-01T05:40:00Z"}]}});
    let patched = nodes
        .patch_status(
            SPOT,
            &PatchParams::default(),
            &Patch::Strategic(condition.clone()),
        )
        .await
        .unwrap();
    let types: Vec<String> = patched
        .status
        .unwrap()
        .conditions
        .unwrap()
        .into_iter()
        .map(|c| c.type_)
        .collect();
    assert_eq!(
        types,
        [
            "MemoryPressure",
            "DiskPressure",
            "PIDPressure",
            "Ready",
            "PreemptionScheduled"
        ]
    );
    // A JSON merge patch replaces the list instead (RFC 7386), and the main resource
    // ignores status changes.
    let merged = nodes
        .patch_status(
            SPOT,
            &PatchParams::default(),
            &Patch::Merge(condition.clone()),
        )
        .await
        .unwrap();
    assert_eq!(merged.status.unwrap().conditions.unwrap().len(), 1);
    let main = nodes
        .patch(
            SPOT,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"conditions": []}, "spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
    assert_eq!(main.status.unwrap().conditions.unwrap().len(), 1);
    assert_eq!(main.spec.unwrap().unschedulable, Some(true));
    // The request log records the patch flavour.
    let flavours: Vec<Option<String>> = sim
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH")
        .map(|r| r.content_type)
        .collect();
    assert_eq!(
        flavours,
        [
            Some("application/strategic-merge-patch+json".to_string()),
            Some("application/merge-patch+json".to_string()),
            Some("application/merge-patch+json".to_string())
        ]
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn json_patch_test_failure_is_422_and_success_applies() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let node = nodes.get(SPOT).await.unwrap();
    let rv = node.metadata.resource_version.clone().unwrap();
    let stale: json_patch_ops::Ops = json_patch_ops::test_then_add("0", "/metadata/labels/y");
    let e = api_error(
        nodes
            .patch(SPOT, &PatchParams::default(), &Patch::<()>::Json(stale))
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let ok = json_patch_ops::test_then_add(&rv, "/metadata/labels/y");
    let patched = nodes
        .patch(SPOT, &PatchParams::default(), &Patch::<()>::Json(ok))
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["y"], "set");
    sim.shutdown().await;
}

/// JSON patch documents (`json-patch` 4, the crate kube's `Patch::Json` takes).
mod json_patch_ops {
    pub type Ops = json_patch::Patch;

    pub fn test_then_add(rv: &str, path: &str) -> Ops {
        serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": path, "value": "set"}
        ]))
        .unwrap()
    }
}

fn npd_event(node: &str) -> CoreEvent {
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(format!("{node}.1826f0c7a5b3d2e1")),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
        reason: Some("PreemptScheduled".into()),
        type_: Some("Warning".into()),
        message: Some("Scheduled: Wed, 26 Feb 2025 10:13:13 GMT. DurationInSeconds: -1. x".into()),
        count: Some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn events_are_one_store_with_two_views() {
    let sim = sim().await;
    let c = client(&sim);
    let core: Api<CoreEvent> = Api::namespaced(c.clone(), "default");
    let v1: Api<EventV1> = Api::namespaced(c.clone(), "default");

    let created = core
        .create(&PostParams::default(), &npd_event(SPOT))
        .await
        .unwrap();
    let name = created.metadata.name.clone().unwrap();
    let seen = v1.get(&name).await.unwrap();
    assert_eq!(seen.regarding.unwrap().name.as_deref(), Some(SPOT));
    assert_eq!(seen.note.as_deref(), created.message.as_deref());
    assert_eq!(seen.deprecated_count, Some(1));

    // Field selectors through both views.
    let by_reason = core
        .list(&ListParams::default().fields("involvedObject.kind=Node,reason=PreemptScheduled"))
        .await
        .unwrap();
    assert_eq!(by_reason.items.len(), 1);
    let by_regarding = v1
        .list(&ListParams::default().fields(&format!("regarding.name={SPOT}")))
        .await
        .unwrap();
    assert_eq!(by_regarding.items.len(), 1);

    // events.k8s.io validates strictly: the NPD-shaped event is refused there.
    let mut strict = EventV1 {
        metadata: ObjectMeta {
            name: Some("bad".into()),
            ..Default::default()
        },
        reason: Some("PreemptScheduled".into()),
        deprecated_count: Some(1),
        ..Default::default()
    };
    let e = api_error(
        v1.create(&PostParams::default(), &strict)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert!(
        e.message.contains("eventTime: Required value"),
        "{}",
        e.message
    );
    assert!(
        e.message
            .contains("count: Invalid value: \"\": needs to be unset"),
        "{}",
        e.message
    );

    // A proper events.k8s.io event shows up through core/v1.
    strict.deprecated_count = None;
    strict.metadata.name = Some(format!("{SPOT}.aaaa"));
    strict.event_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
    strict.regarding = Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(SPOT.into()),
        ..Default::default()
    });
    strict.reporting_controller = Some("cutover.io/signal-svc".into());
    strict.reporting_instance = Some("signal-svc-0".into());
    strict.action = Some("Cutover".into());
    strict.reason = Some("LoadBalancerAdminStateDown".into());
    strict.type_ = Some("Normal".into());
    strict.note = Some("admin state Down on 2 pools".into());
    v1.create(&PostParams::default(), &strict).await.unwrap();
    let back = core.get(&format!("{SPOT}.aaaa")).await.unwrap();
    assert_eq!(
        back.reporting_component.as_deref(),
        Some("cutover.io/signal-svc")
    );
    assert_eq!(back.message.as_deref(), Some("admin state Down on 2 pools"));

    // Updates through events.k8s.io may only change series/metadata.
    let e = api_error(
        v1.patch(
            &format!("{SPOT}.aaaa"),
            &PatchParams::default(),
            &Patch::Merge(json!({"note": "changed"})),
        )
        .await
        .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-01-01T00:00:00.000000Z"}});
    let patched = v1
        .patch(
            &format!("{SPOT}.aaaa"),
            &PatchParams::default(),
            &Patch::Merge(series),
        )
        .await
        .unwrap();
    assert_eq!(patched.series.unwrap().count, 2);

    // All-namespaces list through core/v1 sees both.
    let all: Api<CoreEvent> = Api::all(c);
    assert_eq!(
        all.list(&ListParams::default()).await.unwrap().items.len(),
        2
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn kube_runtime_recorder_posts_valid_events() {
    use kube::runtime::events::{Event, EventType, Recorder, Reporter};
    let sim = sim().await;
    let c = client(&sim);
    let nodes: Api<Node> = Api::all(c.clone());
    let node = nodes.get(SPOT).await.unwrap();
    let recorder = Recorder::new(
        c.clone(),
        Reporter {
            controller: "cutover-signal".into(),
            instance: Some("pod-0".into()),
        },
    );
    let ev = Event {
        type_: EventType::Normal,
        reason: "LoadBalancerAdminStateDown".into(),
        note: Some("Down".into()),
        action: "Cutover".into(),
        secondary: None,
    };
    let reference = kube::Resource::object_ref(&node, &());
    recorder.publish(&ev, &reference).await.unwrap();
    // The repeat is sent as a merge patch with a series (contracts 1.8).
    recorder.publish(&ev, &reference).await.unwrap();
    let v1: Api<EventV1> = Api::namespaced(c, "default");
    let list = v1.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    assert_eq!(list.items[0].series.as_ref().unwrap().count, 2);
    sim.shutdown().await;
}

#[tokio::test]
async fn leases_follow_rv_rules() {
    let sim = sim().await;
    let leases: Api<Lease> = Api::namespaced(client(&sim), "kube-system");
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("cutover-signal".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("a".into()),
            lease_duration_seconds: Some(15),
            ..Default::default()
        }),
    };
    let created = leases.create(&PostParams::default(), &lease).await.unwrap();

    // client-go style: PUT with the RV from the read; a second PUT with the same RV loses.
    let mut mine = created.clone();
    mine.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let won = leases
        .replace("cutover-signal", &PostParams::default(), &mine)
        .await
        .unwrap();
    assert_eq!(won.spec.unwrap().holder_identity.as_deref(), Some("b"));
    let mut theirs = created.clone();
    theirs.spec.as_mut().unwrap().holder_identity = Some("c".into());
    let e = api_error(
        leases
            .replace("cutover-signal", &PostParams::default(), &theirs)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (409, "Conflict"));
    assert!(e.message.starts_with(
        "Operation cannot be fulfilled on leases.coordination.k8s.io \"cutover-signal\""
    ));

    // A PUT without an RV is refused for leases.
    theirs.metadata.resource_version = None;
    let e = api_error(
        leases
            .replace("cutover-signal", &PostParams::default(), &theirs)
            .await
            .unwrap_err(),
    );
    assert_eq!((e.code, e.reason.as_str()), (422, "Invalid"));
    assert_eq!(
        e.message,
        "Lease.coordination.k8s.io \"cutover-signal\" is invalid: metadata.resourceVersion: Invalid value: 0: must be specified for an update"
    );

    // A merge patch carrying a stale RV is a precondition too.
    let stale = json!({"metadata": {"resourceVersion": created.metadata.resource_version}, "spec": {"holderIdentity": "d"}});
    let e = api_error(
        leases
            .patch(
                "cutover-signal",
                &PatchParams::default(),
                &Patch::Merge(stale),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(e.code, 409);

    // Apply needs a field manager and creates missing objects.
    let apply = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "applied"},
                       "spec": {"holderIdentity": "x"}});
    let made = leases
        .patch(
            "applied",
            &PatchParams::apply("cutover").force(),
            &Patch::Apply(apply),
        )
        .await
        .unwrap();
    assert_eq!(made.spec.unwrap().holder_identity.as_deref(), Some("x"));
    sim.shutdown().await;
}

#[tokio::test]
async fn kubeconfig_file_works_with_kube() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig(&path).unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    assert_eq!(config.default_namespace, "default");
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    assert_eq!(
        nodes
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        12
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn requests_record_the_caller_token_of_the_kubeconfig() {
    let sim = sim().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    sim.write_kubeconfig_as(&path, "signal-svc").unwrap();
    let kc = kube::config::Kubeconfig::read_from(&path).unwrap();
    let config =
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .unwrap();
    let nodes: Api<Node> = Api::all(kube::Client::try_from(config).unwrap());
    nodes.list(&ListParams::default()).await.unwrap();
    let last = sim.requests().pop().unwrap();
    assert_eq!(last.method, "GET");
    assert_eq!(last.caller.as_deref(), Some("signal-svc"));
    sim.shutdown().await;
}
