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
    /// We hold it and lead: extend it.
    Renew,
    /// Take it, bumping `leaseTransitions` to this value: it becomes our epoch.
    Acquire { transitions: i32 },
    /// Someone else holds a live lease.
    Wait { holder: String },
}

/// Annotation with the Lease duration in milliseconds.
pub const DURATION_MS_ANNOTATION: &str = "cutover.io/lease-duration-ms";

/// `leaseTransitions` for a Lease we create: 1, so epoch 0 is never used (proto default).
pub const CREATE_TRANSITIONS: i32 = 1;

/// Decides given whether the record has expired (see [`Observer`]).
///
/// A Lease held under our own identity while this process does not lead was left by a
/// previous incarnation of us (a restarted pod keeps its name): it is re-acquired with a bumped
/// `leaseTransitions` so versions keep growing across restarts.
pub fn decide(record: &LeaseRecord, me: &str, leading: bool, expired: bool) -> Decision {
    let next = record.transitions.saturating_add(1);
    match record.holder.as_deref() {
        None | Some("") => Decision::Acquire { transitions: next },
        Some(h) if h == me => {
            if leading {
                Decision::Renew
            } else {
                Decision::Acquire { transitions: next }
            }
        }
        Some(_) if expired => Decision::Acquire { transitions: next },
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

    fn rec(holder: Option<&str>, transitions: i32, renew: &str) -> LeaseRecord {
        LeaseRecord {
            holder: holder.map(Into::into),
            transitions,
            duration_secs: Some(15),
            duration_ms: None,
            renew_time: Some(renew.into()),
        }
    }

    #[test]
    fn decisions() {
        let free = rec(None, 3, "t");
        assert_eq!(
            decide(&free, "a", false, false),
            Decision::Acquire { transitions: 4 }
        );
        let empty = rec(Some(""), 3, "t");
        assert_eq!(
            decide(&empty, "a", false, false),
            Decision::Acquire { transitions: 4 }
        );
        let mine = rec(Some("a"), 3, "t");
        assert_eq!(decide(&mine, "a", true, false), Decision::Renew);
        // Restarted under the same name: bump, so the epoch grows.
        assert_eq!(
            decide(&mine, "a", false, false),
            Decision::Acquire { transitions: 4 }
        );
        let theirs = rec(Some("b"), 3, "t");
        assert_eq!(
            decide(&theirs, "a", false, false),
            Decision::Wait { holder: "b".into() }
        );
        assert_eq!(
            decide(&theirs, "a", false, true),
            Decision::Acquire { transitions: 4 }
        );
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
