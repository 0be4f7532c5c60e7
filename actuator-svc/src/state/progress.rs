//! Folding per-LB progress into node phases (pure but for the latency metrics): ACCEPTED once
//! each covered LB accepted or had nothing to do, EFFECTIVE once each read back, each emitted
//! once per version and covered set.

use super::held::{Held, LbProgress};
use super::lbset::LbSet;
use crate::index::Admin;
use crate::metrics::Metrics;
use cutover_proto::v1::ResultPhase;

/// A phase to emit: the phase, its note, and the load balancers it covers.
pub(super) type Emit = (ResultPhase, String, LbSet);

fn done(p: &LbProgress) -> bool {
    matches!(p, LbProgress::Effective(_) | LbProgress::NoEntries)
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
    // Never step back from Effective to Accepted within a version.
    if matches!(at_slot, LbProgress::Effective(_)) && matches!(progress, LbProgress::Accepted(_)) {
        return emit;
    }
    *at_slot = progress;
    let at = |i: usize| h.progress.get(i);
    let accepted = !cover.is_empty()
        && cover
            .iter()
            .all(|i| !matches!(at(i), Some(LbProgress::Pending) | None));
    let effective = !cover.is_empty() && cover.iter().all(|i| at(i).is_some_and(done));
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
    h.desired == Admin::None && h.progress.iter().all(done)
}

/// Marks `slot` of `h` as no longer effective (drift found): it will be reported again.
pub(super) fn drifted(h: &mut Held, slot: usize) {
    if let Some(p) = h.progress.get_mut(slot) {
        *p = LbProgress::Pending;
        h.accepted_lbs.remove(slot);
        h.effective_lbs.remove(slot);
        h.repaired = true;
    }
}
