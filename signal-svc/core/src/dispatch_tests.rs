use super::*;
use crate::node::NodeView;

fn ts(s: &str) -> Timestamp {
    s.parse().unwrap()
}
fn t0() -> Timestamp {
    ts("2026-08-01T05:40:00Z")
}

fn view(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: None,
        provider_id: format!("azure:///{name}"),
        internal_ips: vec!["10.0.0.1".into()],
        zone: "eastus-1".into(),
        taints: vec![],
        condition_notice: None,
        spot_notice_handled: false,
        hold: None,
        states: Default::default(),
    }
}

fn set(name: &str, desired: Desired) -> Change {
    let reasons = if desired == Desired::Down {
        vec!["node.kubernetes.io/out-of-service".into()]
    } else {
        vec![]
    };
    Change::Set {
        state: DesiredState {
            node: view(name),
            desired,
            reasons,
            observed_at: t0(),
            deadline: None,
        },
        previous: None,
    }
}

fn removed(name: &str) -> Change {
    Change::Removed {
        node: view(name),
        last: Desired::Down,
    }
}

fn eps(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("10.1.0.{i}:9443")).collect()
}

fn one_endpoint() -> (Dispatcher, String) {
    let mut d = Dispatcher::new();
    d.set_epoch(7);
    d.set_endpoints(eps(1));
    (d, eps(1).remove(0))
}

fn delta_of(k: &Kind) -> (&str, i32, Version) {
    match k {
        Kind::Delta(s) => (
            s.node.as_ref().unwrap().name.as_str(),
            s.desired,
            s.version.unwrap(),
        ),
        Kind::Forget(f) => (
            f.node.as_ref().unwrap().name.as_str(),
            -1,
            f.version.unwrap(),
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn snapshot_then_deltas() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    d.apply(&set("b", Desired::None), t0());
    let snap = d.snapshot(&ep);
    assert_eq!(snap.len(), 2, "every node, a never-down node too");
    assert_eq!(snap[0].desired, AdminState::Down as i32);
    assert_eq!(snap[1].desired, AdminState::None as i32);
    assert!(
        d.next_deltas(&ep, 100).is_empty(),
        "the snapshot supersedes pending deltas"
    );
    let touched = d.apply(&set("b", Desired::Down), t0());
    assert_eq!(touched, vec![ep.clone()]);
    let deltas = d.next_deltas(&ep, 100);
    assert_eq!(deltas.len(), 1);
    assert_eq!(delta_of(&deltas[0]).0, "b");
}

#[test]
fn a_slow_stream_gets_only_the_latest_state() {
    let (mut d, ep) = one_endpoint();
    for i in 0..50 {
        let desired = if i % 2 == 0 {
            Desired::Down
        } else {
            Desired::None
        };
        d.apply(&set("a", desired), t0());
        d.apply(&set(&format!("n{i}"), Desired::Down), t0());
    }
    d.apply(&set("a", Desired::Down), t0());
    assert_eq!(d.pending(&ep), 51, "one entry per node, not per change");
    let deltas = d.next_deltas(&ep, 1000);
    let a: Vec<_> = deltas
        .iter()
        .map(delta_of)
        .filter(|(n, ..)| *n == "a")
        .collect();
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].1, AdminState::Down as i32);
    assert_eq!(
        a[0].2,
        *d.current("uid-a").unwrap().version.as_ref().unwrap()
    );
}

#[test]
fn versions_grow_within_and_across_epochs() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    let v1 = d.current("uid-a").unwrap().version.unwrap();
    d.apply(&set("a", Desired::None), t0());
    let v2 = d.current("uid-a").unwrap().version.unwrap();
    assert!(cutover_proto::VersionExt::is_newer_than(&v2, &v1));
    d.set_epoch(8);
    let v3 = d.current("uid-a").unwrap().version.unwrap();
    assert_eq!(v3.epoch, 8);
    assert!(cutover_proto::VersionExt::is_newer_than(&v3, &v2));
    assert_eq!(d.snapshot(&ep)[0].version, Some(v3));
}

/// Level-triggered restore: `None` is asserted for as long as the node exists, not for a
/// while in one process's memory, so an actuator can always repair a stray `Down`.
#[test]
fn restores_are_asserted_for_as_long_as_the_node_exists() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    d.apply(&set("a", Desired::None), t0());
    let snap = d.snapshot(&ep);
    assert_eq!(snap.len(), 1);
    assert_eq!(snap[0].desired, AdminState::None as i32);
    // However long later, and on a new leader's dispatcher built from the same nodes.
    d.set_epoch(8);
    assert_eq!(d.snapshot(&ep)[0].desired, AdminState::None as i32);
    let mut fresh = Dispatcher::new();
    fresh.set_epoch(9);
    fresh.set_endpoints(eps(1));
    fresh.apply(&set("a", Desired::None), t0());
    assert_eq!(fresh.snapshot(&ep)[0].desired, AdminState::None as i32);
}

/// A periodic resync on a live stream re-sends every node's latest state as deltas.
#[test]
fn resync_marks_every_node_again() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    d.apply(&set("b", Desired::None), t0());
    d.snapshot(&ep);
    assert_eq!(d.pending(&ep), 0);
    d.resync(&ep);
    let names: Vec<String> = d
        .next_deltas(&ep, 10)
        .iter()
        .map(|k| delta_of(k).0.to_owned())
        .collect();
    assert_eq!(names, vec!["a", "b"]);
}

#[test]
fn removed_nodes_are_forgotten() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    d.snapshot(&ep);
    d.apply(&removed("a"), t0());
    let deltas = d.next_deltas(&ep, 10);
    assert_eq!(deltas.len(), 1);
    assert_eq!(delta_of(&deltas[0]).1, -1, "a Forget");
    assert!(d.snapshot(&ep).is_empty());
    assert!(d.apply(&removed("never-asserted"), t0()).is_empty());
}

#[test]
fn a_replacement_under_the_same_name_gets_its_none_asserted() {
    let (mut d, ep) = one_endpoint();
    d.apply(&set("a", Desired::Down), t0());
    d.snapshot(&ep);
    d.apply(&removed("a"), t0());
    d.next_deltas(&ep, 10);
    // The node registers again (new UID, no trigger taint): its entries still read the old
    // node's Down, so None is asserted for the new UID, like for every node.
    let mut again = set("a", Desired::None);
    if let Change::Set { state, .. } = &mut again {
        state.node.uid = "uid-a-2".into();
    }
    d.apply(&again, t0());
    let deltas = d.next_deltas(&ep, 10);
    assert_eq!(deltas.len(), 1);
    assert_eq!(delta_of(&deltas[0]).1, AdminState::None as i32);
    assert_eq!(d.snapshot(&ep)[0].node.as_ref().unwrap().uid, "uid-a-2");
}

#[test]
fn every_endpoint_gets_every_node() {
    let mut d = Dispatcher::new();
    d.set_epoch(1);
    d.set_endpoints(eps(3));
    let names: Vec<String> = (0..30).map(|i| format!("node-{i}")).collect();
    for n in &names {
        let touched = d.apply(&set(n, Desired::Down), t0());
        assert_eq!(touched, eps(3), "a change wakes every stream");
    }
    for ep in eps(3) {
        let got: Vec<String> = d
            .next_deltas(&ep, 1000)
            .iter()
            .map(|k| delta_of(k).0.to_owned())
            .collect();
        assert_eq!(got, names, "{ep} gets every node, in order");
    }
    // A new endpoint gets everything (in its snapshot); the others are not disturbed.
    let mut four = eps(3);
    four.push("10.1.0.9:9443".into());
    assert_eq!(d.set_endpoints(four.clone()), vec![four[3].clone()]);
    assert_eq!(d.snapshot(&four[3]).len(), 30);
    for ep in eps(3) {
        assert_eq!(d.pending(&ep), 0);
    }
    // A removal is forgotten on every stream.
    d.apply(&removed("node-3"), t0());
    for ep in &four {
        let k = d.next_deltas(ep, 10);
        assert_eq!(k.len(), 1);
        assert_eq!(delta_of(&k[0]), ("node-3", -1, delta_of(&k[0]).2));
    }
    // A removed endpoint's outbox is gone.
    d.set_endpoints(eps(2));
    d.apply(&set("late", Desired::Down), t0());
    assert_eq!(d.pending(&eps(3)[2]), 0);
    assert_eq!(d.pending(&eps(2)[1]), 1);
}

#[test]
fn nodes_wait_for_an_endpoint() {
    let mut d = Dispatcher::new();
    d.set_epoch(1);
    assert!(d.apply(&set("a", Desired::Down), t0()).is_empty());
    let touched = d.set_endpoints(eps(1));
    assert_eq!(touched, eps(1));
    assert_eq!(d.snapshot(&eps(1)[0]).len(), 1);
}

/// N1: after a term was lost, the same process re-took its own Lease record under the same
/// epoch. The sequence restarted at 0 and every actuator, which still held versions of that
/// epoch up to the old count, dropped each new cut and restore as stale.
#[test]
fn the_same_epoch_again_never_reuses_a_version() {
    let mut d = Dispatcher::new();
    d.set_endpoints(vec!["a:1".into()]);
    d.set_epoch(4);
    for i in 0..5 {
        let desired = if i % 2 == 0 {
            Desired::Down
        } else {
            Desired::None
        };
        d.apply(&set("n1", desired), t0());
    }
    d.apply(&set("n2", Desired::None), t0());
    let before = d.current("uid-n1").unwrap().version.unwrap();
    d.set_epoch(4);
    d.apply(&set("n2", Desired::Down), t0());
    let after = d.current("uid-n2").unwrap().version.unwrap();
    assert_eq!(after.epoch, 4);
    assert!(
        after.seq > before.seq,
        "{after:?} must be newer than anything sent under the epoch ({before:?})"
    );
    // A new epoch re-stamps every state above all of the previous epoch's.
    d.set_epoch(5);
    assert_eq!(d.current("uid-n1").unwrap().version.unwrap().epoch, 5);
}
