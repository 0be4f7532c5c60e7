//! A leader's term, client-go style, free of I/O: time is an argument.
//!
//! The renew deadline counts from the last *successful* renewal (from when it was sent, so
//! the leader's clock starts no later than any standby's observation of that record). Failed
//! or slow renewals in between change nothing. A renewal is never cut short at the deadline:
//! one sent at `s` that succeeds renews the term as of `s`, whenever its answer comes, so at
//! an API latency near the deadline waiting for it keeps the term where a timeout and a
//! resend would lose it. The caller suspends and drops writes on time while it waits
//! ([`Term::next_change`]).
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

    /// When the standing changes next (the renew deadline, then the lease's end), if it
    /// still does.
    pub fn next_change(&self, now: Instant, t: &Timings) -> Option<Instant> {
        [
            self.renewed_sent_at + t.renew_deadline,
            self.renewed_sent_at + t.duration,
        ]
        .into_iter()
        .find(|at| *at > now)
    }
}

impl Timings {
    /// How long one Lease attempt may take, from its own send: a renewal answered within
    /// the renew deadline of its send still leaves the term active; one that takes longer
    /// is given up and sent again (a request that hangs must not end the term).
    pub fn attempt_bound(&self) -> Duration {
        self.renew_deadline
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
            term.next_change(start + Duration::from_millis(3000), &t),
            Some(start + Duration::from_millis(3500))
        );
        assert_eq!(
            term.next_change(start + Duration::from_millis(3500), &t),
            Some(start + Duration::from_millis(4500))
        );
        assert_eq!(
            term.next_change(start + Duration::from_millis(4500), &t),
            None
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

    /// At 1.6 s per API call a renewal sent 1.6 s after the last success answers 0.2 s past
    /// that success's deadline: it must still count (a bound at the deadline lost the term
    /// at every latency above half the deadline).
    #[test]
    fn a_renewal_answered_after_the_previous_deadline_still_renews_from_its_send() {
        let t = timings();
        let start = Instant::now();
        let mut term = Term::new(7, start);
        let sent = start + Duration::from_millis(1600);
        assert!(t.attempt_bound() >= Duration::from_millis(1600));
        let answered = sent + Duration::from_millis(1600);
        assert_eq!(term.standing(answered, &t), Standing::Suspended);
        term.renewed(sent);
        assert_eq!(term.standing(answered, &t), Standing::Active);
    }

    #[test]
    fn a_late_answer_to_an_older_renewal_never_moves_the_clock_back() {
        let start = Instant::now();
        let mut term = Term::new(1, start + Duration::from_secs(2));
        term.renewed(start + Duration::from_secs(1));
        assert_eq!(term.renewed_sent_at, start + Duration::from_secs(2));
    }
}
