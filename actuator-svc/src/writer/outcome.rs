//! What a plan says about each node before anything is written: reported to the store.

use crate::plan::{LbPlan, TargetPlan};
use crate::state::{LbProgress, Store, TargetView};

/// Reports the targets that need no write on `lb` (no entries there, or every entry already
/// reads the desired state) and marks drift (effective before, not any more). Returns the
/// number of drifted entries.
pub fn report_settled(store: &Store, lb: &str, plan: &LbPlan, targets: &[TargetView]) -> usize {
    let mut drift = 0;
    for (tp, tv) in plan.targets.iter().zip(targets) {
        if tp.entries.is_empty() {
            store.report(lb, &tp.key, tv.version, LbProgress::NoEntries, &tp.notes);
        } else if tp.already {
            store.report(
                lb,
                &tp.key,
                tv.version,
                LbProgress::Effective(tp.entries.clone()),
                &tp.notes,
            );
        } else if tv.effective_here {
            drift += tp.entries.len();
            store.drifted(lb, &tp.key);
        }
    }
    drift
}

/// The targets the plan writes.
pub fn changed<'a>(
    plan: &'a LbPlan,
    targets: &'a [TargetView],
) -> Vec<(&'a TargetPlan, &'a TargetView)> {
    plan.targets
        .iter()
        .zip(targets)
        .filter(|(tp, _)| !tp.already && !tp.entries.is_empty())
        .collect()
}

/// Reports ARM's acceptance of the write for every changed target.
pub fn report_accepted(store: &Store, lb: &str, changed: &[(&TargetPlan, &TargetView)]) {
    for (tp, tv) in changed {
        store.report(
            lb,
            &tp.key,
            tv.version,
            LbProgress::Accepted(tp.entries.clone()),
            &[],
        );
    }
}
