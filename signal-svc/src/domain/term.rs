//! A leader's term, client-go style, free of I/O: time is an argument.
//!
//! The renew deadline counts from the last *successful* renewal (from when it was sent, so
//! the leader's clock starts no later than any standby's observation of that record). Failed
//! or slow renewals in between change nothing; each attempt is bounded by the time left.
//!
//! Three states of one epoch:
//! - **active**: renewed within `renew_deadline`; the leader streams, taints and holds.
//! - **suspended**: past `renew_deadline`: it writes nothing (no deltas, no assignments, no
//!   patches) but keeps its streams open, because the next successful renewal of the same
//!   record (nobody else wrote it) resumes the same epoch without re-versioning anything.
//! - **lost**: past `duration`: a standby may have taken over by now, so the streams close.
//!
//! Safe because a standby acquires only after seeing the record unchanged for `duration` by
//! its own clock, which starts after the record was written, hence after the leader sent it:
//! `renew_deadline < duration` leaves the margin.

use std::time::Duration;
use tokio::time::Instant;

/// Election timings (see the table in the README for how the defaults were chosen).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// How long a record must stay unchanged before a standby takes it.
    pub duration: Duration,
    /// How long a leader keeps writing without a successful renewal.
    pub renew_deadline: Duration,
    /// How often the leader renews (and retries a failed renewal).
    pub renew_interval: Duration,
    /// How often a standby reads the Lease.
    pub retry_interval: Duration,
}

/// Where a term stands at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Standing {
    Active,
    Suspended,
    Lost,
}

/// One epoch of leadership of this process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Term {
    pub epoch: u64,
    /// When the last successful renewal (or the acquisition) was sent.
    pub renewed_sent_at: Instant,
}

impl Term {
    pub fn new(epoch: u64, sent_at: Instant) -> Self {
        Self {
            epoch,
            renewed_sent_at: sent_at,
        }
    }

    /// A renewal sent at `sent_at` succeeded.
    pub fn renewed(&mut self, sent_at: Instant) {
        self.renewed_sent_at = self.renewed_sent_at.max(sent_at);
    }

    pub fn standing(&self, now: Instant, t: &Timings) -> Standing {
        let since = now.saturating_duration_since(self.renewed_sent_at);
        if since >= t.duration {
            Standing::Lost
        } else if since >= t.renew_deadline {
            Standing::Suspended
        } else {
            Standing::Active
        }
    }

    /// How long an attempt started at `now` may take: until the renew deadline while active
    /// (an answer after it is worthless), else until the term is lost.
    pub fn attempt_bound(&self, now: Instant, t: &Timings) -> Duration {
        let end = match self.standing(now, t) {
            Standing::Active => self.renewed_sent_at + t.renew_deadline,
            Standing::Suspended | Standing::Lost => self.renewed_sent_at + t.duration,
        };
        end.saturating_duration_since(now)
            .max(Duration::from_millis(50))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timings() -> Timings {
        Timings {
            duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(3),
            renew_interval: Duration::from_millis(500),
            retry_interval: Duration::from_millis(500),
        }
    }

    #[test]
    fn one_failed_renewal_changes_nothing_the_deadline_counts_from_the_last_success() {
        let t = timings();
        let start = Instant::now();
        let mut term = Term::new(3, start);
        term.renewed(start + Duration::from_millis(500));
        // A renewal sent at 1 s fails; at 3.4 s the leader is still active.
        assert_eq!(
            term.standing(start + Duration::from_millis(3400), &t),
            Standing::Active
        );
        assert_eq!(
            term.attempt_bound(start + Duration::from_millis(3000), &t),
            Duration::from_millis(500)
        );
        assert_eq!(
            term.standing(start + Duration::from_millis(3500), &t),
            Standing::Suspended
        );
        assert_eq!(
            term.standing(start + Duration::from_millis(4500), &t),
            Standing::Lost
        );
    }

    #[test]
    fn a_late_answer_to_an_older_renewal_never_moves_the_clock_back() {
        let start = Instant::now();
        let mut term = Term::new(1, start + Duration::from_secs(2));
        term.renewed(start + Duration::from_secs(1));
        assert_eq!(term.renewed_sent_at, start + Duration::from_secs(2));
    }
}
