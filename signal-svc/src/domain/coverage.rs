//! Combining results from several replicas: a node version is ACCEPTED / EFFECTIVE only when
//! the load balancers of that version's ACCEPTED / EFFECTIVE results (from any replica) cover
//! every managed load balancer. A result naming no load balancer covers them all (an actuator
//! without assignment writes every load balancer).

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

    /// True exactly once: when the phase first covers every managed load balancer.
    fn newly_complete(&mut self, managed: &BTreeSet<String>) -> bool {
        let complete =
            self.all || (!self.some.is_empty() && managed.iter().all(|lb| self.some.contains(lb)));
        let newly = complete && !self.reported;
        self.reported |= complete;
        newly
    }
}

/// What one version of one node has reached so far.
#[derive(Debug, Default)]
pub struct Coverage {
    version: Option<Version>,
    accepted: Reach,
    effective: Reach,
    failed: bool,
}

/// A phase the node version reached with this result, to report once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reached {
    Accepted,
    Effective,
    /// A failure (reported once per version, whichever replica failed).
    Failed,
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

    /// Folds one result (already checked to be about the node's current version and state)
    /// in. Returns the phases newly reached, in order.
    pub fn add(
        &mut self,
        version: Version,
        phase: ResultPhase,
        load_balancers: &[String],
        managed: &BTreeSet<String>,
    ) -> Vec<Reached> {
        if self.version != Some(version) {
            *self = Self {
                version: Some(version),
                ..Self::default()
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
            c.add(v(1), ResultPhase::Accepted, &lb(&["pub"]), &managed),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub"]), &managed),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["int", "svc"]), &managed),
            vec![Reached::Accepted, Reached::Effective],
            "replica b covers the rest"
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub", "int"]), &managed),
            vec![],
            "repeats (a resync, a larger set after a handover) report nothing"
        );
    }

    #[test]
    fn an_empty_set_covers_everything_and_new_versions_start_over() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Accepted, &[], &managed),
            vec![Reached::Accepted]
        );
        assert_eq!(
            c.add(v(2), ResultPhase::Effective, &lb(&["pub"]), &managed),
            vec![],
            "the new version starts from nothing"
        );
        assert_eq!(
            c.add(v(2), ResultPhase::Effective, &[], &managed),
            vec![Reached::Accepted, Reached::Effective]
        );
    }

    #[test]
    fn the_furthest_phase_is_remembered_for_late_streams() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(c.reached(), None);
        c.add(v(1), ResultPhase::Accepted, &lb(&["pub"]), &managed);
        assert_eq!(
            c.reached(),
            None,
            "one of two load balancers is not fleet-wide"
        );
        c.add(v(1), ResultPhase::Failed, &lb(&["int"]), &managed);
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Failed)));
        c.add(v(1), ResultPhase::Effective, &lb(&["pub", "int"]), &managed);
        assert_eq!(c.reached(), Some((v(1), ResultPhase::Effective)));
    }

    #[test]
    fn failures_are_reported_once_per_version() {
        let managed = set(&["pub", "int"]);
        let mut c = Coverage::default();
        assert_eq!(
            c.add(v(1), ResultPhase::Failed, &lb(&["pub"]), &managed),
            vec![Reached::Failed]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Failed, &lb(&["int"]), &managed),
            vec![]
        );
        assert_eq!(
            c.add(v(1), ResultPhase::Effective, &lb(&["pub", "int"]), &managed),
            vec![Reached::Accepted, Reached::Effective],
            "a retry that succeeds still counts"
        );
    }

    #[test]
    fn no_managed_load_balancer_known_yet() {
        let mut c = Coverage::default();
        assert_eq!(
            c.add(
                v(1),
                ResultPhase::Effective,
                &lb(&["pub"]),
                &BTreeSet::new()
            ),
            vec![Reached::Accepted, Reached::Effective]
        );
    }
}
