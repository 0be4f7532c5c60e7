//! What a tool answer says about an entry's state: only what ARM shows as done. While an
//! operation runs on a load balancer (or after one failed), ARM returns the requested model:
//! the entries read the state being written, which is a goal, not a fact (the LB, or the
//! pool, reads `provisioningState` other than `Succeeded`; see `IndexedEntry::settled`). Such
//! entries are answered without an admin state (`UNSPECIFIED`: pending) and a note names the
//! load balancer, so that `cutoverctl wait` and any other reader of `GetNodeAdminState` never
//! sees `Down` or `None` before the Node condition could.

use crate::lb::index::IndexedEntry;
use crate::state::entry_ref;
use cutover_proto::v1::{AdminState, EntryRef};
use std::collections::BTreeSet;

/// The proto form of `resolved`, pending entries without an admin state; adds a note per load
/// balancer with pending entries to `notes`.
pub fn entries(resolved: &[IndexedEntry], notes: &mut Vec<String>) -> Vec<EntryRef> {
    let mut pending: BTreeSet<&str> = BTreeSet::new();
    let out = resolved
        .iter()
        .map(|e| {
            let mut r = entry_ref(e);
            if !e.settled {
                r.admin_state = AdminState::Unspecified as i32;
                pending.insert(&e.lb);
            }
            r
        })
        .collect();
    for lb in pending {
        notes.push(format!(
            "load balancer {lb}: an operation is running or failed (provisioningState is not Succeeded); its entries are pending and answered without an admin state until ARM shows the outcome"
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::index::Admin;
    use std::sync::Arc;

    fn entry(lb: &str, admin: Admin, settled: bool) -> IndexedEntry {
        IndexedEntry {
            lb: Arc::from(lb),
            lb_id: Arc::from(format!("/lbs/{lb}")),
            pool: Arc::from("pool"),
            entry: Arc::from("n"),
            ipc: None,
            ip: None,
            admin,
            settled,
            probed: true,
        }
    }

    #[test]
    fn entries_of_a_running_operation_are_pending() {
        let mut notes = vec!["resolved by name".to_owned()];
        let got = entries(
            &[
                entry("pub", Admin::Down, true),
                entry("int", Admin::Down, false),
                entry("int", Admin::None, false),
            ],
            &mut notes,
        );
        let states: Vec<AdminState> = got.iter().map(|e| e.admin_state()).collect();
        assert_eq!(
            states,
            [
                AdminState::Down,
                AdminState::Unspecified,
                AdminState::Unspecified
            ]
        );
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[1].contains("load balancer int"), "{notes:?}");
    }
}
