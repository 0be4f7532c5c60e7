//! Combining results from several replicas: a node version is ACCEPTED / EFFECTIVE only when
//! the load balancers of that version's ACCEPTED / EFFECTIVE results (from any replica) cover
//! every managed load balancer. A result naming no load balancer covers them all (an actuator
//! without assignment writes every load balancer).
//!
//! Invariants:
//! - an empty managed set covers nothing: right after a new leadership the set is empty until
//!   the streams' acks arrive, and one load balancer's result must not make a node
//!   fleet-EFFECTIVE then (results not counted are sent again until confirmed, and count once
//!   the set is known);
//! - EFFECTIVE is not latched: a `repaired` ACCEPTED of the same version (an actuator found an
//!   entry in another state, or the load balancer absent) takes the named load balancers out
//!   of the EFFECTIVE reach, and the version is EFFECTIVE again only once they are back.

use cutover_proto::v1::{ResultPhase, Version};
use std::collections::BTreeSet;

/// The load balancers one phase of one version has reached.
#[derive(Debug, Default)]
struct Reach {
    all: bool,
    some: BTreeSet<String>,
    reported: bool,
}

impl Reach {
    fn add(&mut self, load_balancers: &[String]) {
        if load_balancers.is_empty() {
            self.all = true;
        } else {
            self.some.extend(load_balancers.iter().cloned());
        }
    }

    /// True exactly once (until a regression): when the phase first covers every managed
    /// load balancer. No managed load balancer known yet covers nothing.
    fn newly_complete(&mut self, managed: &BTreeSet<String>) -> bool {
        let complete =
            !managed.is_empty() && (self.all || managed.iter().all(|lb| self.some.contains(lb)));
        let newly = complete && !self.reported;
        self.reported |= complete;
        newly
    }

    /// The phase no longer holds on `load_balancers` (none named: on any). Returns whether it
    /// had been reported complete.
    fn remove(&mut self, load_balancers: &[String]) -> bool {
        if load_balancers.is_empty() {
            self.some.clear();
        } else {
            for lb in load_balancers {
                self.some.remove(lb);
            }
        }
        // Whatever covered "all" no longer does.
        self.all = false;
        std::mem::take(&mut self.reported)
    }
}

/// What one version of one node has reached so far.
#[derive(Debug, Default)]
pub struct Coverage {
    version: Option<Version>,
    accepted: Reach,
    effective: Reach,
    failed: bool,
    /// Set when an EFFECTIVE version regressed (drift, an absent load balancer) and cleared
    /// when it is EFFECTIVE again: the drain gate must not keep its confirmed status meanwhile.
    regressed: bool,
}

/// A phase the node version reached with this result, to report once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    Accepted,
    Effective,
    /// A failure (reported once per version, whichever replica failed).
    Failed,
    /// The version was EFFECTIVE and is not any more (reported once per regression).
    Regressed,
}

impl Coverage {
    /// The furthest fleet-wide phase the tracked version has reached, if any.
    pub fn reached(&self) -> Option<(Version, ResultPhase)> {
        let version = self.version?;
        let phase = if self.effective.reported {
            ResultPhase::Effective
        } else if self.accepted.reported {
            ResultPhase::Accepted
        } else if self.failed {
            ResultPhase::Failed
        } else {
            return None;
        };
        Some((version, phase))
    }

    /// Whether the tracked version was EFFECTIVE and regressed since, not EFFECTIVE again yet.
    pub fn regressed(&self) -> bool {
        self.regressed
    }

    /// Folds one result (already checked to be about the node's current version and state)
    /// in. `repaired`: the result follows a repair; a repaired ACCEPTED says the version is
    /// not effective any more on its load balancers (the actuator found drift there and is
    /// writing again). Returns the phases newly reached, in order.
    pub fn add(
        &mut self,
        version: Version,
        phase: ResultPhase,
        load_balancers: &[String],
        repaired: bool,
        managed: &BTreeSet<String>,
    ) -> Vec<Reached> {
        if self.version != Some(version) {
            *self = Self {
                version: Some(version),
                ..Self::default()
            };
        }
        if repaired && phase == ResultPhase::Accepted {
            // Also for a version this leader never saw EFFECTIVE: after a failover the Node
            // may carry a `True` the previous leader wrote, which the gate keeps for the new
            // version of the same state; ARM not showing it must drop that too (N9).
            self.effective.remove(load_balancers);
            // Still accepted there: the repair write is ARM's or about to be.
            self.accepted.add(load_balancers);
            let news = !self.regressed;
            self.regressed = true;
            return if news {
                vec![Reached::Regressed]
            } else {
                vec![]
            };
        }
        match phase {
            ResultPhase::Accepted => self.accepted.add(load_balancers),
            // Effective implies accepted on the same load balancers.
            ResultPhase::Effective => {
                self.accepted.add(load_balancers);
                self.effective.add(load_balancers);
            }
            ResultPhase::Failed if !self.failed => {
                self.failed = true;
                return vec![Reached::Failed];
            }
            _ => {}
        }
        let mut out = Vec::new();
        if self.accepted.newly_complete(managed) {
            out.push(Reached::Accepted);
        }
        if self.effective.newly_complete(managed) {
            self.regressed = false;
            out.push(Reached::Effective);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }
    fn v(seq: u64) -> Version {
        Version { epoch: 3, seq }
    }
    fn lb(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn effective_once_every_managed_load_balancer_is_covered() {
        let managed = set(&["pub", "int", "svc"]);
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &lb(&["pub"]), false, &managed),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &managed),
            vec![]
        );
        assert_eq!(
            c.add(
                v(1),
                ResultPhase::Effective,
                &lb(&["int", "svc"]),
                false,
                &managed
            ),
            vec![Reached::Accepted, Reached::Effective],
            "replica b covers the rest"
        );
        assert_eq!(
            c.add(
                v(1),
                ResultPhase::Effective,
                &lb(&["pub", "int"]),
                false,
                &managed
            ),
            vec![],
            "repeats (a resync, a larger set after a handover) report nothing"
        );
    }

    #[test]
    fn an_empty_set_covers_everything_and_new_versions_start_over() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &[], false, &managed),
            vec![Reached::Accepted]
        );
        assert_eq!(
            c.add(v(2), ResultPhase::Effective, &lb(&["pub"]), false, &managed),
            vec![],
            "the new version starts from nothing"
        );
        assert_eq!(
            c.add(v(2), ResultPhase::Effective, &[], false, &managed),
            vec![Reached::Accepted, Reached::Effective]
        );
    }

    #[test]
    fn the_furthest_phase_is_remembered_for_late_streams() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(c.reached(), None);
        c.add(v(1), ResultPhase::Accepted, &lb(&["pub"]), false, &managed);
        assert_eq!(
            c.reached(),
            None,
            "one of two load balancers is not fleet-wide"
        );
        c.add(v(1), ResultPhase::Failed, &lb(&["int"]), false, &managed);
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Failed)));
        c.add(
            v(1),
            ResultPhase::Effective,
            &lb(&["pub", "int"]),
            false,
            &managed,
        );
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Effective)));
    }

    #[test]
    fn failures_are_reported_once_per_version() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Failed, &lb(&["pub"]), false, &managed),
            vec![Reached::Failed]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Failed, &lb(&["int"]), false, &managed),
            vec![]
        );
        assert_eq!(
            c.add(
                v(1),
                ResultPhase::Effective,
                &lb(&["pub", "int"]),
                false,
                &managed
            ),
            vec![Reached::Accepted, Reached::Effective],
            "a retry that succeeds still counts"
        );
    }

    /// N4: right after a new leadership the managed set is empty (no stream acked yet); one
    /// load balancer's result must not make the node fleet-wide EFFECTIVE, nor a result
    /// naming none. Once the set is known, the results sent again count.
    #[test]
    fn an_empty_managed_set_is_never_complete() {
        let none = BTreeSet::new();
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &none),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &[], false, &none),
            vec![]
        );
        assert_eq!(c.reached(), None);
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &none);
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &managed),
            vec![],
            "int is not covered"
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["int"]), false, &managed),
            vec![Reached::Accepted, Reached::Effective]
        );
    }

    /// N3: a repaired ACCEPTED of an EFFECTIVE version (drift found, or the load balancer
    /// absent) takes it back to ACCEPTED until the repair is EFFECTIVE again.
    #[test]
    fn a_repaired_accepted_regresses_an_effective_version() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &managed);
        c.add(v(1), ResultPhase::Effective, &lb(&["int"]), false, &managed);
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Effective)));
        assert!(!c.regressed());
        // A plain ACCEPTED (a resync, a late one) changes nothing.
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &lb(&["int"]), false, &managed),
            vec![]
        );
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Effective)));
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &lb(&["int"]), true, &managed),
            vec![Reached::Regressed]
        );
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Accepted)));
        assert!(c.regressed());
        // The same regression again (sent twice) is no news.
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &lb(&["int"]), true, &managed),
            vec![]
        );
        assert!(c.regressed());
        // pub alone is not enough; the repaired int is.
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), false, &managed),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["int"]), true, &managed),
            vec![Reached::Effective]
        );
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Effective)));
        assert!(!c.regressed());
    }
}

#[cfg(test)]
mod trusted_tests {
    use super::*;

    /// N9: after a failover the gate keeps a `True` found on the Node for the new version of
    /// the same state. Drift reported before this leader saw that version EFFECTIVE must still
    /// count as a regression, or the inherited `True` stays while an entry is None.
    #[test]
    fn drift_on_a_version_never_effective_here_is_a_regression() {
        let managed: BTreeSet<String> = ["pub".to_string(), "int".to_string()].into();
        let v = Version { epoch: 9, seq: 1 };
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v, ResultPhase::Accepted, &["int".into()], true, &managed),
            vec![Reached::Regressed]
        );
        assert!(c.regressed());
        assert_eq!(
            c.add(
                v,
                ResultPhase::Effective,
                &["pub".into(), "int".into()],
                true,
                &managed
            ),
            vec![Reached::Accepted, Reached::Effective]
        );
        assert!(!c.regressed());
    }
}
