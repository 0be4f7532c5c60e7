//! Level-triggered restore: on a self-heal read, entries of this LB that read `Down` for a
//! node whose desired state is `None` (no trigger, no hold) are asserted `None` again,
//! whatever put them there (an outside writer, an outage, a restart, a re-registered node).
//! It compares the read with the whole desired state and remembers nothing; entries of VMs
//! that match no known node are never touched.

use super::Writer;
use crate::lb::index::Admin;

impl Writer {
    /// Re-asserts the known `None` of every node with an entry `Down` on this LB in the last
    /// read; the normal round then writes it. Returns how many nodes. Only the owner of the
    /// LB does this (stream states are the owner's to write), and only looks node by node
    /// when the read has a `Down` entry at all.
    pub(super) fn restore_drift(&self) -> usize {
        if !self.store.owns(&self.lb) {
            return 0;
        }
        let (index, _) = self.cache.index(Some(&self.lb));
        if !index.any_down(&self.lb) {
            return 0;
        }
        let mut restored = 0;
        for (key, spec) in self.store.restorable() {
            let down = index
                .resolve(&spec, Some(&self.lb))
                .entries
                .iter()
                .any(|e| e.admin == Admin::Down);
            if down && self.store.reassert(&key) {
                tracing::info!(node = %spec.name, "entries read Down for a node whose desired state is None; restoring");
                restored += 1;
            }
        }
        restored
    }
}
