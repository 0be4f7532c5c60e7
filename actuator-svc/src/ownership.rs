//! Which load balancers this replica writes. Pure: time is passed in.
//!
//! The signal-svc leader assigns each load balancer to one actuator replica (`Assignment` on
//! the desired-state stream) and repeats it as a heartbeat. Fencing:
//! - assignments are ordered by `(leader_epoch, generation)`; an older one is ignored, so a
//!   deposed leader cannot hand out load balancers;
//! - an assignment lapses `valid_for` after it was last received: a replica that was frozen
//!   (SIGSTOP) or cut off stops writing by itself, before the leader gives its load balancers
//!   to another replica. Time is monotonic and keeps running while a process is stopped, so a
//!   replica that wakes finds its assignment expired and writes nothing stale.
//! - the end of the stream that carried it does not end an assignment: the leader keeps the
//!   load balancers from everyone else until the lapse anyway, and gives them straight back to
//!   the same replica when it reconnects (a resync, a network blip). Dropping them at the end
//!   of the stream would only leave them without a writer meanwhile.
//!
//! A replica that never received an assignment (a tool-only deployment, a single replica
//! with an older signal-svc) writes every managed load balancer.

use std::collections::BTreeSet;
use std::time::Duration;
use tokio::time::Instant;

/// An assignment as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub epoch: u64,
    pub generation: u64,
    pub lbs: BTreeSet<String>,
    pub valid_for: Duration,
}

/// The longest `valid_for` accepted: a lapse is what makes failover safe, so it stays short.
pub const MAX_VALID_FOR: Duration = Duration::from_secs(60);

impl Grant {
    /// Validates an `Assignment` from the stream against the managed load balancers; the error
    /// names the field (INVALID_ARGUMENT).
    pub fn from_proto(
        a: &cutover_proto::v1::Assignment,
        managed: &[String],
    ) -> Result<Self, String> {
        let valid_for = a
            .valid_for
            .as_ref()
            .and_then(|d| Duration::try_from(*d).ok())
            .filter(|d| !d.is_zero() && *d <= MAX_VALID_FOR)
            .ok_or_else(|| {
                "assignment.valid_for: required, positive and at most 60 s".to_string()
            })?;
        let mut lbs = BTreeSet::new();
        for (i, lb) in a.load_balancers.iter().enumerate() {
            if !managed.contains(lb) {
                let shown: String = lb.chars().take(64).flat_map(char::escape_default).collect();
                return Err(format!(
                    "assignment.load_balancers[{i}]: {shown:?} is not a load balancer this actuator manages"
                ));
            }
            lbs.insert(lb.clone());
        }
        Ok(Self {
            epoch: a.leader_epoch,
            generation: a.generation,
            lbs,
            valid_for,
        })
    }
}

/// Why an assignment was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    #[error(
        "assignment ({epoch}, {generation}) is older than the accepted ({have_epoch}, {have_generation})"
    )]
    Stale {
        epoch: u64,
        generation: u64,
        have_epoch: u64,
        have_generation: u64,
    },
}

/// The replica's ownership state.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    current: Option<(Grant, Instant)>,
}

impl Ownership {
    /// Takes an assignment (or its heartbeat) received at `now`. Returns whether the set of
    /// owned load balancers changed.
    ///
    /// A heartbeat (same epoch and generation) does not revive a lapsed assignment: a replica
    /// woken from a freeze may read heartbeats that queued up while it was stopped, and by
    /// then the leader may have moved its load balancers. Only a newer generation does.
    pub fn accept(&mut self, grant: Grant, now: Instant) -> Result<bool, Refused> {
        let before = self.owned(now);
        if let Some((have, at)) = &self.current {
            let (new, old) = (
                (grant.epoch, grant.generation),
                (have.epoch, have.generation),
            );
            if new < old {
                return Err(Refused::Stale {
                    epoch: grant.epoch,
                    generation: grant.generation,
                    have_epoch: have.epoch,
                    have_generation: have.generation,
                });
            }
            let lapsed = now.saturating_duration_since(*at) >= have.valid_for;
            if new == old && lapsed {
                return Ok(false);
            }
        }
        self.current = Some((grant, now));
        Ok(self.owned(now) != before)
    }

    /// True once any assignment was accepted (the replica is part of a managed fleet).
    pub fn assigned(&self) -> bool {
        self.current.is_some()
    }

    /// Whether this replica may write `lb` at `now`.
    pub fn owns(&self, lb: &str, now: Instant) -> bool {
        match &self.current {
            None => true,
            Some((g, at)) => now.saturating_duration_since(*at) < g.valid_for && g.lbs.contains(lb),
        }
    }

    /// The owned load balancers at `now`, among `managed`.
    pub fn owned_among(&self, managed: &[String], now: Instant) -> Vec<String> {
        managed
            .iter()
            .filter(|lb| self.owns(lb, now))
            .cloned()
            .collect()
    }

    fn owned(&self, now: Instant) -> Option<BTreeSet<String>> {
        self.current.as_ref().map(|(g, at)| {
            if now.saturating_duration_since(*at) < g.valid_for {
                g.lbs.clone()
            } else {
                BTreeSet::new()
            }
        })
    }

    /// When the current assignment lapses without a heartbeat.
    pub fn expires_at(&self) -> Option<Instant> {
        self.current.as_ref().map(|(g, at)| *at + g.valid_for)
    }

    /// The accepted `(epoch, generation)`, if any.
    pub fn version(&self) -> Option<(u64, u64)> {
        self.current.as_ref().map(|(g, _)| (g.epoch, g.generation))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(epoch: u64, generation: u64, lbs: &[&str]) -> Grant {
        Grant {
            epoch,
            generation,
            lbs: lbs.iter().map(|s| s.to_string()).collect(),
            valid_for: Duration::from_secs(3),
        }
    }

    #[test]
    fn without_assignment_every_lb_is_owned() {
        let o = Ownership::default();
        assert!(o.owns("kubernetes", Instant::now()));
        assert!(!o.assigned());
    }

    #[test]
    fn only_assigned_lbs_are_owned_until_the_grant_lapses() {
        let t0 = Instant::now();
        let mut o = Ownership::default();
        assert_eq!(o.accept(grant(1, 1, &["a"]), t0), Ok(true));
        assert!(o.owns("a", t0) && !o.owns("b", t0));
        // A heartbeat keeps it; the same content is no change.
        let t1 = t0 + Duration::from_secs(2);
        assert_eq!(o.accept(grant(1, 1, &["a"]), t1), Ok(false));
        assert!(o.owns("a", t1 + Duration::from_millis(2900)));
        // Frozen past valid_for: nothing is owned any more, and heartbeats that queued up
        // while frozen do not bring it back; a newer generation does.
        let woke = t1 + Duration::from_secs(3);
        assert!(!o.owns("a", woke));
        assert_eq!(o.accept(grant(1, 1, &["a"]), woke), Ok(false));
        assert!(!o.owns("a", woke));
        assert_eq!(o.accept(grant(1, 2, &["a"]), woke), Ok(true));
        assert!(o.owns("a", woke));
        let lapsed = woke + Duration::from_secs(3);
        assert_eq!(
            o.owned_among(&["a".into(), "b".into()], lapsed),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_reconnect_within_the_validity_continues_the_grant() {
        // The stream ends after (1, 4); the leader's new stream to the same replica sends
        // (1, 5) with the same load balancers 0.8 s later: owned at every instant between.
        let t0 = Instant::now();
        let mut o = Ownership::default();
        o.accept(grant(1, 4, &["a"]), t0).unwrap();
        for ms in (0..=800).step_by(50) {
            assert!(o.owns("a", t0 + Duration::from_millis(ms)));
        }
        let t1 = t0 + Duration::from_millis(800);
        assert_eq!(o.accept(grant(1, 5, &["a"]), t1), Ok(false), "no change");
        assert_eq!(o.expires_at(), Some(t1 + Duration::from_secs(3)));
        // A newer leader's grant also continues what it keeps; an older one is refused.
        assert_eq!(o.accept(grant(2, 1, &["a"]), t1), Ok(false));
        assert!(o.accept(grant(1, 6, &["a", "b"]), t1).is_err());
        assert!(o.owns("a", t1) && !o.owns("b", t1));
    }

    #[test]
    fn older_assignments_are_fenced_off() {
        let t0 = Instant::now();
        let mut o = Ownership::default();
        o.accept(grant(2, 5, &["a"]), t0).unwrap();
        assert!(o.accept(grant(2, 4, &["a", "b"]), t0).is_err());
        assert!(o.accept(grant(1, 9, &["b"]), t0).is_err());
        assert!(!o.owns("b", t0));
        // A new epoch starts its generations again.
        assert_eq!(o.accept(grant(3, 1, &["b"]), t0), Ok(true));
        assert!(o.owns("b", t0) && !o.owns("a", t0));
    }
}
