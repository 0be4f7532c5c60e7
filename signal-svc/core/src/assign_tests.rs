use super::*;

const VALID: Duration = Duration::from_secs(3);

fn lbs(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("lb-{i}")).collect()
}

/// Sends what is due on every stream, as the stream tasks do.
fn deliver(a: &mut Assigner, ids: &[StreamId], now: Instant) -> BTreeMap<StreamId, Assignment> {
    let mut out = BTreeMap::new();
    for id in ids {
        if let Some(m) = a.due(*id, now) {
            a.sent(*id, &m, now);
            out.insert(*id, m);
        }
    }
    out
}

/// Sends what is due and lets every replica acknowledge it, until nothing changes (`sends`
/// counts each stream's assignments: a replica's k-th `Renew` acknowledges the k-th).
fn settle(a: &mut Assigner, sends: &mut BTreeMap<StreamId, u64>, now: Instant) {
    for _ in 0..4 {
        let ids: Vec<StreamId> = sends.keys().copied().collect();
        for (id, _) in deliver(a, &ids, now) {
            *sends.entry(id).or_default() += 1;
        }
        for (id, n) in sends.iter() {
            a.acked(*id, *n, now);
        }
    }
}

/// Begins `epoch` one grant lifetime before `now`, so its quiet period is over at `now`.
fn begin_settled(a: &mut Assigner, epoch: u64, now: Instant) {
    let start = now
        .checked_sub(VALID)
        .expect("the clock runs past one grant lifetime");
    a.begin(epoch, start);
    a.tick(now);
}

fn owners(a: &Assigner) -> BTreeMap<String, Option<String>> {
    a.owners().into_iter().collect()
}

#[test]
fn every_load_balancer_has_exactly_one_owner_and_joins_move_only_a_share() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 7, t);
    let (x, o) = a.join("10.0.0.1:9443", &lbs(12), t);
    assert!(o.changed);
    let sent = deliver(&mut a, &[x], t);
    assert_eq!(
        sent[&x].load_balancers.len(),
        12,
        "the only replica writes all"
    );
    assert_eq!(sent[&x].leader_epoch, 7);
    assert_eq!(
        sent[&x].valid_for,
        Some(prost_types::Duration {
            seconds: 3,
            nanos: 0
        })
    );
    let (y, _) = a.join("10.0.0.2:9443", &lbs(12), t);
    let (z, _) = a.join("10.0.0.3:9443", &lbs(12), t);
    let first = deliver(&mut a, &[x, y, z], t);
    assert_eq!(first.len(), 3, "a live-set change is sent to every stream");
    // Two-phase hand-over: x still holds everything until it acknowledges its smaller
    // share (its second Renew), so y and z get nothing yet: never two writers at once.
    assert!(first[&y].load_balancers.is_empty() && first[&z].load_balancers.is_empty());
    assert!(first[&x].load_balancers.len() < 12);
    assert!(a.acked(x, 2, t).changed, "x released its old share");
    let sent = deliver(&mut a, &[x, y, z], t);
    assert_eq!(
        sent.len(),
        3,
        "the hand-over is a new generation for every stream"
    );
    let gens: BTreeSet<u64> = sent.values().map(|m| m.generation).collect();
    assert_eq!(gens.len(), 1, "one generation per change");
    let mut all: Vec<&String> = sent.values().flat_map(|m| &m.load_balancers).collect();
    all.sort();
    assert_eq!(all.len(), 12, "each load balancer exactly once");
    all.dedup();
    assert_eq!(all.len(), 12);
    assert!(sent.values().all(|m| !m.load_balancers.is_empty()));

    // A fourth replica takes only what it wins; nothing moves between the others.
    let mut sends: BTreeMap<StreamId, u64> = [(x, 2), (y, 2), (z, 2)].into();
    settle(&mut a, &mut sends, t);
    let before = owners(&a);
    let (w, _) = a.join("10.0.0.4:9443", &lbs(12), t);
    sends.insert(w, 0);
    settle(&mut a, &mut sends, t);
    for (lb, owner) in owners(&a) {
        if owner.as_deref() != Some("10.0.0.4:9443") {
            assert_eq!(before[&lb], owner, "{lb} moved between old replicas");
        }
    }
}

#[test]
fn a_dead_holder_is_replaced_only_once_its_assignment_lapsed() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 1, t);
    let (x, _) = a.join("a:1", &lbs(8), t);
    let (y, _) = a.join("b:1", &lbs(8), t);
    let sent = deliver(&mut a, &[x, y], t);
    let held_by_x = sent[&x].load_balancers.clone();
    assert!(!held_by_x.is_empty());
    // Heartbeats keep going; the last one on x is at t+2s.
    let t2 = t + Duration::from_secs(2);
    assert_eq!(deliver(&mut a, &[x, y], t2).len(), 2);
    // x dies at t+2.5s: its load balancers have no owner until t+5s.
    let o = a.leave(x, t2 + Duration::from_millis(500));
    assert!(o.changed);
    for lb in &held_by_x {
        assert_eq!(owners(&a)[lb], None, "{lb} must not overlap");
    }
    assert_eq!(a.next_fence_expiry(), Some(t2 + VALID));
    let sent = deliver(&mut a, &[y], t2 + Duration::from_millis(500));
    assert_eq!(sent[&y].load_balancers.len(), 8 - held_by_x.len());
    let early = a.tick(t2 + VALID - Duration::from_millis(1));
    assert!(!early.changed);
    let o = a.tick(t2 + VALID);
    assert!(o.changed);
    assert_eq!(o.failed_over, held_by_x.len());
    let sent = deliver(&mut a, &[y], t2 + VALID);
    assert_eq!(sent[&y].load_balancers, lbs(8));
}

#[test]
fn a_stream_never_told_anything_leaves_without_fence() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 1, t);
    let (x, _) = a.join("a:1", &lbs(4), t);
    let (y, _) = a.join("b:1", &lbs(4), t);
    deliver(&mut a, &[y], t);
    a.leave(x, t);
    assert_eq!(a.next_fence_expiry(), None);
    assert!(owners(&a).values().all(|o| o.as_deref() == Some("b:1")));
}

#[test]
fn heartbeats_repeat_the_same_generation_and_reconnects_get_a_newer_one() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 1, t);
    let (x, _) = a.join("a:1", &lbs(2), t);
    let first = a.due(x, t).unwrap();
    a.sent(x, &first, t);
    assert_eq!(a.due(x, t + Duration::from_millis(999)), None);
    assert_eq!(a.next_due(x, t), Some(t + Duration::from_secs(1)));
    let hb = a.due(x, t + Duration::from_secs(1)).unwrap();
    assert_eq!(hb, first, "heartbeat: same content, same generation");

    // The endpoint reconnects before its old stream's end is processed.
    let (x2, _) = a.join("a:1", &lbs(2), t + Duration::from_secs(1));
    let again = a.due(x2, t + Duration::from_secs(1)).unwrap();
    assert!(again.generation > first.generation);
    assert_eq!(again.load_balancers, lbs(2));
    // The old stream's late end does not take anything from the new one.
    a.sent(x2, &again, t + Duration::from_secs(1));
    a.leave(x, t + Duration::from_secs(1));
    let next = a.due(x2, t + Duration::from_secs(1)).unwrap();
    assert_eq!(next.load_balancers, lbs(2), "kept: it already holds them");
}

#[test]
fn a_new_leadership_starts_from_nothing() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 1, t);
    let (x, _) = a.join("a:1", &lbs(3), t);
    deliver(&mut a, &[x], t);
    begin_settled(&mut a, 2, t);
    assert!(a.managed().is_empty());
    assert_eq!(a.due(x, t), None, "streams of the old epoch are gone");
    let (y, _) = a.join("a:1", &lbs(3), t);
    assert_eq!(a.due(y, t).unwrap().leader_epoch, 2);
}

#[test]
fn managed_is_the_union_of_what_streams_report() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 1, t);
    a.join("a:1", &["kubernetes".into()], t);
    a.join(
        "b:1",
        &["kubernetes".into(), "kubernetes-internal".into()],
        t,
    );
    assert_eq!(
        a.managed().iter().cloned().collect::<Vec<_>>(),
        vec!["kubernetes".to_owned(), "kubernetes-internal".to_owned()]
    );
    assert!(owners(&a).values().all(Option::is_some));
}

#[test]
fn a_changed_managed_set_reassigns_on_the_same_streams() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 4, t);
    let (x, _) = a.join("a:1", &lbs(6), t);
    let (y, _) = a.join("b:1", &lbs(6), t);
    let first = deliver(&mut a, &[x, y], t);
    let before = owners(&a);
    // Both replicas gain lb-6 and lose lb-0 (a multi-SLB configuration changed).
    let now: Vec<String> = (1..7).map(|i| format!("lb-{i}")).collect();
    assert!(a.manages(x, &now, t).changed);
    assert!(before["lb-0"].is_some());
    assert_eq!(
        owners(&a)["lb-0"].as_deref(),
        Some("b:1"),
        "b still manages lb-0: it goes to b at once"
    );
    a.manages(y, &now, t);
    // Unchanged again: nothing to send.
    assert_eq!(a.manages(y, &now, t), Outcome::default());
    let sent = deliver(&mut a, &[x, y], t);
    let mut all: Vec<&String> = sent.values().flat_map(|m| &m.load_balancers).collect();
    all.sort();
    assert_eq!(
        all,
        now.iter().collect::<Vec<_>>(),
        "each managed LB once, lb-0 gone"
    );
    assert_eq!(
        a.managed().iter().cloned().collect::<Vec<_>>(),
        now,
        "the removed LB left the plan at once (its holder said it no longer manages it)"
    );
    // What each stream kept, it still has (no gap): only lb-6 moved anywhere.
    for (id, m) in &first {
        for lb in m.load_balancers.iter().filter(|l| *l != "lb-0") {
            assert!(sent[id].load_balancers.contains(lb), "{lb} moved");
        }
    }
    assert!(owners(&a)["lb-6"].is_some());
    // Only a replica that manages an LB gets it.
    let only_x: Vec<String> = (1..8).map(|i| format!("lb-{i}")).collect();
    a.manages(x, &only_x, t);
    assert_eq!(owners(&a)["lb-7"].as_deref(), Some("a:1"));
}

/// N1: the leader re-took its own Lease record under the same epoch after its streams had
/// closed. Restarting the generation at 0 made every actuator refuse the new assignments as
/// older than the ones it held, so nothing was written until the count caught up.
#[test]
fn the_same_epoch_again_goes_on_with_its_generations_and_fences() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 5, t);
    let (x, _) = a.join("a:1", &lbs(4), t);
    let (y, _) = a.join("b:1", &lbs(4), t);
    let first = deliver(&mut a, &[x, y], t);
    let held_by_x: Vec<String> = first[&x].load_balancers.clone();
    let before = a.generation();
    // The term was lost (streams closed) and the same record re-taken 1 s later.
    let later = t + Duration::from_secs(1);
    a.leave(x, later);
    a.leave(y, later);
    a.begin(5, later);
    assert_eq!(a.quiet_until(), None, "no quiet period within an epoch");
    let (y2, _) = a.join("b:1", &lbs(4), later);
    let again = deliver(&mut a, &[y2], later);
    assert!(
        again[&y2].generation > before,
        "generations never go backwards"
    );
    for lb in &held_by_x {
        assert!(
            !again[&y2].load_balancers.contains(lb),
            "{lb}: x's grant still lives; its fence must hold across the re-take"
        );
    }
}

/// A new epoch gives no load balancer to anyone before the previous leader's grants have
/// lapsed: an actuator that never hears the new `Hello` (partitioned from the new leader,
/// frozen) keeps writing under its old grant until then.
#[test]
fn a_new_epoch_assigns_nothing_until_old_grants_have_lapsed() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    a.begin(8, t);
    assert_eq!(a.quiet_until(), Some(t + VALID));
    let (x, _) = a.join("a:1", &lbs(3), t);
    let first = deliver(&mut a, &[x], t);
    assert!(
        first[&x].load_balancers.is_empty(),
        "assigned, but nothing yet"
    );
    assert_eq!(a.next_fence_expiry(), Some(t + VALID));
    let mid = t + VALID / 2;
    a.tick(mid);
    assert!(
        deliver(&mut a, &[x], mid)
            .get(&x)
            .is_none_or(|m| m.load_balancers.is_empty())
    );
    let end = t + VALID;
    assert!(a.tick(end).changed);
    let sent = deliver(&mut a, &[x], end);
    assert_eq!(sent[&x].load_balancers.len(), 3);
    assert!(sent[&x].generation > first[&x].generation);
}

/// Found by the fleet simulation (seed 18 among 450 of 1,000): a joining replica took its
/// share at once while the old holder, slow or frozen, still held it under its grant: two
/// writers for up to `valid_for`. Without an acknowledgement the share moves once the grants
/// that gave it to the old holder have lapsed.
#[test]
fn a_share_moves_on_acknowledgement_or_at_the_old_grants_lapse() {
    let t = Instant::now();
    let mut a = Assigner::new(VALID);
    begin_settled(&mut a, 2, t);
    let (x, _) = a.join("a:1", &lbs(6), t);
    deliver(&mut a, &[x], t);
    let (y, _) = a.join("b:1", &lbs(6), t);
    let sent = deliver(&mut a, &[x, y], t);
    assert!(
        sent[&y].load_balancers.is_empty(),
        "x may still write all six"
    );
    assert_eq!(a.next_fence_expiry(), Some(t + VALID));
    // No acknowledgement (x frozen): the share moves when x's first grant has lapsed.
    let lapse = t + VALID;
    assert!(a.tick(lapse).changed);
    let sent = deliver(&mut a, &[x, y], lapse);
    assert!(!sent[&y].load_balancers.is_empty());
    let mut all: Vec<&String> = sent.values().flat_map(|m| &m.load_balancers).collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 6);
}
