//! Folding per-LB progress into node phases (pure but for the latency metrics): ACCEPTED once
//! each covered LB accepted or had nothing to do, EFFECTIVE once each read back, each emitted
//! once per version and covered set.
//!
//! EFFECTIVE is not latched: an LB that was part of an emitted EFFECTIVE and reads otherwise
//! now (drift found by a re-read, or the LB absent for a `Down`) regresses the version at
//! once: ACCEPTED with `repaired` (the result says so) over the same cover, then EFFECTIVE
//! with `repaired` once the repair reads back. signal-svc takes the version back to ACCEPTED
//! meanwhile, so the drain gate never says what ARM does not show.

use super::held::{Held, LbProgress};
use super::lbset::LbSet;
use crate::lb::index::Admin;
use crate::metrics::Metrics;
use cutover_proto::v1::ResultPhase;

/// A phase to emit: the phase, its note, and the load balancers it covers.
pub(super) type Emit = (ResultPhase, String, LbSet);

/// Whether `p` completes `desired` on its LB. An absent LB holds no entry that could be
/// `Down`, so a `None` is true there; a `Down` is not: the gate says `Down` only on what ARM
/// shows, and a re-created LB comes back with entries that carry no admin state.
fn done(p: &LbProgress, desired: Admin) -> bool {
    match p {
        LbProgress::Effective(_) | LbProgress::NoEntries => true,
        LbProgress::Absent => desired == Admin::None,
        LbProgress::Pending | LbProgress::Accepted(_) => false,
    }
}

/// Records `progress` in `slot` of `h` and returns the phases that became true over `cover`
/// (the load balancers this replica answers for).
pub(super) fn fold(
    h: &mut Held,
    slot: usize,
    progress: LbProgress,
    note: &[String],
    cover: LbSet,
    metrics: &Metrics,
) -> Vec<Emit> {
    let mut emit = Vec::new();
    let Some(at_slot) = h.progress.get_mut(slot) else {
        return emit;
    };
    // Never step back from Effective to Accepted within a version (a late acceptance).
    if matches!(at_slot, LbProgress::Effective(_)) && matches!(progress, LbProgress::Accepted(_)) {
        return emit;
    }
    *at_slot = progress;
    let desired = h.desired;
    let mut here = LbSet::default();
    here.insert(slot);
    if here.is_subset(&h.effective_lbs) && !h.progress.get(slot).is_some_and(|p| done(p, desired)) {
        // Reported EFFECTIVE here, and ARM shows otherwise now: tell it at once, before any
        // repair is written (a repair the guard refuses or ARM fails may never be). The
        // acceptance stands (no second ACCEPTED after the repair's write); the repair's
        // EFFECTIVE is emitted again, with `repaired`.
        h.effective_lbs.remove(slot);
        h.repaired = true;
        h.phase = ResultPhase::Accepted;
        h.last_failure = None;
        let reason = if note.is_empty() {
            "an entry reads another state than the desired one (drift): writing it again".into()
        } else {
            note.join("; ")
        };
        emit.push((ResultPhase::Accepted, reason, cover));
        return emit;
    }
    let at = |i: usize| h.progress.get(i);
    let accepted = !cover.is_empty()
        && cover
            .iter()
            .all(|i| !matches!(at(i), Some(LbProgress::Pending) | None));
    let effective = !cover.is_empty()
        && cover
            .iter()
            .all(|i| at(i).is_some_and(|p| done(p, desired)));
    let no_entries = cover
        .iter()
        .all(|i| matches!(at(i), Some(LbProgress::NoEntries)));
    let reason = if no_entries || !note.is_empty() {
        note.join("; ")
    } else {
        String::new()
    };
    let elapsed = h.received.elapsed().as_secs_f64();
    if accepted && !cover.is_subset(&h.accepted_lbs) {
        if h.accepted_lbs.is_empty() {
            metrics.accepted_after(elapsed);
        }
        h.accepted_lbs = cover.clone();
        if matches!(h.phase, ResultPhase::Unspecified | ResultPhase::Failed) {
            h.phase = ResultPhase::Accepted;
        }
        emit.push((ResultPhase::Accepted, reason.clone(), cover.clone()));
    }
    if effective && !cover.is_subset(&h.effective_lbs) {
        if h.effective_lbs.is_empty() {
            metrics.effective_after(elapsed);
        }
        h.effective_lbs = cover.clone();
        h.phase = ResultPhase::Effective;
        h.last_failure = None;
        emit.push((ResultPhase::Effective, reason, cover));
    }
    emit
}

/// `None` is asserted only until it is true everywhere (every managed LB: with an
/// assignment, that is until the stream stops naming the node).
pub(super) fn restored_everywhere(h: &Held) -> bool {
    h.desired == Admin::None && h.progress.iter().all(|p| done(p, h.desired))
}

#[cfg(test)]
mod tests {
    use crate::lb::index::{Admin, NodeSpec};
    use crate::metrics::Metrics;
    use crate::state::{LbProgress, Source, Store};
    use cutover_proto::v1::{NodeRef, NodeResult, ResultPhase, Version};
    use std::sync::Arc;
    use tokio::sync::broadcast;

    const V: Version = Version { epoch: 1, seq: 1 };

    fn store_with(desired: Admin) -> Store {
        store_counting(desired, Arc::new(Metrics::new()))
    }

    fn store_counting(desired: Admin, metrics: Arc<Metrics>) -> Store {
        let s = Store::new(&["a".to_owned(), "b".to_owned()], metrics);
        // A replica writing both LBs: standalone, so no assignment is needed.
        s.set_standalone(true);
        s.offer(
            "u".into(),
            NodeRef {
                name: "n".into(),
                uid: "u".into(),
                ..NodeRef::default()
            },
            NodeSpec::default(),
            desired,
            V,
            Source::Stream,
            vec![],
            None,
        );
        s
    }

    /// (phase, repaired) of every result so far.
    fn results(rx: &mut broadcast::Receiver<NodeResult>) -> Vec<(ResultPhase, bool)> {
        let mut out = Vec::new();
        while let Ok(r) = rx.try_recv() {
            out.push((
                ResultPhase::try_from(r.phase).unwrap_or(ResultPhase::Unspecified),
                r.repaired,
            ));
        }
        out
    }

    fn effective_everywhere(s: &Store, rx: &mut broadcast::Receiver<NodeResult>) {
        s.report("a", "u", V, LbProgress::Effective(vec![]), &[]);
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(
            results(rx),
            vec![
                (ResultPhase::Accepted, false),
                (ResultPhase::Effective, false)
            ]
        );
    }

    /// N3: drift found on an LB of an EFFECTIVE version is reported at once (before any
    /// repair is written: a refused or failing repair may never be), as a repaired ACCEPTED;
    /// the repair's read-back is EFFECTIVE again, repaired. No second ACCEPTED in between.
    #[test]
    fn drift_on_an_effective_version_is_reported_at_once() {
        let s = store_with(Admin::Down);
        let mut rx = s.subscribe();
        effective_everywhere(&s, &mut rx);
        s.drifted("b", "u");
        assert_eq!(results(&mut rx), vec![(ResultPhase::Accepted, true)]);
        assert!(!s.find("u", "n").unwrap().effective());
        // Drift found again before the repair landed: no news.
        s.drifted("b", "u");
        s.report("b", "u", V, LbProgress::Accepted(vec![]), &[]);
        assert_eq!(results(&mut rx), vec![]);
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(results(&mut rx), vec![(ResultPhase::Effective, true)]);
        assert!(s.find("u", "n").unwrap().effective());
        // A repair that fails is reported as such (it was not, while EFFECTIVE stuck).
        s.drifted("a", "u");
        s.fail("u", V, "boom".into(), true);
        assert_eq!(
            results(&mut rx),
            vec![(ResultPhase::Accepted, true), (ResultPhase::Failed, false)]
        );
    }

    /// The sum of `cutover_actuator_restored_total` over its load balancers.
    fn restored_total(metrics: &Metrics) -> f64 {
        metrics
            .encode()
            .lines()
            .filter(|l| l.starts_with("cutover_actuator_restored_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// N11: a `Down` re-cut after drift is a repair to `Down`: its repaired EFFECTIVE is not
    /// counted as a node set back to `None` (`restored_total`); a level-triggered restore of a
    /// `None` is.
    #[test]
    fn a_down_re_cut_is_not_counted_as_restored_to_none() {
        let metrics = Arc::new(Metrics::new());
        let s = store_counting(Admin::Down, metrics.clone());
        let mut rx = s.subscribe();
        effective_everywhere(&s, &mut rx);
        s.drifted("b", "u");
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(
            results(&mut rx),
            vec![
                (ResultPhase::Accepted, true),
                (ResultPhase::Effective, true)
            ]
        );
        assert_eq!(restored_total(&metrics), 0.0, "{}", metrics.encode());

        let metrics = Arc::new(Metrics::new());
        let s = store_counting(Admin::None, metrics.clone());
        let mut rx = s.subscribe();
        effective_everywhere(&s, &mut rx);
        assert!(s.find("u", "n").is_none(), "a restore done everywhere");
        // An entry reads Down again: the None is re-asserted as a repair.
        assert!(s.reassert("u"));
        s.report("a", "u", V, LbProgress::Effective(vec![]), &[]);
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(
            results(&mut rx),
            vec![
                (ResultPhase::Accepted, true),
                (ResultPhase::Effective, true)
            ]
        );
        assert_eq!(restored_total(&metrics), 2.0, "{}", metrics.encode());
    }

    /// N3: an LB that reads 404 is not done for a `Down` (nothing in ARM shows it there) and
    /// regresses an EFFECTIVE one; for a `None` it is (no entry there can be Down).
    #[test]
    fn an_absent_lb_keeps_a_cut_pending_but_not_a_restore() {
        let s = store_with(Admin::Down);
        let mut rx = s.subscribe();
        s.report("a", "u", V, LbProgress::Effective(vec![]), &[]);
        s.report("b", "u", V, LbProgress::Absent, &["gone".to_owned()]);
        assert_eq!(results(&mut rx), vec![(ResultPhase::Accepted, false)]);
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(results(&mut rx), vec![(ResultPhase::Effective, false)]);
        // The LB goes after the cut: the version regresses, and is EFFECTIVE again once the
        // re-created LB reads Down.
        s.report("b", "u", V, LbProgress::Absent, &["gone".to_owned()]);
        assert_eq!(results(&mut rx), vec![(ResultPhase::Accepted, true)]);
        s.report("b", "u", V, LbProgress::Effective(vec![]), &[]);
        assert_eq!(results(&mut rx), vec![(ResultPhase::Effective, true)]);

        let s = store_with(Admin::None);
        let mut rx = s.subscribe();
        s.report("a", "u", V, LbProgress::Effective(vec![]), &[]);
        s.report("b", "u", V, LbProgress::Absent, &[]);
        assert_eq!(
            results(&mut rx),
            vec![
                (ResultPhase::Accepted, false),
                (ResultPhase::Effective, false)
            ]
        );
        assert!(s.find("u", "n").is_none(), "a restore done everywhere");
    }
}
