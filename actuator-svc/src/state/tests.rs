use super::lbset::LbSet;
use super::*;
use crate::lb::index::IndexedEntry;

/// A replica writing both LBs before any assignment: standalone (a fleet replica owns
/// nothing until assigned; the tests that need that assign explicitly).
fn mk_store() -> Store {
    let s = Store::new(
        &["a".to_string(), "b".to_string()],
        Arc::new(Metrics::new()),
    );
    s.set_standalone(true);
    s
}

fn mk_node(uid: &str) -> NodeRef {
    NodeRef {
        name: format!("node-{uid}"),
        uid: uid.into(),
        ..Default::default()
    }
}

fn v(epoch: u64, seq: u64) -> Version {
    Version { epoch, seq }
}

fn offer(s: &Store, uid: &str, desired: Admin, ver: Version) -> Offer {
    s.offer(
        uid.into(),
        mk_node(uid),
        NodeSpec::default(),
        desired,
        ver,
        Source::Stream,
        vec![],
        None,
    )
}

/// A tool's `Down` for the node `name`, under `key`.
fn offer_tool(s: &Store, key: String, name: &str) -> Offer {
    s.offer(
        key,
        mk_node(name),
        NodeSpec::default(),
        Admin::Down,
        s.next_tool_version(),
        Source::Tool,
        vec![],
        None,
    )
}

fn phases(rx: &mut broadcast::Receiver<NodeResult>) -> Vec<(u64, ResultPhase)> {
    let mut out = Vec::new();
    while let Ok(r) = rx.try_recv() {
        out.push((
            r.version.unwrap().seq,
            ResultPhase::try_from(r.phase).unwrap(),
        ));
    }
    out
}

#[test]
fn stale_versions_are_dropped_per_uid() {
    let s = mk_store();
    assert_eq!(offer(&s, "u1", Admin::Down, v(1, 5)), Offer::Applied);
    assert_eq!(offer(&s, "u1", Admin::None, v(1, 4)), Offer::Stale);
    assert_eq!(offer(&s, "u1", Admin::None, v(1, 5)), Offer::Stale);
    assert_eq!(
        offer(&s, "u2", Admin::Down, v(1, 1)),
        Offer::Applied,
        "other uid independent"
    );
    assert_eq!(
        offer(&s, "u1", Admin::None, v(2, 0)),
        Offer::Applied,
        "new epoch wins"
    );
    // Two streams of the leader: the Forget comes on one while the other may still deliver.
    let (s1, s2) = (s.open_stream(), s.open_stream());
    assert_eq!(s.forget("u1", "u1", v(1, 9), s1), Offer::Stale);
    assert_eq!(s.forget("u1", "u1", v(2, 1), s1), Offer::Applied);
    assert_eq!(
        offer(&s, "u1", Admin::Down, v(2, 1)),
        Offer::Stale,
        "forget version remembered while another stream is open"
    );
    s.close_stream(s2);
    assert_eq!(s.map_sizes()[2], 1, "u2 only: u1's version went with s2");
}

/// A Forget's version is kept against late messages of the streams open when it came, and no
/// longer: the stream that sent it never sends the node again below it (the leader re-adds a
/// node under a newer version), and a stream opened later starts from a snapshot without it.
#[test]
fn a_forget_is_remembered_until_the_streams_open_then_have_closed() {
    let s = mk_store();
    let old = s.open_stream();
    let current = s.open_stream();
    assert_eq!(offer(&s, "u1", Admin::Down, v(1, 5)), Offer::Applied);
    assert_eq!(s.forget("u1", "u1", v(1, 6), current), Offer::Applied);
    let later = s.open_stream();
    // The old stream's late message for the node is dropped.
    assert_eq!(offer(&s, "u1", Admin::Down, v(1, 5)), Offer::Stale);
    s.close_stream(later);
    assert_eq!(offer(&s, "u1", Admin::Down, v(1, 4)), Offer::Stale);
    s.close_stream(old);
    assert_eq!(s.map_sizes(), [0; 6], "nothing left of u1");
    // Re-added by a newer version meanwhile: kept.
    let other = s.open_stream();
    assert_eq!(offer(&s, "u2", Admin::Down, v(1, 7)), Offer::Applied);
    assert_eq!(s.forget("u2", "u2", v(1, 8), current), Offer::Applied);
    assert_eq!(offer(&s, "u2", Admin::Down, v(1, 9)), Offer::Applied);
    s.close_stream(other);
    assert_eq!(offer(&s, "u2", Admin::None, v(1, 8)), Offer::Stale);
}

/// N11: 10,000 nodes created, cut, restored and deleted under one long-lived leader stream
/// (and a snapshot that no longer names some) leave every per-node map of the store at its
/// floor: the nodes that still exist.
#[test]
fn node_churn_leaves_the_per_node_maps_at_their_floor() {
    let s = mk_store();
    let stream = s.open_stream();
    assert_eq!(offer(&s, "stays", Admin::Down, v(1, 1)), Offer::Applied);
    let floor = s.map_sizes();
    let mut seq = 1;
    let mut next = || {
        seq += 1;
        v(1, seq)
    };
    for i in 0..10_000 {
        let uid = format!("u{i}");
        let down = next();
        assert_eq!(offer(&s, &uid, Admin::Down, down), Offer::Applied);
        s.report("a", &uid, down, LbProgress::Effective(vec![]), &[]);
        s.note_status(&uid, down, ResultPhase::Effective);
        let none = next();
        assert_eq!(offer(&s, &uid, Admin::None, none), Offer::Applied);
        s.report("a", &uid, none, LbProgress::Accepted(vec![]), &[]);
        if i % 2 == 0 {
            assert_eq!(s.forget(&uid, &uid, next(), stream), Offer::Applied);
        }
    }
    // The odd ones vanished while the stream was away: the next stream's snapshot names only
    // the node that stays.
    s.close_stream(stream);
    let again = s.open_stream();
    assert_eq!(offer(&s, "stays", Admin::Down, v(1, 1)), Offer::Stale);
    s.retain_stream(&["stays".to_string()].into(), again);
    s.resend_unconfirmed();
    assert_eq!(s.map_sizes(), floor);
    s.close_stream(again);
    assert_eq!(s.map_sizes(), floor);
}

#[test]
fn node_phases_fold_lb_reports() {
    let s = mk_store();
    let mut rx = s.subscribe();
    offer(&s, "u1", Admin::Down, v(1, 1));
    s.report("a", "u1", v(1, 1), LbProgress::Accepted(vec![]), &[]);
    assert!(phases(&mut rx).is_empty(), "b still pending");
    s.report("b", "u1", v(1, 1), LbProgress::NoEntries, &[]);
    assert_eq!(phases(&mut rx), vec![(1, ResultPhase::Accepted)]);
    s.report("a", "u1", v(1, 1), LbProgress::Effective(vec![]), &[]);
    assert_eq!(phases(&mut rx), vec![(1, ResultPhase::Effective)]);
    // Reports for an older version are ignored; a new version supersedes nothing finished.
    offer(&s, "u1", Admin::None, v(1, 2));
    s.report("a", "u1", v(1, 1), LbProgress::Effective(vec![]), &[]);
    assert!(phases(&mut rx).is_empty());
    // None is asserted until effective, then dropped.
    s.report("a", "u1", v(1, 2), LbProgress::Effective(vec![]), &[]);
    s.report("b", "u1", v(1, 2), LbProgress::NoEntries, &[]);
    assert_eq!(
        phases(&mut rx),
        vec![(2, ResultPhase::Accepted), (2, ResultPhase::Effective)]
    );
    assert!(s.targets_for("a").is_empty());
}

#[test]
fn unfinished_versions_are_superseded_and_failures_reported_once() {
    let s = mk_store();
    let mut rx = s.subscribe();
    offer(&s, "u1", Admin::Down, v(1, 1));
    s.fail("u1", v(1, 1), "boom".into(), true);
    s.fail("u1", v(1, 1), "boom".into(), true);
    offer(&s, "u1", Admin::None, v(1, 2));
    assert_eq!(
        phases(&mut rx),
        vec![(1, ResultPhase::Failed), (1, ResultPhase::Superseded)]
    );
}

#[test]
fn snapshot_end_drops_unmentioned_stream_nodes_only() {
    let s = mk_store();
    offer(&s, "u1", Admin::Down, v(1, 1));
    offer(&s, "u2", Admin::Down, v(1, 2));
    offer_tool(&s, "name:x".into(), "x");
    let keep: HashSet<String> = ["u2".to_string()].into();
    assert_eq!(s.retain_stream(&keep, 0), 1);
    let keys: Vec<_> = s.held().into_iter().map(|h| h.key.to_string()).collect();
    assert_eq!(keys, vec!["u2", "name:x"]);
}

#[test]
fn stale_leader_epochs_are_refused() {
    let s = mk_store();
    assert!(s.accept_epoch(3, 77).is_ok());
    assert!(s.accept_epoch(3, 77).is_ok(), "same leader reconnecting");
    assert_eq!(s.accept_epoch(2, 77), Err(3));
    // The Lease deleted and created again by a process that never saw it: the same epoch
    // from another process is refused like an older one (its versions would restart at 1).
    assert_eq!(s.accept_epoch(3, 91), Err(3));
    assert!(s.accept_epoch(4, 91).is_ok(), "raised above: accepted");
    assert_eq!(
        s.accept_epoch(4, 0),
        Ok(()),
        "an unknown incarnation is not refused"
    );
}

#[test]
fn fleet_status_moves_forward_only_and_follows_the_newest_version() {
    let s = mk_store();
    offer(&s, "u1", Admin::Down, v(1, 1));
    let mut changes = s.changes();
    changes.borrow_and_update();
    assert_eq!(s.fleet_phase("u1", v(1, 1)), None);
    s.note_status("u1", v(1, 1), ResultPhase::Accepted);
    assert!(changes.has_changed().unwrap(), "waiting tools are woken");
    s.note_status("u1", v(1, 1), ResultPhase::Effective);
    s.note_status("u1", v(1, 1), ResultPhase::Accepted);
    assert_eq!(
        s.fleet_phase("u1", v(1, 1)),
        Some(ResultPhase::Effective),
        "a late ACCEPTED does not undo EFFECTIVE"
    );
    s.note_status("u1", v(1, 0), ResultPhase::Failed);
    assert_eq!(s.fleet_phase("u1", v(1, 1)), Some(ResultPhase::Effective));
    s.note_status("u1", v(1, 2), ResultPhase::Accepted);
    assert_eq!(s.fleet_phase("u1", v(1, 1)), None, "about an older version");
    assert_eq!(s.fleet_phase("u1", v(1, 2)), Some(ResultPhase::Accepted));
    // A snapshot that no longer names the node drops its status too.
    s.retain_stream(&HashSet::new(), 0);
    assert_eq!(s.fleet_phase("u1", v(1, 2)), None);
}

#[test]
fn a_durable_hold_supersedes_memory_only_tool_states_of_the_node() {
    let s = mk_store();
    for name in ["x", "y"] {
        offer_tool(&s, format!("name:{name}"), name);
    }
    offer(&s, "x", Admin::Down, v(1, 1));
    assert_eq!(s.drop_tool_states("node-x"), 1);
    let left: Vec<_> = s.held().into_iter().map(|h| (h.key, h.source)).collect();
    assert_eq!(
        left,
        vec![
            ("name:y".into(), Source::Tool),
            ("x".into(), Source::Stream)
        ]
    );
    assert_eq!(s.find_stream("", "node-x").map(|h| h.key), Some("x".into()));
}

#[test]
fn lb_sets_hold_positions_past_one_word() {
    let mut a = LbSet::default();
    for i in [0, 5, 63, 64, 130] {
        a.insert(i);
    }
    assert_eq!(a.iter().collect::<Vec<_>>(), vec![0, 5, 63, 64, 130]);
    assert!(a.contains(130) && !a.contains(129) && !a.contains(500));
    let all = LbSet::all(131);
    assert!(a.is_subset(&all) && !all.is_subset(&a));
    a.remove(130);
    a.remove(0);
    assert_eq!(a.iter().collect::<Vec<_>>(), vec![5, 63, 64]);
    assert!(LbSet::default().is_empty() && LbSet::default().is_subset(&a));
}

#[test]
fn results_name_the_covered_lbs_and_render_shared_entries_in_full() {
    let s = mk_store();
    let mut rx = s.subscribe();
    offer_tool(&s, "u1".into(), "u1");
    let version = s.held()[0].version;
    let entry = IndexedEntry {
        lb: "a".into(),
        lb_id: "/subscriptions/s/lb/a".into(),
        pool: "kubernetes".into(),
        entry: "e1".into(),
        ipc: Some((
            "/subscriptions/s/vmss/virtualMachines/".into(),
            "3/networkInterfaces/nic/ipConfigurations/ipconfig1".into(),
        )),
        ip: None,
        admin: Admin::Down,
        settled: true,
        probed: true,
    };
    let ip_based = IndexedEntry {
        entry: "e2".into(),
        ipc: None,
        ip: Some("fd00::7".parse().unwrap()),
        ..entry.clone()
    };
    s.report(
        "a",
        "u1",
        version,
        LbProgress::Effective(vec![entry, ip_based]),
        &[],
    );
    s.report("b", "u1", version, LbProgress::NoEntries, &[]);
    let results: Vec<NodeResult> = std::iter::from_fn(|| rx.try_recv().ok()).collect();
    let effective = results
        .iter()
        .find(|r| r.phase == ResultPhase::Effective as i32)
        .expect("an EFFECTIVE result");
    assert_eq!(effective.load_balancers, vec!["a", "b"]);
    let rendered: Vec<_> = effective
        .entries
        .iter()
        .map(|e| {
            (
                e.load_balancer.as_str(),
                e.load_balancer_id.as_str(),
                e.pool.as_str(),
                e.entry.as_str(),
                e.ip_configuration_id.as_str(),
                e.ip_address.as_str(),
            )
        })
        .collect();
    assert_eq!(
        rendered,
        vec![
            (
                "a",
                "/subscriptions/s/lb/a",
                "kubernetes",
                "e1",
                "/subscriptions/s/vmss/virtualMachines/3/networkInterfaces/nic/ipConfigurations/ipconfig1",
                ""
            ),
            (
                "a",
                "/subscriptions/s/lb/a",
                "kubernetes",
                "e2",
                "",
                "fd00::7"
            ),
        ]
    );
}
