//! What a plan says about each node before anything is written: reported to the store.

use crate::plan::{LbPlan, TargetPlan};
use crate::state::{LbProgress, Store, TargetView};
use std::collections::BTreeMap;

/// Reports the targets that need no write on `lb` (no entries there, or every entry already
/// reads the desired state), the ones the blast-radius guard refuses (FAILED, will retry: they
/// are planned again every round) and marks drift (effective before, not any more). `absent`:
/// the LB read 404, so nobody has entries there (`LbProgress::Absent`: not done for a `Down`).
/// Returns the number of drifted entries.
pub fn report_settled(
    store: &Store,
    lb: &str,
    plan: &LbPlan,
    targets: &[TargetView],
    absent: bool,
) -> usize {
    let mut drift = 0;
    let gone = absent.then(|| vec![format!("load balancer {lb} reads 404 (absent in ARM)")]);
    for (tp, tv) in plan.targets.iter().zip(targets) {
        if let Some(reason) = &tp.refused {
            if tv.effective_here {
                store.drifted(lb, &tp.key);
            }
            store.fail(&tp.key, tv.version, reason.clone(), true);
        } else if let Some(note) = &gone {
            store.report(lb, &tp.key, tv.version, LbProgress::Absent, note);
        } else if tp.entries.is_empty() {
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

/// What the guard refuses on this LB: node key -> reason.
pub fn refused(plan: &LbPlan) -> BTreeMap<String, String> {
    plan.targets
        .iter()
        .filter_map(|t| t.refused.as_ref().map(|r| (t.key.to_string(), r.clone())))
        .collect()
}

/// The targets the plan writes (refused ones are not reported as written: what the round
/// writes for them only gives their entries back to the health probe).
pub fn changed<'a>(
    plan: &'a LbPlan,
    targets: &'a [TargetView],
) -> Vec<(&'a TargetPlan, &'a TargetView)> {
    plan.targets
        .iter()
        .zip(targets)
        .filter(|(tp, _)| !tp.already && !tp.entries.is_empty() && tp.refused.is_none())
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
