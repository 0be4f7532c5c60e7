//! Which load balancers this replica writes. Pure: time is passed in.
//!
//! The signal-svc leader assigns each load balancer to one actuator replica (`Assignment` on
//! the desired-state stream) and repeats it as a heartbeat. Fencing:
//! - assignments are ordered by `(leader_epoch, generation)`; an older one is ignored, so a
//!   deposed leader cannot hand out load balancers;
//! - an assignment lapses `valid_for` after this replica sent the `Renew` it echoes (see
//!   [`Renewals`]), by this replica's clock: that instant precedes the leader's send, from
//!   which the leader's fence counts, so a replica that was frozen (SIGSTOP), cut off or slow
//!   to read stops writing by itself before the leader gives its load balancers to another
//!   replica. Time is monotonic and keeps running while a process is stopped.
//! - a `Hello` of a newer epoch ends an older epoch's grant at once.
//! - the end of the stream that carried it does not end an assignment: the leader keeps the
//!   load balancers from everyone else until the lapse anyway, and gives them straight back to
//!   the same replica when it reconnects (a resync, a network blip). Dropping them at the end
//!   of the stream would only leave them without a writer meanwhile.
//!
//! A replica used without signal-svc (`--standalone`) and never assigned writes every managed
//! load balancer. In a fleet a replica writes nothing before its first assignment: a
//! restarted replica has its snapshot before the leader's first assignment reaches it, and
//! writing meanwhile made two writers of one load balancer (the whole-service simulation,
//! seed 545: a restarted actuator behind a slow link repaired an LB another replica held).

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
///
/// Invariant: the replica owns a load balancer only before `anchor + valid_for`, where
/// `anchor` is when this replica sent the `Renew` the grant echoes (or the stream's
/// `HelloAck`). The leader fences from its send of the grant, which follows its receipt of
/// that `Renew`: so this right always ends before the leader gives the load balancer to
/// anyone else, whatever the queues, freezes or partitions in between.
#[derive(Debug, Clone, Default)]
pub struct Ownership {
    current: Option<(Grant, Instant)>,
    /// Used without signal-svc: never assigned means every load balancer is this replica's.
    standalone: bool,
}

impl Ownership {
    /// Takes an assignment (or its heartbeat) anchored at `anchor` (see [`Renewals`]), at
    /// `now`. Returns whether the set of owned load balancers changed.
    ///
    /// A heartbeat (same epoch and generation) extends the right to its own anchor: one that
    /// echoes a fresh `Renew` renews even a lapsed grant (a slow consumer, a leader that
    /// paused), while heartbeats that queued up while this replica was frozen echo old
    /// renewals and give nothing.
    /// An unknown anchor (`None`: an echo this stream no longer remembers) orders the grant
    /// but owns nothing.
    pub fn accept(
        &mut self,
        grant: Grant,
        anchor: Option<Instant>,
        now: Instant,
    ) -> Result<bool, Refused> {
        let before = self.owned(now);
        let until = anchor.map_or(now, |at| at + grant.valid_for);
        if let Some((have, have_until)) = &mut self.current {
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
            if new == old {
                *have_until = (*have_until).max(until);
                return Ok(self.owned(now) != before);
            }
        }
        self.current = Some((grant, until));
        Ok(self.owned(now) != before)
    }

    /// A leader of `epoch` opened a stream: a grant of an older epoch ends now. Its leader
    /// has lost the Lease, and the new one may hand the load balancers out at once. Returns
    /// whether the owned set changed.
    pub fn retire_before(&mut self, epoch: u64, now: Instant) -> bool {
        let before = self.owned(now);
        if let Some((g, until)) = &mut self.current
            && g.epoch < epoch
        {
            *until = (*until).min(now);
        }
        self.owned(now) != before
    }

    /// True once any assignment was accepted (the replica is part of a managed fleet).
    pub fn assigned(&self) -> bool {
        self.current.is_some()
    }

    /// Without signal-svc (see the module doc).
    pub fn set_standalone(&mut self, standalone: bool) {
        self.standalone = standalone;
    }

    /// Whether this replica may write `lb` at `now`.
    pub fn owns(&self, lb: &str, now: Instant) -> bool {
        match &self.current {
            None => self.standalone,
            Some((g, until)) => now < *until && g.lbs.contains(lb),
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
        self.current.as_ref().map(|(g, until)| {
            if now < *until {
                g.lbs.clone()
            } else {
                BTreeSet::new()
            }
        })
    }

    /// When the current assignment lapses without a heartbeat.
    pub fn expires_at(&self) -> Option<Instant> {
        self.current.as_ref().map(|(_, until)| *until)
    }

    /// The accepted `(epoch, generation)`, if any.
    pub fn version(&self) -> Option<(u64, u64)> {
        self.current.as_ref().map(|(g, _)| (g.epoch, g.generation))
    }
}

/// The `Renew`s one stream sent up, to anchor the assignments that echo them.
#[derive(Debug, Clone)]
pub struct Renewals {
    /// When the stream's `HelloAck` was sent: the anchor of `echo = 0`.
    opened: Instant,
    next: u64,
    /// The newest renewals, oldest first; an echo older than these anchors nothing.
    sent: std::collections::VecDeque<(u64, Instant)>,
}

/// Renewals remembered per stream: the leader echoes the newest it read, so only a leader
/// that lags by this many heartbeats finds its echo forgotten (and its grant lapsed).
const RENEWALS_KEPT: usize = 16;

impl Renewals {
    /// A stream whose `HelloAck` is about to be sent at `opened`.
    pub fn new(opened: Instant) -> Self {
        Self {
            opened,
            next: 1,
            sent: std::collections::VecDeque::with_capacity(RENEWALS_KEPT),
        }
    }

    /// The next `Renew.seq`, recorded as sent at `now` (call just before sending it: an
    /// anchor taken before the send can only be early, never late).
    pub fn renew(&mut self, now: Instant) -> u64 {
        let seq = self.next;
        self.next += 1;
        if self.sent.len() == RENEWALS_KEPT {
            self.sent.pop_front();
        }
        self.sent.push_back((seq, now));
        seq
    }

    /// The anchor of an assignment echoing `echo`; `None` for an echo this stream never sent
    /// or no longer remembers (such a grant is taken for its order, and owns nothing).
    pub fn anchor(&self, echo: u64) -> Option<Instant> {
        if echo == 0 {
            return Some(self.opened);
        }
        self.sent
            .iter()
            .find(|(s, _)| *s == echo)
            .map(|(_, at)| *at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VALID: Duration = Duration::from_secs(3);

    fn grant(epoch: u64, generation: u64, lbs: &[&str]) -> Grant {
        Grant {
            epoch,
            generation,
            lbs: lbs.iter().map(|s| s.to_string()).collect(),
            valid_for: VALID,
        }
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn without_assignment_a_standalone_replica_owns_every_lb_and_a_fleet_replica_none() {
        let mut o = Ownership::default();
        // A fleet replica (dst seed 545): its snapshot comes before its first assignment.
        assert!(!o.owns("kubernetes", Instant::now()));
        o.set_standalone(true);
        assert!(o.owns("kubernetes", Instant::now()));
        assert!(!o.assigned());
        // An assignment rules either way.
        o.accept(grant(1, 1, &["a"]), Some(Instant::now()), Instant::now())
            .unwrap();
        assert!(o.owns("a", Instant::now()) && !o.owns("kubernetes", Instant::now()));
    }

    #[test]
    fn only_assigned_lbs_are_owned_until_valid_for_after_the_echoed_renewal() {
        let t0 = Instant::now();
        let mut r = Renewals::new(t0);
        let mut o = Ownership::default();
        // The first grant echoes nothing: it counts from the HelloAck, not from its receipt.
        assert_eq!(
            o.accept(grant(1, 1, &["a"]), r.anchor(0), t0 + ms(500)),
            Ok(true)
        );
        assert!(o.owns("a", t0 + ms(2900)) && !o.owns("b", t0));
        assert!(!o.owns("a", t0 + VALID));
        let seq = r.renew(t0 + ms(500));
        // The heartbeat echoing it extends the right to 0.5 s + valid_for.
        let t1 = t0 + ms(1500);
        assert_eq!(o.accept(grant(1, 1, &["a"]), r.anchor(seq), t1), Ok(false));
        assert_eq!(o.expires_at(), Some(t0 + ms(500) + VALID));
        // A heartbeat echoing an older renewal never shortens it.
        o.accept(grant(1, 1, &["a"]), r.anchor(0), t1).unwrap();
        assert_eq!(o.expires_at(), Some(t0 + ms(500) + VALID));
    }

    /// N6: the actuator counted validity from receipt, the leader its fence from its send.
    /// A replica frozen with heartbeats queued read them on waking and owned its load
    /// balancers again for a whole `valid_for`, while the leader had already handed them to
    /// another replica: two writers.
    #[test]
    fn heartbeats_read_after_a_freeze_give_nothing() {
        let t0 = Instant::now();
        let mut r = Renewals::new(t0);
        let mut o = Ownership::default();
        o.accept(grant(1, 1, &["a"]), r.anchor(0), t0).unwrap();
        let seq = r.renew(t0);
        // Frozen from 0.1 s to 10 s; the leader sent heartbeats echoing `seq` meanwhile.
        let woke = t0 + Duration::from_secs(10);
        for _ in 0..5 {
            o.accept(grant(1, 1, &["a"]), r.anchor(seq), woke).unwrap();
        }
        assert!(
            !o.owns("a", woke),
            "the queued heartbeats are as old as their echo"
        );
        // A newer generation echoing the same old renewal gives nothing either.
        o.accept(grant(1, 2, &["a"]), r.anchor(seq), woke).unwrap();
        assert!(!o.owns("a", woke));
    }

    /// N2: a grant that lapsed while its stream lived (a slow consumer, a leader paused past
    /// its renew deadline) was never renewed: heartbeats of the same generation were ignored
    /// after a lapse, and the leader bumps the generation only when its plan changes.
    #[test]
    fn a_heartbeat_echoing_a_fresh_renewal_renews_a_lapsed_grant() {
        let t0 = Instant::now();
        let mut r = Renewals::new(t0);
        let mut o = Ownership::default();
        o.accept(grant(3, 7, &["a"]), r.anchor(0), t0).unwrap();
        let lapsed = t0 + Duration::from_secs(5);
        assert!(!o.owns("a", lapsed));
        let seq = r.renew(lapsed);
        let later = lapsed + ms(300);
        assert_eq!(
            o.accept(grant(3, 7, &["a"]), r.anchor(seq), later),
            Ok(true)
        );
        assert!(o.owns("a", later));
    }

    #[test]
    fn an_echo_the_stream_never_sent_or_forgot_owns_nothing() {
        let t0 = Instant::now();
        let mut r = Renewals::new(t0);
        assert_eq!(r.anchor(1), None);
        for i in 0..(RENEWALS_KEPT as u64 + 1) {
            r.renew(t0 + ms(i));
        }
        assert_eq!(r.anchor(1), None, "forgotten");
        assert!(r.anchor(RENEWALS_KEPT as u64 + 1).is_some());
        let mut o = Ownership::default();
        o.accept(grant(1, 1, &["a"]), None, t0).unwrap();
        assert!(o.assigned() && !o.owns("a", t0));
    }

    #[test]
    fn older_assignments_are_fenced_off() {
        let t0 = Instant::now();
        let mut o = Ownership::default();
        o.accept(grant(2, 5, &["a"]), Some(t0), t0).unwrap();
        assert!(o.accept(grant(2, 4, &["a", "b"]), Some(t0), t0).is_err());
        assert!(o.accept(grant(1, 9, &["b"]), Some(t0), t0).is_err());
        assert!(!o.owns("b", t0));
        // A new epoch starts its generations again.
        assert_eq!(o.accept(grant(3, 1, &["b"]), Some(t0), t0), Ok(true));
        assert!(o.owns("b", t0) && !o.owns("a", t0));
    }

    /// N6: a newer leader's `Hello` ends the grant of an older epoch at once: its leader lost
    /// the Lease and the new one may give the load balancers to another replica.
    #[test]
    fn a_newer_epoch_ends_older_grants() {
        let t0 = Instant::now();
        let mut o = Ownership::default();
        o.accept(grant(4, 2, &["a"]), Some(t0), t0).unwrap();
        assert!(!o.retire_before(4, t0), "the same epoch keeps it");
        assert!(o.owns("a", t0));
        assert!(o.retire_before(5, t0 + ms(10)));
        assert!(!o.owns("a", t0 + ms(10)));
        assert!(
            o.assigned(),
            "still part of a managed fleet: it does not write everything"
        );
    }
}
