//! kube-runtime's watcher against the simulator: paged initial lists, live events, surviving
//! closed watches, compaction (410 → re-list), streaming lists, retries of injected 503s,
//! and the two event views on one watch.

#![allow(clippy::unwrap_used)] // tests may unwrap (clippy.toml covers #[test] fns only)

mod common;

use common::{client, sim, sim_with};
use cutover_testkit::eventually;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event as CoreEvent, Node, ObjectReference};
use k8s_openapi::api::events::v1::Event as EventV1;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher::{self, Event};
use kube_sim::FailRule;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// What a watcher stream delivered, per node name: every label value `seq` it saw.
#[derive(Default, Debug)]
struct Seen {
    inits: usize,
    init_dones: usize,
    errors: Vec<String>,
    seqs: BTreeMap<String, Vec<String>>,
}

/// Runs a watcher in the background, recording what it sees.
fn record(api: Api<Node>, config: watcher::Config) -> Arc<Mutex<Seen>> {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let out = seen.clone();
    tokio::spawn(async move {
        let mut stream = watcher::watcher(api, config).boxed();
        while let Some(item) = stream.next().await {
            let mut s = out.lock();
            match item {
                Ok(Event::Init) => s.inits += 1,
                Ok(Event::InitDone) => s.init_dones += 1,
                Ok(Event::Apply(n)) | Ok(Event::InitApply(n)) => {
                    let name = n.metadata.name.clone().unwrap();
                    if let Some(seq) = n.metadata.labels.as_ref().and_then(|l| l.get("seq")) {
                        s.seqs.entry(name).or_default().push(seq.clone());
                    }
                }
                Ok(Event::Delete(_)) => {}
                Err(e) => s.errors.push(e.to_string()),
            }
        }
    });
    seen
}

async fn set_seq(api: &Api<Node>, name: &str, seq: usize) {
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"seq": seq.to_string()}}})),
    )
    .await
    .unwrap();
}

const SPOT: &str = "aks-spotpool-34567890-vmss000000";

#[tokio::test]
async fn paged_initial_list_then_live_events() {
    let sim = sim_with(7, |_| {}).await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(nodes.clone(), watcher::Config::default().page_size(2)),
    )
    .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    assert_eq!(reader.state().len(), 7);

    // Four pages of at most two items, all continuing one snapshot, then a watch from it.
    let log = sim.requests();
    let lists: Vec<_> = log
        .iter()
        .filter(|r| r.path.starts_with("/api/v1/nodes?") && !r.path.contains("watch=true"))
        .collect();
    assert_eq!(lists.len(), 4, "{lists:#?}");
    assert!(lists[1..].iter().all(|r| r.path.contains("continue=")));

    set_seq(&nodes, SPOT, 1).await;
    wait_label(&reader, SPOT, "1").await;
    sim.shutdown().await;
}

async fn wait_label(reader: &Store<Node>, name: &str, want: &str) {
    let key = reflector::ObjectRef::new(name);
    eventually(&format!("{name} seq={want}"), || {
        let got = reader.get(&key).and_then(|n| {
            n.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("seq").cloned())
        });
        async move { (got.as_deref() == Some(want)).then_some(()) }
    })
    .await;
}

#[tokio::test]
async fn closed_watches_lose_and_duplicate_nothing() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let seen = record(nodes.clone(), watcher::Config::default());
    eventually("initial list", || {
        let done = seen.lock().init_dones == 1;
        async move { done.then_some(()) }
    })
    .await;
    for seq in 1..=30 {
        set_seq(&nodes, SPOT, seq).await;
        if seq % 5 == 0 {
            sim.close_watches();
        }
    }
    eventually("all 30 updates", || {
        let n = seen.lock().seqs.get(SPOT).map_or(0, Vec::len);
        async move { (n >= 30).then_some(()) }
    })
    .await;
    {
        let s = seen.lock();
        let want: Vec<String> = (1..=30).map(|i| i.to_string()).collect();
        assert_eq!(s.seqs[SPOT], want, "every update exactly once, in order");
        assert_eq!(
            s.inits, 1,
            "re-watches resume from the RV without a re-list"
        );
        assert!(s.errors.is_empty(), "{:?}", s.errors);
    }
    // More than one watch request was made.
    let watches = sim
        .requests()
        .iter()
        .filter(|r| r.path.contains("watch=true"))
        .count();
    assert!(watches >= 2, "{watches}");
    sim.shutdown().await;
}

#[tokio::test]
async fn compaction_forces_a_relist_through_an_in_stream_410() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let seen = record(nodes.clone(), watcher::Config::default());
    eventually("initial list", || {
        let done = seen.lock().init_dones == 1;
        async move { done.then_some(()) }
    })
    .await;
    // Close the watch and hold the re-watch; write and compact meanwhile: the re-watch from
    // the old RV is then too old.
    let guard = sim.requests().len();
    sim.pause_watches();
    sim.close_watches();
    set_seq(&nodes, SPOT, 7).await;
    sim.compact();
    sim.resume_watches();
    eventually("re-list after 410", || {
        let s = seen.lock();
        let ok = s.inits == 2 && s.init_dones == 2;
        async move { ok.then_some(()) }
    })
    .await;
    {
        let s = seen.lock();
        assert!(
            s.errors
                .iter()
                .any(|e| e.contains("410") || e.contains("too old")),
            "{:?}",
            s.errors
        );
        assert_eq!(
            s.seqs[SPOT].last().map(String::as_str),
            Some("7"),
            "the re-list saw the change"
        );
    }
    // The watch that hit the compaction got HTTP 200 (the error was in-stream).
    let log = sim.requests();
    assert!(
        log[guard..]
            .iter()
            .any(|r| r.path.contains("watch=true") && r.status == 200)
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn streaming_list_ends_with_the_initial_events_marker() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let seen = record(nodes.clone(), watcher::Config::default().streaming_lists());
    eventually("initial events end", || {
        let done = seen.lock().init_dones == 1;
        async move { done.then_some(()) }
    })
    .await;
    set_seq(&nodes, SPOT, 1).await;
    eventually("update after the streaming list", || {
        let got = seen.lock().seqs.get(SPOT).cloned();
        async move { (got == Some(vec!["1".to_string()])).then_some(()) }
    })
    .await;
    let log = sim.requests();
    let gets: Vec<_> = log.iter().filter(|r| r.method == "GET").collect();
    assert!(
        gets.iter().all(|r| r.path.contains("watch=true")),
        "no LIST in streaming mode: {gets:#?}"
    );
    assert!(log[0].path.contains("sendInitialEvents=true"));
    sim.shutdown().await;
}

#[tokio::test]
async fn injected_503s_are_retried_by_kube() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    sim.fail_next(FailRule::new(503, 3).path_prefix("/api/v1/nodes"));
    let n = nodes.get(SPOT).await.unwrap();
    assert_eq!(n.metadata.name.as_deref(), Some(SPOT));
    let statuses: Vec<u16> = sim.requests().iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 503, 503, 200]);

    // A watcher survives them too.
    sim.fail_next(FailRule::new(429, 2).verb("LIST"));
    let seen = record(nodes.clone(), watcher::Config::default());
    eventually("initial list despite 429s", || {
        let done = seen.lock().init_dones == 1;
        async move { done.then_some(()) }
    })
    .await;
    sim.shutdown().await;
}

#[tokio::test]
async fn bookmarks_arrive_on_the_configured_interval() {
    let sim = sim_with(6, |o| o.bookmark_interval = Duration::from_millis(200)).await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let rv = sim.resource_version().to_string();
    let params = kube::api::WatchParams::default();
    let mut stream = nodes.watch(&params, &rv).await.unwrap().boxed();
    let first = tokio::time::timeout(Duration::from_secs(30), stream.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    match first {
        kube::api::WatchEvent::Bookmark(b) => assert_eq!(b.metadata.resource_version, rv),
        other => panic!("expected a bookmark, got {other:?}"),
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn too_old_watch_is_an_in_stream_error() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    set_seq(&nodes, SPOT, 1).await;
    sim.compact();
    let mut stream = nodes
        .watch(&kube::api::WatchParams::default(), "2")
        .await
        .unwrap()
        .boxed();
    match stream.next().await.unwrap().unwrap() {
        kube::api::WatchEvent::Error(e) => {
            assert_eq!((e.code, e.reason.as_str()), (410, "Expired"));
            assert!(
                e.message.starts_with("too old resource version: 2 ("),
                "{}",
                e.message
            );
        }
        other => panic!("expected ERROR, got {other:?}"),
    }
    assert!(
        stream.next().await.is_none(),
        "the stream ends after the error"
    );
    sim.shutdown().await;
}

#[tokio::test]
async fn events_cross_views_on_watches() {
    let sim = sim().await;
    let c = client(&sim);
    let core_api: Api<CoreEvent> = Api::namespaced(c.clone(), "default");
    let v1_api: Api<EventV1> = Api::namespaced(c.clone(), "default");
    let core_names = Arc::new(Mutex::new(Vec::<String>::new()));
    let v1_names = Arc::new(Mutex::new(Vec::<String>::new()));
    {
        let names = core_names.clone();
        let api: Api<CoreEvent> = Api::all(c.clone());
        let cfg = watcher::Config::default().fields("involvedObject.kind=Node");
        tokio::spawn(async move {
            let mut s = watcher::watcher(api, cfg).applied_objects().boxed();
            while let Some(Ok(e)) = s.next().await {
                names.lock().push(e.metadata.name.unwrap());
            }
        });
        let names = v1_names.clone();
        let api: Api<EventV1> = Api::all(c.clone());
        let cfg = watcher::Config::default().fields("regarding.kind=Node");
        tokio::spawn(async move {
            let mut s = watcher::watcher(api, cfg).applied_objects().boxed();
            while let Some(Ok(e)) = s.next().await {
                names.lock().push(e.metadata.name.unwrap());
            }
        });
    }
    let node_ref = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(SPOT.into()),
        ..Default::default()
    };
    core_api
        .create(
            &PostParams::default(),
            &CoreEvent {
                metadata: ObjectMeta {
                    name: Some("from-core".into()),
                    ..Default::default()
                },
                involved_object: node_ref.clone(),
                reason: Some("PreemptScheduled".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    v1_api
        .create(
            &PostParams::default(),
            &EventV1 {
                metadata: ObjectMeta {
                    name: Some("from-v1".into()),
                    ..Default::default()
                },
                event_time: Some(MicroTime(k8s_openapi::jiff::Timestamp::now())),
                regarding: Some(node_ref),
                reporting_controller: Some("cutover".into()),
                reporting_instance: Some("i".into()),
                action: Some("A".into()),
                reason: Some("R".into()),
                type_: Some("Normal".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    for (what, names) in [
        ("core watch", &core_names),
        ("events.k8s.io watch", &v1_names),
    ] {
        eventually(what, || {
            let mut got = names.lock().clone();
            got.sort();
            async move { (got == ["from-core", "from-v1"]).then_some(()) }
        })
        .await;
    }
    sim.shutdown().await;
}

#[tokio::test]
async fn selector_watches_see_objects_enter_and_leave() {
    let sim = sim().await;
    let nodes: Api<Node> = Api::all(client(&sim));
    let (reader, writer) = reflector::store::<Node>();
    let stream = reflector::reflector(
        writer,
        watcher::watcher(
            nodes.clone(),
            watcher::Config::default().labels("cutover=blue"),
        ),
    )
    .applied_objects();
    tokio::spawn(async move {
        futures::pin_mut!(stream);
        while stream.next().await.is_some() {}
    });
    reader.wait_until_ready().await.unwrap();
    assert!(reader.state().is_empty());
    let label = |v: Option<&str>| Patch::Merge(json!({"metadata": {"labels": {"cutover": v}}}));
    nodes
        .patch(SPOT, &PatchParams::default(), &label(Some("blue")))
        .await
        .unwrap();
    eventually("node enters the selection", || {
        let n = reader.state().len();
        async move { (n == 1).then_some(()) }
    })
    .await;
    // Stops matching: the watch sends DELETED, the reflector drops it.
    nodes
        .patch(SPOT, &PatchParams::default(), &label(Some("green")))
        .await
        .unwrap();
    eventually("node leaves the selection", || {
        let n = reader.state().len();
        async move { (n == 0).then_some(()) }
    })
    .await;
    sim.shutdown().await;
}
