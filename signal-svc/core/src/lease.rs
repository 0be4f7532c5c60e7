//! Leader election decisions (client-go `LeaseLock` style), free of I/O and clocks.
//!
//! The caller GETs the Lease, asks [`decide`], and performs the write with the Lease's
//! `resourceVersion` as precondition, so a 409 means another candidate won. Expiry is judged
//! by *local* observation time of the record (as client-go does), not by comparing the
//! holder's `renewTime` with our clock: that way clock skew between pods does not matter.

use std::time::Duration;
use tokio::time::Instant;

/// The fields of a Lease that matter for the decision.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct LeaseRecord {
    pub holder: Option<String>,
    pub transitions: i32,
    pub duration_secs: Option<i32>,
    /// The holder's duration in milliseconds ([`DURATION_MS_ANNOTATION`]), more precise than
    /// `leaseDurationSeconds` (whole seconds, rounded up for other readers).
    pub duration_ms: Option<u64>,
    /// `renewTime` as a string: only compared for equality, to see the holder is alive.
    pub renew_time: Option<String>,
}

/// What to do with the observed Lease.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// We hold it under our current epoch: extend it, keeping `leaseTransitions`.
    Renew,
    /// Take it (or raise it), setting `leaseTransitions` to this value: it becomes our epoch.
    Acquire { transitions: i32 },
    /// Someone else holds a live lease.
    Wait { holder: String },
}

/// Annotation with the Lease duration in milliseconds.
pub const DURATION_MS_ANNOTATION: &str = "cutover.io/lease-duration-ms";

/// `leaseTransitions` for a Lease created from nothing: 1, so epoch 0 is never used (proto
/// default).
pub const CREATE_TRANSITIONS: i32 = 1;

/// What this process knows about epochs, besides the Lease in front of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Epochs {
    /// The epoch this process leads (or led, until someone else took over) with.
    pub mine: Option<u64>,
    /// The highest epoch an actuator has accepted, as reported when it refused ours: the
    /// Lease may have been deleted and recreated below it.
    pub floor: u64,
    /// The highest `leaseTransitions` this process has observed on any Lease.
    pub seen: u64,
}

fn clamp(v: u64) -> i32 {
    i32::try_from(v).unwrap_or(i32::MAX)
}

impl Epochs {
    /// The epoch to take when acquiring on top of a Lease with `transitions`: above anything
    /// any actuator or this process has seen, so the fence never goes backwards.
    fn next(&self, transitions: i32) -> i32 {
        let base = u64::try_from(transitions)
            .unwrap_or(0)
            .max(self.floor)
            .max(self.seen)
            .max(self.mine.unwrap_or(0));
        clamp(base.saturating_add(1))
    }

    /// `leaseTransitions` for a Lease we create (it was absent, e.g. deleted): our own epoch if
    /// we lead and nothing above it is known (so our streams go on), else the next one.
    pub fn create(&self) -> i32 {
        match self.mine {
            Some(e) if e > self.floor && e >= self.seen => clamp(e),
            _ if self.mine.is_none() && self.floor == 0 && self.seen == 0 => CREATE_TRANSITIONS,
            _ => self.next(0),
        }
    }
}

/// Decides given whether the record has expired (see [`Observer`]).
///
/// - Held under our identity and our current epoch: renew, unless an actuator has accepted an
///   epoch at or above it (the Lease was recreated below what the fleet has seen): then raise.
/// - Held under our identity with another epoch: left by a previous incarnation of us (a
///   restarted pod keeps its name), so re-acquire with a bumped epoch: versions keep growing.
/// - Free, or held by someone else and expired by our own clock: acquire with a bumped epoch.
pub fn decide(record: &LeaseRecord, me: &str, epochs: &Epochs, expired: bool) -> Decision {
    let acquire = Decision::Acquire {
        transitions: epochs.next(record.transitions),
    };
    match record.holder.as_deref() {
        None | Some("") => acquire,
        Some(h) if h == me => {
            let current = u64::try_from(record.transitions).ok();
            if current.is_some() && epochs.mine == current && current > Some(epochs.floor) {
                Decision::Renew
            } else {
                acquire
            }
        }
        Some(_) if expired => acquire,
        Some(h) => Decision::Wait {
            holder: h.to_owned(),
        },
    }
}

/// Remembers when the record last changed, by the local clock.
#[derive(Debug, Default)]
pub struct Observer {
    last: Option<(LeaseRecord, Instant)>,
}

impl Observer {
    /// Records an observation; the timer restarts only if the record changed.
    pub fn observe(&mut self, record: &LeaseRecord, now: Instant) {
        match &self.last {
            Some((r, _)) if r == record => {}
            _ => self.last = Some((record.clone(), now)),
        }
    }

    /// The Lease is absent. A candidate that has seen it before may create it only once it
    /// stayed absent for `duration` by its own clock: it was deleted, and its holder may still
    /// be within its term (it re-creates it under its own epoch at its next renewal); creating
    /// it at once made two leaders write side by side until that renewal failed. One that never
    /// saw a Lease (a new installation) creates it at once.
    pub fn may_create(&mut self, now: Instant, duration: Duration) -> bool {
        if self.last.is_none() {
            return true;
        }
        self.observe(&LeaseRecord::default(), now);
        self.expired(now, duration)
    }

    /// True when the record has not changed for its lease duration (or `fallback`).
    pub fn expired(&self, now: Instant, fallback: Duration) -> bool {
        match &self.last {
            None => true,
            Some((r, at)) => {
                let secs = r.duration_secs.and_then(|s| u64::try_from(s).ok());
                let dur = r
                    .duration_ms
                    .map(Duration::from_millis)
                    .or(secs.map(Duration::from_secs))
                    .unwrap_or(fallback);
                now.duration_since(*at) >= dur
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seen in a 10-minute soak: the Lease deleted, the standby created it at once and led
    /// while the leader, still within its renew deadline, wrote too (215 ms of two leaders
    /// writing drain-gate conditions). A deleted Lease is now taken only after it stayed
    /// absent for the lease duration; a new installation's first Lease at once.
    #[test]
    fn a_deleted_lease_is_created_by_a_standby_only_after_the_lease_duration() {
        let d = Duration::from_secs(4);
        let t0 = Instant::now();
        let mut fresh = Observer::default();
        assert!(
            fresh.may_create(t0, d),
            "nothing ever seen: a new installation"
        );
        let mut o = Observer::default();
        o.observe(&rec(Some("leader"), 7, "r1"), t0);
        let gone = t0 + Duration::from_secs(1);
        assert!(!o.may_create(gone, d));
        assert!(!o.may_create(gone + Duration::from_millis(3900), d));
        assert!(o.may_create(gone + d, d));
    }

    fn rec(holder: Option<&str>, transitions: i32, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(Into::into),
            transitions,
            duration_secs: Some(15),
            duration_ms: None,
            renew_time: Some(renew.into()),
        }
    }

    fn epochs(mine: Option<u64>, floor: u64) -> Epochs {
        Epochs {
            mine,
            floor,
            seen: 0,
        }
    }

    #[test]
    fn decisions() {
        let none = epochs(None, 0);
        let free = rec(None, 3, "t");
        assert_eq!(
            decide(&free, "a", &none, false),
            Decision::Acquire { transitions: 4 }
        );
        let empty = rec(Some(""), 3, "t");
        assert_eq!(
            decide(&empty, "a", &none, false),
            Decision::Acquire { transitions: 4 }
        );
        let mine = rec(Some("a"), 3, "t");
        assert_eq!(
            decide(&mine, "a", &epochs(Some(3), 0), false),
            Decision::Renew
        );
        // Restarted under the same name: bump, so the epoch grows.
        assert_eq!(
            decide(&mine, "a", &none, false),
            Decision::Acquire { transitions: 4 }
        );
        let theirs = rec(Some("b"), 3, "t");
        assert_eq!(
            decide(&theirs, "a", &none, false),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(&theirs, "a", &none, true),
            Decision::Acquire { transitions: 4 }
        );
    }

    /// The same process taking its own Lease back (after a renewal deadline passed without
    /// anyone else writing) keeps its epoch: no new versions, no new streams.
    #[test]
    fn the_same_process_re_acquiring_keeps_its_epoch() {
        let mine = rec(Some("a"), 7, "t");
        assert_eq!(
            decide(&mine, "a", &epochs(Some(7), 0), true),
            Decision::Renew
        );
    }

    /// A Lease deleted and recreated restarts `leaseTransitions` at 1; an actuator that
    /// accepted 5 reports it and the leader raises its own Lease above it.
    #[test]
    fn a_recreated_lease_is_raised_above_what_actuators_accepted() {
        let recreated = rec(Some("a"), 1, "t");
        assert_eq!(
            decide(&recreated, "a", &epochs(Some(1), 5), false),
            Decision::Acquire { transitions: 6 }
        );
        let free = rec(None, 1, "t");
        assert_eq!(
            decide(&free, "b", &epochs(None, 5), false),
            Decision::Acquire { transitions: 6 }
        );
        // What this process saw before the deletion counts too.
        let seen = Epochs {
            mine: None,
            floor: 0,
            seen: 9,
        };
        assert_eq!(
            decide(&free, "b", &seen, false),
            Decision::Acquire { transitions: 10 }
        );
    }

    #[test]
    fn creating_keeps_a_leaders_epoch_and_never_goes_below_what_was_seen() {
        assert_eq!(Epochs::default().create(), CREATE_TRANSITIONS);
        // The leader recreates its deleted Lease under its own epoch: streams go on.
        assert_eq!(epochs(Some(5), 0).create(), 5);
        assert_eq!(epochs(Some(5), 5).create(), 6);
        let standby = Epochs {
            mine: None,
            floor: 0,
            seen: 5,
        };
        assert_eq!(standby.create(), 6);
    }

    #[test]
    fn expiry_by_local_observation() {
        let start = Instant::now();
        let mut o = Observer::default();
        assert!(o.expired(start, Duration::from_secs(15)));
        o.observe(&rec(Some("b"), 1, "t1"), start);
        assert!(!o.expired(start + Duration::from_secs(14), Duration::from_secs(99)));
        assert!(o.expired(start + Duration::from_secs(15), Duration::from_secs(99)));
        // The holder renewed: the timer restarts from when we saw it.
        o.observe(&rec(Some("b"), 1, "t2"), start + Duration::from_secs(10));
        assert!(!o.expired(start + Duration::from_secs(20), Duration::from_secs(99)));
        // Same record seen again does not restart the timer.
        o.observe(&rec(Some("b"), 1, "t2"), start + Duration::from_secs(24));
        assert!(o.expired(start + Duration::from_secs(25), Duration::from_secs(99)));
    }

    #[test]
    fn millisecond_duration_wins_over_whole_seconds() {
        let start = Instant::now();
        let mut o = Observer::default();
        let mut r = rec(Some("b"), 1, "t1");
        r.duration_secs = Some(2);
        r.duration_ms = Some(1500);
        o.observe(&r, start);
        assert!(!o.expired(start + Duration::from_millis(1499), Duration::from_secs(99)));
        assert!(o.expired(start + Duration::from_millis(1500), Duration::from_secs(99)));
    }
}
