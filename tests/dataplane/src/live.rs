//! The leaving node's changes as a running system produces them (issue 28 item 2): the full
//! stack's departure scripts drive the Kubernetes API, arm-sim's effective log gives admin state,
//! and each change reaches the controller ([`crate::controller`]) as a [`LiveEvent`] instead of
//! being drawn from parameters. What the controller applied is kept in [`Recorded`], which also
//! names the cause of every failure afterwards.

use crate::model::{Admin, Policy};
use crate::report::Cause;

/// One change to the leaving node (member 0), as the running system made it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum NodeChange {
    /// kube-proxy's `/healthz` answers 503 (it saw a `deletionTimestamp` or the CA taint).
    Kep503,
    /// The node's local endpoints turned terminating (eTP Local: `healthCheckNodePort` 503).
    LocalTerminating,
    /// The node's local pods exited (eTP Local: kube-proxy drops new flows).
    LocalExit,
    /// The VM stopped forwarding (deleted, evicted, reimage started).
    Dead,
    /// The VM forwards again (reimaged and rejoined, or rebooted).
    Revive,
    /// An admin state became effective in ARM (arm-sim's effective log): the data plane applies
    /// it after the apply lag A, per mux (U1). Only honoured in cutover's modes.
    Admin(Admin),
    /// The node's entry left the backend pool (a pool PUT or the NIC's removal in ARM).
    Removed,
    /// The node was given back (uncordoned, signal removed): "return -> first new flow" counts
    /// from here.
    Returned,
    /// The script is done; the controller stops once every consequence had time to show.
    End,
}

/// A change and when it happened, in Unix seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LiveEvent {
    pub at: f64,
    pub change: NodeChange,
}

/// What a live cell is given: where to say when t = 0 is, the changes, and how long the
/// script runs at most (the client's run is sized from it).
#[derive(Debug)]
pub struct LiveFeed {
    /// Receives t = 0 in Unix seconds, once the members, prober and client run.
    pub start: tokio::sync::oneshot::Sender<f64>,
    pub events: tokio::sync::mpsc::UnboundedReceiver<LiveEvent>,
    /// Seconds after t = 0 by which the script sends [`NodeChange::End`].
    pub length: f64,
}

/// The times (seconds after the first signal) at which the controller applied each change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    /// Windows [from, until) in which the VM forwarded nothing.
    pub dead: Vec<(f64, f64)>,
    pub local_exit: Option<f64>,
    /// When the entry left the pool (the first mux to apply it).
    pub removed: Option<f64>,
    pub returned: Option<f64>,
}

/// How much earlier than its recorded time a change may be seen by a client (event stamps
/// and the client's clock are read on different processes).
const SLACK: f64 = 0.05;

impl Recorded {
    pub fn die(&mut self, t: f64) {
        if !self.dead_at(t) {
            self.dead.push((t, f64::INFINITY));
        }
    }

    pub fn revive(&mut self, t: f64) {
        if let Some(w) = self.dead.iter_mut().find(|w| w.1.is_infinite()) {
            w.1 = t;
        }
    }

    fn dead_at(&self, t: f64) -> bool {
        self.dead
            .iter()
            .any(|&(from, until)| t >= from - SLACK && t < until)
    }

    /// The cause of a failure the client saw at `t` (on the leaving node, or on an unknown
    /// member): the VM's death first, then the entry's removal, then eTP Local's exited pods.
    pub fn cause_at(&self, policy: Policy, t: f64) -> Cause {
        if self.dead_at(t) {
            Cause::VmDead
        } else if self.removed.is_some_and(|r| t >= r - SLACK) {
            Cause::MemberRemoved
        } else if policy == Policy::Local && self.local_exit.is_some_and(|e| t >= e - 0.3) {
            Cause::PodGone
        } else {
            Cause::Other
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_follow_the_applied_changes() {
        let mut r = Recorded::default();
        assert_eq!(r.cause_at(Policy::Cluster, 5.0), Cause::Other);
        r.die(10.0);
        r.revive(40.0);
        assert_eq!(r.cause_at(Policy::Cluster, 9.99), Cause::VmDead);
        assert_eq!(r.cause_at(Policy::Cluster, 39.9), Cause::VmDead);
        // Back from the reimage: a later failure is not the VM's.
        assert_eq!(r.cause_at(Policy::Cluster, 41.0), Cause::Other);
        r.local_exit = Some(2.0);
        assert_eq!(r.cause_at(Policy::Local, 3.0), Cause::PodGone);
        assert_eq!(r.cause_at(Policy::Cluster, 3.0), Cause::Other);
        r.removed = Some(5.0);
        assert_eq!(r.cause_at(Policy::Local, 6.0), Cause::MemberRemoved);
        assert_eq!(r.cause_at(Policy::Local, 12.0), Cause::VmDead);
    }

    #[test]
    fn dying_twice_keeps_one_window() {
        let mut r = Recorded::default();
        r.die(1.0);
        r.die(2.0);
        assert_eq!(r.dead, vec![(1.0, f64::INFINITY)]);
    }
}
